/* SPDX-License-Identifier: Apache-2.0 */
/* Pool backups: memfds and files in backup_dir (see backup.h). */
#include "backup.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <linux/magic.h>
#include <unistd.h>

#include "attr.h"
#include "log.h"

/* host_backup_dir, "" for memfds: set once at start, before any pool. */
static char backup_host_dir[256];

/* A host backup: an unnamed file in host_backup_dir, or a memfd. */
static int backup_host_open(void)
{
	if (!backup_host_dir[0])
		return memfd_create("vramd-backup", MFD_CLOEXEC);
	return open(backup_host_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
}

int backup_host_dir_set(const char *dir)
{
	struct statfs sf;

	backup_host_dir[0] = 0;
	if (!dir || !dir[0])
		return 0;
	if (strlen(dir) >= sizeof(backup_host_dir))
		return -ENAMETOOLONG;
	if (statfs(dir, &sf) < 0) {
		int r = -errno;
		log_err("host_backup_dir %s: %s", dir, strerror(-r));
		return r;
	}
	/* Anywhere else a host backup's pages would be a disk's. */
	if ((unsigned long)sf.f_type != TMPFS_MAGIC &&
	    (unsigned long)sf.f_type != HUGETLBFS_MAGIC) {
		log_err("host_backup_dir %s is not a tmpfs or hugetlbfs mount; "
			"host backups must be memory",
			dir);
		return -EXDEV;
	}
	snprintf(backup_host_dir, sizeof(backup_host_dir), "%s", dir);
	int fd = backup_host_open();
	if (fd < 0) {
		int r = -errno;
		log_err("host_backup_dir %s: cannot make a file there: %s",
			dir, strerror(-r));
		backup_host_dir[0] = 0;
		return r;
	}
	close(fd);
	return 0;
}

int backup_create(const char *dir, uint64_t pool_id, const char *pool_name,
		  uint64_t size, char *path)
{
	int fd;

	if (!path) {
		fd = backup_host_open();
	} else {
		char safe[64];
		size_t i;

		if (!dir || !dir[0])
			return -ENOTDIR;
		/* The pool's name is printable but may hold '/': keep the
		 * file name readable and inside dir. */
		for (i = 0; pool_name[i] && i < sizeof(safe) - 1; i++)
			safe[i] = isalnum((unsigned char)pool_name[i]) ||
						  pool_name[i] == '-' ||
						  pool_name[i] == '_' ?
					  pool_name[i] :
					  '_';
		safe[i] = 0;
		if (snprintf(path, BACKUP_PATH_MAX, "%s/pool-%llu-%s.backup",
			     dir, (unsigned long long)pool_id,
			     safe) >= BACKUP_PATH_MAX)
			return -ENAMETOOLONG;
		fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	}
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0) {
		int r = -errno;
		backup_destroy(fd, path);
		return r;
	}
	return fd;
}

int backup_room(int fd, uint64_t need, uint64_t *avail)
{
	struct statfs sf;

	*avail = UINT64_MAX;
	/* A memfd's file system has no size of its own (f_blocks 0). */
	if (fd < 0 || fstatfs(fd, &sf) < 0 || sf.f_blocks == 0)
		return 0;
	*avail = (uint64_t)sf.f_bavail * (uint64_t)sf.f_bsize;
	uint64_t held = backup_held(fd);
	return need > held && need - held > *avail ? -ENOSPC : 0;
}

uint64_t backup_held(int fd)
{
	struct stat st;

	if (fd < 0 || fstat(fd, &st) < 0)
		return 0;
	return (uint64_t)st.st_blocks * 512;
}

/* Punches [off, off + len) of fd. 1 when the file system has no holes
 * and the whole file was truncated and grown again instead (which frees
 * the blocks just the same), 0, or -errno. */
static int backup_punch(int fd, uint64_t off, uint64_t len, uint64_t size)
{
	/* Punching keeps the size, so the clients' mappings stay valid. */
	if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      (off_t)off, (off_t)len) == 0)
		return 0;
	int r = -errno;
	if (r != -EOPNOTSUPP)
		return r;
	if (ftruncate(fd, 0) < 0 || ftruncate(fd, (off_t)size) < 0)
		return -errno;
	return 1;
}

int backup_release(int fd)
{
	struct stat st;

	if (fd < 0 || fstat(fd, &st) < 0)
		return -EBADF;
	if (st.st_size == 0 || st.st_blocks == 0)
		return 0;
	int r = backup_punch(fd, 0, (uint64_t)st.st_size, (uint64_t)st.st_size);
	return r < 0 ? r : 0;
}

struct backup_job {
	uv_work_t work;
	pthread_mutex_t lock; /* held by the worker around each piece */
	int fd;
	bool stopped;		  /* lock: touch the file no more */
	struct backup_job **slot; /* loop: the pool's pointer to it, NULL
				   * once stopped */
	int err;		  /* worker: the first failure */
};

static uv_loop_t *backup_loop;
static atomic_uint backup_jobs;

void backup_set_loop(uv_loop_t *loop)
{
	backup_loop = loop;
}

unsigned backup_jobs_running(void)
{
	return atomic_load(&backup_jobs);
}

/* One piece of a release: 0 to go on, 1 when done, or -errno. */
static int backup_job_piece(struct backup_job *j, uint64_t off, uint64_t size)
{
	if (off >= size)
		return 1;
	uint64_t len = size - off < BACKUP_RELEASE_STEP ? size - off :
							  BACKUP_RELEASE_STEP;
	int r = backup_punch(j->fd, off, len, size);
	if (r != 0)
		return r;
	return off + len >= size ? 1 : 0;
}

/* On a worker: works through the file piece by piece, each under the
 * job's lock, and stops as soon as the loop asks (backup_job_stop), so
 * that a release never punches a page after a pause's save began. The fd
 * is only used under the lock, before a stop: the pool closes it only
 * after stopping the job. */
static void backup_job_run(uv_work_t *w)
{
	struct backup_job *j = w->data;
	struct stat st;
	uint64_t size = 0;
	int r = 0;

	for (uint64_t off = 0; r == 0;) {
		pthread_mutex_lock(&j->lock);
		if (j->stopped) {
			pthread_mutex_unlock(&j->lock);
			break;
		}
		if (off == 0 && fstat(j->fd, &st) < 0)
			r = -errno;
		else if (off == 0)
			size = (uint64_t)st.st_size;
		if (r == 0)
			r = backup_job_piece(j, off, size);
		pthread_mutex_unlock(&j->lock);
		off += BACKUP_RELEASE_STEP;
	}
	if (r < 0)
		j->err = r;
}

/* Back on the loop: the job is done (or was stopped). */
static void backup_job_done(uv_work_t *w, int status UNUSED)
{
	struct backup_job *j = w->data;

	if (j->slot)
		*j->slot = NULL;
	if (j->err && !j->stopped)
		log_warn("cannot release a backup's pages: %s",
			 strerror(-j->err));
	pthread_mutex_destroy(&j->lock);
	free(j);
	atomic_fetch_sub(&backup_jobs, 1);
}

int backup_release_start(int fd, struct backup_job **slot)
{
	struct stat st;
	struct backup_job *j;
	int r;

	if (fd < 0 || fstat(fd, &st) < 0)
		return -EBADF;
	backup_job_stop(slot);
	if (st.st_size == 0 || st.st_blocks == 0)
		return 0;
	if (!backup_loop)
		return -ENOSYS;
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	pthread_mutex_init(&j->lock, NULL);
	j->fd = fd;
	j->slot = slot;
	j->work.data = j;
	r = uv_queue_work(backup_loop, &j->work, backup_job_run,
			  backup_job_done);
	if (r < 0) {
		pthread_mutex_destroy(&j->lock);
		free(j);
		return r;
	}
	atomic_fetch_add(&backup_jobs, 1);
	*slot = j;
	return 0;
}

void backup_job_stop(struct backup_job **slot)
{
	struct backup_job *j = *slot;

	if (!j)
		return;
	/* Waits for the piece under way only: one step of punching. */
	pthread_mutex_lock(&j->lock);
	j->stopped = true;
	pthread_mutex_unlock(&j->lock);
	j->slot = NULL;
	*slot = NULL;
}

void backup_settle(int fd)
{
	if (fd >= 0)
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
}

void backup_destroy(int fd, const char *path)
{
	if (path && path[0] && unlink(path) < 0 && errno != ENOENT)
		log_warn("cannot remove backup file %s: %s", path,
			 strerror(errno));
	if (fd >= 0)
		close(fd);
}
