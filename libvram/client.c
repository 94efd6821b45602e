/* SPDX-License-Identifier: Apache-2.0 */
/* A client's lifecycle: vram_connect() (socket, hello, the backend's
 * client half), the public calls on the client, vram_client_close(), and
 * the process hooks that close what is left at exit and cut a forked
 * child off its parent's sessions.
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
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "call.h"
#include "client.h"
#include "reconnect.h"
#include "error.h"
#include "log.h"
#include "pool.h"
#include "registry.h"
#include "sock.h"

static pthread_once_t client_hooks_once = PTHREAD_ONCE_INIT;

/* ---- the process hooks -------------------------------------------------- */

/* Closes every pool left, then every client, in that order: a no-op for
 * one another thread closes meanwhile. */
static void client_close_all(void)
{
	vram_pool *p;
	vram_client *c;

	while ((p = registry_any_pool()))
		vram_pool_close(p);
	while ((c = registry_any_client()))
		vram_client_close(c);
}

static void client_atexit(void)
{
	client_close_all();
}

/* Runs at exit after the atexit handlers, or when the library is
 * unloaded: by then usually nothing is left. */
__attribute__((destructor)) static void client_destructor(void)
{
	client_close_all();
}

static void client_fork_prepare(void)
{
	registry_lock();
}

static void client_fork_parent(void)
{
	registry_unlock();
}

/* In the child, right after fork(): only async-signal-safe calls. */
static void client_fork_child(void)
{
	for (struct vram_client *c = registry_client_first(); c;
	     c = registry_client_next(c)) {
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
	registry_unlock_child();
}

/* Once, before the first client joins the registry. */
static void client_hooks_install(void)
{
	atexit(client_atexit);
	pthread_atfork(client_fork_prepare, client_fork_parent,
		       client_fork_child);
}

/* ---- lifecycle ------------------------------------------------------------ */

static void client_free(struct vram_client *c)
{
	vmm_destroy(c->vmm);
	wire_rx_free(&c->rx);
	if (c->sock >= 0)
		close(c->sock);
	if (c->wake_fd >= 0)
		close(c->wake_fd);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->send_lock);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

int client_open(int sock, const char *name, struct vram_client **out)
{
	pthread_condattr_t ca;
	struct vram_client *c;
	int r, fl;

	c = calloc(1, sizeof(*c));
	if (!c) {
		close(sock);
		return error_set(ENOMEM, "out of memory");
	}
	c->sock = sock;
	c->wake_fd = -1;
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->send_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cond, &ca);
	pthread_condattr_destroy(&ca);
	wire_rx_init(&c->rx);
	c->next_id = 1;
	c->spin_ms = call_spin_ms();
	c->call_spin_us = call_spin_us();
	snprintf(c->name, sizeof(c->name), "%s", name);

	fl = fcntl(sock, F_GETFL);
	if (fl < 0 || fcntl(sock, F_SETFL, fl | O_NONBLOCK) < 0 ||
	    fcntl(sock, F_SETFD, FD_CLOEXEC) < 0) {
		r = error_set(errno, "fcntl: %s", strerror(errno));
		goto fail;
	}
	c->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->wake_fd < 0) {
		r = error_set(errno, "eventfd: %s", strerror(errno));
		goto fail;
	}
	pthread_mutex_lock(&c->lock);
	r = client_hello(c);
	pthread_mutex_unlock(&c->lock);
	if (r < 0)
		goto fail;
	r = vmm_open(c->backend, &c->vmm);
	if (r < 0) {
		r = error_set(
			r,
			"vramd runs the \"%s\" backend, which libvram cannot use here: %s",
			c->backend, strerror(-r));
		goto fail;
	}
	for (unsigned i = 0; i < c->n_devices; i++)
		if (c->devices[i].index < VMM_MAX_DEVICES)
			snprintf(c->vmm->dev_uuid[c->devices[i].index],
				 sizeof(c->vmm->dev_uuid[0]), "%s",
				 c->devices[i].uuid);
	log_write(VRAM_LOG_INFO,
		  "connected to vramd %s (backend %s, session %llu)",
		  c->daemon_version, c->backend,
		  (unsigned long long)c->session_id);
	pthread_once(&client_hooks_once, client_hooks_install);
	registry_client_add(c);
	*out = c;
	return 0;
fail:
	client_free(c);
	return r;
}

static bool client_idle(struct vram_client *c)
{
	if (__atomic_load_n(&c->busy, __ATOMIC_SEQ_CST) != 0 || c->reader)
		return false;
	for (struct vram_pool *p = c->pools; p; p = p->next)
		if (__atomic_load_n(&p->users, __ATOMIC_SEQ_CST) != 0)
			return false;
	return true;
}

/* Closes a client: breaks the connection, waits for calls in progress and
 * the event thread, releases its pools and frees everything. The client
 * must already be out of the registry. */
static void client_close(struct vram_client *c)
{
	pthread_mutex_lock(&c->lock);
	if (c->thread_started && pthread_equal(pthread_self(), c->thread)) {
		/* Only a log handler could get here, and a handler must not
		 * call libvram (vram.h); closing would free the thread under
		 * its own feet, so refuse rather than crash. */
		pthread_mutex_unlock(&c->lock);
		log_write(
			VRAM_LOG_ERROR,
			"vram_client_close() from the event thread is not supported");
		return;
	}
	c->closing = true;
	c->stopping = true;
	/* The daemon treats the end of the session as a close of every pool
	 * (dropping those this client owns unless persistent), so nothing
	 * more is sent: the socket goes, and every waiter learns at once
	 * (the connection is marked broken and the reader woken). */
	call_break(c, -ESHUTDOWN, "client closed");
	/* No shutdown(): a forked child may share this socket's open file,
	 * and only closing our fd is ours to do. */
	call_wake(c);
	pthread_cond_broadcast(&c->cond);
	while (!client_idle(c))
		pthread_cond_wait(&c->cond, &c->lock);
	if (c->thread_started) {
		pthread_mutex_unlock(&c->lock);
		pthread_join(c->thread, NULL);
		pthread_mutex_lock(&c->lock);
		c->thread_started = false;
	}
	while (c->pools) {
		struct vram_pool *p = c->pools;
		pool_unlink(p);
		pool_free(p);
	}
	pthread_mutex_unlock(&c->lock);
	client_free(c);
}

/* ---- the public calls ------------------------------------------------------ */

int vram_connect(const char *path, const char *name, unsigned flags,
		 vram_client **out)
{
	unsigned eg = error_generation();
	int sock, r;

	if (out)
		*out = NULL;
	if (!out)
		return error_finish(
			eg, error_set(EINVAL, "vram_connect: out is required"));
	if (flags &
	    ~(VRAM_CONNECT_RECONNECT | VRAM_CONNECT_WAIT | VRAM_CONNECT_ADMIN))
		return error_finish(
			eg,
			error_set(EINVAL, "vram_connect: unknown flags 0x%x",
				  flags));
	if (name && strlen(name) > NAME_MAX_LEN)
		return error_finish(
			eg,
			error_set(EINVAL, "client name is longer than %d bytes",
				  NAME_MAX_LEN));
	if (!path) {
		const char *env = getenv("VRAM_SOCKET");
		path = env && env[0] ? env : VRAM_DEFAULT_SOCKET;
	}
	if (!name)
		name = program_invocation_short_name &&
				       program_invocation_short_name[0] ?
			       program_invocation_short_name :
			       "libvram";
	r = sock_open(path, flags & VRAM_CONNECT_ADMIN, &sock);
	if (r < 0)
		return error_finish(eg, r);
	r = client_open(sock, name, out);
	if (r == 0) {
		(*out)->flags = flags;
		snprintf((*out)->path, sizeof((*out)->path), "%s", path);
		if (flags & (VRAM_CONNECT_RECONNECT | VRAM_CONNECT_WAIT))
			(*out)->reconnect = reconnect_try;
	}
	return error_finish(eg, r);
}

void vram_client_close(vram_client *c)
{
	bool forked;

	if (!registry_client_take(c, &forked))
		return;
	/* An inherited client's fds are closed already (client_fork_child); its
	 * memory may be in any state, so it is left alone. */
	if (!forked)
		client_close(c);
}

const char *vram_client_backend(vram_client *c)
{
	const char *b;

	if (registry_client_enter(c) < 0)
		return NULL;
	b = c->backend;
	registry_client_leave(c);
	return b;
}

int vram_client_fd(vram_client *c)
{
	unsigned eg = error_generation();
	int fd, r;

	r = registry_client_enter(c);
	if (r < 0)
		return error_finish(eg, r);
	fd = c->sock;
	registry_client_leave(c);
	return fd;
}

int vram_client_dispatch(vram_client *c, int timeout_ms)
{
	unsigned eg = error_generation();
	int r;

	if (timeout_ms < -1)
		return error_finish(
			eg, error_set(EINVAL,
				      "vram_client_dispatch: bad timeout %d",
				      timeout_ms));
	r = registry_client_enter(c);
	if (r < 0)
		return error_finish(eg, r);
	r = call_dispatch(c, timeout_ms);
	registry_client_leave(c);
	return error_finish(eg, r);
}

int vram_client_start_thread(vram_client *c)
{
	unsigned eg = error_generation();
	int r;

	r = registry_client_enter(c);
	if (r < 0)
		return error_finish(eg, r);
	r = call_thread_start(c);
	registry_client_leave(c);
	return error_finish(eg, r);
}

int vram_ping(vram_client *c)
{
	unsigned eg = error_generation();
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__Ping ping = VRAM__PING__INIT;
	struct call call = { 0 };
	int r;

	r = registry_client_enter(c);
	if (r < 0)
		return error_finish(eg, r);
	req.body_case = VRAM__REQUEST__BODY_PING;
	req.ping = &ping;
	r = call_run(c, &req, &call, -1);
	call_release(&call);
	registry_client_leave(c);
	return error_finish(eg, r);
}
