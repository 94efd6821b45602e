/* SPDX-License-Identifier: Apache-2.0 */
/* The copy planner of libvram's GPU halves (cuda.c, hip.c): how a copy
 * between a pool and its host backup is cut into pieces and spread over a
 * few streams per device. The halves keep only the driver's calls, given
 * here as three operations.
 *
 * A span list is cut into pieces of at most `piece` bytes, issued
 * round-robin on the streams of one of the device's lanes (made the first
 * time the lane copies, non-blocking), then every stream used is
 * synchronized, even after a failed piece: the caller may unmap or reuse
 * the memory next.
 *
 * Lanes: a copy may also be issued on a lane and waited for later
 * (vmm_copy_issue, vmm_copy_wait), so that a restore in parts queues the
 * next chunk's copy behind the one under way and waits only for the
 * older: each lane has streams of its own, and a wait for one lane does
 * not wait for the other's copies. vmm_copy_run copies on lane 0.
 */
#ifndef LIBVRAM_VMM_COPY_H
#define LIBVRAM_VMM_COPY_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm.h"

#define VMM_COPY_MAX_STREAMS 16
#define VMM_COPY_LANES VMM_LANES

/* The driver's side; drv is the half's own state. Each returns 0 or
 * -errno with the driver's words set by error_set(). */
struct vmm_copy_ops {
	/* Makes one non-blocking stream on the current device. */
	int (*stream_create)(void *drv, void **stream);
	/* Queues one piece on stream (to_host: device to host). */
	int (*memcpy_async)(void *drv, int to_host, uintptr_t dev, void *host,
			    size_t len, void *stream);
	/* Waits for what stream was given. */
	int (*stream_sync)(void *drv, void *stream);
};

/* One lane's copy streams on one device. */
struct vmm_copy_queue {
	unsigned n_streams;
	void *streams[VMM_COPY_MAX_STREAMS];
};

struct vmm_copy {
	const struct vmm_copy_ops *ops;
	void *drv;
	const char *streams_env, *piece_env; /* the half's settings */
	pthread_mutex_t lock; /* the settings and the queues' setup */
	unsigned streams;     /* per device; 0 until the first copy */
	uint64_t piece;
	struct vmm_copy_queue queues[VMM_MAX_DEVICES][VMM_COPY_LANES];
};

/* Sets up c for a half: its driver operations and state, and the names of
 * its two settings (streams per lane of a device, 1-16, default 2; largest
 * piece in MiB, default 256), read at the first copy. */
void vmm_copy_init(struct vmm_copy *c, const struct vmm_copy_ops *ops,
		   void *drv, const char *streams_env, const char *piece_env);
void vmm_copy_fini(struct vmm_copy *c);

/* Copies every span for device dev (the index the half keeps its streams
 * by), with that device current on the calling thread. */
int vmm_copy_run(struct vmm_copy *c, unsigned dev, int to_host,
		 const struct vmm_span *spans, size_t n);

/* Queues every span on lane's streams and returns without waiting. After
 * any issue, failed or not, the caller waits for the lane before it
 * unmaps or reuses the memory: some pieces may have been queued. */
int vmm_copy_issue(struct vmm_copy *c, unsigned dev, unsigned lane, int to_host,
		   const struct vmm_span *spans, size_t n);
/* Waits for everything queued on lane's streams of dev; the first error. */
int vmm_copy_wait(struct vmm_copy *c, unsigned dev, unsigned lane);

/* The streams made for dev over every lane, into out (room for
 * VMM_COPY_LANES * VMM_COPY_MAX_STREAMS), for the half to destroy. */
unsigned vmm_copy_streams(const struct vmm_copy *c, unsigned dev, void **out);

#endif
