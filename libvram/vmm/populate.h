/* SPDX-License-Identifier: Apache-2.0 */
/* Faulting in a large shared mapping from several threads. */
#ifndef VRAM_POPULATE_H
#define VRAM_POPULATE_H

#include <stdint.h>

/* Makes every page of [addr, addr + len) present and writable without
 * changing its content (MADV_POPULATE_WRITE), in slices from up to
 * VRAM_POPULATE_THREADS threads (default: half the CPUs, at most 8; 1
 * turns it off). A host backup that was given back to the OS must get its
 * pages again before it is pinned, and one thread allocating and zeroing
 * them runs at ~2 GB/s (FACTS.md: 3.9 s for 8 GiB), which is most of a
 * non-retaining pause. Returns 0, or -errno of the first slice that failed
 * (-EINVAL: the kernel predates MADV_POPULATE_WRITE, Linux 5.14), in which
 * case the caller's pin faults the pages in as before. */
int populate_range(void *addr, uint64_t len);

#endif
