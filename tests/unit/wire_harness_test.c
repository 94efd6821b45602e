/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of tests/harness itself: spawning and waiting, capturing output,
 * counting fds, and starting and stopping a daemon. A stand-in daemon (a
 * Python script speaking sd_notify) lets the daemon half be tested without
 * vramd; those cases skip on a machine without python3.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/harness.h"
#include "test.h"

TEST(spawn_and_wait_status)
{
	const char *const ok[] = { "true", NULL };
	const char *const three[] = { "/bin/sh", "-c", "exit 3", NULL };
	const char *const term[] = { "/bin/sh", "-c", "kill -TERM $$", NULL };

	ASSERT_EQ(harness_wait(harness_spawn(ok), 5000), 0);
	ASSERT_EQ(harness_wait(harness_spawn(three), 5000), 3);
	ASSERT_EQ(harness_wait(harness_spawn(term), 5000), 128 + SIGTERM);
}

TEST(spawn_missing_program)
{
	const char *const missing[] = { "/nonexistent/program", NULL };
	const char *const unnamed[] = { NULL };
	int base = harness_count_fds(0);

	ASSERT_EQ(harness_spawn(missing), -ENOENT);
	ASSERT_EQ(harness_spawn(unnamed), -EINVAL);
	/* The failed child was reaped and the error pipe closed. */
	ASSERT_EQ(waitpid(-1, NULL, WNOHANG), -1);
	ASSERT_EQ(errno, ECHILD);
	ASSERT_EQ(harness_wait(-1, 0), -ECHILD);
	ASSERT_EQ(harness_count_fds(0), base);
}

TEST(wait_timeout)
{
	const char *const sleeper[] = { "sleep", "30", NULL };
	pid_t pid = harness_spawn(sleeper);
	int64_t t0 = harness_now_ms();

	ASSERT_GT(pid, 0);
	ASSERT_EQ(harness_wait(pid, 50), -ETIMEDOUT);
	int64_t dt = harness_now_ms() - t0;
	ASSERT_GE(dt, 50);
	ASSERT_LT(dt, 2000);
	ASSERT_EQ(kill(pid, SIGKILL), 0);
	ASSERT_EQ(harness_wait(pid, 5000), 128 + SIGKILL);
}

TEST(msleep_and_clock)
{
	int64_t t0 = harness_now_ms();

	harness_msleep(30);
	int64_t dt = harness_now_ms() - t0;
	ASSERT_GE(dt, 30);
	ASSERT_LT(dt, 2000);
}

TEST(run_capture)
{
	const char *const echo[] = { "echo", "hello", "world", NULL };
	const char *const status[] = { "/bin/sh", "-c", "printf abcdef; exit 2",
				       NULL };
	const char *const lots[] = { "/bin/sh", "-c",
				     "head -c 300000 /dev/zero | tr '\\0' x",
				     NULL };
	char out[64];

	ASSERT_EQ(harness_run_capture(echo, out, sizeof(out)), 0);
	ASSERT_STREQ(out, "hello world\n");
	/* Truncated to cap - 1 bytes, status still reported. */
	ASSERT_EQ(harness_run_capture(status, out, 4), 2);
	ASSERT_STREQ(out, "abc");
	/* Output larger than a pipe does not deadlock the child. */
	ASSERT_EQ(harness_run_capture(lots, out, sizeof(out)), 0);
	ASSERT_UEQ(strlen(out), sizeof(out) - 1);
	ASSERT_EQ(out[0], 'x');
}

/* A background process that keeps the pipe open must not hold up the
 * capture once the program itself has exited. */
TEST(run_capture_with_lingering_grandchild)
{
	const char *const argv[] = { "/bin/sh", "-c", "sleep 20 & echo hi",
				     NULL };
	char out[16];
	int64_t t0 = harness_now_ms();

	ASSERT_EQ(harness_run_capture(argv, out, sizeof(out)), 0);
	ASSERT_STREQ(out, "hi\n");
	ASSERT_LT(harness_now_ms() - t0, 5000);
}

/* Waits (up to 5 s) until pid runs prog and sleeps in it. */
static bool child_sleeps_in(pid_t pid, const char *prog)
{
	char path[64], stat[512];

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	for (int i = 0; i < 500; i++) {
		FILE *f = fopen(path, "re");
		size_t n = f ? fread(stat, 1, sizeof(stat) - 1, f) : 0;
		if (f)
			fclose(f);
		stat[n] = '\0';
		/* "PID (COMM) STATE ..." */
		char *open = strchr(stat, '('), *close = strrchr(stat, ')');
		if (open && close && close[1] == ' ' && close[2] == 'S' &&
		    (size_t)(close - open - 1) == strlen(prog) &&
		    strncmp(open + 1, prog, strlen(prog)) == 0)
			return true;
		harness_msleep(10);
	}
	return false;
}

TEST(count_fds)
{
	const char *const sleeper[] = { "sleep", "30", NULL };
	int base = harness_count_fds(0), fds[3];

	ASSERT_GT(base, 0);
	ASSERT_EQ(harness_count_fds(getpid()), base);
	for (int i = 0; i < 3; i++)
		fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
	ASSERT_EQ(harness_count_fds(0), base + 3);
	for (int i = 0; i < 3; i++)
		close(fds[i]);
	ASSERT_EQ(harness_count_fds(0), base);

	/* Another process: its count is its own (at least stdio, and not
	 * our CLOEXEC fds). */
	pid_t pid = harness_spawn(sleeper);
	ASSERT_GT(pid, 0);
	/* Counted once it sleeps in sleep(1): before and during its exec the
	 * child still holds copies of our fds, CLOEXEC ones included. */
	ASSERT(child_sleeps_in(pid, "sleep"));
	int n = harness_count_fds(pid);
	ASSERT_GE(n, 3);
	ASSERT_LE(n, base);
	kill(pid, SIGKILL);
	harness_wait(pid, 5000);
	ASSERT_EQ(harness_count_fds(pid), -ENOENT);
}

TEST(daemon_missing_binary)
{
	struct harness_daemon d;
	int base = harness_count_fds(0);

	setenv("VRAMD_BIN", "/nonexistent/vramd", 1);
	ASSERT_EQ(harness_daemon_start(&d, NULL), -ENOENT);
	ASSERT_EQ(d.dir[0], '\0');
	ASSERT_EQ(harness_count_fds(0), base);
	ASSERT(getenv("VRAM_SOCKET") == NULL);
	ASSERT_EQ(harness_daemon_stop(&d), -ESRCH);
}

TEST(daemon_exits_before_ready)
{
	struct harness_daemon d;
	int base = harness_count_fds(0);
	int64_t t0 = harness_now_ms();

	setenv("VRAMD_BIN", "/bin/false", 1);
	ASSERT_EQ(harness_daemon_start(&d, NULL), -ESRCH);
	ASSERT_LT(harness_now_ms() - t0, 5000);
	ASSERT_EQ(harness_count_fds(0), base);
	ASSERT_EQ(harness_daemon_stop(&d), -ESRCH);
}

/* A zeroed struct must not make stop or kill signal pid 0 (our own
 * process group) or close fd 0. */
TEST(daemon_zeroed_struct)
{
	struct harness_daemon d;

	memset(&d, 0, sizeof(d));
	ASSERT_EQ(harness_daemon_stop(&d), -ESRCH);
	ASSERT_EQ(harness_daemon_kill(&d, SIGTERM), -ESRCH);
	ASSERT_EQ(harness_wait_notify(&d, "READY=1", 0), -EINVAL);
	ASSERT(fcntl(0, F_GETFD) >= 0);
}

/* Stands in for vramd: logs its arguments, says READY=1 through
 * NOTIFY_SOCKET, WATCHDOG=1 on SIGUSR1, a burst of 200 STATUS= then
 * BURST=done on SIGUSR2, STOPPING=1 then exit 0 on SIGTERM. Its socket is
 * blocking, as libsystemd's is. */
static const char fake_daemon[] =
	"#!/usr/bin/env python3\n"
	"import os, signal, socket, sys\n"
	"print('fake vramd:', ' '.join(sys.argv[1:]), file=sys.stderr, "
	"flush=True)\n"
	"addr = os.environ['NOTIFY_SOCKET']\n"
	"if addr.startswith('@'): addr = '\\0' + addr[1:]\n"
	"s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
	"def notify(m): s.sendto(m.encode(), addr)\n"
	"def term(*a):\n"
	"    notify('STOPPING=1')\n"
	"    os._exit(0)\n"
	"signal.signal(signal.SIGTERM, term)\n"
	"signal.signal(signal.SIGUSR1, lambda *a: notify('WATCHDOG=1'))\n"
	"def burst(*a):\n"
	"    for i in range(200): notify('STATUS=%d sessions' % i)\n"
	"    notify('BURST=done')\n"
	"signal.signal(signal.SIGUSR2, burst)\n"
	"notify('STATUS=starting')\n"
	"notify('STATUS=serving\\nREADY=1')\n"
	"while True: signal.pause()\n";

static void install_fake_daemon(char *path, size_t cap)
{
	const char *const probe[] = { "python3", "-c", "pass", NULL };
	char out[8];

	struct statvfs vfs;

	if (harness_run_capture(probe, out, sizeof(out)) != 0)
		SKIP("no python3 for the stand-in daemon");
	if (statvfs("/tmp", &vfs) == 0 && (vfs.f_flag & ST_NOEXEC))
		SKIP("/tmp is noexec: cannot run the stand-in daemon");
	snprintf(path, cap, "/tmp/fake-vramd.XXXXXX");
	int fd = mkstemp(path);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(write(fd, fake_daemon, sizeof(fake_daemon) - 1),
		  (ssize_t)sizeof(fake_daemon) - 1);
	ASSERT_EQ(fchmod(fd, 0755), 0);
	close(fd);
	setenv("VRAMD_BIN", path, 1);
}

TEST(daemon_lifecycle)
{
	const char *const extra[] = { "--host-capacity", "256M", NULL };
	struct harness_daemon d;
	char bin[64], dir[256];
	struct stat st;
	int base;

	install_fake_daemon(bin, sizeof(bin));
	base = harness_count_fds(0);
	ASSERT_OK(harness_daemon_start(&d, extra));
	ASSERT_GT(d.pid, 0);
	ASSERT_STREQ(getenv("VRAM_SOCKET"), d.socket);
	ASSERT(strncmp(d.socket, d.dir, strlen(d.dir)) == 0);
	ASSERT_EQ(stat(d.dir, &st), 0);
	ASSERT(strstr(harness_daemon_log(&d), "--backend host --log-level "
					      "debug --host-capacity 256M"));
	ASSERT(strstr(harness_daemon_log(&d), d.socket));

	ASSERT_EQ(harness_wait_notify(&d, "WATCHDOG=1", 50), -ETIMEDOUT);
	ASSERT_OK(harness_daemon_kill(&d, SIGUSR1));
	ASSERT_OK(harness_wait_notify(&d, "WATCHDOG=1", 5000));

	snprintf(dir, sizeof(dir), "%s", d.dir);
	ASSERT_EQ(harness_daemon_stop(&d), 0);
	ASSERT_EQ(stat(dir, &st), -1);
	ASSERT_EQ(errno, ENOENT);
	ASSERT(getenv("VRAM_SOCKET") == NULL);
	ASSERT_EQ(harness_count_fds(0), base);
	ASSERT_EQ(harness_daemon_stop(&d), -ESRCH);
	unlink(bin);
}

TEST(daemon_killed)
{
	struct harness_daemon d;
	char bin[64];

	install_fake_daemon(bin, sizeof(bin));
	ASSERT_OK(harness_daemon_start(&d, NULL));
	ASSERT_EQ(harness_daemon_wait(&d, 50), -ETIMEDOUT);
	ASSERT_OK(harness_daemon_kill(&d, SIGKILL));
	/* It dies without a word: the wait ends early, not at the timeout. */
	int64_t t0 = harness_now_ms();
	ASSERT_EQ(harness_wait_notify(&d, "STOPPING=1", 5000), -ESRCH);
	ASSERT_LT(harness_now_ms() - t0, 2000);
	ASSERT_EQ(harness_daemon_stop(&d), 128 + SIGKILL);
	unlink(bin);
}

/* A clean stop is seen by the notify socket before the daemon exits. */
TEST(daemon_stopping_notification)
{
	struct harness_daemon d;
	char bin[64];

	install_fake_daemon(bin, sizeof(bin));
	ASSERT_OK(harness_daemon_start(&d, NULL));
	ASSERT_OK(harness_daemon_kill(&d, SIGTERM));
	ASSERT_OK(harness_wait_notify(&d, "STOPPING=1", 5000));
	ASSERT_EQ(harness_daemon_wait(&d, 5000), 0);
	ASSERT_EQ(d.pid, -1);
	/* Gone already: stop does not signal, and reports the same. */
	ASSERT_EQ(harness_daemon_kill(&d, SIGTERM), -ESRCH);
	ASSERT_EQ(harness_daemon_stop(&d), 0);
	unlink(bin);
}

/* More notifications than a datagram socket queues (max_dgram_qlen, often
 * 10) while the test reads none: the daemon must not block on them. */
TEST(daemon_notify_burst_does_not_block)
{
	struct harness_daemon d;
	char bin[64];

	install_fake_daemon(bin, sizeof(bin));
	ASSERT_OK(harness_daemon_start(&d, NULL));
	ASSERT_OK(harness_daemon_kill(&d, SIGUSR2));
	/* Let the burst pile up unread, then look for its end. */
	harness_msleep(300);
	ASSERT_OK(harness_wait_notify(&d, "BURST=done", 5000));
	ASSERT_OK(harness_daemon_kill(&d, SIGUSR1));
	ASSERT_OK(harness_wait_notify(&d, "WATCHDOG=1", 5000));
	ASSERT_EQ(harness_daemon_stop(&d), 0);
	unlink(bin);
}

/* The notify collector is a fork of the test: it must not keep the test's
 * sockets open, or a peer would never see them close. */
TEST(daemon_start_keeps_no_test_fds)
{
	struct harness_daemon d;
	char bin[64], c;
	int sv[2];

	install_fake_daemon(bin, sizeof(bin));
	ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	ASSERT_OK(harness_daemon_start(&d, NULL));
	close(sv[0]);
	ASSERT_EQ(recv(sv[1], &c, 1, MSG_DONTWAIT), 0);
	close(sv[1]);
	ASSERT_EQ(harness_daemon_stop(&d), 0);
	unlink(bin);
}

/* A test that fails exits without stopping its daemon: the harness kills
 * it at exit, prints its log and removes its directory. */
TEST(daemon_cleaned_up_at_exit)
{
	struct harness_daemon d;
	char bin[64], out[2048] = { 0 };
	int pipefd[2];
	struct stat st;

	install_fake_daemon(bin, sizeof(bin));
	ASSERT_EQ(pipe(pipefd), 0);
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		dup2(pipefd[1], 2);
		if (harness_daemon_start(&d, NULL) != 0)
			_exit(2);
		/* Tell the parent where, then fail as TEST_FAIL does. */
		if (write(pipefd[1], d.dir, strlen(d.dir) + 1) < 0)
			_exit(3);
		exit(1);
	}
	close(pipefd[1]);
	ASSERT_EQ(harness_wait(pid, 10000), 1);
	ssize_t n = read(pipefd[0], out, sizeof(out) - 1);
	ASSERT_GT(n, 0);
	close(pipefd[0]);
	/* The directory's name, NUL-terminated, then the harness's notice. */
	const char *dir = out;
	ASSERT(strncmp(dir, "/", 1) == 0);
	ASSERT_EQ(stat(dir, &st), -1);
	ASSERT_EQ(errno, ENOENT);
	const char *rest = out + strlen(dir) + 1;
	ASSERT(strstr(rest, "was never stopped"));
	ASSERT(strstr(rest, "fake vramd: --socket"));
	unlink(bin);
}
