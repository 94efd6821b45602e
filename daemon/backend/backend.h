/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's side of a backend: how physical memory is made and freed.
 * Nothing above this interface knows which backend runs. The client's side
 * (importing, mapping, copying) is libvram/vmm/vmm.h.
 *
 * A chunk is one physical allocation, exported as a POSIX fd. The fd, and
 * where the backend keeps one the driver's handle, are the daemon's
 * reference: the memory stays allocated while the daemon holds either or
 * any client holds an import or mapping of it, and returns to the device
 * when all of them are gone. A backend with a handle can let the fd go
 * while the handle holds the chunk (chunk_unexport: the daemon does it to
 * active pools once the node is idle, docs/gpu.md, "What a pause's free
 * costs") and make it again when a chunk must be sent (chunk_export).
 */
#ifndef VRAMD_BACKEND_H
#define VRAMD_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#define BACKEND_MAX_DEVICES 16

struct backend_device {
	unsigned index;
	char uuid[64];
	uint64_t total_bytes;
	uint64_t granularity; /* chunk sizes are multiples of this */
	uint64_t used_bytes;  /* in chunks the daemon holds on this device */
};

/* One physical allocation held by the daemon. */
struct chunk {
	uint64_t offset;  /* in the pool's range; set by the pool */
	uint64_t size;
	int fd;           /* exported handle, owned by the daemon, or -1 */
	uintptr_t handle; /* backend-private, 0 if unused; with fd -1, the
			   * daemon's whole reference */
	bool counted;     /* its bytes count in used_bytes: until released */
	/* Which creation made fd (backend_chunk_create numbers them from 1),
	 * so that the fd store knows an fd number for the same file without
	 * an fstat; 0 when the fd came another way (recovered). */
	uint64_t serial;
};

struct backend;

/* A process using a device, as the driver reports it. */
struct backend_process {
	uint32_t pid;
	uint64_t used_bytes; /* BACKEND_USED_UNKNOWN if the driver cannot tell */
};
#define BACKEND_USED_UNKNOWN UINT64_MAX

struct backend_ops {
	const char *name;
	/* Frees everything the backend holds; chunks must be released first. */
	void (*destroy)(struct backend *b);
	/* Device free and total memory as the device reports it now (for the
	 * host backend: the configured capacity less the chunks alive). Never
	 * waits: memory whose release is still under way may not show yet. */
	int (*mem_info)(struct backend *b, unsigned dev, uint64_t *free_bytes,
			uint64_t *total_bytes);
	/* Makes a chunk of c->size bytes (a multiple of the granularity) on
	 * dev and fills c->fd (CLOEXEC) and c->handle. -ENOMEM when the
	 * device is full; nothing is held on failure. Never waits for
	 * releases under way: call settle first where they must count. */
	int (*chunk_create)(struct backend *b, unsigned dev, struct chunk *c);
	/* Drops the daemon's reference: closes c->fd (if any) and releases
	 * c->handle (if any), and sets them to -1 and 0. */
	void (*chunk_release)(struct backend *b, unsigned dev, struct chunk *c);
	/* Optional: lets go of c->fd (c->fd >= 0, c->handle set) while
	 * c->handle holds the chunk, and sets c->fd to -1. The close frees
	 * nothing, but tears down the export, which takes the driver some
	 * time (0.6-0.8 ms on the H200): settle waits for it too. */
	void (*chunk_unexport)(struct backend *b, unsigned dev,
			       struct chunk *c);
	/* With chunk_unexport: makes c->fd (CLOEXEC) again from c->handle.
	 * Returns 0 or -errno (c->fd stays -1). */
	int (*chunk_export)(struct backend *b, unsigned dev, struct chunk *c);
	/* Optional: the processes using dev. Returns the count and *out
	 * (free()), or -errno. NULL when the backend cannot tell. */
	int (*processes)(struct backend *b, unsigned dev,
			 struct backend_process **out);
	/* Optional: returns once the memory of every chunk released so far
	 * is back on its device (or, where the driver may never say so, a
	 * bounded wait has passed). It waits, so the daemon calls it on a
	 * worker thread, never on its loop; it is safe beside the other
	 * operations running on the loop. NULL: releases are immediate. */
	void (*settle)(struct backend *b);
	/* Optional, with settle: would settle return at once? Cheap. */
	bool (*settled)(struct backend *b);
	/* Optional: while on (and for a bounded time after the last
	 * on), keeps the device clearing what other processes free, so that
	 * the next large chunk does not wait for it (cuda_pump.h). Cheap;
	 * never waits. */
	void (*pump_set)(struct backend *b, unsigned dev, bool on);
};

struct backend {
	const struct backend_ops *ops;
	unsigned n_devices;
	struct backend_device devices[BACKEND_MAX_DEVICES];
	uint64_t used_bytes; /* bytes in chunks the daemon holds */
	/* Counts the chunk fds made and let go (backend_chunk_create and
	 * backend_chunk_unref): while it stands still, every chunk fd is the
	 * file it was (the fd store checks it to skip its walk). Code that
	 * gives a chunk an fd any other way must add one to it. */
	uint64_t chunk_gen;
};

struct backend_config {
	const char *name;       /* "auto", "host", "cuda", "hip" */
	uint64_t host_capacity; /* per emulated device */
	unsigned host_devices;
	uint64_t host_granularity;
};

/* Opens the named backend ("auto": cuda, then hip, then host). Returns 0
 * and fills *out (free with backend_destroy), or -errno with a message in
 * the log: -ENOENT when the backend's library is absent, -ENODEV when it
 * sees no device. */
int backend_open(const struct backend_config *cfg, struct backend **out);
void backend_destroy(struct backend *b);

/* Chunk helpers that keep used_bytes in step. */
int backend_chunk_create(struct backend *b, unsigned dev, struct chunk *c);
void backend_chunk_release(struct backend *b, unsigned dev, struct chunk *c);
/* Drops the daemon's reference but keeps the bytes counted: mappers may
 * still hold the memory (a pause in progress). backend_chunk_release()
 * later uncounts them. */
void backend_chunk_unref(struct backend *b, unsigned dev, struct chunk *c);
/* Does the daemon hold c (by its fd or its handle)? */
bool backend_chunk_held(const struct chunk *c);
/* c's fd, made again from its handle if it was let go. Returns the fd or
 * -errno (-EBADF: c is not held). */
int backend_chunk_fd(struct backend *b, unsigned dev, struct chunk *c);
/* Lets go of c's fd where its handle holds it (the backend's
 * chunk_unexport); true if it did. */
bool backend_chunk_unexport(struct backend *b, unsigned dev, struct chunk *c);
int backend_mem_info(struct backend *b, unsigned dev, uint64_t *free_bytes,
		     uint64_t *total_bytes);
/* Sum of the free bytes of every device, as they read now. */
uint64_t backend_free_bytes(struct backend *b);
/* The ops' settle and settled, for backends without them too: settle
 * waits (call it off the loop), settled is true when it would not. */
void backend_settle(struct backend *b);
bool backend_settled(struct backend *b);
/* The ops' pump_set, where the backend has one: transitions turn it on at
 * each resume and off once nothing of dev is paused (transition.h). */
void backend_pump_set(struct backend *b, unsigned dev, bool on);

/* Each backend's constructor; -ENOENT/-ENODEV when it cannot run here. */
int backend_host_open(const struct backend_config *cfg, struct backend **out);
int backend_cuda_open(const struct backend_config *cfg, struct backend **out);
int backend_hip_open(const struct backend_config *cfg, struct backend **out);

#endif
