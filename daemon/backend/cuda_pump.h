/* SPDX-License-Identifier: Apache-2.0 */
/* The clearing pump of the CUDA backend, off unless VRAM_CUDA_PUMP_MS
 * sets its period: while it is on for a device, a thread makes and
 * releases one small allocation on it every few milliseconds.
 *
 * Why: the driver clears the memory a process freed before anyone gets
 * it again, and (as far as the probe shows) goes on clearing only while
 * allocations call on it. In bench/create_probe.py on the H200 (a
 * trainer process frees 100 GiB; a creator makes 16 GiB of weights,
 * waits ~490 ms, makes one 64 GiB allocation) that create waited 20-89 ms
 * for the clearing (median 27-33, 16 cycles); 0.4-0.6 ms in every cycle
 * when the weights' 256 allocations were spread over the wait (which is
 * what torch_memory_saver does, making each just before its copy), and
 * 0.4-0.8 ms in 6 cycles of 8 (38-45 in the other two) with this pump
 * running instead.
 *
 * It is off by default because the RL step itself did not show it: the
 * KV cache's wake through vramd took 39-48 ms with the pump against
 * 62-82 without in one run, 3-61 (median 42) against 26-75 (median 27) in
 * the next (docs/results/h200-2026-12-01-s6, runs 6 and 7); the weights'
 * restore copies run while it pumps there, and the probe had none.
 *
 * A resume turns it on once its chunks are made (a pump allocation
 * between a release and the create of the same size right after it costs
 * that create the driver's fast path: a 64 GiB discard pool resumed in
 * 119 ms instead of 4.5) and off once no pool of the device is left
 * paused (transition.h): while an engine wakes its pools one after
 * another, not while the trainer works (pumping then made the trainer's
 * step 12-16% slower in the probe). It turns itself off CUDA_PUMP_MAX_MS
 * after the last resume began, so that a pool left paused for good does
 * not keep it going through later training. Its first stroke comes a
 * period after it is turned on.
 *
 * Each allocation is one plain granule (not exported, never mapped),
 * released at once; a failed one (a full device) is skipped. */
#ifndef VRAMD_CUDA_PUMP_H
#define VRAMD_CUDA_PUMP_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "cuda_driver.h"

#define CUDA_PUMP_DEFAULT_MS 0 /* off; 5 is what was measured */
#define CUDA_PUMP_MAX_MS 5000

struct cuda_pump;

/* A pump for n_devices devices (cudev[i], allocations of granularity[i]
 * bytes), off on every device; no thread until one is turned on. *out is
 * NULL, and 0 returned, when VRAM_CUDA_PUMP_MS is 0. */
int cuda_pump_open(const struct cuda_driver *cu, const CUdevice *cudev,
		   const uint64_t *granularity, unsigned n_devices,
		   struct cuda_pump **out);
/* Turns the pump on for dev (until CUDA_PUMP_MAX_MS from now at the
 * latest) or off; cheap, never waits. */
void cuda_pump_set(struct cuda_pump *p, unsigned dev, bool on);
/* Stops the thread. NULL is fine. */
void cuda_pump_close(struct cuda_pump *p);

#endif
