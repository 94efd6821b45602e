/* SPDX-License-Identifier: Apache-2.0 */
/* The node: every pool the daemon holds, and who may act on which. It
 * owns the pool table and the pool and event ids, picks the pools a
 * selector names, checks rights, and undoes what a departing session held.
 * Its interface takes no protobuf type and it knows no socket: request.c
 * converts at the edge. */
#ifndef VRAMD_NODE_H
#define VRAMD_NODE_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "backend.h"
#include "pool.h"

struct metrics;
struct session;
struct transition;

struct node {
	uv_loop_t *loop;
	struct backend *backend;
	struct pool **pools; /* array, in creation order */
	unsigned n_pools, cap_pools;
	struct transition *transitions; /* in flight, transition.c's list */
	uint64_t next_pool_id, next_event_id;
	struct metrics *metrics; /* counts transitions; set by the server */
	/* How long from its start a transition keeps the loop polling
	 * (transition.h); set by the server, 0 by node_init. */
	unsigned spin_ms;
	/* Set by the server while systemd's fd store holds the chunks' fds
	 * (NULL by node_init): on the loop, puts the node on record now, so
	 * that the store lets go of the chunks a pause released, and says
	 * whether the pause must then wait for systemd to have done so
	 * (notify_barrier) before it reads the device's free memory. */
	bool (*store_flush)(struct node *n);
};

/* Whose pools a caller sees. Pool names are scoped by the owner's uid:
 * uid A's "kv" and uid B's "kv" are two pools. A caller sees the pools of
 * its own uid; an admin (root or admin_group) sees every uid's. */
struct node_scope {
	uint32_t uid; /* the caller's: a plain name means this uid's pool */
	bool all;     /* an admin: every uid's pools are in view */
};

/* Which pools a request names: each field set narrows the choice. */
struct node_selector {
	const char *name;   /* NULL or "": any; a plain name is the
			     * caller's uid's pool, "UID:NAME" that uid's */
	const char *tag;    /* NULL or "": any */
	uint32_t owner_pid; /* 0: any */
	const char *owner;  /* NULL or "": any; "/...": a cgroup, else an
			     * instance name */
	bool all;	    /* the caller asked for every pool */
	const char *job;    /* NULL or "": any; else the owner's job name */
	const uint32_t *owner_pids; /* n_owner_pids > 0: the owner is one */
	size_t n_owner_pids;
};

/* What a selector with no field set means: a listing shows every pool,
 * while a pause or resume acts on none unless it said all (a request that
 * forgot its selector must not pause the whole node). */
enum node_select_mode { NODE_SELECT_LIST, NODE_SELECT_ACT };

void node_init(struct node *n, uv_loop_t *loop, struct backend *b);
/* Frees the table; its pools must be gone (node_pool_drop). */
void node_fini(struct node *n);

struct pool *node_pool_by_id(struct node *n, uint64_t id);
/* The pool of uid named name (a bare name), or NULL. */
struct pool *node_pool_by_name(struct node *n, uint32_t uid, const char *name);

/* A name as a request gives it: "NAME" (the caller's uid) or "UID:NAME"
 * (that uid's; UID in decimal). Sets *uid (default_uid for a plain name)
 * and *bare, which points into text. Returns false for "UID:" with a uid
 * that is not one (too large). */
bool node_name_parse(const char *text, uint32_t default_uid, uint32_t *uid,
		     const char **bare);
/* Whether a name has the "UID:NAME" form, which pool_create refuses so
 * that an address can never be taken for a name. */
bool node_name_qualified(const char *text);
/* The pool a request's name (plain or "UID:NAME") means to a caller of
 * scope sc, or NULL: none, or another uid's out of the caller's view. */
struct pool *node_pool_find(struct node *n, const struct node_scope *sc,
			    const char *text);
/* Adds p at the end of the table. 0 or -ENOMEM. */
int node_pool_add(struct node *n, struct pool *p);
/* Tells every mapper but except that p is gone, fails the request acting
 * on it (ENOENT), and removes and destroys it. */
void node_pool_drop(struct node *n, struct pool *p, struct session *except);

/* The pools sel picks among those in sc's view (a non-admin's: its own
 * uid's, whatever the tag, job or owner asked), in creation order: *out
 * (free() it, also when empty) and their count, or -ENOMEM. */
int node_select(struct node *n, const struct node_scope *sc,
		const struct node_selector *sel, enum node_select_mode mode,
		struct pool ***out);

/* May who pause, resume, open or drop p? Its owner's uid or root. */
bool node_allowed(const struct identity *who, const struct pool *p);

/* s is going away: its requests are carried out unanswered, the pools it
 * owned are dropped (persistent ones kept without an owner), and its
 * mappings end, which may complete rounds waiting on it. */
void node_session_gone(struct node *n, struct session *s);

/* Bytes the backups of the node's pools of one policy truly hold: host
 * memory (POOL_HOST) or disk blocks (POOL_DISK), paused or not. */
uint64_t node_backup_bytes(const struct node *n, enum pool_policy policy);

/* Gives back the backup pages that resumes left due (pool.h): call once
 * the pools' states are on record. */
void node_release_backups(struct node *n);

#endif
