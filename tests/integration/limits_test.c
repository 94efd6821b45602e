/* SPDX-License-Identifier: Apache-2.0 */
/* Out of memory on grow and on resume, bad arguments, and permissions. */

#include "integ.h"

/* Resumes w, again while it fails with ENOMEM for up to a second (another
 * client's pool goes asynchronously once it closes). */
static int resume_once_there_is_room(vram_pool *w)
{
	int r = -ENOMEM;
	for (int i = 0; i < 100 && r == -ENOMEM; i++) {
		r = vram_pool_resume(w, NULL);
		if (r == -ENOMEM)
			harness_msleep(10);
	}
	return r;
}

TEST(out_of_memory_on_grow_is_clear)
{
	integ_start("64M");
	vram_client *c = integ_connect("greedy");
	vram_pool *p = integ_pool(c, "p", "t", VRAM_POLICY_DISCARD, 0);
	void *a, *b;
	ASSERT_EQ(vram_alloc(p, 100 * MiB, &a), -ENOMEM);
	ASSERT(strstr(vram_last_error(), "out of memory") != NULL);
	/* The pool is intact and usable up to the capacity. */
	ASSERT_OK(vram_alloc(p, 48 * MiB, &a));
	memset(a, 1, 48 * MiB);
	ASSERT_EQ(vram_alloc(p, 32 * MiB, &b), -ENOMEM);
	ASSERT_OK(vram_free(p, a));
	ASSERT_OK(vram_alloc(p, 32 * MiB, &b));
	vram_client_close(c);
	integ_stop();
}

TEST(out_of_memory_on_resume_keeps_backup_and_retries)
{
	integ_start("64M");
	vram_client *c = integ_connect("engine");
	vram_pool *w = integ_pool(c, "w", "weights", VRAM_POLICY_HOST, 0);
	void *a;
	ASSERT_OK(vram_alloc(w, 40 * MiB, &a));
	integ_fill(a, 40 * MiB, 77);
	ASSERT_OK(vram_pool_pause(w, NULL));
	/* Someone else takes the memory. */
	vram_client *o = integ_connect("other");
	vram_pool *q = integ_pool(o, "q", "t", VRAM_POLICY_DISCARD, 0);
	void *x;
	ASSERT_OK(vram_alloc(q, 40 * MiB, &x));
	struct vram_report rep = VRAM_REPORT_INIT;
	ASSERT_EQ(vram_pool_resume(w, &rep), -ENOMEM);
	ASSERT_EQ(rep.failed, 1);
	ASSERT_EQ(vram_pool_state(w), VRAM_STATE_PAUSED);
	struct vram_pool_info info = integ_info(c, "w");
	ASSERT_EQ(info.state, VRAM_STATE_PAUSED);
	ASSERT_UEQ(info.backup_bytes, 64 * MiB);
	/* Retried after the other lets go: the content is back. */
	vram_client_close(o);
	ASSERT_OK(resume_once_there_is_room(w));
	ASSERT_OK(integ_check(a, 40 * MiB, 77));
	vram_client_close(c);
	integ_stop();
}

/* The device fills while a restore in parts is under way: its first two
 * chunks are made, the third is not. The resume fails with ENOMEM, the
 * pool stays paused with its backup (the restorer unmapped what it had),
 * nothing stays held, and a retry once there is room restores it whole. */
TEST(out_of_memory_halfway_through_a_restore_in_parts_keeps_backup)
{
	integ_start_chunked("64M", "8M");
	vram_client *c = integ_connect("engine");
	vram_pool *w = integ_pool(c, "w", "weights", VRAM_POLICY_HOST, 0);
	void *a;
	ASSERT_OK(vram_pool_reserve(w, 32 * MiB));
	ASSERT_OK(vram_alloc(w, 32 * MiB, &a));
	integ_fill(a, 32 * MiB, 78);
	ASSERT_EQ(integ_info(c, "w").chunks, 4u);
	ASSERT_OK(vram_pool_pause(w, NULL));
	/* Someone else leaves room for two of its four chunks. */
	vram_client *o = integ_connect("other");
	vram_pool *q = integ_pool(o, "q", "t", VRAM_POLICY_DISCARD, 0);
	ASSERT_OK(vram_pool_reserve(q, 48 * MiB));
	uint64_t held = integ_stats(c).used_bytes;
	ASSERT_UEQ(held, integ_base.used_bytes + 48 * MiB);
	struct vram_report rep = VRAM_REPORT_INIT;
	ASSERT_EQ(vram_pool_resume(w, &rep), -ENOMEM);
	ASSERT(strstr(vram_last_error(), "memory") != NULL);
	ASSERT_EQ(vram_pool_state(w), VRAM_STATE_PAUSED);
	ASSERT_EQ(integ_info(c, "w").state, VRAM_STATE_PAUSED);
	ASSERT(strstr(harness_daemon_log(&integ_daemon),
		      "pool w: restored 1 of 4 chunk(s); made up to 2, then "
		      "failed") != NULL);
	ASSERT_UEQ(integ_stats(c).used_bytes, held);
	vram_client_close(o);
	ASSERT_OK(resume_once_there_is_room(w));
	ASSERT_OK(integ_check(a, 32 * MiB, 78));
	vram_client_close(c);
	integ_stop();
}

TEST(bad_arguments_return_einval)
{
	integ_start("64M");
	vram_client *c = integ_connect("bad");
	vram_pool *p = NULL;
	void *a;
	struct vram_pool_options o = VRAM_POOL_OPTIONS_INIT;
	vram_client *c2 = NULL;
	ASSERT_EQ(vram_connect(NULL, NULL, 0x100, &c2), -EINVAL);
	ASSERT(c2 == NULL);
	ASSERT_EQ(vram_pool_create(c, NULL, &p), -EINVAL);
	ASSERT_EQ(vram_pool_create(c, &o, &p), -EINVAL); /* no name */
	o.name = "p";
	o.policy = (enum vram_policy)9;
	ASSERT_EQ(vram_pool_create(c, &o, &p), -EINVAL);
	o.policy = VRAM_POLICY_DISCARD;
	o.device = 7;
	ASSERT_EQ(vram_pool_create(c, &o, &p), -ENODEV);
	o.device = 0;
	o.flags = 0x80;
	ASSERT_EQ(vram_pool_create(c, &o, &p), -EINVAL);
	o.flags = 0;
	ASSERT_OK(vram_pool_create(c, &o, &p));
	ASSERT_EQ(vram_pool_create(c, &o, &p), -EEXIST);
	ASSERT_EQ(vram_alloc(NULL, 10, &a), -EINVAL);
	ASSERT_EQ(vram_alloc(p, 0, &a), -EINVAL);
	ASSERT_EQ(vram_alloc(p, 10, NULL), -EINVAL);
	ASSERT_EQ(vram_free(p, (void *)0x1234), -EINVAL);
	ASSERT_OK(vram_free(p, NULL));
	ASSERT_EQ(vram_pool_open(c, "nope", 0, &p), -ENOENT);
	ASSERT_EQ(vram_pool_drop(c, "nope"), -ENOENT);
	ASSERT_EQ(vram_pause(c, NULL, 0, NULL), -EINVAL);
	vram_client_close(c);
	integ_stop();
}

TEST(other_uid_cannot_touch_pools)
{
	if (getuid() != 0)
		SKIP("needs root to act as another uid");
	integ_start("64M");
	vram_client *c = integ_connect("root-engine");
	vram_pool *p = integ_pool(c, "mine", "weights", VRAM_POLICY_DISCARD, 0);
	ASSERT_OK(vram_pool_reserve(p, 2 * MiB));
	integ_open_to_all();
	pid_t pid = fork();
	if (pid == 0) {
		if (setgid(65534) < 0 || setuid(65534) < 0)
			_exit(9);
		vram_client *o = integ_connect("nobody");
		vram_pool *q;
		struct vram_selector sel = { .size = sizeof(sel),
					     .name = "mine" };
		/* Names are scoped per uid: "mine" is this uid's (none),
		 * and root's "0:mine" is out of its view. */
		if (vram_pool_open(o, "mine", 0, &q) != -ENOENT)
			_exit(2);
		if (vram_pause(o, &sel, 0, NULL) != -ENOENT)
			_exit(3);
		if (vram_pool_drop(o, "mine") != -ENOENT)
			_exit(4);
		if (vram_pool_open(o, "0:mine", 0, &q) != -ENOENT ||
		    vram_pool_drop(o, "0:mine") != -ENOENT)
			_exit(5);
		sel.name = NULL;
		sel.all = 1;
		if (vram_pause(o, &sel, 0, NULL) != -ENOENT)
			_exit(6);
		_exit(0);
	}
	ASSERT_EQ(harness_wait(pid, 10000), 0);
	ASSERT_EQ(integ_info(c, "mine").state, VRAM_STATE_ACTIVE);
	vram_client_close(c);
	integ_stop();
}

/* A pool's device by UUID, as vramctl status shows it. */
TEST(device_by_uuid)
{
	const char *const extra[] = { "--host-devices", "2", NULL };
	integ_start_args(extra);
	vram_client *c = integ_connect("uuid");
	struct vram_stats st = integ_stats(c);
	ASSERT_EQ(st.n_devices, 2);
	struct vram_pool_options o = { .size = sizeof(o),
				       .name = "on1",
				       .tag = "t",
				       .device_uuid = st.devices[1].uuid };
	vram_pool *p;
	ASSERT_OK(vram_pool_create(c, &o, &p));
	ASSERT_EQ(integ_info(c, "on1").device, 1);
	o.name = "nowhere";
	o.device_uuid = "GPU-00000000-0000-0000-0000-000000000000";
	ASSERT_EQ(vram_pool_create(c, &o, &p), -ENODEV);
	ASSERT(strstr(vram_last_error(), "GPU-00000000") != NULL);
	vram_client_close(c);
	integ_stop();
}
