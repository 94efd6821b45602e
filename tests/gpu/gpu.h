/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers for the GPU tests: this process's own use of the CUDA driver
 * (dlopen'd, as vramd and libvram do, so no CUDA header or library is
 * needed to build), a vramd on the cuda backend, child processes that play
 * a role, and device free memory. Every case SKIPs (exit 77) when the
 * driver cannot be loaded or there is no device. Header-only: each GPU test
 * binary is one file plus the harness.
 */
#ifndef VRAM_GPU_TEST_H
#define VRAM_GPU_TEST_H

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include "cuda_driver.h"
#include "harness/harness.h"
#include "test.h"
#include "vram.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

struct gpu {
	struct cuda_driver cu;
	CUdevice dev;
	CUcontext ctx;
	uint64_t total;
};

static struct gpu G;
static struct harness_daemon gpu_daemon;

#define CU_OK(call)                                                           \
	do {                                                                  \
		CUresult r_ = (call);                                         \
		if (r_ != CUDA_SUCCESS)                                       \
			TEST_FAIL("%s: %s", #call, cuda_strerror(&G.cu, r_)); \
	} while (0)

/* Loads the driver, or skips the case; then device 0's primary context,
 * current on this thread (as PyTorch would have it). */
static inline void gpu_require(void)
{
	char why[256];
	int n = 0;

	if (cuda_driver_load(&G.cu, why, sizeof(why)) < 0)
		SKIP("no CUDA driver here: %s", why);
	if (G.cu.cuInit(0) != CUDA_SUCCESS ||
	    G.cu.cuDeviceGetCount(&n) != CUDA_SUCCESS || n == 0)
		SKIP("no CUDA device here");
	CU_OK(G.cu.cuDeviceGet(&G.dev, 0));
	CU_OK(G.cu.cuDevicePrimaryCtxRetain(&G.ctx, G.dev));
	CU_OK(G.cu.cuCtxSetCurrent(G.ctx));
	size_t total = 0;
	CU_OK(G.cu.cuDeviceTotalMem(&total, G.dev));
	G.total = total;
	/* The first kernel (a memset) and copies may make the driver set
	 * up memory of its own; do them now, not between two readings of
	 * free memory. */
	CUdeviceptr warm;
	uint32_t word = 0;
	CU_OK(G.cu.cuMemAlloc(&warm, 2u << 20));
	CU_OK(G.cu.cuMemsetD32(warm, 1, (2u << 20) / 4));
	CU_OK(G.cu.cuMemcpyDtoH(&word, warm, sizeof(word)));
	CU_OK(G.cu.cuMemcpyHtoD(warm, &word, sizeof(word)));
	CU_OK(G.cu.cuCtxSynchronize());
	CU_OK(G.cu.cuMemFree(warm));
}

/* Device 0's free memory, as the driver tells this process. */
static inline uint64_t gpu_free(void)
{
	size_t f = 0, t = 0;
	CU_OK(G.cu.cuMemGetInfo(&f, &t));
	return f;
}

static inline int64_t gpu_diff(uint64_t a, uint64_t b)
{
	return (int64_t)a - (int64_t)b;
}

/* Waits up to 5 s for free memory to come within tol of want (the driver
 * may finish tearing down a dead process's context a moment later);
 * returns the last reading. */
static inline uint64_t gpu_free_near(uint64_t want, uint64_t tol)
{
	uint64_t f = gpu_free();
	for (int i = 0; i < 500; i++) {
		if (llabs(gpu_diff(f, want)) <= (long long)tol)
			break;
		harness_msleep(10);
		f = gpu_free();
	}
	return f;
}

#define ASSERT_NEAR(a, b, tol)                                               \
	do {                                                                 \
		int64_t d_ = gpu_diff((a), (b));                             \
		if (llabs(d_) > (long long)(tol))                            \
			TEST_FAIL("%s vs %s: off by %lld bytes (%.1f MiB), " \
				  "allowed %llu",                            \
				  #a, #b, (long long)d_, (double)d_ / MiB,   \
				  (unsigned long long)(tol));                \
	} while (0)

/* vramd on the cuda backend (the harness's --backend host comes first;
 * the last flag wins). The ack deadline is generous: a slow machine (or
 * the fake driver, whose copies fault in every page) must not fail a case
 * that is about correctness. */
static inline void gpu_daemon_start(void)
{
	const char *const extra[] = { "--backend", "cuda", "--ack-timeout-ms",
				      "50000", NULL };
	int r = harness_daemon_start(&gpu_daemon, extra);
	if (r < 0)
		TEST_FAIL("cannot start vramd --backend cuda: %s",
			  strerror(-r));
}

static inline void gpu_daemon_stop(void)
{
	int r = harness_daemon_stop(&gpu_daemon);
	if (r != 0)
		TEST_FAIL("vramd did not exit cleanly (%d)\n%s", r,
			  harness_daemon_log(&gpu_daemon));
}

static inline vram_client *gpu_connect(const char *name)
{
	vram_client *c = NULL;
	int r = vram_connect(NULL, name, 0, &c);
	if (r < 0)
		TEST_FAIL("vram_connect: %s (%s)", strerror(-r),
			  vram_last_error());
	ASSERT_STREQ(vram_client_backend(c), "cuda");
	return c;
}

/* A pool with a range of bytes, all of it mapped when grow is set. */
static inline vram_pool *gpu_pool_make(vram_client *c, const char *name,
				       enum vram_policy policy, uint64_t bytes,
				       int grow)
{
	struct vram_pool_options o = VRAM_POOL_OPTIONS_INIT;
	vram_pool *p = NULL;
	int r;

	o.name = name;
	o.tag = policy == VRAM_POLICY_HOST ? "weights" : "kv_cache";
	o.policy = policy;
	o.reserve_bytes = bytes;
	r = vram_pool_create(c, &o, &p);
	if (r < 0)
		TEST_FAIL("vram_pool_create %s: %s (%s)", name, strerror(-r),
			  vram_last_error());
	if (!grow)
		return p;
	r = vram_pool_reserve(p, bytes);
	if (r < 0)
		TEST_FAIL("vram_pool_reserve %s %llu: %s (%s)", name,
			  (unsigned long long)bytes, strerror(-r),
			  vram_last_error());
	return p;
}

static inline vram_pool *gpu_pool(vram_client *c, const char *name,
				  enum vram_policy policy, uint64_t bytes)
{
	return gpu_pool_make(c, name, policy, bytes, 1);
}

/* A reproducible byte stream, so data can be checked after a cycle. */
static inline void gpu_fill(void *buf, size_t len, uint32_t seed)
{
	uint32_t *w = buf, x = seed ? seed : 1;
	for (size_t i = 0; i < len / 4; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		w[i] = x;
	}
}

/* ---- processes that play a role ------------------------------------------
 * A role runs in a fresh exec of this test binary (CUDA does not survive
 * fork), chosen by "--role NAME ARG" on its command line, with two pipes to
 * the test: it reads commands from one and writes replies to the other. */

struct role {
	pid_t pid;
	int to_child, from_child;
};

typedef int (*role_fn)(const char *arg, int in, int out);

struct role_entry {
	const char *name;
	role_fn fn;
};

static inline void role_send(int fd, const char *line)
{
	size_t n = strlen(line);
	ASSERT_EQ(write(fd, line, n), (ssize_t)n);
	ASSERT_EQ(write(fd, "\n", 1), 1);
}

/* Reads one line into buf; -ETIMEDOUT, or -EPIPE when the peer is gone. */
static inline int role_recv(int fd, char *buf, size_t cap, int timeout_ms)
{
	size_t n = 0;
	while (n + 1 < cap) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int r = poll(&p, 1, timeout_ms);
		if (r == 0)
			return -ETIMEDOUT;
		if (r < 0)
			return -errno;
		ssize_t k = read(fd, buf + n, 1);
		if (k <= 0)
			return -EPIPE;
		if (buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = 0;
	return 0;
}

/* Waits for the child to say want (its other lines are failures). */
static inline void role_expect(struct role *r, const char *want, int timeout_ms)
{
	char line[512];
	int e = role_recv(r->from_child, line, sizeof(line), timeout_ms);
	if (e < 0)
		TEST_FAIL("child %d: no \"%s\": %s (exit %d)", (int)r->pid,
			  want, strerror(-e), harness_wait(r->pid, 1000));
	if (strcmp(line, want) != 0)
		TEST_FAIL("child %d said \"%s\", wanted \"%s\"", (int)r->pid,
			  line, want);
}

static inline struct role role_spawn(const char *name, const char *arg)
{
	int down[2], up[2];
	char in[16], out[16], exe[512];
	struct role r;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	ASSERT(n > 0);
	exe[n] = 0;
	ASSERT_OK(pipe(down));
	ASSERT_OK(pipe(up));
	snprintf(in, sizeof(in), "%d", down[0]);
	snprintf(out, sizeof(out), "%d", up[1]);
	const char *const argv[] = { exe, "--role", name, arg ? arg : "",
				     in,  out,	    NULL };
	r.pid = harness_spawn(argv);
	ASSERT_GT(r.pid, 0);
	close(down[0]);
	close(up[1]);
	r.to_child = down[1];
	r.from_child = up[0];
	return r;
}

/* Tells the child to finish and checks it exited 0. */
static inline void role_finish(struct role *r, const char *cmd)
{
	if (cmd)
		role_send(r->to_child, cmd);
	int st = harness_wait(r->pid, 30000);
	close(r->to_child);
	close(r->from_child);
	if (st != 0)
		TEST_FAIL("child %d (role) exited with %d", (int)r->pid, st);
}

/* glibc passes main's arguments to constructors: a role runs instead of
 * the test main and exits with its status. */
#define GPU_ROLES(...)                                                        \
	static const struct role_entry gpu_roles_[] = { __VA_ARGS__ };        \
	__attribute__((constructor)) static void gpu_role_main_(int argc,     \
								char **argv)  \
	{                                                                     \
		if (argc != 6 || strcmp(argv[1], "--role") != 0)              \
			return;                                               \
		for (size_t i = 0;                                            \
		     i < sizeof(gpu_roles_) / sizeof(gpu_roles_[0]); i++)     \
			if (strcmp(gpu_roles_[i].name, argv[2]) == 0)         \
				exit(gpu_roles_[i].fn(argv[3], atoi(argv[4]), \
						      atoi(argv[5])));        \
		fprintf(stderr, "no role %s\n", argv[2]);                     \
		exit(2);                                                      \
	}

#endif
