/* SPDX-License-Identifier: Apache-2.0 */
/* Framing and fd passing over a Unix stream socket, shared by vramd and
 * libvram. This file is the one place that calls sendmsg/recvmsg.
 *
 * A frame is a 12-byte header then a payload:
 *   uint32 magic (WIRE_MAGIC), uint32 payload length, uint32 fd count
 * all little-endian. The fds of a frame travel with the first byte of its
 * header (one sendmsg per frame carries them). The receiver checks the
 * length and the fd count against the limits before it allocates anything,
 * and checks that exactly the announced fds arrived with the frame.
 *
 * Ownership: fds received belong to the wire_rx until wire_rx_next() hands
 * them to the caller, who then owns them. fds given to wire_tx_queue() are
 * duplicated; the caller keeps its own. Every error path closes every fd
 * the wire owns.
 */
#ifndef VRAM_WIRE_H
#define VRAM_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define WIRE_MAGIC 0x4d415256u /* "VRAM" */
#define WIRE_HEADER_SIZE 12u
#define WIRE_MAX_PAYLOAD (1u << 20) /* 1 MiB */
#define WIRE_MAX_FDS 250u /* below the kernel's SCM_MAX_FD (253) */
#define WIRE_PROTOCOL_VERSION 1u

/* One received frame. The caller owns payload (free()) and fds (close()),
 * or hands both back with wire_frame_clear(). */
struct wire_frame {
	uint8_t *payload;
	size_t len;
	int fds[WIRE_MAX_FDS];
	unsigned nfds;
};

/* Closes the frame's fds and frees its payload; safe on a zeroed frame. */
void wire_frame_clear(struct wire_frame *f);

/* Receive side: a buffer of bytes and fds not yet assembled into frames. */
struct wire_rx {
	uint8_t *buf;
	size_t len, cap;
	int fds[2 * WIRE_MAX_FDS];
	unsigned nfds;
};

void wire_rx_init(struct wire_rx *rx);
/* Frees the buffer and closes every fd not yet handed out. */
void wire_rx_free(struct wire_rx *rx);

/* Reads what the socket has (one recvmsg, MSG_DONTWAIT, MSG_CMSG_CLOEXEC).
 * Returns bytes read (> 0), 0 on orderly EOF, -EAGAIN when nothing is
 * there, or another -errno. -EPROTO: the peer sent too many fds or a
 * truncated control message; the session must be closed. */
int wire_rx_read(struct wire_rx *rx, int sock);

/* Takes the next complete frame out of the buffer. Returns 1 and fills
 * *f (the caller owns it), 0 when no complete frame is buffered yet, or
 * -EPROTO / -EMSGSIZE on a malformed or oversize frame (bad magic, length
 * or fd count over the limit, fds missing or extra): the caller must close
 * the session. */
int wire_rx_next(struct wire_rx *rx, struct wire_frame *f);

/* Send side: a queue of frames not yet fully written. */
struct wire_tx_item;
struct wire_tx {
	struct wire_tx_item *head, *tail;
	size_t bytes;  /* payload bytes queued */
	unsigned nfds; /* fds queued (dups this process holds) */
};

void wire_tx_init(struct wire_tx *tx);
/* Frees queued frames and closes their fds. */
void wire_tx_free(struct wire_tx *tx);

/* Queues one frame: copies the payload and dup()s (F_DUPFD_CLOEXEC) the
 * fds, so the caller keeps ownership of its own. Returns 0 or -errno
 * (-EMSGSIZE over the limits, -ENOMEM, -EMFILE). */
int wire_tx_queue(struct wire_tx *tx, const void *payload, size_t len,
		  const int *fds, unsigned nfds);

/* Sends one frame, as wire_tx_queue() then wire_tx_flush() would: when
 * nothing is queued, with one sendmsg straight from payload (no copy),
 * queueing only what the socket did not take (fds dup()ed only if none of
 * the frame went out). Returns 1 when the queue is empty, 0 when data
 * remains (wait for POLLOUT), or -errno: the limits' errors with nothing
 * queued, a write's error with the queue dropped (the session is broken). */
int wire_tx_send(struct wire_tx *tx, int sock, const void *payload,
		 size_t len, const int *fds, unsigned nfds);

/* Writes as much of the queue as the socket takes (MSG_DONTWAIT |
 * MSG_NOSIGNAL). Returns 1 when the queue is empty, 0 when data remains
 * (wait for POLLOUT), or -errno (the session is broken). */
int wire_tx_flush(struct wire_tx *tx, int sock);

#endif
