/* SPDX-License-Identifier: Apache-2.0 */
/* The host backend: GPU memory emulated with memfds, so that the whole
 * system, fd passing included, runs on machines without a GPU. Each
 * emulated device has a fixed capacity and refuses chunks past it, so the
 * out-of-memory paths above are the real ones. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend.h"
#include "attr.h"
#include "log.h"

static void host_destroy(struct backend *b)
{
	free(b);
}

static int host_mem_info(struct backend *b, unsigned dev, uint64_t *free_bytes,
			 uint64_t *total_bytes)
{
	const struct backend_device *d = &b->devices[dev];
	*total_bytes = d->total_bytes;
	*free_bytes = d->total_bytes - d->used_bytes;
	return 0;
}

static int host_chunk_create(struct backend *b, unsigned dev, struct chunk *c)
{
	const struct backend_device *d = &b->devices[dev];
	if (c->size > d->total_bytes - d->used_bytes)
		return -ENOMEM;
	int fd = memfd_create("vramd-chunk", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	/* Sparse: pages are allocated when a mapper first writes them. */
	if (ftruncate(fd, (off_t)c->size) < 0) {
		int r = -errno;
		close(fd);
		return r;
	}
	c->fd = fd;
	c->handle = 0;
	return 0;
}

static void host_chunk_release(struct backend *b UNUSED, unsigned dev UNUSED, struct chunk *c)
{
	close(c->fd);
}

static const struct backend_ops host_ops = {
	.name = "host",
	.destroy = host_destroy,
	.mem_info = host_mem_info,
	.chunk_create = host_chunk_create,
	.chunk_release = host_chunk_release,
};

int backend_host_open(const struct backend_config *cfg, struct backend **out)
{
	if (cfg->host_devices == 0 || cfg->host_devices > BACKEND_MAX_DEVICES ||
	    cfg->host_granularity == 0 || cfg->host_capacity < cfg->host_granularity)
		return -EINVAL;
	struct backend *b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->ops = &host_ops;
	b->n_devices = cfg->host_devices;
	for (unsigned i = 0; i < b->n_devices; i++) {
		struct backend_device *d = &b->devices[i];
		d->index = i;
		snprintf(d->uuid, sizeof(d->uuid), "host-%u", i);
		/* Whole granules only, so that free memory is always usable. */
		d->total_bytes = cfg->host_capacity / cfg->host_granularity *
				 cfg->host_granularity;
		d->granularity = cfg->host_granularity;
	}
	log_info("host backend: %u device(s) of %llu MiB", b->n_devices,
		 (unsigned long long)(b->devices[0].total_bytes >> 20));
	*out = b;
	return 0;
}
