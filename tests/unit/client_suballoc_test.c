/* SPDX-License-Identifier: Apache-2.0 */
/* The sub-allocator alone: alignment, first fit, coalescing, growth of the
 * arena, refusal of unknown and double frees, and a randomized run against
 * a simple model that checks no two live allocations overlap. */
#include <stdint.h>
#include <stdlib.h>

#include "suballoc.h"
#include "test.h"

#define KiB (1024ull)
#define MiB (1024ull * 1024)

TEST(empty_arena_has_no_room)
{
	struct suballoc sa;
	uint64_t off;

	suballoc_init(&sa, 0);
	ASSERT_EQ(suballoc_alloc(&sa, 1, &off), -ENOMEM);
	ASSERT_EQ(suballoc_alloc(&sa, 0, &off), -EINVAL);
	ASSERT_UEQ(suballoc_tail_free(&sa), 0);
	ASSERT_UEQ(suballoc_largest_free(&sa), 0);
	suballoc_fini(&sa);
}

TEST(sizes_round_to_256_and_offsets_are_aligned)
{
	struct suballoc sa;
	uint64_t a, b, c, n;

	suballoc_init(&sa, 0);
	ASSERT_OK(suballoc_grow(&sa, 1 * MiB));
	ASSERT_OK(suballoc_alloc(&sa, 1, &a));
	ASSERT_OK(suballoc_alloc(&sa, 257, &b));
	ASSERT_OK(suballoc_alloc(&sa, 256, &c));
	ASSERT_UEQ(a, 0);
	ASSERT_UEQ(b, 256);
	ASSERT_UEQ(c, 768);
	ASSERT_UEQ(suballoc_size_of(&sa, a), 256);
	ASSERT_UEQ(suballoc_size_of(&sa, b), 512);
	ASSERT_UEQ(sa.used, 1024);
	ASSERT_OK(suballoc_free(&sa, b, &n));
	ASSERT_UEQ(n, 512);
	ASSERT_UEQ(suballoc_round(1), 256);
	ASSERT_UEQ(suballoc_round(UINT64_MAX), 0);
	suballoc_fini(&sa);
}

TEST(first_fit_reuses_the_lowest_hole)
{
	struct suballoc sa;
	uint64_t o[4], x;

	suballoc_init(&sa, 0);
	ASSERT_OK(suballoc_grow(&sa, 64 * KiB));
	for (int i = 0; i < 4; i++)
		ASSERT_OK(suballoc_alloc(&sa, 4 * KiB, &o[i]));
	ASSERT_OK(suballoc_free(&sa, o[1], NULL));
	ASSERT_OK(suballoc_free(&sa, o[3], NULL));
	/* Fits in the hole at o[1]. */
	ASSERT_OK(suballoc_alloc(&sa, 2 * KiB, &x));
	ASSERT_UEQ(x, o[1]);
	/* Too big for what is left of that hole: goes after o[2]. */
	ASSERT_OK(suballoc_alloc(&sa, 4 * KiB, &x));
	ASSERT_UEQ(x, o[3]);
	suballoc_fini(&sa);
}

TEST(free_coalesces_with_both_neighbours)
{
	struct suballoc sa;
	uint64_t o[5], x;

	suballoc_init(&sa, 0);
	ASSERT_OK(suballoc_grow(&sa, 5 * KiB));
	for (int i = 0; i < 5; i++)
		ASSERT_OK(suballoc_alloc(&sa, 1 * KiB, &o[i]));
	ASSERT_EQ(sa.n_blocks, 0);
	ASSERT_OK(suballoc_free(&sa, o[1], NULL));
	ASSERT_OK(suballoc_free(&sa, o[3], NULL));
	ASSERT_EQ(sa.n_blocks, 2);
	/* The middle one joins both holes into one. */
	ASSERT_OK(suballoc_free(&sa, o[2], NULL));
	ASSERT_EQ(sa.n_blocks, 1);
	ASSERT_UEQ(suballoc_largest_free(&sa), 3 * KiB);
	ASSERT_OK(suballoc_alloc(&sa, 3 * KiB, &x));
	ASSERT_UEQ(x, o[1]);
	/* Freeing everything leaves one block, the whole arena. */
	ASSERT_OK(suballoc_free(&sa, x, NULL));
	ASSERT_OK(suballoc_free(&sa, o[0], NULL));
	ASSERT_OK(suballoc_free(&sa, o[4], NULL));
	ASSERT_EQ(sa.n_blocks, 1);
	ASSERT_UEQ(sa.blocks[0].off, 0);
	ASSERT_UEQ(sa.blocks[0].len, 5 * KiB);
	ASSERT_UEQ(sa.used, 0);
	ASSERT_EQ(sa.n_allocs, 0);
	suballoc_fini(&sa);
}

TEST(fragmentation_needs_growth_then_fits)
{
	struct suballoc sa;
	uint64_t o[16], x;

	suballoc_init(&sa, 0);
	ASSERT_OK(suballoc_grow(&sa, 16 * KiB));
	for (int i = 0; i < 16; i++)
		ASSERT_OK(suballoc_alloc(&sa, 1 * KiB, &o[i]));
	for (int i = 0; i < 16; i += 2)
		ASSERT_OK(suballoc_free(&sa, o[i], NULL));
	/* 8 KiB free in total but no two free KiB are adjacent. */
	ASSERT_UEQ(sa.size - sa.used, 8 * KiB);
	ASSERT_UEQ(suballoc_largest_free(&sa), 1 * KiB);
	ASSERT_EQ(suballoc_alloc(&sa, 2 * KiB, &x), -ENOMEM);
	ASSERT_UEQ(suballoc_tail_free(&sa), 0);
	ASSERT_OK(suballoc_grow(&sa, 18 * KiB));
	ASSERT_UEQ(suballoc_tail_free(&sa), 2 * KiB);
	ASSERT_OK(suballoc_alloc(&sa, 2 * KiB, &x));
	ASSERT_UEQ(x, 16 * KiB);
	suballoc_fini(&sa);
}

TEST(growth_extends_the_tail_block)
{
	struct suballoc sa;
	uint64_t a, b;

	suballoc_init(&sa, 0);
	ASSERT_OK(suballoc_grow(&sa, 4 * KiB));
	ASSERT_OK(suballoc_alloc(&sa, 1 * KiB, &a));
	ASSERT_UEQ(suballoc_tail_free(&sa), 3 * KiB);
	ASSERT_OK(suballoc_grow(&sa, 8 * KiB));
	/* Merged with the old tail, not a second block. */
	ASSERT_EQ(sa.n_blocks, 1);
	ASSERT_UEQ(suballoc_tail_free(&sa), 7 * KiB);
	ASSERT_OK(suballoc_alloc(&sa, 7 * KiB, &b));
	ASSERT_UEQ(b, 1 * KiB);
	ASSERT_UEQ(suballoc_tail_free(&sa), 0);
	/* Shrinking is refused, the same size is a no-op. */
	ASSERT_EQ(suballoc_grow(&sa, 4 * KiB), -EINVAL);
	ASSERT_OK(suballoc_grow(&sa, 8 * KiB));
	suballoc_fini(&sa);
}

TEST(arena_with_a_start_never_hands_out_below_it)
{
	struct suballoc sa;
	uint64_t a;

	suballoc_init(&sa, 64 * MiB);
	ASSERT_EQ(suballoc_alloc(&sa, 256, &a), -ENOMEM);
	ASSERT_OK(suballoc_grow(&sa, 128 * MiB));
	ASSERT_OK(suballoc_alloc(&sa, 256, &a));
	ASSERT_UEQ(a, 64 * MiB);
	ASSERT_EQ(suballoc_free(&sa, 0, NULL), -EINVAL);
	/* A start that is not aligned is rounded up. */
	suballoc_fini(&sa);
	suballoc_init(&sa, 100);
	ASSERT_UEQ(sa.start, 256);
	suballoc_fini(&sa);
}

TEST(unknown_and_double_free_are_refused)
{
	struct suballoc sa;
	uint64_t a, b;

	suballoc_init(&sa, 0);
	ASSERT_OK(suballoc_grow(&sa, 1 * MiB));
	ASSERT_OK(suballoc_alloc(&sa, 1000, &a));
	ASSERT_OK(suballoc_alloc(&sa, 1000, &b));
	ASSERT_EQ(suballoc_free(&sa, a + 256, NULL), -EINVAL); /* inside */
	ASSERT_EQ(suballoc_free(&sa, a + 1, NULL), -EINVAL);   /* unaligned */
	ASSERT_EQ(suballoc_free(&sa, 512 * 1024, NULL), -EINVAL); /* free */
	ASSERT_EQ(suballoc_free(&sa, 2 * MiB, NULL), -EINVAL);	  /* outside */
	ASSERT_EQ(suballoc_free(&sa, UINT64_MAX, NULL), -EINVAL);
	ASSERT_OK(suballoc_free(&sa, a, NULL));
	ASSERT_EQ(suballoc_free(&sa, a, NULL), -EINVAL); /* double */
	ASSERT_UEQ(suballoc_size_of(&sa, a), 0);
	/* The other allocation is untouched by the refusals. */
	ASSERT_UEQ(suballoc_size_of(&sa, b), 1024);
	ASSERT_OK(suballoc_free(&sa, b, NULL));
	ASSERT_UEQ(sa.used, 0);
	suballoc_fini(&sa);
}

TEST(many_allocations_exercise_the_table)
{
	struct suballoc sa;
	enum { N = 20000 };
	uint64_t *o = malloc(N * sizeof(*o));

	ASSERT(o);
	suballoc_init(&sa, 0);
	ASSERT_OK(suballoc_grow(&sa, (uint64_t)N * 256));
	for (int i = 0; i < N; i++)
		ASSERT_OK(suballoc_alloc(&sa, 256, &o[i]));
	ASSERT_EQ(sa.n_allocs, N);
	/* Free in an order unrelated to the hash's. */
	for (int i = 0; i < N; i += 3)
		ASSERT_OK(suballoc_free(&sa, o[i], NULL));
	for (int i = 0; i < N; i++)
		ASSERT_UEQ(suballoc_size_of(&sa, o[i]), i % 3 ? 256 : 0);
	for (int i = 1; i < N; i += 3)
		ASSERT_OK(suballoc_free(&sa, o[i], NULL));
	for (int i = 2; i < N; i += 3)
		ASSERT_OK(suballoc_free(&sa, o[i], NULL));
	ASSERT_EQ(sa.n_allocs, 0);
	ASSERT_EQ(sa.n_blocks, 1);
	free(o);
	suballoc_fini(&sa);
}

/* A simple model: the live allocations in an array. After each step every
 * live pair is checked for overlap and every byte is in the arena. */
TEST(randomized_against_a_model)
{
	struct suballoc sa;
	enum { MAXLIVE = 512, STEPS = 40000 };
	struct {
		uint64_t off, len;
	} live[MAXLIVE];
	int n = 0;
	uint64_t used = 0;
	unsigned seed = 12345;

	suballoc_init(&sa, 0);
	ASSERT_OK(suballoc_grow(&sa, 1 * MiB));
	for (int step = 0; step < STEPS; step++) {
		int r = rand_r(&seed) % 100;
		if (r < 55 && n < MAXLIVE) {
			uint64_t len = 1 + (uint64_t)rand_r(&seed) % (16 * KiB);
			uint64_t off;
			int e = suballoc_alloc(&sa, len, &off);
			if (e == -ENOMEM) {
				/* The model agrees there was no room: no block
				 * is as large as the rounded size. */
				ASSERT_LT(suballoc_largest_free(&sa),
					  suballoc_round(len));
				ASSERT_OK(suballoc_grow(&sa,
							sa.size + 256 * KiB));
				continue;
			}
			ASSERT_OK(e);
			ASSERT_EQ(off % SUBALLOC_ALIGN, 0);
			ASSERT_LE(off + suballoc_round(len), sa.size);
			for (int i = 0; i < n; i++)
				ASSERT(off + suballoc_round(len) <=
					       live[i].off ||
				       live[i].off + live[i].len <= off);
			live[n].off = off;
			live[n].len = suballoc_round(len);
			used += live[n].len;
			n++;
		} else if (n > 0 && r < 95) {
			int i = rand_r(&seed) % n;
			uint64_t len;
			ASSERT_OK(suballoc_free(&sa, live[i].off, &len));
			ASSERT_UEQ(len, live[i].len);
			ASSERT_EQ(suballoc_free(&sa, live[i].off, NULL),
				  -EINVAL);
			used -= live[i].len;
			live[i] = live[--n];
		} else if (n > 0) {
			/* A pointer into the middle of a live one. */
			int i = rand_r(&seed) % n;
			if (live[i].len > 256)
				ASSERT_EQ(suballoc_free(&sa, live[i].off + 256,
							NULL),
					  -EINVAL);
		}
		ASSERT_UEQ(sa.used, used);
		ASSERT_EQ(sa.n_allocs, n);
		/* Free blocks are sorted, disjoint, not adjacent, inside. */
		uint64_t free_total = 0;
		for (size_t b = 0; b < sa.n_blocks; b++) {
			ASSERT_GT(sa.blocks[b].len, 0);
			ASSERT_LE(sa.blocks[b].off + sa.blocks[b].len, sa.size);
			if (b > 0)
				ASSERT_LT(sa.blocks[b - 1].off +
						  sa.blocks[b - 1].len,
					  sa.blocks[b].off);
			free_total += sa.blocks[b].len;
		}
		ASSERT_UEQ(free_total + used, sa.size - sa.start);
	}
	suballoc_fini(&sa);
}
