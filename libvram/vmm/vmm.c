/* Picks the client half of the backend the daemon announced. */
#include <errno.h>
#include <string.h>

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
