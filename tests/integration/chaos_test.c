/* SPDX-License-Identifier: Apache-2.0 */
/* Chaos: random SIGKILLs of owners (mid-save: their own pause of a host
 * pool), of third-party pausers (mid-pause, mid-resume of another's
 * pools) and of trainers (mappers owing acks), on a small emulated
 * device. At the end the keeper's pools hold their content byte for byte,
 * no pool is stuck in a transition, and the daemon holds exactly the live
 * pools' bytes; integ_stop() then checks fds and bytes are back to the
 * start. CHAOS_ROUNDS sets the rounds (default 40; make chaos N), and
 * CHAOS_SEED the random seed (printed). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "integ.h"

#define KEEP 3
#define POOL_BYTES (4 * MiB)

enum role { ROLE_OWNER, ROLE_PAUSER, ROLE_TRAINER, ROLES };
static const char *const role_name[ROLES] = { "owner", "pauser", "trainer" };

/* A host-backed pool of POOL_BYTES, all of it one allocation at *a. */
static vram_pool *chaos_pool(vram_client *c, const char *name, const char *tag,
			     void **a)
{
	struct vram_pool_options o = VRAM_POOL_OPTIONS_INIT;
	vram_pool *p;
	o.name = name;
	o.tag = tag;
	o.policy = VRAM_POLICY_HOST;
	o.reserve_bytes = POOL_BYTES;
	if (vram_pool_create(c, &o, &p) < 0 || vram_alloc(p, POOL_BYTES, a) < 0)
		_exit(2);
	return p;
}

/* The keeper: owns KEEP host-backed pools with known content and acks on
 * its event thread. On the parent's word it resumes them all and checks
 * them: exit 0 when every byte is back, 10+i when pool i is not. */
static void keeper_run(int ready, int check)
{
	vram_client *c = integ_connect("keeper");
	vram_pool *p[KEEP];
	void *a[KEEP];
	char name[16];
	for (int i = 0; i < KEEP; i++) {
		snprintf(name, sizeof(name), "keep%d", i);
		p[i] = chaos_pool(c, name, "keep", &a[i]);
		integ_fill(a[i], POOL_BYTES, 100 + i);
	}
	if (vram_client_start_thread(c) < 0)
		_exit(3);
	integ_signal(ready);
	integ_wait_signal(check);
	for (int i = 0; i < KEEP; i++) {
		int r = -EBUSY;
		for (int k = 0; k < 2000 && vram_pool_state(p[i]) != VRAM_STATE_ACTIVE; k++) {
			r = vram_pool_resume(p[i], NULL);
			if (r < 0)
				harness_msleep(5);
		}
		if (vram_pool_state(p[i]) != VRAM_STATE_ACTIVE)
			_exit(20 + i);
		if (integ_check(a[i], POOL_BYTES, 100 + i) != 0)
			_exit(10 + i);
	}
	integ_signal(ready);
	integ_wait_signal(check);
	vram_client_close(c);
	_exit(0);
}

/* One victim of role: signals ready, then works until killed. */
static void victim_run(enum role role, int round, int ready)
{
	vram_client *c;
	char name[32];
	struct vram_selector sel = { .size = sizeof(sel), .tag = "keep" };

	if (vram_connect(NULL, role_name[role], 0, &c) < 0)
		_exit(2);
	if (role == ROLE_OWNER) {
		snprintf(name, sizeof(name), "victim%d", round);
		void *a;
		vram_pool *p = chaos_pool(c, name, "victim", &a);
		integ_fill(a, POOL_BYTES, (uint32_t)round);
		integ_signal(ready);
		for (;;) { /* saves and restores its own pool until killed */
			vram_pool_pause(p, NULL);
			vram_pool_resume(p, NULL);
		}
	}
	if (role == ROLE_PAUSER) {
		integ_signal(ready);
		for (;;) {
			vram_pause(c, &sel, 2000, NULL);
			vram_resume(c, &sel, 2000, NULL);
		}
	}
	vram_pool *q;
	snprintf(name, sizeof(name), "keep%d", round % KEEP);
	if (vram_pool_open(c, name, VRAM_OPEN_READONLY, &q) < 0 &&
	    vram_pool_open(c, name, VRAM_OPEN_READONLY, &q) < 0)
		_exit(0); /* busy twice: this round's trainer sits out */
	vram_client_start_thread(c);
	integ_signal(ready);
	for (;;)
		pause(); /* a mapper that acks until it is killed */
}

/* Waits until the daemon has seen every victim go and no pool is between
 * states: a pauser killed after its request went out still has it carried
 * out (unanswered), and the keeper's check must not race that pause. */
static void chaos_wait_quiet(void)
{
	vram_client *c = integ_connect("chaos-quiet");
	for (int i = 0; i < 2000; i++) {
		struct vram_pool_info *infos = NULL;
		size_t n = 0;
		bool moving = false;
		ASSERT_OK(vram_list(c, NULL, sizeof(*infos), &infos, &n));
		for (size_t k = 0; k < n; k++)
			moving |= infos[k].state == VRAM_STATE_PAUSING ||
				  infos[k].state == VRAM_STATE_RESUMING;
		vram_pool_info_free(infos, n);
		/* The keeper and this client. */
		if (!moving && integ_stats(c).sessions == 2) {
			vram_client_close(c);
			return;
		}
		harness_msleep(5);
	}
	TEST_FAIL("pools still moving or victims still connected after 10 s");
}

static unsigned env_rounds(void)
{
	const char *s = getenv("CHAOS_ROUNDS");
	int n = s ? atoi(s) : 0;
	return n > 0 ? (unsigned)n : 40;
}

TEST(random_kills_lose_nothing)
{
	unsigned rounds = env_rounds();
	unsigned seed = getenv("CHAOS_SEED") ? (unsigned)atoi(getenv("CHAOS_SEED"))
					     : (unsigned)time(NULL);
	unsigned kills[ROLES] = { 0 };
	srand(seed);
	integ_start("64M");
	struct integ_sync ks;
	integ_sync_init(&ks);
	pid_t keeper = fork();
	ASSERT(keeper >= 0);
	if (keeper == 0) {
		close(ks.to_parent[0]);
		close(ks.to_child[1]);
		keeper_run(ks.to_parent[1], ks.to_child[0]);
	}
	close(ks.to_parent[1]);
	close(ks.to_child[0]);
	char b;
	if (read(ks.to_parent[0], &b, 1) != 1)
		TEST_FAIL("the keeper died: %d", harness_wait(keeper, 10000));
	for (unsigned round = 0; round < rounds; round++) {
		pid_t pids[ROLES];
		if (getenv("CHAOS_TRACE"))
			fprintf(stderr, "chaos: round %u\n", round);
		for (int r = 0; r < ROLES; r++) {
			int up[2];
			ASSERT_OK(pipe(up));
			pids[r] = fork();
			ASSERT(pids[r] >= 0);
			if (pids[r] == 0) {
				close(up[0]);
				victim_run((enum role)r, (int)round, up[1]);
			}
			close(up[1]);
			/* A trainer that sat out closes without a word. */
			(void)!read(up[0], &b, 1);
			close(up[0]);
		}
		/* Kill them in a random order at random moments. */
		for (int k = 0; k < ROLES; k++) {
			int r = (k + (int)(rand() % ROLES)) % ROLES;
			if (pids[r] < 0)
				r = (r + 1) % ROLES;
			if (pids[r] < 0)
				r = (r + 1) % ROLES;
			harness_msleep((unsigned)(rand() % 12));
			kill(pids[r], SIGKILL);
			harness_wait(pids[r], 10000);
			pids[r] = -1;
			kills[r]++;
		}
	}
	chaos_wait_quiet();
	/* The keeper resumes and checks its pools while it still holds them. */
	integ_signal(ks.to_child[1]);
	if (read(ks.to_parent[0], &b, 1) != 1)
		TEST_FAIL("the keeper found a pool changed or stuck: %d",
			  harness_wait(keeper, 10000));
	vram_client *c = integ_connect("chaos-check");
	struct vram_stats st = integ_stats(c);
	struct vram_pool_info *infos = NULL;
	size_t n = 0;
	ASSERT_OK(vram_list(c, NULL, sizeof(*infos), &infos, &n));
	for (size_t i = 0; i < n; i++)
		if (infos[i].state != VRAM_STATE_ACTIVE)
			TEST_FAIL("pool %s is stuck %d", infos[i].name, infos[i].state);
	ASSERT_EQ(n, KEEP);
	vram_pool_info_free(infos, n);
	ASSERT_EQ(st.pools, KEEP);
	ASSERT_UEQ(st.used_bytes, integ_base.used_bytes + KEEP * POOL_BYTES);
	vram_client_close(c);
	integ_signal(ks.to_child[1]);
	int ks_status = harness_wait(keeper, 20000);
	fprintf(stderr,
		"chaos: seed %u, %u rounds: %u owners, %u pausers, %u trainers killed; %u pools checked byte-exact (%llu bytes)\n",
		seed, rounds, kills[ROLE_OWNER], kills[ROLE_PAUSER],
		kills[ROLE_TRAINER], KEEP,
		(unsigned long long)KEEP * POOL_BYTES);
	ASSERT_EQ(ks_status, 0);
	integ_stop();
}
