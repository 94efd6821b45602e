/* SPDX-License-Identifier: Apache-2.0 */
/* The request handlers, one function per request; server.c's read loop
 * hands each decoded request to request_handle. */
#ifndef VRAMD_REQUEST_H
#define VRAMD_REQUEST_H

#include <stdbool.h>

#include "vram.pb-c.h"

struct server;
struct session;

/* Handles req from s: checks its arguments and the caller's rights, acts
 * through node.c, pool.c or transition.c, and answers (a pause or resume
 * answers when it ends). Returns 0, or -EPROTO when the session must be
 * closed (a request without an id). */
int request_handle(struct server *srv, struct session *s,
		   const Vram__Request *req);

/* Must req wait until the device has taken back the memory released so
 * far? Those that make chunks, or report free memory before and after
 * what they do: grow, pause and resume. */
bool request_needs_settled(const Vram__Request *req);

#endif
