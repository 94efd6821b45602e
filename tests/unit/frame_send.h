/* SPDX-License-Identifier: Apache-2.0 */
/* frame_send(): writes one whole frame with proto/wire.c's non-blocking
 * queue, polling for POLLOUT, for tests that talk the wire without
 * libvram (the blocking send is libvram's sock_send, which the daemon must
 * never use). Static; included by wire_*_test.c.
 */
#ifndef VRAM_TEST_FRAME_SEND_H
#define VRAM_TEST_FRAME_SEND_H

#include <errno.h>
#include <poll.h>

#include "wire.h"

static __attribute__((unused)) int frame_send(int sock, const void *payload,
					      size_t len, const int *fds,
					      unsigned nfds)
{
	struct wire_tx tx;
	int r;

	wire_tx_init(&tx);
	r = wire_tx_queue(&tx, payload, len, fds, nfds);
	while (r == 0) {
		r = wire_tx_flush(&tx, sock);
		if (r == 0) {
			struct pollfd p = { .fd = sock, .events = POLLOUT };
			if (poll(&p, 1, -1) < 0 && errno != EINTR)
				r = -errno;
		}
	}
	wire_tx_free(&tx);
	return r < 0 ? r : 0;
}

#endif
