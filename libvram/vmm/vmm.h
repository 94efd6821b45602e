/* SPDX-License-Identifier: Apache-2.0 */
/* The client's side of a backend: reserving virtual ranges, importing and
 * mapping chunk fds into them, and copying between the pool and its host
 * backup. libvram picks the implementation from the backend name the daemon
 * announces in its hello reply; nothing above this interface knows which
 * one runs. The daemon's side is daemon/backend/backend.h.
 */
#ifndef VRAM_VMM_H
#define VRAM_VMM_H

#include <stddef.h>
#include <stdbool.h>
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
	/* host_register pins the pages (faulting in those not there one by
	 * one): mapping.c faults them in first, from several threads. */
	bool host_pins;
	/* Copies every span (to_host: device to host, else host to device),
	 * overlapping them as the device allows, and returns when all are
	 * done. */
	int (*copy)(struct vmm *v, unsigned dev, int to_host,
		    const struct vmm_span *spans, size_t n);
	/* Optional (NULL: copy is the only way). copy_issue queues the spans
	 * on copy lane lane (below VMM_LANES) and returns without waiting;
	 * copy_wait(lane) waits for everything queued there. A lane's copies
	 * are waited for apart from the other's, so a copy can be queued
	 * behind one under way and the older one waited for alone. After any
	 * copy_issue, failed or not, the caller waits for its lane before it
	 * unmaps or reuses the memory. */
	int (*copy_issue)(struct vmm *v, unsigned dev, unsigned lane,
			  int to_host, const struct vmm_span *spans, size_t n);
	int (*copy_wait)(struct vmm *v, unsigned dev, unsigned lane);
	/* This process's ordinal of the daemon's device dev (what the
	 * framework running here, PyTorch, calls it), or -ENODEV with a
	 * message when this process cannot see it. The one place a daemon
	 * device becomes a local one: every layer above asks here. */
	int (*local_device)(struct vmm *v, unsigned dev);
	/* Optional (NULL: the backend has no graph capture to relax). Puts
	 * the calling thread in the relaxed stream-capture mode, so that a
	 * call that maps memory is legal while the thread captures a graph;
	 * returns the mode to give capture_restore(), or -errno. */
	int (*capture_relax)(struct vmm *v);
	void (*capture_restore)(struct vmm *v, int mode);
	/* Optional. Waits for the work queued on the framework's stream of
	 * the daemon's device dev, unless that stream captures a graph. */
	int (*stream_wait)(struct vmm *v, unsigned dev, void *stream);
};

#define VMM_MAX_DEVICES 16
#define VMM_LANES 2 /* copy lanes (copy_issue) */

struct vmm {
	const struct vmm_ops *ops;
	/* The daemon's devices by its index, as its hello reply names them:
	 * a GPU half finds its own device by UUID ("" : by index), since this
	 * process may see the devices in another order or a subset of them
	 * (CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES). */
	char dev_uuid[VMM_MAX_DEVICES][64];
	int warned_readonly; /* vmm_grant_access() logged its fallback */
};

/* Opens the client side of the named backend. -ENOENT if its library is
 * absent here. */
int vmm_open(const char *backend, struct vmm **out);
void vmm_destroy(struct vmm *v);

/* The optional operations, for callers that need not know which are
 * there: vmm_capture_relax() is -ENOTSUP without one (and
 * vmm_capture_restore() of a negative mode does nothing); vmm_stream_wait()
 * is 0 without one. vmm_local_device() is the operation itself. */
int vmm_local_device(struct vmm *v, unsigned dev);
int vmm_capture_relax(struct vmm *v);
void vmm_capture_restore(struct vmm *v, int mode);
int vmm_stream_wait(struct vmm *v, unsigned dev, void *stream);

/* Sets a new mapping's access for a GPU half: grant() is the driver's
 * call for [addr, addr + size) on the half's device dev (0 or -errno with
 * the driver's message set). When a read-only grant is refused as
 * unsupported (-EINVAL, -ENOTSUP), it is granted read-write instead, with
 * a warning logged once per vmm: some drivers grant device memory only
 * read-write, and the mapping is still shared, so read-only is then a
 * promise, not a fault. */
typedef int vmm_grant_fn(struct vmm *v, uintptr_t addr, uint64_t size, int dev,
			 int readonly);
int vmm_grant_access(struct vmm *v, uintptr_t addr, uint64_t size, int dev,
		     int readonly, vmm_grant_fn *grant);

int vmm_host_open(struct vmm **out);
int vmm_cuda_open(struct vmm **out);
int vmm_hip_open(struct vmm **out);

#endif
