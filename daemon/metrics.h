/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's metrics (docs/metrics.md): counters and histograms that the
 * loop alone writes, and the Prometheus exposition it renders from them and
 * from the pool table into an immutable buffer that http.c serves and
 * writes as a textfile from threads of its own. Nothing here ever waits for
 * those threads: publishing swaps a pointer under a mutex. */
#ifndef VRAMD_METRICS_H
#define VRAMD_METRICS_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "backend.h"
#include "config.h"
#include "pool.h"

#define METRICS_BUCKETS 15
#define METRICS_POLICIES 2 /* discard, host */
#define METRICS_MAX_ERRNOS 32
#define METRICS_MAX_PROCESSES 256

struct http;
struct node;

/* What the exposition takes from the server, asked for at each render. */
struct metrics_gauges {
	const char *version;
	unsigned sessions, sessions_max;
};

struct metrics_histogram {
	uint64_t buckets[METRICS_BUCKETS]; /* not cumulative */
	uint64_t count;
	double sum;
};

/* Failures of one label set: device, policy, op and errno. */
struct metrics_failure {
	unsigned device;
	enum pool_policy policy;
	bool resume;
	int err;
	uint64_t count;
};

struct metrics_device {
	uint64_t pauses[METRICS_POLICIES], resumes[METRICS_POLICIES];
	uint64_t expected_total, freed_total, shortfalls;
	uint64_t last_expected, last_freed, last_time_s;
};

/* One row of the last audit. */
struct metrics_process {
	unsigned device;
	uint32_t pid;
	char name[64];
	uint64_t outside, vramd;
};

struct metrics {
	uv_loop_t *loop;
	const struct node *node;
	void (*gauges)(void *arg, struct metrics_gauges *g);
	void *gauges_arg;
	struct metrics_config cfg;
	uint64_t start_s;

	uint64_t sessions_opened, refused_limit, refused_credentials;
	struct metrics_device devices[BACKEND_MAX_DEVICES];
	struct metrics_histogram pause_hist[METRICS_POLICIES];
	struct metrics_histogram resume_hist[METRICS_POLICIES];
	struct metrics_failure failures[METRICS_MAX_ERRNOS];
	unsigned n_failures;
	uint64_t ack_timeouts[2]; /* pause, resume */
	uint64_t copied[2];	  /* pause, resume: host backups */

	/* The audit: run on a worker, merged on the loop. */
	uv_timer_t audit_timer;
	uv_work_t audit_work;
	bool audit_running, audit_available, stopping;
	struct backend_process *audit_raw[BACKEND_MAX_DEVICES];
	int audit_raw_n[BACKEND_MAX_DEVICES];
	struct metrics_process *processes;
	unsigned n_processes;
	uint64_t audit_time_s;

	uv_timer_t render_timer; /* at least once a second */
	uv_async_t render_async; /* a scrape found the exposition stale */
	struct http *http;	 /* NULL when neither output is on */
};

/* Sets up the counters for node's pools, and the outputs cfg asks for
 * (HTTP, textfile, audit timer). gauges is called at each render. Returns
 * 0 or -errno (logged): an address that cannot be bound fails the start. */
int metrics_create(struct metrics *m, uv_loop_t *loop, const struct node *node,
		   const struct metrics_config *cfg,
		   void (*gauges)(void *arg, struct metrics_gauges *g),
		   void *gauges_arg);

/* Closes the timers (the loop runs their callbacks) and stops the
 * threads. The loop must still run once after it. */
void metrics_stop(struct metrics *m);

/* Frees what is left, after the loop ran the close callbacks. */
void metrics_destroy(struct metrics *m);

/* Renders the exposition and hands it to the outputs (none: no-op). */
void metrics_publish(struct metrics *m);

/* Something the exposition shows changed: the next scrape has it rendered
 * first (http.h), the change does not wait for a render. */
void metrics_changed(struct metrics *m);

/* Renders the exposition into a malloc'd string (*out, free()), its
 * length returned, or -ENOMEM. */
long metrics_render(struct metrics *m, char **out);

/* A session was accepted; one was refused (over the limit, or its
 * credentials could not be read). */
void metrics_session_opened(struct metrics *m);
void metrics_session_refused(struct metrics *m, bool limit);

/* One pool's pause or resume ended: err 0 (seconds from its begin to
 * PAUSED or ACTIVE, bytes released or brought back, backup whether a host
 * backup was saved or restored) or a positive errno. EALREADY is no
 * failure and counts nothing. */
void metrics_pool_done(struct metrics *m, bool resume, unsigned device,
		       enum pool_policy policy, int err, double seconds,
		       uint64_t bytes, bool backup);

/* A pause ended: per device, the bytes vramd expected it to release and
 * the free memory before and after, as the driver measured them. */
void metrics_pause_release(struct metrics *m, unsigned device,
			   uint64_t expected, uint64_t free_before,
			   uint64_t free_after, uint64_t granularity);

/* n mappers missed a pause's (resume false) or resume's deadline. */
void metrics_ack_timeouts(struct metrics *m, bool resume, unsigned n);

#endif
