/* SPDX-License-Identifier: Apache-2.0 */
/* libvram-preload.so against a real vramd (host backend) and a fake CUDA
 * runtime: a program linked against tests/unit/cudart_fake runs under
 * LD_PRELOAD (tests/integration/preload/preload_child.c, driven line by
 * line), and its cudaMalloc/cudaFree are checked from both sides: what
 * vramd lists and pauses, and what reached the fake runtime.
 *
 * What is asserted is what a program on real CUDA relies on: where an
 * allocation lives (a vramd pool or the runtime), that a pause releases
 * the pool's bytes and leaves the runtime's memory alone, that a resume
 * brings the memory back at the same addresses with the content a backup
 * keeps, that a free reaches whoever made the pointer, and a clean exit.
 * Discarded content is not asserted to be anything after a resume. */
#include <fcntl.h>
#include <stdarg.h>

#include "integ.h"

struct child {
	pid_t pid;
	FILE *in, *out;
	char line[512];
};

static const char *build_dir(void)
{
	const char *b = getenv("VRAM_BUILD");
	return b && *b ? b : "build";
}

/* Starts the child under the preload library with env (NULL-terminated
 * "NAME=VALUE" settings) added to this process's environment. */
static void child_start(struct child *c, const char *const env[])
{
	int to[2], from[2];
	char prog[512], lib[512];

	snprintf(prog, sizeof(prog), "%s/tests/preload/preload_child",
		 build_dir());
	snprintf(lib, sizeof(lib), "%s/libvram-preload.so", build_dir());
	ASSERT_OK(pipe(to));
	ASSERT_OK(pipe(from));
	c->pid = fork();
	ASSERT(c->pid >= 0);
	if (c->pid == 0) {
		dup2(to[0], 0);
		dup2(from[1], 1);
		close(to[0]);
		close(to[1]);
		close(from[0]);
		close(from[1]);
		setenv("LD_PRELOAD", lib, 1);
		/* Under ASan the preloaded library comes before the
		 * sanitizer's runtime, which is fine here. */
		char asan[512];
		const char *old = getenv("ASAN_OPTIONS");
		snprintf(asan, sizeof(asan), "%s%sverify_asan_link_order=0",
			 old ? old : "", old && *old ? ":" : "");
		setenv("ASAN_OPTIONS", asan, 1);
		for (const char *const *e = env; e && *e; e++)
			putenv((char *)*e);
		execl(prog, prog, (char *)NULL);
		_exit(127);
	}
	close(to[0]);
	close(from[1]);
	c->in = fdopen(to[1], "w");
	c->out = fdopen(from[0], "r");
	ASSERT(c->in && c->out);
	setvbuf(c->in, NULL, _IOLBF, 0);
}

/* Sends one command and returns its answer line (valid until the next). */
static const char *child_cmd(struct child *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static const char *child_cmd(struct child *c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(c->in, fmt, ap);
	va_end(ap);
	fputc('\n', c->in);
	fflush(c->in);
	if (!fgets(c->line, sizeof(c->line), c->out))
		TEST_FAIL("the preload child died (status %d)",
			  harness_wait(c->pid, 1000));
	return c->line;
}

static int child_rc(struct child *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int child_rc(struct child *c, const char *fmt, ...)
{
	char cmd[256];
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	const char *l = child_cmd(c, "%s", cmd);
	if (sscanf(l, "rc %d", &rc) != 1)
		TEST_FAIL("%s: answered %s", cmd, l);
	return rc;
}

/* cudaMalloc (or cudaMallocAsync) in the child; fails the test unless it
 * succeeds. */
static uintptr_t child_malloc(struct child *c, const char *how, size_t size)
{
	unsigned long long p;
	const char *l = child_cmd(c, "%s %zu", how, size);

	if (sscanf(l, "ptr %llx", &p) != 1)
		TEST_FAIL("%s %zu: %s", how, size, l);
	ASSERT(p != 0);
	return (uintptr_t)p;
}

struct fake_counts {
	int live, mallocs, frees, bad_frees, null_frees, device_syncs,
		stream_syncs;
};

static struct fake_counts child_fake(struct child *c)
{
	struct fake_counts f;
	const char *l = child_cmd(c, "fake");

	ASSERT_EQ(sscanf(l, "fake %d %d %d %d %d %d %d", &f.live, &f.mallocs,
			 &f.frees, &f.bad_frees, &f.null_frees, &f.device_syncs,
			 &f.stream_syncs),
		  7);
	return f;
}

struct preload_counts {
	unsigned pools;
	unsigned long long captured, n_captured, graph, outside, n_outside,
		failed;
};

static struct preload_counts child_stats(struct child *c)
{
	struct preload_counts s;
	int r;
	const char *l = child_cmd(c, "stats");

	ASSERT_EQ(sscanf(l, "stats %d %u %llu %llu %llu %llu %llu %llu", &r,
			 &s.pools, &s.captured, &s.n_captured, &s.graph,
			 &s.outside, &s.n_outside, &s.failed),
		  8);
	ASSERT_EQ(r, 0);
	return s;
}

/* Asks the child to exit and checks that it does, cleanly. */
static void child_quit(struct child *c)
{
	fputs("quit\n", c->in);
	fclose(c->in);
	ASSERT_EQ(harness_wait(c->pid, 10000), 0);
	fclose(c->out);
}

/* The pools the child owns (*n of them), freed by the caller. */
static struct vram_pool_info *child_pools(vram_client *vc, struct child *c,
					  size_t *n)
{
	struct vram_selector sel = { .size = sizeof(sel),
				      .owner_pid = (uint32_t)c->pid,
				      .all = 1 };
	struct vram_pool_info *infos = NULL;

	ASSERT_OK(vram_list(vc, &sel, sizeof(*infos), &infos, n));
	return infos;
}

static void start_daemon(void)
{
	const char *const extra[] = { "--host-capacity",
				      "256M",
				      "--host-devices",
				      "2",
				      "--ack-timeout-ms",
				      "3000",
				      NULL };
	integ_start_args(extra);
}

static struct vram_selector by_owner(struct child *c)
{
	struct vram_selector sel = { .size = sizeof(sel),
				      .owner_pid = (uint32_t)c->pid,
				      .all = 1 };
	return sel;
}

/* Whole-process mode: cudaMalloc lands in a vramd pool of the default tag
 * on the calling thread's device, nothing reaches the runtime, the free
 * goes back to the pool, and the pools go with the process. */
TEST(whole_process_puts_cudamalloc_in_a_pool)
{
	start_daemon();
	vram_client *vc = integ_connect("preload-test");
	struct vram_stats base = integ_stats(vc);
	const char *const env[] = { "VRAM_CAPTURE=1", NULL };
	struct child c;
	size_t n;
	char name[128];

	child_start(&c, env);
	uintptr_t a = child_malloc(&c, "malloc", 1 * MiB);
	uintptr_t b = child_malloc(&c, "malloc_async", 3 * MiB);
	ASSERT_EQ(child_rc(&c, "owns 0x%lx", (unsigned long)a), 1);
	ASSERT_EQ(child_rc(&c, "owns 0x%lx", (unsigned long)b), 1);
	ASSERT_EQ(child_rc(&c, "fill 0x%lx %llu 7", (unsigned long)a, MiB), 0);
	ASSERT_EQ(child_rc(&c, "check 0x%lx %llu 7", (unsigned long)a, MiB), 0);

	struct fake_counts f = child_fake(&c);
	ASSERT_EQ(f.mallocs, 0);
	ASSERT_EQ(f.live, 0);

	struct vram_pool_info *pi = child_pools(vc, &c, &n);
	ASSERT_EQ(n, 1);
	snprintf(name, sizeof(name), "preload.%d.default.discard.0",
		 (int)c.pid);
	ASSERT_STREQ(pi[0].name, name);
	ASSERT_STREQ(pi[0].tag, "default");
	ASSERT_EQ(pi[0].policy, VRAM_POLICY_DISCARD);
	ASSERT_EQ(pi[0].state, VRAM_STATE_ACTIVE);
	ASSERT_EQ(pi[0].device, 0);
	ASSERT_GE(pi[0].bytes, 4 * MiB);
	vram_pool_info_free(pi, n);

	struct preload_counts s = child_stats(&c);
	ASSERT_EQ(s.pools, 1);
	ASSERT_EQ(s.n_captured, 2);
	ASSERT_UEQ(s.captured, 4 * MiB);
	ASSERT_EQ(s.n_outside, 0);

	/* A forked child starts a session and a pool of its own. */
	ASSERT_EQ(child_rc(&c, "fork_malloc %llu", MiB), 0);

	/* Another device: another pool. */
	ASSERT_EQ(child_rc(&c, "device 1"), 0);
	uintptr_t d1 = child_malloc(&c, "malloc", MiB);
	pi = child_pools(vc, &c, &n);
	ASSERT_EQ(n, 2);
	int found = 0;
	for (size_t i = 0; i < n; i++)
		found += pi[i].device == 1;
	ASSERT_EQ(found, 1);
	vram_pool_info_free(pi, n);

	/* A free waits for the work that may use the memory, as the
	 * runtime's does: the device for cudaFree, the stream for
	 * cudaFreeAsync. */
	f = child_fake(&c);
	ASSERT_EQ(child_rc(&c, "free 0x%lx", (unsigned long)a), 0);
	struct fake_counts f2 = child_fake(&c);
	ASSERT_EQ(f2.device_syncs, f.device_syncs + 1);
	ASSERT_EQ(child_rc(&c, "free_async 0x%lx", (unsigned long)b), 0);
	f = child_fake(&c);
	ASSERT_EQ(f.stream_syncs, f2.stream_syncs + 1);
	ASSERT_EQ(child_rc(&c, "free 0x%lx", (unsigned long)d1), 0);
	ASSERT_EQ(child_rc(&c, "owns 0x%lx", (unsigned long)a), 0);
	/* cudaFree(NULL) initialises a context: the runtime's. */
	ASSERT_EQ(child_rc(&c, "free 0"), 0);
	f = child_fake(&c);
	ASSERT_EQ(f.bad_frees, 0);
	ASSERT_EQ(f.frees, 0);
	ASSERT_EQ(f.null_frees, 1);
	s = child_stats(&c);
	ASSERT_EQ(s.n_captured, 0);
	ASSERT_UEQ(s.captured, 0);

	child_quit(&c);
	integ_wait_baseline(vc, base.open_fds, base.used_bytes);
	pi = child_pools(vc, &c, &n);
	ASSERT_EQ(n, 0);
	vram_pool_info_free(pi, n);
	vram_client_close(vc);
	integ_stop();
}

/* Without whole-process mode, allocations reach the runtime untouched
 * (and no daemon is even contacted) except inside a region; disable()
 * scopes nest with regions, and each exit must match its scope. */
TEST(regions_and_disable_scopes)
{
	start_daemon();
	vram_client *vc = integ_connect("preload-test");
	struct child c;
	size_t n;

	child_start(&c, NULL);
	uintptr_t out1 = child_malloc(&c, "malloc", MiB);
	ASSERT_EQ(child_rc(&c, "owns 0x%lx", (unsigned long)out1), 0);
	struct fake_counts f = child_fake(&c);
	ASSERT_EQ(f.mallocs, 1);
	ASSERT_EQ(f.live, 1);
	struct vram_pool_info *pi = child_pools(vc, &c, &n);
	ASSERT_EQ(n, 0);
	vram_pool_info_free(pi, n);

	ASSERT_EQ(child_rc(&c, "region "
			       "a_tag_longer_than_vramd_takes_"
			       "0123456789012345678901234567890123 1"),
		  -EINVAL);
	ASSERT_EQ(child_rc(&c, "region_exit"), -EINVAL);
	ASSERT_EQ(child_rc(&c, "region weights 1"), 0);
	uintptr_t w = child_malloc(&c, "malloc", 2 * MiB);
	ASSERT_EQ(child_rc(&c, "disable"), 0);
	uintptr_t out2 = child_malloc(&c, "malloc", MiB);
	ASSERT_EQ(child_rc(&c, "region kv_cache 0"), 0);
	uintptr_t kv = child_malloc(&c, "malloc_async", MiB);
	/* The innermost scope is a region: disable's exit does not match. */
	ASSERT_EQ(child_rc(&c, "disable_exit"), -EINVAL);
	ASSERT_EQ(child_rc(&c, "region_exit"), 0);
	ASSERT_EQ(child_rc(&c, "region_exit"), -EINVAL);
	ASSERT_EQ(child_rc(&c, "disable_exit"), 0);
	ASSERT_EQ(child_rc(&c, "region_exit"), 0);
	ASSERT_EQ(child_rc(&c, "region_exit"), -EINVAL);
	uintptr_t out3 = child_malloc(&c, "malloc", MiB);

	ASSERT_EQ(child_rc(&c, "owns 0x%lx", (unsigned long)w), 1);
	ASSERT_EQ(child_rc(&c, "owns 0x%lx", (unsigned long)kv), 1);
	ASSERT_EQ(child_rc(&c, "owns 0x%lx", (unsigned long)out2), 0);
	ASSERT_EQ(child_rc(&c, "owns 0x%lx", (unsigned long)out3), 0);
	f = child_fake(&c);
	ASSERT_EQ(f.mallocs, 3);
	ASSERT_EQ(f.live, 3);

	pi = child_pools(vc, &c, &n);
	ASSERT_EQ(n, 2);
	for (size_t i = 0; i < n; i++) {
		if (!strcmp(pi[i].tag, "weights"))
			ASSERT_EQ(pi[i].policy, VRAM_POLICY_HOST);
		else if (!strcmp(pi[i].tag, "kv_cache"))
			ASSERT_EQ(pi[i].policy, VRAM_POLICY_DISCARD);
		else
			TEST_FAIL("unexpected pool %s", pi[i].name);
	}
	vram_pool_info_free(pi, n);

	struct preload_counts s = child_stats(&c);
	ASSERT_EQ(s.n_captured, 2);
	ASSERT_EQ(s.n_outside, 3);
	ASSERT_UEQ(s.outside, 3 * MiB);

	/* Each free reaches whoever made the pointer. */
	ASSERT_EQ(child_rc(&c, "free 0x%lx", (unsigned long)out1), 0);
	ASSERT_EQ(child_rc(&c, "free 0x%lx", (unsigned long)w), 0);
	ASSERT_EQ(child_rc(&c, "free_async 0x%lx", (unsigned long)out2), 0);
	ASSERT_EQ(child_rc(&c, "free_async 0x%lx", (unsigned long)kv), 0);
	ASSERT_EQ(child_rc(&c, "free 0x%lx", (unsigned long)out3), 0);
	f = child_fake(&c);
	ASSERT_EQ(f.live, 0);
	ASSERT_EQ(f.frees, 3);
	ASSERT_EQ(f.bad_frees, 0);
	s = child_stats(&c);
	ASSERT_EQ(s.n_captured, 0);
	ASSERT_EQ(s.n_outside, 0);

	child_quit(&c);
	vram_client_close(vc);
	integ_stop();
}

/* TMS_INIT_ENABLE=1 with TMS_INIT_ENABLE_CPU_BACKUP=1, paused by another
 * client: the pool's bytes go back to the device, the content is kept in
 * the backup and is there again after the resume at the same address;
 * what disable() allocated is the runtime's and a pause leaves it be. */
TEST(pause_with_cpu_backup_keeps_content)
{
	start_daemon();
	vram_client *vc = integ_connect("controller");
	struct vram_stats base = integ_stats(vc);
	const char *const env[] = { "TMS_INIT_ENABLE=1",
				    "TMS_INIT_ENABLE_CPU_BACKUP=1", NULL };
	struct child c;
	struct vram_report rep = VRAM_REPORT_INIT;
	size_t n;

	child_start(&c, env);
	uintptr_t a = child_malloc(&c, "malloc", 8 * MiB);
	ASSERT_EQ(child_rc(&c, "fill 0x%lx %llu 11", (unsigned long)a, 8 * MiB),
		  0);
	uintptr_t cached = child_malloc(&c, "malloc", MiB);
	ASSERT_EQ(child_rc(&c, "disable"), 0);
	uintptr_t o = child_malloc(&c, "malloc", MiB);
	ASSERT_EQ(child_rc(&c, "disable_exit"), 0);
	ASSERT_EQ(child_rc(&c, "fill 0x%lx %llu 12", (unsigned long)o, MiB), 0);
	ASSERT_EQ(child_fake(&c).live, 1);

	struct vram_pool_info *pi = child_pools(vc, &c, &n);
	ASSERT_EQ(n, 1);
	ASSERT_EQ(pi[0].policy, VRAM_POLICY_HOST);
	uint64_t bytes = pi[0].bytes;
	vram_pool_info_free(pi, n);
	struct vram_stats st = integ_stats(vc);
	ASSERT_UEQ(st.used_bytes, base.used_bytes + bytes);

	struct vram_selector sel = by_owner(&c);
	ASSERT_OK(vram_pause(vc, &sel, 0, &rep));
	ASSERT_EQ(rep.pools, 1);
	ASSERT_UEQ(rep.bytes, bytes);
	st = integ_stats(vc);
	ASSERT_UEQ(st.used_bytes, base.used_bytes);
	pi = child_pools(vc, &c, &n);
	ASSERT_EQ(n, 1);
	ASSERT_EQ(pi[0].state, VRAM_STATE_PAUSED);
	ASSERT_GT(pi[0].backup_bytes, 0);
	vram_pool_info_free(pi, n);
	/* The runtime's memory is untouched; the paused pool allocates
	 * nothing (as a full device would refuse). */
	ASSERT_EQ(child_rc(&c, "check 0x%lx %llu 12", (unsigned long)o, MiB),
		  0);
	ASSERT(strncmp(child_cmd(&c, "malloc %llu", MiB), "err 2", 5) == 0);
	ASSERT_GE(child_stats(&c).failed, 1);
	/* Engines empty PyTorch's cache after a pause: cudaFree of paused
	 * memory works. */
	ASSERT_EQ(child_rc(&c, "free 0x%lx", (unsigned long)cached), 0);
	ASSERT_EQ(child_rc(&c, "owns 0x%lx", (unsigned long)cached), 0);
	ASSERT_EQ(child_fake(&c).bad_frees, 0);

	ASSERT_OK(vram_resume(vc, &sel, 0, &rep));
	ASSERT_EQ(rep.pools, 1);
	ASSERT_UEQ(rep.bytes, bytes);
	ASSERT_EQ(
		child_rc(&c, "check 0x%lx %llu 11", (unsigned long)a, 8 * MiB),
		0);
	ASSERT_EQ(child_rc(&c, "owns 0x%lx", (unsigned long)a), 1);

	ASSERT_EQ(child_rc(&c, "free 0x%lx", (unsigned long)a), 0);
	ASSERT_EQ(child_rc(&c, "free 0x%lx", (unsigned long)o), 0);
	struct fake_counts f = child_fake(&c);
	ASSERT_EQ(f.live, 0);
	ASSERT_EQ(f.frees, 1);
	ASSERT_EQ(f.bad_frees, 0);
	child_quit(&c);
	integ_wait_baseline(vc, base.open_fds, base.used_bytes);
	vram_client_close(vc);
	integ_stop();
}

/* vramctl pauses a whole-process pool with the discard policy: no backup
 * is kept, and after the resume the program's pointer is usable at the
 * same address. A process that exits while paused exits cleanly. */
TEST(vramctl_pause_discard_and_exit_while_paused)
{
	start_daemon();
	vram_client *vc = integ_connect("controller");
	struct vram_stats base = integ_stats(vc);
	const char *const env[] = { "VRAM_CAPTURE=1", NULL };
	struct child c;
	char pid[16], out[8192];
	size_t n;

	child_start(&c, env);
	uintptr_t a = child_malloc(&c, "malloc", 2 * MiB);
	ASSERT_EQ(child_rc(&c, "fill 0x%lx %llu 5", (unsigned long)a, 2 * MiB),
		  0);
	snprintf(pid, sizeof(pid), "%d", (int)c.pid);
	const char *ctl = getenv("VRAMCTL_BIN");
	const char *const pause_argv[] = { ctl ? ctl : "build/vramctl",
					   "--socket",
					   integ_daemon.socket,
					   "pause",
					   "--owner",
					   pid,
					   NULL };
	ASSERT_EQ(harness_run_capture(pause_argv, out, sizeof(out)), 0);
	struct vram_pool_info *pi = child_pools(vc, &c, &n);
	ASSERT_EQ(n, 1);
	ASSERT_EQ(pi[0].state, VRAM_STATE_PAUSED);
	ASSERT_UEQ(pi[0].backup_bytes, 0);
	vram_pool_info_free(pi, n);
	ASSERT_UEQ(integ_stats(vc).used_bytes, base.used_bytes);

	const char *const resume_argv[] = { ctl ? ctl : "build/vramctl",
					    "--socket",
					    integ_daemon.socket,
					    "resume",
					    "--owner",
					    pid,
					    NULL };
	ASSERT_EQ(harness_run_capture(resume_argv, out, sizeof(out)), 0);
	ASSERT_GT(integ_stats(vc).used_bytes, base.used_bytes);
	ASSERT_EQ(child_rc(&c, "fill 0x%lx %llu 6", (unsigned long)a, 2 * MiB),
		  0);
	ASSERT_EQ(child_rc(&c, "check 0x%lx %llu 6", (unsigned long)a, 2 * MiB),
		  0);

	/* Paused again, then the process exits with its memory allocated. */
	ASSERT_EQ(harness_run_capture(pause_argv, out, sizeof(out)), 0);
	child_quit(&c);
	integ_wait_baseline(vc, base.open_fds, base.used_bytes);
	vram_client_close(vc);
	integ_stop();
}

/* A free during a stream capture is part of the graph, which replays on
 * that memory later: the bytes stay allocated in the pool. */
TEST(free_during_capture_is_kept_for_the_graph)
{
	start_daemon();
	const char *const env[] = { "VRAM_CAPTURE=1", NULL };
	struct child c;

	child_start(&c, env);
	ASSERT_EQ(child_rc(&c, "capture 1"), 0);
	uintptr_t g = child_malloc(&c, "malloc_async", MiB);
	ASSERT_EQ(child_rc(&c, "free_async 0x%lx", (unsigned long)g), 0);
	ASSERT_EQ(child_rc(&c, "capture 0"), 0);
	struct preload_counts s = child_stats(&c);
	ASSERT_UEQ(s.graph, MiB);
	ASSERT_EQ(s.n_captured, 1);
	ASSERT_EQ(child_rc(&c, "owns 0x%lx", (unsigned long)g), 1);
	/* Still usable memory, and a later allocation does not get it. */
	ASSERT_EQ(child_rc(&c, "fill 0x%lx %llu 3", (unsigned long)g, MiB), 0);
	uintptr_t h = child_malloc(&c, "malloc", MiB);
	ASSERT(h + MiB <= g || g + MiB <= h);
	ASSERT_EQ(child_rc(&c, "check 0x%lx %llu 3", (unsigned long)g, MiB), 0);
	struct fake_counts f = child_fake(&c);
	ASSERT_EQ(f.mallocs, 0);
	ASSERT_EQ(f.bad_frees, 0);
	child_quit(&c);
	integ_stop();
}

/* Without a daemon, whole-process mode refuses the allocation as out of
 * memory (nothing is allocated where no pause can reach it), and says why
 * once on stderr. */
TEST(no_daemon_refuses_rather_than_allocates_outside)
{
	const char *const env[] = { "VRAM_CAPTURE=1",
				    "VRAM_SOCKET=/nonexistent/vramd.sock",
				    NULL };
	struct child c;

	child_start(&c, env);
	ASSERT(strncmp(child_cmd(&c, "malloc %llu", MiB), "err 2", 5) == 0);
	ASSERT_EQ(child_fake(&c).mallocs, 0);
	ASSERT_EQ(child_stats(&c).failed, 1);
	ASSERT_EQ(child_rc(&c, "disable"), 0);
	uintptr_t o = child_malloc(&c, "malloc", MiB);
	ASSERT_EQ(child_rc(&c, "free 0x%lx", (unsigned long)o), 0);
	ASSERT_EQ(child_fake(&c).frees, 1);
	child_quit(&c);
}

/* HIP's calls go the same way as CUDA's. */
TEST(hip_calls_are_captured_too)
{
	start_daemon();
	vram_client *vc = integ_connect("preload-test");
	const char *const env[] = { "VRAM_CAPTURE=1", NULL };
	struct child c;
	size_t n;

	child_start(&c, env);
	uintptr_t a = child_malloc(&c, "hip_malloc", MiB);
	ASSERT_EQ(child_rc(&c, "owns 0x%lx", (unsigned long)a), 1);
	ASSERT_EQ(child_fake(&c).mallocs, 0);
	struct vram_pool_info *pi = child_pools(vc, &c, &n);
	ASSERT_EQ(n, 1);
	vram_pool_info_free(pi, n);
	ASSERT_EQ(child_rc(&c, "disable"), 0);
	uintptr_t o = child_malloc(&c, "hip_malloc", MiB);
	ASSERT_EQ(child_rc(&c, "disable_exit"), 0);
	ASSERT_EQ(child_rc(&c, "hip_free 0x%lx", (unsigned long)a), 0);
	ASSERT_EQ(child_rc(&c, "hip_free 0x%lx", (unsigned long)o), 0);
	struct fake_counts f = child_fake(&c);
	ASSERT_EQ(f.mallocs, 1);
	ASSERT_EQ(f.frees, 1);
	ASSERT_EQ(f.bad_frees, 0);
	child_quit(&c);
	vram_client_close(vc);
	integ_stop();
}

/* The audit row of the child's pid, with what it reported outside; fails
 * the test unless there is one. */
static struct vram_process_usage child_usage(vram_client *vc, struct child *c)
{
	struct vram_process_usage *u = NULL, row = { 0 };
	size_t n = 0;
	int found = 0;

	ASSERT_OK(vram_audit(vc, sizeof(*u), &u, &n, NULL));
	for (size_t i = 0; i < n && !found; i++)
		if (u[i].pid == (uint32_t)c->pid) {
			row = u[i];
			found = 1;
		}
	free(u);
	if (!found)
		TEST_FAIL("no audit row for the child (pid %d)", (int)c->pid);
	return row;
}

/* The library reports on its own thread, after the allocation returned:
 * waits for the daemon to hold bytes in count allocations (a bound only a
 * library that never reports reaches). */
static struct vram_process_usage child_wait_outside(vram_client *vc,
						    struct child *c,
						    uint64_t bytes,
						    uint64_t count)
{
	struct vram_process_usage u = { 0 };

	for (int i = 0; i < 1000; i++) {
		u = child_usage(vc, c);
		if (u.outside_reported && u.outside_bytes == bytes &&
		    u.outside_count == count)
			return u;
		usleep(10000);
	}
	TEST_FAIL("the daemon holds %s%llu bytes in %llu outside, not %llu "
		  "in %llu", u.outside_reported ? "" : "no report; ",
		  (unsigned long long)u.outside_bytes,
		  (unsigned long long)u.outside_count,
		  (unsigned long long)bytes, (unsigned long long)count);
}

/* What the library passed to the runtime (disable() scopes) reaches the
 * daemon over its session: vramctl audit names it per process (a paused
 * one too), and so do a pause's report, vramctl pause and the daemon's
 * log, with the expandable segments PyTorch was asked for. */
TEST(outside_named_in_audit_and_pause_report)
{
	start_daemon();
	vram_client *vc = integ_connect("controller");
	struct vram_stats base = integ_stats(vc);
	const char *const env[] = {
		"TMS_INIT_ENABLE=1", "TMS_INIT_ENABLE_CPU_BACKUP=1",
		"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", NULL
	};
	struct child c;
	struct vram_report rep = VRAM_REPORT_INIT;
	char out[8192], pid[16], want[256];

	child_start(&c, env);
	uintptr_t a = child_malloc(&c, "malloc", 4 * MiB);
	ASSERT_EQ(child_rc(&c, "disable"), 0);
	uintptr_t o1 = child_malloc(&c, "malloc", MiB);
	uintptr_t o2 = child_malloc(&c, "malloc_async", 2 * MiB);
	ASSERT_EQ(child_rc(&c, "disable_exit"), 0);
	struct vram_process_usage u = child_wait_outside(vc, &c, 3 * MiB, 2);
	ASSERT(u.outside_flags & VRAM_OUTSIDE_EXPANDABLE);

	snprintf(pid, sizeof(pid), "%d", (int)c.pid);
	const char *ctl = getenv("VRAMCTL_BIN");
	const char *const pause_argv[] = { ctl ? ctl : "build/vramctl",
					   "--socket",
					   integ_daemon.socket,
					   "pause",
					   "--owner",
					   pid,
					   NULL };
	ASSERT_EQ(harness_run_capture(pause_argv, out, sizeof(out)), 0);
	if (!strstr(out, "outside: 3M in 2 allocations (disable scopes), "
			 "plus the CUDA context and PyTorch's expandable "
			 "segments"))
		TEST_FAIL("vramctl pause said: %s", out);
	snprintf(want, sizeof(want),
		 "pid %d paused: outside: %llu bytes in 2 allocations "
		 "(disable scopes), plus the CUDA context",
		 (int)c.pid, 3 * MiB);
	ASSERT(strstr(harness_daemon_log(&integ_daemon), want) != NULL);
	/* Paused, it still has its row (it owns the pool), and vramctl
	 * audit says it once. */
	const char *const audit_argv[] = { ctl ? ctl : "build/vramctl",
					   "--socket", integ_daemon.socket,
					   "audit", NULL };
	ASSERT_EQ(harness_run_capture(audit_argv, out, sizeof(out)), 0);
	snprintf(want, sizeof(want),
		 "pid %d outside: 3M in 2 allocations (disable scopes), "
		 "plus the CUDA context and PyTorch's expandable segments",
		 (int)c.pid);
	if (!strstr(out, want))
		TEST_FAIL("vramctl audit said: %s", out);

	/* The freed ones are gone from the next report; the API's report
	 * sums the owners'. */
	ASSERT_EQ(child_rc(&c, "free 0x%lx", (unsigned long)o1), 0);
	child_wait_outside(vc, &c, 2 * MiB, 1);
	struct vram_selector sel = by_owner(&c);
	ASSERT_OK(vram_resume(vc, &sel, 0, &rep));
	ASSERT_OK(vram_pause(vc, &sel, 0, &rep));
	ASSERT_EQ(rep.outside_procs, 1);
	ASSERT_UEQ(rep.outside_bytes, 2 * MiB);
	ASSERT_UEQ(rep.outside_count, 1);
	ASSERT(rep.outside_flags & VRAM_OUTSIDE_EXPANDABLE);
	ASSERT_OK(vram_resume(vc, &sel, 0, &rep));
	ASSERT_EQ(child_rc(&c, "free_async 0x%lx", (unsigned long)o2), 0);
	ASSERT_EQ(child_rc(&c, "free 0x%lx", (unsigned long)a), 0);
	child_wait_outside(vc, &c, 0, 0);
	child_quit(&c);
	integ_wait_baseline(vc, base.open_fds, base.used_bytes);
	vram_client_close(vc);
	integ_stop();
}
