/* SPDX-License-Identifier: Apache-2.0 */
/* Preloaded into vramd by tests/integration/backup_test.c: holds the
 * daemon's first hole punch (fallocate with FALLOC_FL_PUNCH_HOLE, the
 * release of a backup's pages) for as long as the test likes. With
 * PUNCH_HOLD_NOTE=FIFO and PUNCH_HOLD=FIFO set, the first punch writes one
 * byte to the note fifo (the test then knows a release is under way) and
 * waits for one byte on the hold fifo before it punches. Every other call
 * goes straight to the kernel. Built by the test with the system's cc. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

int fallocate(int fd, int mode, off_t off, off_t len);
int fallocate64(int fd, int mode, off_t off, off_t len);

static atomic_int held;

static void hold_first_punch(int mode)
{
	const char *note = getenv("PUNCH_HOLD_NOTE");
	const char *hold = getenv("PUNCH_HOLD");
	char c = 'p';

	if (!(mode & FALLOC_FL_PUNCH_HOLE) || !note || !hold ||
	    atomic_exchange(&held, 1))
		return;
	int n = open(note, O_WRONLY | O_CLOEXEC);
	int h = open(hold, O_RDONLY | O_CLOEXEC);
	if (n >= 0 && write(n, &c, 1) < 0)
		c = 0;
	if (h >= 0 && read(h, &c, 1) < 0)
		c = 0;
	if (n >= 0)
		close(n);
	if (h >= 0)
		close(h);
}

int fallocate(int fd, int mode, off_t off, off_t len)
{
	hold_first_punch(mode);
	return (int)syscall(SYS_fallocate, fd, mode, off, len);
}

int fallocate64(int fd, int mode, off_t off, off_t len)
{
	return fallocate(fd, mode, off, len);
}
