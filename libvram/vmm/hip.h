/* SPDX-License-Identifier: Apache-2.0 */
/* libvram's HIP half beyond vmm.h: opening it with a given table of HIP
 * entry points (the unit tests pass a recording stand-in), the choice of
 * re-reserving ranges after release, and what it counts. See
 * libvram/vmm/hip.c and docs/rocm.md.
 */
#ifndef LIBVRAM_HIP_VMM_H
#define LIBVRAM_HIP_VMM_H

#include <stdint.h>

#include "hip_api.h"
#include "vmm.h"

/* As vmm_hip_open(), with the runtime's entry points taken from *api
 * (copied; every member must be set). -EINVAL for a table with a member
 * missing. */
int vmm_hip_open_with(const struct hip_api *api, struct vmm **out);

/* VRAM_HIP_RERESERVE: after unmapping and releasing a chunk, free its
 * address range and reserve it again at the same address, so that ROCm
 * really frees the memory (docs/rocm.md). */
enum vmm_hip_rereserve {
	VMM_HIP_RERESERVE_AUTO, /* from the runtime's version */
	VMM_HIP_RERESERVE_ALWAYS,
	VMM_HIP_RERESERVE_NEVER,
};

/* "auto", "always", "never" (also "1"/"0"); -EINVAL otherwise. */
int vmm_hip_rereserve_parse(const char *s);

/* Whether a runtime of this hipRuntimeGetVersion() value needs the
 * re-reserve (what "auto" picks): 1 for every version so far, as no ROCm
 * release is known to carry the fix (docs/rocm.md). */
int vmm_hip_rereserve_needed(int runtime_version);

struct vmm_hip_stats {
	int rereserve;	       /* re-reserving is on (known after the first
				   call that starts the runtime) */
	int runtime_version;   /* 0 until then */
	uint64_t rereserves;   /* ranges freed and reserved again */
	uint64_t lost;	       /* ranges not got back at their address */
	unsigned reservations; /* runtime reservations held now */
	unsigned mapped;       /* chunks mapped now */
};

/* Fills *st; -EINVAL if v is not the HIP half. */
int vmm_hip_stats(struct vmm *v, struct vmm_hip_stats *st);

#endif
