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
 * Copies: a span list is cut into pieces of at most copy_piece bytes,
 * issued round-robin on a few non-blocking streams made once per device,
 * then every stream is synchronized. Host memory (the mapped backup) is
 * registered with cuMemHostRegister by host_register() and stays registered
 * until host_unregister(), so no copy pays for pinning.
 *
 * Tuning (read when the first copy runs on a device):
 *   VRAM_CUDA_COPY_STREAMS   streams per device, 1-16 (default 4)
 *   VRAM_CUDA_COPY_PIECE_MB  largest single copy in MiB (default 64)
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_driver.h"
#include "env.h"
#include "error.h"
#include "host_regs.h"
#include "log.h"
#include "vmm.h"

#define VMM_CUDA_MAX_DEVICES 16
#define COPY_MAX_STREAMS 16
#define COPY_DEFAULT_STREAMS 4
#define COPY_DEFAULT_PIECE (64ull << 20)

struct cuda_dev {
	int retained; /* primary context retained; ctx valid */
	CUdevice dev;
	CUcontext ctx;
	unsigned n_streams; /* copy streams made so far */
	CUstream streams[COPY_MAX_STREAMS];
};

struct vmm_cuda {
	struct vmm base;
	struct cuda_driver cu;
	pthread_mutex_t lock; /* inited, devs' setup */
	int inited; /* 1: cuInit done; < 0: it failed with that errno */
	int n_devices;
	struct cuda_dev devs[VMM_CUDA_MAX_DEVICES];
	struct host_regs regs;
	int warned_readonly; /* the read-only fallback was logged */
	unsigned copy_streams;
	uint64_t copy_piece;
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

/* This process's device for the daemon's device dev: the one with the
 * UUID the daemon announced, whatever index it has here; by index when
 * the daemon named none. CUDA_ERROR_INVALID_DEVICE when it is not here. */
static CUresult vc_find_device(struct vmm_cuda *vc, unsigned dev, CUdevice *out)
{
	const char *want = vc->base.dev_uuid[dev];
	char have[64];
	CUuuid uuid;
	CUresult cr;

	if (!want[0])
		return vc->cu.cuDeviceGet(out, (int)dev);
	for (int i = 0; i < vc->n_devices; i++) {
		CUdevice d;
		cr = vc->cu.cuDeviceGet(&d, i);
		if (cr == CUDA_SUCCESS)
			cr = vc->cu.cuDeviceGetUuid(&uuid, d);
		if (cr != CUDA_SUCCESS)
			return cr;
		cuda_format_uuid(&uuid, have, sizeof(have));
		if (strcmp(have, want) == 0) {
			*out = d;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_INVALID_DEVICE;
}

/* cuInit once, then the primary context of dev retained once (lock held). */
static int vc_device_locked(struct vmm_cuda *vc, unsigned dev)
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
	if (dev >= VMM_CUDA_MAX_DEVICES || dev >= VMM_MAX_DEVICES ||
	    (!vc->base.dev_uuid[dev][0] && (int)dev >= vc->n_devices))
		return error_set(ENODEV,
				 "cuda: no device %u in this process "
				 "(%d visible): it must see the daemon's "
				 "devices (check CUDA_VISIBLE_DEVICES)",
				 dev, vc->n_devices);
	d = &vc->devs[dev];
	if (d->retained)
		return 0;
	cr = vc_find_device(vc, dev, &d->dev);
	if (cr == CUDA_ERROR_INVALID_DEVICE)
		return error_set(ENODEV,
				 "cuda: the daemon's device %u (%s) is not visible "
				 "in this process (check CUDA_VISIBLE_DEVICES)",
				 dev, vc->base.dev_uuid[dev]);
	if (cr == CUDA_SUCCESS)
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

static int cuda_map(struct vmm *v, unsigned dev, uintptr_t addr, uint64_t size,
		    int fd, int readonly, uintptr_t *handle)
{
	struct vmm_cuda *vc = vc_of(v);
	const struct cuda_driver *cu = &vc->cu;
	CUmemGenericAllocationHandle h;
	CUmemAccessDesc access;
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
	memset(&access, 0, sizeof(access));
	access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	access.location.id = vc->devs[dev].dev;
	access.flags = readonly ? CU_MEM_ACCESS_FLAGS_PROT_READ :
				  CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	cr = cu->cuMemSetAccess((CUdeviceptr)addr, size, &access, 1);
	if (cr != CUDA_SUCCESS && readonly &&
	    (cr == CUDA_ERROR_INVALID_VALUE ||
	     cr == CUDA_ERROR_NOT_SUPPORTED)) {
		/* Some drivers grant device memory only read-write. The mapping
		 * is still shared; read-only is then a promise, not a fault. */
		if (!vc->warned_readonly)
			log_write(VRAM_LOG_WARN,
				  "cuda: the driver refused read-only "
				  "access (%s); read-only pools are mapped "
				  "read-write",
				  cuda_strerror(cu, cr));
		vc->warned_readonly = 1;
		access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
		cr = cu->cuMemSetAccess((CUdeviceptr)addr, size, &access, 1);
	}
	if (cr != CUDA_SUCCESS) {
		r = vc_err(vc, "cuMemSetAccess", cr);
		goto err_unmap;
	}
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

static int cuda_host_unregister(struct vmm *v, void *host, size_t len)
{
	struct vmm_cuda *vc = vc_of(v);
	int r = host_regs_remove(&vc->regs, host);

	return r < 0 ? r : vc_unregister(vc, host);
}

/* Makes dev's copy streams the first time (context current). */
static int vc_streams(struct vmm_cuda *vc, unsigned dev)
{
	struct cuda_dev *d = &vc->devs[dev];
	int r = 0;

	pthread_mutex_lock(&vc->lock);
	if (vc->copy_streams == 0) {
		vc->copy_streams =
			env_unsigned("VRAM_CUDA_COPY_STREAMS",
				     COPY_DEFAULT_STREAMS, 1, COPY_MAX_STREAMS, NULL);
		vc->copy_piece =
			(uint64_t)env_unsigned("VRAM_CUDA_COPY_PIECE_MB", 0, 1,
					       1u << 20, NULL)
			<< 20;
		if (vc->copy_piece == 0)
			vc->copy_piece = COPY_DEFAULT_PIECE;
	}
	while (d->n_streams < vc->copy_streams) {
		CUresult cr = vc->cu.cuStreamCreate(&d->streams[d->n_streams],
						    CU_STREAM_NON_BLOCKING);
		if (cr != CUDA_SUCCESS) {
			/* Fewer streams will do; none will not. */
			if (d->n_streams == 0)
				r = vc_err(vc, "cuStreamCreate", cr);
			break;
		}
		d->n_streams++;
	}
	pthread_mutex_unlock(&vc->lock);
	return r;
}

static int cuda_copy(struct vmm *v, unsigned dev, int to_host,
		     const struct vmm_span *spans, size_t n)
{
	struct vmm_cuda *vc = vc_of(v);
	const struct cuda_driver *cu = &vc->cu;
	CUresult cr = CUDA_SUCCESS;
	unsigned next = 0, used = 0;
	int r = vc_enter(vc, dev);

	if (r < 0)
		return r;
	r = vc_streams(vc, dev);
	if (r < 0)
		goto out;
	const struct cuda_dev *d = &vc->devs[dev];
	for (size_t i = 0; i < n && cr == CUDA_SUCCESS; i++) {
		for (size_t off = 0;
		     off < spans[i].len && cr == CUDA_SUCCESS;) {
			size_t len = spans[i].len - off;
			if (len > vc->copy_piece)
				len = vc->copy_piece;
			CUdeviceptr dptr = (CUdeviceptr)(spans[i].dev + off);
			char *hptr = (char *)spans[i].host + off;
			CUstream s = d->streams[next];
			cr = to_host ?
				     cu->cuMemcpyDtoHAsync(hptr, dptr, len, s) :
				     cu->cuMemcpyHtoDAsync(dptr, hptr, len, s);
			off += len;
			next = (next + 1) % d->n_streams;
			if (used < d->n_streams)
				used++;
		}
	}
	if (cr != CUDA_SUCCESS)
		r = vc_err(vc,
			   to_host ? "cuMemcpyDtoHAsync" : "cuMemcpyHtoDAsync",
			   cr);
	/* Wait for what was issued even after an error: the caller may unmap
	 * or reuse the memory next. */
	for (unsigned i = 0; i < used; i++) {
		cr = cu->cuStreamSynchronize(d->streams[i]);
		if (cr != CUDA_SUCCESS && r == 0)
			r = vc_err(vc, "cuStreamSynchronize", cr);
	}
out:
	vc_leave(vc);
	return r;
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
		if (!d->retained)
			continue;
		if (d->n_streams &&
		    vc->cu.cuCtxPushCurrent(d->ctx) == CUDA_SUCCESS) {
			for (unsigned s = 0; s < d->n_streams; s++)
				vc->cu.cuStreamDestroy(d->streams[s]);
			vc_leave(vc);
		}
		vc->cu.cuDevicePrimaryCtxRelease(d->dev);
	}
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
	.host_unregister = cuda_host_unregister,
	.copy = cuda_copy,
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
	pthread_mutex_init(&vc->lock, NULL);
	host_regs_init(&vc->regs);
	vc->base.ops = &cuda_vmm_ops;
	vc->base.priv = vc;
	*out = &vc->base;
	return 0;
}
