/* A fake vramd for libvram's unit tests: a thread that serves one
 * connection (one end of a socketpair, or one accepted on a listening
 * socket) with the real protocol types and framing. It answers hello and
 * the pool requests with memfd chunks as the host backend would, runs
 * pause and resume of one pool by sending the event and answering when
 * the ack comes, and lets a test push any event or frame itself. Every
 * knob and counter is under f->lock; FAKE_WAIT polls a condition.
 *
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
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "error.h"
#include "sock.h"
#include "test.h"
#include "vram.pb-c.h"
#include "wire.h"

#define FAKE_MiB (1024ull * 1024)
#define FAKE_MAX_POOLS 8
#define FAKE_MAX_CHUNKS 64
#define FAKE_UNUSED __attribute__((unused))

struct fake_pool {
	uint64_t id;
	char name[128];
	char tag[64];
	int policy; /* VRAM__POLICY__* */
	int state;  /* VRAM__STATE__* */
	uint64_t reserve;
	uint32_t owner_pid;
	uint32_t flags;
	int backup_fd; /* -1: none */
	unsigned n_chunks;
	uint64_t chunk_size[FAKE_MAX_CHUNKS];
	int chunk_fd[FAKE_MAX_CHUNKS]; /* -1 while paused */
};

struct fake {
	pthread_mutex_t lock;
	pthread_mutex_t send_lock;
	pthread_t thread;
	bool running;
	int listen_fd;	/* -1 unless serving a path */
	int sock;	/* the server's end */
	int client_end; /* socketpair: the end libvram gets */
	struct wire_rx rx;
	bool stop;
	bool eof; /* the client went away */

	/* knobs */
	int hello_err;		/* answer hello with this errno */
	uint32_t hello_version; /* 0: WIRE_PROTOCOL_VERSION */
	const char *backend;	/* NULL: "host" */
	uint64_t total, gran, chunk_max;
	bool close_after_hello; /* hang up once hello is answered */
	bool ignore_pings;	/* never answer a ping */
	unsigned ping_batch;	/* answer pings N at a time, newest first */
	int grow_err;
	int transition_err; /* answer pause/resume at once with this errno,
			     * no message, late pids 111 and 222 */

	/* what happened */
	unsigned n_requests, n_pings, n_closes, n_drops, n_grows, n_acks;
	uint64_t grow_bytes[64];
	uint64_t last_ack_event;
	int last_ack_err;
	char last_ack_msg[256];
	uint64_t ping_ids[64];
	unsigned n_held_pings;

	/* a transition of one pool in progress */
	bool tr_active, tr_resume;
	uint64_t tr_request, tr_event;
	int tr_pool;

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

static FAKE_UNUSED void fake_send_msg(struct fake *f, Vram__ServerMsg *m,
				      const int *fds, unsigned nfds)
{
	size_t len = vram__server_msg__get_packed_size(m);
	uint8_t *buf = malloc(len ? len : 1);
	ASSERT(buf);
	vram__server_msg__pack(m, buf);
	pthread_mutex_lock(&f->send_lock);
	int r = sock_send(f->sock, buf, len, fds, nfds);
	pthread_mutex_unlock(&f->send_lock);
	free(buf);
	(void)r; /* the client may be gone: that is what some tests do */
}

static FAKE_UNUSED void fake_reply(struct fake *f, Vram__Response *r,
				   const int *fds, unsigned nfds)
{
	Vram__ServerMsg m = VRAM__SERVER_MSG__INIT;
	m.body_case = VRAM__SERVER_MSG__BODY_RESPONSE;
	m.response = r;
	fake_send_msg(f, &m, fds, nfds);
}

static FAKE_UNUSED void fake_reply_err(struct fake *f, uint64_t id, int err,
				       const char *msg)
{
	Vram__Response r = VRAM__RESPONSE__INIT;
	r.id = id;
	r.err = err;
	r.message = (char *)msg;
	fake_reply(f, &r, NULL, 0);
}

/* Sends an event about pool index pi (or pool_id when pi < 0) with the
 * given chunk fds (offsets consecutive from first_offset). */
static FAKE_UNUSED void fake_send_event(struct fake *f, int kind,
					uint64_t event_id, uint64_t pool_id,
					bool backup, const uint64_t *sizes,
					const int *fds, unsigned n,
					uint64_t first_offset)
{
	Vram__ServerMsg m = VRAM__SERVER_MSG__INIT;
	Vram__Event ev = VRAM__EVENT__INIT;
	Vram__Chunk ch[FAKE_MAX_CHUNKS], *cp[FAKE_MAX_CHUNKS];
	uint64_t off = first_offset;

	for (unsigned i = 0; i < n; i++) {
		vram__chunk__init(&ch[i]);
		ch[i].offset = off;
		ch[i].size = sizes[i];
		ch[i].fd_index = fds ? (int32_t)i : -1; /* no fds: a layout */
		cp[i] = &ch[i];
		off += sizes[i];
	}
	ev.event_id = event_id;
	ev.kind = kind;
	ev.pool_id = pool_id;
	ev.backup = backup;
	ev.n_chunks = n;
	ev.chunks = cp;
	m.body_case = VRAM__SERVER_MSG__BODY_EVENT;
	m.event = &ev;
	fake_send_msg(f, &m, fds, fds ? n : 0);
}

static FAKE_UNUSED uint64_t fake_pool_bytes(const struct fake_pool *p)
{
	uint64_t b = 0;
	for (unsigned i = 0; i < p->n_chunks; i++)
		b += p->chunk_size[i];
	return b;
}

static FAKE_UNUSED void fake_info(const struct fake_pool *p,
				  Vram__PoolInfo *info)
{
	vram__pool_info__init(info);
	info->id = p->id;
	info->name = (char *)p->name;
	info->tag = (char *)p->tag;
	info->state = p->state;
	info->policy = p->policy;
	info->bytes = fake_pool_bytes(p);
	info->reserve_bytes = p->reserve;
	info->chunks = p->n_chunks;
	info->owner_pid = p->owner_pid;
	info->flags = p->flags;
}

/* Adds a pool the test owns elsewhere (to be opened), with n chunks of
 * size bytes each, filled with the byte fill. Under f->lock or before the
 * thread starts. Returns its index. */
static FAKE_UNUSED int fake_pool_add(struct fake *f, const char *name,
				     int policy, unsigned n, uint64_t size,
				     int fill)
{
	struct fake_pool *p = &f->pools[f->n_pools];
	ASSERT(f->n_pools < FAKE_MAX_POOLS);
	memset(p, 0, sizeof(*p));
	p->id = ++f->next_pool_id;
	snprintf(p->name, sizeof(p->name), "%s", name);
	snprintf(p->tag, sizeof(p->tag), "t");
	p->policy = policy;
	p->state = VRAM__STATE__STATE_ACTIVE;
	p->reserve = 1024 * FAKE_MiB;
	p->owner_pid = 1; /* someone else */
	p->backup_fd = policy == VRAM__POLICY__POLICY_HOST ?
			       fake_memfd(p->reserve) :
			       -1;
	for (unsigned i = 0; i < n; i++) {
		p->chunk_size[i] = size;
		p->chunk_fd[i] = fake_memfd(size);
		void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED,
			       p->chunk_fd[i], 0);
		ASSERT(m != MAP_FAILED);
		memset(m, fill, size);
		munmap(m, size);
	}
	p->n_chunks = n;
	return (int)f->n_pools++;
}

static FAKE_UNUSED int fake_pool_find(struct fake *f, uint64_t id,
				      const char *name)
{
	for (unsigned i = 0; i < f->n_pools; i++) {
		if (f->pools[i].id == 0)
			continue;
		if ((name && strcmp(f->pools[i].name, name) == 0) ||
		    (!name && f->pools[i].id == id))
			return (int)i;
	}
	return -1;
}

static FAKE_UNUSED void fake_reply_pool(struct fake *f, uint64_t id,
					struct fake_pool *p)
{
	Vram__Response r = VRAM__RESPONSE__INIT;
	Vram__PoolReply pr = VRAM__POOL_REPLY__INIT;
	Vram__PoolInfo info;
	Vram__Chunk ch[FAKE_MAX_CHUNKS], *cp[FAKE_MAX_CHUNKS];
	int fds[FAKE_MAX_CHUNKS + 1];
	unsigned nfds = 0;
	uint64_t off = 0;

	fake_info(p, &info);
	if (p->state == VRAM__STATE__STATE_ACTIVE) {
		for (unsigned i = 0; i < p->n_chunks; i++) {
			vram__chunk__init(&ch[i]);
			ch[i].offset = off;
			ch[i].size = p->chunk_size[i];
			ch[i].fd_index = (int32_t)nfds;
			fds[nfds++] = p->chunk_fd[i];
			cp[i] = &ch[i];
			off += p->chunk_size[i];
		}
		pr.n_chunks = p->n_chunks;
		pr.chunks = cp;
	}
	pr.info = &info;
	pr.backup_fd_index = -1;
	if (p->backup_fd >= 0) {
		pr.backup_fd_index = (int32_t)nfds;
		fds[nfds++] = p->backup_fd;
	}
	r.id = id;
	r.body_case = VRAM__RESPONSE__BODY_POOL;
	r.pool = &pr;
	fake_reply(f, &r, fds, nfds);
}

static FAKE_UNUSED void fake_reply_transition(struct fake *f, uint64_t id,
					      struct fake_pool *p, int err,
					      const char *message)
{
	Vram__Response r = VRAM__RESPONSE__INIT;
	Vram__TransitionReply tr = VRAM__TRANSITION_REPLY__INIT;
	Vram__PoolResult res = VRAM__POOL_RESULT__INIT, *rp = &res;

	res.name = p->name;
	res.err = err;
	res.message = (char *)"";
	res.bytes = err ? 0 : fake_pool_bytes(p);
	tr.pools = err ? 0 : 1;
	tr.bytes = res.bytes;
	tr.free_before = 100;
	tr.free_after = err ? 100 : 100 + res.bytes;
	tr.n_results = 1;
	tr.results = &rp;
	r.id = id;
	r.err = err;
	r.message = (char *)(message ? message : "");
	r.body_case = VRAM__RESPONSE__BODY_TRANSITION;
	r.transition = &tr;
	fake_reply(f, &r, NULL, 0);
}

/* Starts a pause or resume of pool pi: sends the event (resume: with new
 * memfds of the same sizes) and waits for the ack. */
static FAKE_UNUSED void fake_transition(struct fake *f, uint64_t id,
					bool resume, const Vram__Transition *t)
{
	const char *name = t->selector ? t->selector->name : NULL;
	if (f->transition_err) {
		Vram__Response r = VRAM__RESPONSE__INIT;
		Vram__TransitionReply tr = VRAM__TRANSITION_REPLY__INIT;
		Vram__PoolResult res = VRAM__POOL_RESULT__INIT, *rp = &res;
		uint32_t late[2] = { 111, 222 };
		res.name = (char *)(name ? name : "");
		res.err = f->transition_err;
		res.n_late_pids = 2;
		res.late_pids = late;
		tr.n_results = 1;
		tr.results = &rp;
		tr.free_before = tr.free_after = 5;
		r.id = id;
		r.err = f->transition_err;
		r.body_case = VRAM__RESPONSE__BODY_TRANSITION;
		r.transition = &tr;
		fake_reply(f, &r, NULL, 0);
		return;
	}
	int pi = name && name[0] ? fake_pool_find(f, 0, name) : -1;
	if (pi < 0) {
		fake_reply_err(f, id, ENOENT, "no pool matched");
		return;
	}
	struct fake_pool *p = &f->pools[pi];
	int want =
		resume ? VRAM__STATE__STATE_ACTIVE : VRAM__STATE__STATE_PAUSED;
	if (p->state == want) {
		fake_reply_transition(f, id, p, EALREADY,
				      resume ? "already active" :
					       "already paused");
		return;
	}
	f->tr_active = true;
	f->tr_resume = resume;
	f->tr_request = id;
	f->tr_pool = pi;
	f->tr_event = ++f->next_event_id;
	bool backup = p->policy == VRAM__POLICY__POLICY_HOST;
	if (resume) {
		for (unsigned i = 0; i < p->n_chunks; i++)
			p->chunk_fd[i] = fake_memfd(p->chunk_size[i]);
		p->state = VRAM__STATE__STATE_RESUMING;
		fake_send_event(f, VRAM__EVENT_KIND__EVENT_RESUME, f->tr_event,
				p->id, backup, p->chunk_size, p->chunk_fd,
				p->n_chunks, 0);
	} else {
		p->state = VRAM__STATE__STATE_PAUSING;
		fake_send_event(f, VRAM__EVENT_KIND__EVENT_PAUSE, f->tr_event,
				p->id, backup, NULL, NULL, 0, 0);
	}
}

static FAKE_UNUSED void fake_ack(struct fake *f, const Vram__EventAck *a)
{
	f->n_acks++;
	f->last_ack_event = a->event_id;
	f->last_ack_err = a->err;
	snprintf(f->last_ack_msg, sizeof(f->last_ack_msg), "%s",
		 a->message ? a->message : "");
	if (!f->tr_active || a->event_id != f->tr_event)
		return;
	struct fake_pool *p = &f->pools[f->tr_pool];
	f->tr_active = false;
	if (a->err) {
		p->state = f->tr_resume ? VRAM__STATE__STATE_PAUSED :
					  VRAM__STATE__STATE_PAUSING;
		if (f->tr_resume)
			for (unsigned i = 0; i < p->n_chunks; i++) {
				close(p->chunk_fd[i]);
				p->chunk_fd[i] = -1;
			}
		fake_reply_transition(f, f->tr_request, p, a->err,
				      f->tr_resume ?
					      "a mapper failed to map" :
					      "a mapper failed to pause");
		return;
	}
	if (f->tr_resume) {
		p->state = VRAM__STATE__STATE_ACTIVE;
	} else {
		for (unsigned i = 0; i < p->n_chunks; i++) {
			close(p->chunk_fd[i]);
			p->chunk_fd[i] = -1;
		}
		p->state = VRAM__STATE__STATE_PAUSED;
	}
	fake_reply_transition(f, f->tr_request, p, 0, NULL);
}

static FAKE_UNUSED void fake_hello(struct fake *f, uint64_t id,
				   const Vram__Hello *h)
{
	Vram__Response r = VRAM__RESPONSE__INIT;
	Vram__HelloReply hr = VRAM__HELLO_REPLY__INIT;
	Vram__DeviceInfo d = VRAM__DEVICE_INFO__INIT, *dp = &d;

	if (f->hello_err) {
		fake_reply_err(f, id, f->hello_err, "no hello for you");
		return;
	}
	d.index = 0;
	d.uuid = (char *)"fake-0";
	d.total_bytes = f->total;
	d.free_bytes = f->total;
	d.granularity = f->gran;
	hr.version =
		f->hello_version ? f->hello_version : WIRE_PROTOCOL_VERSION;
	hr.backend = (char *)(f->backend ? f->backend : "host");
	hr.session_id = 7;
	hr.max_chunks = 240;
	hr.n_devices = 1;
	hr.devices = &dp;
	hr.daemon_version = (char *)"fake-1";
	r.id = id;
	r.body_case = VRAM__RESPONSE__BODY_HELLO;
	r.hello = &hr;
	fake_reply(f, &r, NULL, 0);
}

static FAKE_UNUSED void fake_create(struct fake *f, uint64_t id,
				    const Vram__PoolCreate *c)
{
	if (fake_pool_find(f, 0, c->name) >= 0) {
		fake_reply_err(f, id, EEXIST, "a pool with that name exists");
		return;
	}
	int pi = fake_pool_add(f, c->name, c->policy, 0, 0, 0);
	struct fake_pool *p = &f->pools[pi];
	if (p->backup_fd >= 0) {
		close(p->backup_fd);
		p->backup_fd = -1;
	}
	snprintf(p->tag, sizeof(p->tag), "%s", c->tag);
	p->reserve = c->reserve_bytes ? c->reserve_bytes : f->total;
	p->owner_pid = (uint32_t)getpid();
	p->flags = c->flags;
	if (c->policy == VRAM__POLICY__POLICY_HOST)
		p->backup_fd = fake_memfd(p->reserve);
	fake_reply_pool(f, id, p);
}

static FAKE_UNUSED void fake_grow(struct fake *f, uint64_t id,
				  const Vram__PoolGrow *g)
{
	int pi = fake_pool_find(f, g->pool_id, NULL);
	if (f->n_grows < 64)
		f->grow_bytes[f->n_grows] = g->bytes;
	f->n_grows++;
	if (pi < 0) {
		fake_reply_err(f, id, ENOENT, "no such pool");
		return;
	}
	if (f->grow_err) {
		fake_reply_err(f, id, f->grow_err, "grow refused by the test");
		return;
	}
	struct fake_pool *p = &f->pools[pi];
	if (p->state != VRAM__STATE__STATE_ACTIVE) {
		fake_reply_err(f, id, EBUSY, "pool is not active");
		return;
	}
	if (fake_pool_bytes(p) + g->bytes > p->reserve) {
		fake_reply_err(f, id, ENOSPC, "pool is full");
		return;
	}
	Vram__Response r = VRAM__RESPONSE__INIT;
	Vram__PoolGrowReply gr = VRAM__POOL_GROW_REPLY__INIT;
	Vram__Chunk ch[FAKE_MAX_CHUNKS], *cp[FAKE_MAX_CHUNKS];
	int fds[FAKE_MAX_CHUNKS];
	uint64_t off = fake_pool_bytes(p), left = g->bytes;
	unsigned n = 0;
	uint64_t cmax = f->chunk_max ? f->chunk_max : 1024 * FAKE_MiB;
	while (left > 0 && p->n_chunks < FAKE_MAX_CHUNKS) {
		uint64_t sz = left < cmax ? left : cmax;
		p->chunk_size[p->n_chunks] = sz;
		p->chunk_fd[p->n_chunks] = fake_memfd(sz);
		vram__chunk__init(&ch[n]);
		ch[n].offset = off;
		ch[n].size = sz;
		ch[n].fd_index = (int32_t)n;
		cp[n] = &ch[n];
		fds[n] = p->chunk_fd[p->n_chunks];
		p->n_chunks++;
		n++;
		off += sz;
		left -= sz;
	}
	gr.n_chunks = n;
	gr.chunks = cp;
	r.id = id;
	r.body_case = VRAM__RESPONSE__BODY_GROW;
	r.grow = &gr;
	fake_reply(f, &r, fds, n);
}

static FAKE_UNUSED void fake_list(struct fake *f, uint64_t id)
{
	Vram__Response r = VRAM__RESPONSE__INIT;
	Vram__ListReply lr = VRAM__LIST_REPLY__INIT;
	Vram__PoolInfo info[FAKE_MAX_POOLS], *ip[FAKE_MAX_POOLS];
	Vram__Mapper m = VRAM__MAPPER__INIT, *mp[2] = { &m, &m };
	unsigned n = 0;

	m.pid = 4242;
	m.uid = 1000;
	m.name = (char *)"someone";
	m.access = VRAM__ACCESS__ACCESS_RO;
	for (unsigned i = 0; i < f->n_pools; i++) {
		if (f->pools[i].id == 0)
			continue;
		fake_info(&f->pools[i], &info[n]);
		info[n].n_mappers = 2;
		info[n].mappers = mp;
		ip[n] = &info[n];
		n++;
	}
	lr.n_pools = n;
	lr.pools = ip;
	r.id = id;
	r.body_case = VRAM__RESPONSE__BODY_LIST;
	r.list = &lr;
	fake_reply(f, &r, NULL, 0);
}

static FAKE_UNUSED void fake_stats(struct fake *f, uint64_t id)
{
	Vram__Response r = VRAM__RESPONSE__INIT;
	Vram__StatsReply st = VRAM__STATS_REPLY__INIT;
	Vram__DeviceInfo d = VRAM__DEVICE_INFO__INIT, *dp = &d;

	d.index = 0;
	d.uuid = (char *)"fake-0";
	d.total_bytes = f->total;
	d.free_bytes = f->total / 2;
	d.granularity = f->gran;
	st.backend = (char *)"host";
	st.sessions = 3;
	st.pools = f->n_pools;
	st.used_bytes = 12345;
	st.open_fds = 17;
	st.uptime_ms = 999;
	st.n_devices = 1;
	st.devices = &dp;
	st.daemon_version = (char *)"fake-1";
	r.id = id;
	r.body_case = VRAM__RESPONSE__BODY_STATS;
	r.stats = &st;
	fake_reply(f, &r, NULL, 0);
}

static FAKE_UNUSED void fake_ping(struct fake *f, uint64_t id)
{
	f->n_pings++;
	if (f->ignore_pings)
		return;
	if (f->ping_batch) {
		f->ping_ids[f->n_held_pings++] = id;
		if (f->n_held_pings < f->ping_batch)
			return;
		while (f->n_held_pings > 0) {
			Vram__Response r = VRAM__RESPONSE__INIT;
			r.id = f->ping_ids[--f->n_held_pings];
			fake_reply(f, &r, NULL, 0);
		}
		return;
	}
	Vram__Response r = VRAM__RESPONSE__INIT;
	r.id = id;
	fake_reply(f, &r, NULL, 0);
}

static FAKE_UNUSED void fake_handle(struct fake *f, const struct wire_frame *fr)
{
	Vram__Request *req = vram__request__unpack(NULL, fr->len, fr->payload);
	if (!req)
		TEST_FAIL("fake vramd: undecodable request");
	pthread_mutex_lock(&f->lock);
	f->n_requests++;
	uint64_t id = req->id;
	switch (req->body_case) {
	case VRAM__REQUEST__BODY_HELLO:
		fake_hello(f, id, req->hello);
		if (f->close_after_hello) {
			shutdown(f->sock, SHUT_RDWR);
			f->stop = true;
		}
		break;
	case VRAM__REQUEST__BODY_POOL_CREATE:
		fake_create(f, id, req->pool_create);
		break;
	case VRAM__REQUEST__BODY_POOL_OPEN: {
		int pi = fake_pool_find(f, 0, req->pool_open->name);
		if (pi < 0)
			fake_reply_err(f, id, ENOENT, "no pool named that");
		else
			fake_reply_pool(f, id, &f->pools[pi]);
		break;
	}
	case VRAM__REQUEST__BODY_POOL_GROW:
		fake_grow(f, id, req->pool_grow);
		break;
	case VRAM__REQUEST__BODY_POOL_CLOSE:
		f->n_closes++;
		fake_reply_err(f, id, 0, "");
		break;
	case VRAM__REQUEST__BODY_POOL_DROP: {
		int pi = fake_pool_find(f, 0, req->pool_drop->name);
		f->n_drops++;
		if (pi < 0) {
			fake_reply_err(f, id, ENOENT, "no pool named that");
			break;
		}
		fake_send_event(f, VRAM__EVENT_KIND__EVENT_DROP, 0,
				f->pools[pi].id, false, NULL, NULL, 0, 0);
		f->pools[pi].id = 0;
		fake_reply_err(f, id, 0, "");
		break;
	}
	case VRAM__REQUEST__BODY_PAUSE:
		fake_transition(f, id, false, req->pause);
		break;
	case VRAM__REQUEST__BODY_RESUME:
		fake_transition(f, id, true, req->resume);
		break;
	case VRAM__REQUEST__BODY_LIST:
		fake_list(f, id);
		break;
	case VRAM__REQUEST__BODY_STATS:
		fake_stats(f, id);
		break;
	case VRAM__REQUEST__BODY_PING:
		fake_ping(f, id);
		break;
	case VRAM__REQUEST__BODY_ACK:
		fake_ack(f, req->ack);
		break;
	default:
		fake_reply_err(f, id, EOPNOTSUPP, "unknown request");
		break;
	}
	pthread_mutex_unlock(&f->lock);
	vram__request__free_unpacked(req, NULL);
}

static FAKE_UNUSED void *fake_main(void *arg)
{
	struct fake *f = arg;

	if (f->listen_fd >= 0) {
		f->sock = accept4(f->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (f->sock < 0)
			return NULL;
	}
	for (;;) {
		pthread_mutex_lock(&f->lock);
		bool stop = f->stop;
		pthread_mutex_unlock(&f->lock);
		if (stop)
			break;
		struct pollfd p = { .fd = f->sock, .events = POLLIN };
		if (poll(&p, 1, 20) <= 0)
			continue;
		int r = wire_rx_read(&f->rx, f->sock);
		if (r == -EAGAIN || r == -EINTR)
			continue;
		if (r <= 0) {
			pthread_mutex_lock(&f->lock);
			f->eof = true;
			pthread_mutex_unlock(&f->lock);
			break;
		}
		struct wire_frame fr;
		while ((r = wire_rx_next(&f->rx, &fr)) == 1) {
			fake_handle(f, &fr);
			wire_frame_clear(&fr);
		}
		if (r < 0)
			TEST_FAIL("fake vramd: bad frame from libvram (%d)", r);
	}
	return NULL;
}

static FAKE_UNUSED void fake_init(struct fake *f)
{
	memset(f, 0, sizeof(*f));
	pthread_mutex_init(&f->lock, NULL);
	pthread_mutex_init(&f->send_lock, NULL);
	wire_rx_init(&f->rx);
	f->listen_fd = -1;
	f->sock = -1;
	f->client_end = -1;
	f->total = 1024 * FAKE_MiB;
	f->gran = 2 * FAKE_MiB;
}

/* Starts serving one end of a socketpair; f->client_end is the other. */
static FAKE_UNUSED void fake_start(struct fake *f)
{
	int sv[2];
	ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	f->sock = sv[0];
	f->client_end = sv[1];
	ASSERT_OK(pthread_create(&f->thread, NULL, fake_main, f));
	f->running = true;
}

/* Starts serving the first connection to a socket at path. */
static FAKE_UNUSED void fake_listen(struct fake *f, const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	unlink(path);
	f->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT(f->listen_fd >= 0);
	ASSERT_OK(bind(f->listen_fd, (struct sockaddr *)&sa, sizeof(sa)));
	ASSERT_OK(listen(f->listen_fd, 4));
	ASSERT_OK(pthread_create(&f->thread, NULL, fake_main, f));
	f->running = true;
}

/* A client of the fake over the socketpair (libvram takes the fd). */
static FAKE_UNUSED vram_client *fake_connect(struct fake *f)
{
	vram_client *c = NULL;
	int fd = f->client_end;
	f->client_end = -1;
	int r = client_open(fd, "unit", &c);
	if (r < 0)
		TEST_FAIL("client_open: %s (%s)", strerror(-r),
			  vram_last_error());
	return c;
}

/* Stops the thread and closes the server's fds (the client sees EOF). */
static FAKE_UNUSED void fake_stop(struct fake *f)
{
	pthread_mutex_lock(&f->lock);
	f->stop = true;
	pthread_mutex_unlock(&f->lock);
	if (f->running)
		pthread_join(f->thread, NULL);
	f->running = false;
	if (f->sock >= 0)
		close(f->sock);
	if (f->listen_fd >= 0)
		close(f->listen_fd);
	if (f->client_end >= 0)
		close(f->client_end);
	f->sock = f->listen_fd = f->client_end = -1;
	wire_rx_free(&f->rx);
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

/* Open fds of this process. */
static FAKE_UNUSED int fake_count_fds(void)
{
	int n = 0;
	char path[64];
	for (int fd = 0; fd < 4096; fd++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		if (access(path, F_OK) == 0)
			n++;
	}
	return n;
}

#endif
