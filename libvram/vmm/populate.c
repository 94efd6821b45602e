/* SPDX-License-Identifier: Apache-2.0 */
/* Faulting in a large shared mapping from several threads: see
 * populate.h. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <unistd.h>

#include "env.h"
#include "populate.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define POPULATE_MAX_THREADS 8
/* Below this a slice is not worth a thread. */
#define POPULATE_MIN_SLICE (256ull << 20)

struct populate_slice {
	char *addr;
	uint64_t len;
	int r;
};

static void *populate_slice_run(void *arg)
{
	struct populate_slice *s = arg;

	s->r = madvise(s->addr, s->len, MADV_POPULATE_WRITE) < 0 ? -errno : 0;
	return NULL;
}

static unsigned populate_threads(uint64_t len)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned def = cpus > 1 ? (unsigned)(cpus / 2) : 1;
	unsigned n;

	if (def > POPULATE_MAX_THREADS)
		def = POPULATE_MAX_THREADS;
	n = env_unsigned("VRAM_POPULATE_THREADS", def, 1, 64, NULL);
	if (len / POPULATE_MIN_SLICE < n)
		n = (unsigned)(len / POPULATE_MIN_SLICE);
	return n ? n : 1;
}

int populate_range(void *addr, uint64_t len)
{
	struct populate_slice s[64];
	pthread_t t[64];
	bool started[64] = { false };
	long page = sysconf(_SC_PAGESIZE);
	unsigned n = populate_threads(len);
	uint64_t per;
	int r = 0;

	if (len == 0)
		return 0;
	/* Slices start on page boundaries; the last takes the rest. */
	per = len / n / (uint64_t)page * (uint64_t)page;
	for (unsigned i = 0; i < n; i++) {
		s[i].addr = (char *)addr + i * per;
		s[i].len = i + 1 < n ? per : len - i * per;
		s[i].r = 0;
	}
	/* The caller's thread takes the first slice. */
	for (unsigned i = 1; i < n; i++)
		started[i] = pthread_create(&t[i], NULL, populate_slice_run,
					    &s[i]) == 0;
	populate_slice_run(&s[0]);
	for (unsigned i = 1; i < n; i++) {
		if (started[i])
			pthread_join(t[i], NULL);
		else
			populate_slice_run(&s[i]);
	}
	for (unsigned i = 0; i < n && r == 0; i++)
		r = s[i].r;
	return r;
}
