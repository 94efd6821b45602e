/* SPDX-License-Identifier: Apache-2.0 */
/* Control-path benchmark: round-trip latency of a no-op request (ping) and
 * of pause + resume of a small pool, with 1 and 64 concurrent clients, each
 * on its own connection. Starts its own vramd (host backend) through the
 * test harness, so the figures are the daemon's and the library's, not a
 * device's. Prints a table of p50/p99 in microseconds and the throughput.
 *
 *   make bench                      (or: VRAMD_BIN=build/vramd build/bench/rpc)
 *   BENCH_ITERS=20000 build/bench/rpc
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "vram.h"

#define MAX_CLIENTS 64

struct worker {
	pthread_t thread;
	int index;
	int mode; /* 0 ping, 1 pause+resume */
	int iters;
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

static void *worker_run(void *arg)
{
	struct worker *w = arg;
	vram_client *c = NULL;
	vram_pool *p = NULL;
	char name[64];
	int r;

	r = vram_connect(NULL, "bench-rpc", 0, &c);
	if (r < 0)
		goto fail;
	if (w->mode == 1) {
		struct vram_pool_options o = VRAM_POOL_OPTIONS_INIT;
		snprintf(name, sizeof(name), "bench.%d", w->index);
		o.name = name;
		o.tag = "bench";
		o.policy = VRAM_POLICY_DISCARD;
		o.reserve_bytes = 64ull << 20;
		r = vram_pool_create(c, &o, &p);
		if (r == 0)
			r = vram_pool_reserve(p, 4ull << 20);
		if (r < 0)
			goto fail;
	}
	pthread_barrier_wait(w->start);
	for (int i = 0; i < w->iters; i++) {
		double t0 = now_us();
		if (w->mode == 0) {
			r = vram_ping(c);
		} else {
			r = vram_pool_pause(p, NULL);
			if (r == 0)
				r = vram_pool_resume(p, NULL);
		}
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
	vram_pool_close(p);
	vram_client_close(c);
	return NULL;
}

/* Runs n clients for iters each; prints one table row. */
static int run(const char *what, int mode, int n, int iters)
{
	struct worker w[MAX_CLIENTS];
	pthread_barrier_t start;
	double *all = calloc((size_t)n * iters, sizeof(double));
	int err = 0;

	if (!all)
		return -ENOMEM;
	pthread_barrier_init(&start, NULL, (unsigned)n + 1);
	for (int i = 0; i < n; i++) {
		w[i] = (struct worker){ .index = i, .mode = mode, .iters = iters,
					.lat_us = all + (size_t)i * iters,
					.start = &start };
		pthread_create(&w[i].thread, NULL, worker_run, &w[i]);
	}
	pthread_barrier_wait(&start);
	double t0 = now_us();
	for (int i = 0; i < n; i++) {
		pthread_join(w[i].thread, NULL);
		if (w[i].err)
			err = w[i].err;
	}
	double wall = now_us() - t0;
	pthread_barrier_destroy(&start);
	if (!err) {
		size_t total = (size_t)n * iters;
		qsort(all, total, sizeof(double), cmp_double);
		printf("| %-22s | %7d | %8zu | %9.1f | %9.1f | %9.1f | %10.0f |\n",
		       what, n, total, all[total / 2], all[total * 99 / 100],
		       all[total - 1], total / (wall / 1e6));
	}
	free(all);
	return err;
}

int main(void)
{
	struct harness_daemon d;
	const char *const extra[] = { "--log-level", "warn", "--host-capacity", "4G",
				      NULL };
	int iters = getenv("BENCH_ITERS") ? atoi(getenv("BENCH_ITERS")) : 5000;
	int r;

	if (iters <= 0)
		iters = 5000;
	r = harness_daemon_start(&d, extra);
	if (r < 0) {
		fprintf(stderr, "cannot start vramd: %s\n", strerror(-r));
		return 1;
	}
	printf("bench/rpc: vramd %s on the host backend, %d iterations per client\n\n",
	       vram_version(), iters);
	printf("| %-22s | %7s | %8s | %9s | %9s | %9s | %10s |\n", "operation",
	       "clients", "calls", "p50 us", "p99 us", "max us", "calls/s");
	printf("|%s|%s|%s|%s|%s|%s|%s|\n", "------------------------", "---------",
	       "----------", "-----------", "-----------", "-----------", "------------");
	r = run("ping", 0, 1, iters);
	if (!r)
		r = run("ping", 0, 64, iters / 8 > 0 ? iters / 8 : 1);
	if (!r)
		r = run("pause+resume 4 MiB", 1, 1, iters / 5 > 0 ? iters / 5 : 1);
	if (!r)
		r = run("pause+resume 4 MiB", 1, 64, iters / 40 > 0 ? iters / 40 : 1);
	harness_daemon_stop(&d);
	return r ? 1 : 0;
}
