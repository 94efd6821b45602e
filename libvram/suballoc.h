/* SPDX-License-Identifier: Apache-2.0 */
/* A sub-allocator over a growing arena [start, size) of offsets. Pure
 * bookkeeping: no syscalls, no knowledge of pools or devices.
 *
 * Free space is a list of blocks sorted by offset and coalesced on free;
 * allocation is first fit (lowest offset), which keeps the arena's tail
 * free so that growth extends a free block. Allocations are tracked by
 * offset in a hash table, so a free of an unknown or already freed offset
 * is refused with -EINVAL. Every offset and size is a multiple of
 * SUBALLOC_ALIGN.
 */
#ifndef LIBVRAM_SUBALLOC_H
#define LIBVRAM_SUBALLOC_H

#include <stddef.h>
#include <stdint.h>

#define SUBALLOC_ALIGN 256u

struct suballoc_block {
	uint64_t off, len;
};

struct suballoc_entry {
	uint64_t off; /* SUBALLOC_EMPTY when the slot is free */
	uint64_t len;
};

struct suballoc {
	uint64_t start, size;	       /* the arena is [start, size) */
	uint64_t used;		       /* bytes handed out (rounded sizes) */
	struct suballoc_block *blocks; /* free space, sorted, coalesced */
	size_t n_blocks, cap_blocks;
	struct suballoc_entry *table; /* live allocations by offset */
	size_t n_allocs, cap_table;   /* cap_table: 0 or a power of two */
};

/* An empty arena starting (and ending) at start, rounded up to the
 * alignment; grow it before allocating. Offsets below start are never
 * handed out (a re-opened pool keeps its old content there). */
void suballoc_init(struct suballoc *sa, uint64_t start);
/* Frees the bookkeeping; sa may be re-initialized afterwards. */
void suballoc_fini(struct suballoc *sa);

/* Extends the arena to [start, new_size). new_size below the current size
 * is -EINVAL, not aligned is rounded down; -ENOMEM if bookkeeping cannot
 * grow (the arena is then unchanged). */
int suballoc_grow(struct suballoc *sa, uint64_t new_size);

/* Finds len bytes (rounded up to the alignment) and returns their offset
 * in *off. -EINVAL for len 0, -ENOMEM when no free block is large enough
 * (grow and retry) or bookkeeping memory ran out. */
int suballoc_alloc(struct suballoc *sa, uint64_t len, uint64_t *off);

/* Frees the allocation at off. -EINVAL if off was not handed out by
 * suballoc_alloc or was already freed. If len is not NULL it receives the
 * allocation's (rounded) size. */
int suballoc_free(struct suballoc *sa, uint64_t off, uint64_t *len);

/* Size of the allocation at off, 0 if none. */
uint64_t suballoc_size_of(const struct suballoc *sa, uint64_t off);

/* Free bytes at the end of the arena (in the block that touches size):
 * growing by n - tail bytes makes room for an allocation of n. */
uint64_t suballoc_tail_free(const struct suballoc *sa);

/* The largest free block, 0 when full. */
uint64_t suballoc_largest_free(const struct suballoc *sa);

/* Rounds len up to SUBALLOC_ALIGN; 0 on overflow. */
uint64_t suballoc_round(uint64_t len);

#endif
