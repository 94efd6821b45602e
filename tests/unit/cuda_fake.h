/* Builds tests/unit/cuda_fake/libcuda_fake.c into a shared library and
 * points VRAM_LIBCUDA at it, so that the CUDA backend's two halves run
 * against a fake driver on machines without a GPU. The case is skipped
 * when no C compiler or no source tree is at hand. Used by
 * daemon_cuda_test.c and client_cuda_test.c.
 */
#ifndef VRAM_TEST_CUDA_FAKE_H
#define VRAM_TEST_CUDA_FAKE_H

#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include "harness/harness.h"
#include "test.h"

#define CUDA_FAKE_SRC "tests/unit/cuda_fake/libcuda_fake.c"

static int (*fake_count)(const char *what);
static void (*fake_fail)(const char *fn, int code);

static char cuda_fake_so[64];

static void cuda_fake_remove(void)
{
	char *slash = strrchr(cuda_fake_so, '/');

	if (!slash)
		return;
	unlink(cuda_fake_so);
	*slash = '\0';
	rmdir(cuda_fake_so);
	cuda_fake_so[0] = '\0';
}

/* Compiles the fake (with $CC, default cc) into a fresh directory, loads
 * it and sets VRAM_LIBCUDA so the code under test loads the same copy. */
static void cuda_fake_build_and_load(void)
{
	char dir[] = "/tmp/vram-fake-cuda-XXXXXX";
	char out[4096];
	const char *cc = getenv("CC");
	void *lib;

	if (access(CUDA_FAKE_SRC, R_OK) != 0)
		SKIP("%s not found (run from the source tree)", CUDA_FAKE_SRC);
	if (!mkdtemp(dir))
		TEST_FAIL("mkdtemp: %s", strerror(errno));
	snprintf(cuda_fake_so, sizeof(cuda_fake_so), "%s/libcuda.so.1", dir);
	const char *const argv[] = {
		cc && *cc ? cc : "cc", "-shared",   "-fPIC", "-O1", "-o",
		cuda_fake_so,	       CUDA_FAKE_SRC, "-lpthread", NULL
	};
	int st = harness_run_capture(argv, out, sizeof(out));
	if (st != 0) {
		rmdir(dir);
		SKIP("cannot build the fake driver (status %d)", st);
	}
	setenv("VRAM_LIBCUDA", cuda_fake_so, 1);
	unsetenv("FAKE_CUDA_CAPACITY_MB"); /* the unit tests expect 1 GiB */
	lib = dlopen(cuda_fake_so, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		cuda_fake_remove();
		TEST_FAIL("dlopen %s: %s", getenv("VRAM_LIBCUDA"), dlerror());
	}
	fake_count = (int (*)(const char *))dlsym(lib, "fake_count");
	fake_fail = (void (*)(const char *, int))dlsym(lib, "fake_fail");
	ASSERT(fake_count && fake_fail);
}

/* Builds and loads the fake for this process only. The file is removed at
 * once: the loaded library stays. */
static inline void cuda_fake_load(void)
{
	cuda_fake_build_and_load();
	cuda_fake_remove();
}

/* As cuda_fake_load(), but the file stays until this process exits, so
 * that a vramd started meanwhile (which inherits VRAM_LIBCUDA) loads the
 * same fake. Each process has its own counters. */
static inline void cuda_fake_load_shared(void)
{
	cuda_fake_build_and_load();
	atexit(cuda_fake_remove);
}

#endif
