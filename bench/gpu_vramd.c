/* SPDX-License-Identifier: Apache-2.0 */
/* Pause and resume through vramd and libvram on a real GPU: the figures
 * bench/gpu_raw.c's floor is the denominator for. Starts its own vramd on
 * the cuda backend (through the test harness; VRAMD_BIN names the binary),
 * then for each pool size and policy: grow the pool, write all of it,
 * pause and resume it a few times (end to end, as vram_pool_pause and
 * vram_pool_resume return: waiting for the device, saving or restoring the
 * backup, releasing, every message), then pause, let another process
 * allocate, write and free the memory, and resume. Host-policy pools also
 * get a plain copy from cuMemAllocHost memory of the same size: the PCIe
 * limit their backup and restore rates are read against. --allocs adds
 * PyTorch-like layouts: 1024 allocations of 16 MiB (discard) and 256 of
 * 64 MiB (host) in one pool, grown by vram_alloc itself.
 *
 * Every pause's report (bytes released, the device's free memory before and
 * after, from NVML in the daemon) goes to the CSV too: the release is
 * proven by measurement. Exits 77 without a GPU.
 *
 * usage: gpu_vramd [--sizes 1,4,16,64,128] [--policies discard,host]
 *                  [--host-max 16] [--cycles 3] [--chunk-max 256G]
 *                  [--allocs] [--label chunked] [--csv FILE]
 *                  [--run-ms 0]
 *
 * --run-ms keeps the device writing the pool that long before each pause,
 * as an engine runs between a wake and its next sleep (then the daemon has
 * let its chunk fds go: daemon/fd_drop.h); 0, the default, pauses right
 * after the resume. Work, not sleep: an idle H200 slows down.
 *
 * BENCH_DAEMON_LOG=1 prints the daemon's log at the end (where each pause
 * and resume went); BENCH_DAEMON_LOG=debug runs it at debug, which times
 * each chunk's create and export too.
 */
#include "gpu_bench.h"
#include "harness.h"
#include "vram.h"

static vram_client *client;
static const char *label = "chunked";
static unsigned run_ms;

static void record(const char *policy, const char *layout, uint64_t size,
		   unsigned chunks, const char *metric, int cycle, double v)
{
	bench_record("vramd", policy, layout, size, chunks, metric, cycle, v);
}

static unsigned pool_chunks(const char *name)
{
	struct vram_selector sel = { .size = sizeof(sel), .name = name };
	struct vram_pool_info *infos = NULL;
	size_t n = 0;
	unsigned chunks = 0;

	if (vram_list(client, &sel, sizeof(struct vram_pool_info), &infos,
		      &n) == 0 &&
	    n == 1)
		chunks = infos[0].chunks;
	vram_pool_info_free(infos, n);
	return chunks;
}

#define VRAM_CHECK(call)                                               \
	do {                                                           \
		int r_ = (call);                                       \
		if (r_ < 0)                                            \
			bench_die("%s: %s (%s)", #call, strerror(-r_), \
				  vram_last_error());                  \
	} while (0)

/* The first and last words of the pool hold what the fill wrote. */
static int content_ok(uintptr_t base, uint64_t size, uint32_t pattern)
{
	uint32_t head[1024], tail[1024];
	CU_CHECK(B.cuMemcpyDtoH(head, base, sizeof(head)));
	CU_CHECK(
		B.cuMemcpyDtoH(tail, base + size - sizeof(tail), sizeof(tail)));
	for (int i = 0; i < 1024; i++)
		if (head[i] != pattern || tail[i] != pattern)
			return 0;
	return 1;
}

/* One pool: allocs == 0 grows it by size in one call; else allocs
 * vram_alloc calls of size / allocs bytes each. */
static void bench_pool(const char *policy, const char *layout, uint64_t size,
		       unsigned allocs, int cycles)
{
	int host = strcmp(policy, "host") == 0;
	struct vram_pool_options o = VRAM_POOL_OPTIONS_INIT;
	struct vram_report rep = VRAM_REPORT_INIT;
	vram_pool *p = NULL;
	char name[96];
	double pause[64], resume[64];

	snprintf(name, sizeof(name), "bench.%s.%s.%llu", policy, layout,
		 (unsigned long long)(size / MiB));
	o.name = name;
	o.tag = host ? "weights" : "kv_cache";
	o.policy = host ? VRAM_POLICY_HOST : VRAM_POLICY_DISCARD;
	o.reserve_bytes = size;
	VRAM_CHECK(vram_pool_create(client, &o, &p));
	double t0 = bench_now_ms();
	if (allocs == 0) {
		VRAM_CHECK(vram_pool_reserve(p, size));
	} else {
		for (unsigned i = 0; i < allocs; i++) {
			void *ptr;
			VRAM_CHECK(vram_alloc(p, size / allocs, &ptr));
		}
	}
	double grow_ms = bench_now_ms() - t0;
	unsigned chunks = pool_chunks(name);
	uintptr_t base = vram_pool_base(p);
	uint64_t mapped = vram_pool_size(p);
	record(policy, layout, size, chunks, allocs ? "alloc_ms" : "grow_ms", 0,
	       grow_ms);
	CU_CHECK(B.cuMemsetD32(base, 0x600d600d, mapped / 4));
	CU_CHECK(B.cuCtxSynchronize());
	printf("%-7s %-9s %8s %4u chunks  %s %.1f ms\n", policy, layout,
	       bench_size_str(size), chunks, allocs ? "allocations" : "grow",
	       grow_ms);

	int bad = 0;
	for (int c = 1; c <= cycles; c++) {
		/* The fill's own pattern again. */
		bench_device_run(base, mapped, run_ms);
		t0 = bench_now_ms();
		VRAM_CHECK(vram_pool_pause(p, &rep));
		pause[c - 1] = bench_now_ms() - t0;
		record(policy, layout, size, chunks, "pause_ms", c,
		       pause[c - 1]);
		record(policy, layout, size, chunks, "released_gib", c,
		       (double)rep.bytes / GiB);
		record(policy, layout, size, chunks, "free_delta_gib", c,
		       ((double)rep.free_after - (double)rep.free_before) /
			       GiB);
		printf("      cycle %d: pause %.2f ms, released %.3f GiB, device free "
		       "%+.3f GiB;",
		       c, pause[c - 1], (double)rep.bytes / GiB,
		       ((double)rep.free_after - (double)rep.free_before) /
			       GiB);
		t0 = bench_now_ms();
		VRAM_CHECK(vram_pool_resume(p, &rep));
		resume[c - 1] = bench_now_ms() - t0;
		record(policy, layout, size, chunks, "resume_ms", c,
		       resume[c - 1]);
		printf(" resume %.2f ms", resume[c - 1]);
		if (host) {
			record(policy, layout, size, chunks, "backup_gbps", c,
			       bench_gbps(mapped, pause[c - 1]));
			record(policy, layout, size, chunks, "restore_gbps", c,
			       bench_gbps(mapped, resume[c - 1]));
			printf(" (backup %.1f GB/s, restore %.1f GB/s)",
			       bench_gbps(mapped, pause[c - 1]),
			       bench_gbps(mapped, resume[c - 1]));
			bad |= !content_ok(base, mapped, 0x600d600d);
		}
		printf("\n");
	}
	VRAM_CHECK(vram_pool_pause(p, NULL));
	bench_hog_run(size);
	t0 = bench_now_ms();
	VRAM_CHECK(vram_pool_resume(p, &rep));
	double gap_ms = bench_now_ms() - t0;
	record(policy, layout, size, chunks, "resume_gap_ms", 1, gap_ms);
	if (host)
		bad |= !content_ok(base, mapped, 0x600d600d);
	printf("      pause p50 %.2f ms, resume p50 %.2f ms, after a gap %.2f ms%s\n",
	       bench_median(pause, cycles), bench_median(resume, cycles),
	       gap_ms, bad ? "  CONTENT WRONG AFTER RESUME" : "");
	if (bad)
		record(policy, layout, size, chunks, "content_errors", 0, 1);

	if (host) {
		void *pinned;
		CU_CHECK(B.cuMemAllocHost(&pinned, mapped));
		memset(pinned, 1, mapped);
		t0 = bench_now_ms();
		CU_CHECK(B.cuMemcpyDtoH(pinned, base, mapped));
		double t1 = bench_now_ms();
		CU_CHECK(B.cuMemcpyHtoD(base, pinned, mapped));
		double t2 = bench_now_ms();
		CU_CHECK(B.cuMemFreeHost(pinned));
		record(policy, layout, size, chunks, "pinned_d2h_gbps", 0,
		       bench_gbps(mapped, t1 - t0));
		record(policy, layout, size, chunks, "pinned_h2d_gbps", 0,
		       bench_gbps(mapped, t2 - t1));
		printf("      plain pinned copy of the same size: d2h %.1f GB/s, h2d "
		       "%.1f GB/s\n",
		       bench_gbps(mapped, t1 - t0),
		       bench_gbps(mapped, t2 - t1));
	}
	vram_pool_close(p);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	uint64_t sizes[BENCH_MAX_SIZES];
	int n_sizes = bench_parse_sizes("1,4,16,64,128", sizes);
	const char *policies = "discard,host", *csv = NULL, *chunk_max = "256G";
	uint64_t host_max = 16 * GiB;
	int cycles = 3, allocs = 0;
	struct harness_daemon d;

	if (argc == 3 && strcmp(argv[1], "--hog") == 0)
		return bench_hog_main(strtoull(argv[2], NULL, 10));
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "--allocs") == 0) {
			allocs = 1;
			continue;
		}
		if (!v)
			bench_die(
				"%s needs a value (see the top of bench/gpu_vramd.c)",
				a);
		i++;
		if (strcmp(a, "--sizes") == 0)
			n_sizes = strcmp(v, "none") == 0 ?
					  0 :
					  bench_parse_sizes(v, sizes);
		else if (strcmp(a, "--policies") == 0)
			policies = v;
		else if (strcmp(a, "--host-max") == 0)
			host_max = bench_parse_size(v);
		else if (strcmp(a, "--cycles") == 0)
			cycles = atoi(v) < 1 ? 1 : atoi(v) > 64 ? 64 : atoi(v);
		else if (strcmp(a, "--chunk-max") == 0)
			chunk_max = v;
		else if (strcmp(a, "--label") == 0)
			label = v;
		else if (strcmp(a, "--csv") == 0)
			csv = v;
		else if (strcmp(a, "--run-ms") == 0)
			run_ms = (unsigned)strtoul(v, NULL, 10);
		else
			bench_die(
				"unknown option %s (see the top of bench/gpu_vramd.c)",
				a);
	}
	bench_gpu_init();
	bench_csv_open(csv);

	/* BENCH_DAEMON_LOG (the top of this file). */
	const char *show = getenv("BENCH_DAEMON_LOG");
	bool debug = show && strcmp(show, "debug") == 0;
	const char *const extra[] = {
		"--backend",	    "cuda",	   "--chunk-max",
		chunk_max,	    "--log-level", debug ? "debug" : "info",
		"--ack-timeout-ms", "60000",	   NULL
	};
	int r = harness_daemon_start(&d, extra);
	if (r < 0)
		bench_die("cannot start vramd --backend cuda: %s",
			  strerror(-r));
	r = vram_connect(NULL, "gpu_vramd", 0, &client);
	if (r < 0)
		bench_die("vram_connect: %s (%s)", strerror(-r),
			  vram_last_error());
	if (strcmp(vram_client_backend(client), "cuda") != 0)
		bench_die("vramd runs the %s backend, not cuda",
			  vram_client_backend(client));
	char name[128] = "?";
	B.cuDeviceGetName(name, sizeof(name), bench_dev);
	const char *rt = getenv("VRAM_CUDA_RELEASE_THREADS");
	printf("vramd on %s: chunk_max %s, release threads %s, %.1f GiB free\n",
	       name, chunk_max, rt ? rt : "default",
	       (double)bench_free() / GiB);

	for (int pi = 0; pi < 2; pi++) {
		const char *policy = pi == 0 ? "discard" : "host";
		if (!bench_has(policies, policy))
			continue;
		for (int i = 0; i < n_sizes; i++) {
			uint64_t size = sizes[i];
			if (bench_skip(policy, size, host_max))
				continue;
			bench_pool(policy, label, size, 0, cycles);
		}
	}
	if (allocs) {
		if (bench_has(policies, "discard") && 19 * GiB < bench_free())
			bench_pool("discard", "1024x16M", 16 * GiB, 1024,
				   cycles);
		if (bench_has(policies, "host") && 19 * GiB < bench_free() &&
		    16 * GiB <= host_max && 48 * GiB < bench_mem_available())
			bench_pool("host", "256x64M", 16 * GiB, 256, cycles);
	}
	vram_client_close(client);
	/* The daemon's own timing of each pause and resume (where the time
	 * went: mappers, chunks, the device), when asked: read before the
	 * stop, which removes the daemon's directory. */
	char *log = show && (debug || strcmp(show, "1") == 0) ?
			    strdup(harness_daemon_log(&d)) :
			    NULL;
	r = harness_daemon_stop(&d);
	if (r == 0 && log)
		printf("---- vramd's log ----\n%s", log);
	free(log);
	if (bench_csv)
		fclose(bench_csv);
	if (r != 0) {
		fprintf(stderr, "vramd exited with %d\n%s", r,
			harness_daemon_log(&d));
		return 1;
	}
	return 0;
}
