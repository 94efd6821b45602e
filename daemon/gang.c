/* SPDX-License-Identifier: Apache-2.0 */
/* Gang pause and resume. The first transition acts on every selected
 * pool, as a plain request would. When it has settled, the gang looks at
 * each pool: one that failed (an error, a deadline) or whose owner went
 * away meanwhile (a rank that acked and died) undoes the gang, and a
 * second transition, the other way, brings back every pool the first one
 * changed. Only then is the request answered, with the first failure
 * named by its rank. */
#include "gang.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "message.h"
#include "node.h"
#include "session.h"
#include "transition.h"

/* One pool's part, copied from the first transition (which is freed once
 * it has called back) and updated by the rollback. */
struct gang_item {
	char name[TRANSITION_NAME_MAX];
	int err; /* positive errno */
	char message[384];
	uint64_t bytes;
	uint32_t late_pids[TRANSITION_MAX_LATE];
	unsigned n_late;
	uint64_t pool_id;
	uint32_t owner_pid;
	char owner_instance[64];
	unsigned device;
	bool changed;	  /* the first transition moved it */
	bool rolled_back; /* the rollback moved it back */
};

struct gang {
	struct node *node;
	uint64_t request_id;
	bool resume;
	unsigned timeout_ms;
	int failed; /* index of the failure that undid the gang, -1 if none */
	uint64_t free_before, free_after;
	uint64_t dev_free_before[BACKEND_MAX_DEVICES];
	uint64_t dev_free_after[BACKEND_MAX_DEVICES];
	unsigned n_items;
	unsigned *
		rollback_of; /* the rollback's item k is items[rollback_of[k]] */
	struct gang_item items[];
};

/* Answers (if the requester is still there) and frees g. */
static void gang_reply(struct gang *g, struct session *requester)
{
	Vram__Response resp = VRAM__RESPONSE__INIT;
	Vram__TransitionReply tr = VRAM__TRANSITION_REPLY__INIT;
	Vram__DeviceFree devs[BACKEND_MAX_DEVICES],
		*dev_ptrs[BACKEND_MAX_DEVICES];
	Vram__PoolResult *res = calloc(g->n_items + 1, sizeof(*res));
	Vram__PoolResult **ptrs = calloc(g->n_items + 1, sizeof(*ptrs));
	char why[512];
	bool all_already = g->n_items > 0;
	const char *verb = g->resume ? "resume" : "pause";

	if (!requester)
		goto out;
	if (!res || !ptrs) {
		session_reply_error(requester, g->request_id, ENOMEM,
				    "out of memory building the reply");
		goto out;
	}
	tr.gang = true;
	tr.free_before = g->free_before;
	tr.free_after = g->free_after;
	tr.n_devices = device_frees_fill(g->node->backend, g->dev_free_before,
					  g->dev_free_after, devs, dev_ptrs);
	tr.devices = dev_ptrs;
	for (unsigned i = 0; i < g->n_items; i++) {
		struct gang_item *it = &g->items[i];
		vram__pool_result__init(&res[i]);
		res[i].name = it->name;
		res[i].err = it->err;
		res[i].message = it->message;
		res[i].bytes = it->bytes;
		res[i].n_late_pids = it->n_late;
		res[i].late_pids = it->late_pids;
		res[i].owner_pid = it->owner_pid;
		res[i].owner_instance = it->owner_instance;
		res[i].device = it->device;
		res[i].rolled_back = it->rolled_back;
		ptrs[i] = &res[i];
		if (it->rolled_back)
			tr.rolled_back++;
		else if (it->err == 0) {
			tr.pools++;
			tr.bytes += it->bytes;
		}
		if (it->err != EALREADY)
			all_already = false;
	}
	tr.n_results = g->n_items;
	tr.results = ptrs;
	tr.failed = g->failed < 0 ? 0 : (uint32_t)g->failed + 1;
	resp.id = g->request_id;
	resp.body_case = VRAM__RESPONSE__BODY_TRANSITION;
	resp.transition = &tr;
	if (g->n_items == 0) {
		resp.err = ENOENT;
		resp.message = "no pool matched";
	} else if (g->failed >= 0) {
		const struct gang_item *f = &g->items[g->failed];
		snprintf(why, sizeof(why),
			 "gang %s undone by the rank of pid %u (instance '%s', "
			 "device %u): %s; %u pool(s) brought back",
			 verb, f->owner_pid, f->owner_instance, f->device,
			 f->message, tr.rolled_back);
		resp.err = f->err;
		resp.message = why;
	} else if (all_already) {
		resp.err = EALREADY;
		resp.message = g->resume ? "already active" : "already paused";
	}
	session_reply(requester, &resp, NULL, 0);
out:
	free(res);
	free(ptrs);
	free(g->rollback_of);
	free(g);
}

static void gang_rolled_back(struct transition *t, void *arg)
{
	struct gang *g = arg;

	for (unsigned k = 0; k < t->n_items; k++) {
		struct gang_item *it = &g->items[g->rollback_of[k]];
		const struct transition_item *ti = &t->items[k];
		if (ti->err == 0 || ti->err == EALREADY) {
			it->rolled_back = true;
			continue;
		}
		size_t len = strlen(it->message);
		snprintf(it->message + len, sizeof(it->message) - len,
			 "%snot brought back: %s", len ? "; " : "",
			 ti->message);
		log_warn("gang: pool %s not brought back: %s", it->name,
			 ti->message);
	}
	g->free_after = 0;
	for (unsigned d = 0; d < BACKEND_MAX_DEVICES; d++) {
		g->dev_free_after[d] = t->dev_free_after[d];
		g->free_after += t->dev_free_after[d];
	}
	gang_reply(g, t->requester);
}

/* A pool the first transition moved whose owner is no longer the one it
 * had (the rank died, or its pool was dropped): the gang fails there. */
static bool gang_owner_lost(struct gang *g, struct gang_item *it)
{
	struct pool *p = node_pool_by_id(g->node, it->pool_id);

	if (p &&
	    (!it->owner_pid || (p->owner && p->owner_id.pid == it->owner_pid)))
		return false;
	char msg[sizeof(it->message)];
	snprintf(msg, sizeof(msg),
		 "pool %s: its owner pid %u went away before the gang ended",
		 it->name, it->owner_pid);
	it->err = ESRCH;
	memcpy(it->message, msg, sizeof(msg));
	return true;
}

/* Copies one item of the first transition. */
static void gang_item_copy(struct gang_item *it,
			   const struct transition_item *ti)
{
	snprintf(it->name, sizeof(it->name), "%s", ti->name);
	it->err = ti->err;
	snprintf(it->message, sizeof(it->message), "%s", ti->message);
	it->bytes = ti->bytes;
	it->n_late = ti->n_late;
	memcpy(it->late_pids, ti->late_pids, sizeof(it->late_pids));
	it->pool_id = ti->pool_id;
	it->owner_pid = ti->owner_pid;
	snprintf(it->owner_instance, sizeof(it->owner_instance), "%s",
		 ti->owner_instance);
	it->device = ti->device;
	it->changed = ti->err == 0;
}

static void gang_first_done(struct transition *t, void *arg)
{
	struct gang *g = arg;
	struct node *node = g->node;

	g->n_items = t->n_items;
	g->free_before = t->free_before;
	for (unsigned d = 0; d < BACKEND_MAX_DEVICES; d++) {
		g->dev_free_before[d] = t->dev_free_before[d];
		g->dev_free_after[d] = t->dev_free_after[d];
		g->free_after += t->dev_free_after[d];
	}
	for (unsigned i = 0; i < t->n_items; i++) {
		struct gang_item *it = &g->items[i];
		gang_item_copy(it, &t->items[i]);
		bool failed = it->changed ? gang_owner_lost(g, it) :
					    it->err != EALREADY;
		if (failed && g->failed < 0)
			g->failed = (int)i;
	}
	if (g->failed < 0) {
		gang_reply(g, t->requester);
		return;
	}
	log_warn("gang %s failed at pool %s (pid %u, device %u): %s; bringing "
		 "the others back",
		 g->resume ? "resume" : "pause", g->items[g->failed].name,
		 g->items[g->failed].owner_pid, g->items[g->failed].device,
		 g->items[g->failed].message);

	/* The pools the first transition moved that are still there. */
	struct pool **pools = calloc(g->n_items + 1, sizeof(*pools));
	bool *allowed = calloc(g->n_items + 1, sizeof(*allowed));
	g->rollback_of = calloc(g->n_items + 1, sizeof(*g->rollback_of));
	unsigned k = 0;
	int r = pools && allowed && g->rollback_of ? 0 : -ENOMEM;
	for (unsigned i = 0; i < g->n_items && r == 0; i++) {
		struct pool *p =
			g->items[i].changed ?
				node_pool_by_id(node, g->items[i].pool_id) :
				NULL;
		if (!p)
			continue;
		pools[k] = p;
		allowed[k] = true; /* the first transition checked */
		g->rollback_of[k++] = i;
	}
	if (r == 0 && k > 0)
		r = transition_run(node, t->requester, g->request_id,
				   !g->resume, pools, allowed, k, g->timeout_ms,
				   gang_rolled_back, g);
	free(pools);
	free(allowed);
	if (r < 0) {
		log_err("gang: out of memory; pools stay as the gang left them");
		gang_reply(g, t->requester);
	} else if (k == 0) {
		gang_reply(g, t->requester);
	}
}

void gang_start(struct node *node, struct session *requester,
		uint64_t request_id, bool resume, struct pool *const *pools,
		const bool *allowed, unsigned n, unsigned timeout_ms)
{
	struct gang *g = calloc(1, sizeof(*g) + (n + 1) * sizeof(g->items[0]));

	if (!g) {
		session_reply_error(requester, request_id, ENOMEM,
				    "out of memory");
		return;
	}
	g->node = node;
	g->request_id = request_id;
	g->resume = resume;
	g->timeout_ms = timeout_ms;
	g->failed = -1;
	/* The callback may run before transition_run returns (nothing to
	 * wait for): g is ready by then. */
	if (transition_run(node, requester, request_id, resume, pools, allowed,
			   n, timeout_ms, gang_first_done, g) < 0) {
		free(g);
		session_reply_error(requester, request_id, ENOMEM,
				    "out of memory");
	}
}
