/* SPDX-License-Identifier: Apache-2.0 */
/* The admin lane (daemon/lane.h, docs/security.md): the admin socket's
 * mode and group, who reaches it and who falls back to the main socket,
 * admin_socket = none, and that an admin's request is served ahead of
 * requests that were queued before it. */
#include <grp.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <linux/sockios.h>

#include "integ.h"

/* A gid no account uses: the admin group of these tests. */
#define ADMIN_GID 4321

static const char *ctl(void)
{
	const char *bin = getenv("VRAMCTL_BIN");
	return bin ? bin : "build/vramctl";
}

/* The admin socket of the daemon's default: the socket's path + ".admin". */
static const char *admin_path(void)
{
	static char path[sizeof(integ_daemon.socket) + 8];
	snprintf(path, sizeof(path), "%s.admin", integ_daemon.socket);
	return path;
}

/* How many sessions the daemon's log says came in on the admin lane. */
static int lane_sessions(void)
{
	const char *log = harness_daemon_log(&integ_daemon);
	int n = 0;
	for (const char *p = log; (p = strstr(p, "is on the admin lane")); p++)
		n++;
	return n;
}

/* connect() to path, nothing more: 0 or -errno. */
static int raw_connect(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	size_t n = strlen(path);
	if (n >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	memcpy(a.sun_path, path, n);
	int r = connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ? -errno : 0;
	close(fd);
	return r;
}

/* Becomes uid 65534 with gid as its only group (in a forked child). */
static bool become(gid_t gid)
{
	return setgroups(0, NULL) == 0 && setgid(gid) == 0 &&
	       setuid(65534) == 0;
}


TEST(admin_socket_is_0660_with_the_admin_group)
{
	const char *const extra[] = { "--set", "admin_group=4321", NULL };
	struct stat st;

	integ_start_args(extra);
	ASSERT_OK(lstat(admin_path(), &st));
	ASSERT(S_ISSOCK(st.st_mode));
	ASSERT_EQ(st.st_mode & 07777, 0660);
	ASSERT_EQ(st.st_uid, getuid());
	if (getuid() == 0)
		ASSERT_EQ(st.st_gid, ADMIN_GID);
	integ_stop();
}

TEST(vramctl_and_the_admin_flag_use_the_lane)
{
	char out[8192];
	vram_client *c = NULL;

	integ_start("64M");
	ASSERT_EQ(lane_sessions(), 0);
	/* A plain client (integ_start's own) stays on the main socket. */
	const char *const argv[] = { ctl(), "--socket", integ_daemon.socket,
				     "status", NULL };
	ASSERT_EQ(harness_run_capture(argv, out, sizeof(out)), 0);
	ASSERT(strstr(out, "sessions") != NULL);
	ASSERT_EQ(lane_sessions(), 1);
	ASSERT_OK(vram_connect(NULL, "admin", VRAM_CONNECT_ADMIN, &c));
	ASSERT_OK(vram_ping(c));
	struct vram_stats st = integ_stats(c);
	ASSERT_EQ(st.sessions, 1);
	ASSERT_EQ(lane_sessions(), 2);
	vram_client_close(c);
	/* VRAM_ADMIN_SOCKET names it too; a wrong name falls back. */
	setenv("VRAM_ADMIN_SOCKET", admin_path(), 1);
	ASSERT_OK(vram_connect(NULL, "admin", VRAM_CONNECT_ADMIN, &c));
	ASSERT_OK(vram_ping(c));
	vram_client_close(c);
	ASSERT_EQ(lane_sessions(), 3);
	setenv("VRAM_ADMIN_SOCKET", "/nonexistent/admin.sock", 1);
	ASSERT_OK(vram_connect(NULL, "admin", VRAM_CONNECT_ADMIN, &c));
	ASSERT_OK(vram_ping(c));
	vram_client_close(c);
	ASSERT_EQ(lane_sessions(), 3);
	unsetenv("VRAM_ADMIN_SOCKET");
	integ_stop();
}

TEST(non_admin_falls_back_admin_group_member_gets_the_lane)
{
	if (getuid() != 0)
		SKIP("needs root to act as another uid");
	const char *const extra[] = { "--set", "admin_group=4321", NULL };

	integ_start_args(extra);
	integ_open_to_all();
	/* uid 65534 outside the admin group: the socket's mode keeps it
	 * out, and libvram goes to the main socket instead. */
	pid_t pid = fork();
	if (pid == 0) {
		vram_client *c = NULL;
		if (!become(65534))
			_exit(9);
		if (raw_connect(admin_path()) != -EACCES)
			_exit(2);
		if (vram_connect(NULL, "nobody", VRAM_CONNECT_ADMIN, &c) < 0 ||
		    vram_ping(c) < 0)
			_exit(3);
		vram_client_close(c);
		_exit(0);
	}
	ASSERT_EQ(harness_wait(pid, 10000), 0);
	ASSERT_EQ(lane_sessions(), 0);
	/* The same uid in the admin group reaches the lane. */
	pid = fork();
	if (pid == 0) {
		vram_client *c = NULL;
		if (!become(ADMIN_GID))
			_exit(9);
		if (vram_connect(NULL, "member", VRAM_CONNECT_ADMIN, &c) < 0 ||
		    vram_ping(c) < 0)
			_exit(3);
		vram_client_close(c);
		_exit(0);
	}
	ASSERT_EQ(harness_wait(pid, 10000), 0);
	ASSERT_EQ(lane_sessions(), 1);
	integ_stop();
}

TEST(daemon_refuses_a_non_admin_on_an_opened_up_admin_socket)
{
	if (getuid() != 0)
		SKIP("needs root to act as another uid");
	integ_start("64M");
	integ_open_to_all();
	/* Someone opened the mode up: the daemon still says no. */
	ASSERT_OK(chmod(admin_path(), 0666));
	pid_t pid = fork();
	if (pid == 0) {
		vram_client *c = NULL;
		if (!become(65534))
			_exit(9);
		if (vram_connect(NULL, "nobody", VRAM_CONNECT_ADMIN, &c) == 0)
			_exit(2);
		/* The main socket serves it as before. */
		if (vram_connect(NULL, "nobody", 0, &c) < 0 || vram_ping(c) < 0)
			_exit(3);
		vram_client_close(c);
		_exit(0);
	}
	ASSERT_EQ(harness_wait(pid, 10000), 0);
	ASSERT_EQ(lane_sessions(), 0);
	ASSERT(strstr(harness_daemon_log(&integ_daemon),
		      "the admin socket is for root and the admin group"));
	integ_stop();
}

TEST(admin_socket_none_falls_back_to_the_main_socket)
{
	const char *const extra[] = { "--set", "admin_socket=none", NULL };
	char out[8192];
	struct stat st;
	vram_client *c = NULL;

	integ_start_args(extra);
	ASSERT_EQ(lstat(admin_path(), &st), -1);
	ASSERT_EQ(errno, ENOENT);
	ASSERT_OK(vram_connect(NULL, "admin", VRAM_CONNECT_ADMIN, &c));
	ASSERT_OK(vram_ping(c));
	vram_client_close(c);
	const char *const argv[] = { ctl(), "--socket", integ_daemon.socket,
				     "status", NULL };
	ASSERT_EQ(harness_run_capture(argv, out, sizeof(out)), 0);
	ASSERT(strstr(out, "sessions") != NULL);
	ASSERT_EQ(lane_sessions(), 0);
	integ_stop();
}

TEST(admin_socket_at_a_set_path_is_removed_on_exit)
{
	char path[64], set[96];
	struct stat st;
	vram_client *c = NULL;

	snprintf(path, sizeof(path), "/tmp/vramd-lane-%d.sock", (int)getpid());
	snprintf(set, sizeof(set), "admin_socket=%s", path);
	const char *const extra[] = { "--set", set, NULL };
	integ_start_args(extra);
	ASSERT_OK(lstat(path, &st));
	ASSERT(S_ISSOCK(st.st_mode));
	ASSERT_EQ(lstat(admin_path(), &st), -1);
	/* Not where the default would be: the client is told. */
	setenv("VRAM_ADMIN_SOCKET", path, 1);
	ASSERT_OK(vram_connect(NULL, "admin", VRAM_CONNECT_ADMIN, &c));
	unsetenv("VRAM_ADMIN_SOCKET");
	ASSERT_OK(vram_ping(c));
	vram_client_close(c);
	ASSERT_EQ(lane_sessions(), 1);
	integ_stop();
	ASSERT_EQ(lstat(path, &st), -1);
	ASSERT_EQ(errno, ENOENT);
}

/* ---- priority ------------------------------------------------------------ */

#define BATCH 48

struct creator {
	pthread_t thread;
	vram_client *c;
	int index;
	int r;
};

static void *creator_run(void *arg)
{
	struct creator *w = arg;
	struct vram_pool_options o = VRAM_POOL_OPTIONS_INIT;
	char name[32];
	vram_pool *p = NULL;

	snprintf(name, sizeof(name), "batch-%d", w->index);
	o.name = name;
	o.tag = "batch";
	w->r = vram_pool_create(w->c, &o, &p);
	return NULL;
}

struct asker {
	pthread_t thread;
	vram_client *c;
	struct vram_stats st;
	int r;
};

static void *asker_run(void *arg)
{
	struct asker *a = arg;
	a->st = (struct vram_stats)VRAM_STATS_INIT;
	a->r = vram_stats(a->c, &a->st);
	return NULL;
}

/* Whether the daemon has not read what was sent on fd yet: a Unix
 * socket's SIOCOUTQ counts the bytes its peer has not taken. */
static bool unread(int fd)
{
	int n = 0;
	return ioctl(fd, SIOCOUTQ, &n) == 0 && n > 0;
}

static void wait_unread(int fd)
{
	for (int i = 0; !unread(fd); i++) {
		if (i == 10000)
			TEST_FAIL("the request never reached the socket");
		harness_msleep(1);
	}
}

/* Waits until the daemon is stopped for real: kill() only asks. */
static void wait_stopped(pid_t pid)
{
	char path[64], buf[256];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	for (int i = 0;; i++) {
		FILE *f = fopen(path, "re");
		ASSERT(f != NULL);
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = '\0';
		const char *end = strrchr(buf, ')');
		if (end && end[1] == ' ' && (end[2] == 'T' || end[2] == 't'))
			return;
		if (i == 10000)
			TEST_FAIL("vramd does not stop: %s", buf);
		harness_msleep(1);
	}
}

/* BATCH ordinary clients each send a pool create, then an admin a status
 * call, all while the daemon is stopped, so that they are all waiting
 * when it goes on: the admin's status is read in order, counting the
 * pools made before it. Returns how many of the batch's it saw. */
static unsigned admin_sees_of_batch(unsigned admin_flags)
{
	static struct creator w[BATCH];
	struct asker a = { 0 };

	for (int i = 0; i < BATCH; i++) {
		w[i].index = i;
		w[i].c = integ_connect("batch");
	}
	ASSERT_OK(vram_connect(NULL, "admin", admin_flags, &a.c));
	/* A round trip after the admin's hello: epoll keeps a level-
	 * triggered fd it reported on its ready list, in its old place,
	 * until a later wait finds it idle, and the admin's must not stay
	 * ahead of the batch that way. */
	ASSERT_OK(vram_ping(w[0].c));
	ASSERT_OK(kill(integ_daemon.pid, SIGSTOP));
	wait_stopped(integ_daemon.pid);
	for (int i = 0; i < BATCH; i++) {
		ASSERT_OK(
			pthread_create(&w[i].thread, NULL, creator_run, &w[i]));
		wait_unread(vram_client_fd(w[i].c));
	}
	ASSERT_OK(pthread_create(&a.thread, NULL, asker_run, &a));
	wait_unread(vram_client_fd(a.c));
	ASSERT_OK(kill(integ_daemon.pid, SIGCONT));
	ASSERT_OK(pthread_join(a.thread, NULL));
	for (int i = 0; i < BATCH; i++) {
		ASSERT_OK(pthread_join(w[i].thread, NULL));
		ASSERT_OK(w[i].r);
	}
	ASSERT_OK(a.r);
	ASSERT_GE(a.st.pools, integ_base.pools);
	unsigned seen = a.st.pools - integ_base.pools;
	vram_client_close(a.c);
	for (int i = 0; i < BATCH; i++)
		vram_client_close(w[i].c);
	return seen;
}

TEST(admin_request_is_served_ahead_of_a_queued_batch)
{
	/* Looked at before every ordinary request: the order is then the
	 * lane's alone, not the clock's. */
	const char *const extra[] = { "--set", "admin_lane_check_us=0", NULL };

	integ_start_args(extra);
	unsigned seen = admin_sees_of_batch(VRAM_CONNECT_ADMIN);
	/* At most the one request the loop was in when it looked. */
	ASSERT_LE(seen, 1);
	ASSERT_EQ(lane_sessions(), 1);
	integ_stop();
}

TEST(without_the_lane_the_admin_waits_for_the_batch)
{
	/* The same on the main socket: served in turn, after the pools
	 * of the batch that came before it. What the lane changes. */
	const char *const extra[] = { "--set", "admin_socket=none", NULL };

	integ_start_args(extra);
	unsigned seen = admin_sees_of_batch(VRAM_CONNECT_ADMIN);
	ASSERT_GT(seen, BATCH / 2);
	integ_stop();
}
