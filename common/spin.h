/* SPDX-License-Identifier: Apache-2.0 */
/* How long a wait polls instead of sleeping, by default: the daemon's
 * transition_spin_ms and libvram's VRAM_SPIN_MS for a pause or resume
 * (docs/architecture.md, "Polling through a transition"), and the
 * shorter windows of every other call and of the reading threads. Header
 * only, like env.h: each side compiles its own copy.
 */
#ifndef VRAM_COMMON_SPIN_H
#define VRAM_COMMON_SPIN_H

#include <stdbool.h>
#include <unistd.h>

/* Does this machine poll by default? Where 4 or more CPUs are online: a
 * poller needs a core to itself, and on a small machine it would take the
 * one the mapper or the daemon needs. Every default below is 0 where not. */
static inline bool spin_machine_polls(void)
{
	return sysconf(_SC_NPROCESSORS_ONLN) >= 4;
}

/* A pause or resume's window, in ms. */
static inline unsigned spin_default_ms(void)
{
	return spin_machine_polls() ? 50 : 0;
}

/* How long any other call's wait (libvram's VRAM_CALL_SPIN_US) and a
 * reading thread after a frame (the daemon's io_poll_us) poll instead of
 * sleeping, in microseconds: long enough for a ping's answer or a busy
 * client's next frame (docs/architecture.md, "Reading threads"). */
static inline unsigned spin_call_default_us(void)
{
	return spin_machine_polls() ? 100 : 0;
}

static inline unsigned spin_io_default_us(void)
{
	return spin_machine_polls() ? 200 : 0;
}

#endif
