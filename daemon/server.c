/* The libuv loop: the listening socket, signals, the watchdog, and the
 * tables of sessions and pools. */
#include "server.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "notify.h"
#include "pool.h"
#include "session.h"
#include "transition.h"

unsigned server_open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	unsigned n = 0;
	struct dirent *e;

	if (!d)
		return 0;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n ? n - 1 : 0; /* not the directory's own fd */
}

uint64_t server_free_bytes(struct server *srv)
{
	uint64_t sum = 0;
	for (unsigned i = 0; i < srv->backend->n_devices; i++) {
		uint64_t f = 0;
		if (backend_mem_info(srv->backend, i, &f, NULL) == 0)
			sum += f;
	}
	return sum;
}

static void server_on_status(uv_timer_t *h)
{
	struct server *srv = h->data;
	char status[160];
	snprintf(status, sizeof(status), "%u sessions, %u pools, %llu MiB held",
		 srv->n_sessions, srv->n_pools,
		 (unsigned long long)(srv->backend->used_bytes >> 20));
	notify_status(status);
}

/* Coalesced: at most one STATUS= a second, however busy the daemon is. */
void server_update_status(struct server *srv)
{
	if (!uv_is_active((uv_handle_t *)&srv->status_timer) && !srv->stopping)
		uv_timer_start(&srv->status_timer, server_on_status, 1000, 0);
}

struct pool *server_pool_by_id(struct server *srv, uint64_t id)
{
	for (unsigned i = 0; i < srv->n_pools; i++)
		if (srv->pools[i]->id == id)
			return srv->pools[i];
	return NULL;
}

struct pool *server_pool_by_name(struct server *srv, const char *name)
{
	for (unsigned i = 0; i < srv->n_pools; i++)
		if (strcmp(srv->pools[i]->name, name) == 0)
			return srv->pools[i];
	return NULL;
}

int server_pool_add(struct server *srv, struct pool *p)
{
	if (srv->n_pools == srv->cap_pools) {
		unsigned cap = srv->cap_pools ? 2 * srv->cap_pools : 16;
		struct pool **a = realloc(srv->pools, cap * sizeof(*a));
		if (!a)
			return -ENOMEM;
		srv->pools = a;
		srv->cap_pools = cap;
	}
	srv->pools[srv->n_pools++] = p;
	return 0;
}

void server_pool_drop(struct server *srv, struct pool *p,
		      struct session *except)
{
	Vram__Event ev = VRAM__EVENT__INIT;

	ev.kind = VRAM__EVENT_KIND__EVENT_DROP;
	ev.pool_id = p->id;
	for (struct mapper *m = p->mappers; m; m = m->next)
		if (m->session != except)
			session_send_event(m->session, &ev, NULL, 0);
	transition_pool_dropped(srv, p);
	for (unsigned i = 0; i < srv->n_pools; i++) {
		if (srv->pools[i] == p) {
			memmove(&srv->pools[i], &srv->pools[i + 1],
				(srv->n_pools - i - 1) * sizeof(srv->pools[0]));
			srv->n_pools--;
			break;
		}
	}
	pool_destroy(p, srv->backend);
}

static void server_on_reap(uv_idle_t *h)
{
	struct server *srv = h->data;
	struct session *s = srv->sessions, *next;

	uv_idle_stop(h);
	for (; s; s = next) {
		next = s->next;
		if (s->broken) {
			session_close(s, "broken");
			next = srv->sessions; /* the list changed: start over */
		}
	}
}

void server_reap_later(struct server *srv)
{
	uv_idle_start(&srv->reaper, server_on_reap);
}

static void server_on_accept(uv_poll_t *h, int status, int events)
{
	struct server *srv = h->data;

	for (int i = 0; i < 64; i++) {
		int fd = accept4(srv->listen_fd, NULL, NULL,
				 SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR)
				log_warn("accept: %s", strerror(errno));
			return;
		}
		if (srv->n_sessions >= srv->cfg.max_sessions || srv->stopping) {
			log_warn("refusing a connection: %u sessions is the limit",
				 srv->cfg.max_sessions);
			close(fd);
			continue;
		}
		int r = session_open(srv, fd);
		if (r < 0)
			log_warn("cannot open a session: %s", strerror(-r));
	}
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

static int socket_listen(const struct config *cfg)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	char dir[sizeof(cfg->socket)];
	int fd, r;

	if (strlen(cfg->socket) >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	snprintf(dir, sizeof(dir), "%s", cfg->socket);
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = '\0';
		if (mkdir(dir, 0755) < 0 && errno != EEXIST)
			log_warn("cannot make %s: %s", dir, strerror(errno));
	}
	r = socket_remove_stale(cfg->socket);
	if (r < 0)
		return r;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", cfg->socket);
	/* Created with no access, then opened up, so nobody connects early. */
	mode_t old = umask(0777);
	r = bind(fd, (struct sockaddr *)&a, sizeof(a));
	umask(old);
	if (r < 0 || chmod(cfg->socket, cfg->socket_mode) < 0 || listen(fd, 128) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	return fd;
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

static void server_on_watchdog(uv_timer_t *h)
{
	notify_watchdog();
}

int server_init(struct server *srv, uv_loop_t *loop, const struct config *cfg)
{
	struct backend_config bcfg;
	int r;

	memset(srv, 0, sizeof(*srv));
	srv->loop = loop;
	srv->cfg = *cfg;
	srv->listen_fd = -1;
	srv->start_ms = (uint64_t)clock_now_ms();
	config_backend(&srv->cfg, &bcfg);
	r = backend_open(&bcfg, &srv->backend);
	if (r < 0) {
		log_err("cannot open the %s backend: %s", cfg->backend, strerror(-r));
		return r;
	}
	srv->listen_fd = notify_listen_fd();
	if (srv->listen_fd >= 0) {
		fcntl(srv->listen_fd, F_SETFL, fcntl(srv->listen_fd, F_GETFL) | O_NONBLOCK);
		fcntl(srv->listen_fd, F_SETFD, FD_CLOEXEC);
		log_info("listening on the socket systemd passed");
	} else {
		srv->listen_fd = socket_listen(cfg);
		if (srv->listen_fd < 0) {
			r = srv->listen_fd;
			log_err("cannot listen on %s: %s", cfg->socket, strerror(-r));
			backend_destroy(srv->backend);
			srv->backend = NULL;
			return r;
		}
		srv->listen_fd_ours = true;
		log_info("listening on %s", cfg->socket);
	}
	uv_poll_init(loop, &srv->listen_poll, srv->listen_fd);
	srv->listen_poll.data = srv;
	uv_poll_start(&srv->listen_poll, UV_READABLE, server_on_accept);
	uv_idle_init(loop, &srv->reaper);
	srv->reaper.data = srv;
	uv_signal_init(loop, &srv->sig_term);
	uv_signal_init(loop, &srv->sig_int);
	srv->sig_term.data = srv->sig_int.data = srv;
	uv_signal_start(&srv->sig_term, server_on_signal, SIGTERM);
	uv_signal_start(&srv->sig_int, server_on_signal, SIGINT);
	uv_timer_init(loop, &srv->status_timer);
	srv->status_timer.data = srv;
	uv_timer_init(loop, &srv->watchdog);
	srv->watchdog_usec = notify_watchdog_usec();
	if (srv->watchdog_usec) {
		uint64_t ms = srv->watchdog_usec / 2000;
		uv_timer_start(&srv->watchdog, server_on_watchdog, ms ? ms : 1,
			       ms ? ms : 1);
	}
	char status[128];
	snprintf(status, sizeof(status), "serving %u %s device(s)",
		 srv->backend->n_devices, srv->backend->ops->name);
	notify_ready(status);
	return 0;
}

int server_run(struct server *srv)
{
	uv_run(srv->loop, UV_RUN_DEFAULT);

	/* Close every session (dropping their pools), then what is left. */
	while (srv->sessions)
		session_close(srv->sessions, "daemon stopping");
	while (srv->n_pools)
		server_pool_drop(srv, srv->pools[srv->n_pools - 1], NULL);
	uv_close((uv_handle_t *)&srv->listen_poll, NULL);
	uv_close((uv_handle_t *)&srv->reaper, NULL);
	uv_close((uv_handle_t *)&srv->sig_term, NULL);
	uv_close((uv_handle_t *)&srv->sig_int, NULL);
	/* libuv gave the signals back their default action; a second SIGTERM
	 * during the shutdown must not kill what is already ending cleanly. */
	signal(SIGTERM, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	uv_close((uv_handle_t *)&srv->watchdog, NULL);
	uv_close((uv_handle_t *)&srv->status_timer, NULL);
	/* Runs the close callbacks (sessions, transitions' timers). */
	uv_run(srv->loop, UV_RUN_DEFAULT);
	return 0;
}

void server_fini(struct server *srv)
{
	if (srv->listen_fd >= 0) {
		close(srv->listen_fd);
		if (srv->listen_fd_ours)
			unlink(srv->cfg.socket);
	}
	free(srv->pools);
	srv->pools = NULL;
	backend_destroy(srv->backend);
	srv->backend = NULL;
}
