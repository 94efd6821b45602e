/* SPDX-License-Identifier: Apache-2.0 */
/* Pause and resume: one Transition request, answered when every selected
 * pool has finished. Events for pools this process maps (its own pause of
 * its own pool included) are handled while the call waits; they, not the
 * reply, change the pools' local state. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "abi.h"
#include "call.h"
#include "client.h"
#include "error.h"
#include "mapping.h"
#include "message.h"
#include "pool.h"
#include "registry.h"

static void report_fill(struct vram_report *rep, const Vram__TransitionReply *t)
{
	uint32_t ok = 0, failed = 0;

	for (size_t i = 0; i < t->n_results; i++) {
		const Vram__PoolResult *pr = t->results[i];
		if (pr && pr->err == 0 && !pr->rolled_back)
			ok++;
		else
			failed++;
	}
	rep->pools = t->n_results ? ok : t->pools;
	rep->failed = failed;
	rep->bytes = t->bytes;
	rep->free_before = t->free_before;
	rep->free_after = t->free_after;
	rep->n_devices = 0;
	for (size_t i = 0; i < t->n_devices && i < VRAM_MAX_DEVICES; i++) {
		const Vram__DeviceFree *d = t->devices[i];
		struct vram_device_free *o = &rep->devices[rep->n_devices++];
		o->index = d->index;
		snprintf(o->uuid, sizeof(o->uuid), "%s", d->uuid ? d->uuid : "");
		o->free_before = d->free_before;
		o->free_after = d->free_after;
	}
	rep->rolled_back = t->rolled_back;
	/* The owners' outside figures: once per owner. */
	for (size_t i = 0; i < t->n_results; i++) {
		const Vram__PoolResult *pr = t->results[i];
		bool seen = false;
		if (!pr || !pr->outside_reported)
			continue;
		for (size_t k = 0; k < i && !seen; k++)
			seen = t->results[k] && t->results[k]->outside_reported &&
			       t->results[k]->owner_pid == pr->owner_pid;
		if (seen)
			continue;
		rep->outside_procs++;
		rep->outside_bytes += pr->outside_bytes;
		rep->outside_count += pr->outside_count;
		if (pr->expandable_segments)
			rep->outside_flags |= VRAM_OUTSIDE_EXPANDABLE;
	}
	if (t->failed && t->failed <= t->n_results && t->results[t->failed - 1]) {
		const Vram__PoolResult *f = t->results[t->failed - 1];
		rep->failed_err = f->err;
		rep->failed_pid = f->owner_pid;
		rep->failed_device = f->device;
		snprintf(rep->failed_instance, sizeof(rep->failed_instance), "%s",
			 f->owner_instance ? f->owner_instance : "");
		snprintf(rep->failed_pool, sizeof(rep->failed_pool), "%s",
			 f->name ? f->name : "");
	}
}

/* A message naming each failed pool and its late mappers, for a daemon
 * that sent none of its own. */
static int transition_error(int r, const Vram__TransitionReply *t)
{
	char buf[ERROR_MSG_MAX];
	size_t len = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < t->n_results && len < sizeof(buf) - 1; i++) {
		const Vram__PoolResult *pr = t->results[i];
		if (!pr || pr->err == 0)
			continue;
		len += snprintf(buf + len, sizeof(buf) - len, "%spool %s: %s",
				len ? "; " : "", pr->name ? pr->name : "?",
				pr->message && pr->message[0] ?
					pr->message :
					strerror(pr->err > 0 ? pr->err : EIO));
		for (size_t k = 0; k < pr->n_late_pids && len < sizeof(buf) - 1;
		     k++)
			len += snprintf(
				buf + len, sizeof(buf) - len, "%s%u",
				k ? " " : " (late pids: ", pr->late_pids[k]);
		if (pr->n_late_pids && len < sizeof(buf) - 1)
			len += snprintf(buf + len, sizeof(buf) - len, ")");
	}
	if (buf[0] == '\0')
		return r;
	return error_set(r, "%s", buf);
}

/* With c->lock held. */
static int transition_run(struct vram_client *c, bool pause, bool gang,
			  const struct vram_selector *sel, unsigned timeout_ms,
			  struct vram_report *report)
{
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__Transition t = VRAM__TRANSITION__INIT;
	Vram__Selector s = VRAM__SELECTOR__INIT;
	struct call call = { .spin = true };
	int r;

	message_selector_to_wire(sel, &s);
	t.selector = &s;
	t.timeout_ms = timeout_ms;
	t.gang = gang;
	if (pause) {
		req.body_case = VRAM__REQUEST__BODY_PAUSE;
		req.pause = &t;
	} else {
		req.body_case = VRAM__REQUEST__BODY_RESUME;
		req.resume = &t;
	}
	/* No limit of our own: the daemon answers once its deadline for the
	 * mappers' acks has passed. A resume holds back this process's
	 * give-backs' unpins meanwhile (mapping_gate_soft_enter). */
	if (!pause)
		mapping_gate_soft_enter();
	r = call_run(c, &req, &call, -1);
	if (!pause)
		mapping_gate_soft_leave();
	const Vram__Response *resp = call.msg ? call.msg->response : NULL;
	if (resp && resp->body_case == VRAM__RESPONSE__BODY_TRANSITION &&
	    resp->transition) {
		if (report)
			report_fill(report, resp->transition);
		if (r < 0 && !(resp->message && resp->message[0]))
			r = transition_error(r, resp->transition);
	}
	call_release(&call);
	return r;
}

/* Reads the caller's selector into *sel and checks it. */
static int selector_read(struct vram_selector *sel,
			 const struct vram_selector *in)
{
	int r;

	if (!in)
		return error_set(EINVAL, "a selector is required");
	r = abi_read(sel, sizeof(*sel), in, ABI_MIN_SELECTOR, "vram_selector");
	if (r < 0)
		return r;
	if (sel->name && strlen(sel->name) > ADDRESS_MAX_LEN)
		return error_set(EINVAL, "selector name is too long");
	if (sel->tag && strlen(sel->tag) > TAG_MAX_LEN)
		return error_set(EINVAL, "selector tag is too long");
	if (sel->job && strlen(sel->job) > NAME_MAX_LEN)
		return error_set(EINVAL, "selector job is too long");
	if (sel->n_owner_pids && !sel->owner_pids)
		return error_set(EINVAL, "n_owner_pids set without owner_pids");
	return 0;
}

/* Checks the caller's report (NULL is fine): 0 or -EINVAL, before
 * anything is sent. */
static int report_check(const struct vram_report *report)
{
	return report ? abi_check(report->size, ABI_MIN_REPORT, "vram_report") :
			0;
}

static int transition_public(vram_client *c, bool pause, bool gang,
			     const struct vram_selector *in,
			     unsigned timeout_ms, struct vram_report *report)
{
	unsigned eg = error_generation();
	struct vram_selector sel;
	struct vram_report rep = { 0 };
	int r;

	r = report_check(report);
	if (r < 0)
		return error_finish(eg, r);
	r = selector_read(&sel, in);
	if (r == 0)
		r = registry_client_enter(c);
	if (r == 0) {
		r = transition_run(c, pause, gang, &sel, timeout_ms,
				   report ? &rep : NULL);
		registry_client_leave(c);
	}
	if (report)
		abi_write(report, &rep, sizeof(rep));
	return error_finish(eg, r);
}

int vram_pause(vram_client *c, const struct vram_selector *sel,
	       unsigned timeout_ms, struct vram_report *report)
{
	return transition_public(c, true, false, sel, timeout_ms, report);
}

int vram_resume(vram_client *c, const struct vram_selector *sel,
		unsigned timeout_ms, struct vram_report *report)
{
	return transition_public(c, false, false, sel, timeout_ms, report);
}

int vram_gang_pause(vram_client *c, const struct vram_selector *sel,
		    unsigned timeout_ms, struct vram_report *report)
{
	return transition_public(c, true, true, sel, timeout_ms, report);
}

int vram_gang_resume(vram_client *c, const struct vram_selector *sel,
		     unsigned timeout_ms, struct vram_report *report)
{
	return transition_public(c, false, true, sel, timeout_ms, report);
}

static int transition_pool(vram_pool *p, bool pause, struct vram_report *report)
{
	unsigned eg = error_generation();
	struct vram_selector sel = VRAM_SELECTOR_INIT;
	struct vram_report rep = { 0 };
	int r;

	r = report_check(report);
	if (r < 0)
		return error_finish(eg, r);
	r = registry_pool_enter(p);
	if (r == 0) {
		if (p->dropped) {
			r = error_set(ENOENT, "pool %s was dropped", p->name);
		} else {
			/* The name is unique on the node and this handle
			 * keeps p alive for the whole call. */
			sel.name = p->name;
			r = transition_run(p->client, pause, false, &sel, 0,
					   report ? &rep : NULL);
		}
		registry_pool_leave(p);
	}
	if (report)
		abi_write(report, &rep, sizeof(rep));
	return error_finish(eg, r);
}

int vram_pool_pause(vram_pool *p, struct vram_report *report)
{
	return transition_pool(p, true, report);
}

int vram_pool_resume(vram_pool *p, struct vram_report *report)
{
	return transition_pool(p, false, report);
}
