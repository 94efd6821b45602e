/* SPDX-License-Identifier: Apache-2.0 */
/* The preload library's table of the pointers it made: which runtime call
 * a cudaFree must reach, and what the library holds. An open-addressing
 * hash table keyed by pointer, guarded by its own lock. */
#ifndef VRAM_PRELOAD_PTR_TABLE_H
#define VRAM_PRELOAD_PTR_TABLE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

enum ptr_kind {
	PTR_POOL = 1,	 /* in a vramd pool: vram_torch_free */
	PTR_GRAPH = 2,	 /* in a vramd pool, freed during a capture: kept */
	PTR_OUTSIDE = 3, /* the real runtime's, made by a call we saw */
};

struct ptr_entry {
	uintptr_t key; /* 0: empty, 1: deleted */
	uint64_t size;
	int dev;
	enum ptr_kind kind;
};

struct ptr_table {
	pthread_mutex_t lock;
	struct ptr_entry *slots;
	size_t cap;  /* a power of two, or 0 */
	size_t used; /* live entries plus deleted ones */
	size_t live;
	uint64_t bytes[4], count[4]; /* by kind */
};

/* An empty table. */
void ptr_table_init(struct ptr_table *t);

/* Forgets every entry and frees the slots (also right after fork, where
 * the lock is reinitialised: the parent's threads are gone). */
void ptr_table_reset(struct ptr_table *t);

/* Records ptr: 0 or -ENOMEM. */
int ptr_table_add(struct ptr_table *t, uintptr_t ptr, uint64_t size, int dev,
		  enum ptr_kind kind);

/* Copies ptr's entry into *out and, when remove, drops it: 1 found, 0 not. */
int ptr_table_take(struct ptr_table *t, uintptr_t ptr, struct ptr_entry *out,
		   int remove);

/* Changes a live entry's kind: 1 done, 0 no such entry. */
int ptr_table_set_kind(struct ptr_table *t, uintptr_t ptr, enum ptr_kind kind);

/* Live bytes and entries of a kind. */
void ptr_table_sum(struct ptr_table *t, enum ptr_kind kind, uint64_t *bytes,
		   uint64_t *count);

#endif
