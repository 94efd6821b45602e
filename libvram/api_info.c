/* SPDX-License-Identifier: Apache-2.0 */
/* Inspection: list, stats, quotas and audit. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi.h"
#include "call.h"
#include "client.h"
#include "error.h"
#include "message.h"
#include "registry.h"

static void copy_str(char *dst, size_t n, const char *src)
{
	snprintf(dst, n, "%s", src ? src : "");
}

/* Entry i of an array of entries of stride bytes. */
static void *entry_at(void *base, size_t stride, size_t i)
{
	return (char *)base + i * stride;
}

/* The answer's body of the kinds inspection asks for; NULL for others. */
static const void *info_body(const Vram__Response *resp)
{
	switch (resp->body_case) {
	case VRAM__RESPONSE__BODY_LIST:
		return resp->list;
	case VRAM__RESPONSE__BODY_STATS:
		return resp->stats;
	case VRAM__RESPONSE__BODY_AUDIT:
		return resp->audit;
	default:
		return NULL;
	}
}

/* Runs req on c (entered) and checks that vramd answered with a body of
 * kind want: 0 with the answer in call, or -errno (EPROTO naming what was
 * asked). */
static int info_ask(vram_client *c, Vram__Request *req, struct call *call,
		    Vram__Response__BodyCase want, const char *what)
{
	int r = call_run(c, req, call, -1);
	if (r < 0)
		return r;
	const Vram__Response *resp = call->msg->response;
	if (resp->body_case != want || !info_body(resp))
		return error_set(EPROTO,
				 "vramd answered %s with something else", what);
	return 0;
}

void vram_pool_info_free(struct vram_pool_info *infos, size_t n)
{
	if (!infos)
		return;
	/* vram_list wrote the array's stride into every entry. */
	size_t stride = n ? infos->size : 0;
	if (n && stride < ABI_MIN_POOL_INFO)
		return; /* not vram_list's array: leak rather than guess */
	for (size_t i = 0; i < n; i++) {
		struct vram_pool_info *e = entry_at(infos, stride, i);
		free(e->mappers);
	}
	free(infos);
}

static int info_convert(struct vram_pool_info *o, const Vram__PoolInfo *in)
{
	o->id = in->id;
	copy_str(o->name, sizeof(o->name), in->name);
	copy_str(o->tag, sizeof(o->tag), in->tag);
	o->device = in->device;
	o->state = message_state_from_wire(in->state);
	o->policy = message_policy_from_wire(in->policy);
	o->bytes = in->bytes;
	o->reserve_bytes = in->reserve_bytes;
	o->backup_bytes = in->backup_bytes;
	o->chunks = in->chunks;
	o->owner_pid = in->owner_pid;
	o->owner_uid = in->owner_uid;
	copy_str(o->owner_name, sizeof(o->owner_name), in->owner_name);
	copy_str(o->owner_instance, sizeof(o->owner_instance),
		 in->owner_instance);
	copy_str(o->owner_cgroup, sizeof(o->owner_cgroup), in->owner_cgroup);
	copy_str(o->owner_job, sizeof(o->owner_job), in->owner_job);
	o->flags = in->flags;
	o->n_mappers = 0;
	o->mappers = NULL;
	if (in->n_mappers == 0)
		return 0;
	o->mappers = calloc(in->n_mappers, sizeof(*o->mappers));
	if (!o->mappers)
		return -ENOMEM;
	for (size_t k = 0; k < in->n_mappers; k++) {
		const Vram__Mapper *m = in->mappers[k];
		if (!m)
			continue;
		struct vram_mapper_info *mo = &o->mappers[o->n_mappers++];
		mo->pid = m->pid;
		mo->uid = m->uid;
		copy_str(mo->name, sizeof(mo->name), m->name);
		mo->readonly = m->access == VRAM__ACCESS__ACCESS_RO;
	}
	return 0;
}

int vram_list(vram_client *c, const struct vram_selector *in, size_t entry_size,
	      struct vram_pool_info **out, size_t *n)
{
	unsigned eg = error_generation();
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__List list = VRAM__LIST__INIT;
	Vram__Selector s = VRAM__SELECTOR__INIT;
	struct vram_selector sel;
	struct call call = { 0 };
	char *infos = NULL;
	size_t count = 0;
	int r;

	if (out)
		*out = NULL;
	if (n)
		*n = 0;
	if (!out || !n)
		return error_finish(
			eg,
			error_set(EINVAL, "vram_list: out and n are required"));
	r = abi_check_entry(entry_size, ABI_MIN_POOL_INFO,
			    _Alignof(struct vram_pool_info), "vram_pool_info");
	if (r == 0 && in)
		r = abi_read(&sel, sizeof(sel), in, ABI_MIN_SELECTOR,
			     "vram_selector");
	if (r < 0)
		return error_finish(eg, r);
	r = registry_client_enter(c);
	if (r < 0)
		return error_finish(eg, r);
	if (in) {
		message_selector_to_wire(&sel, &s);
		list.selector = &s;
	}
	req.body_case = VRAM__REQUEST__BODY_LIST;
	req.list = &list;
	/* A listing spans frames: ask for the next page until the daemon
	 * says it is complete (more_after_id 0). */
	for (;;) {
		r = info_ask(c, &req, &call, VRAM__RESPONSE__BODY_LIST,
			     "a list");
		if (r < 0)
			goto fail;
		const Vram__ListReply *lr = call.msg->response->list;
		if (lr->more_after_id && lr->more_after_id <= list.after_id) {
			r = error_set(EPROTO, "vramd's listing went backwards");
			goto fail;
		}
		if (lr->n_pools) {
			char *grown = realloc(infos, (count + lr->n_pools) * entry_size);
			if (!grown) {
				r = error_set(ENOMEM, "out of memory");
				goto fail;
			}
			infos = grown;
			/* Zeroed as calloc would: a newer caller's entries
			 * are longer than what this library writes. */
			memset(infos + count * entry_size, 0,
			       lr->n_pools * entry_size);
		}
		for (size_t i = 0; i < lr->n_pools; i++) {
			struct vram_pool_info info = { 0 };

			if (!lr->pools[i])
				continue;
			/* An entry is written as far as the caller's layout
			 * goes; info_convert's mappers lie within every
			 * layout. */
			info.size = (uint32_t)entry_size;
			r = info_convert(&info, lr->pools[i]);
			for (unsigned d = 0; d < c->n_devices; d++)
				if (c->devices[d].index == info.device)
					copy_str(info.device_uuid,
						 sizeof(info.device_uuid),
						 c->devices[d].uuid);
			memcpy(entry_at(infos, entry_size, count), &info,
			       entry_size < sizeof(info) ? entry_size : sizeof(info));
			count++;
			if (r < 0) {
				r = error_set(ENOMEM, "out of memory");
				goto fail;
			}
		}
		uint64_t next = lr->more_after_id;
		call_release(&call);
		memset(&call, 0, sizeof(call));
		if (!next)
			break;
		list.after_id = next;
	}
	if (count == 0) {
		free(infos);
		infos = NULL;
	}
	*out = (struct vram_pool_info *)infos;
	*n = count;
	goto out;
fail:
	if (infos)
		vram_pool_info_free((struct vram_pool_info *)infos, count);
out:
	call_release(&call);
	registry_client_leave(c);
	return error_finish(eg, r);
}

int vram_stats(vram_client *c, struct vram_stats *user)
{
	unsigned eg = error_generation();
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__Stats st = VRAM__STATS__INIT;
	struct vram_stats full = { 0 }, *out = &full;
	struct call call = { 0 };
	int r;

	if (!user)
		return error_finish(
			eg, error_set(EINVAL, "vram_stats: out is required"));
	r = abi_check(user->size, ABI_MIN_STATS, "vram_stats");
	if (r < 0)
		return error_finish(eg, r);
	abi_write(user, &full, sizeof(full));
	r = registry_client_enter(c);
	if (r < 0)
		return error_finish(eg, r);
	req.body_case = VRAM__REQUEST__BODY_STATS;
	req.stats = &st;
	r = info_ask(c, &req, &call, VRAM__RESPONSE__BODY_STATS, "stats");
	if (r < 0)
		goto out;
	const Vram__StatsReply *s = call.msg->response->stats;
	copy_str(out->backend, sizeof(out->backend), s->backend);
	copy_str(out->daemon_version, sizeof(out->daemon_version),
		 s->daemon_version);
	out->sessions = s->sessions;
	out->pools = s->pools;
	out->used_bytes = s->used_bytes;
	out->backup_bytes = s->backup_bytes;
	out->open_fds = s->open_fds;
	out->uptime_ms = s->uptime_ms;
	out->disk_backup_bytes = s->disk_backup_bytes;
	for (size_t i = 0;
	     i < s->n_devices && out->n_devices < VRAM_MAX_DEVICES; i++) {
		const Vram__DeviceInfo *d = s->devices[i];
		if (!d)
			continue;
		struct vram_device_info *o = &out->devices[out->n_devices++];
		o->index = d->index;
		copy_str(o->uuid, sizeof(o->uuid), d->uuid);
		o->total_bytes = d->total_bytes;
		o->free_bytes = d->free_bytes;
		o->granularity = d->granularity;
	}
	abi_write(user, &full, sizeof(full));
out:
	call_release(&call);
	registry_client_leave(c);
	return error_finish(eg, r);
}

int vram_audit(vram_client *c, size_t entry_size,
	       struct vram_process_usage **out, size_t *n, int *driver_info)
{
	unsigned eg = error_generation();
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__Audit au = VRAM__AUDIT__INIT;
	struct call call = { 0 };
	int r;

	if (!out || !n)
		return error_finish(
			eg, error_set(EINVAL,
				      "vram_audit: out and n are required"));
	*out = NULL;
	*n = 0;
	r = abi_check_entry(entry_size, ABI_MIN_PROCESS_USAGE,
			    _Alignof(struct vram_process_usage),
			    "vram_process_usage");
	if (r < 0)
		return error_finish(eg, r);
	r = registry_client_enter(c);
	if (r < 0)
		return error_finish(eg, r);
	req.body_case = VRAM__REQUEST__BODY_AUDIT;
	req.audit = &au;
	r = info_ask(c, &req, &call, VRAM__RESPONSE__BODY_AUDIT, "audit");
	if (r < 0)
		goto out;
	const Vram__AuditReply *a = call.msg->response->audit;
	char *u = calloc(a->n_processes + 1, entry_size);
	if (!u) {
		r = error_set(ENOMEM, "out of memory");
		goto out;
	}
	size_t k = 0;
	for (size_t i = 0; i < a->n_processes; i++) {
		const Vram__ProcessUsage *p = a->processes[i];
		struct vram_process_usage e = { 0 };
		if (!p)
			continue;
		e.size = (uint32_t)entry_size;
		e.pid = p->pid;
		e.device = p->device;
		e.used_known = p->used_known;
		e.used_bytes = p->used_bytes;
		e.vramd_bytes = p->vramd_bytes;
		e.is_vramd = p->is_vramd;
		copy_str(e.name, sizeof(e.name), p->name);
		e.outside_reported = p->outside_reported;
		e.outside_flags = p->expandable_segments ?
					  VRAM_OUTSIDE_EXPANDABLE :
					  0;
		e.outside_bytes = p->outside_bytes;
		e.outside_count = p->outside_count;
		memcpy(entry_at(u, entry_size, k++), &e,
		       entry_size < sizeof(e) ? entry_size : sizeof(e));
	}
	*out = (struct vram_process_usage *)u;
	*n = k;
	if (driver_info)
		*driver_info = a->driver_info;
out:
	call_release(&call);
	registry_client_leave(c);
	return error_finish(eg, r);
}

/* The quota entries of a stats reply, in the caller's layout. */
static int quotas_convert(const Vram__StatsReply *s, size_t entry_size,
			  struct vram_quota **out, size_t *n)
{
	char *a = calloc(s->n_quotas + 1, entry_size);
	size_t k = 0;

	if (!a)
		return error_set(ENOMEM, "out of memory");
	for (size_t i = 0; i < s->n_quotas; i++) {
		const Vram__QuotaUsage *q = s->quotas[i];
		struct vram_quota e = { 0 };
		if (!q)
			continue;
		e.size = (uint32_t)entry_size;
		e.group = q->group;
		e.id = q->id;
		e.from_default = q->from_default;
		e.exempt = q->exempt;
		e.pools_limit = q->pools_limit;
		e.device_limit = q->device_limit;
		e.host_limit = q->host_limit;
		e.pools = q->pools;
		e.host_bytes = q->host_bytes;
		for (size_t d = 0;
		     d < q->n_device_bytes && d < VRAM_MAX_DEVICES; d++)
			e.device_bytes[e.n_devices++] = q->device_bytes[d];
		memcpy(entry_at(a, entry_size, k++), &e,
		       entry_size < sizeof(e) ? entry_size : sizeof(e));
	}
	*out = (struct vram_quota *)a;
	*n = k;
	return 0;
}

int vram_quotas(vram_client *c, size_t entry_size, struct vram_quota **out,
		size_t *n)
{
	unsigned eg = error_generation();
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__Stats st = VRAM__STATS__INIT;
	struct call call = { 0 };
	int r;

	if (!out || !n)
		return error_finish(
			eg, error_set(EINVAL,
				      "vram_quotas: out and n are required"));
	*out = NULL;
	*n = 0;
	r = abi_check_entry(entry_size, ABI_MIN_QUOTA,
			    _Alignof(struct vram_quota), "vram_quota");
	if (r < 0)
		return error_finish(eg, r);
	r = registry_client_enter(c);
	if (r < 0)
		return error_finish(eg, r);
	/* The quotas come with the daemon's stats (StatsReply.quotas). */
	req.body_case = VRAM__REQUEST__BODY_STATS;
	req.stats = &st;
	r = info_ask(c, &req, &call, VRAM__RESPONSE__BODY_STATS, "stats");
	if (r == 0)
		r = quotas_convert(call.msg->response->stats, entry_size, out,
				   n);
	call_release(&call);
	registry_client_leave(c);
	return error_finish(eg, r);
}

int vram_report_outside(vram_client *c, const struct vram_outside *o)
{
	unsigned eg = error_generation();
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__OutsideReport m = VRAM__OUTSIDE_REPORT__INIT;
	struct call call = { 0 };
	int r;

	if (!o)
		return error_finish(eg, error_set(EINVAL,
						  "vram_report_outside: o is "
						  "required"));
	r = abi_check(o->size, ABI_END(struct vram_outside, count),
		      "vram_outside");
	if (r < 0)
		return error_finish(eg, r);
	r = registry_client_enter(c);
	if (r < 0)
		return error_finish(eg, r);
	m.bytes = o->bytes;
	m.count = o->count;
	m.expandable_segments = (o->flags & VRAM_OUTSIDE_EXPANDABLE) != 0;
	req.body_case = VRAM__REQUEST__BODY_OUTSIDE_REPORT;
	req.outside_report = &m;
	r = call_run(c, &req, &call, -1);
	call_release(&call);
	registry_client_leave(c);
	return error_finish(eg, r);
}
