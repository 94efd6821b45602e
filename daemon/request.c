/* SPDX-License-Identifier: Apache-2.0 */
/* One function per request. Each checks its arguments and the caller's
 * rights, then asks node.c, pool.c or transition.c to act and answers. */
#include "request.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "access.h"
#include "audit.h"
#include "clock.h"
#include "limit.h"
#include "gang.h"
#include "log.h"
#include "message.h"
#include "node.h"
#include "quota.h"
#include "server.h"
#include "session.h"
#include "transition.h"

#define RESERVE_MAX (64ull << 40) /* virtual range of one pool */

/* Names reach logs, tables, JSON and terminals: valid UTF-8 without
 * control characters (limit.c), so a client cannot forge log lines,
 * drive an admin's terminal or list a name nobody can type back. */
static bool name_ok(const char *s, size_t max)
{
	return limit_name_ok(s, max);
}

/* The caller's view of the pool table (node.h): its uid's pools, or
 * every uid's for root and the admin group. */
static struct node_scope scope_of(const struct session *s)
{
	struct node_scope sc = { .uid = s->who.uid,
				 .all = s->who.uid == 0 || s->acct.privileged };
	return sc;
}

static void handle_hello(struct server *srv, struct session *s, uint64_t id,
			 const Vram__Hello *h)
{
	Vram__Response resp = VRAM__RESPONSE__INIT;
	Vram__HelloReply hr = VRAM__HELLO_REPLY__INIT;
	Vram__DeviceInfo dev[BACKEND_MAX_DEVICES], *devp[BACKEND_MAX_DEVICES];

	if (s->hello_done) {
		session_reply_error(s, id, EALREADY, "hello was already sent");
		return;
	}
	if (h->version != WIRE_PROTOCOL_VERSION) {
		session_reply_error(s, id, EPROTONOSUPPORT,
				    "protocol version %u is not supported (daemon speaks %u)",
				    h->version, WIRE_PROTOCOL_VERSION);
		return;
	}
	if (h->name && !name_ok(h->name, sizeof(s->who.name))) {
		session_reply_error(s, id, EINVAL,
				    "client name must be printable and under %zu bytes",
				    sizeof(s->who.name));
		return;
	}
	if (h->instance && (!name_ok(h->instance, sizeof(s->who.instance)) ||
			    h->instance[0] == '/')) {
		session_reply_error(s, id, EINVAL,
				    "instance name must be printable, under %zu "
				    "bytes and not start with '/'",
				    sizeof(s->who.instance));
		return;
	}
	if (h->job && !name_ok(h->job, sizeof(s->who.job))) {
		session_reply_error(s, id, EINVAL,
				    "job name must be printable and under %zu bytes",
				    sizeof(s->who.job));
		return;
	}
	if (h->job && h->job[0])
		snprintf(s->who.job, sizeof(s->who.job), "%s", h->job);
	if (h->name && h->name[0])
		snprintf(s->who.name, sizeof(s->who.name), "%s", h->name);
	if (h->instance && h->instance[0])
		snprintf(s->who.instance, sizeof(s->who.instance), "%s",
			 h->instance);
	s->resume_in_parts = h->resume_in_parts;
	s->save_in_parts = h->save_in_parts;
	s->hello_done = true;
	hr.n_devices = device_infos_fill(srv->node.backend, dev, devp);
	hr.version = WIRE_PROTOCOL_VERSION;
	hr.backend = (char *)srv->node.backend->ops->name;
	hr.session_id = s->id;
	hr.max_chunks = srv->cfg.max_chunks;
	hr.devices = devp;
	hr.daemon_version = VRAMD_VERSION;
	resp.id = id;
	resp.body_case = VRAM__RESPONSE__BODY_HELLO;
	resp.hello = &hr;
	session_reply(s, &resp, NULL, 0);
}

/* What s's Hello said it does in parts, on its new mapper of p. */
static void mapper_parts_set(struct pool *p, struct session *s)
{
	struct mapper *m = pool_mapper_find(p, s);

	m->parts = s->resume_in_parts;
	m->save_parts = s->save_in_parts;
}

/* Replies with the pool and, when active, its chunk fds (made again where
 * an idle pool let them go: fd_drop.h) and the backup. */
static void reply_pool(struct backend *b, struct session *s, uint64_t id,
		       struct pool *p)
{
	const struct mapper *me = pool_mapper_find(p, s);
	Vram__Response resp = VRAM__RESPONSE__INIT;
	Vram__PoolReply pr = VRAM__POOL_REPLY__INIT;
	Vram__PoolInfo info;
	Vram__Mapper *mappers;
	struct chunk_list l;
	unsigned n = p->state == POOL_ACTIVE ? p->n_chunks : 0, nfds = n;

	for (unsigned i = 0; i < n; i++) {
		int fd = backend_chunk_fd(b, p->device, &p->chunks[i]);
		if (fd < 0) {
			session_reply_error(s, id, -fd,
					    "cannot export chunk %u of pool "
					    "%s again: %s",
					    i, p->name, strerror(-fd));
			return;
		}
	}
	if (chunk_list_make(&l, p, 0, n, 1) < 0) {
		session_reply_error(s, id, ENOMEM, "out of memory");
		return;
	}
	if (pool_info_fill(p, &info, &mappers) < 0) {
		session_reply_error(s, id, ENOMEM, "out of memory");
		chunk_list_free(&l);
		return;
	}
	pr.info = &info;
	pr.n_chunks = n;
	pr.chunks = l.ptrs;
	pr.backup_fd_index = -1;
	if (p->backup_fd >= 0) {
		pr.backup_fd_index = (int32_t)nfds;
		l.fds[nfds++] = p->backup_fd;
	}
	resp.id = id;
	resp.body_case = VRAM__RESPONSE__BODY_POOL;
	resp.pool = &pr;
	/* A read-only mapper gets read-only fds where the backend allows. */
	access_reply(b, s, me && me->readonly, &resp, l.fds, nfds);
	pool_info_clear(&info, mappers);
	chunk_list_free(&l);
}

static void handle_create(struct server *srv, struct session *s, uint64_t id,
			  const Vram__PoolCreate *c)
{
	struct pool *p;
	uint64_t reserve = c->reserve_bytes, gran;
	int r;

	if (!c->name || !c->name[0] || !name_ok(c->name, POOL_NAME_MAX)) {
		session_reply_error(s, id, EINVAL,
				    "a pool name of 1 to %d printable bytes is required",
				    POOL_NAME_MAX - 1);
		return;
	}
	if (node_name_qualified(c->name)) {
		session_reply_error(s, id, EINVAL,
				    "pool name %s has the form UID:NAME, which "
				    "addresses another uid's pool", c->name);
		return;
	}
	const char *tag = c->tag && c->tag[0] ? c->tag : "default";
	if (!name_ok(tag, POOL_TAG_MAX)) {
		session_reply_error(s, id, EINVAL,
				    "a tag is at most %d printable bytes", POOL_TAG_MAX - 1);
		return;
	}
	if (c->device >= srv->node.backend->n_devices) {
		session_reply_error(s, id, ENODEV, "no device %u (the daemon has %u)",
				    c->device, srv->node.backend->n_devices);
		return;
	}
	if (c->policy != VRAM__POLICY__POLICY_DISCARD &&
	    c->policy != VRAM__POLICY__POLICY_HOST &&
	    c->policy != VRAM__POLICY__POLICY_DISK) {
		session_reply_error(s, id, EINVAL, "unknown backup policy %d", c->policy);
		return;
	}
	if (c->policy == VRAM__POLICY__POLICY_DISK && !srv->cfg.backup_dir[0]) {
		session_reply_error(s, id, ENOTSUP,
				    "pool %s: the disk policy needs backup_dir in "
				    "vramd.conf", c->name);
		return;
	}
	if (c->flags & ~POOL_FLAGS_ALL) {
		session_reply_error(s, id, EINVAL, "unknown pool flags 0x%x",
				    c->flags & ~POOL_FLAGS_ALL);
		return;
	}
	if (node_pool_by_name(&srv->node, s->who.uid, c->name)) {
		session_reply_error(s, id, EEXIST, "uid %u has a pool named %s",
				    s->who.uid, c->name);
		return;
	}
	char why[200];
	if (quota_check(&srv->cfg.quotas, &srv->node, &s->who, c->device, 1, 0,
			false, why, sizeof(why)) < 0) {
		session_reply_error(s, id, EDQUOT, "cannot create pool %s: %s",
				    c->name, why);
		return;
	}
	if (srv->node.n_pools >= srv->cfg.max_pools) {
		session_reply_error(s, id, ENOSPC, "the daemon holds its maximum of %u pools",
				    srv->cfg.max_pools);
		return;
	}
	gran = srv->node.backend->devices[c->device].granularity;
	if (reserve == 0)
		reserve = srv->node.backend->devices[c->device].total_bytes;
	if (reserve > RESERVE_MAX) {
		session_reply_error(s, id, EINVAL, "reserve of %llu bytes is over the limit",
				    (unsigned long long)reserve);
		return;
	}
	reserve = (reserve + gran - 1) / gran * gran;
	if (c->policy == VRAM__POLICY__POLICY_HOST &&
	    fdstore_room(&srv->store, 1) < 0) {
		session_reply_error(s, id, ENOSPC,
				    "the fd store is full: FileDescriptorStoreMax=%u "
				    "has no room for the backup of pool %s",
				    srv->store.max, c->name);
		return;
	}
	r = pool_create(++srv->node.next_pool_id, c->name, tag, c->device,
			c->policy == VRAM__POLICY__POLICY_HOST   ? POOL_HOST :
			c->policy == VRAM__POLICY__POLICY_DISK ? POOL_DISK :
								   POOL_DISCARD,
			c->flags, reserve, srv->cfg.backup_dir, s, &s->who, &p);
	if (r < 0) {
		session_reply_error(s, id, -r, "cannot create pool %s: %s", c->name,
				    strerror(-r));
		return;
	}
	r = pool_mapper_add(p, s, &s->who, false);
	if (r == 0) {
		mapper_parts_set(p, s);
		r = node_pool_add(&srv->node, p);
	}
	if (r < 0) {
		pool_destroy(p, srv->node.backend);
		session_reply_error(s, id, -r, "cannot create pool: %s", strerror(-r));
		return;
	}
	log_info("pool %s created by pid %u (%s, tag %s, device %u, %s)", p->name,
		 s->who.pid, s->who.name, p->tag, p->device,
		 p->policy == POOL_HOST ? "host backup" :
		 p->policy == POOL_DISK ? p->backup_path : "discard");
	reply_pool(srv->node.backend, s, id, p);
}

static void handle_open(struct server *srv, struct session *s, uint64_t id,
			const Vram__PoolOpen *o)
{
	struct node_scope sc = scope_of(s);
	struct pool *p = node_pool_find(&srv->node, &sc, o->name);
	bool ro = o->access == VRAM__ACCESS__ACCESS_RO;
	int r;

	if (!p) {
		session_reply_error(s, id, ENOENT, "no pool named %s", o->name ? o->name : "");
		return;
	}
	if (!node_allowed(&s->who, p)) {
		session_reply_error(s, id, EPERM, "pool %s belongs to uid %u", p->name,
				    p->owner_id.uid);
		return;
	}
	if (pool_in_transition(p)) {
		session_reply_error(s, id, EBUSY, "pool %s is %s; try again", p->name,
				    pool_state_name(p->state));
		return;
	}
	r = pool_mapper_add(p, s, &s->who, ro);
	if (r < 0) {
		session_reply_error(s, id, -r, r == -EEXIST ? "pool %s is already open here"
							  : "cannot open pool %s",
				    p->name);
		return;
	}
	mapper_parts_set(p, s);
	/* A pool rebuilt after a restart waits for its owner's pid
	 * (recover.h) until the grace period ends; an orphan has none. */
	/* Only the pool's own uid takes it over: its uid is the scope of
	 * its name (node.h) and what its quota counts against. */
	if (!p->owner && !ro && s->who.uid == p->owner_id.uid &&
	    (p->owner_id.pid == 0 || p->owner_id.pid == s->who.pid)) {
		log_info("pool %s: pid %u takes over ownership", p->name, s->who.pid);
		pool_set_owner(p, s, &s->who);
	}
	reply_pool(srv->node.backend, s, id, p);
}

static void handle_grow(struct server *srv, struct session *s, uint64_t id,
			const Vram__PoolGrow *g)
{
	struct pool *p = node_pool_by_id(&srv->node, g->pool_id);
	Vram__Response resp = VRAM__RESPONSE__INIT;
	Vram__PoolGrowReply gr = VRAM__POOL_GROW_REPLY__INIT;
	unsigned first;
	int r;

	if (!p || !pool_mapper_find(p, s)) {
		session_reply_error(s, id, ENOENT, "no pool %llu open here",
				    (unsigned long long)g->pool_id);
		return;
	}
	if (p->owner != s) {
		session_reply_error(s, id, EPERM, "only the owner grows pool %s", p->name);
		return;
	}
	/* Every chunk goes to the fd store: one it has no room for would be
	 * lost by a restart, so the grow is refused now instead. */
	uint64_t chunk_max = srv->cfg.chunk_max ? srv->cfg.chunk_max : 1;
	uint64_t need = (g->bytes + chunk_max - 1) / chunk_max;
	if (fdstore_room(&srv->store, need > 1u << 30 ? 1u << 30 : (unsigned)need) < 0) {
		session_reply_error(s, id, ENOSPC,
				    "the fd store is full: FileDescriptorStoreMax=%u "
				    "holds %u fds and pool %s needs %llu more (raise "
				    "it with FDSTORE; see docs/operations.md)",
				    srv->store.max, srv->store.n, p->name,
				    (unsigned long long)need);
		return;
	}
	char why[200];
	if (quota_check(&srv->cfg.quotas, &srv->node, &s->who, p->device, 0,
			g->bytes, p->policy == POOL_HOST, why, sizeof(why)) < 0) {
		session_reply_error(s, id, EDQUOT, "cannot grow pool %s: %s",
				    p->name, why);
		return;
	}
	r = pool_grow(p, srv->node.backend, g->bytes, srv->cfg.chunk_max,
		      srv->cfg.max_chunks, &first);
	if (r == -ENOMEM) {
		uint64_t free_b = 0;
		backend_mem_info(srv->node.backend, p->device, &free_b, NULL);
		session_reply_error(s, id, ENOMEM,
				    "device %u is out of memory: %llu bytes asked, %llu free",
				    p->device, (unsigned long long)g->bytes,
				    (unsigned long long)free_b);
		return;
	}
	if (r == -ENOSPC) {
		session_reply_error(s, id, ENOSPC,
				    "pool %s is full: its reserve is %llu bytes and "
				    "it may have %u chunks",
				    p->name, (unsigned long long)p->reserve,
				    srv->cfg.max_chunks);
		return;
	}
	if (r < 0) {
		session_reply_error(s, id, -r, "cannot grow pool %s: %s", p->name,
				    strerror(-r));
		return;
	}
	struct chunk_list l;
	if (chunk_list_make(&l, p, first, p->n_chunks - first, 0) < 0) {
		/* The chunks stay in the pool; a later open sends them. */
		session_reply_error(s, id, ENOMEM, "out of memory");
		return;
	}
	gr.n_chunks = l.n;
	gr.chunks = l.ptrs;
	resp.id = id;
	resp.body_case = VRAM__RESPONSE__BODY_GROW;
	resp.grow = &gr;
	session_reply(s, &resp, l.fds, l.n);

	/* Other mappers map the new chunks too. */
	Vram__Event ev = VRAM__EVENT__INIT;
	ev.kind = VRAM__EVENT_KIND__EVENT_GROW;
	ev.pool_id = p->id;
	ev.n_chunks = l.n;
	ev.chunks = l.ptrs;
	for (struct mapper *m = p->mappers; m; m = m->next)
		if (m->session != s)
			access_send_event(srv->node.backend, m->session,
					  m->readonly, &ev, l.fds, l.n);
	chunk_list_free(&l);
}

static void reply_ok(struct session *s, uint64_t id)
{
	Vram__Response resp = VRAM__RESPONSE__INIT;
	resp.id = id;
	session_reply(s, &resp, NULL, 0);
}

static void handle_close(struct server *srv, struct session *s, uint64_t id,
			 const Vram__PoolClose *c)
{
	struct pool *p = node_pool_by_id(&srv->node, c->pool_id);

	if (!p || !pool_mapper_find(p, s)) {
		session_reply_error(s, id, ENOENT, "no pool %llu open here",
				    (unsigned long long)c->pool_id);
		return;
	}
	if (p->owner == s && !(p->flags & POOL_FLAG_PERSIST)) {
		log_info("pool %s closed by its owner pid %u", p->name, s->who.pid);
		node_pool_drop(&srv->node, p, s);
	} else {
		if (p->owner == s)
			pool_set_owner(p, NULL, NULL);
		pool_mapper_remove(p, s);
		transition_advance(&srv->node, p);
	}
	reply_ok(s, id);
}

static void handle_drop(struct server *srv, struct session *s, uint64_t id,
			const Vram__PoolDrop *d)
{
	struct node_scope sc = scope_of(s);
	struct pool *p = node_pool_find(&srv->node, &sc, d->name);

	if (!p) {
		session_reply_error(s, id, ENOENT, "no pool named %s", d->name ? d->name : "");
		return;
	}
	if (!node_allowed(&s->who, p)) {
		session_reply_error(s, id, EPERM, "pool %s belongs to uid %u", p->name,
				    p->owner_id.uid);
		return;
	}
	log_info("pool %s dropped by pid %u", p->name, s->who.pid);
	node_pool_drop(&srv->node, p, NULL);
	reply_ok(s, id);
}

/* The node's selector for the wire's (NULL: none set). */
static struct node_selector selector_from_wire(const Vram__Selector *sel)
{
	struct node_selector ns = { 0 };
	if (sel) {
		ns.name = sel->name;
		ns.tag = sel->tag;
		ns.owner_pid = sel->owner_pid;
		ns.owner = sel->owner;
		ns.all = sel->all;
		ns.job = sel->job;
		ns.owner_pids = sel->owner_pids;
		ns.n_owner_pids = sel->n_owner_pids;
	}
	return ns;
}

static int pool_by_id(const void *a, const void *b)
{
	const struct pool *x = *(struct pool *const *)a;
	const struct pool *y = *(struct pool *const *)b;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* What a listing's frame may hold of pools: the frame less room for the
 * response around them. */
#define LIST_PAGE_BYTES (WIRE_MAX_PAYLOAD - 4096)

/* The pools the selector picks with ids above l->after_id, by id, as
 * many as fit in one frame; more_after_id says where the next page
 * starts (0: none), so a listing spans frames (libvram asks again). */
static void handle_list(struct server *srv, struct session *s, uint64_t id,
			const Vram__List *l)
{
	Vram__Response resp = VRAM__RESPONSE__INIT;
	Vram__ListReply lr = VRAM__LIST_REPLY__INIT;
	struct node_selector sel = selector_from_wire(l->selector);
	struct node_scope sc = scope_of(s);
	struct pool **pools = NULL;
	int n = node_select(&srv->node, &sc, &sel, NODE_SELECT_LIST, &pools);
	unsigned k = 0, first = 0;
	size_t bytes = 0;
	Vram__PoolInfo *infos = NULL, **ptrs = NULL;
	Vram__Mapper **mappers = NULL;

	if (n < 0)
		goto nomem;
	if (n > 0)
		qsort(pools, (size_t)n, sizeof(*pools), pool_by_id);
	while (first < (unsigned)n && pools[first]->id <= l->after_id)
		first++;
	infos = calloc((size_t)n + 1, sizeof(*infos));
	ptrs = calloc((size_t)n + 1, sizeof(*ptrs));
	mappers = calloc((size_t)n + 1, sizeof(*mappers));
	if (!infos || !ptrs || !mappers)
		goto nomem;
	for (; first + k < (unsigned)n; k++) {
		if (pool_info_fill(pools[first + k], &infos[k], &mappers[k]) < 0)
			goto nomem;
		/* Each entry costs its size and a tag and length of at most
		 * 6 bytes; one is always sent, so the listing moves on. */
		size_t one = vram__pool_info__get_packed_size(&infos[k]) + 6;
		if (k > 0 && bytes + one > LIST_PAGE_BYTES) {
			pool_info_clear(&infos[k], mappers[k]);
			lr.more_after_id = pools[first + k - 1]->id;
			break;
		}
		bytes += one;
		ptrs[k] = &infos[k];
	}
	lr.n_pools = k;
	lr.pools = ptrs;
	resp.id = id;
	resp.body_case = VRAM__RESPONSE__BODY_LIST;
	resp.list = &lr;
	session_reply(s, &resp, NULL, 0);
	goto out;
nomem:
	session_reply_error(s, id, ENOMEM, "out of memory");
out:
	for (unsigned i = 0; i < k; i++)
		pool_info_clear(&infos[i], mappers[i]);
	free(infos);
	free(ptrs);
	free(mappers);
	free(pools);
}

/* Number of fds the daemon has open (/proc/self/fd). */
static unsigned open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	unsigned n = 0;
	struct dirent *e;

	if (!d)
		return 0;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n ? n - 1 : 0; /* not the directory's own fd */
}

static void handle_stats(struct server *srv, struct session *s, uint64_t id)
{
	struct backend *b = srv->node.backend;
	Vram__Response resp = VRAM__RESPONSE__INIT;
	Vram__StatsReply st = VRAM__STATS_REPLY__INIT;
	Vram__DeviceInfo dev[BACKEND_MAX_DEVICES], *devp[BACKEND_MAX_DEVICES];

	st.n_devices = device_infos_fill(b, dev, devp);
	st.backend = (char *)b->ops->name;
	st.sessions = srv->n_sessions;
	st.pools = srv->node.n_pools;
	st.used_bytes = b->used_bytes;
	st.backup_bytes = node_backup_bytes(&srv->node, POOL_HOST);
	st.disk_backup_bytes = node_backup_bytes(&srv->node, POOL_DISK);
	st.open_fds = open_fds();
	st.uptime_ms = (uint64_t)clock_now_ms() - srv->start_ms;
	st.devices = devp;
	st.daemon_version = VRAMD_VERSION;
	/* The caller's quotas and usage (an admin's: everyone's). */
	struct node_scope sc = scope_of(s);
	struct quota_line *lines = NULL;
	Vram__QuotaUsage *qm = NULL, **qp = NULL;
	int nq = quota_report(&srv->cfg.quotas, &srv->node, &s->who, sc.all,
			      &lines);
	if (nq < 0 || quota_usages_fill(lines, (unsigned)nq, b->n_devices,
					&qm, &qp) < 0) {
		free(lines);
		session_reply_error(s, id, ENOMEM, "out of memory");
		return;
	}
	st.n_quotas = (size_t)nq;
	st.quotas = qp;
	resp.id = id;
	resp.body_case = VRAM__RESPONSE__BODY_STATS;
	resp.stats = &st;
	session_reply(s, &resp, NULL, 0);
	quota_usages_free(qm, qp);
	free(lines);
}

/* A pause (resume false) or resume of the pools msg selects. */
static void handle_transition(struct server *srv, struct session *s,
			      uint64_t id, bool resume,
			      const Vram__Transition *msg)
{
	struct node_selector sel = selector_from_wire(msg->selector);
	struct node_scope sc = scope_of(s);
	struct pool **pools = NULL;
	int n = node_select(&srv->node, &sc, &sel, NODE_SELECT_ACT, &pools);
	bool *allowed = n < 0 ? NULL : calloc((size_t)n + 1, sizeof(*allowed));

	if (n < 0 || !allowed) {
		session_reply_error(s, id, ENOMEM, "out of memory");
		free(pools);
		return;
	}
	for (int i = 0; i < n; i++)
		allowed[i] = node_allowed(&s->who, pools[i]);
	(msg->gang ? gang_start : transition_start)(
		&srv->node, s, id, resume, pools, allowed, (unsigned)n,
		msg->timeout_ms ? msg->timeout_ms : srv->cfg.ack_timeout_ms);
	free(allowed);
	free(pools);
}

bool request_needs_settled(const Vram__Request *req)
{
	switch (req->body_case) {
	case VRAM__REQUEST__BODY_POOL_GROW:
	case VRAM__REQUEST__BODY_PAUSE:
	case VRAM__REQUEST__BODY_RESUME:
		return true;
	default:
		return false;
	}
}

int request_handle(struct server *srv, struct session *s,
		   const Vram__Request *req)
{
	uint64_t id = req->id;

	if (req->body_case != VRAM__REQUEST__BODY_ACK &&
	    req->body_case != VRAM__REQUEST__BODY_PROGRESS && id == 0)
		return -EPROTO;
	switch (req->body_case) {
	case VRAM__REQUEST__BODY_HELLO:
		handle_hello(srv, s, id, req->hello);
		break;
	case VRAM__REQUEST__BODY_POOL_CREATE:
		handle_create(srv, s, id, req->pool_create);
		break;
	case VRAM__REQUEST__BODY_POOL_OPEN:
		handle_open(srv, s, id, req->pool_open);
		break;
	case VRAM__REQUEST__BODY_POOL_GROW:
		handle_grow(srv, s, id, req->pool_grow);
		break;
	case VRAM__REQUEST__BODY_POOL_CLOSE:
		handle_close(srv, s, id, req->pool_close);
		break;
	case VRAM__REQUEST__BODY_POOL_DROP:
		handle_drop(srv, s, id, req->pool_drop);
		break;
	case VRAM__REQUEST__BODY_PAUSE:
		handle_transition(srv, s, id, false, req->pause);
		break;
	case VRAM__REQUEST__BODY_RESUME:
		handle_transition(srv, s, id, true, req->resume);
		break;
	case VRAM__REQUEST__BODY_LIST:
		handle_list(srv, s, id, req->list);
		break;
	case VRAM__REQUEST__BODY_STATS:
		handle_stats(srv, s, id);
		break;
	case VRAM__REQUEST__BODY_AUDIT:
		audit_handle(&srv->node, s, id);
		break;
	case VRAM__REQUEST__BODY_PING:
		reply_ok(s, id);
		break;
	case VRAM__REQUEST__BODY_OUTSIDE_REPORT:
		audit_outside_report(s, id, req->outside_report);
		break;
	case VRAM__REQUEST__BODY_PROGRESS:
		transition_progress(&srv->node, s, req->progress->event_id,
				    req->progress->restored);
		break;
	case VRAM__REQUEST__BODY_ACK:
		transition_ack(&srv->node, s, req->ack->event_id, req->ack->err,
			       req->ack->message);
		break;
	default:
		session_reply_error(s, id, EOPNOTSUPP, "unknown request");
		break;
	}
	return 0;
}
