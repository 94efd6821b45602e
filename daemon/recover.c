/* SPDX-License-Identifier: Apache-2.0 */
/* Rebuilding the pools from the fd store at start (the rules are in
 * recover.h). */
#include "recover.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "fdstore.h"
#include "log.h"
#include "node.h"
#include "table.h"

int recover_collect(struct recover *rc)
{
	char **names = NULL;
	int n;

	memset(rc, 0, sizeof(*rc));
	rc->listen_fd = -1;
	n = sd_listen_fds_with_names(1, &names);
	if (n < 0) {
		log_warn("the fds passed at start cannot be read: %s",
			 strerror(-n));
		return n;
	}
	if (n == 0)
		return 0;
	rc->fds = calloc((size_t)n, sizeof(*rc->fds));
	if (!rc->fds) {
		for (int i = 0; i < n; i++) {
			close(SD_LISTEN_FDS_START + i);
			free(names ? names[i] : NULL);
		}
		free(names);
		return -ENOMEM;
	}
	for (int i = 0; i < n; i++) {
		int fd = SD_LISTEN_FDS_START + i;
		const char *name = names && names[i] ? names[i] : "unknown";
		bool ours = strncmp(name, "vramd-", 6) == 0;

		fcntl(fd, F_SETFD, FD_CLOEXEC);
		if (strcmp(name, "vramd-listen") == 0 ||
		    (!ours && rc->listen_fd < 0 &&
		     sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0) > 0)) {
			if (rc->listen_fd >= 0) {
				/* systemd's socket comes first; our own stored
				 * copy of the same path is not needed. */
				if (strcmp(name, "vramd-listen") == 0) {
					snprintf(rc->fds[rc->n_fds].name, 64,
						 "%s", name);
					rc->fds[rc->n_fds++].fd = fd;
					continue;
				}
				close(rc->listen_fd);
			}
			rc->listen_fd = fd;
			rc->listen_ours = strcmp(name, "vramd-listen") == 0;
			continue;
		}
		if (!ours) {
			log_warn("fd %d passed at start (%s) is not vramd's; "
				 "closing it",
				 fd, name);
			close(fd);
			continue;
		}
		snprintf(rc->fds[rc->n_fds].name, sizeof(rc->fds[0].name), "%s",
			 name);
		rc->fds[rc->n_fds++].fd = fd;
	}
	for (int i = 0; names && i < n; i++)
		free(names[i]);
	free(names);
	return 0;
}

static int recover_take(struct recover *rc, const char *name)
{
	for (unsigned i = 0; i < rc->n_fds; i++)
		if (!rc->fds[i].used && strcmp(rc->fds[i].name, name) == 0) {
			rc->fds[i].used = true;
			return rc->fds[i].fd;
		}
	return -1;
}

/* Reads the newest table that parses. */
static int recover_table(struct recover *rc, struct fdstore *st,
			 struct table *out)
{
	int best = -1;

	for (unsigned i = 0; i < rc->n_fds; i++) {
		struct recover_fd *f = &rc->fds[i];
		struct stat sb;
		struct table t;
		uint64_t gen;

		if (sscanf(f->name, "vramd-t-%" SCNu64, &gen) != 1)
			continue;
		if (gen > st->table_gen)
			st->table_gen = gen;
		if (fstat(f->fd, &sb) < 0 || sb.st_size <= 0 ||
		    sb.st_size > (1 << 30))
			continue;
		unsigned char *buf = malloc((size_t)sb.st_size);
		if (!buf)
			return -ENOMEM;
		ssize_t got = pread(f->fd, buf, (size_t)sb.st_size, 0);
		int r = got == sb.st_size ? table_parse(buf, (size_t)got, &t) :
					    -EIO;
		free(buf);
		if (r < 0) {
			log_err("fd store: table %s cannot be read (%s); "
				"ignoring it",
				f->name, strerror(-r));
			continue;
		}
		if (best < 0 || t.generation > out->generation) {
			if (best >= 0)
				table_free(out);
			*out = t;
			best = (int)i;
		} else {
			table_free(&t);
		}
	}
	if (best < 0)
		return -ENOENT;
	if (out->version > TABLE_VERSION)
		log_info("fd store: the table was written by a newer vramd "
			 "(version %u; this one writes %u): fields it does not "
			 "know are skipped",
			 out->version, TABLE_VERSION);
	log_info("fd store: table %s (version %u, %u pools)",
		 rc->fds[best].name, out->version, out->n_pools);
	return 0;
}

static void recover_hold(struct recover *rc, struct backend *b, unsigned dev,
			 uint64_t bytes)
{
	rc->held[dev] += bytes;
	b->devices[dev].used_bytes += bytes;
	b->used_bytes += bytes;
}

/* Builds one pool. Returns 1 when rebuilt, 0 when skipped. */
static int recover_pool(struct recover *rc, struct node *n,
			const struct table_pool *tp)
{
	struct backend *b = n->backend;
	char name[64];
	uint64_t off = 0;
	bool missing = false;

	if (tp->unknown_must) {
		log_err("pool %s: the table has field %d this vramd does not "
			"know and must not ignore; the pool is not rebuilt",
			tp->name, tp->unknown_must);
		return 0;
	}
	if (tp->device >= b->n_devices || node_pool_by_id(n, tp->id) ||
	    node_pool_by_name(n, tp->owner.uid, tp->name)) {
		log_err("pool %s: device %u or its name or id is not usable "
			"here; the pool is not rebuilt",
			tp->name, tp->device);
		return 0;
	}
	for (unsigned k = 0; k < tp->n_chunks; k++) {
		if (tp->chunks[k].offset != off)
			missing = true;
		off += tp->chunks[k].size;
	}
	if (missing || off != tp->bytes || off > tp->reserve) {
		log_err("pool %s: its chunks in the table do not add up; the "
			"pool is not rebuilt",
			tp->name);
		return 0;
	}
	struct pool *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->id = tp->id;
	snprintf(p->name, sizeof(p->name), "%s", tp->name);
	snprintf(p->tag, sizeof(p->tag), "%s", tp->tag);
	p->device = tp->device;
	p->policy = tp->policy;
	p->flags = tp->flags & POOL_FLAGS_ALL;
	p->reserve = tp->reserve;
	p->bytes = tp->bytes;
	p->owner_id = tp->owner;
	p->backup_fd = -1;
	p->chunks = calloc(tp->n_chunks ? tp->n_chunks : 1, sizeof(*p->chunks));
	if (!p->chunks) {
		free(p);
		return -ENOMEM;
	}
	p->n_chunks = p->cap_chunks = tp->n_chunks;
	for (unsigned k = 0; k < tp->n_chunks; k++) {
		struct chunk *c = &p->chunks[k];
		c->offset = tp->chunks[k].offset;
		c->size = tp->chunks[k].size;
		snprintf(name, sizeof(name), "vramd-c-%" PRIu64 "-%u", p->id,
			 k);
		c->fd = recover_take(rc, name);
		if (c->fd >= 0) {
			c->counted = true;
			b->devices[p->device].used_bytes += c->size;
			b->used_bytes += c->size;
			rc->chunks++;
		}
	}
	snprintf(name, sizeof(name), "vramd-b-%" PRIu64, p->id);
	p->backup_fd = recover_take(rc, name);
	if (p->policy == POOL_HOST && p->backup_fd < 0) {
		int fd = backup_create(NULL, p->id, p->name, p->reserve, NULL);
		p->backup_fd = fd < 0 ? -1 : fd;
		if (fd < 0)
			log_err("pool %s: cannot make its backup: %s", p->name,
				strerror(-fd));
		else
			log_err("pool %s: its backup was not in the store; it "
				"has none now",
				p->name);
	} else if (p->policy != POOL_HOST && p->backup_fd >= 0) {
		close(p->backup_fd);
		p->backup_fd = -1;
	}
	bool backup = p->policy == POOL_HOST && p->backup_fd >= 0;
	bool all_held = true;
	for (unsigned k = 0; k < p->n_chunks; k++)
		if (p->chunks[k].fd < 0)
			all_held = false;

	enum pool_state state = tp->state;
	/* A save in parts the restart cut: its saver (libvram) copies every
	 * chunk before it looks at the daemon again, so once it is done the
	 * backup holds the pool, and the pause is as good as unmapped. */
	if (state == POOL_PAUSING_SAVE && tp->saved > 0 &&
	    tp->saved <= p->n_chunks && backup) {
		log_info("pool %s: a save in parts was under way (%u of %u "
			 "chunks saved); it is taken as done",
			 p->name, tp->saved, p->n_chunks);
		state = POOL_PAUSING_UNMAP;
		p->save_cut = true;
	}
	switch (state) {
	case POOL_ACTIVE:
	case POOL_RESUMING_MAP:
	case POOL_PAUSING_SAVE:
	case POOL_PAUSING_UNDO_SAVE:
		/* A save under way is not trusted: the chunks hold the
		 * content. */
		if (all_held) {
			p->state = POOL_ACTIVE;
			p->backup_valid = false;
			break;
		}
		log_err("pool %s: the store lacks some of its chunks; it comes "
			"back paused without its content",
			p->name);
		for (unsigned k = 0; k < p->n_chunks; k++)
			backend_chunk_release(b, p->device, &p->chunks[k]);
		p->state = POOL_PAUSED;
		p->backup_valid = false;
		break;
	case POOL_PAUSING_UNMAP:
	case POOL_PAUSING_UNDO:
		/* Saved (host) or not kept (discard): the pause is done but
		 * mappers that had not unmapped yet may still hold the bytes. */
		for (unsigned k = 0; k < p->n_chunks; k++)
			backend_chunk_release(b, p->device, &p->chunks[k]);
		recover_hold(rc, b, p->device, p->bytes);
		p->state = POOL_PAUSED;
		p->backup_valid = backup;
		break;
	case POOL_RESUMING_RESTORE:
		for (unsigned k = 0; k < p->n_chunks; k++)
			backend_chunk_release(b, p->device, &p->chunks[k]);
		recover_hold(rc, b, p->device, p->bytes);
		p->state = POOL_PAUSED;
		p->backup_valid = backup && tp->backup_bytes == p->bytes;
		break;
	case POOL_PAUSED:
		for (unsigned k = 0; k < p->n_chunks; k++)
			backend_chunk_release(b, p->device, &p->chunks[k]);
		p->state = POOL_PAUSED;
		p->backup_valid =
			backup && tp->backup_bytes == p->bytes && p->bytes;
		break;
	}
	if (node_pool_add(n, p) < 0) {
		pool_destroy(p, b);
		return -ENOMEM;
	}
	if (p->owner_id.pid) {
		uint64_t *a =
			realloc(rc->awaited, (rc->n_awaited + 1) * sizeof(*a));
		if (a) {
			rc->awaited = a;
			a[rc->n_awaited++] = p->id;
		}
	}
	if (p->id > n->next_pool_id)
		n->next_pool_id = p->id;
	log_info("pool %s recovered: %s, %llu bytes in %u chunks%s%s", p->name,
		 pool_state_name(p->state), (unsigned long long)p->bytes,
		 p->n_chunks, p->backup_valid ? ", backup valid" : "",
		 p->owner_id.pid ? ", waiting for its owner" : "");
	return 1;
}

/* The grace period is over: owners that did not come back are gone. */
static void recover_on_grace(uv_timer_t *h)
{
	struct recover *rc = h->data;
	struct node *n = rc->node;
	struct backend *b = n->backend;

	for (unsigned i = 0; i < rc->n_awaited; i++) {
		struct pool *p = node_pool_by_id(n, rc->awaited[i]);
		if (!p || p->owner)
			continue;
		if (p->flags & POOL_FLAG_PERSIST) {
			log_info("pool %s kept (persistent): its owner pid %u "
				 "did not come back after the restart",
				 p->name, p->owner_id.pid);
			pool_set_owner(p, NULL, NULL);
			continue;
		}
		log_info("pool %s dropped: its owner pid %u did not come back "
			 "after the restart",
			 p->name, p->owner_id.pid);
		node_pool_drop(n, p, NULL);
	}
	rc->n_awaited = 0;
	/* Whoever was saving has had the grace period to finish. */
	for (unsigned i = 0; i < n->n_pools; i++)
		n->pools[i]->save_cut = false;
	for (unsigned d = 0; d < b->n_devices; d++) {
		b->devices[d].used_bytes -= rc->held[d];
		b->used_bytes -= rc->held[d];
		rc->held[d] = 0;
	}
	log_info("the restart's grace period is over");
}

int recover_pools(struct recover *rc, struct node *n, struct fdstore *st,
		  uv_loop_t *loop, unsigned grace_ms)
{
	struct table t;
	int r, got = 0;

	rc->node = n;
	uv_timer_init(loop, &rc->grace);
	rc->grace.data = rc;
	rc->grace_on = true;
	if (rc->n_fds == 0)
		return 0;
	r = recover_table(rc, st, &t);
	if (r == 0) {
		if (t.next_pool_id > n->next_pool_id)
			n->next_pool_id = t.next_pool_id;
		/* Past every event id the old daemon used: a late ack for
		 * one of those never completes a new round. */
		n->next_event_id = t.next_event_id + (1u << 20);
		for (unsigned i = 0; i < t.n_pools; i++) {
			r = recover_pool(rc, n, &t.pools[i]);
			if (r < 0)
				break;
			got += r;
		}
		table_free(&t);
		if (r < 0)
			log_err("fd store: recovery stopped: %s", strerror(-r));
	} else {
		log_err("fd store: %u fds passed back but no readable pool "
			"table; they are released",
			rc->n_fds);
	}
	rc->pools = (unsigned)got;
	for (unsigned i = 0; i < rc->n_fds; i++) {
		struct recover_fd *f = &rc->fds[i];
		bool table = strncmp(f->name, "vramd-t-", 8) == 0;
		fdstore_adopt(st, f->name, f->used ? f->fd : -1);
		if (!f->used) {
			close(f->fd);
			if (!table)
				rc->dropped_fds++;
		}
		f->fd = -1;
	}
	log_info("fd store: %u pool(s) and %u chunk(s) recovered, %u stored "
		 "fd(s) no pool names released",
		 rc->pools, rc->chunks, rc->dropped_fds);
	uv_timer_start(&rc->grace, recover_on_grace, grace_ms, 0);
	return got;
}

void recover_fini(struct recover *rc)
{
	if (rc->grace_on) {
		uv_timer_stop(&rc->grace);
		uv_close((uv_handle_t *)&rc->grace, NULL);
		rc->grace_on = false;
	}
	for (unsigned i = 0; i < rc->n_fds; i++)
		if (rc->fds[i].fd >= 0 && !rc->fds[i].used)
			close(rc->fds[i].fd);
	free(rc->fds);
	rc->fds = NULL;
	rc->n_fds = 0;
	free(rc->awaited);
	rc->awaited = NULL;
	rc->n_awaited = 0;
}
