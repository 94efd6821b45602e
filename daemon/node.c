/* SPDX-License-Identifier: Apache-2.0 */
/* The pool table, selection, rights, and a session's departure. */
#include "node.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "peer.h"
#include "session.h"
#include "transition.h"

void node_init(struct node *n, uv_loop_t *loop, struct backend *b)
{
	memset(n, 0, sizeof(*n));
	n->loop = loop;
	n->backend = b;
	backup_set_loop(loop);
}

void node_fini(struct node *n)
{
	free(n->pools);
	n->pools = NULL;
	n->n_pools = n->cap_pools = 0;
}

struct pool *node_pool_by_id(struct node *n, uint64_t id)
{
	for (unsigned i = 0; i < n->n_pools; i++)
		if (n->pools[i]->id == id)
			return n->pools[i];
	return NULL;
}

/* The uid whose namespace a pool is in: its owner's, as it was when the
 * pool was made (an owner taking over is of the same uid, request.c). */
static uint32_t node_pool_uid(const struct pool *p)
{
	return p->owner_id.uid;
}

struct pool *node_pool_by_name(struct node *n, uint32_t uid, const char *name)
{
	for (unsigned i = 0; i < n->n_pools; i++)
		if (node_pool_uid(n->pools[i]) == uid &&
		    strcmp(n->pools[i]->name, name) == 0)
			return n->pools[i];
	return NULL;
}

/* The length of text's leading run of decimal digits. */
static size_t node_digits(const char *text)
{
	size_t k = 0;
	while (text[k] >= '0' && text[k] <= '9')
		k++;
	return k;
}

bool node_name_qualified(const char *text)
{
	size_t k = node_digits(text);
	return k > 0 && text[k] == ':';
}

bool node_name_parse(const char *text, uint32_t default_uid, uint32_t *uid,
		     const char **bare)
{
	size_t k = node_digits(text);
	uint64_t v = 0;

	*uid = default_uid;
	*bare = text;
	if (k == 0 || text[k] != ':')
		return true;
	for (size_t i = 0; i < k; i++) {
		v = v * 10 + (uint64_t)(text[i] - '0');
		if (v > UINT32_MAX)
			return false;
	}
	*uid = (uint32_t)v;
	*bare = text + k + 1;
	return true;
}

/* Is p in sc's view? */
static bool node_in_scope(const struct node_scope *sc, const struct pool *p)
{
	return sc->all || node_pool_uid(p) == sc->uid;
}

struct pool *node_pool_find(struct node *n, const struct node_scope *sc,
			    const char *text)
{
	uint32_t uid;
	const char *bare;
	struct pool *p;

	if (!text || !node_name_parse(text, sc->uid, &uid, &bare))
		return NULL;
	p = node_pool_by_name(n, uid, bare);
	return p && node_in_scope(sc, p) ? p : NULL;
}

int node_pool_add(struct node *n, struct pool *p)
{
	if (n->n_pools == n->cap_pools) {
		unsigned cap = n->cap_pools ? 2 * n->cap_pools : 16;
		struct pool **a = realloc(n->pools, cap * sizeof(*a));
		if (!a)
			return -ENOMEM;
		n->pools = a;
		n->cap_pools = cap;
	}
	n->pools[n->n_pools++] = p;
	return 0;
}

void node_pool_drop(struct node *n, struct pool *p, struct session *except)
{
	Vram__Event ev = VRAM__EVENT__INIT;

	ev.kind = VRAM__EVENT_KIND__EVENT_DROP;
	ev.pool_id = p->id;
	for (struct mapper *m = p->mappers; m; m = m->next)
		if (m->session != except)
			session_send_event(m->session, &ev, NULL, 0);
	transition_pool_dropped(p);
	for (unsigned i = 0; i < n->n_pools; i++) {
		if (n->pools[i] == p) {
			memmove(&n->pools[i], &n->pools[i + 1],
				(n->n_pools - i - 1) * sizeof(n->pools[0]));
			n->n_pools--;
			break;
		}
	}
	pool_destroy(p, n->backend);
	transition_pump_update(n);
}

static bool field_set(const char *s)
{
	return s && s[0];
}

/* Does sel pick p? Every field set must match; with none set, mode says. */
static bool node_selects(const struct node_scope *sc,
			 const struct node_selector *sel,
			 enum node_select_mode mode, const struct pool *p)
{
	bool any = false;

	if (!node_in_scope(sc, p))
		return false;
	if (field_set(sel->name)) {
		uint32_t uid;
		const char *bare;
		if (!node_name_parse(sel->name, sc->uid, &uid, &bare) ||
		    uid != node_pool_uid(p) || strcmp(bare, p->name) != 0)
			return false;
		any = true;
	}
	if (field_set(sel->tag)) {
		if (strcmp(sel->tag, p->tag) != 0)
			return false;
		any = true;
	}
	if (sel->owner_pid) {
		if (!p->owner || sel->owner_pid != p->owner_id.pid)
			return false;
		any = true;
	}
	if (field_set(sel->owner)) {
		bool cg = sel->owner[0] == '/';
		if (!p->owner ||
		    (cg ? !peer_in_cgroup(&p->owner_id, sel->owner)
			: strcmp(sel->owner, p->owner_id.instance) != 0))
			return false;
		any = true;
	}
	if (field_set(sel->job)) {
		if (!p->owner || strcmp(sel->job, p->owner_id.job) != 0)
			return false;
		any = true;
	}
	if (sel->n_owner_pids) {
		bool found = false;
		for (size_t i = 0; i < sel->n_owner_pids && !found; i++)
			found = p->owner && sel->owner_pids[i] == p->owner_id.pid;
		if (!found)
			return false;
		any = true;
	}
	return any || sel->all || mode == NODE_SELECT_LIST;
}

int node_select(struct node *n, const struct node_scope *sc,
		const struct node_selector *sel, enum node_select_mode mode,
		struct pool ***out)
{
	struct pool **a = calloc(n->n_pools + 1, sizeof(*a));
	unsigned k = 0;

	if (!a)
		return -ENOMEM;
	for (unsigned i = 0; i < n->n_pools; i++)
		if (node_selects(sc, sel, mode, n->pools[i]))
			a[k++] = n->pools[i];
	*out = a;
	return (int)k;
}

bool node_allowed(const struct identity *who, const struct pool *p)
{
	return who->uid == 0 || who->uid == p->owner_id.uid;
}

void node_session_gone(struct node *n, struct session *s)
{
	transition_session_gone(n, s);
	/* Dropping a pool changes the array: start over after each. */
	for (unsigned i = 0; i < n->n_pools;) {
		struct pool *p = n->pools[i];
		if (p->owner == s && !(p->flags & POOL_FLAG_PERSIST)) {
			log_info("pool %s dropped: its owner pid %u went away",
				 p->name, s->who.pid);
			node_pool_drop(n, p, s);
			i = 0;
			continue;
		}
		if (p->owner == s) {
			log_info(
				"pool %s kept (persistent) without its owner pid %u",
				p->name, s->who.pid);
			pool_set_owner(p, NULL, NULL);
		}
		if (pool_mapper_remove(p, s))
			transition_advance(n, p);
		i++;
	}
}

uint64_t node_backup_bytes(const struct node *n, enum pool_policy policy)
{
	uint64_t sum = 0;
	for (unsigned i = 0; i < n->n_pools; i++)
		if (n->pools[i]->policy == policy)
			sum += pool_backup_held(n->pools[i]);
	return sum;
}

void node_release_backups(struct node *n)
{
	for (unsigned i = 0; i < n->n_pools; i++)
		pool_backup_release_due(n->pools[i]);
}
