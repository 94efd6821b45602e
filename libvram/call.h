/* SPDX-License-Identifier: Apache-2.0 */
/* Requests to vramd and their responses, the reader role and the event
 * thread (call.c). A public call builds a request, hands it to call_run()
 * with a struct call on its stack, and reads call->msg.
 */
#ifndef LIBVRAM_CALL_H
#define LIBVRAM_CALL_H

#include <stdbool.h>
#include <stdint.h>

#include "client.h"
#include "error.h"
#include "vram.pb-c.h"
#include "wire.h"

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
	bool done;		    /* written under the lock, read also
				     * atomically by a caller that polls */
	bool spin;		    /* a pause or resume: its wait polls for
				     * the client's spin_ms first (any
				     * other, call_spin_us) */
	bool remote_ok;		    /* the daemon answered err 0 */
	int err;		    /* the outcome: 0 or -errno */
	char errmsg[ERROR_MSG_MAX]; /* message for err, "" to use strerror */
	Vram__ServerMsg *msg; /* the response, once done; call_release() */
	call_complete_fn complete;
	void *arg;
	struct call *next;
};

/* Sends req as a new request and waits for its response, handling events
 * (and other threads' responses) meanwhile. Called and returns with
 * c->lock held; drops it while waiting. timeout_ms < 0: no limit. Returns
 * 0, or -errno with vram_last_error() set from the daemon's message;
 * call->msg holds the response when one came (free with call_release). */
int call_run(struct vram_client *c, Vram__Request *req, struct call *call,
	     int timeout_ms);

/* How long a pause or resume's wait polls before it sleeps, in ms:
 * VRAM_SPIN_MS (0 to 1000), else spin_default_ms() (spin.h). */
unsigned call_spin_ms(void);
/* The same for every other call, in us: VRAM_CALL_SPIN_US (0 to 1000000),
 * else spin_call_default_us() (spin.h). */
unsigned call_spin_us(void);
void call_release(struct call *call);

/* Sends req without waiting for the response (its response, if any, is
 * dropped on arrival). With c->lock held. */
int call_post(struct vram_client *c, Vram__Request *req);

/* vram_client_dispatch() with c->lock held: takes the reader role when it
 * is free and handles what arrives until timeout_ms. */
int call_dispatch(struct vram_client *c, int timeout_ms);

/* Starts the event thread, which holds the reader role until the client
 * stops. With c->lock held. */
int call_thread_start(struct vram_client *c);

/* Marks the connection gone: every waiting call fails with -EPIPE, the
 * reader is woken. With c->lock held. */
void call_break(struct vram_client *c, int err, const char *why);

/* Wakes the reader out of poll(), so that it looks at the client's flags. */
void call_wake(struct vram_client *c);

#endif
