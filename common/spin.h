/* SPDX-License-Identifier: Apache-2.0 */
/* How long a pause or resume polls instead of sleeping, by default: the
 * daemon's transition_spin_ms and libvram's VRAM_SPIN_MS (docs/
 * architecture.md, "Polling through a transition"). Header only, like
 * env.h: each side compiles its own copy.
 */
#ifndef VRAM_COMMON_SPIN_H
#define VRAM_COMMON_SPIN_H

#include <unistd.h>

/* 50 ms where 4 or more CPUs are online, 0 where fewer: a poller needs a
 * core to itself, and on a small machine it would take the one the
 * mapper or the daemon needs. */
static inline unsigned spin_default_ms(void)
{
	return sysconf(_SC_NPROCESSORS_ONLN) >= 4 ? 50 : 0;
}

#endif
