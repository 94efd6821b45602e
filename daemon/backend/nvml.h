/* SPDX-License-Identifier: Apache-2.0 */
/* NVML, loaded with dlopen of libnvidia-ml.so.1: device memory as the
 * driver reports it and the processes using each device. NVML needs no
 * CUDA context, so the daemon can measure what a pause gave back without
 * holding GPU memory itself. Absent library: nvml_open() returns -ENOENT
 * and callers go on without it.
 *
 * VRAM_LIBNVML overrides the library's path (tests: VRAM_LIBNVML=/nonexistent).
 */
#ifndef VRAMD_NVML_H
#define VRAMD_NVML_H

#include <stddef.h>
#include <stdint.h>

struct nvml;
struct nvml_device; /* an NVML device handle; owned by NVML */

/* usedGpuMemory that NVML could not measure (some VMs and containers). */
#define NVML_USED_UNKNOWN UINT64_MAX

struct nvml_process {
	uint32_t pid;
	uint64_t used_bytes; /* NVML_USED_UNKNOWN if NVML cannot tell */
};

/* Loads and initializes NVML. On success *out is the caller's until
 * nvml_close(). -ENOENT: no library; -ENOSYS: it lacks an entry point;
 * -ENODEV/-EIO: nvmlInit failed (logged). */
int nvml_open(struct nvml **out);
/* Shuts NVML down. NULL is a no-op. The library stays loaded. */
void nvml_close(struct nvml *n);

/* The device with this UUID ("GPU-xxxxxxxx-xxxx-..."), valid until
 * nvml_close(). -ENOENT when NVML does not know it. */
int nvml_device_by_uuid(struct nvml *n, const char *uuid,
			struct nvml_device **out);

/* Free and total memory of the device, in bytes. */
int nvml_memory_info(struct nvml *n, struct nvml_device *dev,
		     uint64_t *free_bytes, uint64_t *total_bytes);

/* The processes with a compute context on the device. On success returns
 * the count and *out holds that many entries (NULL when 0), which the
 * caller frees with free(). */
int nvml_processes(struct nvml *n, struct nvml_device *dev,
		   struct nvml_process **out);

#endif
