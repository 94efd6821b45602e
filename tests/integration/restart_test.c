/* SPDX-License-Identifier: Apache-2.0 */
/* vramd restarted, killed and upgraded under an fd store driven as systemd
 * drives it (harness_daemon_start_store): the FDSTORE=1 fds are kept by
 * the harness and passed to the next vramd with LISTEN_FDS,
 * LISTEN_FDNAMES and LISTEN_PID. Every pool and byte must come back, and
 * nothing be granted twice. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "integ.h"

#define STORE_MAX 4096

static void rs_start_grace(const char *grace_ms, unsigned store_max)
{
	const char *const extra[] = { "--host-capacity",
				      "64M",
				      "--ack-timeout-ms",
				      "3000",
				      "--chunk-max",
				      "2M",
				      "--reattach-grace-ms",
				      grace_ms,
				      NULL };
	int r = harness_daemon_start_store(&integ_daemon, extra, store_max);
	if (r < 0)
		TEST_FAIL("cannot start vramd: %s", strerror(-r));
}

static void rs_start(void)
{
	rs_start_grace("60000", STORE_MAX);
}

/* Kills the daemon with sig, as systemd's restart (SIGTERM) or a crash
 * (SIGKILL) would, and starts the next one with the store. */
static void rs_restart(int sig)
{
	ASSERT_OK(harness_daemon_kill(&integ_daemon, sig));
	int st = harness_daemon_wait(&integ_daemon, 10000);
	ASSERT_EQ(st, sig == SIGTERM ? 0 : 128 + sig);
	int r = harness_daemon_restart(&integ_daemon, NULL);
	if (r < 0)
		TEST_FAIL("restart: %s", strerror(-r));
}

/* How many fds the store holds whose name starts with prefix. */
static int rs_store_count(const char *prefix)
{
	int n = harness_store_count(&integ_daemon, prefix);
	ASSERT_GE(n, 0);
	return n;
}

/* Waits until the store holds chunks chunk fds and backups backup fds, one
 * table and the listening socket (the store is synced before each reply,
 * and at the latest by the daemon's 1 s timer). */
static void rs_wait_store(int chunks, int backups)
{
	for (int i = 0; i < 400; i++) {
		if (rs_store_count("vramd-c-") == chunks &&
		    rs_store_count("vramd-b-") == backups &&
		    rs_store_count("vramd-t-") == 1 &&
		    rs_store_count("vramd-listen") == 1)
			return;
		harness_msleep(10);
	}
	static char names[1 << 16];
	harness_store_list(&integ_daemon, names, sizeof(names));
	TEST_FAIL("store holds, not %d chunks and %d backups:\n%s", chunks,
		  backups, names);
}

/* Drops every pool, checks the daemon and the store hold nothing more,
 * and stops the daemon (which drops the store, as a stop does). */
static void rs_end(void)
{
	vram_client *c = integ_connect("rs-end");
	struct vram_pool_info *infos = NULL;
	size_t n = 0;
	ASSERT_OK(vram_list(c, NULL, sizeof(*infos), &infos, &n));
	for (size_t i = 0; i < n; i++)
		ASSERT_OK(vram_pool_drop(c, infos[i].name));
	vram_pool_info_free(infos, n);
	integ_wait_baseline(c, integ_stats(c).open_fds, 0);
	ASSERT_EQ(integ_stats(c).pools, 0);
	vram_client_close(c);
	rs_wait_store(0, 0);
	integ_stop_unchecked();
}

static vram_pool *rs_open(vram_client *c, const char *name)
{
	vram_pool *p = NULL;
	int r = vram_pool_open(c, name, 0, &p);
	if (r < 0)
		TEST_FAIL("open %s: %s (%s)", name, strerror(-r),
			  vram_last_error());
	return p;
}

static void rs_expect_content(vram_pool *p, size_t len, uint32_t seed)
{
	ASSERT_UEQ(vram_pool_size(p), len);
	ASSERT_OK(integ_check((void *)vram_pool_base(p), len, seed));
}

/* A child that owns pools and then waits, never answering events. */
static pid_t rs_owner(struct integ_sync *s, bool pause_first,
		      enum vram_policy pol, unsigned flags)
{
	pid_t pid = fork();
	if (pid == 0) {
		vram_client *c = integ_connect("owner");
		vram_pool *w = integ_pool(c, "w", "weights", pol, flags);
		ASSERT_OK(vram_pool_reserve(w, 8 * MiB));
		integ_fill((void *)vram_pool_base(w), 8 * MiB, 7);
		if (pause_first)
			ASSERT_OK(vram_pool_pause(w, NULL));
		integ_signal(s->to_parent[1]);
		pause();
		_exit(0);
	}
	integ_wait_signal(s->to_parent[0]);
	return pid;
}

static void rs_reap(pid_t pid)
{
	kill(pid, SIGKILL);
	ASSERT_EQ(harness_wait(pid, 5000), 128 + SIGKILL);
}

/* Pools of a client that is still alive come back with their bytes
 * counted: the new daemon grants only what is really free. */
TEST(sigkill_keeps_pools_and_grants_nothing_twice)
{
	rs_start();
	struct integ_sync s;
	integ_sync_init(&s);
	pid_t pid = rs_owner(&s, false, VRAM_POLICY_HOST, VRAM_POOL_PERSIST);
	vram_client *c = integ_connect("second");
	vram_pool *kv = integ_pool(c, "kv", "kv", VRAM_POLICY_DISCARD, 0);
	ASSERT_OK(vram_pool_reserve(kv, 4 * MiB));
	vram_client_close(c); /* kv goes with its owner */
	c = integ_connect("third");
	kv = integ_pool(c, "kv2", "kv", VRAM_POLICY_DISCARD, 0);
	ASSERT_OK(vram_pool_reserve(kv, 4 * MiB));
	rs_wait_store(4 + 2, 1);

	rs_restart(SIGKILL);
	vram_client *n = integ_connect("after");
	struct vram_stats st = integ_stats(n);
	ASSERT_EQ(st.pools, 2);
	ASSERT_UEQ(st.used_bytes, 12 * MiB);
	struct vram_pool_info wi = integ_info(n, "w");
	ASSERT_EQ(wi.state, VRAM_STATE_ACTIVE);
	ASSERT_UEQ(wi.bytes, 8 * MiB);
	/* 64 MiB less the 12 the old clients map: 54 MiB is too much. */
	vram_pool *big = integ_pool(n, "big", "x", VRAM_POLICY_DISCARD, 0);
	ASSERT_EQ(vram_pool_reserve(big, 54 * MiB), -ENOMEM);
	ASSERT_OK(vram_pool_reserve(big, 52 * MiB));
	ASSERT_EQ(vram_pool_reserve(big, 54 * MiB), -ENOMEM);
	vram_pool_close(big);
	/* The content, byte for byte, through a new mapping. */
	vram_pool *w = rs_open(n, "w");
	rs_expect_content(w, 8 * MiB, 7);
	vram_pool_close(w);
	vram_client_close(n);
	vram_client_close(c);
	rs_reap(pid);
	rs_end();
}

/* systemctl restart (SIGTERM) between every kind of operation. */
TEST(restart_between_operations)
{
	rs_start();
	vram_client *c = integ_connect("a");
	vram_pool *w = integ_pool(c, "w", "weights", VRAM_POLICY_HOST,
				  VRAM_POOL_PERSIST);
	ASSERT_OK(vram_pool_reserve(w, 8 * MiB));
	integ_fill((void *)vram_pool_base(w), 8 * MiB, 11);
	vram_client_close(c);

	rs_restart(SIGTERM);
	c = integ_connect("b");
	w = rs_open(c, "w");
	rs_expect_content(w, 8 * MiB, 11);
	ASSERT_OK(vram_pool_pause(w, NULL));
	ASSERT_EQ(integ_info(c, "w").state, VRAM_STATE_PAUSED);
	rs_wait_store(0, 1);
	vram_client_close(c);

	rs_restart(SIGTERM);
	c = integ_connect("c");
	struct vram_pool_info wi = integ_info(c, "w");
	ASSERT_EQ(wi.state, VRAM_STATE_PAUSED);
	ASSERT_UEQ(wi.backup_bytes, 8 * MiB);
	ASSERT_UEQ(integ_stats(c).used_bytes, 0);
	w = rs_open(c, "w");
	ASSERT_OK(vram_pool_resume(w, NULL));
	rs_expect_content(w, 8 * MiB, 11);
	vram_client_close(c);

	rs_restart(SIGKILL);
	c = integ_connect("d");
	w = rs_open(c, "w");
	rs_expect_content(w, 8 * MiB, 11);
	ASSERT_OK(vram_pool_reserve(w, 12 * MiB));
	integ_fill((char *)vram_pool_base(w) + 8 * MiB, 4 * MiB, 12);
	vram_client_close(c);

	rs_restart(SIGKILL);
	c = integ_connect("e");
	w = rs_open(c, "w");
	ASSERT_UEQ(vram_pool_size(w), 12 * MiB);
	ASSERT_OK(integ_check((void *)vram_pool_base(w), 8 * MiB, 11));
	ASSERT_OK(
		integ_check((char *)vram_pool_base(w) + 8 * MiB, 4 * MiB, 12));
	vram_client_close(c);
	rs_end();
}

/* A ping's answer skips the store's sync (it tells nothing of the pools):
 * what the answers before it told must still be in the store. A host pool
 * paused and resumed has new chunks, likely under the old fd numbers; the
 * content written after the resume, then a ping, then SIGKILL: the next
 * vramd maps the new chunks, not the released ones. */
TEST(sigkill_after_a_ping_keeps_what_was_answered)
{
	rs_start();
	vram_client *c = integ_connect("a");
	vram_pool *kv = integ_pool(c, "kv", "kv", VRAM_POLICY_DISCARD,
				   VRAM_POOL_PERSIST);
	ASSERT_OK(vram_pool_reserve(kv, 4 * MiB));
	vram_pool *w = integ_pool(c, "w", "weights", VRAM_POLICY_HOST,
				  VRAM_POOL_PERSIST);
	ASSERT_OK(vram_pool_reserve(w, 8 * MiB));
	integ_fill((void *)vram_pool_base(w), 8 * MiB, 21);
	ASSERT_OK(vram_pool_pause(w, NULL));
	ASSERT_OK(vram_pool_resume(w, NULL));
	rs_expect_content(w, 8 * MiB, 21);
	integ_fill((void *)vram_pool_base(w), 8 * MiB, 22);
	for (int i = 0; i < 100; i++)
		ASSERT_OK(vram_ping(c));

	rs_restart(SIGKILL);
	vram_client *n = integ_connect("after");
	ASSERT_EQ(integ_stats(n).pools, 2);
	ASSERT_UEQ(integ_info(n, "kv").bytes, 4 * MiB);
	vram_pool *w2 = rs_open(n, "w");
	rs_expect_content(w2, 8 * MiB, 22);
	vram_pool_close(w2);
	vram_client_close(n);
	vram_client_close(c);
	rs_end();
}

/* Killed while the owner saves its backup: the half-made backup is not
 * trusted, the pool comes back active with its content. */
TEST(sigkill_mid_save_comes_back_active)
{
	rs_start();
	struct integ_sync s;
	integ_sync_init(&s);
	pid_t pid = rs_owner(&s, false, VRAM_POLICY_HOST, VRAM_POOL_PERSIST);
	vram_client *c = integ_connect("ctl");
	struct vram_selector sel = { .size = sizeof(sel), .name = "w" };
	ASSERT_EQ(vram_pause(c, &sel, 200, NULL), -ETIMEDOUT);
	ASSERT_EQ(integ_info(c, "w").state, VRAM_STATE_PAUSING);
	vram_client_close(c);

	rs_restart(SIGKILL);
	c = integ_connect("after");
	struct vram_pool_info wi = integ_info(c, "w");
	ASSERT_EQ(wi.state, VRAM_STATE_ACTIVE);
	ASSERT_UEQ(wi.backup_bytes, 0);
	vram_pool *w = rs_open(c, "w");
	rs_expect_content(w, 8 * MiB, 7);
	/* And it pauses and resumes on the new daemon, content kept. */
	ASSERT_OK(vram_pool_pause(w, NULL));
	ASSERT_OK(vram_pool_resume(w, NULL));
	rs_expect_content(w, 8 * MiB, 7);
	vram_client_close(c);
	rs_reap(pid);
	rs_end();
}

/* Killed while a mapper that never unmaps holds the chunks: the pool comes
 * back paused, and its bytes stay counted until the grace period ends. */
TEST(sigkill_mid_unmap_holds_the_bytes_until_grace)
{
	rs_start_grace("1500", STORE_MAX);
	struct integ_sync s;
	integ_sync_init(&s);
	pid_t pid = rs_owner(&s, false, VRAM_POLICY_DISCARD, VRAM_POOL_PERSIST);
	vram_client *c = integ_connect("ctl");
	struct vram_selector sel = { .size = sizeof(sel), .name = "w" };
	ASSERT_EQ(vram_pause(c, &sel, 200, NULL), -ETIMEDOUT);
	vram_client_close(c);

	rs_restart(SIGKILL);
	c = integ_connect("after");
	ASSERT_EQ(integ_info(c, "w").state, VRAM_STATE_PAUSED);
	/* The old owner may still map them: not granted again yet. */
	ASSERT_UEQ(integ_stats(c).used_bytes, 8 * MiB);
	vram_pool *big = integ_pool(c, "big", "x", VRAM_POLICY_DISCARD, 0);
	ASSERT_EQ(vram_pool_reserve(big, 58 * MiB), -ENOMEM);
	vram_pool_close(big);
	/* After the grace period they are free. */
	integ_wait_baseline(c, integ_stats(c).open_fds, 0);
	ASSERT_EQ(integ_info(c, "w").state, VRAM_STATE_PAUSED);
	vram_client_close(c);
	rs_reap(pid);
	rs_end();
}

/* Killed while the owner restores: back to paused with the backup, which a
 * new owner restores byte for byte. */
TEST(sigkill_mid_restore_keeps_the_backup)
{
	/* The chunks given to the restorer count until the grace ends. */
	rs_start_grace("1500", STORE_MAX);
	struct integ_sync s;
	integ_sync_init(&s);
	pid_t pid = rs_owner(&s, true, VRAM_POLICY_HOST, VRAM_POOL_PERSIST);
	vram_client *c = integ_connect("ctl");
	struct vram_selector sel = { .size = sizeof(sel), .name = "w" };
	ASSERT_EQ(vram_resume(c, &sel, 200, NULL), -ETIMEDOUT);
	ASSERT_EQ(integ_info(c, "w").state, VRAM_STATE_RESUMING);
	vram_client_close(c);

	rs_restart(SIGKILL);
	rs_reap(pid);
	c = integ_connect("after");
	struct vram_pool_info wi = integ_info(c, "w");
	ASSERT_EQ(wi.state, VRAM_STATE_PAUSED);
	ASSERT_UEQ(wi.backup_bytes, 8 * MiB);
	vram_pool *w = rs_open(c, "w");
	ASSERT_OK(vram_pool_resume(w, NULL));
	rs_expect_content(w, 8 * MiB, 7);
	vram_client_close(c);
	rs_end();
}

/* An owner that never comes back: after the grace period its pool is
 * dropped as on a crash, a persistent one kept without an owner. */
TEST(owner_that_never_comes_back)
{
	rs_start_grace("1500", STORE_MAX);
	vram_client *c = integ_connect("a");
	vram_pool *kv = integ_pool(c, "kv", "kv", VRAM_POLICY_DISCARD, 0);
	ASSERT_OK(vram_pool_reserve(kv, 4 * MiB));
	vram_pool *w =
		integ_pool(c, "w", "w", VRAM_POLICY_HOST, VRAM_POOL_PERSIST);
	ASSERT_OK(vram_pool_reserve(w, 2 * MiB));
	rs_wait_store(3, 1);
	rs_restart(SIGKILL);
	vram_client_close(c); /* its connection was to the dead daemon */
	c = integ_connect("b");
	for (int i = 0; i < 300 && integ_stats(c).pools != 1; i++)
		harness_msleep(10);
	ASSERT_EQ(integ_stats(c).pools, 1);
	struct vram_pool_info wi = integ_info(c, "w");
	ASSERT_EQ(wi.owner_pid, 0);
	rs_wait_store(1, 1);
	vram_client_close(c);
	rs_end();
}

/* Written as vramd 0.2's first table format (version 1: no mappers, no
 * held flags) and read by this one. */
TEST(older_table_is_read)
{
	rs_start();
	vram_client *c = integ_connect("a");
	vram_pool *w = integ_pool(c, "w", "weights", VRAM_POLICY_HOST,
				  VRAM_POOL_PERSIST);
	ASSERT_OK(vram_pool_reserve(w, 4 * MiB));
	integ_fill((void *)vram_pool_base(w), 4 * MiB, 5);
	ASSERT_OK(vram_pool_pause(w, NULL));
	uint64_t id = integ_info(c, "w").id;
	vram_client_close(c);
	rs_wait_store(0, 1);
	ASSERT_OK(harness_daemon_kill(&integ_daemon, SIGKILL));
	ASSERT_GE(harness_daemon_wait(&integ_daemon, 10000), 0);

	/* A version 1 table naming the same pool, generation 1000, so that
	 * it is the newest in the store. */
	unsigned char t[4096];
	size_t off = 0, rec;
#define PUT(p, n) (memcpy(t + off, (p), (n)), off += (n))
#define FIELD(tag, p, n)                     \
	do {                                 \
		uint16_t tg = (tag), fl = 0; \
		uint32_t ln = (n);           \
		PUT(&tg, 2);                 \
		PUT(&fl, 2);                 \
		PUT(&ln, 4);                 \
		PUT((p), ln);                \
	} while (0)
	uint32_t ver = 1, npools = 1;
	uint64_t next_id = id, next_ev = 100, gen = 1000, reserve = 1ull << 30;
	uint64_t bytes = 4 * MiB, zero = 0;
	uint32_t dev = 0, pol = 1 /* host */, flags = 1, state = 3 /* paused */;
	PUT("VRAMDTBL", 8);
	PUT(&ver, 4);
	PUT(&npools, 4);
	PUT(&next_id, 8);
	PUT(&next_ev, 8);
	PUT(&gen, 8);
	rec = off;
	off += 4;
	FIELD(1, &id, 8);
	FIELD(2, "w", 1);
	FIELD(3, "weights", 7);
	FIELD(4, &dev, 4);
	FIELD(5, &pol, 4);
	FIELD(6, &flags, 4);
	FIELD(7, &reserve, 8);
	FIELD(8, &state, 4);
	FIELD(9, &bytes, 8);
	FIELD(10, &bytes, 8);
	unsigned char chunk[16];
	memcpy(chunk, &zero, 8);
	uint64_t half = 2 * MiB;
	memcpy(chunk + 8, &half, 8);
	FIELD(12, chunk, 16);
	memcpy(chunk, &half, 8);
	FIELD(12, chunk, 16);
	/* A field from the future that may be ignored. */
	FIELD(200, "later", 5);
	uint32_t rlen = (uint32_t)(off - rec - 4);
	memcpy(t + rec, &rlen, 4);
	int fd = memfd_create("old-table", MFD_CLOEXEC);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(write(fd, t, off), (ssize_t)off);
	ASSERT_OK(harness_store_put(&integ_daemon, "vramd-t-1000", fd));
	close(fd);

	ASSERT_OK(harness_daemon_restart(&integ_daemon, NULL));
	c = integ_connect("b");
	struct vram_pool_info wi = integ_info(c, "w");
	ASSERT_EQ(wi.state, VRAM_STATE_PAUSED);
	ASSERT_UEQ(wi.backup_bytes, 4 * MiB);
	ASSERT_EQ(wi.chunks, 2);
	w = rs_open(c, "w");
	ASSERT_OK(vram_pool_resume(w, NULL));
	rs_expect_content(w, 4 * MiB, 5);
	vram_client_close(c);
	/* The old tables left the store: one, the newest, is kept. */
	rs_end();
}

/* A store too small for a grow: the grow fails at once with ENOSPC. */
TEST(full_store_fails_the_grow)
{
	rs_start_grace("60000", 8);
	vram_client *c = integ_connect("a");
	vram_pool *kv = integ_pool(c, "kv", "kv", VRAM_POLICY_DISCARD, 0);
	ASSERT_OK(vram_pool_reserve(kv, 4 * MiB));
	int r = vram_pool_reserve(kv, 16 * MiB);
	ASSERT_EQ(r, -ENOSPC);
	ASSERT(strstr(vram_last_error(), "fd store") != NULL);
	vram_client_close(c);
	rs_end();
}

/* systemctl stop: systemd drops the store; the next vramd starts empty. */
TEST(stop_frees_everything)
{
	rs_start();
	vram_client *c = integ_connect("a");
	vram_pool *w =
		integ_pool(c, "w", "w", VRAM_POLICY_HOST, VRAM_POOL_PERSIST);
	ASSERT_OK(vram_pool_reserve(w, 4 * MiB));
	vram_client_close(c);
	rs_wait_store(2, 1);
	ASSERT_OK(harness_daemon_kill(&integ_daemon, SIGTERM));
	ASSERT_EQ(harness_daemon_wait(&integ_daemon, 10000), 0);
	ASSERT_OK(harness_store_drop(&integ_daemon));
	ASSERT_OK(harness_daemon_restart(&integ_daemon, NULL));
	c = integ_connect("b");
	ASSERT_EQ(integ_stats(c).pools, 0);
	ASSERT_UEQ(integ_stats(c).used_bytes, 0);
	vram_client_close(c);
	rs_end();
}

/* ---- chaos: SIGKILL at random points of grow, pause, save and resume ---- */

#define CHAOS_REGION (2 * MiB)
#define CHAOS_REGIONS 12

/* The worker: owns "w", grows it a region at a time (each filled with its
 * own pattern, then reported on fd), and pauses and resumes it, until the
 * daemon is gone. */
static void chaos_worker(int fd, unsigned seed)
{
	vram_client *c = integ_connect("chaos");
	vram_pool *w = NULL;
	if (vram_pool_open(c, "w", 0, &w) < 0)
		w = integ_pool(c, "w", "weights", VRAM_POLICY_HOST,
			       VRAM_POOL_PERSIST);
	char ready = 'r';
	if (write(fd, &ready, 1) != 1)
		_exit(1);
	for (;;) {
		unsigned act = (unsigned)rand_r(&seed) % 3;
		uint64_t size = vram_pool_size(w);
		int r;
		if (act == 0 && size < CHAOS_REGIONS * CHAOS_REGION) {
			r = vram_pool_reserve(w, size + CHAOS_REGION);
			if (r < 0)
				break;
			integ_fill((char *)vram_pool_base(w) + size,
				   CHAOS_REGION,
				   (uint32_t)(size / CHAOS_REGION) + 1);
			unsigned char k =
				(unsigned char)(size / CHAOS_REGION) + 1;
			if (write(fd, &k, 1) != 1)
				break;
		} else if (act == 1) {
			r = vram_pool_pause(w, NULL);
			if (r < 0 && r != -EALREADY)
				break;
			r = vram_pool_resume(w, NULL);
			if (r < 0 && r != -EALREADY)
				break;
		} else {
			if (vram_ping(c) < 0)
				break;
		}
	}
	_exit(0);
}

TEST(chaos_sigkill_at_random_points)
{
	const char *env = getenv("VRAM_CHAOS_N");
	unsigned rounds = env ? (unsigned)atoi(env) : 12, seed = 12345;
	unsigned kills = 0, recovered = 0, leaks = 0;
	uint64_t checked = 0;
	unsigned filled = 0; /* regions the worker reported filled */

	if (getenv("VRAM_CHAOS_SEED"))
		seed = (unsigned)atoi(getenv("VRAM_CHAOS_SEED"));
	fprintf(stderr, "chaos: %u rounds, seed %u\n", rounds, seed);
	rs_start_grace("200", STORE_MAX);
	for (unsigned round = 0; round < rounds; round++) {
		int p[2];
		ASSERT_OK(pipe(p));
		unsigned wseed = (unsigned)rand_r(&seed);
		pid_t pid = fork();
		if (pid == 0) {
			close(p[0]);
			chaos_worker(p[1], wseed);
		}
		close(p[1]);
		char ch;
		ASSERT_EQ(read(p[0], &ch, 1), 1);
		harness_msleep((unsigned)rand_r(&seed) % 150);
		rs_restart(SIGKILL);
		kills++;
		/* The worker sees the daemon go and exits. */
		ASSERT_EQ(harness_wait(pid, 10000), 0);
		unsigned char k;
		while (read(p[0], &k, 1) == 1)
			if (k > filled)
				filled = k;
		close(p[0]);

		vram_client *c = integ_connect("check");
		struct vram_pool_info wi = integ_info(c, "w");
		recovered++;
		ASSERT(wi.state == VRAM_STATE_ACTIVE ||
		       wi.state == VRAM_STATE_PAUSED);
		ASSERT(wi.bytes >= (uint64_t)filled * CHAOS_REGION);
		vram_pool *w = rs_open(c, "w");
		if (wi.state == VRAM_STATE_PAUSED)
			ASSERT_OK(vram_pool_resume(w, NULL));
		for (unsigned i = 0; i < filled; i++) {
			if (integ_check((char *)vram_pool_base(w) +
						i * CHAOS_REGION,
					CHAOS_REGION, i + 1) != 0)
				TEST_FAIL(
					"round %u: region %u of %u lost its content",
					round, i, filled);
			checked += CHAOS_REGION;
		}
		/* Once the grace period is over, exactly the pool's bytes are
		 * used, and the store holds its chunks, backup and table. */
		struct vram_stats st = VRAM_STATS_INIT;
		for (int i = 0; i < 300; i++) {
			st = integ_stats(c);
			if (st.used_bytes == vram_pool_size(w))
				break;
			harness_msleep(10);
		}
		if (st.used_bytes != vram_pool_size(w))
			leaks++;
		rs_wait_store((int)(vram_pool_size(w) / CHAOS_REGION), 1);
		vram_client_close(c);
	}
	fprintf(stderr,
		"chaos: %u kills, %u pools recovered, %llu bytes checked, %u leaks\n",
		kills, recovered, (unsigned long long)checked, leaks);
	ASSERT_EQ(leaks, 0);
	rs_end();
}

/* ---- clients that reconnect ---------------------------------------------- */

static vram_client *rs_connect_flags(const char *name, unsigned flags)
{
	vram_client *c = NULL;
	int r = vram_connect(NULL, name, flags, &c);
	if (r < 0)
		TEST_FAIL("vram_connect: %s (%s)", strerror(-r), vram_last_error());
	return c;
}

/* A client with VRAM_CONNECT_RECONNECT and its event thread comes back by
 * itself: same pool, same address, and it answers a third party's pause
 * and resume again, its content byte-exact. */
TEST(client_reconnects_and_answers_events)
{
	/* Longer than the client's backoff (2 s at most) can keep it away. */
	rs_start_grace("3000", STORE_MAX);
	vram_client *c = rs_connect_flags("engine", VRAM_CONNECT_RECONNECT);
	vram_pool *w = integ_pool(c, "w", "weights", VRAM_POLICY_HOST, 0);
	ASSERT_OK(vram_pool_reserve(w, 8 * MiB));
	uintptr_t base = vram_pool_base(w);
	integ_fill((void *)base, 8 * MiB, 21);
	ASSERT_OK(vram_client_start_thread(c));

	rs_restart(SIGKILL);
	/* Calls fail fast while it is away, then work again. */
	int r = -1;
	for (int i = 0; i < 500 && (r = vram_ping(c)) != 0; i++) {
		ASSERT(r == -ENOTCONN || r == -EPIPE);
		harness_msleep(10);
	}
	ASSERT_OK(r);
	ASSERT_UEQ(vram_pool_base(w), base);
	/* Past the grace period its pool is still there: it came back. */
	harness_msleep(3300);
	vram_client *ctl = integ_connect("ctl");
	struct vram_pool_info wi = integ_info(ctl, "w");
	ASSERT_EQ(wi.owner_pid, (uint32_t)getpid());
	struct vram_selector sel = { .size = sizeof(sel), .name = "w" };
	ASSERT_OK(vram_pause(ctl, &sel, 3000, NULL));
	ASSERT_EQ(integ_info(ctl, "w").state, VRAM_STATE_PAUSED);
	ASSERT_OK(vram_resume(ctl, &sel, 3000, NULL));
	ASSERT_UEQ(vram_pool_base(w), base);
	ASSERT_OK(integ_check((void *)base, 8 * MiB, 21));
	vram_client_close(ctl);
	vram_client_close(c);
	rs_end();
}

/* VRAM_CONNECT_WAIT: a call made while vramd is away waits for it. */
TEST(client_call_waits_for_the_daemon)
{
	rs_start();
	vram_client *c = rs_connect_flags("waiter", VRAM_CONNECT_WAIT);
	vram_pool *kv = integ_pool(c, "kv", "kv", VRAM_POLICY_DISCARD, 0);
	ASSERT_OK(vram_pool_reserve(kv, 2 * MiB));
	ASSERT_OK(harness_daemon_kill(&integ_daemon, SIGKILL));
	ASSERT_EQ(harness_daemon_wait(&integ_daemon, 10000), 128 + SIGKILL);
	/* The old connection is seen gone, then the call waits. */
	pid_t pid = fork();
	if (pid == 0) {
		harness_msleep(300);
		_exit(0);
	}
	ASSERT_EQ(harness_wait(pid, 5000), 0);
	ASSERT_OK(harness_daemon_restart(&integ_daemon, NULL));
	ASSERT_OK(vram_ping(c));
	ASSERT_OK(vram_pool_reserve(kv, 4 * MiB));
	ASSERT_UEQ(vram_pool_size(kv), 4 * MiB);
	vram_client_close(c);
	rs_end();
}
