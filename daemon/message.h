/* SPDX-License-Identifier: Apache-2.0 */
/* Pieces of protobuf messages that several replies and events share. */
#ifndef VRAMD_MESSAGE_H
#define VRAMD_MESSAGE_H

#include "backend.h"
#include "pool.h"
#include "quota.h"
#include "vram.pb-c.h"

/* Chunks of a pool as messages, with their fds in the same order
 * (fd_index i is fds[i]). The fds stay the pool's. */
struct chunk_list {
	Vram__Chunk *chunks;
	Vram__Chunk **ptrs;
	int *fds;
	unsigned n;
};

/* Describes p's chunks [first, first + n), leaving room for extra_fds more
 * fds after them (the backup). Returns 0 or -ENOMEM. */
int chunk_list_make(struct chunk_list *l, const struct pool *p, unsigned first,
		    unsigned n, unsigned extra_fds);
void chunk_list_free(struct chunk_list *l);

/* Fills dev[i] and ptrs[i] for every device of b (BACKEND_MAX_DEVICES
 * entries); strings point into b. Returns the number of devices. */
unsigned device_infos_fill(struct backend *b, Vram__DeviceInfo *dev,
			   Vram__DeviceInfo **ptrs);

/* Fills dev[d] and ptrs[d] for every device of b (at most
 * BACKEND_MAX_DEVICES) with the free memory before[d] and after[d] that a
 * transition or a gang measured: a reply's device figures. Strings point
 * into b. Returns the number of devices. */
unsigned device_frees_fill(const struct backend *b, const uint64_t *before,
			   const uint64_t *after, Vram__DeviceFree *dev,
			   Vram__DeviceFree **ptrs);

/* The event kind of a round, and the state the wire shows for a pool's
 * (every PAUSING_* is PAUSING, every RESUMING_* is RESUMING). */
Vram__EventKind message_event_kind(enum pool_round round);
Vram__State message_pool_state(enum pool_state s);
/* The wire's name for a pool's backup policy. */
Vram__Policy policy_to_wire(enum pool_policy p);

/* Fills info for p; *mappers_out is an array of pool_mapper_count(p)
 * entries, freed with pool_info_clear (strings point into p, valid while
 * the reply is built). 0 or -ENOMEM. */
int pool_info_fill(struct pool *p, Vram__PoolInfo *info,
		   Vram__Mapper **mappers_out);
void pool_info_clear(Vram__PoolInfo *info, Vram__Mapper *mappers);

/* A status reply's quota lines (quota_report) as messages: *msgs and
 * *ptrs (n entries, each with n_devices device figures), freed with
 * quota_usages_free. 0 or -ENOMEM. */
int quota_usages_fill(const struct quota_line *lines, unsigned n,
		      unsigned n_devices, Vram__QuotaUsage **msgs,
		      Vram__QuotaUsage ***ptrs);
void quota_usages_free(Vram__QuotaUsage *msgs, Vram__QuotaUsage **ptrs);

#endif
