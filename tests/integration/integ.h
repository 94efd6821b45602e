/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the integration tests: a real vramd (host backend) on
 * a temporary socket, driven through the public API only. Header-only so
 * that each test binary stays one file plus the harness. */
#ifndef VRAM_INTEG_H
#define VRAM_INTEG_H

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "test.h"
#include "vram.h"

#define MiB (1ull << 20)

static struct harness_daemon integ_daemon;

/* What the daemon held once started, seen by a client of its own: every
 * case must give all of it back by integ_stop(). */
static struct vram_stats integ_base;

static inline struct vram_stats integ_stats(vram_client *c);
static inline void integ_wait_baseline(vram_client *c, uint32_t fds,
				       uint64_t used);

/* Starts vramd with extra_args (NULL-terminated) after the harness's own,
 * and notes what it holds: integ_stop() checks it is back there. */
static inline void integ_start_args(const char *const extra_args[])
{
	vram_client *c = NULL;
	int r = harness_daemon_start(&integ_daemon, extra_args);
	if (r < 0)
		TEST_FAIL("cannot start vramd: %s", strerror(-r));
	r = vram_connect(NULL, "integ-baseline", 0, &c);
	if (r < 0)
		TEST_FAIL("vram_connect: %s (%s)", strerror(-r),
			  vram_last_error());
	integ_base = integ_stats(c);
	vram_client_close(c);
}

/* Starts vramd with a host device of capacity bytes ("64M"...). */
static inline void integ_start(const char *capacity)
{
	const char *const extra[] = { "--host-capacity", capacity,
				      "--ack-timeout-ms", "3000", NULL };
	integ_start_args(extra);
}

/* integ_start() with chunks of at most chunk_max ("8M"...): a pool of
 * many chunks from a small allocation (a restore in parts). */
static inline void integ_start_chunked(const char *capacity,
				       const char *chunk_max)
{
	const char *const extra[] = { "--host-capacity", capacity,
				      "--ack-timeout-ms", "3000",
				      "--chunk-max", chunk_max, NULL };
	integ_start_args(extra);
}

/* Stops the daemon, which must exit cleanly, without the leak check: for
 * a case that leaves something in the daemon on purpose. */
static inline void integ_stop_unchecked(void)
{
	int r = harness_daemon_stop(&integ_daemon);
	if (r != 0)
		TEST_FAIL("vramd did not exit cleanly (%d)\n%s", r,
			  harness_daemon_log(&integ_daemon));
}

/* The end-of-case leak check: once every client of the case is closed and
 * every child reaped, the daemon holds as many fds, bytes and pools as
 * integ_start() found (a closed session is released asynchronously, so
 * this waits for it, up to 3 s). */
static inline void integ_check_baseline(void)
{
	vram_client *c = NULL;
	int r = vram_connect(NULL, "integ-check", 0, &c);
	if (r < 0)
		TEST_FAIL("vram_connect: %s (%s)", strerror(-r),
			  vram_last_error());
	integ_wait_baseline(c, integ_base.open_fds, integ_base.used_bytes);
	struct vram_stats st = integ_stats(c);
	if (st.pools != integ_base.pools ||
	    st.backup_bytes != integ_base.backup_bytes)
		TEST_FAIL(
			"daemon holds %u pools and %llu backup bytes; at start %u, %llu",
			st.pools, (unsigned long long)st.backup_bytes,
			integ_base.pools,
			(unsigned long long)integ_base.backup_bytes);
	vram_client_close(c);
}

/* Checks for leaks (integ_check_baseline), then stops the daemon, which
 * must exit cleanly. */
static inline void integ_stop(void)
{
	integ_check_baseline();
	integ_stop_unchecked();
}

static inline vram_client *integ_connect(const char *name)
{
	vram_client *c = NULL;
	int r = vram_connect(NULL, name, 0, &c);
	if (r < 0)
		TEST_FAIL("vram_connect: %s (%s)", strerror(-r),
			  vram_last_error());
	return c;
}

static inline vram_pool *integ_pool(vram_client *c, const char *name,
				    const char *tag, enum vram_policy policy,
				    unsigned flags)
{
	struct vram_pool_options o = VRAM_POOL_OPTIONS_INIT;
	vram_pool *p = NULL;
	o.name = name;
	o.tag = tag;
	o.policy = policy;
	o.flags = flags;
	o.reserve_bytes = 1ull << 30;
	int r = vram_pool_create(c, &o, &p);
	if (r < 0)
		TEST_FAIL("vram_pool_create %s: %s (%s)", name, strerror(-r),
			  vram_last_error());
	return p;
}

/* A reproducible byte stream, so data can be checked after a cycle. */
static inline void integ_fill(void *buf, size_t len, uint32_t seed)
{
	uint32_t *w = buf, x = seed ? seed : 1;
	for (size_t i = 0; i < len / 4; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		w[i] = x;
	}
}

static inline int integ_check(const void *buf, size_t len, uint32_t seed)
{
	const uint32_t *w = buf;
	uint32_t x = seed ? seed : 1;
	for (size_t i = 0; i < len / 4; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		if (w[i] != x)
			return -1;
	}
	return 0;
}

static inline struct vram_stats integ_stats(vram_client *c)
{
	struct vram_stats st = VRAM_STATS_INIT;
	int r = vram_stats(c, &st);
	if (r < 0)
		TEST_FAIL("vram_stats: %s", strerror(-r));
	return st;
}

static inline struct vram_pool_info integ_info(vram_client *c, const char *name)
{
	struct vram_selector sel = { .size = sizeof(sel), .name = name };
	struct vram_pool_info *infos = NULL, out;
	size_t n = 0;
	int r = vram_list(c, &sel, sizeof(struct vram_pool_info), &infos, &n);
	if (r < 0 || n != 1)
		TEST_FAIL("vram_list %s: %d, %zu pools", name, r, n);
	out = infos[0];
	out.mappers = NULL;
	out.n_mappers = infos[0].n_mappers;
	vram_pool_info_free(infos, n);
	return out;
}

/* Waits until the daemon's fd count and used bytes are back at the
 * baseline (a dead client's session is closed asynchronously). */
static inline void integ_wait_baseline(vram_client *c, uint32_t fds,
				       uint64_t used)
{
	struct vram_stats st = VRAM_STATS_INIT;
	for (int i = 0; i < 300; i++) {
		st = integ_stats(c);
		if (st.open_fds == fds && st.used_bytes == used)
			return;
		harness_msleep(10);
	}
	TEST_FAIL(
		"daemon holds %u fds and %llu bytes; baseline %u fds, %llu bytes",
		st.open_fds, (unsigned long long)st.used_bytes, fds,
		(unsigned long long)used);
}

/* Lets other uids reach the daemon's directory and socket: the daemon,
 * not the file mode, must then refuse what they may not do. */
static inline void integ_open_to_all(void)
{
	ASSERT_OK(chmod(integ_daemon.dir, 0755));
	ASSERT_OK(chmod(integ_daemon.socket, 0666));
}

/* Runs fn in a child as uid/gid; returns its exit code (0: passed, else
 * the step that failed; 250: the child could not become uid/gid). */
static inline int integ_run_as(uid_t uid, gid_t gid, int (*fn)(void))
{
	pid_t pid = fork();
	ASSERT(pid >= 0);
	if (pid == 0) {
		if (setgid(gid) < 0 || setuid(uid) < 0)
			_exit(250);
		_exit(fn());
	}
	return harness_wait(pid, 20000);
}

/* A pipe to tell a child when to go on, and to hear it is ready. */
struct integ_sync {
	int to_child[2], to_parent[2];
};

static inline void integ_sync_init(struct integ_sync *s)
{
	ASSERT_OK(pipe(s->to_child));
	ASSERT_OK(pipe(s->to_parent));
}

static inline void integ_signal(int fd)
{
	char c = 1;
	ASSERT_EQ(write(fd, &c, 1), 1);
}

static inline void integ_wait_signal(int fd)
{
	char c;
	ASSERT_EQ(read(fd, &c, 1), 1);
}

/* ---- raw connections: frames written by hand --------------------------- */

/* A connection to the test's daemon that speaks no protocol (yet); -1
 * when connect fails (non-blocking: a full backlog is a failure). */
static inline int integ_raw_connect(bool nonblock)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(
		AF_UNIX,
		SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
	if (fd < 0)
		return -1;
	if (strlen(integ_daemon.socket) >= sizeof(a.sun_path)) {
		close(fd);
		return -1;
	}
	memcpy(a.sun_path, integ_daemon.socket, strlen(integ_daemon.socket));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Sends one frame of a hand-encoded protobuf Request. */
static inline void integ_raw_send(int fd, const uint8_t *req, size_t len)
{
	uint8_t buf[64];
	uint32_t h[3] = { 0x4d415256u, (uint32_t)len, 0 };
	memcpy(buf, h, sizeof(h)); /* the wire is little-endian, as are we */
	memcpy(buf + sizeof(h), req, len);
	ASSERT_EQ(write(fd, buf, sizeof(h) + len), (ssize_t)(sizeof(h) + len));
}

/* Request{id = 1, hello{version = 1}}. */
static inline void integ_raw_hello(int fd)
{
	static const uint8_t hello[] = { 0x08, 0x01, 0x52, 0x02, 0x08, 0x01 };
	integ_raw_send(fd, hello, sizeof(hello));
}

/* Reads until the daemon closes fd: true when it did within ms. */
static inline bool integ_raw_closed(int fd, int ms)
{
	char buf[65536];
	int64_t end = harness_now_ms() + ms;
	for (;;) {
		int64_t left = end - harness_now_ms();
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			return false;
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n == 0 || (n < 0 && errno == ECONNRESET))
			return true;
	}
}

/* CPU time of the calling thread so far, in ms. */
static inline double integ_thread_cpu_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* CPU time of process pid so far (utime + stime from /proc), in ms. */
static inline double integ_proc_cpu_ms(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		TEST_FAIL("%s: %s", path, strerror(errno));
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* Fields 14 and 15, counted after the ")" that ends the name. */
	const char *p = strrchr(buf, ')');
	unsigned long long ut = 0, st = 0;
	if (!p ||
	    sscanf(p + 2,
		   "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
		   &st) != 2)
		TEST_FAIL("cannot read the CPU times in %s", path);
	return (double)(ut + st) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
}

#endif
