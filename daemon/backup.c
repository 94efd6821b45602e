/* SPDX-License-Identifier: Apache-2.0 */
/* Pool backups: memfds and files in backup_dir (see backup.h). */
#include "backup.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

int backup_create(const char *dir, uint64_t pool_id, const char *pool_name,
		  uint64_t size, char *path)
{
	int fd;

	if (!path) {
		fd = memfd_create("vramd-backup", MFD_CLOEXEC);
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

uint64_t backup_held(int fd)
{
	struct stat st;

	if (fd < 0 || fstat(fd, &st) < 0)
		return 0;
	return (uint64_t)st.st_blocks * 512;
}

int backup_release(int fd)
{
	struct stat st;

	if (fd < 0 || fstat(fd, &st) < 0)
		return -EBADF;
	if (st.st_size == 0 || st.st_blocks == 0)
		return 0;
	/* Punching keeps the size, so the clients' mappings stay valid. */
	if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
		      st.st_size) == 0)
		return 0;
	int r = -errno;
	if (r != -EOPNOTSUPP)
		return r;
	/* A file system without holes: truncate and grow again, which
	 * frees the blocks just the same. */
	if (ftruncate(fd, 0) < 0 || ftruncate(fd, st.st_size) < 0)
		return -errno;
	return 0;
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
