/* SPDX-License-Identifier: Apache-2.0 */
/* Gang pause and resume: all or nothing over the pools a request selects
 * (a tag across every device and rank of a job). On top of transition.c:
 * one transition over every pool; if one pool failed, missed its deadline
 * or lost its owner (a rank died) before the end, a second transition
 * brings back the pools the first changed, and the answer names the rank
 * (owner pid, instance, device) and why. */
#ifndef VRAMD_GANG_H
#define VRAMD_GANG_H

#include <stdbool.h>
#include <stdint.h>

struct node;
struct pool;
struct session;

/* transition_start's arguments and answer, all or nothing. */
void gang_start(struct node *node, struct session *requester,
		uint64_t request_id, bool resume, struct pool *const *pools,
		const bool *allowed, unsigned n, unsigned timeout_ms);

#endif
