/* SPDX-License-Identifier: Apache-2.0 */
/* Every live client and pool of the process, so that closing twice,
 * closing NULL, or closing at exit in any order is safe: a handle that is
 * not here is already closed (or never was a handle) and every call on it
 * is refused without touching it.
 *
 * Public calls enter through here: under the registry's lock a live
 * handle's in-progress counter is raised, which its close waits for, so a
 * handle is never freed under a call. Calls take the lock shared, as
 * readers of the table (the counters are atomic); only adding, taking out
 * and fork() take it alone, and a waiting writer goes first. So the
 * calls of many threads, each on its own client, do not queue behind one
 * another here (64 client threads of bench/rpc did, on a mutex).
 *
 * The registry is a table: it calls nothing above it. The exit and fork
 * hooks that walk it live in client.c.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "client.h"
#include "error.h"
#include "pool.h"
#include "registry.h"

static pthread_rwlock_t registry_rwlock =
	PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
static struct vram_client *registry_clients;
static struct vram_pool *registry_pools;

void registry_client_add(struct vram_client *c)
{
	pthread_rwlock_wrlock(&registry_rwlock);
	c->reg_next = registry_clients;
	registry_clients = c;
	pthread_rwlock_unlock(&registry_rwlock);
}

void registry_pool_add(struct vram_pool *p)
{
	pthread_rwlock_wrlock(&registry_rwlock);
	p->reg_next = registry_pools;
	registry_pools = p;
	pthread_rwlock_unlock(&registry_rwlock);
}

static bool registry_has_client(const struct vram_client *c)
{
	for (struct vram_client *x = registry_clients; x; x = x->reg_next)
		if (x == c)
			return true;
	return false;
}

static bool registry_has_pool(const struct vram_pool *p)
{
	for (struct vram_pool *x = registry_pools; x; x = x->reg_next)
		if (x == p)
			return true;
	return false;
}

int registry_client_enter(struct vram_client *c)
{
	bool live, forked;

	if (!c)
		return error_set(EINVAL, "no client (NULL)");
	pthread_rwlock_rdlock(&registry_rwlock);
	live = registry_has_client(c);
	forked = live && c->forked;
	if (live && !forked)
		__atomic_add_fetch(&c->busy, 1, __ATOMIC_SEQ_CST);
	pthread_rwlock_unlock(&registry_rwlock);
	if (!live)
		return error_set(EINVAL,
				 "not an open client (closed already?)");
	if (forked)
		return error_set(EPIPE,
				 "this client was inherited through "
				 "fork(); connect again in this process");
	pthread_mutex_lock(&c->lock);
	return 0;
}

void registry_client_leave(struct vram_client *c)
{
	if (__atomic_sub_fetch(&c->busy, 1, __ATOMIC_SEQ_CST) == 0)
		pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

int registry_pool_enter(struct vram_pool *p)
{
	bool live, forked;

	if (!p)
		return error_set(EINVAL, "no pool (NULL)");
	pthread_rwlock_rdlock(&registry_rwlock);
	live = registry_has_pool(p);
	forked = live && p->client->forked;
	if (live && !forked) {
		/* Both counters: a pool's close waits for its users, its
		 * client's close for every call on the client or its pools. */
		__atomic_add_fetch(&p->users, 1, __ATOMIC_SEQ_CST);
		__atomic_add_fetch(&p->client->busy, 1, __ATOMIC_SEQ_CST);
	}
	pthread_rwlock_unlock(&registry_rwlock);
	if (!live)
		return error_set(EINVAL, "not an open pool (closed already?)");
	if (forked)
		return error_set(EPIPE,
				 "this pool was inherited through fork(); "
				 "open it again in this process");
	pthread_mutex_lock(&p->client->lock);
	return 0;
}

void registry_pool_leave(struct vram_pool *p)
{
	struct vram_client *c = p->client;
	unsigned users = __atomic_sub_fetch(&p->users, 1, __ATOMIC_SEQ_CST);
	unsigned busy = __atomic_sub_fetch(&c->busy, 1, __ATOMIC_SEQ_CST);

	if (users == 0 || busy == 0)
		pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

bool registry_pool_owned(uint64_t id, const char *name)
{
	bool owned = false;

	pthread_rwlock_rdlock(&registry_rwlock);
	for (struct vram_pool *x = registry_pools; x; x = x->reg_next)
		if (x->owner && x->id == id && strcmp(x->name, name) == 0)
			owned = true;
	pthread_rwlock_unlock(&registry_rwlock);
	return owned;
}

bool registry_client_take(struct vram_client *c, bool *forked)
{
	bool found = false;

	*forked = false;
	if (!c)
		return false;
	pthread_rwlock_wrlock(&registry_rwlock);
	for (struct vram_client **pp = &registry_clients; *pp;
	     pp = &(*pp)->reg_next) {
		if (*pp == c) {
			*pp = c->reg_next;
			c->reg_next = NULL;
			found = true;
			*forked = c->forked;
			break;
		}
	}
	if (found) {
		struct vram_pool **pp = &registry_pools;
		while (*pp) {
			if ((*pp)->client == c) {
				struct vram_pool *p = *pp;
				*pp = p->reg_next;
				p->reg_next = NULL;
			} else {
				pp = &(*pp)->reg_next;
			}
		}
	}
	pthread_rwlock_unlock(&registry_rwlock);
	return found;
}

bool registry_pool_take(struct vram_pool *p, bool *forked)
{
	bool found = false;

	*forked = false;
	if (!p)
		return false;
	pthread_rwlock_wrlock(&registry_rwlock);
	for (struct vram_pool **pp = &registry_pools; *pp;
	     pp = &(*pp)->reg_next) {
		if (*pp == p) {
			*pp = p->reg_next;
			p->reg_next = NULL;
			found = true;
			*forked = p->client->forked;
			/* The close that follows is a call on the client: its
			 * client cannot be freed under it. */
			if (!*forked)
				__atomic_add_fetch(&p->client->busy, 1,
						   __ATOMIC_SEQ_CST);
			break;
		}
	}
	pthread_rwlock_unlock(&registry_rwlock);
	return found;
}

struct vram_pool *registry_any_pool(void)
{
	struct vram_pool *p;

	pthread_rwlock_rdlock(&registry_rwlock);
	p = registry_pools;
	pthread_rwlock_unlock(&registry_rwlock);
	return p;
}

struct vram_client *registry_any_client(void)
{
	struct vram_client *c;

	pthread_rwlock_rdlock(&registry_rwlock);
	c = registry_clients;
	pthread_rwlock_unlock(&registry_rwlock);
	return c;
}

void registry_lock(void)
{
	pthread_rwlock_wrlock(&registry_rwlock);
}

void registry_unlock(void)
{
	pthread_rwlock_unlock(&registry_rwlock);
}

void registry_unlock_child(void)
{
	pthread_rwlockattr_t a;

	/* As the static initialiser makes it: writers first. */
	pthread_rwlockattr_init(&a);
	pthread_rwlockattr_setkind_np(
		&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&registry_rwlock, &a);
	pthread_rwlockattr_destroy(&a);
}

struct vram_client *registry_client_first(void)
{
	return registry_clients;
}

struct vram_client *registry_client_next(struct vram_client *c)
{
	return c->reg_next;
}
