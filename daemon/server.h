/* The daemon: a libuv loop, the listening socket, its sessions and pools. */
#ifndef VRAMD_SERVER_H
#define VRAMD_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "backend.h"
#include "config.h"

#define VRAMD_VERSION "0.2.0"

struct session;
struct pool;
struct transition;

struct server {
	uv_loop_t *loop;
	struct config cfg;
	struct backend *backend;

	int listen_fd;
	bool listen_fd_ours; /* false when systemd passed it */
	uv_poll_t listen_poll;
	uv_signal_t sig_term, sig_int;
	uv_timer_t watchdog;
	uv_timer_t status_timer;
	uv_idle_t reaper;  /* closes sessions marked broken */
	uint64_t watchdog_usec;

	struct session *sessions; /* doubly linked */
	unsigned n_sessions;
	struct pool **pools;      /* array, in creation order */
	unsigned n_pools, cap_pools;
	struct transition *transitions; /* in flight */

	uint64_t next_session_id, next_pool_id, next_event_id;
	uint64_t start_ms;
	bool stopping;
};

/* Opens the backend and the socket (or takes systemd's), installs signal
 * handlers, and tells systemd READY=1. Returns 0 or -errno (logged). */
int server_init(struct server *srv, uv_loop_t *loop, const struct config *cfg);

/* Runs until SIGTERM/SIGINT, then closes every session and pool. */
int server_run(struct server *srv);

/* Frees what server_init made; the loop must have stopped. */
void server_fini(struct server *srv);

/* Pools */
struct pool *server_pool_by_id(struct server *srv, uint64_t id);
struct pool *server_pool_by_name(struct server *srv, const char *name);
int server_pool_add(struct server *srv, struct pool *p);
/* Tells every mapper but except, fails its transition, frees the pool. */
void server_pool_drop(struct server *srv, struct pool *p,
		      struct session *except);

/* Closes sessions marked broken from the loop, soon. */
void server_reap_later(struct server *srv);

/* Number of fds the daemon has open (/proc/self/fd). */
unsigned server_open_fds(void);
/* Sum of free bytes of every device (for reports). */
uint64_t server_free_bytes(struct server *srv);

/* Updates systemd's STATUS= line with counts. */
void server_update_status(struct server *srv);

#endif
