/* SPDX-License-Identifier: Apache-2.0 */
/* Pause and resume against a real vramd: data kept or dropped by policy,
 * the same addresses across cycles, capacity really returned, several
 * processes, third-party pauses, mappers that do not answer. */
#include <pthread.h>
#include <time.h>

#include "integ.h"

TEST(own_pause_resume_keeps_addresses_and_backup)
{
	integ_start("256M");
	vram_client *c = integ_connect("engine");
	vram_pool *w = integ_pool(c, "w", "weights", VRAM_POLICY_HOST, 0);
	vram_pool *kv = integ_pool(c, "kv", "kv_cache", VRAM_POLICY_DISCARD, 0);
	void *a, *b, *k;
	ASSERT_OK(vram_alloc(w, 8 * MiB, &a));
	ASSERT_OK(vram_alloc(w, 3 * MiB + 5, &b));
	ASSERT_OK(vram_alloc(kv, 16 * MiB, &k));
	ASSERT_EQ((uintptr_t)a % 256, 0);
	ASSERT_EQ((uintptr_t)b % 256, 0);
	integ_fill(a, 8 * MiB, 1);
	integ_fill(b, 3 * MiB, 2);
	memset(k, 0x5a, 16 * MiB);
	uintptr_t base_w = vram_pool_base(w), base_kv = vram_pool_base(kv);
	uint64_t size = vram_pool_size(w) + vram_pool_size(kv);

	for (int cycle = 0; cycle < 3; cycle++) {
		struct vram_report rep = VRAM_REPORT_INIT;
		struct vram_selector all = { .size = sizeof(all), .all = 1 };
		ASSERT_OK(vram_pause(c, &all, 0, &rep));
		ASSERT_EQ(rep.pools, 2);
		ASSERT_EQ(rep.failed, 0);
		ASSERT_UEQ(rep.bytes, size);
		ASSERT_UEQ(rep.free_after - rep.free_before, size);
		ASSERT_EQ(vram_pool_state(w), VRAM_STATE_PAUSED);
		ASSERT_EQ(vram_alloc(w, 4096, &a), -EBUSY);
		ASSERT_UEQ(integ_stats(c).used_bytes, 0);
		ASSERT_EQ(vram_pause(c, &all, 0, &rep), -EALREADY);

		ASSERT_OK(vram_resume(c, &all, 0, &rep));
		ASSERT_EQ(rep.pools, 2);
		ASSERT_UEQ(rep.bytes, size);
		ASSERT_UEQ(rep.free_before - rep.free_after, size);
		ASSERT_EQ(vram_pool_state(w), VRAM_STATE_ACTIVE);
		ASSERT_EQ(vram_pool_base(w), base_w);
		ASSERT_EQ(vram_pool_base(kv), base_kv);
		a = (void *)base_w; /* first allocation sits at the base */
		ASSERT_OK(integ_check(a, 8 * MiB, 1));
		ASSERT_OK(integ_check(b, 3 * MiB, 2));
		/* Discarded: the KV cache comes back as fresh memory. */
		ASSERT_EQ(((unsigned char *)k)[0], 0);
		ASSERT_EQ(((unsigned char *)k)[16 * MiB - 1], 0);
		memset(k, 0x5a, 16 * MiB);
	}
	vram_client_close(c);
	integ_stop();
}

TEST(pause_by_tag_and_by_pool_touch_only_those)
{
	integ_start("256M");
	vram_client *c = integ_connect("engine");
	vram_pool *w = integ_pool(c, "w", "weights", VRAM_POLICY_HOST, 0);
	vram_pool *kv = integ_pool(c, "kv", "kv_cache", VRAM_POLICY_DISCARD, 0);
	ASSERT_OK(vram_pool_reserve(w, 4 * MiB));
	ASSERT_OK(vram_pool_reserve(kv, 4 * MiB));
	struct vram_selector sel = { .size = sizeof(sel), .tag = "kv_cache" };
	ASSERT_OK(vram_pause(c, &sel, 0, NULL));
	ASSERT_EQ(vram_pool_state(kv), VRAM_STATE_PAUSED);
	ASSERT_EQ(vram_pool_state(w), VRAM_STATE_ACTIVE);
	ASSERT_OK(vram_pool_pause(w, NULL));
	ASSERT_EQ(vram_pool_state(w), VRAM_STATE_PAUSED);
	/* Staged wake: weights first, then the KV cache. */
	ASSERT_OK(vram_pool_resume(w, NULL));
	ASSERT_EQ(vram_pool_state(kv), VRAM_STATE_PAUSED);
	ASSERT_OK(vram_resume(c, &sel, 0, NULL));
	ASSERT_EQ(vram_pool_state(kv), VRAM_STATE_ACTIVE);
	struct vram_selector none = { .size = sizeof(none), .tag = "nothing" };
	ASSERT_EQ(vram_pause(c, &none, 0, NULL), -ENOENT);
	struct vram_selector empty = VRAM_SELECTOR_INIT;
	ASSERT_EQ(vram_pause(c, &empty, 0, NULL), -ENOENT);
	vram_client_close(c);
	integ_stop();
}

/* A child owns a pool, handles events on libvram's thread, and checks its
 * data after the parent paused and resumed it from outside. */
TEST(third_party_pause_with_acks_and_capacity_returned)
{
	integ_start("96M");
	struct integ_sync s;
	integ_sync_init(&s);
	pid_t pid = fork();
	if (pid == 0) {
		vram_client *c = integ_connect("engine");
		vram_pool *w = integ_pool(c, "engine.w", "weights", VRAM_POLICY_HOST, 0);
		void *a;
		ASSERT_OK(vram_alloc(w, 60 * MiB, &a));
		integ_fill(a, 60 * MiB, 7);
		ASSERT_OK(vram_client_start_thread(c));
		integ_signal(s.to_parent[1]);
		integ_wait_signal(s.to_child[0]);
		ASSERT_EQ(vram_pool_state(w), VRAM_STATE_ACTIVE);
		if (integ_check(a, 60 * MiB, 7) != 0)
			_exit(3);
		vram_client_close(c);
		_exit(0);
	}
	integ_wait_signal(s.to_parent[0]);
	vram_client *t = integ_connect("trainer");
	struct vram_selector sel = { .size = sizeof(sel),
				     .owner_pid = (uint32_t)pid };
	struct vram_report rep = VRAM_REPORT_INIT;
	ASSERT_OK(vram_pause(t, &sel, 0, &rep));
	ASSERT_EQ(rep.pools, 1);
	ASSERT_UEQ(rep.bytes, 64 * MiB);
	ASSERT_EQ(integ_info(t, "engine.w").state, VRAM_STATE_PAUSED);
	/* The trainer gets the capacity the engine gave back: 80 of 96 MiB. */
	vram_pool *mine = integ_pool(t, "trainer", "train", VRAM_POLICY_DISCARD, 0);
	void *x;
	ASSERT_OK(vram_alloc(mine, 80 * MiB, &x));
	memset(x, 1, 80 * MiB);
	/* While the trainer holds it, the engine cannot come back. */
	ASSERT_EQ(vram_resume(t, &sel, 0, &rep), -ENOMEM);
	ASSERT(strstr(vram_last_error(), "memory") != NULL);
	vram_pool_close(mine);
	ASSERT_OK(vram_resume(t, &sel, 0, &rep));
	ASSERT_UEQ(rep.bytes, 64 * MiB);
	integ_signal(s.to_child[1]);
	ASSERT_EQ(harness_wait(pid, 10000), 0);
	vram_client_close(t);
	integ_stop();
}

/* Forks a process that opens pool name as a mapper and then never reads
 * its socket, so it never acks; returns its pid once it maps the pool.
 * Called before any thread of this process starts: a child forked while
 * another thread holds an allocator lock inherits it locked (seen with
 * ASan's allocator). */
static pid_t deaf_mapper_start(const char *name)
{
	struct integ_sync s;
	integ_sync_init(&s);
	pid_t pid = fork();
	if (pid == 0) {
		vram_client *m = integ_connect("deaf");
		vram_pool *p;
		ASSERT_OK(vram_pool_open(m, name, 0, &p));
		integ_signal(s.to_parent[1]);
		pause(); /* never dispatches */
		_exit(0);
	}
	integ_wait_signal(s.to_parent[0]);
	return pid;
}

/* A mapper that never handles events: the pause times out naming it, the
 * pool stays PAUSING with nothing lost, and completes once it is gone. */
TEST(mapper_that_never_acks_is_reported_by_pid)
{
	integ_start("256M");
	vram_client *c = integ_connect("owner");
	vram_pool *w = integ_pool(c, "w", "weights", VRAM_POLICY_HOST, 0);
	void *a;
	ASSERT_OK(vram_alloc(w, 4 * MiB, &a));
	integ_fill(a, 4 * MiB, 9);

	/* Threads start after the fork (deaf_mapper_start). */
	pid_t pid = deaf_mapper_start("w");
	ASSERT_OK(vram_client_start_thread(c));
	vram_client *ctl = integ_connect("ctl");
	struct vram_selector sel = { .size = sizeof(sel), .name = "w" };
	struct vram_report rep = VRAM_REPORT_INIT;
	/* The deadline covers the owner's save round too, so it is generous:
	 * under a loaded ASan run a 300 ms one timed out on the owner. */
	ASSERT_EQ(vram_pause(ctl, &sel, 2000, &rep), -ETIMEDOUT);
	ASSERT_EQ(rep.failed, 1);
	char want[32];
	snprintf(want, sizeof(want), "%d", (int)pid);
	if (!strstr(vram_last_error(), want))
		TEST_FAIL("pid %s not in \"%s\"", want, vram_last_error());
	ASSERT_EQ(integ_info(ctl, "w").state, VRAM_STATE_PAUSING);
	/* Nothing released while a mapper may still use the memory. */
	ASSERT_UEQ(integ_stats(ctl).used_bytes, 64 * MiB);
	ASSERT_EQ(vram_resume(ctl, &sel, 300, NULL), -EBUSY);
	/* Waiting again still times out; once the mapper dies it completes. */
	ASSERT_EQ(vram_pause(ctl, &sel, 200, NULL), -ETIMEDOUT);
	kill(pid, SIGKILL);
	ASSERT_EQ(harness_wait(pid, 5000), 128 + SIGKILL);
	for (int i = 0; i < 100 && integ_info(ctl, "w").state != VRAM_STATE_PAUSED; i++)
		harness_msleep(10);
	ASSERT_EQ(integ_info(ctl, "w").state, VRAM_STATE_PAUSED);
	ASSERT_OK(vram_resume(ctl, &sel, 0, NULL));
	ASSERT_OK(integ_check(a, 4 * MiB, 9));
	vram_client_close(ctl);
	vram_client_close(c);
	integ_stop();
}

/* A pause polls (daemon and caller) for its spin window only: waiting 1.5
 * s on a mapper that never acks costs neither the daemon nor the caller's
 * thread the CPU of the whole wait. */
TEST(transition_polls_only_for_its_spin_window)
{
	const char *const extra[] = { "--host-capacity",
				      "256M",
				      "--ack-timeout-ms",
				      "3000",
				      "--set",
				      "transition_spin_ms=100",
				      NULL };
	integ_start_args(extra);
	setenv("VRAM_SPIN_MS", "100", 1);
	vram_client *c = integ_connect("owner");
	vram_pool *w = integ_pool(c, "w", "kv", VRAM_POLICY_DISCARD, 0);
	void *a;
	ASSERT_OK(vram_alloc(w, 4 * MiB, &a));
	pid_t pid = deaf_mapper_start("w");
	ASSERT_OK(vram_client_start_thread(c));
	vram_client *ctl = integ_connect("ctl");
	struct vram_selector sel = { .size = sizeof(sel), .name = "w" };
	double d0 = integ_proc_cpu_ms(integ_daemon.pid),
	       t0 = integ_thread_cpu_ms();
	ASSERT_EQ(vram_pause(ctl, &sel, 1500, NULL), -ETIMEDOUT);
	double daemon_ms = integ_proc_cpu_ms(integ_daemon.pid) - d0;
	double caller_ms = integ_thread_cpu_ms() - t0;
	/* Polling through the whole wait would take ~1500 ms of each; the
	 * window is 100 ms. The margin is for a loaded machine. */
	if (daemon_ms > 600 || caller_ms > 600)
		TEST_FAIL("a 1.5 s wait took %.0f ms of the daemon's CPU and "
			  "%.0f ms of the caller's",
			  daemon_ms, caller_ms);
	kill(pid, SIGKILL);
	ASSERT_EQ(harness_wait(pid, 5000), 128 + SIGKILL);
	for (int i = 0;
	     i < 100 && integ_info(ctl, "w").state != VRAM_STATE_PAUSED; i++)
		harness_msleep(10);
	ASSERT_EQ(integ_info(ctl, "w").state, VRAM_STATE_PAUSED);
	/* And with polling, a resume and a pause still do what they did,
	 * also from the owner, whose answers its event thread reads. */
	ASSERT_OK(vram_resume(ctl, &sel, 0, NULL));
	integ_fill(a, 4 * MiB, 3);
	ASSERT_OK(vram_pool_pause(w, NULL));
	ASSERT_OK(vram_pool_resume(w, NULL));
	integ_fill(a, 4 * MiB, 4);
	vram_client_close(ctl);
	vram_client_close(c);
	unsetenv("VRAM_SPIN_MS");
	integ_stop();
}

/* The polling window ends with the transition: a client whose pause is
 * answered in a few ms does not go on polling for the rest of a 1 s
 * window (its event thread would hold a core through whatever runs next,
 * the trainer's step after an engine's pause), nor does the daemon. */
TEST(polling_stops_once_the_transition_is_answered)
{
	const char *const extra[] = { "--host-capacity", "256M", "--set",
				      "transition_spin_ms=1000", NULL };
	integ_start_args(extra);
	setenv("VRAM_SPIN_MS", "1000", 1);
	vram_client *c = integ_connect("owner");
	ASSERT_OK(vram_client_start_thread(c));
	vram_pool *w = integ_pool(c, "w", "kv", VRAM_POLICY_DISCARD, 0);
	void *a;
	ASSERT_OK(vram_alloc(w, 4 * MiB, &a));
	ASSERT_OK(vram_pool_pause(w, NULL));
	ASSERT_OK(vram_pool_resume(w, NULL));
	double d0 = integ_proc_cpu_ms(integ_daemon.pid),
	       p0 = integ_proc_cpu_ms(getpid());
	harness_msleep(500);
	double daemon_ms = integ_proc_cpu_ms(integ_daemon.pid) - d0;
	double mine_ms = integ_proc_cpu_ms(getpid()) - p0;
	/* Polling on would take ~500 ms of each in those 500 ms. */
	if (daemon_ms > 150 || mine_ms > 150)
		TEST_FAIL("500 ms after a resume was answered the daemon used "
			  "%.0f ms of CPU and this process %.0f",
			  daemon_ms, mine_ms);
	integ_fill(a, 4 * MiB, 5);
	ASSERT_OK(integ_check(a, 4 * MiB, 5));
	vram_client_close(c);
	unsetenv("VRAM_SPIN_MS");
	integ_stop();
}

struct polling_worker {
	vram_pool *pool;
	void *mem;
	int err;
};

static void *polling_worker_run(void *arg)
{
	struct polling_worker *pw = arg;
	for (int i = 0; i < 20 && !pw->err; i++) {
		integ_fill(pw->mem, 4 * MiB, (uint32_t)i);
		pw->err = vram_pool_pause(pw->pool, NULL);
		if (!pw->err)
			pw->err = vram_pool_resume(pw->pool, NULL);
		if (!pw->err && integ_check(pw->mem, 4 * MiB, (uint32_t)i) != 0)
			pw->err = -EIO;
	}
	return NULL;
}

/* Two threads of one client without an event thread pause and resume
 * their own host pools at once, polling: whichever reads handles both
 * pools' events and answers, the other polls for its answer without the
 * lock, and every restore holds what was written before its pause. */
TEST(polling_callers_share_the_reader)
{
	integ_start("256M");
	setenv("VRAM_SPIN_MS", "200", 1);
	vram_client *c = integ_connect("two");
	struct polling_worker pw[2];
	pthread_t th[2];
	for (int i = 0; i < 2; i++) {
		char name[16];
		snprintf(name, sizeof(name), "p%d", i);
		pw[i].pool =
			integ_pool(c, name, "weights", VRAM_POLICY_HOST, 0);
		ASSERT_OK(vram_alloc(pw[i].pool, 4 * MiB, &pw[i].mem));
		pw[i].err = 0;
	}
	for (int i = 0; i < 2; i++)
		ASSERT_EQ(pthread_create(&th[i], NULL, polling_worker_run,
					 &pw[i]),
			  0);
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		if (pw[i].err)
			TEST_FAIL("thread %d: %s (%s)", i, strerror(-pw[i].err),
				  vram_last_error());
	}
	vram_client_close(c);
	unsetenv("VRAM_SPIN_MS");
	integ_stop();
}

/* Two processes map one pool: both see each other's writes, both unmap on
 * pause, both see the restored data after resume. */
TEST(shared_pool_two_processes)
{
	integ_start("256M");
	vram_client *c = integ_connect("owner");
	vram_pool *w = integ_pool(c, "shared", "weights", VRAM_POLICY_HOST, 0);
	void *a;
	ASSERT_OK(vram_alloc(w, 8 * MiB, &a));
	integ_fill(a, 8 * MiB, 11);
	struct integ_sync s; /* threads start after fork, as above */
	integ_sync_init(&s);
	pid_t pid = fork();
	if (pid == 0) {
		vram_client *m = integ_connect("reader");
		vram_pool *p;
		ASSERT_OK(vram_pool_open(m, "shared", VRAM_OPEN_READONLY, &p));
		ASSERT_OK(vram_client_start_thread(m));
		unsigned char *base = (unsigned char *)vram_pool_base(p);
		if (integ_check(base, 8 * MiB, 11) != 0)
			_exit(3);
		ASSERT_EQ(vram_alloc(p, 4096, &a), -EPERM);
		integ_signal(s.to_parent[1]);
		integ_wait_signal(s.to_child[0]);
		/* After a cycle driven by the parent, same address, same data. */
		if (vram_pool_base(p) != (uintptr_t)base)
			_exit(4);
		if (integ_check(base, 8 * MiB, 11) != 0)
			_exit(5);
		vram_client_close(m);
		_exit(0);
	}
	integ_wait_signal(s.to_parent[0]);
	ASSERT_OK(vram_client_start_thread(c));
	vram_client *ctl = integ_connect("ctl");
	struct vram_selector sel = { .size = sizeof(sel), .tag = "weights" };
	ASSERT_OK(vram_pause(ctl, &sel, 0, NULL));
	ASSERT_UEQ(integ_stats(ctl).used_bytes, 0);
	ASSERT_OK(vram_resume(ctl, &sel, 0, NULL));
	integ_signal(s.to_child[1]);
	ASSERT_EQ(harness_wait(pid, 10000), 0);
	ASSERT_OK(integ_check(a, 8 * MiB, 11));
	vram_client_close(ctl);
	vram_client_close(c);
	integ_stop();
}

/* The owner grows a pool another process maps: the daemon sends the new
 * chunks to that process, which sees the owner's writes in them. */
TEST(growth_reaches_other_mappers)
{
	integ_start("256M");
	vram_client *c = integ_connect("owner");
	vram_pool *w = integ_pool(c, "g", "weights", VRAM_POLICY_DISCARD, 0);
	void *a, *b;
	ASSERT_OK(vram_alloc(w, 32 * MiB, &a));
	uint64_t size0 = vram_pool_size(w);
	struct integ_sync s;
	integ_sync_init(&s);
	pid_t pid = fork();
	if (pid == 0) {
		vram_client *m = integ_connect("reader");
		vram_pool *p;
		ASSERT_OK(vram_pool_open(m, "g", VRAM_OPEN_READONLY, &p));
		ASSERT_OK(vram_client_start_thread(m));
		integ_signal(s.to_parent[1]);
		integ_wait_signal(s.to_child[0]);
		/* The grow event was handled by now: the new part is mapped. */
		for (int i = 0; i < 200 && vram_pool_size(p) == size0; i++)
			harness_msleep(10);
		if (vram_pool_size(p) <= size0)
			_exit(3);
		uint64_t off;
		if (read(s.to_child[0], &off, sizeof(off)) != sizeof(off))
			_exit(4);
		if (integ_check((char *)vram_pool_base(p) + off, 64 * MiB, 41) != 0)
			_exit(5);
		vram_client_close(m);
		_exit(0);
	}
	integ_wait_signal(s.to_parent[0]);
	ASSERT_EQ(integ_info(c, "g").n_mappers, 2);
	ASSERT_OK(vram_alloc(w, 64 * MiB, &b)); /* past the first chunk */
	ASSERT_GT(vram_pool_size(w), size0);
	integ_fill(b, 64 * MiB, 41);
	integ_signal(s.to_child[1]);
	uint64_t off = (uintptr_t)b - vram_pool_base(w);
	ASSERT_EQ(write(s.to_child[1], &off, sizeof(off)), (ssize_t)sizeof(off));
	ASSERT_EQ(harness_wait(pid, 10000), 0);
	vram_client_close(c);
	integ_stop();
}

/* The chunks of pool name as the daemon lists them. */
static uint32_t pause_test_chunks(vram_client *c, const char *name)
{
	struct vram_pool_info *infos = NULL;
	size_t n = 0;
	uint32_t chunks = UINT32_MAX;

	ASSERT_OK(vram_list(c, NULL, sizeof(*infos), &infos, &n));
	for (size_t i = 0; i < n; i++)
		if (strcmp(infos[i].name, name) == 0)
			chunks = infos[i].chunks;
	vram_pool_info_free(infos, n);
	return chunks;
}

/* A discard pool with a range of 5 GiB. */
static vram_pool *pause_test_big_pool(vram_client *c)
{
	struct vram_pool_options o = VRAM_POOL_OPTIONS_INIT;
	vram_pool *p = NULL;

	o.name = "kv";
	o.tag = "kv_cache";
	o.policy = VRAM_POLICY_DISCARD;
	o.reserve_bytes = 5ull << 30;
	ASSERT_OK(vram_pool_create(c, &o, &p));
	return p;
}

/* Chunks follow the allocations (docs/gpu.md, "Chunks sized to the
 * work"): a grow is one chunk, a 2 GiB reserve is not 2 chunks of 1 GiB,
 * and a resume makes the same layout again. chunk_max still splits. */
TEST(a_grow_is_one_chunk_and_a_resume_keeps_the_layout)
{
	integ_start("5G");
	vram_client *c = integ_connect("engine");
	vram_pool *kv = pause_test_big_pool(c);
	void *a;
	ASSERT_OK(vram_pool_reserve(kv, 2048 * MiB));
	ASSERT_EQ(pause_test_chunks(c, "kv"), 1);
	/* 8 MiB past the reserve: one geometric step (1 GiB) more. */
	ASSERT_OK(vram_alloc(kv, 2048 * MiB + 8 * MiB, &a));
	ASSERT_EQ(pause_test_chunks(c, "kv"), 2);
	struct vram_report rep = VRAM_REPORT_INIT;
	struct vram_selector all = { .size = sizeof(all), .all = 1 };
	ASSERT_OK(vram_pause(c, &all, 0, &rep));
	ASSERT_OK(vram_resume(c, &all, 0, &rep));
	ASSERT_EQ(pause_test_chunks(c, "kv"), 2);
	ASSERT_UEQ(vram_pool_size(kv), 3072 * MiB);
	vram_client_close(c);
	integ_stop();

	const char *const extra[] = { "--host-capacity", "5G", "--chunk-max",
				      "512M", NULL };
	integ_start_args(extra);
	c = integ_connect("engine");
	kv = pause_test_big_pool(c);
	ASSERT_OK(vram_pool_reserve(kv, 2048 * MiB));
	ASSERT_EQ(pause_test_chunks(c, "kv"), 4);
	vram_client_close(c);
	integ_stop();
}

/* A host pool mapped by its owner alone is saved in parts: vramd lets go
 * of each chunk as the owner reports it saved (its log says how far), and
 * the content comes back; a pool another process maps too, or a
 * persistent one, is saved whole. */
TEST(save_in_parts_lets_go_of_each_chunk_while_saving)
{
	integ_start_chunked("512M", "8M");
	vram_client *c = integ_connect("engine");
	vram_client *m = integ_connect("mapper");
	vram_pool *w = integ_pool(c, "w", "weights", VRAM_POLICY_HOST, 0);
	vram_pool *s = integ_pool(c, "shared", "weights", VRAM_POLICY_HOST, 0);
	vram_pool *kept =
		integ_pool(c, "kept", "weights", VRAM_POLICY_HOST, VRAM_POOL_PERSIST);
	vram_pool *p[3] = { w, s, kept }, *q;
	void *a[3];
	for (unsigned i = 0; i < 3; i++) {
		ASSERT_OK(vram_alloc(p[i], 64 * MiB, &a[i]));
		integ_fill(a[i], 64 * MiB, 40 + i);
	}
	ASSERT_OK(vram_pool_open(m, "shared", 0, &q));
	ASSERT_OK(vram_client_start_thread(m));
	for (int cycle = 0; cycle < 2; cycle++) {
		struct vram_selector all = { .size = sizeof(all), .all = 1 };
		ASSERT_OK(vram_pause(c, &all, 0, NULL));
		ASSERT_UEQ(integ_stats(c).used_bytes, 0);
		ASSERT_OK(vram_resume(c, &all, 0, NULL));
		for (unsigned i = 0; i < 3; i++)
			ASSERT_OK(integ_check(a[i], 64 * MiB, 40 + i));
		ASSERT_OK(integ_check((void *)vram_pool_base(q), 64 * MiB, 41));
	}
	const char *log = harness_daemon_log(&integ_daemon);
	/* Eight chunks: seven reports, the last with the ack. */
	ASSERT(strstr(log, "pool w: saved 1 of 8 chunk(s); released 1") != NULL);
	ASSERT(strstr(log, "pool w: saved 7 of 8 chunk(s); released 1") != NULL);
	ASSERT(strstr(log, "pool shared: saved") == NULL);
	ASSERT(strstr(log, "pool kept: saved") == NULL);
	ASSERT_OK(vram_pool_drop(c, "kept"));
	vram_client_close(m);
	vram_client_close(c);
	integ_stop();
}
