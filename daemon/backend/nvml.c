/* SPDX-License-Identifier: Apache-2.0 */
/* NVML through dlopen. The types and signatures are nvml.h's (NVML 12/13),
 * declared here so that no NVIDIA header is needed to build. */
#include "nvml.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NO_PERMISSION = 4,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_DRIVER_NOT_LOADED = 9,
	NVML_ERROR_TIMEOUT = 10,
	NVML_ERROR_LIBRARY_NOT_FOUND = 12,
	NVML_ERROR_FUNCTION_NOT_FOUND = 13,
	NVML_ERROR_GPU_IS_LOST = 15,
};

typedef struct {
	unsigned long long total;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_t;

/* nvmlProcessInfo_t of the _v2 and _v3 calls. */
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} nvmlProcessInfo_t;

/* nvmlProcessInfo_v1_t of the unversioned call (drivers before 11.x). */
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

#define NVML_VALUE_NOT_AVAILABLE_ULL (~0ULL)

typedef nvmlReturn_t (*nvml_procs_fn)(nvmlDevice_t, unsigned int *, void *);

struct nvml {
	void *lib;
	nvmlReturn_t (*init)(void);
	nvmlReturn_t (*shutdown)(void);
	const char *(*error_string)(nvmlReturn_t);
	nvmlReturn_t (*by_uuid)(const char *, nvmlDevice_t *);
	nvmlReturn_t (*memory_info)(nvmlDevice_t, nvmlMemory_t *);
	nvml_procs_fn procs;
	size_t proc_stride; /* sizeof the process struct procs fills */
};

static int nvml_errno(nvmlReturn_t r)
{
	switch (r) {
	case NVML_SUCCESS:
		return 0;
	case NVML_ERROR_INVALID_ARGUMENT:
		return -EINVAL;
	case NVML_ERROR_NOT_SUPPORTED:
		return -ENOTSUP;
	case NVML_ERROR_NO_PERMISSION:
		return -EPERM;
	case NVML_ERROR_NOT_FOUND:
		return -ENOENT;
	case NVML_ERROR_INSUFFICIENT_SIZE:
		return -ENOSPC;
	case NVML_ERROR_DRIVER_NOT_LOADED:
	case NVML_ERROR_GPU_IS_LOST:
		return -ENODEV;
	case NVML_ERROR_UNINITIALIZED:
		return -ENXIO;
	case NVML_ERROR_TIMEOUT:
		return -ETIMEDOUT;
	case NVML_ERROR_LIBRARY_NOT_FOUND:
	case NVML_ERROR_FUNCTION_NOT_FOUND:
		return -ENOSYS;
	default:
		return -EIO;
	}
}

static const char *nvml_strerror(struct nvml *n, nvmlReturn_t r)
{
	const char *s = n->error_string ? n->error_string(r) : NULL;
	return s ? s : "unknown NVML error";
}

int nvml_open(struct nvml **out)
{
	const char *path = getenv("VRAM_LIBNVML");
	struct nvml *n;
	nvmlReturn_t nr;
	int r;

	if (!path || !*path)
		path = "libnvidia-ml.so.1";
	n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!n->lib) {
		const char *why = dlerror();
		log_debug("nvml: cannot load %s: %s", path, why ? why : "?");
		free(n);
		return -ENOENT;
	}
	n->init = (nvmlReturn_t(*)(void))dlsym(n->lib, "nvmlInit_v2");
	n->shutdown = (nvmlReturn_t(*)(void))dlsym(n->lib, "nvmlShutdown");
	n->error_string =
		(const char *(*)(nvmlReturn_t))dlsym(n->lib, "nvmlErrorString");
	n->by_uuid = (nvmlReturn_t(*)(const char *, nvmlDevice_t *))dlsym(
		n->lib, "nvmlDeviceGetHandleByUUID");
	n->memory_info = (nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_t *))dlsym(
		n->lib, "nvmlDeviceGetMemoryInfo");
	/* The newest process query the library has; v2 and v3 fill the same
	 * struct, v1 a shorter one. */
	n->proc_stride = sizeof(nvmlProcessInfo_t);
	n->procs = (nvml_procs_fn)dlsym(
		n->lib, "nvmlDeviceGetComputeRunningProcesses_v3");
	if (!n->procs)
		n->procs = (nvml_procs_fn)dlsym(
			n->lib, "nvmlDeviceGetComputeRunningProcesses_v2");
	if (!n->procs) {
		n->procs = (nvml_procs_fn)dlsym(
			n->lib, "nvmlDeviceGetComputeRunningProcesses");
		n->proc_stride = sizeof(nvmlProcessInfo_v1_t);
	}
	if (!n->init || !n->shutdown || !n->by_uuid || !n->memory_info ||
	    !n->procs) {
		log_warn("nvml: %s lacks an entry point; not using NVML", path);
		r = -ENOSYS;
		goto err_lib;
	}
	nr = n->init();
	if (nr != NVML_SUCCESS) {
		log_warn("nvml: nvmlInit: %s", nvml_strerror(n, nr));
		r = nvml_errno(nr);
		goto err_lib;
	}
	*out = n;
	return 0;

err_lib:
	/* nvmlInit failed or never ran: nothing of the library is running. */
	dlclose(n->lib);
	free(n);
	return r;
}

void nvml_close(struct nvml *n)
{
	if (!n)
		return;
	n->shutdown();
	free(n);
}

int nvml_device_by_uuid(struct nvml *n, const char *uuid,
			struct nvml_device **out)
{
	nvmlDevice_t d = NULL;
	nvmlReturn_t nr = n->by_uuid(uuid, &d);

	if (nr != NVML_SUCCESS) {
		log_debug("nvml: device %s: %s", uuid, nvml_strerror(n, nr));
		return nvml_errno(nr);
	}
	*out = (struct nvml_device *)d;
	return 0;
}

int nvml_memory_info(struct nvml *n, struct nvml_device *dev,
		     uint64_t *free_bytes, uint64_t *total_bytes)
{
	nvmlMemory_t m;
	nvmlReturn_t nr = n->memory_info((nvmlDevice_t)dev, &m);

	if (nr != NVML_SUCCESS) {
		log_warn("nvml: memory info: %s", nvml_strerror(n, nr));
		return nvml_errno(nr);
	}
	*free_bytes = m.free;
	*total_bytes = m.total;
	return 0;
}

int nvml_processes(struct nvml *n, struct nvml_device *dev,
		   struct nvml_process **out)
{
	unsigned count = 0;
	unsigned char *raw = NULL;
	struct nvml_process *procs;
	nvmlReturn_t nr;

	*out = NULL;
	/* Ask for the count, then fetch; processes may start in between, so
	 * retry with room to spare a few times. */
	for (int tries = 0;; tries++) {
		unsigned want = count;
		nr = n->procs((nvmlDevice_t)dev, &count, raw);
		if (nr == NVML_SUCCESS && (raw || count == 0))
			break;
		if ((nr != NVML_SUCCESS &&
		     nr != NVML_ERROR_INSUFFICIENT_SIZE) ||
		    tries == 4) {
			free(raw);
			log_warn("nvml: running processes: %s",
				 nvml_strerror(n, nr));
			return nr == NVML_SUCCESS ? -EAGAIN : nvml_errno(nr);
		}
		free(raw);
		count = (count > want ? count : want) + 8;
		raw = calloc(count, n->proc_stride);
		if (!raw)
			return -ENOMEM;
	}
	if (count == 0) {
		free(raw);
		return 0;
	}
	procs = calloc(count, sizeof(*procs));
	if (!procs) {
		free(raw);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < count; i++) {
		const unsigned char *p = raw + (size_t)i * n->proc_stride;
		nvmlProcessInfo_v1_t head; /* both layouts start this way */
		memcpy(&head, p, sizeof(head));
		procs[i].pid = head.pid;
		procs[i].used_bytes =
			head.usedGpuMemory == NVML_VALUE_NOT_AVAILABLE_ULL ?
				NVML_USED_UNKNOWN :
				head.usedGpuMemory;
	}
	free(raw);
	*out = procs;
	return (int)count;
}
