/* SPDX-License-Identifier: Apache-2.0 */
/* Load: N concurrent clients (threads, each on its own connection) pause
 * and resume, for a fixed time, either their own small pool or one pool
 * they all share (its owner, another process, acknowledges on its event
 * thread); meanwhile an admin client (root) asks for the daemon's
 * status (vram_stats, what vramctl status sends) every 10 ms, from a
 * process of its own in a session of its own, as vramctl runs from an
 * admin's shell (BENCH_ADMIN=thread: from a thread among the clients',
 * where the scheduler gives it one share of n + 1). Starts its
 * own vramd (host backend) through the test harness. Prints, per client
 * count and mode, the cycles, p50/p99 of a pause + resume in
 * microseconds, errors (EBUSY and EALREADY, another client's pause or
 * resume of the shared pool first, are counted apart as busy), the admin's status p50/p99/max, and the daemon's peak
 * RSS and CPU seconds.
 *
 *   make build/bench/load && VRAMD_BIN=build/vramd build/bench/load 1 64 256
 *   BENCH_SECONDS=5 (default 3)
 *   BENCH_DAEMON_SESSION=0: vramd in this process's session (see main)
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "vram.h"

#define MAX_SAMPLES 4096

struct worker {
	pthread_t thread;
	int index;
	bool shared;
	double *lat_us;
	unsigned n, cycles;
	unsigned errors, busy;
	int connect_err;
};

static atomic_bool go, stop;
static atomic_int connected;

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
	struct vram_selector sel = { .size = sizeof(sel) };

	w->connect_err = vram_connect(NULL, "bench-load", 0, &c);
	if (w->connect_err < 0) {
		fprintf(stderr, "load: client %d cannot connect: %s\n",
			w->index, vram_last_error());
		atomic_fetch_add(&connected, 1);
		return NULL;
	}
	if (!w->shared) {
		struct vram_pool_options o = VRAM_POOL_OPTIONS_INIT;
		snprintf(name, sizeof(name), "load.%d", w->index);
		o.name = name;
		o.tag = "load";
		o.reserve_bytes = 2 << 20;
		if (vram_pool_create(c, &o, &p) < 0 ||
		    vram_pool_reserve(p, 2 << 20) < 0)
			w->connect_err = -EIO;
	}
	sel.name = w->shared ? "load.shared" : name;
	atomic_fetch_add(&connected, 1);
	while (!atomic_load(&go))
		usleep(1000);
	while (!atomic_load(&stop) && w->connect_err == 0) {
		double t0 = now_us();
		int r = vram_pause(c, &sel, 0, NULL);
		if (r == 0)
			r = vram_resume(c, &sel, 0, NULL);
		double dt = now_us() - t0;
		if (r == -EBUSY || r == -EALREADY)
			w->busy++; /* another client's pause or resume was first */
		else if (r < 0) {
			if (!w->errors++)
				fprintf(stderr, "load: client %d: %s (%s)\n",
					w->index, strerror(-r),
					vram_last_error());
		} else if (++w->cycles && w->n < MAX_SAMPLES)
			w->lat_us[w->n++] = dt;
		else
			w->lat_us[w->cycles % MAX_SAMPLES] = dt; /* a sample */
	}
	vram_client_close(c);
	return NULL;
}

/* The daemon's RSS (kB) and CPU seconds, from /proc. */
static void daemon_usage(pid_t pid, long *rss_kb, double *cpu_s)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6))
			*rss_kb = atol(line + 6);
	if (f)
		fclose(f);
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	unsigned long ut = 0, st = 0;
	if (f && fgets(line, sizeof(line), f)) {
		char *p = strrchr(line, ')');
		/* fields 14 and 15 (utime, stime), counted after the name */
		if (p &&
		    sscanf(p + 2,
			   "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
			   &ut, &st) == 2)
			*cpu_s = (double)(ut + st) /
				 (double)sysconf(_SC_CLK_TCK);
	}
	if (f)
		fclose(f);
}

static double pct(double *v, unsigned n, double q)
{
	if (!n)
		return 0;
	return v[(unsigned)(q * (n - 1))];
}

#define ADMIN_MAX 100000

/* The admin's loop: a status call every 10 ms until end_us passes; the
 * latencies go to us[]. */
static void admin_loop(vram_client *admin, double end_us, double *us,
		       unsigned *n, unsigned *err)
{
	while (now_us() < end_us) {
		struct vram_stats st = VRAM_STATS_INIT;
		double t0 = now_us();
		if (vram_stats(admin, &st) < 0)
			(*err)++;
		else if (*n < ADMIN_MAX)
			us[(*n)++] = now_us() - t0;
		usleep(10000);
	}
}

/* The admin in a process and session of its own, on the admin lane as
 * vramctl is (VRAM_CONNECT_ADMIN): starts when go_fd gives a byte, stops
 * at end_us, writes n, err and the samples to out_fd. */
static pid_t admin_spawn(int go_fd, int out_fd, int seconds)
{
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	setsid();
	vram_client *admin = NULL;
	static double us[ADMIN_MAX];
	unsigned n = 0, err = 0;
	char b;
	if (vram_connect(NULL, "bench-admin", VRAM_CONNECT_ADMIN, &admin) < 0)
		_exit(1);
	if (read(go_fd, &b, 1) != 1)
		_exit(1);
	admin_loop(admin, now_us() + seconds * 1e6, us, &n, &err);
	vram_client_close(admin);
	if (write(out_fd, &n, sizeof(n)) != sizeof(n) ||
	    write(out_fd, &err, sizeof(err)) != sizeof(err))
		_exit(1);
	for (size_t off = 0; off < n * sizeof(double);) {
		ssize_t w = write(out_fd, (char *)us + off, n * sizeof(double) - off);
		if (w <= 0)
			_exit(1);
		off += (size_t)w;
	}
	_exit(0);
}

/* Reads what admin_spawn's child wrote; 0 or -1. */
static int admin_collect(int fd, double *us, unsigned *n, unsigned *err)
{
	if (read(fd, n, sizeof(*n)) != sizeof(*n) ||
	    read(fd, err, sizeof(*err)) != sizeof(*err) || *n > ADMIN_MAX)
		return -1;
	for (size_t off = 0; off < *n * sizeof(double);) {
		ssize_t r = read(fd, (char *)us + off, *n * sizeof(double) - off);
		if (r <= 0)
			return -1;
		off += (size_t)r;
	}
	return 0;
}

static int run(struct harness_daemon *d, int n, bool shared, int seconds)
{
	struct worker *w = calloc((size_t)n, sizeof(*w));
	vram_client *admin = NULL, *owner = NULL;
	vram_pool *sp = NULL;
	double *admin_us = malloc(sizeof(double) * ADMIN_MAX);
	const char *am = getenv("BENCH_ADMIN");
	bool admin_thread = am && strcmp(am, "thread") == 0;
	int admin_go[2] = { -1, -1 }, admin_out[2] = { -1, -1 };
	pid_t admin_pid = -1;
	unsigned admin_n = 0, admin_err = 0;
	long rss = 0, rss_peak = 0;
	double cpu0 = 0, cpu1 = 0;

	pid_t owner_pid = -1;
	if (shared) {
		/* The shared pool's owner is another process, as in use: it
		 * acknowledges every pause and resume on its event thread. */
		int ready[2];
		if (pipe(ready) < 0)
			return -1;
		owner_pid = fork();
		if (owner_pid == 0) {
			struct vram_pool_options o = VRAM_POOL_OPTIONS_INIT;
			o.name = "load.shared";
			o.tag = "load";
			o.reserve_bytes = 2 << 20;
			if (vram_connect(NULL, "bench-owner", 0, &owner) < 0 ||
			    vram_pool_create(owner, &o, &sp) < 0 ||
			    vram_pool_reserve(sp, 2 << 20) < 0 ||
			    vram_client_start_thread(owner) < 0)
				_exit(1);
			char b = 1;
			if (write(ready[1], &b, 1) != 1)
				_exit(1);
			for (;;)
				pause();
		}
		char b;
		close(ready[1]);
		if (owner_pid < 0 || read(ready[0], &b, 1) != 1)
			return -1;
		close(ready[0]);
	}
	/* Before the client threads start: a child of a process with
	 * libvram's threads running would inherit their locks. */
	if (!admin_thread) {
		if (pipe(admin_go) < 0 || pipe(admin_out) < 0)
			return -1;
		admin_pid = admin_spawn(admin_go[0], admin_out[1], seconds);
		if (admin_pid < 0)
			return -1;
		close(admin_go[0]);
		close(admin_out[1]);
	} else if (vram_connect(NULL, "bench-admin", VRAM_CONNECT_ADMIN,
				&admin) < 0) {
		return -1;
	}
	atomic_store(&go, false);
	atomic_store(&stop, false);
	atomic_store(&connected, 0);
	for (int i = 0; i < n; i++) {
		w[i].index = i;
		w[i].shared = shared;
		w[i].lat_us = malloc(sizeof(double) * MAX_SAMPLES);
		pthread_attr_t a;
		pthread_attr_init(&a);
		pthread_attr_setstacksize(&a, 256 << 10);
		pthread_create(&w[i].thread, &a, worker_run, &w[i]);
		pthread_attr_destroy(&a);
	}
	while (atomic_load(&connected) < n) {
		/* An owner's own event thread dispatches; the admin's too. */
		usleep(1000);
	}
	daemon_usage(d->pid, &rss, &cpu0);
	atomic_store(&go, true);
	double end = now_us() + seconds * 1e6;
	char one = 1;
	if (admin_pid > 0 && write(admin_go[1], &one, 1) != 1)
		return -1;
	while (now_us() < end) {
		/* One status call (its loop sleeps the 10 ms), or the sleep. */
		if (admin_thread)
			admin_loop(admin, now_us() + 1, admin_us, &admin_n,
				   &admin_err);
		else
			usleep(10000);
		daemon_usage(d->pid, &rss, &cpu1);
		if (rss > rss_peak)
			rss_peak = rss;
	}
	atomic_store(&stop, true);
	if (admin_pid > 0) {
		if (admin_collect(admin_out[0], admin_us, &admin_n,
				  &admin_err) < 0)
			admin_err++;
		harness_wait(admin_pid, 10000);
		close(admin_go[1]);
		close(admin_out[0]);
	}
	unsigned total = 0, errors = 0, busy = 0, refused = 0;
	for (int i = 0; i < n; i++) {
		pthread_join(w[i].thread, NULL);
		total += w[i].cycles;
		errors += w[i].errors;
		busy += w[i].busy;
		refused += w[i].connect_err < 0;
	}
	double *all = malloc(sizeof(double) * (total + 1));
	unsigned k = 0;
	for (int i = 0; i < n; i++) {
		memcpy(all + k, w[i].lat_us, w[i].n * sizeof(double));
		k += w[i].n;
		free(w[i].lat_us);
	}
	qsort(all, k, sizeof(double), cmp_double);
	qsort(admin_us, admin_n, sizeof(double), cmp_double);
	printf("%5d %-6s %8u %8.0f %9.0f %7u %6u %6u | %7.0f %7.0f %7.0f %4u | %7.1f %7.2f\n",
	       n, shared ? "shared" : "own", total, pct(all, k, 0.5),
	       pct(all, k, 0.99), errors, busy, refused,
	       pct(admin_us, admin_n, 0.5), pct(admin_us, admin_n, 0.99),
	       admin_n ? admin_us[admin_n - 1] : 0, admin_err,
	       rss_peak / 1024.0, cpu1 - cpu0);
	fflush(stdout);
	free(all);
	free(admin_us);
	free(w);
	if (owner_pid > 0) {
		kill(owner_pid, SIGKILL);
		harness_wait(owner_pid, 10000);
	}
	if (admin)
		vram_client_close(admin);
	return 0;
}

int main(int argc, char **argv)
{
	struct harness_daemon d;
	const char *const extra[] = { "--host-capacity", "8G", "--log-level",
				      "warn", NULL };
	int seconds =
		getenv("BENCH_SECONDS") ? atoi(getenv("BENCH_SECONDS")) : 3;
	static const int def[] = { 1, 64, 256, 1024 };
	int counts[16], nc = 0;

	for (int i = 1; i < argc && nc < 16; i++)
		counts[nc++] = atoi(argv[i]);
	if (!nc)
		for (nc = 0; nc < 4; nc++)
			counts[nc] = def[nc];
	/* vramd in a session of its own, as systemd gives it a cgroup of its
	 * own: under the kernel's autogroup a daemon in this process's
	 * session shares one CPU share with the 1024 client threads and gets
	 * 1/1025 of it (BENCH_DAEMON_SESSION=0 measures that). */
	const char *ds = getenv("BENCH_DAEMON_SESSION");
	harness_daemon_new_session = !(ds && strcmp(ds, "0") == 0);
	if (harness_daemon_start(&d, extra) < 0) {
		fprintf(stderr, "load: cannot start vramd\n");
		return 1;
	}
	printf("# %d s per row; latencies in us; a cycle is pause + resume of a 2 MiB pool\n",
	       seconds);
	printf("%5s %-6s %8s %8s %9s %7s %6s %6s | %7s %7s %7s %4s | %7s %7s\n",
	       "conns", "pool", "cycles", "p50", "p99", "errors", "busy",
	       "refused", "st.p50", "st.p99", "st.max", "err", "rss.MiB",
	       "cpu.s");
	for (int i = 0; i < nc; i++) {
		run(&d, counts[i], false, seconds);
		run(&d, counts[i], true, seconds);
	}
	return harness_daemon_stop(&d) == 0 ? 0 : 1;
}
