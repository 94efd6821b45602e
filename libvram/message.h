/* SPDX-License-Identifier: Apache-2.0 */
/* The protobuf types of the wire to and from the public ones of vram.h,
 * in one place (message.c). */
#ifndef LIBVRAM_MESSAGE_H
#define LIBVRAM_MESSAGE_H

#include "vram.h"
#include "vram.pb-c.h"

/* The public state of a wire state. One this library does not know (a
 * newer daemon's) reads as VRAM_STATE_PAUSED: nothing is mapped for it or
 * allocated from it. */
enum vram_state message_state_from_wire(Vram__State s);

enum vram_policy message_policy_from_wire(Vram__Policy p);
Vram__Policy message_policy_to_wire(enum vram_policy p);

/* Fills *out (VRAM__SELECTOR__INIT'ed by the caller) from sel; the
 * strings are borrowed from sel. */
void message_selector_to_wire(const struct vram_selector *sel,
			      Vram__Selector *out);

#endif
