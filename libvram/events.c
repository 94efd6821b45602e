/* SPDX-License-Identifier: Apache-2.0 */
/* Events from the daemon: pause, resume, grow and drop of a pool this
 * process maps. They run in the reader, with the client's lock held, in
 * the order the daemon sent them; they never wait on the daemon: the ack
 * an event wants is returned, and the reader (call.c) sends it. See docs/protocol.md, "Events".
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "clock.h"
#include "events.h"
#include "log.h"
#include "mapping.h"
#include "pool.h"
#include "suballoc.h"

/* The bytes of the chunks an event lists (a SAVE lists the pool's layout,
 * without fds). */
static uint64_t events_bytes(const Vram__Event *ev)
{
	uint64_t n = 0;

	for (size_t i = 0; i < ev->n_chunks; i++)
		if (ev->chunks[i])
			n += ev->chunks[i]->size;
	return n;
}

/* A SAVE with release: each chunk's copy is issued on lane k % 2 and only
 * then is the one before it waited for, unmapped and reported, so the
 * device always has the next copy queued while the daemon lets go of the
 * chunk before and the driver clears it; clearing then is over by the
 * resume, whose copies it would slow (docs/gpu.md, "The pause as a
 * pipeline"). The last chunk is unmapped too and goes with the ack. Every
 * copy is made whatever the daemon says meanwhile (a reply is read only
 * after this returns), so a daemon that restarts during it finds the
 * backup whole (daemon/recover.c). On failure what is under way is waited
 * for and nothing more is unmapped: those reported are saved, the rest
 * stays mapped for a retry. */
static int events_save_parts(struct vram_pool *p, const Vram__Event *ev,
			     const struct events_ack *ack)
{
	struct mapping *m = &p->map;
	size_t older = SIZE_MAX;
	int r = 0;

	mapping_ahead_start(m);
	for (size_t k = 0; k <= m->n_chunks && r == 0; k++) {
		if (k < m->n_chunks) {
			if (!m->chunks[k].mapped)
				continue;
			r = mapping_copy_issue(m, 1, k, k + 1, k % VMM_LANES);
			if (r < 0)
				break;
		}
		if (older == SIZE_MAX) {
			older = k;
			continue;
		}
		r = mapping_copy_wait(m, older % VMM_LANES);
		if (r == 0)
			r = mapping_unmap_chunk(m, older);
		if (r == 0 && k < m->n_chunks && ack->progress)
			ack->progress(p->client, ev->event_id,
				      (uint32_t)older + 1);
		older = k;
	}
	mapping_ahead_finish(m);
	if (r < 0)
		mapping_copies_drain(m);
	return r;
}

/* SAVE (and, without an event, the first half of PAUSE): wait for the
 * device and, given the SAVE, copy the pool into its backup, refusing
 * when this process maps fewer bytes than the SAVE lists. Nothing is
 * unmapped, so a failure here loses nothing: the error goes back in the
 * ack; but a SAVE with release unmaps each chunk once saved
 * (events_save_parts). */
static int events_save(struct vram_client *c, struct vram_pool *p,
		       const Vram__Event *ev, const struct events_ack *ack,
		       char *msg, size_t msglen)
{
	struct vmm *v = c->vmm;
	uint64_t expect = ev ? events_bytes(ev) : 0;
	int r;

	if (p->dropped)
		return 0;
	r = v->ops->sync(v, p->dev);
	if (r < 0) {
		snprintf(msg, msglen, "waiting for device %u failed: %s",
			 p->dev, strerror(-r));
		return r;
	}
	if (!ev)
		return 0;
	/* A save that misses part of the pool would be trusted as whole. */
	if (mapping_bytes_mapped(&p->map) < expect) {
		snprintf(
			msg, msglen,
			"pool %s: only %llu of its %llu bytes are mapped here; "
			"cannot save it",
			p->name,
			(unsigned long long)mapping_bytes_mapped(&p->map),
			(unsigned long long)expect);
		return -EIO;
	}
	if (mapping_n_mapped(&p->map) == 0)
		return 0;
	if (!p->map.backup || p->readonly) {
		snprintf(
			msg, msglen,
			"asked to save pool %s but it has no writable backup here",
			p->name);
		return -ENODEV;
	}
	int64_t t0 = clock_now_ns();
	uint64_t bytes = mapping_bytes_mapped(&p->map);
	r = ev->release ? events_save_parts(p, ev, ack) : mapping_save(&p->map);
	if (r < 0)
		snprintf(msg, msglen, "saving pool %s to its backup failed: %s",
			 p->name, strerror(-r));
	else
		log_write(VRAM_LOG_DEBUG, "pool %s: saved %llu MiB in %.2f ms%s",
			  p->name, (unsigned long long)(bytes >> 20),
			  clock_lap_ms(&t0),
			  ev->release ? ", in parts" : "");
	return r;
}

/* PAUSE: wait for the device, then unmap every chunk (the range stays).
 * If the wait fails nothing is unmapped and the pool stays ACTIVE here;
 * once the unmapping starts it is PAUSED whatever happens. The backup is
 * saved by the SAVE round before (docs/protocol.md): a PAUSE that asks to
 * save is refused, unmapping nothing, since a save here would skip SAVE's
 * check that this process maps all of the pool. */
static int events_pause(struct vram_client *c, struct vram_pool *p, bool backup,
			char *msg, size_t msglen)
{
	int r;

	if (backup) {
		snprintf(msg, msglen,
			 "pool %s: a PAUSE that asks to save (vramd saves in a "
			 "SAVE round first); nothing unmapped",
			 p->name);
		return -EPROTO;
	}
	r = events_save(c, p, NULL, NULL, msg, msglen);

	if (r < 0 || p->dropped)
		return r;
	r = mapping_unmap_all(&p->map);
	p->state = VRAM_STATE_PAUSED;
	if (r < 0)
		snprintf(msg, msglen, "unmapping pool %s failed: %s", p->name,
			 strerror(-r));
	return r;
}

/* Issues chunk k's copy of a restore in parts, on lane k % 2. */
static int events_parts_issue(struct vram_pool *p, size_t k)
{
	int64_t now = clock_now_ns();

	if (k == 0)
		p->parts_start_ns = now;
	else if (p->parts_waited == p->parts_issued && p->parts_idle_ns)
		p->parts_gap_ns += now - p->parts_idle_ns;
	p->parts_issued = k + 1;
	return mapping_copy_issue(&p->map, 0, k, k + 1, k % VMM_LANES);
}

/* Waits for the oldest chunk's copy under way; tells the daemon that it
 * is restored unless it is the last (its ack follows). */
static int events_parts_wait(struct vram_pool *p, const Vram__Event *ev,
			     const struct events_ack *ack)
{
	size_t k = p->parts_waited;
	int r = mapping_copy_wait(&p->map, k % VMM_LANES);

	p->parts_waited = k + 1;
	if (p->parts_waited == p->parts_issued)
		p->parts_idle_ns = clock_now_ns();
	if (r == 0 && (ev->more || k + 1 < p->map.n_chunks) && ack->progress)
		ack->progress(p->client, ev->event_id, (uint32_t)k + 1);
	return r;
}

/* Restores chunks [from, n) of a resume in parts as a pipeline: each
 * chunk's copy is issued, and only then is the one before it waited for
 * and reported to the daemon, which makes the next ones as they are due.
 * So the device has the next copy queued while this one runs, and the
 * next chunk is mapped (in the event that brings it) while it copies.
 * The last chunk of an event stays on the device until the next event,
 * or, in the last event, is waited for here. On failure the caller
 * unmaps, which waits for what is still on the device. */
static int events_restore_parts(struct vram_pool *p, const Vram__Event *ev,
				size_t from, const struct events_ack *ack)
{
	size_t n = p->map.n_chunks, waited = p->parts_waited;
	int r = 0;

	for (size_t k = from; k < n && r == 0; k++) {
		r = events_parts_issue(p, k);
		if (r == 0 && p->parts_waited < k)
			r = events_parts_wait(p, ev, ack);
	}
	/* The daemon makes more only once told of a chunk restored: an event
	 * that brought the first chunk alone waits for it here. */
	if (r == 0 && ev->more && p->parts_waited == waited &&
	    p->parts_waited < p->parts_issued)
		r = events_parts_wait(p, ev, ack);
	while (r == 0 && !ev->more && p->parts_waited < p->parts_issued)
		r = events_parts_wait(p, ev, ack);
	return r;
}

/* -EPROTO with its message when a resume brings fewer bytes than this
 * owner has allocated from the pool, else 0. */
static int events_layout_short(const struct vram_pool *p, uint64_t bytes,
			       char *msg, size_t msglen)
{
	if (!p->owner || bytes >= p->sa.size)
		return 0;
	snprintf(msg, msglen,
		 "resume of pool %s brings %llu bytes, %llu are allocated",
		 p->name, (unsigned long long)bytes,
		 (unsigned long long)p->sa.size);
	return -EPROTO;
}

/* A RESUME's end, once every chunk is mapped (and restored): the backup
 * given back if it goes, the pool ACTIVE. */
static int events_resumed(struct vram_pool *p, bool restored, char *msg,
			  size_t msglen)
{
	int r = events_layout_short(p, p->map.size, msg, msglen);
	if (r < 0) {
		mapping_unmap_all(&p->map);
		return r;
	}
	/* Restored: a backup to be released leaves this process now and its
	 * pins go on a thread (mapping_backup_give_back), so that the ack is
	 * not held up and the daemon's release (once every mapper maps the
	 * pool) frees its pages. */
	if (restored && (p->flags & VRAM_POOL_RELEASE_BACKUP))
		mapping_backup_give_back(&p->map);
	p->size = p->map.size;
	p->state = VRAM_STATE_ACTIVE;
	if (p->owner && p->map.size > p->sa.size)
		suballoc_grow(&p->sa, p->map.size);
	return 0;
}

/* RESUME: map the chunks carried at their offsets, restore the backup if
 * asked. With more set, the rest of the chunks come in RESUME_MORE events
 * of the same id (events_resume_more) and the ack waits for the last: the
 * event wants no ack now (1 is returned in *later). On failure whatever
 * was mapped is unmapped again and the pool stays PAUSED. */
static int events_resume(struct vram_pool *p, const Vram__Event *ev,
			 const struct wire_frame *f, const struct events_ack *ack,
			 bool *later, char *msg, size_t msglen)
{
	struct mapping_desc *d = NULL;
	int r;

	p->parts_event = 0;
	p->parts_issued = p->parts_waited = 0;
	p->parts_start_ns = p->parts_idle_ns = p->parts_gap_ns = 0;
	if (p->dropped)
		return 0;
	if (mapping_n_mapped(&p->map) > 0) {
		/* Resumed while we still map old chunks: they are stale (or a
		 * restore in parts starts over). */
		log_write(VRAM_LOG_WARN,
			  "pool %s resumed while mapped; remapping", p->name);
		mapping_unmap_all(&p->map);
	}
	if (ev->more && (!ev->backup || !ack->progress)) {
		snprintf(msg, msglen,
			 "resume of pool %s in parts without a restore",
			 p->name);
		return -EPROTO;
	}
	r = mapping_descs_from_wire(ev->chunks, ev->n_chunks, f, &d);
	if (r < 0) {
		snprintf(msg, msglen, "resume of pool %s: bad chunk list",
			 p->name);
		return r;
	}
	/* All of it in this event: refused before anything is mapped. */
	if (!ev->more) {
		uint64_t total = 0;
		for (size_t i = 0; i < ev->n_chunks; i++)
			total += d[i].size;
		r = events_layout_short(p, total, msg, msglen);
		if (r < 0) {
			free(d);
			return r;
		}
	}
	int64_t t0 = clock_now_ns();
	double map_ms, restore_ms = 0;
	r = mapping_remap(&p->map, d, ev->n_chunks);
	free(d);
	map_ms = clock_lap_ms(&t0);
	if (r < 0) {
		snprintf(msg, msglen, "mapping pool %s failed: %s", p->name,
			 strerror(-r));
		return r;
	}
	if (ev->backup) {
		if (!p->map.backup || p->readonly)
			r = -ENODEV;
		else if (ev->more)
			r = events_restore_parts(p, ev, 0, ack);
		else
			r = mapping_restore(&p->map);
		restore_ms = clock_lap_ms(&t0);
		if (r < 0) {
			snprintf(msg, msglen,
				 "restoring pool %s from its backup failed: %s",
				 p->name, strerror(-r));
			mapping_unmap_all(&p->map);
			return r;
		}
	}
	log_write(VRAM_LOG_DEBUG,
		  "pool %s: mapped %zu chunk(s), %llu MiB, in %.2f ms; "
		  "restored in %.2f ms%s",
		  p->name, ev->n_chunks,
		  (unsigned long long)(p->map.size >> 20), map_ms, restore_ms,
		  ev->more ? "; more to come" : "");
	if (ev->more) {
		p->parts_event = ev->event_id;
		*later = true;
		return 0;
	}
	return events_resumed(p, ev->backup, msg, msglen);
}

/* RESUME_MORE: the next chunks of the restore in parts under way, or the
 * daemon's word that it could not make them (the pool is unmapped and the
 * error acked). One for a restore no longer under way here (started over,
 * dropped) is stale: ignored. */
static int events_resume_more(struct vram_pool *p, const Vram__Event *ev,
			      const struct wire_frame *f,
			      const struct events_ack *ack, bool *later,
			      char *msg, size_t msglen)
{
	struct mapping_desc *d = NULL;
	size_t from = p->map.n_chunks;
	int r;

	if (p->dropped || p->parts_event != ev->event_id) {
		log_write(VRAM_LOG_DEBUG,
			  "pool %s: stale RESUME_MORE %llu ignored", p->name,
			  (unsigned long long)ev->event_id);
		*later = true;
		return 0;
	}
	p->parts_event = 0;
	if (ev->err) {
		snprintf(msg, msglen,
			 "vramd could not make the rest of pool %s: %s",
			 p->name, strerror(ev->err));
		mapping_unmap_all(&p->map);
		return -ev->err;
	}
	r = mapping_descs_from_wire(ev->chunks, ev->n_chunks, f, &d);
	if (r == 0)
		r = mapping_append(&p->map, d, ev->n_chunks, 1);
	free(d);
	if (r < 0) {
		snprintf(msg, msglen, "mapping more of pool %s failed: %s",
			 p->name, strerror(-r));
	} else {
		r = events_restore_parts(p, ev, from, ack);
		if (r < 0)
			snprintf(msg, msglen,
				 "restoring pool %s from its backup failed: %s",
				 p->name, strerror(-r));
	}
	if (r < 0) {
		mapping_unmap_all(&p->map);
		return r;
	}
	if (ev->more) {
		p->parts_event = ev->event_id;
		*later = true;
		return 0;
	}
	log_write(VRAM_LOG_DEBUG,
		  "pool %s: restored in parts, %zu chunk(s): copies %.2f ms, "
		  "between them %.2f ms with none queued",
		  p->name, p->map.n_chunks,
		  (p->parts_idle_ns - p->parts_start_ns - p->parts_gap_ns) /
			  1e6,
		  p->parts_gap_ns / 1e6);
	return events_resumed(p, true, msg, msglen);
}

/* GROW: the owner grew the pool; map the new chunks. Chunks this process
 * already has (the owner's own) are skipped. */
static void events_grow(struct vram_pool *p,
			const Vram__Event *ev, const struct wire_frame *f)
{
	struct mapping_desc *d = NULL;
	size_t first = 0;
	int r;

	if (p->dropped)
		return;
	r = mapping_descs_from_wire(ev->chunks, ev->n_chunks, f, &d);
	if (r < 0) {
		log_write(VRAM_LOG_ERROR, "grow of pool %s: bad chunk list",
			  p->name);
		return;
	}
	while (first < ev->n_chunks && d[first].offset < p->map.size)
		first++;
	if (first < ev->n_chunks) {
		int map = p->state == VRAM_STATE_ACTIVE;
		r = mapping_append(&p->map, d + first, ev->n_chunks - first,
				   map);
		if (r < 0)
			log_write(
				VRAM_LOG_ERROR,
				"mapping %zu new chunks of pool %s failed: %s",
				ev->n_chunks - first, p->name, strerror(-r));
		else
			p->size = p->map.size;
	}
	free(d);
}

/* DROP: the pool is gone. Its memory goes, its range stays reserved until
 * the handle is closed, so stale pointers fault instead of landing in
 * something else. */
static void events_drop(struct vram_client *c, struct vram_pool *p)
{
	mapping_unmap_all(&p->map);
	mapping_backup_release(&p->map);
	p->parts_event = 0;
	p->dropped = true;
	p->state = VRAM_STATE_PAUSED;
	pthread_cond_broadcast(&c->cond);
	log_write(VRAM_LOG_INFO, "pool %s was dropped", p->name);
}

/* Logs how an event that wants an ack went, and fills its ack. Returns 1:
 * the ack is owed. */
static int events_answer(const Vram__Event *ev, const char *what, int r,
			 const char *msg, struct events_ack *ack)
{
	log_write(r < 0 ? VRAM_LOG_ERROR : VRAM_LOG_DEBUG,
		  "%s of pool %llu: %s", what, (unsigned long long)ev->pool_id,
		  r < 0 ? msg : "done");
	ack->event_id = ev->event_id;
	ack->err = r;
	snprintf(ack->message, sizeof(ack->message), "%s", msg);
	return 1;
}

int events_handle(struct vram_client *c, const Vram__Event *ev,
		  const struct wire_frame *f, struct events_ack *ack)
{
	struct vram_pool *p = pool_find(c, ev->pool_id);
	char msg[sizeof(ack->message)] = "";
	bool later = false; /* a resume in parts: the ack comes with the last */
	int r = 0;

	switch (ev->kind) {
	case VRAM__EVENT_KIND__EVENT_PAUSE:
		/* A pool not mapped here (closed a moment ago) has nothing to
		 * release: done. */
		if (p)
			r = events_pause(c, p, ev->backup, msg, sizeof(msg));
		return events_answer(ev, "pause", r, msg, ack);
	case VRAM__EVENT_KIND__EVENT_SAVE:
		if (p)
			r = events_save(c, p, ev, ack, msg, sizeof(msg));
		return events_answer(ev, "save", r, msg, ack);
	case VRAM__EVENT_KIND__EVENT_RESUME:
		if (p)
			r = events_resume(p, ev, f, ack, &later, msg,
					  sizeof(msg));
		if (later)
			return 0;
		return events_answer(ev, "resume", r, msg, ack);
	case VRAM__EVENT_KIND__EVENT_RESUME_MORE:
		if (p)
			r = events_resume_more(p, ev, f, ack, &later, msg,
					       sizeof(msg));
		else
			later = true; /* closed here: its close told the daemon */
		if (later)
			return 0;
		return events_answer(ev, "resume", r, msg, ack);
	case VRAM__EVENT_KIND__EVENT_GROW:
		if (p)
			events_grow(p, ev, f);
		return 0;
	case VRAM__EVENT_KIND__EVENT_DROP:
		if (p)
			events_drop(c, p);
		return 0;
	default:
		/* A newer daemon's event: say so rather than leave it waiting. */
		log_write(VRAM_LOG_WARN, "unknown event kind %d",
			  (int)ev->kind);
		if (!ev->event_id)
			return 0;
		ack->event_id = ev->event_id;
		ack->err = -EOPNOTSUPP;
		snprintf(ack->message, sizeof(ack->message),
			 "unknown event kind");
		return 1;
	}
}
