/* SPDX-License-Identifier: Apache-2.0 */
/* The admin lane: see lane.h. */
#include "lane.h"
#include "attr.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

/* How long the listener rests at the fd limit (as the main one does,
 * limit.c): the admin waits in the backlog meanwhile, not refused. */
#define LANE_PAUSE_MS 100

static void lane_on_listen(uv_poll_t *h, int status UNUSED, int events UNUSED)
{
	struct lane *l = h->data;

	l->on_accept(l->data);
}

static void lane_on_pause_timer(uv_timer_t *h)
{
	struct lane *l = h->data;

	l->paused = false;
	l->pfds[0].fd = l->listen_fd;
	uv_poll_start(&l->listen_poll, UV_READABLE, lane_on_listen);
}

int lane_init(struct lane *l, uv_loop_t *loop, int listen_fd, unsigned check_us,
	      void (*on_accept)(void *data),
	      void (*on_ready)(void *owner, void *data), void *data)
{
	int r;

	memset(l, 0, sizeof(*l));
	l->listen_fd = -1;
	if (listen_fd < 0)
		return 0;
	l->cap = 8;
	l->pfds = calloc(l->cap, sizeof(*l->pfds));
	l->owners = calloc(l->cap, sizeof(*l->owners));
	if (!l->pfds || !l->owners) {
		free(l->pfds);
		free(l->owners);
		l->pfds = NULL;
		l->owners = NULL;
		close(listen_fd);
		return -ENOMEM;
	}
	r = uv_poll_init(loop, &l->listen_poll, listen_fd);
	if (r < 0) {
		free(l->pfds);
		free(l->owners);
		l->pfds = NULL;
		l->owners = NULL;
		close(listen_fd);
		return r;
	}
	uv_timer_init(loop, &l->pause_timer);
	l->handles = true;
	l->listen_poll.data = l->pause_timer.data = l;
	l->listen_fd = listen_fd;
	l->pfds[0] = (struct pollfd){ .fd = listen_fd, .events = POLLIN };
	l->n = 1;
	l->check_ns = (uint64_t)check_us * 1000;
	l->on_accept = on_accept;
	l->on_ready = on_ready;
	l->data = data;
	uv_poll_start(&l->listen_poll, UV_READABLE, lane_on_listen);
	return 0;
}

int lane_add(struct lane *l, int fd, void *owner)
{
	if (l->listen_fd < 0)
		return 0;
	if (l->n == l->cap) {
		unsigned cap = 2 * l->cap;
		struct pollfd *p = realloc(l->pfds, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		l->pfds = p;
		void **o = realloc(l->owners, cap * sizeof(*o));
		if (!o)
			return -ENOMEM;
		l->owners = o;
		l->cap = cap;
	}
	/* revents 0: an entry added during a pass is not looked at in it. */
	l->pfds[l->n] = (struct pollfd){ .fd = fd, .events = POLLIN };
	l->owners[l->n] = owner;
	l->n++;
	return 0;
}

/* Drops the entries marked during a pass, keeping the others' order. */
static void lane_compact(struct lane *l)
{
	unsigned k = 1;

	for (unsigned i = 1; i < l->n; i++) {
		if (!l->owners[i])
			continue;
		l->pfds[k] = l->pfds[i];
		l->owners[k] = l->owners[i];
		k++;
	}
	l->n = k;
	l->holes = false;
}

void lane_remove(struct lane *l, const void *owner)
{
	for (unsigned i = 1; i < l->n; i++) {
		if (l->owners[i] != owner)
			continue;
		/* During a pass the entries keep their places, so that the
		 * pass's index stays right; a negative fd is not polled. */
		l->owners[i] = NULL;
		l->pfds[i].fd = -1;
		l->pfds[i].revents = 0;
		if (l->running)
			l->holes = true;
		else
			lane_compact(l);
		return;
	}
}

bool lane_accept_failed(struct lane *l, int err)
{
	if (err != EMFILE && err != ENFILE) {
		if (err != EAGAIN && err != EINTR && err != ECONNABORTED)
			log_warn("accept on the admin socket: %s",
				 strerror(err));
		return err != EINTR && err != ECONNABORTED;
	}
	if (!l->paused) {
		log_warn(
			"admin socket: at the fd limit (%s); retrying in %d ms",
			strerror(err), LANE_PAUSE_MS);
		l->paused = true;
		l->pfds[0].fd = -1;
		uv_poll_stop(&l->listen_poll);
		uv_timer_start(&l->pause_timer, lane_on_pause_timer,
			       LANE_PAUSE_MS, 0);
	}
	return true;
}

void lane_poll(struct lane *l)
{
	int r;

	if (l->listen_fd < 0 || l->running)
		return;
	l->due_ns = uv_hrtime() + l->check_ns;
	do
		r = poll(l->pfds, l->n, 0);
	while (r < 0 && errno == EINTR);
	if (r <= 0)
		return;
	l->running = true;
	/* The sessions first: a request already in is served before a new
	 * connection is taken. l->n may grow meanwhile (an accept), and the
	 * entries added have no revents. */
	for (unsigned i = 1; i < l->n; i++) {
		short ev = l->pfds[i].revents;
		l->pfds[i].revents = 0;
		if (ev && l->owners[i])
			l->on_ready(l->owners[i], l->data);
	}
	if (l->pfds[0].revents & POLLIN)
		l->on_accept(l->data);
	l->pfds[0].revents = 0;
	l->running = false;
	if (l->holes)
		lane_compact(l);
}

void lane_close(struct lane *l)
{
	if (!l->handles)
		return;
	uv_close((uv_handle_t *)&l->listen_poll, NULL);
	uv_close((uv_handle_t *)&l->pause_timer, NULL);
	l->handles = false;
}

void lane_fini(struct lane *l)
{
	if (l->listen_fd >= 0)
		close(l->listen_fd);
	l->listen_fd = -1;
	free(l->pfds);
	free(l->owners);
	l->pfds = NULL;
	l->owners = NULL;
	l->n = l->cap = 0;
}
