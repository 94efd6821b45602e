/* SPDX-License-Identifier: Apache-2.0 */
/* Events from the daemon about pools this process maps (events.c). */
#ifndef LIBVRAM_EVENTS_H
#define LIBVRAM_EVENTS_H

#include <stdint.h>

#include "client.h"
#include "vram.pb-c.h"
#include "wire.h"

/* What an event's ack says. */
struct events_ack {
	uint64_t event_id;
	int err; /* 0 or -errno */
	char message[256];
	/* Set by the caller: reports a restore in parts (chunks restored so
	 * far) to the daemon before the ack. */
	void (*progress)(struct vram_client *c, uint64_t event_id,
			 uint32_t restored);
};

/* Handles one event from the daemon. In the reader, with c->lock held;
 * f's fds are closed by the caller. Returns 1 when the event wants an ack,
 * which *ack then holds and the caller sends, or 0 (a restore in parts:
 * until its last part, reporting each chunk through ack->progress, which
 * the caller sets). Never waits on the daemon. */
int events_handle(struct vram_client *c, const Vram__Event *ev,
		  const struct wire_frame *f, struct events_ack *ack);

#endif
