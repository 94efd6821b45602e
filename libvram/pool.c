/* SPDX-License-Identifier: Apache-2.0 */
/* A pool in this process: the object, its client's list, its geometry,
 * the completions that build it from the daemon's replies, and the names
 * of states and policies. See pool.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "attr.h"
#include "mapping.h"
#include "message.h"
#include "pool.h"
#include "registry.h"
#include "suballoc.h"

struct vram_pool *pool_find(struct vram_client *c, uint64_t id)
{
	for (struct vram_pool *p = c->pools; p; p = p->next)
		if (p->id == id)
			return p;
	return NULL;
}

struct vram_pool *pool_find_name(struct vram_client *c, const char *name)
{
	for (struct vram_pool *p = c->pools; p; p = p->next)
		if (strcmp(p->name, name) == 0)
			return p;
	return NULL;
}

void pool_link(struct vram_pool *p)
{
	struct vram_client *c = p->client;

	p->next = c->pools;
	c->pools = p;
	p->linked = true;
}

void pool_unlink(struct vram_pool *p)
{
	if (!p->linked)
		return;
	for (struct vram_pool **pp = &p->client->pools; *pp;
	     pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	}
	p->next = NULL;
	p->linked = false;
}

void pool_free(struct vram_pool *p)
{
	if (!p)
		return;
	mapping_release(&p->map);
	suballoc_fini(&p->sa);
	free(p);
}

const struct client_device *pool_device(const struct vram_client *c,
					unsigned dev)
{
	for (unsigned i = 0; i < c->n_devices; i++)
		if (c->devices[i].index == dev)
			return &c->devices[i];
	return NULL;
}

const struct client_device *pool_device_by_uuid(const struct vram_client *c,
						const char *uuid)
{
	for (unsigned i = 0; i < c->n_devices; i++)
		if (strcmp(c->devices[i].uuid, uuid) == 0)
			return &c->devices[i];
	return NULL;
}

uint64_t pool_round_up(uint64_t x, uint64_t a)
{
	uint64_t r = x % a;

	if (r == 0)
		return x;
	if (x > UINT64_MAX - (a - r))
		return 0;
	return x + (a - r);
}

static uint64_t pow2_at_least(uint64_t x)
{
	uint64_t p = 1;

	while (p < x && p < (1ull << 62))
		p <<= 1;
	return p;
}

void pool_geometry(struct vram_pool *p, const struct client_device *d)
{
	uint64_t gran = d && d->granularity ? d->granularity : MIN_ALIGN;

	if (gran < 4096)
		gran = 4096;
	p->granularity = gran;
	p->align = pow2_at_least(gran > MIN_ALIGN ? gran : MIN_ALIGN);
}

struct vram_pool *pool_new(struct vram_client *c, unsigned dev, bool readonly)
{
	struct vram_pool *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->client = c;
	p->dev = dev;
	p->readonly = readonly;
	mapping_init(&p->map, c->vmm, dev, readonly);
	suballoc_init(&p->sa, 0);
	return p;
}

int pool_complete(struct vram_client *c, struct call *call,
		  const Vram__Response *r, const struct wire_frame *f)
{
	struct pool_ctx *ctx = call->arg;
	struct vram_pool *p = ctx->pool;
	struct mapping_desc *d = NULL;
	int rc;

	if (r->body_case != VRAM__RESPONSE__BODY_POOL || !r->pool ||
	    !r->pool->info)
		return error_set(EPROTO, "vramd answered without a pool");
	const Vram__PoolReply *pr = r->pool;
	const Vram__PoolInfo *info = pr->info;

	p->id = info->id;
	/* Another uid's pool (an admin opened it) is addressed UID:NAME:
	 * the daemon scopes names per uid, and a bare name would be ours. */
	if (info->owner_uid != (uint32_t)geteuid())
		snprintf(p->name, sizeof(p->name), "%u:%s", info->owner_uid,
			 info->name ? info->name : "");
	else
		snprintf(p->name, sizeof(p->name), "%s",
			 info->name ? info->name : "");
	snprintf(p->tag, sizeof(p->tag), "%s", info->tag ? info->tag : "");
	if (pool_find(c, info->id))
		return error_set(EALREADY,
				 "pool %s is already open in this client",
				 p->name);
	p->dev = info->device;
	p->map.dev = info->device;
	pool_geometry(p, pool_device(c, info->device));
	p->policy = message_policy_from_wire(info->policy);
	p->flags = info->flags;
	p->reserve_bytes =
		info->reserve_bytes ? info->reserve_bytes : ctx->reserve;
	if (p->reserve_bytes == 0)
		return error_set(EPROTO, "vramd reports pool %s with no range",
				 p->name);
	uint64_t reserve = pool_round_up(p->reserve_bytes, p->align);
	if (reserve == 0)
		return error_set(EPROTO,
				 "pool %s: range of %llu bytes is too large",
				 p->name, (unsigned long long)p->reserve_bytes);
	rc = mapping_reserve(&p->map, reserve, p->align);
	if (rc < 0)
		return error_set(
			rc,
			"cannot reserve %llu bytes of address space for pool %s: %s",
			(unsigned long long)reserve, p->name, strerror(-rc));

	/* The backup: only a writer ever saves or restores, so a read-only
	 * mapper leaves it alone. */
	if (p->policy != VRAM_POLICY_DISCARD && !p->readonly) {
		int idx = pr->backup_fd_index;
		if (idx < 0 || (unsigned)idx >= f->nfds) {
			rc = error_set(
				EPROTO,
				"vramd sent host-policy pool %s without its backup",
				p->name);
			goto fail;
		}
		/* Pinned only for a host backup that asks for it, and from
		 * the start only when it is retained (a released one is
		 * pinned around each copy, so its pages can go back). */
		p->map.backup_pin = p->policy == VRAM_POLICY_HOST &&
				    !(p->flags & VRAM_POOL_PAGEABLE_BACKUP);
		p->map.backup_retain =
			!(p->flags & VRAM_POOL_RELEASE_BACKUP);
		p->map.backup_sync = p->policy == VRAM_POLICY_DISK;
		rc = mapping_backup_map(&p->map, f->fds[idx]);
		if (rc < 0) {
			rc = error_set(rc,
				       "cannot map the backup of pool %s: %s",
				       p->name, strerror(-rc));
			goto fail;
		}
	}

	p->size = info->bytes;
	/* A pool the daemon is resuming comes with its chunks: it is mapped
	 * here and active, and its RESUME event (if any) remaps it. */
	p->state = message_state_from_wire(info->state);
	if (p->state == VRAM_STATE_RESUMING)
		p->state = VRAM_STATE_ACTIVE;
	/* Chunks come with an active pool; a pool that is pausing or paused
	 * is mapped by the RESUME event that brings it back. */
	if (pr->n_chunks > 0 && p->state == VRAM_STATE_ACTIVE) {
		rc = mapping_descs_from_wire(pr->chunks, pr->n_chunks, f, &d);
		if (rc < 0) {
			rc = error_set(
				rc, "vramd sent a bad chunk list for pool %s",
				p->name);
			goto fail;
		}
		rc = mapping_append(&p->map, d, pr->n_chunks, 1);
		free(d);
		if (rc < 0) {
			rc = error_set(rc, "cannot map pool %s: %s", p->name,
				       strerror(-rc));
			goto fail;
		}
		p->size = p->map.size;
	}

	if (ctx->create) {
		p->owner = true;
	} else {
		/* Opening makes us the owner only of an orphaned persistent
		 * pool; the daemon then names our pid as its owner. Another
		 * client of this process may own it too: that one keeps it. */
		p->owner = !p->readonly && (info->flags & VRAM_POOL_PERSIST) &&
			   info->owner_pid == (uint32_t)getpid() &&
			   !registry_pool_owned(info->id, p->name);
	}
	if (p->owner) {
		/* A re-opened pool's content stays where it is: sub-allocation
		 * starts after it. */
		suballoc_fini(&p->sa);
		suballoc_init(&p->sa, ctx->create ? 0 : p->size);
		if (p->map.size > p->sa.size &&
		    suballoc_grow(&p->sa, p->map.size) < 0) {
			rc = error_set(ENOMEM, "out of memory");
			goto fail;
		}
	}
	pool_link(p);
	return 0;
fail:
	mapping_release(&p->map);
	return rc;
}

int pool_complete_grow(struct vram_client *c UNUSED, struct call *call,
		       const Vram__Response *r, const struct wire_frame *f)
{
	struct vram_pool *p = call->arg;
	struct mapping_desc *d = NULL;
	int rc;

	if (r->body_case != VRAM__RESPONSE__BODY_GROW || !r->grow)
		return error_set(EPROTO,
				 "vramd answered a grow without chunks");
	if (p->dropped)
		return error_set(ENOENT, "pool %s was dropped", p->name);
	rc = mapping_descs_from_wire(r->grow->chunks, r->grow->n_chunks, f, &d);
	if (rc < 0)
		return error_set(rc, "vramd sent a bad chunk list for pool %s",
				 p->name);
	/* A pool paused meanwhile keeps the chunks in its layout only. */
	rc = mapping_append(&p->map, d, r->grow->n_chunks,
			    p->state == VRAM_STATE_ACTIVE);
	free(d);
	if (rc < 0)
		return error_set(rc, "cannot map %zu new chunks of pool %s: %s",
				 r->grow->n_chunks, p->name, strerror(-rc));
	p->size = p->map.size;
	if (p->owner && suballoc_grow(&p->sa, p->map.size) < 0)
		return error_set(ENOMEM, "out of memory");
	return 0;
}

const char *vram_state_name(enum vram_state s)
{
	switch (s) {
	case VRAM_STATE_ACTIVE:
		return "active";
	case VRAM_STATE_PAUSING:
		return "pausing";
	case VRAM_STATE_PAUSED:
		return "paused";
	case VRAM_STATE_RESUMING:
		return "resuming";
	case VRAM_STATE_INVALID:
		return "invalid";
	}
	return "unknown";
}

const char *vram_policy_name(enum vram_policy p)
{
	switch (p) {
	case VRAM_POLICY_DISCARD:
		return "discard";
	case VRAM_POLICY_HOST:
		return "host";
	case VRAM_POLICY_DISK:
		return "disk";
	}
	return "unknown";
}
