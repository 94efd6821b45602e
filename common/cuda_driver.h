/* SPDX-License-Identifier: Apache-2.0 */
/* The few CUDA driver API types and entry points vramd uses, declared here
 * so that the tree builds without the CUDA toolkit (a CI machine has no
 * cuda.h), and loaded at run time from libcuda.so.1 with dlopen so that
 * vramd and libvram start where no NVIDIA driver is installed.
 *
 * Types, enum values and signatures are copied from cuda.h (CUDA 13.0);
 * where cuda.h #defines a name to a versioned entry point (cuMemGetInfo ->
 * cuMemGetInfo_v2) the versioned symbol is loaded, as a program compiled
 * against cuda.h would call it. Every function here exists in drivers since
 * CUDA 11.4.
 *
 * Header only: the daemon, libvram, the GPU tests and the benchmarks each
 * compile their own copy of the loader below (the Makefile builds daemon/
 * and libvram/ separately). libcuda is never unloaded once loaded: the
 * driver starts threads of its own, and the host process (PyTorch) may use
 * the same library.
 *
 * VRAM_LIBCUDA overrides the library's path (e.g. VRAM_LIBCUDA=/nonexistent
 * to test the path taken on machines without the driver).
 */
#ifndef VRAM_CUDA_DRIVER_H
#define VRAM_CUDA_DRIVER_H

#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;

typedef struct CUuuid_st {
	char bytes[16];
} CUuuid;

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_DEINITIALIZED = 4,
	CUDA_ERROR_DEVICE_UNAVAILABLE = 46,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_INVALID_CONTEXT = 201,
	CUDA_ERROR_ALREADY_MAPPED = 208,
	CUDA_ERROR_ECC_UNCORRECTABLE = 214,
	CUDA_ERROR_OPERATING_SYSTEM = 304,
	CUDA_ERROR_INVALID_HANDLE = 400,
	CUDA_ERROR_NOT_FOUND = 500,
	CUDA_ERROR_NOT_READY = 600,
	CUDA_ERROR_ILLEGAL_ADDRESS = 700,
	CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
	CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
	CUDA_ERROR_LAUNCH_FAILED = 719,
	CUDA_ERROR_NOT_PERMITTED = 800,
	CUDA_ERROR_NOT_SUPPORTED = 801,
	CUDA_ERROR_SYSTEM_NOT_READY = 802,
	CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803,
	CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804,
	CUDA_ERROR_TIMEOUT = 909,
	CUDA_ERROR_UNKNOWN = 999,
};

/* CUdevice_attribute values. */
enum {
	CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT = 40,
	CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
	CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED = 103,
	CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED = 110,
};

typedef enum CUmemAllocationHandleType_enum {
	CU_MEM_HANDLE_TYPE_NONE = 0x0,
	CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 0x1,
	CU_MEM_HANDLE_TYPE_MAX = 0x7FFFFFFF
} CUmemAllocationHandleType;

typedef enum CUmemAccess_flags_enum {
	CU_MEM_ACCESS_FLAGS_PROT_NONE = 0x0,
	CU_MEM_ACCESS_FLAGS_PROT_READ = 0x1,
	CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3,
	CU_MEM_ACCESS_FLAGS_PROT_MAX = 0x7FFFFFFF
} CUmemAccess_flags;

typedef enum CUmemLocationType_enum {
	CU_MEM_LOCATION_TYPE_INVALID = 0x0,
	CU_MEM_LOCATION_TYPE_DEVICE = 0x1,
	CU_MEM_LOCATION_TYPE_MAX = 0x7FFFFFFF
} CUmemLocationType;

typedef enum CUmemAllocationType_enum {
	CU_MEM_ALLOCATION_TYPE_INVALID = 0x0,
	CU_MEM_ALLOCATION_TYPE_PINNED = 0x1,
	CU_MEM_ALLOCATION_TYPE_MAX = 0x7FFFFFFF
} CUmemAllocationType;

typedef enum CUmemAllocationGranularity_flags_enum {
	CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0,
	CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 0x1
} CUmemAllocationGranularity_flags;

typedef struct CUmemLocation_st {
	CUmemLocationType type;
	int id;
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
	CUmemAllocationType type;
	CUmemAllocationHandleType requestedHandleTypes;
	CUmemLocation location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} CUmemAllocationProp;

typedef struct CUmemAccessDesc_st {
	CUmemLocation location;
	CUmemAccess_flags flags;
} CUmemAccessDesc;

#define CU_MEMHOSTREGISTER_PORTABLE 0x01
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_EVENT_DEFAULT 0x0

/* X(member, symbol, parameters): every entry point returns CUresult. */
#define CUDA_DRIVER_SYMBOLS(X)                                                \
	X(cuInit, "cuInit", (unsigned int flags))                             \
	X(cuDriverGetVersion, "cuDriverGetVersion", (int *version))           \
	X(cuGetErrorString, "cuGetErrorString", (CUresult e, const char **s)) \
	X(cuGetErrorName, "cuGetErrorName", (CUresult e, const char **s))     \
	X(cuDeviceGetCount, "cuDeviceGetCount", (int *count))                 \
	X(cuDeviceGet, "cuDeviceGet", (CUdevice * dev, int ordinal))          \
	X(cuDeviceGetName, "cuDeviceGetName",                                 \
	  (char *name, int len, CUdevice dev))                                \
	X(cuDeviceGetUuid, "cuDeviceGetUuid_v2",                              \
	  (CUuuid * uuid, CUdevice dev))                                      \
	X(cuDeviceTotalMem, "cuDeviceTotalMem_v2",                            \
	  (size_t * bytes, CUdevice dev))                                     \
	X(cuDeviceGetAttribute, "cuDeviceGetAttribute",                       \
	  (int *value, int attrib, CUdevice dev))                             \
	X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain",               \
	  (CUcontext * ctx, CUdevice dev))                                    \
	X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2",          \
	  (CUdevice dev))                                                     \
	X(cuCtxPushCurrent, "cuCtxPushCurrent_v2", (CUcontext ctx))           \
	X(cuCtxPopCurrent, "cuCtxPopCurrent_v2", (CUcontext * ctx))           \
	X(cuCtxSetCurrent, "cuCtxSetCurrent", (CUcontext ctx))                \
	X(cuCtxSynchronize, "cuCtxSynchronize", (void))                       \
	X(cuMemGetInfo, "cuMemGetInfo_v2", (size_t * free_b, size_t * total)) \
	X(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity",     \
	  (size_t * gran, const CUmemAllocationProp *prop,                    \
	   CUmemAllocationGranularity_flags option))                          \
	X(cuMemCreate, "cuMemCreate",                                         \
	  (CUmemGenericAllocationHandle * h, size_t size,                     \
	   const CUmemAllocationProp *prop, unsigned long long flags))        \
	X(cuMemRelease, "cuMemRelease", (CUmemGenericAllocationHandle h))     \
	X(cuMemExportToShareableHandle, "cuMemExportToShareableHandle",       \
	  (void *shareable, CUmemGenericAllocationHandle h,                   \
	   CUmemAllocationHandleType type, unsigned long long flags))         \
	X(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle",   \
	  (CUmemGenericAllocationHandle * h, void *os_handle,                 \
	   CUmemAllocationHandleType type))                                   \
	X(cuMemAddressReserve, "cuMemAddressReserve",                         \
	  (CUdeviceptr * ptr, size_t size, size_t align, CUdeviceptr addr,    \
	   unsigned long long flags))                                         \
	X(cuMemAddressFree, "cuMemAddressFree",                               \
	  (CUdeviceptr ptr, size_t size))                                     \
	X(cuMemMap, "cuMemMap",                                               \
	  (CUdeviceptr ptr, size_t size, size_t offset,                       \
	   CUmemGenericAllocationHandle h, unsigned long long flags))         \
	X(cuMemUnmap, "cuMemUnmap", (CUdeviceptr ptr, size_t size))           \
	X(cuMemSetAccess, "cuMemSetAccess",                                   \
	  (CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,         \
	   size_t count))                                                     \
	X(cuStreamCreate, "cuStreamCreate",                                   \
	  (CUstream * s, unsigned int flags))                                 \
	X(cuStreamDestroy, "cuStreamDestroy_v2", (CUstream s))                \
	X(cuStreamSynchronize, "cuStreamSynchronize", (CUstream s))           \
	X(cuEventCreate, "cuEventCreate", (CUevent * e, unsigned int flags))  \
	X(cuEventRecord, "cuEventRecord", (CUevent e, CUstream s))            \
	X(cuEventSynchronize, "cuEventSynchronize", (CUevent e))              \
	X(cuEventDestroy, "cuEventDestroy_v2", (CUevent e))                   \
	X(cuMemHostRegister, "cuMemHostRegister_v2",                          \
	  (void *p, size_t len, unsigned int flags))                          \
	X(cuMemHostUnregister, "cuMemHostUnregister", (void *p))              \
	X(cuMemAllocHost, "cuMemAllocHost_v2", (void **p, size_t len))        \
	X(cuMemFreeHost, "cuMemFreeHost", (void *p))                          \
	X(cuMemAlloc, "cuMemAlloc_v2", (CUdeviceptr * p, size_t len))         \
	X(cuMemFree, "cuMemFree_v2", (CUdeviceptr p))                         \
	X(cuMemcpyHtoD, "cuMemcpyHtoD_v2",                                    \
	  (CUdeviceptr dst, const void *src, size_t len))                     \
	X(cuMemcpyDtoH, "cuMemcpyDtoH_v2",                                    \
	  (void *dst, CUdeviceptr src, size_t len))                           \
	X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2",                          \
	  (CUdeviceptr dst, const void *src, size_t len, CUstream s))         \
	X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2",                          \
	  (void *dst, CUdeviceptr src, size_t len, CUstream s))               \
	X(cuMemsetD32, "cuMemsetD32_v2",                                      \
	  (CUdeviceptr dst, unsigned int v, size_t n))

/* The driver's entry points, filled by cuda_driver_load(). */
struct cuda_driver {
	void *lib;
#define CUDA_DRIVER_MEMBER_(member, symbol, params) CUresult(*member) params;
	CUDA_DRIVER_SYMBOLS(CUDA_DRIVER_MEMBER_)
#undef CUDA_DRIVER_MEMBER_
};

/* Loads libcuda.so.1 (or $VRAM_LIBCUDA) into *d; does not call cuInit.
 * Returns 0, -ENOENT when the library cannot be loaded (no NVIDIA driver
 * here), or -ENOSYS when it lacks an entry point (a driver older than CUDA
 * 11.4). On failure err (if not NULL) receives the reason and *d holds
 * nothing. Never unload the library (see the top of this file). */
static inline int cuda_driver_load(struct cuda_driver *d, char *err,
				   size_t errlen)
{
	const char *path = getenv("VRAM_LIBCUDA");

	if (!path || !*path)
		path = "libcuda.so.1";
	d->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!d->lib) {
		const char *why = dlerror();
		if (err)
			snprintf(err, errlen, "%s", why ? why : path);
		return -ENOENT;
	}
#define CUDA_DRIVER_SYM_(member, symbol, params)                              \
	d->member = (CUresult(*) params)dlsym(d->lib, symbol);                \
	if (!d->member) {                                                     \
		if (err)                                                      \
			snprintf(err, errlen, "%s lacks %s (driver too old)", \
				 path, symbol);                               \
		dlclose(d->lib); /* nothing of it ran yet */                  \
		d->lib = NULL;                                                \
		return -ENOSYS;                                               \
	}
	CUDA_DRIVER_SYMBOLS(CUDA_DRIVER_SYM_)
#undef CUDA_DRIVER_SYM_
	return 0;
}

/* The errno that best describes a driver error, for callers above. */
static inline int cuda_errno(CUresult r)
{
	switch (r) {
	case CUDA_SUCCESS:
		return 0;
	case CUDA_ERROR_OUT_OF_MEMORY:
		return -ENOMEM;
	case CUDA_ERROR_INVALID_VALUE:
	case CUDA_ERROR_INVALID_HANDLE:
	case CUDA_ERROR_INVALID_CONTEXT:
	case CUDA_ERROR_ALREADY_MAPPED:
		return -EINVAL;
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_INVALID_DEVICE:
	case CUDA_ERROR_DEVICE_UNAVAILABLE:
	case CUDA_ERROR_SYSTEM_NOT_READY:
	case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
	case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
		return -ENODEV;
	case CUDA_ERROR_NOT_INITIALIZED:
	case CUDA_ERROR_DEINITIALIZED:
		return -ENXIO;
	case CUDA_ERROR_NOT_SUPPORTED:
		return -ENOTSUP;
	case CUDA_ERROR_NOT_PERMITTED:
		return -EPERM;
	case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
		return -EEXIST;
	case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED:
	case CUDA_ERROR_NOT_FOUND:
		return -ENOENT;
	case CUDA_ERROR_NOT_READY:
		return -EAGAIN;
	case CUDA_ERROR_TIMEOUT:
		return -ETIMEDOUT;
	default:
		return -EIO;
	}
}

/* "CUDA_ERROR_OUT_OF_MEMORY: out of memory" for logs, in a buffer of this
 * thread valid until its next call. */
/* A device UUID as nvidia-smi prints it: GPU-xxxxxxxx-xxxx-xxxx-xxxx-...
 * The daemon announces devices by it, and a client finds the same device
 * by it whatever CUDA_VISIBLE_DEVICES says. */
static inline void cuda_format_uuid(const CUuuid *u, char *out, size_t len)
{
	const unsigned char *b = (const unsigned char *)u->bytes;
	snprintf(out, len,
		 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
		 "%02x%02x%02x%02x%02x%02x",
		 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9],
		 b[10], b[11], b[12], b[13], b[14], b[15]);
}

static inline const char *cuda_strerror(const struct cuda_driver *d, CUresult r)
{
	static __thread char buf[160];
	const char *name = NULL, *desc = NULL;

	if (d->cuGetErrorName)
		d->cuGetErrorName(r, &name);
	if (d->cuGetErrorString)
		d->cuGetErrorString(r, &desc);
	snprintf(buf, sizeof(buf), "%s: %s", name ? name : "CUDA error",
		 desc ? desc : "unknown");
	return buf;
}

#endif
