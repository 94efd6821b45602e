/* Pieces of messages, and the conversions from the daemon's own types
 * to the wire's. */
#include "message.h"

#include <errno.h>
#include <stdlib.h>

int chunk_list_make(struct chunk_list *l, const struct pool *p, unsigned first,
		    unsigned n, unsigned extra_fds)
{
	l->n = n;
	l->chunks = calloc(n + 1, sizeof(*l->chunks));
	l->ptrs = calloc(n + 1, sizeof(*l->ptrs));
	l->fds = calloc(n + extra_fds + 1, sizeof(*l->fds));
	if (!l->chunks || !l->ptrs || !l->fds) {
		chunk_list_free(l);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < n; i++) {
		const struct chunk *c = &p->chunks[first + i];
		vram__chunk__init(&l->chunks[i]);
		l->chunks[i].offset = c->offset;
		l->chunks[i].size = c->size;
		l->chunks[i].fd_index = (int32_t)i;
		l->ptrs[i] = &l->chunks[i];
		l->fds[i] = c->fd;
	}
	return 0;
}

void chunk_list_free(struct chunk_list *l)
{
	free(l->chunks);
	free(l->ptrs);
	free(l->fds);
	l->chunks = NULL;
	l->ptrs = NULL;
	l->fds = NULL;
	l->n = 0;
}

Vram__EventKind message_event_kind(enum pool_round round)
{
	switch (round) {
	case POOL_ROUND_SAVE:
		return VRAM__EVENT_KIND__EVENT_SAVE;
	case POOL_ROUND_PAUSE:
		return VRAM__EVENT_KIND__EVENT_PAUSE;
	case POOL_ROUND_RESUME:
		return VRAM__EVENT_KIND__EVENT_RESUME;
	}
	abort(); /* not an enum pool_round */
}

Vram__State message_pool_state(enum pool_state s)
{
	switch (s) {
	case POOL_ACTIVE:
		return VRAM__STATE__STATE_ACTIVE;
	case POOL_PAUSING_SAVE:
	case POOL_PAUSING_UNMAP:
	case POOL_PAUSING_UNDO_SAVE:
	case POOL_PAUSING_UNDO:
		return VRAM__STATE__STATE_PAUSING;
	case POOL_PAUSED:
		return VRAM__STATE__STATE_PAUSED;
	case POOL_RESUMING_RESTORE:
	case POOL_RESUMING_MAP:
		return VRAM__STATE__STATE_RESUMING;
	}
	abort(); /* not an enum pool_state */
}

unsigned device_infos_fill(struct backend *b, Vram__DeviceInfo *dev,
			   Vram__DeviceInfo **ptrs)
{
	for (unsigned i = 0; i < b->n_devices; i++) {
		const struct backend_device *d = &b->devices[i];
		uint64_t free_b = 0, total = d->total_bytes;
		backend_mem_info(b, i, &free_b, &total);
		vram__device_info__init(&dev[i]);
		dev[i].index = d->index;
		dev[i].uuid = (char *)d->uuid;
		dev[i].total_bytes = total;
		dev[i].free_bytes = free_b;
		dev[i].granularity = d->granularity;
		ptrs[i] = &dev[i];
	}
	return b->n_devices;
}
