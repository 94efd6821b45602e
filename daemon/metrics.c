/* SPDX-License-Identifier: Apache-2.0 */
/* The counters, histograms and exposition of docs/metrics.md. Everything
 * here runs on the loop except the audit's driver call (a libuv worker);
 * the rendered text goes to http.c, which serves it from its own thread. */
#include "metrics.h"
#include "attr.h"

#include <dirent.h>
#include <stddef.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "http.h"
#include "log.h"
#include "node.h"
#include "wire.h"

static const double bucket_le[METRICS_BUCKETS] = {
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
	0.5,   1,      2.5,   5,    10,	   30,	 60,
};
static const char *const policy_names[METRICS_POLICIES] = { "discard", "host" };
static const char *const state_names[4] = { "active", "pausing", "paused",
					    "resuming" };

static uint64_t now_s(void)
{
	return (uint64_t)time(NULL);
}

/* ---- recording (the loop) ------------------------------------------------ */

void metrics_session_opened(struct metrics *m)
{
	m->sessions_opened++;
}

void metrics_session_refused(struct metrics *m, bool limit)
{
	if (limit)
		m->refused_limit++;
	else
		m->refused_credentials++;
}

static void histogram_observe(struct metrics_histogram *h, double seconds)
{
	unsigned i = 0;
	while (i < METRICS_BUCKETS && seconds > bucket_le[i])
		i++;
	if (i < METRICS_BUCKETS)
		h->buckets[i]++;
	h->count++;
	h->sum += seconds;
}

void metrics_pool_done(struct metrics *m, bool resume, unsigned device,
		       enum pool_policy policy, int err, double seconds,
		       uint64_t bytes, bool backup)
{
	unsigned pol = policy == POOL_HOST ? 1 : 0;

	if (device >= BACKEND_MAX_DEVICES || err == EALREADY)
		return;
	if (err == 0) {
		struct metrics_device *d = &m->devices[device];
		if (resume)
			d->resumes[pol]++;
		else
			d->pauses[pol]++;
		histogram_observe(resume ? &m->resume_hist[pol] :
					   &m->pause_hist[pol],
				  seconds);
		if (backup)
			m->copied[resume] += bytes;
		return;
	}
	for (unsigned i = 0; i < m->n_failures; i++) {
		struct metrics_failure *f = &m->failures[i];
		if (f->device == device && f->policy == policy &&
		    f->resume == resume && f->err == err) {
			f->count++;
			return;
		}
	}
	/* The table is bounded: errnos past it go uncounted, logged once. */
	if (m->n_failures == METRICS_MAX_ERRNOS) {
		log_debug("metrics: no room for another failure label set");
		return;
	}
	m->failures[m->n_failures++] = (struct metrics_failure){
		.device = device,
		.policy = policy,
		.resume = resume,
		.err = err,
		.count = 1,
	};
}

void metrics_pause_release(struct metrics *m, unsigned device,
			   uint64_t expected, uint64_t free_before,
			   uint64_t free_after, uint64_t granularity)
{
	if (device >= BACKEND_MAX_DEVICES || expected == 0)
		return;
	struct metrics_device *d = &m->devices[device];
	uint64_t freed =
		free_after > free_before ? free_after - free_before : 0;
	d->expected_total += expected;
	d->freed_total += freed;
	if (freed + granularity < expected)
		d->shortfalls++;
	d->last_expected = expected;
	d->last_freed = freed;
	d->last_time_s = now_s();
}

void metrics_ack_timeouts(struct metrics *m, bool resume, unsigned n)
{
	m->ack_timeouts[resume] += n;
}

/* ---- rendering ------------------------------------------------------------ */

/* A label value as the text format asks: \, " and newline escaped. */
static void put_label(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			fprintf(f, "\\%c", *s);
		else if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
}

static void family(FILE *f, const char *name, const char *type,
		   const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static const char *errno_name(int err, char *buf, size_t len)
{
	const char *n = strerrorname_np(err);
	if (n)
		return n;
	snprintf(buf, len, "E%d", err);
	return buf;
}

/* The wire's four states. */
static unsigned state_index(enum pool_state s)
{
	const char *n = pool_state_name(s);
	for (unsigned i = 0; i < 4; i++)
		if (strcmp(n, state_names[i]) == 0)
			return i;
	return 0;
}

/* One (device, tag, policy) group of pools. */
struct pool_group {
	unsigned device, policy;
	const char *tag;
	uint64_t count[4], bytes[4], reserved;
};

struct pool_groups {
	struct pool_group *g;
	unsigned n, cap, n_tags;
	const char *tags[64];
};

static struct pool_group *group_of(struct pool_groups *gs, const struct pool *p,
				   unsigned max_tags)
{
	const char *tag = p->tag;
	unsigned t;
	for (t = 0; t < gs->n_tags; t++)
		if (strcmp(gs->tags[t], tag) == 0)
			break;
	if (t == gs->n_tags) {
		if (gs->n_tags < max_tags && gs->n_tags < 64)
			gs->tags[gs->n_tags++] = tag;
		else
			tag = "_other";
	}
	unsigned pol = p->policy == POOL_HOST ? 1 : 0;
	for (unsigned i = 0; i < gs->n; i++)
		if (gs->g[i].device == p->device && gs->g[i].policy == pol &&
		    strcmp(gs->g[i].tag, tag) == 0)
			return &gs->g[i];
	if (gs->n == gs->cap) {
		unsigned cap = gs->cap ? 2 * gs->cap : 16;
		struct pool_group *g = realloc(gs->g, cap * sizeof(*g));
		if (!g)
			return NULL;
		gs->g = g;
		gs->cap = cap;
	}
	struct pool_group *g = &gs->g[gs->n++];
	memset(g, 0, sizeof(*g));
	g->device = p->device;
	g->policy = pol;
	g->tag = tag;
	return g;
}

static unsigned open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	unsigned n = 0;
	if (!d)
		return 0;
	while (readdir(d))
		n++;
	closedir(d);
	return n > 3 ? n - 3 : 0; /* ., .. and the DIR's own */
}

static void render_daemon(struct metrics *m, FILE *f)
{
	struct metrics_gauges g = { .version = "", .sessions = 0 };
	struct rlimit rl;
	const struct backend *b = m->node->backend;

	m->gauges(m->gauges_arg, &g);
	family(f, "vramd_build_info", "gauge",
	       "vramd's version, backend and protocol version; always 1.");
	fprintf(f,
		"vramd_build_info{version=\"%s\",backend=\"%s\",protocol=\"%u\"} 1\n",
		g.version, b->ops->name, WIRE_PROTOCOL_VERSION);
	family(f, "vramd_start_time_seconds", "gauge",
	       "When vramd started, in Unix time.");
	fprintf(f, "vramd_start_time_seconds %llu\n",
		(unsigned long long)m->start_s);
	family(f, "vramd_sessions", "gauge", "Client connections open now.");
	fprintf(f, "vramd_sessions %u\n", g.sessions);
	family(f, "vramd_sessions_max", "gauge", "The max_sessions limit.");
	fprintf(f, "vramd_sessions_max %u\n", g.sessions_max);
	family(f, "vramd_sessions_opened_total", "counter",
	       "Client connections accepted since start.");
	fprintf(f, "vramd_sessions_opened_total %llu\n",
		(unsigned long long)m->sessions_opened);
	family(f, "vramd_sessions_refused_total", "counter",
	       "Client connections refused, by reason.");
	fprintf(f,
		"vramd_sessions_refused_total{reason=\"limit\"} %llu\n"
		"vramd_sessions_refused_total{reason=\"credentials\"} %llu\n",
		(unsigned long long)m->refused_limit,
		(unsigned long long)m->refused_credentials);
	family(f, "vramd_open_fds", "gauge", "vramd's open file descriptors.");
	fprintf(f, "vramd_open_fds %u\n", open_fds());
	family(f, "vramd_fd_limit", "gauge", "vramd's soft RLIMIT_NOFILE.");
	fprintf(f, "vramd_fd_limit %llu\n",
		getrlimit(RLIMIT_NOFILE, &rl) == 0 ?
			(unsigned long long)rl.rlim_cur :
			0ull);
	/* The fd store is not used yet (another change brings it): 0. */
	family(f, "vramd_fdstore_fds", "gauge",
	       "File descriptors vramd keeps in systemd's fd store.");
	fprintf(f, "vramd_fdstore_fds 0\n");
	family(f, "vramd_fdstore_max", "gauge",
	       "Room in systemd's fd store, from $FDSTORE.");
	const char *fdstore = getenv("FDSTORE");
	if (fdstore && *fdstore)
		fprintf(f, "vramd_fdstore_max %llu\n",
			strtoull(fdstore, NULL, 10));
}

static void render_devices(struct metrics *m, FILE *f)
{
	const struct backend *b = m->node->backend;
	uint64_t free_b[BACKEND_MAX_DEVICES], total_b[BACKEND_MAX_DEVICES];

	for (unsigned d = 0; d < b->n_devices; d++) {
		free_b[d] = 0;
		total_b[d] = b->devices[d].total_bytes;
		/* mem_info never waits (backend.h). */
		backend_mem_info((struct backend *)b, d, &free_b[d],
				 &total_b[d]);
	}
	family(f, "vramd_device_info", "gauge",
	       "A device vramd serves; always 1.");
	for (unsigned d = 0; d < b->n_devices; d++) {
		fprintf(f, "vramd_device_info{device=\"%u\",uuid=\"", d);
		put_label(f, b->devices[d].uuid);
		fprintf(f, "\",backend=\"%s\"} 1\n", b->ops->name);
	}
	family(f, "vramd_device_total_bytes", "gauge",
	       "Device memory, as the driver reports it.");
	for (unsigned d = 0; d < b->n_devices; d++)
		fprintf(f, "vramd_device_total_bytes{device=\"%u\"} %llu\n", d,
			(unsigned long long)total_b[d]);
	family(f, "vramd_device_free_bytes", "gauge",
	       "Free device memory, as the driver reports it.");
	for (unsigned d = 0; d < b->n_devices; d++)
		fprintf(f, "vramd_device_free_bytes{device=\"%u\"} %llu\n", d,
			(unsigned long long)free_b[d]);
	family(f, "vramd_device_used_bytes", "gauge",
	       "Device memory vramd holds: chunks of pools not paused.");
	for (unsigned d = 0; d < b->n_devices; d++)
		fprintf(f, "vramd_device_used_bytes{device=\"%u\"} %llu\n", d,
			(unsigned long long)b->devices[d].used_bytes);
	family(f, "vramd_device_granularity_bytes", "gauge",
	       "Allocation granularity of the device.");
	for (unsigned d = 0; d < b->n_devices; d++)
		fprintf(f,
			"vramd_device_granularity_bytes{device=\"%u\"} %llu\n",
			d, (unsigned long long)b->devices[d].granularity);
}

static void render_pools(struct metrics *m, FILE *f)
{
	const struct node *n = m->node;
	unsigned nd = n->backend->n_devices;
	struct pool_groups gs = { 0 };
	uint64_t chunks[BACKEND_MAX_DEVICES] = { 0 },
		 orphans[BACKEND_MAX_DEVICES] = { 0 };
	uint64_t mappers[BACKEND_MAX_DEVICES] = { 0 },
		 backup[BACKEND_MAX_DEVICES] = { 0 };

	for (unsigned i = 0; i < n->n_pools; i++) {
		const struct pool *p = n->pools[i];
		struct pool_group *g = group_of(&gs, p, m->cfg.max_tags);
		unsigned s = state_index(p->state);
		if (g) {
			g->count[s]++;
			g->bytes[s] += p->bytes;
			g->reserved += p->reserve;
		}
		if (p->device < BACKEND_MAX_DEVICES) {
			chunks[p->device] += p->n_chunks;
			orphans[p->device] += !p->owner;
			mappers[p->device] += pool_mapper_count(p);
			if (p->backup_valid)
				backup[p->device] += p->bytes;
		}
	}
	const char *names[2] = { "vramd_pools", "vramd_pool_bytes" };
	const char *helps[2] = {
		"Pools now, by device, tag, state and backup policy.",
		"Physical size of those pools in bytes."
	};
	for (unsigned k = 0; k < 2; k++) {
		family(f, names[k], "gauge", helps[k]);
		for (unsigned i = 0; i < gs.n; i++)
			for (unsigned s = 0; s < 4; s++) {
				fprintf(f, "%s{device=\"%u\",tag=\"", names[k],
					gs.g[i].device);
				put_label(f, gs.g[i].tag);
				fprintf(f,
					"\",state=\"%s\",policy=\"%s\"} %llu\n",
					state_names[s],
					policy_names[gs.g[i].policy],
					(unsigned long long)(k ? gs.g[i].bytes
									     [s] :
								 gs.g[i].count
									     [s]));
			}
	}
	/* Reserved space is by device and tag: the groups of both policies
	 * of one tag add up, each printed once. */
	family(f, "vramd_pool_reserved_bytes", "gauge",
	       "Virtual address space reserved for pools.");
	for (unsigned i = 0; i < gs.n; i++) {
		uint64_t sum = 0;
		bool first = true;
		for (unsigned j = 0; j < gs.n; j++) {
			if (gs.g[j].device != gs.g[i].device ||
			    strcmp(gs.g[j].tag, gs.g[i].tag))
				continue;
			if (j < i)
				first = false;
			sum += gs.g[j].reserved;
		}
		if (!first)
			continue;
		fprintf(f, "vramd_pool_reserved_bytes{device=\"%u\",tag=\"",
			gs.g[i].device);
		put_label(f, gs.g[i].tag);
		fprintf(f, "\"} %llu\n", (unsigned long long)sum);
	}
	free(gs.g);
	family(f, "vramd_pool_chunks", "gauge",
	       "Chunks of every pool of the device.");
	for (unsigned d = 0; d < nd; d++)
		fprintf(f, "vramd_pool_chunks{device=\"%u\"} %llu\n", d,
			(unsigned long long)chunks[d]);
	family(f, "vramd_pools_orphaned", "gauge",
	       "Persistent pools whose owner went away.");
	for (unsigned d = 0; d < nd; d++)
		fprintf(f, "vramd_pools_orphaned{device=\"%u\"} %llu\n", d,
			(unsigned long long)orphans[d]);
	family(f, "vramd_mappers", "gauge",
	       "Mappings of pools by client processes.");
	for (unsigned d = 0; d < nd; d++)
		fprintf(f, "vramd_mappers{device=\"%u\"} %llu\n", d,
			(unsigned long long)mappers[d]);
	family(f, "vramd_backup_bytes", "gauge",
	       "Bytes held in backups of paused pools, by medium.");
	for (unsigned d = 0; d < nd; d++)
		fprintf(f,
			"vramd_backup_bytes{device=\"%u\",medium=\"host\"} %llu\n"
			"vramd_backup_bytes{device=\"%u\",medium=\"disk\"} 0\n",
			d, (unsigned long long)backup[d], d);
}

static void render_histogram(FILE *f, const char *name,
			     const struct metrics_histogram *h)
{
	for (unsigned p = 0; p < METRICS_POLICIES; p++) {
		uint64_t cum = 0;
		for (unsigned i = 0; i < METRICS_BUCKETS; i++) {
			cum += h[p].buckets[i];
			fprintf(f, "%s_bucket{policy=\"%s\",le=\"%g\"} %llu\n",
				name, policy_names[p], bucket_le[i],
				(unsigned long long)cum);
		}
		fprintf(f, "%s_bucket{policy=\"%s\",le=\"+Inf\"} %llu\n", name,
			policy_names[p], (unsigned long long)h[p].count);
		fprintf(f, "%s_sum{policy=\"%s\"} %.9g\n", name,
			policy_names[p], h[p].sum);
		fprintf(f, "%s_count{policy=\"%s\"} %llu\n", name,
			policy_names[p], (unsigned long long)h[p].count);
	}
}

static void render_transitions(struct metrics *m, FILE *f)
{
	unsigned nd = m->node->backend->n_devices;
	char buf[16];

	family(f, "vramd_pauses_total", "counter", "Pools paused.");
	for (unsigned d = 0; d < nd; d++)
		for (unsigned p = 0; p < METRICS_POLICIES; p++)
			fprintf(f,
				"vramd_pauses_total{device=\"%u\",policy=\"%s\"} %llu\n",
				d, policy_names[p],
				(unsigned long long)m->devices[d].pauses[p]);
	family(f, "vramd_resumes_total", "counter", "Pools resumed.");
	for (unsigned d = 0; d < nd; d++)
		for (unsigned p = 0; p < METRICS_POLICIES; p++)
			fprintf(f,
				"vramd_resumes_total{device=\"%u\",policy=\"%s\"} %llu\n",
				d, policy_names[p],
				(unsigned long long)m->devices[d].resumes[p]);
	for (unsigned op = 0; op < 2; op++) {
		const char *name = op ? "vramd_resume_failures_total" :
					"vramd_pause_failures_total";
		family(f, name, "counter",
		       op ? "Pool resumes that failed, by errno." :
			    "Pool pauses that failed, by errno.");
		for (unsigned i = 0; i < m->n_failures; i++) {
			const struct metrics_failure *x = &m->failures[i];
			if (x->resume != (op == 1))
				continue;
			fprintf(f,
				"%s{device=\"%u\",policy=\"%s\",errno=\"%s\"} %llu\n",
				name, x->device,
				policy_names[x->policy == POOL_HOST],
				errno_name(x->err, buf, sizeof(buf)),
				(unsigned long long)x->count);
		}
	}
	family(f, "vramd_pause_duration_seconds", "histogram",
	       "Seconds from PAUSING to PAUSED of each pool.");
	render_histogram(f, "vramd_pause_duration_seconds", m->pause_hist);
	family(f, "vramd_resume_duration_seconds", "histogram",
	       "Seconds from RESUMING to ACTIVE of each pool.");
	render_histogram(f, "vramd_resume_duration_seconds", m->resume_hist);
	family(f, "vramd_ack_timeouts_total", "counter",
	       "Mappers that did not acknowledge before the deadline.");
	fprintf(f,
		"vramd_ack_timeouts_total{op=\"pause\"} %llu\n"
		"vramd_ack_timeouts_total{op=\"resume\"} %llu\n",
		(unsigned long long)m->ack_timeouts[0],
		(unsigned long long)m->ack_timeouts[1]);
	family(f, "vramd_backup_copied_bytes_total", "counter",
	       "Bytes copied into backups on pause and out of them on resume.");
	fprintf(f,
		"vramd_backup_copied_bytes_total{op=\"pause\",medium=\"host\"} %llu\n"
		"vramd_backup_copied_bytes_total{op=\"resume\",medium=\"host\"} %llu\n",
		(unsigned long long)m->copied[0],
		(unsigned long long)m->copied[1]);
}

static void render_release(struct metrics *m, FILE *f)
{
	unsigned nd = m->node->backend->n_devices;
	static const struct {
		const char *name, *type, *help;
		size_t off;
	} rows[] = {
		{ "vramd_pause_expected_bytes_total", "counter",
		  "Bytes pauses released by vramd's account.",
		  offsetof(struct metrics_device, expected_total) },
		{ "vramd_pause_freed_bytes_total", "counter",
		  "Rise of device free memory across pauses, as measured.",
		  offsetof(struct metrics_device, freed_total) },
		{ "vramd_pause_shortfalls_total", "counter",
		  "Pauses that freed less than expected.",
		  offsetof(struct metrics_device, shortfalls) },
		{ "vramd_last_pause_expected_bytes", "gauge",
		  "Expected release of the last pause.",
		  offsetof(struct metrics_device, last_expected) },
		{ "vramd_last_pause_freed_bytes", "gauge",
		  "Measured release of the last pause.",
		  offsetof(struct metrics_device, last_freed) },
		{ "vramd_last_pause_shortfall_bytes", "gauge",
		  "Expected minus measured release of the last pause.", 0 },
		{ "vramd_last_pause_timestamp_seconds", "gauge",
		  "When the last pause ended, in Unix time.",
		  offsetof(struct metrics_device, last_time_s) },
	};
	for (unsigned r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		family(f, rows[r].name, rows[r].type, rows[r].help);
		for (unsigned d = 0; d < nd; d++) {
			const struct metrics_device *x = &m->devices[d];
			uint64_t v;
			if (strcmp(rows[r].name,
				   "vramd_last_pause_shortfall_bytes") == 0)
				v = x->last_expected > x->last_freed ?
					    x->last_expected - x->last_freed :
					    0;
			else
				memcpy(&v, (const char *)x + rows[r].off,
				       sizeof(v));
			fprintf(f, "%s{device=\"%u\"} %llu\n", rows[r].name, d,
				(unsigned long long)v);
		}
	}
}

static void render_audit(struct metrics *m, FILE *f)
{
	unsigned nd = m->node->backend->n_devices;
	bool avail = m->audit_available && m->cfg.audit_interval_ms;

	family(f, "vramd_audit_available", "gauge",
	       "1 if the driver lists the device's processes.");
	for (unsigned d = 0; d < nd; d++)
		fprintf(f, "vramd_audit_available{device=\"%u\"} %d\n", d,
			avail);
	family(f, "vramd_audit_timestamp_seconds", "gauge",
	       "When the last audit ended, in Unix time.");
	fprintf(f, "vramd_audit_timestamp_seconds %llu\n",
		(unsigned long long)m->audit_time_s);
	for (unsigned k = 0; k < 2; k++) {
		const char *name = k ? "vramd_process_vramd_bytes" :
				       "vramd_process_outside_bytes";
		family(f, name, "gauge",
		       k ? "Bytes of active vramd pools a process maps." :
			   "Memory the driver charges to a process outside vramd.");
		for (unsigned i = 0; i < m->n_processes; i++) {
			const struct metrics_process *p = &m->processes[i];
			fprintf(f, "%s{device=\"%u\",pid=\"%u\",process=\"",
				name, p->device, p->pid);
			put_label(f, p->name[0] ? p->name : "-");
			fprintf(f, "\"} %llu\n",
				(unsigned long long)(k ? p->vramd :
							 p->outside));
		}
	}
}

long metrics_render(struct metrics *m, char **out)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return -ENOMEM;
	render_daemon(m, f);
	render_devices(m, f);
	render_pools(m, f);
	render_transitions(m, f);
	render_release(m, f);
	render_audit(m, f);
	if (fclose(f) != 0) {
		free(buf);
		return -ENOMEM;
	}
	*out = buf;
	return (long)len;
}

void metrics_publish(struct metrics *m)
{
	char *buf;
	long len;

	if (!m->http || m->stopping)
		return;
	len = metrics_render(m, &buf);
	if (len < 0)
		return; /* the last exposition stays served */
	http_publish(m->http, buf, (size_t)len);
}

void metrics_changed(struct metrics *m)
{
	http_mark_stale(m->http);
}

static void metrics_on_render(uv_timer_t *t)
{
	metrics_publish(t->data);
}

static void metrics_on_render_ask(uv_async_t *a)
{
	metrics_publish(a->data);
}

/* From the HTTP thread: a scrape wants what changed rendered. */
static void metrics_render_ask(void *arg)
{
	struct metrics *m = arg;
	uv_async_send(&m->render_async);
}

/* ---- the audit -------------------------------------------------------------- */

/* On a worker: the driver's process lists, which may take milliseconds
 * (NVML). Only the backend's processes op runs here. */
static void audit_work(uv_work_t *w)
{
	struct metrics *m = w->data;
	struct backend *b = m->node->backend;

	for (unsigned d = 0; d < b->n_devices; d++) {
		m->audit_raw[d] = NULL;
		m->audit_raw_n[d] = b->ops->processes(b, d, &m->audit_raw[d]);
	}
}

static struct metrics_process *process_row(struct metrics_process *rows,
					   unsigned *n, unsigned device,
					   uint32_t pid)
{
	for (unsigned i = 0; i < *n; i++)
		if (rows[i].pid == pid && rows[i].device == device)
			return &rows[i];
	if (*n == METRICS_MAX_PROCESSES)
		return NULL;
	struct metrics_process *r = &rows[(*n)++];
	memset(r, 0, sizeof(*r));
	r->device = device;
	r->pid = pid;
	return r;
}

/* On the loop: the lists next to what each process maps through vramd
 * now, as vramctl audit shows them. */
static void audit_done(uv_work_t *w, int status UNUSED)
{
	struct metrics *m = w->data;
	const struct node *n = m->node;
	struct metrics_process *rows =
		calloc(METRICS_MAX_PROCESSES, sizeof(*rows));
	unsigned nrows = 0;

	m->audit_running = false;
	for (unsigned d = 0; d < n->backend->n_devices; d++) {
		int k = m->audit_raw_n[d];
		for (int i = 0; rows && i < k; i++) {
			const struct backend_process *bp = &m->audit_raw[d][i];
			struct metrics_process *r;
			if (bp->pid == (uint32_t)getpid() ||
			    !(r = process_row(rows, &nrows, d, bp->pid)))
				continue;
			r->outside = bp->used_bytes == BACKEND_USED_UNKNOWN ?
					     0 :
					     bp->used_bytes;
		}
		free(m->audit_raw[d]);
		m->audit_raw[d] = NULL;
	}
	if (!rows || m->stopping) {
		free(rows);
		return;
	}
	for (unsigned i = 0; i < n->n_pools; i++) {
		const struct pool *p = n->pools[i];
		if (p->state != POOL_ACTIVE)
			continue;
		for (const struct mapper *mp = p->mappers; mp; mp = mp->next) {
			struct metrics_process *r = process_row(
				rows, &nrows, p->device, mp->who.pid);
			if (!r)
				continue;
			r->vramd += p->bytes;
			snprintf(r->name, sizeof(r->name), "%s", mp->who.name);
		}
	}
	/* The driver charges a process its mappings of vramd's chunks as
	 * well: outside is what is left. */
	for (unsigned i = 0; i < nrows; i++)
		rows[i].outside = rows[i].outside > rows[i].vramd ?
					  rows[i].outside - rows[i].vramd :
					  0;
	free(m->processes);
	m->processes = rows;
	m->n_processes = nrows;
	m->audit_time_s = now_s();
}

static void metrics_on_audit(uv_timer_t *t)
{
	struct metrics *m = t->data;
	if (m->audit_running || m->stopping)
		return;
	m->audit_work.data = m;
	if (uv_queue_work(m->loop, &m->audit_work, audit_work, audit_done) == 0)
		m->audit_running = true;
}

/* ---- life ------------------------------------------------------------------- */

int metrics_create(struct metrics *m, uv_loop_t *loop, const struct node *node,
		   const struct metrics_config *cfg,
		   void (*gauges)(void *arg, struct metrics_gauges *g),
		   void *gauges_arg)
{
	memset(m, 0, sizeof(*m));
	m->loop = loop;
	m->node = node;
	m->cfg = *cfg;
	m->gauges = gauges;
	m->gauges_arg = gauges_arg;
	m->start_s = now_s();
	m->audit_available = node->backend->ops->processes != NULL;
	uv_timer_init(loop, &m->render_timer);
	uv_timer_init(loop, &m->audit_timer);
	uv_async_init(loop, &m->render_async, metrics_on_render_ask);
	m->render_timer.data = m->audit_timer.data = m->render_async.data = m;
	if (!cfg->listen[0] && !cfg->textfile[0])
		return 0;
	int r = http_start(cfg->listen, cfg->textfile,
			   cfg->textfile_interval_ms, metrics_render_ask, m,
			   &m->http);
	if (r < 0)
		return r;
	metrics_publish(m);
	uv_timer_start(&m->render_timer, metrics_on_render, 1000, 1000);
	if (m->audit_available && cfg->audit_interval_ms) {
		uv_timer_start(&m->audit_timer, metrics_on_audit, 0,
			       cfg->audit_interval_ms);
	}
	return 0;
}

void metrics_stop(struct metrics *m)
{
	m->stopping = true;
	uv_close((uv_handle_t *)&m->render_timer, NULL);
	uv_close((uv_handle_t *)&m->audit_timer, NULL);
	/* The HTTP thread is gone before the handle it wakes the loop by. */
	http_stop(m->http);
	m->http = NULL;
	uv_close((uv_handle_t *)&m->render_async, NULL);
}

void metrics_destroy(struct metrics *m)
{
	free(m->processes);
	m->processes = NULL;
}
