/* SPDX-License-Identifier: Apache-2.0 */
/* The host backend's client half: reserving ranges, mapping memfds into
 * them, unmapping while keeping the range reserved (touching it faults),
 * mapping again at the same address, and copies. */
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "vmm.h"

#define MiB (1024ull * 1024)

static struct vmm *host(void)
{
	struct vmm *v = NULL;
	ASSERT_OK(vmm_open("host", &v));
	ASSERT(v && v->ops && v->ops->name);
	ASSERT_STREQ(v->ops->name, "host");
	return v;
}

static int memfd(uint64_t size)
{
	int fd = memfd_create("vmm-test", MFD_CLOEXEC);
	ASSERT(fd >= 0);
	ASSERT_OK(ftruncate(fd, (off_t)size));
	return fd;
}

/* Whether anything is mapped at [addr, addr+len): a MAP_FIXED_NOREPLACE
 * mapping there fails with EEXIST if so. */
static int is_mapped(uintptr_t addr, size_t len)
{
	void *p =
		mmap((void *)addr, len, PROT_NONE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (p == MAP_FAILED)
		return errno == EEXIST;
	munmap(p, len);
	return 0;
}

/* Runs a read (write == 0) or write of addr in a child; returns the signal
 * that killed it, or 0 if it exited normally. */
static int touch_in_child(uintptr_t addr, int write)
{
	pid_t pid = fork();
	int status;

	ASSERT(pid >= 0);
	if (pid == 0) {
		/* Sanitizers catch SIGSEGV themselves: take it plainly. */
		signal(SIGSEGV, SIG_DFL);
		signal(SIGBUS, SIG_DFL);
		if (write)
			*(volatile char *)addr = 1;
		else
			(void)*(volatile char *)addr;
		_exit(0);
	}
	ASSERT_EQ(waitpid(pid, &status, 0), pid);
	if (WIFSIGNALED(status))
		return WTERMSIG(status);
	ASSERT(WIFEXITED(status));
	return 0;
}

TEST(open_by_name)
{
	struct vmm *v = NULL;

	vmm_destroy(host());
	ASSERT_EQ(vmm_open("nope", &v), -ENOENT);
	ASSERT_EQ(vmm_open("hip", &v), -ENOENT);
	ASSERT_EQ(vmm_open(NULL, &v), -EINVAL);
	ASSERT_EQ(vmm_open("host", NULL), -EINVAL);
	vmm_destroy(NULL);
}

TEST(reserve_is_aligned_and_reserved)
{
	struct vmm *v = host();
	uintptr_t a = 0, b = 0;

	ASSERT_OK(v->ops->reserve(v, 0, 64 * MiB, 32 * MiB, &a));
	ASSERT_EQ(a % (32 * MiB), 0);
	ASSERT(is_mapped(a, 4096));
	ASSERT(is_mapped(a + 64 * MiB - 4096, 4096));
	ASSERT_OK(v->ops->reserve(v, 0, 2 * MiB, 2 * MiB, &b));
	ASSERT(b + 2 * MiB <= a || a + 64 * MiB <= b);
	/* Reserved memory faults. */
	ASSERT_EQ(touch_in_child(a, 0), SIGSEGV);
	ASSERT_OK(v->ops->unreserve(v, a, 64 * MiB));
	ASSERT(!is_mapped(a, 4096));
	ASSERT_OK(v->ops->unreserve(v, b, 2 * MiB));
	ASSERT_EQ(v->ops->reserve(v, 0, 0, 2 * MiB, &a), -EINVAL);
	ASSERT_EQ(v->ops->reserve(v, 0, 4097, 2 * MiB, &a), -EINVAL);
	ASSERT_EQ(v->ops->reserve(v, 0, 4096, 3 * MiB, &a), -EINVAL);
	vmm_destroy(v);
}

TEST(map_shows_the_memfd_and_two_mappings_share_it)
{
	struct vmm *v = host();
	uintptr_t a, b, h;
	int fd = memfd(4 * MiB);

	ASSERT_OK(v->ops->reserve(v, 0, 8 * MiB, 2 * MiB, &a));
	ASSERT_OK(v->ops->reserve(v, 0, 8 * MiB, 2 * MiB, &b));
	ASSERT_OK(v->ops->map(v, 0, a + 2 * MiB, 4 * MiB, fd, 0, &h));
	ASSERT_OK(v->ops->map(v, 0, b, 4 * MiB, fd, 0, &h));
	memset((void *)(a + 2 * MiB), 0x5a, 4 * MiB);
	ASSERT_EQ(((volatile unsigned char *)b)[0], 0x5a);
	ASSERT_EQ(((volatile unsigned char *)b)[4 * MiB - 1], 0x5a);
	((volatile unsigned char *)b)[123] = 7;
	ASSERT_EQ(((volatile unsigned char *)a)[2 * MiB + 123], 7);
	/* The rest of the range stays reserved around the chunk. */
	ASSERT_EQ(touch_in_child(a, 0), SIGSEGV);
	ASSERT_EQ(touch_in_child(a + 6 * MiB, 0), SIGSEGV);
	/* And the memfd itself has what was written. */
	unsigned char c = 0;
	ASSERT_EQ(pread(fd, &c, 1, 123), 1);
	ASSERT_EQ(c, 7);
	close(fd); /* the mappings keep the memory */
	ASSERT_EQ(((volatile unsigned char *)b)[5], 0x5a);
	ASSERT_OK(v->ops->unmap(v, 0, a + 2 * MiB, 4 * MiB, h));
	ASSERT_OK(v->ops->unmap(v, 0, b, 4 * MiB, h));
	ASSERT_OK(v->ops->unreserve(v, a, 8 * MiB));
	ASSERT_OK(v->ops->unreserve(v, b, 8 * MiB));
	vmm_destroy(v);
}

TEST(unmap_keeps_the_range_reserved_and_faults)
{
	struct vmm *v = host();
	uintptr_t a, h;
	int fd = memfd(2 * MiB);

	ASSERT_OK(v->ops->reserve(v, 0, 4 * MiB, 2 * MiB, &a));
	ASSERT_OK(v->ops->map(v, 0, a, 2 * MiB, fd, 0, &h));
	memset((void *)a, 3, 4096);
	/* Chunks are not inherited by fork(): a child does not keep paused
	 * memory alive. */
	ASSERT_EQ(touch_in_child(a, 1), SIGSEGV);
	ASSERT_OK(v->ops->unmap(v, 0, a, 2 * MiB, h));
	/* Still reserved: nothing else can be mapped there by accident. */
	ASSERT(is_mapped(a, 2 * MiB));
	ASSERT(is_mapped(a + 2 * MiB - 4096, 4096));
	/* The pages are gone from this process: mincore still works on the
	 * PROT_NONE reservation but it no longer holds the memfd. */
	unsigned char vec[1];
	ASSERT_OK(mincore((void *)a, 4096, vec));
	ASSERT_EQ(touch_in_child(a, 0), SIGSEGV);
	ASSERT_EQ(touch_in_child(a + 2 * MiB - 1, 1), SIGSEGV);
	/* The memfd kept the content; mapping again at the same address
	 * brings it back. */
	ASSERT_OK(v->ops->map(v, 0, a, 2 * MiB, fd, 0, &h));
	ASSERT_EQ(((volatile unsigned char *)a)[100], 3);
	ASSERT_OK(v->ops->unmap(v, 0, a, 2 * MiB, h));
	/* A different memfd at the same address: fresh content. */
	int fd2 = memfd(2 * MiB);
	ASSERT_OK(v->ops->map(v, 0, a, 2 * MiB, fd2, 0, &h));
	ASSERT_EQ(((volatile unsigned char *)a)[100], 0);
	ASSERT_OK(v->ops->unmap(v, 0, a, 2 * MiB, h));
	ASSERT_OK(v->ops->unreserve(v, a, 4 * MiB));
	close(fd);
	close(fd2);
	vmm_destroy(v);
}

TEST(readonly_map_refuses_writes)
{
	struct vmm *v = host();
	uintptr_t a, w, h;
	int fd = memfd(2 * MiB);

	ASSERT_OK(v->ops->reserve(v, 0, 2 * MiB, 2 * MiB, &a));
	ASSERT_OK(v->ops->reserve(v, 0, 2 * MiB, 2 * MiB, &w));
	ASSERT_OK(v->ops->map(v, 0, a, 2 * MiB, fd, 1, &h));
	ASSERT_OK(v->ops->map(v, 0, w, 2 * MiB, fd, 0, &h));
	((volatile unsigned char *)w)[9] = 42;
	ASSERT_EQ(((volatile unsigned char *)a)[9], 42);
	/* A write through the read-only view faults. A child inherits no
	 * chunk, so it maps one read-only itself and writes. */
	pid_t pid = fork();
	ASSERT(pid >= 0);
	if (pid == 0) {
		signal(SIGSEGV, SIG_DFL);
		if (v->ops->map(v, 0, a, 2 * MiB, fd, 1, &h) < 0)
			_exit(2);
		*(volatile char *)a = 1;
		_exit(0);
	}
	int status;
	ASSERT_EQ(waitpid(pid, &status, 0), pid);
	ASSERT(WIFSIGNALED(status));
	ASSERT_EQ(WTERMSIG(status), SIGSEGV);
	ASSERT_OK(v->ops->unmap(v, 0, a, 2 * MiB, h));
	ASSERT_OK(v->ops->unmap(v, 0, w, 2 * MiB, h));
	ASSERT_OK(v->ops->unreserve(v, a, 2 * MiB));
	ASSERT_OK(v->ops->unreserve(v, w, 2 * MiB));
	close(fd);
	vmm_destroy(v);
}

TEST(map_refuses_bad_arguments_and_keeps_the_reservation)
{
	struct vmm *v = host();
	uintptr_t a, h;
	int small = memfd(1 * MiB);

	ASSERT_OK(v->ops->reserve(v, 0, 4 * MiB, 2 * MiB, &a));
	/* A memfd smaller than the chunk would SIGBUS later: refused now. */
	ASSERT_EQ(v->ops->map(v, 0, a, 2 * MiB, small, 0, &h), -EINVAL);
	ASSERT_EQ(v->ops->map(v, 0, a, 2 * MiB, -1, 0, &h), -EINVAL);
	ASSERT_EQ(v->ops->map(v, 0, a, 1000, small, 0, &h), -EINVAL);
	ASSERT_EQ(v->ops->map(v, 0, a + 1, 4096, small, 0, &h), -EINVAL);
	/* A closed fd is refused too, and the range stays reserved. */
	int dead = memfd(2 * MiB);
	close(dead);
	ASSERT_LT(v->ops->map(v, 0, a, 2 * MiB, dead, 0, &h), 0);
	ASSERT(is_mapped(a, 4 * MiB));
	ASSERT_EQ(touch_in_child(a, 0), SIGSEGV);
	ASSERT_OK(v->ops->unreserve(v, a, 4 * MiB));
	close(small);
	vmm_destroy(v);
}

TEST(copy_moves_every_span_both_ways)
{
	struct vmm *v = host();
	uintptr_t a, h;
	int fd = memfd(4 * MiB);
	unsigned char *backup = malloc(4 * MiB);

	ASSERT(backup);
	ASSERT_OK(v->ops->reserve(v, 0, 4 * MiB, 2 * MiB, &a));
	ASSERT_OK(v->ops->map(v, 0, a, 4 * MiB, fd, 0, &h));
	for (size_t i = 0; i < 4 * MiB; i++)
		((unsigned char *)a)[i] = (unsigned char)(i * 7);
	struct vmm_span spans[2] = {
		{ .dev = a, .host = backup, .len = 2 * MiB },
		{ .dev = a + 2 * MiB,
		  .host = backup + 2 * MiB,
		  .len = 2 * MiB },
	};
	ASSERT_OK(v->ops->sync(v, 0));
	ASSERT_OK(v->ops->host_register(v, backup, 4 * MiB));
	ASSERT_OK(v->ops->copy(v, 0, 1, spans, 2));
	ASSERT(memcmp(backup, (void *)a, 4 * MiB) == 0);
	memset((void *)a, 0, 4 * MiB);
	ASSERT_OK(v->ops->copy(v, 0, 0, spans, 2));
	for (size_t i = 0; i < 4 * MiB; i += 4093)
		ASSERT_EQ(((unsigned char *)a)[i], (unsigned char)(i * 7));
	ASSERT_OK(v->ops->copy(v, 0, 0, spans, 0));
	ASSERT_OK(v->ops->host_unregister(v, backup, 4 * MiB));
	ASSERT_OK(v->ops->unmap(v, 0, a, 4 * MiB, h));
	ASSERT_OK(v->ops->unreserve(v, a, 4 * MiB));
	free(backup);
	close(fd);
	vmm_destroy(v);
}
