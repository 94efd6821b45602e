/* SPDX-License-Identifier: Apache-2.0 */
/* The size rule of vram.h's structs against a real vramd: a struct whose
 * size is 0 or too small is refused before anything is sent; a caller
 * built against a newer header (a larger struct) gets what this libvram
 * knows, with the rest left as it was; arrays come at the caller's entry
 * size. And vram_pool_state() on a handle libvram no longer knows. */
#include <string.h>

#include "integ.h"

#define TAIL 24

/* A caller built against a newer vram.h, whose structs have grown. */
struct report_next {
	struct vram_report r;
	unsigned char tail[TAIL];
};
struct stats_next {
	struct vram_stats s;
	unsigned char tail[TAIL];
};
struct options_next {
	struct vram_pool_options o;
	uint64_t unknown_field;
};
struct info_next {
	struct vram_pool_info i;
	uint64_t tail[3];
};
struct usage_next {
	struct vram_process_usage u;
	uint64_t tail[2];
};

static int all_bytes(const unsigned char *p, size_t n, unsigned char v)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != v)
			return 0;
	return 1;
}

TEST(unsized_structs_are_refused_before_anything_is_sent)
{
	integ_start("64M");
	vram_client *c = integ_connect("abi");
	vram_pool *p = integ_pool(c, "w", "weights", VRAM_POLICY_DISCARD, 0);
	vram_pool *q = NULL;

	/* Options: size 0 (not initialised), and one byte short. */
	struct vram_pool_options o = { .name = "zero" };
	ASSERT_EQ(vram_pool_create(c, &o, &q), -EINVAL);
	ASSERT(strstr(vram_last_error(), "vram_pool_options") != NULL);
	ASSERT(strstr(vram_last_error(), "INIT") != NULL);
	o.size = sizeof(o) - 1;
	ASSERT_EQ(vram_pool_create(c, &o, &q), -EINVAL);
	ASSERT(strstr(vram_last_error(), "below") != NULL);
	ASSERT(q == NULL);

	/* A report of size 0: the pause is not sent, the pool stays. */
	struct vram_selector sel = VRAM_SELECTOR_INIT;
	sel.name = "w";
	struct vram_report rep = { 0 };
	rep.pools = 77;
	ASSERT_EQ(vram_pause(c, &sel, 0, &rep), -EINVAL);
	ASSERT(strstr(vram_last_error(), "vram_report") != NULL);
	ASSERT_EQ(rep.pools, 77); /* untouched */
	ASSERT_EQ(vram_pool_pause(p, &rep), -EINVAL);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_ACTIVE);

	/* A selector of size 0. */
	struct vram_selector bad = { .name = "w" };
	ASSERT_EQ(vram_pause(c, &bad, 0, NULL), -EINVAL);
	ASSERT(strstr(vram_last_error(), "vram_selector") != NULL);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_ACTIVE);
	struct vram_pool_info *infos = NULL;
	size_t n = 99;
	ASSERT_EQ(vram_list(c, &bad, sizeof(*infos), &infos, &n), -EINVAL);
	ASSERT(infos == NULL);
	ASSERT_EQ(n, 0);

	/* Stats of size 0, and one byte short of its first sized layout
	 * (which ends with devices). */
	struct vram_stats st = { 0 };
	ASSERT_EQ(vram_stats(c, &st), -EINVAL);
	st.size = offsetof(struct vram_stats, devices) + sizeof(st.devices) - 1;
	ASSERT_EQ(vram_stats(c, &st), -EINVAL);

	/* Entry sizes: 0, too small, not a multiple of the alignment. */
	ASSERT_EQ(vram_list(c, NULL, 0, &infos, &n), -EINVAL);
	ASSERT(strstr(vram_last_error(), "vram_pool_info") != NULL);
	/* Below the first layout (which ended at mappers); the fields added
	 * since (owner_instance, owner_cgroup) may be left out. */
	ASSERT_EQ(vram_list(c, NULL, offsetof(struct vram_pool_info, mappers),
			    &infos, &n),
		  -EINVAL);
	ASSERT_EQ(vram_list(c, NULL, sizeof(*infos) + 1, &infos, &n), -EINVAL);
	struct vram_process_usage *u = NULL;
	ASSERT_EQ(vram_audit(c, 0, &u, &n, NULL), -EINVAL);
	ASSERT_EQ(vram_audit(c, sizeof(*u) + 4, &u, &n, NULL), -EINVAL);
	ASSERT(u == NULL);

	vram_pool_close(p);
	vram_client_close(c);
	integ_stop();
}

TEST(a_newer_callers_larger_structs_work)
{
	integ_start("64M");
	vram_client *c = integ_connect("abi");

	/* Options with a field this libvram does not know: it is ignored. */
	struct options_next on;
	memset(&on, 0, sizeof(on));
	on.o.size = sizeof(on);
	on.o.name = "w";
	on.o.tag = "weights";
	on.o.reserve_bytes = 256 * MiB;
	on.unknown_field = 0x1234;
	vram_pool *p = NULL;
	ASSERT_OK(vram_pool_create(c, &on.o, &p));
	void *ptr;
	ASSERT_OK(vram_alloc(p, 4 * MiB, &ptr));

	/* Out-structs: only what this libvram knows is written; the size
	 * and the tail stay as the caller set them. */
	struct report_next rn;
	memset(&rn, 0xab, sizeof(rn));
	rn.r.size = sizeof(rn);
	ASSERT_OK(vram_pool_pause(p, &rn.r));
	ASSERT_EQ(rn.r.size, sizeof(rn));
	ASSERT_EQ(rn.r.pools, 1);
	ASSERT_EQ(rn.r.failed, 0);
	ASSERT_GT(rn.r.bytes, 0);
	ASSERT(all_bytes(rn.tail, TAIL, 0xab));
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_PAUSED);
	ASSERT_OK(vram_pool_resume(p, NULL));

	struct stats_next sn;
	memset(&sn, 0xab, sizeof(sn));
	sn.s.size = sizeof(sn);
	ASSERT_OK(vram_stats(c, &sn.s));
	ASSERT_EQ(sn.s.size, sizeof(sn));
	ASSERT_STREQ(sn.s.backend, "host");
	ASSERT_EQ(sn.s.pools, 1);
	ASSERT_EQ(sn.s.n_devices, 1);
	ASSERT(all_bytes(sn.tail, TAIL, 0xab));

	/* Arrays at the caller's stride, each entry saying its size, the
	 * part this libvram does not know zeroed. */
	integ_pool(c, "kv", "kv_cache", VRAM_POLICY_DISCARD, 0);
	struct info_next *in = NULL;
	size_t n = 0;
	ASSERT_OK(vram_list(c, NULL, sizeof(*in), (struct vram_pool_info **)&in,
			    &n));
	ASSERT_EQ(n, 2);
	int seen = 0;
	for (size_t i = 0; i < n; i++) {
		ASSERT_EQ(in[i].i.size, sizeof(*in));
		ASSERT_EQ(in[i].tail[0] | in[i].tail[1] | in[i].tail[2], 0);
		if (strcmp(in[i].i.name, "w") == 0) {
			ASSERT_STREQ(in[i].i.tag, "weights");
			ASSERT_GE(in[i].i.bytes, 4 * MiB);
			ASSERT_EQ(in[i].i.n_mappers, 1);
			ASSERT(in[i].i.mappers != NULL);
			ASSERT_STREQ(in[i].i.mappers[0].name, "abi");
			seen |= 1;
		} else {
			ASSERT_STREQ(in[i].i.name, "kv");
			seen |= 2;
		}
	}
	ASSERT_EQ(seen, 3);
	vram_pool_info_free(&in->i, n);

	struct usage_next *un = NULL;
	ASSERT_OK(vram_audit(c, sizeof(*un), (struct vram_process_usage **)&un,
			     &n, NULL));
	ASSERT_GE(n, 1);
	for (size_t i = 0; i < n; i++) {
		ASSERT_EQ(un[i].u.size, sizeof(*un));
		ASSERT_EQ(un[i].tail[0] | un[i].tail[1], 0);
	}
	free(un);

	vram_client_close(c);
	integ_stop();
}

TEST(pool_state_of_a_closed_handle_is_invalid)
{
	integ_start("64M");
	vram_client *c = integ_connect("abi");
	vram_pool *p = integ_pool(c, "w", "weights", VRAM_POLICY_DISCARD, 0);

	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_ACTIVE);
	/* Closing the client closes its pools: p is no handle any more. */
	vram_client_close(c);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_INVALID);
	ASSERT(strstr(vram_last_error(), "not an open pool") != NULL);
	ASSERT_EQ(vram_pool_state(NULL), VRAM_STATE_INVALID);
	ASSERT_STREQ(vram_state_name(VRAM_STATE_INVALID), "invalid");
	ASSERT_STREQ(vram_state_name(VRAM_STATE_PAUSED), "paused");
	integ_stop();
}
