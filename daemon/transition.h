/* SPDX-License-Identifier: Apache-2.0 */
/* Pause and resume requests: over the pools request.c hands over, one
 * state-machine transition per pool (rounds of events to mappers, acks, a
 * deadline), and one answer once every pool has finished or the deadline
 * passed, and the device has taken back what the request released. */
#ifndef VRAMD_TRANSITION_H
#define VRAMD_TRANSITION_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "pool.h"

#define TRANSITION_MAX_LATE 16

struct node;
struct session;
struct transition;

/* A pool's name as a result gives it: "UID:NAME" (11 more bytes at
 * most) when the pool is of another uid than the requester's. */
#define TRANSITION_NAME_MAX (POOL_NAME_MAX + 11)

typedef void transition_done_fn(struct transition *t, void *arg);

/* One pool's part in a request. */
struct transition_item {
	struct transition *t;
	struct pool *pool; /* NULL once done or dropped */
	char name[TRANSITION_NAME_MAX]; /* "UID:NAME" for another uid's */
	int err;           /* positive errno */
	char message[256];
	uint64_t bytes;
	bool done;
	uint32_t late_pids[TRANSITION_MAX_LATE];
	unsigned n_late;
	/* For the metrics: the pool's device and policy, whether a host
	 * backup was saved or restored, and when its part began and ended
	 * (uv_hrtime). */
	unsigned device;
	enum pool_policy policy;
	/* The pool's id and owner when it began (a gang names the rank). */
	uint64_t pool_id;
	uint32_t owner_pid;
	char owner_instance[64];
	struct session_outside outside; /* the owner's, when it began */
	bool backup;
	uint64_t t_begin, t_end;
};

struct transition {
	struct transition *next;
	struct node *node;
	struct session *requester; /* NULL when it went away */
	uint64_t request_id;
	bool resume;
	bool starting;
	uv_timer_t timer;
	/* Active for node->spin_ms from the start: the loop polls instead of
	 * sleeping, so that an ack is read the moment it comes rather than
	 * after the core wakes up (docs/architecture.md, "Polling through a
	 * transition"). */
	uv_idle_t spin;
	uint64_t spin_until;
	unsigned handles_open; /* timer and spin, until both are closed */
	uv_work_t settle; /* waits, off the loop, for the releases to land */
	bool store_barrier; /* and for systemd's fd store to drop them */
	unsigned n_items, outstanding;
	uint64_t free_before;
	/* Per device, for the reply and the metrics. */
	uint64_t dev_free_before[BACKEND_MAX_DEVICES];
	uint64_t dev_free_after[BACKEND_MAX_DEVICES];
	/* Set: called instead of answering (gang.c); t is freed after. */
	transition_done_fn *done;
	void *done_arg;
	/* Where the time goes (uv_hrtime, ns), logged when it ends: from the
	 * start to the last mapper's ack, the daemon's own creates or releases,
	 * and the wait for the device to take the memory back. */
	uint64_t t_start, t_acked, release_ns, t_settle;
	struct transition_item items[];
};

/* Starts a pause (resume false) or resume of pools[0..n), on behalf of
 * requester's request id; allowed[i] false records EPERM for pools[i].
 * Waits timeout_ms for acks. The answer is sent when it ends. */
void transition_start(struct node *node, struct session *requester,
		      uint64_t request_id, bool resume, struct pool *const *pools,
		      const bool *allowed, unsigned n, unsigned timeout_ms);

/* As transition_start, but done(t, arg) is called once every pool has
 * finished and the device has settled, in place of the answer (the
 * caller answers; t->requester is NULL if the requester left). 0, or
 * -ENOMEM with nothing started and nothing answered. */
int transition_run(struct node *node, struct session *requester,
		   uint64_t request_id, bool resume, struct pool *const *pools,
		   const bool *allowed, unsigned n, unsigned timeout_ms,
		   transition_done_fn *done, void *done_arg);

/* A restorer's report of a resume in parts (ResumeProgress): the chunks
 * now due are made and sent to it (pool_resume_progress). A saver's
 * report of a save in parts (the same message): the chunks it saved are
 * let go of, and leave the fd store (pool_save_progress). */
void transition_progress(struct node *node, struct session *s,
			 uint64_t event_id, unsigned restored);

/* A mapper acknowledged event_id with err (positive errno). */
void transition_ack(struct node *node, struct session *s, uint64_t event_id,
		    int err, const char *message);

/* Moves p's transition on if it owes no more acks (after an ack or after
 * a mapper went away). Also completes rounds nobody waits for any more. */
void transition_advance(struct node *node, struct pool *p);

/* p is being dropped: its request, if any, records ENOENT for it. */
void transition_pool_dropped(struct pool *p);

/* The backend's clearing pump (backend_pump_set, cuda_pump.h) runs on a
 * device from a resume there, once its chunks are made, until no pool of
 * the device is left paused: this turns it off on each device where none
 * is. Called after every transition and when a pool goes. */
void transition_pump_update(struct node *node);

/* s is closing: requests it made are still carried out, unanswered. */
void transition_session_gone(struct node *node, struct session *s);

#endif
