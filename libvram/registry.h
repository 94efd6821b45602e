/* SPDX-License-Identifier: Apache-2.0 */
/* Every live client and pool of the process (registry.c): a table that
 * answers whether a handle is live and counts the calls in progress on
 * it. It calls nothing above it; client.c's exit and fork hooks walk it.
 */
#ifndef LIBVRAM_REGISTRY_H
#define LIBVRAM_REGISTRY_H

#include <stdbool.h>
#include <stdint.h>

struct vram_client;
struct vram_pool;

void registry_client_add(struct vram_client *c);
void registry_pool_add(struct vram_pool *p);

/* Enters a public call on c: 0 and c->lock held when c is live, else
 * -EINVAL (message set), or -EPIPE for a client inherited through fork().
 * registry_client_leave() unlocks. */
int registry_client_enter(struct vram_client *c);
void registry_client_leave(struct vram_client *c);

/* Same for a pool: 0 with p->client->lock held when p is live. */
int registry_pool_enter(struct vram_pool *p);
void registry_pool_leave(struct vram_pool *p);

/* Removes c (and every pool of c) from the registry; false if c was not
 * there (closed already, or never a client). *forked: c was inherited
 * through fork() and must only be forgotten. */
bool registry_client_take(struct vram_client *c, bool *forked);
/* Removes p from the registry; false if it was not there. On true, unless
 * *forked, the pool's client counts one more call in progress: the caller
 * closes the pool and then calls registry_client_leave() with the
 * client's lock. */
bool registry_pool_take(struct vram_pool *p, bool *forked);

/* Whether a live pool of this process (of any client) owns the pool with
 * this id and name. Only immutable fields are read. */
bool registry_pool_owned(uint64_t id, const char *name);

/* Some live pool or client (the first), or NULL when none is left: what
 * the exit hooks close next. */
struct vram_pool *registry_any_pool(void);
struct vram_client *registry_any_client(void);

/* Holds the registry's lock across fork(), so that the child's copy of the
 * table is whole. registry_unlock() in the parent, registry_unlock_child()
 * in the child. */
void registry_lock(void);
void registry_unlock(void);
/* In the child after fork(), instead of registry_unlock(): the lock is
 * made anew, since the child's thread is not the one that took it (a
 * reader-writer lock knows its writer by thread id). */
void registry_unlock_child(void);

/* The live clients, walked between registry_lock() and registry_unlock():
 * the first, then the one after c. Async-signal-safe. */
struct vram_client *registry_client_first(void);
struct vram_client *registry_client_next(struct vram_client *c);

#endif
