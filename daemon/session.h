/* SPDX-License-Identifier: Apache-2.0 */
/* One client connection's own side: its socket and credentials, the queue
 * of replies and events it has not taken yet, and its lifetime. It knows
 * no pools and no requests: server.c reads and dispatches its frames,
 * node.c undoes what it held when it goes. A session is freed only once
 * its poll handle is closed and nobody holds it (session_hold), so one
 * closed while a request is being handled stays valid until the loop
 * comes back. */
#ifndef VRAMD_SESSION_H
#define VRAMD_SESSION_H

#include <pthread.h>
#include <stdbool.h>
#include <uv.h>

#include "io.h"
#include "limit.h"
#include "pool.h"
#include "vram.pb-c.h"
#include "wire.h"

/* What the process said it allocated outside vramd's pools (an
 * OutsideReport, from libvram-preload.so): the last it sent. */
struct session_outside {
	bool reported;
	bool expandable; /* PyTorch's expandable segments were asked for */
	uint64_t bytes, count;
};

struct session {
	struct session *prev, *next; /* the owner's list */
	struct session *next_broken; /* the owner's list of sessions to close */
	void *owner;		     /* opaque here: the owner's pointer */
	uint64_t id;
	int fd;
	uv_poll_t poll;
	struct identity who;
	struct wire_rx rx; /* filled by whoever has the turn (io.h) */
	struct wire_tx tx;
	/* Held around every write to the socket and every look at tx, and
	 * where closing and broken are set: a reading thread answers pings
	 * on this socket too (io.h). */
	pthread_mutex_t send_lock;
	struct session_io io; /* its reading thread's side (io.h) */
	bool hello_done;
	bool resume_in_parts; /* its Hello said it restores in parts */
	bool save_in_parts;   /* and that it saves in parts */
	bool closing; /* session_close ran; freed once nobody holds it */
	bool broken;  /* a send failed; closed from the loop, not the sender */
	bool reading; /* watch for input; the owner pauses and resumes it */
	bool admin_lane; /* came in on the admin socket (server.c, lane.h) */
	int poll_events;
	unsigned holds; /* the poll handle's and session_hold's */
	uv_poll_cb on_poll;
	/* Called once when the session must be closed soon, from the loop
	 * rather than from the sender's stack. */
	void (*on_broken)(struct session *s);
	/* A request the owner put off until the device settles, and the
	 * work that waits for it (server.c). */
	Vram__Request *parked;
	uv_work_t settle;
	/* Its share of the limits (daemon/limit.c); limits is set by the
	 * owner once admitted, NULL before. */
	struct limit *limits;
	struct limit_acct acct;
	struct session_outside outside; /* daemon/audit.c */
};

/* Called before anything is sent to any session (set by the server): the
 * fd store is brought in step first, so that a client never holds an fd
 * that a restart would lose. NULL: none. */
extern void (*session_before_send)(void);

/* Takes an accepted socket (CLOEXEC, non-blocking): reads the peer's
 * credentials and starts watching it for input with on_poll (s is the
 * handle's data). The session owns fd from here on, also on failure.
 * Returns 0 and *out, or -errno. */
int session_open(uv_loop_t *loop, int fd, uint64_t id, uv_poll_cb on_poll,
		 void (*on_broken)(struct session *s), void *owner,
		 struct session **out);

/* Stops the session and closes its fd; it is freed later (see above).
 * Safe to call more than once. The owner first undoes what it held. */
void session_close(struct session *s, const char *why);

/* Marks the session broken and tells its owner (on_broken) to close it
 * soon: for paths (sending an event) whose callers hold pointers that a
 * close would free. */
void session_close_later(struct session *s, const char *why);

/* Keeps s allocated across a wait (a closed session is then freed by
 * the last session_unhold). */
void session_hold(struct session *s);
void session_unhold(struct session *s);

/* Watches for input or not; replies and events go out either way. */
void session_set_reading(struct session *s, bool on);

/* Writes what the socket takes of the queue (after a writable event). */
void session_flush(struct session *s);

/* Sends a response to request id: err (positive errno, 0) with a message,
 * and a body with fds. The caller keeps its fds. A session whose socket is
 * broken is closed later. */
void session_reply(struct session *s, Vram__Response *resp, const int *fds,
		   unsigned nfds);
void session_reply_error(struct session *s, uint64_t id, int err,
			 const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* From a reading thread (io.h): answers ping id when the session is open
 * and has nothing queued, as session_reply would. Returns 1 (sent), 0
 * (sent in part, the rest queued: the loop must session_flush), -EBUSY
 * (not sent: the loop's to answer), or -errno (the socket is broken: the
 * loop must session_send_failed). */
int session_reply_ping(struct session *s, uint64_t id);

/* A send to s failed with r (-errno): logged unless the peer went away,
 * and s closed later. */
void session_send_failed(struct session *s, int r);

/* Pushes an event with fds (kept by the caller). */
void session_send_event(struct session *s, Vram__Event *ev, const int *fds,
			unsigned nfds);

#endif
