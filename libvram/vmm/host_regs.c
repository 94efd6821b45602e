/* SPDX-License-Identifier: Apache-2.0 */
#include "host_regs.h"

#include <errno.h>
#include <stdlib.h>

void host_regs_init(struct host_regs *h)
{
	pthread_mutex_init(&h->lock, NULL);
	h->regs = NULL;
	h->n = h->cap = 0;
}

void host_regs_fini(struct host_regs *h)
{
	free(h->regs);
	h->regs = NULL;
	h->n = h->cap = 0;
	pthread_mutex_destroy(&h->lock);
}

int host_regs_add(struct host_regs *h, void *host, size_t len)
{
	int r = 0;

	pthread_mutex_lock(&h->lock);
	if (h->n == h->cap) {
		size_t cap = h->cap ? 2 * h->cap : 16;
		struct host_reg *regs = realloc(h->regs, cap * sizeof(*regs));
		if (!regs) {
			r = -ENOMEM;
			goto out;
		}
		h->regs = regs;
		h->cap = cap;
	}
	h->regs[h->n].host = host;
	h->regs[h->n].len = len;
	h->n++;
out:
	pthread_mutex_unlock(&h->lock);
	return r;
}

int host_regs_remove(struct host_regs *h, void *host)
{
	int r = -ENOENT;

	pthread_mutex_lock(&h->lock);
	for (size_t i = 0; i < h->n; i++) {
		if (h->regs[i].host == host) {
			h->regs[i] = h->regs[--h->n];
			r = 0;
			break;
		}
	}
	pthread_mutex_unlock(&h->lock);
	return r;
}

int host_regs_pop(struct host_regs *h, void **host, size_t *len)
{
	int r = 0;

	pthread_mutex_lock(&h->lock);
	if (h->n > 0) {
		h->n--;
		*host = h->regs[h->n].host;
		*len = h->regs[h->n].len;
		r = 1;
	}
	pthread_mutex_unlock(&h->lock);
	return r;
}
