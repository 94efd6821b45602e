/* Inspection: list, stats and audit. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call.h"
#include "client.h"
#include "error.h"
#include "message.h"
#include "registry.h"

static void copy_str(char *dst, size_t n, const char *src)
{
	snprintf(dst, n, "%s", src ? src : "");
}

void vram_pool_info_free(struct vram_pool_info *infos, size_t n)
{
	if (!infos)
		return;
	for (size_t i = 0; i < n; i++)
		free(infos[i].mappers);
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

int vram_list(vram_client *c, const struct vram_selector *sel,
	      struct vram_pool_info **out, size_t *n)
{
	unsigned eg = error_generation();
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__List list = VRAM__LIST__INIT;
	Vram__Selector s = VRAM__SELECTOR__INIT;
	struct call call = { 0 };
	struct vram_pool_info *infos = NULL;
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
	r = registry_client_enter(c);
	if (r < 0)
		return error_finish(eg, r);
	if (sel) {
		message_selector_to_wire(sel, &s);
		list.selector = &s;
	}
	req.body_case = VRAM__REQUEST__BODY_LIST;
	req.list = &list;
	r = call_run(c, &req, &call, -1);
	if (r < 0)
		goto out;
	const Vram__Response *resp = call.msg->response;
	if (resp->body_case != VRAM__RESPONSE__BODY_LIST || !resp->list) {
		r = error_set(EPROTO,
			      "vramd answered a list with something else");
		goto out;
	}
	const Vram__ListReply *lr = resp->list;
	if (lr->n_pools) {
		infos = calloc(lr->n_pools, sizeof(*infos));
		if (!infos) {
			r = error_set(ENOMEM, "out of memory");
			goto out;
		}
	}
	for (size_t i = 0; i < lr->n_pools; i++) {
		if (!lr->pools[i])
			continue;
		if (info_convert(&infos[count], lr->pools[i]) < 0) {
			vram_pool_info_free(infos, count + 1);
			infos = NULL;
			count = 0;
			r = error_set(ENOMEM, "out of memory");
			goto out;
		}
		count++;
	}
	if (count == 0) {
		free(infos);
		infos = NULL;
	}
	*out = infos;
	*n = count;
out:
	call_release(&call);
	registry_client_leave(c);
	return error_finish(eg, r);
}

int vram_stats(vram_client *c, struct vram_stats *out)
{
	unsigned eg = error_generation();
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__Stats st = VRAM__STATS__INIT;
	struct call call = { 0 };
	int r;

	if (!out)
		return error_finish(
			eg, error_set(EINVAL, "vram_stats: out is required"));
	memset(out, 0, sizeof(*out));
	r = registry_client_enter(c);
	if (r < 0)
		return error_finish(eg, r);
	req.body_case = VRAM__REQUEST__BODY_STATS;
	req.stats = &st;
	r = call_run(c, &req, &call, -1);
	if (r < 0)
		goto out;
	const Vram__Response *resp = call.msg->response;
	if (resp->body_case != VRAM__RESPONSE__BODY_STATS || !resp->stats) {
		r = error_set(EPROTO,
			      "vramd answered stats with something else");
		goto out;
	}
	const Vram__StatsReply *s = resp->stats;
	copy_str(out->backend, sizeof(out->backend), s->backend);
	copy_str(out->daemon_version, sizeof(out->daemon_version),
		 s->daemon_version);
	out->sessions = s->sessions;
	out->pools = s->pools;
	out->used_bytes = s->used_bytes;
	out->backup_bytes = s->backup_bytes;
	out->open_fds = s->open_fds;
	out->uptime_ms = s->uptime_ms;
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
out:
	call_release(&call);
	registry_client_leave(c);
	return error_finish(eg, r);
}

int vram_audit(vram_client *c, struct vram_process_usage **out, size_t *n,
	       int *driver_info)
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
	r = registry_client_enter(c);
	if (r < 0)
		return error_finish(eg, r);
	req.body_case = VRAM__REQUEST__BODY_AUDIT;
	req.audit = &au;
	r = call_run(c, &req, &call, -1);
	if (r < 0)
		goto out;
	const Vram__Response *resp = call.msg->response;
	if (resp->body_case != VRAM__RESPONSE__BODY_AUDIT || !resp->audit) {
		r = error_set(EPROTO,
			      "vramd answered audit with something else");
		goto out;
	}
	const Vram__AuditReply *a = resp->audit;
	struct vram_process_usage *u = calloc(a->n_processes + 1, sizeof(*u));
	if (!u) {
		r = error_set(ENOMEM, "out of memory");
		goto out;
	}
	size_t k = 0;
	for (size_t i = 0; i < a->n_processes; i++) {
		const Vram__ProcessUsage *p = a->processes[i];
		if (!p)
			continue;
		u[k].pid = p->pid;
		u[k].device = p->device;
		u[k].used_known = p->used_known;
		u[k].used_bytes = p->used_bytes;
		u[k].vramd_bytes = p->vramd_bytes;
		u[k].is_vramd = p->is_vramd;
		copy_str(u[k].name, sizeof(u[k].name), p->name);
		k++;
	}
	*out = u;
	*n = k;
	if (driver_info)
		*driver_info = a->driver_info;
out:
	call_release(&call);
	registry_client_leave(c);
	return error_finish(eg, r);
}
