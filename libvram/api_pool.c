/* SPDX-License-Identifier: Apache-2.0 */
/* The public pool calls: create, open, close, drop, sub-allocation, and
 * the accessors. The pool object itself is pool.c's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "abi.h"
#include "call.h"
#include "client.h"
#include "error.h"
#include "log.h"
#include "message.h"
#include "pool.h"
#include "registry.h"
#include "suballoc.h"

/* Every pool creation flag this libvram knows. */
#define VRAM_POOL_FLAGS_ALL_                           \
	(VRAM_POOL_PERSIST | VRAM_POOL_RETAIN_BACKUP | \
	 VRAM_POOL_PAGEABLE_BACKUP | VRAM_POOL_RELEASE_BACKUP)

#define GROW_MIN (64ull << 20)	   /* a pool grows by at least 64 MiB */
#define GROW_MAX_STEP (1ull << 30) /* and geometrically up to 1 GiB */

static int check_name(const char *what, const char *s, size_t max,
		      bool required)
{
	if (!s)
		return required ? error_set(EINVAL, "%s is required", what) : 0;
	size_t n = strlen(s);
	if (required && n == 0)
		return error_set(EINVAL, "%s is empty", what);
	if (n > max)
		return error_set(EINVAL, "%s is longer than %zu bytes", what,
				 max);
	return 0;
}

/* Tells the daemon, without waiting for its answer, that this client no
 * longer maps pool id (a close) or that the pool it just made must go (a
 * drop): the undo of a create or open that failed here, and a close. */
static void post_close(struct vram_client *c, uint64_t id)
{
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__PoolClose pc = VRAM__POOL_CLOSE__INIT;

	pc.pool_id = id;
	req.body_case = VRAM__REQUEST__BODY_POOL_CLOSE;
	req.pool_close = &pc;
	call_post(c, &req);
}

static void post_drop(struct vram_client *c, const char *name)
{
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__PoolDrop pd = VRAM__POOL_DROP__INIT;

	pd.name = (char *)name;
	req.body_case = VRAM__REQUEST__BODY_POOL_DROP;
	req.pool_drop = &pd;
	call_post(c, &req);
}

int vram_pool_create(vram_client *c, const struct vram_pool_options *in,
		     vram_pool **out)
{
	unsigned eg = error_generation();
	struct vram_pool_options o, *opts = &o;
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__PoolCreate pc = VRAM__POOL_CREATE__INIT;
	struct call call = { 0 };
	struct pool_ctx ctx = { 0 };
	struct vram_pool *p;
	int r;

	if (out)
		*out = NULL;
	if (!out || !in)
		return error_finish(
			eg,
			error_set(
				EINVAL,
				"vram_pool_create: out and opts are required"));
	r = abi_read(&o, sizeof(o), in, ABI_MIN_POOL_OPTIONS,
		     "vram_pool_options");
	if (r < 0)
		return error_finish(eg, r);
	if ((r = check_name("pool name", opts->name, NAME_MAX_LEN, true)) < 0 ||
	    (r = check_name("pool tag", opts->tag, TAG_MAX_LEN, false)) < 0)
		return error_finish(eg, r);
	if (opts->policy != VRAM_POLICY_DISCARD &&
	    opts->policy != VRAM_POLICY_HOST &&
	    opts->policy != VRAM_POLICY_DISK)
		return error_finish(eg, error_set(EINVAL, "unknown policy %d",
						  (int)opts->policy));
	if (opts->flags & ~VRAM_POOL_FLAGS_ALL_)
		return error_finish(
			eg, error_set(EINVAL, "unknown pool flags 0x%x",
				      opts->flags & ~VRAM_POOL_FLAGS_ALL_));
	if ((opts->flags & VRAM_POOL_RETAIN_BACKUP) &&
	    (opts->flags & VRAM_POOL_RELEASE_BACKUP))
		return error_finish(
			eg, error_set(EINVAL, "a backup cannot be both retained "
					      "and released"));
	r = registry_client_enter(c);
	if (r < 0)
		return error_finish(eg, r);

	unsigned device = opts->device;
	if (opts->device_uuid) {
		const struct client_device *u =
			pool_device_by_uuid(c, opts->device_uuid);
		if (!u) {
			r = error_set(ENODEV, "vramd has no device %s",
				      opts->device_uuid);
			goto out;
		}
		device = u->index;
	}
	const struct client_device *d = pool_device(c, device);
	if (!d) {
		r = error_set(ENODEV, "vramd has no device %u", device);
		goto out;
	}
	p = pool_new(c, device, false);
	if (!p) {
		r = error_set(ENOMEM, "out of memory");
		goto out;
	}
	pool_geometry(p, d);
	uint64_t reserve =
		opts->reserve_bytes ? opts->reserve_bytes : d->total_bytes;
	reserve = reserve ? pool_round_up(reserve, p->align) : 0;
	if (reserve == 0) {
		pool_free(p);
		r = error_set(
			EINVAL,
			"pool %s: no range size (device %u reports 0 bytes)",
			opts->name, device);
		goto out;
	}

	pc.name = (char *)opts->name;
	pc.tag = (char *)(opts->tag ? opts->tag : "default");
	pc.device = device;
	pc.policy = message_policy_to_wire(opts->policy);
	pc.reserve_bytes = reserve;
	pc.flags = opts->flags;
	req.body_case = VRAM__REQUEST__BODY_POOL_CREATE;
	req.pool_create = &pc;
	ctx.pool = p;
	ctx.create = true;
	ctx.reserve = reserve;
	call.complete = pool_complete;
	call.arg = &ctx;
	r = call_run(c, &req, &call, -1);
	if (r == 0 && c->closing)
		r = error_set(EPIPE, "the client was closed");
	if (r < 0) {
		pool_unlink(p);
		if (call.remote_ok && !c->closing) {
			/* The daemon made it but we cannot use it: undo. */
			post_drop(c, opts->name);
		}
		pool_free(p);
	} else {
		registry_pool_add(p);
		*out = p;
		log_write(
			VRAM_LOG_INFO,
			"created pool %s (id %llu, %llu-byte range at 0x%llx)",
			p->name, (unsigned long long)p->id,
			(unsigned long long)p->map.reserve,
			(unsigned long long)p->map.base);
	}
	call_release(&call);
out:
	registry_client_leave(c);
	return error_finish(eg, r);
}

int vram_pool_open(vram_client *c, const char *name, unsigned flags,
		   vram_pool **out)
{
	unsigned eg = error_generation();
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__PoolOpen po = VRAM__POOL_OPEN__INIT;
	struct call call = { 0 };
	struct pool_ctx ctx = { 0 };
	struct vram_pool *p;
	int r;

	if (out)
		*out = NULL;
	if (!out)
		return error_finish(
			eg,
			error_set(EINVAL, "vram_pool_open: out is required"));
	if ((r = check_name("pool name", name, ADDRESS_MAX_LEN, true)) < 0)
		return error_finish(eg, r);
	if (flags & ~VRAM_OPEN_READONLY)
		return error_finish(eg,
				    error_set(EINVAL, "unknown open flags 0x%x",
					      flags & ~VRAM_OPEN_READONLY));
	r = registry_client_enter(c);
	if (r < 0)
		return error_finish(eg, r);
	if (pool_find_name(c, name)) {
		r = error_set(EALREADY,
			      "pool %s is already open in this client", name);
		goto out;
	}
	p = pool_new(c, 0, (flags & VRAM_OPEN_READONLY) != 0);
	if (!p) {
		r = error_set(ENOMEM, "out of memory");
		goto out;
	}
	po.name = (char *)name;
	po.access =
		p->readonly ? VRAM__ACCESS__ACCESS_RO : VRAM__ACCESS__ACCESS_RW;
	req.body_case = VRAM__REQUEST__BODY_POOL_OPEN;
	req.pool_open = &po;
	ctx.pool = p;
	call.complete = pool_complete;
	call.arg = &ctx;
	r = call_run(c, &req, &call, -1);
	if (r == 0 && c->closing)
		r = error_set(EPIPE, "the client was closed");
	if (r < 0) {
		bool was_linked = p->linked;
		pool_unlink(p);
		/* Stop being a mapper of what we could not map, unless the
		 * failure was that this client maps it already. */
		if (call.remote_ok && !c->closing &&
		    (was_linked || r != -EALREADY)) {
			post_close(c, p->id);
		}
		pool_free(p);
	} else {
		registry_pool_add(p);
		*out = p;
		log_write(VRAM_LOG_INFO, "opened pool %s (id %llu, %s%s)",
			  p->name, (unsigned long long)p->id,
			  p->readonly ? "read-only" : "read-write",
			  p->owner ? ", owner" : "");
	}
	call_release(&call);
out:
	registry_client_leave(c);
	return error_finish(eg, r);
}

void vram_pool_close(vram_pool *p)
{
	struct vram_client *c;
	bool forked;

	if (!registry_pool_take(p, &forked) || forked)
		return;
	c = p->client;
	pthread_mutex_lock(&c->lock);
	while (__atomic_load_n(&p->users, __ATOMIC_SEQ_CST) != 0)
		pthread_cond_wait(&c->cond, &c->lock);
	if (p->linked) {
		pool_unlink(p);
		/* Events for it from now on find no pool and are acked as
		 * done. The daemon's answer is not waited for: closing never
		 * blocks on the daemon. */
		if (!p->dropped && !c->broken)
			post_close(c, p->id);
	}
	log_write(VRAM_LOG_DEBUG, "closed pool %s", p->name);
	pool_free(p);
	registry_client_leave(c);
}

int vram_pool_drop(vram_client *c, const char *name)
{
	unsigned eg = error_generation();
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__PoolDrop pd = VRAM__POOL_DROP__INIT;
	struct call call = { 0 };
	int r;

	if ((r = check_name("pool name", name, ADDRESS_MAX_LEN, true)) < 0)
		return error_finish(eg, r);
	r = registry_client_enter(c);
	if (r < 0)
		return error_finish(eg, r);
	pd.name = (char *)name;
	req.body_case = VRAM__REQUEST__BODY_POOL_DROP;
	req.pool_drop = &pd;
	r = call_run(c, &req, &call, -1);
	call_release(&call);
	registry_client_leave(c);
	return error_finish(eg, r);
}

/* ---- growth and sub-allocation ------------------------------------------ */

/* Asks the daemon for bytes more. Pool entered (lock held), not growing. */
static int pool_grow(struct vram_pool *p, uint64_t bytes)
{
	struct vram_client *c = p->client;
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__PoolGrow g = VRAM__POOL_GROW__INIT;
	struct call call = { 0 };
	int r;

	g.pool_id = p->id;
	g.bytes = bytes;
	req.body_case = VRAM__REQUEST__BODY_POOL_GROW;
	req.pool_grow = &g;
	call.complete = pool_complete_grow;
	call.arg = p;
	p->growing = true;
	r = call_run(c, &req, &call, -1);
	p->growing = false;
	pthread_cond_broadcast(&c->cond);
	call_release(&call);
	if (r == 0)
		log_write(VRAM_LOG_DEBUG, "pool %s grew by %llu bytes to %llu",
			  p->name, (unsigned long long)bytes,
			  (unsigned long long)p->size);
	return r;
}

/* Bytes the pool may still grow by, in whole granules. */
static uint64_t pool_room(const struct vram_pool *p)
{
	uint64_t limit = p->reserve_bytes < p->map.reserve ? p->reserve_bytes :
							     p->map.reserve;
	uint64_t room = limit > p->map.size ? limit - p->map.size : 0;

	return room - room % p->granularity;
}

/* Grows for an allocation that lacks need bytes at the arena's end:
 * geometrically (the pool's size, at least 64 MiB, at most 1 GiB a step),
 * or by what is needed if more, never past the range. */
static int pool_grow_for(struct vram_pool *p, uint64_t need)
{
	uint64_t room = pool_room(p);
	uint64_t need_r = pool_round_up(need, p->granularity);
	uint64_t step =
		p->map.size < GROW_MAX_STEP ? p->map.size : GROW_MAX_STEP;

	if (need_r == 0 || need_r > room)
		return error_set(
			ENOMEM,
			"pool %s is full: %llu more bytes would pass its %llu-byte range",
			p->name, (unsigned long long)need,
			(unsigned long long)p->reserve_bytes);
	if (step < GROW_MIN)
		step = GROW_MIN;
	step = pool_round_up(step, p->granularity);
	uint64_t g = need_r > step ? need_r : step;
	if (g > room)
		g = room;
	return pool_grow(p, g);
}

/* Why a pool cannot be sub-allocated or grown now, or 0. */
static int pool_check_writable(struct vram_pool *p)
{
	if (p->dropped)
		return error_set(ENOENT, "pool %s was dropped", p->name);
	if (!p->owner)
		return error_set(EPERM, "pool %s is not owned by this client",
				 p->name);
	if (p->state != VRAM_STATE_ACTIVE)
		return error_set(EBUSY, "pool %s is %s", p->name,
				 vram_state_name(p->state));
	return 0;
}

int vram_alloc(vram_pool *p, size_t size, void **ptr)
{
	unsigned eg = error_generation();
	int r;

	if (!ptr)
		return error_finish(
			eg, error_set(EINVAL, "vram_alloc: ptr is required"));
	*ptr = NULL;
	if (size == 0)
		return error_finish(eg,
				    error_set(EINVAL, "vram_alloc: size is 0"));
	r = registry_pool_enter(p);
	if (r < 0)
		return error_finish(eg, r);
	for (;;) {
		uint64_t off;

		r = pool_check_writable(p);
		if (r < 0)
			break;
		r = suballoc_alloc(&p->sa, size, &off);
		if (r == 0) {
			*ptr = (void *)(p->map.base + off);
			break;
		}
		if (p->growing) {
			/* Another thread grows it: wait and retry. */
			pthread_cond_wait(&p->client->cond, &p->client->lock);
			continue;
		}
		uint64_t need = suballoc_round(size);
		uint64_t tail = suballoc_tail_free(&p->sa);
		if (need == 0) {
			r = error_set(ENOMEM,
				      "vram_alloc: %zu bytes is too large",
				      size);
			break;
		}
		r = pool_grow_for(p, need > tail ? need - tail : need);
		if (r < 0)
			break;
	}
	registry_pool_leave(p);
	return error_finish(eg, r);
}

int vram_free(vram_pool *p, void *ptr)
{
	unsigned eg = error_generation();
	int r;

	if (!ptr)
		return 0;
	r = registry_pool_enter(p);
	if (r < 0)
		return error_finish(eg, r);
	uintptr_t a = (uintptr_t)ptr;
	if (p->dropped)
		r = error_set(ENOENT, "pool %s was dropped", p->name);
	else if (a < p->map.base || a - p->map.base >= p->map.reserve ||
		 suballoc_free(&p->sa, a - p->map.base, NULL) < 0)
		r = error_set(
			EINVAL,
			"%p was not allocated from pool %s (or was freed)", ptr,
			p->name);
	registry_pool_leave(p);
	return error_finish(eg, r);
}

int vram_pool_reserve(vram_pool *p, uint64_t bytes)
{
	unsigned eg = error_generation();
	int r;

	r = registry_pool_enter(p);
	if (r < 0)
		return error_finish(eg, r);
	for (;;) {
		r = pool_check_writable(p);
		if (r < 0 || p->map.size >= bytes)
			break;
		if (p->growing) {
			pthread_cond_wait(&p->client->cond, &p->client->lock);
			continue;
		}
		uint64_t need =
			pool_round_up(bytes - p->map.size, p->granularity);
		if (need == 0 || need > pool_room(p)) {
			r = error_set(
				ENOMEM,
				"pool %s: %llu bytes do not fit its %llu-byte range",
				p->name, (unsigned long long)bytes,
				(unsigned long long)p->reserve_bytes);
			break;
		}
		r = pool_grow(p, need);
		if (r < 0)
			break;
	}
	registry_pool_leave(p);
	return error_finish(eg, r);
}

/* ---- accessors ----------------------------------------------------------- */

uintptr_t vram_pool_base(vram_pool *p)
{
	uintptr_t base;

	if (registry_pool_enter(p) < 0)
		return 0;
	base = p->map.base;
	registry_pool_leave(p);
	return base;
}

int vram_pool_backup(vram_pool *p, void **host, uint64_t *len)
{
	unsigned eg = error_generation();
	int r;

	if (!host || !len)
		return error_finish(eg, error_set(EINVAL,
						  "vram_pool_backup: host and "
						  "len are required"));
	r = registry_pool_enter(p);
	if (r < 0)
		return error_finish(eg, r);
	if (!p->map.backup) {
		r = error_set(ENODEV, "pool %s has no backup mapped here",
			      p->name);
	} else {
		/* Whoever reads the backup next must not race a punch. */
		mapping_backup_wait(&p->map);
		*host = p->map.backup;
		*len = p->map.backup_len;
	}
	registry_pool_leave(p);
	return error_finish(eg, r);
}

int vram_pool_backup_release(vram_pool *p)
{
	unsigned eg = error_generation();
	int r;

	r = registry_pool_enter(p);
	if (r < 0)
		return error_finish(eg, r);
	if (!p->map.backup) {
		r = error_set(ENODEV, "pool %s has no backup mapped here",
			      p->name);
	} else {
		/* This process's view goes at once; unpinning and punching
		 * the memfd itself (for the daemon's accounting too) runs on
		 * a thread that the next use of the backup waits for. */
		r = mapping_backup_give_back(&p->map);
		/* A paused pool's content is being dropped, not a resume
		 * hurried: the caller reads the figures next (vLLM's level 2
		 * sleep), so the pages are gone when this returns. */
		if (r == 0 && p->state != VRAM_STATE_ACTIVE)
			r = mapping_backup_wait(&p->map);
		if (r < 0)
			r = error_set(-r, "releasing the backup of pool %s: %s",
				      p->name, strerror(-r));
	}
	registry_pool_leave(p);
	return error_finish(eg, r);
}

uint64_t vram_pool_size(vram_pool *p)
{
	uint64_t size;

	if (registry_pool_enter(p) < 0)
		return 0;
	size = p->size;
	registry_pool_leave(p);
	return size;
}

enum vram_state vram_pool_state(vram_pool *p)
{
	enum vram_state s;

	if (registry_pool_enter(p) < 0)
		return VRAM_STATE_INVALID;
	s = p->state;
	registry_pool_leave(p);
	return s;
}

const char *vram_pool_name(vram_pool *p)
{
	const char *name;

	if (registry_pool_enter(p) < 0)
		return NULL;
	name = p->name;
	registry_pool_leave(p);
	return name;
}
