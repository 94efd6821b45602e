/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's HIP backend without AMD hardware: an absent, foreign, old or
 * unusable runtime, and its chunk handling against a recording stand-in
 * for the HIP runtime (tests/unit/hip_fake.h): the exact calls at start,
 * of a grow (set the device, create, export) and of a release; fds
 * exported CLOEXEC; the creating handle kept until release (or not, as
 * set); an error at every step holding nothing; free memory from sysfs or
 * hipMemGetInfo; a release that does not show up as free reported; and a
 * pool of several chunks paused and resumed through pool.c with a failure
 * at every step of the resume. On a machine with ROCm, the real runtime's
 * devices are checked too. */
#include <fcntl.h>
#include <stddef.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "harness/harness.h"
#include "hip.h"
#include "hip_fake.h"
#include "pool.h"
#include "test.h"

#define GRAN (2ull << 20)

static struct backend_config hip_config(void)
{
	struct backend_config cfg = {
		.name = "hip",
		.host_capacity = 64 * GRAN,
		.host_devices = 1,
		.host_granularity = GRAN,
	};
	return cfg;
}

/* The HIP backend on the stand-in, free memory from hipMemGetInfo. */
static struct backend *fake_open(void)
{
	struct backend_config cfg = hip_config();
	struct hip_api a = fake_hip_api();
	struct backend *b = NULL;

	if (!getenv("VRAM_HIP_SYSFS"))
		setenv("VRAM_HIP_SYSFS", "/nonexistent", 1);
	ASSERT_OK(backend_hip_open_with(&cfg, &a, &b));
	ASSERT_STREQ(b->ops->name, "hip");
	return b;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

TEST(no_library_is_enoent)
{
	struct backend_config cfg = hip_config();
	struct backend *b = NULL;
	int fds = harness_count_fds(0);

	setenv("VRAM_LIBHIP", "/nonexistent/libamdhip64.so", 1);
	ASSERT_EQ(backend_hip_open(&cfg, &b), -ENOENT);
	ASSERT_EQ(backend_open(&cfg, &b), -ENOENT);
	ASSERT(b == NULL);
	ASSERT_EQ(harness_count_fds(0), fds);
}

TEST(auto_falls_back_to_host_without_runtime)
{
	struct backend_config cfg = hip_config();
	struct backend *b = NULL;

	setenv("VRAM_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
	setenv("VRAM_LIBHIP", "/nonexistent/libamdhip64.so", 1);
	cfg.name = "auto";
	ASSERT_OK(backend_open(&cfg, &b));
	ASSERT_STREQ(b->ops->name, "host");
	ASSERT_UEQ(backend_hip_release_misses(b), 0);
	backend_destroy(b);
}

TEST(library_without_entry_points_is_enosys)
{
	struct backend_config cfg = hip_config();
	struct backend *b = NULL;
	struct hip_api api;
	char why[512];

	setenv("VRAM_LIBHIP", "libc.so.6", 1);
	ASSERT_EQ(backend_hip_open(&cfg, &b), -ENOSYS);
	ASSERT_EQ(hip_api_load(&api, why, sizeof(why)), -ENOSYS);
	ASSERT(strstr(why, "hipInit") != NULL);
}

TEST(incomplete_table_is_einval)
{
	struct backend_config cfg = hip_config();
	struct hip_api a = fake_hip_api();
	struct backend *b = NULL;

	a.hipMemExportToShareableHandle = NULL;
	ASSERT_STREQ(hip_api_missing(&a), "hipMemExportToShareableHandle");
	ASSERT_EQ(backend_hip_open_with(&cfg, &a, &b), -EINVAL);
	ASSERT(b == NULL);
}

TEST(old_or_unusable_runtime)
{
	struct backend_config cfg = hip_config();
	struct hip_api a = fake_hip_api();
	struct backend *b = NULL;

	fake.version = 50221153; /* HIP 5.2: the old allocation properties */
	ASSERT_EQ(backend_hip_open_with(&cfg, &a, &b), -ENOSYS);
	fake.version = 60443482;
	fake.init_error = hipErrorNoDevice;
	ASSERT_EQ(backend_hip_open_with(&cfg, &a, &b), -ENODEV);
	fake.init_error = hipErrorInsufficientDriver;
	ASSERT_EQ(backend_hip_open_with(&cfg, &a, &b), -ENODEV);
	fake.init_error = hipSuccess;
	fake.n_devices = 0;
	ASSERT_EQ(backend_hip_open_with(&cfg, &a, &b), -ENODEV);
	/* A device whose runtime makes no exportable VMM memory. */
	fake.n_devices = 1;
	fake.no_vmm = 1;
	ASSERT_EQ(backend_hip_open_with(&cfg, &a, &b), -ENODEV);
	fake.no_vmm = 0;
	fake_fail_call("hipMemExportToShareableHandle", 1,
		       hipErrorNotSupported);
	ASSERT_EQ(backend_hip_open_with(&cfg, &a, &b), -ENODEV);
	ASSERT(b == NULL);
	ASSERT_EQ(fake_live_handles(), 0);
	ASSERT_EQ(fake.bad_releases, 0);
}

TEST(open_calls_and_devices)
{
	struct backend *b;
	uint64_t free_b, total;

	fake.n_devices = 2;
	fake_mark();
	b = fake_open();
	EXPECT_CALL("hipInit(0)");
	EXPECT_CALL("hipRuntimeGetVersion()");
	EXPECT_CALL("hipGetDeviceCount()");
	EXPECT_CALL("hipDriverGetVersion()");
	for (int i = 0; i < 2; i++) {
		EXPECT_CALL("hipDeviceTotalMem(%d)", i);
		EXPECT_CALL("hipDeviceGetName(%d)", i);
		EXPECT_CALL("hipDeviceGetPCIBusId(%d)", i);
		EXPECT_CALL("hipDeviceGetUuid(%d)", i);
		EXPECT_CALL("hipMemGetAllocationGranularity(dev%d,rec)", i);
		/* The probe: one granule made, exported, freed. */
		EXPECT_CALL("hipMemCreate(%#zx,dev%d) =h%d", (size_t)GRAN, i,
			    i + 1);
		EXPECT_CALL("hipMemExportToShareableHandle(h%d,1)", i + 1);
		EXPECT_CALL("hipMemRelease(h%d)", i + 1);
	}
	EXPECT_NO_MORE_CALLS();
	ASSERT_EQ(b->n_devices, 2);
	ASSERT_STREQ(b->devices[0].uuid, "GPU-000000000abcdef0");
	ASSERT_STREQ(b->devices[1].uuid, "GPU-000000000abcdef1");
	ASSERT_UEQ(b->devices[1].total_bytes, 1ull << 30);
	ASSERT_UEQ(b->devices[0].granularity, GRAN);
	ASSERT_EQ(fake_live_handles(), 0);
	ASSERT_EQ(fake.wrong_device, 0);
	ASSERT_OK(backend_mem_info(b, 1, &free_b, &total));
	ASSERT_UEQ(free_b, 1ull << 30);
	ASSERT_UEQ(total, 1ull << 30);
	backend_destroy(b);
}

TEST(uuid_fallbacks)
{
	struct backend *b;

	fake_fail_call("hipDeviceGetUuid", 1, hipErrorNotSupported);
	b = fake_open();
	ASSERT_STREQ(b->devices[0].uuid, "HIP-0-0000:10:00.0");
	backend_destroy(b);
}

/* Grow: set the device (hipMemCreate allocates on the current one),
 * create, export; the fd is CLOEXEC and the handle kept until release. */
TEST(grow_and_release_calls)
{
	struct backend *b;
	struct chunk c = { .size = 2 * GRAN, .fd = -1 };
	struct chunk d = { .size = GRAN, .fd = -1 };
	int fds;

	fake.n_devices = 2;
	b = fake_open();
	fds = harness_count_fds(0);
	fake_cur_dev = 1;
	fake_mark();
	ASSERT_OK(backend_chunk_create(b, 0, &c));
	EXPECT_CALL("hipMemCreate(%#zx,dev0) =h3", (size_t)(2 * GRAN));
	EXPECT_CALL("hipMemExportToShareableHandle(h3,1)");
	EXPECT_NO_MORE_CALLS();
	ASSERT(c.fd >= 0);
	ASSERT_EQ(fcntl(c.fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	ASSERT(c.handle != 0);
	ASSERT_EQ(fake_live_handles(), 1);
	ASSERT_OK(backend_chunk_create(b, 1, &d));
	EXPECT_CALL("hipMemCreate(%#zx,dev1) =h4", (size_t)GRAN);
	EXPECT_CALL("hipMemExportToShareableHandle(h4,1)");
	EXPECT_NO_MORE_CALLS();
	ASSERT_EQ(fake.wrong_device, 0);
	ASSERT_UEQ(fake.used[0], 2 * GRAN);
	ASSERT_UEQ(fake.used[1], GRAN);
	/* One fd per chunk (and the stand-in's memfd behind each). */
	ASSERT_EQ(harness_count_fds(0), fds + 2 + fake_own_fds());
	ASSERT_EQ(fake_own_fds(), 2);
	ASSERT_UEQ(b->used_bytes, 3 * GRAN);

	/* Release: the free memory before (for the check), then the fd and
	 * the chunk's own handle, once. */
	fake_mark();
	backend_chunk_release(b, 0, &c);
	EXPECT_CALL("hipMemGetInfo(dev0)");
	EXPECT_CALL("hipMemRelease(h3)");
	EXPECT_NO_MORE_CALLS();
	ASSERT_EQ(c.fd, -1);
	ASSERT_EQ(c.handle, 0);
	backend_chunk_release(b, 0, &c); /* a no-op */
	backend_chunk_release(b, 1, &d);
	EXPECT_CALL("hipMemGetInfo(dev1)");
	EXPECT_CALL("hipMemRelease(h4)");
	EXPECT_NO_MORE_CALLS();
	ASSERT_EQ(harness_count_fds(0), fds);
	ASSERT_EQ(fake_live_handles(), 0);
	ASSERT_EQ(fake.bad_releases, 0);
	ASSERT_UEQ(b->used_bytes, 0);
	backend_destroy(b);
}

TEST(handle_released_after_export_when_asked)
{
	struct backend *b;
	struct chunk c = { .size = GRAN, .fd = -1 };

	setenv("VRAM_HIP_KEEP_HANDLE", "0", 1);
	b = fake_open();
	fake_mark();
	ASSERT_OK(backend_chunk_create(b, 0, &c));
	EXPECT_CALL("hipMemCreate(%#zx,dev0) =h2", (size_t)GRAN);
	EXPECT_CALL("hipMemExportToShareableHandle(h2,1)");
	EXPECT_CALL("hipMemRelease(h2)");
	EXPECT_NO_MORE_CALLS();
	ASSERT_EQ(c.handle, 0);
	ASSERT(c.fd >= 0);
	fake_mark();
	backend_chunk_release(b, 0, &c);
	EXPECT_CALL("hipMemGetInfo(dev0)");
	EXPECT_NO_MORE_CALLS();
	ASSERT_EQ(fake.bad_releases, 0);
	backend_destroy(b);
}

/* An error at every step of a grow holds nothing: no handle, no fd, no
 * accounting. */
TEST(create_errors_hold_nothing)
{
	struct backend *b = fake_open();
	struct chunk c = { .size = 2 * GRAN, .fd = -1 };
	int fds = harness_count_fds(0);

	fake_fail_call("hipSetDevice", 1, hipErrorInvalidDevice);
	ASSERT_EQ(backend_chunk_create(b, 0, &c), -ENODEV);
	fake_fail_call("hipMemCreate", 1, hipErrorOutOfMemory);
	ASSERT_EQ(backend_chunk_create(b, 0, &c), -ENOMEM);
	fake_fail_call("hipMemCreate", 1, hipErrorNotSupported);
	ASSERT_EQ(backend_chunk_create(b, 0, &c), -ENOTSUP);
	/* Export fails after create: the handle is released, no fd. */
	fake_mark();
	fake_fail_call("hipMemExportToShareableHandle", 1,
		       hipErrorInvalidValue);
	ASSERT_EQ(backend_chunk_create(b, 0, &c), -EINVAL);
	EXPECT_CALL("hipMemCreate(%#zx,dev0) =h2", (size_t)(2 * GRAN));
	EXPECT_CALL("hipMemExportToShareableHandle(h2,1) -> 1");
	EXPECT_CALL("hipMemRelease(h2)");
	EXPECT_NO_MORE_CALLS();
	ASSERT_EQ(c.fd, -1);
	/* The device is full. */
	c.size = 1ull << 30;
	ASSERT_OK(backend_chunk_create(b, 0, &c));
	struct chunk d = { .size = GRAN, .fd = -1 };
	ASSERT_EQ(backend_chunk_create(b, 0, &d), -ENOMEM);
	backend_chunk_release(b, 0, &c);
	ASSERT_EQ(fake_live_handles(), 0);
	ASSERT_EQ(harness_count_fds(0), fds);
	ASSERT_UEQ(b->used_bytes, 0);
	ASSERT_EQ(fake.bad_releases, 0);
	backend_destroy(b);
}

static void write_file(const char *dir, const char *name, const char *text)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	ASSERT(f != NULL);
	fputs(text, f);
	fclose(f);
}

/* Free memory from the amdgpu sysfs files of the device's PCI function
 * (every process counted, no runtime call), else from hipMemGetInfo. */
TEST(free_memory_from_sysfs)
{
	char root[] = "/tmp/vram-hip-sysfs-XXXXXX", dev[128];
	struct backend *b;
	uint64_t free_b, total;

	ASSERT(mkdtemp(root) != NULL);
	snprintf(dev, sizeof(dev), "%s/0000:10:00.0", root);
	ASSERT_OK(mkdir(dev, 0700));
	write_file(dev, "mem_info_vram_total", "1073741824\n");
	write_file(dev, "mem_info_vram_used", "268435456\n");
	setenv("VRAM_HIP_SYSFS", root, 1);
	b = fake_open();
	fake_mark();
	ASSERT_OK(backend_mem_info(b, 0, &free_b, &total));
	EXPECT_NO_MORE_CALLS();
	ASSERT_UEQ(total, 1ull << 30);
	ASSERT_UEQ(free_b, 768ull << 20);
	/* The files go: hipMemGetInfo from then on. */
	char path[256];
	snprintf(path, sizeof(path), "%s/mem_info_vram_used", dev);
	unlink(path);
	fake.other_used = 100ull << 20;
	ASSERT_OK(backend_mem_info(b, 0, &free_b, &total));
	EXPECT_CALL("hipMemGetInfo(dev0)");
	EXPECT_NO_MORE_CALLS();
	ASSERT_UEQ(free_b, (1ull << 30) - (100ull << 20));
	snprintf(path, sizeof(path), "%s/mem_info_vram_total", dev);
	unlink(path);
	rmdir(dev);
	rmdir(root);
	backend_destroy(b);
}

TEST(free_memory_when_the_runtime_cannot_say)
{
	struct backend *b = fake_open();
	struct chunk c = { .size = 4 * GRAN, .fd = -1 };
	uint64_t free_b, total;

	ASSERT_OK(backend_chunk_create(b, 0, &c));
	fake_fail_call("hipMemGetInfo", 1, hipErrorUnknown);
	/* What vramd knows: the total less its own chunks. */
	ASSERT_OK(backend_mem_info(b, 0, &free_b, &total));
	ASSERT_UEQ(free_b, (1ull << 30) - 4 * GRAN);
	backend_chunk_release(b, 0, &c);
	backend_destroy(b);
}

/* The memory of released chunks shows up as free: no wait, no report. */
TEST(release_that_shows_up_is_not_reported)
{
	struct backend *b = fake_open();
	struct chunk c[3];
	uint64_t free_b, total;

	for (int i = 0; i < 3; i++) {
		c[i] = (struct chunk){ .size = 2 * GRAN, .fd = -1 };
		ASSERT_OK(backend_chunk_create(b, 0, &c[i]));
	}
	for (int i = 0; i < 3; i++)
		backend_chunk_release(b, 0, &c[i]);
	ASSERT(!backend_settled(b));
	double t0 = now_s();
	fake_mark();
	backend_settle(b);
	EXPECT_CALL("hipMemGetInfo(dev0)");
	EXPECT_NO_MORE_CALLS();
	ASSERT(now_s() - t0 < 0.05);
	ASSERT(backend_settled(b));
	ASSERT_OK(backend_mem_info(b, 0, &free_b, &total));
	ASSERT_UEQ(free_b, total);
	ASSERT_UEQ(backend_hip_release_misses(b), 0);
	backend_destroy(b);
}

/* Released memory that stays in use (another holder, or a runtime that
 * keeps it) is waited for, boundedly, and reported. */
TEST(release_that_does_not_show_up_is_reported)
{
	struct backend *b;
	struct chunk c = { .size = 4 * GRAN, .fd = -1 };
	uint64_t free_b, total;

	setenv("VRAM_HIP_RELEASE_WAIT_MS", "40", 1);
	b = fake_open();
	ASSERT_OK(backend_chunk_create(b, 0, &c));
	fake.hold = 1;
	backend_chunk_release(b, 0, &c);
	/* A reading never waits; the settle does. */
	ASSERT_OK(backend_mem_info(b, 0, &free_b, &total));
	ASSERT_UEQ(backend_hip_release_misses(b), 0);
	double t0 = now_s();
	backend_settle(b);
	double waited = now_s() - t0;
	ASSERT(waited >= 0.035);
	ASSERT(waited < 1.0);
	ASSERT_UEQ(backend_hip_release_misses(b), 1);
	ASSERT_OK(backend_mem_info(b, 0, &free_b, &total));
	ASSERT_UEQ(free_b, total - 4 * GRAN);
	/* Reported once: the next settle does not wait. */
	ASSERT(backend_settled(b));
	t0 = now_s();
	backend_settle(b);
	ASSERT(now_s() - t0 < 0.03);
	ASSERT_UEQ(backend_hip_release_misses(b), 1);
	/* A chunk made in between counts against what should come back. */
	fake.hold = 0;
	fake.used[0] = 0;
	struct chunk d = { .size = 2 * GRAN, .fd = -1 };
	ASSERT_OK(backend_chunk_create(b, 0, &c));
	backend_chunk_release(b, 0, &c);
	ASSERT_OK(backend_chunk_create(b, 0, &d));
	backend_settle(b);
	ASSERT_UEQ(backend_hip_release_misses(b), 1);
	backend_chunk_release(b, 0, &d);
	backend_destroy(b);
}

TEST(release_check_can_be_off)
{
	struct backend *b;
	struct chunk c = { .size = 4 * GRAN, .fd = -1 };
	uint64_t free_b, total;

	setenv("VRAM_HIP_RELEASE_WAIT_MS", "0", 1);
	b = fake_open();
	ASSERT_OK(backend_chunk_create(b, 0, &c));
	fake.hold = 1;
	fake_mark();
	backend_chunk_release(b, 0, &c);
	EXPECT_CALL("hipMemRelease(h2)");
	EXPECT_NO_MORE_CALLS();
	ASSERT(backend_settled(b));
	backend_settle(b);
	ASSERT_OK(backend_mem_info(b, 0, &free_b, &total));
	ASSERT_UEQ(backend_hip_release_misses(b), 0);
	backend_destroy(b);
}

/* ---- a pool of several chunks through pool.c ----------------------------- */

static int sess_a;
#define A ((struct session *)&sess_a)

/* A pool's chunks are each made, exported and released on their own; a
 * resume that fails at any step leaves the pool PAUSED with nothing held,
 * and the next resume works. */
TEST(pool_of_chunks_pause_and_resume)
{
	struct backend *b = fake_open();
	struct identity who = { .pid = 1, .uid = 1000, .gid = 1000 };
	struct pool *p;
	unsigned first;
	int fds = harness_count_fds(0);

	ASSERT_OK(pool_create(1, "kv", "kv_cache", 0, POOL_DISCARD, 0,
			      64 * GRAN, NULL, A, &who, &p));
	ASSERT_OK(pool_mapper_add(p, A, &who, false));
	/* 5 granules in chunks of at most 2: three chunks, three handles. */
	fake_mark();
	ASSERT_OK(pool_grow(p, b, 5 * GRAN, 2 * GRAN, 240, &first));
	ASSERT_EQ(p->n_chunks, 3);
	for (unsigned i = 0; i < 3; i++) {
		EXPECT_CALL("hipMemCreate(%#zx,dev0) =h%u",
			    (size_t)p->chunks[i].size, i + 2);
		EXPECT_CALL("hipMemExportToShareableHandle(h%u,1)", i + 2);
		ASSERT(p->chunks[i].fd >= 0);
		ASSERT(p->chunks[i].handle != 0);
	}
	EXPECT_NO_MORE_CALLS();
	ASSERT_EQ(fake_live_handles(), 3);

	uint64_t ev = 0;
	struct pool_next nx;
	for (int cycle = 0; cycle < 2; cycle++) {
		/* Pause: the daemon lets go of each chunk once. */
		ASSERT_EQ(pool_pause(p, b, &ev, 0, &nx), POOL_STEP_SEND);
		ASSERT_EQ(pool_ack(p, A, ev, 0), 1);
		ASSERT_EQ(pool_advance(p, b, &ev, &nx), POOL_STEP_DONE);
		ASSERT_UEQ(nx.bytes, 5 * GRAN);
		ASSERT_EQ(p->state, POOL_PAUSED);
		ASSERT_EQ(fake_live_handles(), 0);
		ASSERT_EQ(fake.bad_releases, 0);
		ASSERT_UEQ(fake.used[0], 0);
		ASSERT_EQ(harness_count_fds(0), fds);
		/* Resume, failing at each of its 6 calls in turn. */
		for (long k = 1; k <= 6; k++) {
			fake_fail_nth(k, k % 2 ? hipErrorOutOfMemory :
						 hipErrorInvalidValue);
			enum pool_step r = pool_resume(p, b, &ev, &nx);
			fake_fail_none();
			ASSERT_EQ(r, POOL_STEP_FAILED);
			ASSERT_EQ(p->state, POOL_PAUSED);
			ASSERT_EQ(fake_live_handles(), 0);
			ASSERT_EQ(harness_count_fds(0), fds);
			ASSERT_UEQ(b->used_bytes, 0);
		}
		ASSERT_EQ(fake.bad_releases, 0);
		ASSERT_EQ(pool_resume(p, b, &ev, &nx), POOL_STEP_SEND);
		ASSERT_EQ(pool_ack(p, A, ev, 0), 1);
		ASSERT_EQ(pool_advance(p, b, &ev, &nx), POOL_STEP_DONE);
		ASSERT_EQ(p->state, POOL_ACTIVE);
		ASSERT_EQ(fake_live_handles(), 3);
		ASSERT_UEQ(p->chunks[2].offset, 4 * GRAN);
	}
	pool_destroy(p, b);
	ASSERT_EQ(fake_live_handles(), 0);
	ASSERT_EQ(fake.bad_releases, 0);
	ASSERT_EQ(harness_count_fds(0), fds);
	backend_destroy(b);
}

TEST(errno_mapping)
{
	ASSERT_EQ(hip_errno(hipSuccess), 0);
	ASSERT_EQ(hip_errno(hipErrorOutOfMemory), -ENOMEM);
	ASSERT_EQ(hip_errno(hipErrorInvalidValue), -EINVAL);
	ASSERT_EQ(hip_errno(hipErrorInvalidHandle), -EINVAL);
	ASSERT_EQ(hip_errno(hipErrorNoDevice), -ENODEV);
	ASSERT_EQ(hip_errno(hipErrorInvalidDevice), -ENODEV);
	ASSERT_EQ(hip_errno(hipErrorInsufficientDriver), -ENODEV);
	ASSERT_EQ(hip_errno(hipErrorNotInitialized), -ENXIO);
	ASSERT_EQ(hip_errno(hipErrorNotSupported), -ENOTSUP);
	ASSERT_EQ(hip_errno(hipErrorHostMemoryAlreadyRegistered), -EEXIST);
	ASSERT_EQ(hip_errno(hipErrorIllegalAddress), -EIO);
	ASSERT_EQ(hip_errno(12345), -EIO);
}

/* The allocation properties as ROCm 6 and 7 lay them out (CUDA's layout
 * without its reserved bytes). */
TEST(allocation_properties_layout)
{
	ASSERT_EQ(offsetof(hipMemAllocationProp, type), 0);
	ASSERT_EQ(offsetof(hipMemAllocationProp, requestedHandleType), 4);
	ASSERT_EQ(offsetof(hipMemAllocationProp, location), 8);
	ASSERT_EQ(offsetof(hipMemAllocationProp, win32HandleMetaData), 16);
	ASSERT_EQ(offsetof(hipMemAllocationProp, allocFlags), 24);
	ASSERT_EQ(sizeof(hipMemAllocationProp), 32);
	ASSERT_EQ(sizeof(hipMemLocation), 8);
	ASSERT_EQ(sizeof(hipMemAccessDesc), 12);
	ASSERT_EQ(sizeof(hipUUID), 16);
	hipMemAllocationProp prop;
	hip_chunk_prop(&prop, 3);
	ASSERT_EQ(prop.type, hipMemAllocationTypePinned);
	ASSERT_EQ(prop.requestedHandleType,
		  hipMemHandleTypePosixFileDescriptor);
	ASSERT_EQ(prop.location.type, hipMemLocationTypeDevice);
	ASSERT_EQ(prop.location.id, 3);
}

/* On a machine with ROCm (make test there): the real runtime's devices. */
TEST(real_runtime_devices)
{
	struct backend_config cfg = hip_config();
	struct backend *b = NULL;
	uint64_t free_b, total;
	int r;

	unsetenv("VRAM_LIBHIP");
	r = backend_hip_open(&cfg, &b);
	if (r == -ENOENT || r == -ENODEV || r == -ENOSYS)
		SKIP("no usable HIP runtime or device here (%s)", strerror(-r));
	ASSERT_OK(r);
	ASSERT_GT(b->n_devices, 0);
	for (unsigned i = 0; i < b->n_devices; i++) {
		ASSERT_GT(b->devices[i].total_bytes, 0);
		ASSERT_EQ(b->devices[i].granularity &
				  (b->devices[i].granularity - 1),
			  0);
		ASSERT_OK(backend_mem_info(b, i, &free_b, &total));
		ASSERT_LE(free_b, total);
	}
	backend_destroy(b);
}
