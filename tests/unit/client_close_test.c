/* SPDX-License-Identifier: Apache-2.0 */
/* Connecting and closing: closing NULL, twice, in any order, at exit from
 * the registry, after the daemon went away (-EPIPE), while other threads
 * wait, in a forked child, and while other threads call; and no fd left
 * behind, here or in the daemon.
 *
 * Against the real vramd (tests/integration/integ.h, whose integ_stop()
 * checks the daemon got every fd and byte back) wherever the daemon need
 * not misbehave. The scripted fake (client_fake.h) stands in where hello
 * must fail, pings must go unanswered, or a case counts the PoolClose
 * requests libvram sends.
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>

#include "../integration/integ.h"
#include "client_fake.h"

static vram_pool *pool_create(vram_client *c, const char *name, int policy)
{
	struct vram_pool_options o = { .size = sizeof(o),
		.name = name,
		.tag = "t",
		.policy = policy,
		.reserve_bytes = 512 * MiB,
	};
	vram_pool *p = NULL;
	int r = vram_pool_create(c, &o, &p);
	if (r < 0)
		TEST_FAIL("vram_pool_create: %s (%s)", strerror(-r),
			  vram_last_error());
	return p;
}

/* Some line of /proc/self/maps names needle. */
static bool maps_has(const char *needle)
{
	char line[512];
	bool found = false;
	FILE *m = fopen("/proc/self/maps", "r");
	ASSERT(m);
	while (!found && fgets(line, sizeof(line), m))
		found = strstr(line, needle) != NULL;
	fclose(m);
	return found;
}

static int wait_child(pid_t pid)
{
	int status;
	ASSERT_EQ(waitpid(pid, &status, 0), pid);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}

/* Pointers a destructor of this program closes again, after libvram's own
 * exit handlers may have closed them: must be a no-op in any order. */
static vram_client *late_client;
static vram_pool *late_pool;

__attribute__((destructor)) static void late_close(void)
{
	void *ptr;
	if (late_pool && vram_alloc(late_pool, 256, &ptr) != -EINVAL)
		_exit(91);
	vram_pool_close(late_pool);
	vram_client_close(late_client);
}

TEST(close_null_and_non_handles_are_noops)
{
	int not_a_handle[64] = { 0 };

	vram_client_close(NULL);
	vram_pool_close(NULL);
	vram_client_close((vram_client *)not_a_handle);
	vram_pool_close((vram_pool *)not_a_handle);
	ASSERT_EQ(vram_client_fd(NULL), -EINVAL);
	ASSERT_EQ(vram_client_fd((vram_client *)not_a_handle), -EINVAL);
	ASSERT(vram_last_error()[0] != '\0');
	ASSERT(vram_client_backend(NULL) == NULL);
	ASSERT_EQ(vram_pool_base((vram_pool *)not_a_handle), 0);
	ASSERT_EQ(vram_free(NULL, NULL), 0);
	ASSERT_EQ(vram_free((vram_pool *)not_a_handle, not_a_handle), -EINVAL);
	/* Nothing was touched. */
	for (int i = 0; i < 64; i++)
		ASSERT_EQ(not_a_handle[i], 0);
}

TEST(connect_ping_and_double_close)
{
	integ_start("256M");
	int base = harness_count_fds(0);
	vram_client *c = integ_connect("unit");
	ASSERT_STREQ(vram_client_backend(c), "host");
	int fd = vram_client_fd(c);
	ASSERT_GE(fd, 0);
	ASSERT(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	ASSERT(fcntl(fd, F_GETFL) & O_NONBLOCK);
	ASSERT_OK(vram_ping(c));
	ASSERT_OK(vram_ping(c));
	vram_client_close(c);
	vram_client_close(c);
	ASSERT_EQ(vram_ping(c), -EINVAL);
	ASSERT_EQ(vram_client_dispatch(c, 0), -EINVAL);
	ASSERT_EQ(harness_count_fds(0), base);
	integ_stop(); /* the daemon closed the session too */
}

TEST(connect_by_path_by_env_and_failures)
{
	vram_client *c = (vram_client *)1;
	char path[sizeof(integ_daemon.socket)];

	integ_start("256M");
	snprintf(path, sizeof(path), "%s", integ_daemon.socket);
	unsetenv("VRAM_SOCKET");
	ASSERT_OK(vram_connect(path, "by-path", 0, &c));
	ASSERT_OK(vram_ping(c));
	vram_client_close(c);

	setenv("VRAM_SOCKET", path, 1);
	ASSERT_OK(vram_connect(NULL, NULL, 0, &c));
	ASSERT_STREQ(vram_client_backend(c), "host");
	vram_client_close(c);
	integ_stop(); /* the socket is gone with its directory */
	setenv("VRAM_SOCKET", path, 1);

	c = (vram_client *)1;
	ASSERT_EQ(vram_connect(NULL, "x", 0, &c), -ENOENT);
	ASSERT(c == NULL);
	ASSERT(strstr(vram_last_error(), path) != NULL);
	unsetenv("VRAM_SOCKET");
	ASSERT_EQ(vram_connect(path, "x", 0x100, &c), -EINVAL);
	ASSERT_EQ(vram_connect(path, "x", 0, NULL), -EINVAL);
	char longname[300];
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	ASSERT_EQ(vram_connect(path, longname, 0, &c), -EINVAL);
	ASSERT_EQ(vram_connect(longname, "x", 0, &c), -ENAMETOOLONG);
}

/* The fake refuses hello, speaks another version, names a backend this
 * libvram lacks, or hangs up after hello. */
TEST(hello_failures_leave_nothing_behind)
{
	struct fake f;
	vram_client *c = NULL;
	int base = harness_count_fds(0);

	fake_init(&f);
	f.hello_err = EPROTONOSUPPORT;
	fake_start(&f);
	ASSERT_EQ(vram_connect(f.path, "x", 0, &c), -EPROTO);
	ASSERT(c == NULL);
	ASSERT(strstr(vram_last_error(), "protocol") != NULL);
	fake_stop(&f);

	fake_init(&f);
	f.hello_version = 2;
	fake_start(&f);
	ASSERT_EQ(vram_connect(f.path, "x", 0, &c), -EPROTO);
	fake_stop(&f);

	fake_init(&f);
	f.backend = "tpu";
	fake_start(&f);
	ASSERT_EQ(vram_connect(f.path, "x", 0, &c), -ENOENT);
	ASSERT(strstr(vram_last_error(), "tpu") != NULL);
	fake_stop(&f);

	/* The daemon hangs up right after hello: the connect works, the
	 * next call says -EPIPE. */
	fake_init(&f);
	f.close_after_hello = true;
	fake_start(&f);
	c = fake_connect(&f);
	ASSERT_EQ(vram_ping(c), -EPIPE);
	vram_client_close(c);
	fake_stop(&f);
	ASSERT_EQ(harness_count_fds(0), base);
}

/* Counted at the fake: vramd cannot tell a second PoolClose apart. */
TEST(pool_close_sends_close_once)
{
	struct fake f;

	fake_init(&f);
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	vram_pool *p = pool_create(c, "p", VRAM_POLICY_HOST);
	ASSERT_STREQ(vram_pool_name(p), "p");
	vram_pool_close(p);
	vram_pool_close(p);
	ASSERT(vram_pool_name(p) == NULL);
	ASSERT_OK(vram_ping(c)); /* the close went before the ping */
	ASSERT_EQ(f.n_closes, 1);
	/* A dropped pool has nothing to close at the daemon. */
	p = pool_create(c, "r", VRAM_POLICY_DISCARD);
	ASSERT_OK(vram_pool_drop(c, "r"));
	vram_pool_close(p);
	ASSERT_OK(vram_ping(c));
	ASSERT_EQ(f.n_closes, 1);
	/* A new pool of the same name: the old close is long processed. */
	p = pool_create(c, "q", VRAM_POLICY_DISCARD);
	vram_client_close(c);
	vram_pool_close(p); /* closed with its client: no-op */
	FAKE_WAIT(&f, f.n_eof == 1);
	/* The client's close sends nothing: the session's end says it. */
	ASSERT_EQ(f.n_closes, 1);
	fake_stop(&f);
}

TEST(pools_after_their_client_closed_are_dead_handles)
{
	void *ptr;

	integ_start("256M");
	vram_client *c = integ_connect("unit");
	vram_pool *p = pool_create(c, "p", VRAM_POLICY_DISCARD);
	ASSERT_OK(vram_alloc(p, 4096, &ptr));
	uintptr_t base = vram_pool_base(p);
	ASSERT_NE(base, 0);
	vram_client_close(c);
	void *other = (void *)1;
	ASSERT_EQ(vram_alloc(p, 4096, &other), -EINVAL);
	ASSERT(other == NULL);
	ASSERT_EQ(vram_free(p, ptr), -EINVAL);
	ASSERT_EQ(vram_pool_base(p), 0);
	ASSERT_EQ(vram_pool_reserve(p, 1), -EINVAL);
	ASSERT_EQ(vram_pool_pause(p, NULL), -EINVAL);
	vram_pool_close(p);
	/* The range went with the client: the address is free again. */
	void *m =
		mmap((void *)base, 4096, PROT_NONE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	ASSERT(m != MAP_FAILED);
	munmap(m, 4096);
	integ_stop();
}

/* The child leaves without closing anything; libvram's exit handler closes
 * the pool (PoolClose is sent: counted at the fake) and then the client
 * (EOF). */
TEST(exit_without_close_closes_pools_then_clients)
{
	struct fake f;

	fake_init(&f);
	fake_listen(&f);
	pid_t pid = fork();
	ASSERT(pid >= 0);
	if (pid == 0) {
		vram_client *c = fake_connect(&f);
		vram_pool *p = pool_create(c, "p", VRAM_POLICY_HOST);
		void *ptr;
		if (vram_alloc(p, 1 * MiB, &ptr) < 0)
			_exit(2);
		memset(ptr, 1, 1 * MiB);
		if (vram_client_start_thread(c) < 0)
			_exit(3);
		late_client = c; /* closed again by late_close(), after */
		late_pool = p;
		exit(0);
	}
	fake_run(&f);
	ASSERT_EQ(wait_child(pid), 0);
	FAKE_WAIT(&f, f.n_eof == 1);
	ASSERT_EQ(f.n_closes, 1);
	fake_stop(&f);
}

static vram_client *handler_client;
static vram_pool *handler_pool;

static void close_client_first(void)
{
	/* Runs before libvram's handler (registered later, runs earlier):
	 * closes the client and leaves its pool to be a no-op later. */
	vram_client_close(handler_client);
	vram_pool_close(handler_pool);
}

static void close_after_libvram(void)
{
	/* Registered before the connect: runs after libvram's handler. */
	void *ptr;
	if (vram_alloc(handler_pool, 256, &ptr) != -EINVAL)
		_exit(92);
	vram_pool_close(handler_pool);
	vram_client_close(handler_client);
}

/* With the fake: integ_start() connects, which would register libvram's
 * exit handler in this process before the child's own. */
TEST(exit_handlers_in_any_order)
{
	for (int variant = 0; variant < 3; variant++) {
		struct fake f;
		fake_init(&f);
		fake_listen(&f);
		pid_t pid = fork();
		ASSERT(pid >= 0);
		if (pid == 0) {
			if (variant == 1)
				atexit(close_after_libvram);
			handler_client = fake_connect(&f);
			handler_pool = pool_create(handler_client, "p",
						   VRAM_POLICY_DISCARD);
			if (variant == 0)
				atexit(close_client_first);
			if (variant == 2) {
				/* Closed by hand, then the handlers find nothing. */
				vram_pool_close(handler_pool);
				vram_client_close(handler_client);
				atexit(close_after_libvram);
			}
			exit(0);
		}
		fake_run(&f);
		ASSERT_EQ(wait_child(pid), 0);
		FAKE_WAIT(&f, f.n_eof == 1);
		fake_stop(&f);
	}
}

/* vramd dies (SIGKILL): calls say -EPIPE, the mappings stay. */
TEST(epipe_after_the_daemon_leaves_mappings_stay)
{
	struct vram_report rep = VRAM_REPORT_INIT;
	void *a, *b;

	integ_start("256M");
	vram_client *c = integ_connect("unit");
	vram_pool *p = pool_create(c, "p", VRAM_POLICY_HOST);
	ASSERT_OK(vram_alloc(p, 1 * MiB, &a));
	memset(a, 0x77, 1 * MiB);
	uint64_t size = vram_pool_size(p);
	ASSERT_UEQ(size, 64 * MiB);
	ASSERT_OK(harness_daemon_kill(&integ_daemon, SIGKILL));
	ASSERT_EQ(harness_daemon_stop(&integ_daemon), 128 + SIGKILL);

	ASSERT_EQ(vram_ping(c), -EPIPE);
	ASSERT(strstr(vram_last_error(), "vramd") != NULL);
	ASSERT_EQ(vram_client_dispatch(c, 0), -EPIPE);
	ASSERT_EQ(vram_client_dispatch(c, 100), -EPIPE);
	ASSERT_EQ(vram_pool_pause(p, &rep), -EPIPE);
	ASSERT_EQ(rep.pools, 0);
	/* The memory is still there, and so is the arena. */
	ASSERT_EQ(((unsigned char *)a)[12345], 0x77);
	memset(a, 0x78, 1 * MiB);
	ASSERT_OK(vram_alloc(p, 1 * MiB, &b));
	memset(b, 1, 1 * MiB);
	ASSERT_OK(vram_free(p, b));
	/* Growing needs the daemon. */
	ASSERT_EQ(vram_alloc(p, 128 * MiB, &b), -EPIPE);
	ASSERT_EQ(vram_client_start_thread(c), -EPIPE);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_ACTIVE);
	vram_pool_close(p);
	vram_client_close(c);
}

struct blocked {
	vram_client *c;
	int which; /* 0: ping, 1: dispatch(-1) */
	int result;
};

static void *blocked_main(void *arg)
{
	struct blocked *b = arg;
	b->result = b->which ? vram_client_dispatch(b->c, -1) : vram_ping(b->c);
	return NULL;
}

/* Two threads wait for answers that never come (one reads, one sleeps on
 * the condition); closing the client from a third returns both. The fake
 * never answers a ping. */
TEST(close_wakes_threads_that_wait_for_answers)
{
	struct fake f;
	pthread_t t[2];
	struct blocked b[2];

	fake_init(&f);
	f.ignore_pings = true;
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	for (int i = 0; i < 2; i++) {
		b[i].c = c;
		b[i].which = 0;
		b[i].result = 1;
		ASSERT_OK(pthread_create(&t[i], NULL, blocked_main, &b[i]));
	}
	FAKE_WAIT(&f, f.n_pings == 2);
	vram_client_close(c);
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		ASSERT_EQ(b[i].result, -EPIPE);
	}
	fake_stop(&f);
}

/* A thread in vram_client_dispatch(c, -1) holds the reader role in poll();
 * closing the client wakes it. */
TEST(close_wakes_a_dispatch_that_waits_forever)
{
	pthread_t t;
	struct blocked b = { .which = 1, .result = 1 };

	integ_start("256M");
	b.c = integ_connect("unit");
	ASSERT_OK(pthread_create(&t, NULL, blocked_main, &b));
	usleep(50000);
	ASSERT_EQ(b.result, 1); /* still waiting */
	vram_client_close(b.c);
	pthread_join(t, NULL);
	ASSERT_EQ(b.result, -EPIPE);
	integ_stop();
}

TEST(event_thread_starts_once_and_stops_at_close)
{
	integ_start("256M");
	vram_client *c = integ_connect("unit");
	ASSERT_OK(vram_client_start_thread(c));
	ASSERT_EQ(vram_client_start_thread(c), -EALREADY);
	/* With the thread reading, calls still get their answers, and a
	 * dispatch finds the reader role taken. */
	ASSERT_OK(vram_ping(c));
	ASSERT_EQ(vram_client_dispatch(c, 0), 0);
	/* Close joins the thread: one that never stopped would hang here
	 * until the runner's timeout fails the case (no clock is read: a
	 * timed assertion fails on a loaded machine). */
	vram_client_close(c);
	integ_stop(); /* the session ended at the daemon */
}

/* A forked child inherits the parent's client: it must not use it, and its
 * exit must not close the parent's pools or its connection. The pool does
 * not persist, so a PoolClose from the child would drop it at vramd. */
TEST(fork_child_never_touches_the_parents_session)
{
	void *ptr;

	integ_start("256M");
	vram_client *c = integ_connect("unit");
	vram_pool *p = pool_create(c, "p", VRAM_POLICY_HOST);
	ASSERT_OK(vram_alloc(p, 4096, &ptr));
	pid_t pid = fork();
	ASSERT(pid >= 0);
	if (pid == 0) {
		if (vram_ping(c) != -EPIPE)
			_exit(2);
		if (vram_alloc(p, 4096, &ptr) != -EPIPE)
			_exit(3);
		if (vram_client_dispatch(c, 0) != -EPIPE)
			_exit(4);
		/* The inherited socket was closed in the child at once. */
		vram_pool_close(p);
		vram_client_close(c);
		exit(0);
	}
	ASSERT_EQ(wait_child(pid), 0);
	ASSERT_OK(vram_ping(c));
	ASSERT_EQ(integ_stats(c).pools, 1);
	ASSERT_EQ(integ_info(c, "p").n_mappers, 1);
	ASSERT_OK(vram_free(p, ptr));
	vram_pool_close(p);
	ASSERT_OK(vram_ping(c));
	ASSERT_EQ(integ_stats(c).pools, 0);
	vram_client_close(c);
	integ_stop();
}

struct pinger {
	pthread_t t;
	vram_client *c;
	int *stop; /* atomic */
	int err;
	unsigned calls;
};

static void *pinger_run(void *arg)
{
	struct pinger *pg = arg;
	while (!__atomic_load_n(pg->stop, __ATOMIC_RELAXED) && pg->err == 0) {
		pg->err = vram_ping(pg->c);
		pg->calls++;
	}
	return NULL;
}

/* Calls on their own clients from many threads share the registry
 * (libvram/registry.c); clients opened and closed meanwhile, which take
 * it alone, still get their turn, and every call still answers. */
TEST(connects_and_closes_while_other_threads_call)
{
	struct pinger pg[8];
	int stop = 0;

	integ_start("64M");
	for (int i = 0; i < 8; i++) {
		pg[i] = (struct pinger){ .c = integ_connect("pinger"),
					 .stop = &stop };
		ASSERT_EQ(pthread_create(&pg[i].t, NULL, pinger_run, &pg[i]),
			  0);
	}
	for (int k = 0; k < 300; k++) {
		vram_client *c = integ_connect("passing");
		ASSERT_OK(vram_ping(c));
		vram_client_close(c);
		ASSERT_EQ(vram_ping(c), -EINVAL); /* a closed handle */
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < 8; i++) {
		pthread_join(pg[i].t, NULL);
		if (pg[i].err)
			TEST_FAIL("pinger %d: %s", i, strerror(-pg[i].err));
		ASSERT_GT(pg[i].calls, 0);
		vram_client_close(pg[i].c);
	}
	integ_stop();
}

TEST(no_fd_or_mapping_left_after_a_full_cycle)
{
	void *ptr;

	integ_start("256M");
	int base = harness_count_fds(0);
	vram_client *c = integ_connect("unit");
	ASSERT_OK(vram_client_start_thread(c));
	vram_pool *p = pool_create(c, "p", VRAM_POLICY_HOST);
	vram_pool *q = pool_create(c, "q", VRAM_POLICY_DISCARD);
	ASSERT_OK(vram_alloc(p, 100 * MiB, &ptr));
	ASSERT_OK(vram_alloc(q, 1, &ptr));
	ASSERT_OK(vram_pool_pause(p, NULL));
	ASSERT_OK(vram_pool_resume(p, NULL));
	vram_pool_close(p);
	vram_client_close(c);
	ASSERT_EQ(harness_count_fds(0), base);
	ASSERT(!maps_has("vramd-chunk") && !maps_has("vramd-backup"));
	integ_stop();
}
