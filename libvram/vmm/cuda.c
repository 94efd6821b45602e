/* SPDX-License-Identifier: Apache-2.0 */
/* The client's side of the CUDA backend: chunk fds from vramd imported and
 * mapped into ranges reserved with the driver's VMM API, and copies between
 * a pool and its host backup.
 *
 * Contexts: every driver call runs in the device's primary context (the one
 * PyTorch and the CUDA runtime use), pushed on the calling thread for the
 * call and popped after, because events may be handled on libvram's
 * background thread, which has no context, and the host program's threads
 * must find theirs unchanged. The primary context is retained on the first
 * use of a device, not when the library opens: a process that only pauses
 * others' pools (a controller, vramctl) never makes one.
 *
 * Devices: the daemon names its devices by UUID and this process may see
 * them renumbered or a subset of them (CUDA_VISIBLE_DEVICES): vc_lookup()
 * finds each one here once, and local_device() tells the layers above
 * (PyTorch's allocator) the ordinal it has here.
 *
 * Copies: copy.c plans them (pieces round-robin over a few streams per
 * device); this file gives it the driver's three calls. Host memory (the
 * mapped backup) is registered with cuMemHostRegister by host_register()
 * and stays registered until host_unregister(), so no copy pays for
 * pinning.
 *
 * Graph capture: PyTorch's allocator maps memory while a graph may be
 * captured, and frees only after the allocation's stream is done. The two
 * entry points that takes (cuThreadExchangeStreamCaptureMode,
 * cuStreamIsCapturing) are looked up beside the others but are optional:
 * without them capture_relax() is -ENOTSUP and stream_wait() waits always.
 *
 * Tuning (read when the first copy runs on a device):
 *   VRAM_CUDA_COPY_STREAMS   streams per device, 1-16 (default 2)
 *   VRAM_CUDA_COPY_PIECE_MB  largest single copy in MiB (default 256)
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "copy.h"
#include "attr.h"
#include "cuda_driver.h"
#include "error.h"
#include "host_regs.h"
#include "log.h"
#include "vmm.h"

#define VMM_CUDA_MAX_DEVICES VMM_MAX_DEVICES

/* cuda.h's CUstreamCaptureMode and CUstreamCaptureStatus values used. */
#define CU_STREAM_CAPTURE_MODE_RELAXED 2
#define CU_STREAM_CAPTURE_STATUS_NONE 0

/* One of the daemon's devices, by the daemon's index. */
struct cuda_dev {
	int found;    /* ordinal and dev valid */
	int retained; /* primary context retained; ctx valid */
	int ordinal;  /* this process's index of it */
	CUdevice dev;
	CUcontext ctx;
};

struct vmm_cuda {
	struct vmm base;
	struct cuda_driver cu;
	/* Optional entry points (NULL in drivers or fakes without them). */
	CUresult (*exchange_capture_mode)(int *mode);
	CUresult (*stream_is_capturing)(CUstream s, int *status);
	pthread_mutex_t lock; /* inited, devs' setup */
	int inited; /* 1: cuInit done; < 0: it failed with that errno */
	int n_devices;
	struct cuda_dev devs[VMM_CUDA_MAX_DEVICES];
	struct host_regs regs;
	struct vmm_copy copy;
};

static struct vmm_cuda *vc_of(struct vmm *v)
{
	return (struct vmm_cuda *)v;
}

/* Keeps the driver's words for vram_last_error() and returns the errno. */
static int vc_err(const struct vmm_cuda *vc, const char *what, CUresult cr)
{
	return error_set(cuda_errno(cr), "cuda: %s: %s", what,
			 cuda_strerror(&vc->cu, cr));
}

/* ---- devices and contexts ------------------------------------------------ */

/* This process's ordinal of the daemon's device dev: the one with the
 * UUID the daemon announced, whatever index it has here; dev itself when
 * the daemon named none. CUDA_ERROR_INVALID_DEVICE when it is not here. */
static CUresult vc_find_device(struct vmm_cuda *vc, unsigned dev, int *out)
{
	const char *want = vc->base.dev_uuid[dev];
	char have[64];
	CUuuid uuid;
	CUresult cr;

	if (!want[0]) {
		*out = (int)dev;
		return CUDA_SUCCESS;
	}
	for (int i = 0; i < vc->n_devices; i++) {
		CUdevice d;
		cr = vc->cu.cuDeviceGet(&d, i);
		if (cr == CUDA_SUCCESS)
			cr = vc->cu.cuDeviceGetUuid(&uuid, d);
		if (cr != CUDA_SUCCESS)
			return cr;
		cuda_format_uuid(&uuid, have, sizeof(have));
		if (strcmp(have, want) == 0) {
			*out = i;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_INVALID_DEVICE;
}

/* cuInit once, then the daemon's device dev found here once (lock held).
 * No context is made. */
static int vc_lookup_locked(struct vmm_cuda *vc, unsigned dev)
{
	struct cuda_dev *d;
	CUresult cr;

	if (vc->inited == 0) {
		cr = vc->cu.cuInit(0);
		if (cr == CUDA_SUCCESS)
			cr = vc->cu.cuDeviceGetCount(&vc->n_devices);
		if (cr != CUDA_SUCCESS) {
			/* Remembered: every later call fails the same way. */
			vc->inited = vc_err(vc, "cuInit", cr);
			return vc->inited;
		}
		vc->inited = 1;
	}
	if (vc->inited < 0)
		return error_set(vc->inited,
				 "cuda: the driver failed to start");
	if (dev >= VMM_CUDA_MAX_DEVICES ||
	    (!vc->base.dev_uuid[dev][0] && (int)dev >= vc->n_devices))
		return error_set(ENODEV,
				 "cuda: no device %u in this process "
				 "(%d visible): it must see the daemon's "
				 "devices (check CUDA_VISIBLE_DEVICES)",
				 dev, vc->n_devices);
	d = &vc->devs[dev];
	if (d->found)
		return 0;
	cr = vc_find_device(vc, dev, &d->ordinal);
	if (cr == CUDA_ERROR_INVALID_DEVICE)
		return error_set(ENODEV,
				 "cuda: the daemon's device %u (%s) is not visible "
				 "in this process (check CUDA_VISIBLE_DEVICES)",
				 dev, vc->base.dev_uuid[dev]);
	if (cr == CUDA_SUCCESS)
		cr = vc->cu.cuDeviceGet(&d->dev, d->ordinal);
	if (cr != CUDA_SUCCESS)
		return vc_err(vc, "finding the device", cr);
	d->found = 1;
	return 0;
}

/* The device found, then its primary context retained once (lock held). */
static int vc_device_locked(struct vmm_cuda *vc, unsigned dev)
{
	struct cuda_dev *d = &vc->devs[dev];
	CUresult cr;
	int r = vc_lookup_locked(vc, dev);

	if (r < 0 || d->retained)
		return r;
	cr = vc->cu.cuDevicePrimaryCtxRetain(&d->ctx, d->dev);
	if (cr != CUDA_SUCCESS)
		return vc_err(vc, "primary context", cr);
	d->retained = 1;
	return 0;
}

/* Makes dev's primary context current on this thread, on top of whatever
 * was current; vc_leave() puts that back. */
static int vc_enter(struct vmm_cuda *vc, unsigned dev)
{
	int r;

	pthread_mutex_lock(&vc->lock);
	r = vc_device_locked(vc, dev);
	pthread_mutex_unlock(&vc->lock);
	if (r < 0)
		return r;
	CUresult cr = vc->cu.cuCtxPushCurrent(vc->devs[dev].ctx);
	if (cr != CUDA_SUCCESS)
		return vc_err(vc, "cuCtxPushCurrent", cr);
	return 0;
}

static void vc_leave(struct vmm_cuda *vc)
{
	CUcontext popped;
	vc->cu.cuCtxPopCurrent(&popped);
}

/* The device of any context we hold, for calls that need one but name no
 * device (host registration, freeing a range): device 0 if none yet. */
static unsigned vc_any_device(struct vmm_cuda *vc)
{
	unsigned dev = 0;

	pthread_mutex_lock(&vc->lock);
	for (unsigned i = 0; i < VMM_CUDA_MAX_DEVICES; i++) {
		if (vc->devs[i].retained) {
			dev = i;
			break;
		}
	}
	pthread_mutex_unlock(&vc->lock);
	return dev;
}

/* ---- ranges and mappings ---------------------------------------------- */

static int cuda_reserve(struct vmm *v, unsigned dev, uint64_t size,
			uint64_t align, uintptr_t *addr)
{
	struct vmm_cuda *vc = vc_of(v);
	CUdeviceptr p = 0;
	CUresult cr;
	int r = vc_enter(vc, dev);

	if (r < 0)
		return r;
	cr = vc->cu.cuMemAddressReserve(&p, size, align, 0, 0);
	vc_leave(vc);
	if (cr != CUDA_SUCCESS)
		return vc_err(vc, "cuMemAddressReserve", cr);
	*addr = (uintptr_t)p;
	return 0;
}

static int cuda_unreserve(struct vmm *v, uintptr_t addr, uint64_t size)
{
	struct vmm_cuda *vc = vc_of(v);
	CUresult cr;
	int r = vc_enter(vc, vc_any_device(vc));

	if (r < 0)
		return r;
	cr = vc->cu.cuMemAddressFree((CUdeviceptr)addr, size);
	vc_leave(vc);
	if (cr != CUDA_SUCCESS)
		return vc_err(vc, "cuMemAddressFree", cr);
	return 0;
}

/* vmm_grant_access()'s driver call for cuda_map; dev is a CUdevice. */
static int vc_grant(struct vmm *v, uintptr_t addr, uint64_t size, int dev,
		    int readonly)
{
	struct vmm_cuda *vc = vc_of(v);
	CUmemAccessDesc access = {
		.location = { CU_MEM_LOCATION_TYPE_DEVICE, dev },
		.flags = readonly ? CU_MEM_ACCESS_FLAGS_PROT_READ :
				    CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
	};
	CUresult cr =
		vc->cu.cuMemSetAccess((CUdeviceptr)addr, size, &access, 1);

	return cr == CUDA_SUCCESS ? 0 : vc_err(vc, "cuMemSetAccess", cr);
}

static int cuda_map(struct vmm *v, unsigned dev, uintptr_t addr, uint64_t size,
		    int fd, int readonly, uintptr_t *handle)
{
	struct vmm_cuda *vc = vc_of(v);
	const struct cuda_driver *cu = &vc->cu;
	CUmemGenericAllocationHandle h;
	CUresult cr;
	int r = vc_enter(vc, dev);

	if (r < 0)
		return r;
	/* A POSIX fd handle is passed by value, cast to a pointer. */
	cr = cu->cuMemImportFromShareableHandle(
		&h, (void *)(uintptr_t)fd,
		CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (cr != CUDA_SUCCESS) {
		r = vc_err(vc, "cuMemImportFromShareableHandle", cr);
		goto out;
	}
	cr = cu->cuMemMap((CUdeviceptr)addr, size, 0, h, 0);
	if (cr != CUDA_SUCCESS) {
		r = vc_err(vc, "cuMemMap", cr);
		goto err_release;
	}
	r = vmm_grant_access(v, addr, size, vc->devs[dev].dev, readonly,
			     vc_grant);
	if (r < 0)
		goto err_unmap;
	*handle = (uintptr_t)h;
	goto out;

err_unmap:
	cu->cuMemUnmap((CUdeviceptr)addr, size);
err_release:
	cu->cuMemRelease(h);
out:
	vc_leave(vc);
	return r;
}

static int cuda_unmap(struct vmm *v, unsigned dev, uintptr_t addr,
		      uint64_t size, uintptr_t handle)
{
	struct vmm_cuda *vc = vc_of(v);
	CUresult cu_unmap, cu_release;
	int r = vc_enter(vc, dev);

	if (r < 0)
		return r;
	/* Both steps are tried whatever the first did: a handle left behind
	 * would hold the memory on the device until this process exits. */
	cu_unmap = vc->cu.cuMemUnmap((CUdeviceptr)addr, size);
	cu_release = vc->cu.cuMemRelease((CUmemGenericAllocationHandle)handle);
	vc_leave(vc);
	if (cu_unmap != CUDA_SUCCESS)
		return vc_err(vc, "cuMemUnmap", cu_unmap);
	if (cu_release != CUDA_SUCCESS)
		return vc_err(vc, "cuMemRelease", cu_release);
	return 0;
}

static int cuda_sync(struct vmm *v, unsigned dev)
{
	struct vmm_cuda *vc = vc_of(v);
	CUresult cr;
	int r = vc_enter(vc, dev);

	if (r < 0)
		return r;
	/* All work of this process in the primary context, every stream. */
	cr = vc->cu.cuCtxSynchronize();
	vc_leave(vc);
	if (cr != CUDA_SUCCESS)
		return vc_err(vc, "cuCtxSynchronize", cr);
	return 0;
}

/* ---- host memory and copies -------------------------------------------- */

static int cuda_host_register(struct vmm *v, void *host, size_t len)
{
	struct vmm_cuda *vc = vc_of(v);
	CUresult cr;
	int r;

	r = vc_enter(vc, vc_any_device(vc));
	if (r < 0)
		return r;
	/* The caller has faulted the pages in (mapping.c, from several
	 * threads): the pin would fault them in one by one. */
	/* Portable: usable from every context, whichever device copies. */
	cr = vc->cu.cuMemHostRegister(host, len, CU_MEMHOSTREGISTER_PORTABLE);
	if (cr == CUDA_SUCCESS) {
		r = host_regs_add(&vc->regs, host, len);
		/* Unknown to destroy, it would stay pinned: undo it. */
		if (r < 0)
			vc->cu.cuMemHostUnregister(host);
	}
	vc_leave(vc);
	if (cr != CUDA_SUCCESS)
		return vc_err(vc, "cuMemHostRegister", cr);
	return r;
}

/* The driver's half of an unregistration. */
static int vc_unregister(struct vmm_cuda *vc, void *host)
{
	CUresult cr;
	int r = vc_enter(vc, vc_any_device(vc));

	if (r < 0)
		return r;
	cr = vc->cu.cuMemHostUnregister(host);
	vc_leave(vc);
	if (cr != CUDA_SUCCESS)
		return vc_err(vc, "cuMemHostUnregister", cr);
	return 0;
}

static int cuda_host_unregister(struct vmm *v, void *host, size_t len UNUSED)
{
	struct vmm_cuda *vc = vc_of(v);
	int r = host_regs_remove(&vc->regs, host);

	return r < 0 ? r : vc_unregister(vc, host);
}

/* copy.c's driver calls, with the device's context current. */
static int vc_stream_create(void *drv, void **stream)
{
	struct vmm_cuda *vc = drv;
	CUresult cr = vc->cu.cuStreamCreate((CUstream *)stream,
					    CU_STREAM_NON_BLOCKING);
	return cr == CUDA_SUCCESS ? 0 : vc_err(vc, "cuStreamCreate", cr);
}

static int vc_memcpy_async(void *drv, int to_host, uintptr_t dev, void *host,
			   size_t len, void *stream)
{
	struct vmm_cuda *vc = drv;
	CUresult cr;

	if (to_host)
		cr = vc->cu.cuMemcpyDtoHAsync(host, (CUdeviceptr)dev, len,
					      (CUstream)stream);
	else
		cr = vc->cu.cuMemcpyHtoDAsync((CUdeviceptr)dev, host, len,
					      (CUstream)stream);
	if (cr != CUDA_SUCCESS)
		return vc_err(
			vc, to_host ? "cuMemcpyDtoHAsync" : "cuMemcpyHtoDAsync",
			cr);
	return 0;
}

static int vc_stream_sync(void *drv, void *stream)
{
	struct vmm_cuda *vc = drv;
	CUresult cr = vc->cu.cuStreamSynchronize((CUstream)stream);
	return cr == CUDA_SUCCESS ? 0 : vc_err(vc, "cuStreamSynchronize", cr);
}

static const struct vmm_copy_ops vc_copy_ops = {
	.stream_create = vc_stream_create,
	.memcpy_async = vc_memcpy_async,
	.stream_sync = vc_stream_sync,
};

static int cuda_copy(struct vmm *v, unsigned dev, int to_host,
		     const struct vmm_span *spans, size_t n)
{
	struct vmm_cuda *vc = vc_of(v);
	int r = vc_enter(vc, dev);

	if (r < 0)
		return r;
	r = vmm_copy_run(&vc->copy, dev, to_host, spans, n);
	vc_leave(vc);
	return r;
}

static int cuda_copy_issue(struct vmm *v, unsigned dev, unsigned lane,
			   int to_host, const struct vmm_span *spans, size_t n)
{
	struct vmm_cuda *vc = vc_of(v);
	int r = vc_enter(vc, dev);

	if (r < 0)
		return r;
	r = vmm_copy_issue(&vc->copy, dev, lane, to_host, spans, n);
	vc_leave(vc);
	return r;
}

static int cuda_copy_wait(struct vmm *v, unsigned dev, unsigned lane)
{
	struct vmm_cuda *vc = vc_of(v);
	int r = vc_enter(vc, dev);

	if (r < 0)
		return r;
	r = vmm_copy_wait(&vc->copy, dev, lane);
	vc_leave(vc);
	return r;
}

/* ---- the framework's devices, streams and graph capture ------------------ */

static int cuda_local_device(struct vmm *v, unsigned dev)
{
	struct vmm_cuda *vc = vc_of(v);
	int r;

	pthread_mutex_lock(&vc->lock);
	r = vc_lookup_locked(vc, dev);
	if (r == 0)
		r = vc->devs[dev].ordinal;
	pthread_mutex_unlock(&vc->lock);
	return r;
}

static int cuda_capture_relax(struct vmm *v)
{
	struct vmm_cuda *vc = vc_of(v);
	int mode = CU_STREAM_CAPTURE_MODE_RELAXED;
	CUresult cr;

	if (!vc->exchange_capture_mode)
		return -ENOTSUP;
	cr = vc->exchange_capture_mode(&mode);
	if (cr != CUDA_SUCCESS)
		return vc_err(vc, "cuThreadExchangeStreamCaptureMode", cr);
	return mode;
}

static void cuda_capture_restore(struct vmm *v, int mode)
{
	struct vmm_cuda *vc = vc_of(v);

	if (vc->exchange_capture_mode)
		vc->exchange_capture_mode(&mode);
}

static int cuda_stream_wait(struct vmm *v, unsigned dev, void *stream)
{
	struct vmm_cuda *vc = vc_of(v);
	int status = CU_STREAM_CAPTURE_STATUS_NONE;
	CUresult cr = CUDA_SUCCESS;
	int r = vc_enter(vc, dev);

	if (r < 0)
		return r;
	/* Synchronizing a capturing stream would break its capture; the
	 * graph's memory is the graph's until it is destroyed anyway. */
	if (vc->stream_is_capturing)
		cr = vc->stream_is_capturing((CUstream)stream, &status);
	if (cr == CUDA_SUCCESS && status == CU_STREAM_CAPTURE_STATUS_NONE)
		cr = vc->cu.cuStreamSynchronize((CUstream)stream);
	vc_leave(vc);
	if (cr != CUDA_SUCCESS)
		return vc_err(vc, "waiting for the stream", cr);
	return 0;
}

/* ---- lifetime ------------------------------------------------------------ */

static void cuda_destroy(struct vmm *v)
{
	struct vmm_cuda *vc = vc_of(v);

	/* Registrations the caller left would pin their pages until exit. */
	void *host;
	size_t len;
	while (host_regs_pop(&vc->regs, &host, &len))
		vc_unregister(vc, host);
	for (unsigned i = 0; i < VMM_CUDA_MAX_DEVICES; i++) {
		struct cuda_dev *d = &vc->devs[i];
		void *streams[VMM_COPY_LANES * VMM_COPY_MAX_STREAMS];
		unsigned n = vmm_copy_streams(&vc->copy, i, streams);
		if (!d->retained)
			continue;
		if (n && vc->cu.cuCtxPushCurrent(d->ctx) == CUDA_SUCCESS) {
			for (unsigned s = 0; s < n; s++)
				vc->cu.cuStreamDestroy((CUstream)streams[s]);
			vc_leave(vc);
		}
		vc->cu.cuDevicePrimaryCtxRelease(d->dev);
	}
	vmm_copy_fini(&vc->copy);
	host_regs_fini(&vc->regs);
	pthread_mutex_destroy(&vc->lock);
	/* libcuda stays loaded: its threads and the host program's use of it
	 * outlive us. */
	free(vc);
}

static const struct vmm_ops cuda_vmm_ops = {
	.name = "cuda",
	.destroy = cuda_destroy,
	.reserve = cuda_reserve,
	.unreserve = cuda_unreserve,
	.map = cuda_map,
	.unmap = cuda_unmap,
	.sync = cuda_sync,
	.host_register = cuda_host_register,
	.host_pins = true,
	.host_unregister = cuda_host_unregister,
	.copy = cuda_copy,
	.copy_issue = cuda_copy_issue,
	.copy_wait = cuda_copy_wait,
	.local_device = cuda_local_device,
	.capture_relax = cuda_capture_relax,
	.capture_restore = cuda_capture_restore,
	.stream_wait = cuda_stream_wait,
};

/* Opens the client side of the CUDA backend: loads libcuda.so.1 (or
 * $VRAM_LIBCUDA) and nothing more; cuInit and the primary contexts wait for
 * the first call that needs a device. *out is the caller's until
 * vmm_destroy(). -ENOENT without the driver library, -ENOSYS with a driver
 * too old. */
int vmm_cuda_open(struct vmm **out)
{
	struct vmm_cuda *vc = calloc(1, sizeof(*vc));
	char why[256];
	int r;

	if (!vc)
		return -ENOMEM;
	r = cuda_driver_load(&vc->cu, why, sizeof(why));
	if (r < 0) {
		log_write(VRAM_LOG_DEBUG, "cuda: %s", why);
		free(vc);
		return r;
	}
	/* Optional: the library stays loaded, so these stay valid. */
	vc->exchange_capture_mode = (CUresult(*)(int *))dlsym(
		vc->cu.lib, "cuThreadExchangeStreamCaptureMode");
	vc->stream_is_capturing = (CUresult(*)(CUstream, int *))dlsym(
		vc->cu.lib, "cuStreamIsCapturing");
	pthread_mutex_init(&vc->lock, NULL);
	host_regs_init(&vc->regs);
	vmm_copy_init(&vc->copy, &vc_copy_ops, vc, "VRAM_CUDA_COPY_STREAMS",
		      "VRAM_CUDA_COPY_PIECE_MB");
	vc->base.ops = &cuda_vmm_ops;
	*out = &vc->base;
	return 0;
}
