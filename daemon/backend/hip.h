/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's HIP backend beyond backend.h: opening it with a given table
 * of HIP entry points (the unit tests pass a recording stand-in), and what
 * it counts. See daemon/backend/hip.c and docs/rocm.md.
 */
#ifndef VRAMD_HIP_BACKEND_H
#define VRAMD_HIP_BACKEND_H

#include <stdint.h>

#include "backend.h"
#include "hip_api.h"

/* As backend_hip_open(), with the runtime's entry points taken from *api
 * (copied; every member must be set) instead of loaded from libamdhip64.
 * -EINVAL for a table with a member missing. */
int backend_hip_open_with(const struct backend_config *cfg,
			  const struct hip_api *api, struct backend **out);

/* Releases vramd made whose memory did not show up as free on the device
 * within the bounded wait (VRAM_HIP_RELEASE_WAIT_MS) after the last of its
 * holders let go; each one is also logged as a warning. 0 for a backend
 * that is not the HIP one. */
uint64_t backend_hip_release_misses(const struct backend *b);

#endif
