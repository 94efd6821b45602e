/* SPDX-License-Identifier: Apache-2.0 */
/* The outputs of the metrics, each on a thread of its own so that no scrape
 * and no disk ever holds up the loop: libmicrohttpd's thread answers
 * GET /metrics and GET /healthz from the last buffer published, and a
 * writer thread rewrites the node_exporter textfile on a timer. The loop
 * only swaps the buffer, under a mutex held for the swap.
 *
 * What changed since the last buffer is rendered when a scrape asks for
 * it, not when it changes: the loop marks the buffer stale (cheap), and a
 * GET /metrics that finds it stale asks the loop to render (render_ask,
 * from the HTTP thread) and waits for the new buffer, at most
 * HTTP_RENDER_WAIT_MS; a loop that does not render by then gets the stale
 * one served. So a scrape after a change sees it, and the change itself
 * (a pause or resume) never waits for a render. */
#ifndef VRAMD_HTTP_H
#define VRAMD_HTTP_H

#include <stddef.h>

struct http;

/* Starts what is asked: HTTP on listen ("HOST:PORT", "[V6]:PORT", numeric;
 * NULL or "": none) and the textfile at path (NULL or "": none), rewritten
 * every interval_ms. Returns 0 and *out, or -errno (logged). */
int http_start(const char *listen, const char *textfile, unsigned interval_ms,
	       void (*render_ask)(void *arg), void *render_arg,
	       struct http **out);

#define HTTP_RENDER_WAIT_MS 1000

/* Hands over buf (malloc'd, len bytes, owned from here) as the exposition
 * to serve from now on, with every change marked so far. Never waits for a
 * scrape or a write. */
void http_publish(struct http *h, char *buf, size_t len);

/* On the loop: something the exposition shows changed since the last
 * http_publish. NULL is a no-op. */
void http_mark_stale(struct http *h);

/* Stops the threads and frees everything. NULL is a no-op. */
void http_stop(struct http *h);

/* The port HTTP listens on (after a port of 0: the one the kernel
 * chose), or 0. */
unsigned http_port(const struct http *h);

#endif
