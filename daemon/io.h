/* SPDX-License-Identifier: Apache-2.0 */
/* The reading threads. A session whose requests are all pings (server.c:
 * 16 in a row) is read by one of io_threads threads, each with its own
 * libuv loop, so that the two system calls of a ping (its recvmsg and its
 * answer's sendmsg) run on several cores instead of all on the loop
 * thread. Everything that knows the node stays on the loop thread, and so
 * does the reading of every session that asks for more than pings: one
 * wake-up from its client, as before there were threads.
 *
 *   - a thread reads the session's socket, cuts frames and decodes them;
 *     a ping it answers itself, when the session has nothing queued to
 *     send and the whole answer goes out at once (a ping tells nothing
 *     of the pools, so it needs neither the node nor the fd store);
 *   - at the first frame that is anything else, at the end of the input
 *     or at an error, the thread stops watching the socket and hands the
 *     session back to the loop: its turn. The loop handles the request
 *     the thread decoded and reads the session on its own poll from then
 *     on, until the session only pings again (io_give).
 *
 * So one side at a time reads a session, its requests keep their order,
 * and its answers their order: a ping comes back on the thread only when
 * no request of the session is on the loop. Replies and events from the
 * loop go out on the loop thread as before; a session's send lock
 * (session.h) keeps them and a thread's ping answer whole and in order.
 *
 * Admin sessions (lane.h) stay on the loop, as the lane needs. A session
 * given to a thread is held (session_hold) until the thread has let go of
 * it: io_drop, then the loop's unhold when the thread says so. */
#ifndef VRAMD_IO_H
#define VRAMD_IO_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <uv.h>

#include "vram.pb-c.h"

struct session;
struct wire_frame;
struct io_thread;

/* The default number of reading threads: a quarter of the CPUs online,
 * 1 to 4 (the loop thread still handles every request but pings). */
unsigned io_threads_default(void);

/* A session's place on one of the queues between the loop and a thread
 * (under the io's lock): on it at most once, with what it wants. */
struct io_link {
	struct io_link *next;
	struct session *s;
	unsigned want;
	bool queued;
};

struct io_queue {
	struct io_link *head, *tail;
};

/* A session's side of it (in struct session). */
struct session_io {
	struct io_thread *thread; /* NULL: read on the loop thread */
	uv_poll_t poll;		  /* on the thread's loop, once started */
	bool started;		  /* poll was initialised */
	struct io_link to_thread, to_loop;
	/* What the thread hands over with the turn (read by the loop then). */
	Vram__Request *req; /* decoded, for the loop to handle first */
	const char *close;  /* the session must close, for this reason */
	char warn[160];	    /* logged at warn before it closes ("": none) */
	int send_err;	    /* a ping's answer failed (-errno) */
	bool queued;	    /* a ping's answer was left queued: flush */
	unsigned pings; /* the loop's: its last requests were pings, so many */
};

struct io {
	struct io_thread *threads;
	unsigned n, next;
	int64_t poll_ns;      /* io_start's poll_us */
	uv_async_t wake;      /* the loop's: sessions handed to it */
	bool on;	      /* wake made, and not stopped */
	pthread_mutex_t lock; /* both directions' queues */
	struct io_queue to_loop;
	/* The loop's turn of s: called on the loop thread. */
	void (*on_turn)(struct session *s, void *data);
	void *data;
};

/* A read shorter than this took all the socket held: requests are small,
 * and the wire asks for at least 8 KiB a read. So after one the reader
 * stops (the next read would only say EAGAIN; the poll is level-triggered),
 * one recvmsg per request, not two. */
#define IO_SHORT_READ 4096

/* The most reads of one session per wake-up, on a thread as on the loop:
 * one busy client cannot starve the others. */
#define IO_READ_ROUNDS 16

/* Why a read's result r (wire_rx_read: 0 or -errno, not -EAGAIN) ends the
 * session: the close reason, for the loop and the threads alike. */
static inline const char *io_read_ended(int r)
{
	return r == 0	    ? "peer closed" :
	       r == -EPROTO ? "bad fds" :
			      "read failed";
}

/* Starts n threads (0 counts as 1) for loop. Each polls its sockets for
 * poll_us after it last read a frame before it sleeps again (0: it sleeps
 * whenever nothing is ready). Returns 0 or -errno, with nothing left
 * started. */
int io_start(struct io *io, uv_loop_t *loop, unsigned n, unsigned poll_us,
	     void (*on_turn)(struct session *s, void *data), void *data);

/* Loop thread. Gives s, not read on the loop any more, to a thread the
 * first time: the thread reads it until it hands it back. */
void io_adopt(struct io *io, struct session *s);

/* Loop thread: s, adopted before and not read on the loop any more,
 * goes back to its thread, which watches it again. */
void io_give(struct io *io, struct session *s);

/* Loop thread: s closed; its thread lets go of it and the loop then
 * unholds it. No-op for a session no thread has. */
void io_drop(struct io *io, struct session *s);

/* Loop thread, every session dropped: stops and joins the threads, and
 * unholds what they let go of. Safe to call more than once. */
void io_stop(struct io *io);

/* Decodes frame f read from s into *req (the caller frees it). Returns 0,
 * or -1 with why s must close in why (a protocol error). Any thread. */
int io_frame_decode(const struct session *s, const struct wire_frame *f,
		    Vram__Request **req, char *why, size_t len);

#endif
