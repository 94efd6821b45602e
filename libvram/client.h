/* libvram's internal state: a client (one connection to vramd) and its
 * pools. Shared by connection.c, events.c, registry.c and the api_*.c
 * files; nothing here is exported.
 *
 * Locking: one mutex per client (lock) guards every field of the client
 * and of its pools. It is released while a thread waits for the daemon
 * (in poll() as the reader, or on cond). send_lock serializes writes to the
 * socket; it may be taken with lock held, never the other way round. The
 * registry's lock (registry.c) likewise may be taken with a client's lock
 * held, never the other way round.
 */
#ifndef LIBVRAM_CLIENT_H
#define LIBVRAM_CLIENT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "mapping.h"
#include "suballoc.h"
#include "vmm.h"
#include "vram.h"
#include "vram.pb-c.h"
#include "wire.h"

#define NAME_MAX_LEN 127 /* pool and client names, as the daemon limits them */
#define TAG_MAX_LEN 63
#define CONNECT_TIMEOUT_MS 10000   /* for the hello reply */
#define MIN_ALIGN (2ull << 20)	   /* ranges are aligned to at least 2 MiB */
#define GROW_MIN (64ull << 20)	   /* a pool grows by at least 64 MiB */
#define GROW_MAX_STEP (1ull << 30) /* and geometrically up to 1 GiB */

struct vram_client;
struct call;

/* Runs in the reader, under the client's lock, when the response to call
 * arrives without error, before any later frame is looked at: so that what
 * the response brings (a pool, new chunks) is in place before an event
 * about it is handled. The frame's fds are closed after it returns.
 * Returns 0 or -errno, with a message set by error_set(). */
typedef int (*call_complete_fn)(struct vram_client *c, struct call *call,
				const Vram__Response *r,
				const struct wire_frame *f);

/* A request waiting for its response. Lives on the caller's stack. */
struct call {
	uint64_t id;
	bool done;
	bool remote_ok;		    /* the daemon answered err 0 */
	int err;		    /* the outcome: 0 or -errno */
	char errmsg[ERROR_MSG_MAX]; /* message for err, "" to use strerror */
	Vram__ServerMsg *msg; /* the response, once done; call_release() */
	call_complete_fn complete;
	void *arg;
	struct call *next;
};

struct client_device {
	unsigned index;
	char uuid[64];
	uint64_t total_bytes, free_bytes, granularity;
};

struct vram_client {
	pthread_mutex_t lock;
	pthread_cond_t cond; /* a response arrived, the reader role or a
				    * pool's growth was released, or closing */
	pthread_mutex_t send_lock;
	int sock;
	int wake_fd;	   /* eventfd: wakes the reader out of poll */
	struct wire_rx rx; /* touched only by the reader */
	uint64_t next_id;
	struct call *calls; /* waiting for their response */
	bool reader;	    /* some thread holds the reader role */
	bool broken;	    /* the connection is gone: -EPIPE */
	bool stopping;	    /* the event thread must exit */
	bool closing;
	bool forked;   /* inherited through fork(): dead here */
	unsigned busy; /* public calls in progress (atomic) */
	bool thread_started;
	pthread_t thread;
	struct vmm *vmm;
	char name[NAME_MAX_LEN + 1];
	char backend[16];
	char daemon_version[32];
	uint64_t session_id;
	uint32_t max_chunks;
	unsigned n_devices;
	struct client_device devices[VRAM_MAX_DEVICES];
	struct vram_pool *pools;      /* open in this client */
	struct vram_client *reg_next; /* registry.c */
};

struct vram_pool {
	struct vram_client *client;
	struct vram_pool *next;	    /* in client->pools */
	struct vram_pool *reg_next; /* registry.c */
	uint64_t id;
	char name[NAME_MAX_LEN + 1];
	char tag[TAG_MAX_LEN + 1];
	unsigned dev;
	uint64_t granularity;
	uint64_t align;
	enum vram_policy policy;
	unsigned flags;
	enum vram_state state; /* as this process last saw it */
	bool owner;	       /* this client sub-allocates it */
	bool readonly;
	bool dropped;		/* a DROP event came: calls say -ENOENT */
	bool growing;		/* a PoolGrow is in flight */
	bool linked;		/* in client->pools */
	uint64_t size;		/* the pool's size (kept while paused) */
	uint64_t reserve_bytes; /* the range as the daemon knows it */
	unsigned users;		/* public calls in progress (atomic) */
	struct mapping map;
	struct suballoc sa; /* owner only */
};

/* ---- connection.c ------------------------------------------------------ */

/* Connects a Unix socket to path ("@name": abstract). *sock is CLOEXEC and
 * non-blocking. */
int connection_connect(const char *path, int *sock);

/* Makes a client of a connected socket: sends hello, reads the reply,
 * opens the backend's client half and adds the client to the registry.
 * Takes sock in every case (closes it on failure). */
int connection_open(int sock, const char *name, struct vram_client **out);

/* Sends req as a new request and waits for its response, handling events
 * (and other threads' responses) meanwhile. Called and returns with
 * c->lock held; drops it while waiting. timeout_ms < 0: no limit. Returns
 * 0, or -errno with vram_last_error() set from the daemon's message;
 * call->msg holds the response when one came (free with call_release). */
int connection_call(struct vram_client *c, Vram__Request *req,
		    struct call *call, int timeout_ms);
void call_release(struct call *call);

/* Sends req without waiting for the response (its response, if any, is
 * dropped on arrival). With c->lock held. */
int connection_post(struct vram_client *c, Vram__Request *req);

/* Acknowledges an event. With c->lock held. */
int connection_ack(struct vram_client *c, uint64_t event_id, int err,
		   const char *message);

/* vram_client_dispatch() with c->lock held. */
int connection_dispatch(struct vram_client *c, int timeout_ms);

/* Starts the event thread. With c->lock held. */
int connection_thread_start(struct vram_client *c);

/* Marks the connection gone: every waiting call fails with -EPIPE, the
 * reader is woken. With c->lock held. */
void connection_break(struct vram_client *c, int err, const char *why);

/* Closes a client: breaks the connection, waits for calls in progress and
 * the event thread, releases its pools and frees everything. The client
 * must already be out of the registry. */
void connection_close(struct vram_client *c);

/* ---- events.c ------------------------------------------------------------ */

/* Handles one event from the daemon (acks it when its kind wants one). In
 * the reader, with c->lock held; f's fds are closed by the caller. */
void events_handle(struct vram_client *c, const Vram__Event *ev,
		   const struct wire_frame *f);

/* Turns a message's chunk list into mapping descs with fds from the frame.
 * -EPROTO if an fd index is out of range. *out is malloc()ed. */
int events_descs(Vram__Chunk *const *chunks, size_t n,
		 const struct wire_frame *f, struct mapping_desc **out);

/* ---- api_pool.c ---------------------------------------------------------- */

struct vram_pool *pool_find(struct vram_client *c, uint64_t id);
/* Takes a pool out of its client's list. With c->lock held. */
void pool_unlink(struct vram_pool *p);
/* Undoes a pool in this process (unmaps, frees the range) and frees it.
 * The pool must be unlinked and out of the registry. */
void pool_free(struct vram_pool *p);

/* ---- registry.c: every live client and pool ------------------------------ */

void registry_client_add(struct vram_client *c);
void registry_pool_add(struct vram_pool *p);

/* Enters a public call on c: 0 and c->lock held when c is live, else
 * -EINVAL (message set). registry_client_leave() unlocks. */
int registry_client_enter(struct vram_client *c);
void registry_client_leave(struct vram_client *c);

/* Same for a pool: 0 with p->client->lock held when p is live. */
int registry_pool_enter(struct vram_pool *p);
void registry_pool_leave(struct vram_pool *p);

/* Removes c (and every pool of c) from the registry; false if c was not
 * there (closed already, or never a client). *forked: c was inherited
 * through fork() and must only be forgotten. */
bool registry_client_take(struct vram_client *c, bool *forked);
/* Removes p from the registry; false if it was not there. On true, unless
 * *forked, the pool's client counts one more call in progress: the caller
 * closes the pool and then calls registry_client_leave() with the
 * client's lock. */
bool registry_pool_take(struct vram_pool *p, bool *forked);

/* Whether a live pool of this process (of any client) owns the pool with
 * this id and name. Only immutable fields are read. */
bool registry_pool_owned(uint64_t id, const char *name);

#endif
