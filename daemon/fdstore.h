/* SPDX-License-Identifier: Apache-2.0 */
/* systemd's file-descriptor store, kept in step with the pools: every
 * chunk fd and backup fd the daemon holds is in the store under a name
 * that says what it is, and so is the pool table (table.h) in a sealed
 * memfd, so that the next vramd (systemctl restart, a crash under
 * Restart=on-failure, an upgrade) is handed all of it back through
 * LISTEN_FDS and rebuilds the pools (recover.h). See docs/operations.md.
 *
 * Names (FDNAME=, never ':' in them):
 *   vramd-c-POOL-INDEX  chunk INDEX of pool id POOL
 *   vramd-b-POOL        the host backup memfd of pool POOL
 *   vramd-t-GEN         the pool table, generation GEN (the newest wins)
 *   vramd-listen        the listening socket, when vramd made it
 *
 * The store is used when $NOTIFY_SOCKET and $FDSTORE are set: systemd 254
 * and later set FDSTORE to FileDescriptorStoreMax=, and vramd.service sets
 * it too for older systemd. fdstore_sync runs before anything is sent to a
 * client (session.h's send hook), so a client never holds an fd the store
 * does not, and the table stored always names what the store holds; only
 * a ping's answer, which tells nothing of the pools, goes without (the
 * server's hook). It costs little when nothing changed: see
 * fdstore_sync. */
#ifndef VRAMD_FDSTORE_H
#define VRAMD_FDSTORE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "table.h"

#define FDSTORE_NAME_MAX 64

struct node;

struct fdstore_entry {
	char name[FDSTORE_NAME_MAX];
	int fd; /* the daemon's fd it was stored from, -1 if not kept */
	dev_t dev;
	ino_t ino;
	uint64_t serial; /* the chunk's creation (struct chunk), 0: unknown */
	bool seen;
};

struct fdstore {
	bool on;
	bool frozen;  /* stopping for a restart: the store stays as it is */
	unsigned max; /* $FDSTORE: FileDescriptorStoreMax= */
	struct fdstore_entry *e;
	unsigned n, cap;
	uint64_t table_gen;
	char table_name[FDSTORE_NAME_MAX]; /* "" when none is stored */
	struct table_buf last;		   /* the table stored last */
	struct table_buf scratch;	   /* where the next one is built */
	uint64_t failures;		   /* messages systemd did not take */
	bool full_logged;
	/* What the last complete pass over the fds saw: while the backend's
	 * chunk generation, the pool count and the next pool id are the same
	 * (pool ids are never used twice, a backup fd lives as long as its
	 * pool), every fd the node holds is in the store already and the
	 * pass is skipped. */
	bool fds_known;
	uint64_t fds_chunk_gen, fds_next_pool;
	unsigned fds_pools;
	uint64_t fd_passes; /* passes made over every fd, for tests */
};

/* Reads $FDSTORE and $NOTIFY_SOCKET: s->on says whether the store is
 * used. Returns 0. */
int fdstore_init(struct fdstore *s);
void fdstore_fini(struct fdstore *s);

/* 0 if the store has room for more fds, -ENOSPC if not (also when it is
 * off: then 0). */
int fdstore_room(const struct fdstore *s, unsigned more);

/* Notes an fd the store holds already (passed back at start): fd is the
 * daemon's copy, or -1 when it keeps none (the next sync removes it from
 * the store unless a pool holds an fd of that name). */
int fdstore_adopt(struct fdstore *s, const char *name, int fd);

/* Stores fd under name now (the listening socket). */
int fdstore_put(struct fdstore *s, const char *name, int fd);

/* Brings the store in step with the node: stores the fds it holds and
 * the store lacks, a new table if it changed, then removes what the node
 * no longer holds. No-op when off or frozen. The pass over the fds (an
 * fstat each) runs only when a chunk fd was made or let go or the pool
 * set changed since the last one; the table is built each time and
 * stored only when it differs. */
void fdstore_sync(struct fdstore *s, struct node *n);

#endif
