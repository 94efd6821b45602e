/* SPDX-License-Identifier: Apache-2.0 */
/* The libuv loop: the listening sockets (the main one and the admin
 * lane's, lane.h), signals, the watchdog, the status line, the sessions
 * and their read loop. */
#include "server.h"
#include "attr.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "notify.h"
#include "request.h"
#include "session.h"
#include "transition.h"

static void server_status_line(struct server *srv, char *buf, size_t len)
{
	snprintf(buf, len, "%u sessions, %u pools, %llu MiB held",
		 srv->n_sessions, srv->node.n_pools,
		 (unsigned long long)(srv->node.backend->used_bytes >> 20));
}

/* The server whose fd store session_before_send keeps in step (one per
 * process). */
static struct server *server_stored;

/* Set while a ping is handled: its answer tells nothing of the pools, so
 * it needs no sync (what changed before it reaches the store with the
 * next answer that does tell, or the status timer's sync). */
static bool server_answer_stateless;

/* Puts the pools on record, then lets go of what only the record kept
 * needed (backups a resume left due): before anything is sent, so that a
 * reply never tells of a state the store does not hold. */
static void server_sync(void)
{
	if (!server_stored || server_answer_stateless)
		return;
	fdstore_sync(&server_stored->store, &server_stored->node);
	fd_drop_note(&server_stored->fd_drop);
	node_release_backups(&server_stored->node);
}

/* node->store_flush while the fd store is on: what a pause released
 * leaves the store now, and the pause waits for systemd to confirm it. */
static bool server_store_flush(struct node *n UNUSED)
{
	if (!server_stored || !server_stored->store.on)
		return false;
	fdstore_sync(&server_stored->store, &server_stored->node);
	return true;
}

/* The STATUS= line, pulled from the counts once a second and sent only
 * when they changed, so a busy daemon still sends at most one a second. */
static void server_on_status(uv_timer_t *h)
{
	struct server *srv = h->data;
	char status[sizeof(srv->status)];

	/* Releases done with nobody to tell (a pool dropped with its last
	 * session) reach the store here at the latest. */
	server_sync();
	server_status_line(srv, status, sizeof(status));
	if (strcmp(status, srv->status) == 0)
		return;
	memcpy(srv->status, status, sizeof(status));
	notify_status(status);
}

/* ---- sessions ------------------------------------------------------------ */

/* Closes s: the node first (its pools, mappings and requests), then the
 * session itself. */
static void server_session_close(struct server *srv, struct session *s,
				 const char *why)
{
	if (s->closing)
		return;
	/* Off both lists and closing first, so that nothing is sent to it
	 * from here on; it stays allocated until the loop comes back. */
	if (s->prev)
		s->prev->next = s->next;
	else
		srv->sessions = s->next;
	if (s->next)
		s->next->prev = s->prev;
	srv->n_sessions--;
	if (s->admin_lane)
		lane_remove(&srv->lane, s);
	for (struct session **bp = &srv->broken; *bp; bp = &(*bp)->next_broken) {
		if (*bp == s) {
			*bp = s->next_broken;
			break;
		}
	}
	limit_session_gone(&srv->limits, &s->acct);
	session_close(s, why);
	if (!s->admin_lane)
		epoll_ctl(srv->hangup_fd, EPOLL_CTL_DEL, s->fd, NULL);
	io_drop(&srv->io, s);
	if (srv->store.frozen) {
		/* Stopping for a restart: its pools stay in the store. */
		transition_session_gone(&srv->node, s);
		return;
	}
	node_session_gone(&srv->node, s);
	fdstore_sync(&srv->store, &srv->node);
}

/* A session that did not say hello in time holds a slot for nothing. */
static void server_on_hello_late(struct limit_acct *a, void *data)
{
	struct server *srv = data;
	struct session *s =
		(struct session *)((char *)a - offsetof(struct session, acct));

	log_warn("session %llu (pid %u uid %u): no hello within %u ms",
		 (unsigned long long)s->id, s->who.pid, s->who.uid,
		 srv->cfg.hello_timeout_ms);
	server_session_close(srv, s, "no hello in time");
}

/* Closes the sessions that broke while sending: those on the list, not a
 * walk over every session. */
static void server_on_reap(uv_idle_t *h)
{
	struct server *srv = h->data;

	uv_idle_stop(h);
	while (srv->broken) {
		struct session *s = srv->broken;
		srv->broken = s->next_broken;
		s->next_broken = NULL;
		server_session_close(srv, s, "broken");
	}
}

static void server_on_broken(struct session *s)
{
	struct server *srv = s->owner;

	s->next_broken = srv->broken;
	srv->broken = s;
	uv_idle_start(&srv->reaper, server_on_reap);
}

/* Closes the sessions whose peers hung up (the hang-up set, server.h),
 * but asking's: a request that needs the device settled needs what they
 * held back first. Their reading threads may not have seen the end of
 * their input yet, and the loop hears of requests from several threads,
 * so without this a resume could fail for memory that a client had
 * given back by closing before the resume was sent. What such a session
 * still had unread goes with it, as with any peer that is gone. */
static void server_reap_hangups(struct server *srv,
				const struct session *asking)
{
	struct epoll_event ev[64];
	int n;

	do {
		n = epoll_wait(srv->hangup_fd, ev, 64, 0);
		for (int i = 0; i < n; i++) {
			struct session *s = ev[i].data.ptr;
			if (s == asking) {
				/* Its own end is its thread's to find. */
				epoll_ctl(srv->hangup_fd, EPOLL_CTL_DEL, s->fd,
					  NULL);
				continue;
			}
			server_session_close(srv, s, "peer closed");
		}
	} while (n == 64);
}

static void server_read(struct server *srv, struct session *s);
static void server_read_place(struct server *srv, struct session *s);

/* On a libuv worker: waits until the device has taken back the memory
 * released so far (CUDA's release threads, HIP's check), which the loop
 * must never wait for. */
static void server_settle_work(uv_work_t *w)
{
	struct session *s = w->data;
	struct server *srv = s->owner;
	backend_settle(srv->node.backend);
}

/* The device settled: handles the request put off for it, then reads on. */
static void server_on_settled(uv_work_t *w, int status UNUSED)
{
	struct session *s = w->data;
	struct server *srv = s->owner;
	Vram__Request *req = s->parked;

	s->parked = NULL;
	if (!s->closing && !s->broken)
		server_reap_hangups(srv, s);
	if (!s->closing && !s->broken &&
	    request_handle(srv, s, req) < 0)
		server_session_close(srv, s, "request without an id");
	vram__request__free_unpacked(req, NULL);
	if (!s->closing && !s->broken) {
		session_set_reading(s, true);
		server_read_place(srv, s);
	}
	session_unhold(s);
}

/* Puts req off until the device settles; s reads nothing more meanwhile,
 * so its requests keep their order. Returns false when it cannot. */
static bool server_park(struct server *srv, struct session *s,
			Vram__Request *req)
{
	s->settle.data = s;
	if (uv_queue_work(srv->loop, &s->settle, server_settle_work,
			  server_on_settled) < 0)
		return false;
	s->parked = req;
	session_hold(s);
	session_set_reading(s, false);
	return true;
}

/* Handles one decoded request (freed here). Returns false when the
 * session must close. */
static bool server_request(struct server *srv, struct session *s,
			   Vram__Request *req)
{
	if (request_needs_settled(req)) {
		server_reap_hangups(srv, s);
		if (!backend_settled(srv->node.backend) &&
		    server_park(srv, s, req))
			return true;
	}
	server_answer_stateless = req->body_case == VRAM__REQUEST__BODY_PING;
	s->io.pings = server_answer_stateless ? s->io.pings + 1 : 0;
	int r = request_handle(srv, s, req);
	server_answer_stateless = false;
	vram__request__free_unpacked(req, NULL);
	if (s->hello_done && s->acct.hello_pending)
		limit_hello_done(&srv->limits, &s->acct);
	if (r < 0)
		log_warn("session %llu (pid %u): request without an id",
			 (unsigned long long)s->id, s->who.pid);
	return r == 0;
}

/* Decodes and dispatches one frame. Returns false when the session must
 * close. */
static bool server_frame(struct server *srv, struct session *s,
			 struct wire_frame *f)
{
	Vram__Request *req;
	char why[160];

	if (io_frame_decode(s, f, &req, why, sizeof(why)) < 0) {
		log_warn("session %llu (pid %u): %s", (unsigned long long)s->id,
			 s->who.pid, why);
		return false;
	}
	return server_request(srv, s, req);
}

/* Handles the frames already read. Returns false when the session closed
 * or a request was put off. */
static bool server_frames(struct server *srv, struct session *s)
{
	struct wire_frame f;

	for (;;) {
		/* Before each ordinary request, the admins' turn (lane.h).
		 * Not from an admin session's own read: the lane would read
		 * it again under its own feet. */
		if (!s->admin_lane)
			lane_check(&srv->lane);
		if (s->closing || s->broken || s->parked)
			return false;
		/* wire_rx_next sets what wire_frame_clear reads (not the
		 * whole kilobyte of fd slots) on every path. */
		int r = wire_rx_next(&s->rx, &f);
		if (r == 0)
			return true;
		if (r < 0) {
			log_warn("session %llu (pid %u): malformed frame: %s",
				 (unsigned long long)s->id, s->who.pid,
				 strerror(-r));
			server_session_close(srv, s, "malformed frame");
			return false;
		}
		bool ok = server_frame(srv, s, &f);
		wire_frame_clear(&f);
		if (!ok) {
			server_session_close(srv, s, "protocol error");
			return false;
		}
	}
}

static void server_read(struct server *srv, struct session *s)
{
	/* Frames left from before a request was put off come first. */
	if (!server_frames(srv, s))
		return;
	/* Bounded work per wake-up so one busy client cannot starve others.
	 * After a short read the socket was empty: the next read would only
	 * say EAGAIN, and libuv's poll is level-triggered, so whatever comes
	 * meanwhile wakes the loop again. One recvmsg per request, not two. */
	for (int round = 0; round < IO_READ_ROUNDS; round++) {
		int r = wire_rx_read(&s->rx, s->fd);
		if (r == -EAGAIN)
			return;
		if (r <= 0) {
			server_session_close(srv, s, io_read_ended(r));
			return;
		}
		if (!server_frames(srv, s) || r < IO_SHORT_READ)
			return;
	}
}

/* A session whose last this many requests were all pings goes to a
 * reading thread (io.h); its next other request brings it back. */
#define SERVER_PINGS_TO_THREAD 16

/* server_read, then the session to a reading thread if it only pings
 * (and is not an admin's, closing, or putting a request off): the
 * requests that need the node, and a session sending them, stay read on
 * the loop, one wake-up from the client as before there were threads. */
static void server_read_place(struct server *srv, struct session *s)
{
	server_read(srv, s);
	if (s->admin_lane || s->closing || s->broken || s->parked ||
	    s->io.pings < SERVER_PINGS_TO_THREAD)
		return;
	s->io.pings = 0;
	session_set_reading(s, false);
	if (s->io.thread)
		io_give(&srv->io, s);
	else
		io_adopt(&srv->io, s);
	log_debug("session %llu (pid %u) only pings: read on a reading thread",
		  (unsigned long long)s->id, s->who.pid);
}

/* The loop's turn of s (io.h): what its thread found, then the request it
 * decoded, then whatever else the socket holds. */
static void server_on_turn(struct session *s, void *data)
{
	struct server *srv = data;
	struct session_io *sio = &s->io;
	Vram__Request *req = sio->req;
	const char *why = sio->close;

	sio->req = NULL;
	sio->close = NULL;
	if (s->closing || s->broken) {
		/* Its drop is on the way (broken: the reaper's). */
		if (req)
			vram__request__free_unpacked(req, NULL);
		return;
	}
	if (sio->queued) {
		sio->queued = false;
		session_flush(s);
	}
	if (sio->send_err) {
		session_send_failed(s, sio->send_err);
		sio->send_err = 0;
		return;
	}
	if (why) {
		if (sio->warn[0])
			log_warn("session %llu (pid %u): %s",
				 (unsigned long long)s->id, s->who.pid,
				 sio->warn);
		sio->warn[0] = '\0';
		server_session_close(srv, s, why);
		return;
	}
	/* Read on the loop from here on, until it only pings again. */
	log_debug("session %llu (pid %u) read on the loop again",
		  (unsigned long long)s->id, s->who.pid);
	sio->pings = 0;
	session_set_reading(s, true);
	if (!s->admin_lane)
		lane_check(&srv->lane);
	if (req && !server_request(srv, s, req)) {
		server_session_close(srv, s, "protocol error");
		return;
	}
	if (!s->closing && !s->broken && !s->parked)
		server_read_place(srv, s);
}

static void server_on_session_poll(uv_poll_t *h, int status, int events)
{
	struct session *s = h->data;
	struct server *srv = s->owner;

	if (status < 0) {
		server_session_close(srv, s, uv_strerror(status));
		return;
	}
	if (!s->admin_lane)
		lane_check(&srv->lane);
	if (events & UV_WRITABLE)
		session_flush(s);
	if ((events & UV_READABLE) && !s->closing && !s->broken && !s->parked)
		server_read_place(srv, s);
}

/* Takes an accepted connection as a session (the admin lane's when
 * admin): opened, admitted against the limits, listed. */
static void server_session_add(struct server *srv, int fd, bool admin)
{
	struct session *s;
	char why[128];

	int r = session_open(srv->loop, fd, ++srv->next_session_id,
			     server_on_session_poll, server_on_broken, srv, &s);
	if (r < 0) {
		log_warn("cannot open a session: %s", strerror(-r));
		metrics_session_refused(&srv->metrics, false);
		return;
	}
	r = limit_session_admit(&srv->limits, &s->acct, fd, s->who.uid,
				s->who.gid, why, sizeof(why));
	if (r == 0 && admin && !s->acct.privileged) {
		/* The socket's mode keeps others out; this holds even when
		 * someone opened the mode up: the lane is for admins. */
		limit_session_gone(&srv->limits, &s->acct);
		snprintf(why, sizeof(why),
			 "the admin socket is for root and the admin group");
		r = -EPERM;
	}
	if (r == 0 && admin && lane_add(&srv->lane, fd, s) < 0) {
		limit_session_gone(&srv->limits, &s->acct);
		snprintf(why, sizeof(why), "out of memory");
		r = -ENOMEM;
	}
	if (r < 0) {
		log_warn("refusing a connection%s: %s",
			 admin ? " on the admin socket" : "", why);
		log_debug("refused: pid %u uid %u", s->who.pid, s->who.uid);
		metrics_session_refused(&srv->metrics, r == -EUSERS);
		session_close(s, why);
		return;
	}
	s->admin_lane = admin;
	if (admin)
		log_debug("session %llu (pid %u uid %u) is on the admin lane",
			  (unsigned long long)s->id, s->who.pid, s->who.uid);
	s->limits = &srv->limits;
	if (!admin) {
		/* It may go to a reading thread later: the hang-up set
		 * watches for the peer's end meanwhile. */
		struct epoll_event ev = { .events = EPOLLRDHUP, .data.ptr = s };
		if (epoll_ctl(srv->hangup_fd, EPOLL_CTL_ADD, fd, &ev) < 0)
			log_warn("session %llu: not in the hang-up set: %s",
				 (unsigned long long)s->id, strerror(errno));
	}
	metrics_session_opened(&srv->metrics);
	s->next = srv->sessions;
	if (srv->sessions)
		srv->sessions->prev = s;
	srv->sessions = s;
	srv->n_sessions++;
}

static void server_on_accept(uv_poll_t *h, int status UNUSED, int events UNUSED)
{
	struct server *srv = h->data;

	for (int i = 0; i < 64; i++) {
		int fd = accept4(srv->listen_fd, NULL, NULL,
				 SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (limit_accept_failed(&srv->limits, errno))
				return;
			continue;
		}
		limit_accept_ok(&srv->limits);
		if (srv->stopping) {
			close(fd);
			continue;
		}
		server_session_add(srv, fd, false);
	}
}

/* The admin socket is readable (its own watch, or lane_check): its own
 * accepts, so that the main listener's pause at the fd limit and a
 * flood of ordinary connections leave it alone. Admins connect rarely:
 * a few per wake-up. */
static void server_on_admin_accept(void *data)
{
	struct server *srv = data;

	for (int i = 0; i < 8; i++) {
		int fd = accept4(srv->lane.listen_fd, NULL, NULL,
				 SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (lane_accept_failed(&srv->lane, errno))
				return;
			continue;
		}
		if (srv->stopping) {
			close(fd);
			continue;
		}
		server_session_add(srv, fd, true);
	}
}

/* An admin session has input (found by lane_check): read it now, ahead
 * of the ordinary sessions of the batch. */
static void server_on_admin_ready(void *owner, void *data)
{
	struct session *s = owner;
	struct server *srv = data;

	if (!s->closing && !s->broken && !s->parked && s->reading)
		server_read(srv, s);
}

/* Refuses to take over the socket of a daemon that still answers. */
static int socket_remove_stale(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct stat st;
	int fd, r;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode)) {
		log_err("%s exists and is not a socket", path);
		return -EEXIST;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	r = connect(fd, (struct sockaddr *)&a, sizeof(a));
	close(fd);
	if (r == 0) {
		log_err("another vramd is serving %s", path);
		return -EADDRINUSE;
	}
	return unlink(path) < 0 ? -errno : 0;
}

/* Listens on path with mode; group, unless -1, becomes its group
 * (before anyone can connect). Returns the fd or -errno. */
static int socket_listen(const char *path, unsigned mode, gid_t group)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	char dir[sizeof(a.sun_path)];
	int fd, r;

	if (strlen(path) >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = '\0';
		if (mkdir(dir, 0755) < 0 && errno != EEXIST)
			log_warn("cannot make %s: %s", dir, strerror(errno));
	}
	r = socket_remove_stale(path);
	if (r < 0)
		return r;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	/* Created with no access, then opened up, so nobody connects early. */
	mode_t old = umask(0777);
	r = bind(fd, (struct sockaddr *)&a, sizeof(a));
	umask(old);
	if (r < 0 ||
	    (group != (gid_t)-1 && chown(path, (uid_t)-1, group) < 0) ||
	    chmod(path, mode) < 0 || listen(fd, 128) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

/* Makes the admin socket (lane.h): mode 0660, the daemon's uid (root)
 * and the admin group, so that only they may connect. A socket that
 * cannot be made leaves the daemon without a lane (admins fall back to
 * the main socket), not down. Returns 0 or -errno (out of memory). */
static int server_admin_listen(struct server *srv)
{
	const struct limit *l = &srv->limits;
	char path[sizeof(srv->admin_path)];
	int fd = -1;
	int r = config_admin_socket(&srv->cfg, path, sizeof(path));

	if (r == -ENOENT) {
		log_info("no admin socket (admin_socket = none)");
	} else if (r < 0) {
		log_warn("no admin socket: the path is too long");
	} else if (strcmp(path, srv->cfg.socket) == 0) {
		log_warn("no admin socket: admin_socket is the main socket");
	} else {
		fd = socket_listen(path, 0660,
				   l->has_admin_gid ? l->admin_gid : (gid_t)-1);
		if (fd < 0) {
			log_warn("no admin socket at %s: %s", path,
				 strerror(-fd));
		} else {
			snprintf(srv->admin_path, sizeof(srv->admin_path), "%s",
				 path);
			log_info("admin socket %s", path);
		}
	}
	return lane_init(&srv->lane, srv->loop, fd,
			 srv->cfg.admin_lane_check_us, server_on_admin_accept,
			 server_on_admin_ready, srv);
}

static void server_stop(struct server *srv, const char *why)
{
	if (srv->stopping)
		return;
	srv->stopping = true;
	log_info("stopping: %s", why);
	notify_stopping();
	uv_stop(srv->loop);
}

static void server_on_signal(uv_signal_t *h, int signum)
{
	server_stop(h->data, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

static void server_on_watchdog(uv_timer_t *h UNUSED)
{
	notify_watchdog();
}

/* What the metrics take from the server at each render. */
static void server_gauges(void *arg, struct metrics_gauges *g)
{
	struct server *srv = arg;
	g->version = VRAMD_VERSION;
	g->sessions = srv->n_sessions;
	g->sessions_max = srv->cfg.max_sessions;
}

int server_init(struct server *srv, uv_loop_t *loop, const struct config *cfg)
{
	struct backend_config bcfg;
	struct backend *b;
	int r;

	memset(srv, 0, sizeof(*srv));
	srv->loop = loop;
	srv->cfg = *cfg;
	srv->listen_fd = -1;
	srv->lane.listen_fd = -1;
	srv->hangup_fd = -1;
	srv->start_ms = (uint64_t)clock_now_ms();
	r = backup_host_dir_set(cfg->host_backup_dir);
	if (r < 0)
		return r;
	config_backend(&srv->cfg, &bcfg);
	r = backend_open(&bcfg, &b);
	if (r < 0) {
		log_err("cannot open the %s backend: %s", cfg->backend, strerror(-r));
		return r;
	}
	node_init(&srv->node, loop, b);
	r = metrics_create(&srv->metrics, loop, &srv->node, &srv->cfg.metrics,
			   server_gauges, srv);
	if (r < 0) {
		metrics_stop(&srv->metrics);
		uv_run(loop, UV_RUN_NOWAIT); /* the timers' close callbacks */
		metrics_destroy(&srv->metrics);
		node_fini(&srv->node);
		backend_destroy(b);
		srv->node.backend = NULL;
		return r;
	}
	srv->node.metrics = &srv->metrics;
	srv->node.spin_ms = config_spin_ms(cfg);
	/* Said at info level: a benchmark's log then tells which it ran. */
	if (srv->node.spin_ms)
		log_info("pauses and resumes poll for their first %u ms "
			 "(transition_spin_ms)",
			 srv->node.spin_ms);
	else
		log_info(
			"pauses and resumes do not poll (transition_spin_ms 0)");
	fdstore_init(&srv->store);
	recover_collect(&srv->recover);
	if (srv->store.on) {
		uint64_t want = (uint64_t)cfg->max_pools * (cfg->max_chunks + 1) + 3;
		if (srv->store.max < want)
			log_warn("fd store: FileDescriptorStoreMax=%u holds fewer "
				 "fds than max_pools x (max_chunks + 1) + 3 = %llu; "
				 "grows past it fail with ENOSPC",
				 srv->store.max, (unsigned long long)want);
		r = recover_pools(&srv->recover, &srv->node, &srv->store, loop,
				  cfg->reattach_grace_ms);
		if (r < 0)
			log_err("fd store: recovery failed: %s", strerror(-r));
	} else {
		if (srv->recover.n_fds)
			log_warn("%u stored fds passed without FDSTORE set; "
				 "releasing them", srv->recover.n_fds);
		recover_fini(&srv->recover);
	}
	srv->listen_fd = srv->recover.listen_fd;
	if (srv->listen_fd >= 0 && srv->recover.listen_ours) {
		fcntl(srv->listen_fd, F_SETFL, fcntl(srv->listen_fd, F_GETFL) | O_NONBLOCK);
		srv->listen_fd_ours = true;
		/* Still in the store: counted against its limit. */
		fdstore_adopt(&srv->store, "vramd-listen", srv->listen_fd);
		log_info("listening on the socket the last vramd made");
	} else if (srv->listen_fd >= 0) {
		fcntl(srv->listen_fd, F_SETFL, fcntl(srv->listen_fd, F_GETFL) | O_NONBLOCK);
		fcntl(srv->listen_fd, F_SETFD, FD_CLOEXEC);
		log_info("listening on the socket systemd passed");
	} else {
		srv->listen_fd =
			socket_listen(cfg->socket, cfg->socket_mode, (gid_t)-1);
		if (srv->listen_fd < 0) {
			r = srv->listen_fd;
			log_err("cannot listen on %s: %s", cfg->socket, strerror(-r));
			while (srv->node.n_pools)
				pool_destroy(srv->node.pools[--srv->node.n_pools], b);
			metrics_stop(&srv->metrics);
			uv_run(loop, UV_RUN_NOWAIT);
			metrics_destroy(&srv->metrics);
			node_fini(&srv->node);
			backend_destroy(b);
			srv->node.backend = NULL;
			return r;
		}
		srv->listen_fd_ours = true;
		log_info("listening on %s", cfg->socket);
		/* Kept in the store, so that clients connecting during a
		 * restart wait in its backlog instead of being refused. */
		fdstore_put(&srv->store, "vramd-listen", srv->listen_fd);
	}
	/* The fd store keeps the chunk fds themselves: they stay, and a
	 * pause waits for systemd to let go of them. */
	unsigned idle_ms = srv->store.on ? 0 : cfg->chunk_fd_idle_ms;
	if (srv->store.on)
		srv->node.store_flush = server_store_flush;
	fd_drop_init(&srv->fd_drop, loop, &srv->node, idle_ms);
	if (idle_ms)
		log_info("active pools' chunks let their fds go after %u ms "
			 "idle (chunk_fd_idle_ms)",
			 idle_ms);
	server_stored = srv;
	session_before_send = server_sync;
	fdstore_sync(&srv->store, &srv->node);
	uv_poll_init(loop, &srv->listen_poll, srv->listen_fd);
	srv->listen_poll.data = srv;
	r = limit_init(&srv->limits, loop, &srv->cfg, &srv->listen_poll,
			srv->listen_fd, server_on_accept, server_on_hello_late, srv);
	if (r < 0) {
		log_err("cannot set up the limits: %s", strerror(-r));
		return r;
	}
	uv_poll_start(&srv->listen_poll, UV_READABLE, server_on_accept);
	r = server_admin_listen(srv);
	if (r < 0) {
		log_err("cannot set up the admin lane: %s", strerror(-r));
		return r;
	}
	uv_idle_init(loop, &srv->reaper);
	srv->reaper.data = srv;
	uv_signal_init(loop, &srv->sig_term);
	uv_signal_init(loop, &srv->sig_int);
	srv->sig_term.data = srv->sig_int.data = srv;
	uv_signal_start(&srv->sig_term, server_on_signal, SIGTERM);
	uv_signal_start(&srv->sig_int, server_on_signal, SIGINT);
	uv_timer_init(loop, &srv->status_timer);
	srv->status_timer.data = srv;
	/* READY=1 says what is served; counts follow once they change. */
	server_status_line(srv, srv->status, sizeof(srv->status));
	uv_timer_start(&srv->status_timer, server_on_status, 1000, 1000);
	uv_timer_init(loop, &srv->watchdog);
	srv->watchdog_usec = notify_watchdog_usec();
	if (srv->watchdog_usec) {
		uint64_t ms = srv->watchdog_usec / 2000;
		uv_timer_start(&srv->watchdog, server_on_watchdog, ms ? ms : 1,
			       ms ? ms : 1);
	}
	srv->hangup_fd = epoll_create1(EPOLL_CLOEXEC);
	if (srv->hangup_fd < 0) {
		r = -errno;
		log_err("cannot make the hang-up set: %s", strerror(-r));
		return r;
	}
	unsigned poll_us = config_io_poll_us(cfg);
	r = io_start(&srv->io, loop, config_io_threads(cfg), poll_us,
		     server_on_turn, srv);
	if (r < 0) {
		log_err("cannot start the reading threads: %s", strerror(-r));
		return r;
	}
	log_info("%u reading thread(s) (io_threads), polling %u us after a "
		 "frame (io_poll_us)",
		 srv->io.n, poll_us);
	char status[128];
	snprintf(status, sizeof(status), "serving %u %s device(s)",
		 b->n_devices, b->ops->name);
	notify_ready(status);
	return 0;
}

int server_run(struct server *srv)
{
	uv_run(srv->loop, UV_RUN_DEFAULT);

	if (srv->store.on) {
		/* The store keeps every pool for the next vramd (a restart)
		 * or systemd drops it (a stop, which frees everything): either
		 * way this one lets go without telling anyone. */
		fdstore_sync(&srv->store, &srv->node);
		srv->store.frozen = true;
		log_info("leaving %u pool(s) in the fd store", srv->node.n_pools);
		while (srv->sessions)
			server_session_close(srv, srv->sessions, "daemon restarting");
		while (srv->node.n_pools) {
			struct pool *p = srv->node.pools[--srv->node.n_pools];
			transition_pool_dropped(p);
			pool_destroy(p, srv->node.backend);
		}
	}
	recover_fini(&srv->recover);
	/* Close every session (dropping their pools), then what is left. */
	while (srv->sessions)
		server_session_close(srv, srv->sessions, "daemon stopping");
	/* Every session is dropped: the threads let go and end. */
	io_stop(&srv->io);
	while (srv->node.n_pools)
		node_pool_drop(&srv->node,
			       srv->node.pools[srv->node.n_pools - 1], NULL);
	uv_close((uv_handle_t *)&srv->listen_poll, NULL);
	lane_close(&srv->lane);
	limit_close(&srv->limits);
	uv_close((uv_handle_t *)&srv->reaper, NULL);
	uv_close((uv_handle_t *)&srv->sig_term, NULL);
	uv_close((uv_handle_t *)&srv->sig_int, NULL);
	/* libuv gave the signals back their default action; a second SIGTERM
	 * during the shutdown must not kill what is already ending cleanly. */
	signal(SIGTERM, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	uv_close((uv_handle_t *)&srv->watchdog, NULL);
	uv_close((uv_handle_t *)&srv->status_timer, NULL);
	fd_drop_close(&srv->fd_drop);
	metrics_stop(&srv->metrics);
	/* Runs the close callbacks (sessions, transitions' timers). */
	uv_run(srv->loop, UV_RUN_DEFAULT);
	return 0;
}

void server_fini(struct server *srv)
{
	if (srv->listen_fd >= 0) {
		close(srv->listen_fd);
		/* In the store, the next vramd listens on it still. */
		if (srv->listen_fd_ours && !srv->store.on)
			unlink(srv->cfg.socket);
	}
	/* Always unlinked: during a restart admins fall back to the main
	 * socket, which waits for the next vramd in the fd store. */
	lane_fini(&srv->lane);
	if (srv->hangup_fd >= 0)
		close(srv->hangup_fd);
	if (srv->admin_path[0])
		unlink(srv->admin_path);
	metrics_destroy(&srv->metrics);
	session_before_send = NULL;
	server_stored = NULL;
	fdstore_fini(&srv->store);
	node_fini(&srv->node);
	backend_destroy(srv->node.backend);
	srv->node.backend = NULL;
	limit_fini(&srv->limits);
}
