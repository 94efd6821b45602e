/* SPDX-License-Identifier: Apache-2.0 */
/* One client connection's socket, send queue and lifetime. Replies and
 * events are queued with proto/wire.c and written as the socket takes
 * them; a client that stops reading is cut off before the daemon hoards
 * its memory. */
#include "session.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "peer.h"

/* A client that stops reading must not make the daemon hoard memory. */
#define SESSION_MAX_QUEUED (64u << 20)

/* Watches for input when reading, and for room to write when the queue
 * is not empty. */
static void session_watch(struct session *s)
{
	pthread_mutex_lock(&s->send_lock);
	bool queued = s->tx.head != NULL;
	pthread_mutex_unlock(&s->send_lock);
	int events =
		(s->reading ? UV_READABLE : 0) | (queued ? UV_WRITABLE : 0);

	if (s->closing || s->broken || s->poll_events == events)
		return;
	s->poll_events = events;
	if (events)
		uv_poll_start(&s->poll, events, s->on_poll);
	else
		uv_poll_stop(&s->poll);
}

int session_open(uv_loop_t *loop, int fd, uint64_t id, uv_poll_cb on_poll,
		 void (*on_broken)(struct session *s), void *owner,
		 struct session **out)
{
	struct identity who;
	struct session *s;
	int r = peer_identify(fd, &who);

	if (r < 0) {
		close(fd);
		return r;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		close(fd);
		return -ENOMEM;
	}
	s->owner = owner;
	s->fd = fd;
	s->id = id;
	s->on_poll = on_poll;
	s->on_broken = on_broken;
	s->who = who;
	wire_rx_init(&s->rx);
	wire_tx_init(&s->tx);
	if (uv_poll_init(loop, &s->poll, fd) < 0) {
		close(fd);
		free(s);
		return -EIO;
	}
	pthread_mutex_init(&s->send_lock, NULL);
	s->poll.data = s;
	s->holds = 1; /* the poll handle's, given back when it is closed */
	s->reading = true;
	session_watch(s);
	log_debug("session %llu: pid %u uid %u connected",
		  (unsigned long long)s->id, s->who.pid, s->who.uid);
	*out = s;
	return 0;
}

void session_hold(struct session *s)
{
	s->holds++;
}

void session_unhold(struct session *s)
{
	if (--s->holds > 0)
		return;
	wire_tx_free(&s->tx);
	if (s->limits)
		limit_queue_sync(s->limits, &s->acct, 0, 0);
	close(s->fd);
	wire_rx_free(&s->rx);
	if (s->io.req)
		vram__request__free_unpacked(s->io.req, NULL);
	pthread_mutex_destroy(&s->send_lock);
	free(s);
}

static void session_on_closed(uv_handle_t *h)
{
	session_unhold(h->data);
}

void session_close(struct session *s, const char *why)
{
	if (s->closing)
		return;
	pthread_mutex_lock(&s->send_lock);
	s->closing = true;
	pthread_mutex_unlock(&s->send_lock);
	log_debug("session %llu (pid %u) closed: %s", (unsigned long long)s->id,
		  s->who.pid, why);
	uv_poll_stop(&s->poll);
	uv_close((uv_handle_t *)&s->poll, session_on_closed);
}

/* Marks the session broken and tells its owner (on_broken) to close it
 * soon: for paths (sending an event) whose callers hold pointers that a
 * close would free. */
void session_close_later(struct session *s, const char *why)
{
	if (s->closing || s->broken)
		return;
	log_debug("session %llu: %s", (unsigned long long)s->id, why);
	pthread_mutex_lock(&s->send_lock);
	s->broken = true;
	pthread_mutex_unlock(&s->send_lock);
	uv_poll_stop(&s->poll);
	s->poll_events = 0;
	s->on_broken(s);
}

void session_set_reading(struct session *s, bool on)
{
	s->reading = on;
	session_watch(s);
}

/* Tells the limits what the queue holds now. */
static void session_account(struct session *s)
{
	pthread_mutex_lock(&s->send_lock);
	size_t bytes = s->tx.bytes;
	unsigned nfds = s->tx.nfds;
	pthread_mutex_unlock(&s->send_lock);
	if (s->limits)
		limit_queue_sync(s->limits, &s->acct, bytes, nfds);
}

void session_flush(struct session *s)
{
	pthread_mutex_lock(&s->send_lock);
	int r = wire_tx_flush(&s->tx, s->fd);
	pthread_mutex_unlock(&s->send_lock);
	session_account(s);
	if (r < 0) {
		session_close_later(s, "write failed");
		return;
	}
	session_watch(s);
}

void (*session_before_send)(void);

/* Most messages (answers, small events) are packed on the stack: the
 * queue copies them anyway. */
#define SESSION_PACK_STACK 1024

static void session_send(struct session *s, Vram__ServerMsg *msg,
			 const int *fds, unsigned nfds)
{
	uint8_t small[SESSION_PACK_STACK];
	size_t len;
	uint8_t *buf;
	int r;

	if (session_before_send)
		session_before_send();

	if (s->closing || s->broken)
		return;
	len = vram__server_msg__get_packed_size(msg);
	buf = len <= sizeof(small) ? small : malloc(len);
	if (!buf) {
		session_close_later(s, "out of memory");
		return;
	}
	vram__server_msg__pack(msg, buf);
	pthread_mutex_lock(&s->send_lock);
	if (s->limits ? !limit_queue_admit(s->limits, &s->acct,
					    SESSION_MAX_QUEUED, len, nfds)
		      : s->tx.bytes + len > SESSION_MAX_QUEUED)
		r = -ENOBUFS; /* a slow reader: dropped, as on a crash */
	else
		r = wire_tx_send(&s->tx, s->fd, buf, len, fds, nfds);
	pthread_mutex_unlock(&s->send_lock);
	if (buf != small)
		free(buf);
	session_account(s);
	if (r < 0) {
		session_send_failed(s, r);
		return;
	}
	session_watch(s);
}

void session_send_failed(struct session *s, int r)
{
	/* A peer that went away is no news; anything else is. */
	if (r != -EPIPE && r != -ECONNRESET)
		log_warn("session %llu (pid %u): cannot send: %s",
			 (unsigned long long)s->id, s->who.pid, strerror(-r));
	session_close_later(s, "send failed");
}

/* A ping's answer packs into a few bytes. */
#define SESSION_PING_PACK 64

int session_reply_ping(struct session *s, uint64_t id)
{
	Vram__ServerMsg msg = VRAM__SERVER_MSG__INIT;
	Vram__Response resp = VRAM__RESPONSE__INIT;
	uint8_t buf[SESSION_PING_PACK];
	int r = -EBUSY;

	resp.id = id;
	msg.body_case = VRAM__SERVER_MSG__BODY_RESPONSE;
	msg.response = &resp;
	size_t len = vram__server_msg__get_packed_size(&msg);
	if (len > sizeof(buf))
		return -EBUSY;
	vram__server_msg__pack(&msg, buf);
	/* Only on an empty queue: whatever waits there goes first, and
	 * the limits (the loop's) need not hear of a frame that went out
	 * whole. */
	pthread_mutex_lock(&s->send_lock);
	if (!s->closing && !s->broken && !s->tx.head)
		r = wire_tx_send(&s->tx, s->fd, buf, len, NULL, 0);
	pthread_mutex_unlock(&s->send_lock);
	return r;
}

void session_reply(struct session *s, Vram__Response *resp, const int *fds,
		   unsigned nfds)
{
	Vram__ServerMsg msg = VRAM__SERVER_MSG__INIT;
	msg.body_case = VRAM__SERVER_MSG__BODY_RESPONSE;
	msg.response = resp;
	session_send(s, &msg, fds, nfds);
}

void session_reply_error(struct session *s, uint64_t id, int err,
			 const char *fmt, ...)
{
	Vram__Response resp = VRAM__RESPONSE__INIT;
	char message[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(message, sizeof(message), fmt, ap);
	va_end(ap);
	resp.id = id;
	resp.err = err;
	resp.message = message;
	session_reply(s, &resp, NULL, 0);
}

void session_send_event(struct session *s, Vram__Event *ev, const int *fds,
			unsigned nfds)
{
	Vram__ServerMsg msg = VRAM__SERVER_MSG__INIT;
	msg.body_case = VRAM__SERVER_MSG__BODY_EVENT;
	msg.event = ev;
	session_send(s, &msg, fds, nfds);
}
