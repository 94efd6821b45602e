/* SPDX-License-Identifier: Apache-2.0 */
/* The library's own version, which may be newer than a program's header. */
#include "vram.h"

const char *vram_version(void)
{
	return VRAM_VERSION_STRING;
}

int vram_version_number(void)
{
	return VRAM_VERSION_NUMBER;
}
