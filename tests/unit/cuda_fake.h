/* Builds tests/unit/cuda_fake/libcuda_fake.c into a shared library and
 * points VRAM_LIBCUDA at it, so that the CUDA backend's two halves run
 * against a fake driver on machines without a GPU. The case is skipped
 * when no C compiler or no source tree is at hand. Used by
 * daemon_cuda_test.c and client_cuda_test.c.
 */
#ifndef VRAM_TEST_CUDA_FAKE_H
#define VRAM_TEST_CUDA_FAKE_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/harness.h"
#include "test.h"

#define CUDA_FAKE_SRC "tests/unit/cuda_fake/libcuda_fake.c"

static int (*fake_count)(const char *what);
static void (*fake_fail)(const char *fn, int code);

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
	snprintf(dir, sizeof(dir), "%s", so);
	char *slash = strrchr(dir, '/');
	unlink(so);
	if (slash) {
		*slash = 0;
		rmdir(dir);
	}
}

/* Builds the fake, loads it and sets VRAM_LIBCUDA so the code under test
 * loads the same copy. The file is removed at once: the loaded library
 * stays. */
static inline void cuda_fake_load(void)
{
	char so[64];
	void *lib;

	cuda_fake_build(so, sizeof(so));
	setenv("VRAM_LIBCUDA", so, 1);
	unsetenv("FAKE_CUDA_CAPACITY_MB"); /* the unit tests expect 1 GiB */
	lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
	cuda_fake_remove(so);
	if (!lib)
		TEST_FAIL("dlopen %s: %s", so, dlerror());
	fake_count = (int (*)(const char *))dlsym(lib, "fake_count");
	fake_fail = (void (*)(const char *, int))dlsym(lib, "fake_fail");
	ASSERT(fake_count && fake_fail);
}

#endif
