/* SPDX-License-Identifier: Apache-2.0 */
#ifndef VRAMD_AUDIT_H
#define VRAMD_AUDIT_H

#include <stdint.h>

struct node;
struct session;

/* Answers s's audit request id: per process and device, memory in use as
 * the driver reports it next to the memory held through vramd. */
void audit_handle(struct node *node, struct session *s, uint64_t id);

#endif
