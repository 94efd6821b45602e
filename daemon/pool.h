/* SPDX-License-Identifier: Apache-2.0 */
/* A pool: named, tagged memory on one device, made of chunks, owned by one
 * session and mapped by any number. pool.c is the only place that assigns
 * a pool's state and the only place that picks what comes next; a request
 * (transition.c) begins a pause or resume, sends the rounds of events the
 * pool asks for and calls pool_advance when a round owes no more acks:
 *
 *   ACTIVE --pause--> PAUSING_SAVE    host pool with content: the saver
 *                                     alone saves, everyone stays mapped
 *          --pause--> PAUSING_UNMAP   otherwise: every mapper unmaps
 *   PAUSING_SAVE  --saved--> PAUSING_UNMAP (every mapper, the saver too)
 *                 --failed--> ACTIVE  nobody unmapped, nothing lost
 *                 (a saver that saves in parts, the pool's owner and only
 *                 mapper, unmaps each chunk once saved and reports it;
 *                 the daemon lets go of it then, so the driver clears it
 *                 while the rest is saved: pool_save_progress. A save in
 *                 parts that fails after some chunks went stays
 *                 PAUSING_SAVE: pause again to save the rest)
 *   PAUSING_UNMAP --unmapped--> PAUSED   chunks released
 *                 --failed--> stays (pause again to retry)
 *
 *   PAUSED --resume--> RESUMING_RESTORE  backup held: chunks are made and
 *                                        the restorer alone maps them and
 *                                        restores the backup
 *          --resume--> RESUMING_MAP      otherwise: every mapper maps
 *   RESUMING_RESTORE --restored--> RESUMING_MAP (every other mapper)
 *                    --failed--> PAUSED  chunks released, backup kept,
 *                                        nobody else ever mapped
 *                    (a restorer that takes them in parts is sent the
 *                    first POOL_PARTS_AHEAD chunks, and each later one is
 *                    made once it has restored all but that many:
 *                    pool_resume_progress)
 *   RESUMING_MAP --mapped--> ACTIVE
 *                --failed--> PAUSING_UNDO_SAVE  host: the content (written
 *                                        since the restore) is saved again
 *                --failed--> PAUSING_UNDO       discard: those who mapped unmap
 *   PAUSING_UNDO_SAVE --saved--> PAUSING_UNDO
 *                     --failed--> ACTIVE (the mapper that failed is unmapped)
 *   PAUSING_UNDO --unmapped--> PAUSED (the resume fails with its error)
 *                --failed--> stays (pause again to retry)
 *
 * So a mapper other than the restorer is sent the chunks only once they
 * hold the restored content: it turns ACTIVE then, never on a half-restored
 * pool, and nothing it writes is overwritten by the restore. The wire sees
 * four states (pool_state_name, message_pool_state): every PAUSING_* is
 * PAUSING and every RESUMING_* is RESUMING.
 *
 * A failed begin leaves the pool as it was (a resume that cannot make the
 * chunks stays PAUSED with its backup). A round that misses its deadline
 * leaves the pool where it is; later acks still complete it, and pausing
 * (or resuming) again waits once more for those that owe.
 *
 * Sessions are opaque here: the pool only compares their pointers.
 */
#ifndef VRAMD_POOL_H
#define VRAMD_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "backup.h"

#define POOL_NAME_MAX 128
#define POOL_TAG_MAX 64
#define POOL_FLAG_PERSIST 0x1u
/* The backup keeps its pages after a resume (the next pause rewrites them
 * without allocating); without it they go back once every mapper maps the
 * restored pool. */
#define POOL_FLAG_RETAIN_BACKUP 0x2u
#define POOL_FLAG_RELEASE_BACKUP 0x8u /* after a resume (the default keeps it) */
/* The clients copy to and from the backup without registering it with the
 * driver (pageable, slower copies, no pinned host memory). */
#define POOL_FLAG_PAGEABLE_BACKUP 0x4u
#define POOL_FLAGS_ALL \
	(POOL_FLAG_PERSIST | POOL_FLAG_RETAIN_BACKUP | POOL_FLAG_PAGEABLE_BACKUP | \
	 POOL_FLAG_RELEASE_BACKUP)

enum pool_state {
	POOL_ACTIVE,
	POOL_PAUSING_SAVE,     /* the saver saves the backup; nobody unmaps */
	POOL_PAUSING_UNMAP,    /* every mapper unmaps */
	POOL_PAUSED,
	POOL_RESUMING_RESTORE, /* the restorer alone maps and restores */
	POOL_RESUMING_MAP,     /* every other mapper maps */
	POOL_PAUSING_UNDO_SAVE, /* a failed resume: the content is saved again */
	POOL_PAUSING_UNDO,     /* a failed resume: those who mapped unmap */
};
/* Where a pool's content goes on pause: nowhere, a memfd, or a file in
 * backup_dir (backup.h). "host pool" below means either of the last two. */
enum pool_policy { POOL_DISCARD, POOL_HOST, POOL_DISK };

struct session;
struct transition_item;

struct identity {
	uint32_t pid, uid, gid; /* SO_PEERCRED's; pid 0: outside our namespace */
	char name[64];
	char instance[64];	/* the client's own word (hello), "" if none */
	char job[64];		/* the job it is a rank of (hello), "" if none */
	char cgroup[256];	/* the kernel's (peer.c), "" if unknown */
};

struct mapper {
	struct mapper *next;
	struct session *session;
	struct identity who;
	bool readonly;
	bool pending;   /* owes an ack for the pool's current round */
	bool backup;    /* asked to save (pause) or restore (resume) */
	bool parts;     /* restores a resume whose chunks come in parts */
	bool save_parts; /* saves a SAVE with release chunk by chunk */
	int ack_err;    /* positive errno from its last ack */
};

/* A restore in parts: how many chunks the daemon makes ahead of what the
 * restorer reports restored. Two keep one chunk made and mapped while
 * the one before is copied. */
#define POOL_PARTS_AHEAD 2

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
	/* Chunks made for the resume under way, from the first: n_chunks
	 * but in a restore in parts (RESUMING_RESTORE), whose failed create
	 * make_err (positive errno) then holds. */
	unsigned made;
	int make_err;
	/* A save in parts (PAUSING_SAVE, save_parts): the chunks saved and
	 * let go of, from the first; save_failed once its saver failed
	 * (the rest is still held: pausing again saves it). */
	bool save_parts, save_failed;
	unsigned saved;
	/* Rebuilt after a restart from a save in parts under way: its saver
	 * may still be copying into the backup, so nobody restores it until
	 * its owner is back (pool_set_owner) or the grace period is over. */
	bool save_cut;
	uint64_t bytes;    /* sum of chunk sizes, kept while paused */

	/* The backup (backup.h): the one place its fd is kept. A memfd or a
	 * file of reserve bytes, -1 for discard; backup_path is the file's
	 * name ("" for a memfd), removed with the pool. */
	int backup_fd;
	char backup_path[BACKUP_PATH_MAX];
	bool backup_valid; /* the backup holds the content (paused) */
	bool backup_release_due; /* resumed: its pages may go, once the
				  * pool's new state is on record */
	struct backup_job *backup_job; /* that release, on a worker */

	struct session *owner; /* NULL when orphaned */
	struct identity owner_id;
	struct mapper *mappers;

	/* Current round of events. */
	uint64_t event_id;
	unsigned pending;  /* acks owed for event_id */
	int round_err;     /* first mapper error of the round */
	int undo_err;      /* the error of the resume being undone */
	struct transition_item *op; /* the request waiting on it, or NULL */
};

/* Makes an ACTIVE pool with no chunks; for POOL_HOST also its backup memfd
 * and for POOL_DISK its backup file in backup_dir (sparse, reserve bytes;
 * -ENOTDIR when backup_dir is NULL or empty). The caller owns it until
 * pool_destroy. */
int pool_create(uint64_t id, const char *name, const char *tag,
		unsigned device, enum pool_policy policy, unsigned flags,
		uint64_t reserve, const char *backup_dir,
		struct session *owner, const struct identity *owner_id,
		struct pool **out);

/* Does p keep its content across a pause (host or disk policy)? */
bool pool_keeps_content(const struct pool *p);

/* Bytes p's backup truly holds (its allocated pages or blocks). */
uint64_t pool_backup_held(const struct pool *p);

/* Bytes a host pool's save under way is still to write into its backup
 * (0 when it is not saving). */
uint64_t pool_backup_unwritten(const struct pool *p);

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
 * half-restored pool goes back to PAUSED. Returns 1 if it was a mapper. */
int pool_mapper_remove(struct pool *p, struct session *s);
unsigned pool_mapper_count(const struct pool *p);

/* Adds chunks of at most chunk_max bytes (multiples of the device
 * granularity) until the pool holds at least bytes more. ACTIVE only
 * (-EBUSY). On failure every chunk made by this call is released and the
 * pool is as before (-ENOMEM: device full; -ENOSPC: over max_chunks or the
 * reserve). *first gets the index of the first new chunk. */
int pool_grow(struct pool *p, struct backend *b, uint64_t bytes,
	      uint64_t chunk_max, unsigned max_chunks, unsigned *first);

/* What a request does after a pause, resume or advance of a pool. */
enum pool_step {
	POOL_STEP_WAIT,   /* acks are owed, or nothing runs: nothing to do */
	POOL_STEP_SEND,   /* a round began: send next->round to those that owe */
	POOL_STEP_DONE,   /* PAUSED or ACTIVE reached: next->bytes released or
			   * brought back */
	POOL_STEP_FAILED, /* it stays or went back: next->err, next->why */
};

/* The event a round asks of the mappers that owe an ack (message.c turns
 * it into the wire's event kind). A mapper's backup flag says whether it
 * saves (PAUSE, SAVE) or restores (RESUME) too. */
enum pool_round {
	POOL_ROUND_SAVE,   /* save the backup, stay mapped; the chunks' layout */
	POOL_ROUND_PAUSE,  /* unmap */
	POOL_ROUND_RESUME, /* map the chunks sent with their fds: the first
			    * made of them, with more to come if fewer than
			    * all */
	POOL_ROUND_RESUME_MORE, /* the restorer's next chunks, from
				 * next->first to made (none with make_err,
				 * which goes instead) */
};

struct pool_next {
	enum pool_round round; /* POOL_STEP_SEND */
	unsigned first;        /* POOL_ROUND_RESUME_MORE: its first chunk */
	uint64_t bytes;        /* POOL_STEP_DONE */
	int err;               /* POOL_STEP_FAILED: positive errno */
	const char *why;       /* POOL_STEP_FAILED: what happened, a phrase
				* that follows "pool NAME: " */
};

/* Begins a pause. ACTIVE: a host pool with content asks its saver alone
 * to save (PAUSING_SAVE), any other pool asks every mapper to unmap
 * (PAUSING_UNMAP) and the daemon lets go of its chunk fds at once, so the
 * last mapper to unmap frees the memory in its own process (the driver's
 * fast path: on the H200 a 16 GiB pause took 10 ms when the daemon's close
 * freed it, 7 ms in-process); the bytes stay counted until PAUSED.
 * PAUSING (a round that missed its deadline or failed): asks again those
 * that still owe or failed, under a new event id; an undo of a failed
 * resume is carried on as this pause. New rounds take their event id from
 * ++*event_ids. Fails (next->err) with EALREADY when PAUSED, EBUSY when
 * RESUMING, EPIPE when a host pool with content has no read-write mapper
 * to save it, ENOSPC when its backup's file system (a host_backup_dir
 * tmpfs) has no room for it once backup_pending bytes (what the saves
 * under way there are still to write) are set aside; the pool is then as
 * it was. */
enum pool_step pool_pause(struct pool *p, struct backend *b,
			  uint64_t *event_ids, uint64_t backup_pending,
			  struct pool_next *next);

/* Begins a resume. PAUSED: makes chunks of the same sizes and offsets;
 * with a backup the restorer alone is sent them (RESUMING_RESTORE), the
 * other mappers only once it has restored; without one every mapper is
 * (RESUMING_MAP). RESUMING (a round that missed its deadline): asks again
 * those that owe. Fails with EALREADY when ACTIVE, EBUSY when PAUSING or
 * when a mapper failed the round under way, ENOMEM when a chunk cannot be
 * made (those made are released: PAUSED with the backup), EPIPE when the
 * backup must be restored and no read-write mapper exists. */
enum pool_step pool_resume(struct pool *p, struct backend *b,
			   uint64_t *event_ids, struct pool_next *next);

/* The restorer s of a resume in parts has restored the first restored
 * chunks: makes those now due (up to POOL_PARTS_AHEAD beyond them) and
 * asks to send them (SEND, POOL_ROUND_RESUME_MORE from next->first), or
 * to send make_err when one cannot be made (the restorer then unmaps and
 * fails the round: PAUSED, chunks released, backup kept). WAIT when
 * nothing is due, or the report is not the restorer's or is past what
 * was sent (ignored). */
enum pool_step pool_resume_progress(struct pool *p, struct backend *b,
				    const struct session *s, unsigned restored,
				    struct pool_next *next);

/* The saver s of a save in parts has saved and unmapped the first saved
 * chunks: the daemon lets go of those not yet let go of (their bytes stay
 * counted until PAUSED). Returns how many it let go of: 0 when the report
 * is not the saver's, not of a save in parts, or not past the last. */
unsigned pool_save_progress(struct pool *p, struct backend *b,
			    const struct session *s, unsigned saved);

/* Takes the edge out of p's state once its round owes no more acks (after
 * an ack, or a mapper that went away): the next round (SEND), the end
 * (DONE, FAILED), or WAIT while acks are owed or no transition runs.
 * Releases the chunks when PAUSED is reached, or when a resume goes back. */
enum pool_step pool_advance(struct pool *p, struct backend *b,
			    uint64_t *event_ids, struct pool_next *next);

/* Is p between ACTIVE and PAUSED (a pause or resume under way)? */
/* Gives the backup's pages back if a resume left them due (and the pool
 * does not retain them). The caller first puts the pool's state on record
 * (the fd store's table): a daemon killed in between must not find a
 * PAUSED pool with a valid backup whose pages are gone. */
void pool_backup_release_due(struct pool *p);

bool pool_in_transition(const struct pool *p);

/* Records an ack. Returns 1 if the mapper owed one for event_id, else 0
 * (a late or unknown ack, ignored). pool_advance takes it from there. */
int pool_ack(struct pool *p, struct session *s, uint64_t event_id, int err);

/* Moves ownership: to NULL on the owner's exit (persistent pools), or to
 * a new session re-opening an orphaned pool. */
void pool_set_owner(struct pool *p, struct session *s,
		    const struct identity *who);

/* The state as the wire and the operator see it: "active", "pausing",
 * "paused" or "resuming". */
const char *pool_state_name(enum pool_state s);

#endif
