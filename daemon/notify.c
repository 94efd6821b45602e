/* systemd notification. Messages go to $NOTIFY_SOCKET with a non-blocking
 * send of our own: libsystemd's sd_notify() blocks when the receiver's
 * queue is full, and a slow supervisor must never stall the loop that
 * serves pauses. A dropped STATUS= is harmless; READY=1 is the first
 * message and always finds room. Without NOTIFY_SOCKET every call is a
 * no-op, so vramd runs the same by hand, under systemd and in tests (which
 * set NOTIFY_SOCKET to wait for READY=1). libsystemd still tells the
 * watchdog period and the sockets systemd passed. */
#include "notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
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

void notify_ready(const char *status)
{
	char msg[256];
	snprintf(msg, sizeof(msg), "READY=1\nSTATUS=%s\nMAINPID=%d", status,
		 (int)getpid());
	notify_send(msg);
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

int notify_listen_fd(void)
{
	int n = sd_listen_fds(1);
	if (n < 0) {
		log_warn("sd_listen_fds failed; creating our own socket");
		return -1;
	}
	if (n == 0)
		return -1;
	if (n > 1)
		log_warn("systemd passed %d sockets; using the first", n);
	return SD_LISTEN_FDS_START;
}
