/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA backend: physical GPU memory made with the driver's VMM API and
 * exported as POSIX fds.
 *
 * The daemon never creates a CUDA context. cuMemCreate and
 * cuMemExportToShareableHandle work with none current, and no faster with
 * one (measured on an H200, see docs/gpu.md), and a context would cost
 * the daemon ~518 MiB of the memory it brokers. Free memory comes from
 * NVML, which needs no context either.
 *
 * A chunk's creating handle is kept beside its exported fd. The driver
 * frees the memory when the last fd, handle, import and mapping of it are
 * gone, in any process. Closing the fd costs the driver 0.6-0.8 ms a chunk
 * whatever its size (tearing down the export: bench/export_probe.py's
 * close-mapped), where releasing the handle costs ~0.03 ms; a pause that
 * closes the fd while its mapper unmaps pays both, serially. So once the
 * node is idle the daemon lets the fds of active pools' chunks go
 * (chunk_unexport; fd_drop.c), the handle holding each chunk, and a later
 * pause releases only the handle before the mapper's unmap frees the
 * memory (docs/gpu.md, "What a pause's free costs"). A chunk that must be
 * sent again is exported again (chunk_export). A chunk recovered from the
 * fd store has no handle: its fd is its whole reference.
 *
 * Releases and unexports are handed to a few threads (releasing different
 * chunks in parallel was faster): the handle is released first, then the
 * fd closed. Waiting for them is the settle operation, which the daemon
 * runs off its loop before it reads free memory for a reply or makes
 * chunks; shutdown waits for them too.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "attr.h"
#include "clock.h"
#include "env.h"
#include "cuda_driver.h"
#include "cuda_pump.h"
#include "log.h"
#include "nvml.h"
#include "thread.h"

#define RELEASER_MAX_THREADS 16
#define RELEASER_DEFAULT_THREADS 4

/* A chunk's references, whose drop is the driver's free. */
struct release {
	int fd;
	CUmemGenericAllocationHandle handle; /* 0: none (a recovered chunk) */
};

/* Chunks' releases, run by a few threads. */
struct releaser {
	const struct cuda_driver *cu;
	pthread_mutex_t lock;
	pthread_cond_t work; /* releases queued or stopping */
	pthread_cond_t idle; /* queue empty and nothing being released */
	struct release *q;
	size_t n, cap;
	unsigned busy;	    /* releases in progress */
	unsigned n_threads; /* wanted; started on the first release */
	unsigned started;
	int stop;
	pthread_t threads[RELEASER_MAX_THREADS];
};

struct cuda_backend {
	struct backend base;
	struct cuda_driver cu;
	CUdevice cudev[BACKEND_MAX_DEVICES];
	struct nvml *nvml; /* NULL without libnvidia-ml */
	struct nvml_device *nvml_dev[BACKEND_MAX_DEVICES];
	/* Chunks are GPUDirect RDMA capable where the device allows it,
	 * as torch_memory_saver's are (an engine's NIC may DMA into its
	 * weights, say). */
	bool rdma[BACKEND_MAX_DEVICES];
	int warned_no_nvml;
	struct releaser releaser;
	struct cuda_pump *pump; /* NULL: none (VRAM_CUDA_PUMP_MS=0) */
};

static struct cuda_backend *cuda_of(struct backend *b)
{
	return (struct cuda_backend *)b;
}

/* ---- releasing chunks ------------------------------------------------------ */

/* The handle first (~0.03 ms, and never the drop that frees while the fd
 * is still open), then the fd, whose close tears the export down: at a
 * pause's start that close then runs beside the mapper's unmap as it did
 * when the fd was the daemon's only reference, rather than 0.6-0.8 ms
 * before a handle's release that would come after the unmap and free in
 * the slow shape (docs/gpu.md, "What a pause's free costs"). */
static void release_run(const struct cuda_driver *cu, struct release rel)
{
	if (rel.handle) {
		CUresult cr = cu->cuMemRelease(rel.handle);
		if (cr != CUDA_SUCCESS)
			log_err("cuda: cuMemRelease of a chunk: %s (its memory "
				"may stay allocated until vramd exits)",
				cuda_strerror(cu, cr));
	}
	if (rel.fd >= 0)
		close(rel.fd);
}

static void *releaser_main(void *arg)
{
	struct releaser *rl = arg;

	pthread_mutex_lock(&rl->lock);
	for (;;) {
		while (rl->n == 0 && !rl->stop)
			pthread_cond_wait(&rl->work, &rl->lock);
		if (rl->n == 0)
			break;
		struct release rel = rl->q[--rl->n];
		rl->busy++;
		pthread_mutex_unlock(&rl->lock);
		release_run(rl->cu, rel);
		pthread_mutex_lock(&rl->lock);
		rl->busy--;
		if (rl->n == 0 && rl->busy == 0)
			pthread_cond_broadcast(&rl->idle);
	}
	pthread_mutex_unlock(&rl->lock);
	return NULL;
}

static void releaser_init(struct releaser *rl, const struct cuda_driver *cu,
			  unsigned n_threads)
{
	memset(rl, 0, sizeof(*rl));
	rl->cu = cu;
	pthread_mutex_init(&rl->lock, NULL);
	pthread_cond_init(&rl->work, NULL);
	pthread_cond_init(&rl->idle, NULL);
	rl->n_threads = n_threads > RELEASER_MAX_THREADS ?
				RELEASER_MAX_THREADS :
				n_threads;
}

/* Starts the threads (lock held). Signals stay with the main thread, where
 * libuv handles them. */
static void releaser_start(struct releaser *rl)
{
	while (rl->started < rl->n_threads) {
		int r = thread_start_unsignalled(&rl->threads[rl->started],
						 NULL, releaser_main, rl);
		if (r != 0) {
			log_warn("cuda: cannot start a release thread: %s",
				 strerror(r));
			break;
		}
		rl->started++;
	}
	/* Asked once: with none started, chunks are released inline from
	 * now on. */
	rl->n_threads = rl->started;
}

/* Takes ownership of rel's references and drops them soon. */
static void releaser_push(struct releaser *rl, struct release rel)
{
	pthread_mutex_lock(&rl->lock);
	if (rl->started < rl->n_threads)
		releaser_start(rl);
	if (rl->started == 0)
		goto inline_release;
	if (rl->n == rl->cap) {
		size_t cap = rl->cap ? 2 * rl->cap : 64;
		struct release *q = realloc(rl->q, cap * sizeof(*q));
		if (!q)
			goto inline_release;
		rl->q = q;
		rl->cap = cap;
	}
	rl->q[rl->n++] = rel;
	pthread_cond_signal(&rl->work);
	pthread_mutex_unlock(&rl->lock);
	return;

inline_release:
	pthread_mutex_unlock(&rl->lock);
	release_run(rl->cu, rel);
}

/* Returns when every release pushed so far is done. Any thread. */
static void releaser_drain(struct releaser *rl)
{
	pthread_mutex_lock(&rl->lock);
	while (rl->n > 0 || rl->busy > 0)
		pthread_cond_wait(&rl->idle, &rl->lock);
	pthread_mutex_unlock(&rl->lock);
}

/* Is nothing queued or being released? */
static bool releaser_idle(struct releaser *rl)
{
	pthread_mutex_lock(&rl->lock);
	bool idle = rl->n == 0 && rl->busy == 0;
	pthread_mutex_unlock(&rl->lock);
	return idle;
}

static void releaser_destroy(struct releaser *rl)
{
	pthread_mutex_lock(&rl->lock);
	rl->stop = 1;
	pthread_cond_broadcast(&rl->work);
	pthread_mutex_unlock(&rl->lock);
	/* The threads release what is queued before they see stop. */
	for (unsigned i = 0; i < rl->started; i++)
		pthread_join(rl->threads[i], NULL);
	free(rl->q);
	pthread_cond_destroy(&rl->idle);
	pthread_cond_destroy(&rl->work);
	pthread_mutex_destroy(&rl->lock);
}

/* ---- backend operations ------------------------------------------------ */

static void cuda_prop(CUmemAllocationProp *prop, const struct cuda_backend *cb,
		      unsigned i)
{
	memset(prop, 0, sizeof(*prop));
	prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop->location.id = cb->cudev[i];
	prop->allocFlags.gpuDirectRDMACapable = cb->rdma[i];
}

static void cuda_destroy(struct backend *b)
{
	struct cuda_backend *cb = cuda_of(b);

	cuda_pump_close(cb->pump);
	releaser_destroy(&cb->releaser);
	nvml_close(cb->nvml);
	/* libcuda stays loaded: its threads outlive any dlclose. */
	free(cb);
}

static int cuda_mem_info(struct backend *b, unsigned dev, uint64_t *free_bytes,
			 uint64_t *total_bytes)
{
	struct cuda_backend *cb = cuda_of(b);
	const struct backend_device *d = &b->devices[dev];

	if (cb->nvml_dev[dev] && nvml_memory_info(cb->nvml, cb->nvml_dev[dev],
						  free_bytes, total_bytes) == 0)
		return 0;
	if (!cb->warned_no_nvml) {
		log_debug(
			"cuda: no NVML for device %u: free memory reported as "
			"total less vramd's chunks (other processes' memory "
			"not seen)",
			dev);
		cb->warned_no_nvml = 1;
	}
	*total_bytes = d->total_bytes;
	*free_bytes = d->total_bytes > d->used_bytes ?
			      d->total_bytes - d->used_bytes :
			      0;
	return 0;
}

/* Releases the handle of a chunk that was not made after all. */
static void cuda_handle_release(const struct cuda_driver *cu,
				CUmemGenericAllocationHandle h, uint64_t size)
{
	CUresult cr = cu->cuMemRelease(h);
	if (cr != CUDA_SUCCESS)
		log_err("cuda: cuMemRelease: %s (%llu MiB stay allocated until "
			"vramd exits)",
			cuda_strerror(cu, cr),
			(unsigned long long)(size >> 20));
}

/* Exports c->handle as c->fd (CLOEXEC): when the chunk is made, and
 * again after an idle pool let the fd go. */
static int cuda_chunk_export(struct backend *b, unsigned dev UNUSED,
			     struct chunk *c)
{
	const struct cuda_driver *cu = &cuda_of(b)->cu;
	int fd = -1;
	CUresult cr = cu->cuMemExportToShareableHandle(
		&fd, (CUmemGenericAllocationHandle)c->handle,
		CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);

	if (cr != CUDA_SUCCESS) {
		log_err("cuda: cuMemExportToShareableHandle of a %llu MiB "
			"chunk: %s",
			(unsigned long long)(c->size >> 20),
			cuda_strerror(cu, cr));
		return cuda_errno(cr);
	}
	int flags = fcntl(fd, F_GETFD);
	if (flags < 0 || fcntl(fd, F_SETFD, flags | FD_CLOEXEC) < 0) {
		int r = -errno;
		log_err("cuda: exported fd %d: %s", fd, strerror(errno));
		close(fd);
		return r;
	}
	c->fd = fd;
	return 0;
}

static int cuda_chunk_make(struct cuda_backend *cb, unsigned dev,
			   struct chunk *c)
{
	const struct cuda_driver *cu = &cb->cu;
	CUmemAllocationProp prop;
	CUmemGenericAllocationHandle h;
	CUresult cr;
	int64_t t = clock_now_ns();

	cuda_prop(&prop, cb, dev);
	cr = cu->cuMemCreate(&h, c->size, &prop, 0);
	if (cr != CUDA_SUCCESS) {
		if (cr == CUDA_ERROR_OUT_OF_MEMORY)
			log_debug("cuda: device %u: no room for %llu MiB", dev,
				  (unsigned long long)(c->size >> 20));
		else
			log_err("cuda: cuMemCreate(%llu MiB) on device %u: %s",
				(unsigned long long)(c->size >> 20), dev,
				cuda_strerror(cu, cr));
		return cuda_errno(cr);
	}
	c->handle = (uintptr_t)h;
	double create_ms = clock_lap_ms(&t);
	int r = cuda_chunk_export(&cb->base, dev, c);
	if (r < 0) {
		cuda_handle_release(cu, h, c->size);
		c->handle = 0;
		return r;
	}
	log_debug("cuda: made a %llu MiB chunk on device %u: create %.3f ms, "
		  "export %.3f ms",
		  (unsigned long long)(c->size >> 20), dev, create_ms,
		  clock_lap_ms(&t));
	return 0;
}

/* A device that claims GPUDirect RDMA with VMM but refuses the flag (or
 * its export) gets plain chunks from then on, as torch_memory_saver's
 * would have failed: the flag is worth a retry, never a failed resume. */
static int cuda_chunk_create(struct backend *b, unsigned dev, struct chunk *c)
{
	struct cuda_backend *cb = cuda_of(b);
	int r = cuda_chunk_make(cb, dev, c);

	if ((r == -EINVAL || r == -ENOTSUP) && cb->rdma[dev]) {
		log_warn("cuda: device %u: a GPUDirect RDMA capable chunk "
			 "could not be made (%s); plain chunks from now on",
			 dev, strerror(-r));
		cb->rdma[dev] = false;
		r = cuda_chunk_make(cb, dev, c);
	}
	return r;
}

static void cuda_chunk_release(struct backend *b, unsigned dev UNUSED, struct chunk *c)
{
	struct release rel = {
		.fd = c->fd, .handle = (CUmemGenericAllocationHandle)c->handle
	};

	releaser_push(&cuda_of(b)->releaser, rel);
	c->fd = -1;
	c->handle = 0;
}

/* The fd's close, on the release threads: the handle holds the chunk. */
static void cuda_chunk_unexport(struct backend *b, unsigned dev UNUSED,
				struct chunk *c)
{
	struct release rel = { .fd = c->fd, .handle = 0 };

	releaser_push(&cuda_of(b)->releaser, rel);
	c->fd = -1;
}

/* Chunks released a moment ago must show as free, and be free before
 * the daemon asks the device again. */
static void cuda_settle(struct backend *b)
{
	releaser_drain(&cuda_of(b)->releaser);
}

static bool cuda_settled(struct backend *b)
{
	return releaser_idle(&cuda_of(b)->releaser);
}

static void cuda_pump_set_op(struct backend *b, unsigned dev, bool on)
{
	cuda_pump_set(cuda_of(b)->pump, dev, on);
}

/* Processes using the device, from NVML (no context needed). */
static int cuda_processes(struct backend *b, unsigned dev,
			  struct backend_process **out)
{
	struct cuda_backend *cb = cuda_of(b);
	struct nvml_process *np = NULL;
	int n;

	if (!cb->nvml_dev[dev])
		return -EOPNOTSUPP;
	n = nvml_processes(cb->nvml, cb->nvml_dev[dev], &np);
	if (n < 0)
		return n;
	struct backend_process *bp = calloc((size_t)n + 1, sizeof(*bp));
	if (!bp) {
		free(np);
		return -ENOMEM;
	}
	for (int i = 0; i < n; i++) {
		bp[i].pid = np[i].pid;
		bp[i].used_bytes = np[i].used_bytes == NVML_USED_UNKNOWN ?
					   BACKEND_USED_UNKNOWN :
					   np[i].used_bytes;
	}
	free(np);
	*out = bp;
	return n;
}

static const struct backend_ops cuda_ops = {
	.name = "cuda",
	.destroy = cuda_destroy,
	.mem_info = cuda_mem_info,
	.chunk_create = cuda_chunk_create,
	.chunk_release = cuda_chunk_release,
	.chunk_unexport = cuda_chunk_unexport,
	.chunk_export = cuda_chunk_export,
	.processes = cuda_processes,
	.settle = cuda_settle,
	.settled = cuda_settled,
	.pump_set = cuda_pump_set_op,
};

/* ---- opening ------------------------------------------------------------ */

/* Fills b->devices[i] for CUDA device i; -ENODEV if it cannot serve. */
static int cuda_device_init(struct cuda_backend *cb, unsigned i)
{
	const struct cuda_driver *cu = &cb->cu;
	struct backend_device *d = &cb->base.devices[i];
	CUmemAllocationProp prop;
	CUuuid uuid;
	char name[96] = "?";
	size_t total = 0, gran = 0;
	int vmm = 0, posix = 0;
	CUresult cr;

	cr = cu->cuDeviceGet(&cb->cudev[i], (int)i);
	if (cr == CUDA_SUCCESS)
		cr = cu->cuDeviceGetUuid(&uuid, cb->cudev[i]);
	if (cr == CUDA_SUCCESS)
		cr = cu->cuDeviceTotalMem(&total, cb->cudev[i]);
	if (cr == CUDA_SUCCESS)
		cr = cu->cuDeviceGetAttribute(
			&vmm,
			CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
			cb->cudev[i]);
	if (cr == CUDA_SUCCESS)
		cr = cu->cuDeviceGetAttribute(
			&posix,
			CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
			cb->cudev[i]);
	if (cr != CUDA_SUCCESS) {
		log_err("cuda: device %u: %s", i, cuda_strerror(cu, cr));
		return -ENODEV;
	}
	cu->cuDeviceGetName(name, sizeof(name), cb->cudev[i]);
	if (!vmm || !posix) {
		log_err("cuda: device %u (%s) lacks %s", i, name,
			!vmm ? "the virtual memory management API" :
			       "POSIX fd export of memory");
		return -ENODEV;
	}
	int rdma = 0;
	if (cu->cuDeviceGetAttribute(
		    &rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
		    cb->cudev[i]) != CUDA_SUCCESS)
		rdma = 0;
	cb->rdma[i] = rdma != 0;
	cuda_prop(&prop, cb, i);
	cr = cu->cuMemGetAllocationGranularity(
		&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
	if (cr != CUDA_SUCCESS || gran == 0)
		cr = cu->cuMemGetAllocationGranularity(
			&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (cr != CUDA_SUCCESS || gran == 0) {
		log_err("cuda: device %u: allocation granularity: %s", i,
			cuda_strerror(cu, cr));
		return -ENODEV;
	}
	d->index = i;
	cuda_format_uuid(&uuid, d->uuid, sizeof(d->uuid));
	d->total_bytes = total;
	d->granularity = gran;
	d->used_bytes = 0;
	if (cb->nvml &&
	    nvml_device_by_uuid(cb->nvml, d->uuid, &cb->nvml_dev[i]) < 0)
		log_warn(
			"cuda: NVML does not know %s; its free memory will not "
			"count other processes",
			d->uuid);
	log_info("cuda: device %u: %s %s, %.1f GiB, granularity %llu KiB%s", i,
		 name, d->uuid, (double)total / (1 << 30),
		 (unsigned long long)(gran >> 10),
		 cb->rdma[i] ? ", GPUDirect RDMA capable chunks" : "");
	return 0;
}

static unsigned cuda_release_threads(void)
{
	const char *bad;
	unsigned v = env_unsigned("VRAM_CUDA_RELEASE_THREADS",
				  RELEASER_DEFAULT_THREADS, 0,
				  RELEASER_MAX_THREADS, &bad);

	if (bad)
		log_warn("cuda: VRAM_CUDA_RELEASE_THREADS=%s ignored (0-%d)",
			 bad, RELEASER_MAX_THREADS);
	return v;
}

/* Opens the CUDA backend: loads libcuda.so.1, cuInit, one backend device per
 * CUDA device (CUDA_VISIBLE_DEVICES applies), NVML when present. Creates no
 * context. -ENOENT without the driver library, -ENODEV without a usable
 * device, -ENOSYS for a driver older than CUDA 11.4. */
int backend_cuda_open(const struct backend_config *cfg UNUSED, struct backend **out)
{
	struct cuda_backend *cb;
	char why[256] = "";
	int count = 0, version = 0, r;
	CUresult cr;

	cb = calloc(1, sizeof(*cb));
	if (!cb)
		return -ENOMEM;
	r = cuda_driver_load(&cb->cu, why, sizeof(why));
	if (r < 0) {
		if (r == -ENOENT)
			log_debug("cuda: no driver library: %s", why);
		else
			log_err("cuda: %s", why);
		free(cb);
		return r;
	}
	cr = cb->cu.cuInit(0);
	if (cr == CUDA_SUCCESS)
		cr = cb->cu.cuDeviceGetCount(&count);
	if (cr != CUDA_SUCCESS || count == 0) {
		if (cr == CUDA_SUCCESS || cr == CUDA_ERROR_NO_DEVICE)
			log_info("cuda: no CUDA device");
		else
			log_err("cuda: cuInit: %s", cuda_strerror(&cb->cu, cr));
		free(cb);
		return -ENODEV;
	}
	if (count > BACKEND_MAX_DEVICES) {
		log_warn("cuda: using the first %d of %d devices",
			 BACKEND_MAX_DEVICES, count);
		count = BACKEND_MAX_DEVICES;
	}
	cb->cu.cuDriverGetVersion(&version);
	log_info("cuda: driver API %d.%d, %d device(s); no context in vramd",
		 version / 1000, version % 1000 / 10, count);
	r = nvml_open(&cb->nvml);
	if (r < 0) {
		cb->nvml = NULL;
		log_info("cuda: NVML unavailable (%s): free memory will count "
			 "only vramd's chunks",
			 strerror(-r));
	}
	cb->base.ops = &cuda_ops;
	cb->base.n_devices = (unsigned)count;
	for (unsigned i = 0; i < cb->base.n_devices; i++) {
		r = cuda_device_init(cb, i);
		if (r < 0) {
			nvml_close(cb->nvml);
			free(cb);
			return r;
		}
	}
	uint64_t gran[BACKEND_MAX_DEVICES];
	for (unsigned i = 0; i < cb->base.n_devices; i++)
		gran[i] = cb->base.devices[i].granularity;
	r = cuda_pump_open(&cb->cu, cb->cudev, gran, cb->base.n_devices,
			   &cb->pump);
	if (r < 0) {
		nvml_close(cb->nvml);
		free(cb);
		return r;
	}
	releaser_init(&cb->releaser, &cb->cu, cuda_release_threads());
	*out = &cb->base;
	return 0;
}
