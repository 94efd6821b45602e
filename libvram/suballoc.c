/* SPDX-License-Identifier: Apache-2.0 */
/* The sub-allocator: see suballoc.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "suballoc.h"

#define SUBALLOC_EMPTY UINT64_MAX

uint64_t suballoc_round(uint64_t len)
{
	if (len > UINT64_MAX - (SUBALLOC_ALIGN - 1))
		return 0;
	return (len + SUBALLOC_ALIGN - 1) & ~(uint64_t)(SUBALLOC_ALIGN - 1);
}

void suballoc_init(struct suballoc *sa, uint64_t start)
{
	memset(sa, 0, sizeof(*sa));
	start = suballoc_round(start);
	sa->start = start;
	sa->size = start;
}

void suballoc_fini(struct suballoc *sa)
{
	free(sa->blocks);
	free(sa->table);
	memset(sa, 0, sizeof(*sa));
}

/* ---- live allocations: open addressing, linear probing ----------------- */

static size_t table_slot(const struct suballoc *sa, uint64_t off)
{
	/* Offsets are multiples of 256: drop those bits, then mix. */
	uint64_t h = (off / SUBALLOC_ALIGN) * 0x9e3779b97f4a7c15ull;
	return (size_t)(h >> 32) & (sa->cap_table - 1);
}

static struct suballoc_entry *table_find(const struct suballoc *sa,
					 uint64_t off)
{
	if (sa->cap_table == 0)
		return NULL;
	for (size_t i = table_slot(sa, off);;
	     i = (i + 1) & (sa->cap_table - 1)) {
		struct suballoc_entry *e = &sa->table[i];
		if (e->off == off)
			return e;
		if (e->off == SUBALLOC_EMPTY)
			return NULL;
	}
}

static void table_put(struct suballoc *sa, uint64_t off, uint64_t len)
{
	size_t i = table_slot(sa, off);

	while (sa->table[i].off != SUBALLOC_EMPTY)
		i = (i + 1) & (sa->cap_table - 1);
	sa->table[i].off = off;
	sa->table[i].len = len;
}

/* Keeps the load at most one half so probes stay short. */
static int table_reserve(struct suballoc *sa, size_t n)
{
	size_t cap = sa->cap_table ? sa->cap_table : 16;
	struct suballoc_entry *old = sa->table;
	size_t old_cap = sa->cap_table;

	while (n * 2 > cap)
		cap *= 2;
	if (cap == sa->cap_table)
		return 0;
	struct suballoc_entry *t = malloc(cap * sizeof(*t));
	if (!t)
		return -ENOMEM;
	for (size_t i = 0; i < cap; i++)
		t[i].off = SUBALLOC_EMPTY;
	sa->table = t;
	sa->cap_table = cap;
	for (size_t i = 0; i < old_cap; i++)
		if (old[i].off != SUBALLOC_EMPTY)
			table_put(sa, old[i].off, old[i].len);
	free(old);
	return 0;
}

/* Deletes by shifting later entries of the same probe run back, so that no
 * tombstones are needed. */
static void table_delete(struct suballoc *sa, struct suballoc_entry *e)
{
	size_t mask = sa->cap_table - 1;
	size_t i = (size_t)(e - sa->table);
	size_t j = i;

	for (;;) {
		j = (j + 1) & mask;
		if (sa->table[j].off == SUBALLOC_EMPTY)
			break;
		size_t k = table_slot(sa, sa->table[j].off);
		/* Entry j may move to the hole at i when its home k does not
		 * lie cyclically in (i, j]. */
		int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
		if (stays)
			continue;
		sa->table[i] = sa->table[j];
		i = j;
	}
	sa->table[i].off = SUBALLOC_EMPTY;
	sa->table[i].len = 0;
}

/* ---- free blocks: a sorted array ----------------------------------------- */

static int blocks_reserve(struct suballoc *sa, size_t n)
{
	if (n <= sa->cap_blocks)
		return 0;
	size_t cap = sa->cap_blocks ? sa->cap_blocks * 2 : 16;
	while (cap < n)
		cap *= 2;
	struct suballoc_block *b = realloc(sa->blocks, cap * sizeof(*b));
	if (!b)
		return -ENOMEM;
	sa->blocks = b;
	sa->cap_blocks = cap;
	return 0;
}

/* Index of the first block with offset > off. */
static size_t blocks_upper(const struct suballoc *sa, uint64_t off)
{
	size_t lo = 0, hi = sa->n_blocks;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (sa->blocks[mid].off <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Adds [off, off+len) to the free space, merging with its neighbours. The
 * caller has reserved room for one more block. */
static void blocks_insert(struct suballoc *sa, uint64_t off, uint64_t len)
{
	size_t i = blocks_upper(sa, off);
	struct suballoc_block *b = sa->blocks;
	int merge_prev = i > 0 && b[i - 1].off + b[i - 1].len == off;
	int merge_next = i < sa->n_blocks && off + len == b[i].off;

	if (merge_prev && merge_next) {
		b[i - 1].len += len + b[i].len;
		memmove(&b[i], &b[i + 1], (sa->n_blocks - i - 1) * sizeof(*b));
		sa->n_blocks--;
	} else if (merge_prev) {
		b[i - 1].len += len;
	} else if (merge_next) {
		b[i].off = off;
		b[i].len += len;
	} else {
		memmove(&b[i + 1], &b[i], (sa->n_blocks - i) * sizeof(*b));
		b[i].off = off;
		b[i].len = len;
		sa->n_blocks++;
	}
}

int suballoc_grow(struct suballoc *sa, uint64_t new_size)
{
	new_size &= ~(uint64_t)(SUBALLOC_ALIGN - 1);
	if (new_size < sa->size)
		return -EINVAL;
	if (new_size == sa->size)
		return 0;
	if (blocks_reserve(sa, sa->n_blocks + 1) < 0)
		return -ENOMEM;
	blocks_insert(sa, sa->size, new_size - sa->size);
	sa->size = new_size;
	return 0;
}

int suballoc_alloc(struct suballoc *sa, uint64_t len, uint64_t *off)
{
	if (len == 0)
		return -EINVAL;
	len = suballoc_round(len);
	if (len == 0)
		return -ENOMEM;
	for (size_t i = 0; i < sa->n_blocks; i++) {
		struct suballoc_block *b = &sa->blocks[i];
		if (b->len < len)
			continue;
		if (table_reserve(sa, sa->n_allocs + 1) < 0)
			return -ENOMEM;
		*off = b->off;
		table_put(sa, b->off, len);
		sa->n_allocs++;
		sa->used += len;
		b->off += len;
		b->len -= len;
		if (b->len == 0) {
			memmove(b, b + 1, (sa->n_blocks - i - 1) * sizeof(*b));
			sa->n_blocks--;
		}
		return 0;
	}
	return -ENOMEM;
}

int suballoc_free(struct suballoc *sa, uint64_t off, uint64_t *len)
{
	struct suballoc_entry *e;

	if (off % SUBALLOC_ALIGN != 0)
		return -EINVAL;
	e = table_find(sa, off);
	if (!e)
		return -EINVAL;
	/* Freeing may split nothing but can add a block. */
	if (blocks_reserve(sa, sa->n_blocks + 1) < 0)
		return -ENOMEM;
	uint64_t n = e->len;
	table_delete(sa, e);
	sa->n_allocs--;
	sa->used -= n;
	blocks_insert(sa, off, n);
	if (len)
		*len = n;
	return 0;
}

uint64_t suballoc_size_of(const struct suballoc *sa, uint64_t off)
{
	const struct suballoc_entry *e;

	if (off % SUBALLOC_ALIGN != 0)
		return 0;
	e = table_find(sa, off);
	return e ? e->len : 0;
}

uint64_t suballoc_tail_free(const struct suballoc *sa)
{
	if (sa->n_blocks == 0)
		return 0;
	const struct suballoc_block *b = &sa->blocks[sa->n_blocks - 1];
	return b->off + b->len == sa->size ? b->len : 0;
}

uint64_t suballoc_largest_free(const struct suballoc *sa)
{
	uint64_t m = 0;

	for (size_t i = 0; i < sa->n_blocks; i++)
		if (sa->blocks[i].len > m)
			m = sa->blocks[i].len;
	return m;
}
