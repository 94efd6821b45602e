/* SPDX-License-Identifier: Apache-2.0 */
/* The admin lane: a second listening socket, for root and the admin
 * group, whose sessions jump the queue. The loop handles the sessions that
 * an epoll batch found ready one after the other, up to ~1024 of them, so
 * a request that came last waits for all the others; between ordinary
 * requests the owner calls lane_check(), which at most once every
 * check_ns polls (timeout 0) the admin listener and the admin sessions'
 * fds and calls the owner back for each readable one. An admin request
 * thus waits for about one ordinary request, not for a batch.
 *
 * The lane gives priority, not rights: what an admin session may do still
 * comes from its peer's credentials (docs/security.md). The listener has
 * its own watch and its own back-off at the fd limit, so the main
 * listener's pause (limit.h) does not lock the admins out.
 *
 * It knows no sessions: the owner adds each admin session's fd with an
 * opaque pointer, and removes it before the fd closes. */
#ifndef VRAMD_LANE_H
#define VRAMD_LANE_H

#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

struct lane {
	int listen_fd; /* -1: no lane */
	uv_poll_t listen_poll;
	uv_timer_t pause_timer; /* resumes the listener after the fd limit */
	bool paused;
	bool handles; /* listen_poll and pause_timer were initialised */

	/* pfds[0] is the listener (fd -1 while paused), then the sessions;
	 * owners[i] is the owner's pointer for pfds[i]. */
	struct pollfd *pfds;
	void **owners;
	unsigned n, cap;
	bool running; /* in lane_poll: removals only mark their entry */
	bool holes;   /* entries marked during the pass, to compact */

	uint64_t check_ns; /* the most time between two polls */
	uint64_t due_ns;   /* uv_hrtime() from which the next poll is due */

	void (*on_accept)(void *data); /* the listener is readable */
	void (*on_ready)(void *owner, void *data); /* a session has input */
	void *data;
};

/* Sets up l on loop for listen_fd (non-blocking; -1: no lane, every call
 * below is then a no-op). l owns listen_fd from here on, also on failure.
 * on_accept is called when the listener is readable, from its own watch
 * or from lane_check; on_ready when an added fd is readable (or hung up)
 * during lane_check. check_us: the most time between two polls while
 * lane_check is called (0: every call). Returns 0 or -errno. */
int lane_init(struct lane *l, uv_loop_t *loop, int listen_fd, unsigned check_us,
	      void (*on_accept)(void *data),
	      void (*on_ready)(void *owner, void *data), void *data);

/* Watches fd (an admin session's socket) for lane_check, calling back
 * with owner. Returns 0 or -ENOMEM. */
int lane_add(struct lane *l, int fd, void *owner);

/* Stops watching owner's fd; safe from a callback and when not added. */
void lane_remove(struct lane *l, const void *owner);

/* accept() on the listener failed with err: at EMFILE/ENFILE the
 * listener rests (LANE_PAUSE_MS) instead of waking the loop for nothing,
 * the connection kept waiting in the backlog. Returns true when the
 * caller must stop accepting for now. */
bool lane_accept_failed(struct lane *l, int err);

/* Polls the lane now (see lane_check). */
void lane_poll(struct lane *l);

/* What the owner calls between two ordinary requests: polls when due.
 * Cheap when not due (one clock read). */
static inline void lane_check(struct lane *l)
{
	if (l->listen_fd >= 0 && !l->running && uv_hrtime() >= l->due_ns)
		lane_poll(l);
}

/* Closes the handles (the loop runs their close callbacks). */
void lane_close(struct lane *l);

/* Closes the listener and frees the table once the loop has stopped. */
void lane_fini(struct lane *l);

#endif
