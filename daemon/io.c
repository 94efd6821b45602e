/* SPDX-License-Identifier: Apache-2.0 */
/* The reading threads; see io.h. */
#include "io.h"
#include "attr.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "session.h"
#include "wire.h"

/* What the loop asks of a thread (on its queue) and a thread of the loop
 * (on the loop's). */
#define WANT_ADOPT 1u  /* start watching the session */
#define WANT_GIVE 2u   /* the loop's turn is over: watch it again */
#define WANT_DROP 4u   /* the session closed: let go of it */
#define WANT_TURN 1u   /* the loop's turn: handle what was handed over */
#define WANT_LET_GO 2u /* the thread let go: unhold it */

struct io_thread {
	struct io *io;
	unsigned index;
	pthread_t tid;
	bool running; /* tid was started */
	uv_loop_t loop;
	uv_async_t wake;
	int64_t read_ns;       /* when it last read a frame (its own) */
	struct io_queue queue; /* under io->lock */
	bool stop;	       /* under io->lock */
};

unsigned io_threads_default(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN) / 4;
	return n < 1 ? 1 : n > 4 ? 4 : (unsigned)n;
}

/* ---- the queues (under io->lock) ---------------------------------------- */

static void queue_push(struct io_queue *q, struct io_link *l, unsigned want)
{
	l->want |= want;
	if (l->queued)
		return;
	l->queued = true;
	l->next = NULL;
	if (q->tail)
		q->tail->next = l;
	else
		q->head = l;
	q->tail = l;
}

/* The first session on q and what it wants, or NULL. */
static struct session *queue_pop(struct io_queue *q, unsigned *want)
{
	struct io_link *l = q->head;

	if (!l)
		return NULL;
	q->head = l->next;
	if (!q->head)
		q->tail = NULL;
	l->queued = false;
	*want = l->want;
	l->want = 0;
	return l->s;
}

static void thread_push(struct io_thread *t, struct session *s, unsigned want)
{
	pthread_mutex_lock(&t->io->lock);
	queue_push(&t->queue, &s->io.to_thread, want);
	pthread_mutex_unlock(&t->io->lock);
	uv_async_send(&t->wake);
}

static struct session *thread_pop(struct io_thread *t, unsigned *want,
				  bool *stop)
{
	pthread_mutex_lock(&t->io->lock);
	struct session *s = queue_pop(&t->queue, want);
	*stop = t->stop;
	pthread_mutex_unlock(&t->io->lock);
	return s;
}

static void loop_push(struct io *io, struct session *s, unsigned want)
{
	pthread_mutex_lock(&io->lock);
	queue_push(&io->to_loop, &s->io.to_loop, want);
	pthread_mutex_unlock(&io->lock);
	uv_async_send(&io->wake);
}

static struct session *loop_pop(struct io *io, unsigned *want)
{
	pthread_mutex_lock(&io->lock);
	struct session *s = queue_pop(&io->to_loop, want);
	pthread_mutex_unlock(&io->lock);
	return s;
}

/* ---- a thread ------------------------------------------------------------ */

int io_frame_decode(const struct session *s, const struct wire_frame *f,
		    Vram__Request **out, char *why, size_t len)
{
	Vram__Request *req;

	*out = NULL;
	if (f->nfds) {
		/* No request carries fds: a client sending some is broken. */
		snprintf(why, len, "%u unexpected fds", f->nfds);
		return -1;
	}
	req = vram__request__unpack(NULL, f->len, f->payload);
	if (!req) {
		snprintf(why, len, "undecodable request");
		return -1;
	}
	if (!s->hello_done && req->body_case != VRAM__REQUEST__BODY_HELLO) {
		vram__request__free_unpacked(req, NULL);
		snprintf(why, len, "request before hello");
		return -1;
	}
	*out = req;
	return 0;
}

/* Stops watching s and hands it to the loop, with what s->io says. */
static void thread_hand(struct io_thread *t, struct session *s)
{
	uv_poll_stop(&s->io.poll);
	loop_push(t->io, s, WANT_TURN);
}

/* Handles the frames buffered: answers pings, hands over at anything
 * else. Returns false when s was handed over. */
static bool thread_frames(struct io_thread *t, struct session *s)
{
	struct session_io *sio = &s->io;

	for (;;) {
		struct wire_frame f;
		Vram__Request *req;
		int r = wire_rx_next(&s->rx, &f);

		if (r == 0)
			return true;
		if (r < 0) {
			snprintf(sio->warn, sizeof(sio->warn),
				 "malformed frame: %s", strerror(-r));
			sio->close = "malformed frame";
			thread_hand(t, s);
			return false;
		}
		r = io_frame_decode(s, &f, &req, sio->warn, sizeof(sio->warn));
		wire_frame_clear(&f);
		if (r < 0) {
			sio->close = "protocol error";
			thread_hand(t, s);
			return false;
		}
		if (req->body_case == VRAM__REQUEST__BODY_PING) {
			r = session_reply_ping(s, req->id);
			if (r != -EBUSY) {
				vram__request__free_unpacked(req, NULL);
				if (r == 1)
					continue;
				/* Left queued, or the socket broke: the
				 * loop's to flush or to close. */
				if (r == 0)
					sio->queued = true;
				else
					sio->send_err = r;
				thread_hand(t, s);
				return false;
			}
		}
		sio->req = req;
		thread_hand(t, s);
		return false;
	}
}

static void thread_read(struct io_thread *t, struct session *s)
{
	for (int round = 0; round < IO_READ_ROUNDS; round++) {
		int r = wire_rx_read(&s->rx, s->fd);
		if (r == -EAGAIN)
			return;
		if (r <= 0) {
			s->io.close = io_read_ended(r);
			thread_hand(t, s);
			return;
		}
		if (t->io->poll_ns)
			t->read_ns = clock_now_ns();
		if (!thread_frames(t, s) || r < IO_SHORT_READ)
			return;
	}
}

static void thread_on_readable(uv_poll_t *h, int status, int events UNUSED)
{
	struct session *s = h->data;
	struct io_thread *t = s->io.thread;

	if (status < 0) {
		s->io.close = "poll failed";
		thread_hand(t, s);
		return;
	}
	thread_read(t, s);
}

static void thread_on_poll_closed(uv_handle_t *h)
{
	struct session *s = h->data;
	loop_push(s->io.thread->io, s, WANT_LET_GO);
}

static void thread_apply(struct io_thread *t, struct session *s, unsigned want)
{
	struct session_io *sio = &s->io;

	if (want & WANT_DROP) {
		if (sio->started)
			uv_close((uv_handle_t *)&sio->poll,
				 thread_on_poll_closed);
		else
			loop_push(t->io, s, WANT_LET_GO);
		return;
	}
	if ((want & WANT_ADOPT) && !sio->started) {
		if (uv_poll_init(&t->loop, &sio->poll, s->fd) < 0) {
			sio->close = "cannot watch the socket";
			loop_push(t->io, s, WANT_TURN);
			return;
		}
		sio->poll.data = s;
		sio->started = true;
	}
	if (sio->started)
		uv_poll_start(&sio->poll, UV_READABLE, thread_on_readable);
}

static void thread_on_wake(uv_async_t *h)
{
	struct io_thread *t = h->data;
	struct session *s;
	unsigned want;
	bool stop;

	while ((s = thread_pop(t, &want, &stop)))
		thread_apply(t, s, want);
	if (stop && !uv_is_closing((uv_handle_t *)&t->wake))
		uv_close((uv_handle_t *)&t->wake, NULL);
}

/* Runs t's loop until it stops: while a frame was read within the poll
 * window, one look at the sockets at a time without sleeping, so that
 * the next frame of a busy client finds the thread awake. */
static void *thread_main(void *arg)
{
	struct io_thread *t = arg;
	int64_t window = t->io->poll_ns;

	for (;;) {
		bool polling = window && clock_now_ns() - t->read_ns < window;
		if (!uv_run(&t->loop, polling ? UV_RUN_NOWAIT : UV_RUN_ONCE))
			break;
	}
	return NULL;
}

/* ---- the loop's side ----------------------------------------------------- */

static void io_on_wake(uv_async_t *h)
{
	struct io *io = h->data;
	struct session *s;
	unsigned want;

	while ((s = loop_pop(io, &want))) {
		if (want & WANT_TURN)
			io->on_turn(s, io->data);
		/* Last: the unhold may free s. */
		if (want & WANT_LET_GO)
			session_unhold(s);
	}
}

/* Starts t with every signal blocked: they are the loop thread's. */
static int thread_start(struct io_thread *t)
{
	sigset_t all, old;
	char name[16];
	int r;

	if (uv_loop_init(&t->loop) < 0)
		return -ENOMEM;
	uv_async_init(&t->loop, &t->wake, thread_on_wake);
	t->wake.data = t;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&t->tid, NULL, thread_main, t);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r != 0) {
		uv_close((uv_handle_t *)&t->wake, NULL);
		uv_run(&t->loop, UV_RUN_DEFAULT);
		uv_loop_close(&t->loop);
		return -r;
	}
	t->running = true;
	snprintf(name, sizeof(name), "vramd-io%u", t->index);
	pthread_setname_np(t->tid, name);
	return 0;
}

int io_start(struct io *io, uv_loop_t *loop, unsigned n, unsigned poll_us,
	     void (*on_turn)(struct session *s, void *data), void *data)
{
	int r;

	memset(io, 0, sizeof(*io));
	io->poll_ns = (int64_t)poll_us * 1000;
	io->on_turn = on_turn;
	io->data = data;
	pthread_mutex_init(&io->lock, NULL);
	r = uv_async_init(loop, &io->wake, io_on_wake);
	if (r < 0) {
		pthread_mutex_destroy(&io->lock);
		return r;
	}
	io->wake.data = io;
	io->on = true;
	if (n == 0)
		n = 1;
	io->threads = calloc(n, sizeof(*io->threads));
	if (!io->threads) {
		io_stop(io);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < n; i++) {
		struct io_thread *t = &io->threads[i];
		t->io = io;
		t->index = i;
		r = thread_start(t);
		if (r < 0) {
			io_stop(io);
			return r;
		}
		io->n++;
	}
	return 0;
}

void io_adopt(struct io *io, struct session *s)
{
	session_hold(s); /* the thread's, until it lets go */
	s->io.to_thread.s = s->io.to_loop.s = s;
	s->io.thread = &io->threads[io->next++ % io->n];
	thread_push(s->io.thread, s, WANT_ADOPT);
}

void io_give(struct io *io UNUSED, struct session *s)
{
	thread_push(s->io.thread, s, WANT_GIVE);
}

void io_drop(struct io *io UNUSED, struct session *s)
{
	if (s->io.thread)
		thread_push(s->io.thread, s, WANT_DROP);
}

void io_stop(struct io *io)
{
	if (!io->on)
		return;
	io->on = false;
	for (unsigned i = 0; i < io->n; i++) {
		struct io_thread *t = &io->threads[i];
		pthread_mutex_lock(&io->lock);
		t->stop = true;
		pthread_mutex_unlock(&io->lock);
		uv_async_send(&t->wake);
	}
	for (unsigned i = 0; i < io->n; i++) {
		struct io_thread *t = &io->threads[i];
		if (!t->running)
			continue;
		pthread_join(t->tid, NULL);
		uv_loop_close(&t->loop);
		t->running = false;
	}
	/* What the threads let go of last. */
	io_on_wake(&io->wake);
	uv_close((uv_handle_t *)&io->wake, NULL);
	free(io->threads);
	io->threads = NULL;
	io->n = 0;
	pthread_mutex_destroy(&io->lock);
}
