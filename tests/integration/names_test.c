/* SPDX-License-Identifier: Apache-2.0 */
/* Pool names scoped per uid (issue 12, item 5): uid A's "kv" and uid B's
 * "kv" are two pools; a plain name means the caller's own pool; root and
 * the admin group address another uid's as "UID:NAME", which no pool may
 * be named. Before the scoping, uid B creating "kv" after uid A got
 * EEXIST (names_are_scoped_per_uid failed on vramd 7958052). */

#include "integ.h"

#define UID_A 65534
#define UID_B 65533

static int names_create(vram_client *c, const char *name, vram_pool **p)
{
	struct vram_pool_options o = VRAM_POOL_OPTIONS_INIT;
	o.name = name;
	o.tag = "t";
	o.policy = VRAM_POLICY_DISCARD;
	o.reserve_bytes = 64 * MiB;
	o.flags = VRAM_POOL_PERSIST;
	return vram_pool_create(c, &o, p);
}

/* How many pools c sees with sel (NULL: all); the owner uid of the
 * first in *uid. -1 on failure. */
static int names_count(vram_client *c, const char *name, uint32_t *uid)
{
	struct vram_selector sel = VRAM_SELECTOR_INIT;
	struct vram_pool_info *infos = NULL;
	size_t n = 0;

	sel.name = name;
	int r = vram_list(c, name ? &sel : NULL, sizeof(*infos), &infos, &n);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return -1;
	if (uid && n)
		*uid = infos[0].owner_uid;
	vram_pool_info_free(infos, n);
	return (int)n;
}

/* A uid makes its persistent "kv" and leaves it (orphaned). */
static int names_make_kv(void)
{
	vram_client *c;
	vram_pool *p;
	if (vram_connect(NULL, "maker", 0, &c) < 0)
		return 1;
	int r = names_create(c, "kv", &p);
	if (r == -EEXIST)
		return 2;
	if (r < 0)
		return 3;
	if (vram_pool_reserve(p, 2 * MiB) < 0)
		return 4;
	vram_client_close(c);
	return 0;
}

/* What uid B sees and may do next to uid A's "kv". */
static int names_b_view(void)
{
	vram_client *c;
	vram_pool *p, *q;
	uint32_t uid = 0;
	char other[32];

	snprintf(other, sizeof(other), "%u:kv", UID_A);
	if (vram_connect(NULL, "b", 0, &c) < 0)
		return 10;
	/* Its own name is taken for it alone. */
	if (names_create(c, "kv", &q) != -EEXIST)
		return 11;
	/* A plain name is its own pool. */
	if (vram_pool_open(c, "kv", 0, &p) < 0)
		return 12;
	if (names_count(c, "kv", &uid) != 1 || uid != UID_B)
		return 13;
	/* Another uid's pools are out of its view: not listed, not opened,
	 * not dropped, not selected by tag. */
	if (names_count(c, NULL, &uid) != 1 || uid != UID_B)
		return 14;
	if (vram_pool_open(c, other, 0, &q) != -ENOENT)
		return 15;
	if (vram_pool_drop(c, other) != -ENOENT)
		return 16;
	struct vram_selector sel = VRAM_SELECTOR_INIT;
	struct vram_report rep = VRAM_REPORT_INIT;
	sel.tag = "t";
	if (vram_pause(c, &sel, 0, &rep) != 0 || rep.pools != 1)
		return 17;
	if (vram_resume(c, &sel, 0, &rep) != 0 || rep.pools != 1)
		return 18;
	/* An address cannot be taken as a name. */
	if (names_create(c, other, &q) != -EINVAL)
		return 19;
	snprintf(other, sizeof(other), "%u:x", UID_B);
	if (names_create(c, other, &q) != -EINVAL)
		return 20;
	/* A uid past 32 bits is no one's. */
	if (names_create(c, "99999999999:kv", &q) != -EINVAL ||
	    vram_pool_open(c, "99999999999:kv", 0, &q) != -ENOENT)
		return 21;
	/* Its own address is its own pool. */
	snprintf(other, sizeof(other), "%u:kv", UID_B);
	if (names_count(c, other, &uid) != 1 || uid != UID_B)
		return 22;
	vram_pool_close(p);
	vram_client_close(c);
	return 0;
}

TEST(names_are_scoped_per_uid)
{
	if (getuid() != 0)
		SKIP("needs root to act as other uids");
	integ_start("64M");
	integ_open_to_all();
	ASSERT_EQ(integ_run_as(UID_A, UID_A, names_make_kv), 0);
	/* Failed before the scoping: EEXIST (2). */
	ASSERT_EQ(integ_run_as(UID_B, UID_B, names_make_kv), 0);
	ASSERT_EQ(integ_run_as(UID_B, UID_B, names_b_view), 0);

	/* Root sees both, and addresses each as UID:NAME. */
	vram_client *c = integ_connect("admin");
	uint32_t uid = 0;
	char a[32], b[32];
	snprintf(a, sizeof(a), "%u:kv", UID_A);
	snprintf(b, sizeof(b), "%u:kv", UID_B);
	ASSERT_EQ(names_count(c, NULL, NULL), 2);
	ASSERT_EQ(names_count(c, a, &uid), 1);
	ASSERT_EQ(uid, UID_A);
	ASSERT_EQ(names_count(c, b, &uid), 1);
	ASSERT_EQ(uid, UID_B);
	/* A plain name is root's own pool, and root has no "kv". */
	vram_pool *p;
	ASSERT_EQ(vram_pool_open(c, "kv", 0, &p), -ENOENT);
	ASSERT_EQ(vram_pool_drop(c, "kv"), -ENOENT);
	ASSERT_EQ(names_count(c, "kv", NULL), 0);

	/* Pausing one by its address pauses that one only. */
	struct vram_selector sel = VRAM_SELECTOR_INIT;
	struct vram_report rep = VRAM_REPORT_INIT;
	sel.name = a;
	ASSERT_OK(vram_pause(c, &sel, 0, &rep));
	ASSERT_EQ(rep.pools, 1);
	ASSERT_EQ(integ_info(c, a).state, VRAM_STATE_PAUSED);
	ASSERT_EQ(integ_info(c, b).state, VRAM_STATE_ACTIVE);
	/* Opened by its address, the handle keeps it (vram_pool_name),
	 * so a pause of the handle is of that pool and not of root's. */
	ASSERT_OK(vram_pool_open(c, b, 0, &p));
	ASSERT_STREQ(vram_pool_name(p), b);
	ASSERT_OK(vram_pool_pause(p, &rep));
	ASSERT_EQ(rep.pools, 1);
	ASSERT_EQ(integ_info(c, b).state, VRAM_STATE_PAUSED);
	/* Root opening an orphan of another uid does not become its owner:
	 * the pool stays in its uid's names. */
	ASSERT_EQ(integ_info(c, b).owner_uid, UID_B);
	vram_pool_close(p);
	/* A tag selects every uid's pools for root. */
	sel.name = NULL;
	sel.tag = "t";
	ASSERT_OK(vram_resume(c, &sel, 0, &rep));
	ASSERT_EQ(rep.pools, 2);
	ASSERT_OK(vram_pool_drop(c, a));
	ASSERT_OK(vram_pool_drop(c, b));
	ASSERT_EQ(names_count(c, NULL, NULL), 0);
	vram_client_close(c);
	integ_stop();
}

/* The admin group sees and addresses every uid's pools, and acts on
 * them only as root's rights allow (the owner's uid or root: EPERM). */
static int names_admin_view(void)
{
	vram_client *c;
	vram_pool *p;
	char a[32];
	uint32_t uid = 0;

	snprintf(a, sizeof(a), "%u:kv", UID_A);
	if (vram_connect(NULL, "admin-group", 0, &c) < 0)
		return 30;
	if (names_count(c, NULL, NULL) != 1)
		return 31;
	if (names_count(c, a, &uid) != 1 || uid != UID_A)
		return 32;
	if (vram_pool_open(c, a, 0, &p) != -EPERM)
		return 33;
	if (vram_pool_drop(c, a) != -EPERM)
		return 34;
	vram_client_close(c);
	return 0;
}

TEST(admin_group_sees_every_uid)
{
	if (getuid() != 0)
		SKIP("needs root to act as other uids");
	const char *const extra[] = { "--set", "admin_group=65530", NULL };
	integ_start_args(extra);
	integ_open_to_all();
	ASSERT_EQ(integ_run_as(UID_A, UID_A, names_make_kv), 0);
	ASSERT_EQ(integ_run_as(65531, 65530, names_admin_view), 0);
	vram_client *c = integ_connect("cleanup");
	char a[32];
	snprintf(a, sizeof(a), "%u:kv", UID_A);
	ASSERT_OK(vram_pool_drop(c, a));
	vram_client_close(c);
	integ_stop();
}

/* The fd store's table keeps each pool's owner: after a restart both
 * "kv" come back, each in its uid's names. */
TEST(scoped_names_come_back_after_a_restart)
{
	if (getuid() != 0)
		SKIP("needs root to act as other uids");
	const char *const extra[] = { "--host-capacity", "64M",
				      "--reattach-grace-ms", "60000", NULL };
	ASSERT_OK(harness_daemon_start_store(&integ_daemon, extra, 4096));
	integ_open_to_all();
	ASSERT_EQ(integ_run_as(UID_A, UID_A, names_make_kv), 0);
	ASSERT_EQ(integ_run_as(UID_B, UID_B, names_make_kv), 0);
	ASSERT_OK(harness_daemon_kill(&integ_daemon, SIGTERM));
	ASSERT_EQ(harness_daemon_wait(&integ_daemon, 10000), 0);
	ASSERT_OK(harness_daemon_restart(&integ_daemon, NULL));

	vram_client *c = integ_connect("after");
	char a[32], b[32];
	uint32_t uid = 0;
	snprintf(a, sizeof(a), "%u:kv", UID_A);
	snprintf(b, sizeof(b), "%u:kv", UID_B);
	for (int i = 0; i < 300 && names_count(c, NULL, NULL) != 2; i++)
		harness_msleep(10);
	ASSERT_EQ(names_count(c, a, &uid), 1);
	ASSERT_EQ(uid, UID_A);
	ASSERT_EQ(names_count(c, b, &uid), 1);
	ASSERT_EQ(uid, UID_B);
	/* And uid B still finds its own by the plain name. */
	ASSERT_EQ(integ_run_as(UID_B, UID_B, names_make_kv), 2);
	ASSERT_OK(vram_pool_drop(c, a));
	ASSERT_OK(vram_pool_drop(c, b));
	integ_wait_baseline(c, integ_stats(c).open_fds, 0);
	vram_client_close(c);
	integ_stop_unchecked();
}
