/* SPDX-License-Identifier: Apache-2.0 */
/* Shared by the GPU benchmarks (bench/gpu_raw.c, bench/gpu_vramd.c): the
 * CUDA driver loaded with dlopen, timing, command-line sizes, the "hog"
 * that uses the device between a pause and a resume, backup memory made
 * the way vramd makes it, and the CSV every figure goes to.
 *
 * CSV, one figure a line:
 *   bench,policy,layout,size_bytes,chunks,metric,cycle,value
 * bench is "raw" or "vramd"; metrics ending in _ms are milliseconds, in
 * _gbps gigabytes (1e9 bytes) per second; cycle 0 means "not a cycle".
 * bench/plot.py reads it.
 */
#ifndef VRAM_GPU_BENCH_H
#define VRAM_GPU_BENCH_H

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cuda_driver.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)
#define BENCH_SKIP 77
#define BENCH_MAX_SIZES 16

static struct cuda_driver B;
static CUdevice bench_dev;
static CUcontext bench_ctx;
static FILE *bench_csv;

#define CU_CHECK(call)                                                         \
	do {                                                                   \
		CUresult r_ = (call);                                          \
		if (r_ != CUDA_SUCCESS) {                                      \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, \
				#call, cuda_strerror(&B, r_));                 \
			exit(1);                                               \
		}                                                              \
	} while (0)

static inline double bench_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static inline void bench_die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* Loads the driver and makes device 0's primary context current; exits 77
 * with a message when there is no driver or device. */
static inline void bench_gpu_init(void)
{
	char why[256];
	int n = 0;

	if (cuda_driver_load(&B, why, sizeof(why)) < 0) {
		fprintf(stderr, "no CUDA driver here (%s): skipped\n", why);
		exit(BENCH_SKIP);
	}
	if (B.cuInit(0) != CUDA_SUCCESS ||
	    B.cuDeviceGetCount(&n) != CUDA_SUCCESS || n == 0) {
		fprintf(stderr, "no CUDA device here: skipped\n");
		exit(BENCH_SKIP);
	}
	CU_CHECK(B.cuDeviceGet(&bench_dev, 0));
	CU_CHECK(B.cuDevicePrimaryCtxRetain(&bench_ctx, bench_dev));
	CU_CHECK(B.cuCtxSetCurrent(bench_ctx));
}

static inline uint64_t bench_free(void)
{
	size_t f = 0, t = 0;
	CU_CHECK(B.cuMemGetInfo(&f, &t));
	return f;
}

/* "1G", "512M", "64" (GiB when no suffix). */
static inline uint64_t bench_parse_size(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	switch (*end) {
	case 'M':
	case 'm':
		return (uint64_t)(v * MiB);
	case 'K':
	case 'k':
		return (uint64_t)(v * 1024);
	default:
		return (uint64_t)(v * GiB);
	}
}

/* "512 MiB", "16 GiB": a size for tables (static buffer, two in turn). */
static inline const char *bench_size_str(uint64_t size)
{
	static char buf[2][32];
	static int k;
	k ^= 1;
	if (size < GiB)
		snprintf(buf[k], sizeof(buf[k]), "%llu MiB",
			 (unsigned long long)(size / MiB));
	else
		snprintf(buf[k], sizeof(buf[k]), "%.4g GiB",
			 (double)size / GiB);
	return buf[k];
}

/* A comma-separated list of sizes; returns how many. */
static inline int bench_parse_sizes(const char *s, uint64_t *out)
{
	char buf[256];
	int n = 0;
	snprintf(buf, sizeof(buf), "%s", s);
	for (char *t = strtok(buf, ","); t && n < BENCH_MAX_SIZES;
	     t = strtok(NULL, ","))
		out[n++] = bench_parse_size(t);
	return n;
}

/* Whether the comma-separated list holds word. */
static inline int bench_has(const char *list, const char *word)
{
	char buf[128];
	snprintf(buf, sizeof(buf), "%s", list);
	for (char *t = strtok(buf, ","); t; t = strtok(NULL, ","))
		if (strcmp(t, word) == 0)
			return 1;
	return 0;
}

static inline void bench_csv_open(const char *path)
{
	if (!path)
		return;
	int fresh = access(path, F_OK) != 0;
	bench_csv = fopen(path, "a");
	if (!bench_csv)
		bench_die("cannot write %s: %s", path, strerror(errno));
	if (fresh)
		fprintf(bench_csv,
			"bench,policy,layout,size_bytes,chunks,metric,cycle,value\n");
}

static inline void bench_record(const char *bench, const char *policy,
				const char *layout, uint64_t size,
				unsigned chunks, const char *metric, int cycle,
				double value)
{
	if (bench_csv) {
		fprintf(bench_csv, "%s,%s,%s,%llu,%u,%s,%d,%.4f\n", bench,
			policy, layout, (unsigned long long)size, chunks,
			metric, cycle, value);
		fflush(bench_csv);
	}
}

static inline double bench_gbps(uint64_t bytes, double ms)
{
	return ms > 0 ? (double)bytes / 1e6 / ms : 0;
}

static inline int bench_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Median of n figures (n small). */
static inline double bench_median(const double *v, int n)
{
	double s[64];
	if (n <= 0)
		return 0;
	if (n > 64)
		n = 64;
	memcpy(s, v, (size_t)n * sizeof(*s));
	qsort(s, (size_t)n, sizeof(*s), bench_cmp);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/* Keeps the device writing [base, base + bytes) for ms, one memset at a
 * time, as an engine runs between a wake and its next sleep: work, not
 * sleep, since an idle H200 is slower at everything. */
static inline void bench_device_run(CUdeviceptr base, uint64_t bytes,
				    unsigned ms)
{
	for (double end = bench_now_ms() + ms; bench_now_ms() < end;) {
		CU_CHECK(B.cuMemsetD32(base, 0x600d600d, bytes / 4));
		CU_CHECK(B.cuCtxSynchronize());
	}
}

/* Host memory as vramd makes a backup: a memfd mapped shared, touched
 * once; the caller registers it. */
static inline void *bench_backup_map(uint64_t size)
{
	int fd = memfd_create("bench-backup", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)size) < 0)
		bench_die("backup memfd of %llu bytes: %s",
			  (unsigned long long)size, strerror(errno));
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_POPULATE, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		bench_die("mapping the backup: %s", strerror(errno));
	return p;
}

/* Host memory the benchmarks may use: MemAvailable in bytes. */
static inline uint64_t bench_mem_available(void)
{
	char line[256];
	unsigned long long kb = 0;
	FILE *f = fopen("/proc/meminfo", "re");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb * 1024;
}

/* Says why a pool of size does not fit this run (device memory for it, a
 * hog's context and ours; host memory for a backup, a pinned buffer and a
 * copy) and returns 1, or returns 0 when it fits. */
static inline int bench_skip(const char *policy, uint64_t size,
			     uint64_t host_max)
{
	if (size + 3 * GiB > bench_free()) {
		printf("%-7s %s: skipped (%.1f GiB free)\n", policy,
		       bench_size_str(size), (double)bench_free() / GiB);
		return 1;
	}
	if (strcmp(policy, "host") == 0 &&
	    (size > host_max || 3 * size > bench_mem_available())) {
		printf("host    %s: skipped (host memory; --host-max)\n",
		       bench_size_str(size));
		return 1;
	}
	return 0;
}

/* ---- the hog: another process that uses the memory in a gap -------------- */

/* Run as "PROGRAM --hog BYTES": allocates BYTES in pieces of at most 1 GiB
 * (less if the device runs out), writes all of it, frees it and exits. */
static inline int bench_hog_main(uint64_t bytes)
{
	CUdeviceptr p[1024];
	int n = 0;
	uint64_t done = 0;

	bench_gpu_init();
	while (done < bytes && n < 1024) {
		uint64_t len = bytes - done < GiB ? bytes - done : GiB;
		if (B.cuMemAlloc(&p[n], len) != CUDA_SUCCESS)
			break;
		CU_CHECK(B.cuMemsetD32(p[n], 0xdeadbeef, len / 4));
		done += len;
		n++;
	}
	CU_CHECK(B.cuCtxSynchronize());
	for (int i = 0; i < n; i++)
		CU_CHECK(B.cuMemFree(p[i]));
	return 0;
}

/* Runs the hog in a new process (this program, exec'd) and waits for it. */
static inline void bench_hog_run(uint64_t bytes)
{
	char exe[512], arg[32];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		bench_die("readlink /proc/self/exe: %s", strerror(errno));
	exe[n] = 0;
	snprintf(arg, sizeof(arg), "%llu", (unsigned long long)bytes);
	pid_t pid = fork();
	if (pid == 0) {
		/* exec at once: CUDA does not survive fork. */
		execl(exe, exe, "--hog", arg, (char *)NULL);
		_exit(127);
	}
	int st = 0;
	if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) ||
	    WEXITSTATUS(st) != 0)
		bench_die("the hog process failed (status %#x)", st);
}

/* Cuts [0, size) into the chunks vramd would make: "chunked" (a single
 * grow, split at chunk_max) or "geometric" (libvram growing for small
 * allocations: 64 MiB, then the pool's size, at most 1 GiB a step; each
 * step split at chunk_max). Returns the count (at most max). */
static inline unsigned bench_layout(const char *layout, uint64_t size,
				    uint64_t chunk_max, uint64_t *chunks,
				    unsigned max)
{
	unsigned n = 0;
	uint64_t at = 0;

	while (at < size && n < max) {
		uint64_t step = size - at;
		if (strcmp(layout, "geometric") == 0) {
			step = at < GiB ? at : GiB;
			if (step < 64 * MiB)
				step = 64 * MiB;
			if (step > size - at)
				step = size - at;
		}
		for (uint64_t done = 0; done < step && n < max;) {
			uint64_t c = step - done < chunk_max ? step - done :
							       chunk_max;
			chunks[n++] = c;
			done += c;
		}
		at += step;
	}
	return n;
}

#endif
