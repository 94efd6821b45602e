/* SPDX-License-Identifier: Apache-2.0 */
/* systemd notification: READY, STATUS, STOPPING, WATCHDOG, and the socket
 * fd store (fdstore.h). All of it is a no-op without systemd. */
#ifndef VRAMD_NOTIFY_H
#define VRAMD_NOTIFY_H

#include <stdint.h>

void notify_ready(const char *status);
void notify_status(const char *status);
void notify_stopping(void);
void notify_watchdog(void);
/* Sends msg with fds (SCM_RIGHTS) to $NOTIFY_SOCKET: the fd store's
 * FDSTORE=1 and FDSTOREREMOVE=1. Unlike STATUS=, these must not be lost:
 * when the receiver's queue is full it waits for room, a second at most.
 * Returns 0, -ENOENT without NOTIFY_SOCKET, or -errno. */
int notify_send_fds(const char *msg, const int *fds, unsigned nfds);
/* Returns once systemd has handled every message sent before it (sd_notify's
 * BARRIER=1: systemd closes the pipe end it is sent), or -ETIMEDOUT after
 * timeout_ms; -ENOENT without NOTIFY_SOCKET. Any thread. */
int notify_barrier(int timeout_ms);
/* Watchdog period asked by systemd in microseconds, 0 if none. */
uint64_t notify_watchdog_usec(void);

#endif
