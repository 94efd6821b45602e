/* SPDX-License-Identifier: Apache-2.0 */
/* The client's end of the Unix socket (sock.c): connecting, and a
 * blocking send for a socket that is non-blocking because a reader polls
 * it. The daemon never blocks, so this lives here and not in proto/wire.c.
 */
#ifndef LIBVRAM_SOCK_H
#define LIBVRAM_SOCK_H

#include <stdbool.h>
#include <stddef.h>

/* Connects a Unix socket to path ("@name": abstract). *sock is CLOEXEC and
 * non-blocking. Returns 0 or -errno with a message set. */
int sock_connect(const char *path, int *sock);

/* sock_connect to path, or when admin first to the admin lane's socket
 * ($VRAM_ADMIN_SOCKET, or path with ".admin" appended), falling back to
 * path where the admin socket is missing, refused or not accessible
 * (vram.h, VRAM_CONNECT_ADMIN). Returns 0 or -errno with a message set. */
int sock_open(const char *path, bool admin, int *sock);

/* Queues and writes one frame (wire_tx_queue, wire_tx_flush), waiting with
 * poll() for the socket to take it. The caller keeps fds. Returns 0 or
 * -errno (-EMSGSIZE over the wire's limits, -EBADF, -EPIPE, ...). */
int sock_send(int sock, const void *payload, size_t len, const int *fds,
	      unsigned nfds);

#endif
