/* SPDX-License-Identifier: Apache-2.0 */
/* The audit request: for every process using a device, the memory the
 * driver says it uses next to what it holds through vramd, so memory an
 * engine allocated outside its pools is visible at once. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audit.h"
#include "log.h"
#include "node.h"
#include "session.h"
#include "transition.h"

struct usage_table {
	Vram__ProcessUsage *rows;
	unsigned n, cap;
};

static Vram__ProcessUsage *usage_row(struct usage_table *t, uint32_t pid,
				     unsigned dev)
{
	for (unsigned i = 0; i < t->n; i++)
		if (t->rows[i].pid == pid && t->rows[i].device == dev)
			return &t->rows[i];
	if (t->n == t->cap) {
		unsigned cap = t->cap ? 2 * t->cap : 32;
		Vram__ProcessUsage *r = realloc(t->rows, cap * sizeof(*r));
		if (!r)
			return NULL;
		t->rows = r;
		t->cap = cap;
	}
	Vram__ProcessUsage *u = &t->rows[t->n++];
	vram__process_usage__init(u);
	u->pid = pid;
	u->device = dev;
	u->name = "";
	return u;
}

void audit_handle(struct node *node, struct session *s, uint64_t id)
{
	struct backend *b = node->backend;
	struct usage_table t = { 0 };
	Vram__Response resp = VRAM__RESPONSE__INIT;
	Vram__AuditReply ar = VRAM__AUDIT_REPLY__INIT;
	Vram__ProcessUsage **ptrs = NULL;
	Vram__ProcessUsage *u;

	ar.driver_info = b->ops->processes != NULL;
	for (unsigned dev = 0; dev < b->n_devices && ar.driver_info; dev++) {
		struct backend_process *procs = NULL;
		int n = b->ops->processes(b, dev, &procs);
		if (n < 0) {
			log_warn("audit: cannot list processes on device %u: %s", dev,
				 strerror(-n));
			ar.driver_info = false;
			break;
		}
		for (int i = 0; i < n; i++) {
			if (!(u = usage_row(&t, procs[i].pid, dev))) {
				free(procs);
				goto nomem;
			}
			u->used_known = procs[i].used_bytes != BACKEND_USED_UNKNOWN;
			u->used_bytes = u->used_known ? procs[i].used_bytes : 0;
		}
		free(procs);
	}
	/* What each mapper holds through vramd: the pools it has mapped. */
	for (unsigned i = 0; i < node->n_pools; i++) {
		struct pool *p = node->pools[i];
		if (p->state != POOL_ACTIVE)
			continue;
		for (struct mapper *m = p->mappers; m; m = m->next) {
			if (!(u = usage_row(&t, m->who.pid, p->device)))
				goto nomem;
			u->vramd_bytes += p->bytes;
			u->name = m->who.name;
		}
	}
	/* What the owners said they allocated outside (libvram-preload.so's
	 * processes own their pools, paused ones too): on each row of the
	 * process, as the figures are the process's, not a device's. */
	for (unsigned i = 0; i < node->n_pools; i++) {
		struct pool *p = node->pools[i];
		if (!p->owner || !p->owner->outside.reported)
			continue;
		if (!(u = usage_row(&t, p->owner->who.pid, p->device)))
			goto nomem;
		if (!u->name[0])
			u->name = p->owner->who.name;
	}
	for (unsigned i = 0; i < node->n_pools; i++) {
		struct session *o = node->pools[i]->owner;
		if (!o || !o->outside.reported)
			continue;
		for (unsigned k = 0; k < t.n; k++)
			if (t.rows[k].pid == o->who.pid)
				audit_outside_fill(&o->outside,
						   &t.rows[k].outside_reported,
						   &t.rows[k].outside_bytes,
						   &t.rows[k].outside_count,
						   &t.rows[k].expandable_segments);
	}
	for (unsigned i = 0; i < t.n; i++)
		t.rows[i].is_vramd = t.rows[i].pid == (uint32_t)getpid();
	ptrs = calloc(t.n + 1, sizeof(*ptrs));
	if (!ptrs)
		goto nomem;
	for (unsigned i = 0; i < t.n; i++)
		ptrs[i] = &t.rows[i];
	ar.n_processes = t.n;
	ar.processes = ptrs;
	resp.id = id;
	resp.body_case = VRAM__RESPONSE__BODY_AUDIT;
	resp.audit = &ar;
	session_reply(s, &resp, NULL, 0);
	free(ptrs);
	free(t.rows);
	return;
nomem:
	free(t.rows);
	session_reply_error(s, id, ENOMEM, "out of memory");
}

void audit_outside_report(struct session *s, uint64_t id,
			  const Vram__OutsideReport *m)
{
	Vram__Response resp = VRAM__RESPONSE__INIT;

	s->outside.reported = true;
	s->outside.bytes = m->bytes;
	s->outside.count = m->count;
	s->outside.expandable = m->expandable_segments;
	resp.id = id;
	session_reply(s, &resp, NULL, 0);
}

void audit_outside_fill(const struct session_outside *o,
			protobuf_c_boolean *reported, uint64_t *bytes,
			uint64_t *count, protobuf_c_boolean *expandable)
{
	*reported = o->reported;
	*bytes = o->reported ? o->bytes : 0;
	*count = o->reported ? o->count : 0;
	*expandable = o->reported && o->expandable;
}

void audit_outside_log(const struct transition *t)
{
	for (unsigned i = 0; i < t->n_items; i++) {
		const struct transition_item *it = &t->items[i];
		bool seen = false;

		if (!it->outside.reported || it->err)
			continue;
		for (unsigned k = 0; k < i && !seen; k++)
			seen = t->items[k].owner_pid == it->owner_pid &&
			       t->items[k].outside.reported && !t->items[k].err;
		if (seen)
			continue;
		log_info("pid %u paused: outside: %llu bytes in %llu "
			 "allocations (disable scopes), plus the CUDA context%s",
			 it->owner_pid, (unsigned long long)it->outside.bytes,
			 (unsigned long long)it->outside.count,
			 it->outside.expandable ?
				 " and PyTorch's expandable segments" :
				 "");
	}
}
