/* SPDX-License-Identifier: Apache-2.0 */
/* Builds tests/unit/cuda_fake/libcuda_fake.c into a shared library and
 * points VRAM_LIBCUDA at it, so that the CUDA backend's two halves run
 * against a fake driver on machines without a GPU. The case is skipped
 * when no C compiler or no source tree is at hand. Used by
 * daemon_cuda_test.c and client_cuda_test.c.
 */
#ifndef VRAM_TEST_CUDA_FAKE_H
#define VRAM_TEST_CUDA_FAKE_H

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/harness.h"
#include "test.h"

#define CUDA_FAKE_SRC "tests/unit/cuda_fake/libcuda_fake.c"

static int (*fake_count)(const char *what);
static void (*fake_fail)(const char *fn, int code);
static void (*fake_fail_after)(const char *fn, int code, int skip);

/* Compiles the fake (with $CC, default cc) into DIR/libcuda.so.1 under a
 * new temporary directory, whose path goes to so (cap bytes). Skips the
 * case when the source or a compiler is missing. The caller removes the
 * file and its directory with cuda_fake_remove(). */
static inline void cuda_fake_build(char *so, size_t cap)
{
	char dir[] = "/tmp/vram-fake-cuda-XXXXXX";
	char out[4096];
	const char *cc = getenv("CC");

	if (access(CUDA_FAKE_SRC, R_OK) != 0)
		SKIP("%s not found (run from the source tree)", CUDA_FAKE_SRC);
	if (!mkdtemp(dir))
		TEST_FAIL("mkdtemp: %s", strerror(errno));
	snprintf(so, cap, "%s/libcuda.so.1", dir);
	const char *const argv[] = {
		cc && *cc ? cc : "cc", "-shared",   "-fPIC", "-O1", "-o", so,
		CUDA_FAKE_SRC,	       "-lpthread", NULL
	};
	int st = harness_run_capture(argv, out, sizeof(out));
	if (st != 0) {
		rmdir(dir);
		SKIP("cannot build the fake driver (status %d)", st);
	}
}

/* Removes what cuda_fake_build() made. */
static inline void cuda_fake_remove(const char *so)
{
	char dir[256];
	char *slash;

	snprintf(dir, sizeof(dir), "%s", so);
	slash = strrchr(dir, '/');
	unlink(so);
	if (slash) {
		*slash = 0;
		rmdir(dir);
	}
}

/* The copy of the fake this process loaded, for cuda_fake_load_shared(). */
static char cuda_fake_so[64];

static void cuda_fake_remove_shared(void)
{
	cuda_fake_remove(cuda_fake_so);
}

/* Builds the fake into cuda_fake_so, loads it and sets VRAM_LIBCUDA so the
 * code under test loads the same copy. */
static void cuda_fake_build_and_load(void)
{
	void *lib;

	cuda_fake_build(cuda_fake_so, sizeof(cuda_fake_so));
	setenv("VRAM_LIBCUDA", cuda_fake_so, 1);
	unsetenv("FAKE_CUDA_CAPACITY_MB"); /* the unit tests expect 1 GiB */
	lib = dlopen(cuda_fake_so, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		cuda_fake_remove(cuda_fake_so);
		TEST_FAIL("dlopen %s: %s", getenv("VRAM_LIBCUDA"), dlerror());
	}
	fake_count = (int (*)(const char *))dlsym(lib, "fake_count");
	fake_fail = (void (*)(const char *, int))dlsym(lib, "fake_fail");
	fake_fail_after =
		(void (*)(const char *, int, int))dlsym(lib, "fake_fail_after");
	ASSERT(fake_count && fake_fail && fake_fail_after);
}

/* Builds and loads the fake for this process only. The file is removed at
 * once: the loaded library stays. */
static inline void cuda_fake_load(void)
{
	cuda_fake_build_and_load();
	cuda_fake_remove(cuda_fake_so);
}

/* As cuda_fake_load(), but the file stays until this process exits, so
 * that a vramd started meanwhile (which inherits VRAM_LIBCUDA) loads the
 * same fake. Each process has its own counters. */
static inline void cuda_fake_load_shared(void)
{
	cuda_fake_build_and_load();
	atexit(cuda_fake_remove_shared);
}

#endif
