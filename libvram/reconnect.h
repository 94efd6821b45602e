/* SPDX-License-Identifier: Apache-2.0 */
/* Reconnecting to a vramd that restarted (VRAM_CONNECT_RECONNECT): a new
 * socket, hello, and every pool this client maps opened again by name,
 * which makes this session a mapper again (and the owner of a pool it
 * owned). The mappings stay where they are: nothing is remapped. */
#ifndef LIBVRAM_RECONNECT_H
#define LIBVRAM_RECONNECT_H

#include "client.h"

/* With c->lock held, c broken. Tries once (or, with VRAM_CONNECT_WAIT,
 * until connected or RECONNECT_WAIT_MS passed), at most once per backoff
 * step (20 ms doubling to 2 s). Returns 0 when connected again, -ENOTCONN
 * while the daemon is not back, -EPIPE when the client does not
 * reconnect. */
int reconnect_try(struct vram_client *c);

/* When the next try is due (clock_now_ms), for the event thread. */
int64_t reconnect_due(const struct vram_client *c);

#define RECONNECT_WAIT_MS 60000

#endif
