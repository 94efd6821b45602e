/* SPDX-License-Identifier: Apache-2.0 */
/* libvram's HIP half without AMD hardware: an absent or unusable runtime,
 * and every operation against a recording stand-in for the HIP runtime
 * (tests/unit/hip_fake.h). Checked: the exact calls of a grow (carving a
 * reservation per chunk), a pause (unmap, release, free the range,
 * reserve it again at the same address) and a resume (import, map at the
 * same address, set access); that a pause frees the device memory on a
 * runtime with the ROCm behaviour only when ranges are re-reserved; that
 * a re-reserve landing elsewhere fails the pause with EADDRNOTAVAIL and
 * both addresses, leaks nothing and is retried by the resume; that a
 * failure injected at every step of a pause, a resume or a grow leaves
 * nothing mapped twice, nothing released twice, and a state the next call
 * goes on from; copies, host registration, devices; and a pool of many
 * chunks through mapping.c. */
#include <sys/mman.h>
#include <unistd.h>

#include "error.h"
#include "hip_fake.h"
#include "hip.h"
#include "mapping.h"
#include "test.h"
#include "vmm.h"

#define GRAN (2ull << 20)
#define RES (16 * GRAN)
#define X(a) ((unsigned long)(a))

#define RESERVE(size, align, hint, got)                           \
	EXPECT_CALL("hipMemAddressReserve(%#zx,%#zx,%#lx) =%#lx", \
		    (size_t)(size), (size_t)(align), X(hint), X(got))
#define AFREE(addr, size) \
	EXPECT_CALL("hipMemAddressFree(%#lx,%#zx)", X(addr), (size_t)(size))
#define IMPORT(a, dev, h)                                                      \
	EXPECT_CALL("hipMemImportFromShareableHandle(a%d,dev%d) =h%d", a, dev, \
		    h)
#define MAP(addr, size, h) \
	EXPECT_CALL("hipMemMap(%#lx,%#zx,h%d)", X(addr), (size_t)(size), h)
#define ACCESS(addr, size, dev, mode)                               \
	EXPECT_CALL("hipMemSetAccess(%#lx,%#zx,dev%d,%s)", X(addr), \
		    (size_t)(size), dev, mode)
#define UNMAP(addr, size) \
	EXPECT_CALL("hipMemUnmap(%#lx,%#zx)", X(addr), (size_t)(size))
#define RELEASE(h) EXPECT_CALL("hipMemRelease(h%d)", h)

static struct vmm *hip_vmm(void)
{
	struct hip_api a = fake_hip_api();
	struct vmm *v = NULL;

	ASSERT_OK(vmm_hip_open_with(&a, &v));
	ASSERT_STREQ(v->ops->name, "hip");
	return v;
}

static struct vmm_hip_stats stats(struct vmm *v)
{
	struct vmm_hip_stats st;
	ASSERT_OK(vmm_hip_stats(v, &st));
	return st;
}

/* Nothing leaked and nothing released twice, once all is undone. */
static void assert_clean(void)
{
	ASSERT_EQ(fake_live_handles(), 0);
	ASSERT_EQ(fake_live_maps(), 0);
	ASSERT_EQ(fake_live_res(), 0);
	ASSERT_EQ(fake.bad_releases, 0);
	ASSERT_EQ(fake.wrong_device, 0);
	ASSERT_UEQ(fake.used[0], 0);
}

TEST(no_library_is_enoent)
{
	struct vmm *v = NULL;

	setenv("VRAM_LIBHIP", "/nonexistent/libamdhip64.so", 1);
	ASSERT_EQ(vmm_hip_open(&v), -ENOENT);
	ASSERT_EQ(vmm_open("hip", &v), -ENOENT);
	ASSERT(v == NULL);
	/* A library that is not the runtime. */
	setenv("VRAM_LIBHIP", "libc.so.6", 1);
	ASSERT_EQ(vmm_hip_open(&v), -ENOSYS);
	ASSERT(v == NULL);
}

TEST(incomplete_table_is_einval)
{
	struct hip_api a = fake_hip_api();
	struct vmm *v = NULL;

	a.hipMemAddressFree = NULL;
	ASSERT_EQ(vmm_hip_open_with(&a, &v), -EINVAL);
	ASSERT(strstr(error_get(), "hipMemAddressFree") != NULL);
}

TEST(open_calls_nothing)
{
	fake_mark();
	struct vmm *v = hip_vmm();
	EXPECT_NO_MORE_CALLS();
	vmm_destroy(v);
	EXPECT_NO_MORE_CALLS();
}

TEST(old_runtime_is_enosys)
{
	struct vmm *v;
	uintptr_t base;

	fake.version = 50221153; /* HIP 5.2, Debian 12's */
	v = hip_vmm();
	ASSERT_EQ(v->ops->reserve(v, 0, RES, GRAN, &base), -ENOSYS);
	ASSERT(strstr(error_get(), "6.0") != NULL);
	/* Remembered, with its reason. */
	ASSERT_EQ(v->ops->sync(v, 0), -ENOSYS);
	ASSERT(strstr(error_get(), "5.2") != NULL);
	vmm_destroy(v);
}

TEST(no_device_is_enodev)
{
	struct vmm *v = hip_vmm();
	uintptr_t base;

	ASSERT_EQ(v->ops->reserve(v, 3, RES, GRAN, &base), -ENODEV);
	ASSERT(strstr(error_get(), "HIP_VISIBLE_DEVICES") != NULL);
	vmm_destroy(v);

	fake.init_error = hipErrorNoDevice;
	v = hip_vmm();
	ASSERT_EQ(v->ops->reserve(v, 0, RES, GRAN, &base), -ENODEV);
	ASSERT_EQ(v->ops->sync(v, 0), -ENODEV);
	vmm_destroy(v);
}

/* The calls of a grow, a pause and a resume of a pool of two chunks. */
TEST(grow_pause_resume_call_sequences)
{
	struct vmm *v = hip_vmm();
	uintptr_t base, h1, h2;
	int fd1 = fake_chunk_fd(2 * GRAN), fd2 = fake_chunk_fd(GRAN);

	fake_mark();
	ASSERT_OK(v->ops->reserve(v, 0, RES, GRAN, &base));
	EXPECT_CALL("hipInit(0)");
	EXPECT_CALL("hipRuntimeGetVersion()");
	EXPECT_CALL("hipGetDeviceCount()");
	RESERVE(RES, GRAN, 0, base);
	EXPECT_NO_MORE_CALLS();
	ASSERT_EQ(stats(v).rereserve, 1); /* auto on HIP 7.2 */

	/* Grow: each chunk gets its own reservation, carved out of the
	 * range's tail at the same addresses, then import, map, access. */
	fake_mark();
	ASSERT_OK(v->ops->map(v, 0, base, 2 * GRAN, fd1, 0, &h1));
	AFREE(base, RES);
	RESERVE(2 * GRAN, 0, base, base);
	RESERVE(RES - 2 * GRAN, 0, base + 2 * GRAN, base + 2 * GRAN);
	IMPORT(1, 0, 1);
	MAP(base, 2 * GRAN, 1);
	ACCESS(base, 2 * GRAN, 0, "rw");
	EXPECT_NO_MORE_CALLS();
	fake_mark();
	ASSERT_OK(v->ops->map(v, 0, base + 2 * GRAN, GRAN, fd2, 0, &h2));
	AFREE(base + 2 * GRAN, RES - 2 * GRAN);
	RESERVE(GRAN, 0, base + 2 * GRAN, base + 2 * GRAN);
	RESERVE(RES - 3 * GRAN, 0, base + 3 * GRAN, base + 3 * GRAN);
	IMPORT(2, 0, 2);
	MAP(base + 2 * GRAN, GRAN, 2);
	ACCESS(base + 2 * GRAN, GRAN, 0, "rw");
	EXPECT_NO_MORE_CALLS();
	ASSERT_UEQ(fake.used[0], 3 * GRAN);
	ASSERT_EQ(stats(v).reservations, 3);
	/* The memory is there, read-write. */
	((volatile char *)base)[2 * GRAN + 5] = 7;

	/* Pause: wait, then per chunk unmap, release its own handle, free
	 * its range and reserve the same address again. */
	fake_mark();
	ASSERT_OK(v->ops->sync(v, 0));
	ASSERT_OK(v->ops->unmap(v, 0, base, 2 * GRAN, h1));
	ASSERT_OK(v->ops->unmap(v, 0, base + 2 * GRAN, GRAN, h2));
	EXPECT_CALL("hipDeviceSynchronize(dev0)");
	UNMAP(base, 2 * GRAN);
	RELEASE(1);
	AFREE(base, 2 * GRAN);
	RESERVE(2 * GRAN, 0, base, base);
	UNMAP(base + 2 * GRAN, GRAN);
	RELEASE(2);
	AFREE(base + 2 * GRAN, GRAN);
	RESERVE(GRAN, 0, base + 2 * GRAN, base + 2 * GRAN);
	EXPECT_NO_MORE_CALLS();
	/* The device memory really went (the fake keeps it while a range it
	 * was mapped in stays reserved, as ROCm does). */
	ASSERT_UEQ(fake.used[0], 0);
	ASSERT_EQ(stats(v).rereserves, 2);
	ASSERT_EQ(stats(v).mapped, 0);

	/* Resume: new chunks at the same addresses; nothing to carve. */
	int fd3 = fake_chunk_fd(2 * GRAN), fd4 = fake_chunk_fd(GRAN);
	fake_mark();
	ASSERT_OK(v->ops->map(v, 0, base, 2 * GRAN, fd3, 0, &h1));
	ASSERT_OK(v->ops->map(v, 0, base + 2 * GRAN, GRAN, fd4, 0, &h2));
	IMPORT(3, 0, 3);
	MAP(base, 2 * GRAN, 3);
	ACCESS(base, 2 * GRAN, 0, "rw");
	IMPORT(4, 0, 4);
	MAP(base + 2 * GRAN, GRAN, 4);
	ACCESS(base + 2 * GRAN, GRAN, 0, "rw");
	EXPECT_NO_MORE_CALLS();

	/* Close: unmap, then every reservation freed. */
	ASSERT_OK(v->ops->unmap(v, 0, base, 2 * GRAN, h1));
	ASSERT_OK(v->ops->unmap(v, 0, base + 2 * GRAN, GRAN, h2));
	fake_mark();
	ASSERT_OK(v->ops->unreserve(v, base, RES));
	AFREE(base, 2 * GRAN);
	AFREE(base + 2 * GRAN, GRAN);
	AFREE(base + 3 * GRAN, RES - 3 * GRAN);
	EXPECT_NO_MORE_CALLS();
	assert_clean();
	close(fd1);
	close(fd2);
	close(fd3);
	close(fd4);
	vmm_destroy(v);
}

/* What the re-reserve is for: on a runtime that keeps released memory
 * while its range is reserved, only the re-reserve frees it at pause. */
static void pause_once(const char *mode, int quirk, size_t used_after)
{
	struct vmm *v;
	uintptr_t base, h;
	int fd = fake_chunk_fd(4 * GRAN);

	setenv("VRAM_HIP_RERESERVE", mode, 1);
	fake.rocm_quirk = quirk;
	v = hip_vmm();
	ASSERT_OK(v->ops->reserve(v, 0, RES, GRAN, &base));
	ASSERT_OK(v->ops->map(v, 0, base, 4 * GRAN, fd, 0, &h));
	ASSERT_UEQ(fake.used[0], 4 * GRAN);
	ASSERT_OK(v->ops->unmap(v, 0, base, 4 * GRAN, h));
	ASSERT_UEQ(fake.used[0], used_after);
	ASSERT_OK(v->ops->unreserve(v, base, RES));
	assert_clean();
	close(fd);
	vmm_destroy(v);
}

TEST(pause_frees_memory_with_rereserve)
{
	pause_once("always", 1, 0);
}

TEST(pause_without_rereserve_keeps_memory_on_rocm)
{
	/* Memory comes back only when the pool's range is freed. */
	pause_once("never", 1, 4 * GRAN);
}

TEST(pause_without_rereserve_frees_on_a_fixed_runtime)
{
	pause_once("never", 0, 0);
}

TEST(never_makes_the_cuda_calls_only)
{
	struct vmm *v;
	uintptr_t base, h;
	int fd = fake_chunk_fd(2 * GRAN);

	setenv("VRAM_HIP_RERESERVE", "never", 1);
	v = hip_vmm();
	ASSERT_OK(v->ops->reserve(v, 0, RES, GRAN, &base));
	fake_mark();
	ASSERT_OK(v->ops->map(v, 0, base + 2 * GRAN, 2 * GRAN, fd, 0, &h));
	ASSERT_OK(v->ops->unmap(v, 0, base + 2 * GRAN, 2 * GRAN, h));
	ASSERT_OK(v->ops->unreserve(v, base, RES));
	IMPORT(1, 0, 1);
	MAP(base + 2 * GRAN, 2 * GRAN, 1);
	ACCESS(base + 2 * GRAN, 2 * GRAN, 0, "rw");
	UNMAP(base + 2 * GRAN, 2 * GRAN);
	RELEASE(1);
	AFREE(base, RES);
	EXPECT_NO_MORE_CALLS();
	ASSERT_EQ(stats(v).rereserve, 0);
	assert_clean();
	close(fd);
	vmm_destroy(v);
}

TEST(rereserve_setting)
{
	struct vmm *v;
	uintptr_t base;

	ASSERT_EQ(vmm_hip_rereserve_parse("auto"), VMM_HIP_RERESERVE_AUTO);
	ASSERT_EQ(vmm_hip_rereserve_parse("always"), VMM_HIP_RERESERVE_ALWAYS);
	ASSERT_EQ(vmm_hip_rereserve_parse("1"), VMM_HIP_RERESERVE_ALWAYS);
	ASSERT_EQ(vmm_hip_rereserve_parse("never"), VMM_HIP_RERESERVE_NEVER);
	ASSERT_EQ(vmm_hip_rereserve_parse("0"), VMM_HIP_RERESERVE_NEVER);
	ASSERT_EQ(vmm_hip_rereserve_parse("sometimes"), -EINVAL);
	ASSERT_EQ(vmm_hip_rereserve_parse(NULL), -EINVAL);
	/* No release is known to carry the fix: auto re-reserves on all. */
	ASSERT_EQ(vmm_hip_rereserve_needed(60032830), 1); /* 6.0 */
	ASSERT_EQ(vmm_hip_rereserve_needed(60443482), 1); /* 6.4 */
	ASSERT_EQ(vmm_hip_rereserve_needed(70226015), 1); /* 7.2 */
	ASSERT_EQ(vmm_hip_rereserve_needed(79999999), 1);

	/* A bad value is ignored: auto. */
	setenv("VRAM_HIP_RERESERVE", "sometimes", 1);
	v = hip_vmm();
	ASSERT_EQ(stats(v).rereserve, 0); /* not decided before the runtime */
	ASSERT_OK(v->ops->reserve(v, 0, RES, GRAN, &base));
	ASSERT_EQ(stats(v).rereserve, 1);
	ASSERT_EQ(stats(v).runtime_version, 70226015);
	ASSERT_OK(v->ops->unreserve(v, base, RES));
	vmm_destroy(v);
	setenv("VRAM_HIP_RERESERVE", "never", 1);
	v = hip_vmm();
	ASSERT_OK(v->ops->reserve(v, 0, RES, GRAN, &base));
	ASSERT_EQ(stats(v).rereserve, 0);
	ASSERT_OK(v->ops->unreserve(v, base, RES));
	vmm_destroy(v);
	setenv("VRAM_HIP_RERESERVE", "always", 1);
	v = hip_vmm();
	ASSERT_OK(v->ops->reserve(v, 0, RES, GRAN, &base));
	ASSERT_EQ(stats(v).rereserve, 1);
	ASSERT_OK(v->ops->unreserve(v, base, RES));
	vmm_destroy(v);
	assert_clean();
}

/* Another allocator takes the address between the free and the
 * re-reserve: the pause fails clearly, nothing moves or leaks, and the
 * resume gets the address back once it is free. */
TEST(rereserve_elsewhere_fails_the_pause_and_resume_retries)
{
	struct vmm *v = hip_vmm();
	uintptr_t base, h1, h2;
	int fd1 = fake_chunk_fd(2 * GRAN), fd2 = fake_chunk_fd(GRAN);
	char want[64];

	ASSERT_OK(v->ops->reserve(v, 0, RES, GRAN, &base));
	ASSERT_OK(v->ops->map(v, 0, base, 2 * GRAN, fd1, 0, &h1));
	ASSERT_OK(v->ops->map(v, 0, base + 2 * GRAN, GRAN, fd2, 0, &h2));
	ASSERT_EQ(fake_live_res(), 3);

	fake.steal_next_free = 1;
	fake_mark();
	ASSERT_EQ(v->ops->unmap(v, 0, base, 2 * GRAN, h1), -EADDRNOTAVAIL);
	UNMAP(base, 2 * GRAN);
	RELEASE(1);
	AFREE(base, 2 * GRAN);
	ASSERT(fake.cursor < fake.n_lines);
	uintptr_t other = 0;
	ASSERT_EQ(sscanf(fake.lines[fake.cursor],
			 "hipMemAddressReserve(%*x,%*x,%*x) =%lx", &other),
		  1);
	ASSERT(other != base);
	RESERVE(2 * GRAN, 0, base, other);
	AFREE(other, 2 * GRAN); /* the wrong one, freed at once */
	EXPECT_NO_MORE_CALLS();
	/* The message names both addresses. */
	snprintf(want, sizeof(want), "%#lx", X(base));
	ASSERT(strstr(error_get(), want) != NULL);
	snprintf(want, sizeof(want), "%#lx", X(other));
	ASSERT(strstr(error_get(), want) != NULL);
	/* The chunk is unmapped and released once; its piece is lost, the
	 * other chunk untouched. */
	ASSERT_EQ(stats(v).lost, 1);
	ASSERT_EQ(stats(v).reservations, 2);
	ASSERT_EQ(stats(v).mapped, 1);
	ASSERT_EQ(fake_live_handles(), 1);
	ASSERT_EQ(fake_live_res(), 2);
	/* The rest of the pause goes on. */
	ASSERT_OK(v->ops->unmap(v, 0, base + 2 * GRAN, GRAN, h2));
	ASSERT_UEQ(fake.used[0], 0);

	/* Resume while the address is taken: fails, holds nothing. */
	fake_mark();
	ASSERT_EQ(v->ops->map(v, 0, base, 2 * GRAN, fd1, 0, &h1),
		  -EADDRNOTAVAIL);
	ASSERT_EQ(fake_live_handles(), 0);
	ASSERT_EQ(fake_live_maps(), 0);
	ASSERT_EQ(fake_live_res(), 2);
	/* Once it is free again, the resume maps at the same address. */
	fake_unsteal();
	fake_mark();
	ASSERT_OK(v->ops->map(v, 0, base, 2 * GRAN, fd1, 0, &h1));
	RESERVE(2 * GRAN, 0, base, base);
	IMPORT(1, 0, 3);
	MAP(base, 2 * GRAN, 3);
	ACCESS(base, 2 * GRAN, 0, "rw");
	EXPECT_NO_MORE_CALLS();
	ASSERT_OK(v->ops->unmap(v, 0, base, 2 * GRAN, h1));
	ASSERT_OK(v->ops->unreserve(v, base, RES));
	assert_clean();
	close(fd1);
	close(fd2);
	vmm_destroy(v);
}

/* A resume may bring chunks of other sizes: the reservations are cut
 * again to fit (freed and reserved at the same addresses). */
TEST(resume_with_another_layout_recarves)
{
	struct vmm *v = hip_vmm();
	uintptr_t base, h1, h2, h3;
	int fd1 = fake_chunk_fd(2 * GRAN), fd2 = fake_chunk_fd(GRAN);
	int fd3 = fake_chunk_fd(3 * GRAN);

	ASSERT_OK(v->ops->reserve(v, 0, RES, GRAN, &base));
	ASSERT_OK(v->ops->map(v, 0, base, 2 * GRAN, fd1, 0, &h1));
	ASSERT_OK(v->ops->map(v, 0, base + 2 * GRAN, GRAN, fd2, 0, &h2));
	ASSERT_OK(v->ops->unmap(v, 0, base, 2 * GRAN, h1));
	ASSERT_OK(v->ops->unmap(v, 0, base + 2 * GRAN, GRAN, h2));
	fake_mark();
	ASSERT_OK(v->ops->map(v, 0, base, 3 * GRAN, fd3, 0, &h3));
	AFREE(base, 2 * GRAN);
	AFREE(base + 2 * GRAN, GRAN);
	RESERVE(3 * GRAN, 0, base, base);
	IMPORT(3, 0, 3);
	MAP(base, 3 * GRAN, 3);
	ACCESS(base, 3 * GRAN, 0, "rw");
	EXPECT_NO_MORE_CALLS();
	/* Mapping over a mapped chunk is refused, nothing touched. */
	fake_mark();
	ASSERT_EQ(v->ops->map(v, 0, base + 2 * GRAN, GRAN, fd2, 0, &h2),
		  -EBUSY);
	EXPECT_NO_MORE_CALLS();
	/* So is an address outside every range. */
	ASSERT_EQ(v->ops->map(v, 0, base + RES, GRAN, fd2, 0, &h2), -EINVAL);
	ASSERT_OK(v->ops->unmap(v, 0, base, 3 * GRAN, h3));
	ASSERT_OK(v->ops->unreserve(v, base, RES));
	assert_clean();
	close(fd1);
	close(fd2);
	close(fd3);
	vmm_destroy(v);
}

/* A range lost at unreserve time is not freed (it is not ours). */
TEST(unreserve_skips_lost_pieces)
{
	struct vmm *v = hip_vmm();
	uintptr_t base, h;
	int fd = fake_chunk_fd(2 * GRAN);

	ASSERT_OK(v->ops->reserve(v, 0, RES, GRAN, &base));
	ASSERT_OK(v->ops->map(v, 0, base + 4 * GRAN, 2 * GRAN, fd, 0, &h));
	fake.steal_next_free = 1;
	ASSERT_EQ(v->ops->unmap(v, 0, base + 4 * GRAN, 2 * GRAN, h),
		  -EADDRNOTAVAIL);
	fake_mark();
	ASSERT_OK(v->ops->unreserve(v, base, RES));
	AFREE(base, 4 * GRAN);
	AFREE(base + 6 * GRAN, RES - 6 * GRAN);
	EXPECT_NO_MORE_CALLS();
	fake_unsteal();
	assert_clean();
	close(fd);
	vmm_destroy(v);
}

/* Maps two chunks at base, base + 2 GRAN into a fresh range. */
static void two_chunks(struct vmm *v, uintptr_t *base, int fd[2],
		       uintptr_t h[2])
{
	ASSERT_OK(v->ops->reserve(v, 0, RES, GRAN, base));
	ASSERT_OK(v->ops->map(v, 0, *base, 2 * GRAN, fd[0], 0, &h[0]));
	ASSERT_OK(v->ops->map(v, 0, *base + 2 * GRAN, GRAN, fd[1], 0, &h[1]));
}

/* A failure at each step of a chunk's pause (unmap, release, free the
 * range, reserve it again): the call fails, the chunk is never mapped
 * again by accident nor released twice, the other chunk's pause goes on,
 * and the resume completes what was left (unmap again, release again,
 * free the range) and maps at the same address. */
TEST(failure_at_every_pause_step_is_retryable)
{
	const hipError_t err = hipErrorUnknown;
	int fd[2] = { fake_chunk_fd(2 * GRAN), fake_chunk_fd(GRAN) };

	for (long k = 1; k <= 4; k++) {
		struct vmm *v = hip_vmm();
		uintptr_t base, h[2];
		int bad = fake.bad_releases;

		two_chunks(v, &base, fd, h);
		int h0 = ((struct fake_handle *)h[0])->id;
		fake_fail_nth(k, err);
		fake_mark();
		int r = v->ops->unmap(v, 0, base, 2 * GRAN, h[0]);
		fake_fail_none();
		/* The step that failed names itself; a lost re-reserve is
		 * EADDRNOTAVAIL. */
		ASSERT_EQ(r, k == 4 ? -EADDRNOTAVAIL : -EIO);
		ASSERT(strstr(error_get(), k == 1 ? "hipMemUnmap" :
					   k == 2 ? "hipMemRelease" :
					   k == 3 ? "hipMemAddressFree" :
						    "hipMemAddressReserve") !=
		       NULL);
		/* The calls of a pause, the kth failing, the rest as far as
		 * they go. */
		char want[4][FAKE_LINE];
		snprintf(want[0], FAKE_LINE, "hipMemUnmap(%#lx,%#zx)", X(base),
			 (size_t)(2 * GRAN));
		snprintf(want[1], FAKE_LINE, "hipMemRelease(h%d)", h0);
		snprintf(want[2], FAKE_LINE, "hipMemAddressFree(%#lx,%#zx)",
			 X(base), (size_t)(2 * GRAN));
		snprintf(want[3], FAKE_LINE,
			 "hipMemAddressReserve(%#zx,0,%#lx)%s",
			 (size_t)(2 * GRAN), X(base), k == 4 ? "" : " =");
		int last = k == 1 ? 2 : k == 3 ? 3 : 4;
		for (int i = 0; i < last; i++) {
			if (i == 3 && k != 4)
				EXPECT_CALL("%s%#lx", want[i], X(base));
			else
				EXPECT_CALL("%s%s", want[i],
					    i == k - 1 ? " -> 999" : "");
		}
		EXPECT_NO_MORE_CALLS();
		ASSERT_EQ(stats(v).mapped, 1);
		/* The pause goes on with the other chunk. */
		ASSERT_OK(v->ops->unmap(v, 0, base + 2 * GRAN, GRAN, h[1]));
		ASSERT_EQ(stats(v).mapped, 0);

		/* The resume first finishes what the failed step left. */
		fake_mark();
		ASSERT_OK(v->ops->map(v, 0, base, 2 * GRAN, fd[0], 0, &h[0]));
		if (k == 1)
			UNMAP(base, 2 * GRAN); /* unmapped again */
		if (k == 2)
			RELEASE(h0); /* released again: the first failed */
		if (k == 1 || k == 3)
			AFREE(base, 2 * GRAN);
		if (k != 2)
			RESERVE(2 * GRAN, 0, base, base);
		IMPORT(1, 0, fake.n_handles);
		MAP(base, 2 * GRAN, fake.n_handles);
		ACCESS(base, 2 * GRAN, 0, "rw");
		EXPECT_NO_MORE_CALLS();
		ASSERT_EQ(fake.bad_releases, bad);
		ASSERT_EQ(fake_live_maps(), 1);
		ASSERT_EQ(fake_live_handles(), 1);
		/* Only the resumed chunk's memory is in use. */
		ASSERT_UEQ(fake.used[0], 2 * GRAN);
		ASSERT_OK(v->ops->unmap(v, 0, base, 2 * GRAN, h[0]));
		ASSERT_OK(v->ops->unreserve(v, base, RES));
		assert_clean();
		vmm_destroy(v);
	}
	close(fd[0]);
	close(fd[1]);
}

/* A failure at each step of a resume's map (import, map, set access):
 * nothing is held, the range stays, and the retry maps at the address. */
TEST(failure_at_every_resume_step_holds_nothing)
{
	int fd[2] = { fake_chunk_fd(2 * GRAN), fake_chunk_fd(GRAN) };

	for (long k = 1; k <= 3; k++) {
		struct vmm *v = hip_vmm();
		uintptr_t base, h[2];

		two_chunks(v, &base, fd, h);
		ASSERT_OK(v->ops->unmap(v, 0, base, 2 * GRAN, h[0]));
		ASSERT_OK(v->ops->unmap(v, 0, base + 2 * GRAN, GRAN, h[1]));
		int res = fake_live_res();
		fake_fail_nth(k, hipErrorOutOfMemory);
		ASSERT_EQ(v->ops->map(v, 0, base, 2 * GRAN, fd[0], 0, &h[0]),
			  -ENOMEM);
		fake_fail_none();
		ASSERT_EQ(fake_live_handles(), 0);
		ASSERT_EQ(fake_live_maps(), 0);
		ASSERT_UEQ(fake.used[0], 0);
		ASSERT_EQ(fake_live_res(), res);
		ASSERT_EQ(stats(v).mapped, 0);
		fake_mark();
		ASSERT_OK(v->ops->map(v, 0, base, 2 * GRAN, fd[0], 0, &h[0]));
		IMPORT(1, 0, fake.n_handles);
		MAP(base, 2 * GRAN, fake.n_handles);
		ACCESS(base, 2 * GRAN, 0, "rw");
		EXPECT_NO_MORE_CALLS();
		ASSERT_OK(v->ops->unmap(v, 0, base, 2 * GRAN, h[0]));
		ASSERT_OK(v->ops->unreserve(v, base, RES));
		assert_clean();
		vmm_destroy(v);
	}
	close(fd[0]);
	close(fd[1]);
}

/* A failure at each step of a grow's first map (free the tail, reserve
 * the chunk's part, reserve the rest, import, map, set access): nothing
 * mapped or held, and the retry works at the same address. */
TEST(failure_at_every_grow_step_holds_nothing)
{
	int fd = fake_chunk_fd(2 * GRAN), fd2 = fake_chunk_fd(2 * GRAN);

	for (long k = 1; k <= 6; k++) {
		struct vmm *v = hip_vmm();
		uintptr_t base, h;

		ASSERT_OK(v->ops->reserve(v, 0, RES, GRAN, &base));
		fake_fail_nth(k, hipErrorOutOfMemory);
		int r = v->ops->map(v, 0, base, 2 * GRAN, fd, 0, &h);
		fake_fail_none();
		if (k == 3) {
			/* Only the rest of the range was not got back: the
			 * chunk is mapped, the rest is retried by the next
			 * chunk mapped there. */
			ASSERT_OK(r);
			ASSERT_EQ(stats(v).lost, 1);
			ASSERT_UEQ(fake_reserved_in(base, RES), 2 * GRAN);
			uintptr_t h2;
			ASSERT_OK(v->ops->map(v, 0, base + 2 * GRAN, 2 * GRAN,
					      fd2, 0, &h2));
			ASSERT_OK(v->ops->unmap(v, 0, base + 2 * GRAN, 2 * GRAN,
						h2));
			ASSERT_OK(v->ops->unmap(v, 0, base, 2 * GRAN, h));
			ASSERT_UEQ(fake_reserved_in(base, RES), RES);
			ASSERT_OK(v->ops->unreserve(v, base, RES));
			assert_clean();
			vmm_destroy(v);
			continue;
		}
		if (r != -ENOMEM && r != -EADDRNOTAVAIL) {
			fake_dump();
			TEST_FAIL("step %ld: %d (%s)", k, r, error_get());
		}
		ASSERT_EQ(fake_live_handles(), 0);
		ASSERT_EQ(fake_live_maps(), 0);
		ASSERT_UEQ(fake.used[0], 0);
		ASSERT_EQ(stats(v).mapped, 0);
		ASSERT_OK(v->ops->map(v, 0, base, 2 * GRAN, fd, 0, &h));
		ASSERT_OK(v->ops->unmap(v, 0, base, 2 * GRAN, h));
		/* The whole range is reserved again, as pieces. */
		ASSERT_UEQ(fake_reserved_in(base, RES), RES);
		ASSERT_OK(v->ops->unreserve(v, base, RES));
		assert_clean();
		vmm_destroy(v);
	}
	close(fd2);
	close(fd);
}

TEST(readonly_access_and_fallback)
{
	struct vmm *v = hip_vmm();
	uintptr_t base, h;
	int fd = fake_chunk_fd(GRAN);

	ASSERT_OK(v->ops->reserve(v, 0, RES, GRAN, &base));
	fake_mark();
	ASSERT_OK(v->ops->map(v, 0, base, GRAN, fd, 1, &h));
	fake.cursor += 3; /* the carve */
	IMPORT(1, 0, 1);
	MAP(base, GRAN, 1);
	ACCESS(base, GRAN, 0, "ro");
	EXPECT_NO_MORE_CALLS();
	ASSERT_OK(v->ops->unmap(v, 0, base, GRAN, h));
	/* A runtime that refuses read-only device access: read-write. */
	fake.no_readonly = 1;
	fake_mark();
	ASSERT_OK(v->ops->map(v, 0, base, GRAN, fd, 1, &h));
	IMPORT(1, 0, 2);
	MAP(base, GRAN, 2);
	EXPECT_CALL("hipMemSetAccess(%#lx,%#zx,dev0,ro) -> %d", X(base),
		    (size_t)GRAN, hipErrorNotSupported);
	ACCESS(base, GRAN, 0, "rw");
	EXPECT_NO_MORE_CALLS();
	((volatile char *)base)[0] = 1;
	ASSERT_OK(v->ops->unmap(v, 0, base, GRAN, h));
	ASSERT_OK(v->ops->unreserve(v, base, RES));
	assert_clean();
	close(fd);
	vmm_destroy(v);
}

TEST(set_access_failure_undoes_like_a_pause)
{
	struct vmm *v = hip_vmm();
	uintptr_t base, h;
	int fd = fake_chunk_fd(GRAN);

	ASSERT_OK(v->ops->reserve(v, 0, RES, GRAN, &base));
	fake_fail_call("hipMemSetAccess", 1, hipErrorInvalidValue);
	fake_mark();
	ASSERT_EQ(v->ops->map(v, 0, base, GRAN, fd, 0, &h), -EINVAL);
	ASSERT(strstr(error_get(), "hipMemSetAccess") != NULL);
	fake.cursor += 3; /* the carve */
	IMPORT(1, 0, 1);
	MAP(base, GRAN, 1);
	EXPECT_CALL("hipMemSetAccess(%#lx,%#zx,dev0,rw) -> %d", X(base),
		    (size_t)GRAN, hipErrorInvalidValue);
	UNMAP(base, GRAN);
	RELEASE(1);
	AFREE(base, GRAN);
	RESERVE(GRAN, 0, base, base);
	EXPECT_NO_MORE_CALLS();
	ASSERT_UEQ(fake.used[0], 0);
	ASSERT_OK(v->ops->unreserve(v, base, RES));
	assert_clean();
	close(fd);
	vmm_destroy(v);
}

TEST(chunk_fd_zero_is_imported)
{
	struct vmm *v = hip_vmm();
	uintptr_t base, h;
	int fd = fake_chunk_fd(GRAN);
	int saved = dup(0);

	/* A daemonized host program may have no stdin: the chunk gets fd 0,
	 * which ROCclr would take for "no handle". */
	ASSERT(saved >= 0);
	ASSERT_EQ(dup2(fd, 0), 0);
	ASSERT_OK(v->ops->reserve(v, 0, RES, GRAN, &base));
	ASSERT_OK(v->ops->map(v, 0, base, GRAN, 0, 0, &h));
	ASSERT_EQ(fake_live_handles(), 1);
	ASSERT(fcntl(0, F_GETFD) >= 0); /* the caller's fd is left open */
	ASSERT_OK(v->ops->unmap(v, 0, base, GRAN, h));
	ASSERT_OK(v->ops->unreserve(v, base, RES));
	dup2(saved, 0);
	close(saved);
	assert_clean();
	close(fd);
	vmm_destroy(v);
}

/* Calls set the device they concern and leave the thread's as it was. */
TEST(current_device_is_set_and_restored)
{
	struct vmm *v;
	uintptr_t base, h;
	int fd = fake_chunk_fd(GRAN);

	fake.n_devices = 2;
	v = hip_vmm();
	fake_cur_dev = 1; /* the host program's choice */
	ASSERT_OK(v->ops->reserve(v, 0, RES, GRAN, &base));
	fake_mark();
	ASSERT_OK(v->ops->map(v, 0, base, GRAN, fd, 0, &h));
	fake.cursor += 3;
	IMPORT(1, 0, 1);
	MAP(base, GRAN, 1);
	ACCESS(base, GRAN, 0, "rw");
	ASSERT_EQ(fake_cur_dev, 1);
	ASSERT_OK(v->ops->sync(v, 0));
	EXPECT_CALL("hipDeviceSynchronize(dev0)");
	ASSERT_EQ(fake_cur_dev, 1);
	ASSERT_OK(v->ops->unmap(v, 0, base, GRAN, h));
	ASSERT_EQ(fake_cur_dev, 1);
	/* A failure to set it fails the call, device unchanged. */
	fake_fail_call("hipSetDevice", 1, hipErrorInvalidDevice);
	ASSERT_EQ(v->ops->sync(v, 0), -ENODEV);
	ASSERT_EQ(fake_cur_dev, 1);
	ASSERT_OK(v->ops->unreserve(v, base, RES));
	assert_clean();
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

	setenv("VRAM_HIP_COPY_PIECE_MB", "1", 1);
	setenv("VRAM_HIP_COPY_STREAMS", "3", 1);
	v = hip_vmm();
	ASSERT_OK(v->ops->reserve(v, 0, 8 * GRAN, GRAN, &base));
	for (int i = 0; i < 3; i++) {
		fd[i] = fake_chunk_fd(sizes[i]);
		ASSERT_OK(v->ops->map(v, 0, base + off, sizes[i], fd[i], 0,
				      &h[i]));
		off += sizes[i];
	}
	uint8_t *host = malloc(total), *want = malloc(total);
	ASSERT(host && want);
	ASSERT_OK(v->ops->host_register(v, host, total));
	fill((uint8_t *)base, total, 7);
	memcpy(want, (void *)base, total);

	struct vmm_span spans[3] = {
		{ base, host, 2 * GRAN + 12345 },
		{ base + 2 * GRAN + 12345, host + 2 * GRAN + 12345, 1000 },
		{ base + 2 * GRAN + 13345, host + 2 * GRAN + 13345,
		  total - (2 * GRAN + 13345) },
	};
	ASSERT_OK(v->ops->copy(v, 0, 1, spans, 3));
	ASSERT_EQ(memcmp(host, want, total), 0);
	/* 1 MiB pieces: 5 + 1 + 8, on 3 streams made once. */
	ASSERT_EQ(fake.copies, 14);
	ASSERT_EQ(fake.n_streams, 3);
	ASSERT_EQ(fake.stream_syncs, 3);

	memset((void *)base, 0, total);
	ASSERT_OK(v->ops->copy(v, 0, 0, spans, 3));
	ASSERT_EQ(memcmp((void *)base, want, total), 0);
	ASSERT_EQ(fake.n_streams, 3);

	/* A failed copy still waits for what it issued. */
	int syncs = fake.stream_syncs;
	fake_fail_call("hipMemcpyAsync", 2, hipErrorIllegalAddress);
	ASSERT_EQ(v->ops->copy(v, 0, 1, spans, 3), -EIO);
	ASSERT_EQ(fake.stream_syncs, syncs + 2);

	off = 0;
	for (int i = 0; i < 3; i++) {
		ASSERT_OK(v->ops->unmap(v, 0, base + off, sizes[i], h[i]));
		off += sizes[i];
		close(fd[i]);
	}
	ASSERT_OK(v->ops->unreserve(v, base, 8 * GRAN));
	/* The registration stays until unregistered or destroyed. */
	ASSERT_EQ(fake.n_registered, 1);
	fake_mark();
	vmm_destroy(v);
	EXPECT_CALL("hipHostUnregister()");
	EXPECT_CALL("hipStreamDestroy()");
	EXPECT_CALL("hipStreamDestroy()");
	EXPECT_CALL("hipStreamDestroy()");
	EXPECT_NO_MORE_CALLS();
	ASSERT_EQ(fake.n_registered, 0);
	assert_clean();
	free(host);
	free(want);
}

/* Copy lanes: each has streams of its own, a wait syncs its lane's only,
 * and destroy drops both lanes' streams. */
TEST(copy_lanes_are_waited_for_apart)
{
	struct vmm *v;
	uintptr_t base, h;
	size_t total = 2 * GRAN;

	setenv("VRAM_HIP_COPY_STREAMS", "2", 1);
	v = hip_vmm();
	ASSERT(v->ops->copy_issue && v->ops->copy_wait);
	ASSERT_OK(v->ops->reserve(v, 0, total, GRAN, &base));
	int fd = fake_chunk_fd(total);
	ASSERT_OK(v->ops->map(v, 0, base, total, fd, 0, &h));
	uint8_t *host = malloc(total);
	ASSERT(host);
	memset(host, 7, total);

	struct vmm_span lo = { base, host, GRAN },
			hi = { base + GRAN, host + GRAN, GRAN };
	ASSERT_OK(v->ops->copy_issue(v, 0, 0, 0, &lo, 1));
	ASSERT_OK(v->ops->copy_issue(v, 0, 1, 0, &hi, 1));
	ASSERT_EQ(fake.n_streams, 4);
	int syncs = fake.stream_syncs;
	ASSERT_OK(v->ops->copy_wait(v, 0, 1));
	ASSERT_EQ(fake.stream_syncs, syncs + 2);
	ASSERT_OK(v->ops->copy_wait(v, 0, 0));
	ASSERT_EQ(fake.stream_syncs, syncs + 4);
	ASSERT_EQ(memcmp((void *)base, host, total), 0);

	ASSERT_OK(v->ops->unmap(v, 0, base, total, h));
	close(fd);
	ASSERT_OK(v->ops->unreserve(v, base, total));
	fake_mark();
	vmm_destroy(v);
	for (int i = 0; i < 4; i++)
		EXPECT_CALL("hipStreamDestroy()");
	EXPECT_NO_MORE_CALLS();
	assert_clean();
	free(host);
}

TEST(host_register_pairs)
{
	struct vmm *v = hip_vmm();
	char *a = malloc(4096), *b = malloc(4096);

	ASSERT_OK(v->ops->host_register(v, a, 4096));
	ASSERT_OK(v->ops->host_register(v, b, 4096));
	ASSERT_EQ(fake.n_registered, 2);
	ASSERT_OK(v->ops->host_unregister(v, a, 4096));
	ASSERT_EQ(v->ops->host_unregister(v, a, 4096), -ENOENT);
	fake_fail_call("hipHostRegister", 1, hipErrorOutOfMemory);
	ASSERT_EQ(v->ops->host_register(v, a, 4096), -ENOMEM);
	ASSERT_EQ(fake.n_registered, 1);
	vmm_destroy(v);
	ASSERT_EQ(fake.n_registered, 0);
	free(a);
	free(b);
}

/* ---- a pool of many chunks through mapping.c ---------------------------- */

static void descs(struct mapping_desc *d, int *fds, size_t n, uint64_t size)
{
	for (size_t i = 0; i < n; i++) {
		d[i].offset = i * size;
		d[i].size = size;
		d[i].fd = fds[i];
	}
}

/* An allocation is a list of chunks: each has its own import, released
 * once at every pause, and the pool comes back at the same addresses
 * after pauses that failed at any step. */
TEST(pool_of_chunks_through_mapping)
{
	enum { N = 4 };
	struct mapping_desc d[N];
	int fds[N];

	for (int i = 0; i < N; i++)
		fds[i] = fake_chunk_fd(2 * GRAN);
	/* k = 0: no failure; then the kth call of the pause fails. */
	for (long k = 0; k <= 4 * N; k++) {
		struct vmm *v = hip_vmm();
		struct mapping m;
		int bad = fake.bad_releases;

		mapping_init(&m, v, 0, 0);
		ASSERT_OK(mapping_reserve(&m, RES, GRAN));
		uintptr_t base = m.base;
		descs(d, fds, N, 2 * GRAN);
		ASSERT_OK(mapping_append(&m, d, N, 1));
		ASSERT_EQ(mapping_n_mapped(&m), N);
		ASSERT_EQ(fake_live_handles(), N);
		for (int i = 0; i < N; i++)
			((volatile char *)base)[i * 2 * GRAN] = (char)i;

		if (k)
			fake_fail_nth(k, hipErrorUnknown);
		int r = mapping_unmap_all(&m);
		fake_fail_none();
		ASSERT(k ? r < 0 : r == 0);
		/* Never half active: every chunk is unmapped here, each
		 * import released once. */
		ASSERT_EQ(mapping_n_mapped(&m), 0);
		ASSERT_EQ(stats(v).mapped, 0);
		ASSERT_EQ(fake.bad_releases, bad);
		ASSERT_EQ(m.base, base);

		/* Resume at the same addresses. */
		ASSERT_OK(mapping_remap(&m, d, N));
		ASSERT_EQ(m.base, base);
		ASSERT_EQ(mapping_n_mapped(&m), N);
		ASSERT_EQ(fake_live_handles(), N);
		for (int i = 0; i < N; i++)
			ASSERT_EQ(((volatile char *)base)[i * 2 * GRAN], i);
		mapping_release(&m);
		assert_clean();
		vmm_destroy(v);
	}
	for (int i = 0; i < N; i++)
		close(fds[i]);
}

/* True when some recorded call starts with prefix and contains needle. */
static int logged(const char *prefix, const char *needle)
{
	for (size_t i = 0; i < fake.n_lines; i++)
		if (strncmp(fake.lines[i], prefix, strlen(prefix)) == 0 &&
		    strstr(fake.lines[i], needle))
			return 1;
	return 0;
}

/* The daemon names its devices by UUID; HIP_VISIBLE_DEVICES may renumber
 * them here: the daemon's device 0 is mapped where it is in this process,
 * and one not visible here is a clear ENODEV. */
TEST(device_found_by_the_daemons_uuid)
{
	hipUUID u;
	char uuid[64];
	uintptr_t base, h;

	fake.n_devices = 2;
	ASSERT_EQ(fake_hip_api().hipDeviceGetUuid(&u, 1), hipSuccess);
	hip_format_uuid(&u, uuid, sizeof(uuid));

	struct vmm *v = hip_vmm();
	snprintf(v->dev_uuid[0], sizeof(v->dev_uuid[0]), "%s", uuid);
	int fd = fake_chunk_fd(GRAN);
	ASSERT_OK(v->ops->reserve(v, 0, RES, GRAN, &base));
	ASSERT_OK(v->ops->map(v, 0, base, GRAN, fd, 0, &h));
	ASSERT(logged("hipMemSetAccess", "dev1"));
	ASSERT(!logged("hipMemSetAccess", "dev0"));
	ASSERT_OK(v->ops->unmap(v, 0, base, GRAN, h));
	ASSERT_OK(v->ops->unreserve(v, base, RES));
	close(fd);
	vmm_destroy(v);

	v = hip_vmm();
	snprintf(v->dev_uuid[0], sizeof(v->dev_uuid[0]), "%s",
		 "GPU-nosuchdevice0000");
	ASSERT_EQ(v->ops->reserve(v, 0, RES, GRAN, &base), -ENODEV);
	ASSERT(strstr(error_get(), "not visible") != NULL);
	vmm_destroy(v);
	assert_clean();
}
