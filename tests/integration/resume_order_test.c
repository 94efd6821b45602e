/* SPDX-License-Identifier: Apache-2.0 */
/* The order of a resume against a real vramd: a second process that maps a
 * host pool and uses it as soon as it sees VRAM_STATE_ACTIVE (as
 * docs/client-api.md tells it to) must find the restored content, and what
 * it writes then must survive, cycle after cycle. The daemon owes it that
 * by sending it the chunks only after the restorer has restored them. */
#include <sched.h>

#include "integ.h"

#define CYCLES 50
#define PATTERN_BYTES (32 * MiB)
#define MARK_BYTES (1 * MiB)

/* A pattern any word of which can be checked alone (integ_fill's stream
 * is sequential), so the tail, which a restore copies last, is read first. */
static void order_fill(uint32_t *w, size_t len, uint32_t seed)
{
	for (size_t i = 0; i < len / 4; i++)
		w[i] = (uint32_t)(i * 2654435761u) ^ seed;
}

/* Checks from the end backwards; returns the bad words. */
static size_t order_check(const volatile uint32_t *w, size_t len, uint32_t seed)
{
	size_t bad = 0;
	for (size_t i = len / 4; i-- > 0;)
		if (w[i] != ((uint32_t)(i * 2654435761u) ^ seed))
			bad++;
	return bad;
}

/* What the second mapper saw, sent to the parent at the end. */
struct order_result {
	int cycles;
	int read_bad;  /* cycles where the pattern was not there at ACTIVE */
	int write_lost; /* cycles where its write of the last cycle was gone */
	int not_paused; /* cycles where the pool was not PAUSED when told */
};

static void mapper_run(struct integ_sync *s, uint64_t pattern_off,
		       uint64_t mark_off)
{
	struct order_result res = { 0 };
	vram_client *m = integ_connect("mapper");
	vram_pool *p;
	if (vram_pool_open(m, "w", 0, &p) < 0)
		_exit(2);
	if (vram_client_start_thread(m) < 0)
		_exit(2);
	char *base = (char *)vram_pool_base(p);
	uint32_t *pattern = (uint32_t *)(base + pattern_off);
	uint32_t *mark = (uint32_t *)(base + mark_off);
	order_fill(mark, MARK_BYTES, 1000);
	integ_signal(s->to_parent[1]);
	for (int i = 0; i < CYCLES; i++) {
		/* The parent has paused the pool; it resumes once told. */
		integ_wait_signal(s->to_child[0]);
		if (vram_pool_state(p) != VRAM_STATE_PAUSED)
			res.not_paused++;
		integ_signal(s->to_parent[1]);
		while (vram_pool_state(p) != VRAM_STATE_ACTIVE)
			sched_yield();
		/* Used at once, as a client that waits for ACTIVE would. */
		if (order_check(pattern, PATTERN_BYTES, 7) != 0)
			res.read_bad++;
		if (order_check(mark, MARK_BYTES, 1000 + (uint32_t)i) != 0)
			res.write_lost++;
		order_fill(mark, MARK_BYTES, 1001 + (uint32_t)i);
		res.cycles++;
		integ_signal(s->to_parent[1]);
	}
	if (write(s->to_parent[1], &res, sizeof(res)) != sizeof(res))
		_exit(2);
	vram_client_close(m);
	_exit(0);
}

/* The owner holds a host pool with a known pattern and restores it; a
 * second process maps it read-write; a third party pauses and resumes it
 * CYCLES times. */
TEST(second_mapper_sees_restored_pool_and_keeps_its_writes)
{
	integ_start("256M");
	vram_client *c = integ_connect("owner");
	vram_pool *w = integ_pool(c, "w", "weights", VRAM_POLICY_HOST, 0);
	void *a, *b;
	ASSERT_OK(vram_alloc(w, PATTERN_BYTES, &a));
	ASSERT_OK(vram_alloc(w, MARK_BYTES, &b));
	order_fill(a, PATTERN_BYTES, 7);
	uint64_t pattern_off = (uintptr_t)a - vram_pool_base(w);
	uint64_t mark_off = (uintptr_t)b - vram_pool_base(w);

	/* Threads start after fork (see pause_test.c). */
	struct integ_sync s;
	integ_sync_init(&s);
	pid_t pid = fork();
	if (pid == 0)
		mapper_run(&s, pattern_off, mark_off);
	integ_wait_signal(s.to_parent[0]);
	ASSERT_OK(vram_client_start_thread(c));
	vram_client *ctl = integ_connect("ctl");
	struct vram_selector sel = { .size = sizeof(sel), .name = "w" };
	for (int i = 0; i < CYCLES; i++) {
		ASSERT_OK(vram_pause(ctl, &sel, 0, NULL));
		integ_signal(s.to_child[1]);
		integ_wait_signal(s.to_parent[0]);
		ASSERT_OK(vram_resume(ctl, &sel, 0, NULL));
		integ_wait_signal(s.to_parent[0]);
	}
	struct order_result res;
	ASSERT_EQ(read(s.to_parent[0], &res, sizeof(res)), (ssize_t)sizeof(res));
	ASSERT_EQ(harness_wait(pid, 10000), 0);
	ASSERT_EQ(res.cycles, CYCLES);
	ASSERT_EQ(res.not_paused, 0);
	if (res.read_bad || res.write_lost)
		TEST_FAIL("of %d resumes, the second mapper read a pool not yet "
			  "restored in %d and lost its write in %d",
			  res.cycles, res.read_bad, res.write_lost);
	/* Nobody wrote over the owner's pattern. */
	ASSERT_EQ(order_check(a, PATTERN_BYTES, 7), 0);
	vram_client_close(ctl);
	vram_client_close(c);
	integ_stop();
}
