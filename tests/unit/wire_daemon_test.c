/* SPDX-License-Identifier: Apache-2.0 */
/* vramd as a process: systemd notification, the socket it makes, its
 * settings, and clean shutdown. */
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"
#include "test.h"

static struct harness_daemon d;

TEST(ready_watchdog_stopping)
{
	setenv("WATCHDOG_USEC", "100000", 1);
	ASSERT_OK(harness_daemon_start(&d, NULL));
	unsetenv("WATCHDOG_USEC");
	/* systemd asked for a ping every 100 ms: two arrive within a second. */
	ASSERT_OK(harness_wait_notify(&d, "WATCHDOG=1", 1000));
	ASSERT_OK(harness_wait_notify(&d, "WATCHDOG=1", 1000));
	ASSERT_OK(harness_daemon_kill(&d, SIGTERM));
	ASSERT_OK(harness_wait_notify(&d, "STOPPING=1", 5000));
	ASSERT_EQ(harness_daemon_stop(&d), 0);
}

TEST(socket_mode_and_clean_exit_removes_it)
{
	struct stat st;
	ASSERT_OK(harness_daemon_start(&d, NULL));
	ASSERT_OK(stat(d.socket, &st));
	ASSERT(S_ISSOCK(st.st_mode));
	ASSERT_EQ(st.st_mode & 0777, 0660);
	char sock[300];
	snprintf(sock, sizeof(sock), "%s", d.socket);
	ASSERT_OK(harness_daemon_kill(&d, SIGTERM));
	ASSERT_OK(harness_wait_notify(&d, "STOPPING=1", 5000));
	harness_msleep(200);
	ASSERT_EQ(stat(sock, &st), -1);
	ASSERT_EQ(harness_daemon_stop(&d), 0);
}

/* A second daemon on the same socket must not steal it. */
TEST(second_daemon_refuses_live_socket)
{
	ASSERT_OK(harness_daemon_start(&d, NULL));
	const char *bin = getenv("VRAMD_BIN") ? getenv("VRAMD_BIN") : "build/vramd";
	const char *const argv[] = { bin, "--backend", "host", "--socket", d.socket,
				     NULL };
	pid_t pid = harness_spawn(argv);
	ASSERT(pid > 0);
	ASSERT_EQ(harness_wait(pid, 5000), 1);
	/* The first one still serves. */
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	memcpy(a.sun_path, d.socket, strlen(d.socket) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	ASSERT_OK(connect(fd, (struct sockaddr *)&a, sizeof(a)));
	close(fd);
	ASSERT_EQ(harness_daemon_stop(&d), 0);
}

TEST(bad_settings_are_refused)
{
	const char *bin = getenv("VRAMD_BIN") ? getenv("VRAMD_BIN") : "build/vramd";
	const char *const a1[] = { bin, "--backend", "nope", NULL };
	const char *const a2[] = { bin, "--host-capacity", "12Q", NULL };
	const char *const a3[] = { bin, "--config", "/nonexistent/vramd.conf", NULL };
	ASSERT_EQ(harness_wait(harness_spawn(a1), 5000), 2);
	ASSERT_EQ(harness_wait(harness_spawn(a2), 5000), 2);
	ASSERT_EQ(harness_wait(harness_spawn(a3), 5000), 1);
	const char *const a5[] = { bin, "--set", "chunk_fd_idle_ms=3600001",
				   NULL };
	ASSERT_EQ(harness_wait(harness_spawn(a5), 5000), 2);

	char path[] = "/tmp/vramd-conf-XXXXXX";
	int fd = mkstemp(path);
	ASSERT(fd >= 0);
	const char bad[] = "backend = host\nthis line has no equals sign\n";
	ASSERT_EQ(write(fd, bad, sizeof(bad) - 1), (ssize_t)sizeof(bad) - 1);
	close(fd);
	const char *const a4[] = { bin, "--config", path, NULL };
	ASSERT_EQ(harness_wait(harness_spawn(a4), 5000), 1);
	unlink(path);
}

TEST(config_file_settings_apply)
{
	char path[] = "/tmp/vramd-conf-XXXXXX";
	int fd = mkstemp(path);
	ASSERT(fd >= 0);
	const char conf[] = "# test\nhost_devices = 3\nsocket_mode = 0600\n";
	ASSERT_EQ(write(fd, conf, sizeof(conf) - 1), (ssize_t)sizeof(conf) - 1);
	close(fd);
	const char *const extra[] = { "--config", path, NULL };
	ASSERT_OK(harness_daemon_start(&d, extra));
	struct stat st;
	ASSERT_OK(stat(d.socket, &st));
	ASSERT_EQ(st.st_mode & 0777, 0600);
	ASSERT_EQ(harness_daemon_stop(&d), 0);
	unlink(path);
}

/* vramd lifts its soft fd limit to the hard one: it holds an fd per chunk
 * and backup, and 1024 (the usual soft limit by hand) is too few. */
TEST(fd_limit_raised_to_hard)
{
	struct rlimit rl;
	ASSERT_OK(getrlimit(RLIMIT_NOFILE, &rl));
	if (rl.rlim_max <= 256)
		SKIP("hard fd limit too low to tell");
	struct rlimit low = { .rlim_cur = 256, .rlim_max = rl.rlim_max };
	ASSERT_OK(setrlimit(RLIMIT_NOFILE, &low));
	ASSERT_OK(harness_daemon_start(&d, NULL));
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/limits", (int)d.pid);
	FILE *f = fopen(path, "r");
	ASSERT(f != NULL);
	unsigned long long soft = 0, hard = 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Max open files %llu %llu", &soft, &hard) == 2)
			break;
	fclose(f);
	ASSERT_UEQ(soft, (uint64_t)rl.rlim_max);
	ASSERT_UEQ(hard, (uint64_t)rl.rlim_max);
	ASSERT_EQ(harness_daemon_stop(&d), 0);
}
