/* SPDX-License-Identifier: Apache-2.0 */
/* systemd notification. Messages go to $NOTIFY_SOCKET with a non-blocking
 * send of our own: libsystemd's sd_notify() blocks when the receiver's
 * queue is full, and a slow supervisor must never stall the loop that
 * serves pauses. A dropped STATUS= is harmless; READY=1 and the fd
 * store's messages wait for room (notify_send_fds). Without NOTIFY_SOCKET every call is a
 * no-op, so vramd runs the same by hand, under systemd and in tests (which
 * set NOTIFY_SOCKET to wait for READY=1). libsystemd still tells the
 * watchdog period and the sockets systemd passed. */
#include "notify.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "log.h"

static int notify_fd = -1;
static struct sockaddr_un notify_addr;
static socklen_t notify_len;

static int notify_open(void)
{
	const char *path = getenv("NOTIFY_SOCKET");
	size_t n;

	if (notify_fd >= 0)
		return 0;
	if (!path || !path[0])
		return -ENOENT;
	n = strlen(path);
	if ((path[0] != '/' && path[0] != '@') || n >= sizeof(notify_addr.sun_path))
		return -EINVAL;
	memset(&notify_addr, 0, sizeof(notify_addr));
	notify_addr.sun_family = AF_UNIX;
	memcpy(notify_addr.sun_path, path, n);
	if (path[0] == '@')
		notify_addr.sun_path[0] = '\0'; /* abstract namespace */
	notify_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
	notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	return notify_fd < 0 ? -errno : 0;
}

static void notify_send(const char *msg)
{
	if (notify_open() < 0)
		return;
	if (sendto(notify_fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT,
		   (struct sockaddr *)&notify_addr, notify_len) < 0)
		log_debug("sd_notify \"%.20s\" dropped: %s", msg, strerror(errno));
}

int notify_send_fds(const char *msg, const int *fds, unsigned nfds)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int) * 16)];
	} ctl;
	struct iovec iov = { .iov_base = (void *)msg, .iov_len = strlen(msg) };
	struct msghdr mh = { 0 };
	int r = notify_open();

	if (r < 0)
		return r;
	if (nfds > 16)
		return -E2BIG;
	mh.msg_name = &notify_addr;
	mh.msg_namelen = notify_len;
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	if (nfds) {
		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	/* An unconnected datagram socket polls writable whatever the
	 * receiver's queue holds: wait by the clock instead. */
	for (int tries = 0; tries < 1000; tries++) {
		if (sendmsg(notify_fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) >= 0)
			return 0;
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	return -EAGAIN;
}

int notify_barrier(int timeout_ms)
{
	int p[2];

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	int r = notify_send_fds("BARRIER=1", &p[1], 1);
	close(p[1]);
	if (r == 0) {
		/* POLLHUP once systemd closed the write end: it needs no
		 * event asked for. */
		struct pollfd pf = { .fd = p[0], .events = 0 };
		do
			r = poll(&pf, 1, timeout_ms);
		while (r < 0 && errno == EINTR);
		r = r > 0 ? 0 : r == 0 ? -ETIMEDOUT : -errno;
	}
	close(p[0]);
	return r;
}

void notify_ready(const char *status)
{
	char msg[256];
	snprintf(msg, sizeof(msg), "READY=1\nSTATUS=%s\nMAINPID=%d", status,
		 (int)getpid());
	/* After a restart the fd store's messages may fill the queue just
	 * before: READY=1 waits for room like them, it must not be lost. */
	if (notify_send_fds(msg, NULL, 0) == -EAGAIN)
		log_warn("sd_notify READY=1 dropped: the receiver's queue is full");
}

void notify_status(const char *status)
{
	char msg[256];
	snprintf(msg, sizeof(msg), "STATUS=%s", status);
	notify_send(msg);
}

void notify_stopping(void)
{
	notify_send("STOPPING=1\nSTATUS=stopping");
}

void notify_watchdog(void)
{
	notify_send("WATCHDOG=1");
}

uint64_t notify_watchdog_usec(void)
{
	uint64_t usec = 0;
	if (sd_watchdog_enabled(0, &usec) > 0)
		return usec;
	return 0;
}
