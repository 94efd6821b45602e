/* SPDX-License-Identifier: Apache-2.0 */
/* libvram's CUDA half without a GPU: absent and unusable drivers, and every
 * operation against a fake driver (tests/unit/cuda_fake/), which maps
 * memfds where the GPU would map device memory. Checked: each call leaves
 * the calling thread's context stack as it found it, a failed map holds
 * nothing, unmap releases the import and keeps the range, copies cut into
 * pieces over several streams move every byte, and destroy gives back
 * contexts, streams and host registrations. */
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_driver.h"
#include "cuda_fake.h"
#include "error.h"
#include "test.h"
#include "vmm.h"

#define GRAN (2ull << 20)

static struct vmm *fake_vmm(void)
{
	struct vmm *v = NULL;

	cuda_fake_load();
	ASSERT_OK(vmm_open("cuda", &v));
	ASSERT_STREQ(v->ops->name, "cuda");
	return v;
}

/* A chunk fd as the daemon would send: size bytes of "device memory". */
static int chunk_fd(size_t size)
{
	int fd = memfd_create("chunk", MFD_CLOEXEC);
	ASSERT(fd >= 0);
	ASSERT_OK(ftruncate(fd, (off_t)size));
	return fd;
}

#define ASSERT_NO_CONTEXT_LEFT() ASSERT_EQ(fake_count("ctx_depth"), 0)

TEST(no_driver_is_enoent)
{
	struct vmm *v = NULL;

	setenv("VRAM_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
	ASSERT_EQ(vmm_cuda_open(&v), -ENOENT);
	ASSERT_EQ(vmm_open("cuda", &v), -ENOENT);
	ASSERT(v == NULL);
	setenv("VRAM_LIBCUDA", "libc.so.6", 1);
	ASSERT_EQ(vmm_cuda_open(&v), -ENOSYS);
}

TEST(open_makes_no_context)
{
	struct vmm *v = fake_vmm();

	ASSERT_EQ(fake_count("retained"), 0);
	vmm_destroy(v);
	ASSERT_EQ(fake_count("retained"), 0);
}

TEST(map_unmap_keeps_the_range)
{
	struct vmm *v = fake_vmm();
	uintptr_t base, h1, h2;
	int fd1 = chunk_fd(2 * GRAN), fd2 = chunk_fd(GRAN);

	ASSERT_OK(v->ops->reserve(v, 0, 16 * GRAN, GRAN, &base));
	ASSERT_NO_CONTEXT_LEFT();
	ASSERT_EQ(base % GRAN, 0);
	ASSERT_EQ(fake_count("retained"), 1);
	for (int cycle = 0; cycle < 3; cycle++) {
		ASSERT_OK(v->ops->map(v, 0, base, 2 * GRAN, fd1, 0, &h1));
		ASSERT_OK(
			v->ops->map(v, 0, base + 2 * GRAN, GRAN, fd2, 0, &h2));
		ASSERT_NO_CONTEXT_LEFT();
		ASSERT_EQ(fake_count("handles"), 2);
		uint32_t *p = (uint32_t *)base;
		if (cycle >
		    0) /* the same memory came back at the same address */
			ASSERT_EQ(p[3 * GRAN / 4 - 1], 0xabc0 + cycle - 1);
		p[3 * GRAN / 4 - 1] = 0xabc0 + cycle;
		ASSERT_OK(v->ops->sync(v, 0));
		ASSERT_OK(v->ops->unmap(v, 0, base, 2 * GRAN, h1));
		ASSERT_OK(v->ops->unmap(v, 0, base + 2 * GRAN, GRAN, h2));
		ASSERT_NO_CONTEXT_LEFT();
		ASSERT_EQ(fake_count("handles"), 0);
		ASSERT_EQ(fake_count("mapped"), 0);
	}
	ASSERT_EQ(fake_count("ctx_syncs"), 3);
	ASSERT_OK(v->ops->unreserve(v, base, 16 * GRAN));
	close(fd1);
	close(fd2);
	vmm_destroy(v);
	ASSERT_EQ(fake_count("retained"), 0);
	ASSERT_NO_CONTEXT_LEFT();
}

TEST(failed_map_holds_nothing)
{
	struct vmm *v = fake_vmm();
	uintptr_t base, h = 0;
	int fd = chunk_fd(GRAN);

	ASSERT_OK(v->ops->reserve(v, 0, 4 * GRAN, GRAN, &base));
	fake_fail("cuMemImportFromShareableHandle", CUDA_ERROR_INVALID_VALUE);
	ASSERT_EQ(v->ops->map(v, 0, base, GRAN, fd, 0, &h), -EINVAL);
	fake_fail("cuMemMap", CUDA_ERROR_OUT_OF_MEMORY);
	ASSERT_EQ(v->ops->map(v, 0, base, GRAN, fd, 0, &h), -ENOMEM);
	ASSERT(strstr(error_get(), "cuMemMap") != NULL);
	fake_fail("cuMemSetAccess", CUDA_ERROR_NOT_PERMITTED);
	ASSERT_EQ(v->ops->map(v, 0, base, GRAN, fd, 0, &h), -EPERM);
	ASSERT(strstr(error_get(), "cuMemSetAccess") != NULL);
	ASSERT_EQ(fake_count("handles"), 0);
	ASSERT_EQ(fake_count("mapped"), 0);
	ASSERT_NO_CONTEXT_LEFT();
	/* And then it works. */
	ASSERT_OK(v->ops->map(v, 0, base, GRAN, fd, 0, &h));
	ASSERT_OK(v->ops->unmap(v, 0, base, GRAN, h));
	close(fd);
	vmm_destroy(v);
}

TEST(unmap_failure_still_releases)
{
	struct vmm *v = fake_vmm();
	uintptr_t base, h;
	int fd = chunk_fd(GRAN);

	ASSERT_OK(v->ops->reserve(v, 0, 4 * GRAN, GRAN, &base));
	ASSERT_OK(v->ops->map(v, 0, base, GRAN, fd, 0, &h));
	fake_fail("cuMemUnmap", CUDA_ERROR_INVALID_VALUE);
	ASSERT_EQ(v->ops->unmap(v, 0, base, GRAN, h), -EINVAL);
	ASSERT_EQ(fake_count("handles"), 0);
	ASSERT_NO_CONTEXT_LEFT();
	close(fd);
	vmm_destroy(v);
}

TEST(readonly_mapping)
{
	struct vmm *v = fake_vmm();
	uintptr_t base, h;
	int fd = chunk_fd(GRAN);

	ASSERT_OK(v->ops->reserve(v, 0, 4 * GRAN, GRAN, &base));
	ASSERT_OK(v->ops->map(v, 0, base, GRAN, fd, 1, &h));
	ASSERT_EQ(fake_count("readonly_maps"), 1);
	ASSERT_OK(v->ops->unmap(v, 0, base, GRAN, h));
	/* A driver that refuses read-only device access: mapped read-write. */
	setenv("FAKE_CUDA_NO_READONLY", "1", 1);
	ASSERT_OK(v->ops->map(v, 0, base, GRAN, fd, 1, &h));
	((volatile char *)base)[0] = 1;
	ASSERT_OK(v->ops->unmap(v, 0, base, GRAN, h));
	ASSERT_EQ(fake_count("handles"), 0);
	close(fd);
	vmm_destroy(v);
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 131 + seed + (i >> 12));
}

TEST(copy_in_pieces_over_streams)
{
	struct vmm *v;
	uintptr_t base, h[3];
	int fd[3];
	size_t sizes[3] = { 3 * GRAN, GRAN, 2 * GRAN };
	size_t total = 6 * GRAN, off = 0;

	setenv("VRAM_CUDA_COPY_PIECE_MB", "1", 1);
	setenv("VRAM_CUDA_COPY_STREAMS", "3", 1);
	v = fake_vmm();
	ASSERT_OK(v->ops->reserve(v, 0, 8 * GRAN, GRAN, &base));
	for (int i = 0; i < 3; i++) {
		fd[i] = chunk_fd(sizes[i]);
		ASSERT_OK(v->ops->map(v, 0, base + off, sizes[i], fd[i], 0,
				      &h[i]));
		off += sizes[i];
	}
	uint8_t *host = malloc(total), *want = malloc(total);
	ASSERT(host && want);
	ASSERT_OK(v->ops->host_register(v, host, total));
	fill((uint8_t *)base, total, 7);
	memcpy(want, (void *)base, total);

	/* Uneven spans: one crossing chunks, one short, one to the end. */
	struct vmm_span spans[3] = {
		{ base, host, 2 * GRAN + 12345 },
		{ base + 2 * GRAN + 12345, host + 2 * GRAN + 12345, 1000 },
		{ base + 2 * GRAN + 13345, host + 2 * GRAN + 13345,
		  total - (2 * GRAN + 13345) },
	};
	ASSERT_OK(v->ops->copy(v, 0, 1, spans, 3));
	ASSERT_NO_CONTEXT_LEFT();
	ASSERT_EQ(memcmp(host, want, total), 0);
	/* 1 MiB pieces: 5 + 1 + 8. */
	ASSERT_EQ(fake_count("copies"), 14);
	ASSERT_EQ(fake_count("streams"), 3);

	memset((void *)base, 0, total);
	ASSERT_OK(v->ops->copy(v, 0, 0, spans, 3));
	ASSERT_EQ(memcmp((void *)base, want, total), 0);
	ASSERT_EQ(fake_count("streams"), 3); /* made once */

	/* A failed copy still waits for what it issued. */
	int syncs = fake_count("syncs");
	fake_fail("cuMemcpyDtoHAsync", CUDA_ERROR_ILLEGAL_ADDRESS);
	ASSERT_EQ(v->ops->copy(v, 0, 1, spans, 3), -EIO);
	ASSERT_NO_CONTEXT_LEFT();
	ASSERT_GE(fake_count("syncs"), syncs);

	off = 0;
	for (int i = 0; i < 3; i++) {
		ASSERT_OK(v->ops->unmap(v, 0, base + off, sizes[i], h[i]));
		off += sizes[i];
		close(fd[i]);
	}
	/* Destroy unregisters what was left and drops streams and contexts. */
	ASSERT_EQ(fake_count("registered"), 1);
	vmm_destroy(v);
	ASSERT_EQ(fake_count("registered"), 0);
	ASSERT_EQ(fake_count("streams"), 0);
	ASSERT_EQ(fake_count("retained"), 0);
	free(host);
	free(want);
}

/* Copy lanes: a copy issued on a lane lands once that lane is waited for
 * (the fake runs an async copy only then), a wait for one lane leaves
 * the other's copy queued, and destroy drops both lanes' streams. */
TEST(copy_lanes_are_waited_for_apart)
{
	struct vmm *v;
	uintptr_t base, h;
	size_t total = 2 * GRAN;

	setenv("VRAM_CUDA_COPY_STREAMS", "2", 1);
	v = fake_vmm();
	ASSERT(v->ops->copy_issue && v->ops->copy_wait);
	ASSERT_OK(v->ops->reserve(v, 0, total, GRAN, &base));
	int fd = chunk_fd(total);
	ASSERT_OK(v->ops->map(v, 0, base, total, fd, 0, &h));
	uint8_t *host = malloc(total);
	ASSERT(host);
	ASSERT_OK(v->ops->host_register(v, host, total));
	memset(host, 7, GRAN);
	memset(host + GRAN, 9, GRAN);
	memset((void *)base, 0, total);

	struct vmm_span lo = { base, host, GRAN },
			hi = { base + GRAN, host + GRAN, GRAN };
	ASSERT_OK(v->ops->copy_issue(v, 0, 0, 0, &lo, 1));
	ASSERT_OK(v->ops->copy_issue(v, 0, 1, 0, &hi, 1));
	ASSERT_NO_CONTEXT_LEFT();
	ASSERT_EQ(fake_count("streams"), 4);
	ASSERT_EQ(((uint8_t *)base)[0], 0); /* queued, not yet copied */
	ASSERT_OK(v->ops->copy_wait(v, 0, 0));
	ASSERT_EQ(((uint8_t *)base)[0], 7);
	ASSERT_EQ(((uint8_t *)base)[GRAN], 0); /* lane 1 still queued */
	ASSERT_OK(v->ops->copy_wait(v, 0, 1));
	ASSERT_EQ(((uint8_t *)base)[GRAN], 9);
	ASSERT_NO_CONTEXT_LEFT();

	ASSERT_OK(v->ops->unmap(v, 0, base, total, h));
	close(fd);
	ASSERT_OK(v->ops->unreserve(v, base, total));
	vmm_destroy(v);
	ASSERT_EQ(fake_count("streams"), 0);
	ASSERT_EQ(fake_count("busy_unmaps"), 0);
	free(host);
}

TEST(host_register_pairs)
{
	struct vmm *v = fake_vmm();
	char *a = malloc(4096), *b = malloc(4096);

	ASSERT_OK(v->ops->host_register(v, a, 4096));
	ASSERT_OK(v->ops->host_register(v, b, 4096));
	ASSERT_EQ(fake_count("registered"), 2);
	ASSERT_OK(v->ops->host_unregister(v, a, 4096));
	ASSERT_EQ(v->ops->host_unregister(v, a, 4096), -ENOENT);
	fake_fail("cuMemHostRegister", CUDA_ERROR_OUT_OF_MEMORY);
	ASSERT_EQ(v->ops->host_register(v, a, 4096), -ENOMEM);
	ASSERT_EQ(fake_count("registered"), 1);
	ASSERT_NO_CONTEXT_LEFT();
	vmm_destroy(v);
	ASSERT_EQ(fake_count("registered"), 0);
	free(a);
	free(b);
}

TEST(driver_failure_and_missing_device)
{
	struct vmm *v = fake_vmm();
	uintptr_t base;

	ASSERT_EQ(v->ops->reserve(v, 3, GRAN, GRAN, &base), -ENODEV);
	ASSERT(strstr(error_get(), "CUDA_VISIBLE_DEVICES") != NULL);
	vmm_destroy(v);

	setenv("FAKE_CUDA_INIT_ERROR", "100", 1); /* CUDA_ERROR_NO_DEVICE */
	v = fake_vmm();
	ASSERT_EQ(v->ops->reserve(v, 0, GRAN, GRAN, &base), -ENODEV);
	ASSERT_EQ(v->ops->sync(v, 0), -ENODEV);
	ASSERT_EQ(fake_count("retained"), 0);
	vmm_destroy(v);
}

struct worker {
	struct vmm *v;
	uintptr_t base;
	int fd;
	int failures;
	int depth_after;
};

static void *map_loop(void *arg)
{
	struct worker *w = arg;
	for (int i = 0; i < 200; i++) {
		uintptr_t h;
		if (w->v->ops->map(w->v, 0, w->base, GRAN, w->fd, 0, &h) < 0 ||
		    w->v->ops->unmap(w->v, 0, w->base, GRAN, h) < 0)
			w->failures++;
	}
	w->depth_after = fake_count("ctx_depth");
	return NULL;
}

TEST(threads_map_concurrently)
{
	struct vmm *v = fake_vmm();
	struct worker w[4];
	pthread_t t[4];
	uintptr_t base;

	ASSERT_OK(v->ops->reserve(v, 0, 8 * GRAN, GRAN, &base));
	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){ v, base + (uintptr_t)i * GRAN,
					chunk_fd(GRAN), 0, -1 };
		ASSERT_OK(pthread_create(&t[i], NULL, map_loop, &w[i]));
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		ASSERT_EQ(w[i].failures, 0);
		ASSERT_EQ(w[i].depth_after, 0);
		close(w[i].fd);
	}
	ASSERT_EQ(fake_count("handles"), 0);
	ASSERT_EQ(fake_count("retained"), 1);
	vmm_destroy(v);
}

/* The daemon names its devices by UUID; this process may see them in
 * another order (CUDA_VISIBLE_DEVICES): the daemon's device 0 is found
 * where it is here, and one not visible here is a clear ENODEV. */
TEST(device_found_by_the_daemons_uuid)
{
	setenv("FAKE_CUDA_DEVICES", "2", 1);
	struct vmm *v = fake_vmm();
	uintptr_t base;

	/* The fake's device 1 has UUID bytes 16..31. */
	snprintf(v->dev_uuid[0], sizeof(v->dev_uuid[0]), "%s",
		 "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f");
	ASSERT_OK(v->ops->reserve(v, 0, 4 * GRAN, GRAN, &base));
	ASSERT_OK(v->ops->unreserve(v, base, 4 * GRAN));
	vmm_destroy(v);

	v = fake_vmm();
	snprintf(v->dev_uuid[0], sizeof(v->dev_uuid[0]), "%s",
		 "GPU-ffffffff-ffff-ffff-ffff-ffffffffffff");
	ASSERT_EQ(v->ops->reserve(v, 0, 4 * GRAN, GRAN, &base), -ENODEV);
	ASSERT(strstr(error_get(), "not visible") != NULL);
	vmm_destroy(v);
	ASSERT_NO_CONTEXT_LEFT();
}
