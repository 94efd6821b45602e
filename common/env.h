/* SPDX-License-Identifier: Apache-2.0 */
/* Numeric settings read from the environment (VRAM_CUDA_*, VRAM_HIP_*),
 * shared by vramd and libvram. Header-only. */
#ifndef VRAM_ENV_H
#define VRAM_ENV_H

#include <stdlib.h>

/* The decimal value of $name when it is in [lo, hi]; def when it is unset
 * or empty, and also when it is not a number in range, in which case *bad
 * (if bad is not NULL) gets the rejected text so the caller can say so:
 * the daemon logs it, libvram prints nothing of its own. */
static inline unsigned env_unsigned(const char *name, unsigned def,
				    unsigned lo, unsigned hi, const char **bad)
{
	const char *s = getenv(name);
	char *end;
	unsigned long v;

	if (bad)
		*bad = NULL;
	if (!s || !*s)
		return def;
	v = strtoul(s, &end, 10);
	if (*end || *s == '-' || v < lo || v > hi) {
		if (bad)
			*bad = s;
		return def;
	}
	return (unsigned)v;
}

#endif
