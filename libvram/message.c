/* SPDX-License-Identifier: Apache-2.0 */
/* Wire types to and from the public ones: see message.h. */
#include "message.h"

enum vram_state message_state_from_wire(Vram__State s)
{
	switch (s) {
	case VRAM__STATE__STATE_ACTIVE:
		return VRAM_STATE_ACTIVE;
	case VRAM__STATE__STATE_PAUSING:
		return VRAM_STATE_PAUSING;
	case VRAM__STATE__STATE_RESUMING:
		return VRAM_STATE_RESUMING;
	case VRAM__STATE__STATE_PAUSED:
	default:
		return VRAM_STATE_PAUSED;
	}
}

enum vram_policy message_policy_from_wire(Vram__Policy p)
{
	return p == VRAM__POLICY__POLICY_HOST ? VRAM_POLICY_HOST :
	       p == VRAM__POLICY__POLICY_DISK ? VRAM_POLICY_DISK :
						VRAM_POLICY_DISCARD;
}

Vram__Policy message_policy_to_wire(enum vram_policy p)
{
	return p == VRAM_POLICY_HOST ? VRAM__POLICY__POLICY_HOST :
	       p == VRAM_POLICY_DISK ? VRAM__POLICY__POLICY_DISK :
				       VRAM__POLICY__POLICY_DISCARD;
}

void message_selector_to_wire(const struct vram_selector *sel,
			      Vram__Selector *out)
{
	out->name = (char *)(sel->name ? sel->name : "");
	out->tag = (char *)(sel->tag ? sel->tag : "");
	out->owner_pid = sel->owner_pid;
	out->all = sel->all != 0;
	out->owner = (char *)(sel->owner ? sel->owner : "");
	out->job = (char *)(sel->job ? sel->job : "");
	out->n_owner_pids = sel->owner_pids ? sel->n_owner_pids : 0;
	out->owner_pids = (uint32_t *)sel->owner_pids;
}
