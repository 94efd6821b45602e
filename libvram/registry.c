/* Every live client and pool of the process, so that closing twice,
 * closing NULL, or closing at exit in any order is safe: a handle that is
 * not here is already closed (or never was a handle) and every call on it
 * is refused without touching it. An atexit handler and a destructor close
 * what is left, pools before clients.
 *
 * Public calls enter through here: under the registry's lock a live
 * handle's in-progress counter is raised, which its close waits for, so a
 * handle is never freed under a call.
 *
 * fork(): a child inherits every client's socket, which is the parent's
 * session. The child must never read from it, write to it (a pool close
 * there would close the parent's pool) or keep it open (the daemon would
 * not see the parent leave). So an atfork handler closes the child's
 * copies of those fds at once and marks the clients forked: in the child
 * every call on them fails with -EPIPE and closing them only forgets
 * them. Their memory is not freed there, since another thread of the
 * parent may have held their locks at the fork.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vram_client *registry_clients;
static struct vram_pool *registry_pools;
static pthread_once_t registry_once = PTHREAD_ONCE_INIT;

static void registry_close_all(void)
{
	for (;;) {
		pthread_mutex_lock(&registry_lock);
		struct vram_pool *p = registry_pools;
		pthread_mutex_unlock(&registry_lock);
		if (!p)
			break;
		/* A no-op if another thread closed it meanwhile. */
		vram_pool_close(p);
	}
	for (;;) {
		pthread_mutex_lock(&registry_lock);
		struct vram_client *c = registry_clients;
		pthread_mutex_unlock(&registry_lock);
		if (!c)
			break;
		vram_client_close(c);
	}
}

static void registry_atexit(void)
{
	registry_close_all();
}

/* Runs at exit after the atexit handlers, or when the library is
 * unloaded: by then usually nothing is left. */
__attribute__((destructor)) static void registry_destructor(void)
{
	registry_close_all();
}

static void registry_fork_prepare(void)
{
	pthread_mutex_lock(&registry_lock);
}

static void registry_fork_parent(void)
{
	pthread_mutex_unlock(&registry_lock);
}

/* In the child, right after fork(): only async-signal-safe calls. */
static void registry_fork_child(void)
{
	for (struct vram_client *c = registry_clients; c; c = c->reg_next) {
		if (c->forked)
			continue;
		c->forked = true;
		if (c->sock >= 0)
			close(c->sock);
		if (c->wake_fd >= 0)
			close(c->wake_fd);
		c->sock = -1;
		c->wake_fd = -1;
		/* Chunk fds read but not yet handled hold memory too. */
		for (unsigned i = 0; i < c->rx.nfds; i++)
			close(c->rx.fds[i]);
		c->rx.nfds = 0;
	}
	pthread_mutex_unlock(&registry_lock);
}

static void registry_init(void)
{
	atexit(registry_atexit);
	pthread_atfork(registry_fork_prepare, registry_fork_parent,
		       registry_fork_child);
}

void registry_client_add(struct vram_client *c)
{
	pthread_once(&registry_once, registry_init);
	pthread_mutex_lock(&registry_lock);
	c->reg_next = registry_clients;
	registry_clients = c;
	pthread_mutex_unlock(&registry_lock);
}

void registry_pool_add(struct vram_pool *p)
{
	pthread_mutex_lock(&registry_lock);
	p->reg_next = registry_pools;
	registry_pools = p;
	pthread_mutex_unlock(&registry_lock);
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
	pthread_mutex_lock(&registry_lock);
	live = registry_has_client(c);
	forked = live && c->forked;
	if (live && !forked)
		__atomic_add_fetch(&c->busy, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&registry_lock);
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
	pthread_mutex_lock(&registry_lock);
	live = registry_has_pool(p);
	forked = live && p->client->forked;
	if (live && !forked) {
		/* Both counters: a pool's close waits for its users, its
		 * client's close for every call on the client or its pools. */
		__atomic_add_fetch(&p->users, 1, __ATOMIC_SEQ_CST);
		__atomic_add_fetch(&p->client->busy, 1, __ATOMIC_SEQ_CST);
	}
	pthread_mutex_unlock(&registry_lock);
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

	pthread_mutex_lock(&registry_lock);
	for (struct vram_pool *x = registry_pools; x; x = x->reg_next)
		if (x->owner && x->id == id && strcmp(x->name, name) == 0)
			owned = true;
	pthread_mutex_unlock(&registry_lock);
	return owned;
}

bool registry_client_take(struct vram_client *c, bool *forked)
{
	bool found = false;

	*forked = false;
	if (!c)
		return false;
	pthread_mutex_lock(&registry_lock);
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
	pthread_mutex_unlock(&registry_lock);
	return found;
}

bool registry_pool_take(struct vram_pool *p, bool *forked)
{
	bool found = false;

	*forked = false;
	if (!p)
		return false;
	pthread_mutex_lock(&registry_lock);
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
	pthread_mutex_unlock(&registry_lock);
	return found;
}
