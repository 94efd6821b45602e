/* SPDX-License-Identifier: Apache-2.0 */
/* Formatting for people: sizes, durations, names that are safe to print on
 * a terminal, errno names. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "vramctl.h"

const char *fmt_bytes(uint64_t bytes, char *buf, size_t size)
{
	static const char units[] = "BKMGTPE";
	unsigned u = 0;
	double v = (double)bytes;

	if (bytes < 1024) {
		snprintf(buf, size, "%" PRIu64 "B", bytes);
		return buf;
	}
	while (v >= 1024.0 && u < sizeof(units) - 2) {
		v /= 1024.0;
		u++;
	}
	if ((bytes & ((UINT64_C(1) << (10 * u)) - 1)) == 0) {
		snprintf(buf, size, "%" PRIu64 "%c", bytes >> (10 * u),
			 units[u]);
		return buf;
	}
	/* 1023.96M would print as "1024.0M": say "1.0G" instead. */
	if (v >= 1023.95 && u < sizeof(units) - 2) {
		v /= 1024.0;
		u++;
	}
	snprintf(buf, size, "%.1f%c", v, units[u]);
	return buf;
}

const char *fmt_duration_ms(uint64_t ms, char *buf, size_t size)
{
	uint64_t s = ms / 1000, m = s / 60, h = m / 60, d = h / 24;

	if (ms < 1000)
		snprintf(buf, size, "%" PRIu64 "ms", ms);
	else if (s < 60)
		snprintf(buf, size, "%" PRIu64 "s", s);
	else if (m < 60)
		snprintf(buf, size, "%" PRIu64 "m %" PRIu64 "s", m, s % 60);
	else if (h < 24)
		snprintf(buf, size, "%" PRIu64 "h %" PRIu64 "m", h, m % 60);
	else
		snprintf(buf, size, "%" PRIu64 "d %" PRIu64 "h", d, h % 24);
	return buf;
}

size_t fmt_utf8_len(const unsigned char *s)
{
	unsigned c = s[0];
	size_t len;
	uint32_t cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2;
		cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		cp = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		cp = c & 0x07;
	} else {
		return 0;
	}
	for (size_t i = 1; i < len; i++) {
		/* A NUL fails this test, so we stop at the terminator. */
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
		return 0;
	return len;
}

/* Whether the code point encoded at s (valid, len bytes) is a C1 control
 * (U+0080..U+009F): some terminals act on those like on ESC. */
static bool utf8_is_c1(const unsigned char *s, size_t len)
{
	return len == 2 && s[0] == 0xc2 && s[1] < 0xa0;
}

const char *fmt_safe(const char *str, char *buf, size_t size)
{
	const unsigned char *s = (const unsigned char *)(str ? str : "");
	size_t o = 0;

	if (size == 0)
		return buf;
	while (*s && o + 1 < size) {
		size_t len = fmt_utf8_len(s);
		if (len == 0 || (len == 1 && (*s < 0x20 || *s == 0x7f)) ||
		    utf8_is_c1(s, len)) {
			buf[o++] = '?';
			s += len ? len : 1;
			continue;
		}
		if (o + len >= size)
			break; /* never cut a character in half */
		memcpy(buf + o, s, len);
		o += len;
		s += len;
	}
	buf[o] = '\0';
	return buf;
}

size_t fmt_width(const char *s)
{
	size_t w = 0;

	for (; *s; s++)
		if (((unsigned char)*s & 0xc0) != 0x80)
			w++;
	return w;
}

const char *fmt_errno_name(int err)
{
	const char *name = strerrorname_np(err < 0 ? -err : err);

	return name ? name : "E?";
}

const char *fmt_state(enum vram_state s)
{
	const char *name = vram_state_name(s);

	return name ? name : "unknown";
}

const char *fmt_policy(enum vram_policy p)
{
	const char *name = vram_policy_name(p);

	return name ? name : "unknown";
}
