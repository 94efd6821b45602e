/* SPDX-License-Identifier: Apache-2.0 */
/* A pool's backup: where the content of a paused pool lives. For the host
 * policy a sparse memfd (or an unnamed file in host_backup_dir), for the
 * disk policy a sparse file the daemon creates in backup_dir. Either way
 * the daemon holds one fd (struct pool's backup_fd, the only place it is
 * kept) and passes it to the pool's writers, whose saver copies the device
 * memory into a shared mapping of it and whose restorer copies it back:
 * the copy runs in the client, off the daemon's loop, at the speed of the
 * mapping (host RAM, or the page cache and then the disk). The daemon only
 * creates, measures, settles and releases it, none of which reads or
 * writes the content.
 */
#ifndef VRAMD_BACKUP_H
#define VRAMD_BACKUP_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

/* Where host backups live from now on: unnamed files (O_TMPFILE) in dir,
 * which must be a tmpfs or hugetlbfs mount (-EXDEV otherwise, logged), or
 * memfds (dir NULL or ""). Set once at start. Returns 0 or -errno. */
int backup_host_dir_set(const char *dir);

/* Makes the backup of a pool: a memfd of size bytes, or a file in
 * host_backup_dir (path NULL), or a file named after the pool in dir
 * (written to *path, which holds at least BACKUP_PATH_MAX bytes). Both
 * are sparse: they hold no pages until a pause writes. Returns the fd or
 * -errno (-ENOTDIR when the disk policy is asked for and no directory is
 * configured). */
#define BACKUP_PATH_MAX 512
int backup_create(const char *dir, uint64_t pool_id, const char *pool_name,
		  uint64_t size, char *path);

/* Whether need bytes of backup fit in its file system (a host_backup_dir
 * tmpfs has a size; a memfd's has none): what it holds already counts.
 * -ENOSPC when they do not, else 0; *avail gets the free bytes
 * (UINT64_MAX: no limit). A save into a full tmpfs would fault in the
 * saver (SIGBUS), not fail. */
int backup_room(int fd, uint64_t need, uint64_t *avail);

/* Bytes the backup truly holds: its allocated blocks (st_blocks), so a
 * backup whose pages were released counts 0 however large it is. */
uint64_t backup_held(int fd);

/* Gives the backup's pages back (to the OS for a memfd, to the file system
 * for a file) and keeps its size, so the mappings the clients hold stay
 * valid and the next pause writes into it again. Returns 0 or -errno. */
int backup_release(int fd);

/* Work on a backup's pages that runs on a libuv worker: punching a hole
 * in a memfd or file of GiBs takes tens of milliseconds, which the loop
 * must not spend. A pool
 * keeps the job's pointer (its slot) while it runs; the job clears it when
 * done. At most one job per slot: starting one stops the one there. */
struct backup_job;

/* The loop whose workers run the jobs (node_init sets it). Without one,
 * the _start calls return -ENOSYS. */
void backup_set_loop(uv_loop_t *loop);

/* Starts releasing fd's pages on a worker, in pieces of
 * BACKUP_RELEASE_STEP bytes, and puts the job in *slot. The fd must stay
 * open until the job is done or stopped. A backup that holds nothing
 * starts no job. Returns 0 or -errno (then nothing runs, and the caller
 * may release synchronously with backup_release()). */
#define BACKUP_RELEASE_STEP (4ull << 20)
int backup_release_start(int fd, struct backup_job **slot);

/* Stops the job in *slot, if any, before a pause writes the backup again,
 * another release starts, or the fd is closed: the file is not touched after
 * this returns. It waits for the piece under way, if any (one step: a
 * millisecond or less), never for the rest; pages already released stay
 * released, which a save about to overwrite them does not mind. Sets
 * *slot to NULL. Loop thread only. */
void backup_job_stop(struct backup_job **slot);

/* Jobs in flight (for tests). */
unsigned backup_jobs_running(void);

/* After a pause wrote a disk backup (the saver synced it): drops its pages
 * from the page cache, so that the host memory it used goes back too. */
void backup_settle(int fd);

/* Closes the backup and removes its file (path NULL or empty: a memfd). */
void backup_destroy(int fd, const char *path);

#endif
