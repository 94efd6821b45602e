/* SPDX-License-Identifier: Apache-2.0 */
/* vramd on a real NVIDIA GPU (make test-gpu): the daemon on the cuda
 * backend, this process and children as clients. Release is proven by the
 * device's free memory as the driver reports it, not by return codes.
 * Every case skips where libcuda.so.1 or a device is missing.
 */
#include <pthread.h>

#include "gpu.h"
#include "attr.h"

/* ---- roles (children) ------------------------------------------------------ */

static vram_client *role_connect(const char *name)
{
	vram_client *c = NULL;
	int r = vram_connect(NULL, name, 0, &c);
	if (r < 0) {
		fprintf(stderr, "role %s: connect: %s\n", name,
			vram_last_error());
		exit(3);
	}
	return c;
}

static void wait_line(int in, const char *want)
{
	char line[128];
	if (role_recv(in, line, sizeof(line), -1) < 0 ||
	    strcmp(line, want) != 0)
		exit(4);
}

/* Owns a host-policy pool with known content, acks from a background
 * thread, and checks the content when told. */
static int role_owner(const char *name, int in, int out)
{
	gpu_require();
	vram_client *c = role_connect("owner");
	vram_pool *p = gpu_pool(c, name, VRAM_POLICY_HOST, 1 * GiB);
	size_t n = 256 * MiB;
	void *buf;

	CU_OK(G.cu.cuMemAllocHost(&buf, n));
	gpu_fill(buf, n, 11);
	CU_OK(G.cu.cuMemcpyHtoD(vram_pool_base(p), buf, n));
	CU_OK(G.cu.cuMemsetD32(vram_pool_base(p) + n, 0x5eed0001,
			       (GiB - n) / 4));
	CU_OK(G.cu.cuCtxSynchronize());
	ASSERT_OK(vram_client_start_thread(c));
	role_send(out, "ready");
	wait_line(in, "check");
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_ACTIVE);
	memset(buf, 0, n);
	CU_OK(G.cu.cuMemcpyDtoH(buf, vram_pool_base(p), n));
	uint32_t *tail;
	CU_OK(G.cu.cuMemAllocHost((void **)&tail, 4 * MiB));
	CU_OK(G.cu.cuMemcpyDtoH(tail, vram_pool_base(p) + GiB - 4 * MiB,
				4 * MiB));
	void *want = malloc(n);
	gpu_fill(want, n, 11);
	int ok = memcmp(buf, want, n) == 0 && tail[0] == 0x5eed0001 &&
		 tail[MiB - 1] == 0x5eed0001;
	role_send(out, ok ? "ok" : "bad");
	wait_line(in, "exit");
	free(want);
	CU_OK(G.cu.cuMemFreeHost(tail));
	CU_OK(G.cu.cuMemFreeHost(buf));
	vram_pool_close(p);
	vram_client_close(c);
	return 0;
}

/* Maps another's pool, touches it, then never handles an event. */
static int role_mapper(const char *name, int in UNUSED, int out)
{
	gpu_require();
	vram_client *c = role_connect("mapper");
	vram_pool *p = NULL;
	ASSERT_OK(vram_pool_open(c, name, 0, &p));
	CU_OK(G.cu.cuMemsetD32(vram_pool_base(p), 0x12345678, MiB));
	CU_OK(G.cu.cuCtxSynchronize());
	role_send(out, "mapped");
	for (;;)
		pause();
}

/* Takes the device's free memory, keeping less than arg MiB, until told. */
static int role_hog(const char *arg, int in, int out)
{
	uint64_t keep = strtoull(arg, NULL, 10) * MiB;
	CUdeviceptr ptrs[1024];
	int n = 0;

	gpu_require();
	while (n < 1024 && gpu_free() > keep) {
		uint64_t want = gpu_free() - keep;
		if (want > GiB)
			want = GiB;
		want = want / (2 * MiB) * (2 * MiB);
		if (want == 0 ||
		    G.cu.cuMemAlloc(&ptrs[n], want) != CUDA_SUCCESS)
			break;
		n++;
	}
	role_send(out, "held");
	wait_line(in, "free");
	for (int i = 0; i < n; i++)
		CU_OK(G.cu.cuMemFree(ptrs[i]));
	CU_OK(G.cu.cuCtxSynchronize());
	role_send(out, "freed");
	wait_line(in, "exit");
	return 0;
}

/* Opens a pool read-only, checks what the owner wrote, tries to write. */
static int role_reader(const char *name, int in, int out)
{
	gpu_require();
	vram_client *c = role_connect("reader");
	vram_pool *p = NULL;
	uint32_t *buf;

	ASSERT_OK(vram_pool_open(c, name, VRAM_OPEN_READONLY, &p));
	CU_OK(G.cu.cuMemAllocHost((void **)&buf, 64 * MiB));
	CU_OK(G.cu.cuMemcpyDtoH(buf, vram_pool_base(p), 64 * MiB));
	void *want = malloc(64 * MiB);
	gpu_fill(want, 64 * MiB, 21);
	role_send(out,
		  memcmp(buf, want, 64 * MiB) == 0 ? "read-ok" : "read-bad");
	free(want);
	CU_OK(G.cu.cuMemFreeHost(buf));
	/* A write through a read-only mapping should fault (and poison this
	 * context, which is why it is the last thing done here). */
	CUresult w = G.cu.cuMemsetD32(vram_pool_base(p), 0, 1);
	if (w == CUDA_SUCCESS)
		w = G.cu.cuCtxSynchronize();
	role_send(out, w == CUDA_SUCCESS ? "write-allowed" : "write-refused");
	wait_line(in, "exit");
	_exit(0); /* the context may be unusable: skip libvram's exit path */
}

GPU_ROLES({ "owner", role_owner }, { "mapper", role_mapper },
	  { "hog", role_hog }, { "reader", role_reader })

/* ---- cases ---------------------------------------------------------------- */

static uint64_t granularity(vram_client *c)
{
	struct vram_stats st = VRAM_STATS_INIT;
	ASSERT_OK(vram_stats(c, &st));
	ASSERT_GT(st.devices[0].granularity, 0);
	return st.devices[0].granularity;
}

static void print_report(const char *what, const struct vram_report *r)
{
	fprintf(stderr,
		"%s: %u pool(s), %.1f MiB, device free %.1f -> %.1f MiB\n",
		what, r->pools, (double)r->bytes / MiB,
		(double)r->free_before / MiB, (double)r->free_after / MiB);
}

/* The daemon holds GPU memory for its clients but has no context of its
 * own: the driver lists no compute process for it. */
TEST(daemon_has_no_context)
{
	char out[8192], me[32], daemon[32];
	const char *const argv[] = { "nvidia-smi",
				     "--query-compute-apps=pid,used_memory",
				     "--format=csv,noheader,nounits", NULL };

	gpu_require();
	gpu_daemon_start();
	vram_client *c = gpu_connect("t");
	vram_pool *p = gpu_pool(c, "nctx", VRAM_POLICY_DISCARD, 1 * GiB);
	CU_OK(G.cu.cuMemsetD32(vram_pool_base(p), 1, GiB / 4));
	CU_OK(G.cu.cuCtxSynchronize());

	/* Asked while the daemon holds the pool's memory. */
	int st = harness_run_capture(argv, out, sizeof(out));
	snprintf(me, sizeof(me), "%d,", (int)getpid());
	snprintf(daemon, sizeof(daemon), "%d,", (int)gpu_daemon.pid);
	vram_pool_close(p);
	vram_client_close(c);
	gpu_daemon_stop();
	if (st != 0)
		SKIP("nvidia-smi not usable here (%d)", st);
	fprintf(stderr, "nvidia-smi compute apps (pid, MiB):\n%s", out);
	/* A listing without this process (which has a context) proves
	 * nothing: processes may be hidden (PID namespaces). */
	int listed_me = 0, listed_daemon = 0;
	for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		listed_me |= strncmp(line, me, strlen(me)) == 0;
		listed_daemon |= strncmp(line, daemon, strlen(daemon)) == 0;
	}
	if (!listed_me)
		SKIP("nvidia-smi does not list this process; cannot tell");
	ASSERT(!listed_daemon);
}

/* Data written by the GPU (a copy and a memset kernel, left running) is
 * saved on pause and restored on resume bit for bit, at the same address,
 * on each of three cycles, with new content each time. */
TEST(host_backup_bit_for_bit)
{
	const size_t n = 512 * MiB;
	uint32_t *buf, *back;

	gpu_require();
	gpu_daemon_start();
	vram_client *c = gpu_connect("t");
	vram_pool *p = gpu_pool(c, "bits", VRAM_POLICY_HOST, 2 * n);
	uintptr_t base = vram_pool_base(p);
	void *a = NULL, *b = NULL;
	ASSERT_OK(vram_alloc(p, n, &a));
	ASSERT_OK(vram_alloc(p, n - 4096, &b));
	CU_OK(G.cu.cuMemAllocHost((void **)&buf, n));
	CU_OK(G.cu.cuMemAllocHost((void **)&back, n));

	for (uint32_t cycle = 1; cycle <= 3; cycle++) {
		gpu_fill(buf, n, cycle);
		CU_OK(G.cu.cuMemcpyHtoD((CUdeviceptr)a, buf, n));
		/* Asynchronous: the pause must wait for it. */
		CU_OK(G.cu.cuMemsetD32((CUdeviceptr)b, 0xb0000000 + cycle,
				       (n - 4096) / 4));
		struct vram_report rep = VRAM_REPORT_INIT;
		ASSERT_OK(vram_pool_pause(p, &rep));
		print_report("pause", &rep);
		ASSERT_UEQ(rep.bytes, vram_pool_size(p));
		ASSERT_EQ(vram_pool_state(p), VRAM_STATE_PAUSED);
		ASSERT_OK(vram_pool_resume(p, &rep));
		print_report("resume", &rep);
		ASSERT_EQ(vram_pool_base(p), base);
		CU_OK(G.cu.cuMemcpyDtoH(back, (CUdeviceptr)a, n));
		ASSERT_EQ(memcmp(back, buf, n), 0);
		CU_OK(G.cu.cuMemcpyDtoH(back, (CUdeviceptr)b, n - 4096));
		for (size_t i = 0; i < (n - 4096) / 4; i++)
			if (back[i] != 0xb0000000 + cycle)
				TEST_FAIL("cycle %u: word %zu is %#x", cycle, i,
					  back[i]);
	}
	CU_OK(G.cu.cuMemFreeHost(buf));
	CU_OK(G.cu.cuMemFreeHost(back));
	vram_pool_close(p);
	vram_client_close(c);
	gpu_daemon_stop();
}

/* A host pool of many allocations resumes in parts (the daemon makes its
 * chunks as the restore goes, and libvram queues each chunk's copy behind
 * the one before): every chunk comes back bit for bit, on every cycle. */
TEST(host_restore_in_parts_bit_for_bit)
{
	enum { N = 6 };
	const size_t n = 64 * MiB;
	uint32_t *back;
	void *a[N];

	gpu_require();
	gpu_daemon_start();
	vram_client *c = gpu_connect("t");
	/* Grown allocation by allocation: chunks of 64, 64, 128 and 128 MiB. */
	vram_pool *p = gpu_pool_make(c, "parts", VRAM_POLICY_HOST, N * n, 0);
	for (int i = 0; i < N; i++)
		ASSERT_OK(vram_alloc(p, n, &a[i]));
	CU_OK(G.cu.cuMemAllocHost((void **)&back, n));

	for (uint32_t cycle = 1; cycle <= 3; cycle++) {
		for (int i = 0; i < N; i++)
			CU_OK(G.cu.cuMemsetD32((CUdeviceptr)a[i],
					       cycle << 16 | (uint32_t)i,
					       n / 4));
		ASSERT_OK(vram_pool_pause(p, NULL));
		ASSERT_OK(vram_pool_resume(p, NULL));
		for (int i = 0; i < N; i++) {
			CU_OK(G.cu.cuMemcpyDtoH(back, (CUdeviceptr)a[i], n));
			for (size_t w = 0; w < n / 4; w++)
				if (back[w] != (cycle << 16 | (uint32_t)i))
					TEST_FAIL("cycle %u: allocation %d "
						  "word %zu is %#x",
						  cycle, i, w, back[w]);
		}
	}
	CU_OK(G.cu.cuMemFreeHost(back));
	vram_pool_close(p);
	vram_client_close(c);
	gpu_daemon_stop();
}

/* A discard pool's pause gives its size back to the device, within one
 * granule, and resume takes it again; the daemon's report says the same. */
TEST(discard_pause_frees_device_memory)
{
	const uint64_t size = 4 * GiB;

	gpu_require();
	gpu_daemon_start();
	vram_client *c = gpu_connect("t");
	uint64_t gran = granularity(c);
	uint64_t before = gpu_free();
	vram_pool *p = gpu_pool(c, "kv", VRAM_POLICY_DISCARD, size);
	ASSERT_UEQ(vram_pool_size(p), size);
	CU_OK(G.cu.cuMemsetD32(vram_pool_base(p), 7, size / 4));
	uint64_t mapped = gpu_free();
	ASSERT_NEAR(before - mapped, size, gran);

	for (int cycle = 0; cycle < 3; cycle++) {
		struct vram_report rep = VRAM_REPORT_INIT;
		ASSERT_OK(vram_pool_pause(p, &rep));
		print_report("pause", &rep);
		uint64_t paused = gpu_free_near(mapped + size, gran);
		ASSERT_NEAR(paused - mapped, size, gran);
		ASSERT_UEQ(rep.bytes, size);
		ASSERT_NEAR(rep.free_after - rep.free_before, size, gran);
		ASSERT_OK(vram_pool_resume(p, &rep));
		print_report("resume", &rep);
		ASSERT_NEAR(gpu_free(), mapped, gran);
		/* Usable again. */
		CU_OK(G.cu.cuMemsetD32(vram_pool_base(p), 9, size / 4));
		CU_OK(G.cu.cuCtxSynchronize());
	}
	vram_pool_close(p);
	ASSERT_NEAR(gpu_free_near(before, gran), before, gran);
	vram_client_close(c);
	gpu_daemon_stop();
}

/* A second process (a controller) pauses and resumes a pool it does not
 * own; the owner acks from its background thread and finds its data. */
TEST(third_party_pause)
{
	gpu_require();
	gpu_daemon_start();
	struct role owner = role_spawn("owner", "tp");
	role_expect(&owner, "ready", 60000);

	vram_client *c = gpu_connect("controller");
	/* The owner's context may set up copy streams during the pause: the
	 * granule-exact check is discard_pause_frees_device_memory's. */
	uint64_t tol = 64 * MiB;
	struct vram_selector sel = { .size = sizeof(sel), .name = "tp" };
	struct vram_report rep = VRAM_REPORT_INIT;
	uint64_t f0 = gpu_free();
	ASSERT_OK(vram_pause(c, &sel, 0, &rep));
	print_report("third-party pause", &rep);
	ASSERT_EQ(rep.pools, 1);
	ASSERT_UEQ(rep.bytes, 1 * GiB);
	ASSERT_NEAR(gpu_free_near(f0 + GiB, tol) - f0, GiB, tol);

	struct vram_pool_info *infos = NULL;
	size_t n = 0;
	ASSERT_OK(
		vram_list(c, &sel, sizeof(struct vram_pool_info), &infos, &n));
	ASSERT_EQ(n, 1);
	ASSERT_EQ(infos[0].state, VRAM_STATE_PAUSED);
	vram_pool_info_free(infos, n);

	ASSERT_OK(vram_resume(c, &sel, 0, &rep));
	print_report("third-party resume", &rep);
	ASSERT_NEAR(gpu_free(), f0, tol);
	role_send(owner.to_child, "check");
	role_expect(&owner, "ok", 60000);
	role_finish(&owner, "exit");
	vram_client_close(c);
	gpu_daemon_stop();
}

struct pause_call {
	vram_client *c;
	const char *name;
	int r;
	struct vram_report rep;
};

static void *pause_thread(void *arg)
{
	struct pause_call *pc = arg;
	struct vram_selector sel = { .size = sizeof(sel), .name = pc->name };
	pc->r = vram_pause(pc->c, &sel, 30000, &pc->rep);
	return NULL;
}

/* A mapper killed while a pause waits for its ack: the pause completes,
 * and once the pool is gone the device is back to where it started. */
TEST(sigkilled_mapper_leaks_nothing)
{
	gpu_require();
	gpu_daemon_start();
	vram_client *c = gpu_connect("owner");
	uint64_t gran = granularity(c);
	uint64_t baseline = gpu_free();
	vram_pool *p = gpu_pool(c, "k", VRAM_POLICY_DISCARD, 2 * GiB);

	struct role mapper = role_spawn("mapper", "k");
	role_expect(&mapper, "mapped", 60000);

	struct pause_call pc = { .c = c, .name = "k", .rep = VRAM_REPORT_INIT };
	pthread_t t;
	ASSERT_OK(pthread_create(&t, NULL, pause_thread, &pc));
	harness_msleep(500);
	ASSERT_OK(kill(mapper.pid, SIGKILL));
	ASSERT_EQ(harness_wait(mapper.pid, 10000), 128 + SIGKILL);
	close(mapper.to_child);
	close(mapper.from_child);
	pthread_join(t, NULL);
	if (pc.r != 0)
		TEST_FAIL("pause: %s (%s)", strerror(-pc.r), vram_last_error());
	ASSERT_UEQ(pc.rep.bytes, 2 * GiB);
	/* The pool's memory and the dead mapper's context are gone. */
	ASSERT_NEAR(gpu_free_near(baseline, gran), baseline, gran);
	ASSERT_OK(vram_pool_resume(p, NULL));
	ASSERT_NEAR(gpu_free(), baseline - 2 * GiB, gran);
	vram_pool_close(p);
	ASSERT_NEAR(gpu_free_near(baseline, gran), baseline, gran);
	struct vram_stats st = VRAM_STATS_INIT;
	ASSERT_OK(vram_stats(c, &st));
	ASSERT_UEQ(st.used_bytes, 0);
	vram_client_close(c);
	gpu_daemon_stop();
}

/* Resume when another process took the memory: ENOMEM, the pool stays
 * PAUSED with its backup, and the retry after that process lets go
 * restores the content. */
TEST(oom_on_resume_keeps_backup)
{
	const uint64_t size = 4 * GiB;
	const size_t n = 256 * MiB;
	void *buf, *back;

	gpu_require();
	gpu_daemon_start();
	vram_client *c = gpu_connect("engine");
	vram_pool *p = gpu_pool(c, "w", VRAM_POLICY_HOST, size);
	CU_OK(G.cu.cuMemAllocHost(&buf, n));
	CU_OK(G.cu.cuMemAllocHost(&back, n));
	gpu_fill(buf, n, 99);
	CU_OK(G.cu.cuMemcpyHtoD(vram_pool_base(p) + size - n, buf, n));
	ASSERT_OK(vram_pool_pause(p, NULL));

	/* Leave 1 GiB free: less than the pool. */
	struct role hog = role_spawn("hog", "1024");
	role_expect(&hog, "held", 120000);
	fprintf(stderr, "free with the hog: %.1f MiB\n",
		(double)gpu_free() / MiB);
	ASSERT_LT(gpu_free(), size);

	int r = vram_pool_resume(p, NULL);
	fprintf(stderr, "resume under pressure: %d (%s)\n", r,
		vram_last_error());
	ASSERT_EQ(r, -ENOMEM);
	ASSERT(vram_last_error()[0] != 0);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_PAUSED);
	struct vram_selector sel = { .size = sizeof(sel), .name = "w" };
	struct vram_pool_info *infos = NULL;
	size_t ni = 0;
	ASSERT_OK(
		vram_list(c, &sel, sizeof(struct vram_pool_info), &infos, &ni));
	ASSERT_EQ(infos[0].state, VRAM_STATE_PAUSED);
	vram_pool_info_free(infos, ni);

	role_send(hog.to_child, "free");
	role_expect(&hog, "freed", 60000);
	ASSERT_OK(vram_pool_resume(p, NULL));
	CU_OK(G.cu.cuMemcpyDtoH(back, vram_pool_base(p) + size - n, n));
	ASSERT_EQ(memcmp(back, buf, n), 0);
	role_finish(&hog, "exit");
	CU_OK(G.cu.cuMemFreeHost(buf));
	CU_OK(G.cu.cuMemFreeHost(back));
	vram_pool_close(p);
	vram_client_close(c);
	gpu_daemon_stop();
}

/* Device pointers from vram_alloc stay valid and usable across three
 * cycles: the pool comes back at the same addresses. */
TEST(pointers_identical_across_cycles)
{
	enum { N = 64 };
	void *ptr[N];
	uint32_t word;

	gpu_require();
	gpu_daemon_start();
	vram_client *c = gpu_connect("t");
	/* Grown by vram_alloc itself, as an engine's allocator would. */
	vram_pool *p =
		gpu_pool_make(c, "ptrs", VRAM_POLICY_DISCARD, 2 * GiB, 0);
	uintptr_t base = vram_pool_base(p);
	for (int i = 0; i < N; i++)
		ASSERT_OK(vram_alloc(p, 16 * MiB, &ptr[i]));
	for (int cycle = 0; cycle < 3; cycle++) {
		ASSERT_OK(vram_pool_pause(p, NULL));
		ASSERT_OK(vram_pool_resume(p, NULL));
		ASSERT_EQ(vram_pool_base(p), base);
		for (int i = 0; i < N; i++) {
			void *again = NULL;
			CU_OK(G.cu.cuMemsetD32((CUdeviceptr)ptr[i],
					       (unsigned)(i + cycle), 4 * MiB));
			CU_OK(G.cu.cuMemcpyDtoH(
				&word, (CUdeviceptr)ptr[i] + 16 * MiB - 4, 4));
			ASSERT_EQ(word, (uint32_t)(i + cycle));
			/* The sub-allocator's view did not move either. */
			ASSERT_OK(vram_free(p, ptr[i]));
			ASSERT_OK(vram_alloc(p, 16 * MiB, &again));
			ASSERT(again == ptr[i]);
		}
	}
	vram_pool_close(p);
	vram_client_close(c);
	gpu_daemon_stop();
}

/* A read-only mapper sees the owner's data without a copy. */
TEST(readonly_mapper_shares_weights)
{
	const size_t n = 64 * MiB;
	void *buf;

	gpu_require();
	gpu_daemon_start();
	vram_client *c = gpu_connect("trainer");
	vram_pool *p = gpu_pool(c, "shared", VRAM_POLICY_HOST, 256 * MiB);
	CU_OK(G.cu.cuMemAllocHost(&buf, n));
	gpu_fill(buf, n, 21);
	CU_OK(G.cu.cuMemcpyHtoD(vram_pool_base(p), buf, n));
	struct role reader = role_spawn("reader", "shared");
	role_expect(&reader, "read-ok", 60000);
	char line[64];
	ASSERT_OK(role_recv(reader.from_child, line, sizeof(line), 60000));
	fprintf(stderr, "read-only mapping, write attempt: %s\n", line);
	ASSERT(strcmp(line, "write-refused") == 0 ||
	       strcmp(line, "write-allowed") == 0);
	role_finish(&reader, "exit");
	if (strcmp(line, "write-refused") == 0) {
		/* Refused, so the owner's data is intact. */
		void *back = malloc(n);
		CU_OK(G.cu.cuMemcpyDtoH(back, vram_pool_base(p), n));
		ASSERT_EQ(memcmp(back, buf, n), 0);
		free(back);
	}
	CU_OK(G.cu.cuMemFreeHost(buf));
	vram_pool_close(p);
	vram_client_close(c);
	gpu_daemon_stop();
}

/* Idle, the daemon lets its chunk fds go and the driver's handle holds
 * the memory (daemon/fd_drop.h, chunk_fd_idle_ms 100 by default): this
 * process's mapping keeps working, a reader that opens the pool then is
 * sent the chunks exported again and reads what was written, and a pause
 * still gives the device its memory back. */
TEST(idle_pool_is_held_by_handle_and_sent_again)
{
	const uint64_t size = 1 * GiB;
	const size_t n = 64 * MiB;
	void *buf, *back;

	gpu_require();
	gpu_daemon_start();
	vram_client *c = gpu_connect("engine");
	uint64_t gran = granularity(c);
	vram_pool *p = gpu_pool(c, "idle", VRAM_POLICY_DISCARD, size);
	CU_OK(G.cu.cuMemAllocHost(&buf, n));
	gpu_fill(buf, n, 21);
	CU_OK(G.cu.cuMemcpyHtoD(vram_pool_base(p), buf, n));
	CU_OK(G.cu.cuCtxSynchronize());
	harness_msleep(500);
	if (!strstr(harness_daemon_log(&gpu_daemon), "let the fds of"))
		TEST_FAIL("the idle pool kept its fds\n%s",
			  harness_daemon_log(&gpu_daemon));
	back = malloc(n);
	CU_OK(G.cu.cuMemcpyDtoH(back, vram_pool_base(p), n));
	ASSERT_EQ(memcmp(back, buf, n), 0);
	free(back);
	struct role reader = role_spawn("reader", "idle");
	role_expect(&reader, "read-ok", 60000);
	char line[64];
	ASSERT_OK(role_recv(reader.from_child, line, sizeof(line), 60000));
	role_finish(&reader, "exit");
	harness_msleep(500);
	uint64_t mapped = gpu_free();
	struct vram_report rep = VRAM_REPORT_INIT;
	ASSERT_OK(vram_pool_pause(p, &rep));
	print_report("pause after idle", &rep);
	ASSERT_NEAR(gpu_free_near(mapped + size, gran) - mapped, size, gran);
	ASSERT_NEAR(rep.free_after - rep.free_before, size, gran);
	ASSERT_OK(vram_pool_resume(p, &rep));
	CU_OK(G.cu.cuMemsetD32(vram_pool_base(p), 9, size / 4));
	CU_OK(G.cu.cuCtxSynchronize());
	CU_OK(G.cu.cuMemFreeHost(buf));
	vram_pool_close(p);
	vram_client_close(c);
	gpu_daemon_stop();
}

/* Finds this process's audit row on device 0; 0 when NVML lists it. */
static int audit_me(vram_client *c, struct vram_process_usage *me)
{
	struct vram_process_usage *u = NULL;
	size_t n = 0;
	int driver_info = 0, found = -1;

	ASSERT_OK(vram_audit(c, sizeof(struct vram_process_usage), &u, &n,
			     &driver_info));
	for (size_t i = 0; i < n; i++) {
		fprintf(stderr, "audit: pid %u dev %u used %s%llu MiB, via vramd %llu MiB%s\n",
			u[i].pid, u[i].device, u[i].used_known ? "" : "? ",
			(unsigned long long)(u[i].used_bytes >> 20),
			(unsigned long long)(u[i].vramd_bytes >> 20),
			u[i].is_vramd ? " (vramd)" : "");
		if (u[i].pid == (uint32_t)getpid() && u[i].device == 0 &&
		    u[i].used_known) {
			*me = u[i];
			found = 0;
		}
		/* The daemon never appears as a GPU user: it has no context. */
		ASSERT(!u[i].is_vramd || !u[i].used_known || u[i].used_bytes == 0);
	}
	free(u);
	return driver_info ? found : -1;
}

/* vramctl audit shows memory an engine allocated outside vramd: a bare
 * cuMemAlloc of 2 GiB raises this process's OUTSIDE figure by 2 GiB while
 * its vramd pool stays counted as held through vramd. */
TEST(audit_shows_unmanaged_memory)
{
	struct vram_process_usage before, after;
	CUdeviceptr bare;

	gpu_require();
	gpu_daemon_start();
	vram_client *c = gpu_connect("auditee");
	vram_pool *p = gpu_pool(c, "audited", VRAM_POLICY_DISCARD, 1 * GiB);
	CU_OK(G.cu.cuMemsetD32(vram_pool_base(p), 3, GiB / 4));
	CU_OK(G.cu.cuCtxSynchronize());
	if (audit_me(c, &before) < 0) {
		vram_pool_close(p);
		vram_client_close(c);
		gpu_daemon_stop();
		SKIP("NVML does not report this process's memory here");
	}
	ASSERT_UEQ(before.vramd_bytes, 1 * GiB);
	CU_OK(G.cu.cuMemAlloc(&bare, 2 * GiB));
	CU_OK(G.cu.cuMemsetD32(bare, 1, GiB / 2));
	CU_OK(G.cu.cuCtxSynchronize());
	ASSERT_OK(audit_me(c, &after));
	ASSERT_UEQ(after.vramd_bytes, 1 * GiB);
	/* The vramd part is unchanged, so the outside part grew by what
	 * used grew by. */
	ASSERT(after.used_bytes > before.used_bytes);
	ASSERT_NEAR(after.used_bytes - before.used_bytes, 2 * GiB, 64 * MiB);
	CU_OK(G.cu.cuMemFree(bare));
	vram_pool_close(p);
	vram_client_close(c);
	gpu_daemon_stop();
}
