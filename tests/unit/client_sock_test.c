/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of libvram/sock.c: connecting to a Unix socket by path and by
 * abstract name, and the blocking send that waits for a full socket. */
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness/harness.h"
#include "sock.h"
#include "test.h"
#include "vram.h"
#include "wire.h"

static int memfd_with(const char *text)
{
	int fd = memfd_create("sock-test", MFD_CLOEXEC);

	ASSERT_GE(fd, 0);
	ASSERT_EQ(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	return fd;
}

/* Reads one whole frame from a blocking socket. */
static int recv_frame(struct wire_rx *rx, int sock, struct wire_frame *f)
{
	for (;;) {
		int r = wire_rx_next(rx, f);
		if (r != 0)
			return r;
		struct pollfd p = { .fd = sock, .events = POLLIN };
		if (poll(&p, 1, -1) < 0)
			return -errno;
		r = wire_rx_read(rx, sock);
		if (r == 0)
			return -EPIPE;
		if (r < 0 && r != -EAGAIN)
			return r;
	}
}

/* A frame far larger than the socket's buffer goes out whole through a
 * non-blocking socket: sock_send waits for the reader instead of failing
 * with -EAGAIN or cutting the frame. */
TEST(send_waits_for_a_full_socket)
{
	enum { LEN = 512 * 1024 };
	int sv[2], sndbuf = 4096, mfd = memfd_with("blocking");
	uint8_t *buf = malloc(LEN);
	pid_t pid;

	ASSERT(buf != NULL);
	for (size_t i = 0; i < LEN; i++)
		buf[i] = (uint8_t)(i % 251);
	ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		struct wire_frame f = { 0 };
		struct wire_rx rx;
		close(sv[0]);
		wire_rx_init(&rx);
		if (recv_frame(&rx, sv[1], &f) != 1 || f.len != LEN ||
		    memcmp(f.payload, buf, LEN) != 0 || f.nfds != 1)
			_exit(1);
		char text[16] = { 0 };
		if (pread(f.fds[0], text, sizeof(text) - 1, 0) != 8 ||
		    strcmp(text, "blocking") != 0)
			_exit(2);
		_exit(0);
	}
	close(sv[1]);
	ASSERT_OK(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf,
			     sizeof(sndbuf)));
	ASSERT_OK(fcntl(sv[0], F_SETFL, O_NONBLOCK));
	ASSERT_OK(sock_send(sv[0], buf, LEN, &mfd, 1));
	ASSERT_EQ(harness_wait(pid, 10000), 0);
	/* The caller keeps its fd. */
	ASSERT_GE(fcntl(mfd, F_GETFD), 0);
	close(mfd);
	close(sv[0]);
	free(buf);
}

TEST(send_errors)
{
	int sv[2], mfd = memfd_with("pipe");

	ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	ASSERT_EQ(sock_send(sv[0], "x", WIRE_MAX_PAYLOAD + 1, NULL, 0),
		  -EMSGSIZE);
	close(sv[1]);
	/* The peer is gone: -EPIPE, not SIGPIPE; the caller keeps its fd. */
	ASSERT_EQ(sock_send(sv[0], "abc", 3, &mfd, 1), -EPIPE);
	ASSERT_GE(fcntl(mfd, F_GETFD), 0);
	close(sv[0]);
	ASSERT_EQ(sock_send(sv[0], "x", 1, NULL, 0), -EBADF);
	close(mfd);
}

/* A listening socket at path (or, with a leading '@', an abstract name). */
static int listen_at(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t n = strlen(path);
	socklen_t len = (socklen_t)sizeof(sa);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ASSERT_GE(fd, 0);
	if (path[0] == '@') {
		memcpy(sa.sun_path + 1, path + 1, n - 1);
		len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
	} else {
		memcpy(sa.sun_path, path, n + 1);
	}
	ASSERT_OK(bind(fd, (struct sockaddr *)&sa, len));
	ASSERT_OK(listen(fd, 1));
	return fd;
}

TEST(connect_by_path_and_by_abstract_name)
{
	char path[64], abstract[64];
	int l1, l2, s;

	snprintf(path, sizeof(path), "/tmp/vram-sock-test-%d", (int)getpid());
	snprintf(abstract, sizeof(abstract), "@vram-sock-test-%d",
		 (int)getpid());
	unlink(path);
	l1 = listen_at(path);
	l2 = listen_at(abstract);
	for (int i = 0; i < 2; i++) {
		ASSERT_OK(sock_connect(i ? abstract : path, &s));
		/* Non-blocking and close-on-exec, as the reader needs. */
		ASSERT(fcntl(s, F_GETFL) & O_NONBLOCK);
		ASSERT(fcntl(s, F_GETFD) & FD_CLOEXEC);
		int a = accept(i ? l2 : l1, NULL, NULL);
		ASSERT_GE(a, 0);
		close(a);
		close(s);
	}
	close(l1);
	close(l2);
	unlink(path);
}

TEST(connect_errors_say_why)
{
	char longpath[200];
	int s = -1;

	memset(longpath, 'x', sizeof(longpath) - 1);
	longpath[0] = '/';
	longpath[sizeof(longpath) - 1] = '\0';
	ASSERT_EQ(sock_connect("", &s), -EINVAL);
	ASSERT_EQ(sock_connect(longpath, &s), -ENAMETOOLONG);
	ASSERT_EQ(sock_connect("/nonexistent/vram.sock", &s), -ENOENT);
	ASSERT(strstr(vram_last_error(), "/nonexistent/vram.sock") != NULL);
	ASSERT_EQ(s, -1);
}
