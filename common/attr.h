/* SPDX-License-Identifier: Apache-2.0 */
/* Compiler attributes shared by vramd, libvram and the tests. */
#ifndef VRAM_COMMON_ATTR_H
#define VRAM_COMMON_ATTR_H

/* After a parameter that an interface passes but this implementation does
 * not need (a libuv callback's status, an ops table's device): the build
 * warns about every other unused parameter, so dead ones show up. */
#define UNUSED __attribute__((unused))

#endif
