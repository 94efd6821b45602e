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
 * CUDA: libvram's CUDA half pushes the device's primary context around
 * every driver call it makes, so malloc needs no context of its own. Two
 * things are done here for the cuda backend only, with driver entry points
 * looked up in the libcuda.so.1 that the process has already loaded
 * (PyTorch's; never loaded from here):
 * - Growing a pool maps memory. During a CUDA graph capture in the default
 *   "global" mode that is a prohibited call on the capturing thread, so
 *   malloc runs in the relaxed capture mode, as PyTorch does for its own
 *   cudaMalloc.
 * - free hands the bytes back to the sub-allocator, which may give them to
 *   the next allocation at once, maybe used on another stream. cudaFree
 *   waits for the device; free waits for the allocation's stream (never
 *   while that stream captures a graph).
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "pool.h"
#include "registry.h"
#include "cuda_driver.h"
#include "log.h"

#define TORCH_STACK_MAX 64
#define TORCH_MAX_DEVICES VRAM_MAX_DEVICES

/* CUstreamCaptureMode and CUstreamCaptureStatus values from cuda.h. */
#define TORCH_CAPTURE_MODE_RELAXED 2
#define TORCH_CAPTURE_STATUS_NONE 0

/* One registered pool: its handle and the range free() looks up. */
struct torch_range {
	vram_pool *pool;
	uintptr_t base, end;
	unsigned dev;
	bool cuda;
};

/* Driver entry points this file uses, from the loaded libcuda. */
struct torch_cuda {
	bool loaded;
	CUresult (*ctx_get_current)(CUcontext *ctx);
	CUresult (*ctx_push)(CUcontext ctx);
	CUresult (*ctx_pop)(CUcontext *ctx);
	CUresult (*device_get)(CUdevice *dev, int ordinal);
	CUresult (*primary_retain)(CUcontext *ctx, CUdevice dev);
	CUresult (*stream_sync)(CUstream s);
	CUresult (*stream_is_capturing)(CUstream s, int *status);
	CUresult (*exchange_capture_mode)(int *mode);
	CUcontext primary[TORCH_MAX_DEVICES];
};

static pthread_mutex_t torch_lock = PTHREAD_MUTEX_INITIALIZER;
static struct torch_range *torch_ranges; /* torch_lock */
static size_t torch_n_ranges, torch_cap_ranges;
static vram_pool *torch_default;   /* torch_lock */
static struct torch_cuda torch_cu; /* torch_lock for loading */

static __thread vram_pool *torch_stack[TORCH_STACK_MAX];
static __thread unsigned torch_depth;
static __thread char torch_errmsg[ERROR_MSG_MAX];

/* ---- the driver, if the process has it ------------------------------------ */

/* Looks the entry points up in an already loaded libcuda (lock held).
 * Tried again on later calls while it is not there. */
static void torch_cuda_load_locked(void)
{
	const char *path = getenv("VRAM_LIBCUDA");
	void *lib;

	if (torch_cu.loaded)
		return;
	if (!path || !*path)
		path = "libcuda.so.1";
	lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
	if (!lib)
		return;
	/* The handle is kept: the library stays loaded for the process. */
	torch_cu.ctx_get_current =
		(CUresult(*)(CUcontext *))dlsym(lib, "cuCtxGetCurrent");
	torch_cu.ctx_push =
		(CUresult(*)(CUcontext))dlsym(lib, "cuCtxPushCurrent_v2");
	torch_cu.ctx_pop =
		(CUresult(*)(CUcontext *))dlsym(lib, "cuCtxPopCurrent_v2");
	torch_cu.device_get =
		(CUresult(*)(CUdevice *, int))dlsym(lib, "cuDeviceGet");
	torch_cu.primary_retain = (CUresult(*)(CUcontext *, CUdevice))dlsym(
		lib, "cuDevicePrimaryCtxRetain");
	torch_cu.stream_sync =
		(CUresult(*)(CUstream))dlsym(lib, "cuStreamSynchronize");
	torch_cu.stream_is_capturing =
		(CUresult(*)(CUstream, int *))dlsym(lib, "cuStreamIsCapturing");
	torch_cu.exchange_capture_mode = (CUresult(*)(int *))dlsym(
		lib, "cuThreadExchangeStreamCaptureMode");
	torch_cu.loaded = true;
}

static struct torch_cuda *torch_cuda_get(void)
{
	pthread_mutex_lock(&torch_lock);
	torch_cuda_load_locked();
	pthread_mutex_unlock(&torch_lock);
	return torch_cu.loaded ? &torch_cu : NULL;
}

/* Sets this thread's capture mode to relaxed; returns the old one to give
 * to torch_capture_restore(), or -1 when nothing was changed. */
static int torch_capture_relax(struct torch_cuda *cu)
{
	int mode = TORCH_CAPTURE_MODE_RELAXED;

	if (!cu || !cu->exchange_capture_mode ||
	    cu->exchange_capture_mode(&mode) != CUDA_SUCCESS)
		return -1;
	return mode;
}

static void torch_capture_restore(struct torch_cuda *cu, int mode)
{
	if (mode >= 0)
		cu->exchange_capture_mode(&mode);
}

/* Makes dev's primary context current if the thread has none; *pushed says
 * whether torch_ctx_leave() must pop it. The primary context is retained
 * once per device for the life of the process, as libvram's CUDA half and
 * the CUDA runtime do. */
static int torch_ctx_enter(struct torch_cuda *cu, unsigned dev, bool *pushed)
{
	CUcontext cur = NULL;
	CUdevice d;
	int r = -ENODEV;

	*pushed = false;
	if (!cu->ctx_get_current || !cu->ctx_push || !cu->ctx_pop)
		return -ENOSYS;
	if (cu->ctx_get_current(&cur) == CUDA_SUCCESS && cur)
		return 0;
	if (dev >= TORCH_MAX_DEVICES || !cu->device_get || !cu->primary_retain)
		return -ENODEV;
	pthread_mutex_lock(&torch_lock);
	if (!cu->primary[dev] && cu->device_get(&d, (int)dev) == CUDA_SUCCESS)
		cu->primary_retain(&cu->primary[dev], d);
	if (cu->primary[dev] &&
	    cu->ctx_push(cu->primary[dev]) == CUDA_SUCCESS) {
		*pushed = true;
		r = 0;
	}
	pthread_mutex_unlock(&torch_lock);
	return r;
}

static void torch_ctx_leave(struct torch_cuda *cu, bool pushed)
{
	CUcontext popped;

	if (pushed)
		cu->ctx_pop(&popped);
}

/* Waits for the work queued on stream, unless it captures a graph. */
static void torch_stream_wait(unsigned dev, void *stream)
{
	struct torch_cuda *cu = torch_cuda_get();
	int status = -1;
	bool pushed;

	if (!cu || !cu->stream_sync || !cu->stream_is_capturing)
		return;
	if (torch_ctx_enter(cu, dev, &pushed) < 0)
		return;
	if (cu->stream_is_capturing((CUstream)stream, &status) ==
		    CUDA_SUCCESS &&
	    status == TORCH_CAPTURE_STATUS_NONE)
		cu->stream_sync((CUstream)stream);
	torch_ctx_leave(cu, pushed);
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
		e.dev = p->dev;
		e.cuda = strcmp(p->client->backend, "cuda") == 0;
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

void *vram_torch_malloc(ssize_t size, int device, void *stream)
{
	struct torch_range e;
	struct torch_cuda *cu = NULL;
	vram_pool *p;
	void *ptr = NULL;
	int mode, r;

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
	if (device >= 0 && (unsigned)device != e.dev)
		return torch_fail(VRAM_LOG_ERROR, ENODEV,
				  "allocation on device %d from a pool of "
				  "device %u",
				  device, e.dev);
	if (e.cuda)
		cu = torch_cuda_get();
	mode = torch_capture_relax(cu);
	r = vram_alloc(p, size > 0 ? (size_t)size : 1, &ptr);
	torch_capture_restore(cu, mode);
	if (r < 0)
		return torch_fail(r == -ENOMEM ? VRAM_LOG_WARN : VRAM_LOG_ERROR,
				  -r,
				  "allocation of %zd bytes on device %d: %s",
				  size, device, vram_last_error());
	torch_errmsg[0] = '\0';
	return ptr;
}

void vram_torch_free(void *ptr, ssize_t size, int device, void *stream)
{
	struct torch_range e;
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
	if (e.cuda)
		torch_stream_wait(e.dev, stream);
	r = vram_free(e.pool, ptr);
	/* A pool closed before torch let go of its memory (at exit, in any
	 * order) has nothing left to free. */
	if (r < 0)
		log_write(r == -EINVAL ? VRAM_LOG_DEBUG : VRAM_LOG_WARN,
			  "torch: free of %p on device %d: %s", ptr, device,
			  vram_last_error());
}
