/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's CUDA backend without a GPU: what happens when the driver is
 * absent or unusable, and its chunk handling against a fake driver
 * (tests/unit/cuda_fake/): fds exported CLOEXEC, the creating handle
 * kept beside the fd until the release, errors mapped, releases run by
 * threads and awaited
 * by the settle operation (which the daemon runs off its loop). On a machine with a GPU, the real driver's
 * devices are checked too. */
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "cuda_driver.h"
#include "cuda_fake.h"
#include "harness.h"
#include "nvml.h"
#include "test.h"

#define GRAN (2ull << 20)

static struct backend_config cuda_config(void)
{
	struct backend_config cfg = {
		.name = "cuda",
		.host_capacity = 64 * GRAN,
		.host_devices = 1,
		.host_granularity = GRAN,
	};
	return cfg;
}

static struct backend *fake_open(void)
{
	struct backend_config cfg = cuda_config();
	struct backend *b = NULL;

	cuda_fake_load();
	setenv("VRAM_LIBNVML", "/nonexistent/libnvidia-ml.so.1", 1);
	ASSERT_OK(backend_open(&cfg, &b));
	ASSERT_STREQ(b->ops->name, "cuda");
	return b;
}

TEST(no_driver_is_enoent)
{
	struct backend_config cfg = cuda_config();
	struct backend *b = NULL;
	int fds = harness_count_fds(0);

	setenv("VRAM_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
	ASSERT_EQ(backend_cuda_open(&cfg, &b), -ENOENT);
	ASSERT(b == NULL);
	ASSERT_EQ(harness_count_fds(0), fds);
}

/* A node with no GPU in sysfs and no driver: auto is the host backend.
 * (A GPU whose driver fails is an error: daemon_backend_auto_test.) The
 * sysfs is an empty folder, so that this holds on a GPU machine too. */
TEST(auto_falls_back_to_host_without_gpu_or_driver)
{
	struct backend_config cfg = cuda_config();
	struct backend *b = NULL;
	char sysfs[] = "/tmp/vram-no-pci-XXXXXX";

	ASSERT(mkdtemp(sysfs) != NULL);
	setenv("VRAM_PCI_SYSFS", sysfs, 1);
	setenv("VRAM_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
	cfg.name = "auto";
	int r = backend_open(&cfg, &b);
	rmdir(sysfs);
	ASSERT_OK(r);
	ASSERT_STREQ(b->ops->name, "host");
	backend_destroy(b);
}

TEST(library_without_entry_points_is_enosys)
{
	struct backend_config cfg = cuda_config();
	struct backend *b = NULL;
	struct cuda_driver cu;
	char why[256];

	/* A real library that is not the driver. */
	setenv("VRAM_LIBCUDA", "libc.so.6", 1);
	ASSERT_EQ(backend_cuda_open(&cfg, &b), -ENOSYS);
	ASSERT_EQ(cuda_driver_load(&cu, why, sizeof(why)), -ENOSYS);
	ASSERT(strstr(why, "cuInit") != NULL);
}

TEST(nvml_absent_is_enoent)
{
	struct nvml *n = NULL;

	setenv("VRAM_LIBNVML", "/nonexistent/libnvidia-ml.so.1", 1);
	ASSERT_EQ(nvml_open(&n), -ENOENT);
	setenv("VRAM_LIBNVML", "libc.so.6", 1);
	ASSERT_EQ(nvml_open(&n), -ENOSYS);
}

TEST(errno_mapping)
{
	ASSERT_EQ(cuda_errno(CUDA_SUCCESS), 0);
	ASSERT_EQ(cuda_errno(CUDA_ERROR_OUT_OF_MEMORY), -ENOMEM);
	ASSERT_EQ(cuda_errno(CUDA_ERROR_NO_DEVICE), -ENODEV);
	ASSERT_EQ(cuda_errno(CUDA_ERROR_INVALID_VALUE), -EINVAL);
	ASSERT_EQ(cuda_errno(CUDA_ERROR_NOT_SUPPORTED), -ENOTSUP);
	ASSERT_EQ(cuda_errno(CUDA_ERROR_ILLEGAL_ADDRESS), -EIO);
	ASSERT_EQ(cuda_errno(12345), -EIO);
}

TEST(fake_devices_uuid_and_granularity)
{
	struct backend *b;
	uint64_t free_b, total;

	setenv("FAKE_CUDA_DEVICES", "2", 1);
	b = fake_open();
	ASSERT_EQ(b->n_devices, 2);
	ASSERT_STREQ(b->devices[0].uuid,
		     "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f");
	ASSERT_STREQ(b->devices[1].uuid,
		     "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f");
	ASSERT_UEQ(b->devices[1].total_bytes, 1ull << 30);
	ASSERT_UEQ(b->devices[0].granularity, GRAN);
	/* Without NVML: total less what vramd holds. */
	ASSERT_OK(backend_mem_info(b, 1, &free_b, &total));
	ASSERT_UEQ(free_b, 1ull << 30);
	ASSERT_UEQ(total, 1ull << 30);
	backend_destroy(b);
}

/* Chunks are GPUDirect RDMA capable where the device supports it, as
 * torch_memory_saver's allocations are, and plain where it does not (the
 * fake, like the driver, refuses the flag there). */
TEST(fake_chunks_are_rdma_capable_where_the_device_allows)
{
	for (int no_rdma = 0; no_rdma <= 1; no_rdma++) {
		setenv("FAKE_CUDA_NO_RDMA", no_rdma ? "1" : "0", 1);
		struct backend *b = fake_open();
		struct chunk c = { .size = GRAN, .fd = -1 };
		int before = fake_count("rdma_creates");
		ASSERT_OK(backend_chunk_create(b, 0, &c));
		ASSERT_EQ(fake_count("rdma_creates") - before, no_rdma ? 0 : 1);
		backend_chunk_release(b, 0, &c);
		backend_settle(b);
		backend_destroy(b);
	}
	unsetenv("FAKE_CUDA_NO_RDMA");
}

/* A device that claims the RDMA flag but refuses it gets plain chunks:
 * the create is retried without it, then made so from the start. */
TEST(fake_a_refused_rdma_flag_falls_back_to_plain_chunks)
{
	setenv("FAKE_CUDA_NO_RDMA", "1", 1);
	setenv("FAKE_CUDA_RDMA_CLAIMED", "1", 1);
	struct backend *b = fake_open();
	for (int i = 0; i < 2; i++) {
		struct chunk c = { .size = GRAN, .fd = -1 };
		int before = fake_count("creates");
		ASSERT_OK(backend_chunk_create(b, 0, &c));
		ASSERT_EQ(fake_count("rdma_creates"), 0);
		/* The refused try made nothing; the retry one chunk. */
		ASSERT_EQ(fake_count("creates") - before, 1);
		backend_chunk_release(b, 0, &c);
	}
	backend_settle(b);
	backend_destroy(b);
	unsetenv("FAKE_CUDA_RDMA_CLAIMED");
	unsetenv("FAKE_CUDA_NO_RDMA");
}

/* Waits up to 5 s for fake_count(what) to reach at least n. */
static int count_reaches(const char *what, int n)
{
	for (int i = 0; i < 5000 && fake_count(what) < n; i++)
		harness_msleep(1);
	return fake_count(what);
}

/* The clearing pump (cuda_pump.h): no allocation while it is off; on, one
 * granule made and released every period, nothing held; off again, no
 * more. Without VRAM_CUDA_PUMP_MS, or with 0: none at all. */
TEST(fake_the_clearing_pump_allocates_only_while_on)
{
	setenv("VRAM_CUDA_PUMP_MS", "1", 1);
	struct backend *b = fake_open();
	int handles = fake_count("handles");
	int creates = fake_count("creates");

	harness_msleep(20);
	ASSERT_EQ(fake_count("creates"), creates);
	backend_pump_set(b, 0, true);
	ASSERT(count_reaches("creates", creates + 5) >= creates + 5);
	/* Made and released at once: at most the one in hand. */
	ASSERT(fake_count("handles") - handles <= 1);
	backend_pump_set(b, 0, false);
	harness_msleep(20); /* a stroke under way ends */
	int stopped = fake_count("creates");
	harness_msleep(30);
	ASSERT_EQ(fake_count("creates"), stopped);
	ASSERT_EQ(fake_count("handles"), handles);
	/* Another device number than the node's: ignored. */
	backend_pump_set(b, BACKEND_MAX_DEVICES + 1, true);
	backend_destroy(b);

	/* Off unless asked for: by default, and with 0. */
	for (int zero = 0; zero <= 1; zero++) {
		if (zero)
			setenv("VRAM_CUDA_PUMP_MS", "0", 1);
		else
			unsetenv("VRAM_CUDA_PUMP_MS");
		b = fake_open();
		creates = fake_count("creates");
		backend_pump_set(b, 0, true);
		harness_msleep(30);
		ASSERT_EQ(fake_count("creates"), creates);
		backend_destroy(b);
	}
	unsetenv("VRAM_CUDA_PUMP_MS");
}

/* A device full to the last granule: the pump's allocations fail, and it
 * goes on without harm until it is turned off. */
TEST(fake_the_clearing_pump_skips_a_full_device)
{
	setenv("VRAM_CUDA_PUMP_MS", "1", 1);
	struct backend *b = fake_open();
	setenv("FAKE_CUDA_CAPACITY_MB", "4", 1); /* after the load's reset */
	struct chunk c[2] = { { .size = GRAN, .fd = -1 },
			      { .size = GRAN, .fd = -1 } };
	ASSERT_OK(backend_chunk_create(b, 0, &c[0]));
	ASSERT_OK(backend_chunk_create(b, 0, &c[1]));
	int creates = fake_count("creates");
	backend_pump_set(b, 0, true);
	harness_msleep(30);
	ASSERT_EQ(fake_count("creates"), creates);
	backend_chunk_release(b, 0, &c[1]);
	backend_settle(b);
	ASSERT(count_reaches("creates", creates + 3) >= creates + 3);
	backend_pump_set(b, 0, false);
	backend_chunk_release(b, 0, &c[0]);
	backend_settle(b);
	backend_destroy(b);
	unsetenv("FAKE_CUDA_CAPACITY_MB");
	unsetenv("VRAM_CUDA_PUMP_MS");
}

TEST(fake_unusable_driver_is_enodev)
{
	struct backend_config cfg = cuda_config();
	struct backend *b = NULL;

	cuda_fake_load();
	setenv("FAKE_CUDA_INIT_ERROR", "100", 1); /* CUDA_ERROR_NO_DEVICE */
	ASSERT_EQ(backend_cuda_open(&cfg, &b), -ENODEV);
	setenv("FAKE_CUDA_INIT_ERROR", "999", 1);
	ASSERT_EQ(backend_cuda_open(&cfg, &b), -ENODEV);
	unsetenv("FAKE_CUDA_INIT_ERROR");
	setenv("FAKE_CUDA_DEVICES", "0", 1);
	ASSERT_EQ(backend_cuda_open(&cfg, &b), -ENODEV);
	setenv("FAKE_CUDA_DEVICES", "1", 1);
	setenv("FAKE_CUDA_NO_VMM", "1", 1);
	ASSERT_EQ(backend_cuda_open(&cfg, &b), -ENODEV);
	ASSERT(b == NULL);
}

TEST(fake_chunk_holds_its_fd_and_handle_until_released)
{
	struct backend *b = fake_open();
	struct chunk c = { .size = 4 * GRAN, .fd = -1 };
	int fds = harness_count_fds(0);
	uint64_t free_b, total;

	ASSERT_OK(backend_chunk_create(b, 0, &c));
	ASSERT(c.fd >= 0);
	ASSERT_EQ(fcntl(c.fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	/* The creating handle is kept beside the fd: its release, after the
	 * fd's close, is the one that frees. */
	ASSERT_EQ(fake_count("handles"), 1);
	ASSERT(c.handle != 0);
	/* The fd, and the fake handle's memfd (the driver's costs no fd). */
	ASSERT_EQ(harness_count_fds(0), fds + 2);
	ASSERT_UEQ(b->devices[0].used_bytes, 4 * GRAN);
	ASSERT_OK(backend_mem_info(b, 0, &free_b, &total));
	ASSERT_UEQ(free_b, total - 4 * GRAN);
	backend_chunk_release(b, 0, &c);
	ASSERT_EQ(c.fd, -1);
	ASSERT(c.handle == 0);
	/* settle waits for the release threads. */
	backend_settle(b);
	ASSERT(backend_settled(b));
	ASSERT_OK(backend_mem_info(b, 0, &free_b, &total));
	ASSERT_UEQ(free_b, total);
	ASSERT_EQ(harness_count_fds(0), fds);
	ASSERT_EQ(fake_count("handles"), 0);
	backend_destroy(b);
}

/* A chunk whose fd is let go stays allocated by its handle, and is
 * exported again as the same memory; its release frees it. A chunk with
 * no handle (one recovered from the fd store) keeps its fd. */
TEST(fake_chunk_unexported_is_held_by_its_handle)
{
	struct backend *b = fake_open();
	struct chunk c = { .size = 2 * GRAN, .fd = -1 };
	int fds = harness_count_fds(0);
	uint64_t free_b, total;
	struct stat st, st2;

	ASSERT_OK(backend_chunk_create(b, 0, &c));
	ASSERT_OK(fstat(c.fd, &st));
	int *m =
		mmap(NULL, c.size, PROT_READ | PROT_WRITE, MAP_SHARED, c.fd, 0);
	ASSERT(m != MAP_FAILED);
	m[0] = 42;
	munmap(m, c.size);
	uint64_t gen = b->chunk_gen;
	ASSERT(backend_chunk_unexport(b, 0, &c));
	ASSERT_EQ(c.fd, -1);
	ASSERT(c.handle != 0);
	ASSERT(backend_chunk_held(&c));
	ASSERT(b->chunk_gen != gen);
	backend_settle(b);
	/* The fake handle's memfd alone; the bytes still in use. */
	ASSERT_EQ(harness_count_fds(0), fds + 1);
	ASSERT_EQ(fake_count("handles"), 1);
	ASSERT_OK(backend_mem_info(b, 0, &free_b, &total));
	ASSERT_UEQ(free_b, total - 2 * GRAN);
	/* Twice: nothing more to let go. */
	ASSERT(!backend_chunk_unexport(b, 0, &c));

	int fd = backend_chunk_fd(b, 0, &c);
	ASSERT(fd >= 0);
	ASSERT_EQ(c.fd, fd);
	ASSERT_EQ(fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	ASSERT_OK(fstat(fd, &st2));
	ASSERT_UEQ(st2.st_ino, st.st_ino);
	m = mmap(NULL, c.size, PROT_READ, MAP_SHARED, fd, 0);
	ASSERT(m != MAP_FAILED);
	ASSERT_EQ(m[0], 42);
	munmap(m, c.size);
	/* Held: the same fd, no second export. */
	ASSERT_EQ(backend_chunk_fd(b, 0, &c), fd);

	/* Let go again, then released: all of it back. */
	ASSERT(backend_chunk_unexport(b, 0, &c));
	backend_chunk_release(b, 0, &c);
	ASSERT(!backend_chunk_held(&c));
	ASSERT_EQ(backend_chunk_fd(b, 0, &c), -EBADF);
	backend_settle(b);
	ASSERT_EQ(harness_count_fds(0), fds);
	ASSERT_EQ(fake_count("handles"), 0);
	ASSERT_OK(backend_mem_info(b, 0, &free_b, &total));
	ASSERT_UEQ(free_b, total);

	/* No handle (as a chunk recovered from the fd store): the fd
	 * stays. */
	struct chunk r = { .size = 2 * GRAN,
			   .fd = memfd_create("recovered", MFD_CLOEXEC) };
	ASSERT(r.fd >= 0);
	ASSERT(!backend_chunk_unexport(b, 0, &r));
	ASSERT(r.fd >= 0);
	backend_chunk_release(b, 0, &r);
	ASSERT_EQ(r.fd, -1);
	backend_settle(b);
	ASSERT_EQ(harness_count_fds(0), fds);
	backend_destroy(b);
}

/* A re-export that the driver refuses is an error, and the chunk stays
 * held by its handle. */
TEST(fake_export_again_failure_keeps_the_chunk)
{
	struct backend *b = fake_open();
	struct chunk c = { .size = 2 * GRAN, .fd = -1 };
	int fds = harness_count_fds(0);

	ASSERT_OK(backend_chunk_create(b, 0, &c));
	ASSERT(backend_chunk_unexport(b, 0, &c));
	fake_fail("cuMemExportToShareableHandle", CUDA_ERROR_OUT_OF_MEMORY);
	ASSERT_EQ(backend_chunk_fd(b, 0, &c), -ENOMEM);
	ASSERT_EQ(c.fd, -1);
	ASSERT(backend_chunk_held(&c));
	ASSERT(backend_chunk_fd(b, 0, &c) >= 0);
	backend_chunk_release(b, 0, &c);
	backend_settle(b);
	ASSERT_EQ(harness_count_fds(0), fds);
	ASSERT_EQ(fake_count("handles"), 0);
	backend_destroy(b);
}

TEST(fake_create_errors_hold_nothing)
{
	/* Plain chunks: a refused RDMA flag is retried without it (below). */
	setenv("FAKE_CUDA_NO_RDMA", "1", 1);
	struct backend *b = fake_open();
	struct chunk c = { .size = 2 * GRAN, .fd = -1 };
	int fds = harness_count_fds(0);

	fake_fail("cuMemCreate", CUDA_ERROR_OUT_OF_MEMORY);
	ASSERT_EQ(backend_chunk_create(b, 0, &c), -ENOMEM);
	fake_fail("cuMemCreate", CUDA_ERROR_INVALID_VALUE);
	ASSERT_EQ(backend_chunk_create(b, 0, &c), -EINVAL);
	/* Export fails after create: the handle is released, no fd. */
	fake_fail("cuMemExportToShareableHandle", CUDA_ERROR_NOT_SUPPORTED);
	ASSERT_EQ(backend_chunk_create(b, 0, &c), -ENOTSUP);
	ASSERT_EQ(c.fd, -1);
	ASSERT_EQ(fake_count("handles"), 0);
	ASSERT_EQ(harness_count_fds(0), fds);
	ASSERT_UEQ(b->used_bytes, 0);
	backend_destroy(b);
	unsetenv("FAKE_CUDA_NO_RDMA");
}

static void release_many(unsigned threads)
{
	char n[8];
	snprintf(n, sizeof(n), "%u", threads);
	setenv("VRAM_CUDA_RELEASE_THREADS", n, 1);
	struct backend *b = fake_open();
	struct chunk c[64];
	int fds = harness_count_fds(0);
	uint64_t free_b, total;

	for (int i = 0; i < 64; i++) {
		c[i] = (struct chunk){ .size = GRAN, .fd = -1 };
		ASSERT_OK(backend_chunk_create(b, 0, &c[i]));
	}
	/* The 64 exported fds, and the fake's handles (each holds its memfd
	 * open, where the driver's costs no fd). */
	ASSERT_EQ(fake_count("handles"), 64);
	ASSERT_EQ(harness_count_fds(0), fds + 64 + 64);
	for (int i = 0; i < 64; i++)
		backend_chunk_release(b, 0, &c[i]);
	ASSERT_UEQ(b->used_bytes, 0);
	backend_settle(b);
	ASSERT(backend_settled(b));
	ASSERT_OK(backend_mem_info(b, 0, &free_b, &total));
	ASSERT_UEQ(free_b, total);
	ASSERT_EQ(harness_count_fds(0), fds);
	ASSERT_EQ(fake_count("handles"), 0);
	/* A create right after releases, then destroy with a release pending. */
	ASSERT_OK(backend_chunk_create(b, 0, &c[0]));
	backend_chunk_release(b, 0, &c[0]);
	backend_destroy(b);
	ASSERT_EQ(harness_count_fds(0), fds);
	ASSERT_EQ(fake_count("handles"), 0);
}

TEST(fake_release_threads)
{
	release_many(4);
}

TEST(fake_release_inline)
{
	release_many(0);
}

/* On a GPU machine (make test there): the real driver, no context made. */
TEST(real_driver_devices)
{
	struct backend_config cfg = cuda_config();
	struct backend *b = NULL;
	uint64_t free_b, total;
	int r;

	unsetenv("VRAM_LIBCUDA");
	r = backend_cuda_open(&cfg, &b);
	if (r == -ENOENT || r == -ENODEV)
		SKIP("no CUDA driver or device here (%s)", strerror(-r));
	ASSERT_OK(r);
	ASSERT_GT(b->n_devices, 0);
	for (unsigned i = 0; i < b->n_devices; i++) {
		ASSERT_EQ(strncmp(b->devices[i].uuid, "GPU-", 4), 0);
		ASSERT_EQ(strlen(b->devices[i].uuid), 40);
		ASSERT_GT(b->devices[i].total_bytes, 0);
		ASSERT_EQ(b->devices[i].granularity &
				  (b->devices[i].granularity - 1),
			  0);
		ASSERT_OK(backend_mem_info(b, i, &free_b, &total));
		ASSERT_LE(free_b, total);
	}
	backend_destroy(b);
}
