/* SPDX-License-Identifier: Apache-2.0 */
/* Letting the chunk fds of active pools go once the node is idle
 * (fd_drop.h). */
#include "fd_drop.h"

#include "backend.h"
#include "log.h"
#include "node.h"
#include "pool.h"

/* The wait is over: unless a pause or resume is in flight (then wait
 * again), every active pool's chunks let their fds go. */
static void fd_drop_run(uv_timer_t *h)
{
	struct fd_drop *d = h->data;
	struct node *n = d->node;
	struct backend *b = n->backend;
	unsigned chunks = 0, pools = 0;

	if (n->transitions) {
		uv_timer_start(&d->timer, fd_drop_run, d->idle_ms, 0);
		return;
	}
	for (unsigned i = 0; i < n->n_pools; i++) {
		struct pool *p = n->pools[i];
		unsigned before = chunks;
		if (p->state != POOL_ACTIVE)
			continue;
		for (unsigned k = 0; k < p->n_chunks; k++)
			chunks += backend_chunk_unexport(b, p->device,
							 &p->chunks[k]);
		pools += chunks > before;
	}
	d->seen_gen = b->chunk_gen;
	if (chunks)
		log_debug("let the fds of %u chunk(s) of %u active pool(s) go, "
			  "%u ms after the last change: their handles hold "
			  "them",
			  chunks, pools, d->idle_ms);
}

void fd_drop_init(struct fd_drop *d, uv_loop_t *loop, struct node *n,
		  unsigned idle_ms)
{
	d->node = n;
	d->idle_ms = idle_ms;
	d->seen_gen = n->backend->chunk_gen;
	uv_timer_init(loop, &d->timer);
	d->timer.data = d;
}

void fd_drop_note(struct fd_drop *d)
{
	uint64_t gen = d->node->backend->chunk_gen;

	if (!d->idle_ms || gen == d->seen_gen)
		return;
	d->seen_gen = gen;
	uv_timer_start(&d->timer, fd_drop_run, d->idle_ms, 0);
}

void fd_drop_close(struct fd_drop *d)
{
	uv_timer_stop(&d->timer);
	uv_close((uv_handle_t *)&d->timer, NULL);
}
