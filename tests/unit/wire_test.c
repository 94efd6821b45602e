/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of proto/wire.c over socketpair(AF_UNIX, SOCK_STREAM): frames
 * with and without fds, partial frames, every malformed input the receiver
 * must refuse, fd ownership on every path, partial writes. Malformed frames
 * are written by hand here, so they do not depend on the sender being
 * right.
 */
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "frame_send.h"
#include "harness/harness.h"
#include "test.h"
#include "vram.pb-c.h"
#include "wire.h"

static void sock_pair(int sv[2])
{
	ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
}

static int memfd_with(const char *text)
{
	int fd = memfd_create("wire-test", MFD_CLOEXEC);

	ASSERT_GE(fd, 0);
	ASSERT_EQ(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	return fd;
}

/* Asserts fd refers to the same file as orig and holds text. */
static void expect_same_file(int fd, int orig, const char *text)
{
	struct stat a, b;
	char buf[64] = { 0 };

	ASSERT_EQ(fstat(fd, &a), 0);
	ASSERT_EQ(fstat(orig, &b), 0);
	ASSERT_UEQ(a.st_ino, b.st_ino);
	ASSERT_UEQ(a.st_dev, b.st_dev);
	ASSERT_EQ(pread(fd, buf, sizeof(buf) - 1, 0), (ssize_t)strlen(text));
	ASSERT_STREQ(buf, text);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void make_header(uint8_t h[WIRE_HEADER_SIZE], uint32_t magic,
			uint32_t len, uint32_t nfds)
{
	put32(h, magic);
	put32(h + 4, len);
	put32(h + 8, nfds);
}

/* One sendmsg of exactly these bytes and fds, bypassing wire.c, so tests
 * can send what a broken or hostile peer would. */
static void send_raw(int sock, const void *buf, size_t len, const int *fds,
		     unsigned nfds)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * 253)];
	} control;
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

	ASSERT_LE(nfds, 253);
	if (nfds > 0) {
		memset(&control, 0, sizeof(control));
		msg.msg_control = control.buf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	ASSERT_EQ(sendmsg(sock, &msg, MSG_NOSIGNAL), (ssize_t)len);
}

/* Reads from sock until a frame is complete or the wire reports an error;
 * returns what wire_rx_next() last returned (0 only on EOF). */
static int recv_frame(struct wire_rx *rx, int sock, struct wire_frame *f)
{
	for (;;) {
		int r = wire_rx_next(rx, f);
		if (r != 0)
			return r;
		r = wire_rx_read(rx, sock);
		if (r == -EAGAIN) {
			struct pollfd p = { .fd = sock, .events = POLLIN };
			ASSERT_EQ(poll(&p, 1, 5000), 1);
			continue;
		}
		if (r < 0)
			return r;
		if (r == 0)
			return 0;
	}
}

/* Moves queued frames from tx (on a) to rx (on b) in this one process,
 * flushing and reading in turns, until a frame is complete. */
static int pump_frame(struct wire_tx *tx, int a, struct wire_rx *rx, int b,
		      struct wire_frame *f)
{
	for (int i = 0; i < 100000; i++) {
		int r = wire_rx_next(rx, f);
		if (r != 0)
			return r;
		r = wire_tx_flush(tx, a);
		ASSERT_GE(r, 0);
		r = wire_rx_read(rx, b);
		if (r < 0 && r != -EAGAIN)
			return r;
	}
	TEST_FAIL("no frame after 100000 rounds");
}

static int fd_count(void)
{
	int n = harness_count_fds(0);

	ASSERT_GT(n, 0);
	return n;
}

TEST(round_trip_without_fds)
{
	struct wire_frame f = { 0 };
	struct wire_rx rx;
	int sv[2];

	sock_pair(sv);
	wire_rx_init(&rx);
	ASSERT_OK(frame_send(sv[0], "hello", 5, NULL, 0));
	ASSERT_OK(frame_send(sv[0], NULL, 0, NULL, 0));

	ASSERT_EQ(recv_frame(&rx, sv[1], &f), 1);
	ASSERT_UEQ(f.len, 5);
	ASSERT_EQ(f.nfds, 0);
	ASSERT(memcmp(f.payload, "hello", 5) == 0);
	wire_frame_clear(&f);
	ASSERT(f.payload == NULL);

	/* An empty payload is a frame too, with a payload pointer. */
	ASSERT_EQ(recv_frame(&rx, sv[1], &f), 1);
	ASSERT_UEQ(f.len, 0);
	ASSERT(f.payload != NULL);
	wire_frame_clear(&f);

	ASSERT_EQ(wire_rx_next(&rx, &f), 0);
	ASSERT_UEQ(rx.len, 0);
	wire_rx_free(&rx);
	wire_frame_clear(&f);
}

TEST(round_trip_with_fds)
{
	struct wire_frame f = { 0 };
	struct wire_rx rx;
	int sv[2], mine[2];

	sock_pair(sv);
	mine[0] = memfd_with("first");
	mine[1] = memfd_with("second");
	wire_rx_init(&rx);
	ASSERT_OK(frame_send(sv[0], "x", 1, mine, 2));

	ASSERT_EQ(recv_frame(&rx, sv[1], &f), 1);
	ASSERT_EQ(f.nfds, 2);
	ASSERT_UEQ(f.len, 1);
	ASSERT_EQ(f.payload[0], 'x');
	expect_same_file(f.fds[0], mine[0], "first");
	expect_same_file(f.fds[1], mine[1], "second");
	/* New fds, close-on-exec (MSG_CMSG_CLOEXEC), and ours stay open. */
	ASSERT_NE(f.fds[0], mine[0]);
	ASSERT(fcntl(f.fds[0], F_GETFD) & FD_CLOEXEC);
	ASSERT(fcntl(f.fds[1], F_GETFD) & FD_CLOEXEC);
	ASSERT_EQ(fcntl(mine[0], F_GETFD) >= 0, 1);

	int before = fd_count();
	wire_frame_clear(&f);
	ASSERT_EQ(fd_count(), before - 2);
	wire_rx_free(&rx);
}

TEST(largest_frame)
{
	struct wire_frame f = { 0 };
	struct wire_tx tx;
	struct wire_rx rx;
	int sv[2], fds[WIRE_MAX_FDS];
	uint8_t *big = malloc(WIRE_MAX_PAYLOAD);
	int mfd = memfd_with("shared");

	ASSERT(big != NULL);
	for (size_t i = 0; i < WIRE_MAX_PAYLOAD; i++)
		big[i] = (uint8_t)(i * 7 + (i >> 12));
	/* One file 250 times: each arrives as its own fd. */
	for (unsigned i = 0; i < WIRE_MAX_FDS; i++)
		fds[i] = mfd;
	sock_pair(sv);
	wire_tx_init(&tx);
	wire_rx_init(&rx);
	ASSERT_OK(wire_tx_queue(&tx, big, WIRE_MAX_PAYLOAD, fds, WIRE_MAX_FDS));
	ASSERT_UEQ(tx.bytes, WIRE_MAX_PAYLOAD);

	ASSERT_EQ(pump_frame(&tx, sv[0], &rx, sv[1], &f), 1);
	ASSERT_UEQ(f.len, WIRE_MAX_PAYLOAD);
	ASSERT(memcmp(f.payload, big, WIRE_MAX_PAYLOAD) == 0);
	ASSERT_EQ(f.nfds, WIRE_MAX_FDS);
	for (unsigned i = 0; i < WIRE_MAX_FDS; i++)
		expect_same_file(f.fds[i], mfd, "shared");
	ASSERT_LE(rx.cap, WIRE_HEADER_SIZE + WIRE_MAX_PAYLOAD);
	ASSERT_EQ(wire_tx_flush(&tx, sv[0]), 1);
	ASSERT_UEQ(tx.bytes, 0);

	wire_frame_clear(&f);
	wire_rx_free(&rx);
	wire_tx_free(&tx);
	free(big);
}

/* Many frames written at once are read in few reads; each must come out
 * whole, in order, with its own fds. */
TEST(many_frames_back_to_back)
{
	enum { N = 1000 };
	struct wire_frame f = { 0 };
	struct wire_tx tx;
	struct wire_rx rx;
	char text[64];
	int sv[2], base = fd_count();

	sock_pair(sv);
	wire_tx_init(&tx);
	wire_rx_init(&rx);
	for (int i = 0; i < N; i++) {
		int len =
			snprintf(text, sizeof(text), "frame %d %.*s", i, i % 40,
				 "........................................");
		if (i % 10 == 0) {
			int mfd = memfd_with(text);
			ASSERT_OK(
				wire_tx_queue(&tx, text, (size_t)len, &mfd, 1));
			close(mfd);
		} else {
			ASSERT_OK(
				wire_tx_queue(&tx, text, (size_t)len, NULL, 0));
		}
	}
	for (int i = 0; i < N; i++) {
		int len =
			snprintf(text, sizeof(text), "frame %d %.*s", i, i % 40,
				 "........................................");
		ASSERT_EQ(pump_frame(&tx, sv[0], &rx, sv[1], &f), 1);
		ASSERT_UEQ(f.len, (size_t)len);
		ASSERT(memcmp(f.payload, text, (size_t)len) == 0);
		ASSERT_EQ(f.nfds, i % 10 == 0 ? 1 : 0);
		if (f.nfds) {
			char buf[64] = { 0 };
			ASSERT_EQ(pread(f.fds[0], buf, sizeof(buf) - 1, 0),
				  len);
			ASSERT_STREQ(buf, text);
		}
		wire_frame_clear(&f);
	}
	ASSERT_EQ(wire_rx_next(&rx, &f), 0);
	wire_rx_free(&rx);
	wire_tx_free(&tx);
	close(sv[0]);
	close(sv[1]);
	ASSERT_EQ(fd_count(), base);
}

TEST(partial_frame_byte_by_byte)
{
	uint8_t frame[WIRE_HEADER_SIZE + 7];
	struct wire_frame f = { 0 };
	struct wire_rx rx;
	int sv[2];

	make_header(frame, WIRE_MAGIC, 7, 0);
	memcpy(frame + WIRE_HEADER_SIZE, "payload", 7);
	sock_pair(sv);
	wire_rx_init(&rx);
	for (size_t i = 0; i < sizeof(frame); i++) {
		ASSERT_EQ(write(sv[0], frame + i, 1), 1);
		ASSERT_EQ(wire_rx_read(&rx, sv[1]), 1);
		ASSERT_EQ(wire_rx_next(&rx, &f), i + 1 == sizeof(frame));
	}
	ASSERT_UEQ(f.len, 7);
	ASSERT(memcmp(f.payload, "payload", 7) == 0);
	wire_frame_clear(&f);
	ASSERT_EQ(wire_rx_read(&rx, sv[1]), -EAGAIN);
	wire_rx_free(&rx);
}

/* A frame's fds come with its first bytes; the rest may follow later. */
TEST(partial_frame_with_fds)
{
	uint8_t frame[WIRE_HEADER_SIZE + 4];
	struct wire_frame f = { 0 };
	struct wire_rx rx;
	int sv[2], mfd = memfd_with("late");

	make_header(frame, WIRE_MAGIC, 4, 1);
	memcpy(frame + WIRE_HEADER_SIZE, "abcd", 4);
	sock_pair(sv);
	wire_rx_init(&rx);
	send_raw(sv[0], frame, 3, &mfd, 1);
	ASSERT_EQ(wire_rx_read(&rx, sv[1]), 3);
	ASSERT_EQ(wire_rx_next(&rx, &f), 0);
	ASSERT_EQ(rx.nfds, 1);
	send_raw(sv[0], frame + 3, WIRE_HEADER_SIZE - 3 + 2, NULL, 0);
	ASSERT_EQ(wire_rx_read(&rx, sv[1]), WIRE_HEADER_SIZE - 3 + 2);
	ASSERT_EQ(wire_rx_next(&rx, &f), 0);
	send_raw(sv[0], frame + WIRE_HEADER_SIZE + 2, 2, NULL, 0);
	ASSERT_EQ(recv_frame(&rx, sv[1], &f), 1);
	ASSERT_EQ(f.nfds, 1);
	expect_same_file(f.fds[0], mfd, "late");
	wire_frame_clear(&f);
	wire_rx_free(&rx);
}

TEST(oversize_length_refused_before_allocating)
{
	static const uint32_t lens[] = { WIRE_MAX_PAYLOAD + 1, 0xffffffffu };

	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		uint8_t h[WIRE_HEADER_SIZE], junk[8192];
		struct wire_frame f = { 0 };
		struct wire_rx rx;
		int sv[2];

		memset(junk, 'j', sizeof(junk));
		make_header(h, WIRE_MAGIC, lens[i], 0);
		sock_pair(sv);
		wire_rx_init(&rx);
		ASSERT_EQ(write(sv[0], h, sizeof(h)), (ssize_t)sizeof(h));
		for (int k = 0; k < 16; k++)
			ASSERT_EQ(write(sv[0], junk, sizeof(junk)),
				  (ssize_t)sizeof(junk));
		/* Even a reader that keeps reading before it looks at the
		 * frame must not size its buffer after the header. */
		for (int k = 0; k < 4; k++)
			ASSERT_GT(wire_rx_read(&rx, sv[1]), 0);
		ASSERT_LE(rx.cap, 128 * 1024);
		ASSERT_EQ(wire_rx_next(&rx, &f), -EMSGSIZE);
		ASSERT(f.payload == NULL);
		ASSERT_LE(rx.cap, 128 * 1024);
		wire_rx_free(&rx);
		close(sv[0]);
		close(sv[1]);
	}
}

TEST(bad_magic)
{
	uint8_t h[WIRE_HEADER_SIZE];
	struct wire_frame f = { 0 };
	struct wire_rx rx;
	int sv[2];

	make_header(h, 0x4d415257u, 0, 0);
	sock_pair(sv);
	wire_rx_init(&rx);
	ASSERT_EQ(write(sv[0], h, sizeof(h)), (ssize_t)sizeof(h));
	ASSERT_EQ(recv_frame(&rx, sv[1], &f), -EPROTO);

	/* Garbage is refused from its first byte, without waiting for a
	 * whole header. */
	ASSERT_EQ(write(sv[0], "X", 1), 1);
	ASSERT_EQ(wire_rx_read(&rx, sv[1]), 1);
	ASSERT_EQ(wire_rx_next(&rx, &f), -EPROTO);
	wire_rx_free(&rx);
}

TEST(fd_count_over_limit)
{
	uint8_t h[WIRE_HEADER_SIZE];
	struct wire_frame f = { 0 };
	struct wire_rx rx;
	int sv[2];

	make_header(h, WIRE_MAGIC, 0, WIRE_MAX_FDS + 1);
	sock_pair(sv);
	wire_rx_init(&rx);
	ASSERT_EQ(write(sv[0], h, sizeof(h)), (ssize_t)sizeof(h));
	ASSERT_EQ(recv_frame(&rx, sv[1], &f), -EPROTO);
	wire_rx_free(&rx);
}

/* The frame is complete but one of its two fds never came: refused, and
 * the one that came is closed by the wire itself, not left to rx_free. */
TEST(frame_missing_an_fd)
{
	uint8_t frame[WIRE_HEADER_SIZE + 4];
	struct wire_frame f = { 0 };
	struct wire_rx rx;
	int sv[2], mfd = memfd_with("one"), base;

	make_header(frame, WIRE_MAGIC, 4, 2);
	memcpy(frame + WIRE_HEADER_SIZE, "abcd", 4);
	sock_pair(sv);
	wire_rx_init(&rx);
	base = fd_count();
	send_raw(sv[0], frame, sizeof(frame), &mfd, 1);
	ASSERT_EQ(recv_frame(&rx, sv[1], &f), -EPROTO);
	ASSERT_EQ(fd_count(), base);
	ASSERT_EQ(f.nfds, 0);
	wire_rx_free(&rx);
}

/* Detected as soon as the header is in, before the payload arrives. */
TEST(frame_missing_an_fd_partial)
{
	uint8_t h[WIRE_HEADER_SIZE];
	struct wire_frame f = { 0 };
	struct wire_rx rx;
	int sv[2], mfd = memfd_with("one"), base;

	make_header(h, WIRE_MAGIC, 100, 2);
	sock_pair(sv);
	wire_rx_init(&rx);
	base = fd_count();
	send_raw(sv[0], h, sizeof(h), &mfd, 1);
	ASSERT_EQ(wire_rx_read(&rx, sv[1]), (int)sizeof(h));
	ASSERT_EQ(wire_rx_next(&rx, &f), -EPROTO);
	ASSERT_EQ(fd_count(), base);
	wire_rx_free(&rx);
}

/* A frame announcing no fd but carrying one: the fd belongs to no frame. */
TEST(stray_fds_without_frame)
{
	uint8_t frame[WIRE_HEADER_SIZE + 2];
	struct wire_frame f = { 0 };
	struct wire_rx rx;
	int sv[2], mfd = memfd_with("stray"), base;

	make_header(frame, WIRE_MAGIC, 2, 0);
	memcpy(frame + WIRE_HEADER_SIZE, "hi", 2);
	sock_pair(sv);
	wire_rx_init(&rx);
	base = fd_count();
	send_raw(sv[0], frame, sizeof(frame), &mfd, 1);
	ASSERT_EQ(recv_frame(&rx, sv[1], &f), -EPROTO);
	ASSERT(f.payload == NULL);
	ASSERT_EQ(fd_count(), base);
	wire_rx_free(&rx);
}

/* More fds than the frame in progress announced, before it is complete. */
TEST(extra_fds_with_partial_frame)
{
	uint8_t frame[WIRE_HEADER_SIZE + 10];
	struct wire_frame f = { 0 };
	struct wire_rx rx;
	int sv[2], fds[2], base;

	fds[0] = memfd_with("a");
	fds[1] = memfd_with("b");
	make_header(frame, WIRE_MAGIC, 10, 1);
	sock_pair(sv);
	wire_rx_init(&rx);
	base = fd_count();
	send_raw(sv[0], frame, WIRE_HEADER_SIZE + 5, fds, 2);
	ASSERT_EQ(wire_rx_read(&rx, sv[1]), (int)WIRE_HEADER_SIZE + 5);
	ASSERT_EQ(wire_rx_next(&rx, &f), -EPROTO);
	ASSERT_EQ(fd_count(), base);
	wire_rx_free(&rx);
}

/* A peer that sends fds faster than frames: the queue has a cap, and
 * everything queued is closed when it is passed. */
TEST(too_many_fds_queued)
{
	enum { PER_MSG = 170 };
	struct rlimit rl;
	struct wire_rx rx;
	int sv[2], fds[PER_MSG], mfd = memfd_with("many"), base;

	ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < 1024)
		SKIP("RLIMIT_NOFILE %lu is too low",
		     (unsigned long)rl.rlim_cur);
	for (int i = 0; i < PER_MSG; i++)
		fds[i] = mfd;
	sock_pair(sv);
	wire_rx_init(&rx);
	base = fd_count();
	/* Three one-byte messages that are a valid start of a header;
	 * recvmsg ends after each message that carries fds. */
	send_raw(sv[0], "V", 1, fds, PER_MSG);
	send_raw(sv[0], "R", 1, fds, PER_MSG);
	send_raw(sv[0], "A", 1, fds, PER_MSG);
	ASSERT_EQ(wire_rx_read(&rx, sv[1]), 1);
	ASSERT_EQ(wire_rx_read(&rx, sv[1]), 1);
	ASSERT_EQ(fd_count(), base + 2 * PER_MSG);
	ASSERT_EQ(wire_rx_read(&rx, sv[1]), -EPROTO);
	ASSERT_EQ(fd_count(), base);
	ASSERT_EQ(rx.nfds, 0);
	wire_rx_free(&rx);
}

/* With no fd numbers left the kernel installs only some of the fds and
 * sets MSG_CTRUNC: the frame is refused and those that did arrive are
 * closed. */
TEST(truncated_control_data)
{
	enum { NFDS = 16, ROOM = 3 };
	uint8_t frame[WIRE_HEADER_SIZE];
	struct wire_frame f = { 0 };
	struct rlimit rl;
	struct wire_rx rx;
	int sv[2], fds[NFDS], mfd = memfd_with("ctrunc"), base, top = 0;
	int *fill = NULL, nfill = 0;

	for (int i = 0; i < NFDS; i++)
		fds[i] = mfd;
	make_header(frame, WIRE_MAGIC, 0, NFDS);
	sock_pair(sv);
	wire_rx_init(&rx);
	send_raw(sv[0], frame, sizeof(frame), fds, NFDS);

	/* The limit is on fd numbers and inherited fds may leave holes:
	 * lower it just past the highest open fd, fill every hole, then
	 * free exactly ROOM numbers. */
	for (int fd = 0; fd < 65536; fd++)
		if (fcntl(fd, F_GETFD) >= 0)
			top = fd;
	ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
	rl.rlim_cur = (rlim_t)top + 1 + ROOM;
	ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
	fill = calloc((size_t)top + 1 + ROOM, sizeof(int));
	ASSERT(fill != NULL);
	for (;;) {
		int fd = dup(mfd);
		if (fd < 0) {
			ASSERT_EQ(errno, EMFILE);
			break;
		}
		fill[nfill++] = fd;
	}
	ASSERT_GE(nfill, ROOM);
	for (int i = 0; i < ROOM; i++)
		close(fill[--nfill]);
	/* harness_count_fds() needs one fd of its own. */
	base = fd_count();

	ASSERT_EQ(wire_rx_read(&rx, sv[1]), -EPROTO);
	ASSERT_EQ(fd_count(), base);
	ASSERT_EQ(rx.nfds, 0);
	ASSERT_EQ(wire_rx_next(&rx, &f), 0);
	while (nfill > 0)
		close(fill[--nfill]);
	free(fill);
	wire_rx_free(&rx);
}

TEST(eof)
{
	struct wire_frame f = { 0 };
	struct wire_rx rx;
	int sv[2];

	sock_pair(sv);
	wire_rx_init(&rx);
	ASSERT_EQ(wire_rx_read(&rx, sv[1]), -EAGAIN);
	close(sv[0]);
	ASSERT_EQ(recv_frame(&rx, sv[1], &f), 0);
	ASSERT_EQ(wire_rx_read(&rx, sv[1]), 0);
	wire_rx_free(&rx);
}

TEST(rx_free_closes_queued_fds)
{
	uint8_t frame[WIRE_HEADER_SIZE + 8];
	struct wire_frame f = { 0 };
	struct wire_rx rx;
	int sv[2], fds[3], base;

	for (int i = 0; i < 3; i++)
		fds[i] = memfd_with("queued");
	make_header(frame, WIRE_MAGIC, 8, 3);
	sock_pair(sv);
	wire_rx_init(&rx);
	base = fd_count();
	send_raw(sv[0], frame, WIRE_HEADER_SIZE + 1, fds, 3);
	ASSERT_EQ(wire_rx_read(&rx, sv[1]), (int)WIRE_HEADER_SIZE + 1);
	ASSERT_EQ(wire_rx_next(&rx, &f), 0);
	ASSERT_EQ(rx.nfds, 3);
	ASSERT_EQ(fd_count(), base + 3);
	wire_rx_free(&rx);
	ASSERT_EQ(fd_count(), base);
	wire_rx_free(&rx);
}

TEST(tx_queue_limits_and_bad_fds)
{
	static uint8_t big[WIRE_MAX_PAYLOAD + 1];
	int fds[WIRE_MAX_FDS + 1], mfd = memfd_with("q"), base, probe;
	struct wire_tx tx;

	for (unsigned i = 0; i <= WIRE_MAX_FDS; i++)
		fds[i] = mfd;
	wire_tx_init(&tx);
	base = fd_count();
	ASSERT_EQ(wire_tx_queue(&tx, big, sizeof(big), NULL, 0), -EMSGSIZE);
	ASSERT_EQ(wire_tx_queue(&tx, "x", 1, fds, WIRE_MAX_FDS + 1), -EMSGSIZE);
	ASSERT_EQ(wire_tx_queue(&tx, NULL, 1, NULL, 0), -EINVAL);
	ASSERT_EQ(wire_tx_queue(&tx, "x", 1, NULL, 1), -EINVAL);

	/* The third fd is bad: the two dup()s already made are undone. */
	fds[2] = 60000;
	ASSERT(fcntl(fds[2], F_GETFD) < 0);
	ASSERT_EQ(wire_tx_queue(&tx, "x", 1, fds, 3), -EBADF);
	ASSERT_EQ(fd_count(), base);
	ASSERT(tx.head == NULL);
	ASSERT_UEQ(tx.bytes, 0);

	/* Duplicates are close-on-exec; the lowest free number is probe. */
	probe = dup(mfd);
	close(probe);
	ASSERT_OK(wire_tx_queue(&tx, "x", 1, &mfd, 1));
	ASSERT(fcntl(probe, F_GETFD) & FD_CLOEXEC);
	wire_tx_free(&tx);
}

TEST(tx_free_closes_fds)
{
	struct wire_tx tx;
	int fds[2], base;

	fds[0] = memfd_with("a");
	fds[1] = memfd_with("b");
	wire_tx_init(&tx);
	base = fd_count();
	for (int i = 0; i < 3; i++)
		ASSERT_OK(wire_tx_queue(&tx, "frame", 5, fds, 2));
	ASSERT_UEQ(tx.bytes, 15);
	ASSERT_EQ(fd_count(), base + 6);
	wire_tx_free(&tx);
	ASSERT_EQ(fd_count(), base);
	ASSERT(tx.head == NULL);
	wire_tx_free(&tx);
}

/* A peer that does not read: the queue keeps what the socket refuses and
 * sends the rest later, each byte once, each frame's fds once. */
/* Frame i of the partial-write cases: len bytes of i ^ (k * 31). */
static void frame_fill(uint8_t *payload, int i, size_t len)
{
	for (size_t k = 0; k < len; k++)
		payload[k] = (uint8_t)(i ^ (k * 31));
}

/* Reads the next frame from sv[1] into f, flushing tx to sv[0] whenever
 * the socket is empty. Returns the flushes that wrote less than the queue
 * (a partial write left for later). */
static int frame_receive(struct wire_rx *rx, struct wire_frame *f,
			 struct wire_tx *tx, const int sv[2])
{
	int partial = 0;

	for (;;) {
		int r = wire_rx_next(rx, f);
		ASSERT_GE(r, 0);
		if (r == 1)
			return partial;
		r = wire_rx_read(rx, sv[1]);
		if (r == -EAGAIN) {
			r = wire_tx_flush(tx, sv[0]);
			ASSERT_GE(r, 0);
			partial += r == 0;
			continue;
		}
		ASSERT_GT(r, 0);
	}
}

/* Checks frame i as frame_fill made it, and (with_fd) its one fd, a memfd
 * that reads "fd of frame i". */
static void frame_check(const struct wire_frame *f, int i, size_t len,
			bool with_fd)
{
	char text[32], buf[32] = { 0 };

	ASSERT_UEQ(f->len, len);
	for (size_t k = 0; k < len; k++)
		if (f->payload[k] != (uint8_t)(i ^ (k * 31)))
			TEST_FAIL("frame %d byte %zu differs", i, k);
	ASSERT_EQ(f->nfds, with_fd ? 1 : 0);
	if (with_fd) {
		snprintf(text, sizeof(text), "fd of frame %d", i);
		ASSERT_GT(pread(f->fds[0], buf, sizeof(buf) - 1, 0), 0);
		ASSERT_STREQ(buf, text);
	}
}

/* A socket pair whose sending side (sv[0]) takes 4 KiB at a time, so that
 * frames go out in parts, and a fresh tx and rx; the fds open then. */
static int tx_pair_small(int sv[2], struct wire_tx *tx, struct wire_rx *rx)
{
	int sndbuf = 4096;

	sock_pair(sv);
	ASSERT_EQ(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf,
			     sizeof(sndbuf)),
		  0);
	wire_tx_init(tx);
	wire_rx_init(rx);
	return fd_count();
}

TEST(tx_partial_writes)
{
	enum { N = 64 };
	struct wire_frame f = { 0 };
	struct wire_tx tx;
	struct wire_rx rx;
	int sv[2], base, partial = 0;
	static uint8_t payload[16384];
	char text[32];

	base = tx_pair_small(sv, &tx, &rx);
	for (int i = 0; i < N; i++) {
		size_t len = 3000 + (size_t)i * 157;
		frame_fill(payload, i, len);
		snprintf(text, sizeof(text), "fd of frame %d", i);
		int mfd = memfd_with(text);
		ASSERT_OK(wire_tx_queue(&tx, payload, len, &mfd,
					i % 4 == 0 ? 1 : 0));
		close(mfd);
	}
	ASSERT_EQ(wire_tx_flush(&tx, sv[0]), 0);
	ASSERT(tx.head != NULL);
	ASSERT_GT(tx.bytes, 0);

	for (int i = 0; i < N; i++) {
		partial += frame_receive(&rx, &f, &tx, sv);
		frame_check(&f, i, 3000 + (size_t)i * 157, i % 4 == 0);
		wire_frame_clear(&f);
	}
	ASSERT_GT(partial, 0);
	ASSERT_EQ(wire_tx_flush(&tx, sv[0]), 1);
	ASSERT_UEQ(tx.bytes, 0);
	ASSERT_EQ(wire_rx_read(&rx, sv[1]), -EAGAIN);
	ASSERT_EQ(wire_rx_next(&rx, &f), 0);
	/* Every duplicate was closed once sent. */
	ASSERT_EQ(fd_count(), base);
	wire_rx_free(&rx);
	wire_tx_free(&tx);
}

/* The peer is gone: -EPIPE, not SIGPIPE, and the queue's fds are closed. */
TEST(tx_flush_to_closed_peer)
{
	struct wire_tx tx;
	int sv[2], mfd = memfd_with("pipe"), base;

	sock_pair(sv);
	wire_tx_init(&tx);
	base = fd_count();
	ASSERT_OK(wire_tx_queue(&tx, "abc", 3, &mfd, 1));
	ASSERT_EQ(fd_count(), base + 1);
	close(sv[1]);
	ASSERT_EQ(wire_tx_flush(&tx, sv[0]), -EPIPE);
	ASSERT_EQ(fd_count(), base - 1);
	ASSERT(tx.head == NULL);
	wire_tx_free(&tx);
}

TEST(protobuf_request_round_trip)
{
	Vram__Request req = VRAM__REQUEST__INIT, *got;
	Vram__Hello hello = VRAM__HELLO__INIT;
	struct wire_frame f = { 0 };
	struct wire_rx rx;
	uint8_t buf[256];
	size_t len;
	int sv[2];

	hello.version = WIRE_PROTOCOL_VERSION;
	hello.name = "wire-test";
	req.id = 42;
	req.body_case = VRAM__REQUEST__BODY_HELLO;
	req.hello = &hello;
	len = vram__request__get_packed_size(&req);
	ASSERT_LE(len, sizeof(buf));
	ASSERT_UEQ(vram__request__pack(&req, buf), len);

	sock_pair(sv);
	wire_rx_init(&rx);
	ASSERT_OK(frame_send(sv[0], buf, len, NULL, 0));
	ASSERT_EQ(recv_frame(&rx, sv[1], &f), 1);
	ASSERT_UEQ(f.len, len);
	got = vram__request__unpack(NULL, f.len, f.payload);
	ASSERT(got != NULL);
	ASSERT_UEQ(got->id, 42);
	ASSERT_EQ(got->body_case, VRAM__REQUEST__BODY_HELLO);
	ASSERT(got->hello != NULL);
	ASSERT_EQ(got->hello->version, WIRE_PROTOCOL_VERSION);
	ASSERT_STREQ(got->hello->name, "wire-test");
	vram__request__free_unpacked(got, NULL);
	wire_frame_clear(&f);
	wire_rx_free(&rx);
}

/* wire_tx_send: with nothing queued a frame goes out straight, without
 * dup()ing its fds or queueing; once the socket fills, the part it did not
 * take is queued (its fds already sent with the first byte, or kept as
 * duplicates if no byte went), and later frames queue behind it in order. */
TEST(tx_send_direct_then_queued)
{
	enum { N = 48 };
	struct wire_frame f = { 0 };
	struct wire_tx tx;
	struct wire_rx rx;
	int sv[2], base, direct = 0, queued = 0;
	static uint8_t payload[16384];
	char text[32];

	base = tx_pair_small(sv, &tx, &rx);
	ASSERT_EQ(wire_tx_send(&tx, sv[0], payload, WIRE_MAX_PAYLOAD + 1, NULL,
			       0),
		  -EMSGSIZE);
	ASSERT(tx.head == NULL);
	for (int i = 0; i < N; i++) {
		size_t len = 2000 + (size_t)i * 157;
		frame_fill(payload, i, len);
		snprintf(text, sizeof(text), "fd of frame %d", i);
		int mfd = memfd_with(text);
		bool was_empty = tx.head == NULL;
		int r = wire_tx_send(&tx, sv[0], payload, len, &mfd,
				     i % 3 == 0 ? 1 : 0);
		ASSERT_GE(r, 0);
		close(mfd);
		direct += was_empty && r == 1;
		queued += r == 0;
		/* The kernel holds sent fds; the queue holds the others. */
		ASSERT_EQ(fd_count(), base + (int)tx.nfds);
	}
	ASSERT_GT(direct, 0);
	ASSERT_GT(queued, 0);
	ASSERT(tx.head != NULL);

	for (int i = 0; i < N; i++) {
		frame_receive(&rx, &f, &tx, sv);
		frame_check(&f, i, 2000 + (size_t)i * 157, i % 3 == 0);
		wire_frame_clear(&f);
	}
	ASSERT_EQ(wire_tx_flush(&tx, sv[0]), 1);
	ASSERT_UEQ(tx.bytes, 0);
	ASSERT_EQ(wire_rx_next(&rx, &f), 0);
	ASSERT_EQ(fd_count(), base);
	/* A write error drops nothing it did not queue and says why. */
	close(sv[1]);
	ASSERT_EQ(wire_tx_send(&tx, sv[0], "x", 1, NULL, 0), -EPIPE);
	ASSERT(tx.head == NULL);
	wire_rx_free(&rx);
	wire_tx_free(&tx);
	close(sv[0]);
}
