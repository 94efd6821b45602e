/* SPDX-License-Identifier: Apache-2.0 */
/* The pool state machine: its states, and every edge between them (the
 * diagram is in pool.h). */
#include "pool.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"

const char *pool_state_name(enum pool_state s)
{
	switch (s) {
	case POOL_ACTIVE:
		return "active";
	case POOL_PAUSING_SAVE:
	case POOL_PAUSING_UNMAP:
	case POOL_PAUSING_UNDO_SAVE:
	case POOL_PAUSING_UNDO:
		return "pausing";
	case POOL_PAUSED:
		return "paused";
	case POOL_RESUMING_RESTORE:
	case POOL_RESUMING_MAP:
		return "resuming";
	}
	return "?";
}

/* The sub-state too, for the log. */
static const char *pool_state_detail(enum pool_state s)
{
	switch (s) {
	case POOL_PAUSING_SAVE:
		return "pausing (saving)";
	case POOL_PAUSING_UNMAP:
		return "pausing (unmapping)";
	case POOL_PAUSING_UNDO_SAVE:
		return "pausing (undoing a resume, saving)";
	case POOL_PAUSING_UNDO:
		return "pausing (undoing a resume, unmapping)";
	case POOL_RESUMING_RESTORE:
		return "resuming (restoring)";
	case POOL_RESUMING_MAP:
		return "resuming (mapping)";
	case POOL_ACTIVE:
	case POOL_PAUSED:
		break;
	}
	return pool_state_name(s);
}

void pool_backup_release_due(struct pool *p)
{
	int r;

	if (!p->backup_release_due)
		return;
	p->backup_release_due = false;
	/* A pause since then made the backup hold the content again. */
	if (p->backup_valid || p->backup_fd < 0)
		return;
	/* Off the loop (backup.h); synchronously only if no worker can. */
	r = backup_release_start(p->backup_fd, &p->backup_job);
	if (r < 0)
		r = backup_release(p->backup_fd);
	if (r < 0)
		log_warn("pool %s: cannot release its backup: %s", p->name,
			 strerror(-r));
}

bool pool_in_transition(const struct pool *p)
{
	return p->state != POOL_ACTIVE && p->state != POOL_PAUSED;
}

static void pool_set_state(struct pool *p, enum pool_state s)
{
	if (p->state != s)
		log_debug("pool %s: %s -> %s", p->name,
			  pool_state_detail(p->state), pool_state_detail(s));
	p->state = s;
}

bool pool_keeps_content(const struct pool *p)
{
	return p->policy == POOL_HOST || p->policy == POOL_DISK;
}

uint64_t pool_backup_unwritten(const struct pool *p)
{
	if (p->policy != POOL_HOST || (p->state != POOL_PAUSING_SAVE &&
				       p->state != POOL_PAUSING_UNDO_SAVE))
		return 0;
	uint64_t held = backup_held(p->backup_fd);
	return p->bytes > held ? p->bytes - held : 0;
}

uint64_t pool_backup_held(const struct pool *p)
{
	/* A release under way gives every page back without a pause in
	 * between (one would stop it): they count as gone already, so what
	 * a list right after the resume shows does not depend on how far
	 * the worker got. */
	if (p->backup_job)
		return 0;
	return backup_held(p->backup_fd);
}

int pool_create(uint64_t id, const char *name, const char *tag,
		unsigned device, enum pool_policy policy, unsigned flags,
		uint64_t reserve, const char *backup_dir,
		struct session *owner, const struct identity *owner_id,
		struct pool **out)
{
	struct pool *p;

	if (!name[0] || strlen(name) >= POOL_NAME_MAX ||
	    strlen(tag) >= POOL_TAG_MAX || (flags & ~POOL_FLAGS_ALL) ||
	    reserve == 0 ||
	    (policy != POOL_DISCARD && policy != POOL_HOST && policy != POOL_DISK))
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->id = id;
	snprintf(p->name, sizeof(p->name), "%s", name);
	snprintf(p->tag, sizeof(p->tag), "%s", tag);
	p->device = device;
	p->policy = policy;
	p->flags = flags;
	p->reserve = reserve;
	p->state = POOL_ACTIVE;
	p->backup_fd = -1;
	p->owner = owner;
	p->owner_id = *owner_id;
	if (policy != POOL_DISCARD) {
		/* Sparse: memory or disk is used only where a pause writes. */
		int fd = backup_create(backup_dir, id, name, reserve,
				       policy == POOL_DISK ? p->backup_path :
							     NULL);
		if (fd < 0) {
			free(p);
			return fd;
		}
		p->backup_fd = fd;
	}
	*out = p;
	return 0;
}

static void pool_release_chunks(struct pool *p, struct backend *b,
				unsigned from)
{
	for (unsigned i = from; i < p->n_chunks; i++)
		backend_chunk_release(b, p->device, &p->chunks[i]);
}

void pool_destroy(struct pool *p, struct backend *b)
{
	if (!p)
		return;
	pool_release_chunks(p, b, 0);
	free(p->chunks);
	backup_job_stop(&p->backup_job);
	backup_destroy(p->backup_fd, p->backup_path);
	while (p->mappers) {
		struct mapper *m = p->mappers;
		p->mappers = m->next;
		free(m);
	}
	free(p);
}

struct mapper *pool_mapper_find(struct pool *p, struct session *s)
{
	for (struct mapper *m = p->mappers; m; m = m->next)
		if (m->session == s)
			return m;
	return NULL;
}

unsigned pool_mapper_count(const struct pool *p)
{
	unsigned n = 0;
	for (const struct mapper *m = p->mappers; m; m = m->next)
		n++;
	return n;
}

int pool_mapper_add(struct pool *p, struct session *s,
		    const struct identity *who, bool readonly)
{
	if (pool_mapper_find(p, s))
		return -EEXIST;
	struct mapper *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->session = s;
	m->who = *who;
	m->readonly = readonly;
	/* Appended, so the owner (first) stays the backup mapper. */
	struct mapper **tail = &p->mappers;
	while (*tail)
		tail = &(*tail)->next;
	*tail = m;
	return 0;
}

int pool_mapper_remove(struct pool *p, struct session *s)
{
	for (struct mapper **mp = &p->mappers; *mp; mp = &(*mp)->next) {
		struct mapper *m = *mp;
		if (m->session != s)
			continue;
		if (m->pending) {
			assert(p->pending > 0);
			p->pending--;
			/* Its copy of the content (saving) or into the chunks
			 * (restoring) is lost with it: the round has failed. */
			if (m->backup && !p->round_err)
				p->round_err = EPIPE;
		}
		*mp = m->next;
		free(m);
		return 1;
	}
	return 0;
}

void pool_set_owner(struct pool *p, struct session *s,
		    const struct identity *who)
{
	p->owner = s;
	/* An owner back after a restart has finished any save it began. */
	if (s)
		p->save_cut = false;
	if (who)
		p->owner_id = *who;
	else
		p->owner_id.pid = 0;
}

static int pool_reserve_chunks(struct pool *p, unsigned n)
{
	if (n <= p->cap_chunks)
		return 0;
	unsigned cap = p->cap_chunks ? p->cap_chunks : 8;
	while (cap < n)
		cap *= 2;
	struct chunk *c = realloc(p->chunks, cap * sizeof(*c));
	if (!c)
		return -ENOMEM;
	p->chunks = c;
	p->cap_chunks = cap;
	return 0;
}

int pool_grow(struct pool *p, struct backend *b, uint64_t bytes,
	      uint64_t chunk_max, unsigned max_chunks, unsigned *first)
{
	uint64_t gran, left;
	unsigned n0 = p->n_chunks;
	int r;

	if (p->state != POOL_ACTIVE)
		return -EBUSY;
	if (p->device >= b->n_devices)
		return -ENODEV;
	gran = b->devices[p->device].granularity;
	if (bytes == 0 || bytes > p->reserve)
		return -EINVAL;
	left = (bytes + gran - 1) / gran * gran;
	chunk_max = chunk_max / gran * gran;
	if (chunk_max == 0)
		chunk_max = gran;
	if (left > p->reserve - p->bytes)
		return -ENOSPC;
	/* Count first so that nothing is made when the limit would stop us. */
	if ((left + chunk_max - 1) / chunk_max > max_chunks - n0 || n0 > max_chunks)
		return -ENOSPC;
	r = pool_reserve_chunks(p, n0 + (unsigned)((left + chunk_max - 1) / chunk_max));
	if (r < 0)
		return r;

	uint64_t offset = p->bytes;
	while (left) {
		struct chunk *c = &p->chunks[p->n_chunks];
		c->offset = offset;
		c->size = left < chunk_max ? left : chunk_max;
		c->fd = -1;
		c->handle = 0;
		c->counted = false;
		r = backend_chunk_create(b, p->device, c);
		if (r < 0)
			goto undo;
		p->n_chunks++;
		offset += c->size;
		left -= c->size;
	}
	p->bytes = offset;
	*first = n0;
	return 0;

undo:
	pool_release_chunks(p, b, n0);
	p->n_chunks = n0;
	return r;
}

/* Opens a round under a new event id for the mappers whose pending flag
 * the caller set: counts them and clears the round's errors; bm, if it
 * owes, also saves or restores the backup. Returns the acks owed. */
static unsigned pool_round_open(struct pool *p, uint64_t *event_ids,
				struct mapper *bm)
{
	p->event_id = ++*event_ids;
	p->pending = 0;
	p->round_err = 0;
	for (struct mapper *m = p->mappers; m; m = m->next) {
		m->backup = m == bm && m->pending;
		m->ack_err = 0;
		if (m->pending)
			p->pending++;
	}
	return p->pending;
}

/* The mapper asked to save or restore in the current round, or NULL. */
static struct mapper *pool_round_backup(struct pool *p)
{
	for (struct mapper *m = p->mappers; m; m = m->next)
		if (m->backup)
			return m;
	return NULL;
}

/* The current round again, for those that still owe an ack or failed it
 * (a round that missed its deadline, or a retry). */
static unsigned pool_round_again(struct pool *p, uint64_t *event_ids)
{
	struct mapper *bm = pool_round_backup(p);

	for (struct mapper *m = p->mappers; m; m = m->next)
		if (m->ack_err)
			m->pending = true;
	return pool_round_open(p, event_ids, bm);
}

/* The mapper that saves or restores the backup: the owner if it maps the
 * pool read-write, else the first read-write mapper. With mapped_only,
 * only among those that did not fail the last round (an undo's saver must
 * map the pool). */
static struct mapper *pool_saver(struct pool *p, bool mapped_only)
{
	struct mapper *first = NULL;
	for (struct mapper *m = p->mappers; m; m = m->next) {
		if (m->readonly || (mapped_only && m->ack_err))
			continue;
		if (p->owner && m->session == p->owner)
			return m;
		if (!first)
			first = m;
	}
	return first;
}

static enum pool_step pool_send(struct pool_next *next, enum pool_round round)
{
	next->round = round;
	return POOL_STEP_SEND;
}

static enum pool_step pool_done(struct pool_next *next, uint64_t bytes)
{
	next->bytes = bytes;
	return POOL_STEP_DONE;
}

static enum pool_step pool_fail(struct pool_next *next, int err,
				const char *why)
{
	next->err = err;
	next->why = why;
	return POOL_STEP_FAILED;
}

/* Enters s (PAUSING_SAVE or PAUSING_UNDO_SAVE): bm alone saves, still
 * mapped, so that if it cannot (or dies saving) nobody has unmapped and
 * the pool goes back to ACTIVE with its content. The backup is being
 * overwritten: it is trusted again only once PAUSED. */
static enum pool_step pool_save_round(struct pool *p, uint64_t *event_ids,
				      struct pool_next *next, enum pool_state s,
				      struct mapper *bm)
{
	/* A release still punching must not touch what this save writes. */
	backup_job_stop(&p->backup_job);
	p->backup_valid = false;
	pool_set_state(p, s);
	/* In parts only where nobody else maps the chunks (a chunk let go
	 * of is freed by the saver's unmap alone) and where a saver that
	 * dies takes the pool with it (its owner, not persistent): the
	 * chunks let go of are then in the backup, the rest still held. */
	p->save_parts = s == POOL_PAUSING_SAVE && p->policy == POOL_HOST &&
			bm->save_parts && p->owner == bm->session &&
			!(p->flags & POOL_FLAG_PERSIST) &&
			pool_mapper_count(p) == 1;
	p->saved = 0;
	p->save_failed = false;
	for (struct mapper *m = p->mappers; m; m = m->next)
		m->pending = m == bm;
	pool_round_open(p, event_ids, bm);
	return pool_send(next, POOL_ROUND_SAVE);
}

/* Enters s (PAUSING_UNMAP or PAUSING_UNDO): every mapper unmaps (one that
 * has nothing mapped acks at once). The content is saved or not kept, so
 * the daemon lets go of its chunks now (their fds, or the handles holding
 * them where an idle pool let the fds go: fd_drop.h) and the last mapper
 * to unmap frees the memory in its own process, the driver's fast path
 * (on the H200 a 16 GiB pause took 10 ms when the daemon's close freed
 * it, 7 ms in-process); the bytes stay counted until PAUSED, as a mapper
 * late to unmap still holds them. */
static enum pool_step pool_unmap_round(struct pool *p, struct backend *b,
				       uint64_t *event_ids,
				       struct pool_next *next, enum pool_state s)
{
	pool_set_state(p, s);
	for (struct mapper *m = p->mappers; m; m = m->next)
		m->pending = true;
	for (unsigned i = 0; i < p->n_chunks; i++)
		backend_chunk_unref(b, p->device, &p->chunks[i]);
	if (pool_round_open(p, event_ids, NULL) == 0)
		return pool_advance(p, b, event_ids, next);
	return pool_send(next, POOL_ROUND_PAUSE);
}

/* Enters RESUMING_MAP: every mapper but skip (the restorer, which maps
 * already) is sent the chunks. */
static enum pool_step pool_map_round(struct pool *p, struct backend *b,
				     uint64_t *event_ids,
				     struct pool_next *next, struct mapper *skip)
{
	pool_set_state(p, POOL_RESUMING_MAP);
	for (struct mapper *m = p->mappers; m; m = m->next)
		m->pending = m != skip;
	if (pool_round_open(p, event_ids, NULL) == 0)
		return pool_advance(p, b, event_ids, next);
	return pool_send(next, POOL_ROUND_RESUME);
}

/* PAUSED: the daemon drops its chunk fds, so the device memory is free
 * once the mappers have unmapped. Returns the bytes released. */
static uint64_t pool_paused(struct pool *p, struct backend *b)
{
	pool_release_chunks(p, b, 0);
	p->save_parts = p->save_failed = false;
	p->saved = 0;
	p->backup_valid = pool_keeps_content(p);
	/* The saver synced a disk backup before it acked: its pages are
	 * clean, and dropping them from the page cache is cheap. */
	if (p->policy == POOL_DISK)
		backup_settle(p->backup_fd);
	p->undo_err = 0;
	pool_set_state(p, POOL_PAUSED);
	return p->bytes;
}

enum pool_step pool_pause(struct pool *p, struct backend *b,
			  uint64_t *event_ids, uint64_t backup_pending,
			  struct pool_next *next)
{
	struct mapper *bm = NULL;

	switch (p->state) {
	case POOL_PAUSED:
		return pool_fail(next, EALREADY, "it is already paused");
	case POOL_RESUMING_RESTORE:
	case POOL_RESUMING_MAP:
		return pool_fail(next, EBUSY, "it is resuming");
	case POOL_PAUSING_UNDO_SAVE:
		/* Nobody waits for the undone resume any more (its request
		 * is over): this pause carries it on. */
		pool_set_state(p, POOL_PAUSING_SAVE);
		p->undo_err = 0;
		/* fall through */
	case POOL_PAUSING_SAVE:
		/* A save in parts that failed: the same saver saves the
		 * rest (chunks from p->saved). Its owner's going away drops
		 * the pool, so it is still there. */
		if (p->saved && !pool_round_backup(p))
			return pool_fail(next, EPIPE,
					 "its save in parts lost its saver");
		p->save_failed = false;
		if (pool_round_again(p, event_ids) == 0)
			return pool_advance(p, b, event_ids, next);
		return pool_send(next, POOL_ROUND_SAVE);
	case POOL_PAUSING_UNDO:
		pool_set_state(p, POOL_PAUSING_UNMAP);
		p->undo_err = 0;
		/* fall through */
	case POOL_PAUSING_UNMAP:
		if (pool_round_again(p, event_ids) == 0)
			return pool_advance(p, b, event_ids, next);
		return pool_send(next, POOL_ROUND_PAUSE);
	case POOL_ACTIVE:
		break;
	}
	p->undo_err = 0;
	if (pool_keeps_content(p) && p->bytes) {
		bm = pool_saver(p, false);
		if (!bm)
			return pool_fail(next, EPIPE,
					 "it keeps a host backup but no "
					 "read-write mapper is attached to "
					 "save it");
		uint64_t avail;
		if (p->policy == POOL_HOST &&
		    backup_room(p->backup_fd, p->bytes + backup_pending,
				&avail) < 0) {
			log_warn("pool %s: its backup needs %llu MiB, its "
				 "file system has %llu MiB free, of which "
				 "saves under way take %llu MiB",
				 p->name, (unsigned long long)(p->bytes >> 20),
				 (unsigned long long)(avail >> 20),
				 (unsigned long long)(backup_pending >> 20));
			return pool_fail(next, ENOSPC,
					 "its host backup does not fit in what "
					 "is free of host_backup_dir; it stays "
					 "active");
		}
		return pool_save_round(p, event_ids, next, POOL_PAUSING_SAVE,
				       bm);
	}
	return pool_unmap_round(p, b, event_ids, next, POOL_PAUSING_UNMAP);
}

/* Makes the resume's chunks from p->made up to upto, counting each in
 * p->made: on failure (-errno) p->made is the first not made. */
static int pool_make_chunks(struct pool *p, struct backend *b, unsigned upto)
{
	for (; p->made < upto; p->made++) {
		int r = backend_chunk_create(b, p->device,
					     &p->chunks[p->made]);
		if (r < 0)
			return r;
	}
	return 0;
}

/* A resume whose chunks could not be made (err, positive): it stays
 * PAUSED with its backup. */
static enum pool_step pool_fail_make(struct pool_next *next, int err)
{
	return pool_fail(next, err,
			 err == ENOMEM ?
			 "its device has not enough free memory for it; it "
			 "stays paused with its backup" :
			 "its chunks could not be made; it stays paused with "
			 "its backup");
}

enum pool_step pool_resume(struct pool *p, struct backend *b,
			   uint64_t *event_ids, struct pool_next *next)
{
	struct mapper *bm = NULL;
	int r;

	switch (p->state) {
	case POOL_ACTIVE:
		return pool_fail(next, EALREADY, "it is already active");
	case POOL_PAUSING_SAVE:
	case POOL_PAUSING_UNMAP:
	case POOL_PAUSING_UNDO_SAVE:
	case POOL_PAUSING_UNDO:
		return pool_fail(next, EBUSY, "it is pausing");
	case POOL_RESUMING_RESTORE:
	case POOL_RESUMING_MAP:
		if (p->round_err)
			return pool_fail(next, EBUSY,
					 "a mapper failed to map it; the resume "
					 "is being undone");
		/* A restore in parts starts over with what is made, and
		 * tries again to make the rest as it goes. */
		p->make_err = 0;
		if (pool_round_again(p, event_ids) == 0)
			return pool_advance(p, b, event_ids, next);
		return pool_send(next, POOL_ROUND_RESUME);
	case POOL_PAUSED:
		break;
	}
	if (p->save_cut)
		return pool_fail(next, EBUSY,
				 "a restart of vramd cut its save in parts "
				 "short and its owner, which may still be "
				 "saving, has not come back; it stays paused "
				 "until it does or the grace period is over");
	if (p->backup_valid && p->bytes) {
		bm = pool_saver(p, false);
		if (!bm)
			return pool_fail(next, EPIPE,
					 "it must be restored from its host "
					 "backup but no read-write mapper is "
					 "attached to restore it");
	}
	/* A restorer that takes the chunks in parts gets the first few now
	 * and each later one as it restores (pool_resume_progress): the
	 * creates spread over the copy, as an engine's own allocations
	 * would, and the driver keeps clearing what another process freed
	 * meanwhile (docs/gpu.md, "A resume in parts"). */
	unsigned make = p->n_chunks;
	if (bm && bm->parts && make > POOL_PARTS_AHEAD)
		make = POOL_PARTS_AHEAD;
	p->made = 0;
	r = pool_make_chunks(p, b, make);
	if (r < 0) {
		pool_release_chunks(p, b, 0);
		return pool_fail_make(next, -r);
	}
	p->make_err = 0;
	p->undo_err = 0;
	if (!bm)
		return pool_map_round(p, b, event_ids, next, NULL);
	/* The restorer first, alone: the others are sent the chunks only
	 * once they hold the content, so none of them ever sees (or writes
	 * into) a pool the restore has not finished with. */
	pool_set_state(p, POOL_RESUMING_RESTORE);
	for (struct mapper *m = p->mappers; m; m = m->next)
		m->pending = m == bm;
	pool_round_open(p, event_ids, bm);
	return pool_send(next, POOL_ROUND_RESUME);
}

enum pool_step pool_advance(struct pool *p, struct backend *b,
			    uint64_t *event_ids, struct pool_next *next)
{
	int err = p->round_err;
	struct mapper *bm;

	if (p->pending)
		return POOL_STEP_WAIT;
	switch (p->state) {
	case POOL_ACTIVE:
	case POOL_PAUSED:
		return POOL_STEP_WAIT;
	case POOL_PAUSING_SAVE:
		if (!err)
			return pool_unmap_round(p, b, event_ids, next,
						POOL_PAUSING_UNMAP);
		if (p->saved) {
			/* Those let go of are in the backup, the rest still
			 * held and mapped by the saver. */
			p->save_failed = true;
			return pool_fail(next, err,
					 "the mapper saving its backup in parts "
					 "failed after some chunks were saved and "
					 "released; it stays pausing with the rest "
					 "(pause again to save it)");
		}
		/* Only the saver was asked anything, and saving unmaps
		 * nothing (a saver that died took only its own mapping). */
		pool_set_state(p, POOL_ACTIVE);
		return pool_fail(next, err,
				 err == EPIPE ?
				 "the mapper saving its backup went away; it "
				 "stays active with its content" :
				 "the mapper saving its backup failed; it stays "
				 "active with its content");
	case POOL_PAUSING_UNMAP:
		if (err)
			return pool_fail(next, err,
					 "a mapper failed to pause it; it "
					 "stays pausing, its memory held by "
					 "what a mapper still maps (pause "
					 "again to retry)");
		return pool_done(next, pool_paused(p, b));
	case POOL_RESUMING_RESTORE:
		/* A restorer in parts that acks before it was sent every
		 * chunk restored only some of the pool. */
		if (!err && p->made < p->n_chunks)
			err = EPROTO;
		if (!err)
			return pool_map_round(p, b, event_ids, next,
					      pool_round_backup(p));
		/* The restorer unmapped what it mapped (or died with it), and
		 * nobody else was sent the chunks: back to PAUSED with the
		 * backup as it was (chunks never made hold nothing). */
		pool_release_chunks(p, b, 0);
		pool_set_state(p, POOL_PAUSED);
		if (p->make_err) {
			err = p->make_err;
			p->make_err = 0;
			return pool_fail_make(next, err);
		}
		if (err == EPROTO)
			return pool_fail(next, err,
					 "the mapper restoring its backup acked "
					 "before it was sent every chunk; it stays "
					 "paused with its backup");
		return pool_fail(next, err,
				 err == EPIPE ?
				 "the mapper restoring its backup went away; it "
				 "stays paused with its backup" :
				 "the mapper restoring its backup failed; it "
				 "stays paused with its backup");
	case POOL_RESUMING_MAP:
		if (!err) {
			p->backup_valid = false;
			pool_set_state(p, POOL_ACTIVE);
			/* Every mapper holds the restored content: unless the
			 * pool retains it, the backup's pages may go back (the
			 * restorer unregistered them before it acked), once
			 * the new state is on record. */
			p->backup_release_due = p->backup_fd >= 0 &&
				(p->flags & POOL_FLAG_RELEASE_BACKUP);
			return pool_done(next, p->bytes);
		}
		/* A mapper could not map: pause again. The chunks hold the
		 * content now (restored, and maybe written since), so a host
		 * pool saves it once more, by a mapper that maps it. */
		p->undo_err = err;
		bm = NULL;
		if (pool_keeps_content(p) && p->bytes)
			bm = pool_saver(p, true);
		if (bm)
			return pool_save_round(p, event_ids, next,
					       POOL_PAUSING_UNDO_SAVE, bm);
		return pool_unmap_round(p, b, event_ids, next,
					POOL_PAUSING_UNDO);
	case POOL_PAUSING_UNDO_SAVE:
		if (!err)
			return pool_unmap_round(p, b, event_ids, next,
						POOL_PAUSING_UNDO);
		/* The old backup is overwritten in part and the chunks hold
		 * the content: keep them. */
		pool_set_state(p, POOL_ACTIVE);
		p->undo_err = 0;
		return pool_fail(next, err,
				 "a mapper failed to map it, and saving it "
				 "again failed; it stays active, unmapped in "
				 "that mapper");
	case POOL_PAUSING_UNDO:
		if (err)
			return pool_fail(next, err,
					 "a mapper failed to map it, then one "
					 "failed to unmap it; it stays pausing "
					 "(pause again to retry)");
		err = p->undo_err;
		pool_paused(p, b);
		return pool_fail(next, err,
				 pool_keeps_content(p) ?
				 "a mapper failed to map it; it is paused "
				 "again with its content" :
				 "a mapper failed to map it; it is paused "
				 "again");
	}
	return POOL_STEP_WAIT;
}

enum pool_step pool_resume_progress(struct pool *p, struct backend *b,
				    const struct session *s, unsigned restored,
				    struct pool_next *next)
{
	struct mapper *bm = pool_round_backup(p);

	if (p->state != POOL_RESUMING_RESTORE || !bm || !bm->pending ||
	    bm->session != s || p->make_err || restored > p->made)
		return POOL_STEP_WAIT;
	unsigned due = p->n_chunks - restored < POOL_PARTS_AHEAD ?
			       p->n_chunks :
			       restored + POOL_PARTS_AHEAD;
	if (p->made >= due)
		return POOL_STEP_WAIT;
	next->first = p->made;
	int r = pool_make_chunks(p, b, due);
	if (r < 0) {
		/* Only the error goes: what this call made is released with
		 * the rest once the restorer has failed the round. */
		p->make_err = -r;
		next->first = p->made;
	}
	return pool_send(next, POOL_ROUND_RESUME_MORE);
}

unsigned pool_save_progress(struct pool *p, struct backend *b,
			    const struct session *s, unsigned saved)
{
	struct mapper *bm = pool_round_backup(p);

	if (p->state != POOL_PAUSING_SAVE || !p->save_parts || !bm ||
	    !bm->pending || bm->session != s || saved > p->n_chunks ||
	    saved <= p->saved)
		return 0;
	unsigned from = p->saved;
	for (unsigned i = from; i < saved; i++)
		backend_chunk_unref(b, p->device, &p->chunks[i]);
	p->saved = saved;
	return saved - from;
}

int pool_ack(struct pool *p, struct session *s, uint64_t event_id, int err)
{
	struct mapper *m = pool_mapper_find(p, s);
	if (!m || !m->pending || event_id != p->event_id)
		return 0;
	assert(p->pending > 0);
	m->pending = false;
	m->ack_err = err;
	p->pending--;
	if (err && !p->round_err)
		p->round_err = err;
	return 1;
}
