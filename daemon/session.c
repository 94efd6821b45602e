/* One client connection. Reads frames with proto/wire.c, decodes requests
 * and hands them to request.c; writes replies and events, queueing what the
 * socket does not take at once. A peer that breaks the protocol loses its
 * session (and every fd it sent); the daemon goes on. */
#include "session.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "server.h"
#include "transition.h"

/* A client that stops reading must not make the daemon hoard memory. */
#define SESSION_MAX_QUEUED (64u << 20)

static void session_on_poll(uv_poll_t *h, int status, int events);

static void session_watch(struct session *s, int events)
{
	if (s->closing || s->poll_events == events)
		return;
	s->poll_events = events;
	uv_poll_start(&s->poll, events, session_on_poll);
}

int session_open(struct server *srv, int fd)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	struct session *s;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
		int r = -errno;
		close(fd);
		return r;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		close(fd);
		return -ENOMEM;
	}
	s->srv = srv;
	s->fd = fd;
	s->id = ++srv->next_session_id;
	s->who.pid = (uint32_t)cred.pid;
	s->who.uid = cred.uid;
	s->who.gid = cred.gid;
	snprintf(s->who.name, sizeof(s->who.name), "pid%d", cred.pid);
	wire_rx_init(&s->rx);
	wire_tx_init(&s->tx);
	if (uv_poll_init(srv->loop, &s->poll, fd) < 0) {
		close(fd);
		free(s);
		return -EIO;
	}
	s->poll.data = s;
	s->next = srv->sessions;
	if (srv->sessions)
		srv->sessions->prev = s;
	srv->sessions = s;
	srv->n_sessions++;
	session_watch(s, UV_READABLE);
	log_debug("session %llu: pid %u uid %u connected",
		  (unsigned long long)s->id, s->who.pid, s->who.uid);
	server_update_status(srv);
	return 0;
}

static void session_free_cb(uv_handle_t *h)
{
	struct session *s = h->data;
	close(s->fd);
	wire_rx_free(&s->rx);
	wire_tx_free(&s->tx);
	free(s);
}

/* Drops everything the session held in the pools. */
static void session_release_pools(struct session *s)
{
	struct server *srv = s->srv;

	transition_session_gone(srv, s);
	/* Dropping a pool changes the array: start over after each. */
	for (unsigned i = 0; i < srv->n_pools;) {
		struct pool *p = srv->pools[i];
		if (p->owner == s && !(p->flags & POOL_FLAG_PERSIST)) {
			log_info("pool %s dropped: its owner pid %u went away",
				 p->name, s->who.pid);
			server_pool_drop(srv, p, s);
			i = 0;
			continue;
		}
		if (p->owner == s) {
			log_info("pool %s kept (persistent) without its owner pid %u",
				 p->name, s->who.pid);
			pool_set_owner(p, NULL, NULL);
		}
		if (pool_mapper_remove(p, s))
			transition_advance(srv, p);
		i++;
	}
}

void session_close(struct session *s, const char *why)
{
	struct server *srv = s->srv;

	if (s->closing)
		return;
	s->closing = true;
	log_debug("session %llu (pid %u) closed: %s", (unsigned long long)s->id,
		  s->who.pid, why);
	/* Unlink first so that nothing is sent to it from here on. */
	if (s->prev)
		s->prev->next = s->next;
	else
		srv->sessions = s->next;
	if (s->next)
		s->next->prev = s->prev;
	srv->n_sessions--;
	session_release_pools(s);
	uv_poll_stop(&s->poll);
	uv_close((uv_handle_t *)&s->poll, session_free_cb);
	server_update_status(srv);
}

void session_close_later(struct session *s, const char *why)
{
	if (s->closing || s->broken)
		return;
	log_debug("session %llu: %s", (unsigned long long)s->id, why);
	s->broken = true;
	uv_poll_stop(&s->poll);
	s->poll_events = 0;
	server_reap_later(s->srv);
}

static void session_flush(struct session *s)
{
	int r = wire_tx_flush(&s->tx, s->fd);
	if (r < 0) {
		session_close_later(s, "write failed");
		return;
	}
	session_watch(s, r == 1 ? UV_READABLE : UV_READABLE | UV_WRITABLE);
}

static void session_send(struct session *s, Vram__ServerMsg *msg,
			 const int *fds, unsigned nfds)
{
	size_t len;
	uint8_t *buf;
	int r;

	if (s->closing || s->broken)
		return;
	len = vram__server_msg__get_packed_size(msg);
	buf = malloc(len ? len : 1);
	if (!buf) {
		session_close_later(s, "out of memory");
		return;
	}
	vram__server_msg__pack(msg, buf);
	if (s->tx.bytes + len > SESSION_MAX_QUEUED)
		r = -ENOBUFS;
	else
		r = wire_tx_queue(&s->tx, buf, len, fds, nfds);
	free(buf);
	if (r < 0) {
		log_warn("session %llu (pid %u): cannot send: %s",
			 (unsigned long long)s->id, s->who.pid, strerror(-r));
		session_close_later(s, "send queue failed");
		return;
	}
	session_flush(s);
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

/* Returns false when the session must close. */
static bool session_handle_frame(struct session *s, struct wire_frame *f)
{
	Vram__Request *req;

	if (f->nfds) {
		/* No request carries fds: a client sending some is broken. */
		log_warn("session %llu (pid %u): %u unexpected fds",
			 (unsigned long long)s->id, s->who.pid, f->nfds);
		return false;
	}
	req = vram__request__unpack(NULL, f->len, f->payload);
	if (!req) {
		log_warn("session %llu (pid %u): undecodable request",
			 (unsigned long long)s->id, s->who.pid);
		return false;
	}
	if (!s->hello_done && req->body_case != VRAM__REQUEST__BODY_HELLO) {
		log_warn("session %llu (pid %u): request before hello",
			 (unsigned long long)s->id, s->who.pid);
		vram__request__free_unpacked(req, NULL);
		return false;
	}
	request_handle(s, req, f->fds, f->nfds);
	vram__request__free_unpacked(req, NULL);
	return !s->closing;
}

static void session_read(struct session *s)
{
	struct wire_frame f;
	int r;

	/* Bounded work per wake-up so one busy client cannot starve others. */
	for (int round = 0; round < 16 && !s->closing && !s->broken; round++) {
		r = wire_rx_read(&s->rx, s->fd);
		if (r == -EAGAIN)
			return;
		if (r == 0) {
			session_close(s, "peer closed");
			return;
		}
		if (r < 0) {
			session_close(s, r == -EPROTO ? "bad fds" : "read failed");
			return;
		}
		while (!s->closing && !s->broken) {
			memset(&f, 0, sizeof(f));
			r = wire_rx_next(&s->rx, &f);
			if (r == 0)
				break;
			if (r < 0) {
				log_warn("session %llu (pid %u): malformed frame: %s",
					 (unsigned long long)s->id, s->who.pid,
					 strerror(-r));
				session_close(s, "malformed frame");
				return;
			}
			bool ok = session_handle_frame(s, &f);
			wire_frame_clear(&f);
			if (!ok) {
				session_close(s, "protocol error");
				return;
			}
		}
	}
}

static void session_on_poll(uv_poll_t *h, int status, int events)
{
	struct session *s = h->data;

	if (status < 0) {
		session_close(s, uv_strerror(status));
		return;
	}
	if (events & UV_WRITABLE)
		session_flush(s);
	if ((events & UV_READABLE) && !s->closing && !s->broken)
		session_read(s);
}
