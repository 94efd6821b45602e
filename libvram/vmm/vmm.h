/* The client's side of a backend: reserving virtual ranges, importing and
 * mapping chunk fds into them, and copying between the pool and its host
 * backup. libvram picks the implementation from the backend name the daemon
 * announces in its hello reply; nothing above this interface knows which
 * one runs. The daemon's side is daemon/backend/backend.h.
 */
#ifndef VRAM_VMM_H
#define VRAM_VMM_H

#include <stddef.h>
#include <stdint.h>

/* One contiguous piece of a copy between device memory and host memory. */
struct vmm_span {
	uintptr_t dev; /* address in a mapped pool range */
	void *host;    /* address in the mapped backup */
	size_t len;
};

struct vmm;

struct vmm_ops {
	const char *name;
	void (*destroy)(struct vmm *v);
	/* Reserves size bytes of virtual range (no physical memory) aligned to
	 * align, for device dev. */
	int (*reserve)(struct vmm *v, unsigned dev, uint64_t size, uint64_t align,
		       uintptr_t *addr);
	/* Frees a range from reserve(); everything in it must be unmapped. */
	int (*unreserve)(struct vmm *v, uintptr_t addr, uint64_t size);
	/* Imports the chunk fd (the caller keeps and closes it), maps it at
	 * addr inside a reserved range and grants access (read-only if
	 * readonly). *handle receives what unmap needs. On failure nothing is
	 * mapped or held. */
	int (*map)(struct vmm *v, unsigned dev, uintptr_t addr, uint64_t size,
		   int fd, int readonly, uintptr_t *handle);
	/* Unmaps and releases an import, keeping the range reserved so the
	 * same address can be mapped again. */
	int (*unmap)(struct vmm *v, unsigned dev, uintptr_t addr, uint64_t size,
		     uintptr_t handle);
	/* Waits for the GPU work of this process on dev to finish. */
	int (*sync)(struct vmm *v, unsigned dev);
	/* Makes host memory (a mapped backup) fit for fast copies, once;
	 * unregister undoes it. Both may be no-ops. */
	int (*host_register)(struct vmm *v, void *host, size_t len);
	int (*host_unregister)(struct vmm *v, void *host, size_t len);
	/* Copies every span (to_host: device to host, else host to device),
	 * overlapping them as the device allows, and returns when all are
	 * done. */
	int (*copy)(struct vmm *v, unsigned dev, int to_host,
		    const struct vmm_span *spans, size_t n);
};

#define VMM_MAX_DEVICES 16

struct vmm {
	const struct vmm_ops *ops;
	void *priv;
	/* The daemon's devices by its index, as its hello reply names them:
	 * a GPU half finds its own device by UUID ("" : by index), since this
	 * process may see the devices in another order or a subset of them
	 * (CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES). */
	char dev_uuid[VMM_MAX_DEVICES][64];
};

/* Opens the client side of the named backend. -ENOENT if its library is
 * absent here. */
int vmm_open(const char *backend, struct vmm **out);
void vmm_destroy(struct vmm *v);

int vmm_host_open(struct vmm **out);
int vmm_cuda_open(struct vmm **out);
int vmm_hip_open(struct vmm **out);

#endif
