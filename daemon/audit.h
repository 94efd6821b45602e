/* SPDX-License-Identifier: Apache-2.0 */
#ifndef VRAMD_AUDIT_H
#define VRAMD_AUDIT_H

#include <stdint.h>

#include <stdbool.h>

#include "vram.pb-c.h"

struct node;
struct session;
struct session_outside;
struct transition;

/* Answers s's audit request id: per process and device, memory in use as
 * the driver reports it next to the memory held through vramd, and what
 * the process said it allocated outside vramd (an OutsideReport). */
void audit_handle(struct node *node, struct session *s, uint64_t id);

/* Keeps what s's process says it allocated outside vramd's pools (the
 * last report wins) and answers request id. */
void audit_outside_report(struct session *s, uint64_t id,
			  const Vram__OutsideReport *m);

/* The wire's fields for o (all 0 when nothing was reported). */
void audit_outside_fill(const struct session_outside *o, protobuf_c_boolean *reported,
			uint64_t *bytes, uint64_t *count,
			protobuf_c_boolean *expandable);

/* Logs, once per owner, what the owners of t's paused pools left outside
 * (those that reported it): "outside: N bytes in K allocations (disable
 * scopes), plus the CUDA context". */
void audit_outside_log(const struct transition *t);

#endif
