/* The pool state machine: every transition, and a failure injected at
 * each step leaves a consistent state that can be retried. A fake backend
 * counts chunks and fails the Nth create on demand. */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend.h"
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

static void fake_release(struct backend *b, unsigned dev, struct chunk *c)
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

static struct pool *make_pool(enum pool_policy policy)
{
	struct pool *p;
	struct identity a = who(1);
	ASSERT_OK(pool_create(1, "p", "weights", 0, policy, 0, 64ull * GRAN, A,
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
	ASSERT_EQ(pool_create(1, "", "t", 0, POOL_DISCARD, 0, GRAN, A, &a, &p), -EINVAL);
	ASSERT_EQ(pool_create(1, longname, "t", 0, POOL_DISCARD, 0, GRAN, A, &a, &p), -EINVAL);
	ASSERT_EQ(pool_create(1, "n", "t", 0, POOL_DISCARD, 0x80, GRAN, A, &a, &p), -EINVAL);
	ASSERT_EQ(pool_create(1, "n", "t", 0, 7, 0, GRAN, A, &a, &p), -EINVAL);
	ASSERT_EQ(pool_create(1, "n", "t", 0, POOL_DISCARD, 0, 0, A, &a, &p), -EINVAL);
	ASSERT_OK(pool_create(1, "n", "t", 0, POOL_HOST, 0, GRAN, A, &a, &p));
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

TEST(pause_resume_cycle_two_mappers)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *p = make_pool(POOL_HOST);
	struct identity bw = who(2);
	unsigned first;

	ASSERT_OK(pool_grow(p, b, 3ull * GRAN, GRAN, 240, &first));
	ASSERT_OK(pool_mapper_add(p, B, &bw, true));
	ASSERT_EQ(pool_mapper_add(p, B, &bw, true), -EEXIST);

	/* First round: the owner alone saves the backup. */
	ASSERT_EQ(pool_pause_begin(p, 10), 1);
	ASSERT_EQ(p->state, POOL_PAUSING);
	ASSERT(pool_mapper_find(p, A)->backup);
	ASSERT(pool_mapper_find(p, A)->pending);
	ASSERT(!pool_mapper_find(p, B)->pending);
	ASSERT_EQ(pool_pause_finish(p, b), -EBUSY);
	ASSERT_EQ(pool_pause_continue(p, 11), -EINVAL); /* saver not done */
	ASSERT_EQ(pool_ack(p, A, 9, 0), 0); /* wrong event */
	ASSERT_EQ(pool_ack(p, C, 10, 0), 0); /* not a mapper */
	ASSERT_EQ(pool_ack(p, B, 10, 0), 0); /* not asked yet */
	ASSERT_EQ(pool_ack(p, A, 10, 0), 1);
	ASSERT_EQ(pool_ack(p, A, 10, 0), 0); /* twice */
	ASSERT_EQ(pool_pause_finish(p, b), -EBUSY); /* still saving */
	/* Second round: everyone, the saver too, unmaps without saving. */
	ASSERT_EQ(pool_pause_continue(p, 11), 2);
	ASSERT(!pool_mapper_find(p, B)->backup);
	ASSERT(!pool_mapper_find(p, A)->backup);
	ASSERT(pool_mapper_find(p, A)->pending);
	ASSERT_EQ(pool_pause_finish(p, b), -EBUSY);
	ASSERT_EQ(pool_ack(p, B, 10, 0), 0); /* the old round */
	ASSERT_EQ(pool_ack(p, B, 11, 0), 1);
	ASSERT_EQ(pool_pause_finish(p, b), -EBUSY);
	ASSERT_EQ(pool_ack(p, A, 11, 0), 1);
	ASSERT_EQ(pool_pause_finish(p, b), (int64_t)3 * GRAN);
	ASSERT_EQ(p->state, POOL_PAUSED);
	ASSERT(p->backup_valid);
	ASSERT_EQ(live, 0);
	ASSERT_UEQ(b->used_bytes, 0);
	ASSERT_UEQ(p->bytes, 3ull * GRAN); /* the size is kept */
	ASSERT_EQ(pool_pause_begin(p, 11), -EALREADY);
	ASSERT_EQ(pool_grow(p, b, GRAN, GRAN, 240, &first), -EBUSY);

	ASSERT_EQ(pool_resume_begin(p, b, 12), 2);
	ASSERT_EQ(p->state, POOL_RESUMING);
	ASSERT_EQ(live, 3);
	ASSERT(pool_mapper_find(p, A)->backup);
	ASSERT_EQ(pool_pause_begin(p, 13), -EBUSY);
	ASSERT_EQ(pool_resume_finish(p), -EBUSY);
	pool_ack(p, A, 12, 0);
	pool_ack(p, B, 12, 0);
	ASSERT_OK(pool_resume_finish(p));
	ASSERT_EQ(p->state, POOL_ACTIVE);
	ASSERT(!p->backup_valid);
	ASSERT_EQ(pool_resume_begin(p, b, 14), -EALREADY);
	pool_destroy(p, b);
	backend_destroy(b);
}

TEST(resume_out_of_memory_stays_paused_and_retries)
{
	struct backend *b = fake_backend(8ull * GRAN);
	struct pool *p = make_pool(POOL_HOST);
	unsigned first;

	ASSERT_OK(pool_grow(p, b, 4ull * GRAN, GRAN, 240, &first));
	ASSERT_EQ(pool_pause_begin(p, 1), 1);
	pool_ack(p, A, 1, 0);
	ASSERT_EQ(pool_pause_continue(p, 9), 1); /* the saver unmaps */
	pool_ack(p, A, 9, 0);
	ASSERT_EQ(pool_pause_finish(p, b), (int64_t)4 * GRAN);
	/* Fail each create step in turn: always PAUSED, nothing held. */
	for (int step = 0; step < 4; step++) {
		fail_at = creates + step;
		ASSERT_EQ(pool_resume_begin(p, b, 2), -ENOMEM);
		ASSERT_EQ(p->state, POOL_PAUSED);
		ASSERT(p->backup_valid);
		ASSERT_EQ(live, 0);
		ASSERT_UEQ(b->used_bytes, 0);
	}
	fail_at = -1;
	ASSERT_EQ(pool_resume_begin(p, b, 3), 1);
	pool_ack(p, A, 3, 0);
	ASSERT_OK(pool_resume_finish(p));
	ASSERT_EQ(live, 4);
	pool_destroy(p, b);
	backend_destroy(b);
}

TEST(mapper_failing_resume_is_undone_to_paused)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *p = make_pool(POOL_HOST);
	struct identity bw = who(2);
	unsigned first;

	ASSERT_OK(pool_grow(p, b, 2ull * GRAN, GRAN, 240, &first));
	ASSERT_OK(pool_mapper_add(p, B, &bw, false));
	ASSERT_EQ(pool_pause_begin(p, 1), 1);
	pool_ack(p, A, 1, 0);
	ASSERT_EQ(pool_pause_continue(p, 10), 2);
	pool_ack(p, A, 10, 0);
	pool_ack(p, B, 10, 0);
	ASSERT(pool_pause_finish(p, b) > 0);
	ASSERT_EQ(pool_resume_begin(p, b, 2), 2);
	pool_ack(p, A, 2, 0);
	pool_ack(p, B, 2, ENOMEM); /* B could not map */
	ASSERT_EQ(pool_resume_finish(p), -EIO);
	ASSERT_EQ(p->state, POOL_RESUMING);
	/* Undo: only A (which mapped) must unmap again, without saving. */
	ASSERT_EQ(pool_resume_undo(p, 3), 1);
	ASSERT_EQ(p->state, POOL_PAUSING);
	ASSERT(pool_mapper_find(p, A)->pending);
	ASSERT(!pool_mapper_find(p, A)->backup);
	ASSERT(!pool_mapper_find(p, B)->pending);
	ASSERT_EQ(pool_pause_begin(p, 4), -EBUSY); /* undo in progress */
	pool_ack(p, A, 3, 0);
	ASSERT(pool_pause_finish(p, b) > 0);
	ASSERT_EQ(p->state, POOL_PAUSED);
	ASSERT(p->backup_valid); /* the content is still in the backup */
	ASSERT_EQ(live, 0);
	/* And it can be resumed again. */
	ASSERT_EQ(pool_resume_begin(p, b, 5), 2);
	pool_ack(p, A, 5, 0);
	pool_ack(p, B, 5, 0);
	ASSERT_OK(pool_resume_finish(p));
	pool_destroy(p, b);
	backend_destroy(b);
}

TEST(pause_mapper_failure_keeps_chunks_and_retries)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *p = make_pool(POOL_HOST);
	struct identity bw = who(2);
	unsigned first;

	ASSERT_OK(pool_grow(p, b, 2ull * GRAN, GRAN, 240, &first));
	ASSERT_OK(pool_mapper_add(p, B, &bw, false));
	/* The saver cannot save: nobody else was asked to unmap, so the
	 * pool goes back to ACTIVE with its content. */
	ASSERT_EQ(pool_pause_begin(p, 1), 1);
	pool_ack(p, A, 1, EIO);
	ASSERT_EQ(pool_pause_continue(p, 2), -EINVAL);
	ASSERT_EQ(pool_pause_finish(p, b), -EBUSY);
	ASSERT_OK(pool_pause_abort(p));
	ASSERT_EQ(p->state, POOL_ACTIVE);
	ASSERT_EQ(live, 2);
	/* Saved this time; then B fails to unmap: the pool stays PAUSING with
	 * its chunks, and pausing again asks only B. */
	ASSERT_EQ(pool_pause_begin(p, 3), 1);
	pool_ack(p, A, 3, 0);
	ASSERT_EQ(pool_pause_continue(p, 4), 2);
	pool_ack(p, A, 4, 0);
	pool_ack(p, B, 4, EIO);
	ASSERT_EQ(pool_pause_finish(p, b), -EBUSY);
	ASSERT_EQ(p->state, POOL_PAUSING);
	ASSERT_EQ(live, 2);
	ASSERT_EQ(pool_pause_begin(p, 5), 1);
	ASSERT(!pool_mapper_find(p, A)->pending);
	ASSERT(pool_mapper_find(p, B)->pending);
	ASSERT(!pool_mapper_find(p, B)->backup);
	pool_ack(p, B, 5, 0);
	ASSERT(pool_pause_finish(p, b) > 0);
	ASSERT_EQ(p->state, POOL_PAUSED);
	ASSERT(p->backup_valid);
	ASSERT_EQ(live, 0);
	pool_destroy(p, b);
	backend_destroy(b);
}

/* The saver dies while saving: its half-made backup is not trusted, the
 * pool is ACTIVE again and nothing was released. The restorer dies while
 * restoring: the resume is undone and the backup is kept. */
TEST(saver_or_restorer_dying_loses_nothing)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *p = make_pool(POOL_HOST);
	struct identity bw = who(2), cw = who(3);
	unsigned first;

	ASSERT_OK(pool_grow(p, b, 2ull * GRAN, GRAN, 240, &first));
	ASSERT_OK(pool_mapper_add(p, B, &bw, false));
	ASSERT_EQ(pool_pause_begin(p, 1), 1);
	ASSERT_EQ(pool_mapper_remove(p, A), 1); /* the saver dies */
	pool_set_owner(p, NULL, NULL);
	ASSERT_EQ(p->pending, 0);
	ASSERT_EQ(p->round_err, EPIPE);
	ASSERT_OK(pool_pause_abort(p));
	ASSERT_EQ(p->state, POOL_ACTIVE);
	ASSERT(!p->backup_valid);
	ASSERT_EQ(live, 2);

	/* B becomes the saver. */
	ASSERT_EQ(pool_pause_begin(p, 2), 1);
	ASSERT(pool_mapper_find(p, B)->backup);
	pool_ack(p, B, 2, 0);
	ASSERT_EQ(pool_pause_continue(p, 3), 1);
	pool_ack(p, B, 3, 0);
	ASSERT(pool_pause_finish(p, b) > 0);
	ASSERT(p->backup_valid);

	/* C joins; B restores on resume and dies doing it. */
	ASSERT_OK(pool_mapper_add(p, C, &cw, false));
	ASSERT_EQ(pool_resume_begin(p, b, 4), 2);
	ASSERT(pool_mapper_find(p, B)->backup);
	pool_ack(p, C, 4, 0);
	ASSERT_EQ(pool_mapper_remove(p, B), 1);
	ASSERT_EQ(pool_resume_finish(p), -EIO);
	ASSERT_EQ(pool_resume_undo(p, 5), 1); /* C unmaps again */
	pool_ack(p, C, 5, 0);
	ASSERT(pool_pause_finish(p, b) > 0);
	ASSERT_EQ(p->state, POOL_PAUSED);
	ASSERT(p->backup_valid);
	ASSERT_EQ(live, 0);
	pool_destroy(p, b);
	backend_destroy(b);
}

TEST(missed_deadline_then_late_ack_and_dead_mapper)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *p = make_pool(POOL_DISCARD);
	struct identity bw = who(2), cw = who(3);
	unsigned first;

	ASSERT_OK(pool_grow(p, b, GRAN, GRAN, 240, &first));
	ASSERT_OK(pool_mapper_add(p, B, &bw, false));
	ASSERT_OK(pool_mapper_add(p, C, &cw, false));
	ASSERT_EQ(pool_pause_begin(p, 1), 3);
	pool_ack(p, A, 1, 0);
	/* Deadline passes: pausing again waits only for B and C. */
	ASSERT_EQ(pool_pause_begin(p, 2), 2);
	ASSERT_EQ(pool_ack(p, B, 1, 0), 0); /* late ack of the old round */
	ASSERT_EQ(pool_ack(p, B, 2, 0), 1);
	/* C dies: a dead mapper maps nothing, so it counts as done. */
	ASSERT_EQ(pool_mapper_remove(p, C), 1);
	ASSERT_EQ(pool_mapper_remove(p, C), 0);
	ASSERT_EQ(p->pending, 0);
	ASSERT(pool_pause_finish(p, b) > 0);
	ASSERT_EQ(pool_mapper_count(p), 2);
	pool_destroy(p, b);
	backend_destroy(b);
}

TEST(host_pool_needs_a_writer_to_save)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *p = make_pool(POOL_HOST);
	struct identity bw = who(2);
	unsigned first;

	ASSERT_OK(pool_grow(p, b, GRAN, GRAN, 240, &first));
	ASSERT_OK(pool_mapper_add(p, B, &bw, true));
	pool_mapper_remove(p, A);
	pool_set_owner(p, NULL, NULL);
	ASSERT_EQ(pool_pause_begin(p, 1), -EPIPE);
	ASSERT_EQ(p->state, POOL_ACTIVE);
	ASSERT_EQ(live, 1);
	/* A discard pool needs no writer. */
	struct pool *q = make_pool(POOL_DISCARD);
	pool_mapper_remove(q, A);
	ASSERT_EQ(pool_pause_begin(q, 2), 0);
	ASSERT_EQ(pool_pause_finish(q, b), 0);
	pool_destroy(q, b);
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
	ASSERT_EQ(pool_pause_begin(p, 1), 1);
	ASSERT(pool_mapper_find(p, B)->backup);
	pool_destroy(p, b);
	ASSERT_EQ(live, 0);
	backend_destroy(b);
}

/* The daemon lets go of a pool's chunks as soon as no content depends on
 * it, so the last mapper frees the memory; never while a saver works. */
TEST(early_release_only_when_nothing_is_saved)
{
	struct backend *b = fake_backend(64ull * GRAN);
	struct pool *kv = make_pool(POOL_DISCARD);
	unsigned first;

	ASSERT_OK(pool_grow(kv, b, 2ull * GRAN, GRAN, 240, &first));
	ASSERT_EQ(pool_release_early(kv, b), -EBUSY); /* ACTIVE */
	ASSERT_EQ(pool_pause_begin(kv, 1), 1);
	ASSERT_OK(pool_release_early(kv, b));
	ASSERT_EQ(live, 0);
	/* Still counted: a mapper may not have unmapped yet. */
	ASSERT_UEQ(b->used_bytes, 2ull * GRAN);
	ASSERT_EQ(kv->state, POOL_PAUSING);
	pool_ack(kv, A, 1, 0);
	ASSERT_EQ(pool_pause_finish(kv, b), (int64_t)2 * GRAN);
	ASSERT_UEQ(b->used_bytes, 0);
	/* Resume makes chunks again. */
	ASSERT_EQ(pool_resume_begin(kv, b, 2), 1);
	ASSERT_EQ(live, 2);
	pool_ack(kv, A, 2, 0);
	ASSERT_OK(pool_resume_finish(kv));

	struct pool *w = make_pool(POOL_HOST);
	ASSERT_OK(pool_grow(w, b, GRAN, GRAN, 240, &first));
	ASSERT_EQ(pool_pause_begin(w, 3), 1);
	ASSERT_EQ(pool_release_early(w, b), -EBUSY); /* the saver is at work */
	ASSERT_EQ(live, 3);
	pool_ack(w, A, 3, 0);
	ASSERT_EQ(pool_pause_continue(w, 4), 1);
	ASSERT_OK(pool_release_early(w, b));
	ASSERT_EQ(live, 2);
	pool_ack(w, A, 4, 0);
	ASSERT(pool_pause_finish(w, b) > 0);
	pool_destroy(w, b);
	pool_destroy(kv, b);
	ASSERT_EQ(live, 0);
	backend_destroy(b);
}
