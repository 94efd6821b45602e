/* SPDX-License-Identifier: Apache-2.0 */
/* The host ranges a GPU half of the vmm has registered with its driver
 * (pinned for fast copies), kept so that destroying the vmm can undo what
 * the caller left. Shared by vmm_cuda.c and vmm_hip.c; thread-safe. */
#ifndef LIBVRAM_HOST_REGS_H
#define LIBVRAM_HOST_REGS_H

#include <pthread.h>
#include <stddef.h>

struct host_reg {
	void *host;
	size_t len;
};

struct host_regs {
	pthread_mutex_t lock;
	struct host_reg *regs;
	size_t n, cap;
};

void host_regs_init(struct host_regs *h);
/* Frees the bookkeeping; pop every entry (and unregister it) first. */
void host_regs_fini(struct host_regs *h);
/* Records a registration. -ENOMEM: the caller must undo the registration,
 * or destroy would not know to. */
int host_regs_add(struct host_regs *h, void *host, size_t len);
/* Forgets the registration at host. -ENOENT if there is none. */
int host_regs_remove(struct host_regs *h, void *host);
/* Takes one registration out: 1 with *host and *len set, 0 when none is
 * left. */
int host_regs_pop(struct host_regs *h, void **host, size_t *len);

#endif
