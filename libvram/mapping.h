/* SPDX-License-Identifier: Apache-2.0 */
/* One pool's view in this process: its reserved virtual range, the chunks
 * of its layout (mapped or not), and its mapped host backup.
 *
 * The layout is the list of chunks that make up the pool, contiguous from
 * offset 0. Pausing unmaps every chunk but keeps the layout and the range,
 * so the same addresses come back on resume. The backup, when there is
 * one, is mapped once and registered with the driver lazily, region by
 * region as chunks are added, and stays registered across cycles.
 *
 * Not thread-safe by itself: the client's lock guards every call.
 */
#ifndef LIBVRAM_MAPPING_H
#define LIBVRAM_MAPPING_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm.h"
#include "vram.pb-c.h"
#include "wire.h"

struct mapping_chunk {
	uint64_t offset, size;
	uintptr_t handle; /* from vmm map, for unmap */
	int mapped;
};

/* A chunk as the daemon sends it, with its fd (owned by the caller). */
struct mapping_desc {
	uint64_t offset, size;
	int fd;
};

/* A region of the backup registered with vmm->host_register. */
struct mapping_region {
	uint64_t offset, len;
};

struct mapping {
	struct vmm *vmm;
	unsigned dev;
	int readonly;
	uintptr_t base;	  /* reserved range, 0 when none */
	uint64_t reserve; /* its size */
	struct mapping_chunk *chunks;
	size_t n_chunks, cap_chunks;
	uint64_t size;	 /* end of the layout: the pool's size */
	uint8_t *backup; /* mapped backup, NULL when none */
	uint64_t backup_len;
	/* A disk backup's file (a dup of the fd vramd sent; -1 otherwise): a
	 * save writes it with pwrite, where writing through the mapping
	 * would first read (zero-fill) every page of the sparse file. */
	int backup_fd;
	struct mapping_region *regions;
	size_t n_regions, cap_regions;
	uint64_t registered; /* backup registered over [0, registered) */
	/* How the backup is used (set before mapping_backup_map): pin
	 * registers it with the driver (around each copy, or for good with
	 * retain); sync writes a saved backup through to its file. */
	int backup_pin, backup_retain, backup_sync;
	/* A release of the backup's pages under way on its own thread
	 * (mapping_backup_give_back): every use of the backup waits for it,
	 * a save only for the part it fills next (gift's progress). */
	pthread_t giver;
	bool giving;
	struct mapping_giving *gift;
	/* Copy lanes with a restore's copies issued and not yet waited for
	 * (mapping_copy_issue), one bit each. */
	unsigned lanes_busy;
	/* Threads faulting the backup in ahead of copies in parts
	 * (mapping_ahead_start), or NULL. */
	struct populate_ahead *ahead;
};

/* Turns a message's chunk list into descs with fds from the frame f (the
 * fds stay f's). -EPROTO if an fd index is out of range, -ENOMEM. *out is
 * malloc()ed. */
int mapping_descs_from_wire(Vram__Chunk *const *chunks, size_t n,
			    const struct wire_frame *f,
			    struct mapping_desc **out);

void mapping_init(struct mapping *m, struct vmm *vmm, unsigned dev,
		  int readonly);

/* Reserves the virtual range: size bytes aligned to align. */
int mapping_reserve(struct mapping *m, uint64_t size, uint64_t align);

/* Maps the backup memfd (read-write, shared) over at most the reserve.
 * The caller keeps fd and may close it afterwards. */
int mapping_backup_map(struct mapping *m, int fd);

/* Adds chunks at the end of the layout. They must be contiguous from the
 * current size and fit in the range. If map is set they are mapped (and
 * the backup registered over them); on failure whatever this call mapped
 * is unmapped and the layout is unchanged. If map is 0 they only join the
 * layout (a grow that raced with a pause). */
int mapping_append(struct mapping *m, const struct mapping_desc *d, size_t n,
		   int map);

/* Replaces the layout by d (contiguous from 0) and maps every chunk, as on
 * resume. Nothing may be mapped. On failure what was mapped is unmapped
 * and the old layout is kept. */
int mapping_remap(struct mapping *m, const struct mapping_desc *d, size_t n);

/* Unmaps every mapped chunk, keeping the layout and the range. Every chunk
 * ends up unmapped in the bookkeeping even if a step fails; the first
 * error is returned. */
int mapping_unmap_all(struct mapping *m);

/* Number of chunks mapped now. */
size_t mapping_n_mapped(const struct mapping *m);
/* Bytes of the chunks mapped here. */
uint64_t mapping_bytes_mapped(const struct mapping *m);

/* Copies every mapped chunk into the backup at the same offsets (save), or
 * back (restore), in one vmm copy call. -ENOSPC if the backup is smaller
 * than the layout, -ENODEV if there is no backup. */
int mapping_save(struct mapping *m);
int mapping_restore(struct mapping *m);
/* Issues the restore (to_host 0) or save (1) of chunks [from, to) on
 * copy lane lane (below VMM_LANES) and returns without waiting for it, so
 * that a resume or save in parts queues the next chunk's copy behind the
 * one under way and maps or unmaps meanwhile; mapping_copy_wait(lane)
 * waits for it and returns its error (0 when nothing is issued there).
 * Where the backend cannot issue without waiting, the copy is done when
 * the issue returns. The backup is registered up to the end of these
 * chunks (the next chunk's pages are faulted in and pinned while this
 * one copies). Whatever unmaps chunks or unpins the backup waits for
 * both lanes first. */
int mapping_copy_issue(struct mapping *m, int to_host, size_t from, size_t to,
		       unsigned lane);
int mapping_copy_wait(struct mapping *m, unsigned lane);

/* Copies in parts register the backup part by part, so each starts its
 * faulting in (vmm/populate.h) only at its own part: between start and
 * finish, threads fault the whole layout's pages in ahead instead, while
 * the parts are pinned and copied behind them. Start does nothing where
 * nothing is to be pinned; finish joins the threads. */
void mapping_ahead_start(struct mapping *m);
void mapping_ahead_finish(struct mapping *m);

/* Waits for every lane with copies issued (a restore or save in parts
 * stopped halfway), logging a failure: what comes next unmaps chunks or
 * the backup they copy, or leaves them for a retry. */
void mapping_copies_drain(struct mapping *m);

/* Unmaps chunk k (a save in parts, once its copy is waited for). */
int mapping_unmap_chunk(struct mapping *m, size_t k);

/* Holds back this process's give-backs' unpins while a resume call is
 * under way and for MAPPING_GATE_LINGER_MS after, short of anyone waiting
 * for a give-back (mapping.c, the gate). */
#define MAPPING_GATE_LINGER_MS 20
void mapping_gate_soft_enter(void);
void mapping_gate_soft_leave(void);

/* Unregisters the backup (it stays mapped): after a restore of a backup
 * that is not retained, so that the daemon's release frees its pages. */
void mapping_backup_unpin(struct mapping *m);

/* Gives the backup's pages back to the OS without unmapping it: drops
 * them from this process at once (its RSS falls before the call returns),
 * and unpins and punches them (MADV_REMOVE: the memfd itself, so the
 * daemon's accounting follows) on a thread of its own, because for GiBs
 * that costs seconds (FACTS.md) and the caller's resume need not wait.
 * Anything that uses the backup next (a save, a restore, a pin, an unmap)
 * waits for that thread first, so a later save never loses pages to the
 * punch. A disk backup's file is punched before the call returns.
 * Returns 0, or -errno of the drop. */
int mapping_backup_give_back(struct mapping *m);

/* Waits for a give-back under way; returns its -errno, or 0. */
int mapping_backup_wait(struct mapping *m);

/* Unregisters and unmaps the backup. */
void mapping_backup_release(struct mapping *m);

/* Undoes everything: unmaps chunks, releases the backup, frees the range
 * and the bookkeeping. Safe on a mapping that holds nothing. */
void mapping_release(struct mapping *m);

#endif
