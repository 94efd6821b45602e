/* SPDX-License-Identifier: Apache-2.0 */
/* A client that speaks the raw protocol to a harness daemon, so that
 * nothing in the test process maps or holds what it is not asked to:
 * connect, send a request, take the next message (its first fd kept on
 * demand), and the calls most cases make (hello, create, grow, open,
 * transition, ack). Static; included by tests that need one.
 */
#ifndef VRAM_TEST_RAW_PEER_H
#define VRAM_TEST_RAW_PEER_H

#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "frame_send.h"
#include "harness.h"
#include "test.h"
#include "vram.pb-c.h"
#include "wire.h"

#define RAW_PEER_UNUSED __attribute__((unused))

struct peer {
	int fd;
	struct wire_rx rx;
	uint64_t next_id;
	struct harness_daemon *d;
	bool save_in_parts; /* what its hello says */
};

static RAW_PEER_UNUSED void peer_connect(struct peer *p,
					 struct harness_daemon *d)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	p->d = d;
	p->save_in_parts = false;
	p->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT(p->fd >= 0);
	ASSERT(strlen(d->socket) < sizeof(a.sun_path));
	memcpy(a.sun_path, d->socket, strlen(d->socket) + 1);
	ASSERT_OK(connect(p->fd, (struct sockaddr *)&a, sizeof(a)));
	wire_rx_init(&p->rx);
	p->next_id = 1;
}

static RAW_PEER_UNUSED void peer_close(struct peer *p)
{
	wire_rx_free(&p->rx);
	close(p->fd);
}

static RAW_PEER_UNUSED uint64_t peer_send(struct peer *p, Vram__Request *req)
{
	if (req->body_case != VRAM__REQUEST__BODY_ACK)
		req->id = p->next_id++;
	size_t len = vram__request__get_packed_size(req);
	uint8_t *buf = malloc(len + 1);
	vram__request__pack(req, buf);
	ASSERT_OK(frame_send(p->fd, buf, len, NULL, 0));
	free(buf);
	return req->id;
}

/* Is a message already waiting (read or readable)? Does not wait. */
static RAW_PEER_UNUSED int peer_has_message(struct peer *p)
{
	struct pollfd pf = { .fd = p->fd, .events = POLLIN };
	return p->rx.len > 0 || poll(&pf, 1, 0) == 1;
}

/* The next message. Fds that come with it are closed (this peer maps
 * nothing) but the first, which goes to *fd0 when fd0 is not NULL (-1 if
 * none came). wait_ms bounds a wait that only a stuck daemon makes long. */
static RAW_PEER_UNUSED Vram__ServerMsg *peer_recv_fd(struct peer *p, int wait_ms,
				     const char *what, int *fd0)
{
	struct wire_frame f;
	for (;;) {
		memset(&f, 0, sizeof(f));
		int r = wire_rx_next(&p->rx, &f);
		ASSERT(r >= 0);
		if (r == 1) {
			Vram__ServerMsg *m = vram__server_msg__unpack(
				NULL, f.len, f.payload);
			if (fd0) {
				*fd0 = f.nfds ? f.fds[0] : -1;
				if (f.nfds)
					f.fds[0] = -1;
			}
			wire_frame_clear(&f);
			ASSERT(m);
			return m;
		}
		struct pollfd pf = { .fd = p->fd, .events = POLLIN };
		if (poll(&pf, 1, wait_ms) != 1)
			TEST_FAIL(
				"no %s from vramd in %d ms: its loop is stuck\n%s",
				what, wait_ms, harness_daemon_log(p->d));
		r = wire_rx_read(&p->rx, p->fd);
		ASSERT(r > 0 || r == -EAGAIN);
	}
}

static RAW_PEER_UNUSED Vram__ServerMsg *peer_recv(struct peer *p, int wait_ms, const char *what)
{
	return peer_recv_fd(p, wait_ms, what, NULL);
}

/* Waits for the response to id and returns its err. */
static RAW_PEER_UNUSED int peer_response(struct peer *p, uint64_t id, const char *what)
{
	Vram__ServerMsg *m = peer_recv(p, 10000, what);
	ASSERT_EQ(m->body_case, VRAM__SERVER_MSG__BODY_RESPONSE);
	ASSERT_UEQ(m->response->id, id);
	int err = m->response->err;
	vram__server_msg__free_unpacked(m, NULL);
	return err;
}

/* Sends req and returns its response (free it), the first fd that came
 * with it in *fd0 as peer_recv_fd does. */
static RAW_PEER_UNUSED Vram__ServerMsg *peer_call(struct peer *p, Vram__Request *req,
				  const char *what, int *fd0)
{
	uint64_t id = peer_send(p, req);
	Vram__ServerMsg *m = peer_recv_fd(p, 10000, what, fd0);
	ASSERT_EQ(m->body_case, VRAM__SERVER_MSG__BODY_RESPONSE);
	ASSERT_UEQ(m->response->id, id);
	return m;
}

static RAW_PEER_UNUSED void peer_hello(struct peer *p, const char *name)
{
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__Hello h = VRAM__HELLO__INIT;
	h.version = WIRE_PROTOCOL_VERSION;
	h.name = (char *)name;
	h.save_in_parts = p->save_in_parts;
	req.body_case = VRAM__REQUEST__BODY_HELLO;
	req.hello = &h;
	ASSERT_EQ(peer_response(p, peer_send(p, &req), "hello reply"), 0);
}

static RAW_PEER_UNUSED uint64_t peer_ping(struct peer *p)
{
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__Ping ping = VRAM__PING__INIT;
	req.body_case = VRAM__REQUEST__BODY_PING;
	req.ping = &ping;
	return peer_send(p, &req);
}

/* Creates a pool of policy with a range of reserve bytes; its backup's fd
 * (host policy) goes to *backup_fd when that is not NULL. */
static RAW_PEER_UNUSED uint64_t peer_create_as(struct peer *p, const char *name,
					       Vram__Policy policy,
					       uint64_t reserve, int *backup_fd)
{
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__PoolCreate c = VRAM__POOL_CREATE__INIT;
	c.name = (char *)name;
	c.policy = policy;
	c.reserve_bytes = reserve;
	req.body_case = VRAM__REQUEST__BODY_POOL_CREATE;
	req.pool_create = &c;
	Vram__ServerMsg *m = peer_call(p, &req, "create reply", backup_fd);
	ASSERT_EQ(m->response->err, 0);
	uint64_t pool_id = m->response->pool->info->id;
	vram__server_msg__free_unpacked(m, NULL);
	return pool_id;
}

/* A discard pool of 8 MiB. */
static RAW_PEER_UNUSED uint64_t peer_create(struct peer *p, const char *name)
{
	return peer_create_as(p, name, VRAM__POLICY__POLICY_DISCARD, 8u << 20,
			      NULL);
}

static RAW_PEER_UNUSED Vram__ServerMsg *peer_grow_call(struct peer *p, uint64_t pool_id,
				       uint64_t bytes, int *fd0)
{
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__PoolGrow g = VRAM__POOL_GROW__INIT;
	g.pool_id = pool_id;
	g.bytes = bytes;
	req.body_case = VRAM__REQUEST__BODY_POOL_GROW;
	req.pool_grow = &g;
	return peer_call(p, &req, "grow reply", fd0);
}

static RAW_PEER_UNUSED void peer_grow(struct peer *p, uint64_t pool_id, uint64_t bytes)
{
	Vram__ServerMsg *m = peer_grow_call(p, pool_id, bytes, NULL);
	ASSERT_EQ(m->response->err, 0);
	vram__server_msg__free_unpacked(m, NULL);
}

/* Opens the pool named name as a mapper. */
static RAW_PEER_UNUSED Vram__ServerMsg *peer_open_call(struct peer *p, const char *name,
				       int *fd0)
{
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__PoolOpen o = VRAM__POOL_OPEN__INIT;
	o.name = (char *)name;
	req.body_case = VRAM__REQUEST__BODY_POOL_OPEN;
	req.pool_open = &o;
	return peer_call(p, &req, "open reply", fd0);
}

/* Sends a pause or resume of the pool named name from p; returns its id. */
static RAW_PEER_UNUSED uint64_t peer_transition(struct peer *p, const char *name, bool resume)
{
	Vram__Transition t = VRAM__TRANSITION__INIT;
	Vram__Selector sel = VRAM__SELECTOR__INIT;
	Vram__Request req = VRAM__REQUEST__INIT;
	sel.name = (char *)name;
	t.selector = &sel;
	if (resume) {
		req.body_case = VRAM__REQUEST__BODY_RESUME;
		req.resume = &t;
	} else {
		req.body_case = VRAM__REQUEST__BODY_PAUSE;
		req.pause = &t;
	}
	return peer_send(p, &req);
}

/* The next message, which must be an event of kind (free it). */
static RAW_PEER_UNUSED Vram__ServerMsg *peer_event(struct peer *p,
						   Vram__EventKind kind)
{
	Vram__ServerMsg *m = peer_recv(p, 10000, "event");
	ASSERT_EQ(m->body_case, VRAM__SERVER_MSG__BODY_EVENT);
	ASSERT_EQ(m->event->kind, kind);
	return m;
}

/* Acks event_id with err (a positive errno, or 0). */
static RAW_PEER_UNUSED void peer_ack(struct peer *p, uint64_t event_id, int err)
{
	Vram__EventAck ack = VRAM__EVENT_ACK__INIT;
	ack.event_id = event_id;
	ack.err = err;
	Vram__Request req = VRAM__REQUEST__INIT;
	req.body_case = VRAM__REQUEST__BODY_ACK;
	req.ack = &ack;
	peer_send(p, &req);
}

/* Reports chunks [0, done) of event_id restored, or saved. */
static RAW_PEER_UNUSED void peer_progress(struct peer *p, uint64_t event_id,
					  uint32_t done)
{
	Vram__ResumeProgress pr = VRAM__RESUME_PROGRESS__INIT;
	pr.event_id = event_id;
	pr.restored = done;
	Vram__Request req = VRAM__REQUEST__INIT;
	req.body_case = VRAM__REQUEST__BODY_PROGRESS;
	req.progress = &pr;
	peer_send(p, &req);
}

/* Takes the next event, of kind, and acks it. */
static RAW_PEER_UNUSED void peer_ack_event(struct peer *p, Vram__EventKind kind)
{
	Vram__ServerMsg *m = peer_event(p, kind);
	uint64_t id = m->event->event_id;
	vram__server_msg__free_unpacked(m, NULL);
	peer_ack(p, id, 0);
}

#endif
