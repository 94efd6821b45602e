/* SPDX-License-Identifier: Apache-2.0 */
/* The client's end of the Unix socket: see sock.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "error.h"
#include "log.h"
#include "sock.h"
#include "wire.h"

/* Whether the process at the other end of fd may be trusted as vramd:
 * root, this process's own uid (a daemon the user started by hand), or
 * the user named by $VRAM_DAEMON_USER (a name or a uid). Anyone who can
 * create the socket path could otherwise receive what this client sends.
 * Returns 0 or -errno (EPERM: someone else answers). */
static int sock_peer_check(int fd, const char *path)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	const char *want = getenv("VRAM_DAEMON_USER");
	uid_t expected = 0;
	bool have = false;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return error_set(errno, "SO_PEERCRED on %s: %s", path,
				 strerror(errno));
	if (want && *want) {
		char *end;
		unsigned long v = strtoul(want, &end, 10);
		struct passwd *pw;
		if (!*end && *want != '-') {
			expected = (uid_t)v;
			have = true;
		} else if ((pw = getpwnam(want))) {
			expected = pw->pw_uid;
			have = true;
		} else {
			return error_set(EINVAL, "VRAM_DAEMON_USER=%s: no such user",
					 want);
		}
	}
	if (cred.uid == 0 || cred.uid == getuid() ||
	    (have && cred.uid == expected))
		return 0;
	return error_set(EPERM,
			 "%s is served by uid %u, not root%s%s: refusing to talk to it (set VRAM_DAEMON_USER to trust a daemon user)",
			 path, (unsigned)cred.uid, have ? " or " : "",
			 have ? want : "");
}

int sock_connect(const char *path, int *sock)
{
	struct sockaddr_un sa;
	socklen_t len;
	size_t n = strlen(path);
	int fd, r;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if (n == 0)
		return error_set(EINVAL, "empty socket path");
	if (n >= sizeof(sa.sun_path))
		return error_set(ENAMETOOLONG, "socket path too long: %s",
				 path);
	if (path[0] == '@') {
		/* Abstract namespace: a leading NUL, no terminator. */
		memcpy(sa.sun_path + 1, path + 1, n - 1);
		len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
	} else {
		memcpy(sa.sun_path, path, n);
		len = (socklen_t)sizeof(sa);
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return error_set(errno, "socket: %s", strerror(errno));
	do
		r = connect(fd, (struct sockaddr *)&sa, len);
	while (r < 0 && errno == EINTR);
	if (r < 0) {
		int err = errno;
		close(fd);
		return error_set(err, "cannot connect to vramd at %s: %s", path,
				 strerror(err));
	}
	r = sock_peer_check(fd, path);
	if (r < 0) {
		close(fd);
		return r;
	}
	/* Non-blocking from here on: the reader polls, sock_send waits. */
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) {
		int err = errno;
		close(fd);
		return error_set(err, "fcntl: %s", strerror(err));
	}
	*sock = fd;
	return 0;
}

int sock_open(const char *path, bool admin, int *sock)
{
	const char *env = getenv("VRAM_ADMIN_SOCKET");
	char lane[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char saved[ERROR_MSG_MAX];
	int r;

	if (!admin)
		return sock_connect(path, sock);
	if (env && *env)
		r = snprintf(lane, sizeof(lane), "%s", env);
	else
		r = snprintf(lane, sizeof(lane), "%s.admin", path);
	if (r < 0 || (size_t)r >= sizeof(lane))
		return sock_connect(path, sock);
	/* A failed try is no failure of the call: its message goes. */
	snprintf(saved, sizeof(saved), "%s", error_get());
	r = sock_connect(lane, sock);
	if (r != -ENOENT && r != -ECONNREFUSED && r != -EACCES)
		return r;
	log_write(VRAM_LOG_DEBUG, "admin socket %s: %s; using %s", lane,
		  strerror(-r), path);
	error_restore(saved);
	return sock_connect(path, sock);
}

int sock_send(int sock, const void *payload, size_t len, const int *fds,
	      unsigned nfds)
{
	struct wire_tx tx;
	int err;

	wire_tx_init(&tx);
	err = wire_tx_send(&tx, sock, payload, len, fds, nfds);
	while (err == 0) {
		/* The socket is non-blocking (the reader shares it): wait
		 * until it takes more. */
		struct pollfd p = { .fd = sock, .events = POLLOUT };
		int r = poll(&p, 1, -1);
		if (r < 0 && errno != EINTR) {
			err = -errno;
			break;
		}
		if (r > 0 && (p.revents & POLLNVAL)) {
			err = -EBADF;
			break;
		}
		/* POLLERR and POLLHUP: the next flush reports the error. */
		err = wire_tx_flush(&tx, sock);
	}
	wire_tx_free(&tx);
	return err < 0 ? err : 0;
}
