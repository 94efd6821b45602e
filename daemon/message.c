/* SPDX-License-Identifier: Apache-2.0 */
/* Pieces of messages several replies and events share, and the
 * conversions of the daemon's enums to the wire's. */
#include "message.h"

#include <errno.h>
#include <stdlib.h>

int chunk_list_make(struct chunk_list *l, const struct pool *p, unsigned first,
		    unsigned n, unsigned extra_fds)
{
	l->n = n;
	l->chunks = calloc(n + 1, sizeof(*l->chunks));
	l->ptrs = calloc(n + 1, sizeof(*l->ptrs));
	l->fds = calloc(n + extra_fds + 1, sizeof(*l->fds));
	if (!l->chunks || !l->ptrs || !l->fds) {
		chunk_list_free(l);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < n; i++) {
		const struct chunk *c = &p->chunks[first + i];
		vram__chunk__init(&l->chunks[i]);
		l->chunks[i].offset = c->offset;
		l->chunks[i].size = c->size;
		l->chunks[i].fd_index = (int32_t)i;
		l->ptrs[i] = &l->chunks[i];
		l->fds[i] = c->fd;
	}
	return 0;
}

void chunk_list_free(struct chunk_list *l)
{
	free(l->chunks);
	free(l->ptrs);
	free(l->fds);
	l->chunks = NULL;
	l->ptrs = NULL;
	l->fds = NULL;
	l->n = 0;
}

unsigned device_infos_fill(struct backend *b, Vram__DeviceInfo *dev,
			   Vram__DeviceInfo **ptrs)
{
	for (unsigned i = 0; i < b->n_devices; i++) {
		const struct backend_device *d = &b->devices[i];
		uint64_t free_b = 0, total = d->total_bytes;
		backend_mem_info(b, i, &free_b, &total);
		vram__device_info__init(&dev[i]);
		dev[i].index = d->index;
		dev[i].uuid = (char *)d->uuid;
		dev[i].total_bytes = total;
		dev[i].free_bytes = free_b;
		dev[i].granularity = d->granularity;
		ptrs[i] = &dev[i];
	}
	return b->n_devices;
}

unsigned device_frees_fill(const struct backend *b, const uint64_t *before,
			   const uint64_t *after, Vram__DeviceFree *dev,
			   Vram__DeviceFree **ptrs)
{
	unsigned n = b->n_devices < BACKEND_MAX_DEVICES ? b->n_devices :
							  BACKEND_MAX_DEVICES;

	for (unsigned d = 0; d < n; d++) {
		vram__device_free__init(&dev[d]);
		dev[d].index = b->devices[d].index;
		dev[d].uuid = (char *)b->devices[d].uuid;
		dev[d].free_before = before[d];
		dev[d].free_after = after[d];
		ptrs[d] = &dev[d];
	}
	return n;
}

Vram__EventKind message_event_kind(enum pool_round round)
{
	switch (round) {
	case POOL_ROUND_SAVE:
		return VRAM__EVENT_KIND__EVENT_SAVE;
	case POOL_ROUND_PAUSE:
		return VRAM__EVENT_KIND__EVENT_PAUSE;
	case POOL_ROUND_RESUME:
		return VRAM__EVENT_KIND__EVENT_RESUME;
	case POOL_ROUND_RESUME_MORE:
		return VRAM__EVENT_KIND__EVENT_RESUME_MORE;
	}
	abort(); /* not an enum pool_round */
}

Vram__State message_pool_state(enum pool_state s)
{
	switch (s) {
	case POOL_ACTIVE:
		return VRAM__STATE__STATE_ACTIVE;
	case POOL_PAUSING_SAVE:
	case POOL_PAUSING_UNMAP:
	case POOL_PAUSING_UNDO_SAVE:
	case POOL_PAUSING_UNDO:
		return VRAM__STATE__STATE_PAUSING;
	case POOL_PAUSED:
		return VRAM__STATE__STATE_PAUSED;
	case POOL_RESUMING_RESTORE:
	case POOL_RESUMING_MAP:
		return VRAM__STATE__STATE_RESUMING;
	}
	abort(); /* not an enum pool_state */
}

Vram__Policy policy_to_wire(enum pool_policy p)
{
	return p == POOL_HOST ? VRAM__POLICY__POLICY_HOST :
	       p == POOL_DISK ? VRAM__POLICY__POLICY_DISK :
				VRAM__POLICY__POLICY_DISCARD;
}

int pool_info_fill(struct pool *p, Vram__PoolInfo *info,
		   Vram__Mapper **mappers_out)
{
	unsigned n = pool_mapper_count(p), i = 0;
	Vram__Mapper *m = calloc(n ? n : 1, sizeof(*m));
	Vram__Mapper **ptrs = calloc(n ? n : 1, sizeof(*ptrs));

	if (!m || !ptrs) {
		free(m);
		free(ptrs);
		return -ENOMEM;
	}
	for (struct mapper *mp = p->mappers; mp; mp = mp->next, i++) {
		vram__mapper__init(&m[i]);
		m[i].pid = mp->who.pid;
		m[i].uid = mp->who.uid;
		m[i].name = mp->who.name;
		m[i].access = mp->readonly ? VRAM__ACCESS__ACCESS_RO
					   : VRAM__ACCESS__ACCESS_RW;
		ptrs[i] = &m[i];
	}
	vram__pool_info__init(info);
	info->id = p->id;
	info->name = p->name;
	info->tag = p->tag;
	info->device = p->device;
	info->state = message_pool_state(p->state);
	info->policy = policy_to_wire(p->policy);
	info->bytes = p->bytes;
	info->reserve_bytes = p->reserve;
	info->chunks = p->n_chunks;
	info->owner_pid = p->owner ? p->owner_id.pid : 0;
	info->owner_uid = p->owner_id.uid;
	info->owner_name = p->owner_id.name;
	info->owner_instance = p->owner_id.instance;
	info->owner_job = p->owner_id.job;
	info->owner_cgroup = p->owner_id.cgroup;
	info->flags = p->flags;
	/* What the backup holds, paused or not: a retained backup (or one
	 * registered by a client) holds its pages while the pool is active. */
	info->backup_bytes = pool_backup_held(p);
	info->n_mappers = n;
	info->mappers = ptrs;
	*mappers_out = m;
	return 0;
}

void pool_info_clear(Vram__PoolInfo *info, Vram__Mapper *mappers)
{
	free(info->mappers);
	free(mappers);
}

int quota_usages_fill(const struct quota_line *lines, unsigned n,
		      unsigned n_devices, Vram__QuotaUsage **msgs,
		      Vram__QuotaUsage ***ptrs)
{
	Vram__QuotaUsage *m = calloc(n + 1, sizeof(*m));
	Vram__QuotaUsage **p = calloc(n + 1, sizeof(*p));

	*msgs = m;
	*ptrs = p;
	if (!m || !p) {
		quota_usages_free(m, p);
		return -ENOMEM;
	}
	if (n_devices > BACKEND_MAX_DEVICES)
		n_devices = BACKEND_MAX_DEVICES;
	for (unsigned i = 0; i < n; i++) {
		const struct quota_line *l = &lines[i];
		vram__quota_usage__init(&m[i]);
		m[i].group = l->group;
		m[i].id = l->id;
		m[i].from_default = l->from_default;
		m[i].exempt = l->exempt;
		m[i].pools_limit = l->pools_limit;
		m[i].device_limit = l->device_limit;
		m[i].host_limit = l->host_limit;
		m[i].pools = l->pools;
		m[i].host_bytes = l->host_bytes;
		/* The figures point into lines, valid while the reply is
		 * built (quota_line's array is the caller's). */
		m[i].n_device_bytes = n_devices;
		m[i].device_bytes = (uint64_t *)l->device_bytes;
		p[i] = &m[i];
	}
	return 0;
}

void quota_usages_free(Vram__QuotaUsage *msgs, Vram__QuotaUsage **ptrs)
{
	free(msgs);
	free(ptrs);
}
