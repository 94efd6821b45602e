/* SPDX-License-Identifier: Apache-2.0 */
/* The pool state machine: every edge of pool_pause, pool_resume and
 * pool_advance, and a failure injected at each step leaves a consistent
 * state that can be retried. A fake backend counts chunks and fails the
 * Nth create on demand. */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend.h"
#include "attr.h"
#include "pool.h"
#include "test.h"

#define GRAN (2u << 20)

static int fail_at = -1; /* the create call that fails, counted from 0 */
static int creates;
static int live; /* chunks alive in the fake device */

static void fake_destroy(struct backend *b)
{
	free(b);
}

static int fake_mem_info(struct backend *b, unsigned dev, uint64_t *f, uint64_t *t)
{
	*t = b->devices[dev].total_bytes;
	*f = *t - b->devices[dev].used_bytes;
	return 0;
}

static int fake_create(struct backend *b, unsigned dev, struct chunk *c)
{
	if (creates++ == fail_at)
		return -ENOMEM;
	if (c->size > b->devices[dev].total_bytes - b->devices[dev].used_bytes)
		return -ENOMEM;
	c->fd = memfd_create("fake", MFD_CLOEXEC);
	if (c->fd < 0)
		return -errno;
	live++;
	return 0;
}

static void fake_release(struct backend *b UNUSED, unsigned dev UNUSED, struct chunk *c)
{
	close(c->fd);
	live--;
}

static const struct backend_ops fake_ops = {
	.name = "fake",
	.destroy = fake_destroy,
	.mem_info = fake_mem_info,
	.chunk_create = fake_create,
	.chunk_release = fake_release,
};

static struct backend *fake_backend(uint64_t capacity)
{
	struct backend *b = calloc(1, sizeof(*b));
	b->ops = &fake_ops;
	b->n_devices = 1;
	b->devices[0].total_bytes = capacity;
	b->devices[0].granularity = GRAN;
	fail_at = -1;
	creates = 0;
	live = 0;
	return b;
}

/* Sessions are opaque to pools: any distinct pointers do. */
static int sess_a, sess_b, sess_c;
#define A ((struct session *)&sess_a)
#define B ((struct session *)&sess_b)
#define C ((struct session *)&sess_c)

static struct identity who(uint32_t pid)
{
	struct identity id = { .pid = pid, .uid = 1000, .gid = 1000 };
	snprintf(id.name, sizeof(id.name), "p%u", pid);
	return id;
}

static uint64_t ids;          /* the daemon's event id counter */
static struct pool_next nx;   /* what the last call asked */

static enum pool_step pause_(struct pool *p, struct backend *b)
{
	memset(&nx, 0, sizeof(nx));
	return pool_pause(p, b, &ids, 0, &nx);
}

static enum pool_step resume_(struct pool *p, struct backend *b)
{
	memset(&nx, 0, sizeof(nx));
	return pool_resume(p, b, &ids, &nx);
}

/* s acks the current round with err (positive errno); then the pool
 * takes its edge. */
static enum pool_step ack(struct pool *p, struct backend *b, struct session *s,
			  int err)
{
	ASSERT_EQ(pool_ack(p, s, p->event_id, err), 1);
	memset(&nx, 0, sizeof(nx));
	return pool_advance(p, b, &ids, &nx);
}

/* s went away; then the pool takes its edge. */
static enum pool_step gone(struct pool *p, struct backend *b, struct session *s)
{
	ASSERT_EQ(pool_mapper_remove(p, s), 1);
	if (p->owner == s)
		pool_set_owner(p, NULL, NULL);
	memset(&nx, 0, sizeof(nx));
	return pool_advance(p, b, &ids, &nx);
}

static bool owes(struct pool *p, struct session *s)
{
	return pool_mapper_find(p, s)->pending;
}

/* The step was SEND of round r, to exactly the mappers in want (a mask of
 * A=1, B=2, C=4), of which the one in bk (a mask, or 0) saves or restores. */
static void expect_send(enum pool_step step, enum pool_round r, struct pool *p,
			unsigned want, unsigned bk)
{
	struct session *ss[] = { A, B, C };
	ASSERT_EQ(step, POOL_STEP_SEND);
	ASSERT_EQ(nx.round, r);
	unsigned n = 0;
	for (unsigned i = 0; i < 3; i++) {
		struct mapper *m = pool_mapper_find(p, ss[i]);
		bool w = want & (1u << i);
		if (!m) {
			ASSERT(!w);
			continue;
		}
		ASSERT_EQ(m->pending, w);
		ASSERT_EQ(m->backup, w && (bk & (1u << i)));
		n += w;
	}
	ASSERT_EQ(p->pending, n);
}

static void expect_failed(enum pool_step step, int err, enum pool_state s,
			  struct pool *p)
{
	ASSERT_EQ(step, POOL_STEP_FAILED);
	ASSERT_EQ(nx.err, err);
	ASSERT(nx.why && nx.why[0]);
	ASSERT_EQ(p->state, s);
}

static struct pool *make_pool(enum pool_policy policy)
{
	struct pool *p;
	struct identity a = who(1);
	ASSERT_OK(pool_create(1, "p", "weights", 0, policy, 0, 64ull * GRAN, NULL, A,
			      &a, &p));
	ASSERT_OK(pool_mapper_add(p, A, &a, false));
	return p;
}

TEST(create_validates)
{
	struct pool *p;
	struct identity a = who(1);
	char longname[200];
	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;
	ASSERT_EQ(pool_create(1, "", "t", 0, POOL_DISCARD, 0, GRAN, NULL, A, &a, &p), -EINVAL);
	ASSERT_EQ(pool_create(1, longname, "t", 0, POOL_DISCARD, 0, GRAN, NULL, A, &a, &p), -EINVAL);
	ASSERT_EQ(pool_create(1, "n", "t", 0, POOL_DISCARD, 0x80, GRAN, NULL, A, &a, &p), -EINVAL);
	ASSERT_EQ(pool_create(1, "n", "t", 0, 7, 0, GRAN, NULL, A, &a, &p), -EINVAL);
	ASSERT_EQ(pool_create(1, "n", "t", 0, POOL_DISCARD, 0, 0, NULL, A, &a, &p), -EINVAL);
	ASSERT_OK(pool_create(1, "n", "t", 0, POOL_HOST, 0, GRAN, NULL, A, &a, &p));
	ASSERT(p->backup_fd >= 0);
	ASSERT_EQ(p->state, POOL_ACTIVE);
	pool_destroy(p, NULL);
}

TEST(grow_chunks_and_limits)
{
	struct backend *b = fake_backend(16ull * GRAN);
	struct pool *p = make_pool(POOL_DISCARD);
	unsigned first;

	/* 5 granules in chunks of at most 2: 2 + 2 + 1. */
	ASSERT_OK(pool_grow(p, b, 5ull * GRAN - 100, 2ull * GRAN, 240, &first));
	ASSERT_EQ(first, 0);
	ASSERT_EQ(p->n_chunks, 3);
	ASSERT_UEQ(p->bytes, 5ull * GRAN);
	ASSERT_UEQ(p->chunks[2].offset, 4ull * GRAN);
	ASSERT_UEQ(b->used_bytes, 5ull * GRAN);
	/* Over the chunk limit: nothing made. */
	ASSERT_EQ(pool_grow(p, b, 4ull * GRAN, GRAN, 5, &first), -ENOSPC);
	ASSERT_EQ(p->n_chunks, 3);
	/* Over the device: nothing kept. */
	ASSERT_EQ(pool_grow(p, b, 12ull * GRAN, GRAN, 240, &first), -ENOMEM);
	ASSERT_EQ(p->n_chunks, 3);
	ASSERT_EQ(live, 3);
	ASSERT_UEQ(b->used_bytes, 5ull * GRAN);
	pool_destroy(p, b);
	ASSERT_EQ(live, 0);
	ASSERT_UEQ(b->used_bytes, 0);
	backend_destroy(b);
}

TEST(grow_failure_at_each_step_leaves_pool_as_before)
{
	for (int step = 0; step < 4; step++) {
		struct backend *b = fake_backend(64ull * GRAN);
		struct pool *p = make_pool(POOL_DISCARD);
		unsigned first;
		ASSERT_OK(pool_grow(p, b, GRAN, GRAN, 240, &first));
		fail_at = creates + step;
		ASSERT_EQ(pool_grow(p, b, 4ull * GRAN, GRAN, 240, &first), -ENOMEM);
		ASSERT_EQ(p->n_chunks, 1);
		ASSERT_UEQ(p->bytes, GRAN);
		ASSERT_EQ(live, 1);
		ASSERT_UEQ(b->used_bytes, GRAN);
		fail_at = -1;
		ASSERT_OK(pool_grow(p, b, 4ull * GRAN, GRAN, 240, &first));
		ASSERT_EQ(first, 1);
		ASSERT_EQ(p->n_chunks, 5);
		pool_destroy(p, b);
		ASSERT_EQ(live, 0);
		backend_destroy(b);
	}
}

/* A host pool with content, owner A and a second mapper B (read-write
 * unless b_ro), grown by n granules. */
static struct pool *make_shared(struct backend *b, unsigned n, bool b_ro)
{
	struct pool *p = make_pool(POOL_HOST);
	struct identity bw = who(2);
	unsigned first;
	ASSERT_OK(pool_grow(p, b, n * (uint64_t)GRAN, GRAN, 240, &first));
	ASSERT_OK(pool_mapper_add(p, B, &bw, b_ro));
	return p;
}

/* Takes p (owner A saving, every mapper in mask unmapping) to PAUSED. */
static void pause_ok(struct pool *p, struct backend *b, unsigned mask)
{
	struct session *ss[] = { A, B, C };
	expect_send(pause_(p, b), POOL_ROUND_SAVE, p, 1, 1);
	expect_send(ack(p, b, A, 0), POOL_ROUND_PAUSE, p, mask, 0);
	enum pool_step step = POOL_STEP_WAIT;
	for (unsigned i = 0; i < 3; i++)
		if (mask & (1u << i))
			step = ack(p, b, ss[i], 0);
	ASSERT_EQ(step, POOL_STEP_DONE);
	ASSERT_EQ(p->state, POOL_PAUSED);
}

TEST(wire_sees_four_states)
{
	ASSERT_STREQ(pool_state_name(POOL_ACTIVE), "active");
	ASSERT_STREQ(pool_state_name(POOL_PAUSING_SAVE), "pausing");
	ASSERT_STREQ(pool_state_name(POOL_PAUSING_UNMAP), "pausing");
	ASSERT_STREQ(pool_state_name(POOL_PAUSING_UNDO_SAVE), "pausing");
	ASSERT_STREQ(pool_state_name(POOL_PAUSING_UNDO), "pausing");
	ASSERT_STREQ(pool_state_name(POOL_PAUSED), "paused");
	ASSERT_STREQ(pool_state_name(POOL_RESUMING_RESTORE), "resuming");
	ASSERT_STREQ(pool_state_name(POOL_RESUMING_MAP), "resuming");
}

/* ACTIVE -> PAUSING_SAVE -> PAUSING_UNMAP -> PAUSED -> RESUMING_RESTORE ->
 * RESUMING_MAP -> ACTIVE, with wrong, late and doubled acks ignored. */
TEST(host_cycle_saver_first_restorer_first)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *p = make_shared(b, 3, true);
	unsigned first;

	ASSERT_EQ(pool_mapper_add(p, B, &(struct identity){ .pid = 2 }, true),
		  -EEXIST);
	/* Round 1: the owner alone saves; everyone stays mapped. */
	expect_send(pause_(p, b), POOL_ROUND_SAVE, p, 1, 1);
	ASSERT_EQ(p->state, POOL_PAUSING_SAVE);
	ASSERT(pool_in_transition(p));
	ASSERT(!p->backup_valid);
	ASSERT_EQ(live, 3); /* nothing let go while the saver works */
	uint64_t save_id = p->event_id;
	ASSERT_EQ(pool_ack(p, A, save_id - 1, 0), 0); /* wrong event */
	ASSERT_EQ(pool_ack(p, C, save_id, 0), 0);     /* not a mapper */
	ASSERT_EQ(pool_ack(p, B, save_id, 0), 0);     /* not asked */
	ASSERT_EQ(pool_advance(p, b, &ids, &nx), POOL_STEP_WAIT);
	/* Round 2: everyone, the saver too, unmaps without saving; the
	 * daemon lets go of its fds at once, the bytes stay counted. */
	expect_send(ack(p, b, A, 0), POOL_ROUND_PAUSE, p, 3, 0);
	ASSERT_EQ(p->state, POOL_PAUSING_UNMAP);
	ASSERT(p->event_id > save_id);
	ASSERT_EQ(pool_ack(p, A, save_id, 0), 0); /* the old round */
	ASSERT_EQ(live, 0);
	ASSERT_UEQ(b->used_bytes, 3ull * GRAN);
	ASSERT_EQ(ack(p, b, B, 0), POOL_STEP_WAIT);
	ASSERT_EQ(pool_ack(p, B, p->event_id, 0), 0); /* twice */
	ASSERT_EQ(ack(p, b, A, 0), POOL_STEP_DONE);
	ASSERT_UEQ(nx.bytes, 3ull * GRAN);
	ASSERT_EQ(p->state, POOL_PAUSED);
	ASSERT(p->backup_valid);
	ASSERT_UEQ(b->used_bytes, 0);
	ASSERT_UEQ(p->bytes, 3ull * GRAN); /* the size is kept */
	ASSERT_EQ(pool_advance(p, b, &ids, &nx), POOL_STEP_WAIT);
	ASSERT_EQ(pool_grow(p, b, GRAN, GRAN, 240, &first), -EBUSY);

	/* Round 1: the restorer alone is sent the chunks. */
	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 1, 1);
	ASSERT_EQ(p->state, POOL_RESUMING_RESTORE);
	ASSERT_EQ(live, 3);
	/* Round 2: only now the others, without restoring. */
	expect_send(ack(p, b, A, 0), POOL_ROUND_RESUME, p, 2, 0);
	ASSERT_EQ(p->state, POOL_RESUMING_MAP);
	ASSERT(p->backup_valid);
	ASSERT_EQ(ack(p, b, B, 0), POOL_STEP_DONE);
	ASSERT_UEQ(nx.bytes, 3ull * GRAN);
	ASSERT_EQ(p->state, POOL_ACTIVE);
	ASSERT(!pool_in_transition(p));
	ASSERT(!p->backup_valid);
	ASSERT_EQ(pool_advance(p, b, &ids, &nx), POOL_STEP_WAIT);
	pool_destroy(p, b);
	ASSERT_EQ(live, 0);
	backend_destroy(b);
}

/* The refusals of pool_pause and pool_resume, in every state they refuse
 * in, leave the pool as it was. */
TEST(begins_refused_by_state)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *p = make_shared(b, 2, false);

	expect_failed(resume_(p, b), EALREADY, POOL_ACTIVE, p);
	expect_send(pause_(p, b), POOL_ROUND_SAVE, p, 1, 1);
	expect_failed(resume_(p, b), EBUSY, POOL_PAUSING_SAVE, p);
	expect_send(ack(p, b, A, 0), POOL_ROUND_PAUSE, p, 3, 0);
	expect_failed(resume_(p, b), EBUSY, POOL_PAUSING_UNMAP, p);
	ack(p, b, A, 0);
	ASSERT_EQ(ack(p, b, B, 0), POOL_STEP_DONE);
	expect_failed(pause_(p, b), EALREADY, POOL_PAUSED, p);
	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 1, 1);
	expect_failed(pause_(p, b), EBUSY, POOL_RESUMING_RESTORE, p);
	expect_send(ack(p, b, A, 0), POOL_ROUND_RESUME, p, 2, 0);
	expect_failed(pause_(p, b), EBUSY, POOL_RESUMING_MAP, p);
	ASSERT_EQ(ack(p, b, B, 0), POOL_STEP_DONE);
	ASSERT_EQ(live, 2);
	pool_destroy(p, b);
	backend_destroy(b);
}

/* A discard pool: one round each way, to every mapper; with no mapper at
 * all the state is reached at once. */
TEST(discard_one_round_each_way)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *p = make_pool(POOL_DISCARD);
	struct identity bw = who(2);
	unsigned first;

	ASSERT_OK(pool_grow(p, b, 2ull * GRAN, GRAN, 240, &first));
	ASSERT_OK(pool_mapper_add(p, B, &bw, true));
	expect_send(pause_(p, b), POOL_ROUND_PAUSE, p, 3, 0);
	ASSERT_EQ(p->state, POOL_PAUSING_UNMAP);
	ASSERT_EQ(live, 0); /* let go at once: nothing is kept */
	ack(p, b, A, 0);
	ASSERT_EQ(ack(p, b, B, 0), POOL_STEP_DONE);
	ASSERT(!p->backup_valid);
	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 3, 0);
	ASSERT_EQ(p->state, POOL_RESUMING_MAP);
	ASSERT_EQ(ack(p, b, A, 0), POOL_STEP_WAIT);
	ASSERT_EQ(ack(p, b, B, 0), POOL_STEP_DONE);
	ASSERT_EQ(p->state, POOL_ACTIVE);
	ASSERT_EQ(live, 2);

	/* No mapper: PAUSED and ACTIVE without a round. */
	pool_mapper_remove(p, A);
	pool_mapper_remove(p, B);
	ASSERT_EQ(pause_(p, b), POOL_STEP_DONE);
	ASSERT_UEQ(nx.bytes, 2ull * GRAN);
	ASSERT_EQ(p->state, POOL_PAUSED);
	ASSERT_EQ(live, 0);
	ASSERT_EQ(resume_(p, b), POOL_STEP_DONE);
	ASSERT_EQ(p->state, POOL_ACTIVE);
	ASSERT_EQ(live, 2);
	pool_destroy(p, b);
	backend_destroy(b);
}

/* A host pool with nothing in it (never grown) has nothing to save or
 * restore: one round each way. */
TEST(empty_host_pool_has_nothing_to_save)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *p = make_pool(POOL_HOST);

	expect_send(pause_(p, b), POOL_ROUND_PAUSE, p, 1, 0);
	ASSERT_EQ(ack(p, b, A, 0), POOL_STEP_DONE);
	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 1, 0);
	ASSERT_EQ(p->state, POOL_RESUMING_MAP);
	ASSERT_EQ(ack(p, b, A, 0), POOL_STEP_DONE);
	pool_destroy(p, b);
	backend_destroy(b);
}

TEST(host_pool_needs_a_writer_to_save_or_restore)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *p = make_shared(b, 1, true);

	/* The owner leaves; B maps read-only. */
	pool_mapper_remove(p, A);
	pool_set_owner(p, NULL, NULL);
	expect_failed(pause_(p, b), EPIPE, POOL_ACTIVE, p);
	ASSERT_EQ(live, 1);
	/* A read-write mapper saves and, later, restores. */
	struct identity cw = who(3);
	ASSERT_OK(pool_mapper_add(p, C, &cw, false));
	expect_send(pause_(p, b), POOL_ROUND_SAVE, p, 4, 4);
	expect_send(ack(p, b, C, 0), POOL_ROUND_PAUSE, p, 6, 0);
	ack(p, b, B, 0);
	ASSERT_EQ(ack(p, b, C, 0), POOL_STEP_DONE);
	/* Without it the backup cannot come back: PAUSED, nothing made. */
	pool_mapper_remove(p, C);
	expect_failed(resume_(p, b), EPIPE, POOL_PAUSED, p);
	ASSERT(p->backup_valid);
	ASSERT_EQ(live, 0);
	pool_destroy(p, b);
	backend_destroy(b);
}

/* PAUSING_SAVE --failed--> ACTIVE: the saver cannot save, or dies saving;
 * nobody was asked to unmap, nothing was let go. */
TEST(saver_failing_or_dying_leaves_pool_active)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *p = make_shared(b, 2, false);

	expect_send(pause_(p, b), POOL_ROUND_SAVE, p, 1, 1);
	expect_failed(ack(p, b, A, EIO), EIO, POOL_ACTIVE, p);
	ASSERT(!p->backup_valid);
	ASSERT_EQ(live, 2);
	ASSERT(!owes(p, B));

	expect_send(pause_(p, b), POOL_ROUND_SAVE, p, 1, 1);
	ASSERT_EQ(p->pending, 1);
	expect_failed(gone(p, b, A), EPIPE, POOL_ACTIVE, p);
	ASSERT_EQ(p->pending, 0);
	ASSERT_EQ(live, 2);

	/* B becomes the saver. */
	expect_send(pause_(p, b), POOL_ROUND_SAVE, p, 2, 2);
	expect_send(ack(p, b, B, 0), POOL_ROUND_PAUSE, p, 2, 0);
	ASSERT_EQ(ack(p, b, B, 0), POOL_STEP_DONE);
	ASSERT(p->backup_valid);
	pool_destroy(p, b);
	backend_destroy(b);
}

/* PAUSING_UNMAP --failed--> stays, with its chunks counted; pausing again
 * asks only the one that failed. */
TEST(unmap_failure_stays_pausing_and_retries)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *p = make_shared(b, 2, false);

	expect_send(pause_(p, b), POOL_ROUND_SAVE, p, 1, 1);
	expect_send(ack(p, b, A, 0), POOL_ROUND_PAUSE, p, 3, 0);
	ASSERT_EQ(ack(p, b, A, 0), POOL_STEP_WAIT);
	expect_failed(ack(p, b, B, EIO), EIO, POOL_PAUSING_UNMAP, p);
	ASSERT_UEQ(b->used_bytes, 2ull * GRAN);
	expect_send(pause_(p, b), POOL_ROUND_PAUSE, p, 2, 0);
	ASSERT_EQ(ack(p, b, B, 0), POOL_STEP_DONE);
	ASSERT_EQ(p->state, POOL_PAUSED);
	ASSERT(p->backup_valid);
	ASSERT_UEQ(b->used_bytes, 0);
	pool_destroy(p, b);
	backend_destroy(b);
}

/* A round that missed its deadline: pausing or resuming again asks only
 * those that still owe, under a new event id; a dead mapper counts as done;
 * a pool whose round has nothing left to wait for goes on at once. */
TEST(missed_deadline_then_late_ack_and_dead_mapper)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *p = make_shared(b, 1, false);
	struct identity cw = who(3);

	ASSERT_OK(pool_mapper_add(p, C, &cw, false));
	/* The saver misses the deadline: asked again, still the saver. */
	expect_send(pause_(p, b), POOL_ROUND_SAVE, p, 1, 1);
	uint64_t old = p->event_id;
	expect_send(pause_(p, b), POOL_ROUND_SAVE, p, 1, 1);
	ASSERT_EQ(pool_ack(p, A, old, 0), 0);
	expect_send(ack(p, b, A, 0), POOL_ROUND_PAUSE, p, 7, 0);
	ack(p, b, A, 0);
	old = p->event_id;
	expect_send(pause_(p, b), POOL_ROUND_PAUSE, p, 6, 0);
	ASSERT_EQ(pool_ack(p, B, old, 0), 0); /* late ack of the old round */
	ASSERT_EQ(ack(p, b, B, 0), POOL_STEP_WAIT);
	/* C dies: a dead mapper maps nothing, so it counts as done. */
	ASSERT_EQ(gone(p, b, C), POOL_STEP_DONE);
	ASSERT_EQ(pool_mapper_remove(p, C), 0);
	ASSERT_EQ(pool_mapper_count(p), 2);

	/* Resume: the restorer misses the deadline and is asked again (the
	 * other mapper still is not); then the same in the second round. */
	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 1, 1);
	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 1, 1);
	expect_send(ack(p, b, A, 0), POOL_ROUND_RESUME, p, 2, 0);
	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 2, 0);
	ASSERT_EQ(ack(p, b, B, 0), POOL_STEP_DONE);
	ASSERT_EQ(p->state, POOL_ACTIVE);

	/* Pausing again after the last ack came in but before the pool took
	 * its edge (nobody owes): it goes on at once. */
	expect_send(pause_(p, b), POOL_ROUND_SAVE, p, 1, 1);
	ASSERT_EQ(pool_ack(p, A, p->event_id, 0), 1);
	expect_send(pause_(p, b), POOL_ROUND_PAUSE, p, 3, 0);
	pool_destroy(p, b);
	backend_destroy(b);
}

TEST(resume_out_of_memory_stays_paused_and_retries)
{
	struct backend *b = fake_backend(8ull * GRAN);
	struct pool *p = make_shared(b, 4, false);

	pause_ok(p, b, 3);
	/* Fail each create step in turn: always PAUSED, nothing held. */
	for (int step = 0; step < 4; step++) {
		fail_at = creates + step;
		expect_failed(resume_(p, b), ENOMEM, POOL_PAUSED, p);
		ASSERT(strstr(nx.why, "memory"));
		ASSERT(p->backup_valid);
		ASSERT_EQ(live, 0);
		ASSERT_UEQ(b->used_bytes, 0);
		ASSERT(!owes(p, A) && !owes(p, B));
	}
	fail_at = -1;
	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 1, 1);
	expect_send(ack(p, b, A, 0), POOL_ROUND_RESUME, p, 2, 0);
	ASSERT_EQ(ack(p, b, B, 0), POOL_STEP_DONE);
	ASSERT_EQ(live, 4);
	pool_destroy(p, b);
	backend_destroy(b);
}

/* RESUMING_RESTORE --failed--> PAUSED: the restorer fails, or dies
 * restoring; the chunks made for it are released, the backup is kept and
 * the other mapper was never sent anything. */
TEST(restorer_failing_or_dying_leaves_pool_paused)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *p = make_shared(b, 2, false);

	pause_ok(p, b, 3);
	uint64_t before = ids;
	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 1, 1);
	ASSERT_EQ(live, 2);
	expect_failed(ack(p, b, A, ENOMEM), ENOMEM, POOL_PAUSED, p);
	ASSERT_EQ(ids, before + 1); /* no second round */
	ASSERT(p->backup_valid);
	ASSERT_EQ(live, 0);
	ASSERT_UEQ(b->used_bytes, 0);
	ASSERT(!owes(p, B));

	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 1, 1);
	expect_failed(gone(p, b, A), EPIPE, POOL_PAUSED, p);
	ASSERT(p->backup_valid);
	ASSERT_EQ(live, 0);
	ASSERT_UEQ(b->used_bytes, 0);

	/* B restores now, alone: nothing else to send. */
	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 2, 2);
	ASSERT_EQ(ack(p, b, B, 0), POOL_STEP_DONE);
	ASSERT_EQ(p->state, POOL_ACTIVE);
	ASSERT_EQ(live, 2);
	pool_destroy(p, b);
	backend_destroy(b);
}

/* s reports a restore in parts: restored chunks done. */
static enum pool_step progress(struct pool *p, struct backend *b,
			       struct session *s, unsigned restored)
{
	memset(&nx, 0, sizeof(nx));
	return pool_resume_progress(p, b, s, restored, &nx);
}

/* A restorer that takes its chunks in parts gets POOL_PARTS_AHEAD of them
 * first and each later one as it reports the one two before restored;
 * reports out of turn change nothing; a create that fails, an early ack
 * and a restorer that dies each leave the pool PAUSED with its backup and
 * nothing held; a restorer that does not take parts gets every chunk. */
TEST(restore_in_parts_makes_chunks_as_restored)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *p = make_shared(b, 5, false);

	pool_mapper_find(p, A)->parts = true;
	pause_ok(p, b, 3);
	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 1, 1);
	ASSERT_EQ(p->made, POOL_PARTS_AHEAD);
	ASSERT_EQ(live, 2);
	ASSERT_EQ(progress(p, b, B, 1), POOL_STEP_WAIT); /* not the restorer */
	ASSERT_EQ(progress(p, b, A, 3), POOL_STEP_WAIT); /* past what it has */
	ASSERT_EQ(progress(p, b, A, 0), POOL_STEP_WAIT); /* nothing due */
	ASSERT_EQ(live, 2);
	for (unsigned k = 1; k <= 3; k++) {
		expect_send(progress(p, b, A, k), POOL_ROUND_RESUME_MORE, p, 1, 1);
		ASSERT_EQ(nx.first, k + 1);
		ASSERT_EQ(p->made, k + 2);
		ASSERT_EQ(progress(p, b, A, k), POOL_STEP_WAIT); /* twice */
	}
	ASSERT_EQ(live, 5);
	ASSERT_EQ(progress(p, b, A, 4), POOL_STEP_WAIT); /* all made */
	expect_send(ack(p, b, A, 0), POOL_ROUND_RESUME, p, 2, 0);
	ASSERT_EQ(progress(p, b, A, 5), POOL_STEP_WAIT); /* over */
	ASSERT_EQ(ack(p, b, B, 0), POOL_STEP_DONE);
	ASSERT_EQ(p->state, POOL_ACTIVE);

	/* Acked before every chunk was sent: it restored a part only. */
	pause_ok(p, b, 3);
	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 1, 1);
	expect_failed(ack(p, b, A, 0), EPROTO, POOL_PAUSED, p);
	ASSERT(p->backup_valid);
	ASSERT_EQ(live, 0);
	ASSERT_UEQ(b->used_bytes, 0);

	/* The third create fails: the restorer is told, fails the round. */
	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 1, 1);
	fail_at = creates;
	expect_send(progress(p, b, A, 1), POOL_ROUND_RESUME_MORE, p, 1, 1);
	ASSERT_EQ(p->make_err, ENOMEM);
	ASSERT_EQ(p->made, 2u);
	ASSERT_EQ(progress(p, b, A, 2), POOL_STEP_WAIT); /* it has failed */
	expect_failed(ack(p, b, A, ENOMEM), ENOMEM, POOL_PAUSED, p);
	ASSERT(strstr(nx.why, "memory"));
	ASSERT(p->backup_valid);
	ASSERT_EQ(p->make_err, 0);
	ASSERT_EQ(live, 0);
	ASSERT_UEQ(b->used_bytes, 0);
	fail_at = -1;

	/* The restorer dies halfway. */
	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 1, 1);
	expect_send(progress(p, b, A, 1), POOL_ROUND_RESUME_MORE, p, 1, 1);
	expect_failed(gone(p, b, A), EPIPE, POOL_PAUSED, p);
	ASSERT(p->backup_valid);
	ASSERT_EQ(live, 0);
	ASSERT_UEQ(b->used_bytes, 0);

	/* B takes no parts: every chunk at once. */
	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 2, 2);
	ASSERT_EQ(p->made, 5u);
	ASSERT_EQ(live, 5);
	ASSERT_EQ(progress(p, b, B, 1), POOL_STEP_WAIT);
	ASSERT_EQ(ack(p, b, B, 0), POOL_STEP_DONE);
	pool_destroy(p, b);
	ASSERT_EQ(live, 0);
	backend_destroy(b);
}

/* A mapper that dies in a round that does not need it changes nothing. */
TEST(other_mapper_dying_does_not_fail_a_round)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *p = make_shared(b, 2, false);
	struct identity cw = who(3);

	ASSERT_OK(pool_mapper_add(p, C, &cw, false));
	expect_send(pause_(p, b), POOL_ROUND_SAVE, p, 1, 1);
	ASSERT_EQ(gone(p, b, C), POOL_STEP_WAIT); /* owed nothing */
	expect_send(ack(p, b, A, 0), POOL_ROUND_PAUSE, p, 3, 0);
	ack(p, b, A, 0);
	ASSERT_EQ(ack(p, b, B, 0), POOL_STEP_DONE);
	ASSERT_OK(pool_mapper_add(p, C, &cw, false));
	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 1, 1);
	ASSERT_EQ(gone(p, b, B), POOL_STEP_WAIT);
	expect_send(ack(p, b, A, 0), POOL_ROUND_RESUME, p, 4, 0);
	ASSERT_EQ(gone(p, b, C), POOL_STEP_DONE); /* counts as mapped */
	ASSERT_EQ(p->state, POOL_ACTIVE);
	pool_destroy(p, b);
	backend_destroy(b);
}

/* RESUMING_MAP --failed--> PAUSING_UNDO_SAVE --saved--> PAUSING_UNDO
 * --unmapped--> PAUSED, the resume failing with the mapper's error: the
 * content, restored and maybe written since, is saved again first. */
TEST(mapper_failing_resume_is_saved_and_undone_to_paused)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *p = make_shared(b, 2, false);

	pause_ok(p, b, 3);
	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 1, 1);
	expect_send(ack(p, b, A, 0), POOL_ROUND_RESUME, p, 2, 0);
	/* B could not map: A, which maps, saves. */
	expect_send(ack(p, b, B, ENOMEM), POOL_ROUND_SAVE, p, 1, 1);
	ASSERT_EQ(p->state, POOL_PAUSING_UNDO_SAVE);
	ASSERT(!p->backup_valid);
	ASSERT_EQ(live, 2);
	expect_failed(resume_(p, b), EBUSY, POOL_PAUSING_UNDO_SAVE, p);
	/* Then everyone unmaps (B has nothing to and acks at once). */
	expect_send(ack(p, b, A, 0), POOL_ROUND_PAUSE, p, 3, 0);
	ASSERT_EQ(p->state, POOL_PAUSING_UNDO);
	ASSERT_EQ(live, 0);
	expect_failed(resume_(p, b), EBUSY, POOL_PAUSING_UNDO, p);
	ack(p, b, B, 0);
	expect_failed(ack(p, b, A, 0), ENOMEM, POOL_PAUSED, p);
	ASSERT(p->backup_valid);
	ASSERT_UEQ(b->used_bytes, 0);
	/* And it can be resumed again. */
	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 1, 1);
	expect_send(ack(p, b, A, 0), POOL_ROUND_RESUME, p, 2, 0);
	ASSERT_EQ(ack(p, b, B, 0), POOL_STEP_DONE);
	pool_destroy(p, b);
	backend_destroy(b);
}

/* The undo's saver must map the pool: the restorer died, and the only
 * other read-write mapper is the one that failed to map. Nobody alive has
 * written: the old backup is kept. */
TEST(undo_without_a_mapped_saver_keeps_the_old_backup)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *p = make_shared(b, 2, false);

	pause_ok(p, b, 3);
	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 1, 1);
	expect_send(ack(p, b, A, 0), POOL_ROUND_RESUME, p, 2, 0);
	ASSERT_EQ(pool_mapper_remove(p, A), 1);
	pool_set_owner(p, NULL, NULL);
	expect_send(ack(p, b, B, ENOMEM), POOL_ROUND_PAUSE, p, 2, 0);
	ASSERT_EQ(p->state, POOL_PAUSING_UNDO);
	ASSERT(p->backup_valid);
	expect_failed(ack(p, b, B, 0), ENOMEM, POOL_PAUSED, p);
	ASSERT(p->backup_valid);
	ASSERT_EQ(live, 0);
	pool_destroy(p, b);
	backend_destroy(b);
}

/* A discard pool has nothing to save: RESUMING_MAP --failed-->
 * PAUSING_UNDO at once. */
TEST(discard_mapper_failing_resume_is_undone)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *p = make_pool(POOL_DISCARD);
	struct identity bw = who(2);
	unsigned first;

	ASSERT_OK(pool_grow(p, b, GRAN, GRAN, 240, &first));
	ASSERT_OK(pool_mapper_add(p, B, &bw, false));
	expect_send(pause_(p, b), POOL_ROUND_PAUSE, p, 3, 0);
	ack(p, b, A, 0);
	ASSERT_EQ(ack(p, b, B, 0), POOL_STEP_DONE);
	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 3, 0);
	ASSERT_EQ(ack(p, b, B, EIO), POOL_STEP_WAIT);
	/* A mapper failed, others still owe: resuming again waits for the
	 * undo instead. */
	expect_failed(resume_(p, b), EBUSY, POOL_RESUMING_MAP, p);
	expect_send(ack(p, b, A, 0), POOL_ROUND_PAUSE, p, 3, 0);
	ASSERT_EQ(p->state, POOL_PAUSING_UNDO);
	ASSERT_EQ(live, 0);
	ack(p, b, A, 0);
	expect_failed(ack(p, b, B, 0), EIO, POOL_PAUSED, p);
	ASSERT(!p->backup_valid);
	pool_destroy(p, b);
	backend_destroy(b);
}

/* PAUSING_UNDO_SAVE --failed--> ACTIVE: the old backup is partly
 * overwritten, so the chunks, which hold the content, are kept. */
TEST(undo_save_failing_leaves_pool_active)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *p = make_shared(b, 2, false);

	pause_ok(p, b, 3);
	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 1, 1);
	expect_send(ack(p, b, A, 0), POOL_ROUND_RESUME, p, 2, 0);
	expect_send(ack(p, b, B, ENOMEM), POOL_ROUND_SAVE, p, 1, 1);
	expect_failed(ack(p, b, A, EIO), EIO, POOL_ACTIVE, p);
	ASSERT(!p->backup_valid);
	ASSERT_EQ(live, 2);
	/* A later pause works as any. */
	pause_ok(p, b, 3);
	ASSERT(p->backup_valid);
	pool_destroy(p, b);
	backend_destroy(b);
}

/* PAUSING_UNDO --failed--> stays; a pause carries the undo on as its own
 * (PAUSING_UNMAP) and ends PAUSED. Same for an undo's save that missed its
 * deadline (PAUSING_UNDO_SAVE to PAUSING_SAVE). */
TEST(pause_carries_on_an_undo)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *p = make_shared(b, 2, false);

	pause_ok(p, b, 3);
	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 1, 1);
	expect_send(ack(p, b, A, 0), POOL_ROUND_RESUME, p, 2, 0);
	expect_send(ack(p, b, B, ENOMEM), POOL_ROUND_SAVE, p, 1, 1);
	expect_send(ack(p, b, A, 0), POOL_ROUND_PAUSE, p, 3, 0);
	ack(p, b, B, 0);
	expect_failed(ack(p, b, A, EIO), EIO, POOL_PAUSING_UNDO, p);
	expect_send(pause_(p, b), POOL_ROUND_PAUSE, p, 1, 0);
	ASSERT_EQ(p->state, POOL_PAUSING_UNMAP);
	ASSERT_EQ(ack(p, b, A, 0), POOL_STEP_DONE);
	ASSERT_EQ(p->state, POOL_PAUSED);
	ASSERT(p->backup_valid);

	/* The undo's save misses its deadline; a pause takes it over. */
	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 1, 1);
	expect_send(ack(p, b, A, 0), POOL_ROUND_RESUME, p, 2, 0);
	expect_send(ack(p, b, B, ENOMEM), POOL_ROUND_SAVE, p, 1, 1);
	expect_send(pause_(p, b), POOL_ROUND_SAVE, p, 1, 1);
	ASSERT_EQ(p->state, POOL_PAUSING_SAVE);
	expect_send(ack(p, b, A, 0), POOL_ROUND_PAUSE, p, 3, 0);
	ack(p, b, A, 0);
	ASSERT_EQ(ack(p, b, B, 0), POOL_STEP_DONE);
	ASSERT(p->backup_valid);
	pool_destroy(p, b);
	backend_destroy(b);
}

TEST(orphaned_persistent_pool_is_taken_over)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *p = make_pool(POOL_HOST);
	struct identity bw = who(2);
	unsigned first;

	ASSERT_OK(pool_grow(p, b, GRAN, GRAN, 240, &first));
	pool_mapper_remove(p, A);
	pool_set_owner(p, NULL, NULL);
	ASSERT_EQ(p->owner_id.pid, 0);
	ASSERT_OK(pool_mapper_add(p, B, &bw, false));
	pool_set_owner(p, B, &bw);
	ASSERT_EQ(p->owner_id.pid, 2);
	expect_send(pause_(p, b), POOL_ROUND_SAVE, p, 2, 2);
	pool_destroy(p, b);
	ASSERT_EQ(live, 0);
	backend_destroy(b);
}


/* The daemon lets go of a pool's chunks as soon as no content depends on
 * them, so the last mapper frees the memory; never while a saver works. */
TEST(early_release_only_when_nothing_is_saved)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *kv = make_pool(POOL_DISCARD);
	unsigned first;

	ASSERT_OK(pool_grow(kv, b, 2ull * GRAN, GRAN, 240, &first));
	expect_send(pause_(kv, b), POOL_ROUND_PAUSE, kv, 1, 0);
	ASSERT_EQ(live, 0);
	/* Still counted: a mapper may not have unmapped yet. */
	ASSERT_UEQ(b->used_bytes, 2ull * GRAN);
	ASSERT_EQ(ack(kv, b, A, 0), POOL_STEP_DONE);
	ASSERT_UEQ(b->used_bytes, 0);

	struct pool *w = make_pool(POOL_HOST);
	ASSERT_OK(pool_grow(w, b, GRAN, GRAN, 240, &first));
	expect_send(pause_(w, b), POOL_ROUND_SAVE, w, 1, 1);
	ASSERT_EQ(live, 1); /* the saver is at work */
	expect_send(ack(w, b, A, 0), POOL_ROUND_PAUSE, w, 1, 0);
	ASSERT_EQ(live, 0);
	ASSERT_UEQ(b->used_bytes, GRAN);
	ASSERT_EQ(ack(w, b, A, 0), POOL_STEP_DONE);
	pool_destroy(w, b);
	pool_destroy(kv, b);
	ASSERT_EQ(live, 0);
	ASSERT_UEQ(b->used_bytes, 0);
	backend_destroy(b);
}

/* A save in parts: the owner, mapping the pool alone, reports chunks
 * saved and the daemon lets go of each then (their bytes counted until
 * PAUSED). Reports from anyone else, out of order or past the pool are
 * ignored; a failure after some chunks went stays PAUSING_SAVE and a
 * pause again saves the rest; a second mapper, a persistent pool or a
 * saver that does not save in parts gets the whole save. */
TEST(save_in_parts_lets_go_of_each_chunk_as_saved)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *p = make_pool(POOL_HOST);
	unsigned first;

	ASSERT_OK(pool_grow(p, b, 4ull * GRAN, GRAN, 240, &first));
	pool_mapper_find(p, A)->save_parts = true;
	expect_send(pause_(p, b), POOL_ROUND_SAVE, p, 1, 1);
	ASSERT(p->save_parts);
	ASSERT_EQ(pool_save_progress(p, b, B, 2), 0u); /* not the saver */
	ASSERT_EQ(pool_save_progress(p, b, A, 5), 0u); /* past the pool */
	ASSERT_EQ(pool_save_progress(p, b, A, 0), 0u);
	ASSERT_EQ(live, 4);
	ASSERT_EQ(pool_save_progress(p, b, A, 2), 2u);
	ASSERT_EQ(pool_save_progress(p, b, A, 2), 0u); /* twice */
	ASSERT_EQ(pool_save_progress(p, b, A, 1), 0u); /* behind */
	ASSERT_EQ(live, 2);
	ASSERT_UEQ(b->used_bytes, 4ull * GRAN);
	ASSERT_EQ(pool_save_progress(p, b, A, 3), 1u);
	expect_send(ack(p, b, A, 0), POOL_ROUND_PAUSE, p, 1, 0);
	ASSERT_EQ(live, 0);
	ASSERT_EQ(ack(p, b, A, 0), POOL_STEP_DONE);
	ASSERT(p->backup_valid);
	ASSERT_UEQ(b->used_bytes, 0);
	ASSERT_EQ(p->saved, 0u);
	ASSERT(!p->save_parts);
	ASSERT_EQ(pool_save_progress(p, b, A, 1), 0u); /* paused */

	/* A resume is not a save: its reports make chunks, let go of none. */
	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 1, 1);
	ASSERT_EQ(pool_save_progress(p, b, A, 1), 0u);
	ASSERT_EQ(live, 4);
	ASSERT_EQ(ack(p, b, A, 0), POOL_STEP_DONE);

	/* The saver fails after one chunk went: it stays pausing, with the
	 * rest held; a resume is refused; pausing again saves the rest. */
	expect_send(pause_(p, b), POOL_ROUND_SAVE, p, 1, 1);
	ASSERT_EQ(pool_save_progress(p, b, A, 1), 1u);
	expect_failed(ack(p, b, A, EIO), EIO, POOL_PAUSING_SAVE, p);
	ASSERT(strstr(nx.why, "pause again"));
	ASSERT(p->save_failed);
	ASSERT_EQ(p->saved, 1u);
	ASSERT_EQ(live, 3);
	ASSERT(!p->backup_valid);
	expect_failed(resume_(p, b), EBUSY, POOL_PAUSING_SAVE, p);
	expect_send(pause_(p, b), POOL_ROUND_SAVE, p, 1, 1);
	ASSERT(!p->save_failed);
	ASSERT_EQ(pool_save_progress(p, b, A, 1), 0u); /* already gone */
	ASSERT_EQ(pool_save_progress(p, b, A, 3), 2u);
	ASSERT_EQ(live, 1);
	expect_send(ack(p, b, A, 0), POOL_ROUND_PAUSE, p, 1, 0);
	ASSERT_EQ(ack(p, b, A, 0), POOL_STEP_DONE);
	ASSERT(p->backup_valid);
	ASSERT_EQ(live, 0);
	ASSERT_UEQ(b->used_bytes, 0);
	expect_send(resume_(p, b), POOL_ROUND_RESUME, p, 1, 1);
	ASSERT_EQ(ack(p, b, A, 0), POOL_STEP_DONE);

	/* The saver goes away after a chunk went: the pool stays pausing
	 * (vramd drops it with its owner: node_session_gone); a pause
	 * without it is refused rather than trusted. */
	expect_send(pause_(p, b), POOL_ROUND_SAVE, p, 1, 1);
	ASSERT_EQ(pool_save_progress(p, b, A, 2), 2u);
	expect_failed(gone(p, b, A), EPIPE, POOL_PAUSING_SAVE, p);
	expect_failed(pause_(p, b), EPIPE, POOL_PAUSING_SAVE, p);
	ASSERT(!p->backup_valid);
	pool_destroy(p, b);
	ASSERT_EQ(live, 0);
	ASSERT_UEQ(b->used_bytes, 0);

	/* Whole saves: a second mapper, a persistent pool, or a saver that
	 * does not save in parts. */
	p = make_shared(b, 2, false);
	pool_mapper_find(p, A)->save_parts = true;
	expect_send(pause_(p, b), POOL_ROUND_SAVE, p, 1, 1);
	ASSERT(!p->save_parts);
	ASSERT_EQ(pool_save_progress(p, b, A, 1), 0u);
	ASSERT_EQ(live, 2);
	pool_destroy(p, b);
	struct identity a = who(1);
	ASSERT_OK(pool_create(2, "q", "weights", 0, POOL_HOST, POOL_FLAG_PERSIST,
			      64ull * GRAN, NULL, A, &a, &p));
	ASSERT_OK(pool_mapper_add(p, A, &a, false));
	ASSERT_OK(pool_grow(p, b, 2ull * GRAN, GRAN, 240, &first));
	pool_mapper_find(p, A)->save_parts = true;
	expect_send(pause_(p, b), POOL_ROUND_SAVE, p, 1, 1);
	ASSERT(!p->save_parts);
	pool_destroy(p, b);
	p = make_pool(POOL_HOST);
	ASSERT_OK(pool_grow(p, b, 2ull * GRAN, GRAN, 240, &first));
	expect_send(pause_(p, b), POOL_ROUND_SAVE, p, 1, 1);
	ASSERT(!p->save_parts);
	ASSERT_EQ(pool_save_progress(p, b, A, 1), 0u);
	pool_destroy(p, b);
	ASSERT_EQ(live, 0);
	backend_destroy(b);
}
