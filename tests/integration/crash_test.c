/* SPDX-License-Identifier: Apache-2.0 */
/* Clients that die: SIGKILL mid-pause and mid-resume, owners that exit with
 * pools alive, persistent pools that outlive their owner. The daemon must
 * survive and hold exactly what it held before. */
#include "integ.h"

/* The child owns a pool and dies while the parent's pause waits for it. */
static void kill_owner_mid(int resume)
{
	integ_start("256M");
	vram_client *ctl = integ_connect("ctl");
	struct vram_stats base = integ_stats(ctl);
	struct integ_sync s;
	integ_sync_init(&s);
	pid_t pid = fork();
	if (pid == 0) {
		vram_client *c = integ_connect("victim");
		vram_pool *w = integ_pool(c, "victim.w", "weights", VRAM_POLICY_HOST, 0);
		ASSERT_OK(vram_pool_reserve(w, 32 * MiB));
		if (resume) {
			ASSERT_OK(vram_pool_pause(w, NULL));
		}
		integ_signal(s.to_parent[1]);
		pause(); /* never handles the next event */
		_exit(0);
	}
	integ_wait_signal(s.to_parent[0]);
	struct vram_selector sel = { .size = sizeof(sel), .name = "victim.w" };
	/* Start the transition, see it stuck on the victim, then kill it. */
	int r = resume ? vram_resume(ctl, &sel, 200, NULL)
		       : vram_pause(ctl, &sel, 200, NULL);
	ASSERT_EQ(r, -ETIMEDOUT);
	ASSERT_EQ(integ_info(ctl, "victim.w").state,
		  resume ? VRAM_STATE_RESUMING : VRAM_STATE_PAUSING);
	kill(pid, SIGKILL);
	ASSERT_EQ(harness_wait(pid, 5000), 128 + SIGKILL);
	/* Its pool is dropped with it, and every fd and byte is returned. */
	integ_wait_baseline(ctl, base.open_fds, base.used_bytes);
	ASSERT_EQ(integ_stats(ctl).pools, 0);
	ASSERT_UEQ(integ_stats(ctl).backup_bytes, 0);
	vram_client_close(ctl);
	integ_stop();
}

TEST(owner_sigkilled_mid_pause)
{
	kill_owner_mid(0);
}

TEST(owner_sigkilled_mid_resume)
{
	kill_owner_mid(1);
}

/* A mapper (not the owner) dies mid-pause: the owner's pause completes. */
TEST(mapper_sigkilled_mid_pause_lets_it_complete)
{
	integ_start("256M");
	vram_client *c = integ_connect("owner");
	vram_pool *w = integ_pool(c, "w", "weights", VRAM_POLICY_HOST, 0);
	void *a;
	ASSERT_OK(vram_alloc(w, 8 * MiB, &a));
	integ_fill(a, 8 * MiB, 3);
	struct vram_stats base = integ_stats(c);
	struct integ_sync s;
	integ_sync_init(&s);
	pid_t pid = fork();
	if (pid == 0) {
		vram_client *m = integ_connect("mapper");
		vram_pool *p;
		ASSERT_OK(vram_pool_open(m, "w", 0, &p));
		integ_signal(s.to_parent[1]);
		pause();
		_exit(0);
	}
	integ_wait_signal(s.to_parent[0]);
	pid_t killer = fork();
	if (killer == 0) {
		harness_msleep(200);
		kill(pid, SIGKILL);
		_exit(0);
	}
	/* Blocks until the mapper dies, then succeeds: nothing times out. */
	struct vram_report rep = VRAM_REPORT_INIT;
	ASSERT_OK(vram_pool_pause(w, &rep));
	ASSERT_UEQ(rep.bytes, 64 * MiB);
	ASSERT_EQ(harness_wait(pid, 5000), 128 + SIGKILL);
	ASSERT_EQ(harness_wait(killer, 5000), 0);
	ASSERT_OK(vram_pool_resume(w, NULL));
	ASSERT_OK(integ_check(a, 8 * MiB, 3));
	integ_wait_baseline(c, base.open_fds, base.used_bytes);
	vram_client_close(c);
	integ_stop();
}

/* An owner that exits without closing anything loses its pools: the
 * daemon frees them (no GPU byte outlives its last holder). */
TEST(owner_exit_without_close_frees_everything)
{
	integ_start("256M");
	vram_client *ctl = integ_connect("ctl");
	struct vram_stats base = integ_stats(ctl);
	pid_t pid = fork();
	if (pid == 0) {
		vram_client *c = integ_connect("leaver");
		vram_pool *w = integ_pool(c, "leaver.w", "weights", VRAM_POLICY_HOST, 0);
		void *a;
		ASSERT_OK(vram_alloc(w, 16 * MiB, &a));
		exit(0); /* libvram closes at exit */
	}
	ASSERT_EQ(harness_wait(pid, 5000), 0);
	integ_wait_baseline(ctl, base.open_fds, base.used_bytes);
	ASSERT_EQ(integ_stats(ctl).pools, 0);
	vram_client_close(ctl);
	integ_stop();
}

/* A persistent pool survives its owner's crash with its content, and the
 * restarted worker re-attaches at the same content (weights not reloaded). */
TEST(persistent_pool_outlives_owner_crash)
{
	integ_start("256M");
	pid_t pid = fork();
	if (pid == 0) {
		vram_client *c = integ_connect("worker");
		vram_pool *w = integ_pool(c, "keep.w", "weights", VRAM_POLICY_HOST,
					  VRAM_POOL_PERSIST);
		void *a;
		ASSERT_OK(vram_alloc(w, 8 * MiB, &a));
		integ_fill(a, 8 * MiB, 21);
		ASSERT_OK(vram_pool_pause(w, NULL)); /* content in the backup */
		ASSERT_OK(vram_pool_resume(w, NULL));
		kill(getpid(), SIGKILL);
	}
	ASSERT_EQ(harness_wait(pid, 5000), 128 + SIGKILL);
	vram_client *c = integ_connect("worker-restarted");
	for (int i = 0; i < 100 && integ_info(c, "keep.w").owner_pid != 0; i++)
		harness_msleep(10);
	struct vram_pool_info info = integ_info(c, "keep.w");
	ASSERT_EQ(info.owner_pid, 0);
	ASSERT_EQ(info.state, VRAM_STATE_ACTIVE);
	vram_pool *w;
	ASSERT_OK(vram_pool_open(c, "keep.w", 0, &w));
	ASSERT_EQ(integ_info(c, "keep.w").owner_pid, (uint32_t)getpid());
	ASSERT_OK(integ_check((void *)vram_pool_base(w), 8 * MiB, 21));
	ASSERT_OK(vram_pool_drop(c, "keep.w"));
	ASSERT_EQ(integ_stats(c).pools, 0);
	vram_client_close(c);
	integ_stop();
}

/* The daemon dies: clients' memory stays mapped and valid, calls fail
 * with EPIPE, and closing works. */
TEST(daemon_death_keeps_client_memory)
{
	integ_start("256M");
	vram_client *c = integ_connect("engine");
	vram_pool *w = integ_pool(c, "w", "weights", VRAM_POLICY_HOST, 0);
	void *a;
	ASSERT_OK(vram_alloc(w, 8 * MiB, &a));
	integ_fill(a, 8 * MiB, 5);
	ASSERT_OK(harness_daemon_kill(&integ_daemon, SIGKILL));
	harness_daemon_stop(&integ_daemon);
	ASSERT_OK(integ_check(a, 8 * MiB, 5));
	integ_fill(a, 8 * MiB, 6); /* still writable */
	ASSERT_EQ(vram_ping(c), -EPIPE);
	ASSERT_EQ(vram_pool_pause(w, NULL), -EPIPE);
	vram_pool_close(w);
	vram_pool_close(w);
	vram_client_close(c);
	vram_client_close(c);
}

/* The process that must save a persistent pool's backup dies before it
 * has: the half-made backup is not trusted, the pool goes back to ACTIVE
 * with its content in device memory, and a new owner finds it intact. */
TEST(saver_killed_mid_pause_loses_nothing)
{
	integ_start("256M");
	struct integ_sync s;
	integ_sync_init(&s);
	pid_t pid = fork();
	if (pid == 0) {
		vram_client *c = integ_connect("saver");
		vram_pool *w = integ_pool(c, "keep.w", "weights", VRAM_POLICY_HOST,
					  VRAM_POOL_PERSIST);
		void *a;
		ASSERT_OK(vram_alloc(w, 8 * MiB, &a));
		integ_fill(a, 8 * MiB, 31);
		integ_signal(s.to_parent[1]);
		pause(); /* never handles the pause event */
		_exit(0);
	}
	integ_wait_signal(s.to_parent[0]);
	vram_client *c = integ_connect("controller");
	struct vram_selector sel = { .size = sizeof(sel), .name = "keep.w" };
	ASSERT_EQ(vram_pause(c, &sel, 200, NULL), -ETIMEDOUT);
	ASSERT_EQ(integ_info(c, "keep.w").state, VRAM_STATE_PAUSING);
	kill(pid, SIGKILL);
	ASSERT_EQ(harness_wait(pid, 5000), 128 + SIGKILL);
	for (int i = 0; i < 100 && integ_info(c, "keep.w").state != VRAM_STATE_ACTIVE; i++)
		harness_msleep(10);
	struct vram_pool_info info = integ_info(c, "keep.w");
	ASSERT_EQ(info.state, VRAM_STATE_ACTIVE);
	ASSERT_UEQ(info.backup_bytes, 0);
	ASSERT_UEQ(integ_stats(c).used_bytes, 64 * MiB);
	vram_pool *w;
	ASSERT_OK(vram_pool_open(c, "keep.w", 0, &w));
	ASSERT_OK(integ_check((void *)vram_pool_base(w), 8 * MiB, 31));
	/* And now it pauses and resumes properly with its new owner. */
	ASSERT_OK(vram_pool_pause(w, NULL));
	ASSERT_OK(vram_pool_resume(w, NULL));
	ASSERT_OK(integ_check((void *)vram_pool_base(w), 8 * MiB, 31));
	/* Persistent: closing would keep it; the leak check wants it gone. */
	ASSERT_OK(vram_pool_drop(c, "keep.w"));
	vram_client_close(c);
	integ_stop();
}
