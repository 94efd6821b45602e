/* SPDX-License-Identifier: Apache-2.0 */
/* Framing and fd passing; see wire.h for the format and the ownership
 * rules, docs/protocol.md for what a session does with a bad frame.
 *
 * The receive side keeps two FIFOs: bytes (rx->buf) and fds (rx->fds). The
 * kernel hands out a sendmsg's SCM_RIGHTS with the first byte of the data
 * it came with and ends a recvmsg right after such a byte, so the fds of a
 * frame are always queued by the time any byte of that frame is buffered.
 * That invariant is what lets wire_rx_next() tell exactly which fds belong
 * to which frame and reject a peer that sends too few or too many.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wire.h"

/* The kernel's SCM_MAX_FD: the most fds one sendmsg can carry. It is not
 * in the uapi headers. The control buffer holds that many plus an
 * SCM_CREDENTIALS message, which arrives too if the socket has SO_PASSCRED
 * set; a peer that sends more gets MSG_CTRUNC and is refused. */
#define KERNEL_MAX_FDS 253
#define RX_CONTROL_SIZE                             \
	(CMSG_SPACE(sizeof(int) * KERNEL_MAX_FDS) + \
	 CMSG_SPACE(sizeof(struct ucred)))

/* Linux 6.5 sends a pidfd as SCM_PIDFD on sockets with SO_PASSPIDFD set;
 * older headers lack the name. Such an fd is not the peer's to pass, so
 * the wire closes it rather than leak it. */
#ifndef SCM_PIDFD
#define SCM_PIDFD 0x04
#endif

/* The receive buffer holds at most one whole frame of the largest size plus
 * whatever of the next frames the last read brought; reads are sized so
 * that the total never passes RX_MAX. */
#define RX_MAX (WIRE_HEADER_SIZE + WIRE_MAX_PAYLOAD)
/* Bytes asked of the socket when no larger frame is in progress. The
 * buffer is compacted after each frame taken out of it, so this bounds
 * that copy for a peer that sends many small frames (about a hundred per
 * read, each moving at most this much) while still taking them in bulk. */
#define RX_CHUNK 8192u
/* Frames written by one sendmsg at most (iovecs; the kernel takes 1024). */
#define TX_BATCH 64
/* A buffer grown for a large frame is released once empty and larger than
 * this, so an idle session does not pin a megabyte. */
#define RX_KEEP (64u * 1024)

struct wire_tx_item {
	struct wire_tx_item *next;
	uint8_t *data; /* header + payload, inside this allocation */
	size_t size;   /* WIRE_HEADER_SIZE + payload length */
	size_t sent;
	/* fds not yet sent; set to 0 once the first byte (and so the fds)
	 * went out, after closing our duplicates */
	unsigned nfds;
	int fds[];
};

static void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static void close_fds(const int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

void wire_frame_clear(struct wire_frame *f)
{
	if (!f)
		return;
	close_fds(f->fds, f->nfds);
	free(f->payload);
	f->payload = NULL;
	f->len = 0;
	f->nfds = 0;
}

/* ---- receive ----------------------------------------------------------- */

void wire_rx_init(struct wire_rx *rx)
{
	rx->buf = NULL;
	rx->len = 0;
	rx->cap = 0;
	rx->nfds = 0;
}

/* Drops every buffered byte and closes every queued fd: what a protocol
 * error does, since the session is over and nothing buffered is trusted. */
static void rx_discard(struct wire_rx *rx)
{
	close_fds(rx->fds, rx->nfds);
	rx->nfds = 0;
	rx->len = 0;
}

void wire_rx_free(struct wire_rx *rx)
{
	if (!rx)
		return;
	rx_discard(rx);
	free(rx->buf);
	rx->buf = NULL;
	rx->cap = 0;
}

/* Checks the header at the start of the buffer. Returns the frame's total
 * size (header + payload) and its fd count, 0 when the header is not
 * complete yet, or -EPROTO / -EMSGSIZE. A partial header is checked as far
 * as it goes, so garbage is refused from its first byte. */
static long rx_header(const struct wire_rx *rx, unsigned *nfds)
{
	uint8_t magic[4];

	put_le32(magic, WIRE_MAGIC);
	if (memcmp(rx->buf, magic, rx->len < 4 ? rx->len : 4) != 0)
		return -EPROTO;
	if (rx->len < WIRE_HEADER_SIZE)
		return 0;
	uint32_t len = get_le32(rx->buf + 4);
	uint32_t n = get_le32(rx->buf + 8);
	if (len > WIRE_MAX_PAYLOAD)
		return -EMSGSIZE;
	if (n > WIRE_MAX_FDS)
		return -EPROTO;
	*nfds = n;
	return (long)(WIRE_HEADER_SIZE + len);
}

/* Makes room for want more bytes (want <= RX_MAX - rx->len). */
static int rx_reserve(struct wire_rx *rx, size_t want)
{
	size_t need = rx->len + want;

	if (need <= rx->cap)
		return 0;
	size_t cap = rx->cap ? rx->cap : RX_CHUNK;
	while (cap < need)
		cap *= 2;
	if (cap > RX_MAX)
		cap = RX_MAX;
	uint8_t *buf = realloc(rx->buf, cap);
	if (!buf)
		return -ENOMEM;
	rx->buf = buf;
	rx->cap = cap;
	return 0;
}

/* Moves the fds of every SCM_RIGHTS message into rx->fds. Returns 0, or
 * -EPROTO when the control data was truncated or brings more fds than the
 * queue holds; either way every fd received is then owned (and on error
 * already closed) by the wire. */
static int rx_take_fds(struct wire_rx *rx, struct msghdr *msg)
{
	const unsigned room = sizeof(rx->fds) / sizeof(rx->fds[0]);
	int err = 0;

	if (msg->msg_flags & MSG_CTRUNC)
		err = -EPROTO;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c;
	     c = CMSG_NXTHDR(msg, c)) {
		if (c->cmsg_level != SOL_SOCKET ||
		    (c->cmsg_type != SCM_RIGHTS && c->cmsg_type != SCM_PIDFD))
			continue;
		bool keep = c->cmsg_type == SCM_RIGHTS;
		size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		const uint8_t *data = CMSG_DATA(c);
		for (size_t i = 0; i < n; i++) {
			int fd;
			/* CMSG_DATA need not be aligned for int. */
			memcpy(&fd, data + i * sizeof(int), sizeof(int));
			if (!keep) {
				close(fd);
			} else if (!err && rx->nfds < room) {
				rx->fds[rx->nfds++] = fd;
			} else {
				err = -EPROTO;
				close(fd);
			}
		}
	}
	return err;
}

/* Call wire_rx_next() until it returns 0 after each successful read: the
 * fd queue holds one partial frame's fds plus one read's worth, not more.
 * Any error but -EAGAIN leaves the wire_rx empty with its fds closed. */
int wire_rx_read(struct wire_rx *rx, int sock)
{
	union {
		struct cmsghdr align;
		char buf[RX_CONTROL_SIZE];
	} control;
	size_t want = RX_CHUNK;
	unsigned nfds;
	ssize_t n;
	int err;

	/* Read the rest of the frame in progress in one go when it is large,
	 * but never allocate for a header that wire_rx_next() will refuse. */
	if (rx->len > 0) {
		long size = rx_header(rx, &nfds);
		if (size > 0 && (size_t)size > rx->len + want)
			want = (size_t)size - rx->len;
	}
	if (want > RX_MAX - rx->len)
		want = RX_MAX - rx->len;
	if (want == 0) {
		/* Only a caller that reads without taking frames gets here:
		 * a buffered frame never exceeds RX_MAX. */
		err = -ENOBUFS;
		goto fail;
	}
	err = rx_reserve(rx, want);
	if (err < 0)
		goto fail;

	struct iovec iov = { .iov_base = rx->buf + rx->len, .iov_len = want };
	struct msghdr msg = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = control.buf,
		.msg_controllen = sizeof(control.buf),
	};
	do
		n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		err = -errno;
		if (err == -EAGAIN || err == -EWOULDBLOCK)
			return -EAGAIN;
		goto fail;
	}
	err = rx_take_fds(rx, &msg);
	if (err < 0)
		goto fail;
	rx->len += (size_t)n;
	return (int)n;

fail:
	rx_discard(rx);
	return err;
}

/* On any error the buffer and every queued fd are dropped: the session is
 * not to be trusted any more, and nothing it sent stays open. */
int wire_rx_next(struct wire_rx *rx, struct wire_frame *f)
{
	unsigned nfds = 0;
	long size;
	int err;

	f->payload = NULL;
	f->len = 0;
	f->nfds = 0;

	if (rx->len == 0) {
		/* fds come with a frame's first byte; with no byte left they
		 * belong to no frame. */
		if (rx->nfds > 0) {
			err = -EPROTO;
			goto fail;
		}
		return 0;
	}
	size = rx_header(rx, &nfds);
	if (size < 0) {
		err = (int)size;
		goto fail;
	}
	if (size == 0)
		return 0;
	/* The frame's first byte is here, so all its fds are too. */
	if (rx->nfds < nfds) {
		err = -EPROTO;
		goto fail;
	}
	if (rx->len < (size_t)size) {
		/* Anything past this frame's fds came with a byte not yet
		 * sent: a peer that does not follow the protocol. */
		if (rx->nfds > nfds) {
			err = -EPROTO;
			goto fail;
		}
		return 0;
	}
	if (rx->len == (size_t)size && rx->nfds > nfds) {
		err = -EPROTO;
		goto fail;
	}

	size_t len = (size_t)size - WIRE_HEADER_SIZE;
	/* Never NULL, even for an empty payload, so callers can test it. */
	f->payload = malloc(len ? len : 1);
	if (!f->payload) {
		err = -ENOMEM;
		goto fail;
	}
	memcpy(f->payload, rx->buf + WIRE_HEADER_SIZE, len);
	f->len = len;
	memcpy(f->fds, rx->fds, nfds * sizeof(int));
	f->nfds = nfds;

	rx->nfds -= nfds;
	memmove(rx->fds, rx->fds + nfds, rx->nfds * sizeof(int));
	rx->len -= (size_t)size;
	memmove(rx->buf, rx->buf + size, rx->len);
	if (rx->len == 0 && rx->cap > RX_KEEP) {
		free(rx->buf);
		rx->buf = NULL;
		rx->cap = 0;
	}
	return 1;

fail:
	rx_discard(rx);
	return err;
}

/* ---- send -------------------------------------------------------------- */

void wire_tx_init(struct wire_tx *tx)
{
	tx->head = NULL;
	tx->tail = NULL;
	tx->bytes = 0;
	tx->nfds = 0;
}

static void tx_item_free(struct wire_tx_item *it)
{
	close_fds(it->fds, it->nfds);
	free(it);
}

void wire_tx_free(struct wire_tx *tx)
{
	if (!tx)
		return;
	struct wire_tx_item *it = tx->head;
	while (it) {
		struct wire_tx_item *next = it->next;
		tx_item_free(it);
		it = next;
	}
	wire_tx_init(tx);
}

/* Checks a frame against the limits before anything is sent or queued. */
static int tx_check(const void *payload, size_t len, const int *fds,
		    unsigned nfds)
{
	if ((len > 0 && !payload) || (nfds > 0 && !fds))
		return -EINVAL;
	if (len > WIRE_MAX_PAYLOAD || nfds > WIRE_MAX_FDS)
		return -EMSGSIZE;
	return 0;
}

static void tx_header_put(uint8_t *h, size_t len, unsigned nfds)
{
	put_le32(h, WIRE_MAGIC);
	put_le32(h + 4, (uint32_t)len);
	put_le32(h + 8, nfds);
}

/* Appends a frame whose header announces nfds fds, the first sent bytes
 * of it already written. The item holds duplicates of fds while none of
 * it was written; once a byte went out, its fds went with it. */
static int tx_append(struct wire_tx *tx, const void *payload, size_t len,
		     const int *fds, unsigned nfds, size_t sent)
{
	struct wire_tx_item *it;
	unsigned keep = sent ? 0 : nfds;

	it = malloc(sizeof(*it) + keep * sizeof(int) + WIRE_HEADER_SIZE + len);
	if (!it)
		return -ENOMEM;
	it->next = NULL;
	it->data = (uint8_t *)(it->fds + keep);
	it->size = WIRE_HEADER_SIZE + len;
	it->sent = sent;
	it->nfds = 0;
	tx_header_put(it->data, len, nfds);
	if (len > 0)
		memcpy(it->data + WIRE_HEADER_SIZE, payload, len);
	for (unsigned i = 0; i < keep; i++) {
		int fd = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
		if (fd < 0) {
			int err = -errno;
			tx_item_free(it);
			return err;
		}
		it->fds[it->nfds++] = fd;
	}

	if (tx->tail)
		tx->tail->next = it;
	else
		tx->head = it;
	tx->tail = it;
	tx->bytes += len;
	tx->nfds += it->nfds;
	return 0;
}

int wire_tx_queue(struct wire_tx *tx, const void *payload, size_t len,
		  const int *fds, unsigned nfds)
{
	int err = tx_check(payload, len, fds, nfds);

	return err < 0 ? err : tx_append(tx, payload, len, fds, nfds, 0);
}

/* Fills msg's control buffer with one SCM_RIGHTS message of fds. */
static void tx_control_put(struct msghdr *msg, void *buf, size_t size,
			   const int *fds, unsigned nfds)
{
	memset(buf, 0, size);
	msg->msg_control = buf;
	msg->msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
	struct cmsghdr *c = CMSG_FIRSTHDR(msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
	memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
}

/* With nothing queued, the frame is written straight from the caller's
 * buffer: no copy, no allocation, one sendmsg, which is all most replies
 * ever need. Only what the socket did not take is queued. */
int wire_tx_send(struct wire_tx *tx, int sock, const void *payload, size_t len,
		 const int *fds, unsigned nfds)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * WIRE_MAX_FDS)];
	} control;
	uint8_t header[WIRE_HEADER_SIZE];
	struct iovec iov[2] = {
		{ .iov_base = header, .iov_len = sizeof(header) },
		{ .iov_base = (void *)payload, .iov_len = len },
	};
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = len ? 2 : 1 };
	ssize_t n;
	int err = tx_check(payload, len, fds, nfds);

	if (err < 0)
		return err;
	if (tx->head) {
		/* Behind what is queued: in order, after it. */
		err = tx_append(tx, payload, len, fds, nfds, 0);
		return err < 0 ? err : wire_tx_flush(tx, sock);
	}
	tx_header_put(header, len, nfds);
	if (nfds > 0)
		tx_control_put(&msg, control.buf, sizeof(control.buf), fds,
			       nfds);
	do
		n = sendmsg(sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
		return -errno;
	if (n == (ssize_t)(WIRE_HEADER_SIZE + len))
		return 1;
	err = tx_append(tx, payload, len, fds, nfds, n > 0 ? (size_t)n : 0);
	return err < 0 ? err : 0;
}

/* One sendmsg of what is left of the queue, from the head: up to
 * TX_BATCH frames in one call, so a burst of replies costs one system
 * call. fds go with their frame's first byte only, so a batch holds fds
 * only in its first frame and ends before the next frame that has some:
 * the kernel attaches a message's fds to its first bytes, and fds sent
 * with an earlier frame's bytes would reach the peer before their own
 * frame began. Once any byte of the head went out its fds are closed
 * here (the kernel holds its own references) and never sent again. */
static ssize_t tx_send(struct wire_tx *tx, int sock)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * WIRE_MAX_FDS)];
	} control;
	struct iovec iov[TX_BATCH];
	struct msghdr msg = { .msg_iov = iov };
	struct wire_tx_item *head = tx->head, *it;
	ssize_t n;

	iov[0].iov_base = head->data + head->sent;
	iov[0].iov_len = head->size - head->sent;
	msg.msg_iovlen = 1;
	for (it = head->next; it && it->nfds == 0 && msg.msg_iovlen < TX_BATCH;
	     it = it->next) {
		iov[msg.msg_iovlen].iov_base = it->data;
		iov[msg.msg_iovlen].iov_len = it->size;
		msg.msg_iovlen++;
	}
	if (head->nfds > 0)
		tx_control_put(&msg, control.buf, sizeof(control.buf),
			       head->fds, head->nfds);
	do
		n = sendmsg(sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n > 0 && head->nfds > 0) {
		tx->nfds -= head->nfds;
		close_fds(head->fds, head->nfds);
		head->nfds = 0;
	}
	return n;
}

/* On an error the whole queue is dropped and its fds closed, since the
 * session is over; a later flush finds it empty. */
int wire_tx_flush(struct wire_tx *tx, int sock)
{
	while (tx->head) {
		ssize_t n = tx_send(tx, sock);
		/* Stream sockets do not return 0 for a non-empty write;
		 * treat it as a full socket rather than loop on it. */
		if (n == -EAGAIN || n == -EWOULDBLOCK || n == 0)
			return 0;
		if (n < 0) {
			/* The session is broken and will be closed: release
			 * the queued fds now rather than when it is freed. */
			wire_tx_free(tx);
			return (int)n;
		}
		/* Retire the frames the write covered, the last one
		 * perhaps only in part. */
		size_t done = (size_t)n;
		while (done > 0) {
			struct wire_tx_item *it = tx->head;
			size_t left = it->size - it->sent;
			if (done < left) {
				it->sent += done;
				break;
			}
			done -= left;
			tx->head = it->next;
			if (!tx->head)
				tx->tail = NULL;
			tx->bytes -= it->size - WIRE_HEADER_SIZE;
			tx_item_free(it);
		}
	}
	return 1;
}
