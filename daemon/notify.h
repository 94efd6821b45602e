/* systemd notification: READY, STATUS, STOPPING, WATCHDOG, and the socket
 * systemd may pass. All of it is a no-op without systemd. */
#ifndef VRAMD_NOTIFY_H
#define VRAMD_NOTIFY_H

#include <stdint.h>

void notify_ready(const char *status);
void notify_status(const char *status);
void notify_stopping(void);
void notify_watchdog(void);
/* Watchdog period asked by systemd in microseconds, 0 if none. */
uint64_t notify_watchdog_usec(void);
/* The listening socket systemd passed (socket activation), or -1. */
int notify_listen_fd(void);

#endif
