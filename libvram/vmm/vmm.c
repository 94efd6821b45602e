/* SPDX-License-Identifier: Apache-2.0 */
/* Picks the client half of the backend the daemon announced. */
#include <errno.h>
#include <string.h>

#include "error.h"
#include "log.h"
#include "vmm.h"

/* The GPU halves live in their own files, which a build may lack (or a
 * static link may leave out): weak references let the library link
 * without them, and a missing one reads as "backend absent here". */
int vmm_cuda_open(struct vmm **out) __attribute__((weak));
int vmm_hip_open(struct vmm **out) __attribute__((weak));

int vmm_open(const char *backend, struct vmm **out)
{
	if (!backend || !out)
		return -EINVAL;
	*out = NULL;
	if (strcmp(backend, "host") == 0)
		return vmm_host_open(out);
	if (strcmp(backend, "cuda") == 0)
		return vmm_cuda_open ? vmm_cuda_open(out) : -ENOENT;
	if (strcmp(backend, "hip") == 0)
		return vmm_hip_open ? vmm_hip_open(out) : -ENOENT;
	return -ENOENT;
}

void vmm_destroy(struct vmm *v)
{
	if (v && v->ops && v->ops->destroy)
		v->ops->destroy(v);
}

int vmm_local_device(struct vmm *v, unsigned dev)
{
	return v->ops->local_device(v, dev);
}

int vmm_capture_relax(struct vmm *v)
{
	return v->ops->capture_relax ? v->ops->capture_relax(v) : -ENOTSUP;
}

void vmm_capture_restore(struct vmm *v, int mode)
{
	if (mode >= 0 && v->ops->capture_restore)
		v->ops->capture_restore(v, mode);
}

int vmm_stream_wait(struct vmm *v, unsigned dev, void *stream)
{
	return v->ops->stream_wait ? v->ops->stream_wait(v, dev, stream) : 0;
}

int vmm_grant_access(struct vmm *v, uintptr_t addr, uint64_t size, int dev,
		     int readonly, vmm_grant_fn *grant)
{
	int r = grant(v, addr, size, dev, readonly);

	if (r == 0 || !readonly || (r != -EINVAL && r != -ENOTSUP))
		return r;
	if (!v->warned_readonly)
		log_write(VRAM_LOG_WARN,
			  "%s: the driver refused read-only access (%s); "
			  "read-only pools are mapped read-write",
			  v->ops->name, error_get());
	v->warned_readonly = 1;
	return grant(v, addr, size, dev, 0);
}
