/* SPDX-License-Identifier: Apache-2.0 */
/* A scripted vramd, for the libvram cases that need a daemon to misbehave
 * (hostile or malformed frames, no answer, answers out of order, a failed
 * hello, a hang-up after it) or that count what libvram sends. Every other
 * case runs against the real vramd (tests/integration/integ.h).
 *
 * A thread serves up to FAKE_MAX_CONNS connections on a socket in a
 * temporary directory (f->path), with the real types and framing. On its
 * own it does what vramd does, in vramd's order: hello; create, open, grow
 * (GROW to the other mappers), close and drop (DROP) of pools of memfd
 * chunks, as on the host backend; pause and resume of one pool at a time
 * in vramd's rounds: a pool with content to keep gets SAVE, with its
 * layout, to its saver (the owner) alone (with release, and the chunks
 * it reports saved let go of, when it maps the pool alone and said it
 * saves in parts), then PAUSE without backup to every mapper; RESUME carries new chunks to every mapper and asks the
 * saver to restore. fake_sends_what_vramd_sends (client_events_test.c)
 * runs one script against the fake and against vramd and compares what
 * each session got. The fake reports no free bytes; what it does not
 * script (a failed resume, growing a pool not active) fails the case, and
 * a request it does not know gets EOPNOTSUPP. A case pushes anything else
 * itself: fake_send_event(), fake_send_frame().
 *
 * Knobs and counters are under f->lock; FAKE_WAIT polls a condition.
 * Included by client_*_test.c files; everything is static.
 */
#ifndef VRAM_CLIENT_FAKE_H
#define VRAM_CLIENT_FAKE_H

#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "test.h"
#include "vram.h"
#include "vram.pb-c.h"
#include "frame_send.h"
#include "wire.h"

#define FAKE_MAX_POOLS 8
#define FAKE_MAX_CHUNKS 16
#define FAKE_MAX_CONNS 4
#define FAKE_FIRST_EVENT 1000 /* cases push their own events below this */
#define FAKE_UNUSED __attribute__((unused))

struct fake_pool {
	uint64_t id; /* 0: dropped */
	char name[128];
	int policy; /* VRAM__POLICY__* */
	int state;  /* VRAM__STATE__* */
	uint64_t reserve;
	uint32_t flags;
	int owner;	  /* connection index, -1: none */
	unsigned mappers; /* a bit per connection */
	bool backed_up;	  /* paused with its content in the backup */
	int backup_fd;	  /* host policy only */
	unsigned n_chunks;
	uint64_t chunk_size[FAKE_MAX_CHUNKS];
	int chunk_fd[FAKE_MAX_CHUNKS]; /* -1 while paused */
};

struct fake {
	pthread_mutex_t lock, send_lock;
	pthread_t thread;
	bool running, stop;
	char dir[64], path[100];
	int listen_fd;
	int sock[FAKE_MAX_CONNS];
	struct wire_rx rx[FAKE_MAX_CONNS];
	unsigned n_conns;

	/* knobs */
	int hello_err;		/* answer hello with this errno */
	uint32_t hello_version; /* 0: WIRE_PROTOCOL_VERSION */
	const char *backend;	/* NULL: "host" */
	const char *uuid;	/* the device's; NULL: "fake-0" */
	bool close_after_hello; /* hang up once hello is answered */
	bool ignore_pings;	/* never answer a ping */
	unsigned ping_batch;	/* answer pings N at a time, newest first */

	/* what happened */
	unsigned n_pings, n_closes, n_acks, n_eof;
	uint64_t last_ack_event;
	int last_ack_err;
	char last_ack_msg[256];
	unsigned n_progress; /* ResumeProgress reports */
	uint64_t last_progress_event;
	uint32_t last_progress_restored;
	uint64_t held_pings[64];
	unsigned n_held_pings;

	/* the pause or resume in progress */
	bool tr_active, tr_resume, tr_saving;
	bool tr_release;	   /* the SAVE under way is in parts */
	unsigned tr_saved;	   /* chunks it let go of */
	bool send_release;	   /* the next event sent says release */
	unsigned save_parts_conns; /* a bit per connection whose hello said
				    * save_in_parts */
	int tr_conn, tr_err;
	struct fake_pool *tr_pool;
	uint64_t tr_request, tr_event;
	unsigned tr_pending; /* connections that owe an ack */

	uint64_t next_pool_id, next_event_id;
	struct fake_pool pools[FAKE_MAX_POOLS];
	unsigned n_pools;
};

/* Polls cond (an expression over f, read under f->lock) for up to 5 s. */
#define FAKE_WAIT(f, cond)                                            \
	do {                                                          \
		bool ok_ = false;                                     \
		for (int i_ = 0; i_ < 5000 && !ok_; i_++) {           \
			pthread_mutex_lock(&(f)->lock);               \
			ok_ = (cond);                                 \
			pthread_mutex_unlock(&(f)->lock);             \
			if (!ok_)                                     \
				usleep(1000);                         \
		}                                                     \
		if (!ok_)                                             \
			TEST_FAIL("timed out waiting for %s", #cond); \
	} while (0)

static FAKE_UNUSED int fake_memfd(uint64_t size)
{
	int fd = memfd_create("fake-chunk", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)size) < 0)
		TEST_FAIL("memfd: %s", strerror(errno));
	return fd;
}

/* Sends bytes as one frame to connection ci, whatever they are. */
static FAKE_UNUSED int fake_send_frame(struct fake *f, int ci, const void *buf,
				       size_t len, const int *fds,
				       unsigned nfds)
{
	pthread_mutex_lock(&f->send_lock);
	int r = frame_send(f->sock[ci], buf, len, fds, nfds);
	pthread_mutex_unlock(&f->send_lock);
	return r;
}

static FAKE_UNUSED void fake_send(struct fake *f, int ci, Vram__ServerMsg *m,
				  const int *fds, unsigned nfds)
{
	size_t len = vram__server_msg__get_packed_size(m);
	uint8_t *buf = malloc(len ? len : 1);
	ASSERT(buf);
	vram__server_msg__pack(m, buf);
	/* The client may be gone: that is what some cases do. */
	(void)fake_send_frame(f, ci, buf, len, fds, nfds);
	free(buf);
}

static FAKE_UNUSED void fake_reply(struct fake *f, int ci, Vram__Response *r,
				   const int *fds, unsigned nfds)
{
	Vram__ServerMsg m = VRAM__SERVER_MSG__INIT;
	m.body_case = VRAM__SERVER_MSG__BODY_RESPONSE;
	m.response = r;
	fake_send(f, ci, &m, fds, nfds);
}

static FAKE_UNUSED void fake_reply_err(struct fake *f, int ci, uint64_t id,
				       int err, const char *msg)
{
	Vram__Response r = VRAM__RESPONSE__INIT;
	r.id = id;
	r.err = err;
	r.message = (char *)msg;
	fake_reply(f, ci, &r, NULL, 0);
}

/* Fills ch/cp with n chunks of the given sizes at offsets consecutive from
 * off, with fd indexes from 0 when with_fds (else -1: a layout alone). */
static FAKE_UNUSED void fake_chunks(Vram__Chunk *ch, Vram__Chunk **cp,
				    const uint64_t *sizes, unsigned n,
				    uint64_t off, bool with_fds)
{
	for (unsigned i = 0; i < n; i++) {
		vram__chunk__init(&ch[i]);
		ch[i].offset = off;
		ch[i].size = sizes[i];
		ch[i].fd_index = with_fds ? (int32_t)i : -1;
		cp[i] = &ch[i];
		off += sizes[i];
	}
}

/* Sends an event to connection ci: n chunks of the given sizes from
 * first_offset, with fds when fds is not NULL. */
/* An event of a restore in parts: more says whether more chunks follow,
 * err (positive errno) that the rest could not be made. */
static FAKE_UNUSED void fake_send_part(struct fake *f, int ci, int kind,
				       uint64_t event_id, uint64_t pool_id,
				       bool backup, const uint64_t *sizes,
				       const int *fds, unsigned n,
				       uint64_t first_offset, bool more,
				       int err)
{
	Vram__ServerMsg m = VRAM__SERVER_MSG__INIT;
	Vram__Event ev = VRAM__EVENT__INIT;
	Vram__Chunk ch[FAKE_MAX_CHUNKS], *cp[FAKE_MAX_CHUNKS];

	ASSERT(n <= FAKE_MAX_CHUNKS);
	fake_chunks(ch, cp, sizes, n, first_offset, fds != NULL);
	ev.event_id = event_id;
	ev.kind = kind;
	ev.pool_id = pool_id;
	ev.backup = backup;
	ev.n_chunks = n;
	ev.chunks = cp;
	ev.more = more;
	ev.err = err;
	ev.release = f->send_release;
	m.body_case = VRAM__SERVER_MSG__BODY_EVENT;
	m.event = &ev;
	fake_send(f, ci, &m, fds, fds ? n : 0);
}

static FAKE_UNUSED void fake_send_event(struct fake *f, int ci, int kind,
					uint64_t event_id, uint64_t pool_id,
					bool backup, const uint64_t *sizes,
					const int *fds, unsigned n,
					uint64_t first_offset)
{
	fake_send_part(f, ci, kind, event_id, pool_id, backup, sizes, fds, n,
		       first_offset, false, 0);
}

static FAKE_UNUSED uint64_t fake_pool_bytes(const struct fake_pool *p)
{
	uint64_t b = 0;
	for (unsigned i = 0; i < p->n_chunks; i++)
		b += p->chunk_size[i];
	return b;
}

/* A live pool by id, or by name when name is not NULL; NULL if none. */
static FAKE_UNUSED struct fake_pool *fake_pool_find(struct fake *f, uint64_t id,
						    const char *name)
{
	for (unsigned i = 0; i < f->n_pools; i++) {
		struct fake_pool *p = &f->pools[i];
		if (p->id && (name ? strcmp(p->name, name) == 0 : p->id == id))
			return p;
	}
	return NULL;
}

/* The id of the pool a case made through libvram. */
static FAKE_UNUSED uint64_t fake_pool_id(struct fake *f, const char *name)
{
	pthread_mutex_lock(&f->lock);
	struct fake_pool *p = fake_pool_find(f, 0, name);
	pthread_mutex_unlock(&f->lock);
	if (!p)
		TEST_FAIL("the fake has no pool %s", name);
	return p->id;
}

static FAKE_UNUSED void fake_reply_pool(struct fake *f, int ci, uint64_t id,
					struct fake_pool *p)
{
	Vram__Response r = VRAM__RESPONSE__INIT;
	Vram__PoolReply pr = VRAM__POOL_REPLY__INIT;
	Vram__PoolInfo info = VRAM__POOL_INFO__INIT;
	Vram__Chunk ch[FAKE_MAX_CHUNKS], *cp[FAKE_MAX_CHUNKS];
	int fds[FAKE_MAX_CHUNKS + 1];
	unsigned nfds = 0;

	info.id = p->id;
	info.name = p->name;
	info.tag = (char *)"t";
	info.state = p->state;
	info.policy = p->policy;
	info.bytes = fake_pool_bytes(p);
	info.reserve_bytes = p->reserve;
	info.chunks = p->n_chunks;
	info.owner_pid = p->owner >= 0 ? (uint32_t)getpid() : 0;
	info.flags = p->flags;
	if (p->state == VRAM__STATE__STATE_ACTIVE) {
		fake_chunks(ch, cp, p->chunk_size, p->n_chunks, 0, true);
		for (; nfds < p->n_chunks; nfds++)
			fds[nfds] = p->chunk_fd[nfds];
		pr.n_chunks = p->n_chunks;
		pr.chunks = cp;
	}
	pr.info = &info;
	pr.backup_fd_index = -1;
	if (p->policy == VRAM__POLICY__POLICY_HOST) {
		pr.backup_fd_index = (int32_t)nfds;
		fds[nfds++] = p->backup_fd;
	}
	r.id = id;
	r.body_case = VRAM__RESPONSE__BODY_POOL;
	r.pool = &pr;
	fake_reply(f, ci, &r, fds, nfds);
}

/* The pool goes: DROP to every mapper but except (-1: none). */
static FAKE_UNUSED void fake_pool_drop(struct fake *f, struct fake_pool *p,
				       int except)
{
	if (f->tr_active && f->tr_pool == p)
		TEST_FAIL(
			"fake vramd: dropping a pool mid-transition is not scripted");
	for (int ci = 0; ci < FAKE_MAX_CONNS; ci++)
		if ((p->mappers & (1u << ci)) && ci != except)
			fake_send_event(f, ci, VRAM__EVENT_KIND__EVENT_DROP, 0,
					p->id, false, NULL, NULL, 0, 0);
	p->id = 0;
	p->mappers = 0;
}

/* Sends one round's event to every mapper of the pool in transition, and
 * waits for their acks. */
static FAKE_UNUSED void fake_round(struct fake *f, int kind)
{
	struct fake_pool *p = f->tr_pool;

	f->tr_event = ++f->next_event_id;
	f->tr_pending = 0;
	f->tr_release = false;
	f->tr_saved = 0;
	for (int ci = 0; ci < FAKE_MAX_CONNS; ci++) {
		if (!(p->mappers & (1u << ci)))
			continue;
		if (kind == VRAM__EVENT_KIND__EVENT_SAVE && ci != p->owner)
			continue;
		f->tr_pending |= 1u << ci;
		/* In parts, as vramd: to an owner that maps it alone and
		 * said it saves in parts, of a pool that is not persistent. */
		f->send_release = kind == VRAM__EVENT_KIND__EVENT_SAVE &&
				  p->mappers == 1u << ci &&
				  (f->save_parts_conns & (1u << ci)) &&
				  !(p->flags & VRAM_POOL_PERSIST);
		if (kind == VRAM__EVENT_KIND__EVENT_SAVE)
			fake_send_event(f, ci, kind, f->tr_event, p->id, true,
					p->chunk_size, NULL, p->n_chunks, 0);
		else if (kind == VRAM__EVENT_KIND__EVENT_RESUME)
			fake_send_event(f, ci, kind, f->tr_event, p->id,
					p->backed_up && ci == p->owner,
					p->chunk_size, p->chunk_fd, p->n_chunks,
					0);
		else
			fake_send_event(f, ci, kind, f->tr_event, p->id, false,
					NULL, NULL, 0, 0);
		f->tr_release |= f->send_release;
		f->send_release = false;
	}
}

/* A save in parts reports chunks saved: vramd lets go of them. */
static FAKE_UNUSED void fake_save_progress(struct fake *f, int ci,
					   uint32_t saved)
{
	struct fake_pool *p = f->tr_pool;

	if (!f->tr_active || !f->tr_saving || !f->tr_release ||
	    ci != p->owner || saved > p->n_chunks)
		return;
	for (; f->tr_saved < saved; f->tr_saved++) {
		close(p->chunk_fd[f->tr_saved]);
		p->chunk_fd[f->tr_saved] = -1;
	}
}

static FAKE_UNUSED void fake_reply_transition(struct fake *f, int err,
					      const char *message)
{
	Vram__Response r = VRAM__RESPONSE__INIT;
	Vram__TransitionReply tr = VRAM__TRANSITION_REPLY__INIT;
	Vram__PoolResult res = VRAM__POOL_RESULT__INIT, *rp = &res;

	res.name = f->tr_pool->name;
	res.err = err;
	res.message = (char *)(message ? message : "");
	res.bytes = err ? 0 : fake_pool_bytes(f->tr_pool);
	tr.pools = err ? 0 : 1;
	tr.bytes = res.bytes;
	tr.n_results = 1;
	tr.results = &rp;
	r.id = f->tr_request;
	r.err = err;
	r.message = res.message;
	r.body_case = VRAM__RESPONSE__BODY_TRANSITION;
	r.transition = &tr;
	f->tr_active = false;
	fake_reply(f, f->tr_conn, &r, NULL, 0);
}

/* Every mapper answered the round: the next round, or the reply. */
static FAKE_UNUSED void fake_round_done(struct fake *f)
{
	struct fake_pool *p = f->tr_pool;

	if (f->tr_resume) {
		if (f->tr_err)
			TEST_FAIL("fake vramd: a failed resume is not scripted "
				  "(vramd undoes it with a PAUSE round)");
		p->state = VRAM__STATE__STATE_ACTIVE;
		p->backed_up = false;
		fake_reply_transition(f, 0, NULL);
		return;
	}
	if (f->tr_saving && !f->tr_err) {
		/* Saved: now every mapper unmaps. */
		f->tr_saving = false;
		fake_round(f, VRAM__EVENT_KIND__EVENT_PAUSE);
		return;
	}
	if (f->tr_err && f->tr_saving && f->tr_saved)
		TEST_FAIL("fake vramd: a save in parts failing after chunks "
			  "went is not scripted (vramd stays PAUSING)");
	if (f->tr_err) {
		/* Nobody unmapped after a failed save; after a failed unmap
		 * vramd keeps the pool PAUSING. */
		if (f->tr_saving)
			p->state = VRAM__STATE__STATE_ACTIVE;
		fake_reply_transition(f, f->tr_err,
				      "a mapper failed the event");
		return;
	}
	for (unsigned i = 0; i < p->n_chunks; i++) {
		if (p->chunk_fd[i] >= 0)
			close(p->chunk_fd[i]);
		p->chunk_fd[i] = -1;
	}
	p->state = VRAM__STATE__STATE_PAUSED;
	p->backed_up = p->policy == VRAM__POLICY__POLICY_HOST;
	fake_reply_transition(f, 0, NULL);
}

/* Starts a pause or resume of the pool the selector names. */
static FAKE_UNUSED void fake_transition(struct fake *f, int ci, uint64_t id,
					bool resume, const Vram__Transition *t)
{
	const char *name = t->selector ? t->selector->name : NULL;
	struct fake_pool *p = name ? fake_pool_find(f, 0, name) : NULL;
	if (!p) {
		fake_reply_err(f, ci, id, ENOENT, "no pool matched");
		return;
	}
	int from =
		resume ? VRAM__STATE__STATE_PAUSED : VRAM__STATE__STATE_ACTIVE;
	if (f->tr_active || p->state != from)
		TEST_FAIL(
			"fake vramd: %s of pool %s in state %d is not scripted",
			resume ? "resume" : "pause", p->name, p->state);
	f->tr_active = true;
	f->tr_resume = resume;
	f->tr_request = id;
	f->tr_conn = ci;
	f->tr_pool = p;
	f->tr_err = 0;
	if (resume) {
		for (unsigned i = 0; i < p->n_chunks; i++)
			p->chunk_fd[i] = fake_memfd(p->chunk_size[i]);
		p->state = VRAM__STATE__STATE_RESUMING;
		fake_round(f, VRAM__EVENT_KIND__EVENT_RESUME);
	} else {
		/* Content to keep: the owner saves first, alone and mapped. */
		p->state = VRAM__STATE__STATE_PAUSING;
		f->tr_saving = p->policy == VRAM__POLICY__POLICY_HOST &&
			       p->n_chunks > 0;
		fake_round(f, f->tr_saving ? VRAM__EVENT_KIND__EVENT_SAVE :
					     VRAM__EVENT_KIND__EVENT_PAUSE);
	}
	if (!f->tr_pending)
		TEST_FAIL(
			"fake vramd: a transition without mappers is not scripted");
}

static FAKE_UNUSED void fake_ack(struct fake *f, int ci,
				 const Vram__EventAck *a)
{
	f->n_acks++;
	f->last_ack_event = a->event_id;
	f->last_ack_err = a->err;
	snprintf(f->last_ack_msg, sizeof(f->last_ack_msg), "%s",
		 a->message ? a->message : "");
	if (!f->tr_active || a->event_id != f->tr_event ||
	    !(f->tr_pending & (1u << ci)))
		return;
	f->tr_pending &= ~(1u << ci);
	if (a->err && !f->tr_err)
		f->tr_err = a->err;
	if (!f->tr_pending)
		fake_round_done(f);
}

static FAKE_UNUSED void fake_hello(struct fake *f, int ci, uint64_t id)
{
	Vram__Response r = VRAM__RESPONSE__INIT;
	Vram__HelloReply hr = VRAM__HELLO_REPLY__INIT;
	Vram__DeviceInfo d = VRAM__DEVICE_INFO__INIT, *dp = &d;

	if (f->hello_err) {
		fake_reply_err(f, ci, id, f->hello_err, "no hello for you");
		return;
	}
	d.uuid = (char *)(f->uuid ? f->uuid : "fake-0");
	d.total_bytes = d.free_bytes = 1ull << 30;
	d.granularity = 2ull << 20;
	hr.version =
		f->hello_version ? f->hello_version : WIRE_PROTOCOL_VERSION;
	hr.backend = (char *)(f->backend ? f->backend : "host");
	hr.session_id = 7 + (uint64_t)ci;
	hr.max_chunks = FAKE_MAX_CHUNKS;
	hr.n_devices = 1;
	hr.devices = &dp;
	hr.daemon_version = (char *)"fake-1";
	r.id = id;
	r.body_case = VRAM__RESPONSE__BODY_HELLO;
	r.hello = &hr;
	fake_reply(f, ci, &r, NULL, 0);
	if (f->close_after_hello)
		shutdown(f->sock[ci], SHUT_RDWR);
}

static FAKE_UNUSED void fake_create(struct fake *f, int ci, uint64_t id,
				    const Vram__PoolCreate *c)
{
	if (fake_pool_find(f, 0, c->name)) {
		fake_reply_err(f, ci, id, EEXIST,
			       "a pool with that name exists");
		return;
	}
	ASSERT(f->n_pools < FAKE_MAX_POOLS);
	struct fake_pool *p = &f->pools[f->n_pools++];
	memset(p, 0, sizeof(*p));
	p->id = ++f->next_pool_id;
	snprintf(p->name, sizeof(p->name), "%s", c->name);
	p->policy = c->policy;
	p->state = VRAM__STATE__STATE_ACTIVE;
	p->reserve = c->reserve_bytes ? c->reserve_bytes : 1ull << 30;
	p->flags = c->flags;
	p->owner = ci;
	p->mappers = 1u << ci;
	p->backup_fd = -1;
	if (c->policy == VRAM__POLICY__POLICY_HOST)
		p->backup_fd = fake_memfd(p->reserve);
	fake_reply_pool(f, ci, id, p);
}

/* One chunk of the bytes asked, sent to the owner and, in a GROW event,
 * to the other mappers. */
static FAKE_UNUSED void fake_grow(struct fake *f, int ci, uint64_t id,
				  const Vram__PoolGrow *g)
{
	struct fake_pool *p = fake_pool_find(f, g->pool_id, NULL);
	if (!p || p->owner != ci || p->state != VRAM__STATE__STATE_ACTIVE ||
	    p->n_chunks == FAKE_MAX_CHUNKS ||
	    fake_pool_bytes(p) + g->bytes > p->reserve)
		TEST_FAIL("fake vramd: this grow of pool %llu is not scripted",
			  (unsigned long long)g->pool_id);
	Vram__Response r = VRAM__RESPONSE__INIT;
	Vram__PoolGrowReply gr = VRAM__POOL_GROW_REPLY__INIT;
	Vram__Chunk ch, *cp = &ch;
	unsigned k = p->n_chunks;
	uint64_t off = fake_pool_bytes(p);

	p->chunk_size[k] = g->bytes;
	p->chunk_fd[k] = fake_memfd(g->bytes);
	p->n_chunks++;
	fake_chunks(&ch, &cp, &p->chunk_size[k], 1, off, true);
	gr.n_chunks = 1;
	gr.chunks = &cp;
	r.id = id;
	r.body_case = VRAM__RESPONSE__BODY_GROW;
	r.grow = &gr;
	fake_reply(f, ci, &r, &p->chunk_fd[k], 1);
	for (int m = 0; m < FAKE_MAX_CONNS; m++)
		if ((p->mappers & (1u << m)) && m != ci)
			fake_send_event(f, m, VRAM__EVENT_KIND__EVENT_GROW, 0,
					p->id, false, &p->chunk_size[k],
					&p->chunk_fd[k], 1, off);
}

static FAKE_UNUSED void fake_ping(struct fake *f, int ci, uint64_t id)
{
	f->n_pings++;
	if (f->ignore_pings)
		return;
	if (!f->ping_batch) {
		fake_reply_err(f, ci, id, 0, "");
		return;
	}
	f->held_pings[f->n_held_pings++] = id;
	if (f->n_held_pings < f->ping_batch)
		return;
	while (f->n_held_pings > 0)
		fake_reply_err(f, ci, f->held_pings[--f->n_held_pings], 0, "");
}

static FAKE_UNUSED void fake_handle(struct fake *f, int ci,
				    const struct wire_frame *fr)
{
	Vram__Request *req = vram__request__unpack(NULL, fr->len, fr->payload);
	struct fake_pool *p;

	if (!req)
		TEST_FAIL("fake vramd: undecodable request");
	pthread_mutex_lock(&f->lock);
	switch (req->body_case) {
	case VRAM__REQUEST__BODY_HELLO:
		if (req->hello && req->hello->save_in_parts)
			f->save_parts_conns |= 1u << ci;
		else
			f->save_parts_conns &= ~(1u << ci);
		fake_hello(f, ci, req->id);
		break;
	case VRAM__REQUEST__BODY_POOL_CREATE:
		fake_create(f, ci, req->id, req->pool_create);
		break;
	case VRAM__REQUEST__BODY_POOL_OPEN:
		p = fake_pool_find(f, 0, req->pool_open->name);
		if (!p || req->pool_open->access != VRAM__ACCESS__ACCESS_RW)
			TEST_FAIL("fake vramd: this open is not scripted");
		p->mappers |= 1u << ci;
		fake_reply_pool(f, ci, req->id, p);
		break;
	case VRAM__REQUEST__BODY_POOL_GROW:
		fake_grow(f, ci, req->id, req->pool_grow);
		break;
	case VRAM__REQUEST__BODY_POOL_CLOSE:
		/* The owner of a pool that does not persist takes it along. */
		f->n_closes++;
		p = fake_pool_find(f, req->pool_close->pool_id, NULL);
		if (!p || !(p->mappers & (1u << ci)))
			TEST_FAIL(
				"fake vramd: PoolClose of a pool not open here");
		if (p->owner == ci && !(p->flags & VRAM_POOL_PERSIST))
			fake_pool_drop(f, p, ci);
		p->mappers &= ~(1u << ci);
		if (p->owner == ci)
			p->owner = -1;
		fake_reply_err(f, ci, req->id, 0, "");
		break;
	case VRAM__REQUEST__BODY_POOL_DROP:
		p = fake_pool_find(f, 0, req->pool_drop->name);
		if (p)
			fake_pool_drop(f, p, -1);
		fake_reply_err(f, ci, req->id, p ? 0 : ENOENT,
			       p ? "" : "no pool named that");
		break;
	case VRAM__REQUEST__BODY_PAUSE:
		fake_transition(f, ci, req->id, false, req->pause);
		break;
	case VRAM__REQUEST__BODY_RESUME:
		fake_transition(f, ci, req->id, true, req->resume);
		break;
	case VRAM__REQUEST__BODY_PING:
		fake_ping(f, ci, req->id);
		break;
	case VRAM__REQUEST__BODY_ACK:
		fake_ack(f, ci, req->ack);
		break;
	case VRAM__REQUEST__BODY_PROGRESS:
		f->n_progress++;
		f->last_progress_event = req->progress->event_id;
		f->last_progress_restored = req->progress->restored;
		if (f->tr_active && req->progress->event_id == f->tr_event)
			fake_save_progress(f, ci, req->progress->restored);
		break;
	default:
		fake_reply_err(f, ci, req->id, EOPNOTSUPP,
			       "the fake vramd does not script this request");
		break;
	}
	pthread_mutex_unlock(&f->lock);
	vram__request__free_unpacked(req, NULL);
}

/* Reads connection ci; returns false once it has ended. */
static FAKE_UNUSED bool fake_read(struct fake *f, int ci)
{
	struct wire_frame fr;
	int r = wire_rx_read(&f->rx[ci], f->sock[ci]);

	if (r == -EAGAIN || r == -EINTR)
		return true;
	if (r <= 0) {
		pthread_mutex_lock(&f->lock);
		f->n_eof++;
		pthread_mutex_unlock(&f->lock);
		return false;
	}
	while ((r = wire_rx_next(&f->rx[ci], &fr)) == 1) {
		fake_handle(f, ci, &fr);
		wire_frame_clear(&fr);
	}
	if (r < 0)
		TEST_FAIL("fake vramd: bad frame from libvram (%d)", r);
	return true;
}

static FAKE_UNUSED void *fake_main(void *arg)
{
	struct fake *f = arg;
	bool ended[FAKE_MAX_CONNS] = { false };

	for (;;) {
		struct pollfd pfd[FAKE_MAX_CONNS + 1];
		unsigned n = f->n_conns;

		pthread_mutex_lock(&f->lock);
		bool stop = f->stop;
		pthread_mutex_unlock(&f->lock);
		if (stop)
			break;
		for (unsigned i = 0; i < n; i++)
			pfd[i] = (struct pollfd){ .fd = ended[i] ? -1 :
								   f->sock[i],
						  .events = POLLIN };
		pfd[n] = (struct pollfd){ .fd = n < FAKE_MAX_CONNS ?
							f->listen_fd :
							-1,
					  .events = POLLIN };
		if (poll(pfd, n + 1, 20) <= 0)
			continue;
		for (unsigned i = 0; i < n; i++)
			if (pfd[i].revents && !fake_read(f, (int)i))
				ended[i] = true;
		if (!pfd[n].revents)
			continue;
		int s = accept4(f->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (s < 0)
			continue;
		pthread_mutex_lock(&f->lock);
		f->sock[n] = s;
		wire_rx_init(&f->rx[n]);
		f->n_conns = n + 1;
		pthread_mutex_unlock(&f->lock);
	}
	return NULL;
}

static FAKE_UNUSED void fake_init(struct fake *f)
{
	memset(f, 0, sizeof(*f));
	pthread_mutex_init(&f->lock, NULL);
	pthread_mutex_init(&f->send_lock, NULL);
	f->listen_fd = -1;
	f->next_event_id = FAKE_FIRST_EVENT;
}

/* Listens on a socket in a new temporary directory (f->path); clients
 * that connect wait until fake_run(). A case that forks does so between
 * the two: a child forked while another thread is starting (or holds an
 * allocator lock) may inherit a lock held forever, as seen under ASan. */
static FAKE_UNUSED void fake_listen(struct fake *f)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	snprintf(f->dir, sizeof(f->dir), "/tmp/vram-fake-XXXXXX");
	ASSERT(mkdtemp(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/vramd.sock", f->dir);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->path);
	f->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT(f->listen_fd >= 0);
	ASSERT_OK(bind(f->listen_fd, (struct sockaddr *)&sa, sizeof(sa)));
	ASSERT_OK(listen(f->listen_fd, FAKE_MAX_CONNS));
}

/* Starts the thread that serves the socket. */
static FAKE_UNUSED void fake_run(struct fake *f)
{
	ASSERT_OK(pthread_create(&f->thread, NULL, fake_main, f));
	f->running = true;
}

/* fake_listen(), then fake_run(). */
static FAKE_UNUSED void fake_start(struct fake *f)
{
	fake_listen(f);
	fake_run(f);
}

/* A libvram client of the fake, through the public API. */
static FAKE_UNUSED vram_client *fake_connect(struct fake *f)
{
	vram_client *c = NULL;
	int r = vram_connect(f->path, "unit", 0, &c);
	if (r < 0)
		TEST_FAIL("vram_connect: %s (%s)", strerror(-r),
			  vram_last_error());
	return c;
}

/* Stops the thread and closes every fd of the fake: its clients see EOF,
 * as when vramd dies. */
static FAKE_UNUSED void fake_stop(struct fake *f)
{
	pthread_mutex_lock(&f->lock);
	f->stop = true;
	pthread_mutex_unlock(&f->lock);
	if (f->running)
		pthread_join(f->thread, NULL);
	f->running = false;
	for (unsigned i = 0; i < f->n_conns; i++) {
		close(f->sock[i]);
		wire_rx_free(&f->rx[i]);
	}
	f->n_conns = 0;
	if (f->listen_fd >= 0) {
		close(f->listen_fd);
		unlink(f->path);
		rmdir(f->dir);
	}
	f->listen_fd = -1;
	for (unsigned i = 0; i < f->n_pools; i++) {
		struct fake_pool *p = &f->pools[i];
		for (unsigned k = 0; k < p->n_chunks; k++)
			if (p->chunk_fd[k] >= 0)
				close(p->chunk_fd[k]);
		if (p->backup_fd >= 0)
			close(p->backup_fd);
		p->n_chunks = 0;
		p->backup_fd = -1;
	}
}

#endif
