/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's top: the libuv loop, the listening sockets, signals, the
 * watchdog and the status line, the sessions and their reading (on the
 * threads of io.h, and on the loop during its turns) that hands their
 * requests to request.c, over the node (node.h) that holds the pools. */
#ifndef VRAMD_SERVER_H
#define VRAMD_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "backend.h"
#include "config.h"
#include "metrics.h"
#include "fd_drop.h"
#include "fdstore.h"
#include "io.h"
#include "lane.h"
#include "limit.h"
#include "node.h"
#include "recover.h"

#define VRAMD_VERSION "0.2.0"

struct session;

struct server {
	uv_loop_t *loop;
	struct config cfg;
	struct node node; /* the pools, on the backend node.backend */
	struct metrics metrics;

	int listen_fd;
	bool listen_fd_ours; /* false when systemd passed it */
	uv_poll_t listen_poll;
	uv_signal_t sig_term, sig_int;
	uv_timer_t watchdog;
	uv_timer_t status_timer; /* reads the counts once a second */
	char status[160];	 /* the last STATUS= sent */
	uv_idle_t reaper;	 /* closes the sessions on the broken list */
	uint64_t watchdog_usec;

	struct session *sessions; /* doubly linked */
	unsigned n_sessions;
	struct session *broken; /* to close from the loop, via next_broken */

	struct limit limits; /* sessions, queues, the listener's back-off */
	struct lane lane;    /* the admin socket and its sessions (lane.h) */
	struct io io;	     /* the threads that read the others (io.h) */
	/* An epoll set of the sessions the threads read, for the peer's
	 * hang-up only (server_reap_hangups in server.c). */
	int hangup_fd;
	char admin_path[108]; /* the admin socket made, to unlink; "": none */

	uint64_t next_session_id;
	uint64_t start_ms;
	bool stopping;

	struct fdstore store; /* systemd's fd store (fdstore.h) */
	struct fd_drop fd_drop; /* idle active chunks' fds (fd_drop.h) */
	struct recover recover; /* what the last vramd left (recover.h) */
};

/* Opens the backend and the socket (or takes systemd's), installs signal
 * handlers, and tells systemd READY=1. Returns 0 or -errno (logged). */
int server_init(struct server *srv, uv_loop_t *loop, const struct config *cfg);

/* Runs until SIGTERM/SIGINT, then closes every session and pool. */
int server_run(struct server *srv);

/* Frees what server_init made; the loop must have stopped. */
void server_fini(struct server *srv);

#endif
