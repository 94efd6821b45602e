/* SPDX-License-Identifier: Apache-2.0 */
/* The program tests/integration/preload_test.c runs under
 * LD_PRELOAD=libvram-preload.so: a CUDA "application" linked against the
 * fake runtime (tests/unit/cudart_fake), driven line by line on stdin. It
 * answers each command with one line on stdout:
 *
 *   malloc SIZE | malloc_async SIZE | hip_malloc SIZE
 *                                       -> "ptr 0xADDR" or "err CODE"
 *   free PTR | free_async PTR | hip_free PTR -> "rc CODE"
 *   fill PTR SIZE SEED | check PTR SIZE SEED -> "rc 0" (check: 0 same, 1 not)
 *   region TAG BACKUP | region_exit | disable | disable_exit -> "rc R"
 *   device N | capture 0|1              -> "rc R"
 *   owns PTR                            -> "rc 0|1"
 *   fork_malloc SIZE  -> "rc STATUS": a forked child's cudaMalloc is in a
 *              pool of its own (status 0), 1 if not, 2 if it failed
 *   stats  -> "stats POOLS CAPTURED_BYTES CAPTURED_COUNT GRAPH_BYTES
 *              OUTSIDE_BYTES OUTSIDE_COUNT FAILED"
 *   fake   -> "fake LIVE MALLOCS FREES BAD_FREES NULL_FREES DEVICE_SYNCS
 *              STREAM_SYNCS"
 *   quit   -> exits 0 with whatever is still allocated
 *
 * The preload library's entry points are looked up with dlsym, as a
 * program that also runs without the library does; "rc -38" (-ENOSYS)
 * when they are missing. */
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vram_preload.h"

struct cudart_fake_counters {
	int live, mallocs, frees, bad_frees, null_frees, device_syncs,
		stream_syncs;
};

int cudaMalloc(void **ptr, size_t size);
int cudaFree(void *ptr);
int cudaMallocAsync(void **ptr, size_t size, void *stream);
int cudaFreeAsync(void *ptr, void *stream);
int cudaSetDevice(int dev);
int hipMalloc(void **ptr, size_t size);
int hipFree(void *ptr);
void cudart_fake_counters(struct cudart_fake_counters *out);
void cudart_fake_set_capturing(int on);

static void *sym(const char *name)
{
	return dlsym(RTLD_DEFAULT, name);
}

/* The byte stream of integ.h's integ_fill, so both sides agree. */
static int pattern(uint32_t *w, size_t len, uint32_t seed, int check)
{
	uint32_t x = seed ? seed : 1;

	for (size_t i = 0; i < len / 4; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		if (!check)
			w[i] = x;
		else if (w[i] != x)
			return 1;
	}
	return 0;
}

/* In a forked child: allocates size bytes and checks that the memory is
 * the library's, in the one pool the child made (the parent's session is
 * not the child's). The child's exit status is the answer. */
static int fork_malloc(size_t size)
{
	int (*owns)(const void *) =
		(int (*)(const void *))sym("vram_preload_owns");
	int (*stats)(struct vram_preload_stats *) =
		(int (*)(struct vram_preload_stats *))sym("vram_preload_stats");
	struct vram_preload_stats st = { .size = sizeof(st) };
	int status;
	void *p = NULL;
	pid_t pid;

	if (!owns || !stats)
		return -ENOSYS;
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		if (cudaMalloc(&p, size) != 0)
			_exit(2);
		if (!owns(p) || stats(&st) < 0 || st.pools != 1 ||
		    st.captured_count != 1)
			_exit(1);
		_exit(cudaFree(p) == 0 ? 0 : 1);
	}
	if (waitpid(pid, &status, 0) < 0)
		return -errno;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static int call0(const char *name)
{
	int (*fn)(void) = (int (*)(void))sym(name);

	return fn ? fn() : -ENOSYS;
}

int main(void)
{
	char line[512], cmd[32], a1[128];
	unsigned long long a2, a3;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while (fgets(line, sizeof(line), stdin)) {
		void *p = NULL;
		int r, n;

		a1[0] = '\0';
		a2 = a3 = 0;
		n = sscanf(line, "%31s %127s %llu %llu", cmd, a1, &a2, &a3);
		if (n < 1)
			continue;
		void *arg = (void *)(uintptr_t)strtoull(a1, NULL, 0);
		if (!strcmp(cmd, "malloc") || !strcmp(cmd, "malloc_async") ||
		    !strcmp(cmd, "hip_malloc")) {
			size_t size = strtoull(a1, NULL, 0);
			if (cmd[0] == 'h')
				r = hipMalloc(&p, size);
			else if (cmd[6])
				r = cudaMallocAsync(&p, size, NULL);
			else
				r = cudaMalloc(&p, size);
			if (r == 0)
				printf("ptr %p\n", p);
			else
				printf("err %d\n", r);
		} else if (!strcmp(cmd, "free")) {
			printf("rc %d\n", cudaFree(arg));
		} else if (!strcmp(cmd, "hip_free")) {
			printf("rc %d\n", hipFree(arg));
		} else if (!strcmp(cmd, "free_async")) {
			printf("rc %d\n", cudaFreeAsync(arg, NULL));
		} else if (!strcmp(cmd, "fill") || !strcmp(cmd, "check")) {
			printf("rc %d\n",
			       pattern(arg, a2, (uint32_t)a3, cmd[0] == 'c'));
		} else if (!strcmp(cmd, "region")) {
			int (*fn)(const char *, int) =
				(int (*)(const char *, int))sym(
					"vram_preload_region_enter");
			printf("rc %d\n", fn ? fn(a1, (int)a2) : -ENOSYS);
		} else if (!strcmp(cmd, "region_exit")) {
			printf("rc %d\n", call0("vram_preload_region_exit"));
		} else if (!strcmp(cmd, "disable")) {
			printf("rc %d\n", call0("vram_preload_disable_enter"));
		} else if (!strcmp(cmd, "disable_exit")) {
			printf("rc %d\n", call0("vram_preload_disable_exit"));
		} else if (!strcmp(cmd, "device")) {
			printf("rc %d\n", cudaSetDevice(atoi(a1)));
		} else if (!strcmp(cmd, "capture")) {
			cudart_fake_set_capturing(atoi(a1));
			printf("rc 0\n");
		} else if (!strcmp(cmd, "owns")) {
			int (*fn)(const void *) =
				(int (*)(const void *))sym("vram_preload_owns");
			printf("rc %d\n", fn ? fn(arg) : -ENOSYS);
		} else if (!strcmp(cmd, "fork_malloc")) {
			printf("rc %d\n", fork_malloc(strtoull(a1, NULL, 0)));
		} else if (!strcmp(cmd, "stats")) {
			int (*fn)(struct vram_preload_stats *) =
				(int (*)(struct vram_preload_stats *))sym(
					"vram_preload_stats");
			struct vram_preload_stats st = { .size = sizeof(st) };
			r = fn ? fn(&st) : -ENOSYS;
			printf("stats %d %u %llu %llu %llu %llu %llu %llu\n", r,
			       st.pools, (unsigned long long)st.captured_bytes,
			       (unsigned long long)st.captured_count,
			       (unsigned long long)st.graph_bytes,
			       (unsigned long long)st.outside_bytes,
			       (unsigned long long)st.outside_count,
			       (unsigned long long)st.failed);
		} else if (!strcmp(cmd, "fake")) {
			struct cudart_fake_counters c;
			cudart_fake_counters(&c);
			printf("fake %d %d %d %d %d %d %d\n", c.live, c.mallocs,
			       c.frees, c.bad_frees, c.null_frees,
			       c.device_syncs, c.stream_syncs);
		} else if (!strcmp(cmd, "quit")) {
			return 0;
		} else {
			printf("unknown %s\n", cmd);
		}
	}
	return 0;
}
