/* SPDX-License-Identifier: Apache-2.0 */
/* Pause and resume across mappers. pool.c decides the states and the edges
 * between them; this file begins each pool's part, sends the rounds of
 * events the pool asks for, counts the pools down against a deadline and
 * answers the request. */
#include "access.h"
#include "transition.h"
#include "attr.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "log.h"
#include "message.h"
#include "metrics.h"
#include "node.h"
#include "notify.h"
#include "audit.h"
#include "session.h"

static void item_fail(struct transition_item *it, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void transition_finish(struct transition *t);

static void item_done(struct transition_item *it)
{
	if (it->done)
		return;
	it->done = true;
	it->t_end = uv_hrtime();
	if (it->pool && it->pool->op == it)
		it->pool->op = NULL;
	it->pool = NULL;
	assert(it->t->outstanding > 0);
	if (--it->t->outstanding == 0 && !it->t->starting)
		transition_finish(it->t);
}

static void item_fail(struct transition_item *it, int err, const char *fmt, ...)
{
	va_list ap;
	it->err = err;
	va_start(ap, fmt);
	vsnprintf(it->message, sizeof(it->message), fmt, ap);
	va_end(ap);
	item_done(it);
}

/* Sends the round's event to every mapper that owes an ack. */
static void round_send(const struct backend *b, struct pool *p,
		       const struct pool_next *next)
{
	enum pool_round round = next->round;
	Vram__Event ev = VRAM__EVENT__INIT;
	struct chunk_list l;
	/* RESUME carries the chunks made with their fds (RESUME_MORE those
	 * made since), SAVE their layout only, so the saver can check it
	 * maps all of the pool before it saves. */
	bool resume = round == POOL_ROUND_RESUME ||
		      round == POOL_ROUND_RESUME_MORE;
	/* A SAVE lists the chunks still held (all but those a save in
	 * parts that failed let go of). */
	unsigned first = round == POOL_ROUND_RESUME_MORE ? next->first :
			 round == POOL_ROUND_SAVE	 ? p->saved :
							   0;
	unsigned n = round == POOL_ROUND_SAVE ? p->n_chunks - first :
		     resume		      ? p->made - first :
						0;
	unsigned nfds = resume ? n : 0;

	if (chunk_list_make(&l, p, first, n, 0) < 0) {
		/* Every mapper misses this round: it times out and can be
		 * retried; nothing is lost. */
		log_err("pool %s: out of memory sending events", p->name);
		return;
	}
	ev.event_id = p->event_id;
	ev.kind = message_event_kind(round);
	ev.pool_id = p->id;
	ev.n_chunks = n;
	ev.chunks = l.ptrs;
	ev.more = resume && p->made < p->n_chunks && !p->make_err;
	if (round == POOL_ROUND_RESUME_MORE)
		ev.err = p->make_err;
	ev.release = round == POOL_ROUND_SAVE && p->save_parts;
	for (unsigned i = 0; i < n && !nfds; i++)
		l.chunks[i].fd_index = -1;
	/* A failed send only marks its session for closing later
	 * (session_close_later), so the mapper list stays as it is here. */
	for (struct mapper *m = p->mappers; m; m = m->next) {
		if (!m->pending)
			continue;
		ev.backup = m->backup;
		access_send_event(b, m->session, m->readonly, &ev,
				  l.fds, nfds);
	}
	chunk_list_free(&l);
}

static void late_pids(struct transition_item *it, struct pool *p)
{
	it->n_late = 0;
	for (struct mapper *m = p->mappers; m; m = m->next)
		if (m->pending && it->n_late < TRANSITION_MAX_LATE)
			it->late_pids[it->n_late++] = m->who.pid;
}

/* Does what the pool asked after a begin or an advance: send its next
 * round, or end the request's part in it. */
static void item_step(const struct backend *b, struct pool *p,
		      enum pool_step step, const struct pool_next *next)
{
	struct transition_item *it = p->op;

	switch (step) {
	case POOL_STEP_WAIT:
		return;
	case POOL_STEP_SEND:
		round_send(b, p, next);
		return;
	case POOL_STEP_DONE:
		log_info("pool %s %s: %llu bytes %s", p->name,
			 p->state == POOL_PAUSED ? "paused" : "resumed",
			 (unsigned long long)next->bytes,
			 p->state == POOL_PAUSED ? "released" : "back");
		if (it) {
			it->bytes = next->bytes;
			if (p->state == POOL_PAUSED)
				it->backup = p->backup_valid;
			item_done(it);
		}
		return;
	case POOL_STEP_FAILED:
		/* A refusal (already there, busy) needs no errno's words. */
		if (next->err == EALREADY || next->err == EBUSY) {
			if (it)
				item_fail(it, next->err, "pool %s: %s", p->name,
					  next->why);
			return;
		}
		log_warn("pool %s: %s (%s)", p->name, next->why,
			 strerror(next->err));
		if (it)
			item_fail(it, next->err, "pool %s: %s (%s)", p->name,
				  next->why, strerror(next->err));
		return;
	}
}

void transition_advance(struct node *node, struct pool *p)
{
	struct transition_item *it = p->op;
	struct pool_next next;

	if (p->pending)
		return; /* pool_advance would wait */
	/* Every mapper has answered: when the last did, for the log. */
	uint64_t now = uv_hrtime();
	if (it && now > it->t->t_acked)
		it->t->t_acked = now;
	enum pool_step step = pool_advance(p, node->backend, &node->next_event_id,
					   &next);
	if (it)
		it->t->release_ns += uv_hrtime() - now;
	item_step(node->backend, p, step, &next);
}

/* The pool whose current round is event_id, or NULL (a late or unknown
 * answer, logged with what, from s). */
static struct pool *pool_of_event(struct node *node, uint64_t event_id,
				  const char *what, const struct session *s)
{
	for (unsigned i = 0; i < node->n_pools; i++)
		if (node->pools[i]->event_id == event_id)
			return node->pools[i];
	log_debug("late or unknown %s %llu from pid %u", what,
		  (unsigned long long)event_id, s->who.pid);
	return NULL;
}

void transition_ack(struct node *node, struct session *s, uint64_t event_id,
		    int err, const char *message)
{
	struct pool *p = pool_of_event(node, event_id, "ack", s);

	if (!p || !pool_ack(p, s, event_id, err))
		return;
	if (err)
		log_warn("pool %s: pid %u failed the event: %s (%s)", p->name,
			 s->who.pid, strerror(err), message ? message : "");
	transition_advance(node, p);
}

void transition_progress(struct node *node, struct session *s,
			 uint64_t event_id, unsigned restored)
{
	struct pool *p = pool_of_event(node, event_id, "progress", s);
	struct pool_next next;

	if (!p)
		return;
	uint64_t t0 = uv_hrtime();
	enum pool_step step = POOL_STEP_WAIT;
	unsigned released = 0;
	if (p->state == POOL_PAUSING_SAVE) {
		/* A save in parts: what it let go of leaves the fd store at
		 * once too, or the store would hold it until the pause ends. */
		released = pool_save_progress(p, node->backend, s, restored);
		if (released && node->store_flush)
			node->store_flush(node);
	} else {
		step = pool_resume_progress(p, node->backend, s, restored,
					    &next);
	}
	if (p->op)
		p->op->t->release_ns += uv_hrtime() - t0;
	if (released)
		log_debug("pool %s: saved %u of %u chunk(s); released %u",
			  p->name, restored, p->n_chunks, released);
	if (step == POOL_STEP_SEND)
		log_debug("pool %s: restored %u of %u chunk(s); made up to %u%s",
			  p->name, restored, p->n_chunks, p->made,
			  p->make_err ? ", then failed" : "");
	item_step(node->backend, p, step, &next);
}

static void build_reply(struct transition *t, Vram__Response *resp,
			Vram__TransitionReply *tr, Vram__PoolResult *res,
			Vram__PoolResult **resp_ptrs, Vram__DeviceFree *devs,
			Vram__DeviceFree **dev_ptrs, uint64_t free_after)
{
	unsigned all_already = t->n_items > 0;
	int first_err = 0;
	const char *first_msg = NULL;

	tr->free_before = t->free_before;
	tr->free_after = free_after;
	tr->n_devices = device_frees_fill(t->node->backend, t->dev_free_before,
					   t->dev_free_after, devs, dev_ptrs);
	tr->devices = dev_ptrs;
	for (unsigned i = 0; i < t->n_items; i++) {
		struct transition_item *it = &t->items[i];
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
		audit_outside_fill(&it->outside, &res[i].outside_reported,
				   &res[i].outside_bytes, &res[i].outside_count,
				   &res[i].expandable_segments);
		resp_ptrs[i] = &res[i];
		if (it->err == 0) {
			tr->pools++;
			tr->bytes += it->bytes;
		}
		if (it->err != EALREADY)
			all_already = 0;
		if (it->err && it->err != EALREADY && !first_err) {
			first_err = it->err;
			first_msg = it->message;
		}
	}
	tr->n_results = t->n_items;
	tr->results = resp_ptrs;
	resp->id = t->request_id;
	resp->body_case = VRAM__RESPONSE__BODY_TRANSITION;
	resp->transition = tr;
	if (t->n_items == 0) {
		resp->err = ENOENT;
		resp->message = "no pool matched";
	} else if (all_already) {
		resp->err = EALREADY;
		resp->message = t->resume ? "already active" : "already paused";
	} else if (first_err) {
		resp->err = first_err;
		resp->message = (char *)first_msg;
	}
}

/* t goes once both of its handles are closed. */
static void transition_closed(uv_handle_t *h)
{
	struct transition *t = h->data;
	if (--t->handles_open == 0)
		free(t);
}

/* Counts each pool's part and, for a pause, what each device released
 * against what it was expected to, before the answer goes out: a scrape
 * after the answer sees them (it has them rendered: http.h), and the
 * answer does not wait for a render. */
static void transition_count(struct transition *t, const bool *free_known)
{
	struct node *node = t->node;
	struct backend *b = node->backend;
	uint64_t expected[BACKEND_MAX_DEVICES] = { 0 };

	for (unsigned i = 0; i < t->n_items; i++) {
		struct transition_item *it = &t->items[i];
		metrics_pool_done(node->metrics, t->resume, it->device, it->policy,
				  it->err, (double)(it->t_end - it->t_begin) / 1e9,
				  it->bytes, it->backup);
		if (!t->resume && it->err == 0 && it->device < BACKEND_MAX_DEVICES)
			expected[it->device] += it->bytes;
	}
	/* The free memory after is the reply's, read once (NVML on CUDA). */
	for (unsigned d = 0; d < b->n_devices && !t->resume; d++) {
		if (!expected[d] || !free_known[d])
			continue;
		metrics_pause_release(node->metrics, d, expected[d],
				      t->dev_free_before[d], t->dev_free_after[d],
				      b->devices[d].granularity);
	}
	metrics_changed(node->metrics);
}

/* The answer, once the device has taken back what the request released:
 * the free memory after is then what the requester can count on. */
static void transition_reply(struct transition *t)
{
	struct node *node = t->node;
	for (struct transition **tp = &node->transitions; *tp; tp = &(*tp)->next) {
		if (*tp == t) {
			*tp = t->next;
			break;
		}
	}
	uint64_t free_after = 0;
	bool free_known[BACKEND_MAX_DEVICES] = { false };
	for (unsigned d = 0; d < node->backend->n_devices; d++) {
		uint64_t f = 0;
		free_known[d] = backend_mem_info(node->backend, d, &f, NULL) == 0;
		if (free_known[d])
			free_after += f;
		t->dev_free_after[d] = f;
	}
	uint64_t t_end = uv_hrtime();
	if (node->metrics)
		transition_count(t, free_known);
	if (t->t_acked)
		log_info("%s of %u pool(s) took %.2f ms: mappers %.2f ms, "
			 "creating or releasing chunks %.2f ms, waiting for the "
			 "device and reading its memory %.2f ms",
			 t->resume ? "resume" : "pause", t->n_items,
			 (t_end - t->t_start) / 1e6,
			 t->t_acked ? (t->t_acked - t->t_start) / 1e6 : 0.0,
			 t->release_ns / 1e6, (t_end - t->t_settle) / 1e6);
	if (!t->resume)
		audit_outside_log(t);
	if (t->done) {
		t->done(t, t->done_arg);
	} else if (t->requester) {
		Vram__DeviceFree devs[BACKEND_MAX_DEVICES];
		Vram__DeviceFree *dev_ptrs[BACKEND_MAX_DEVICES];
		Vram__Response resp = VRAM__RESPONSE__INIT;
		Vram__TransitionReply tr = VRAM__TRANSITION_REPLY__INIT;
		Vram__PoolResult *res = calloc(t->n_items + 1, sizeof(*res));
		Vram__PoolResult **ptrs = calloc(t->n_items + 1, sizeof(*ptrs));
		if (res && ptrs) {
			build_reply(t, &resp, &tr, res, ptrs, devs, dev_ptrs,
				    free_after);
			session_reply(t->requester, &resp, NULL, 0);
		} else {
			session_reply_error(t->requester, t->request_id, ENOMEM,
					    "out of memory building the reply");
		}
		free(res);
		free(ptrs);
	}
	t->timer.data = t;
	uv_close((uv_handle_t *)&t->spin, transition_closed);
	uv_close((uv_handle_t *)&t->timer, transition_closed);
}

static void transition_spin(uv_idle_t *h)
{
	struct transition *t = h->data;
	if (uv_hrtime() >= t->spin_until)
		uv_idle_stop(h);
}

/* On a libuv worker: the wait the loop must not make. */
/* The longest a pause waits for systemd to confirm the fd store's
 * removals (it answers in well under a millisecond). */
#define TRANSITION_STORE_WAIT_MS 1000

static void transition_settle_work(uv_work_t *w)
{
	struct transition *t = w->data;
	backend_settle(t->node->backend);
	/* systemd closes the fd store's copies of the released chunks as it
	 * reads the FDSTOREREMOVE sent before; until then they hold the
	 * memory (make test-systemd's last scenario). */
	if (t->store_barrier) {
		int r = notify_barrier(TRANSITION_STORE_WAIT_MS);
		if (r < 0)
			log_warn("systemd did not confirm the fd store's "
				 "removals within %d ms (%s): the pause's "
				 "free memory may not count them yet",
				 TRANSITION_STORE_WAIT_MS, strerror(-r));
	}
}

static void transition_settled(uv_work_t *w, int status UNUSED)
{
	transition_reply(w->data);
}

/* Bytes the host pools' saves under way on p's backup's file system are
 * still to write (p's own aside): what a new save there must leave them. */
static uint64_t transition_backup_pending(const struct node *n,
					  const struct pool *p)
{
	struct stat st, qst;
	bool have_st = false;
	uint64_t sum = 0;

	if (p->policy != POOL_HOST)
		return 0;
	/* Nearly always no other save is under way: no stat at all then. */
	for (unsigned i = 0; i < n->n_pools; i++) {
		const struct pool *q = n->pools[i];
		uint64_t left = q == p ? 0 : pool_backup_unwritten(q);
		if (!left)
			continue;
		if (!have_st && fstat(p->backup_fd, &st) < 0)
			return 0;
		have_st = true;
		if (fstat(q->backup_fd, &qst) == 0 && qst.st_dev == st.st_dev)
			sum += left;
	}
	return sum;
}

/* Every pool is done. The transition stays on the node's list until it
 * has answered, so that a requester who leaves meanwhile is forgotten
 * (transition_session_gone); nothing else reaches it: its timer is
 * stopped and no pool points to its items. */
static void transition_finish(struct transition *t)
{
	uv_timer_stop(&t->timer);
	transition_pump_update(t->node);
	t->t_settle = uv_hrtime();
	struct node *n = t->node;
	t->store_barrier = !t->resume && n->store_flush && n->store_flush(n);
	if (!t->store_barrier && backend_settled(n->backend)) {
		transition_reply(t);
		return;
	}
	t->settle.data = t;
	if (uv_queue_work(t->node->loop, &t->settle, transition_settle_work,
			  transition_settled) < 0) {
		log_warn("cannot wait for the device off the loop; answering "
			 "with the free memory as it reads now");
		transition_reply(t);
	}
}

static void transition_timeout(uv_timer_t *timer)
{
	struct transition *t = timer->data;
	t->starting = true; /* finish once, below */
	for (unsigned i = 0; i < t->n_items; i++) {
		struct transition_item *it = &t->items[i];
		if (it->done || !it->pool)
			continue;
		struct pool *p = it->pool;
		late_pids(it, p);
		char pids[128] = "";
		size_t off = 0;
		for (unsigned k = 0; k < it->n_late && off < sizeof(pids) - 12; k++)
			off += (size_t)snprintf(pids + off, sizeof(pids) - off,
						"%s%u", k ? " " : "", it->late_pids[k]);
		log_warn("pool %s: no ack from pid(s) %s; it stays %s", p->name,
			 pids, pool_state_name(p->state));
		if (t->node->metrics)
			metrics_ack_timeouts(t->node->metrics, t->resume, it->n_late);
		item_fail(it, ETIMEDOUT,
			  "mapper pid(s) %s did not acknowledge in time; the pool "
			  "stays %s (pause or resume again to wait more)",
			  pids, pool_state_name(p->state));
	}
	t->starting = false;
	if (t->outstanding == 0)
		transition_finish(t);
}

static void item_begin(struct node *node, struct transition *t,
		       struct transition_item *it, struct pool *p)
{
	struct pool_next next;
	enum pool_step step;

	if (p->op) {
		item_fail(it, EBUSY, "pool %s is in another pause or resume",
			  p->name);
		return;
	}
	it->pool = p;
	p->op = it;
	it->backup = t->resume && p->backup_valid;
	uint64_t t0 = uv_hrtime();
	it->t_begin = t0;
	if (t->resume) {
		step = pool_resume(p, node->backend, &node->next_event_id, &next);
		/* The engine is waking its pools: keep the driver clearing
		 * what the trainer freed (transition_pump_update). Only once
		 * this resume's chunks are made: a pump allocation between a
		 * release and the create of the same size right after it
		 * costs the create its fast path (a 64 GiB discard pool's
		 * resume took 119 ms instead of 4.5 on the H200). */
		backend_pump_set(node->backend, p->device, true);
	} else {
		step = pool_pause(p, node->backend, &node->next_event_id,
				  transition_backup_pending(node, p), &next);
	}
	t->release_ns += uv_hrtime() - t0;
	item_step(node->backend, p, step, &next);
}

void transition_start(struct node *node, struct session *requester,
		      uint64_t request_id, bool resume, struct pool *const *pools,
		      const bool *allowed, unsigned n, unsigned timeout_ms)
{
	if (transition_run(node, requester, request_id, resume, pools, allowed,
			   n, timeout_ms, NULL, NULL) < 0)
		session_reply_error(requester, request_id, ENOMEM, "out of memory");
}

int transition_run(struct node *node, struct session *requester,
		   uint64_t request_id, bool resume, struct pool *const *pools,
		   const bool *allowed, unsigned n, unsigned timeout_ms,
		   transition_done_fn *done, void *done_arg)
{
	struct transition *t = calloc(1, sizeof(*t) + (n ? n : 1) * sizeof(t->items[0]));
	if (!t)
		return -ENOMEM;
	t->node = node;
	t->done = done;
	t->done_arg = done_arg;
	t->requester = requester;
	t->request_id = request_id;
	t->resume = resume;
	t->starting = true;
	t->t_start = uv_hrtime();
	t->free_before = 0;
	for (unsigned d = 0; d < node->backend->n_devices; d++) {
		uint64_t f = 0;
		if (backend_mem_info(node->backend, d, &f, NULL) == 0)
			t->free_before += f;
		t->dev_free_before[d] = f;
	}
	uv_timer_init(node->loop, &t->timer);
	t->timer.data = t;
	uv_idle_init(node->loop, &t->spin);
	t->spin.data = t;
	t->handles_open = 2;
	if (node->spin_ms) {
		t->spin_until = t->t_start + (uint64_t)node->spin_ms * 1000000;
		uv_idle_start(&t->spin, transition_spin);
	}
	t->next = node->transitions;
	node->transitions = t;

	/* The items first, then the beginnings (which may finish some). */
	for (unsigned i = 0; i < n; i++) {
		t->items[i].t = t;
		t->items[i].pool = pools[i];
		t->items[i].device = pools[i]->device;
		t->items[i].policy = pools[i]->policy;
		t->items[i].pool_id = pools[i]->id;
		if (pools[i]->owner) {
			t->items[i].owner_pid = pools[i]->owner_id.pid;
			snprintf(t->items[i].owner_instance,
				 sizeof(t->items[i].owner_instance), "%s",
				 pools[i]->owner_id.instance);
			t->items[i].outside = pools[i]->owner->outside;
		}
		t->items[i].t_begin = t->t_start;
		/* Another uid's pool is named as an admin addresses it. */
		if (requester && requester->who.uid != pools[i]->owner_id.uid)
			snprintf(t->items[i].name, sizeof(t->items[i].name),
				 "%u:%s", pools[i]->owner_id.uid,
				 pools[i]->name);
		else
			snprintf(t->items[i].name, sizeof(t->items[i].name),
				 "%s", pools[i]->name);
	}
	t->n_items = n;
	t->outstanding = n;
	for (unsigned i = 0; i < n; i++) {
		struct pool *p = pools[i];
		if (!allowed[i])
			item_fail(&t->items[i], EPERM, "pool %s belongs to uid %u",
				  p->name, p->owner_id.uid);
		else
			item_begin(node, t, &t->items[i], p);
	}

	t->starting = false;
	if (t->outstanding == 0) {
		transition_finish(t);
		return 0;
	}
	uv_timer_start(&t->timer, transition_timeout, timeout_ms, 0);
	return 0;
}

void transition_pump_update(struct node *node)
{
	bool lent[BACKEND_MAX_DEVICES] = { false };

	for (unsigned i = 0; i < node->n_pools; i++) {
		const struct pool *p = node->pools[i];
		if (p->state != POOL_ACTIVE && p->device < BACKEND_MAX_DEVICES)
			lent[p->device] = true;
	}
	/* A resume that failed leaves its pool paused, and the pump on:
	 * the engine will try again. */
	for (unsigned d = 0; d < node->backend->n_devices; d++)
		if (!lent[d])
			backend_pump_set(node->backend, d, false);
}

void transition_pool_dropped(struct pool *p)
{
	if (p->op)
		item_fail(p->op, ENOENT, "pool %s was dropped", p->name);
}

void transition_session_gone(struct node *node, struct session *s)
{
	for (struct transition *t = node->transitions; t; t = t->next)
		if (t->requester == s)
			t->requester = NULL;
}
