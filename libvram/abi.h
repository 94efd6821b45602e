/* SPDX-License-Identifier: Apache-2.0 */
/* The size rule of vram.h's structs (abi.c): a struct the caller
 * allocates starts with uint32_t size, and libvram reads and writes only
 * what that size covers. The smallest size accepted is the end of the
 * struct's last field in its first sized layout (ABI_MIN_*); a field added
 * later lies past it and is used only when the caller's size covers it.
 */
#ifndef LIBVRAM_ABI_H
#define LIBVRAM_ABI_H

#include <stddef.h>
#include <stdint.h>

#include "vram.h"

/* The end of field f of struct type t. */
#define ABI_END(t, f) (offsetof(t, f) + sizeof(((t *)0)->f))

/* The first sized layouts (libvram 0.2.0). Never raise these: an older
 * program passes exactly this much. */
#define ABI_MIN_POOL_OPTIONS ABI_END(struct vram_pool_options, device_uuid)
#define ABI_MIN_SELECTOR ABI_END(struct vram_selector, all)
#define ABI_MIN_REPORT ABI_END(struct vram_report, failed)
#define ABI_MIN_STATS ABI_END(struct vram_stats, devices)
#define ABI_MIN_POOL_INFO ABI_END(struct vram_pool_info, mappers)
#define ABI_MIN_PROCESS_USAGE ABI_END(struct vram_process_usage, name)
#define ABI_MIN_QUOTA ABI_END(struct vram_quota, device_bytes)

/* Checks a struct's size as the caller set it: 0 if it is at least min,
 * else -EINVAL with a message naming the struct (what) and its INIT
 * macro. */
int abi_check(uint32_t size, size_t min, const char *what);

/* Copies a caller's in-struct into local (local_size bytes, zeroed past
 * what the caller's size covers) after abi_check(). Returns 0 or
 * -EINVAL. */
int abi_read(void *local, size_t local_size, const void *in, size_t min,
	     const char *what);

/* Copies local (a full struct of local_size bytes) out to a caller's
 * struct whose size was checked: only the bytes the caller's size covers,
 * and never its size field. */
void abi_write(void *out, const void *local, size_t local_size);

/* Checks the entry size a caller passes for an array libvram allocates:
 * at least min and a multiple of align. 0 or -EINVAL with a message. */
int abi_check_entry(size_t entry_size, size_t min, size_t align,
		    const char *what);

#endif
