/* One client connection: reading frames, answering requests, pushing
 * events. A session is freed only in its poll handle's close callback, so
 * a session closed while a request is being handled stays valid until the
 * loop comes back. */
#ifndef VRAMD_SESSION_H
#define VRAMD_SESSION_H

#include <stdbool.h>
#include <uv.h>

#include "pool.h"
#include "vram.pb-c.h"
#include "wire.h"

struct server;

struct session {
	struct session *prev, *next;
	struct server *srv;
	uint64_t id;
	int fd;
	uv_poll_t poll;
	struct identity who;
	struct wire_rx rx;
	struct wire_tx tx;
	bool hello_done;
	bool closing;  /* session_close ran; freed in the close callback */
	bool broken;   /* a send failed; closed from the loop, not the sender */
	int poll_events;
};

/* Takes an accepted socket (CLOEXEC, non-blocking): reads the peer's
 * credentials and starts watching it. The session owns fd from here on,
 * also on failure. */
int session_open(struct server *srv, int fd);

/* Closes the session: the daemon drops its mappings (which may complete
 * transitions), drops pools it owned (unless persistent), closes its fd
 * and, later, frees it. Safe to call more than once. */
void session_close(struct session *s, const char *why);

/* Marks a session to be closed by the loop soon, not in the caller's
 * stack: for paths (sending an event) whose callers hold pointers that a
 * close would free. */
void session_close_later(struct session *s, const char *why);

/* Sends a response to request id: err (positive errno, 0) with a message,
 * and a body with fds. The caller keeps its fds. A session whose socket is
 * broken is closed. */
void session_reply(struct session *s, Vram__Response *resp, const int *fds,
		   unsigned nfds);
void session_reply_error(struct session *s, uint64_t id, int err,
			 const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Pushes an event with fds (kept by the caller). */
void session_send_event(struct session *s, Vram__Event *ev, const int *fds,
			unsigned nfds);

/* Request handlers (request.c), called by the session for each request. */
void request_handle(struct session *s, Vram__Request *req, int *fds,
		    unsigned nfds);

#endif
