/* SPDX-License-Identifier: Apache-2.0 */
/* The PyTorch pluggable-allocator entry points: the malloc/free pair that
 * torch.cuda.memory.CUDAPluggableAllocator loads from libvram.so.0, so that
 * a torch.cuda.MemPool takes its segments from a vramd pool.
 *
 * Which pool: torch calls malloc with a size, a device and a stream, never
 * with a pool, and every MemPool of the process shares the same two entry
 * points. So the caller says which pool is current on its thread: a small
 * per-thread stack set by vram_torch_push_pool()/vram_torch_pop_pool()
 * (Python's vram.torch.region() pushes on entry and pops on exit), with a
 * process-wide default under it. free gets only the pointer: it finds its
 * pool in a table of the ranges of every pool ever pushed or made default.
 * Live pools' ranges never overlap, so registering a pool drops any stale
 * entry (of a closed pool) that overlaps its range.
 *
 * Devices: PyTorch names a device by this process's ordinal, the pool by
 * the daemon's index; the two differ in a worker started with its own
 * CUDA_VISIBLE_DEVICES. The backend's client half (the vmm) is the one
 * place that translates (vmm_local_device()); vram.torch creates each pool
 * on the device's UUID, so it is the right GPU to begin with.
 *
 * The driver: every call goes through the vmm, which makes the device's
 * primary context current around it, so malloc needs no context of its
 * own. Two of its optional operations serve PyTorch (the cuda backend has
 * them; the others do without):
 * - Growing a pool maps memory. During a CUDA graph capture in the default
 *   "global" mode that is a prohibited call on the capturing thread, so
 *   malloc runs in the relaxed capture mode, as PyTorch does for its own
 *   cudaMalloc (vmm_capture_relax()).
 * - free hands the bytes back to the sub-allocator, which may give them to
 *   the next allocation at once, maybe used on another stream. cudaFree
 *   waits for the device; free waits for the allocation's stream, never
 *   while that stream captures a graph (vmm_stream_wait()).
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "client.h"
#include "pool.h"
#include "registry.h"
#include "log.h"
#include "vmm.h"

#define TORCH_STACK_MAX 64

/* One registered pool: its handle and the range free() looks up. */
struct torch_range {
	vram_pool *pool;
	uintptr_t base, end;
};

static pthread_mutex_t torch_lock = PTHREAD_MUTEX_INITIALIZER;
static struct torch_range *torch_ranges; /* torch_lock */
static size_t torch_n_ranges, torch_cap_ranges;
static vram_pool *torch_default; /* torch_lock */

static __thread vram_pool *torch_stack[TORCH_STACK_MAX];
static __thread unsigned torch_depth;
static __thread char torch_errmsg[ERROR_MSG_MAX];

/* ---- the pool's vmm ----------------------------------------------------- */

/* The vmm and daemon device of an open pool, for driver calls that may
 * block (a stream's work): the pool is held open (its close, and its
 * client's, wait for torch_pool_release()) but no lock is held. -EINVAL
 * (message set) when p is closed. */
static int torch_pool_hold(vram_pool *p, struct vmm **vmm, unsigned *dev)
{
	int r = registry_pool_enter(p);

	if (r < 0)
		return r;
	*vmm = p->client->vmm;
	*dev = p->dev;
	pthread_mutex_unlock(&p->client->lock);
	return 0;
}

static void torch_pool_release(vram_pool *p)
{
	pthread_mutex_lock(&p->client->lock);
	registry_pool_leave(p);
}

/* ---- the pools' table ----------------------------------------------------- */

/* The entry of a pool (lock held), or NULL. */
static struct torch_range *torch_range_find(const vram_pool *p)
{
	for (size_t i = 0; i < torch_n_ranges; i++)
		if (torch_ranges[i].pool == p)
			return &torch_ranges[i];
	return NULL;
}

/* Adds p to the table if it is not there. 0, or -errno with a message:
 * -EINVAL not an open pool, -EPERM a pool this client cannot allocate
 * from, -ENOMEM. */
static int torch_range_add(vram_pool *p)
{
	struct torch_range e = { 0 };
	int r;

	pthread_mutex_lock(&torch_lock);
	bool known = torch_range_find(p) != NULL;
	pthread_mutex_unlock(&torch_lock);
	if (known)
		return 0;

	r = registry_pool_enter(p);
	if (r < 0)
		return r;
	if (!p->owner) {
		r = error_set(EPERM,
			      "pool %s is not owned by this client: "
			      "torch cannot allocate from it",
			      p->name);
	} else if (p->map.base == 0 || p->map.reserve == 0) {
		r = error_set(EINVAL, "pool %s has no range", p->name);
	} else {
		e.pool = p;
		e.base = p->map.base;
		e.end = p->map.base + p->map.reserve;
	}
	registry_pool_leave(p);
	if (r < 0)
		return r;

	pthread_mutex_lock(&torch_lock);
	if (torch_range_find(p))
		goto out; /* another thread was first */
	/* Whatever overlaps is a closed pool's: live ranges never overlap. */
	for (size_t i = 0; i < torch_n_ranges;) {
		if (torch_ranges[i].base < e.end &&
		    e.base < torch_ranges[i].end)
			torch_ranges[i] = torch_ranges[--torch_n_ranges];
		else
			i++;
	}
	if (torch_n_ranges == torch_cap_ranges) {
		size_t cap = torch_cap_ranges ? 2 * torch_cap_ranges : 8;
		struct torch_range *n = realloc(torch_ranges, cap * sizeof(*n));
		if (!n) {
			r = error_set(ENOMEM, "out of memory");
			goto out;
		}
		torch_ranges = n;
		torch_cap_ranges = cap;
	}
	torch_ranges[torch_n_ranges++] = e;
out:
	pthread_mutex_unlock(&torch_lock);
	return r;
}

/* The entry whose range holds ptr, copied into *out; false if none. */
static bool torch_range_lookup(uintptr_t ptr, struct torch_range *out)
{
	bool found = false;

	pthread_mutex_lock(&torch_lock);
	for (size_t i = 0; i < torch_n_ranges; i++) {
		if (ptr >= torch_ranges[i].base && ptr < torch_ranges[i].end) {
			*out = torch_ranges[i];
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&torch_lock);
	return found;
}

static bool torch_range_of(vram_pool *p, struct torch_range *out)
{
	bool found = false;

	pthread_mutex_lock(&torch_lock);
	struct torch_range *e = torch_range_find(p);
	if (e) {
		*out = *e;
		found = true;
	}
	pthread_mutex_unlock(&torch_lock);
	return found;
}

/* ---- public calls ---------------------------------------------------------- */

int vram_torch_push_pool(vram_pool *p)
{
	unsigned eg = error_generation();
	int r;

	if (!p)
		return error_finish(
			eg, error_set(EINVAL, "vram_torch_push_pool: no pool"));
	if (torch_depth >= TORCH_STACK_MAX)
		return error_finish(
			eg,
			error_set(EOVERFLOW,
				  "vram_torch_push_pool: more than %d pools "
				  "pushed on this thread",
				  TORCH_STACK_MAX));
	r = torch_range_add(p);
	if (r < 0)
		return error_finish(eg, r);
	torch_stack[torch_depth++] = p;
	return 0;
}

int vram_torch_pop_pool(void)
{
	unsigned eg = error_generation();

	if (torch_depth == 0)
		return error_finish(
			eg, error_set(EINVAL, "vram_torch_pop_pool: no pool "
					      "pushed on this thread"));
	torch_stack[--torch_depth] = NULL;
	return 0;
}

int vram_torch_set_default_pool(vram_pool *p)
{
	unsigned eg = error_generation();
	int r;

	if (p) {
		r = torch_range_add(p);
		if (r < 0)
			return error_finish(eg, r);
	}
	pthread_mutex_lock(&torch_lock);
	torch_default = p;
	pthread_mutex_unlock(&torch_lock);
	return 0;
}

const char *vram_torch_last_error(void)
{
	return torch_errmsg;
}

/* Keeps why malloc failed for vram_torch_last_error() and the log. */
static void *torch_fail(enum vram_log_level level, int err, const char *fmt,
			...) __attribute__((format(printf, 3, 4)));

static void *torch_fail(enum vram_log_level level, int err, const char *fmt,
			...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(torch_errmsg, sizeof(torch_errmsg), fmt, ap);
	va_end(ap);
	log_write(level, "torch: %s", torch_errmsg);
	error_set(err, "%s", torch_errmsg);
	return NULL;
}

/* Grows and allocates from p, on PyTorch's device (this process's
 * ordinal; -1: any), which must be the pool's. With p held. */
static void *torch_alloc(vram_pool *p, struct vmm *vmm, unsigned dev,
			 ssize_t size, int device)
{
	void *ptr = NULL;
	int local, mode, r;

	local = vmm_local_device(vmm, dev);
	if (local < 0)
		return torch_fail(VRAM_LOG_ERROR, -local,
				  "allocation of %zd bytes on device %d: %s",
				  size, device, vram_last_error());
	if (device >= 0 && device != local)
		return torch_fail(VRAM_LOG_ERROR, ENODEV,
				  "allocation on device %d from a pool of "
				  "device %d here (the daemon's device %u)",
				  device, local, dev);
	mode = vmm_capture_relax(vmm);
	r = vram_alloc(p, size > 0 ? (size_t)size : 1, &ptr);
	vmm_capture_restore(vmm, mode);
	if (r < 0)
		return torch_fail(r == -ENOMEM ? VRAM_LOG_WARN : VRAM_LOG_ERROR,
				  -r,
				  "allocation of %zd bytes on device %d: %s",
				  size, device, vram_last_error());
	return ptr;
}

void *vram_torch_malloc(ssize_t size, int device, void *stream)
{
	struct torch_range e;
	struct vmm *vmm;
	vram_pool *p;
	unsigned dev;
	void *ptr;

	(void)stream; /* pool memory is not tied to a stream */
	if (torch_depth > 0) {
		p = torch_stack[torch_depth - 1];
	} else {
		pthread_mutex_lock(&torch_lock);
		p = torch_default;
		pthread_mutex_unlock(&torch_lock);
	}
	if (!p)
		return torch_fail(VRAM_LOG_ERROR, EINVAL,
				  "no vramd pool for an allocation of %zd "
				  "bytes on device %d: allocate inside "
				  "vram.torch.region() or set a default pool",
				  size, device);
	if (size < 0)
		return torch_fail(VRAM_LOG_ERROR, EINVAL,
				  "allocation of %zd bytes", size);
	if (!torch_range_of(p, &e))
		return torch_fail(VRAM_LOG_ERROR, EINVAL,
				  "the current pool is not registered");
	if (torch_pool_hold(p, &vmm, &dev) < 0)
		return torch_fail(VRAM_LOG_ERROR, EINVAL,
				  "allocation of %zd bytes on device %d: %s",
				  size, device, vram_last_error());
	ptr = torch_alloc(p, vmm, dev, size, device);
	torch_pool_release(p);
	if (ptr)
		torch_errmsg[0] = '\0';
	return ptr;
}

void vram_torch_free(void *ptr, ssize_t size, int device, void *stream)
{
	struct torch_range e;
	struct vmm *vmm;
	unsigned dev;
	int r;

	if (!ptr)
		return;
	if (!torch_range_lookup((uintptr_t)ptr, &e)) {
		log_write(VRAM_LOG_ERROR,
			  "torch: free of %p (%zd bytes), which no vramd pool "
			  "holds",
			  ptr, size);
		return;
	}
	/* A pool closed before torch let go of its memory (at exit, in any
	 * order) has nothing left to free or wait for. */
	if (torch_pool_hold(e.pool, &vmm, &dev) < 0) {
		log_write(VRAM_LOG_DEBUG, "torch: free of %p on device %d: %s",
			  ptr, device, vram_last_error());
		return;
	}
	r = vmm_stream_wait(vmm, dev, stream);
	if (r < 0)
		log_write(VRAM_LOG_WARN,
			  "torch: free of %p on device %d: waiting for its "
			  "stream: %s",
			  ptr, device, vram_last_error());
	r = vram_free(e.pool, ptr);
	torch_pool_release(e.pool);
	if (r < 0)
		log_write(r == -EINVAL ? VRAM_LOG_DEBUG : VRAM_LOG_WARN,
			  "torch: free of %p on device %d: %s", ptr, device,
			  vram_last_error());
}
