/* SPDX-License-Identifier: Apache-2.0 */
/* libvram's PyTorch allocator on the cuda backend, without a GPU: a vramd
 * and this process both run against the fake driver (tests/unit/cuda_fake/),
 * the node has two devices and this process sees only the second
 * (CUDA_VISIBLE_DEVICES=1), as a worker of an engine that gives each rank
 * one GPU does. PyTorch then calls this process's device 0 what the daemon
 * calls device 1. Checked: an allocation on local device 0 comes from a
 * pool on the daemon's device 1 and is mapped for local device 0; one on
 * another device, or from a pool on a device this process cannot see,
 * fails and says why; growing a pool runs in the relaxed capture mode and
 * puts the thread's mode back; free waits for the allocation's stream
 * unless it captures a graph. */
#include <unistd.h>

#include "cuda_fake.h"
#include "harness.h"
#include "pool.h"
#include "test.h"
#include "vram.h"

#define MiB (1ull << 20)
/* The fake's physical device 1 (UUID bytes 16..31). */
#define UUID_OF_1 "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f"

/* libvram reaches its CUDA half through a weak reference, which does not
 * pull it out of the archive this test links: this one does. */
int (*const torch_test_cuda_half)(struct vmm **) = vmm_cuda_open;

static struct harness_daemon torch_daemon;
static void (*fake_set_capturing)(void *stream);

/* vramd on the fake cuda backend with both devices, then this process
 * narrowed to the second one. */
static vram_client *worker_of_device_1(void)
{
	const char *const extra[] = { "--backend", "cuda", "--ack-timeout-ms",
				      "20000", NULL };
	vram_client *c = NULL;
	void *lib;

	cuda_fake_load_shared();
	setenv("VRAM_LIBNVML", "/nonexistent/libnvidia-ml.so.1", 1);
	setenv("FAKE_CUDA_DEVICES", "2", 1);
	unsetenv("CUDA_VISIBLE_DEVICES"); /* the daemon sees every device */
	int r = harness_daemon_start(&torch_daemon, extra);
	if (r < 0)
		TEST_FAIL("cannot start vramd --backend cuda: %s",
			  strerror(-r));
	setenv("CUDA_VISIBLE_DEVICES", "1", 1);
	lib = dlopen(getenv("VRAM_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
	ASSERT(lib != NULL);
	fake_set_capturing = (void (*)(void *))dlsym(lib, "fake_set_capturing");
	ASSERT(fake_set_capturing != NULL);
	r = vram_connect(NULL, "torch-worker", 0, &c);
	if (r < 0)
		TEST_FAIL("vram_connect: %s (%s)", strerror(-r),
			  vram_last_error());
	ASSERT_STREQ(vram_client_backend(c), "cuda");
	return c;
}

static void daemon_stop(void)
{
	int r = harness_daemon_stop(&torch_daemon);
	if (r != 0)
		TEST_FAIL("vramd did not exit cleanly (%d)\n%s", r,
			  harness_daemon_log(&torch_daemon));
}

/* A discard pool on the daemon's device (by uuid unless NULL). */
static int pool_try(vram_client *c, const char *name, unsigned device,
		    const char *uuid, vram_pool **p)
{
	struct vram_pool_options o = VRAM_POOL_OPTIONS_INIT;

	o.name = name;
	o.policy = VRAM_POLICY_DISCARD;
	o.device = device;
	o.device_uuid = uuid;
	o.reserve_bytes = 256 * MiB;
	return vram_pool_create(c, &o, p);
}

static vram_pool *pool_on(vram_client *c, const char *name, unsigned device,
			  const char *uuid)
{
	vram_pool *p = NULL;
	int r = pool_try(c, name, device, uuid, &p);

	if (r < 0)
		TEST_FAIL("vram_pool_create %s: %s (%s)", name, strerror(-r),
			  vram_last_error());
	return p;
}

/* The pool's device as the daemon numbers it. */
static int torch_pool_device(vram_pool *p)
{
	return (int)p->dev;
}

TEST(local_device_0_is_the_daemons_device_1)
{
	vram_client *c = worker_of_device_1();
	vram_pool *p = pool_on(c, "torch.kv", 0, UUID_OF_1);
	ASSERT_EQ(torch_pool_device(p), 1);

	ASSERT_OK(vram_torch_push_pool(p));
	void *ptr = vram_torch_malloc(4 * MiB, 0, NULL);
	if (!ptr)
		TEST_FAIL("vram_torch_malloc on local device 0: %s",
			  vram_torch_last_error());
	uintptr_t base = vram_pool_base(p);
	ASSERT((uintptr_t)ptr >= base && (uintptr_t)ptr < base + 256 * MiB);
	/* Mapped for this process's device 0, which is the daemon's 1. */
	ASSERT_EQ(fake_count("access_device"), 0);
	memset(ptr, 0x5a, 4 * MiB);
	/* -1: whatever device the pool is on. */
	void *any = vram_torch_malloc(MiB, -1, NULL);
	ASSERT(any != NULL);
	vram_torch_free(any, MiB, -1, NULL);
	vram_torch_free(ptr, 4 * MiB, 0, NULL);
	ASSERT_OK(vram_torch_pop_pool());
	ASSERT_EQ(fake_count("ctx_depth"), 0);
	vram_pool_close(p);
	vram_client_close(c);
	daemon_stop();
}

TEST(another_device_fails_clearly)
{
	vram_client *c = worker_of_device_1();
	vram_pool *p = pool_on(c, "torch.kv", 1, NULL);

	ASSERT_OK(vram_torch_push_pool(p));
	/* This process has no device 1: the pool is on its device 0. */
	ASSERT(vram_torch_malloc(MiB, 1, NULL) == NULL);
	const char *why = vram_torch_last_error();
	if (!strstr(why, "device 1") || !strstr(why, "device 0 here") ||
	    !strstr(why, "daemon's device 1"))
		TEST_FAIL("unclear reason: %s", why);
	ASSERT_OK(vram_torch_pop_pool());
	vram_pool_close(p);

	/* The daemon's device 0 is not visible here at all. */
	vram_pool *hidden = NULL;
	ASSERT_EQ(pool_try(c, "torch.hidden", 0, NULL, &hidden), -ENODEV);
	ASSERT(strstr(vram_last_error(), "torch.hidden") != NULL);
	vram_client_close(c);
	daemon_stop();
}

TEST(growth_runs_in_relaxed_capture_mode)
{
	vram_client *c = worker_of_device_1();
	vram_pool *p = pool_on(c, "torch.graph", 1, NULL);

	ASSERT_OK(vram_torch_push_pool(p));
	ASSERT_EQ(fake_count("capture_mode"), 0); /* global */
	void *ptr = vram_torch_malloc(8 * MiB, 0, NULL);
	ASSERT(ptr != NULL);
	ASSERT_EQ(fake_count("map_capture_mode"), 2); /* relaxed */
	ASSERT_EQ(fake_count("capture_mode"), 0);     /* put back */
	vram_torch_free(ptr, 8 * MiB, 0, NULL);
	ASSERT_OK(vram_torch_pop_pool());
	vram_client_close(c);
	daemon_stop();
}

TEST(free_waits_for_the_stream_unless_it_captures)
{
	vram_client *c = worker_of_device_1();
	vram_pool *p = pool_on(c, "torch.kv", 1, NULL);
	void *stream = (void *)(uintptr_t)0x5151;

	ASSERT_OK(vram_torch_push_pool(p));
	void *a = vram_torch_malloc(MiB, 0, stream);
	void *b = vram_torch_malloc(MiB, 0, stream);
	ASSERT(a && b);
	int syncs = fake_count("syncs");
	vram_torch_free(a, MiB, 0, stream);
	ASSERT_EQ(fake_count("syncs"), syncs + 1);
	fake_set_capturing(stream);
	vram_torch_free(b, MiB, 0, stream);
	ASSERT_EQ(fake_count("syncs"), syncs + 1);
	fake_set_capturing(NULL);
	ASSERT_EQ(fake_count("ctx_depth"), 0);
	ASSERT_OK(vram_torch_pop_pool());
	/* A pointer of a pool closed meanwhile is let go quietly. */
	void *late = NULL;
	ASSERT_OK(vram_torch_push_pool(p));
	late = vram_torch_malloc(MiB, 0, stream);
	ASSERT(late != NULL);
	ASSERT_OK(vram_torch_pop_pool());
	vram_pool_close(p);
	vram_torch_free(late, MiB, 0, stream);
	vram_client_close(c);
	daemon_stop();
}
