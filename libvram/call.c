/* SPDX-License-Identifier: Apache-2.0 */
/* Requests to vramd, their responses, the reader role and the event
 * thread. The client's lifecycle (connect, hello, close) is client.c's.
 *
 * One thread at a time is the reader: it reads frames from the socket,
 * delivers responses to the threads waiting for them and handles events.
 * A thread that waits for a response becomes the reader if nobody is, and
 * otherwise looks for its response without the lock while the client's
 * spin window lasts, then sleeps on the client's condition variable until
 * its response has been delivered or the role is free. vram_client_dispatch() takes the
 * role when it is free; the event thread holds it for as long as it runs.
 * (A call taking the role over from the event thread, to read its own
 * answer with one wake-up instead of two, measured slower on a 2-core
 * machine: docs/results/control-path-2026-12-01.md.)
 * The reader drops the client's lock only while it reads or polls, so
 * frames are handled in the order they came, with the lock held.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "call.h"
#include "client.h"
#include "clock.h"
#include "env.h"
#include "events.h"
#include "log.h"
#include "sock.h"
#include "spin.h"
#include "thread.h"

enum pump_mode {
	PUMP_CALL,     /* until a call's response has come */
	PUMP_DISPATCH, /* until events were handled or the deadline */
	PUMP_THREAD,   /* until the client stops */
};

unsigned call_spin_ms(void)
{
	return env_unsigned("VRAM_SPIN_MS", spin_default_ms(), 0, 1000, NULL);
}

unsigned call_spin_us(void)
{
	return env_unsigned("VRAM_CALL_SPIN_US", spin_call_default_us(), 0,
			    1000000, NULL);
}

/* Does a pause or resume of this client still poll (call_run)? */
static bool call_spinning(struct vram_client *c)
{
	return __atomic_load_n(&c->spin_until_ns, __ATOMIC_RELAXED) >
	       clock_now_ns();
}

/* Takes or gives up the reader role (c->lock held); a caller that polls
 * reads it without the lock. */
static void reader_set(struct vram_client *c, bool on)
{
	__atomic_store_n(&c->reader, on, __ATOMIC_RELAXED);
}

/* Marks call answered (c->lock held), for a caller that polls too. */
static void call_set_done(struct call *call)
{
	__atomic_store_n(&call->done, true, __ATOMIC_RELEASE);
}

/* Milliseconds left before deadline (-1: none) for poll(). */
static int remaining_ms(int64_t deadline)
{
	if (deadline < 0)
		return -1;
	int64_t left = deadline - clock_now_ms();
	if (left <= 0)
		return 0;
	return left > INT_MAX ? INT_MAX : (int)left;
}

static uint64_t call_next_id(struct vram_client *c)
{
	if (c->next_id == 0)
		c->next_id = 1;
	return c->next_id++;
}

/* Requests this small are packed on the stack (nearly all are). */
#define CALL_PACK_STACK 512

/* Writes one request frame. Requests carry no fds. Does not need c->lock;
 * takes send_lock. */
static int call_write(struct vram_client *c, const Vram__Request *req)
{
	uint8_t small[CALL_PACK_STACK];
	size_t len = vram__request__get_packed_size(req);
	uint8_t *buf;
	int r;

	if (len > WIRE_MAX_PAYLOAD)
		return -EMSGSIZE;
	buf = len <= sizeof(small) ? small : malloc(len);
	if (!buf)
		return -ENOMEM;
	vram__request__pack(req, buf);
	pthread_mutex_lock(&c->send_lock);
	r = sock_send(c->sock, buf, len, NULL, 0);
	pthread_mutex_unlock(&c->send_lock);
	if (buf != small)
		free(buf);
	return r;
}

void call_wake(struct vram_client *c)
{
	uint64_t one = 1;

	if (c->wake_fd >= 0 && write(c->wake_fd, &one, sizeof(one)) < 0) {
		/* EAGAIN: the counter is already non-zero, which is enough. */
	}
}

void call_break(struct vram_client *c, int err, const char *why)
{
	if (c->broken)
		return;
	c->broken = true;
	if (!c->closing)
		log_write(VRAM_LOG_WARN, "connection to vramd lost: %s (%s)",
			  why, strerror(err < 0 ? -err : err));
	while (c->calls) {
		struct call *call = c->calls;
		c->calls = call->next;
		call->next = NULL;
		call->err = -EPIPE;
		snprintf(call->errmsg, sizeof(call->errmsg),
			 "connection to vramd lost: %s", why);
		call_set_done(call);
	}
	pthread_cond_broadcast(&c->cond);
	call_wake(c);
}

static void call_unlink(struct vram_client *c, struct call *call)
{
	for (struct call **pp = &c->calls; *pp; pp = &(*pp)->next) {
		if (*pp == call) {
			*pp = call->next;
			call->next = NULL;
			return;
		}
	}
}

void call_release(struct call *call)
{
	if (call->msg)
		vram__server_msg__free_unpacked(call->msg, NULL);
	call->msg = NULL;
}

/* Hands a response to the call waiting for it (and runs its completion);
 * takes msg. */
static void call_deliver(struct vram_client *c, Vram__ServerMsg *msg,
			 const struct wire_frame *f)
{
	Vram__Response *r = msg->response;
	struct call *call = NULL;

	for (struct call **pp = &c->calls; *pp; pp = &(*pp)->next) {
		if ((*pp)->id == r->id) {
			call = *pp;
			*pp = call->next;
			call->next = NULL;
			break;
		}
	}
	if (!call) {
		/* The answer to a request sent without waiting (pool close),
		 * or to one that timed out. */
		log_write(VRAM_LOG_DEBUG,
			  "response to request %llu dropped (err %d)",
			  (unsigned long long)r->id, r->err);
		vram__server_msg__free_unpacked(msg, NULL);
		return;
	}
	call->msg = msg;
	if (r->err != 0) {
		int e = r->err > 0 && r->err < 4096 ? r->err : EPROTO;
		call->err = -e;
		snprintf(call->errmsg, sizeof(call->errmsg), "%s",
			 r->message && r->message[0] ? r->message :
						       strerror(e));
	} else {
		call->remote_ok = true;
		if (call->complete) {
			char saved[ERROR_MSG_MAX];
			unsigned gen = error_generation();

			/* The completion's message belongs to the caller's
			 * thread, not to the reader's. */
			snprintf(saved, sizeof(saved), "%s", error_get());
			int rc = call->complete(c, call, r, f);
			if (rc < 0) {
				call->err = rc;
				snprintf(call->errmsg, sizeof(call->errmsg),
					 "%s",
					 gen != error_generation() ?
						 error_get() :
						 strerror(-rc));
			}
			error_restore(saved);
		}
	}
	call_set_done(call);
	pthread_cond_broadcast(&c->cond);
}

/* Sends a request that gets no answer (id 0: an ack, a progress report).
 * A failure breaks the connection, which the daemon then sees as this
 * client leaving. */
static void call_send_unanswered(struct vram_client *c, Vram__Request *req)
{
	if (c->broken)
		return;
	req->id = 0;
	int r = call_write(c, req);
	if (r < 0)
		call_break(c, r, "writing to vramd failed");
}

/* Sends an event's ack. */
static void call_ack(struct vram_client *c, const struct events_ack *a)
{
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__EventAck ack = VRAM__EVENT_ACK__INIT;

	ack.event_id = a->event_id;
	ack.err = a->err < 0 ? -a->err : a->err;
	ack.message = (char *)a->message;
	req.body_case = VRAM__REQUEST__BODY_ACK;
	req.ack = &ack;
	call_send_unanswered(c, &req);
}

/* Reports a restore in parts (events.c). */
static void call_progress(struct vram_client *c, uint64_t event_id,
			  uint32_t restored)
{
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__ResumeProgress pr = VRAM__RESUME_PROGRESS__INIT;

	pr.event_id = event_id;
	pr.restored = restored;
	req.body_case = VRAM__REQUEST__BODY_PROGRESS;
	req.progress = &pr;
	call_send_unanswered(c, &req);
}

/* Decodes and handles one frame. Returns 1 for an event, 0 for a response,
 * -EPROTO when the frame makes no sense (the connection must go). */
static int call_process(struct vram_client *c, const struct wire_frame *f)
{
	Vram__ServerMsg *msg =
		vram__server_msg__unpack(NULL, f->len, f->payload);

	if (!msg)
		return -EPROTO;
	if (msg->body_case == VRAM__SERVER_MSG__BODY_RESPONSE &&
	    msg->response) {
		call_deliver(c, msg, f);
		return 0;
	}
	if (msg->body_case == VRAM__SERVER_MSG__BODY_EVENT && msg->event) {
		char saved[ERROR_MSG_MAX];
		struct events_ack ack = { .progress = call_progress };
		int64_t t0 = clock_now_ns();

		snprintf(saved, sizeof(saved), "%s", error_get());
		if (events_handle(c, msg->event, f, &ack)) {
			call_ack(c, &ack);
			/* Beside the daemon's "mappers" figure: what of it
			 * was this process, from the frame in to the ack out,
			 * and how long since this reader's previous ack (with
			 * the daemon's log, whether the frame waited). */
			int64_t idle = c->last_ack_ns ?
					       t0 - c->last_ack_ns :
					       0;
			double ms = clock_lap_ms(&t0);
			c->last_ack_ns = t0;
			log_write(VRAM_LOG_DEBUG,
				  "event %d of pool %llu: acked %.3f ms after "
				  "it came in, which was %.3f ms after the "
				  "ack before it",
				  (int)msg->event->kind,
				  (unsigned long long)msg->event->pool_id, ms,
				  (double)idle / 1e6);
		}
		error_restore(saved);
		vram__server_msg__free_unpacked(msg, NULL);
		return 1;
	}
	vram__server_msg__free_unpacked(msg, NULL);
	return -EPROTO;
}

/* Handles every complete frame already read. Returns events handled. */
static int call_drain(struct vram_client *c)
{
	int handled = 0;

	while (!c->broken) {
		struct wire_frame f;
		int r = wire_rx_next(&c->rx, &f);
		if (r == 0)
			break;
		if (r < 0) {
			call_break(c, r, "malformed frame from vramd");
			break;
		}
		r = call_process(c, &f);
		wire_frame_clear(&f);
		if (r < 0) {
			call_break(c, r, "undecodable message from vramd");
			break;
		}
		handled += r;
	}
	return handled;
}

/* The reader's loop: c->reader is set and c->lock held by the caller.
 * Every complete frame read is handled before it returns, so that none is
 * stranded in the buffer where poll() on the socket cannot see it.
 * Returns the events handled, or -ETIMEDOUT (PUMP_CALL past deadline). */
static int call_pump(struct vram_client *c, enum pump_mode mode,
		     const struct call *want, int64_t deadline)
{
	/* A call's request went out a moment ago: its answer is not there
	 * yet, so poll first rather than read for an EAGAIN. */
	bool fresh = mode == PUMP_CALL;
	int handled = 0;

	for (;;) {
		handled += call_drain(c);
		if (c->broken)
			return handled;
		if (mode == PUMP_CALL && want->done)
			return handled;
		if (mode != PUMP_CALL && c->stopping)
			return handled;

		pthread_mutex_unlock(&c->lock);
		int r = fresh && remaining_ms(deadline) != 0 ?
				-EAGAIN :
				wire_rx_read(&c->rx, c->sock);
		fresh = false;
		if (r == -EAGAIN || r == -EINTR) {
			int wait = remaining_ms(deadline);
			if ((mode == PUMP_DISPATCH && handled > 0) ||
			    wait == 0) {
				pthread_mutex_lock(&c->lock);
				if (mode == PUMP_CALL)
					return -ETIMEDOUT;
				return handled;
			}
			/* A pause or resume is under way: read again rather
			 * than sleep, so that its event or answer is read the
			 * moment it comes (docs/architecture.md, "Polling
			 * through a transition"). */
			if (call_spinning(c)) {
				sched_yield();
				pthread_mutex_lock(&c->lock);
				continue;
			}
			struct pollfd pfd[2] = {
				{ .fd = c->sock, .events = POLLIN },
				{ .fd = c->wake_fd, .events = POLLIN },
			};
			int pr = poll(pfd, 2, wait);
			int perr = errno;
			if (pr > 0 && (pfd[1].revents & POLLIN)) {
				uint64_t v;
				if (read(c->wake_fd, &v, sizeof(v)) < 0) {
					/* Another reader emptied it. */
				}
			}
			pthread_mutex_lock(&c->lock);
			if (pr < 0 && perr != EINTR)
				call_break(c, -perr, "poll failed");
			continue;
		}
		pthread_mutex_lock(&c->lock);
		if (r == 0)
			call_break(c, -EPIPE, "vramd closed the connection");
		else if (r < 0)
			call_break(c, r, "reading from vramd failed");
	}
}

/* Waits for call's response, as the reader or asleep. c->lock held. */
static int call_wait(struct vram_client *c, struct call *call, int64_t deadline)
{
	while (!call->done) {
		if (!c->reader) {
			reader_set(c, true);
			int r = call_pump(c, PUMP_CALL, call, deadline);
			reader_set(c, false);
			pthread_cond_broadcast(&c->cond);
			if (r == -ETIMEDOUT && !call->done) {
				call_unlink(c, call);
				return -ETIMEDOUT;
			}
		} else if (call_spinning(c)) {
			/* The reader (the event thread, or another caller)
			 * delivers it within the client's window: look for it
			 * without the lock, yielding the core between looks,
			 * until the reader gives its role up (it may be ours
			 * next) or the window ends. */
			pthread_mutex_unlock(&c->lock);
			while (!__atomic_load_n(&call->done,
						__ATOMIC_ACQUIRE) &&
			       __atomic_load_n(&c->reader, __ATOMIC_RELAXED) &&
			       call_spinning(c) && remaining_ms(deadline) != 0)
				sched_yield();
			pthread_mutex_lock(&c->lock);
			if (!call->done && remaining_ms(deadline) == 0) {
				call_unlink(c, call);
				return -ETIMEDOUT;
			}
		} else if (deadline < 0) {
			pthread_cond_wait(&c->cond, &c->lock);
		} else {
			struct timespec ts = {
				.tv_sec = deadline / 1000,
				.tv_nsec = (deadline % 1000) * 1000000,
			};
			pthread_cond_timedwait(&c->cond, &c->lock, &ts);
			if (!call->done && remaining_ms(deadline) == 0) {
				call_unlink(c, call);
				return -ETIMEDOUT;
			}
		}
	}
	return call->err;
}

int call_run(struct vram_client *c, Vram__Request *req, struct call *call,
	     int timeout_ms)
{
	int64_t deadline = timeout_ms < 0 ? -1 : clock_now_ms() + timeout_ms;
	int r;

again:
	call->done = false;
	call->remote_ok = false;
	call->err = 0;
	call->errmsg[0] = '\0';
	call->msg = NULL;
	call->next = NULL;
	if (c->broken && !c->reconnecting &&
	    c->reconnect && c->reconnect(c) == -ENOTCONN)
		return error_set(ENOTCONN, "vramd is away (restarting?); "
					   "reconnecting");
	if (c->broken)
		return error_set(EPIPE, "connection to vramd lost");
	call->id = req->id = call_next_id(c);
	call->next = c->calls;
	c->calls = call;
	pthread_mutex_unlock(&c->lock);
	r = call_write(c, req);
	pthread_mutex_lock(&c->lock);
	if (r < 0) {
		if (!call->done)
			call_unlink(c, call);
		if (r == -EMSGSIZE || r == -ENOMEM)
			return error_set(r, "cannot send request: %s",
					 strerror(-r));
		/* Part of a frame may have gone out: the stream is lost. */
		call_break(c, r, "writing to vramd failed");
		/* The daemon never read it: safe to send again once
		 * reconnected. */
		if (!c->reconnecting && c->reconnect) {
			if (c->reconnect && c->reconnect(c) == 0)
				goto again;
			return error_set(ENOTCONN, "vramd is away (restarting?); "
						   "reconnecting");
		}
		return error_set(EPIPE, "connection to vramd lost: %s",
				 strerror(-r));
	}
	int64_t spin_ns = call->spin ? (int64_t)c->spin_ms * 1000000 :
				       (int64_t)c->call_spin_us * 1000;
	if (spin_ns) {
		int64_t until = clock_now_ns() + spin_ns;
		if (until > c->spin_until_ns)
			__atomic_store_n(&c->spin_until_ns, until,
					 __ATOMIC_RELAXED);
	}
	c->spin_calls += call->spin;
	r = call_wait(c, call, deadline);
	/* The window is the transition's, not the clock's: once the last
	 * one in flight is answered nothing more comes for it, and a reader
	 * still polling would take a core from whatever runs next (the
	 * trainer, right after an engine's pause). */
	if (call->spin && --c->spin_calls == 0)
		__atomic_store_n(&c->spin_until_ns, 0, __ATOMIC_RELAXED);
	if (!call->done)
		return error_set(ETIMEDOUT, "vramd did not answer within %d ms",
				 timeout_ms);
	if (r < 0)
		return error_set(r, "%s",
				 call->errmsg[0] ? call->errmsg : strerror(-r));
	return 0;
}

int call_post(struct vram_client *c, Vram__Request *req)
{
	int r;

	if (c->broken)
		return -EPIPE;
	req->id = call_next_id(c);
	r = call_write(c, req);
	if (r < 0 && r != -EMSGSIZE && r != -ENOMEM)
		call_break(c, r, "writing to vramd failed");
	return r;
}

int call_dispatch(struct vram_client *c, int timeout_ms)
{
	int64_t deadline = timeout_ms < 0 ? -1 : clock_now_ms() + timeout_ms;
	int r;

	if (c->broken && !c->reconnecting &&
	    c->reconnect && c->reconnect(c) == -ENOTCONN)
		return error_set(ENOTCONN, "vramd is away (restarting?); "
					   "reconnecting");
	if (c->broken)
		return error_set(EPIPE, "connection to vramd lost");
	if (c->reader)
		return 0; /* another thread reads, and handles events */
	reader_set(c, true);
	r = call_pump(c, PUMP_DISPATCH, NULL, deadline);
	reader_set(c, false);
	pthread_cond_broadcast(&c->cond);
	if (r == 0 && c->broken)
		return error_set(EPIPE, "connection to vramd lost");
	return r;
}

static void *call_thread_main(void *arg)
{
	struct vram_client *c = arg;

	pthread_mutex_lock(&c->lock);
	while (!c->stopping) {
		if (c->broken && !c->reader && !c->reconnecting && c->reconnect) {
			/* The daemon went away: try again when due, so that
			 * events are answered once it is back. */
			int64_t now = clock_now_ms(), due = c->retry_at;
			if (due > now) {
				struct timespec ts = { .tv_sec = due / 1000,
						       .tv_nsec = (due % 1000) * 1000000 };
				pthread_cond_timedwait(&c->cond, &c->lock, &ts);
				continue;
			}
			c->reconnect(c);
			continue;
		}
		if (c->broken || c->reader) {
			pthread_cond_wait(&c->cond, &c->lock);
			continue;
		}
		reader_set(c, true);
		call_pump(c, PUMP_THREAD, NULL, -1);
		reader_set(c, false);
		pthread_cond_broadcast(&c->cond);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

int call_thread_start(struct vram_client *c)
{
	int r;

	if (c->thread_started)
		return error_set(EALREADY, "the event thread already runs");
	if (c->broken)
		return error_set(EPIPE, "connection to vramd lost");
	/* A guest thread takes no signals meant for the program. */
	r = thread_start_unsignalled(&c->thread, NULL, call_thread_main, c);
	if (r != 0)
		return error_set(r, "cannot start the event thread: %s",
				 strerror(r));
	pthread_setname_np(c->thread, "vram-events");
	c->thread_started = true;
	return 0;
}
