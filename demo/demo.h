/* SPDX-License-Identifier: Apache-2.0 */
/* What the demo's engine and trainer share. Header-only: each is one
 * program built from one file. */
#ifndef VRAM_DEMO_H
#define VRAM_DEMO_H

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#define MIB (UINT64_C(1) << 20)

/* "256M", or "0.5M" when not whole. */
static inline const char *demo_size_text(uint64_t bytes, char *buf, size_t size)
{
	if (bytes % MIB == 0)
		snprintf(buf, size, "%" PRIu64 "M", bytes / MIB);
	else
		snprintf(buf, size, "%.1fM", (double)bytes / (double)MIB);
	return buf;
}

/* A decimal number in [min, max], digits only. 0 or -EINVAL. */
static inline int demo_parse_uint(const char *s, uint64_t min, uint64_t max,
				  uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

#endif
