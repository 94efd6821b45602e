/* SPDX-License-Identifier: Apache-2.0 */
/* Test harness: see harness.h. Plain libc: it is linked into test binaries
 * that may not have libvram or libuv.
 *
 * Readiness comes from the daemon itself: it is started with NOTIFY_SOCKET
 * pointing at a datagram socket the harness bound, as systemd would, and
 * is ready when it sends READY=1. That avoids polling for the socket file,
 * which exists before the daemon accepts anything.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "attr.h"

#include "clock.h"

extern char **environ;

#define DAEMON_TIMEOUT_MS 10000
#define CAPTURE_TIMEOUT_MS 30000
#define MAX_EXTRA_ARGS 64
#define LOG_TAIL (64 * 1024)
/* Longest sd_notify message kept whole; vramd's are a line or two. */
#define NOTIFY_MAX 4096

void harness_msleep(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000,
			       .tv_nsec = (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

int64_t harness_now_ms(void)
{
	return clock_now_ms();
}

/* The status as the shell reports it: the exit code, or 128+N for a child
 * killed by signal N. */
static int status_code(int st)
{
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return -ECHILD;
}

/* ---- processes ----------------------------------------------------------- */

struct spawn_opts {
	const char *const *envp; /* NULL: this process's environment */
	int stdin_fd, stdout_fd, stderr_fd; /* -1: inherit */
	int death_sig;			    /* 0: none */
	/* Passed as systemd passes fds: pass[i] becomes fd 3 + i, and the
	 * pid is written into listen_pid (an entry of envp,
	 * "LISTEN_PID=" and room for the digits). Every pass[i] is at
	 * 3 + n_pass or above. */
	const int *pass;
	unsigned n_pass;
	char *listen_pid;
	bool new_session; /* setsid() before the exec */
};

bool harness_daemon_new_session;

/* Writes "LISTEN_PID=pid" into buf without allocating (after a fork). */
static void write_listen_pid(char *buf, pid_t pid)
{
	char digits[16];
	int n = 0;

	memcpy(buf, "LISTEN_PID=", 11);
	do {
		digits[n++] = (char)('0' + pid % 10);
		pid /= 10;
	} while (pid && n < 15);
	for (int i = 0; i < n; i++)
		buf[11 + i] = digits[n - 1 - i];
	buf[11 + n] = '\0';
}

/* In the child, between fork and exec: the parent may have threads, so
 * nothing here allocates or takes a lock. */
static void spawn_child(const char *const argv[], const struct spawn_opts *o,
			pid_t parent, int err_fd)
{
	struct sigaction sa = { .sa_handler = SIG_DFL };
	sigset_t none;
	int err;

	/* A test may block or ignore signals; the program it starts must
	 * not inherit that (vramd would ignore SIGTERM). */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	sigaction(SIGPIPE, &sa, NULL);
	if (o->death_sig) {
		/* A test that dies (a failed assertion exits) must not leave
		 * its daemon behind. */
		if (prctl(PR_SET_PDEATHSIG, o->death_sig) < 0)
			goto fail;
		if (getppid() != parent) {
			errno = ESRCH;
			goto fail;
		}
	}
	if ((o->stdin_fd >= 0 && dup2(o->stdin_fd, 0) < 0) ||
	    (o->stdout_fd >= 0 && dup2(o->stdout_fd, 1) < 0) ||
	    (o->stderr_fd >= 0 && dup2(o->stderr_fd, 2) < 0))
		goto fail;
	if (o->n_pass) {
		/* The error pipe must not sit where a passed fd goes. */
		if (err_fd < 3 + (int)o->n_pass) {
			int e = fcntl(err_fd, F_DUPFD_CLOEXEC, 3 + (int)o->n_pass);
			if (e < 0)
				goto fail;
			err_fd = e;
		}
		for (unsigned i = 0; i < o->n_pass; i++)
			if (dup2(o->pass[i], 3 + (int)i) < 0)
				goto fail;
		write_listen_pid(o->listen_pid, getpid());
	}
	if (o->new_session)
		setsid();
	execvpe(argv[0], (char *const *)argv,
		(char *const *)(o->envp ? o->envp :
					  (const char *const *)environ));
fail:
	err = errno;
	/* The parent learns why from the pipe (closed by a successful exec,
	 * it is O_CLOEXEC). */
	while (write(err_fd, &err, sizeof(err)) < 0 && errno == EINTR)
		;
	_exit(127);
}

/* Forks and execs argv. Returns the pid once the exec succeeded, or -errno
 * with the child reaped (-ENOENT for a missing program). */
static pid_t spawn(const char *const argv[], const struct spawn_opts *o)
{
	pid_t parent = getpid(), pid;
	int pipefd[2], err = 0;
	ssize_t n;

	if (!argv || !argv[0])
		return -EINVAL;
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		err = -errno;
		goto close_pipe;
	}
	if (pid == 0) {
		close(pipefd[0]);
		spawn_child(argv, o, parent, pipefd[1]);
	}
	close(pipefd[1]);
	pipefd[1] = -1;
	do
		n = read(pipefd[0], &err, sizeof(err));
	while (n < 0 && errno == EINTR);
	if (n == (ssize_t)sizeof(err)) {
		err = -(err ? err : EIO);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
	} else {
		err = 0;
	}

close_pipe:
	close(pipefd[0]);
	if (pipefd[1] >= 0)
		close(pipefd[1]);
	return err < 0 ? err : pid;
}

pid_t harness_spawn(const char *const argv[])
{
	struct spawn_opts o = { 0 };

	o.stdin_fd = o.stdout_fd = o.stderr_fd = -1;
	return spawn(argv, &o);
}

int harness_wait(pid_t pid, int timeout_ms)
{
	int64_t deadline = harness_now_ms() + timeout_ms;
	int st;

	/* waitpid(0) and waitpid(-1) would reap some other child. */
	if (pid <= 0)
		return -ECHILD;
	for (;;) {
		pid_t r = waitpid(pid, &st, timeout_ms < 0 ? 0 : WNOHANG);
		if (r == pid)
			return status_code(st);
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r == 0) {
			if (harness_now_ms() >= deadline)
				return -ETIMEDOUT;
			harness_msleep(1);
		}
	}
}

int harness_run_capture(const char *const argv[], char *out, size_t cap)
{
	int64_t deadline = harness_now_ms() + CAPTURE_TIMEOUT_MS;
	struct spawn_opts o = { .stdin_fd = -1, .stderr_fd = -1 };
	size_t len = 0;
	int pipefd[2], status = 0, err = 0;
	bool exited = false;
	char discard[4096];
	pid_t pid;

	if (!out && cap > 0)
		return -EINVAL;
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return -errno;
	o.stdout_fd = pipefd[1];
	pid = spawn(argv, &o);
	close(pipefd[1]);
	if (pid < 0) {
		err = pid;
		goto close_pipe;
	}

	/* Read until EOF, or until the child has exited and the pipe is
	 * drained: a grandchild it left behind may hold the pipe open. */
	for (;;) {
		struct pollfd p = { .fd = pipefd[0], .events = POLLIN };
		int r = poll(&p, 1, exited ? 0 : 50);
		if (r < 0 && errno != EINTR) {
			err = -errno;
			break;
		}
		if (r > 0) {
			char *dst = discard;
			size_t room = sizeof(discard);
			if (cap > 0 && len < cap - 1) {
				dst = out + len;
				room = cap - 1 - len;
			}
			ssize_t n = read(pipefd[0], dst, room);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				err = -errno;
				break;
			}
			if (n == 0)
				break;
			if (dst != discard)
				len += (size_t)n;
			continue;
		}
		if (exited)
			break;
		status = harness_wait(pid, 0);
		if (status != -ETIMEDOUT) {
			exited = true;
			continue;
		}
		if (harness_now_ms() >= deadline) {
			err = -ETIMEDOUT;
			break;
		}
	}
	if (!exited && !err) {
		int64_t left = deadline - harness_now_ms();
		status = harness_wait(pid, left > 0 ? (int)left : 0);
		if (status == -ETIMEDOUT)
			err = -ETIMEDOUT;
	}
	if (!exited && err) {
		kill(pid, SIGKILL);
		harness_wait(pid, -1);
	}

close_pipe:
	close(pipefd[0]);
	if (cap > 0)
		out[len] = '\0';
	return err ? err : status;
}

int harness_count_fds(pid_t pid)
{
	bool self = pid == 0 || pid == getpid();
	char path[64];
	struct dirent *e;
	int n = 0, err;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/fd",
		 (int)(self ? getpid() : pid));
	dir = opendir(path);
	if (!dir)
		return -errno;
	for (;;) {
		errno = 0;
		e = readdir(dir);
		if (!e)
			break;
		if (e->d_name[0] == '.')
			continue;
		/* Our own listing holds the directory's fd: not counted. */
		if (self && atoi(e->d_name) == dirfd(dir))
			continue;
		n++;
	}
	err = errno;
	closedir(dir);
	return err ? -err : n;
}

/* ---- the daemon ---------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *st UNUSED, int type UNUSED,
		    struct FTW *ftw UNUSED)
{
	/* Best effort: a file that cannot go is no reason to keep going
	 * through the rest. */
	remove(path);
	return 0;
}

/* Reads the end of the file at path into buf (NUL-terminated). */
static const char *log_tail(const char *path, char *buf, size_t cap)
{
	size_t len = 0;
	struct stat st;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(buf, cap, "(cannot open %s: %s)", path,
			 strerror(errno));
		return buf;
	}
	/* The end of a log says why a daemon died; keep that part. */
	if (fstat(fd, &st) == 0 && st.st_size > (off_t)cap - 1)
		lseek(fd, st.st_size - (off_t)(cap - 1), SEEK_SET);
	while (len < cap - 1) {
		ssize_t n = read(fd, buf + len, cap - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = '\0';
	return buf;
}

/* Daemons started and not stopped yet. A failed assertion calls exit(),
 * so stop is never reached: at exit these are killed, their logs printed
 * (the runner shows a failed case's output) and their directories
 * removed. A copy, not a pointer: the caller's struct may be gone. Only
 * the process that started a daemon cleans it up, not a forked child
 * that happens to exit. */
#define MAX_LIVE 16
static struct live_daemon {
	pid_t owner, pid, collector;
	char dir[256];
	char log[300];
} live[MAX_LIVE];

static struct live_daemon *live_find(const char *dir)
{
	for (int i = 0; i < MAX_LIVE; i++)
		if (live[i].owner == getpid() && strcmp(live[i].dir, dir) == 0)
			return &live[i];
	return NULL;
}

static void live_atexit(void)
{
	static char buf[LOG_TAIL];

	for (int i = 0; i < MAX_LIVE; i++) {
		struct live_daemon *l = &live[i];
		if (l->owner != getpid())
			continue;
		if (l->pid > 0) {
			kill(l->pid, SIGKILL);
			waitpid(l->pid, NULL, 0);
		}
		if (l->collector > 0) {
			kill(l->collector, SIGKILL);
			waitpid(l->collector, NULL, 0);
		}
		fprintf(stderr,
			"harness: vramd in %s was never stopped; killed it. "
			"Its log:\n%s---- end of log ----\n",
			l->dir, log_tail(l->log, buf, sizeof(buf)));
		nftw(l->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
		l->owner = 0;
	}
}

static void live_add(const struct harness_daemon *d)
{
	static bool registered;

	if (!registered && atexit(live_atexit) != 0)
		return;
	registered = true;
	for (int i = 0; i < MAX_LIVE; i++) {
		struct live_daemon *l = &live[i];
		/* A slot a parent process left behind is free here. */
		if (l->owner == getpid())
			continue;
		l->owner = getpid();
		l->pid = d->pid;
		l->collector = d->collector;
		snprintf(l->dir, sizeof(l->dir), "%s", d->dir);
		snprintf(l->log, sizeof(l->log), "%s", d->log);
		return;
	}
}

/* Reaps the daemon if it has exited (or waits for it when block). Returns
 * true once it is reaped, its status kept in d->status. */
static bool daemon_reap(struct harness_daemon *d, bool block)
{
	int st;

	if (d->pid <= 0)
		return true;
	for (;;) {
		pid_t r = waitpid(d->pid, &st, block ? 0 : WNOHANG);
		if (r == d->pid) {
			d->status = status_code(st);
			break;
		}
		if (r == 0)
			return false;
		if (errno != EINTR) {
			/* Someone else reaped it: its status is lost. */
			d->status = -ECHILD;
			break;
		}
	}
	d->pid = -1;
	/* Its pid may be reused from now on: never signal it again. */
	struct live_daemon *l = live_find(d->dir);
	if (l)
		l->pid = -1;
	return true;
}

static void daemon_cleanup(struct harness_daemon *d)
{
	const char *env = getenv("VRAM_SOCKET");
	struct live_daemon *l = live_find(d->dir);

	if (l)
		l->owner = 0;
	if (d->collector > 0) {
		kill(d->collector, SIGKILL);
		while (waitpid(d->collector, NULL, 0) < 0 && errno == EINTR)
			;
	}
	d->collector = -1;
	if (d->notify_fd >= 0)
		close(d->notify_fd);
	d->notify_fd = -1;
	if (d->store_ctl >= 0)
		close(d->store_ctl);
	d->store_ctl = -1;
	if (env && strcmp(env, d->socket) == 0)
		unsetenv("VRAM_SOCKET");
	nftw(d->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	d->dir[0] = '\0';
}

/* Closes every fd but keep0 and keep1. The collector is a fork of the
 * test, and must not hold the test's client sockets open: a test that
 * closes one expects the daemon to see it go. */
static void close_all_but(int keep0, int keep1)
{
	int lo = keep0 < keep1 ? keep0 : keep1;
	int hi = keep0 < keep1 ? keep1 : keep0;

	if (lo > 0)
		close_range(0, (unsigned)lo - 1, 0);
	if (hi > lo + 1)
		close_range((unsigned)lo + 1, (unsigned)hi - 1, 0);
	close_range((unsigned)hi + 1, ~0u, 0);
}

/* The collector: appends each datagram of sock to logfd followed by a NUL,
 * which no notify message contains, so records can be told apart. */
static pid_t notify_collector(int sock, int logfd)
{
	pid_t parent = getpid();
	char buf[NOTIFY_MAX + 1];
	pid_t pid = fork();

	if (pid != 0)
		return pid < 0 ? -errno : pid;
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
		_exit(1);
	close_all_but(sock, logfd);
	for (;;) {
		struct pollfd p = { .fd = sock, .events = POLLIN };
		if (poll(&p, 1, -1) < 0 && errno != EINTR)
			_exit(1);
		ssize_t n = recv(sock, buf, NOTIFY_MAX, MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n < 0)
			_exit(1);
		buf[n] = '\0';
		/* O_APPEND: one write per record, never interleaved. */
		if (write(logfd, buf, (size_t)n + 1) != n + 1)
			_exit(1);
	}
}

/* ---- the fd store (store mode) ------------------------------------------- */

#define STORE_MAX_FDS 8192

struct store {
	int fd[STORE_MAX_FDS];
	char name[STORE_MAX_FDS][64];
	unsigned n;
};

/* A notify message's value for key ("FDNAME="), into out. */
static bool notify_field(const char *msg, const char *key, char *out,
			 size_t cap)
{
	size_t kl = strlen(key);
	for (const char *l = msg; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		if (strncmp(l, key, kl) != 0)
			continue;
		const char *v = l + kl, *e = strchr(v, '\n');
		size_t n = e ? (size_t)(e - v) : strlen(v);
		if (n >= cap)
			n = cap - 1;
		memcpy(out, v, n);
		out[n] = '\0';
		return true;
	}
	return false;
}

static void store_drop_all(struct store *st)
{
	for (unsigned i = 0; i < st->n; i++)
		close(st->fd[i]);
	st->n = 0;
}

/* What systemd does with a datagram's fds: keeps them for FDSTORE=1 (up
 * to max), closes them otherwise. Returns false when the store was full. */
static bool store_take(struct store *st, unsigned max, const char *msg,
		       const int *fds, unsigned n)
{
	char name[64] = "stored";
	bool store = strstr(msg, "FDSTORE=1") &&
		     (msg == strstr(msg, "FDSTORE=1") || strstr(msg, "\nFDSTORE=1"));
	bool ok = true;

	notify_field(msg, "FDNAME=", name, sizeof(name));
	if (strstr(msg, "FDSTOREREMOVE=1")) {
		for (unsigned i = 0; i < st->n;) {
			if (strcmp(st->name[i], name) == 0) {
				close(st->fd[i]);
				st->fd[i] = st->fd[st->n - 1];
				memcpy(st->name[i], st->name[st->n - 1], 64);
				st->n--;
				continue;
			}
			i++;
		}
	}
	for (unsigned i = 0; i < n; i++) {
		if (store && st->n < max && st->n < STORE_MAX_FDS) {
			st->fd[st->n] = fds[i];
			memcpy(st->name[st->n], name, 64);
			st->n++;
			continue;
		}
		if (store)
			ok = false;
		close(fds[i]);
	}
	return ok;
}

/* Receives one datagram with its fds (at most 16). */
static ssize_t recv_fds(int sock, char *buf, size_t cap, int *fds,
			unsigned *nfds)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int) * 16)];
	} ctl;
	struct iovec iov = { .iov_base = buf, .iov_len = cap };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = ctl.b, .msg_controllen = sizeof(ctl.b) };
	ssize_t n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

	*nfds = 0;
	if (n < 0)
		return n;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		unsigned k = (unsigned)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		memcpy(fds + *nfds, CMSG_DATA(c), k * sizeof(int));
		*nfds += k;
	}
	return n;
}

static int send_fd(int sock, const char *msg, size_t len, int fd)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec iov = { .iov_base = (void *)msg, .iov_len = len ? len : 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	char empty = 0;

	if (!len)
		iov.iov_base = &empty;
	if (fd >= 0) {
		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.b;
		mh.msg_controllen = sizeof(ctl.b);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	return sendmsg(sock, &mh, MSG_NOSIGNAL) < 0 ? -errno : 0;
}

/* A control request: 'G' sends every fd with its name, then an empty
 * message; 'L' the names; 'P' + name (with an fd) stores one; 'D' drops
 * them all. */
static void store_control(struct store *st, int ctl)
{
	static char buf[STORE_MAX_FDS * 65 + 16];
	int fds[16];
	unsigned nfds;
	ssize_t n = recv_fds(ctl, buf, sizeof(buf) - 1, fds, &nfds);

	if (n <= 0)
		_exit(0); /* the test is gone */
	buf[n] = '\0';
	switch (buf[0]) {
	case 'G':
		for (unsigned i = 0; i < st->n; i++)
			send_fd(ctl, st->name[i], strlen(st->name[i]), st->fd[i]);
		send_fd(ctl, "", 0, -1);
		break;
	case 'L': {
		size_t off = 0;
		for (unsigned i = 0; i < st->n; i++)
			off += (size_t)snprintf(buf + off, sizeof(buf) - off,
						"%s\n", st->name[i]);
		send_fd(ctl, buf, off, -1);
		break;
	}
	case 'P':
		if (nfds == 1 && st->n < STORE_MAX_FDS) {
			st->fd[st->n] = fds[0];
			memset(st->name[st->n], 0, 64);
			memcpy(st->name[st->n], buf + 1, strnlen(buf + 1, 63));
			st->n++;
			nfds = 0;
		}
		send_fd(ctl, "ok", 2, -1);
		break;
	case 'D':
		store_drop_all(st);
		send_fd(ctl, "ok", 2, -1);
		break;
	}
	for (unsigned i = 0; i < nfds; i++)
		close(fds[i]);
}

/* Reads one datagram of sock into the log and the store: 1, 0 when the
 * socket is empty, or exits the collector on an error. */
static int store_read_one(int sock, int logfd, struct store *st, unsigned max)
{
	static char buf[NOTIFY_MAX + 1];
	int fds[16];
	unsigned nfds;
	ssize_t n = recv_fds(sock, buf, NOTIFY_MAX, fds, &nfds);

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n < 0)
		_exit(1);
	buf[n] = '\0';
	if (write(logfd, buf, (size_t)n + 1) != n + 1)
		_exit(1);
	if (!store_take(st, max, buf, fds, nfds)) {
		char rec[128];
		char name[64] = "stored";
		notify_field(buf, "FDNAME=", name, sizeof(name));
		int k = snprintf(rec, sizeof(rec), "HARNESS-FDSTORE-FULL %s", name);
		if (write(logfd, rec, (size_t)k + 1) != k + 1)
			_exit(1);
	}
	return 1;
}

/* The store-mode collector: notify.log as notify_collector writes it, and
 * the fd store, answering the test on ctl. */
static pid_t store_collector(int sock, int logfd, int ctl, unsigned max)
{
	pid_t parent = getpid();
	static struct store st;
	pid_t pid = fork();

	if (pid != 0)
		return pid < 0 ? -errno : pid;
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
		_exit(1);
	int keep[3] = { sock, logfd, ctl }, lo = 0;
	for (int i = 0; i < 3; i++)
		for (int j = i + 1; j < 3; j++)
			if (keep[j] < keep[i]) {
				int t = keep[i];
				keep[i] = keep[j];
				keep[j] = t;
			}
	for (int i = 0; i < 3; i++) {
		if (keep[i] > lo)
			close_range((unsigned)lo, (unsigned)keep[i] - 1, 0);
		lo = keep[i] + 1;
	}
	close_range((unsigned)lo, ~0u, 0);
	st.n = 0;
	for (;;) {
		struct pollfd p[2] = { { .fd = sock, .events = POLLIN },
				       { .fd = ctl, .events = POLLIN } };
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			_exit(1);
		if (!p[1].revents) {
			if (p[0].revents & POLLIN)
				store_read_one(sock, logfd, &st, max);
			continue;
		}
		/* As systemd handles a service's notify messages before its
		 * death: whatever a daemon sent before the test asks (one
		 * killed a moment ago included) is in the store the test
		 * takes or lists. A collector that served the request first
		 * handed a restarted daemon a store that late messages of
		 * the dead one then changed (duplicate names under load). */
		while (store_read_one(sock, logfd, &st, max))
			;
		store_control(&st, ctl);
	}
}

/* Consumes the complete records of notify.log not seen yet; returns 1 when
 * one contains needle (consuming up to it, so that a later wait sees
 * what came after), 0 when none does, or -errno. */
static int notify_scan(struct harness_daemon *d, const char *needle)
{
	char buf[4 * NOTIFY_MAX];

	for (;;) {
		ssize_t n =
			pread(d->notify_fd, buf, sizeof(buf), d->notify_off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		/* A record not yet wholly written is left for next time. */
		size_t start = 0;
		for (size_t i = 0; i < (size_t)n; i++) {
			if (buf[i] != '\0')
				continue;
			bool found = strstr(buf + start, needle) != NULL;
			d->notify_off += (int64_t)(i + 1 - start);
			start = i + 1;
			if (found)
				return 1;
		}
		if (start == 0)
			return 0;
	}
}

int harness_wait_notify(struct harness_daemon *d, const char *needle,
			int timeout_ms)
{
	int64_t deadline = harness_now_ms() + timeout_ms;
	bool exited = false;
	int r;

	if (!d || !needle || !d->dir[0] || d->notify_fd < 0)
		return -EINVAL;
	for (;;) {
		r = notify_scan(d, needle);
		if (r != 0)
			return r > 0 ? 0 : r;
		/* A daemon sends before it exits, so one more look after
		 * seeing it gone catches its last words. */
		if (exited)
			return -ESRCH;
		if (daemon_reap(d, false)) {
			/* They are in the socket; give the collector a
			 * moment to copy them out. */
			harness_msleep(100);
			exited = true;
			continue;
		}
		int64_t left = deadline - harness_now_ms();
		unsigned nap = 2;
		if (timeout_ms >= 0 && left <= 0)
			return -ETIMEDOUT;
		if (timeout_ms >= 0 && left < nap)
			nap = (unsigned)left;
		harness_msleep(nap);
	}
}

const char *harness_daemon_log(struct harness_daemon *d)
{
	static char buf[LOG_TAIL];

	if (!d || !d->log[0])
		return "(no daemon log)";
	return log_tail(d->log, buf, sizeof(buf));
}

/* Creates d->dir and the paths in it. The sockets' paths must fit in
 * sun_path, so a long $TMPDIR falls back to /tmp. */
static int daemon_make_dir(struct harness_daemon *d)
{
	static const char leaf[] = "/vramd-test.XXXXXX/notify.sock";
	const char *tmp = getenv("TMPDIR");
	struct sockaddr_un sun;

	if (!tmp || !tmp[0] ||
	    strlen(tmp) + sizeof(leaf) > sizeof(sun.sun_path))
		tmp = "/tmp";
	if (strlen(tmp) + sizeof(leaf) > sizeof(sun.sun_path))
		return -ENAMETOOLONG;
	snprintf(d->dir, sizeof(d->dir), "%s/vramd-test.XXXXXX", tmp);
	if (!mkdtemp(d->dir)) {
		int err = -errno;
		d->dir[0] = '\0';
		return err;
	}
	snprintf(d->socket, sizeof(d->socket), "%s/vramd.sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/vramd.log", d->dir);
	snprintf(d->notify, sizeof(d->notify), "%s/notify.sock", d->dir);
	return 0;
}

/* Binds DIR/notify.sock and starts the collector that drains it into
 * DIR/notify.log; d->notify_fd is left open on that log for reading. */
static int daemon_notify_start(struct harness_daemon *d)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	char path[sizeof(d->dir) + 16];
	int sock, logfd = -1, err;

	sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (sock < 0)
		return -errno;
	memcpy(sun.sun_path, d->notify, strlen(d->notify) + 1);
	if (bind(sock, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
		err = -errno;
		goto close_sock;
	}
	snprintf(path, sizeof(path), "%s/notify.log", d->dir);
	logfd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	d->notify_fd = open(path, O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
	if (logfd < 0 || d->notify_fd < 0) {
		err = -errno;
		goto close_sock;
	}
	d->notify_off = 0;
	if (d->store_max) {
		int sp[2];
		if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) {
			err = -errno;
			goto close_sock;
		}
		d->collector = store_collector(sock, logfd, sp[1], d->store_max);
		close(sp[1]);
		d->store_ctl = sp[0];
	} else {
		d->collector = notify_collector(sock, logfd);
	}
	err = d->collector < 0 ? d->collector : 0;

close_sock:
	/* The collector has its own copies; only it reads the socket. */
	if (logfd >= 0)
		close(logfd);
	close(sock);
	return err;
}

/* The environment for the daemon: ours, with NOTIFY_SOCKET pointing at the
 * harness, and without what would make it think systemd started it in
 * some other way; extra (NULL-terminated, or NULL) is added. A test may
 * set WATCHDOG_USEC before starting it. */
static const char **daemon_env(const char *notify_var, const char *const *extra)
{
	static const char *const drop[] = { "NOTIFY_SOCKET=", "LISTEN_FDS=",
					    "LISTEN_PID=", "LISTEN_FDNAMES=",
					    "WATCHDOG_PID=", "FDSTORE=" };
	size_t n = 0, k = 0, x = 0;
	const char **env;

	while (environ[n])
		n++;
	while (extra && extra[x])
		x++;
	env = calloc(n + x + 2, sizeof(*env));
	if (!env)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		bool keep = true;
		for (size_t j = 0; j < sizeof(drop) / sizeof(drop[0]); j++)
			if (strncmp(environ[i], drop[j], strlen(drop[j])) == 0)
				keep = false;
		if (keep)
			env[k++] = environ[i];
	}
	env[k++] = notify_var;
	for (size_t i = 0; i < x; i++)
		env[k++] = extra[i];
	env[k] = NULL;
	return env;
}

/* Takes every fd of the store from the collector, each moved to min or
 * above; names joined with ':' into names. Returns the count or -errno. */
static int store_get(struct harness_daemon *d, int *fds, unsigned cap,
		     char *names, size_t names_cap, int min)
{
	char buf[128];
	unsigned n = 0;
	size_t off = 0;
	int r;

	names[0] = '\0';
	r = send_fd(d->store_ctl, "G", 1, -1);
	if (r < 0)
		return r;
	for (;;) {
		int got[16];
		unsigned k;
		ssize_t len;
		struct pollfd p = { .fd = d->store_ctl, .events = POLLIN };
		if (poll(&p, 1, DAEMON_TIMEOUT_MS) <= 0)
			return -ETIMEDOUT;
		len = recv_fds(d->store_ctl, buf, sizeof(buf) - 1, got, &k);
		if (len < 0)
			return -errno;
		buf[len] = '\0';
		if (k == 0)
			break; /* the end */
		if (n == cap) {
			close(got[0]);
			continue;
		}
		fds[n] = fcntl(got[0], F_DUPFD_CLOEXEC, min);
		close(got[0]);
		if (fds[n] < 0)
			return -errno;
		off += (size_t)snprintf(names + off, names_cap - off, "%s%s",
					n ? ":" : "", buf);
		n++;
	}
	return (int)n;
}

/* Execs the daemon for d (a fresh start or a restart) and waits for its
 * READY=1. Returns 0 or -errno (the daemon killed and reaped). */
static int daemon_launch(struct harness_daemon *d, bool restart)
{
	const char *bin = getenv("VRAMD_BIN");
	const char *argv[8 + MAX_HARNESS_ARGS];
	struct spawn_opts o = { .stderr_fd = -1, .death_sig = SIGKILL,
				.new_session = harness_daemon_new_session };
	char notify_var[sizeof("NOTIFY_SOCKET=") + sizeof(d->notify)];
	static char fdstore_var[32], listen_fds[32], listen_pid[32];
	static char listen_names[STORE_MAX_FDS * 65 + 32];
	static int pass[STORE_MAX_FDS];
	const char *extra_env[5] = { NULL };
	const char **env = NULL;
	size_t n = 0;
	int err, logfd = -1, nullfd = -1, npass = 0;
	pid_t pid;

	if (!bin || !bin[0])
		bin = "build/vramd";
	argv[n++] = bin;
	argv[n++] = "--socket";
	argv[n++] = d->socket;
	argv[n++] = "--backend";
	argv[n++] = "host";
	argv[n++] = "--log-level";
	argv[n++] = "debug";
	for (unsigned i = 0; i < d->n_args; i++)
		argv[n++] = d->args[i];
	argv[n] = NULL;

	if (d->store_max) {
		size_t k = 0;
		snprintf(fdstore_var, sizeof(fdstore_var), "FDSTORE=%u", d->store_max);
		extra_env[k++] = fdstore_var;
		if (restart) {
			memcpy(listen_names, "LISTEN_FDNAMES=", 15);
			npass = store_get(d, pass, STORE_MAX_FDS, listen_names + 15,
					  sizeof(listen_names) - 15, STORE_MAX_FDS + 16);
			if (npass < 0)
				return npass;
			if (npass) {
				snprintf(listen_fds, sizeof(listen_fds),
					 "LISTEN_FDS=%d", npass);
				snprintf(listen_pid, sizeof(listen_pid),
					 "LISTEN_PID=0000000000");
				extra_env[k++] = listen_fds;
				extra_env[k++] = listen_names;
				extra_env[k++] = listen_pid;
				o.pass = pass;
				o.n_pass = (unsigned)npass;
				o.listen_pid = listen_pid;
			}
		}
	}
	snprintf(notify_var, sizeof(notify_var), "NOTIFY_SOCKET=%s", d->notify);
	env = daemon_env(notify_var, extra_env);
	if (!env) {
		err = -ENOMEM;
		goto out;
	}
	logfd = open(d->log,
		     O_WRONLY | O_CREAT | O_APPEND | (restart ? 0 : O_TRUNC) | O_CLOEXEC, 0644);
	nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (logfd < 0 || nullfd < 0) {
		err = -errno;
		goto out;
	}
	o.envp = env;
	o.stdin_fd = nullfd;
	o.stdout_fd = logfd;
	o.stderr_fd = logfd;
	pid = spawn(argv, &o);
	if (pid < 0) {
		err = pid;
		fprintf(stderr, "harness: cannot run %s: %s (set VRAMD_BIN)\n",
			bin, strerror(-err));
		goto out;
	}
	d->pid = pid;
	err = harness_wait_notify(d, "READY=1", DAEMON_TIMEOUT_MS);
	if (err < 0) {
		if (d->pid > 0)
			kill(d->pid, SIGKILL);
		daemon_reap(d, true);
		fprintf(stderr,
			"harness: vramd did not become ready: %s (exit %d)\n"
			"---- %s ----\n%s---- end of log ----\n",
			strerror(-err), d->status, d->log,
			harness_daemon_log(d));
	}
out:
	/* Our copies: the daemon has its own, systemd's store (the
	 * collector) the originals. */
	for (int i = 0; i < npass; i++)
		close(pass[i]);
	if (logfd >= 0)
		close(logfd);
	if (nullfd >= 0)
		close(nullfd);
	free(env);
	return err;
}

int harness_daemon_start_store(struct harness_daemon *d,
			       const char *const extra_args[],
			       unsigned store_max)
{
	int err;

	if (!d)
		return -EINVAL;
	memset(d, 0, sizeof(*d));
	d->pid = -1;
	d->notify_fd = -1;
	d->store_ctl = -1;
	d->collector = -1;
	d->store_max = store_max;
	for (size_t i = 0; extra_args && extra_args[i]; i++) {
		if (d->n_args == MAX_HARNESS_ARGS)
			return -E2BIG;
		snprintf(d->args[d->n_args++], sizeof(d->args[0]), "%s",
			 extra_args[i]);
	}
	err = daemon_make_dir(d);
	if (err < 0) {
		fprintf(stderr, "harness: temporary directory: %s\n",
			strerror(-err));
		return err;
	}
	err = daemon_notify_start(d);
	if (err == 0)
		err = daemon_launch(d, false);
	if (err == 0 && setenv("VRAM_SOCKET", d->socket, 1) < 0)
		err = -errno;
	if (err < 0) {
		if (d->pid > 0) {
			kill(d->pid, SIGKILL);
			daemon_reap(d, true);
		}
		daemon_cleanup(d);
		return err;
	}
	live_add(d);
	return 0;
}

int harness_daemon_start(struct harness_daemon *d,
			 const char *const extra_args[])
{
	return harness_daemon_start_store(d, extra_args, 0);
}

int harness_daemon_restart(struct harness_daemon *d,
			   const char *const extra_args[])
{
	if (!d || !d->dir[0] || !d->store_max)
		return -EINVAL;
	if (d->pid > 0)
		return -EBUSY;
	if (extra_args) {
		d->n_args = 0;
		for (size_t i = 0; extra_args[i]; i++) {
			if (d->n_args == MAX_HARNESS_ARGS)
				return -E2BIG;
			snprintf(d->args[d->n_args++], sizeof(d->args[0]),
				 "%s", extra_args[i]);
		}
	}
	int err = daemon_launch(d, true);
	if (err == 0) {
		struct live_daemon *l = live_find(d->dir);
		if (l)
			l->pid = d->pid;
	}
	return err;
}

static int store_ask(struct harness_daemon *d, const char *req, size_t len,
		     int fd, char *out, size_t cap)
{
	int got[16];
	unsigned k;
	static char buf[STORE_MAX_FDS * 65 + 16];

	if (!d || d->store_ctl < 0)
		return -EINVAL;
	int r = send_fd(d->store_ctl, req, len, fd);
	if (r < 0)
		return r;
	struct pollfd p = { .fd = d->store_ctl, .events = POLLIN };
	if (poll(&p, 1, DAEMON_TIMEOUT_MS) <= 0)
		return -ETIMEDOUT;
	ssize_t n = recv_fds(d->store_ctl, buf, sizeof(buf) - 1, got, &k);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	for (unsigned i = 0; i < k; i++)
		close(got[i]);
	if (out && cap) {
		snprintf(out, cap, "%s", buf);
	}
	int lines = 0;
	for (ssize_t i = 0; i < n; i++)
		lines += buf[i] == '\n';
	return lines;
}

int harness_store_list(struct harness_daemon *d, char *out, size_t cap)
{
	return store_ask(d, "L", 1, -1, out, cap);
}

int harness_store_count(struct harness_daemon *d, const char *prefix)
{
	static char names[1 << 16];
	int n = harness_store_list(d, names, sizeof(names));
	if (n < 0)
		return n;
	int k = 0;
	for (char *l = names; *l;) {
		char *e = strchr(l, '\n');
		if (strncmp(l, prefix, strlen(prefix)) == 0)
			k++;
		if (!e)
			break;
		l = e + 1;
	}
	return k;
}

int harness_store_put(struct harness_daemon *d, const char *name, int fd)
{
	char req[80];
	int n = snprintf(req, sizeof(req), "P%s", name);
	int r = store_ask(d, req, (size_t)n, fd, NULL, 0);
	return r < 0 ? r : 0;
}

int harness_store_drop(struct harness_daemon *d)
{
	int r = store_ask(d, "D", 1, -1, NULL, 0);
	return r < 0 ? r : 0;
}

/* With VRAM_KEEP_LOGS set to a directory, the daemon's log is appended to
 * DIR/vramd.log before the temporary directory goes: benchmarks' daemons
 * log where their time went. */
static void keep_log(struct harness_daemon *d)
{
	const char *dir = getenv("VRAM_KEEP_LOGS");
	char path[512], buf[8192];
	ssize_t n;

	if (!dir || !dir[0])
		return;
	snprintf(path, sizeof(path), "%s/vramd.log", dir);
	int in = open(d->log, O_RDONLY | O_CLOEXEC);
	int out = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)n) != n)
			break;
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
}

int harness_daemon_stop(struct harness_daemon *d)
{
	int status;

	/* dir is set only between a successful start and stop, so a zeroed
	 * or already stopped struct touches no pid and no fd. */
	if (!d || !d->dir[0])
		return -ESRCH;
	if (d->pid > 0) {
		int64_t deadline = harness_now_ms() + DAEMON_TIMEOUT_MS;
		kill(d->pid, SIGTERM);
		while (!daemon_reap(d, false) && harness_now_ms() < deadline)
			harness_msleep(2);
		if (d->pid > 0) {
			fprintf(stderr, "harness: vramd ignored SIGTERM for "
					"10 s, killing it\n");
			kill(d->pid, SIGKILL);
			daemon_reap(d, true);
		}
	}
	status = d->status;
	keep_log(d);
	daemon_cleanup(d);
	return status;
}

int harness_daemon_wait(struct harness_daemon *d, int timeout_ms)
{
	int64_t deadline = harness_now_ms() + timeout_ms;

	if (!d || !d->dir[0])
		return -ESRCH;
	while (!daemon_reap(d, timeout_ms < 0)) {
		if (harness_now_ms() >= deadline)
			return -ETIMEDOUT;
		harness_msleep(2);
	}
	return d->status;
}

int harness_daemon_kill(struct harness_daemon *d, int sig)
{
	if (!d || !d->dir[0] || d->pid <= 0)
		return -ESRCH;
	return kill(d->pid, sig) < 0 ? -errno : 0;
}
