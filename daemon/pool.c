/* The pool state machine. See pool.h for the transitions. */
#include "pool.h"

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
	case POOL_ACTIVE: return "active";
	case POOL_PAUSING: return "pausing";
	case POOL_PAUSED: return "paused";
	case POOL_RESUMING: return "resuming";
	}
	return "?";
}

static void pool_set_state(struct pool *p, enum pool_state s)
{
	if (p->state != s)
		log_debug("pool %s: %s -> %s", p->name, pool_state_name(p->state),
			  pool_state_name(s));
	p->state = s;
}

int pool_create(uint64_t id, const char *name, const char *tag,
		unsigned device, enum pool_policy policy, unsigned flags,
		uint64_t reserve, struct session *owner,
		const struct identity *owner_id, struct pool **out)
{
	struct pool *p;

	if (!name[0] || strlen(name) >= POOL_NAME_MAX ||
	    strlen(tag) >= POOL_TAG_MAX || (flags & ~POOL_FLAGS_ALL) ||
	    reserve == 0 || (policy != POOL_DISCARD && policy != POOL_HOST))
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
	if (policy == POOL_HOST) {
		/* Sparse: host memory is used only where a pause writes. */
		p->backup_fd = memfd_create("vramd-backup", MFD_CLOEXEC);
		if (p->backup_fd < 0 || ftruncate(p->backup_fd, (off_t)reserve) < 0) {
			int r = -errno;
			if (p->backup_fd >= 0)
				close(p->backup_fd);
			free(p);
			return r;
		}
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
	if (p->backup_fd >= 0)
		close(p->backup_fd);
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

/* Starts a round: every mapper (or, when keep_pending, only those still
 * owing an ack) owes one for event_id. */
static unsigned pool_round_start(struct pool *p, uint64_t event_id,
				 bool keep_pending)
{
	p->event_id = event_id;
	p->pending = 0;
	p->round_err = 0;
	for (struct mapper *m = p->mappers; m; m = m->next) {
		if (!keep_pending) {
			m->pending = true;
			m->ack_err = 0;
		}
		m->backup = false;
		if (m->pending)
			p->pending++;
	}
	return p->pending;
}

/* The mapper that saves or restores the backup: the owner if it maps the
 * pool read-write, else the first read-write mapper. */
static struct mapper *pool_backup_mapper(struct pool *p)
{
	struct mapper *first = NULL;
	for (struct mapper *m = p->mappers; m; m = m->next) {
		if (m->readonly)
			continue;
		if (p->owner && m->session == p->owner)
			return m;
		if (!first)
			first = m;
	}
	return first;
}

int pool_pause_begin(struct pool *p, uint64_t event_id)
{
	struct mapper *bm = NULL;

	switch (p->state) {
	case POOL_PAUSED:
		return -EALREADY;
	case POOL_RESUMING:
		return -EBUSY;
	case POOL_PAUSING:
		if (p->undoing)
			return -EBUSY;
		/* Wait again for those who missed the deadline or failed. */
		for (struct mapper *m = p->mappers; m; m = m->next)
			if (m->ack_err)
				m->pending = true;
		pool_round_start(p, event_id, true);
		if (p->saving) {
			bm = pool_backup_mapper(p);
			if (bm && bm->pending)
				bm->backup = true;
		}
		return (int)p->pending;
	case POOL_ACTIVE:
		break;
	}
	if (p->policy == POOL_HOST && p->bytes) {
		bm = pool_backup_mapper(p);
		if (!bm)
			return -EPIPE;
	}
	p->undoing = false;
	p->backup_valid = false;
	pool_set_state(p, POOL_PAUSING);
	if (!bm)
		return (int)pool_round_start(p, event_id, false);
	/* Two rounds when content must be kept: the saver saves first, alone
	 * and still mapped, so that if it cannot save (or dies saving) nobody
	 * has unmapped and the pool goes back to ACTIVE with its content;
	 * then every mapper unmaps. */
	pool_round_start(p, event_id, false);
	for (struct mapper *m = p->mappers; m; m = m->next)
		m->pending = m == bm;
	p->pending = 1;
	bm->backup = true;
	p->saving = true;
	return 1;
}

int pool_pause_continue(struct pool *p, uint64_t event_id)
{
	if (p->state != POOL_PAUSING || !p->saving || p->pending || p->round_err)
		return -EINVAL;
	p->saving = false;
	/* The content is saved: every mapper, the saver too, unmaps now. */
	p->event_id = event_id;
	for (struct mapper *m = p->mappers; m; m = m->next) {
		m->backup = false;
		m->ack_err = 0;
		m->pending = true;
	}
	p->pending = 0;
	for (struct mapper *m = p->mappers; m; m = m->next)
		if (m->pending)
			p->pending++;
	return (int)p->pending;
}

int pool_release_early(struct pool *p, struct backend *b)
{
	if (p->state != POOL_PAUSING || p->saving)
		return -EBUSY;
	/* Counted until pause_finish: a mapper late to unmap still holds it. */
	for (unsigned i = 0; i < p->n_chunks; i++)
		backend_chunk_unref(b, p->device, &p->chunks[i]);
	return 0;
}

int pool_pause_abort(struct pool *p)
{
	if (p->state != POOL_PAUSING || !p->saving || p->pending || !p->round_err)
		return -EINVAL;
	/* Only the saver was asked anything, and saving unmaps nothing (a
	 * saver that died took only its own mapping). */
	p->saving = false;
	p->round_err = 0;
	for (struct mapper *m = p->mappers; m; m = m->next) {
		m->backup = false;
		m->ack_err = 0;
	}
	pool_set_state(p, POOL_ACTIVE);
	return 0;
}

int64_t pool_pause_finish(struct pool *p, struct backend *b)
{
	if (p->state != POOL_PAUSING)
		return -EINVAL;
	if (p->pending || p->round_err || p->saving)
		return -EBUSY;
	pool_release_chunks(p, b, 0);
	/* After an undone resume the backup was never overwritten. */
	p->backup_valid = p->policy == POOL_HOST;
	p->undoing = false;
	pool_set_state(p, POOL_PAUSED);
	return (int64_t)p->bytes;
}

int pool_resume_begin(struct pool *p, struct backend *b, uint64_t event_id)
{
	struct mapper *bm = NULL;
	unsigned i;
	int r;

	switch (p->state) {
	case POOL_ACTIVE:
		return -EALREADY;
	case POOL_PAUSING:
		return -EBUSY;
	case POOL_RESUMING:
		for (struct mapper *m = p->mappers; m; m = m->next)
			if (m->ack_err)
				return -EBUSY; /* being undone */
		return (int)pool_round_start(p, event_id, true);
	case POOL_PAUSED:
		break;
	}
	if (p->backup_valid && p->bytes) {
		bm = pool_backup_mapper(p);
		if (!bm)
			return -EPIPE;
	}
	for (i = 0; i < p->n_chunks; i++) {
		r = backend_chunk_create(b, p->device, &p->chunks[i]);
		if (r < 0)
			goto undo;
	}
	pool_round_start(p, event_id, false);
	if (bm)
		bm->backup = true;
	pool_set_state(p, POOL_RESUMING);
	return (int)p->pending;

undo:
	for (unsigned k = 0; k < i; k++)
		backend_chunk_release(b, p->device, &p->chunks[k]);
	return r;
}

int pool_resume_finish(struct pool *p)
{
	if (p->state != POOL_RESUMING)
		return -EINVAL;
	if (p->pending)
		return -EBUSY;
	if (p->round_err)
		return -EIO;
	p->backup_valid = false;
	pool_set_state(p, POOL_ACTIVE);
	return 0;
}

int pool_resume_undo(struct pool *p, uint64_t event_id)
{
	if (p->state != POOL_RESUMING || p->pending || !p->round_err)
		return -EINVAL;
	/* A mapper that failed has unmapped what it mapped; the others must
	 * unmap again, without saving (the backup still holds the content). */
	p->event_id = event_id;
	p->pending = 0;
	for (struct mapper *m = p->mappers; m; m = m->next) {
		m->pending = m->ack_err == 0;
		m->backup = false;
		m->ack_err = 0;
		if (m->pending)
			p->pending++;
	}
	p->round_err = 0;
	p->undoing = true;
	pool_set_state(p, POOL_PAUSING);
	return (int)p->pending;
}

int pool_ack(struct pool *p, struct session *s, uint64_t event_id, int err)
{
	struct mapper *m = pool_mapper_find(p, s);
	if (!m || !m->pending || event_id != p->event_id)
		return 0;
	m->pending = false;
	m->ack_err = err;
	p->pending--;
	if (err && !p->round_err)
		p->round_err = err;
	return 1;
}
