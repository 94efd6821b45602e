/* Pause and resume requests: each selects pools, runs one state-machine
 * transition per pool (rounds of events to mappers, acks, a deadline) and
 * answers once every pool has finished or the deadline passed. */
#ifndef VRAMD_TRANSITION_H
#define VRAMD_TRANSITION_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "pool.h"
#include "vram.pb-c.h"

#define TRANSITION_MAX_LATE 16

struct server;
struct session;
struct transition;

/* One pool's part in a request. */
struct transition_item {
	struct transition *t;
	struct pool *pool; /* NULL once done or dropped */
	char name[POOL_NAME_MAX];
	int err;           /* positive errno */
	char message[256];
	uint64_t bytes;
	bool done;
	uint32_t late_pids[TRANSITION_MAX_LATE];
	unsigned n_late;
};

struct transition {
	struct transition *next;
	struct server *srv;
	struct session *requester; /* NULL when it went away */
	uint64_t request_id;
	bool resume;
	bool starting;
	uv_timer_t timer;
	unsigned n_items, outstanding;
	uint64_t free_before;
	/* Where the time goes (uv_hrtime, ns), logged when it ends: from the
	 * start to the last mapper's ack, and the daemon's own creates or releases. */
	uint64_t t_start, t_acked, release_ns;
	struct transition_item items[];
};

/* Starts a pause (resume false) or resume for the pools msg selects, on
 * behalf of requester's request id. The answer is sent when it ends. */
void transition_start(struct server *srv, struct session *requester,
		      uint64_t request_id, bool resume,
		      const Vram__Transition *msg);

/* A mapper acknowledged event_id with err (positive errno). */
void transition_ack(struct server *srv, struct session *s, uint64_t event_id,
		    int err, const char *message);

/* Moves p's transition on if it owes no more acks (after an ack or after
 * a mapper went away). Also completes rounds nobody waits for any more. */
void transition_advance(struct server *srv, struct pool *p);

/* p is being dropped: its request, if any, records ENOENT for it. */
void transition_pool_dropped(struct server *srv, struct pool *p);

/* s is closing: requests it made are still carried out, unanswered. */
void transition_session_gone(struct server *srv, struct session *s);

/* Does sel match p? (name, tag and owner pid when set; all otherwise.) */
bool transition_selects(const Vram__Selector *sel, const struct pool *p);

/* May who pause, resume, open or drop p? Its owner's uid or root. */
bool transition_allowed(const struct identity *who, const struct pool *p);

#endif
