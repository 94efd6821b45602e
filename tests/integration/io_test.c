/* SPDX-License-Identifier: Apache-2.0 */
/* The reading threads (daemon/io.h), which read the sessions that only
 * ping: pings answered on them keep their place among a session's other
 * answers, answers left queued behind a
 * full socket come out whole and in order, many clients pinging and
 * working at once, clients that go away mid-flood, bad frames read on a
 * thread, io_threads, and how long the reading threads and the callers
 * poll (io_poll_us, VRAM_CALL_SPIN_US). */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>

#include "integ.h"

/* Request{id, ping{}}: 0x08 <varint id> 0xaa 0x01 0x00. */
static size_t raw_ping(uint8_t *out, uint32_t id)
{
	size_t n = 0;
	out[n++] = 0x08;
	do {
		uint8_t b = id & 0x7f;
		id >>= 7;
		out[n++] = b | (id ? 0x80 : 0);
	} while (id);
	out[n++] = 0xaa;
	out[n++] = 0x01;
	out[n++] = 0x00;
	return n;
}

/* Request{id, stats{}}: answered on the loop, not on a thread. */
static size_t raw_stats(uint8_t *out, uint32_t id)
{
	size_t n = raw_ping(out, id);
	out[n - 3] = 0x9a; /* field 19 instead of 21 */
	return n;
}

/* Appends one frame of payload p to buf at *off. */
static void raw_frame(uint8_t *buf, size_t *off, const uint8_t *p, size_t len)
{
	uint32_t h[3] = { 0x4d415256u, (uint32_t)len, 0 };
	memcpy(buf + *off, h, sizeof(h));
	memcpy(buf + *off + sizeof(h), p, len);
	*off += sizeof(h) + len;
}

static uint64_t varint(const uint8_t *p, size_t len, size_t *at)
{
	uint64_t v = 0;
	for (unsigned shift = 0; *at < len && shift < 64; shift += 7) {
		uint8_t b = p[(*at)++];
		v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80))
			break;
	}
	return v;
}

/* Reads answers from fd until n have come (or 20 s passed), checking
 * that each is a Response without error whose id is the next of ids.
 * Returns how many came in order. */
static unsigned raw_read_answers(int fd, const uint32_t *ids, unsigned n)
{
	size_t cap = 1 << 20, len = 0;
	uint8_t *buf = malloc(cap);
	unsigned got = 0;
	int64_t end = harness_now_ms() + 20000;

	ASSERT(buf != NULL);
	while (got < n && harness_now_ms() < end) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 1000) <= 0)
			continue;
		ssize_t r = read(fd, buf + len, cap - len);
		if (r <= 0)
			break;
		len += (size_t)r;
		size_t at = 0;
		while (len - at >= 12) {
			uint32_t h[3];
			memcpy(h, buf + at, sizeof(h));
			ASSERT_EQ(h[0], 0x4d415256u);
			if (len - at < 12 + h[1])
				break;
			const uint8_t *m = buf + at + 12;
			size_t k = 0;
			/* ServerMsg{response = 1 {id = 1, err = 2 ...}} */
			ASSERT_EQ(m[k++], 0x0a);
			uint64_t inner = varint(m, h[1], &k);
			ASSERT(k + inner <= h[1]);
			ASSERT_EQ(m[k++], 0x08);
			uint64_t id = varint(m, h[1], &k);
			if (id != ids[got])
				TEST_FAIL("answer %u: id %llu, want %u", got,
					  (unsigned long long)id, ids[got]);
			if (k < h[1] && m[k] == 0x10)
				TEST_FAIL("answer %u (id %u) carries an error",
					  got, ids[got]);
			got++;
			at += 12 + h[1];
		}
		memmove(buf, buf + at, len - at);
		len -= at;
	}
	free(buf);
	return got;
}

/* Writes all of buf to the blocking fd. */
static void raw_write_all(int fd, const uint8_t *buf, size_t len)
{
	while (len) {
		ssize_t w = write(fd, buf, len);
		ASSERT(w > 0);
		buf += w;
		len -= (size_t)w;
	}
}

struct writer {
	pthread_t t;
	int fd;
	const uint8_t *buf;
	size_t len;
};

static void *writer_run(void *arg)
{
	struct writer *w = arg;
	raw_write_all(w->fd, w->buf, w->len);
	return NULL;
}

/* n requests in one stream: pings, with a stats every few, ids from 2.
 * The answers must come back in the order sent: a ping behind a request
 * the loop handles may not overtake it on its thread. Written on a
 * thread of its own while the answers are read, so that neither side's
 * socket buffer decides what the case sees. */
static void requests_answered_in_order(unsigned n, unsigned stats_every)
{
	uint8_t *buf = malloc((size_t)n * 24);
	uint32_t *ids = malloc(n * sizeof(*ids));
	size_t off = 0;

	ASSERT(buf != NULL && ids != NULL);
	for (unsigned i = 0; i < n; i++) {
		uint8_t p[16];
		ids[i] = 2 + i;
		size_t len = stats_every && i % stats_every == stats_every - 1 ?
				     raw_stats(p, ids[i]) :
				     raw_ping(p, ids[i]);
		raw_frame(buf, &off, p, len);
	}
	int fd = integ_raw_connect(false);
	ASSERT(fd >= 0);
	integ_raw_hello(fd);
	uint32_t hello_id = 1;
	ASSERT_EQ(raw_read_answers(fd, &hello_id, 1), 1);
	struct writer w = { .fd = fd, .buf = buf, .len = off };
	ASSERT_EQ(pthread_create(&w.t, NULL, writer_run, &w), 0);
	ASSERT_EQ(raw_read_answers(fd, ids, n), n);
	pthread_join(w.t, NULL);
	close(fd);
	free(buf);
	free(ids);
}

TEST(pings_keep_their_place_among_other_answers)
{
	const char *const extra[] = { "--set", "io_threads=2", NULL };
	integ_start_args(extra);
	/* A stats every third request (the session stays on the loop),
	 * every 40th (16 pings in a row send it to its thread, the stats
	 * brings it back, 150 times), and one in a thousand. */
	requests_answered_in_order(6000, 3);
	requests_answered_in_order(6000, 40);
	requests_answered_in_order(6000, 1000);
	integ_stop();
}

/* 200,000 pings written before any answer is read: the answers (some
 * 3.6 MB) fill the socket, so the threads' answers go out in part and
 * the rest wait on the loop's queue. All must come, once, in order. */
TEST(ping_answers_queued_behind_a_full_socket)
{
	const unsigned n = 200000;
	uint8_t *buf = malloc((size_t)n * 24);
	uint32_t *ids = malloc(n * sizeof(*ids));
	size_t off = 0;

	integ_start("64M");
	ASSERT(buf != NULL && ids != NULL);
	for (unsigned i = 0; i < n; i++) {
		uint8_t p[16];
		ids[i] = 2 + i;
		raw_frame(buf, &off, p, raw_ping(p, ids[i]));
	}
	int fd = integ_raw_connect(false);
	ASSERT(fd >= 0);
	integ_raw_hello(fd);
	uint32_t hello_id = 1;
	ASSERT_EQ(raw_read_answers(fd, &hello_id, 1), 1);
	raw_write_all(fd, buf, off);
	/* Let the daemon answer all it can into the full socket first. */
	usleep(300 * 1000);
	ASSERT_EQ(raw_read_answers(fd, ids, n), n);
	close(fd);
	free(buf);
	free(ids);
	vram_client *c = integ_connect("after");
	ASSERT_OK(vram_ping(c));
	vram_client_close(c);
	integ_stop();
}

struct worker {
	pthread_t t;
	int index;
	int err;
};

/* One client: pings between the steps of a pool's life, with the
 * content checked across a pause and resume. */
static void *worker_run(void *arg)
{
	struct worker *w = arg;
	char name[32];
	vram_client *c = NULL;

	snprintf(name, sizeof(name), "io-%d", w->index);
	w->err = vram_connect(NULL, name, 0, &c);
	for (int round = 0; round < 20 && w->err == 0; round++) {
		struct vram_pool_options o = VRAM_POOL_OPTIONS_INIT;
		vram_pool *p = NULL;
		void *a = NULL;
		o.name = name;
		o.tag = "io";
		o.policy = VRAM_POLICY_HOST;
		o.reserve_bytes = 8 * MiB;
		for (int k = 0; k < 50 && w->err == 0; k++)
			w->err = vram_ping(c);
		if (w->err == 0)
			w->err = vram_pool_create(c, &o, &p);
		if (w->err == 0)
			w->err = vram_alloc(p, MiB, &a);
		if (w->err == 0)
			memset(a, w->index + round, MiB);
		struct vram_report rep = VRAM_REPORT_INIT;
		struct vram_selector sel = { .size = sizeof(sel),
					     .name = name };
		if (w->err == 0)
			w->err = vram_ping(c);
		if (w->err == 0)
			w->err = vram_pause(c, &sel, 0, &rep);
		if (w->err == 0)
			w->err = vram_ping(c);
		if (w->err == 0)
			w->err = vram_resume(c, &sel, 0, &rep);
		if (w->err == 0 && ((unsigned char *)a)[MiB - 1] !=
					   (unsigned char)(w->index + round))
			w->err = -EIO;
		if (p)
			vram_pool_close(p);
	}
	if (c)
		vram_client_close(c);
	return NULL;
}

TEST(many_clients_ping_and_work_at_once)
{
	const char *const extra[] = { "--host-capacity", "512M", "--set",
				      "io_threads=3", NULL };
	struct worker w[24];

	integ_start_args(extra);
	for (int i = 0; i < 24; i++) {
		w[i] = (struct worker){ .index = i };
		ASSERT_EQ(pthread_create(&w[i].t, NULL, worker_run, &w[i]), 0);
	}
	for (int i = 0; i < 24; i++) {
		pthread_join(w[i].t, NULL);
		if (w[i].err)
			TEST_FAIL("client %d: %s (%s)", i, strerror(-w[i].err),
				  vram_last_error());
	}
	integ_stop();
}

/* Clients that flood pings and close without reading, or after reading
 * part: the daemon closes each once and holds nothing after. */
TEST(clients_gone_mid_flood_leave_nothing)
{
	const unsigned n = 20000;
	uint8_t *buf = malloc((size_t)n * 24);
	size_t off = 0;

	integ_start("64M");
	ASSERT(buf != NULL);
	for (unsigned i = 0; i < n; i++) {
		uint8_t p[16];
		raw_frame(buf, &off, p, raw_ping(p, 2 + i));
	}
	for (int k = 0; k < 16; k++) {
		int fd = integ_raw_connect(true);
		ASSERT(fd >= 0);
		integ_raw_hello(fd);
		/* What the socket takes without blocking. */
		(void)!write(fd, buf, off);
		if (k % 2) {
			char sink[4096];
			usleep(1000);
			(void)!read(fd, sink, sizeof(sink));
		}
		if (k % 4 == 3)
			shutdown(fd, SHUT_WR);
		close(fd);
	}
	free(buf);
	vram_client *c = integ_connect("after");
	ASSERT_OK(vram_ping(c));
	vram_client_close(c);
	/* integ_stop waits for the daemon to hold no more than it did. */
	integ_stop();
}

/* A client that gives its memory back by closing, then a resume from
 * another: the resume must find the memory free, though the close is
 * read on one thread and the resume on another (server.c's hang-up set).
 * The device holds one of the two pools at a time; many rounds, since
 * the order the threads hand things to the loop in is a race. */
TEST(resume_after_another_clients_close_finds_its_memory)
{
	const char *const extra[] = { "--host-capacity", "32M", "--set",
				      "io_threads=4", NULL };
	integ_start_args(extra);
	vram_client *engine = integ_connect("engine");
	vram_pool *kv =
		integ_pool(engine, "kv", "kv_cache", VRAM_POLICY_DISCARD, 0);
	ASSERT_OK(vram_pool_reserve(kv, 24 * MiB));
	struct vram_selector sel = { .size = sizeof(sel), .tag = "kv_cache" };
	for (int round = 0; round < 200; round++) {
		struct vram_report rep = VRAM_REPORT_INIT;
		ASSERT_OK(vram_pause(engine, &sel, 0, &rep));
		vram_client *trainer = integ_connect("trainer");
		vram_pool *hog = integ_pool(trainer, "hog", "train",
					    VRAM_POLICY_DISCARD, 0);
		ASSERT_OK(vram_pool_reserve(hog, 24 * MiB));
		/* Pings, so that the trainer goes to its reading thread
		 * (16 in a row: server.c) and its close is read there. */
		for (int k = 0; k < 20; k++)
			ASSERT_OK(vram_ping(trainer));
		vram_client_close(trainer); /* its pool goes with it */
		int r = vram_resume(engine, &sel, 0, &rep);
		if (r < 0)
			TEST_FAIL("round %d: resume after the close: %s (%s)",
				  round, strerror(-r), vram_last_error());
	}
	vram_pool_close(kv);
	vram_client_close(engine);
	integ_stop();
}

/* Sends one frame of payload p with fd attached (SCM_RIGHTS). */
static void raw_send_with_fd(int fd, const uint8_t *p, size_t len, int extra)
{
	uint8_t hdr[12];
	uint32_t h[3] = { 0x4d415256u, (uint32_t)len, 1 };
	struct iovec v[2] = { { hdr, sizeof(hdr) }, { (void *)p, len } };
	union {
		struct cmsghdr h;
		char c[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct msghdr m = { .msg_iov = v,
			    .msg_iovlen = 2,
			    .msg_control = ctl.c,
			    .msg_controllen = sizeof(ctl.c) };

	memcpy(hdr, h, sizeof(hdr));
	memset(&ctl, 0, sizeof(ctl));
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &extra, sizeof(int));
	ASSERT_EQ(sendmsg(fd, &m, MSG_NOSIGNAL), (ssize_t)(sizeof(hdr) + len));
}

/* What a reading thread finds wrong closes that session, with the
 * reason in the log, as the loop's own reading does; the daemon serves
 * on and holds nothing of it. Each session first pings 20 times, so that
 * the bad frame is read on its thread. */
TEST(bad_frames_read_on_a_thread_close_that_session)
{
	static const uint8_t undecodable[] = { 0xff, 0xff, 0xff };
	static const uint8_t bad_magic[] = { 'V', 'R', 'A', 'X', 1, 0, 0, 0,
					     0, 0, 0, 0, 0 };
	static const char *const why[] = { "1 unexpected fds",
					   "undecodable request",
					   "malformed frame" };
	uint32_t ids[20];

	integ_start("64M");
	for (int k = 0; k < 3; k++) {
		int fd = integ_raw_connect(false);
		ASSERT(fd >= 0);
		integ_raw_hello(fd);
		uint8_t buf[20 * 24];
		size_t off = 0;
		ids[0] = 1;
		ASSERT_EQ(raw_read_answers(fd, ids, 1), 1);
		for (unsigned i = 0; i < 20; i++) {
			uint8_t p[16];
			ids[i] = 2 + i;
			raw_frame(buf, &off, p, raw_ping(p, ids[i]));
		}
		raw_write_all(fd, buf, off);
		ASSERT_EQ(raw_read_answers(fd, ids, 20), 20);
		if (k == 0) {
			uint8_t p[16];
			int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
			ASSERT(null >= 0);
			raw_send_with_fd(fd, p, raw_ping(p, 30), null);
			close(null);
		} else if (k == 1) {
			off = 0;
			raw_frame(buf, &off, undecodable, sizeof(undecodable));
			raw_write_all(fd, buf, off);
		} else {
			raw_write_all(fd, bad_magic, sizeof(bad_magic));
		}
		ASSERT(integ_raw_closed(fd, 5000));
		close(fd);
		const char *log = harness_daemon_log(&integ_daemon);
		if (!strstr(log, why[k]))
			TEST_FAIL("no \"%s\" in the log", why[k]);
	}
	ASSERT(strstr(harness_daemon_log(&integ_daemon),
		      "only pings: read on a reading thread") != NULL);
	vram_client *c = integ_connect("after");
	ASSERT_OK(vram_ping(c));
	vram_client_close(c);
	integ_stop();
}

/* How many of pid's threads are named vramd-io<k>. */
static unsigned reading_threads(pid_t pid)
{
	char path[64];
	struct dirent *e;
	unsigned n = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	ASSERT(d != NULL);
	while ((e = readdir(d))) {
		char comm[32] = "";
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.16s/comm",
			 (int)pid, e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f) &&
		    strncmp(comm, "vramd-io", 8) == 0)
			n++;
		fclose(f);
	}
	closedir(d);
	return n;
}

TEST(io_threads_sets_the_reading_threads)
{
	const char *const three[] = { "--set", "io_threads=3", NULL };
	integ_start_args(three);
	ASSERT_EQ(reading_threads(integ_daemon.pid), 3);
	ASSERT(strstr(harness_daemon_log(&integ_daemon),
		      "3 reading thread(s)") != NULL);
	integ_stop();

	/* 0, the default: a quarter of the CPUs, 1 to 4. */
	const char *const dflt[] = { "--set", "io_threads=0", NULL };
	integ_start_args(dflt);
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned want = cpus / 4 < 1 ? 1 :
			cpus / 4 > 4 ? 4 :
				       (unsigned)(cpus / 4);
	ASSERT_EQ(reading_threads(integ_daemon.pid), want);
	integ_stop();

	/* Out of range: refused with the key named, the daemon not up. */
	const char *const bad[] = { "io_threads=65", "io_poll_us=1000001" };
	for (unsigned i = 0; i < 2; i++) {
		const char *bin = getenv("VRAMD_BIN");
		char cmd[512], out[512] = "";
		snprintf(cmd, sizeof(cmd),
			 "%s --backend host --socket /nonexistent/vramd.sock "
			 "--set %s 2>&1",
			 bin && *bin ? bin : "build/vramd", bad[i]);
		FILE *f = popen(cmd, "r");
		ASSERT(f != NULL);
		size_t n = fread(out, 1, sizeof(out) - 1, f);
		out[n] = '\0';
		int status = pclose(f);
		ASSERT(WIFEXITED(status) && WEXITSTATUS(status) != 0);
		char key[16];
		snprintf(key, sizeof(key), "%.*s",
			 (int)(strchr(bad[i], '=') - bad[i]), bad[i]);
		if (!strstr(out, key))
			TEST_FAIL("%s said: %s", bad[i], out);
	}
}

/* The daemon's CPU over ms of quiet after pinger's 40 pings, which put
 * its session on a reading thread. */
static double quiet_cpu_ms(int ms)
{
	vram_client *c = integ_connect("pinger");
	for (int i = 0; i < 40; i++)
		ASSERT_OK(vram_ping(c));
	double d0 = integ_proc_cpu_ms(integ_daemon.pid);
	harness_msleep(ms);
	double used = integ_proc_cpu_ms(integ_daemon.pid) - d0;
	vram_client_close(c);
	return used;
}

/* io_poll_us: a reading thread polls for its window after the last frame
 * it read, then sleeps. A client that pinged and went quiet costs the
 * daemon the window's CPU, not the quiet's; with no window, nothing. */
TEST(reading_threads_poll_only_for_their_window)
{
	const char *const window[] = { "--set", "io_threads=1", "--set",
				       "io_poll_us=150000", NULL };
	integ_start_args(window);
	ASSERT(strstr(harness_daemon_log(&integ_daemon),
		      "polling 150000 us after a frame") != NULL);
	double polled = quiet_cpu_ms(800);
	integ_stop();
	/* ~150 ms; polling through the quiet would be ~800. The margins
	 * are for a loaded machine and the clock tick (10 ms). */
	if (polled < 20 || polled > 500)
		TEST_FAIL("800 ms of quiet after a 150 ms window took %.0f ms "
			  "of the daemon's CPU",
			  polled);

	const char *const none[] = { "--set", "io_threads=1", "--set",
				     "io_poll_us=0", NULL };
	integ_start_args(none);
	double slept = quiet_cpu_ms(800);
	integ_stop();
	if (slept > 60)
		TEST_FAIL("800 ms of quiet with no window took %.0f ms of the "
			  "daemon's CPU",
			  slept);
}

struct stalled_call {
	vram_client *c;
	int r;
	double cpu_ms; /* the calling thread's, over the call */
};

static void *stalled_call_run(void *arg)
{
	struct stalled_call *sc = arg;
	double t0 = integ_thread_cpu_ms();

	sc->r = vram_ping(sc->c);
	sc->cpu_ms = integ_thread_cpu_ms() - t0;
	return NULL;
}

/* A ping that the daemon (stopped) answers 700 ms late, with a 150 ms
 * window, on a client whose event thread reads (event_thread) or whose
 * caller does: it is still answered, and costs the caller the window's
 * CPU, not the wait's. Returns the caller's CPU ms through cpu_ms and the
 * process's through proc_ms. */
static int stalled_ping_measure(bool event_thread, double *cpu_ms,
				double *proc_ms)
{
	struct stalled_call sc = { .r = -1 };
	pthread_t t;

	integ_start("64M");
	setenv("VRAM_CALL_SPIN_US", "150000", 1);
	sc.c = integ_connect("caller");
	unsetenv("VRAM_CALL_SPIN_US");
	if ((event_thread && vram_client_start_thread(sc.c) != 0) ||
	    vram_ping(sc.c) != 0)
		goto out;
	/* That ping's window, and the event thread's poll in it, end before
	 * the measured call. */
	harness_msleep(300);
	double p0 = integ_proc_cpu_ms(getpid());
	if (kill(integ_daemon.pid, SIGSTOP) != 0)
		goto out;
	if (pthread_create(&t, NULL, stalled_call_run, &sc) == 0) {
		harness_msleep(700);
		kill(integ_daemon.pid, SIGCONT);
		pthread_join(t, NULL);
	} else {
		kill(integ_daemon.pid, SIGCONT);
	}
	*proc_ms = integ_proc_cpu_ms(getpid()) - p0;
	*cpu_ms = sc.cpu_ms;
out:
	vram_client_close(sc.c);
	integ_stop();
	return sc.r;
}

/* VRAM_CALL_SPIN_US: a caller that reads its own answer reads again
 * without sleeping for its window, then sleeps in poll(). */
TEST(calls_poll_only_for_their_window)
{
	double cpu_ms, proc_ms;

	ASSERT_OK(stalled_ping_measure(false, &cpu_ms, &proc_ms));
	if (cpu_ms < 15 || cpu_ms > 450)
		TEST_FAIL(
			"a ping answered 700 ms late with a 150 ms window took "
			"%.1f ms of the caller's CPU",
			cpu_ms);
}

/* With the event thread reading, the caller looks for its answer without
 * the condition variable for the window, then sleeps on it; the event
 * thread polls for the same window. */
TEST(calls_with_the_event_thread_poll_only_for_their_window)
{
	double cpu_ms, proc_ms;

	ASSERT_OK(stalled_ping_measure(true, &cpu_ms, &proc_ms));
	if (cpu_ms < 15 || cpu_ms > 450)
		TEST_FAIL("with the event thread reading, a ping answered 700 "
			  "ms late with a 150 ms window took %.1f ms of the "
			  "caller's CPU",
			  cpu_ms);
	if (proc_ms > 900)
		TEST_FAIL("the caller and the event thread took %.1f ms of CPU "
			  "over a 700 ms wait with a 150 ms window",
			  proc_ms);
}
