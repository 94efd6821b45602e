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
