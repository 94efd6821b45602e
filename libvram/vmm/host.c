/* SPDX-License-Identifier: Apache-2.0 */
/* The host backend's client half: a chunk is a memfd, mapping is mmap into
 * a range reserved with PROT_NONE, and unmapping puts PROT_NONE anonymous
 * memory back so the range stays reserved (touching paused memory faults,
 * as it would on a GPU). Copies are memcpy. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmm.h"
#include "attr.h"

#define RESERVE_FLAGS (MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE)

static uint64_t page_size(void)
{
	long p = sysconf(_SC_PAGESIZE);
	return p > 0 ? (uint64_t)p : 4096;
}

static void host_destroy(struct vmm *v)
{
	free(v);
}

static int host_reserve(struct vmm *v UNUSED, unsigned dev UNUSED, uint64_t size,
			uint64_t align, uintptr_t *addr)
{
	uint64_t page = page_size();

	if (size == 0 || size % page != 0 || !addr)
		return -EINVAL;
	if (align < page)
		align = page;
	if (align & (align - 1))
		return -EINVAL;
	if (size > SIZE_MAX - align)
		return -ENOMEM;
	/* Over-reserve by the alignment, then trim both ends. */
	size_t len = (size_t)(size + align);
	void *p = mmap(NULL, len, PROT_NONE, RESERVE_FLAGS, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	uintptr_t start = (uintptr_t)p;
	uintptr_t aligned = (start + align - 1) & ~(uintptr_t)(align - 1);
	if (aligned > start)
		munmap(p, aligned - start);
	uintptr_t end = start + len, aend = aligned + size;
	if (end > aend)
		munmap((void *)aend, end - aend);
	*addr = aligned;
	return 0;
}

static int host_unreserve(struct vmm *v UNUSED, uintptr_t addr, uint64_t size)
{
	if (munmap((void *)addr, size) < 0)
		return -errno;
	return 0;
}

/* Puts PROT_NONE memory back over [addr, addr+size): the range stays
 * reserved and nothing else can be mapped there by accident. */
static int host_rereserve(uintptr_t addr, uint64_t size)
{
	void *p = mmap((void *)addr, size, PROT_NONE, RESERVE_FLAGS | MAP_FIXED,
		       -1, 0);
	return p == MAP_FAILED ? -errno : 0;
}

static int host_map(struct vmm *v UNUSED, unsigned dev UNUSED, uintptr_t addr, uint64_t size,
		    int fd, int readonly, uintptr_t *handle)
{
	struct stat st;
	uint64_t page = page_size();

	if (size == 0 || size % page != 0 || addr % page != 0 || fd < 0)
		return -EINVAL;
	/* Mapping past the end of the memfd would fault later (SIGBUS). */
	if (fstat(fd, &st) < 0)
		return -errno;
	if (st.st_size < 0 || (uint64_t)st.st_size < size)
		return -EINVAL;
	int prot = PROT_READ | (readonly ? 0 : PROT_WRITE);
	void *p = mmap((void *)addr, size, prot, MAP_SHARED | MAP_FIXED, fd, 0);
	if (p == MAP_FAILED) {
		int err = -errno;
		/* A failed MAP_FIXED may have removed the reservation. */
		host_rereserve(addr, size);
		return err;
	}
	/* A forked child must not keep the chunk alive after a pause. */
	madvise(p, size, MADV_DONTFORK);
	if (handle)
		*handle = 0;
	return 0;
}

static int host_unmap(struct vmm *v UNUSED, unsigned dev UNUSED, uintptr_t addr,
		      uint64_t size, uintptr_t handle UNUSED)
{
	return host_rereserve(addr, size);
}

static int host_sync(struct vmm *v UNUSED, unsigned dev UNUSED)
{
	return 0;
}

static int host_register(struct vmm *v UNUSED, void *host UNUSED, size_t len UNUSED)
{
	return 0;
}

static int host_copy(struct vmm *v UNUSED, unsigned dev UNUSED, int to_host,
		     const struct vmm_span *spans, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (to_host)
			memcpy(spans[i].host, (void *)spans[i].dev,
			       spans[i].len);
		else
			memcpy((void *)spans[i].dev, spans[i].host,
			       spans[i].len);
	}
	return 0;
}

/* The host's devices are the daemon's, numbered the same everywhere. */
static int host_local_device(struct vmm *v UNUSED, unsigned dev)
{
	return (int)dev;
}

static const struct vmm_ops host_ops = {
	.name = "host",
	.destroy = host_destroy,
	.reserve = host_reserve,
	.unreserve = host_unreserve,
	.map = host_map,
	.unmap = host_unmap,
	.sync = host_sync,
	.host_register = host_register,
	.host_unregister = host_register,
	.copy = host_copy,
	.local_device = host_local_device,
};

int vmm_host_open(struct vmm **out)
{
	struct vmm *v = calloc(1, sizeof(*v));

	if (!v)
		return -ENOMEM;
	v->ops = &host_ops;
	*out = v;
	return 0;
}
