/* SPDX-License-Identifier: Apache-2.0 */
/* The metrics' HTTP endpoint (libmicrohttpd, Debian's libmicrohttpd-dev)
 * and the node_exporter textfile writer. The published exposition is an
 * immutable, reference-counted buffer: a scrape takes a reference under
 * the mutex and sends from it afterwards, so the loop's swap never waits
 * for a slow client. */
#include "http.h"
#include "attr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

/* A loop that has not rendered for this long fails /healthz. */
#define HTTP_HEALTHY_NS (10ull * 1000000000ull)

struct snapshot {
	atomic_uint refs;
	size_t len;
	char *data;
};

struct http {
	struct MHD_Daemon *mhd;
	unsigned port;
	pthread_mutex_t lock;
	struct snapshot *snap; /* the current one, or NULL */
	uint64_t published_ns; /* CLOCK_MONOTONIC of the last publish */
	/* Changes marked (the loop's, atomic) and the count the current
	 * snapshot holds (under lock): it is stale while they differ. */
	atomic_uint_fast64_t marked;
	uint64_t snap_marked;
	void (*render_ask)(void *arg);
	void *render_arg;
	pthread_cond_t fresh; /* a snapshot was published */

	char textfile[256];
	unsigned interval_ms;
	pthread_t writer;
	bool writer_running, stop;
	pthread_cond_t wake;
};

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* CLOCK_MONOTONIC ms from now, for pthread_cond_timedwait on h->wake and
 * h->fresh (made with that clock). */
static struct timespec deadline_after_ms(unsigned ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

static void snapshot_unref(struct snapshot *s)
{
	if (s && atomic_fetch_sub(&s->refs, 1) == 1) {
		free(s->data);
		free(s);
	}
}

/* The current snapshot with a reference the caller drops, or NULL;
 * h->lock held. */
static struct snapshot *snapshot_ref_locked(struct http *h)
{
	struct snapshot *s = h->snap;
	if (s)
		atomic_fetch_add(&s->refs, 1);
	return s;
}

/* The current snapshot with a reference the caller drops, or NULL. */
static struct snapshot *snapshot_take(struct http *h, uint64_t *published)
{
	pthread_mutex_lock(&h->lock);
	struct snapshot *s = snapshot_ref_locked(h);
	if (published)
		*published = h->published_ns;
	pthread_mutex_unlock(&h->lock);
	return s;
}

void http_publish(struct http *h, char *buf, size_t len)
{
	struct snapshot *s = malloc(sizeof(*s)), *old;

	if (!s) {
		free(buf); /* the last one stays served */
		return;
	}
	atomic_init(&s->refs, 1);
	s->len = len;
	s->data = buf;
	pthread_mutex_lock(&h->lock);
	old = h->snap;
	h->snap = s;
	h->published_ns = mono_ns();
	/* Rendered on the loop, which alone marks: it holds every mark. */
	h->snap_marked = atomic_load(&h->marked);
	pthread_cond_broadcast(&h->fresh);
	if (!old) /* the writer waits for the first one */
		pthread_cond_signal(&h->wake);
	pthread_mutex_unlock(&h->lock);
	snapshot_unref(old);
}

void http_mark_stale(struct http *h)
{
	if (h)
		atomic_fetch_add(&h->marked, 1);
}

/* A scrape's snapshot: rendered after every change marked before it was
 * asked for, unless the loop does not render within HTTP_RENDER_WAIT_MS. */
static struct snapshot *snapshot_take_fresh(struct http *h)
{
	uint64_t want = atomic_load(&h->marked);
	pthread_mutex_lock(&h->lock);
	if (h->snap_marked < want && h->render_ask) {
		struct timespec ts = deadline_after_ms(HTTP_RENDER_WAIT_MS);
		h->render_ask(h->render_arg);
		while (h->snap_marked < want && !h->stop &&
		       pthread_cond_timedwait(&h->fresh, &h->lock, &ts) == 0)
			;
	}
	struct snapshot *s = snapshot_ref_locked(h);
	pthread_mutex_unlock(&h->lock);
	return s;
}

/* ---- HTTP --------------------------------------------------------------- */

static ssize_t snapshot_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct snapshot *s = cls;
	if (pos >= s->len)
		return MHD_CONTENT_READER_END_OF_STREAM;
	size_t n = s->len - (size_t)pos;
	if (n > max)
		n = max;
	memcpy(buf, s->data + pos, n);
	return (ssize_t)n;
}

static void snapshot_free(void *cls)
{
	snapshot_unref(cls);
}

static enum MHD_Result http_text(struct MHD_Connection *c, unsigned status,
				 const char *text)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(
		strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
				"text/plain; charset=utf-8");
	enum MHD_Result ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result http_on_request(void *cls, struct MHD_Connection *c,
				       const char *url, const char *method,
				       const char *version UNUSED, const char *upload UNUSED,
				       size_t *upload_size UNUSED, void **req_cls UNUSED)
{
	struct http *h = cls;
	uint64_t published = 0;

	if (strcmp(method, MHD_HTTP_METHOD_GET) &&
	    strcmp(method, MHD_HTTP_METHOD_HEAD))
		return http_text(c, MHD_HTTP_METHOD_NOT_ALLOWED,
				 "method not allowed\n");
	if (strcmp(url, "/healthz") == 0) {
		struct snapshot *s = snapshot_take(h, &published);
		snapshot_unref(s);
		bool ok = s && mono_ns() - published < HTTP_HEALTHY_NS;
		return ok ? http_text(c, MHD_HTTP_OK, "ok\n") :
			    http_text(
				    c, MHD_HTTP_SERVICE_UNAVAILABLE,
				    "the daemon's loop has not rendered lately\n");
	}
	if (strcmp(url, "/metrics"))
		return http_text(c, MHD_HTTP_NOT_FOUND,
				 "not found: try /metrics\n");
	struct snapshot *s = snapshot_take_fresh(h);
	if (!s)
		return http_text(c, MHD_HTTP_SERVICE_UNAVAILABLE,
				 "no metrics yet\n");
	struct MHD_Response *r = MHD_create_response_from_callback(
		s->len, 16384, snapshot_read, s, snapshot_free);
	if (!r) {
		snapshot_unref(s);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
				"text/plain; version=0.0.4; charset=utf-8");
	enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return ret;
}

/* "HOST:PORT" or "[V6]:PORT", numeric, into *ss. 0 or -EINVAL. */
static int http_parse_addr(const char *spec, struct sockaddr_storage *ss,
			   socklen_t *len)
{
	char host[64];
	const char *port;
	struct addrinfo hints = { .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV |
					      AI_PASSIVE,
				  .ai_socktype = SOCK_STREAM };
	struct addrinfo *ai;

	if (spec[0] == '[') {
		const char *close = strchr(spec, ']');
		if (!close || close[1] != ':' ||
		    (size_t)(close - spec) > sizeof(host))
			return -EINVAL;
		snprintf(host, sizeof(host), "%.*s", (int)(close - spec - 1),
			 spec + 1);
		port = close + 2;
	} else {
		const char *colon = strrchr(spec, ':');
		if (!colon || (size_t)(colon - spec) >= sizeof(host))
			return -EINVAL;
		snprintf(host, sizeof(host), "%.*s", (int)(colon - spec), spec);
		port = colon + 1;
	}
	if (!*host || !*port || getaddrinfo(host, port, &hints, &ai) != 0)
		return -EINVAL;
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	*len = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
}

/* Binds the socket here, so that an address in use fails the daemon's
 * start with its errno, and hands it to libmicrohttpd. */
static int http_listen(struct http *h, const char *spec)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int one = 1, r;

	if (http_parse_addr(spec, &ss, &len) < 0) {
		log_err("metrics_listen %s: expected a numeric HOST:PORT",
			spec);
		return -EINVAL;
	}
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 64) < 0) {
		r = -errno;
		log_err("metrics_listen %s: %s", spec, strerror(-r));
		close(fd);
		return r;
	}
	len = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
		h->port =
			ntohs(ss.ss_family == AF_INET6 ?
				      ((struct sockaddr_in6 *)&ss)->sin6_port :
				      ((struct sockaddr_in *)&ss)->sin_port);
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	h->mhd = MHD_start_daemon(
		flags, 0, NULL, NULL, http_on_request, h,
		MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT, 16u,
		MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
	if (!h->mhd) {
		log_err("metrics_listen %s: libmicrohttpd did not start", spec);
		close(fd);
		return -EIO;
	}
	log_info("serving metrics on %s (port %u): GET /metrics, /healthz",
		 spec, h->port);
	return 0;
}

/* ---- the textfile -------------------------------------------------------- */

/* Writes s to PATH.tmp.PID and renames it over PATH, as node_exporter's
 * textfile collector asks, so it never reads half a file. */
static int textfile_write(const char *path, const struct snapshot *s)
{
	char tmp[300];
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	size_t off = 0;
	while (off < s->len) {
		ssize_t n = write(fd, s->data + off, s->len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int r = n < 0 ? -errno : -EIO;
			close(fd);
			unlink(tmp);
			return r;
		}
		off += (size_t)n;
	}
	if (close(fd) < 0 || rename(tmp, path) < 0) {
		int r = -errno;
		unlink(tmp);
		return r;
	}
	return 0;
}

static void *textfile_thread(void *arg)
{
	struct http *h = arg;
	int last_err = 0;

	pthread_mutex_lock(&h->lock);
	while (!h->stop) {
		struct snapshot *s = snapshot_ref_locked(h);
		if (!s) {
			pthread_cond_wait(&h->wake, &h->lock);
			continue;
		}
		{
			pthread_mutex_unlock(&h->lock);
			int r = textfile_write(h->textfile, s);
			if (r < 0 && r != last_err)
				log_warn("metrics_textfile %s: %s", h->textfile,
					 strerror(-r));
			last_err = r;
			snapshot_unref(s);
			pthread_mutex_lock(&h->lock);
		}
		struct timespec until = deadline_after_ms(h->interval_ms);
		while (!h->stop && pthread_cond_timedwait(&h->wake, &h->lock,
							  &until) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

int http_start(const char *listen, const char *textfile, unsigned interval_ms,
	       void (*render_ask)(void *arg), void *render_arg,
	       struct http **out)
{
	struct http *h = calloc(1, sizeof(*h));
	pthread_condattr_t ca;
	int r;

	if (!h)
		return -ENOMEM;
	pthread_mutex_init(&h->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&h->wake, &ca);
	pthread_cond_init(&h->fresh, &ca);
	pthread_condattr_destroy(&ca);
	atomic_init(&h->marked, 0);
	h->render_ask = render_ask;
	h->render_arg = render_arg;
	h->interval_ms = interval_ms ? interval_ms : 15000;
	if (listen && *listen && (r = http_listen(h, listen)) < 0) {
		http_stop(h);
		return r;
	}
	if (textfile && *textfile) {
		snprintf(h->textfile, sizeof(h->textfile), "%s", textfile);
		r = -pthread_create(&h->writer, NULL, textfile_thread, h);
		if (r < 0) {
			http_stop(h);
			return r;
		}
		h->writer_running = true;
		log_info("writing metrics to %s every %u ms", textfile,
			 h->interval_ms);
	}
	*out = h;
	return 0;
}

void http_stop(struct http *h)
{
	if (!h)
		return;
	/* A scrape waiting for a render that the stopping loop will not
	 * make is served what there is. */
	pthread_mutex_lock(&h->lock);
	h->stop = true;
	pthread_cond_broadcast(&h->fresh);
	pthread_cond_signal(&h->wake);
	pthread_mutex_unlock(&h->lock);
	if (h->mhd)
		MHD_stop_daemon(h->mhd);
	if (h->writer_running)
		pthread_join(h->writer, NULL);
	snapshot_unref(h->snap);
	pthread_cond_destroy(&h->fresh);
	pthread_cond_destroy(&h->wake);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

unsigned http_port(const struct http *h)
{
	return h ? h->port : 0;
}
