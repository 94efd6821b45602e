/* SPDX-License-Identifier: Apache-2.0 */
/* The fuzz targets' fd check: how many sockets, regular files (memfds
 * among them) and /dev/null opens this process holds. A target counts
 * them once at its start and after every input; a difference is a leak.
 * Pipes, eventfds and epoll fds are not counted: libFuzzer and libuv
 * make those lazily, once.
 *
 * The count reads /proc/self/fd through one directory stream kept open
 * for the whole run (rewound each time, so each count is one getdents
 * and one fstat per fd) rather than opening the directory and reading
 * every link by path, which took a third of each execution. */
#ifndef VRAM_FUZZ_FDS_H
#define VRAM_FUZZ_FDS_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static DIR *fuzz_fds_dir;

/* Whether fd is of a kind the code under test could leak. */
static int fuzz_fds_counted(int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return 0;
	if (S_ISSOCK(st.st_mode) || S_ISREG(st.st_mode))
		return 1;
	return S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3);
}

/* The number of counted fds, or aborts if /proc is not there. */
static unsigned fuzz_fds_count(void)
{
	struct dirent *e;
	unsigned n = 0;

	if (!fuzz_fds_dir && !(fuzz_fds_dir = opendir("/proc/self/fd")))
		abort();
	rewinddir(fuzz_fds_dir);
	while ((e = readdir(fuzz_fds_dir))) {
		if (e->d_name[0] == '.')
			continue;
		int fd = atoi(e->d_name);
		if (fd != dirfd(fuzz_fds_dir))
			n += (unsigned)fuzz_fds_counted(fd);
	}
	return n;
}

/* Writes every open fd and what it is to stderr, for a leak's report. */
static void fuzz_fds_list(void)
{
	struct dirent *e;
	char path[300], link[256];

	if (!fuzz_fds_dir)
		return;
	rewinddir(fuzz_fds_dir);
	while ((e = readdir(fuzz_fds_dir))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		ssize_t n = readlink(path, link, sizeof(link) - 1);
		if (n > 0) {
			link[n] = '\0';
			fprintf(stderr, "  fd %s: %s%s\n", e->d_name, link,
				fuzz_fds_counted(atoi(e->d_name)) ?
					" (counted)" :
					"");
		}
	}
}

#endif
