/* SPDX-License-Identifier: Apache-2.0 */
/* Letting the chunk fds of active pools go once the node is idle.
 *
 * A chunk's fd is what the daemon sends a mapper; once every mapper has it,
 * the daemon needs it only for the next one. Closing it tears the export
 * down, which takes the CUDA driver 0.6-0.8 ms a chunk (docs/gpu.md, "What
 * a pause's free costs"): at a pause, where the daemon used to close it,
 * that is on the path of every pause. So when chunk_fd_idle_ms (vramd.conf)
 * has passed with no pause or resume in flight since the chunks last
 * changed, the fds of every active pool's chunks are closed on the
 * backend's release threads and its handles hold the chunks; a pause then
 * releases only the handles (~0.03 ms). A chunk sent again is exported
 * again (backend_chunk_fd). Backends without handles keep their fds, and
 * so does a daemon with systemd's fd store, which stores the fds.
 */
#ifndef VRAMD_FD_DROP_H
#define VRAMD_FD_DROP_H

#include <stdint.h>
#include <uv.h>

struct node;

struct fd_drop {
	struct node *node;
	uv_timer_t timer;
	unsigned idle_ms;  /* 0: never */
	uint64_t seen_gen; /* the backend's chunk_gen when last armed */
};

/* Sets d up on loop; idle_ms 0 turns it off. */
void fd_drop_init(struct fd_drop *d, uv_loop_t *loop, struct node *n,
		  unsigned idle_ms);
/* Call after the node's chunks may have changed (every stateful answer):
 * (re)arms the wait if they did. Cheap. */
void fd_drop_note(struct fd_drop *d);
/* Closes the timer (the loop runs its close callback). */
void fd_drop_close(struct fd_drop *d);

#endif
