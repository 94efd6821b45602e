/* SPDX-License-Identifier: Apache-2.0 */
/* Faulting in a large shared mapping from several threads, ahead of
 * whoever pins and copies it. */
#ifndef VRAM_POPULATE_H
#define VRAM_POPULATE_H

#include <stdint.h>

/* Faulting in a host backup's pages ahead of its pins. A backup that was
 * given back to the OS must get its pages again before it is pinned; the
 * pin faults them in one by one, and one thread allocating and zeroing
 * them runs at ~2 GB/s (FACTS.md: 3.9 s for 8 GiB; 16 GiB took 7.7 s on
 * the H200 host, bench/host_pin.py), which is most of a non-retaining
 * pause. Threads: VRAM_POPULATE_THREADS (default half the CPUs, at most
 * 8), each faulting one slice at a time with MADV_POPULATE_WRITE, which
 * changes no content (Linux 5.14; before it, the pin faults them).
 *
 * The threads (fewer for a short range) take the slices of [base + lo,
 * base + hi) in order and fault each in, calling before(arg, end of the
 * slice) first (a wait for a punch under way there, say), while the caller
 * pins and copies the slices they are done with. A slice that cannot be
 * faulted in (an old kernel) counts as done: whoever touches it next
 * faults it.
 *
 * start: *out is NULL (and 0 returned) for an empty range; -ENOMEM.
 * wait: returns once [lo, upto) is done; with no thread (one slice, or
 *   none could start) the caller faults the rest in itself.
 * finish: stops handing out slices, joins the threads, frees p; returns
 *   the first slice's -errno, or 0. Each takes NULL. */
struct populate_ahead;
int populate_ahead_start(struct populate_ahead **out, void *base, uint64_t lo,
			 uint64_t hi, uint64_t slice,
			 void (*before)(void *arg, uint64_t end), void *arg);
void populate_ahead_wait(struct populate_ahead *p, uint64_t upto);
int populate_ahead_finish(struct populate_ahead *p);

#endif
