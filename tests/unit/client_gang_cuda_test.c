/* SPDX-License-Identifier: Apache-2.0 */
/* The wrong-GPU case of issue 15 on the fake driver (tests/unit/cuda_fake/)
 * with a real vramd --backend cuda: the node has two devices, and each rank
 * is a process that sees only its own (CUDA_VISIBLE_DEVICES=N), so that its
 * device 0 is the daemon's device N. A rank names its device by the UUID
 * its driver gives its device 0, as vram.torch does; its pool must land on
 * the daemon's device N, vram_list must show that device and its UUID, and
 * a gang pause and resume of the job must move both ranks together. */
#include <dlfcn.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_fake.h"
#include "harness.h"
#include "pool.h"
#include "test.h"
#include "vram.h"

#define MiB (1ull << 20)

/* libvram reaches its CUDA half through a weak reference, which does not
 * pull it out of the archive this test links: this one does. */
int (*const gang_test_cuda_half)(struct vmm **) = vmm_cuda_open;

static struct harness_daemon gang_daemon;

/* The UUID of this process's device 0, as the driver reports it. */
static void local_uuid(char *out, size_t size)
{
	void *lib = dlopen(getenv("VRAM_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
	int (*get)(unsigned char *, int) =
		lib ? (int (*)(unsigned char *, int))dlsym(
			      lib, "cuDeviceGetUuid_v2") :
		      NULL;
	unsigned char u[16];

	if (!get || get(u, 0) != 0)
		_exit(30);
	snprintf(
		out, size,
		"GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9],
		u[10], u[11], u[12], u[13], u[14], u[15]);
}

/* A rank of device n: its pool on its local device 0, by UUID; acks
 * events on a thread; exits when the parent closes its pipe. */
static void rank_main(unsigned n, int ready_fd, int quit_fd)
{
	char visible[8], inst[16], name[16], uuid[64];
	struct vram_pool_options o = VRAM_POOL_OPTIONS_INIT;
	vram_client *c = NULL;
	vram_pool *p = NULL;
	char byte = 1;

	snprintf(visible, sizeof(visible), "%u", n);
	snprintf(inst, sizeof(inst), "rank-%u", n);
	snprintf(name, sizeof(name), "rank%u", n);
	setenv("CUDA_VISIBLE_DEVICES", visible, 1);
	setenv("VRAM_JOB", "cudajob", 1);
	setenv("VRAM_INSTANCE", inst, 1);
	local_uuid(uuid, sizeof(uuid));
	if (vram_connect(NULL, inst, 0, &c) < 0)
		_exit(31);
	o.name = name;
	o.tag = "weights";
	o.device = 0; /* overridden by the UUID */
	o.device_uuid = uuid;
	o.policy = VRAM_POLICY_DISCARD;
	o.reserve_bytes = 64 * MiB;
	if (vram_pool_create(c, &o, &p) < 0 ||
	    vram_pool_reserve(p, 4 * MiB) < 0)
		_exit(32);
	if (p->dev != n)
		_exit(33);
	if (vram_client_start_thread(c) < 0)
		_exit(34);
	if (write(ready_fd, &byte, 1) != 1)
		_exit(35);
	(void)read(quit_fd, &byte, 1);
	vram_client_close(c);
	_exit(0);
}

TEST(rank_with_one_visible_device_gets_its_pool_on_the_right_device)
{
	const char *const extra[] = { "--backend", "cuda", "--ack-timeout-ms",
				      "20000", NULL };
	int ready[2], quit[2];
	pid_t pids[2];

	cuda_fake_load_shared();
	setenv("VRAM_LIBNVML", "/nonexistent/libnvidia-ml.so.1", 1);
	setenv("FAKE_CUDA_DEVICES", "2", 1);
	unsetenv("CUDA_VISIBLE_DEVICES"); /* the daemon sees every device */
	int r = harness_daemon_start(&gang_daemon, extra);
	if (r < 0)
		TEST_FAIL("cannot start vramd --backend cuda: %s",
			  strerror(-r));
	ASSERT_OK(pipe(ready));
	ASSERT_OK(pipe(quit));
	for (unsigned n = 0; n < 2; n++) {
		pids[n] = fork();
		ASSERT(pids[n] >= 0);
		if (pids[n] == 0) {
			/* Only the parent keeps the quit pipe's write end, so
			 * that closing it tells every rank to go. */
			close(quit[1]);
			close(ready[0]);
			rank_main(n, ready[1], quit[0]);
		}
	}
	for (unsigned n = 0; n < 2; n++) {
		char b;
		if (read(ready[0], &b, 1) != 1) {
			int st = harness_wait(pids[n], 5000);
			TEST_FAIL("rank %u did not start (exit %d)\n%s", n, st,
				  harness_daemon_log(&gang_daemon));
		}
	}

	vram_client *c = NULL;
	ASSERT_OK(vram_connect(NULL, "controller", 0, &c));
	struct vram_stats st = VRAM_STATS_INIT;
	ASSERT_OK(vram_stats(c, &st));
	ASSERT_EQ(st.n_devices, 2);
	struct vram_selector sel = VRAM_SELECTOR_INIT;
	sel.job = "cudajob";
	struct vram_pool_info *infos = NULL;
	size_t n_infos = 0;
	ASSERT_OK(vram_list(c, &sel, sizeof(*infos), &infos, &n_infos));
	ASSERT_EQ(n_infos, 2);
	for (size_t i = 0; i < n_infos; i++) {
		unsigned want = infos[i].name[4] == '1' ? 1 : 0;
		ASSERT_EQ(infos[i].device, want);
		ASSERT_STREQ(infos[i].device_uuid, st.devices[want].uuid);
		ASSERT_STREQ(infos[i].owner_job, "cudajob");
	}
	vram_pool_info_free(infos, n_infos);

	struct vram_report rep = VRAM_REPORT_INIT;
	sel.tag = "weights";
	ASSERT_OK(vram_gang_pause(c, &sel, 0, &rep));
	ASSERT_EQ(rep.pools, 2);
	ASSERT_EQ(rep.n_devices, 2);
	ASSERT_STREQ(rep.devices[1].uuid, st.devices[1].uuid);
	ASSERT_OK(vram_gang_resume(c, &sel, 0, &rep));
	ASSERT_EQ(rep.pools, 2);

	vram_client_close(c);
	close(quit[1]);
	for (unsigned n = 0; n < 2; n++)
		ASSERT_EQ(harness_wait(pids[n], 10000), 0);
	r = harness_daemon_stop(&gang_daemon);
	if (r != 0)
		TEST_FAIL("vramd did not exit cleanly (%d)\n%s", r,
			  harness_daemon_log(&gang_daemon));
}
