/* A pool: named, tagged memory on one device, made of chunks, owned by one
 * session and mapped by any number. This file's pool.c is the only place
 * that assigns a pool's state; every transition checks the current state
 * first and leaves a consistent state when any step fails:
 *
 *   ACTIVE  --pause_begin-->  PAUSING --(all acked) pause_finish--> PAUSED
 *   PAUSING (saver failed) --pause_abort--> ACTIVE
 *   PAUSED  --resume_begin--> RESUMING --(all acked) resume_finish--> ACTIVE
 *   RESUMING --(a mapper failed) resume_undo--> PAUSING --> PAUSED
 *
 * A failed resume_begin (the device is full) leaves the pool PAUSED with its
 * backup. A round of events that misses its deadline leaves the pool where
 * it is (PAUSING or RESUMING); later acks still complete it.
 *
 * Sessions are opaque here: the pool only compares their pointers.
 */
#ifndef VRAMD_POOL_H
#define VRAMD_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"

#define POOL_NAME_MAX 128
#define POOL_TAG_MAX 64
#define POOL_FLAG_PERSIST 0x1u
#define POOL_FLAGS_ALL POOL_FLAG_PERSIST

enum pool_state { POOL_ACTIVE, POOL_PAUSING, POOL_PAUSED, POOL_RESUMING };
enum pool_policy { POOL_DISCARD, POOL_HOST };

struct session;
struct transition_item;

struct identity {
	uint32_t pid, uid, gid;
	char name[64];
};

struct mapper {
	struct mapper *next;
	struct session *session;
	struct identity who;
	bool readonly;
	bool pending;   /* owes an ack for the pool's current round */
	bool backup;    /* asked to save (pause) or restore (resume) */
	int ack_err;    /* positive errno from its last ack */
};

struct pool {
	uint64_t id;
	char name[POOL_NAME_MAX];
	char tag[POOL_TAG_MAX];
	unsigned device;
	enum pool_policy policy;
	unsigned flags;
	uint64_t reserve;  /* virtual range size */
	enum pool_state state;

	struct chunk *chunks;
	unsigned n_chunks, cap_chunks;
	uint64_t bytes;    /* sum of chunk sizes, kept while paused */

	int backup_fd;     /* memfd of reserve bytes, -1 for discard */
	bool backup_valid; /* the backup holds the content (paused) */

	struct session *owner; /* NULL when orphaned */
	struct identity owner_id;
	struct mapper *mappers;

	/* Current round of events. */
	uint64_t event_id;
	unsigned pending;
	bool undoing;      /* pausing again after a failed resume */
	bool saving;       /* first round of a host pause: the saver alone */
	int round_err;     /* first mapper error of the round */
	struct transition_item *op; /* the request waiting on it, or NULL */
};

/* Makes an ACTIVE pool with no chunks; for POOL_HOST also its backup memfd
 * (sparse, reserve bytes). The caller owns it until pool_destroy. */
int pool_create(uint64_t id, const char *name, const char *tag,
		unsigned device, enum pool_policy policy, unsigned flags,
		uint64_t reserve, struct session *owner,
		const struct identity *owner_id, struct pool **out);

/* Releases every chunk and the backup and frees the pool. NULL is a no-op. */
void pool_destroy(struct pool *p, struct backend *b);

/* Adds a mapper (the session maps the pool from now on). -EEXIST if it
 * already does, -ENOMEM. */
int pool_mapper_add(struct pool *p, struct session *s,
		    const struct identity *who, bool readonly);
struct mapper *pool_mapper_find(struct pool *p, struct session *s);
/* Removes a mapper; one that owed an ack counts as done (a session that
 * is gone maps nothing), except the one saving or restoring the backup:
 * its round fails (EPIPE), so a half-made backup is never trusted and a
 * half-restored pool is paused again. Returns 1 if it was a mapper. */
int pool_mapper_remove(struct pool *p, struct session *s);
unsigned pool_mapper_count(const struct pool *p);

/* Adds chunks of at most chunk_max bytes (multiples of the device
 * granularity) until the pool holds at least bytes more. ACTIVE only
 * (-EBUSY). On failure every chunk made by this call is released and the
 * pool is as before (-ENOMEM: device full; -ENOSPC: over max_chunks or the
 * reserve). *first gets the index of the first new chunk. */
int pool_grow(struct pool *p, struct backend *b, uint64_t bytes,
	      uint64_t chunk_max, unsigned max_chunks, unsigned *first);

/* ACTIVE -> PAUSING: every mapper owes an ack for event_id; one is asked
 * to save the backup (POOL_HOST). Already PAUSING (a round that missed
 * its deadline): keeps the mappers that still owe an ack, under the new
 * event_id. Returns the number of acks owed (0: pause_finish may run now),
 * -EALREADY when PAUSED, -EBUSY when RESUMING, -EPIPE when a POOL_HOST
 * pool with content has no read-write mapper to save it. */
int pool_pause_begin(struct pool *p, uint64_t event_id);

/* A host-policy pause runs two rounds: pause_begin asks only the saver to
 * save (it stays mapped); when it has acked, pause_continue asks every
 * mapper, the saver too, to unmap (returns acks owed). If the saver failed
 * or went away, pause_abort puts the pool back to ACTIVE: nobody unmapped
 * and the daemon still holds the chunks, so no content is lost. */
int pool_pause_continue(struct pool *p, uint64_t event_id);
int pool_pause_abort(struct pool *p);

/* In a PAUSING round that only unmaps (no saver at work), drops the
 * daemon's chunk references at once instead of after the acks: the last
 * mapper to unmap then frees the memory in its own process, the driver's
 * fast path (on the H200 a 16 GiB pause took 10 ms when the daemon's close
 * freed it, 7 ms in-process). Nothing is lost: the content is not kept
 * (discard) or already saved (host). -EBUSY while a saver is at work. */
int pool_release_early(struct pool *p, struct backend *b);

/* PAUSING with no ack owed -> PAUSED: the daemon drops its chunk fds, so
 * the device memory is free once mappers have unmapped. Returns the bytes
 * released, -EBUSY when acks are owed or a mapper failed (the pool stays
 * PAUSING: pause again to retry), -EINVAL in another state. */
int64_t pool_pause_finish(struct pool *p, struct backend *b);

/* PAUSED -> RESUMING: makes chunks of the same sizes and offsets; every
 * mapper owes an ack; one restores the backup. If a chunk cannot be made
 * the ones made are released and the pool stays PAUSED (-ENOMEM). Already
 * RESUMING: keeps those owing acks, as pause_begin. Returns acks owed,
 * -EALREADY when ACTIVE, -EBUSY when PAUSING, -EPIPE when the backup must
 * be restored and no read-write mapper exists. */
int pool_resume_begin(struct pool *p, struct backend *b, uint64_t event_id);

/* RESUMING with no ack owed and no mapper error -> ACTIVE. -EBUSY when
 * acks are owed, -EIO when a mapper failed (call resume_undo). */
int pool_resume_finish(struct pool *p);

/* RESUMING with a mapper failure -> PAUSING (undoing): the mappers that
 * mapped owe an ack for a pause without backup. Returns acks owed. */
int pool_resume_undo(struct pool *p, uint64_t event_id);

/* Records an ack. Returns 1 if the mapper owed one for event_id, else 0
 * (a late or unknown ack, ignored). */
int pool_ack(struct pool *p, struct session *s, uint64_t event_id, int err);

/* Moves ownership: to NULL on the owner's exit (persistent pools), or to
 * a new session re-opening an orphaned pool. */
void pool_set_owner(struct pool *p, struct session *s,
		    const struct identity *who);

const char *pool_state_name(enum pool_state s);

#endif
