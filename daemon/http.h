/* SPDX-License-Identifier: Apache-2.0 */
/* The outputs of the metrics, each on a thread of its own so that no scrape
 * and no disk ever holds up the loop: libmicrohttpd's thread answers
 * GET /metrics and GET /healthz from the last buffer published, and a
 * writer thread rewrites the node_exporter textfile on a timer. The loop
 * only swaps the buffer, under a mutex held for the swap. */
#ifndef VRAMD_HTTP_H
#define VRAMD_HTTP_H

#include <stddef.h>

struct http;

/* Starts what is asked: HTTP on listen ("HOST:PORT", "[V6]:PORT", numeric;
 * NULL or "": none) and the textfile at path (NULL or "": none), rewritten
 * every interval_ms. Returns 0 and *out, or -errno (logged). */
int http_start(const char *listen, const char *textfile, unsigned interval_ms,
	       struct http **out);

/* Hands over buf (malloc'd, len bytes, owned from here) as the exposition
 * to serve from now on. Never waits for a scrape or a write. */
void http_publish(struct http *h, char *buf, size_t len);

/* Stops the threads and frees everything. NULL is a no-op. */
void http_stop(struct http *h);

/* The port HTTP listens on (after a port of 0: the one the kernel
 * chose), or 0. */
unsigned http_port(const struct http *h);

#endif
