/* SPDX-License-Identifier: Apache-2.0 */
/* The pointer table of the preload library (see ptr_table.h). Linear
 * probing over a power-of-two array; a removed entry leaves a "deleted"
 * mark so that probes go on past it, and the array is rebuilt when live
 * and deleted entries fill half of it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ptr_table.h"

#define SLOT_EMPTY 0
#define SLOT_DELETED 1

static size_t ptr_hash(uintptr_t p)
{
	uint64_t x = (uint64_t)p;

	/* Allocations are aligned: mix the high bits into the low ones. */
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return (size_t)x;
}

void ptr_table_init(struct ptr_table *t)
{
	memset(t, 0, sizeof(*t));
	pthread_mutex_init(&t->lock, NULL);
}

void ptr_table_reset(struct ptr_table *t)
{
	free(t->slots);
	ptr_table_init(t);
}

/* The slot of ptr, or the one to put it in (lock held, cap > 0). */
static struct ptr_entry *ptr_slot(struct ptr_table *t, uintptr_t ptr,
				  int for_insert)
{
	size_t mask = t->cap - 1, i = ptr_hash(ptr) & mask;
	struct ptr_entry *first_free = NULL;

	for (size_t n = 0; n < t->cap; n++, i = (i + 1) & mask) {
		struct ptr_entry *e = &t->slots[i];
		if (e->key == ptr)
			return e;
		if (e->key == SLOT_DELETED && !first_free)
			first_free = e;
		if (e->key == SLOT_EMPTY) {
			if (!first_free)
				first_free = e;
			break;
		}
	}
	return for_insert ? first_free : NULL;
}

/* Rebuilds the array at twice the live size or more (lock held). */
static int ptr_rebuild(struct ptr_table *t)
{
	struct ptr_entry *old = t->slots;
	size_t old_cap = t->cap, cap = 64;

	while (cap < 4 * (t->live + 1))
		cap *= 2;
	t->slots = calloc(cap, sizeof(*t->slots));
	if (!t->slots) {
		t->slots = old;
		return -ENOMEM;
	}
	t->cap = cap;
	t->used = 0;
	for (size_t i = 0; i < old_cap; i++) {
		if (old[i].key > SLOT_DELETED) {
			*ptr_slot(t, old[i].key, 1) = old[i];
			t->used++;
		}
	}
	free(old);
	return 0;
}

int ptr_table_add(struct ptr_table *t, uintptr_t ptr, uint64_t size, int dev,
		  enum ptr_kind kind)
{
	struct ptr_entry *e;
	int r = 0;

	if (ptr <= SLOT_DELETED)
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	if (2 * (t->used + 1) > t->cap && (r = ptr_rebuild(t)) < 0)
		goto out;
	e = ptr_slot(t, ptr, 1);
	if (e->key == ptr) {
		/* The runtime gave an address twice: the old one was freed
		 * behind our back (by a call we do not interpose). */
		t->bytes[e->kind] -= e->size;
		t->count[e->kind]--;
		t->live--;
	} else if (e->key == SLOT_EMPTY) {
		t->used++;
	}
	e->key = ptr;
	e->size = size;
	e->dev = dev;
	e->kind = kind;
	t->live++;
	t->bytes[kind] += size;
	t->count[kind]++;
out:
	pthread_mutex_unlock(&t->lock);
	return r;
}

int ptr_table_take(struct ptr_table *t, uintptr_t ptr, struct ptr_entry *out,
		   int remove)
{
	struct ptr_entry *e;
	int found = 0;

	if (ptr <= SLOT_DELETED)
		return 0;
	pthread_mutex_lock(&t->lock);
	e = t->cap ? ptr_slot(t, ptr, 0) : NULL;
	if (e) {
		*out = *e;
		found = 1;
		if (remove) {
			t->bytes[e->kind] -= e->size;
			t->count[e->kind]--;
			t->live--;
			e->key = SLOT_DELETED;
		}
	}
	pthread_mutex_unlock(&t->lock);
	return found;
}

int ptr_table_set_kind(struct ptr_table *t, uintptr_t ptr, enum ptr_kind kind)
{
	struct ptr_entry *e;
	int found = 0;

	pthread_mutex_lock(&t->lock);
	e = t->cap && ptr > SLOT_DELETED ? ptr_slot(t, ptr, 0) : NULL;
	if (e) {
		t->bytes[e->kind] -= e->size;
		t->count[e->kind]--;
		e->kind = kind;
		t->bytes[kind] += e->size;
		t->count[kind]++;
		found = 1;
	}
	pthread_mutex_unlock(&t->lock);
	return found;
}

void ptr_table_sum(struct ptr_table *t, enum ptr_kind kind, uint64_t *bytes,
		   uint64_t *count)
{
	pthread_mutex_lock(&t->lock);
	*bytes = t->bytes[kind];
	*count = t->count[kind];
	pthread_mutex_unlock(&t->lock);
}
