/* SPDX-License-Identifier: Apache-2.0 */
/* Who is at the other end of a client socket, from what the kernel vouches
 * for: SO_PEERCRED's uid, gid and pid (the pid as vramd's PID namespace
 * sees it, 0 when the peer is outside it), and the peer's cgroup, read
 * through a pidfd so that a pid reused meanwhile is never mistaken for the
 * peer. What a client says of itself (its name, its instance) comes later,
 * in its hello. */
#ifndef VRAMD_PEER_H
#define VRAMD_PEER_H

#include "pool.h"

/* Fills who's pid, uid, gid, a default name and the cgroup ("" when it
 * cannot be read: a peer outside vramd's PID namespace, no /proc). Returns
 * 0 or -errno when SO_PEERCRED fails. */
int peer_identify(int fd, struct identity *who);

/* Does who belong to the cgroup path (that cgroup or one below it)? */
bool peer_in_cgroup(const struct identity *who, const char *path);

#endif
