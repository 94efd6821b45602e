/* SPDX-License-Identifier: Apache-2.0 */
/* Read-only fds for read-only mappers: see access.h. */
#include "access.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

bool access_enforced(const struct backend *b)
{
	return b && b->ops && strcmp(b->ops->name, "host") == 0;
}

static void access_close(int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(fds);
}

/* fds reopened O_RDONLY: a new open file description each, so the
 * receiver cannot F_SETFL its way back to writing. Returns 0 with *out
 * (NULL for none), or -errno. */
static int access_reopen(const int *fds, unsigned n, int **out)
{
	int *ro;
	char path[64];

	*out = NULL;
	if (n == 0)
		return 0;
	ro = malloc(n * sizeof(*ro));
	if (!ro)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fds[i]);
		ro[i] = open(path, O_RDONLY | O_CLOEXEC);
		if (ro[i] < 0) {
			int r = -errno;
			access_close(ro, i);
			return r;
		}
	}
	*out = ro;
	return 0;
}

/* The fds to send s: fds themselves, or read-only ones in *ro (free
 * them with access_close). false when they cannot be made. */
static bool access_fds(const struct backend *b, struct session *s,
		       bool readonly, const int *fds, unsigned nfds, int **ro)
{
	*ro = NULL;
	if (!readonly || !access_enforced(b) || nfds == 0)
		return true;
	int r = access_reopen(fds, nfds, ro);
	if (r < 0) {
		log_warn("session %llu: cannot reopen fds read-only: %s",
			 (unsigned long long)s->id, strerror(-r));
		session_close_later(s, "cannot make read-only fds");
		return false;
	}
	return true;
}

void access_send_event(const struct backend *b, struct session *s,
		       bool readonly, Vram__Event *ev, const int *fds,
		       unsigned nfds)
{
	int *ro;

	if (!access_fds(b, s, readonly, fds, nfds, &ro))
		return;
	session_send_event(s, ev, ro ? ro : fds, nfds);
	if (ro)
		access_close(ro, nfds);
}

void access_reply(const struct backend *b, struct session *s, bool readonly,
		  Vram__Response *resp, const int *fds, unsigned nfds)
{
	int *ro;

	if (!access_fds(b, s, readonly, fds, nfds, &ro))
		return;
	session_reply(s, resp, ro ? ro : fds, nfds);
	if (ro)
		access_close(ro, nfds);
}
