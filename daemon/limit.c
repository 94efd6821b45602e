/* SPDX-License-Identifier: Apache-2.0 */
/* The limits on what clients make the daemon hold: see limits.h. */
#include "limit.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"

/* How long the listener rests once the fd limit is reached: long enough
 * that a flood costs nothing, short enough that clients are served again
 * soon after fds free up. */
#define LIMITS_ACCEPT_PAUSE_MS 100

/* The most supplementary groups looked at for the admin group. */
#define LIMITS_MAX_GROUPS 256

/* ---- names --------------------------------------------------------------- */

bool limit_name_ok(const char *s, size_t max)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = 0;

	while (p[n]) {
		unsigned c = p[n], len;
		uint32_t cp;
		if (c < 0x20 || c == 0x7f)
			return false;
		if (c < 0x80) {
			n++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			len = 2;
			cp = c & 0x1f;
		} else if (c >= 0xe0 && c <= 0xef) {
			len = 3;
			cp = c & 0x0f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			len = 4;
			cp = c & 0x07;
		} else {
			return false; /* a continuation byte, 0xc0/0xc1, 0xf5.. */
		}
		for (unsigned i = 1; i < len; i++) {
			if ((p[n + i] & 0xc0) != 0x80)
				return false; /* also stops at the terminator */
			cp = cp << 6 | (p[n + i] & 0x3f);
		}
		if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
		    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false; /* overlong, out of range, a surrogate */
		if (cp >= 0x80 && cp <= 0x9f)
			return false; /* C1 controls: terminals obey them */
		n += len;
	}
	return n < max;
}

/* ---- users --------------------------------------------------------------- */

const struct limit_user *limit_user_find(const struct limit *l, uint32_t uid)
{
	for (unsigned i = 0; i < l->n_users; i++)
		if (l->users[i].uid == uid)
			return &l->users[i];
	return NULL;
}

/* uid's entry, made when missing; NULL when out of memory. Entries are
 * dropped once they hold nothing, so the table stays as long as the
 * number of uids connected. */
static struct limit_user *limit_user_get(struct limit *l, uint32_t uid)
{
	struct limit_user *u = (struct limit_user *)limit_user_find(l, uid);

	if (u)
		return u;
	if (l->n_users == l->cap_users) {
		unsigned cap = l->cap_users ? 2 * l->cap_users : 16;
		struct limit_user *n = realloc(l->users, cap * sizeof(*n));
		if (!n)
			return NULL;
		l->users = n;
		l->cap_users = cap;
	}
	u = &l->users[l->n_users++];
	memset(u, 0, sizeof(*u));
	u->uid = uid;
	return u;
}

static void limit_user_tidy(struct limit *l, struct limit_user *u)
{
	if (u->sessions || u->queued_bytes || u->queued_fds)
		return;
	*u = l->users[--l->n_users];
}

/* ---- sessions ------------------------------------------------------------ */

/* Root, or a member of the admin group (primary or supplementary, as
 * the kernel reports the peer's groups). */
static bool limit_privileged(const struct limit *l, int fd, uint32_t uid,
			     uint32_t gid)
{
	gid_t groups[LIMITS_MAX_GROUPS];
	socklen_t len = sizeof(groups);

	if (uid == 0)
		return true;
	if (!l->has_admin_gid)
		return false;
	if (gid == l->admin_gid)
		return true;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
		return false;
	for (size_t i = 0; i < len / sizeof(gid_t); i++)
		if (groups[i] == l->admin_gid)
			return true;
	return false;
}

static void limit_on_hello_timer(uv_timer_t *h);

/* Runs the hello timer to the oldest deadline, or stops it. */
static void limit_hello_arm(struct limit *l)
{
	if (!l->hello_head) {
		uv_timer_stop(&l->hello_timer);
		return;
	}
	int64_t wait = l->hello_head->hello_deadline_ms - clock_now_ms();
	uv_timer_start(&l->hello_timer, limit_on_hello_timer,
		       wait > 0 ? (uint64_t)wait : 0, 0);
}

static void limit_hello_unlink(struct limit *l, struct limit_acct *a)
{
	if (!a->hello_pending)
		return;
	a->hello_pending = false;
	if (a->hello_prev)
		a->hello_prev->hello_next = a->hello_next;
	else
		l->hello_head = a->hello_next;
	if (a->hello_next)
		a->hello_next->hello_prev = a->hello_prev;
	else
		l->hello_tail = a->hello_prev;
	a->hello_prev = a->hello_next = NULL;
}

/* Closes (through the owner) the sessions whose hello is late: the list
 * is in deadline order, so only the late ones are looked at. */
static void limit_on_hello_timer(uv_timer_t *h)
{
	struct limit *l = h->data;
	int64_t now = clock_now_ms();

	while (l->hello_head && l->hello_head->hello_deadline_ms <= now) {
		struct limit_acct *a = l->hello_head;
		limit_hello_unlink(l, a);
		l->on_hello_late(a, l->data);
	}
	if (l->hello_head) {
		int64_t wait = l->hello_head->hello_deadline_ms - now;
		uv_timer_start(&l->hello_timer, limit_on_hello_timer,
			       (uint64_t)wait, 0);
	}
}

int limit_session_admit(struct limit *l, struct limit_acct *a, int fd,
			uint32_t uid, uint32_t gid, char *why, size_t len)
{
	const struct config *cfg = l->cfg;
	struct limit_user *u;
	unsigned reserve = cfg->admin_reserve < cfg->max_sessions ?
				   cfg->admin_reserve :
				   cfg->max_sessions - 1;

	memset(a, 0, sizeof(*a));
	a->uid = uid;
	a->privileged = limit_privileged(l, fd, uid, gid);
	if (l->sessions >= cfg->max_sessions) {
		snprintf(why, len, "%u sessions is the limit",
			 cfg->max_sessions);
		return -EUSERS;
	}
	if (!a->privileged) {
		unsigned others = l->sessions - l->privileged_sessions;
		const struct limit_user *cur = limit_user_find(l, uid);
		if (others >= cfg->max_sessions - reserve) {
			snprintf(
				why, len,
				"%u sessions is the limit, %u kept for root and the admin group",
				cfg->max_sessions, reserve);
			return -EUSERS;
		}
		if (cur && cur->sessions >= cfg->max_sessions_per_uid) {
			snprintf(why, len, "uid %u holds its %u sessions", uid,
				 cfg->max_sessions_per_uid);
			return -EUSERS;
		}
	}
	u = limit_user_get(l, uid);
	if (!u) {
		snprintf(why, len, "out of memory");
		return -ENOMEM;
	}
	u->sessions++;
	l->sessions++;
	if (a->privileged)
		l->privileged_sessions++;
	a->counted = true;
	a->hello_pending = true;
	a->hello_deadline_ms = clock_now_ms() + cfg->hello_timeout_ms;
	a->hello_prev = l->hello_tail;
	if (l->hello_tail)
		l->hello_tail->hello_next = a;
	else
		l->hello_head = a;
	l->hello_tail = a;
	if (l->hello_head == a)
		limit_hello_arm(l);
	return 0;
}

void limit_session_gone(struct limit *l, struct limit_acct *a)
{
	struct limit_user *u;

	limit_hello_unlink(l, a);
	if (!a->counted)
		return;
	a->counted = false;
	l->sessions--;
	if (a->privileged)
		l->privileged_sessions--;
	u = (struct limit_user *)limit_user_find(l, a->uid);
	if (u) {
		u->sessions--;
		limit_user_tidy(l, u);
	}
}

void limit_hello_done(struct limit *l, struct limit_acct *a)
{
	bool was_head = l->hello_head == a;

	limit_hello_unlink(l, a);
	if (was_head)
		limit_hello_arm(l);
}

/* ---- queued output ------------------------------------------------------- */

bool limit_queue_admit(struct limit *l, const struct limit_acct *a,
		       size_t per_session, size_t len, unsigned nfds)
{
	const struct config *cfg = l->cfg;
	const struct limit_user *u = limit_user_find(l, a->uid);
	size_t ub = u ? u->queued_bytes : 0;
	unsigned uf = u ? u->queued_fds : 0;

	if (a->bytes == 0 && a->fds == 0)
		return true;
	if (a->bytes + len > per_session)
		return false;
	if (l->queued_bytes + len > cfg->max_queued ||
	    l->queued_fds + nfds > l->max_queued_fds)
		return false;
	if (!a->privileged && (ub + len > cfg->max_queued_per_uid ||
			       uf + nfds > cfg->max_queued_fds_per_uid))
		return false;
	return true;
}

void limit_queue_sync(struct limit *l, struct limit_acct *a, size_t bytes,
		      unsigned fds)
{
	struct limit_user *u;

	if (bytes == a->bytes && fds == a->fds)
		return;
	l->queued_bytes = l->queued_bytes - a->bytes + bytes;
	l->queued_fds = l->queued_fds - a->fds + fds;
	u = limit_user_get(l, a->uid);
	if (u) {
		/* An entry made here (out of memory before) starts at 0. */
		u->queued_bytes = u->queued_bytes >= a->bytes ?
					  u->queued_bytes - a->bytes + bytes :
					  bytes;
		u->queued_fds = u->queued_fds >= a->fds ?
					u->queued_fds - a->fds + fds :
					fds;
		limit_user_tidy(l, u);
	}
	a->bytes = bytes;
	a->fds = fds;
}

/* ---- the listener -------------------------------------------------------- */

static int limit_reserve_open(void)
{
	return open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static void limit_on_accept_timer(uv_timer_t *h)
{
	struct limit *l = h->data;

	l->accept_paused = false;
	if (l->reserve_fd < 0)
		l->reserve_fd = limit_reserve_open();
	uv_poll_start(l->listen_poll, UV_READABLE, l->on_accept);
}

bool limit_accept_failed(struct limit *l, int err)
{
	if (err != EMFILE && err != ENFILE) {
		if (err != EAGAIN && err != EINTR && err != ECONNABORTED)
			log_warn("accept: %s", strerror(err));
		return err != EINTR && err != ECONNABORTED;
	}
	if (!l->at_limit)
		log_warn(
			"at the fd limit (%s): refusing connections until fds free up",
			strerror(err));
	/* The reserve fd makes room for one accept, so the client waiting
	 * is told (its connection closes) instead of left in the backlog
	 * that would keep the listener readable. */
	for (int i = 0; i < 64 && l->reserve_fd >= 0; i++) {
		close(l->reserve_fd);
		int fd = accept4(l->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0) {
			close(fd);
			l->refused_at_limit++;
		}
		l->reserve_fd = limit_reserve_open();
		if (fd < 0)
			break;
	}
	l->at_limit = true;
	if (!l->accept_paused) {
		l->accept_paused = true;
		uv_poll_stop(l->listen_poll);
		uv_timer_start(&l->accept_timer, limit_on_accept_timer,
			       LIMITS_ACCEPT_PAUSE_MS, 0);
	}
	return true;
}

void limit_accept_ok(struct limit *l)
{
	if (!l->at_limit)
		return;
	l->at_limit = false;
	log_warn("accepting again: %llu connection(s) refused at the fd limit",
		 (unsigned long long)l->refused_at_limit);
	l->refused_at_limit = 0;
}

/* ---- setup --------------------------------------------------------------- */

int limit_init(struct limit *l, uv_loop_t *loop, const struct config *cfg,
	       uv_poll_t *listen_poll, int listen_fd, uv_poll_cb on_accept,
	       void (*on_hello_late)(struct limit_acct *a, void *data),
	       void *data)
{
	struct rlimit rl;

	memset(l, 0, sizeof(*l));
	l->cfg = cfg;
	l->listen_poll = listen_poll;
	l->listen_fd = listen_fd;
	l->on_accept = on_accept;
	l->on_hello_late = on_hello_late;
	l->data = data;
	l->max_queued_fds = cfg->max_queued_fds;
	/* Queued fds must leave room for the sessions and the pools. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
	    rl.rlim_cur != RLIM_INFINITY && l->max_queued_fds > rl.rlim_cur / 2)
		l->max_queued_fds = (unsigned)(rl.rlim_cur / 2);
	if (cfg->admin_group[0]) {
		char *end;
		unsigned long g = strtoul(cfg->admin_group, &end, 10);
		struct group *gr;
		if (!*end && end != cfg->admin_group) {
			l->admin_gid = (gid_t)g;
			l->has_admin_gid = true;
		} else if ((gr = getgrnam(cfg->admin_group))) {
			l->admin_gid = gr->gr_gid;
			l->has_admin_gid = true;
		} else {
			log_warn(
				"admin_group %s: no such group; only root is admin",
				cfg->admin_group);
		}
	}
	l->reserve_fd = limit_reserve_open();
	if (l->reserve_fd < 0)
		return -errno;
	uv_timer_init(loop, &l->accept_timer);
	uv_timer_init(loop, &l->hello_timer);
	l->accept_timer.data = l->hello_timer.data = l;
	return 0;
}

void limit_close(struct limit *l)
{
	uv_close((uv_handle_t *)&l->accept_timer, NULL);
	uv_close((uv_handle_t *)&l->hello_timer, NULL);
}

void limit_fini(struct limit *l)
{
	if (l->reserve_fd >= 0)
		close(l->reserve_fd);
	l->reserve_fd = -1;
	free(l->users);
	l->users = NULL;
	l->n_users = l->cap_users = 0;
}
