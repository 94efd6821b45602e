/* SPDX-License-Identifier: Apache-2.0 */
/* Reconnecting to a restarted vramd (reconnect.h). */
#include "reconnect.h"
#include "attr.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "call.h"
#include "clock.h"
#include "log.h"
#include "mapping.h"
#include "pool.h"
#include "sock.h"

/* The daemon no longer has the pool, or has another one of its name. */
static void reconnect_pool_gone(struct vram_client *c UNUSED, struct vram_pool *p)
{
	mapping_unmap_all(&p->map);
	mapping_backup_release(&p->map);
	p->dropped = true;
	p->state = VRAM_STATE_PAUSED;
	log_write(VRAM_LOG_WARN, "pool %s did not survive the restart of vramd",
		  p->name);
}

/* Opens p again on the new session and checks it is the same pool. */
static int reconnect_pool(struct vram_client *c, struct vram_pool *p)
{
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__PoolOpen po = VRAM__POOL_OPEN__INIT;
	struct call call = { 0 };
	int r;

	if (p->dropped)
		return 0;
	po.name = p->name;
	po.access =
		p->readonly ? VRAM__ACCESS__ACCESS_RO : VRAM__ACCESS__ACCESS_RW;
	req.body_case = VRAM__REQUEST__BODY_POOL_OPEN;
	req.pool_open = &po;
	/* No completion: the chunk fds of the reply are closed, as this
	 * process maps them already. */
	r = call_run(c, &req, &call, CONNECT_TIMEOUT_MS);
	if (r == -ENOENT) {
		reconnect_pool_gone(c, p);
		r = 0;
	} else if (r == 0) {
		const Vram__Response *resp = call.msg->response;
		const Vram__PoolInfo *info =
			resp->body_case == VRAM__RESPONSE__BODY_POOL &&
					resp->pool ?
				resp->pool->info :
				NULL;
		if (!info || info->id != p->id) {
			reconnect_pool_gone(c, p);
		} else if (info->state == VRAM__STATE__STATE_PAUSED &&
			   p->state != VRAM_STATE_PAUSED) {
			/* A pause the restart cut short: the daemon let go of
			 * the chunks; the content is in the backup (host) or
			 * was not kept (discard). */
			mapping_unmap_all(&p->map);
			p->state = VRAM_STATE_PAUSED;
			log_write(VRAM_LOG_INFO,
				  "pool %s came back paused: unmapped",
				  p->name);
		} else if (info->state == VRAM__STATE__STATE_ACTIVE &&
			   p->state != VRAM_STATE_ACTIVE) {
			log_write(VRAM_LOG_WARN,
				  "pool %s came back active but is not mapped "
				  "here; close and open it again",
				  p->name);
		}
	} else if (r != -EPIPE) {
		log_write(VRAM_LOG_WARN, "pool %s: cannot reattach: %s",
			  p->name, vram_last_error());
		r = 0; /* the others still reattach */
	}
	call_release(&call);
	return r;
}

/* One attempt, with c->lock held. */
static int reconnect_once(struct vram_client *c)
{
	int sock, r;

	c->reconnecting = true;
	pthread_mutex_unlock(&c->lock);
	r = sock_open(c->path, c->flags & VRAM_CONNECT_ADMIN, &sock);
	pthread_mutex_lock(&c->lock);
	if (r == 0) {
		if (c->sock >= 0)
			close(c->sock);
		c->sock = sock;
		wire_rx_free(&c->rx);
		wire_rx_init(&c->rx);
		c->broken = false;
		r = client_hello(c);
		for (struct vram_pool *p = c->pools; p && r == 0; p = p->next)
			r = reconnect_pool(c, p);
		if (r == 0 && c->broken)
			r = -EPIPE;
	}
	c->reconnecting = false;
	if (r < 0) {
		if (!c->broken)
			call_break(c, r, "reconnecting failed");
		c->backoff_ms = c->backoff_ms ? c->backoff_ms * 2 : 20;
		if (c->backoff_ms > 2000)
			c->backoff_ms = 2000;
		c->retry_at = clock_now_ms() + c->backoff_ms;
		pthread_cond_broadcast(&c->cond);
		return -ENOTCONN;
	}
	c->backoff_ms = 0;
	c->retry_at = 0;
	log_write(VRAM_LOG_INFO, "reconnected to vramd (session %llu)",
		  (unsigned long long)c->session_id);
	pthread_cond_broadcast(&c->cond);
	return 0;
}

int reconnect_try(struct vram_client *c)
{
	bool wait = c->flags & VRAM_CONNECT_WAIT;
	int64_t deadline = clock_now_ms() + RECONNECT_WAIT_MS;

	if (!(c->flags & (VRAM_CONNECT_RECONNECT | VRAM_CONNECT_WAIT)) ||
	    c->closing || c->forked)
		return -EPIPE;
	while (c->broken) {
		int64_t now = clock_now_ms();
		if (c->closing)
			return -EPIPE;
		if (!c->reconnecting && !c->reader && now >= c->retry_at) {
			if (reconnect_once(c) == 0)
				return 0;
			continue;
		}
		if (!wait || now >= deadline)
			return -ENOTCONN;
		/* Another thread reconnects, or the next try is not due. */
		int64_t until = c->retry_at > now ? c->retry_at : now + 20;
		struct timespec ts = { .tv_sec = until / 1000,
				       .tv_nsec = (until % 1000) * 1000000 };
		pthread_cond_timedwait(&c->cond, &c->lock, &ts);
	}
	return 0;
}
