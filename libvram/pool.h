/* SPDX-License-Identifier: Apache-2.0 */
/* A pool in this process (pool.c): the object behind a vram_pool handle,
 * its place in its client's list, its device geometry, and the
 * completions that set it up from the daemon's reply. The public pool
 * calls are in api_pool.c. Every field is guarded by the client's lock.
 */
#ifndef LIBVRAM_POOL_H
#define LIBVRAM_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "call.h"
#include "client.h"
#include "mapping.h"
#include "suballoc.h"
#include "vram.h"

#define MIN_ALIGN (2ull << 20) /* ranges are aligned to at least 2 MiB */

struct vram_pool {
	struct vram_client *client;
	struct vram_pool *next;	    /* in client->pools */
	struct vram_pool *reg_next; /* registry.c */
	uint64_t id;
	char name[ADDRESS_MAX_LEN + 1]; /* as we address it (client.h) */
	char tag[TAG_MAX_LEN + 1];
	unsigned dev;
	uint64_t granularity;
	uint64_t align;
	enum vram_policy policy;
	unsigned flags;
	enum vram_state state; /* as this process last saw it */
	bool owner;	       /* this client sub-allocates it */
	bool readonly;
	bool dropped;		/* a DROP event came: calls say -ENOENT */
	bool growing;		/* a PoolGrow is in flight */
	bool linked;		/* in client->pools */
	uint64_t size;		/* the pool's size (kept while paused) */
	uint64_t reserve_bytes; /* the range as the daemon knows it */
	uint64_t parts_event;	/* the RESUME whose restore in parts is under
				 * way here (events.c), or 0 */
	/* Its chunks whose copies are issued, and waited for: the ones
	 * between are on the device (at most two). */
	size_t parts_issued, parts_waited;
	/* For the log (clock.h): its first copy issued, and when the device
	 * last ran out of copies (0: it has not); the time it had none. */
	int64_t parts_start_ns, parts_idle_ns, parts_gap_ns;
	unsigned users;		/* public calls in progress (atomic) */
	struct mapping map;
	struct suballoc sa; /* owner only */
};

/* A new pool of c on dev, not linked, holding nothing; NULL without
 * memory. */
struct vram_pool *pool_new(struct vram_client *c, unsigned dev, bool readonly);

/* Undoes a pool in this process (unmaps, frees the range) and frees it.
 * The pool must be unlinked and out of the registry. NULL is a no-op. */
void pool_free(struct vram_pool *p);

/* The pool of c with this id or name, or NULL. With c->lock held. */
struct vram_pool *pool_find(struct vram_client *c, uint64_t id);
struct vram_pool *pool_find_name(struct vram_client *c, const char *name);

/* Puts a pool into, or takes it out of, its client's list (a no-op when it
 * is not there). With c->lock held. */
void pool_link(struct vram_pool *p);
void pool_unlink(struct vram_pool *p);

/* The client's device with this index or UUID, or NULL. */
const struct client_device *pool_device(const struct vram_client *c,
					unsigned dev);
const struct client_device *pool_device_by_uuid(const struct vram_client *c,
						const char *uuid);

/* Fills the pool's device geometry: chunk granularity and range alignment
 * (d may be NULL: the defaults). */
void pool_geometry(struct vram_pool *p, const struct client_device *d);

/* x rounded up to a multiple of a (a > 0); 0 on overflow. */
uint64_t pool_round_up(uint64_t x, uint64_t a);

/* What pool_complete needs besides the pool: call->arg points to one. */
struct pool_ctx {
	struct vram_pool *pool;
	bool create;
	uint64_t reserve; /* create: what we asked for */
};

/* The completion of a PoolCreate or PoolOpen (call_complete_fn): sets the
 * pool up from the daemon's reply, in the reader, before any event about
 * it can be handled: range, backup, chunks (when active), then links it
 * into the client. On failure nothing is held and the pool is not
 * linked. */
int pool_complete(struct vram_client *c, struct call *call,
		  const Vram__Response *r, const struct wire_frame *f);

/* The completion of a PoolGrow (call->arg: the pool): maps the chunks it
 * brought, before any later event (a pause of this pool) is handled. */
int pool_complete_grow(struct vram_client *c, struct call *call,
		       const Vram__Response *r, const struct wire_frame *f);

#endif
