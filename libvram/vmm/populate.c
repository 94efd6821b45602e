/* SPDX-License-Identifier: Apache-2.0 */
/* Faulting in a large shared mapping from several threads: see
 * populate.h. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "env.h"
#include "populate.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define POPULATE_MAX_THREADS 8
/* Below this a slice is not worth a thread. */
#define POPULATE_MIN_SLICE (256ull << 20)

static unsigned populate_threads(uint64_t len)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned def = cpus > 1 ? (unsigned)(cpus / 2) : 1;
	unsigned n;

	if (def > POPULATE_MAX_THREADS)
		def = POPULATE_MAX_THREADS;
	n = env_unsigned("VRAM_POPULATE_THREADS", def, 1, 64, NULL);
	if (len / POPULATE_MIN_SLICE < n)
		n = (unsigned)(len / POPULATE_MIN_SLICE);
	return n ? n : 1;
}

/* Populating ahead: worker threads take the slices of [lo, hi) in order
 * and fault each in; the caller waits for a prefix to be done. */
struct populate_ahead {
	char *base;
	uint64_t lo, hi, slice;
	void (*before)(void *arg, uint64_t end);
	void *arg;
	pthread_mutex_t mu;
	pthread_cond_t moved;
	uint64_t next;	/* the next slice to hand out */
	uint64_t ready; /* [lo, ready) is done */
	bool *done;	/* per slice, for those done out of order */
	bool stop;
	int r;
	unsigned n_threads;
	pthread_t threads[64]; /* VRAM_POPULATE_THREADS at most */
};

static void populate_ahead_slice(struct populate_ahead *p, uint64_t off)
{
	uint64_t end = off + p->slice < p->hi ? off + p->slice : p->hi;

	if (p->before)
		p->before(p->arg, end);
	int r = madvise(p->base + off, end - off, MADV_POPULATE_WRITE) < 0 ?
			-errno :
			0;
	pthread_mutex_lock(&p->mu);
	if (r < 0 && p->r == 0)
		p->r = r;
	p->done[(off - p->lo) / p->slice] = true;
	while (p->ready < p->hi && p->done[(p->ready - p->lo) / p->slice])
		p->ready = p->ready + p->slice < p->hi ? p->ready + p->slice :
							 p->hi;
	pthread_cond_broadcast(&p->moved);
	pthread_mutex_unlock(&p->mu);
}

static void *populate_ahead_run(void *arg)
{
	struct populate_ahead *p = arg;

	for (;;) {
		pthread_mutex_lock(&p->mu);
		uint64_t off = p->next;
		bool go = !p->stop && off < p->hi;
		if (go)
			p->next += p->slice;
		pthread_mutex_unlock(&p->mu);
		if (!go)
			return NULL;
		populate_ahead_slice(p, off);
	}
}

int populate_ahead_start(struct populate_ahead **out, void *base, uint64_t lo,
			 uint64_t hi, uint64_t slice,
			 void (*before)(void *arg, uint64_t end), void *arg)
{
	struct populate_ahead *p;
	long page = sysconf(_SC_PAGESIZE);
	uint64_t n_slices;

	*out = NULL;
	if (hi <= lo || slice < (uint64_t)page)
		return 0;
	n_slices = (hi - lo + slice - 1) / slice;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->done = calloc(n_slices, sizeof(*p->done));
	if (!p->done) {
		free(p);
		return -ENOMEM;
	}
	p->base = base;
	p->lo = p->next = p->ready = lo;
	p->hi = hi;
	p->slice = slice;
	p->before = before;
	p->arg = arg;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->moved, NULL);
	/* One slice is faulted in by whoever waits for it first. */
	unsigned n = n_slices > 1 ? populate_threads(hi - lo) : 0;
	if (n > n_slices)
		n = (unsigned)n_slices;
	for (unsigned i = 0; i < n; i++) {
		if (pthread_create(&p->threads[p->n_threads], NULL,
				   populate_ahead_run, p) != 0)
			break;
		p->n_threads++;
	}
	*out = p;
	return 0;
}

void populate_ahead_wait(struct populate_ahead *p, uint64_t upto)
{
	if (!p)
		return;
	if (upto > p->hi)
		upto = p->hi;
	/* Without threads (one slice, or none started) the waiter works. */
	if (p->n_threads == 0)
		populate_ahead_run(p);
	pthread_mutex_lock(&p->mu);
	while (p->ready < upto)
		pthread_cond_wait(&p->moved, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

int populate_ahead_finish(struct populate_ahead *p)
{
	int r;

	if (!p)
		return 0;
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_mutex_unlock(&p->mu);
	for (unsigned i = 0; i < p->n_threads; i++)
		pthread_join(p->threads[i], NULL);
	r = p->r;
	pthread_cond_destroy(&p->moved);
	pthread_mutex_destroy(&p->mu);
	free(p->done);
	free(p);
	return r;
}
