/* SPDX-License-Identifier: Apache-2.0 */
/* The fd store's bookkeeping: what systemd holds for us, by name. */
#include "fdstore.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "node.h"
#include "notify.h"
#include "session.h"

int fdstore_init(struct fdstore *s)
{
	const char *max = getenv("FDSTORE");
	const char *sock = getenv("NOTIFY_SOCKET");

	memset(s, 0, sizeof(*s));
	if (max && sock && sock[0]) {
		char *end;
		unsigned long v = strtoul(max, &end, 10);
		if (*end == '\0' && v > 0 && v < (1ul << 30)) {
			s->on = true;
			s->max = (unsigned)v;
		}
	}
	return 0;
}

void fdstore_fini(struct fdstore *s)
{
	free(s->e);
	table_buf_free(&s->last);
	table_buf_free(&s->scratch);
	memset(s, 0, sizeof(*s));
}

int fdstore_room(const struct fdstore *s, unsigned more)
{
	if (!s->on)
		return 0;
	/* Two for the tables: the new one is stored before the old goes. */
	return (uint64_t)s->n + more + 2 <= s->max ? 0 : -ENOSPC;
}

static int fdstore_add(struct fdstore *s, const char *name, int fd,
		       uint64_t serial)
{
	struct stat st = { 0 };

	if (s->n == s->cap) {
		unsigned cap = s->cap ? 2 * s->cap : 256;
		struct fdstore_entry *e = realloc(s->e, cap * sizeof(*e));
		if (!e)
			return -ENOMEM;
		s->e = e;
		s->cap = cap;
	}
	struct fdstore_entry *e = &s->e[s->n++];
	memset(e, 0, sizeof(*e));
	snprintf(e->name, sizeof(e->name), "%s", name);
	e->fd = fd;
	e->serial = serial;
	if (fd >= 0 && fstat(fd, &st) == 0) {
		e->dev = st.st_dev;
		e->ino = st.st_ino;
	}
	e->seen = true;
	return 0;
}

int fdstore_adopt(struct fdstore *s, const char *name, int fd)
{
	int r = fdstore_add(s, name, fd, 0);
	if (r == 0)
		s->e[s->n - 1].seen = false;
	return r;
}

static int fdstore_send(struct fdstore *s, const char *name, int fd)
{
	char msg[FDSTORE_NAME_MAX + 32];
	int r;

	snprintf(msg, sizeof(msg), "FDSTORE=1\nFDNAME=%s", name);
	r = notify_send_fds(msg, &fd, 1);
	if (r < 0) {
		s->failures++;
		log_err("fd store: cannot store %s: %s (it would be lost by a "
			"restart)",
			name, strerror(-r));
	}
	return r;
}

static void fdstore_remove_name(struct fdstore *s, const char *name)
{
	char msg[FDSTORE_NAME_MAX + 32];
	int r;

	snprintf(msg, sizeof(msg), "FDSTOREREMOVE=1\nFDNAME=%s", name);
	r = notify_send_fds(msg, NULL, 0);
	if (r < 0) {
		s->failures++;
		log_err("fd store: cannot remove %s: %s", name, strerror(-r));
	}
}

int fdstore_put(struct fdstore *s, const char *name, int fd)
{
	if (!s->on || s->frozen)
		return 0;
	int r = fdstore_send(s, name, fd);
	return r < 0 ? r : fdstore_add(s, name, fd, 0);
}

static struct fdstore_entry *fdstore_find(struct fdstore *s, const char *name,
					  unsigned *hint)
{
	if (*hint < s->n && strcmp(s->e[*hint].name, name) == 0)
		return &s->e[(*hint)++];
	for (unsigned i = 0; i < s->n; i++)
		if (strcmp(s->e[i].name, name) == 0) {
			*hint = i + 1;
			return &s->e[i];
		}
	return NULL;
}

/* Whether fd is the file e was stored from: the same chunk creation
 * (serial) says so at no cost, an fstat otherwise. */
static bool fdstore_same(const struct fdstore_entry *e, int fd, uint64_t serial)
{
	struct stat st;
	if (e->fd != fd)
		return false;
	if (serial && e->serial == serial)
		return true;
	if (fstat(fd, &st) < 0)
		return false;
	return st.st_dev == e->dev && st.st_ino == e->ino;
}

static void fdstore_drop_entry(struct fdstore *s, struct fdstore_entry *e)
{
	*e = s->e[--s->n];
}

/* Makes sure fd is in the store as name; serial as in struct chunk. */
static void fdstore_want(struct fdstore *s, const char *name, int fd,
			 uint64_t serial, unsigned *hint)
{
	struct fdstore_entry *e = fdstore_find(s, name, hint);

	if (e && fdstore_same(e, fd, serial)) {
		e->seen = true;
		return;
	}
	if (e) {
		/* The name holds an older fd (closed and made again between
		 * two syncs): it goes first, or the removal would take the
		 * new one too. */
		fdstore_remove_name(s, name);
		fdstore_drop_entry(s, e);
		*hint = 0;
	}
	if (s->n + 2 > s->max) {
		if (!s->full_logged)
			log_err("fd store: full at FileDescriptorStoreMax=%u; "
				"%s is not kept across a restart",
				s->max, name);
		s->full_logged = true;
		s->failures++;
		return;
	}
	if (fdstore_send(s, name, fd) == 0)
		fdstore_add(s, name, fd, serial);
}

static uint64_t fdstore_session_id(const struct session *x)
{
	return x ? x->id : 0;
}

/* Writes the table to a sealed memfd and stores it, then drops the old.
 * The table is built in s->scratch, whose memory is kept from one sync to
 * the next: most syncs find it unchanged and store nothing. */
static void fdstore_table(struct fdstore *s, struct node *n)
{
	struct table_buf *b = &s->scratch;
	char name[FDSTORE_NAME_MAX];

	b->len = 0;
	b->err = 0;
	table_put_header(b, TABLE_VERSION, n->n_pools, n->next_pool_id,
			 n->next_event_id, s->table_gen + 1);
	for (unsigned i = 0; i < n->n_pools; i++)
		table_put_pool(b, n->pools[i],
			       fdstore_session_id(n->pools[i]->owner));
	if (b->err) {
		log_err("fd store: out of memory writing the pool table");
		s->failures++;
		table_buf_free(b);
		return;
	}
	/* The generation is in the header: compare what follows it. */
	if (s->table_name[0] && s->last.len == b->len &&
	    memcmp(s->last.data + 40, b->data + 40, b->len - 40) == 0 &&
	    memcmp(s->last.data, b->data, 32) == 0)
		return;
	int fd = memfd_create("vramd-table", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || write(fd, b->data, b->len) != (ssize_t)b->len ||
	    fcntl(fd, F_ADD_SEALS,
		  F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) <
		    0) {
		log_err("fd store: cannot write the pool table: %s",
			strerror(errno));
		s->failures++;
		if (fd >= 0)
			close(fd);
		return;
	}
	snprintf(name, sizeof(name), "vramd-t-%" PRIu64, s->table_gen + 1);
	if (fdstore_send(s, name, fd) == 0) {
		if (s->table_name[0])
			fdstore_remove_name(s, s->table_name);
		snprintf(s->table_name, sizeof(s->table_name), "%s", name);
		s->table_gen++;
		/* The table stored becomes the last; the old one's memory is
		 * the next build's. */
		struct table_buf t = s->last;
		s->last = *b;
		*b = t;
	}
	close(fd);
}

/* Whether the fds the node holds can have changed since the last
 * complete pass: see struct fdstore. */
static bool fdstore_fds_moved(const struct fdstore *s, const struct node *n)
{
	return !s->fds_known || s->fds_chunk_gen != n->backend->chunk_gen ||
	       s->fds_pools != n->n_pools ||
	       s->fds_next_pool != n->next_pool_id;
}

/* Stores every fd the node holds that the store lacks. */
static void fdstore_want_all(struct fdstore *s, struct node *n)
{
	char name[FDSTORE_NAME_MAX];
	unsigned hint = 0;

	for (unsigned i = 0; i < s->n; i++)
		s->e[i].seen = strcmp(s->e[i].name, "vramd-listen") == 0;
	for (unsigned i = 0; i < n->n_pools; i++) {
		struct pool *p = n->pools[i];
		if (p->backup_fd >= 0) {
			snprintf(name, sizeof(name), "vramd-b-%" PRIu64, p->id);
			fdstore_want(s, name, p->backup_fd, 0, &hint);
		}
		for (unsigned k = 0; k < p->n_chunks; k++) {
			if (p->chunks[k].fd < 0)
				continue;
			snprintf(name, sizeof(name), "vramd-c-%" PRIu64 "-%u",
				 p->id, k);
			fdstore_want(s, name, p->chunks[k].fd,
				     p->chunks[k].serial, &hint);
		}
	}
}

/* Removes from the store what the node no longer holds (not seen by the
 * pass) and the tables but the current one. */
static void fdstore_drop_unseen(struct fdstore *s)
{
	for (unsigned i = 0; i < s->n;) {
		struct fdstore_entry *e = &s->e[i];
		if (e->seen || strncmp(e->name, "vramd-t-", 8) == 0) {
			i++;
			continue;
		}
		fdstore_remove_name(s, e->name);
		fdstore_drop_entry(s, e);
	}
	/* Tables passed back at start but not the current one. */
	for (unsigned i = 0; i < s->n;) {
		struct fdstore_entry *e = &s->e[i];
		if (strncmp(e->name, "vramd-t-", 8) == 0 &&
		    strcmp(e->name, s->table_name) != 0) {
			fdstore_remove_name(s, e->name);
			fdstore_drop_entry(s, e);
			continue;
		}
		i++;
	}
}

void fdstore_sync(struct fdstore *s, struct node *n)
{
	if (!s->on || s->frozen)
		return;
	bool pass = fdstore_fds_moved(s, n);
	uint64_t failures = s->failures;
	if (pass)
		fdstore_want_all(s, n);
	fdstore_table(s, n);
	if (!pass)
		return;
	/* What the node no longer holds leaves the store last, so that the
	 * table stored never names a chunk the store has lost. */
	fdstore_drop_unseen(s);
	s->fd_passes++;
	/* A pass that could not store everything is made again next time. */
	s->fds_known = s->failures == failures;
	s->fds_chunk_gen = n->backend->chunk_gen;
	s->fds_pools = n->n_pools;
	s->fds_next_pool = n->next_pool_id;
}
