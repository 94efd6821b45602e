/* SPDX-License-Identifier: Apache-2.0 */
/* vramd killed and restarted under a GPU worker (issue 10): the worker
 * holds weights (host backup) and a KV cache and keeps computing while the
 * daemon is SIGKILLed and started again from its fd store (the harness
 * plays systemd); its client reconnects by itself; a third party then
 * pauses and resumes its pools, the weights come back byte-exact, and the
 * device's free memory is back where it was once everything is gone.
 * Skips without a CUDA device. */
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "attr.h"

static atomic_bool compute_stop;
static atomic_ulong compute_rounds;
static CUdeviceptr compute_kv;
static size_t compute_words;

/* The worker's GPU work: writes its KV cache over and over. */
static void *compute_main(void *arg UNUSED)
{
	CU_OK(G.cu.cuCtxSetCurrent(G.ctx));
	for (uint32_t i = 0; !atomic_load(&compute_stop); i++) {
		CU_OK(G.cu.cuMemsetD32(compute_kv, i, compute_words));
		CU_OK(G.cu.cuCtxSynchronize());
		atomic_fetch_add(&compute_rounds, 1);
	}
	return NULL;
}

TEST(worker_computes_through_a_daemon_restart)
{
	/* VRAM_GPU_RESTART_MB: the weights' size (the KV cache is twice it),
	 * smaller for the fake driver. */
	const char *mb = getenv("VRAM_GPU_RESTART_MB");
	const uint64_t wbytes = (mb ? strtoull(mb, NULL, 10) : 1024) * MiB;
	const uint64_t kvbytes = 2 * wbytes;
	gpu_require();
	uint64_t f0 = gpu_free();
	const char *const extra[] = { "--backend",
				      "cuda",
				      "--ack-timeout-ms",
				      "50000",
				      "--reattach-grace-ms",
				      "60000",
				      NULL };
	ASSERT_OK(harness_daemon_start_store(&gpu_daemon, extra, 65536));

	vram_client *c = NULL;
	ASSERT_OK(vram_connect(NULL, "worker", VRAM_CONNECT_RECONNECT, &c));
	ASSERT_OK(vram_client_start_thread(c));
	vram_pool *w = gpu_pool(c, "weights", VRAM_POLICY_HOST, wbytes);
	vram_pool *kv = gpu_pool(c, "kv", VRAM_POLICY_DISCARD, kvbytes);
	uintptr_t wbase = vram_pool_base(w), kvbase = vram_pool_base(kv);
	void *buf, *back;
	CU_OK(G.cu.cuMemAllocHost(&buf, wbytes));
	CU_OK(G.cu.cuMemAllocHost(&back, wbytes));
	gpu_fill(buf, wbytes, 77);
	CU_OK(G.cu.cuMemcpyHtoD((CUdeviceptr)wbase, buf, wbytes));

	compute_kv = (CUdeviceptr)kvbase;
	compute_words = kvbytes / 4;
	pthread_t th;
	ASSERT_EQ(pthread_create(&th, NULL, compute_main, NULL), 0);
	while (atomic_load(&compute_rounds) < 3)
		harness_msleep(1);

	/* The daemon dies; the worker keeps computing on its mappings. */
	ASSERT_OK(harness_daemon_kill(&gpu_daemon, SIGKILL));
	ASSERT_EQ(harness_daemon_wait(&gpu_daemon, 10000), 128 + SIGKILL);
	unsigned long before = atomic_load(&compute_rounds);
	while (atomic_load(&compute_rounds) < before + 3)
		harness_msleep(1);
	ASSERT_OK(harness_daemon_restart(&gpu_daemon, NULL));
	int r = -1;
	for (int i = 0; i < 1000 && (r = vram_ping(c)) != 0; i++)
		harness_msleep(10);
	ASSERT_OK(r);
	before = atomic_load(&compute_rounds);
	while (atomic_load(&compute_rounds) < before + 3)
		harness_msleep(1);
	atomic_store(&compute_stop, true);
	ASSERT_EQ(pthread_join(th, NULL), 0);
	ASSERT_EQ(vram_pool_base(w), wbase);
	ASSERT_EQ(vram_pool_base(kv), kvbase);

	/* A third party pauses and resumes both; the worker answers. */
	vram_client *ctl = gpu_connect("controller");
	struct vram_selector sel = { .size = sizeof(sel), .all = 1 };
	struct vram_report rep = VRAM_REPORT_INIT;
	ASSERT_OK(vram_pause(ctl, &sel, 0, &rep));
	ASSERT_EQ(rep.pools, 2);
	ASSERT_UEQ(rep.bytes, wbytes + kvbytes);
	ASSERT_OK(vram_resume(ctl, &sel, 0, &rep));
	ASSERT_EQ(vram_pool_base(w), wbase);
	CU_OK(G.cu.cuMemcpyDtoH(back, (CUdeviceptr)wbase, wbytes));
	ASSERT_EQ(memcmp(back, buf, wbytes), 0);
	vram_client_close(ctl);

	CU_OK(G.cu.cuMemFreeHost(buf));
	CU_OK(G.cu.cuMemFreeHost(back));
	vram_client_close(c);
	gpu_daemon_stop();
	/* The store went with the stop: the device has it all back. */
	ASSERT_NEAR(gpu_free_near(f0, 64 * MiB), f0, 64 * MiB);
}
