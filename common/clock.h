/* SPDX-License-Identifier: Apache-2.0 */
/* The one monotonic clock of vramd, libvram and the tests, in milliseconds.
 * Header only, like env.h: each side compiles its own copy.
 */
#ifndef VRAM_COMMON_CLOCK_H
#define VRAM_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Milliseconds of CLOCK_MONOTONIC: for deadlines and durations only. */
static inline int64_t clock_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Nanoseconds of the same clock: for timing what takes under a ms. */
static inline int64_t clock_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Milliseconds since *t0 (clock_now_ns), and *t0 moved to now. */
static inline double clock_lap_ms(int64_t *t0)
{
	int64_t t = clock_now_ns();
	double ms = (double)(t - *t0) / 1e6;

	*t0 = t;
	return ms;
}

#endif
