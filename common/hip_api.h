/* SPDX-License-Identifier: Apache-2.0 */
/* The HIP runtime entry points vramd uses, as a table of function pointers,
 * and the few HIP types and constants they take. Shared by the daemon's
 * HIP backend (daemon/backend/hip.c) and libvram's (libvram/vmm/hip.c).
 *
 * Why a table: every HIP call of vramd goes through a struct hip_api, so
 * that vramd and libvram start where ROCm is absent (the table is filled
 * with dlopen/dlsym at run time, never linked), and so that the unit tests
 * can put a recording stand-in in its place (tests/unit/hip_fake.h) and
 * check every call sequence without AMD hardware.
 *
 * Why our own declarations rather than <hip/hip_runtime_api.h>: the layout
 * of hipMemAllocationProp changed in ROCm 6.0 (it became CUDA's: type,
 * requestedHandleType, location, win32HandleMetaData, allocFlags), and the
 * HIP headers Debian 12 ships (libamdhip64-dev, HIP 5.2) have the old one.
 * A build against them would hand ROCm 6 and 7 runtimes, the only ones
 * with a working VMM API, a wrongly laid out struct. So the types below are
 * copied from the ROCm 6.x/7.x headers, the runtime's version is checked
 * at start (>= 6.0), and tests/unit/daemon_hip_abi_test.c compares every
 * value and layout that did not change against the system header where one
 * is installed. Enum-typed parameters are declared int: a C enum of these
 * values has the size and passing of an int.
 *
 * Header only, like common/cuda_driver.h: the daemon and libvram each compile
 * their own copy of the loader. The runtime is never unloaded once loaded:
 * it is C++ whose static constructors ran, it starts threads, and the host
 * program (PyTorch) may use the same library.
 *
 * VRAM_LIBHIP overrides the library's path (VRAM_LIBHIP=/nonexistent tests
 * the path taken on machines without ROCm).
 */
#ifndef VRAM_HIP_API_H
#define VRAM_HIP_API_H

#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int hipError_t;
typedef int hipDevice_t;
typedef struct ihipStream_t *hipStream_t;
typedef struct ihipMemGenericAllocationHandle *hipMemGenericAllocationHandle_t;

typedef struct hipUUID_t {
	char bytes[16];
} hipUUID;

/* hipError_t values vramd tells apart (the same in HIP 5.x, 6.x, 7.x). */
enum {
	hipSuccess = 0,
	hipErrorInvalidValue = 1,
	hipErrorOutOfMemory = 2,
	hipErrorNotInitialized = 3,
	hipErrorDeinitialized = 4,
	hipErrorInvalidDevicePointer = 17,
	hipErrorInsufficientDriver = 35,
	hipErrorNoDevice = 100,
	hipErrorInvalidDevice = 101,
	hipErrorInvalidContext = 201,
	hipErrorMapFailed = 205,
	hipErrorUnmapFailed = 206,
	hipErrorAlreadyMapped = 208,
	hipErrorOperatingSystem = 304,
	hipErrorInvalidHandle = 400,
	hipErrorNotFound = 500,
	hipErrorNotReady = 600,
	hipErrorIllegalAddress = 700,
	hipErrorHostMemoryAlreadyRegistered = 712,
	hipErrorHostMemoryNotRegistered = 713,
	hipErrorLaunchFailure = 719,
	hipErrorNotSupported = 801,
	hipErrorUnknown = 999,
};

/* hipMemLocationType, hipMemAccessFlags, hipMemAllocationType,
 * hipMemAllocationHandleType, hipMemAllocationGranularity_flags,
 * hipMemcpyKind and the flags of hipHostRegister and hipStreamCreate. */
enum {
	hipMemLocationTypeInvalid = 0,
	hipMemLocationTypeDevice = 1,
};
enum {
	hipMemAccessFlagsProtNone = 0,
	hipMemAccessFlagsProtRead = 1,
	hipMemAccessFlagsProtReadWrite = 3,
};
enum {
	hipMemAllocationTypePinned = 1,
};
enum {
	hipMemHandleTypeNone = 0,
	hipMemHandleTypePosixFileDescriptor = 1,
};
enum {
	hipMemAllocationGranularityMinimum = 0,
	hipMemAllocationGranularityRecommended = 1,
};
enum {
	hipMemcpyHostToDevice = 1,
	hipMemcpyDeviceToHost = 2,
};
#define hipHostRegisterPortable 0x1
#define hipStreamNonBlocking 0x1

typedef struct hipMemLocation {
	int type; /* hipMemLocationType */
	int id;	  /* the device ordinal */
} hipMemLocation;

typedef struct hipMemAccessDesc {
	hipMemLocation location;
	int flags; /* hipMemAccessFlags */
} hipMemAccessDesc;

/* ROCm >= 6.0 (ROCm 7 names the second member requestedHandleTypes, in a
 * union with this one). */
typedef struct hipMemAllocationProp {
	int type;		 /* hipMemAllocationType */
	int requestedHandleType; /* hipMemAllocationHandleType */
	hipMemLocation location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
	} allocFlags;
} hipMemAllocationProp;

/* hipRuntimeGetVersion() returns major * 10000000 + minor * 100000 +
 * patch (a build number): 60000000 is HIP 6.0.0. */
#define HIP_VERSION_OF(major, minor) ((major)*10000000 + (minor)*100000)
#define HIP_VERSION_MAJOR_OF(v) ((v) / 10000000)
#define HIP_VERSION_MINOR_OF(v) ((v) / 100000 % 100)
#define HIP_VERSION_PATCH_OF(v) ((v) % 100000)
/* The oldest runtime vramd accepts: the ROCm 6.0 allocation properties. */
#define HIP_VERSION_MIN HIP_VERSION_OF(6, 0)

/* X(member, parameters): each entry point returns hipError_t and has the
 * symbol of its member's name (none of these is versioned in ROCm 6-7). */
#define HIP_API_SYMBOLS(X)                                                   \
	X(hipInit, (unsigned int flags))                                     \
	X(hipRuntimeGetVersion, (int *version))                              \
	X(hipDriverGetVersion, (int *version))                               \
	X(hipGetDeviceCount, (int *count))                                   \
	X(hipGetDevice, (int *dev))                                          \
	X(hipSetDevice, (int dev))                                           \
	X(hipDeviceGetName, (char *name, int len, hipDevice_t dev))          \
	X(hipDeviceGetUuid, (hipUUID * uuid, hipDevice_t dev))               \
	X(hipDeviceGetPCIBusId, (char *bus_id, int len, int dev))            \
	X(hipDeviceTotalMem, (size_t * bytes, hipDevice_t dev))              \
	X(hipMemGetInfo, (size_t * free_b, size_t * total))                  \
	X(hipDeviceSynchronize, (void))                                      \
	X(hipMemGetAllocationGranularity,                                    \
	  (size_t * gran, const hipMemAllocationProp *prop, int option))     \
	X(hipMemCreate,                                                      \
	  (hipMemGenericAllocationHandle_t * h, size_t size,                 \
	   const hipMemAllocationProp *prop, unsigned long long flags))      \
	X(hipMemRelease, (hipMemGenericAllocationHandle_t h))                \
	X(hipMemExportToShareableHandle,                                     \
	  (void *shareable, hipMemGenericAllocationHandle_t h, int type,     \
	   unsigned long long flags))                                        \
	X(hipMemImportFromShareableHandle,                                   \
	  (hipMemGenericAllocationHandle_t * h, void *os_handle, int type))  \
	X(hipMemAddressReserve, (void **ptr, size_t size, size_t align,      \
				 void *addr, unsigned long long flags))      \
	X(hipMemAddressFree, (void *ptr, size_t size))                       \
	X(hipMemMap,                                                         \
	  (void *ptr, size_t size, size_t offset,                            \
	   hipMemGenericAllocationHandle_t h, unsigned long long flags))     \
	X(hipMemUnmap, (void *ptr, size_t size))                             \
	X(hipMemSetAccess, (void *ptr, size_t size,                          \
			    const hipMemAccessDesc *desc, size_t count))     \
	X(hipStreamCreateWithFlags, (hipStream_t * s, unsigned int flags))   \
	X(hipStreamDestroy, (hipStream_t s))                                 \
	X(hipStreamSynchronize, (hipStream_t s))                             \
	X(hipMemcpyAsync,                                                    \
	  (void *dst, const void *src, size_t len, int kind, hipStream_t s)) \
	X(hipHostRegister, (void *p, size_t len, unsigned int flags))        \
	X(hipHostUnregister, (void *p))

/* The runtime's entry points, filled by hip_api_load() or by a test. */
struct hip_api {
	void *lib; /* NULL for a table a test made */
#define HIP_API_MEMBER_(member, params) hipError_t(*member) params;
	HIP_API_SYMBOLS(HIP_API_MEMBER_)
#undef HIP_API_MEMBER_
	/* Not hipError_t: looked up apart, optional. */
	const char *(*hipGetErrorName)(hipError_t e);
	const char *(*hipGetErrorString)(hipError_t e);
};

/* Returns the first entry point a table lacks, or NULL when it is whole:
 * for code that takes a table from a caller (tests). */
static inline const char *hip_api_missing(const struct hip_api *a)
{
#define HIP_API_CHECK_(member, params) \
	if (!a->member)                \
		return #member;
	HIP_API_SYMBOLS(HIP_API_CHECK_)
#undef HIP_API_CHECK_
	return NULL;
}

/* Loads the HIP runtime into *a: $VRAM_LIBHIP if set, else the first of
 * libamdhip64.so.7, libamdhip64.so.6 and $ROCM_PATH/lib/libamdhip64.so
 * (ROCM_PATH defaults to /opt/rocm) that loads. Calls nothing in it.
 * Returns 0, -ENOENT when no library loads (no ROCm here), or -ENOSYS when
 * the one that loaded lacks an entry point. On failure err (if not NULL)
 * receives the reason and *a holds nothing usable. */
static inline int hip_api_load(struct hip_api *a, char *err, size_t errlen)
{
	const char *env = getenv("VRAM_LIBHIP");
	const char *rocm = getenv("ROCM_PATH");
	char opt[512];
	const char *paths[4];
	size_t n = 0;

	memset(a, 0, sizeof(*a));
	if (env && *env) {
		paths[n++] = env;
	} else {
		snprintf(opt, sizeof(opt), "%s/lib/libamdhip64.so",
			 rocm && *rocm ? rocm : "/opt/rocm");
		paths[n++] = "libamdhip64.so.7";
		paths[n++] = "libamdhip64.so.6";
		paths[n++] = opt;
	}
	const char *path = NULL;
	for (size_t i = 0; i < n && !a->lib; i++) {
		path = paths[i];
		a->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	}
	if (!a->lib) {
		const char *why = dlerror();
		if (err)
			snprintf(err, errlen, "%s", why ? why : path);
		return -ENOENT;
	}
#define HIP_API_SYM_(member, params)                                       \
	a->member = (hipError_t(*) params)dlsym(a->lib, #member);          \
	if (!a->member) {                                                  \
		if (err)                                                   \
			snprintf(err, errlen,                              \
				 "%s lacks %s (not a HIP runtime of ROCm " \
				 "6.0 or later)",                          \
				 path, #member);                           \
		/* Not unloaded: its constructors may have run. */         \
		memset(a, 0, sizeof(*a));                                  \
		return -ENOSYS;                                            \
	}
	HIP_API_SYMBOLS(HIP_API_SYM_)
#undef HIP_API_SYM_
	a->hipGetErrorName =
		(const char *(*)(hipError_t))dlsym(a->lib, "hipGetErrorName");
	a->hipGetErrorString =
		(const char *(*)(hipError_t))dlsym(a->lib, "hipGetErrorString");
	return 0;
}

/* The errno that best describes a HIP error, for callers above. */
static inline int hip_errno(hipError_t e)
{
	switch (e) {
	case hipSuccess:
		return 0;
	case hipErrorOutOfMemory:
		return -ENOMEM;
	case hipErrorInvalidValue:
	case hipErrorInvalidDevicePointer:
	case hipErrorInvalidContext:
	case hipErrorAlreadyMapped:
	case hipErrorInvalidHandle:
		return -EINVAL;
	case hipErrorNoDevice:
	case hipErrorInvalidDevice:
	case hipErrorInsufficientDriver:
		return -ENODEV;
	case hipErrorNotInitialized:
	case hipErrorDeinitialized:
		return -ENXIO;
	case hipErrorNotSupported:
		return -ENOTSUP;
	case hipErrorHostMemoryAlreadyRegistered:
		return -EEXIST;
	case hipErrorHostMemoryNotRegistered:
	case hipErrorNotFound:
		return -ENOENT;
	case hipErrorNotReady:
		return -EAGAIN;
	default:
		return -EIO;
	}
}

/* "hipErrorOutOfMemory: out of memory" for logs, in a buffer of this
 * thread valid until its next call. */
static inline const char *hip_strerror(const struct hip_api *a, hipError_t e)
{
	static __thread char buf[160];
	const char *name = a->hipGetErrorName ? a->hipGetErrorName(e) : NULL;
	const char *desc =
		a->hipGetErrorString ? a->hipGetErrorString(e) : NULL;

	if (name)
		snprintf(buf, sizeof(buf), "%s: %s", name,
			 desc ? desc : "unknown");
	else
		snprintf(buf, sizeof(buf), "HIP error %d", e);
	return buf;
}

/* The allocation properties of vramd's chunks: device memory on dev that
 * can be exported as a POSIX fd (a dma-buf). */
static inline void hip_chunk_prop(hipMemAllocationProp *prop, int dev)
{
	memset(prop, 0, sizeof(*prop));
	prop->type = hipMemAllocationTypePinned;
	prop->requestedHandleType = hipMemHandleTypePosixFileDescriptor;
	prop->location.type = hipMemLocationTypeDevice;
	prop->location.id = dev;
}

/* A device UUID as vramd announces it: the daemon and libvram must agree.
 * ROCm fills the 16 bytes with printable characters (rocminfo shows them
 * after "GPU-"); anything else is printed in hex. */
static inline void hip_format_uuid(const hipUUID *u, char *out, size_t len)
{
	const unsigned char *b = (const unsigned char *)u->bytes;
	int printable = 1;

	for (int i = 0; i < 16; i++)
		if (b[i] < 0x21 || b[i] > 0x7e)
			printable = 0;
	if (printable) {
		snprintf(out, len, "GPU-%.16s", u->bytes);
		return;
	}
	snprintf(out, len,
		 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
		 "%02x%02x%02x%02x%02x%02x",
		 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9],
		 b[10], b[11], b[12], b[13], b[14], b[15]);
}

#endif
