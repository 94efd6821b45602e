/* SPDX-License-Identifier: Apache-2.0 */
/* Control-path benchmark: round-trip latency of a no-op request (ping) and
 * of pause + resume of a small discard pool, with 1 and 64 concurrent
 * clients, each on its own connection. Starts its own vramd (host backend)
 * through the test harness, so the figures are the daemon's and the
 * library's, not a device's. Prints a table of p50/p99 in microseconds,
 * the throughput, and the CPU time the daemon's threads spent per call
 * (the loop and the reading threads, from /proc/PID/task/TID/schedstat:
 * on a shared machine it moves far less than the latencies do), and the
 * clients' (this process's) per call.
 *
 *   make bench                      (or: VRAMD_BIN=build/vramd build/bench/rpc)
 *   BENCH_ITERS=80000 build/bench/rpc
 *
 * Settings, from the environment:
 *   BENCH_ITERS   iterations of one client (default 20000; 64 clients make
 *                 an eighth each, pause+resume a fifth and a fortieth).
 *                 At 5000, 64 clients pinging are done in ~50 ms on the
 *                 H200 host, short enough that their own start moves the
 *                 99th percentile (docs/results/h200-2026-12-02-s10)
 *   BENCH_STORE   1: run the daemon with an fd store, as systemd's unit
 *                 does (every pool and chunk kept across a restart)
 *   BENCH_POOLS   idle pools (one 4 MiB chunk each) another client holds
 *                 during the run, so that per-request work that walks the
 *                 pool table shows (default 0)
 *   BENCH_ONLY    "ping" or "transition": run those rows alone
 *   BENCH_CLIENTS 1 or 64: run the rows of that many clients alone
 *   BENCH_THREAD  1: every client runs libvram's event thread (as the
 *                 Python package and the preload library do), so that
 *                 the answers come through the hand-over of the reader
 *   BENCH_METRICS 1: the daemon serves its metrics over HTTP (on a port
 *                 of the loopback), as a node scraped by Prometheus runs
 *   BENCH_WARMUP  calls each client makes before the timed ones, not
 *                 counted (default 32): a session that has only pinged
 *                 16 times is read on the loop thread until then
 *                 (daemon/io.h), and the figures are of the steady
 *                 state; 0 counts a new session's first calls too
 *   BENCH_IO_THREADS  the daemon's io_threads (daemon/io.h; default: its
 *                 own default), to set 1 against more in one run
 *   BENCH_IO_POLL_US  the daemon's io_poll_us (daemon/io.h): how long a
 *                 reading thread polls after a frame before it sleeps;
 *                 VRAM_CALL_SPIN_US is the clients' side of the same
 *   BENCH_DAEMON_SESSION  0: vramd in this process's session (its kernel
 *                 autogroup); default 1, a session of its own, as under
 *                 systemd
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "vram.h"

#define MAX_CLIENTS 64
#define BENCH_ITERS_DEFAULT 20000
#define MAX_IDLE_POOLS 4096

struct worker {
	pthread_t thread;
	int index;
	int mode; /* 0 ping, 1 pause+resume */
	int iters;
	int warmup; /* calls made before the start, not counted */
	bool with_thread;
	double *lat_us;
	int err;
	pthread_barrier_t *start;
};

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The CPU time all of the daemon's threads (the loop and its reading
 * threads, daemon/io.h) have used so far, in microseconds, from each
 * /proc/PID/task/TID/schedstat (nanoseconds), or -1. */
static double cpu_us(pid_t pid)
{
	char path[64];
	unsigned long long ns, total = 0;
	struct dirent *e;
	DIR *d;
	int found = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return -1;
	while ((e = readdir(d))) {
		FILE *f;
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.16s/schedstat",
			 (int)pid, e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fscanf(f, "%llu", &ns) == 1) {
			total += ns;
			found++;
		}
		fclose(f);
	}
	closedir(d);
	return found ? (double)total / 1e3 : -1;
}

/* The CPU time this process (the clients) has used so far, in us. */
static double own_cpu_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int pool_make(vram_client *c, const char *name, vram_pool **p)
{
	struct vram_pool_options o = VRAM_POOL_OPTIONS_INIT;
	int r;

	o.name = name;
	o.tag = "bench";
	o.policy = VRAM_POLICY_DISCARD;
	o.reserve_bytes = 64ull << 20;
	r = vram_pool_create(c, &o, p);
	if (r == 0)
		r = vram_pool_reserve(*p, 4ull << 20);
	return r;
}

/* One call of the worker's mode. */
static int worker_call(struct worker *w, vram_client *c, vram_pool *p)
{
	if (w->mode == 0)
		return vram_ping(c);
	int r = vram_pool_pause(p, NULL);
	return r == 0 ? vram_pool_resume(p, NULL) : r;
}

static void *worker_run(void *arg)
{
	struct worker *w = arg;
	vram_client *c = NULL;
	vram_pool *p = NULL;
	char name[64];
	bool started = false;
	int r;

	r = vram_connect(NULL, "bench-rpc", 0, &c);
	if (r == 0 && w->with_thread)
		r = vram_client_start_thread(c);
	if (r < 0)
		goto fail;
	if (w->mode == 1) {
		snprintf(name, sizeof(name), "bench.%d", w->index);
		r = pool_make(c, name, &p);
		if (r < 0)
			goto fail;
	}
	for (int i = 0; i < w->warmup && r == 0; i++)
		r = worker_call(w, c, p);
	if (r < 0)
		goto fail;
	pthread_barrier_wait(w->start);
	started = true;
	for (int i = 0; i < w->iters; i++) {
		double t0 = now_us();
		r = worker_call(w, c, p);
		if (r < 0)
			goto fail;
		w->lat_us[i] = now_us() - t0;
	}
	vram_pool_close(p);
	vram_client_close(c);
	return NULL;
fail:
	w->err = r;
	fprintf(stderr, "bench client %d: %s (%s)\n", w->index, strerror(-r),
		vram_last_error());
	/* The others wait at the barrier for everyone. */
	if (!started)
		pthread_barrier_wait(w->start);
	vram_pool_close(p);
	vram_client_close(c);
	return NULL;
}

/* Runs n clients for iters each; prints one table row. */
static bool bench_thread;
static int bench_warmup;

static int run(pid_t daemon, const char *what, int mode, int n, int iters)
{
	struct worker w[MAX_CLIENTS];
	pthread_barrier_t start;
	double *all = calloc((size_t)n * iters, sizeof(double));
	int err = 0;

	if (!all)
		return -ENOMEM;
	pthread_barrier_init(&start, NULL, (unsigned)n + 1);
	for (int i = 0; i < n; i++) {
		w[i] = (struct worker){ .index = i,
					.mode = mode,
					.iters = iters,
					.warmup = bench_warmup,
					.with_thread = bench_thread,
					.lat_us = all + (size_t)i * iters,
					.start = &start };
		pthread_create(&w[i].thread, NULL, worker_run, &w[i]);
	}
	pthread_barrier_wait(&start);
	double cpu0 = cpu_us(daemon), own0 = own_cpu_us();
	double t0 = now_us();
	for (int i = 0; i < n; i++) {
		pthread_join(w[i].thread, NULL);
		if (w[i].err)
			err = w[i].err;
	}
	double wall = now_us() - t0;
	double cpu1 = cpu_us(daemon), own1 = own_cpu_us();
	pthread_barrier_destroy(&start);
	if (!err) {
		size_t total = (size_t)n * iters;
		qsort(all, total, sizeof(double), cmp_double);
		printf("| %-22s | %7d | %8zu | %9.1f | %9.1f | %9.1f | %10.0f | %9.2f | %10.2f |\n",
		       what, n, total, all[total / 2], all[total * 99 / 100],
		       all[total - 1], total / (wall / 1e6),
		       cpu0 >= 0 && cpu1 >= 0 ? (cpu1 - cpu0) / (double)total :
						-1.0,
		       (own1 - own0) / (double)total);
	}
	free(all);
	return err;
}

static int env_int(const char *name, int def)
{
	const char *v = getenv(name);
	return v && *v ? atoi(v) : def;
}

/* Adds "--set KEY=$VAR" to the daemon's arguments when VAR is set, the
 * "KEY=value" written into buf. */
static void daemon_set_from_env(const char **extra, unsigned *n,
				const char *var, const char *key, char *buf,
				size_t len)
{
	const char *v = getenv(var);
	if (!v || !*v)
		return;
	snprintf(buf, len, "%s=%s", key, v);
	extra[(*n)++] = "--set";
	extra[(*n)++] = buf;
}

int main(void)
{
	struct harness_daemon d;
	/* The daemon's arguments: the plain set, then what the settings
	 * below add. */
	const char *extra[16] = { "--log-level", "warn",  "--host-capacity",
				  "64G",	 "--set", "max_pools=8192" };
	unsigned n_extra = 6;
	int metrics = env_int("BENCH_METRICS", 0);
	const char *io = getenv("BENCH_IO_THREADS");
	char io_set[32], io_poll_set[32];
	if (metrics) {
		extra[n_extra++] = "--metrics-listen";
		extra[n_extra++] = "127.0.0.1:0";
	}
	daemon_set_from_env(extra, &n_extra, "BENCH_IO_THREADS", "io_threads",
			    io_set, sizeof(io_set));
	daemon_set_from_env(extra, &n_extra, "BENCH_IO_POLL_US", "io_poll_us",
			    io_poll_set, sizeof(io_poll_set));
	extra[n_extra] = NULL;
	int iters = env_int("BENCH_ITERS", BENCH_ITERS_DEFAULT);
	int store = env_int("BENCH_STORE", 0);
	int n_idle = env_int("BENCH_POOLS", 0);
	const char *only = getenv("BENCH_ONLY");
	bool pings = !only || !*only || strcmp(only, "ping") == 0;
	bool transitions = !only || !*only || strcmp(only, "transition") == 0;
	int clients = env_int("BENCH_CLIENTS", 0);
	bool one = clients != 64, many = clients != 1;
	vram_client *holder = NULL;
	static vram_pool *idle[MAX_IDLE_POOLS];
	int r;

	bench_thread = env_int("BENCH_THREAD", 0) != 0;
	bench_warmup = env_int("BENCH_WARMUP", 32);
	if (bench_warmup < 0)
		bench_warmup = 0;
	/* vramd in a session of its own, as systemd gives it a cgroup of its
	 * own (bench/load.c says why); BENCH_DAEMON_SESSION=0 shares this
	 * process's, as the figures before 2026-12-02 did. */
	harness_daemon_new_session = env_int("BENCH_DAEMON_SESSION", 1) != 0;
	if (iters <= 0)
		iters = BENCH_ITERS_DEFAULT;
	if (n_idle < 0 || n_idle > MAX_IDLE_POOLS)
		n_idle = MAX_IDLE_POOLS;
	r = store ? harness_daemon_start_store(&d, extra,
					       (unsigned)(n_idle + 256) * 4) :
		    harness_daemon_start(&d, extra);
	if (r < 0) {
		fprintf(stderr, "cannot start vramd: %s\n", strerror(-r));
		return 1;
	}
	if (n_idle) {
		r = vram_connect(NULL, "bench-rpc-idle", 0, &holder);
		for (int i = 0; r == 0 && i < n_idle; i++) {
			char name[64];
			snprintf(name, sizeof(name), "idle.%d", i);
			r = pool_make(holder, name, &idle[i]);
		}
		if (r < 0) {
			fprintf(stderr, "cannot make the idle pools: %s (%s)\n",
				strerror(-r), vram_last_error());
			harness_daemon_stop(&d);
			return 1;
		}
	}
	printf("bench/rpc: vramd %s on the host backend, %d iterations per client "
	       "after %d uncounted, "
	       "fd store %s, %d idle pools, event thread %s, metrics %s, "
	       "reading threads %s, daemon in %s session\n\n",
	       vram_version(), iters, bench_warmup, store ? "on" : "off",
	       n_idle, bench_thread ? "on" : "off", metrics ? "served" : "off",
	       io && *io ? io : "default",
	       harness_daemon_new_session ? "its own" : "this process's");
	printf("| %-22s | %7s | %8s | %9s | %9s | %9s | %10s | %9s | %10s |\n",
	       "operation", "clients", "calls", "p50 us", "p99 us", "max us",
	       "calls/s", "vramd us", "clients us");
	printf("|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", "------------------------",
	       "---------", "----------", "-----------", "-----------",
	       "-----------", "------------", "-----------", "------------");
	r = 0;
	if (pings && one)
		r = run(d.pid, "ping", 0, 1, iters);
	if (pings && many && !r)
		r = run(d.pid, "ping", 0, 64, iters / 8 > 0 ? iters / 8 : 1);
	if (transitions && one && !r)
		r = run(d.pid, "pause+resume 4 MiB", 1, 1,
			iters / 5 > 0 ? iters / 5 : 1);
	if (transitions && many && !r)
		r = run(d.pid, "pause+resume 4 MiB", 1, 64,
			iters / 40 > 0 ? iters / 40 : 1);
	for (int i = 0; i < n_idle; i++)
		vram_pool_close(idle[i]);
	vram_client_close(holder);
	harness_daemon_stop(&d);
	return r ? 1 : 0;
}
