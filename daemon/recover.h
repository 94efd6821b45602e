/* SPDX-License-Identifier: Apache-2.0 */
/* A vramd started with the fd store's fds (LISTEN_FDS, LISTEN_FDNAMES,
 * LISTEN_PID, as systemd passes them back): finds the listening socket,
 * the newest pool table and every chunk and backup, and rebuilds the
 * pools, their bytes counted as used.
 *
 * A pool caught between states comes back in one it can be in with what
 * the store holds, never trusting a half-made backup:
 *
 *   ACTIVE, RESUMING_MAP          ACTIVE with its chunks
 *   PAUSING_SAVE, _UNDO_SAVE      ACTIVE with its chunks, backup not valid
 *   PAUSING_UNMAP, _UNDO          PAUSED (host: with its backup, saved)
 *   RESUMING_RESTORE              PAUSED with its backup (the chunks the
 *                                 restorer was given are let go)
 *   PAUSED                        PAUSED
 *
 * An ACTIVE pool whose chunks the store lacks comes back PAUSED without
 * content (logged as an error). The old clients may still map chunks the
 * daemon let go of (a pause the crash cut short): those bytes stay counted
 * as used until the grace period ends, so they are not granted twice.
 * Every pool comes back without mappers and without an owner session; its
 * owner (or anyone its uid allows) takes it back by opening it. When the
 * grace period (reattach_grace_ms) ends, a pool whose owner did not come
 * back is treated as on a crash of that owner: dropped, or kept without an
 * owner when persistent. */
#ifndef VRAMD_RECOVER_H
#define VRAMD_RECOVER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "backend.h"

struct fdstore;
struct node;

struct recover_fd {
	char name[64];
	int fd;
	bool used;
};

struct recover {
	int listen_fd;	  /* -1: none passed */
	bool listen_ours; /* it is the one vramd made (vramd-listen) */
	struct recover_fd *fds;
	unsigned n_fds;
	struct node *node;
	uv_timer_t grace;
	bool grace_on;
	uint64_t *awaited; /* ids of pools whose owner may come back */
	unsigned n_awaited;
	uint64_t held[BACKEND_MAX_DEVICES]; /* bytes old clients may map */
	/* For the log and the tests. */
	unsigned pools, chunks, dropped_fds;
};

/* Takes the fds passed at start (sd_listen_fds_with_names; unsets the
 * variables). 0 or -errno. */
int recover_collect(struct recover *rc);

/* Rebuilds the node's pools from the newest table and the fds; every fd
 * passed is noted in the store (those no pool uses leave it at the first
 * sync). Then starts the grace period of grace_ms. Returns the pools
 * rebuilt or -errno. */
int recover_pools(struct recover *rc, struct node *n, struct fdstore *st,
		  uv_loop_t *loop, unsigned grace_ms);

/* Ends the grace period now if it runs (at stop) and frees what rc holds;
 * fds no pool took are closed. */
void recover_fini(struct recover *rc);

#endif
