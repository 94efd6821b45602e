/* SPDX-License-Identifier: Apache-2.0 */
/* A client: one connection to vramd, made by vram_connect() and freed by
 * vram_client_close() (client.c). Its pools are struct vram_pool
 * (pool.h); its requests are struct call (call.h).
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

#include "vmm.h"
#include "vram.h"
#include "wire.h"

#define NAME_MAX_LEN 127 /* pool and client names, as the daemon limits them */
/* A pool as a request may name it: NAME, or "UID:NAME" for another uid's
 * pool (an admin's; the daemon scopes names per uid). */
#define ADDRESS_MAX_LEN (NAME_MAX_LEN + 11)
#define TAG_MAX_LEN 63
#define CONNECT_TIMEOUT_MS 10000 /* for the hello reply */

struct call;
struct vram_pool;

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
	int64_t last_ack_ns; /* when the reader last acked an event (debug log) */
	/* A pause or resume's wait polls for spin_ms (VRAM_SPIN_MS) instead
	 * of sleeping: until spin_until_ns (atomic) the reader reads
	 * without poll() and a waiting caller checks its call without the
	 * condition variable (call.c), or until the last of them
	 * (spin_calls, under lock) is answered, whichever comes first. */
	unsigned spin_ms;
	unsigned spin_calls;
	/* Any other call's wait polls for call_spin_us (VRAM_CALL_SPIN_US,
	 * call_spin_us()) the same way, the caller too when the event
	 * thread reads its answer. */
	unsigned call_spin_us;
	int64_t spin_until_ns;
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
	unsigned flags;		      /* vram_connect's VRAM_CONNECT_* */
	char path[108];		      /* the socket, to reconnect */
	bool reconnecting;	      /* a thread is at it (reconnect.c) */
	unsigned backoff_ms;
	int64_t retry_at; /* clock_now_ms of the next try, 0: now */
	/* reconnect_try, set when a flag asks for it: call.c reaches it
	 * through this pointer (reconnect.c is above call.c). */
	int (*reconnect)(struct vram_client *c);
	struct vram_pool *pools;      /* open in this client */
	struct vram_client *reg_next; /* registry.c */
};

/* Makes a client of a connected socket: sends hello, reads the reply,
 * opens the backend's client half and adds the client to the registry.
 * Takes sock in every case (closes it on failure). vram_connect() is this
 * after sock_connect(). */
int client_open(int sock, const char *name, struct vram_client **out);
/* Says hello on c's socket and fills what the daemon tells. With c->lock
 * held. 0 or -errno. */
int client_hello(struct vram_client *c);

#endif
