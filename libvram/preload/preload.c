/* SPDX-License-Identifier: Apache-2.0 */
/* libvram-preload.so: whole-process capture of the CUDA and HIP runtimes'
 * device allocations into vramd pools (docs/preload.md says why and how).
 *
 * Loaded with LD_PRELOAD, this library's cudaMalloc, cudaFree,
 * cudaMallocAsync and cudaFreeAsync (and HIP's) come before the runtime's
 * in the process's symbol lookup, so PyTorch's caching allocator and every
 * other caller of the runtime reach them. Each allocation is decided here:
 * a vramd pool (region, or whole-process mode) or the real runtime, which
 * is found with dlsym(RTLD_NEXT) or, when the runtime was loaded into a
 * local scope, in the already loaded library itself.
 *
 * Pool memory comes from libvram's PyTorch allocator entry points
 * (vram_torch_malloc/vram_torch_free), so that the logic a CUDA caller
 * needs is in one place: growing a pool in the relaxed capture mode during
 * a graph capture, waiting for the stream before a free, the primary
 * context, finding a pointer's pool. The pool of a call is pushed on
 * libvram's per-thread stack around that call only, so the stack of a
 * Python program that also uses vram.torch is left as it was.
 *
 * Only libvram's public API (vram.h) is used.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ptr_table.h"
#include "thread.h"
#include "vram.h"
#include "vram_preload.h"

#define EXPORT __attribute__((visibility("default")))

/* The runtimes' codes this file returns: the same numbers in CUDA and HIP
 * (cudaErrorMemoryAllocation, hipErrorOutOfMemory). */
#define RT_SUCCESS 0
#define RT_INVALID_VALUE 1
#define RT_OUT_OF_MEMORY 2
/* cudaStreamCaptureStatusActive, hipStreamCaptureStatusActive. */
#define RT_CAPTURE_ACTIVE 1

#define PRELOAD_MAX_POOLS 256
#define PRELOAD_MSG_MAX 256

typedef int (*rt_malloc_fn)(void **ptr, size_t size);
typedef int (*rt_free_fn)(void *ptr);
typedef int (*rt_malloc_async_fn)(void **ptr, size_t size, void *stream);
typedef int (*rt_free_async_fn)(void *ptr, void *stream);
typedef int (*rt_get_device_fn)(int *dev);
typedef int (*rt_is_capturing_fn)(void *stream, int *status);
typedef int (*rt_device_sync_fn)(void);
typedef int (*rt_stream_sync_fn)(void *stream);

/* The names of one runtime's calls. */
struct runtime_names {
	const char *malloc_, *free_, *malloc_async, *free_async;
	const char *malloc_async_ptsz, *free_async_ptsz;
	const char *get_device, *is_capturing, *device_sync, *stream_sync;
};

/* One runtime's real entry points, looked up on first use. */
struct runtime {
	const char *name;	 /* "cuda", "hip" */
	const char *const *libs; /* sonames to look in when RTLD_NEXT finds
				  * nothing */
	const char *env;	 /* names the library instead of libs */
	struct runtime_names sym;
	pthread_once_t once;
	rt_malloc_fn malloc_;
	rt_free_fn free_;
	rt_malloc_async_fn malloc_async, malloc_async_ptsz;
	rt_free_async_fn free_async, free_async_ptsz;
	rt_get_device_fn get_device;
	rt_is_capturing_fn is_capturing;
	rt_device_sync_fn device_sync;
	rt_stream_sync_fn stream_sync;
};

static const char *const cuda_libs[] = { "libcudart.so.13", "libcudart.so.12",
					 "libcudart.so.11.0", "libcudart.so",
					 NULL };
static const char *const hip_libs[] = { "libamdhip64.so.6", "libamdhip64.so.5",
					"libamdhip64.so", NULL };

static struct runtime rt_cuda = {
	.name = "cuda",
	.libs = cuda_libs,
	.env = "VRAM_CUDART",
	.sym = { .malloc_ = "cudaMalloc",
		 .free_ = "cudaFree",
		 .malloc_async = "cudaMallocAsync",
		 .free_async = "cudaFreeAsync",
		 .malloc_async_ptsz = "cudaMallocAsync_ptsz",
		 .free_async_ptsz = "cudaFreeAsync_ptsz",
		 .get_device = "cudaGetDevice",
		 .is_capturing = "cudaStreamIsCapturing",
		 .device_sync = "cudaDeviceSynchronize",
		 .stream_sync = "cudaStreamSynchronize" },
	.once = PTHREAD_ONCE_INIT,
};

static struct runtime rt_hip = {
	.name = "hip",
	.libs = hip_libs,
	.env = "VRAM_HIPRT",
	.sym = { .malloc_ = "hipMalloc",
		 .free_ = "hipFree",
		 .malloc_async = "hipMallocAsync",
		 .free_async = "hipFreeAsync",
		 .get_device = "hipGetDevice",
		 .is_capturing = "hipStreamIsCapturing",
		 .device_sync = "hipDeviceSynchronize",
		 .stream_sync = "hipStreamSynchronize" },
	.once = PTHREAD_ONCE_INIT,
};

/* One scope of a thread's stack. */
struct scope {
	int off; /* a disable scope */
	int backup;
	char tag[VRAM_PRELOAD_TAG_MAX];
};

/* One pool the library made: a tag's memory on a device. */
struct preload_pool {
	char tag[VRAM_PRELOAD_TAG_MAX];
	int backup;
	int dev;
	int retain; /* made to keep its backup after a resume */
	vram_pool *pool;
};

/* Settings read from the environment when the library is loaded. */
static struct {
	int whole;  /* whole-process mode */
	int backup; /* the default tag keeps a host backup */
	atomic_int retain; /* pools made from now on keep their backup's
			    * pages after a resume (vram_preload_set_retain) */
	char tag[VRAM_PRELOAD_TAG_MAX];
	uint64_t reserve;
	int expandable; /* PyTorch's expandable segments were asked for */
} cfg;

static pthread_mutex_t preload_lock = PTHREAD_MUTEX_INITIALIZER;
static vram_client *preload_client; /* preload_lock */
static struct preload_pool preload_pools[PRELOAD_MAX_POOLS];
static unsigned preload_n_pools; /* preload_lock */
static struct ptr_table preload_ptrs;
static atomic_uint_fast64_t preload_failed;
static atomic_int preload_warned;

/* The report of what the process allocated outside the pools (vramd's
 * audit and pause reports show it): a thread sends it whenever the
 * figures changed, so that no allocation waits for the daemon. */
static pthread_mutex_t outside_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t outside_cond = PTHREAD_COND_INITIALIZER;
static int outside_dirty;   /* outside_lock */
static int outside_started; /* preload_lock */

static __thread struct scope scope_stack[VRAM_PRELOAD_DEPTH_MAX];
static __thread unsigned scope_depth;
/* Set while this thread is in libvram: a runtime call made from there
 * (none today) must not come back into a pool. */
static __thread int in_preload;
static __thread char preload_msg[PRELOAD_MSG_MAX];

/* ---- settings ----------------------------------------------------------- */

static int env_on(const char *name)
{
	const char *v = getenv(name);

	return v && *v && strcmp(v, "0") != 0 && strcasecmp(v, "false") != 0;
}

/* Forgets the parent's session in a fork child: its client and pools are
 * unusable there (libvram returns -EPIPE) and the child maps no pool
 * memory, so the child starts over and connects on its first allocation. */
static void preload_atfork_child(void)
{
	pthread_mutex_init(&preload_lock, NULL);
	pthread_mutex_init(&outside_lock, NULL);
	pthread_cond_init(&outside_cond, NULL);
	outside_dirty = 0;
	outside_started = 0;
	preload_client = NULL;
	preload_n_pools = 0;
	ptr_table_reset(&preload_ptrs);
}

/* PyTorch's expandable segments map memory with the driver's cuMem*
 * calls, which no runtime call sees: in whole-process mode that memory
 * would stay outside every pool, so say so once at start. */
static void preload_check_torch_settings(void)
{
	const char *names[] = { "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF",
				"PYTORCH_HIP_ALLOC_CONF" };

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const char *v = getenv(names[i]);
		if (!v || !strcasestr(v, "expandable_segments:true"))
			continue;
		cfg.expandable = 1;
		if (cfg.whole)
			fprintf(stderr,
				"vram-preload: %s has expandable_segments:True: "
				"PyTorch then maps memory with the driver, "
				"outside any vramd pool (docs/preload.md)\n",
				names[i]);
	}
}

__attribute__((constructor)) static void preload_init(void)
{
	const char *tag = getenv("VRAM_CAPTURE_TAG");
	const char *reserve = getenv("VRAM_CAPTURE_RESERVE");

	cfg.whole = env_on("VRAM_CAPTURE") || env_on("TMS_INIT_ENABLE");
	cfg.backup = env_on("VRAM_CAPTURE_BACKUP") ||
		     env_on("TMS_INIT_ENABLE_CPU_BACKUP");
	/* torch_memory_saver's "mmap" backend is vramd's pageable backup. */
	const char *be = getenv("TMS_INIT_CPU_BACKUP_BACKEND");
	if (cfg.backup && be && strcmp(be, "mmap") == 0)
		cfg.backup = VRAM_PRELOAD_BACKUP_PAGEABLE;
	atomic_store(&cfg.retain, env_on("VRAM_CAPTURE_RETAIN") ||
					  env_on("TMS_RETAIN_CPU_BACKUP"));
	if (!tag || !*tag || strlen(tag) >= sizeof(cfg.tag))
		tag = "default";
	snprintf(cfg.tag, sizeof(cfg.tag), "%s", tag);
	if (reserve && *reserve)
		cfg.reserve = strtoull(reserve, NULL, 0);
	ptr_table_init(&preload_ptrs);
	pthread_atfork(NULL, NULL, preload_atfork_child);
	preload_check_torch_settings();
}

/* ---- the real runtimes -------------------------------------------------- */

static void *rt_lookup(void *lib, const char *name, void *self)
{
	void *f;

	if (!name)
		return NULL;
	f = lib ? dlsym(lib, name) : dlsym(RTLD_NEXT, name);
	/* Never our own definition: that would call itself. */
	return f == self ? NULL : f;
}

static void rt_load(struct runtime *rt, void *self_malloc)
{
	const struct runtime_names *n = &rt->sym;
	const char *want = getenv(rt->env);
	void *lib = NULL;

	/* RTLD_NEXT finds a runtime in the global scope (linked by the
	 * program, or loaded with RTLD_GLOBAL as torch does). One loaded
	 * into a local scope is found by name; none is ever loaded here. */
	if (!want || !*want) {
		if (!dlsym(RTLD_NEXT, n->malloc_)) {
			for (const char *const *l = rt->libs; *l && !lib; l++)
				lib = dlopen(*l, RTLD_LAZY | RTLD_NOLOAD);
		}
	} else {
		lib = dlopen(want, RTLD_LAZY | RTLD_NOLOAD);
	}
	/* The handle of a NOLOAD open is kept: the library stays loaded. */
	rt->malloc_ = (rt_malloc_fn)rt_lookup(lib, n->malloc_, self_malloc);
	rt->free_ = (rt_free_fn)rt_lookup(lib, n->free_, NULL);
	rt->malloc_async =
		(rt_malloc_async_fn)rt_lookup(lib, n->malloc_async, NULL);
	rt->free_async = (rt_free_async_fn)rt_lookup(lib, n->free_async, NULL);
	rt->malloc_async_ptsz =
		(rt_malloc_async_fn)rt_lookup(lib, n->malloc_async_ptsz, NULL);
	rt->free_async_ptsz =
		(rt_free_async_fn)rt_lookup(lib, n->free_async_ptsz, NULL);
	rt->get_device = (rt_get_device_fn)rt_lookup(lib, n->get_device, NULL);
	rt->is_capturing =
		(rt_is_capturing_fn)rt_lookup(lib, n->is_capturing, NULL);
	rt->device_sync =
		(rt_device_sync_fn)rt_lookup(lib, n->device_sync, NULL);
	rt->stream_sync =
		(rt_stream_sync_fn)rt_lookup(lib, n->stream_sync, NULL);
}

/* The calls this library defines in place of the runtimes'. */
EXPORT int cudaMalloc(void **ptr, size_t size);
EXPORT int cudaFree(void *ptr);
EXPORT int cudaMallocAsync(void **ptr, size_t size, void *stream);
EXPORT int cudaFreeAsync(void *ptr, void *stream);
EXPORT int cudaMallocAsync_ptsz(void **ptr, size_t size, void *stream);
EXPORT int cudaFreeAsync_ptsz(void *ptr, void *stream);
EXPORT int hipMalloc(void **ptr, size_t size);
EXPORT int hipFree(void *ptr);
EXPORT int hipMallocAsync(void **ptr, size_t size, void *stream);
EXPORT int hipFreeAsync(void *ptr, void *stream);

static void cuda_load(void)
{
	rt_load(&rt_cuda, (void *)cudaMalloc);
}

static void hip_load(void)
{
	rt_load(&rt_hip, (void *)hipMalloc);
}

static struct runtime *rt_get(struct runtime *rt)
{
	pthread_once(&rt->once, rt == &rt_cuda ? cuda_load : hip_load);
	return rt;
}

/* ---- deciding and failing ----------------------------------------------- */

/* Whether this thread's next allocation goes to a pool, and whose tag. */
static int preload_target(const char **tag, int *backup)
{
	if (in_preload)
		return 0;
	if (scope_depth > 0) {
		struct scope *s = &scope_stack[scope_depth - 1];
		if (s->off)
			return 0;
		*tag = s->tag;
		*backup = s->backup;
		return 1;
	}
	if (!cfg.whole)
		return 0;
	*tag = cfg.tag;
	*backup = cfg.backup;
	return 1;
}

/* Records why an allocation was refused; says so on stderr the first time
 * in the process (later ones are counted in vram_preload_stats). */
static int preload_refuse(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

static int preload_refuse(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(preload_msg, sizeof(preload_msg), fmt, ap);
	va_end(ap);
	atomic_fetch_add(&preload_failed, 1);
	if (atomic_exchange(&preload_warned, 1) == 0)
		fprintf(stderr, "vram-preload: %s\n", preload_msg);
	return RT_OUT_OF_MEMORY;
}

/* ---- pools -------------------------------------------------------------- */

/* Says the outside figures changed: the reporter sends them. */
static void outside_changed(void)
{
	pthread_mutex_lock(&outside_lock);
	outside_dirty = 1;
	pthread_cond_signal(&outside_cond);
	pthread_mutex_unlock(&outside_lock);
}

/* The reporter: sends the live allocations passed to the runtime each
 * time they changed (several changes in a row make one report). */
static void *outside_reporter(void *arg)
{
	vram_client *c = arg;

	for (;;) {
		struct vram_outside o = VRAM_OUTSIDE_INIT;

		pthread_mutex_lock(&outside_lock);
		while (!outside_dirty)
			pthread_cond_wait(&outside_cond, &outside_lock);
		outside_dirty = 0;
		pthread_mutex_unlock(&outside_lock);
		ptr_table_sum(&preload_ptrs, PTR_OUTSIDE, &o.bytes, &o.count);
		o.flags = cfg.expandable ? VRAM_OUTSIDE_EXPANDABLE : 0;
		/* A daemon that is gone, or older, hears nothing more. */
		if (vram_report_outside(c, &o) < 0)
			return NULL;
	}
}

/* Starts the reporter once the client is connected (preload_lock
 * held), with a first report at once. */
static void outside_start_locked(void)
{
	pthread_t t;
	pthread_attr_t a;

	if (outside_started)
		return;
	outside_started = 1;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	/* The program's signals are not the reporter's to take. */
	if (thread_start_unsignalled(&t, &a, outside_reporter,
				     preload_client) != 0)
		outside_started = 0;
	pthread_attr_destroy(&a);
	outside_changed();
}

/* The client, connected on first use (preload_lock held). */
static int preload_connect_locked(void)
{
	char name[64];
	int r;

	if (preload_client)
		return 0;
	snprintf(name, sizeof(name), "%s (preload)",
		 program_invocation_short_name);
	r = vram_connect(NULL, name, 0, &preload_client);
	if (r < 0)
		return r;
	/* Pauses from vramctl or a controller are answered on libvram's
	 * thread, whatever the program is doing. */
	r = vram_client_start_thread(preload_client);
	if (r < 0 && r != -EALREADY) {
		vram_client_close(preload_client);
		preload_client = NULL;
		return r;
	}
	outside_start_locked();
	return 0;
}

/* The pool for (tag, backup, dev), made on first use. NULL on failure,
 * with the reason in preload_msg. */
static vram_pool *preload_pool_get(const char *tag, int backup, int dev)
{
	struct vram_pool_options o = VRAM_POOL_OPTIONS_INIT;
	struct preload_pool *pp;
	vram_pool *p = NULL;
	char name[160];
	int r;

	pthread_mutex_lock(&preload_lock);
	for (unsigned i = 0; i < preload_n_pools; i++) {
		pp = &preload_pools[i];
		if (pp->dev == dev && pp->backup == backup &&
		    strcmp(pp->tag, tag) == 0) {
			p = pp->pool;
			goto out;
		}
	}
	if (preload_n_pools == PRELOAD_MAX_POOLS) {
		preload_refuse("more than %d pools (tags x devices)",
			       PRELOAD_MAX_POOLS);
		goto out;
	}
	r = preload_connect_locked();
	if (r < 0) {
		preload_refuse("cannot connect to vramd: %s (%s)", strerror(-r),
			       vram_last_error());
		goto out;
	}
	snprintf(name, sizeof(name), "preload.%d.%s.%s.%d", (int)getpid(), tag,
		 backup == VRAM_PRELOAD_BACKUP_PAGEABLE ? "pageable" :
		 backup == VRAM_PRELOAD_BACKUP_DISK	? "disk" :
		 backup					? "host" :
							  "discard",
		 dev);
	o.name = name;
	o.tag = tag;
	o.device = (unsigned)dev;
	o.policy = backup == VRAM_PRELOAD_BACKUP_DISK ? VRAM_POLICY_DISK :
		   backup			      ? VRAM_POLICY_HOST :
							VRAM_POLICY_DISCARD;
	if (backup == VRAM_PRELOAD_BACKUP_PAGEABLE)
		o.flags |= VRAM_POOL_PAGEABLE_BACKUP;
	/* torch_memory_saver's default: the host memory goes back after a
	 * resume, unless TMS_RETAIN_CPU_BACKUP / VRAM_CAPTURE_RETAIN or
	 * vram_preload_set_retain() asked to keep it. */
	int retain = atomic_load(&cfg.retain);
	if (backup && !retain)
		o.flags |= VRAM_POOL_RELEASE_BACKUP;
	o.reserve_bytes = cfg.reserve;
	r = vram_pool_create(preload_client, &o, &p);
	if (r < 0) {
		preload_refuse("cannot create pool %s: %s", name,
			       vram_last_error());
		p = NULL;
		goto out;
	}
	pp = &preload_pools[preload_n_pools++];
	snprintf(pp->tag, sizeof(pp->tag), "%s", tag);
	pp->backup = backup;
	pp->dev = dev;
	pp->retain = backup && retain;
	pp->pool = p;
out:
	pthread_mutex_unlock(&preload_lock);
	return p;
}

/* Allocates size bytes of the calling thread's device from the pool of
 * (tag, backup) through libvram's allocator. */
static int preload_pool_alloc(struct runtime *rt, void **out, size_t size,
			      void *stream, const char *tag, int backup)
{
	vram_pool *p;
	void *ptr;
	int dev = 0, r;

	if (rt->get_device && (r = rt->get_device(&dev)) != RT_SUCCESS)
		return r;
	in_preload = 1;
	p = preload_pool_get(tag, backup, dev);
	if (!p) {
		in_preload = 0;
		return RT_OUT_OF_MEMORY;
	}
	r = vram_torch_push_pool(p);
	if (r < 0) {
		in_preload = 0;
		return preload_refuse("tag %s: %s", tag, vram_last_error());
	}
	ptr = vram_torch_malloc((ssize_t)size, dev, stream);
	if (!ptr)
		preload_refuse("%zu bytes of tag %s on device %d: %s", size,
			       tag, dev, vram_torch_last_error());
	vram_torch_pop_pool();
	in_preload = 0;
	if (!ptr)
		return RT_OUT_OF_MEMORY;
	if (ptr_table_add(&preload_ptrs, (uintptr_t)ptr, size, dev, PTR_POOL) <
	    0) {
		vram_torch_free(ptr, (ssize_t)size, dev, stream);
		return preload_refuse("out of host memory for the table");
	}
	preload_msg[0] = '\0';
	*out = ptr;
	return RT_SUCCESS;
}

/* ---- the interposed calls ----------------------------------------------- */

/* malloc and mallocAsync: a pool or the runtime, whose async_fn (NULL:
 * its synchronous malloc) then makes the memory. */
static int preload_malloc(struct runtime *rt, void **out, size_t size,
			  void *stream, rt_malloc_async_fn async_fn)
{
	const char *tag;
	int backup, r;
	void *ptr = NULL;

	if (!out)
		return RT_INVALID_VALUE;
	/* A zero-byte allocation holds nothing to pause: the runtime's. */
	if (size > 0 && preload_target(&tag, &backup))
		return preload_pool_alloc(rt, out, size, stream, tag, backup);
	if (async_fn)
		r = async_fn(&ptr, size, stream);
	else if (rt->malloc_)
		r = rt->malloc_(&ptr, size);
	else
		return preload_refuse("no %s runtime loaded", rt->name);
	if (r == RT_SUCCESS && ptr) {
		ptr_table_add(&preload_ptrs, (uintptr_t)ptr, size, 0,
			      PTR_OUTSIDE);
		outside_changed();
	}
	*out = ptr;
	return r;
}

/* free and freeAsync: to whoever made ptr. */
static int preload_free(struct runtime *rt, void *ptr, void *stream, int async,
			rt_free_async_fn async_fn)
{
	struct ptr_entry e;
	int status = 0;

	if (ptr && ptr_table_take(&preload_ptrs, (uintptr_t)ptr, &e, 0) &&
	    e.kind != PTR_OUTSIDE) {
		if (e.kind == PTR_GRAPH)
			return RT_SUCCESS; /* the graph's until exit */
		/* Freed during a capture: the free is a node of the graph,
		 * which replays its kernels on this memory later, so the
		 * bytes are kept for the graph (docs/preload.md). */
		if (async && rt->is_capturing &&
		    rt->is_capturing(stream, &status) == RT_SUCCESS &&
		    status == RT_CAPTURE_ACTIVE) {
			ptr_table_set_kind(&preload_ptrs, (uintptr_t)ptr,
					   PTR_GRAPH);
			return RT_SUCCESS;
		}
		ptr_table_take(&preload_ptrs, (uintptr_t)ptr, &e, 1);
		/* The sub-allocator may hand these bytes out again at once:
		 * wait first for the work that may still use them, as the
		 * runtime's free does (cudaFree waits for the device,
		 * cudaFreeAsync orders the free after the stream's work). */
		if (!async && rt->device_sync)
			rt->device_sync();
		else if (async && rt->stream_sync)
			rt->stream_sync(stream);
		in_preload = 1;
		vram_torch_free(ptr, (ssize_t)e.size, e.dev, stream);
		in_preload = 0;
		return RT_SUCCESS;
	}
	if (ptr && ptr_table_take(&preload_ptrs, (uintptr_t)ptr, &e, 1))
		outside_changed();
	if (async_fn)
		return async_fn(ptr, stream);
	if (!async && rt->free_)
		return rt->free_(ptr);
	return RT_INVALID_VALUE;
}

/* The CUDA runtime's calls (cuda_runtime_api.h). */
EXPORT int cudaMalloc(void **ptr, size_t size)
{
	return preload_malloc(rt_get(&rt_cuda), ptr, size, NULL, NULL);
}

EXPORT int cudaFree(void *ptr)
{
	return preload_free(rt_get(&rt_cuda), ptr, NULL, 0, NULL);
}

EXPORT int cudaMallocAsync(void **ptr, size_t size, void *stream)
{
	struct runtime *rt = rt_get(&rt_cuda);

	if (!rt->malloc_async)
		return RT_INVALID_VALUE;
	return preload_malloc(rt, ptr, size, stream, rt->malloc_async);
}

EXPORT int cudaFreeAsync(void *ptr, void *stream)
{
	struct runtime *rt = rt_get(&rt_cuda);

	if (!rt->free_async)
		return RT_INVALID_VALUE;
	return preload_free(rt, ptr, stream, 1, rt->free_async);
}

/* The per-thread-default-stream forms a program compiled with
 * --default-stream per-thread calls. */
EXPORT int cudaMallocAsync_ptsz(void **ptr, size_t size, void *stream)
{
	struct runtime *rt = rt_get(&rt_cuda);

	if (!rt->malloc_async_ptsz)
		return RT_INVALID_VALUE;
	return preload_malloc(rt, ptr, size, stream, rt->malloc_async_ptsz);
}

EXPORT int cudaFreeAsync_ptsz(void *ptr, void *stream)
{
	struct runtime *rt = rt_get(&rt_cuda);

	if (!rt->free_async_ptsz)
		return RT_INVALID_VALUE;
	return preload_free(rt, ptr, stream, 1, rt->free_async_ptsz);
}

/* HIP's (hip_runtime_api.h): the same calls and the same reasoning. */
EXPORT int hipMalloc(void **ptr, size_t size)
{
	return preload_malloc(rt_get(&rt_hip), ptr, size, NULL, NULL);
}

EXPORT int hipFree(void *ptr)
{
	return preload_free(rt_get(&rt_hip), ptr, NULL, 0, NULL);
}

EXPORT int hipMallocAsync(void **ptr, size_t size, void *stream)
{
	struct runtime *rt = rt_get(&rt_hip);

	if (!rt->malloc_async)
		return RT_INVALID_VALUE;
	return preload_malloc(rt, ptr, size, stream, rt->malloc_async);
}

EXPORT int hipFreeAsync(void *ptr, void *stream)
{
	struct runtime *rt = rt_get(&rt_hip);

	if (!rt->free_async)
		return RT_INVALID_VALUE;
	return preload_free(rt, ptr, stream, 1, rt->free_async);
}

/* ---- the C entry points (vram_preload.h) -------------------------------- */

EXPORT int vram_preload_region_enter(const char *tag, int backup)
{
	struct scope *s;

	if (!tag)
		tag = "default";
	if (!*tag || strlen(tag) >= VRAM_PRELOAD_TAG_MAX)
		return -EINVAL;
	if (scope_depth >= VRAM_PRELOAD_DEPTH_MAX)
		return -EOVERFLOW;
	s = &scope_stack[scope_depth++];
	s->off = 0;
	s->backup = backup == VRAM_PRELOAD_BACKUP_PAGEABLE ||
				    backup == VRAM_PRELOAD_BACKUP_DISK ?
			    backup :
		    backup != 0 ? VRAM_PRELOAD_BACKUP_HOST :
				  0;
	snprintf(s->tag, sizeof(s->tag), "%s", tag);
	return 0;
}

/* Pops the innermost scope if it is of the kind asked for. */
static int scope_exit(int off)
{
	if (scope_depth == 0 || scope_stack[scope_depth - 1].off != off)
		return -EINVAL;
	scope_depth--;
	return 0;
}

EXPORT int vram_preload_region_exit(void)
{
	return scope_exit(0);
}

EXPORT int vram_preload_disable_enter(void)
{
	if (scope_depth >= VRAM_PRELOAD_DEPTH_MAX)
		return -EOVERFLOW;
	scope_stack[scope_depth].off = 1;
	scope_stack[scope_depth].tag[0] = '\0';
	scope_depth++;
	return 0;
}

EXPORT int vram_preload_disable_exit(void)
{
	return scope_exit(1);
}

EXPORT int vram_preload_whole_process(void)
{
	return cfg.whole;
}

EXPORT int vram_preload_owns(const void *ptr)
{
	struct ptr_entry e;

	return ptr_table_take(&preload_ptrs, (uintptr_t)ptr, &e, 0) &&
	       e.kind != PTR_OUTSIDE;
}

EXPORT int vram_preload_stats(struct vram_preload_stats *out)
{
	struct vram_preload_stats st = { 0 };
	uint64_t b, n;

	if (!out || out->size < sizeof(uint32_t))
		return -EINVAL;
	st.size = out->size < sizeof(st) ? out->size : (uint32_t)sizeof(st);
	pthread_mutex_lock(&preload_lock);
	st.pools = preload_n_pools;
	pthread_mutex_unlock(&preload_lock);
	ptr_table_sum(&preload_ptrs, PTR_POOL, &st.captured_bytes,
		      &st.captured_count);
	ptr_table_sum(&preload_ptrs, PTR_GRAPH, &b, &n);
	st.graph_bytes = b;
	st.captured_bytes += b;
	st.captured_count += n;
	ptr_table_sum(&preload_ptrs, PTR_OUTSIDE, &st.outside_bytes,
		      &st.outside_count);
	st.failed = atomic_load(&preload_failed);
	memcpy(out, &st, st.size);
	return 0;
}

EXPORT const char *vram_preload_last_error(void)
{
	return preload_msg;
}

EXPORT int vram_preload_set_retain(int retain)
{
	return atomic_exchange(&cfg.retain, retain != 0);
}

EXPORT int vram_preload_backup(const void *ptr, uint64_t len,
			       struct vram_preload_backup *out)
{
	struct vram_preload_backup b = { 0 };
	uintptr_t at = (uintptr_t)ptr;
	int r = -ENOENT;

	if (!out || out->size < sizeof(uint32_t))
		return -EINVAL;
	b.size = out->size < sizeof(b) ? out->size : (uint32_t)sizeof(b);
	pthread_mutex_lock(&preload_lock);
	for (unsigned i = 0; i < preload_n_pools; i++) {
		struct preload_pool *pp = &preload_pools[i];
		uintptr_t base = vram_pool_base(pp->pool);
		uint64_t size = vram_pool_size(pp->pool);
		void *host;
		uint64_t n;

		/* The pool's size is what it maps (kept while paused): the
		 * range a tensor of it lies in. */
		if (!base || at < base || at - base > size ||
		    len > size - (at - base))
			continue;
		snprintf(b.tag, sizeof(b.tag), "%s", pp->tag);
		b.kind = pp->backup;
		b.retains = pp->retain;
		b.paused = vram_pool_state(pp->pool) == VRAM_STATE_PAUSED;
		if (!pp->backup) {
			r = -ENODEV;
			break;
		}
		r = vram_pool_backup(pp->pool, &host, &n);
		if (r < 0)
			break;
		if (at - base + len > n) {
			r = -ERANGE;
			break;
		}
		b.host = (uint8_t *)host + (at - base);
		r = 0;
		break;
	}
	pthread_mutex_unlock(&preload_lock);
	memcpy(out, &b, b.size);
	return r;
}

EXPORT int vram_preload_backup_release(const char *tag)
{
	int n = 0, r = 0;

	pthread_mutex_lock(&preload_lock);
	for (unsigned i = 0; i < preload_n_pools; i++) {
		struct preload_pool *pp = &preload_pools[i];

		/* A disk backup's file goes too, as a host backup's pages:
		 * upstream keeps neither after a resume that does not retain. */
		if (!pp->backup || (tag && strcmp(pp->tag, tag) != 0))
			continue;
		/* A paused pool's backup is its content: never dropped. */
		if (vram_pool_state(pp->pool) != VRAM_STATE_ACTIVE)
			continue;
		r = vram_pool_backup_release(pp->pool);
		if (r < 0)
			break;
		n++;
	}
	pthread_mutex_unlock(&preload_lock);
	return r < 0 ? r : n;
}
