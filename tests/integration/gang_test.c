/* SPDX-License-Identifier: Apache-2.0 */
/* Gang pause and resume across ranks: one process per rank, each with its
 * pools on its own emulated device (vramd --host-devices N), registered
 * under one job (VRAM_JOB), the way RL jobs run one rank per GPU. A gang
 * call is all or nothing: a rank that dies after its ack, or never acks,
 * undoes it and is named in the report. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "integ.h"

#define RANKS_MAX 4
#define POOL_BYTES (1 * MiB)

/* How a rank handles the daemon's events. */
enum rank_mode {
	RANK_THREAD, /* a background thread acks at once */
	RANK_LATER,  /* acks only once told to (then as RANK_THREAD) */
	RANK_NEVER,  /* never reads its events */
};

struct rank {
	pid_t pid;
	struct integ_sync sync;
};

/* The child: pools "rankN-w" (tag weights) and "rankN-kv" (tag kv) on
 * device n, filled; on 'c' it checks them and exits 0 if intact; on 'd'
 * starts handling events; on 'q' exits at once. */
static void rank_main(unsigned n, enum rank_mode mode, struct integ_sync *s)
{
	char name[64], inst[32];
	snprintf(inst, sizeof(inst), "rank-%u", n);
	setenv("VRAM_JOB", "job1", 1);
	setenv("VRAM_INSTANCE", inst, 1);
	vram_client *c = integ_connect(inst);
	const char *tags[2] = { "weights", "kv" };
	void *ptr[2];
	for (int k = 0; k < 2; k++) {
		struct vram_pool_options o = VRAM_POOL_OPTIONS_INIT;
		vram_pool *p;
		snprintf(name, sizeof(name), "rank%u-%s", n, k ? "kv" : "w");
		o.name = name;
		o.tag = tags[k];
		o.device = n;
		o.policy = VRAM_POLICY_HOST;
		o.reserve_bytes = 4 * MiB;
		if (vram_pool_create(c, &o, &p) < 0 ||
		    vram_alloc(p, POOL_BYTES, &ptr[k]) < 0)
			_exit(10);
		integ_fill(ptr[k], POOL_BYTES, 100 * n + (unsigned)k + 1);
	}
	if (mode == RANK_THREAD && vram_client_start_thread(c) < 0)
		_exit(11);
	integ_signal(s->to_parent[1]);
	for (;;) {
		char cmd;
		if (read(s->to_child[0], &cmd, 1) != 1)
			_exit(12);
		if (cmd == 'q')
			_exit(0);
		if (cmd == 'd' && vram_client_start_thread(c) < 0)
			_exit(13);
		if (cmd == 'c') {
			for (int k = 0; k < 2; k++)
				if (integ_check(ptr[k], POOL_BYTES,
						100 * n + (unsigned)k + 1) < 0)
					_exit(20 + k);
			vram_client_close(c);
			_exit(0);
		}
	}
}

static void rank_start(struct rank *r, unsigned n, enum rank_mode mode)
{
	integ_sync_init(&r->sync);
	r->pid = fork();
	ASSERT(r->pid >= 0);
	if (r->pid == 0)
		rank_main(n, mode, &r->sync);
	integ_wait_signal(r->sync.to_parent[0]);
}

/* Sends the rank a command ('d': handle events from now on). */
static void rank_finish(struct rank *r, char cmd)
{
	ASSERT_EQ(write(r->sync.to_child[1], &cmd, 1), 1);
}

/* Sends cmd ('c': check the pools, 'q': quit) and reaps the rank, which
 * must exit 0 (for 'c': its pools intact). */
static void rank_end(struct rank *r, char cmd)
{
	ASSERT_EQ(write(r->sync.to_child[1], &cmd, 1), 1);
	ASSERT_EQ(harness_wait(r->pid, 10000), 0);
}

static enum vram_state pool_state(vram_client *c, unsigned n, const char *kind)
{
	char name[64];
	snprintf(name, sizeof(name), "rank%u-%s", n, kind);
	return integ_info(c, name).state;
}

static void start_devices(const char *n)
{
	const char *const extra[] = { "--host-devices", n, "--host-capacity",
				      "256M", NULL };
	integ_start_args(extra);
}

/* The weights of every rank pause and resume as one, by job and tag; the
 * kv pools stay; each device's free memory moves by its rank's pool. */
TEST(gang_pause_resume_across_ranks)
{
	start_devices("4");
	struct rank ranks[4];
	for (unsigned i = 0; i < 4; i++)
		rank_start(&ranks[i], i, RANK_THREAD);
	vram_client *c = integ_connect("controller");
	struct vram_selector sel = VRAM_SELECTOR_INIT;
	struct vram_report rep = VRAM_REPORT_INIT;
	sel.job = "job1";
	sel.tag = "weights";

	ASSERT_OK(vram_gang_pause(c, &sel, 0, &rep));
	ASSERT_EQ(rep.pools, 4);
	ASSERT_EQ(rep.failed, 0);
	ASSERT_EQ(rep.rolled_back, 0);
	ASSERT_EQ(rep.failed_err, 0);
	ASSERT_EQ(rep.n_devices, 4);
	uint64_t sum_before = 0, sum_after = 0;
	for (unsigned d = 0; d < 4; d++) {
		ASSERT_EQ(rep.devices[d].index, d);
		ASSERT(rep.devices[d].uuid[0] != '\0');
		char name[32];
		snprintf(name, sizeof(name), "rank%u-w", d);
		ASSERT_EQ(rep.devices[d].free_after -
				  rep.devices[d].free_before,
			  integ_info(c, name).bytes);
		sum_before += rep.devices[d].free_before;
		sum_after += rep.devices[d].free_after;
	}
	ASSERT_EQ(sum_before, rep.free_before);
	ASSERT_EQ(sum_after, rep.free_after);
	for (unsigned i = 0; i < 4; i++) {
		ASSERT_EQ(pool_state(c, i, "w"), VRAM_STATE_PAUSED);
		ASSERT_EQ(pool_state(c, i, "kv"), VRAM_STATE_ACTIVE);
	}
	ASSERT_EQ(vram_gang_pause(c, &sel, 0, &rep), -EALREADY);

	rep = (struct vram_report)VRAM_REPORT_INIT;
	ASSERT_OK(vram_gang_resume(c, &sel, 0, &rep));
	ASSERT_EQ(rep.pools, 4);
	for (unsigned d = 0; d < 4; d++) {
		char name[32];
		snprintf(name, sizeof(name), "rank%u-w", d);
		ASSERT_EQ(rep.devices[d].free_before -
				  rep.devices[d].free_after,
			  integ_info(c, name).bytes);
	}

	/* By a list of owners: ranks 1 and 3, every tag. */
	uint32_t pids[2] = { (uint32_t)ranks[1].pid, (uint32_t)ranks[3].pid };
	struct vram_selector by_pid = VRAM_SELECTOR_INIT;
	by_pid.owner_pids = pids;
	by_pid.n_owner_pids = 2;
	ASSERT_OK(vram_gang_pause(c, &by_pid, 0, &rep));
	ASSERT_EQ(rep.pools, 4);
	ASSERT_EQ(pool_state(c, 1, "kv"), VRAM_STATE_PAUSED);
	ASSERT_EQ(pool_state(c, 0, "kv"), VRAM_STATE_ACTIVE);
	ASSERT_OK(vram_gang_resume(c, &by_pid, 0, &rep));

	for (unsigned i = 0; i < 4; i++)
		rank_end(&ranks[i], 'c');
	vram_client_close(c);
	integ_stop();
}

struct gang_call {
	vram_client *c;
	struct vram_selector sel;
	struct vram_report rep;
	unsigned timeout_ms;
	int r;
};

static void *gang_call_run(void *arg)
{
	struct gang_call *g = arg;
	g->r = vram_gang_pause(g->c, &g->sel, g->timeout_ms, &g->rep);
	return NULL;
}

/* Rank 0 acks the pause and is SIGKILLed before rank 2 has acked: the
 * gang fails there, the others are resumed, and the report names rank 0. */
TEST(gang_rank_dies_between_ack_and_end)
{
	start_devices("3");
	struct rank ranks[3];
	rank_start(&ranks[0], 0, RANK_THREAD);
	rank_start(&ranks[1], 1, RANK_THREAD);
	rank_start(&ranks[2], 2, RANK_LATER);
	vram_client *watch = integ_connect("watch");
	struct gang_call g = { .c = integ_connect("controller"),
			       .sel = VRAM_SELECTOR_INIT,
			       .rep = VRAM_REPORT_INIT };
	g.sel.job = "job1";
	g.sel.tag = "weights";
	pthread_t th;
	ASSERT_OK(pthread_create(&th, NULL, gang_call_run, &g));

	/* Until rank 0's part is done (it acked, its pool is paused). */
	int tries = 0;
	while (pool_state(watch, 0, "w") != VRAM_STATE_PAUSED && tries++ < 1000)
		harness_msleep(5);
	ASSERT_EQ(pool_state(watch, 0, "w"), VRAM_STATE_PAUSED);
	ASSERT_EQ(pool_state(watch, 2, "w"), VRAM_STATE_PAUSING);
	ASSERT_OK(kill(ranks[0].pid, SIGKILL));
	ASSERT_EQ(harness_wait(ranks[0].pid, 5000), 128 + SIGKILL);
	/* The daemon drops the dead rank's pools before rank 2 acks. */
	struct vram_selector s0 = VRAM_SELECTOR_INIT;
	s0.owner = "rank-0";
	struct vram_pool_info *infos = NULL;
	size_t n = 1;
	for (tries = 0; n && tries < 1000; tries++) {
		vram_pool_info_free(infos, n);
		infos = NULL;
		ASSERT(vram_list(watch, &s0, sizeof(*infos), &infos, &n) >= 0);
		if (n)
			harness_msleep(5);
	}
	vram_pool_info_free(infos, n);
	ASSERT_EQ(n, 0);
	rank_finish(&ranks[2], 'd');
	ASSERT_OK(pthread_join(th, NULL));

	ASSERT_EQ(g.r, -ESRCH);
	ASSERT(strstr(vram_last_error(), "undone") != NULL ||
	       g.rep.failed_err == ESRCH);
	ASSERT_EQ(g.rep.failed_err, ESRCH);
	ASSERT_EQ(g.rep.failed_pid, (uint32_t)ranks[0].pid);
	ASSERT_EQ(g.rep.failed_device, 0);
	ASSERT_STREQ(g.rep.failed_instance, "rank-0");
	ASSERT_STREQ(g.rep.failed_pool, "rank0-w");
	ASSERT_EQ(g.rep.rolled_back, 2);
	ASSERT_EQ(g.rep.pools, 0);
	ASSERT_EQ(pool_state(watch, 1, "w"), VRAM_STATE_ACTIVE);
	ASSERT_EQ(pool_state(watch, 2, "w"), VRAM_STATE_ACTIVE);
	rank_end(&ranks[1], 'c');
	rank_end(&ranks[2], 'c');
	vram_client_close(g.c);
	vram_client_close(watch);
	integ_stop();
}

/* Rank 2 never reads its events: at the deadline the gang fails there,
 * ranks 0 and 1 are resumed, and the report names rank 2. */
TEST(gang_rank_never_acks)
{
	start_devices("3");
	struct rank ranks[3];
	rank_start(&ranks[0], 0, RANK_THREAD);
	rank_start(&ranks[1], 1, RANK_THREAD);
	rank_start(&ranks[2], 2, RANK_NEVER);
	vram_client *c = integ_connect("controller");
	struct vram_selector sel = VRAM_SELECTOR_INIT;
	struct vram_report rep = VRAM_REPORT_INIT;
	sel.job = "job1";
	sel.tag = "weights";

	ASSERT_EQ(vram_gang_pause(c, &sel, 3000, &rep), -ETIMEDOUT);
	ASSERT(strstr(vram_last_error(), "rank of pid") != NULL);
	ASSERT_EQ(rep.failed_err, ETIMEDOUT);
	ASSERT_EQ(rep.failed_pid, (uint32_t)ranks[2].pid);
	ASSERT_EQ(rep.failed_device, 2);
	ASSERT_STREQ(rep.failed_instance, "rank-2");
	ASSERT_EQ(rep.rolled_back, 2);
	ASSERT_EQ(rep.pools, 0);
	ASSERT_EQ(pool_state(c, 0, "w"), VRAM_STATE_ACTIVE);
	ASSERT_EQ(pool_state(c, 1, "w"), VRAM_STATE_ACTIVE);
	/* The late rank's pool is left as the deadline found it. */
	ASSERT_EQ(pool_state(c, 2, "w"), VRAM_STATE_PAUSING);
	rank_end(&ranks[0], 'c');
	rank_end(&ranks[1], 'c');
	rank_end(&ranks[2], 'q');
	vram_client_close(c);
	integ_stop();
}

/* Without --gang the same late rank leaves the others paused: what the
 * gang call exists to prevent. */
TEST(plain_pause_with_late_rank_leaves_others_paused)
{
	start_devices("2");
	struct rank ranks[2];
	rank_start(&ranks[0], 0, RANK_THREAD);
	rank_start(&ranks[1], 1, RANK_NEVER);
	vram_client *c = integ_connect("controller");
	struct vram_selector sel = VRAM_SELECTOR_INIT;
	struct vram_report rep = VRAM_REPORT_INIT;
	sel.job = "job1";
	sel.tag = "weights";
	ASSERT_EQ(vram_pause(c, &sel, 3000, &rep), -ETIMEDOUT);
	ASSERT_EQ(rep.failed_err, 0);
	ASSERT_EQ(pool_state(c, 0, "w"), VRAM_STATE_PAUSED);
	ASSERT_OK(vram_resume(c,
			      &(struct vram_selector){ .size = sizeof(sel),
						       .name = "rank0-w" },
			      0, &rep));
	rank_end(&ranks[0], 'c');
	rank_end(&ranks[1], 'q');
	vram_client_close(c);
	integ_stop();
}

static int run_ctl(char *out, size_t cap, const char *const args[])
{
	const char *bin = getenv("VRAMCTL_BIN");
	const char *argv[16] = { bin ? bin : "build/vramctl", "--socket",
				 integ_daemon.socket };
	unsigned n = 3;
	for (unsigned i = 0; args[i] && n < 15; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	return harness_run_capture(argv, out, cap);
}

/* vramctl pause --job --gang: the per-device lines, and, with a late
 * rank, the rank that undid it in text and in --json; exit status 5. */
TEST(vramctl_gang_pause_names_the_rank)
{
	start_devices("2");
	struct rank ranks[2];
	rank_start(&ranks[0], 0, RANK_THREAD);
	rank_start(&ranks[1], 1, RANK_THREAD);
	static char out[65536];
	char want[128];

	const char *const pause[] = { "pause",	 "--job",  "job1", "--tag",
				      "weights", "--gang", NULL };
	ASSERT_EQ(run_ctl(out, sizeof(out), pause), 0);
	ASSERT(strstr(out, "paused 2 pools") != NULL);
	ASSERT(strstr(out, "  device 1 free") != NULL);
	const char *const resume[] = { "resume",  "--job",  "job1", "--tag",
				       "weights", "--gang", NULL };
	ASSERT_EQ(run_ctl(out, sizeof(out), resume), 0);
	const char *const ls[] = { "ls", "--json", NULL };
	ASSERT_EQ(run_ctl(out, sizeof(out), ls), 0);
	ASSERT(strstr(out, "\"owner_job\": \"job1\"") != NULL ||
	       strstr(out, "\"owner_job\":\"job1\"") != NULL);
	ASSERT(strstr(out, "\"device_uuid\"") != NULL);
	rank_end(&ranks[1], 'c');

	/* A rank that never acks, by --owners. */
	rank_start(&ranks[1], 1, RANK_NEVER);
	char pids[64];
	snprintf(pids, sizeof(pids), "%d,%d", ranks[0].pid, ranks[1].pid);
	const char *const late[] = { "--timeout", "3000",   "pause",
				     "--owners",  pids,	    "--tag",
				     "weights",	  "--gang", NULL };
	ASSERT_EQ(run_ctl(out, sizeof(out), late), 5);
	snprintf(want, sizeof(want),
		 "gang undone by rank pid %d (instance 'rank-1', device 1)",
		 ranks[1].pid);
	ASSERT(strstr(out, want) != NULL);
	ASSERT(strstr(out, "1 pool brought back") != NULL);
	rank_end(&ranks[1], 'q');
	rank_start(&ranks[1], 1, RANK_NEVER);
	snprintf(pids, sizeof(pids), "%d,%d", ranks[0].pid, ranks[1].pid);
	const char *const late_json[] = { "--timeout", "3000",	   "--json",
					  "pause",     "--owners", pids,
					  "--gang",    NULL };
	ASSERT_EQ(run_ctl(out, sizeof(out), late_json), 5);
	snprintf(want, sizeof(want), "\"pid\": %d", ranks[1].pid);
	ASSERT(strstr(out, "\"failed_rank\": {") != NULL);
	ASSERT(strstr(out, want) != NULL);
	ASSERT(strstr(out, "\"rolled_back\": 2") != NULL);
	rank_end(&ranks[0], 'c');
	rank_end(&ranks[1], 'q');
	integ_stop();
}

/* A gang resume that one device cannot hold: rank 1's resume fails with
 * ENOMEM (another process took its device's memory meanwhile), so ranks 0
 * and 2, already resumed, are paused again, and the report names rank 1. */
TEST(gang_resume_undone_when_one_device_is_full)
{
	start_devices("3");
	struct rank ranks[3];
	for (unsigned i = 0; i < 3; i++)
		rank_start(&ranks[i], i, RANK_THREAD);
	vram_client *c = integ_connect("controller");
	struct vram_selector sel = VRAM_SELECTOR_INIT;
	struct vram_report rep = VRAM_REPORT_INIT;
	sel.job = "job1";
	sel.tag = "weights";
	ASSERT_OK(vram_gang_pause(c, &sel, 0, &rep));

	/* Device 1's free memory, all of it, in a pool of its own. */
	vram_client *hog = integ_connect("hog");
	struct vram_stats st = integ_stats(hog);
	uint64_t gran =
		st.devices[1].granularity ? st.devices[1].granularity : 1;
	uint64_t take = st.devices[1].free_bytes / gran * gran;
	struct vram_pool_options o = VRAM_POOL_OPTIONS_INIT;
	vram_pool *hp;
	o.name = "hog";
	o.device = 1;
	o.reserve_bytes = take;
	ASSERT_OK(vram_pool_create(hog, &o, &hp));
	ASSERT_OK(vram_pool_reserve(hp, take));

	rep = (struct vram_report)VRAM_REPORT_INIT;
	ASSERT_EQ(vram_gang_resume(c, &sel, 0, &rep), -ENOMEM);
	ASSERT_EQ(rep.failed_err, ENOMEM);
	ASSERT_EQ(rep.failed_pid, (uint32_t)ranks[1].pid);
	ASSERT_EQ(rep.failed_device, 1);
	ASSERT_EQ(rep.rolled_back, 2);
	ASSERT_EQ(rep.pools, 0);
	for (unsigned i = 0; i < 3; i++)
		ASSERT_EQ(pool_state(c, i, "w"), VRAM_STATE_PAUSED);

	/* Once the memory is back, the same call succeeds and nothing was
	 * lost on the way (host backups). */
	vram_client_close(hog);
	int tries = 0;
	while (integ_stats(c).devices[1].free_bytes < take && tries++ < 300)
		harness_msleep(10);
	ASSERT_OK(vram_gang_resume(c, &sel, 0, &rep));
	ASSERT_EQ(rep.pools, 3);
	for (unsigned i = 0; i < 3; i++)
		rank_end(&ranks[i], 'c');
	vram_client_close(c);
	integ_stop();
}
