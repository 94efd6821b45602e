/* sd_notify through libsystemd. Without NOTIFY_SOCKET these calls do
 * nothing, so vramd runs the same by hand, under systemd and in tests
 * (which set NOTIFY_SOCKET to wait for READY=1). */
#include "notify.h"

#include <stdio.h>
#include <systemd/sd-daemon.h>

#include "log.h"

void notify_ready(const char *status)
{
	sd_notifyf(0, "READY=1\nSTATUS=%s", status);
}

void notify_status(const char *status)
{
	sd_notifyf(0, "STATUS=%s", status);
}

void notify_stopping(void)
{
	sd_notify(0, "STOPPING=1\nSTATUS=stopping");
}

void notify_watchdog(void)
{
	sd_notify(0, "WATCHDOG=1");
}

uint64_t notify_watchdog_usec(void)
{
	uint64_t usec = 0;
	if (sd_watchdog_enabled(0, &usec) > 0)
		return usec;
	return 0;
}

int notify_listen_fd(void)
{
	int n = sd_listen_fds(1);
	if (n < 0) {
		log_warn("sd_listen_fds failed; creating our own socket");
		return -1;
	}
	if (n == 0)
		return -1;
	if (n > 1)
		log_warn("systemd passed %d sockets; using the first", n);
	return SD_LISTEN_FDS_START;
}
