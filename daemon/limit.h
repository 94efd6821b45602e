/* SPDX-License-Identifier: Apache-2.0 */
/* What one client, one uid and all of them together may make the daemon
 * hold: sessions (with a reserve that root and the admin group always
 * get), a deadline for the hello, queued output in bytes and in fds, the
 * listener's back-off at the fd limit, and the names clients give.
 * It knows no sessions: each session embeds a struct limit_acct, and the
 * owner is called back (on_hello_late) with it. docs/security.md lists the
 * limits and their defaults. */
#ifndef VRAMD_LIMIT_H
#define VRAMD_LIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "config.h"

/* What one uid holds now. */
struct limit_user {
	uint32_t uid;
	unsigned sessions;
	size_t queued_bytes;
	unsigned queued_fds;
};

/* One session's share, embedded in struct session. */
struct limit_acct {
	uint32_t uid;
	bool counted;	 /* in the session counts (limit_session_admit) */
	bool privileged; /* root or the admin group */
	size_t bytes;	 /* queued output accounted to this session */
	unsigned fds;
	/* The list of sessions that owe their hello, oldest first. */
	struct limit_acct *hello_prev, *hello_next;
	bool hello_pending;
	int64_t hello_deadline_ms;
};

struct limit {
	const struct config *cfg;
	struct limit_user *users;
	unsigned n_users, cap_users;
	unsigned sessions, privileged_sessions;
	size_t queued_bytes;
	unsigned queued_fds;
	unsigned max_queued_fds; /* the setting, held under the fd limit */
	gid_t admin_gid;
	bool has_admin_gid;

	/* The listener, paused at the fd limit and resumed by a timer. */
	uv_poll_t *listen_poll;
	uv_poll_cb on_accept;
	int listen_fd;
	int reserve_fd; /* closed to accept-and-close at EMFILE */
	bool accept_paused;
	bool at_limit;		   /* logged, until an accept succeeds */
	uint64_t refused_at_limit; /* since the last log line */
	uv_timer_t accept_timer;

	uv_timer_t hello_timer;
	struct limit_acct *hello_head, *hello_tail;
	void (*on_hello_late)(struct limit_acct *a, void *data);
	void *data;
};

/* Sets up l for cfg (kept by pointer) on loop. The listener is watched
 * through listen_poll with on_accept, which limit_accept_failed pauses
 * and resumes. Returns 0 or -errno. */
int limit_init(struct limit *l, uv_loop_t *loop, const struct config *cfg,
	       uv_poll_t *listen_poll, int listen_fd, uv_poll_cb on_accept,
	       void (*on_hello_late)(struct limit_acct *a, void *data),
	       void *data);

/* Closes the timers (the loop runs their close callbacks). */
void limit_close(struct limit *l);

/* Frees what is left once the loop has stopped. */
void limit_fini(struct limit *l);

/* Names of clients, pools and tags reach logs, tables, JSON and
 * terminals: valid UTF-8 (no overlong forms, no surrogates), no control
 * characters (C0, DEL, C1), and fewer than max bytes. */
bool limit_name_ok(const char *s, size_t max);

/* Takes a freshly accepted connection from uid/gid on fd: decides
 * whether the peer is privileged (root, or the admin group among its
 * groups), and admits it against max_sessions, admin_reserve and
 * max_sessions_per_uid, counting it in. Returns 0, or -EUSERS (the
 * daemon or the uid is full) with a reason in why. */
int limit_session_admit(struct limit *l, struct limit_acct *a, int fd,
			uint32_t uid, uint32_t gid, char *why, size_t len);

/* The session is gone: its counts drop (its queue is released by
 * limit_queue_sync to 0 once it is freed). */
void limit_session_gone(struct limit *l, struct limit_acct *a);

/* The session sent its hello: no deadline any more. */
void limit_hello_done(struct limit *l, struct limit_acct *a);

/* Whether a frame of len bytes and nfds fds may be queued for a. Over
 * the session's (per_session bytes), its uid's or the daemon's caps, a
 * session with output already waiting is a slow reader: false (the
 * caller drops it). One with nothing queued may always have one frame,
 * which goes to the socket at once. */
bool limit_queue_admit(struct limit *l, const struct limit_acct *a,
		       size_t per_session, size_t len, unsigned nfds);

/* Brings the counts to what a's queue holds now (bytes, fds). */
void limit_queue_sync(struct limit *l, struct limit_acct *a, size_t bytes,
		      unsigned fds);

/* accept() failed with err on the listener. At EMFILE/ENFILE it
 * accepts-and-closes one waiting connection through the reserve fd,
 * pauses the listener for a while and logs once (not once a call).
 * Returns true when the caller must stop accepting for now. */
bool limit_accept_failed(struct limit *l, int err);

/* An accept succeeded: logs how many were refused at the fd limit. */
void limit_accept_ok(struct limit *l);

/* What uid holds, or NULL when nothing. */
const struct limit_user *limit_user_find(const struct limit *l, uint32_t uid);

#endif
