/* SPDX-License-Identifier: Apache-2.0 */
/* The floor: the VMM calls vramd and libvram make for a pool, done in one
 * process with no daemon, no socket and no fd passing, so that
 * bench/gpu_vramd.c's figures can be read as a ratio against it.
 *
 *   setup   create, export (and release the creating handle: the fd holds
 *           the memory, as in vramd), import, map, set access, per chunk
 *   pause   synchronize [+ copy to the host backup] + unmap + release the
 *           imports + close the fds (the close that frees), the closes
 *           from 1 thread and from several
 *   resume  create + export + import + map + set access [+ copy back]
 *
 * Resume is measured right after the pause and after a gap in which another
 * process allocated, wrote and freed the memory (the driver's create cost
 * differs a lot between the two). Host backups are memfd memory registered
 * once, copied in pieces over several streams as libvram does; next to them
 * a plain copy from cuMemAllocHost memory of the same size (the PCIe
 * limit). --copy-sweep measures piece sizes and stream counts, --chunk-sweep
 * chunk sizes for one pool size, --clear-sweep the driver's clearing: for
 * one pool size in 1, 4, 16 and 64 chunks, pause, rest an idle gap (0, 20,
 * 100, 500 ms), resume, over --cycles cycles, and print what create cost
 * (the time the driver spends clearing what was just released, FACTS.md
 * "Creating after a release"). Results: a table on stdout, figures in the
 * CSV (see gpu_bench.h). Exits 77 without a GPU.
 *
 * usage: gpu_raw [--sizes 1,4,16,64,128] [--policies discard,host]
 *                [--host-max 16] [--cycles 3] [--chunk-max 1G]
 *                [--layout chunked|geometric] [--threads 4]
 *                [--copy-sweep] [--chunk-sweep SIZE] [--clear-sweep SIZE]
 *                [--csv FILE] [--run-ms 0] [--no-rdma]
 *
 * Its chunks are GPUDirect RDMA capable where the device allows it, as
 * vramd's (daemon/backend/cuda.c) and torch_memory_saver's are; --no-rdma
 * makes them plain, to see what the flag costs.
 *
 * --run-ms keeps the device writing the pool that long before each pause,
 * as bench/gpu_vramd.c's --run-ms does, so the two read against each other
 * with the same work between a resume and the next pause; 0, the default,
 * pauses right after the resume.
 */
#include <pthread.h>

#include "gpu_bench.h"

#define MAX_CHUNKS 1024
#define COPY_MAX_STREAMS 16

struct raw_pool {
	const char *policy, *layout; /* layout: the CSV's label */
	uint64_t size;
	unsigned n;
	uint64_t chunk[MAX_CHUNKS];
	CUdeviceptr base;
	int fd[MAX_CHUNKS]; /* the daemon's reference */
	CUmemGenericAllocationHandle imp[MAX_CHUNKS]; /* the client's import */
	void *backup; /* host policy: registered memfd */
};

/* Step times of the last setup/pause/resume, in ms. */
struct steps {
	double create, export_, import, map, access, sync, copy, unmap, release,
		close;
};

static CUstream streams[COPY_MAX_STREAMS];
static unsigned n_streams = 2;
static uint64_t copy_piece = 256 * MiB;
static unsigned run_ms;
static int rdma = 1; /* --no-rdma: 0; else what the device allows */

/* ---- the VMM calls ----------------------------------------------------- */

static void raw_create(struct raw_pool *p, struct steps *s)
{
	CUmemAllocationProp prop = { 0 };
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = bench_dev;
	prop.allocFlags.gpuDirectRDMACapable = (unsigned char)rdma;

	for (unsigned i = 0; i < p->n; i++) {
		CUmemGenericAllocationHandle h;
		double t0 = bench_now_ms();
		CU_CHECK(B.cuMemCreate(&h, p->chunk[i], &prop, 0));
		double t1 = bench_now_ms();
		CU_CHECK(B.cuMemExportToShareableHandle(
			&p->fd[i], h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
			0));
		CU_CHECK(B.cuMemRelease(h));
		s->create += t1 - t0;
		s->export_ += bench_now_ms() - t1;
	}
}

static void raw_map(struct raw_pool *p, struct steps *s)
{
	CUmemAccessDesc a = { 0 };
	a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	a.location.id = bench_dev;
	a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	uint64_t off = 0;

	for (unsigned i = 0; i < p->n; i++) {
		double t0 = bench_now_ms();
		CU_CHECK(B.cuMemImportFromShareableHandle(
			&p->imp[i], (void *)(uintptr_t)p->fd[i],
			CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
		double t1 = bench_now_ms();
		CU_CHECK(B.cuMemMap(p->base + off, p->chunk[i], 0, p->imp[i],
				    0));
		double t2 = bench_now_ms();
		CU_CHECK(B.cuMemSetAccess(p->base + off, p->chunk[i], &a, 1));
		s->import += t1 - t0;
		s->map += t2 - t1;
		s->access += bench_now_ms() - t2;
		off += p->chunk[i];
	}
}

/* libvram's copy: pieces round-robin over the streams, then wait. */
static void raw_copy(struct raw_pool *p, int to_host)
{
	unsigned next = 0;
	for (uint64_t off = 0; off < p->size; off += copy_piece) {
		uint64_t len =
			p->size - off < copy_piece ? p->size - off : copy_piece;
		char *h = (char *)p->backup + off;
		if (to_host)
			CU_CHECK(B.cuMemcpyDtoHAsync(h, p->base + off, len,
						     streams[next]));
		else
			CU_CHECK(B.cuMemcpyHtoDAsync(p->base + off, h, len,
						     streams[next]));
		next = (next + 1) % n_streams;
	}
	for (unsigned i = 0; i < n_streams; i++)
		CU_CHECK(B.cuStreamSynchronize(streams[i]));
}

struct closer_arg {
	int *fds;
	unsigned n;
};

static void *closer(void *arg)
{
	struct closer_arg *a = arg;
	for (unsigned i = 0; i < a->n; i++)
		close(a->fds[i]);
	return NULL;
}

/* Closes the fds from nthreads threads (the daemon's closes). */
static void close_fds(int *fds, unsigned n, unsigned nthreads)
{
	pthread_t t[16];
	struct closer_arg a[16];
	unsigned per, k = 0;

	if (nthreads > 16)
		nthreads = 16;
	if (nthreads <= 1 || n <= 1) {
		for (unsigned i = 0; i < n; i++)
			close(fds[i]);
		return;
	}
	/* Interleaved, as threads taking from one queue would. */
	per = (n + nthreads - 1) / nthreads;
	int *order = malloc(n * sizeof(*order));
	for (unsigned th = 0; th < nthreads; th++)
		for (unsigned i = th; i < n; i += nthreads)
			order[k++] = fds[i];
	k = 0;
	for (unsigned th = 0; th < nthreads && k < n; th++) {
		a[th].fds = order + k;
		a[th].n = n - k < per ? n - k : per;
		k += a[th].n;
		pthread_create(&t[th], NULL, closer, &a[th]);
	}
	for (unsigned th = 0; th < nthreads && th * per < n; th++)
		pthread_join(t[th], NULL);
	free(order);
}

static double raw_pause(struct raw_pool *p, unsigned nthreads, struct steps *s)
{
	double t0 = bench_now_ms();
	CU_CHECK(B.cuCtxSynchronize());
	double t1 = bench_now_ms();
	if (p->backup)
		raw_copy(p, 1);
	double t2 = bench_now_ms();
	uint64_t off = 0;
	for (unsigned i = 0; i < p->n; i++) {
		CU_CHECK(B.cuMemUnmap(p->base + off, p->chunk[i]));
		off += p->chunk[i];
	}
	double t3 = bench_now_ms();
	for (unsigned i = 0; i < p->n; i++)
		CU_CHECK(B.cuMemRelease(p->imp[i]));
	double t4 = bench_now_ms();
	close_fds(p->fd, p->n, nthreads);
	double t5 = bench_now_ms();
	*s = (struct steps){ .sync = t1 - t0,
			     .copy = t2 - t1,
			     .unmap = t3 - t2,
			     .release = t4 - t3,
			     .close = t5 - t4 };
	return t5 - t0;
}

static double raw_resume(struct raw_pool *p, struct steps *s)
{
	double t0 = bench_now_ms();
	memset(s, 0, sizeof(*s));
	raw_create(p, s);
	raw_map(p, s);
	double t1 = bench_now_ms();
	if (p->backup)
		raw_copy(p, 0);
	s->copy = bench_now_ms() - t1;
	return bench_now_ms() - t0;
}

/* ---- one pool ----------------------------------------------------------- */

static void record(const struct raw_pool *p, const char *metric, int cycle,
		   double v)
{
	bench_record("raw", p->policy, p->layout, p->size, p->n, metric, cycle,
		     v);
}

static void print_steps(const char *what, const struct steps *s)
{
	printf("      %-7s sync %.2f copy %.2f unmap %.2f release %.2f close %.2f | "
	       "create %.2f export %.2f import %.2f map %.2f access %.2f ms\n",
	       what, s->sync, s->copy, s->unmap, s->release, s->close,
	       s->create, s->export_, s->import, s->map, s->access);
}

/* kind: "chunked" or "geometric" (see bench_layout); label: the CSV's
 * layout column. */
static void bench_pool(const char *policy, const char *kind, const char *label,
		       uint64_t size, uint64_t chunk_max, int cycles,
		       unsigned threads, int gap)
{
	struct raw_pool *p = calloc(1, sizeof(*p));
	struct steps s = { 0 };
	double pause1[64], pausen[64], resume[64];
	double d2h[64], h2d[64];

	p->policy = policy;
	p->layout = label;
	p->size = size;
	p->n = bench_layout(kind, size, chunk_max, p->chunk, MAX_CHUNKS);
	CU_CHECK(B.cuMemAddressReserve(&p->base, size, 0, 0, 0));
	raw_create(p, &s);
	raw_map(p, &s);
	record(p, "setup_create_ms", 0, s.create);
	record(p, "setup_export_ms", 0, s.export_);
	record(p, "setup_import_ms", 0, s.import);
	record(p, "setup_map_ms", 0, s.map);
	record(p, "setup_access_ms", 0, s.access);
	CU_CHECK(B.cuMemsetD32(p->base, 0x600d600d, size / 4));

	if (strcmp(policy, "host") == 0) {
		double t0 = bench_now_ms();
		p->backup = bench_backup_map(size);
		double t1 = bench_now_ms();
		CU_CHECK(B.cuMemHostRegister(p->backup, size,
					     CU_MEMHOSTREGISTER_PORTABLE));
		record(p, "backup_touch_ms", 0, t1 - t0);
		record(p, "backup_register_ms", 0, bench_now_ms() - t1);
	}

	printf("%-7s %-9s %8s %4u chunks  setup: create %.2f export %.2f import "
	       "%.2f map %.2f access %.2f ms\n",
	       policy, label, bench_size_str(size), p->n, s.create, s.export_,
	       s.import, s.map, s.access);
	for (int c = 1; c <= cycles; c++) {
		/* Odd cycles close from one thread, even ones from several, so
		 * both see the same driver state history. */
		bench_device_run(p->base, size, run_ms);
		pause1[c - 1] = raw_pause(p, 1, &s);
		record(p, "pause_ms", c, pause1[c - 1]);
		if (p->backup) {
			d2h[c - 1] = bench_gbps(size, s.copy);
			record(p, "copy_d2h_gbps", c, d2h[c - 1]);
		}
		print_steps("pause", &s);
		resume[2 * c - 2] = raw_resume(p, &s);
		record(p, "resume_ms", c, resume[2 * c - 2]);
		if (p->backup) {
			h2d[c - 1] = bench_gbps(size, s.copy);
			record(p, "copy_h2d_gbps", c, h2d[c - 1]);
		}
		print_steps("resume", &s);
		bench_device_run(p->base, size, run_ms);
		pausen[c - 1] = raw_pause(p, threads, &s);
		record(p, "pause_mt_ms", c, pausen[c - 1]);
		resume[2 * c - 1] = raw_resume(p, &s);
		record(p, "resume_ms", cycles + c, resume[2 * c - 1]);
	}
	double gap_ms = 0;
	if (gap) {
		raw_pause(p, threads, &s);
		bench_hog_run(size);
		gap_ms = raw_resume(p, &s);
		record(p, "resume_gap_ms", 1, gap_ms);
		print_steps("gap", &s);
	}
	printf("      pause p50 %.2f ms (1 thread) %.2f ms (%u threads), resume p50 "
	       "%.2f ms",
	       bench_median(pause1, cycles), bench_median(pausen, cycles),
	       threads, bench_median(resume, 2 * cycles));
	if (gap)
		printf(", after a gap %.2f ms", gap_ms);
	printf("\n");

	if (p->backup) {
		/* The PCIe limit: one plain copy of the same size from pinned
		 * memory. */
		void *pinned;
		CU_CHECK(B.cuMemAllocHost(&pinned, size));
		memset(pinned, 1, size);
		double t0 = bench_now_ms();
		CU_CHECK(B.cuMemcpyDtoH(pinned, p->base, size));
		double t1 = bench_now_ms();
		CU_CHECK(B.cuMemcpyHtoD(p->base, pinned, size));
		double t2 = bench_now_ms();
		CU_CHECK(B.cuMemFreeHost(pinned));
		record(p, "pinned_d2h_gbps", 0, bench_gbps(size, t1 - t0));
		record(p, "pinned_h2d_gbps", 0, bench_gbps(size, t2 - t1));
		printf("      backup copies d2h p50 %.1f GB/s (first %.1f), h2d p50 %.1f "
		       "GB/s (first %.1f); plain pinned copy d2h %.1f h2d %.1f GB/s\n",
		       bench_median(d2h, cycles), d2h[0],
		       bench_median(h2d, cycles), h2d[0],
		       bench_gbps(size, t1 - t0), bench_gbps(size, t2 - t1));
	}

	/* Tear down. */
	raw_pause(p, threads, &s);
	if (p->backup) {
		CU_CHECK(B.cuMemHostUnregister(p->backup));
		munmap(p->backup, size);
	}
	CU_CHECK(B.cuMemAddressFree(p->base, size));
	free(p);
	fflush(stdout);
}

/* ---- sweeps --------------------------------------------------------------- */

/* Piece sizes and stream counts for copies between a registered memfd and
 * device memory: what libvram's defaults should be. */
static void copy_sweep(uint64_t size)
{
	static const uint64_t pieces[] = { 16 * MiB, 64 * MiB, 256 * MiB, GiB,
					   0 };
	static const unsigned counts[] = { 1, 2, 4, 8 };
	struct raw_pool p = { .policy = "copy", .size = size };
	char layout[64];

	CU_CHECK(B.cuMemAlloc(&p.base, size));
	p.backup = bench_backup_map(size);
	CU_CHECK(B.cuMemHostRegister(p.backup, size,
				     CU_MEMHOSTREGISTER_PORTABLE));
	uint64_t saved_piece = copy_piece;
	unsigned saved_streams = n_streams;
	printf("copy sweep, %s between registered memfd memory and the device:\n",
	       bench_size_str(size));
	for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++) {
		for (size_t j = 0; j < sizeof(counts) / sizeof(counts[0]);
		     j++) {
			copy_piece = pieces[i] ? pieces[i] : size;
			n_streams = counts[j];
			if (!pieces[i] && counts[j] > 1)
				continue;
			double t0 = bench_now_ms();
			raw_copy(&p, 1);
			double t1 = bench_now_ms();
			raw_copy(&p, 0);
			double t2 = bench_now_ms();
			snprintf(layout, sizeof(layout),
				 "piece=%lluM;streams=%u",
				 (unsigned long long)(copy_piece / MiB),
				 n_streams);
			p.layout = layout;
			record(&p, "copy_d2h_gbps", 0,
			       bench_gbps(size, t1 - t0));
			record(&p, "copy_h2d_gbps", 0,
			       bench_gbps(size, t2 - t1));
			printf("  piece %6llu MiB, %u stream(s): d2h %.1f GB/s, h2d %.1f GB/s\n",
			       (unsigned long long)(copy_piece / MiB),
			       n_streams, bench_gbps(size, t1 - t0),
			       bench_gbps(size, t2 - t1));
		}
	}
	copy_piece = saved_piece;
	n_streams = saved_streams;
	CU_CHECK(B.cuMemHostUnregister(p.backup));
	munmap(p.backup, size);
	CU_CHECK(B.cuMemFree(p.base));
	fflush(stdout);
}

/* ---- the driver's clearing ------------------------------------------------ */

/* For each layout of size bytes and each idle gap between a pause and the
 * next resume: the create time of every cycle's resume (min / median /
 * max), and the resume's whole time. The pause closes from one thread, as
 * the daemon's last close of a chunk does. */
static void clear_sweep(uint64_t size, int cycles)
{
	static const unsigned n_chunks[] = { 1, 4, 16, 64 };
	static const unsigned gaps_ms[] = { 0, 20, 100, 500 };
	double create[32], total[32];

	printf("clearing sweep, %s discard pool, %d cycles per cell: create ms "
	       "min / median / max (resume median)\n",
	       bench_size_str(size), cycles);
	for (size_t li = 0; li < sizeof(n_chunks) / sizeof(n_chunks[0]); li++) {
		uint64_t cm = size / n_chunks[li];
		char lay[32];
		struct steps s = { 0 };
		if (cm == 0 || cm % (2 * MiB))
			continue;
		snprintf(lay, sizeof(lay), "%ux%lluM", n_chunks[li],
			 (unsigned long long)(cm / MiB));
		struct raw_pool *p = calloc(1, sizeof(*p));
		p->policy = "discard";
		p->layout = lay;
		p->size = size;
		p->n = bench_layout("chunked", size, cm, p->chunk, MAX_CHUNKS);
		CU_CHECK(B.cuMemAddressReserve(&p->base, size, 0, 0, 0));
		raw_create(p, &s);
		raw_map(p, &s);
		printf("  %-10s", lay);
		for (size_t gi = 0; gi < sizeof(gaps_ms) / sizeof(gaps_ms[0]);
		     gi++) {
			for (int c = 0; c < cycles; c++) {
				CU_CHECK(B.cuMemsetD32(p->base, 0x600d600d,
						       size / 4));
				raw_pause(p, 1, &s);
				if (gaps_ms[gi])
					usleep(gaps_ms[gi] * 1000);
				total[c] = raw_resume(p, &s);
				create[c] = s.create;
				char metric[48];
				snprintf(metric, sizeof(metric),
					 "clear_create_gap%u_ms", gaps_ms[gi]);
				record(p, metric, c + 1, s.create);
				snprintf(metric, sizeof(metric),
					 "clear_resume_gap%u_ms", gaps_ms[gi]);
				record(p, metric, c + 1, total[c]);
			}
			double med = bench_median(total, cycles);
			qsort(create, (size_t)cycles, sizeof(double), bench_cmp);
			printf(" | gap %3u: %.2f / %.2f / %.2f (%.2f)",
			       gaps_ms[gi], create[0],
			       bench_median(create, cycles),
			       create[cycles - 1], med);
			fflush(stdout);
		}
		printf("\n");
		raw_pause(p, 1, &s);
		CU_CHECK(B.cuMemAddressFree(p->base, size));
		free(p);
	}
}

/* ---- main ----------------------------------------------------------------- */

int main(int argc, char **argv)
{
	uint64_t sizes[BENCH_MAX_SIZES];
	int n_sizes = bench_parse_sizes("1,4,16,64,128", sizes);
	const char *policies = "discard,host", *layout = "chunked", *csv = NULL;
	uint64_t host_max = 16 * GiB, chunk_max = GiB, chunk_sweep = 0;
	uint64_t clear_size = 0;
	int cycles = 3, sweep = 0, gap = 1;
	unsigned threads = 4;

	if (argc == 3 && strcmp(argv[1], "--hog") == 0)
		return bench_hog_main(strtoull(argv[2], NULL, 10));
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "--copy-sweep") == 0) {
			sweep = 1;
			continue;
		}
		if (strcmp(a, "--no-gap") == 0) {
			gap = 0;
			continue;
		}
		if (strcmp(a, "--no-rdma") == 0) {
			rdma = 0;
			continue;
		}
		if (!v)
			bench_die(
				"%s needs a value (see the top of bench/gpu_raw.c)",
				a);
		i++;
		if (strcmp(a, "--sizes") == 0)
			n_sizes = bench_parse_sizes(v, sizes);
		else if (strcmp(a, "--policies") == 0)
			policies = v;
		else if (strcmp(a, "--host-max") == 0)
			host_max = bench_parse_size(v);
		else if (strcmp(a, "--cycles") == 0)
			cycles = atoi(v) < 1 ? 1 : atoi(v) > 32 ? 32 : atoi(v);
		else if (strcmp(a, "--chunk-max") == 0)
			chunk_max = bench_parse_size(v);
		else if (strcmp(a, "--layout") == 0)
			layout = v;
		else if (strcmp(a, "--threads") == 0)
			threads = (unsigned)atoi(v);
		else if (strcmp(a, "--chunk-sweep") == 0)
			chunk_sweep = bench_parse_size(v);
		else if (strcmp(a, "--clear-sweep") == 0)
			clear_size = bench_parse_size(v);
		else if (strcmp(a, "--csv") == 0)
			csv = v;
		else if (strcmp(a, "--run-ms") == 0)
			run_ms = (unsigned)strtoul(v, NULL, 10);
		else
			bench_die(
				"unknown option %s (see the top of bench/gpu_raw.c)",
				a);
	}
	bench_gpu_init();
	bench_csv_open(csv);
	int can = 0;
	if (rdma &&
	    (B.cuDeviceGetAttribute(
		     &can,
		     CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
		     bench_dev) != CUDA_SUCCESS ||
	     !can))
		rdma = 0;
	const char *e = getenv("VRAM_CUDA_COPY_STREAMS");
	if (e && atoi(e) >= 1 && atoi(e) <= COPY_MAX_STREAMS)
		n_streams = (unsigned)atoi(e);
	e = getenv("VRAM_CUDA_COPY_PIECE_MB");
	if (e && atoi(e) >= 1)
		copy_piece = (uint64_t)atoi(e) * MiB;
	for (unsigned i = 0; i < COPY_MAX_STREAMS; i++)
		CU_CHECK(B.cuStreamCreate(&streams[i], CU_STREAM_NON_BLOCKING));

	int version = 0;
	B.cuDriverGetVersion(&version);
	char name[128] = "?";
	B.cuDeviceGetName(name, sizeof(name), bench_dev);
	printf("raw VMM floor on %s (driver API %d.%d), %.1f GiB free; copies in "
	       "%llu MiB pieces over %u streams; %s chunks\n",
	       name, version / 1000, version % 1000 / 10,
	       (double)bench_free() / GiB,
	       (unsigned long long)(copy_piece / MiB), n_streams,
	       rdma ? "GPUDirect RDMA capable" : "plain");

	if (clear_size) {
		if (clear_size + 3 * GiB > bench_free())
			bench_die("--clear-sweep %s: the device has %.1f GiB free",
				  bench_size_str(clear_size),
				  (double)bench_free() / GiB);
		clear_sweep(clear_size, cycles);
		n_sizes = 0;
		policies = "";
	}
	if (sweep)
		copy_sweep(8 * GiB < bench_free() / 2 ?
				   8 * GiB :
				   bench_free() / 4 / GiB * GiB);
	for (int pi = 0; pi < 2; pi++) {
		const char *policy = pi == 0 ? "discard" : "host";
		if (!bench_has(policies, policy))
			continue;
		for (int i = 0; i < n_sizes; i++) {
			uint64_t size = sizes[i];
			if (bench_skip(policy, size, host_max))
				continue;
			bench_pool(policy, layout, layout, size, chunk_max,
				   cycles, threads, gap);
		}
	}
	if (chunk_sweep && chunk_sweep + 3 * GiB <= bench_free()) {
		static const uint64_t cm[] = { 256 * MiB, GiB, 4 * GiB,
					       16 * GiB, 64 * GiB };
		printf("chunk sweep, %s discard pool:\n",
		       bench_size_str(chunk_sweep));
		for (size_t i = 0; i < sizeof(cm) / sizeof(cm[0]); i++) {
			char lay[32];
			if (cm[i] > chunk_sweep ||
			    chunk_sweep / cm[i] > MAX_CHUNKS)
				continue;
			snprintf(lay, sizeof(lay), "chunk=%lluM",
				 (unsigned long long)(cm[i] / MiB));
			bench_pool("discard", "chunked", lay, chunk_sweep,
				   cm[i], 2, threads, 0);
		}
	}
	if (bench_csv)
		fclose(bench_csv);
	return 0;
}
