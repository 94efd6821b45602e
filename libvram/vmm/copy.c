/* SPDX-License-Identifier: Apache-2.0 */
/* The copy planner shared by libvram's GPU halves; see copy.h. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "copy.h"
#include "env.h"
#include "error.h"

#define COPY_DEFAULT_STREAMS 2
#define COPY_DEFAULT_PIECE (256ull << 20)

void vmm_copy_init(struct vmm_copy *c, const struct vmm_copy_ops *ops,
		   void *drv, const char *streams_env, const char *piece_env)
{
	memset(c, 0, sizeof(*c));
	c->ops = ops;
	c->drv = drv;
	c->streams_env = streams_env;
	c->piece_env = piece_env;
	pthread_mutex_init(&c->lock, NULL);
}

void vmm_copy_fini(struct vmm_copy *c)
{
	pthread_mutex_destroy(&c->lock);
}

/* Reads the settings once, and makes the streams of dev's lane the first
 * time. */
static int copy_queue(struct vmm_copy *c, unsigned dev, unsigned lane,
		      const struct vmm_copy_queue **out)
{
	if (dev >= VMM_MAX_DEVICES)
		return error_set(ENODEV, "copy: no device %u", dev);
	if (lane >= VMM_COPY_LANES)
		return error_set(EINVAL, "copy: no lane %u", lane);
	struct vmm_copy_queue *q = &c->queues[dev][lane];
	int r = 0;

	pthread_mutex_lock(&c->lock);
	if (c->streams == 0) {
		c->streams = env_unsigned(c->streams_env, COPY_DEFAULT_STREAMS,
					  1, VMM_COPY_MAX_STREAMS, NULL);
		c->piece = (uint64_t)env_unsigned(c->piece_env, 0, 1, 1u << 20,
						  NULL)
			   << 20;
		if (c->piece == 0)
			c->piece = COPY_DEFAULT_PIECE;
	}
	while (q->n_streams < c->streams) {
		r = c->ops->stream_create(c->drv, &q->streams[q->n_streams]);
		if (r < 0) {
			/* Fewer streams will do; none will not. */
			if (q->n_streams > 0)
				r = 0;
			break;
		}
		q->n_streams++;
	}
	pthread_mutex_unlock(&c->lock);
	*out = q;
	return r;
}

/* Queues the spans' pieces round-robin on q; *used is how many of its
 * streams were given any. The first error stops it. */
static int copy_pieces(const struct vmm_copy *c, const struct vmm_copy_queue *q,
		       int to_host, const struct vmm_span *spans, size_t n,
		       unsigned *used)
{
	unsigned next = 0;
	int r = 0;

	*used = 0;
	for (size_t i = 0; i < n && r == 0; i++) {
		for (size_t off = 0; off < spans[i].len && r == 0;) {
			size_t len = spans[i].len - off;
			if (len > c->piece)
				len = c->piece;
			r = c->ops->memcpy_async(c->drv, to_host,
						 spans[i].dev + off,
						 (char *)spans[i].host + off,
						 len, q->streams[next]);
			off += len;
			next = (next + 1) % q->n_streams;
			if (*used < q->n_streams)
				(*used)++;
		}
	}
	return r;
}

/* Synchronizes q's first n streams, all of them even after a failure;
 * the first error is returned, its message kept (or r's, if r failed
 * already: that one comes first). */
static int copy_sync(const struct vmm_copy *c, const struct vmm_copy_queue *q,
		     unsigned n, int r)
{
	char msg[ERROR_MSG_MAX] = "";

	if (r < 0)
		snprintf(msg, sizeof(msg), "%s", error_get());
	for (unsigned i = 0; i < n; i++) {
		int rs = c->ops->stream_sync(c->drv, q->streams[i]);
		if (rs < 0 && r == 0) {
			r = rs;
			snprintf(msg, sizeof(msg), "%s", error_get());
		}
	}
	if (r < 0)
		error_restore(msg);
	return r;
}

int vmm_copy_run(struct vmm_copy *c, unsigned dev, int to_host,
		 const struct vmm_span *spans, size_t n)
{
	const struct vmm_copy_queue *q;
	unsigned used;
	int r = copy_queue(c, dev, 0, &q);

	if (r < 0)
		return r;
	r = copy_pieces(c, q, to_host, spans, n, &used);
	/* Wait for what was issued even after an error: the caller may unmap
	 * or reuse the memory next. */
	return copy_sync(c, q, used, r);
}

int vmm_copy_issue(struct vmm_copy *c, unsigned dev, unsigned lane, int to_host,
		   const struct vmm_span *spans, size_t n)
{
	const struct vmm_copy_queue *q;
	unsigned used;
	int r = copy_queue(c, dev, lane, &q);

	return r < 0 ? r : copy_pieces(c, q, to_host, spans, n, &used);
}

int vmm_copy_wait(struct vmm_copy *c, unsigned dev, unsigned lane)
{
	if (dev >= VMM_MAX_DEVICES || lane >= VMM_COPY_LANES)
		return 0; /* vmm_copy_issue refused it: nothing was queued */
	const struct vmm_copy_queue *q = &c->queues[dev][lane];
	return copy_sync(c, q, q->n_streams, 0);
}

unsigned vmm_copy_streams(const struct vmm_copy *c, unsigned dev, void **out)
{
	unsigned k = 0;

	if (dev >= VMM_MAX_DEVICES)
		return 0;
	for (unsigned l = 0; l < VMM_COPY_LANES; l++)
		for (unsigned i = 0; i < c->queues[dev][l].n_streams; i++)
			out[k++] = c->queues[dev][l].streams[i];
	return k;
}
