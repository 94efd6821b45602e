/* SPDX-License-Identifier: Apache-2.0 */
/* One pool's range, chunks and backup in this process: see mapping.h. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "mapping.h"
#include "populate.h"

int mapping_descs_from_wire(Vram__Chunk *const *chunks, size_t n,
			    const struct wire_frame *f,
			    struct mapping_desc **out)
{
	struct mapping_desc *d = calloc(n ? n : 1, sizeof(*d));

	if (!d)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const Vram__Chunk *ch = chunks[i];
		if (!ch || ch->fd_index < 0 ||
		    (unsigned)ch->fd_index >= f->nfds) {
			free(d);
			return -EPROTO;
		}
		d[i].offset = ch->offset;
		d[i].size = ch->size;
		d[i].fd = f->fds[ch->fd_index];
	}
	*out = d;
	return 0;
}

void mapping_init(struct mapping *m, struct vmm *vmm, unsigned dev,
		  int readonly)
{
	memset(m, 0, sizeof(*m));
	m->backup_fd = -1;
	m->vmm = vmm;
	m->dev = dev;
	m->readonly = readonly;
}

int mapping_reserve(struct mapping *m, uint64_t size, uint64_t align)
{
	uintptr_t addr = 0;
	int r;

	if (m->base)
		return -EALREADY;
	r = m->vmm->ops->reserve(m->vmm, m->dev, size, align, &addr);
	if (r < 0)
		return r;
	m->base = addr;
	m->reserve = size;
	return 0;
}

int mapping_backup_map(struct mapping *m, int fd)
{
	struct stat st;

	if (m->backup)
		return -EALREADY;
	if (fstat(fd, &st) < 0)
		return -errno;
	/* The daemon sizes the memfd to the reserve; a smaller one is mapped
	 * as it is and saving past its end fails cleanly (-ENOSPC) instead
	 * of faulting. */
	uint64_t len = m->reserve;
	if (st.st_size >= 0 && (uint64_t)st.st_size < len)
		len = (uint64_t)st.st_size & ~(uint64_t)4095;
	if (len == 0)
		return -EINVAL;
	/* A read-only mapper's backup fd is read-only (host backend). */
	void *p = mmap(NULL, len, PROT_READ | (m->readonly ? 0 : PROT_WRITE),
		       MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	/* Nor is the backup a forked child's to keep. Huge pages where the
	 * kernel gives them to shmem that asks (shmem_enabled "advise", a
	 * tmpfs mounted huge=advise as host_backup_dir): faulting in,
	 * pinning and punching 16 GiB then cost a fraction of what 4 KiB
	 * pages do (docs/gpu.md, "Host backups"). */
	madvise(p, len, MADV_DONTFORK);
	if (!m->backup_sync)
		madvise(p, len, MADV_HUGEPAGE);
	m->backup = p;
	m->backup_len = len;
	if (m->backup_sync && !m->readonly)
		m->backup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	return 0;
}

/* Pins are made and dropped in slices of at most this, each within one
 * chunk and from its start, so that a copy piece (256 MiB, from a chunk's
 * start) never spans two registrations. Why slices: a give-back's thread
 * unpins while this process maps other pools (the RL step wakes its KV
 * cache right after its weights), and the driver serves one at a time:
 * on the H200 the KV pool's mapping waited 150-350 ms behind a 16 GiB
 * unpin made in 1 GiB calls (docs/results/h200-2026-12-01-s4). So the
 * thread unpins a slice (~4.5 ms at 18 ms/GiB) only while the gate below
 * says no mapping work is under way. */
#define MAPPING_PIN_SLICE (256ull << 20)

/* The gate between this process's mapping work and give-back threads,
 * which wait for it before each slice they unpin. Maps, unmaps and
 * copies (what a pause or resume waits for) hold it hard: no unpin while
 * one is under way. A resume call holds it soft for its whole length
 * (mapping_gate_soft_enter), since the driver serves that resume's chunks
 * and its maps right after a slice's unpin otherwise (in the RL step the
 * graph pool woke in 8.2 ms with the weights' give-back under way, 1.5 ms
 * in the retaining column, which has none: docs/results/h200-2026-12-01-
 * s4); a soft hold gives way as soon as anyone waits for a
 * give-back to move on (a save behind its punch, a join), since that
 * waiter may be what the resume itself waits for. The hold outlasts the
 * call by MAPPING_GATE_LINGER_MS: an engine wakes its pools in calls that
 * follow each other within a millisecond or two (weights, KV cache,
 * graph), and a slice's unpin started between two of them delays the
 * next one (the RL step's graph wake, 2.7 ms with the weights' give-back
 * under way against 1.5 without: docs/results/h200-2026-12-01-s6). */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t idle;
	unsigned busy, soft, urgent;
	int64_t soft_until_ns; /* the last soft hold's linger ends */
} mapping_gate = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0,
		   0, 0 };

static void mapping_gate_add(unsigned *count, int by)
{
	pthread_mutex_lock(&mapping_gate.mu);
	*count += (unsigned)by;
	pthread_cond_broadcast(&mapping_gate.idle);
	pthread_mutex_unlock(&mapping_gate.mu);
}

static void mapping_gate_enter(void)
{
	mapping_gate_add(&mapping_gate.busy, 1);
}

static void mapping_gate_leave(void)
{
	mapping_gate_add(&mapping_gate.busy, -1);
}

void mapping_gate_soft_enter(void)
{
	mapping_gate_add(&mapping_gate.soft, 1);
}

void mapping_gate_soft_leave(void)
{
	pthread_mutex_lock(&mapping_gate.mu);
	mapping_gate.soft--;
	mapping_gate.soft_until_ns =
		clock_now_ns() + MAPPING_GATE_LINGER_MS * 1000000LL;
	pthread_cond_broadcast(&mapping_gate.idle);
	pthread_mutex_unlock(&mapping_gate.mu);
}

static void mapping_gate_wait_idle(void)
{
	pthread_mutex_lock(&mapping_gate.mu);
	for (;;) {
		int64_t now = clock_now_ns();

		if (mapping_gate.busy ||
		    (mapping_gate.soft && !mapping_gate.urgent)) {
			pthread_cond_wait(&mapping_gate.idle, &mapping_gate.mu);
		} else if (!mapping_gate.urgent &&
			   now < mapping_gate.soft_until_ns) {
			struct timespec ts = {
				.tv_sec = mapping_gate.soft_until_ns /
					  1000000000,
				.tv_nsec = mapping_gate.soft_until_ns %
					   1000000000,
			};
			pthread_cond_clockwait(&mapping_gate.idle,
					       &mapping_gate.mu,
					       CLOCK_MONOTONIC, &ts);
		} else {
			break;
		}
	}
	pthread_mutex_unlock(&mapping_gate.mu);
}

/* What a give-back's thread works on: its own copy of the regions, so
 * the mapping may be used (and waited on) from the caller's side; and how
 * far it has got, for a save that comes before it is done. */
struct mapping_giving {
	struct vmm *vmm;
	uint8_t *backup;
	uint64_t len;
	struct mapping_region *regions;
	size_t n_regions;
	int r;
	pthread_mutex_t mu;
	pthread_cond_t moved;
	uint64_t given; /* [0, given) is unpinned and punched */
};

/* Waits until a give-back under way has punched [0, end) of the backup:
 * what a save is about to fill must not be punched after it. */
static void mapping_backup_wait_upto(struct mapping *m, uint64_t end)
{
	struct mapping_giving *g = m->gift;

	if (!m->giving)
		return;
	if (end > g->len)
		end = g->len;
	/* The gate's lock is taken inside g's (never the other way round:
	 * the thread holds neither while it takes the other). */
	pthread_mutex_lock(&g->mu);
	if (g->given < end) {
		mapping_gate_add(&mapping_gate.urgent, 1);
		while (g->given < end)
			pthread_cond_wait(&g->moved, &g->mu);
		mapping_gate_add(&mapping_gate.urgent, -1);
	}
	pthread_mutex_unlock(&g->mu);
}

/* Registers [off, off + len) of the backup as one region. */
static int mapping_register_slice(struct mapping *m, uint64_t off, uint64_t len)
{
	if (m->n_regions == m->cap_regions) {
		size_t cap = m->cap_regions ? m->cap_regions * 2 : 8;
		struct mapping_region *nr =
			realloc(m->regions, cap * sizeof(*nr));
		if (!nr)
			return -ENOMEM;
		m->regions = nr;
		m->cap_regions = cap;
	}
	int r = m->vmm->ops->host_register(m->vmm, m->backup + off, len);
	if (r < 0) {
		log_write(
			VRAM_LOG_WARN,
			"registering %llu bytes of backup failed (%d); copies will be slower",
			(unsigned long long)len, r);
		return r;
	}
	m->regions[m->n_regions].offset = off;
	m->regions[m->n_regions].len = len;
	m->n_regions++;
	m->registered = off + len;
	return 0;
}

/* A copy that runs behind the registration (mapping_copy): the spans
 * of the mapped chunks, in offset order, and how far they are copied. */
struct mapping_copying {
	int to_host;
	int lane; /* the copy lane issued on, without waiting; -1: copy */
	struct vmm_span *spans, *part;
	size_t n, i;   /* spans[i] is the next one to copy */
	uint64_t into; /* bytes of spans[i] copied */
	int r;
};

/* Copies what is left of the spans below upto (an offset in the backup),
 * in one vmm call, once a give-back's punch has passed it. */
static void mapping_copy_upto(struct mapping *m, struct mapping_copying *cp,
			      uint64_t upto)
{
	size_t k = 0;

	if (!cp || cp->r < 0 || cp->i == cp->n)
		return;
	mapping_backup_wait_upto(m, upto);
	while (cp->i < cp->n) {
		const struct vmm_span *s = &cp->spans[cp->i];
		uint64_t s_off = (uint64_t)((uint8_t *)s->host - m->backup);
		if (s_off + cp->into >= upto)
			break;
		uint64_t len = s->len - cp->into;
		if (len > upto - s_off - cp->into)
			len = upto - s_off - cp->into;
		/* Never past a pinned slice's end (slices start at each
		 * chunk's start): the driver refuses a copy of pinned memory
		 * that spans two registrations, whatever piece size the
		 * backend's setting asks for. */
		uint64_t slice_left =
			MAPPING_PIN_SLICE - cp->into % MAPPING_PIN_SLICE;
		if (len > slice_left)
			len = slice_left;
		cp->part[k].dev = s->dev + cp->into;
		cp->part[k].host = (uint8_t *)s->host + cp->into;
		cp->part[k].len = len;
		k++;
		cp->into += len;
		if (cp->into == s->len) {
			cp->i++;
			cp->into = 0;
		}
	}
	if (k == 0)
		return;
	mapping_gate_enter();
	if (cp->lane < 0)
		cp->r = m->vmm->ops->copy(m->vmm, m->dev, cp->to_host, cp->part,
					  k);
	else
		cp->r = m->vmm->ops->copy_issue(m->vmm, m->dev,
						(unsigned)cp->lane, cp->to_host,
						cp->part, k);
	mapping_gate_leave();
}

/* A populating thread's wait before it faults in a slice. */
static void mapping_populate_before(void *arg, uint64_t end)
{
	mapping_backup_wait_upto(arg, end);
}

/* The end of what the backup holds of the layout. */
static uint64_t mapping_layout_end(const struct mapping *m)
{
	return m->size < m->backup_len ? m->size : m->backup_len;
}

/* Is [registered, end) of the backup still to be pinned? */
static bool mapping_pins_due(const struct mapping *m, uint64_t end)
{
	return m->backup && !m->readonly && m->backup_pin &&
	       end > m->registered;
}

/* Registers the part of the backup that covers the layout up to upto and
 * is not yet registered, in slices, with threads faulting the pages in ahead where
 * the backend pins (a backup given back has none, and the pin faults
 * them in one by one at ~2 GB/s); given cp, it copies each slice once it
 * is registered, so the copy of one slice runs while the next is faulted
 * in and pinned. A failed pin only costs copy speed, so it is logged, not
 * returned; the copy goes on. */
static void mapping_register(struct mapping *m, struct mapping_copying *cp,
			     uint64_t upto)
{
	uint64_t end = mapping_layout_end(m);
	if (end > upto)
		end = upto;
	/* Copies in parts fault in ahead over the whole layout
	 * (mapping_ahead_start), past the part this call registers. */
	struct populate_ahead *pa = m->ahead;

	if (!mapping_pins_due(m, end))
		goto copy;
	if (!m->ahead && m->vmm->ops->host_pins)
		populate_ahead_start(&pa, m->backup, m->registered, end,
				     MAPPING_PIN_SLICE, mapping_populate_before,
				     m);
	for (size_t i = 0; i < m->n_chunks && m->registered < end; i++) {
		const struct mapping_chunk *c = &m->chunks[i];
		uint64_t c_end = c->offset + c->size;
		if (c_end > end)
			c_end = end;
		while (m->registered < c_end) {
			uint64_t off = m->registered;
			uint64_t into = (off - c->offset) % MAPPING_PIN_SLICE;
			uint64_t len = MAPPING_PIN_SLICE - into;
			if (len > c_end - off)
				len = c_end - off;
			/* A give-back under way: only this slice must be
			 * behind its punch (the threads fill the next). */
			mapping_backup_wait_upto(m, off + len);
			populate_ahead_wait(pa, off + len);
			if (mapping_register_slice(m, off, len) < 0)
				goto done;
			mapping_copy_upto(m, cp, m->registered);
		}
	}
done:
	if (pa != m->ahead)
		populate_ahead_finish(pa);
copy:
	mapping_copy_upto(m, cp, UINT64_MAX);
}

void mapping_ahead_start(struct mapping *m)
{
	uint64_t end = mapping_layout_end(m);

	if (m->ahead || !mapping_pins_due(m, end) || !m->vmm->ops->host_pins)
		return;
	populate_ahead_start(&m->ahead, m->backup, m->registered, end,
			     MAPPING_PIN_SLICE, mapping_populate_before, m);
}

void mapping_ahead_finish(struct mapping *m)
{
	populate_ahead_finish(m->ahead);
	m->ahead = NULL;
}

static int chunks_reserve(struct mapping *m, size_t n)
{
	if (n <= m->cap_chunks)
		return 0;
	size_t cap = m->cap_chunks ? m->cap_chunks * 2 : 8;
	while (cap < n)
		cap *= 2;
	struct mapping_chunk *c = realloc(m->chunks, cap * sizeof(*c));
	if (!c)
		return -ENOMEM;
	m->chunks = c;
	m->cap_chunks = cap;
	return 0;
}

/* Checks that d is contiguous from start and fits in the range. */
static int descs_check(const struct mapping *m, const struct mapping_desc *d,
		       size_t n, uint64_t start)
{
	uint64_t at = start;

	for (size_t i = 0; i < n; i++) {
		if (d[i].offset != at || d[i].size == 0 || d[i].size % 4096 ||
		    d[i].size > m->reserve || at > m->reserve - d[i].size)
			return -EPROTO;
		at += d[i].size;
	}
	return 0;
}

static void chunk_unmap(struct mapping *m, struct mapping_chunk *c, int *err)
{
	if (!c->mapped)
		return;
	int r = m->vmm->ops->unmap(m->vmm, m->dev, m->base + c->offset, c->size,
				   c->handle);
	if (r < 0) {
		log_write(VRAM_LOG_ERROR,
			  "unmapping %llu bytes at offset %llu failed (%d)",
			  (unsigned long long)c->size,
			  (unsigned long long)c->offset, r);
		if (err && *err == 0)
			*err = r;
	}
	/* Marked unmapped whatever happened, so nothing unmaps it twice. */
	c->mapped = 0;
	c->handle = 0;
}

/* Maps d[0..n) into out[] (which the caller provides). On failure unmaps
 * what it mapped. */
static int descs_map(struct mapping *m, const struct mapping_desc *d, size_t n,
		     struct mapping_chunk *out)
{
	int r = 0;

	mapping_gate_enter();
	for (size_t i = 0; i < n && r == 0; i++) {
		out[i].offset = d[i].offset;
		out[i].size = d[i].size;
		out[i].handle = 0;
		out[i].mapped = 0;
		r = m->vmm->ops->map(m->vmm, m->dev, m->base + d[i].offset,
				     d[i].size, d[i].fd, m->readonly,
				     &out[i].handle);
		if (r < 0) {
			for (size_t k = 0; k < i; k++)
				chunk_unmap(m, &out[k], NULL);
			break;
		}
		out[i].mapped = 1;
	}
	mapping_gate_leave();
	return r;
}

int mapping_append(struct mapping *m, const struct mapping_desc *d, size_t n,
		   int map)
{
	int r;

	if (!m->base)
		return -EINVAL;
	r = descs_check(m, d, n, m->size);
	if (r < 0 || n == 0)
		return r; /* no chunks: nothing to add (and chunks may be NULL) */
	r = chunks_reserve(m, m->n_chunks + n);
	if (r < 0)
		return r;
	struct mapping_chunk *out = &m->chunks[m->n_chunks];
	if (map) {
		r = descs_map(m, d, n, out);
		if (r < 0)
			return r;
	} else {
		for (size_t i = 0; i < n; i++) {
			out[i].offset = d[i].offset;
			out[i].size = d[i].size;
			out[i].handle = 0;
			out[i].mapped = 0;
		}
	}
	m->n_chunks += n;
	for (size_t i = 0; i < n; i++)
		m->size += d[i].size;
	if (map && m->backup_retain)
		mapping_register(m, NULL, UINT64_MAX);
	return 0;
}

int mapping_remap(struct mapping *m, const struct mapping_desc *d, size_t n)
{
	int r;

	if (!m->base || mapping_n_mapped(m) != 0)
		return -EINVAL;
	r = descs_check(m, d, n, 0);
	if (r < 0)
		return r;
	struct mapping_chunk *c = calloc(n ? n : 1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	r = descs_map(m, d, n, c);
	if (r < 0) {
		free(c);
		return r;
	}
	free(m->chunks);
	m->chunks = c;
	m->n_chunks = n;
	m->cap_chunks = n ? n : 1;
	m->size = 0;
	for (size_t i = 0; i < n; i++)
		m->size += d[i].size;
	if (m->backup_retain)
		mapping_register(m, NULL, UINT64_MAX);
	return 0;
}

void mapping_copies_drain(struct mapping *m)
{
	for (unsigned l = 0; l < VMM_LANES; l++) {
		int r = mapping_copy_wait(m, l);
		if (r < 0)
			log_write(VRAM_LOG_WARN,
				  "waiting for a backup's copies failed: %s",
				  strerror(-r));
	}
}

int mapping_unmap_all(struct mapping *m)
{
	int err = 0;

	mapping_copies_drain(m);
	mapping_gate_enter();
	for (size_t i = 0; i < m->n_chunks; i++)
		chunk_unmap(m, &m->chunks[i], &err);
	mapping_gate_leave();
	return err;
}

size_t mapping_n_mapped(const struct mapping *m)
{
	size_t n = 0;

	for (size_t i = 0; i < m->n_chunks; i++)
		n += m->chunks[i].mapped != 0;
	return n;
}

uint64_t mapping_bytes_mapped(const struct mapping *m)
{
	uint64_t n = 0;

	for (size_t i = 0; i < m->n_chunks; i++)
		if (m->chunks[i].mapped)
			n += m->chunks[i].size;
	return n;
}

/* Writes len bytes of buf at off: 0 or -errno. */
static int write_full(int fd, const uint8_t *buf, size_t len, uint64_t off)
{
	while (len > 0) {
		ssize_t k = pwrite(fd, buf, len, (off_t)off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -EIO;
		buf += k;
		len -= (size_t)k;
		off += (uint64_t)k;
	}
	return 0;
}

/* A disk backup's save: each span in pieces of MAPPING_SAVE_STEP through
 * a bounce buffer, written with pwrite, then fdatasync (on disk when
 * acked). Copying into the file's mapping instead faults every page in
 * first, which for a sparse file is a read that zero-fills it: 38% of a
 * save's time went to that memset (perf, docs/results/disk-backup-2026-
 * 12-01.md). A full-page write() into the page cache reads nothing. */
#define MAPPING_SAVE_STEP (16u << 20)
static int mapping_save_file(struct mapping *m, const struct vmm_span *spans,
			     size_t n)
{
	uint8_t *buf = malloc(MAPPING_SAVE_STEP);
	int r = 0;

	if (!buf)
		return -ENOMEM;
	for (size_t i = 0; i < n && r == 0; i++) {
		uint64_t off = (uint64_t)((uint8_t *)spans[i].host - m->backup);
		for (size_t done = 0; done < spans[i].len && r == 0;) {
			size_t len = spans[i].len - done < MAPPING_SAVE_STEP ?
					     spans[i].len - done :
					     MAPPING_SAVE_STEP;
			struct vmm_span s = { .dev = spans[i].dev + done,
					      .host = buf,
					      .len = len };
			r = m->vmm->ops->copy(m->vmm, m->dev, 1, &s, 1);
			if (r == 0)
				r = write_full(m->backup_fd, buf, len,
					       off + done);
			done += len;
		}
	}
	free(buf);
	if (r == 0 && fdatasync(m->backup_fd) < 0)
		r = -errno;
	return r;
}

/* Copies chunks [from, to) of the mapping, or issues the copy on lane
 * (>= 0) without waiting for it. */
static int mapping_copy(struct mapping *m, int to_host, size_t from, size_t to,
			int lane)
{
	size_t n = 0;
	int r;

	if (!m->backup)
		return -ENODEV;
	if (to > m->n_chunks)
		to = m->n_chunks;
	if (from >= to)
		return 0;
	/* The spans (a chunk each), then room for the parts they are cut
	 * into (mapping_copy_upto): at most a part per pinned slice. */
	size_t cap = to - from;
	for (size_t i = from; i < to; i++)
		cap += m->chunks[i].size / MAPPING_PIN_SLICE + 1;
	struct vmm_span *spans = calloc(cap, sizeof(*spans));
	if (!spans)
		return -ENOMEM;
	for (size_t i = from; i < to; i++) {
		struct mapping_chunk *c = &m->chunks[i];
		if (!c->mapped)
			continue;
		if (c->offset + c->size > m->backup_len) {
			free(spans);
			return -ENOSPC;
		}
		spans[n].dev = m->base + c->offset;
		spans[n].host = m->backup + c->offset;
		spans[n].len = c->size;
		n++;
	}
	if (to_host && m->backup_fd >= 0 && n) {
		mapping_backup_wait_upto(m, m->size);
		r = mapping_save_file(m, spans, n);
		free(spans);
		return r;
	}
	/* A backup that is not retained is pinned only now, so that its
	 * pages can go back after the restore (mapping_backup_unpin): slice
	 * by slice behind a give-back still punching them, each copied once
	 * pinned. The copies are entered only once this mapping's give-back
	 * is past its unpins (it punches after them), which wait for the
	 * gate. */
	struct mapping_copying cp = { .to_host = to_host,
				      .lane = lane,
				      .spans = spans,
				      .part = spans + (to - from),
				      .n = n };
	/* A copy in parts registers only what it copies: the next part's
	 * pages are pinned while this one is on the device. */
	uint64_t upto = UINT64_MAX;
	if (lane >= 0)
		upto = n ? (uint64_t)((uint8_t *)spans[n - 1].host - m->backup) +
				   spans[n - 1].len :
			   0;
	mapping_register(m, &cp, upto);
	r = cp.r;
	free(spans);
	/* A disk backup is on disk when the save is acked: the daemon then
	 * drops its clean pages from the page cache. */
	if (r == 0 && to_host && m->backup_sync && m->size &&
	    msync(m->backup, mapping_layout_end(m), MS_SYNC) < 0)
		r = -errno;
	return r;
}

int mapping_save(struct mapping *m)
{
	return mapping_copy(m, 1, 0, m->n_chunks, -1);
}

int mapping_restore(struct mapping *m)
{
	return mapping_copy(m, 0, 0, m->n_chunks, -1);
}

int mapping_copy_issue(struct mapping *m, int to_host, size_t from, size_t to,
		       unsigned lane)
{
	if (lane >= VMM_LANES)
		return -EINVAL;
	if (!m->vmm->ops->copy_issue)
		return mapping_copy(m, to_host, from, to, -1);
	/* Busy from before the first piece, so that a failure halfway is
	 * waited for too. */
	m->lanes_busy |= 1u << lane;
	return mapping_copy(m, to_host, from, to, (int)lane);
}

int mapping_unmap_chunk(struct mapping *m, size_t k)
{
	int err = 0;

	if (k >= m->n_chunks)
		return -EINVAL;
	mapping_gate_enter();
	chunk_unmap(m, &m->chunks[k], &err);
	mapping_gate_leave();
	return err;
}

int mapping_copy_wait(struct mapping *m, unsigned lane)
{
	if (lane >= VMM_LANES || !(m->lanes_busy & (1u << lane)))
		return 0;
	m->lanes_busy &= ~(1u << lane);
	return m->vmm->ops->copy_wait(m->vmm, m->dev, lane);
}

/* The thread unpins every region, then punches the memfd a slice at a
 * time from the start, saying how far it got after each. Punching 16 GiB
 * of shmem takes ~3 s on the H200 host (bench/host_pin.py), as long as
 * faulting it in again: a save that follows soon fills the slices behind
 * the punch instead of waiting for all of it. */
static void *mapping_giving_run(void *arg)
{
	struct mapping_giving *g = arg;

	for (size_t i = 0; i < g->n_regions; i++) {
		mapping_gate_wait_idle();
		g->vmm->ops->host_unregister(g->vmm,
					     g->backup + g->regions[i].offset,
					     g->regions[i].len);
	}
	for (uint64_t off = 0; off < g->len; off += MAPPING_PIN_SLICE) {
		uint64_t n = g->len - off < MAPPING_PIN_SLICE ?
				     g->len - off :
				     MAPPING_PIN_SLICE;
		if (madvise(g->backup + off, n, MADV_REMOVE) < 0 && g->r == 0)
			g->r = -errno;
		pthread_mutex_lock(&g->mu);
		g->given = off + n;
		pthread_cond_broadcast(&g->moved);
		pthread_mutex_unlock(&g->mu);
	}
	return g;
}

static void mapping_giving_free(struct mapping_giving *g)
{
	pthread_cond_destroy(&g->moved);
	pthread_mutex_destroy(&g->mu);
	free(g->regions);
	free(g);
}

/* Unpins and punches the backup here, on the caller's thread. */
static int mapping_backup_punch(struct mapping *m)
{
	mapping_backup_unpin(m);
	return madvise(m->backup, m->backup_len, MADV_REMOVE) < 0 ? -errno : 0;
}

int mapping_backup_give_back(struct mapping *m)
{
	struct mapping_giving *g;
	int r;

	mapping_copies_drain(m);
	mapping_backup_wait(m);
	if (!m->backup)
		return -ENODEV;
	/* A disk backup's file is punched here: it holds no pins, and the
	 * daemon's disk figure is what callers check next. */
	if (m->backup_sync)
		return mapping_backup_punch(m);
	/* This process lets go of the pages now; they stay in the memfd
	 * (pinned ones stay pinned) until the thread's punch. */
	if (madvise(m->backup, m->backup_len, MADV_DONTNEED) < 0)
		return -errno;
	g = calloc(1, sizeof(*g));
	if (!g)
		return mapping_backup_punch(m);
	g->vmm = m->vmm;
	g->backup = m->backup;
	g->len = m->backup_len;
	g->regions = m->regions;
	g->n_regions = m->n_regions;
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->moved, NULL);
	m->regions = NULL;
	m->n_regions = m->cap_regions = 0;
	m->registered = 0;
	if (pthread_create(&m->giver, NULL, mapping_giving_run, g) == 0) {
		m->giving = true;
		m->gift = g;
		return 0;
	}
	/* No thread: do its work here. */
	mapping_giving_run(g);
	r = g->r;
	mapping_giving_free(g);
	return r;
}

int mapping_backup_wait(struct mapping *m)
{
	void *res = NULL;
	int r;

	if (!m->giving)
		return 0;
	mapping_gate_add(&mapping_gate.urgent, 1);
	pthread_join(m->giver, &res);
	mapping_gate_add(&mapping_gate.urgent, -1);
	m->giving = false;
	m->gift = NULL;
	struct mapping_giving *g = res;
	r = g->r;
	mapping_giving_free(g);
	return r;
}

void mapping_backup_unpin(struct mapping *m)
{
	mapping_copies_drain(m);
	mapping_backup_wait(m);
	for (size_t i = 0; i < m->n_regions; i++)
		m->vmm->ops->host_unregister(m->vmm,
					     m->backup + m->regions[i].offset,
					     m->regions[i].len);
	m->n_regions = 0;
	m->registered = 0;
}

void mapping_backup_release(struct mapping *m)
{
	mapping_backup_wait(m);
	mapping_backup_unpin(m);
	free(m->regions);
	m->regions = NULL;
	m->cap_regions = 0;
	if (m->backup)
		munmap(m->backup, m->backup_len);
	m->backup = NULL;
	m->backup_len = 0;
	if (m->backup_fd >= 0)
		close(m->backup_fd);
	m->backup_fd = -1;
}

void mapping_release(struct mapping *m)
{
	mapping_unmap_all(m);
	mapping_backup_release(m);
	if (m->base) {
		int r = m->vmm->ops->unreserve(m->vmm, m->base, m->reserve);
		if (r < 0)
			log_write(VRAM_LOG_WARN,
				  "freeing a %llu-byte range failed (%d)",
				  (unsigned long long)m->reserve, r);
	}
	free(m->chunks);
	m->chunks = NULL;
	m->n_chunks = m->cap_chunks = 0;
	m->base = 0;
	m->reserve = 0;
	m->size = 0;
}
