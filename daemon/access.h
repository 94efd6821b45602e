/* SPDX-License-Identifier: Apache-2.0 */
/* Read-only access where the backend can enforce it. A read-only mapper
 * of a pool on the host backend gets its chunk and backup fds reopened
 * O_RDONLY (through /proc/self/fd), so mmap(PROT_WRITE) and write() on
 * them fail; F_SEAL_FUTURE_WRITE does not fit, as it would stop the owner
 * writing too. GPU backends hand out fds the driver imports as a whole
 * (CUDA's cuMemImportFromShareableHandle, HIP's likewise): the importer
 * owns its mapping and sets its own access, so there read-only is
 * advisory (docs/security.md). */
#ifndef VRAMD_ACCESS_H
#define VRAMD_ACCESS_H

#include <stdbool.h>

#include "backend.h"
#include "session.h"

/* Whether fds of backend b are reopened read-only for read-only mappers. */
bool access_enforced(const struct backend *b);

/* Sends ev with fds to s; when readonly and access_enforced(b), with
 * read-only reopened fds instead (closed again here). A session whose
 * fds cannot be reopened is closed later rather than given more. */
void access_send_event(const struct backend *b, struct session *s,
		       bool readonly, Vram__Event *ev, const int *fds,
		       unsigned nfds);

/* The same for a response. */
void access_reply(const struct backend *b, struct session *s, bool readonly,
		  Vram__Response *resp, const int *fds, unsigned nfds);

#endif
