/* SPDX-License-Identifier: Apache-2.0 */
/* vram_preload.h: the C entry points of libvram-preload.so, the library
 * that, loaded with LD_PRELOAD, routes the CUDA (and HIP) runtime's device
 * allocations of a whole process into vramd pools (docs/preload.md).
 *
 * The library defines cudaMalloc, cudaFree, cudaMallocAsync,
 * cudaFreeAsync (and their _ptsz forms), hipMalloc, hipFree,
 * hipMallocAsync and hipFreeAsync. Each allocation goes either to a vramd
 * pool or, untouched, to the real runtime (found with dlsym(RTLD_NEXT)):
 * - inside a region (vram_preload_region_enter on this thread), to the
 *   pool of the region's tag;
 * - inside a disable scope (vram_preload_disable_enter), to the runtime;
 * - outside any scope, to the default tag's pool when whole-process mode
 *   is on (VRAM_CAPTURE=1 or TMS_INIT_ENABLE=1), else to the runtime.
 * A free goes to whoever made the pointer: the library keeps a table of
 * every pointer it made.
 *
 * The functions below are exported from libvram-preload.so for the Python
 * layer (ctypes.CDLL(None) finds them in a process started with
 * LD_PRELOAD) and for C programs, which should look them up with
 * dlsym(RTLD_DEFAULT, ...) so that they also run without the library.
 * They return 0 (or a count) or a negative errno, as libvram does; the
 * scope calls never block and never talk to vramd.
 */
#ifndef VRAM_PRELOAD_H
#define VRAM_PRELOAD_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Longest tag a region takes, terminating NUL included (as vramd's). */
#define VRAM_PRELOAD_TAG_MAX 64
/* Deepest nesting of regions and disable scopes on one thread. */
#define VRAM_PRELOAD_DEPTH_MAX 64

/* Opens a region on this thread: allocations until the matching
 * vram_preload_region_exit() come from the pool of tag (NULL: "default"),
 * one pool per tag, backup and device. backup: 0 discarded on pause,
 * VRAM_PRELOAD_BACKUP_HOST a host backup (VRAM_POLICY_HOST, pinned),
 * VRAM_PRELOAD_BACKUP_PAGEABLE a host backup never pinned,
 * VRAM_PRELOAD_BACKUP_DISK a file vramd owns (VRAM_POLICY_DISK); any other
 * nonzero value is HOST. Backups give their host memory back after a
 * resume unless TMS_RETAIN_CPU_BACKUP=1 (or VRAM_CAPTURE_RETAIN=1) was set
 * when the library loaded, or vram_preload_set_retain(1) was called before
 * the pool was made. Scopes nest. -EINVAL (tag too long or empty),
 * -EOVERFLOW (too deep). */
#define VRAM_PRELOAD_BACKUP_HOST 1
#define VRAM_PRELOAD_BACKUP_PAGEABLE 2
#define VRAM_PRELOAD_BACKUP_DISK 3
int vram_preload_region_enter(const char *tag, int backup);

/* Closes the innermost scope of this thread, which must be a region:
 * 0, or -EINVAL if it is not (a disable scope or none). */
int vram_preload_region_exit(void);

/* Opens a disable scope on this thread: allocations until the matching
 * vram_preload_disable_exit() go to the real runtime, region or
 * whole-process mode notwithstanding. -EOVERFLOW (too deep). */
int vram_preload_disable_enter(void);

/* Closes the innermost scope of this thread, which must be a disable
 * scope: 0, or -EINVAL. */
int vram_preload_disable_exit(void);

/* 1 when whole-process mode is on (from the environment at load), else 0. */
int vram_preload_whole_process(void);

/* 1 when ptr is the start of a live allocation the library made in a
 * vramd pool, else 0. */
int vram_preload_owns(const void *ptr);

/* What the library holds. Set size to sizeof(struct vram_preload_stats)
 * before the call: a caller built against an older, shorter struct gets
 * the fields it knows. */
struct vram_preload_stats {
	uint32_t size;
	uint32_t pools;		 /* vramd pools the library made */
	uint64_t captured_bytes; /* live allocations in vramd pools */
	uint64_t captured_count;
	uint64_t graph_bytes;	/* of which freed during a stream capture
				   * and kept for the graph (docs/preload.md) */
	uint64_t outside_bytes; /* live allocations it passed to the
				   * runtime (disable scopes, no mode) */
	uint64_t outside_count;
	uint64_t failed; /* allocations refused (vramd full, paused,
				   * unreachable) since load */
};

/* Fills *out (see above): 0, or -EINVAL for a NULL or too small struct. */
int vram_preload_stats(struct vram_preload_stats *out);

/* Why the last allocation refused on this thread was refused ("" if
 * none). Valid until the next allocation on this thread. */
const char *vram_preload_last_error(void);

/* Sets whether the pools the library makes from now on keep their
 * backup's pages after a resume (1), or give them back once restored (0,
 * torch_memory_saver's default); starts as TMS_RETAIN_CPU_BACKUP or
 * VRAM_CAPTURE_RETAIN said at load. A pool keeps the setting it was made
 * with: vramd releases a backup after the resume itself, so a pool made
 * to release cannot be told to retain later; a retaining pool's backup
 * is given back on demand with vram_preload_backup_release(). The Python
 * layer sets 1 when it finds the library and decides at each of its
 * resumes (docs/preload.md). Returns the previous setting. */
int vram_preload_set_retain(int retain);

/* Where the backup of [ptr, ptr + len) is, for get_cpu_backup. Set size to
 * sizeof(struct vram_preload_backup) first. */
struct vram_preload_backup {
	uint32_t size;
	int kind;    /* the pool's VRAM_PRELOAD_BACKUP_* (0: none) */
	int paused;  /* the pool is paused: the backup holds its content */
	int retains; /* the pool keeps its backup after a resume */
	void *host;  /* the backup's byte for ptr, in this process */
	char tag[VRAM_PRELOAD_TAG_MAX];
};

/* Finds the library's pool that holds [ptr, ptr + len) and fills *out: 0
 * with out->host set (the content there is ptr's as the last pause saved
 * it, while out->paused, and after a resume only while the pool retains
 * it and nobody released it since), -ENODEV the pool keeps no backup
 * (kind 0; tag and state are still set), -ENOENT no pool of the library
 * holds the range, -ERANGE the backup is shorter, -EINVAL. The mapping is
 * the library's for the life of the process. */
int vram_preload_backup(const void *ptr, uint64_t len,
			struct vram_preload_backup *out);

/* Gives back the backups of tag's pools (NULL: every tag) that are active
 * now, host pages and disk files alike, as a resume that does not retain
 * does: torch_memory_saver's retain_cpu_backup decided at resume time.
 * Paused pools are left alone. Returns the pools released or -errno. */
int vram_preload_backup_release(const char *tag);

#ifdef __cplusplus
}
#endif
#endif
