/* SPDX-License-Identifier: Apache-2.0 */
/* Quotas and usage in vramctl status (issue 12, item 5): each uid sees its
 * own limits and what its pools hold (and its group's when a rule names
 * it); root sees every uid and group with a rule or pools. */
#include <stdio.h>

#include "integ.h"

#define UID_A 65534 /* its own rule */
#define UID_B 65531 /* the default rule, in group GID_G */
#define GID_G 65530

static const char *quota_ctl(void)
{
	const char *bin = getenv("VRAMCTL_BIN");
	return bin ? bin : "build/vramctl";
}

/* The quota entry of (group, id) in c's view, or NULL. */
static const struct vram_quota *quota_find_in(const struct vram_quota *q,
					      size_t n, int group, uint32_t id)
{
	for (size_t i = 0; i < n; i++)
		if (q[i].group == group && q[i].id == id)
			return &q[i];
	return NULL;
}

/* Makes a persistent pool of the caller's and grows it by bytes. */
static int quota_make(vram_client *c, const char *name,
		      enum vram_policy policy, uint64_t bytes)
{
	struct vram_pool_options o = VRAM_POOL_OPTIONS_INIT;
	vram_pool *p;
	o.name = name;
	o.tag = "q";
	o.policy = policy;
	o.reserve_bytes = 64 * MiB;
	o.flags = VRAM_POOL_PERSIST;
	if (vram_pool_create(c, &o, &p) < 0)
		return -1;
	return vram_pool_reserve(p, bytes) < 0 ? -1 : 0;
}

/* uid A: a host pool and a discard pool of 2M each (the granularity);
 * then its view. */
static int quota_child_a(void)
{
	vram_client *c;
	struct vram_quota *q = NULL;
	size_t n = 0;

	if (vram_connect(NULL, "a", 0, &c) < 0)
		return 1;
	if (quota_make(c, "h", VRAM_POLICY_HOST, 2 * MiB) < 0 ||
	    quota_make(c, "d", VRAM_POLICY_DISCARD, 2 * MiB) < 0)
		return 2;
	if (vram_quotas(c, sizeof(*q), &q, &n) < 0)
		return 3;
	/* Only its own uid: no rule names its group. */
	if (n != 1 || q[0].group || q[0].id != UID_A || q[0].from_default ||
	    q[0].exempt)
		return 4;
	if (q[0].pools_limit != 2 || q[0].device_limit != 8 * MiB ||
	    q[0].host_limit != 4 * MiB)
		return 5;
	if (q[0].pools != 2 || q[0].host_bytes != 2 * MiB ||
	    q[0].n_devices != 1 || q[0].device_bytes[0] != 4 * MiB)
		return 6;
	free(q);
	vram_client_close(c);
	return 0;
}

/* uid B (group G): one pool of 2M; then its view: its uid under the
 * default rule, and its group's rule with the group's usage. */
static int quota_child_b(void)
{
	vram_client *c;
	struct vram_quota *q = NULL;
	size_t n = 0;

	if (vram_connect(NULL, "b", 0, &c) < 0)
		return 10;
	if (quota_make(c, "kv", VRAM_POLICY_DISCARD, 2 * MiB) < 0)
		return 11;
	if (vram_quotas(c, sizeof(*q), &q, &n) < 0)
		return 12;
	if (n != 2 || q[0].group || q[0].id != UID_B || !q[0].from_default ||
	    q[0].pools_limit != 4 || q[0].device_limit != VRAM_QUOTA_NONE ||
	    q[0].pools != 1 || q[0].device_bytes[0] != 2 * MiB)
		return 13;
	if (!q[1].group || q[1].id != GID_G || q[1].pools_limit != 3 ||
	    q[1].pools != 1 || q[1].device_bytes[0] != 2 * MiB)
		return 14;
	free(q);
	/* The entry size is checked as vram_list's is. */
	if (vram_quotas(c, 3, &q, &n) != -EINVAL)
		return 15;
	/* vramctl status --json says the same. */
	char cmd[512], out[8192];
	snprintf(cmd, sizeof(cmd), "%s --socket %s status --json", quota_ctl(),
		 integ_daemon.socket);
	FILE *f = popen(cmd, "r");
	if (!f)
		return 16;
	size_t len = fread(out, 1, sizeof(out) - 1, f);
	out[len] = '\0';
	if (pclose(f) != 0 || !strstr(out, "\"quotas\"") ||
	    !strstr(out, "\"id\": 65531") || !strstr(out, "\"id\": 65530") ||
	    strstr(out, "\"id\": 65534"))
		return 17;
	vram_client_close(c);
	return 0;
}

TEST(status_reports_quotas_and_usage)
{
	if (getuid() != 0)
		SKIP("needs root to act as other uids");
	const char *const extra[] = {
		"--set", "quota=uid:65534 pools=2 device=8M host=4M",
		"--set", "quota=gid:65530 pools=3",
		"--set", "quota=default pools=4",
		NULL,
	};
	integ_start_args(extra);
	integ_open_to_all();
	ASSERT_EQ(integ_run_as(UID_A, UID_A, quota_child_a), 0);
	ASSERT_EQ(integ_run_as(UID_B, GID_G, quota_child_b), 0);

	/* Root: its own entry first (exempt), then every uid and group
	 * with a rule or pools. */
	vram_client *c = integ_connect("root");
	ASSERT_OK(quota_make(c, "r", VRAM_POLICY_DISCARD, 2 * MiB));
	struct vram_quota *q = NULL;
	size_t n = 0;
	ASSERT_OK(vram_quotas(c, sizeof(*q), &q, &n));
	ASSERT(n >= 4);
	ASSERT_EQ(q[0].group, 0);
	ASSERT_EQ(q[0].id, 0);
	ASSERT(q[0].exempt);
	ASSERT_EQ(q[0].pools_limit, VRAM_QUOTA_NONE);
	ASSERT_EQ(q[0].pools, 1);
	const struct vram_quota *a = quota_find_in(q, n, 0, UID_A);
	ASSERT(a != NULL);
	ASSERT_EQ(a->pools, 2);
	ASSERT_EQ(a->pools_limit, 2);
	ASSERT_EQ(a->host_bytes, 2 * MiB);
	ASSERT_EQ(a->device_bytes[0], 4 * MiB);
	const struct vram_quota *b = quota_find_in(q, n, 0, UID_B);
	ASSERT(b != NULL);
	ASSERT(b->from_default);
	ASSERT_EQ(b->pools, 1);
	const struct vram_quota *g = quota_find_in(q, n, 1, GID_G);
	ASSERT(g != NULL);
	ASSERT_EQ(g->pools_limit, 3);
	ASSERT_EQ(g->pools, 1);
	/* Group A's (65534) has pools but no rule: listed with no limit. */
	const struct vram_quota *ga = quota_find_in(q, n, 1, UID_A);
	ASSERT(ga != NULL);
	ASSERT_EQ(ga->pools, 2);
	ASSERT_EQ(ga->pools_limit, VRAM_QUOTA_NONE);
	free(q);

	/* And vramctl status shows them as text. */
	char cmd[512], out[8192];
	snprintf(cmd, sizeof(cmd), "%s --socket %s status", quota_ctl(),
		 integ_daemon.socket);
	FILE *f = popen(cmd, "r");
	ASSERT(f != NULL);
	size_t len = fread(out, 1, sizeof(out) - 1, f);
	out[len] = '\0';
	ASSERT_EQ(pclose(f), 0);
	ASSERT(strstr(out, "quotas") != NULL);
	ASSERT(strstr(out, "uid 65534") != NULL);
	ASSERT(strstr(out, "gid 65530") != NULL);
	ASSERT(strstr(out, "2/2") != NULL);

	/* The persistent pools stay after their owners: drop them. */
	ASSERT_OK(vram_pool_drop(c, "65534:h"));
	ASSERT_OK(vram_pool_drop(c, "65534:d"));
	ASSERT_OK(vram_pool_drop(c, "65531:kv"));
	ASSERT_OK(vram_pool_drop(c, "r"));
	vram_client_close(c);
	integ_stop();
}
