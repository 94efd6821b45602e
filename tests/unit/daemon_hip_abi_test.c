/* SPDX-License-Identifier: Apache-2.0 */
/* common/hip_api.h declares the HIP types, values and entry points vramd
 * uses itself instead of including <hip/hip_runtime_api.h> (it says why).
 * Where a HIP header is installed (Debian: libamdhip64-dev), this compiles
 * against it and checks that every value vramd uses is the header's, that
 * the entry points have the parameter types the table gives them, and
 * that the structs are laid out as hip_api.h lays them out, except
 * hipMemAllocationProp before HIP 6.0 (Debian 12 ships HIP 5.2), whose
 * different layout is why vramd does not build against that header.
 *
 * This file must not include hip_api.h: both define the same names. The
 * expected values are written out here, and daemon_hip_test.c checks
 * hip_api.h against the same numbers. Nothing here calls HIP, so the test
 * needs no HIP library to link or run.
 */
#include <stddef.h>

#include "test.h"

#if defined(__has_include)
#if __has_include(<hip/hip_runtime_api.h>)
#define HAVE_HIP_HEADER 1
#endif
#endif

#ifdef HAVE_HIP_HEADER

#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__
#endif
#include <hip/hip_runtime_api.h>
#include <hip/hip_version.h>

/* The entry point fn has type (its address) t. Unevaluated: no reference
 * to the symbol reaches the linker. */
#define SAME_TYPE(fn, t)                                                 \
	_Static_assert(__builtin_types_compatible_p(__typeof__(&fn), t), \
		       #fn " has the parameters hip_api.h gives it")

SAME_TYPE(hipInit, hipError_t (*)(unsigned int));
SAME_TYPE(hipRuntimeGetVersion, hipError_t (*)(int *));
SAME_TYPE(hipDriverGetVersion, hipError_t (*)(int *));
SAME_TYPE(hipGetDeviceCount, hipError_t (*)(int *));
SAME_TYPE(hipGetDevice, hipError_t (*)(int *));
SAME_TYPE(hipSetDevice, hipError_t (*)(int));
SAME_TYPE(hipDeviceGetName, hipError_t (*)(char *, int, hipDevice_t));
SAME_TYPE(hipDeviceGetUuid, hipError_t (*)(hipUUID *, hipDevice_t));
SAME_TYPE(hipDeviceGetPCIBusId, hipError_t (*)(char *, int, int));
SAME_TYPE(hipDeviceTotalMem, hipError_t (*)(size_t *, hipDevice_t));
SAME_TYPE(hipMemGetInfo, hipError_t (*)(size_t *, size_t *));
SAME_TYPE(hipDeviceSynchronize, hipError_t (*)(void));
SAME_TYPE(hipMemGetAllocationGranularity,
	  hipError_t (*)(size_t *, const hipMemAllocationProp *,
			 hipMemAllocationGranularity_flags));
SAME_TYPE(hipMemCreate,
	  hipError_t (*)(hipMemGenericAllocationHandle_t *, size_t,
			 const hipMemAllocationProp *, unsigned long long));
SAME_TYPE(hipMemRelease, hipError_t (*)(hipMemGenericAllocationHandle_t));
SAME_TYPE(hipMemExportToShareableHandle,
	  hipError_t (*)(void *, hipMemGenericAllocationHandle_t,
			 hipMemAllocationHandleType, unsigned long long));
SAME_TYPE(hipMemImportFromShareableHandle,
	  hipError_t (*)(hipMemGenericAllocationHandle_t *, void *,
			 hipMemAllocationHandleType));
SAME_TYPE(hipMemAddressReserve,
	  hipError_t (*)(void **, size_t, size_t, void *, unsigned long long));
SAME_TYPE(hipMemAddressFree, hipError_t (*)(void *, size_t));
SAME_TYPE(hipMemMap,
	  hipError_t (*)(void *, size_t, size_t,
			 hipMemGenericAllocationHandle_t, unsigned long long));
SAME_TYPE(hipMemUnmap, hipError_t (*)(void *, size_t));
SAME_TYPE(hipMemSetAccess,
	  hipError_t (*)(void *, size_t, const hipMemAccessDesc *, size_t));
SAME_TYPE(hipStreamCreateWithFlags, hipError_t (*)(hipStream_t *, unsigned));
SAME_TYPE(hipStreamDestroy, hipError_t (*)(hipStream_t));
SAME_TYPE(hipStreamSynchronize, hipError_t (*)(hipStream_t));
SAME_TYPE(hipMemcpyAsync, hipError_t (*)(void *, const void *, size_t,
					 hipMemcpyKind, hipStream_t));
SAME_TYPE(hipHostRegister, hipError_t (*)(void *, size_t, unsigned int));
SAME_TYPE(hipHostUnregister, hipError_t (*)(void *));
SAME_TYPE(hipGetErrorName, const char *(*)(hipError_t));
SAME_TYPE(hipGetErrorString, const char *(*)(hipError_t));

TEST(enums_are_int_sized)
{
	/* hip_api.h passes these as int. */
	ASSERT_EQ(sizeof(hipError_t), sizeof(int));
	ASSERT_EQ(sizeof(hipMemcpyKind), sizeof(int));
	ASSERT_EQ(sizeof(hipMemAllocationHandleType), sizeof(int));
	ASSERT_EQ(sizeof(hipMemAllocationGranularity_flags), sizeof(int));
	ASSERT_EQ(sizeof(hipMemLocationType), sizeof(int));
	ASSERT_EQ(sizeof(hipMemAccessFlags), sizeof(int));
	ASSERT_EQ(sizeof(hipMemAllocationType), sizeof(int));
	ASSERT_EQ(sizeof(hipDevice_t), sizeof(int));
}

TEST(values_match_the_header)
{
	ASSERT_EQ(hipSuccess, 0);
	ASSERT_EQ(hipErrorInvalidValue, 1);
	ASSERT_EQ(hipErrorOutOfMemory, 2);
	ASSERT_EQ(hipErrorNotInitialized, 3);
	ASSERT_EQ(hipErrorDeinitialized, 4);
	ASSERT_EQ(hipErrorInvalidDevicePointer, 17);
	ASSERT_EQ(hipErrorInsufficientDriver, 35);
	ASSERT_EQ(hipErrorNoDevice, 100);
	ASSERT_EQ(hipErrorInvalidDevice, 101);
	ASSERT_EQ(hipErrorInvalidContext, 201);
	ASSERT_EQ(hipErrorMapFailed, 205);
	ASSERT_EQ(hipErrorUnmapFailed, 206);
	ASSERT_EQ(hipErrorAlreadyMapped, 208);
	ASSERT_EQ(hipErrorOperatingSystem, 304);
	ASSERT_EQ(hipErrorInvalidHandle, 400);
	ASSERT_EQ(hipErrorNotFound, 500);
	ASSERT_EQ(hipErrorNotReady, 600);
	ASSERT_EQ(hipErrorIllegalAddress, 700);
	ASSERT_EQ(hipErrorHostMemoryAlreadyRegistered, 712);
	ASSERT_EQ(hipErrorHostMemoryNotRegistered, 713);
	ASSERT_EQ(hipErrorLaunchFailure, 719);
	ASSERT_EQ(hipErrorNotSupported, 801);
	ASSERT_EQ(hipErrorUnknown, 999);
	ASSERT_EQ(hipMemLocationTypeInvalid, 0);
	ASSERT_EQ(hipMemLocationTypeDevice, 1);
	ASSERT_EQ(hipMemAccessFlagsProtNone, 0);
	ASSERT_EQ(hipMemAccessFlagsProtRead, 1);
	ASSERT_EQ(hipMemAccessFlagsProtReadWrite, 3);
	ASSERT_EQ(hipMemAllocationTypePinned, 1);
	ASSERT_EQ(hipMemHandleTypeNone, 0);
	ASSERT_EQ(hipMemHandleTypePosixFileDescriptor, 1);
	ASSERT_EQ(hipMemAllocationGranularityMinimum, 0);
	ASSERT_EQ(hipMemAllocationGranularityRecommended, 1);
	ASSERT_EQ(hipMemcpyHostToDevice, 1);
	ASSERT_EQ(hipMemcpyDeviceToHost, 2);
	ASSERT_EQ(hipHostRegisterPortable, 1);
	ASSERT_EQ(hipStreamNonBlocking, 1);
}

TEST(stable_structs_match)
{
	ASSERT_EQ(sizeof(hipUUID), 16);
	ASSERT_EQ(sizeof(hipMemLocation), 8);
	ASSERT_EQ(offsetof(hipMemLocation, type), 0);
	ASSERT_EQ(offsetof(hipMemLocation, id), 4);
	ASSERT_EQ(sizeof(hipMemAccessDesc), 12);
	ASSERT_EQ(offsetof(hipMemAccessDesc, location), 0);
	ASSERT_EQ(offsetof(hipMemAccessDesc, flags), 8);
}

TEST(allocation_properties)
{
	fprintf(stderr, "HIP header %d.%d\n", HIP_VERSION_MAJOR,
		HIP_VERSION_MINOR);
#if HIP_VERSION_MAJOR >= 6
	/* ROCm 6 and 7: the layout hip_api.h declares. */
	ASSERT_EQ(offsetof(hipMemAllocationProp, type), 0);
	ASSERT_EQ(offsetof(hipMemAllocationProp, requestedHandleType), 4);
	ASSERT_EQ(offsetof(hipMemAllocationProp, location), 8);
	ASSERT_EQ(offsetof(hipMemAllocationProp, win32HandleMetaData), 16);
	ASSERT_EQ(offsetof(hipMemAllocationProp, allocFlags), 24);
	ASSERT_EQ(sizeof(hipMemAllocationProp), 32);
#else
	/* Before 6.0 the members were in another order: a build against
	 * this header would hand a ROCm 6 runtime a garbled struct. */
	ASSERT(offsetof(hipMemAllocationProp, type) != 0);
	ASSERT(offsetof(hipMemAllocationProp, location) != 8);
#endif
}

#else /* no HIP header */

TEST(hip_header_absent)
{
	SKIP("no <hip/hip_runtime_api.h> here (Debian: libamdhip64-dev)");
}

#endif
