/* SPDX-License-Identifier: Apache-2.0 */
/* vramctl status: the daemon and its devices at a glance. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "vramctl.h"

static const char status_help[] =
	"Usage: vramctl status [--json] [--watch [--interval MS] [--count N]]\n"
	"\n"
	"Shows the daemon's version, backend and uptime, its sessions, pools,\n"
	"the device bytes it holds, the host bytes in backups, its open fds,\n"
	"and for each device: index, uuid, total, free memory, granularity.\n"
	"Then the quotas (vramd.conf's quota lines) that apply to you, with\n"
	"what your pools hold: your uid, and your group when a rule names it;\n"
	"root and the admin group see every uid and group with a rule or\n"
	"pools. USED/LIMIT per column; none: no limit; exempt: root.\n"
	"--watch redraws it in place every --interval MS (default 1000), as\n"
	"vramctl ls --watch does.\n";

/* The daemon's status and the quotas that apply to the caller. */
struct status {
	struct vram_stats st;
	struct vram_quota *quotas;
	size_t n_quotas;
};

/* A limit as JSON: null for none. */
static void status_json_limit(struct json *j, const char *key, uint64_t v)
{
	json_key(j, key);
	if (v == VRAM_QUOTA_NONE)
		json_null(j);
	else
		json_uint(j, v);
}

static void status_json_quotas(struct json *j, const struct status *s)
{
	json_key(j, "quotas");
	json_array_begin(j);
	for (size_t i = 0; i < s->n_quotas; i++) {
		const struct vram_quota *q = &s->quotas[i];

		json_object_begin(j);
		json_kv_string(j, "kind", q->group ? "group" : "uid");
		json_kv_uint(j, "id", q->id);
		json_kv_bool(j, "from_default", q->from_default);
		json_kv_bool(j, "exempt", q->exempt);
		status_json_limit(j, "pools_limit", q->pools_limit);
		status_json_limit(j, "device_limit", q->device_limit);
		status_json_limit(j, "host_limit", q->host_limit);
		json_kv_uint(j, "pools", q->pools);
		json_kv_uint(j, "host_bytes", q->host_bytes);
		json_key(j, "device_bytes");
		json_array_begin(j);
		for (unsigned d = 0; d < q->n_devices && d < VRAM_MAX_DEVICES; d++)
			json_uint(j, q->device_bytes[d]);
		json_array_end(j);
		json_object_end(j);
	}
	json_array_end(j);
}

static int status_print_json(const struct status *s)
{
	const struct vram_stats *st = &s->st;
	struct json j;

	json_init(&j, stdout);
	json_object_begin(&j);
	json_kv_string(&j, "daemon_version", st->daemon_version);
	json_kv_string(&j, "library_version", vram_version());
	json_kv_string(&j, "backend", st->backend);
	json_kv_uint(&j, "uptime_ms", st->uptime_ms);
	json_kv_uint(&j, "sessions", st->sessions);
	json_kv_uint(&j, "pools", st->pools);
	json_kv_uint(&j, "used_bytes", st->used_bytes);
	json_kv_uint(&j, "backup_bytes", st->backup_bytes);
	json_kv_uint(&j, "disk_backup_bytes", st->disk_backup_bytes);
	json_kv_uint(&j, "open_fds", st->open_fds);
	json_key(&j, "devices");
	json_array_begin(&j);
	for (unsigned i = 0; i < st->n_devices && i < VRAM_MAX_DEVICES; i++) {
		const struct vram_device_info *d = &st->devices[i];

		json_object_begin(&j);
		json_kv_uint(&j, "index", d->index);
		json_kv_string(&j, "uuid", d->uuid);
		json_kv_uint(&j, "total_bytes", d->total_bytes);
		json_kv_uint(&j, "free_bytes", d->free_bytes);
		json_kv_uint(&j, "granularity", d->granularity);
		json_object_end(&j);
	}
	json_array_end(&j);
	status_json_quotas(&j, s);
	json_object_end(&j);
	return json_finish(&j);
}

/* "USED/LIMIT" in bytes (none: no limit). */
static const char *status_bytes_of(uint64_t used, uint64_t limit, char *buf,
				   size_t size)
{
	char a[CTL_FMT_MAX], b[CTL_FMT_MAX];

	snprintf(buf, size, "%s/%s", fmt_bytes(used, a, sizeof(a)),
		 limit == VRAM_QUOTA_NONE ? "none" :
					    fmt_bytes(limit, b, sizeof(b)));
	return buf;
}

/* The quotas as a table: one row per uid or group, its device bytes per
 * device ("0:USED 1:USED", each held to LIMIT/DEV). */
static int status_print_quotas(FILE *f, const struct status *s)
{
	static const struct table_column cols[] = {
		{ "WHO", TABLE_LEFT },	   { "RULE", TABLE_LEFT },
		{ "POOLS", TABLE_RIGHT },  { "DEVICE", TABLE_LEFT },
		{ "LIMIT/DEV", TABLE_RIGHT }, { "HOST", TABLE_RIGHT },
	};
	char a[CTL_FMT_MAX], dev[CTL_FMT_MAX];
	struct table *t;
	int r;

	if (s->n_quotas == 0)
		return 0;
	fprintf(f, "\nquotas    %zu (USED/LIMIT)\n\n", s->n_quotas);
	t = table_new(cols, sizeof(cols) / sizeof(cols[0]));
	if (!t)
		return -ENOMEM;
	for (size_t i = 0; i < s->n_quotas; i++) {
		const struct vram_quota *q = &s->quotas[i];
		size_t o = 0;

		table_cell(t, "%s %" PRIu32, q->group ? "gid" : "uid", q->id);
		table_cell(t, "%s", q->exempt	    ? "exempt" :
				    q->from_default ? "default" :
				    q->pools_limit == VRAM_QUOTA_NONE &&
						    q->device_limit == VRAM_QUOTA_NONE &&
						    q->host_limit == VRAM_QUOTA_NONE ?
						      "none" :
						      "own");
		if (q->pools_limit == VRAM_QUOTA_NONE)
			table_cell(t, "%" PRIu64 "/none", q->pools);
		else
			table_cell(t, "%" PRIu64 "/%" PRIu64, q->pools,
				   q->pools_limit);
		dev[0] = '\0';
		for (unsigned d = 0; d < q->n_devices && d < VRAM_MAX_DEVICES &&
				     o < sizeof(dev);
		     d++)
			o += (size_t)snprintf(dev + o, sizeof(dev) - o,
					      "%s%u:%s", d ? " " : "", d,
					      fmt_bytes(q->device_bytes[d], a,
							sizeof(a)));
		table_cell(t, "%s", dev[0] ? dev : "-");
		table_cell(t, "%s", q->device_limit == VRAM_QUOTA_NONE ?
					    "none" :
					    fmt_bytes(q->device_limit, a, sizeof(a)));
		table_cell(t, "%s", status_bytes_of(q->host_bytes, q->host_limit,
						    dev, sizeof(dev)));
	}
	r = table_print(t, f, 0);
	table_free(t);
	return r;
}

static int status_print_text(FILE *f, const struct status *s)
{
	const struct vram_stats *st = &s->st;
	static const struct table_column cols[] = {
		{ "DEV", TABLE_RIGHT },	  { "UUID", TABLE_LEFT },
		{ "TOTAL", TABLE_RIGHT }, { "FREE", TABLE_RIGHT },
		{ "USED", TABLE_RIGHT },  { "GRANULARITY", TABLE_RIGHT },
	};
	char a[CTL_FMT_MAX], b[CTL_FMT_MAX], c[CTL_FMT_MAX];
	struct table *t;
	int r;

	fprintf(f, "vramd     %s (libvram %s)\n",
		fmt_safe(st->daemon_version, a, sizeof(a)), vram_version());
	fprintf(f, "backend   %s\n", fmt_safe(st->backend, a, sizeof(a)));
	fprintf(f, "uptime    %s\n",
		fmt_duration_ms(st->uptime_ms, a, sizeof(a)));
	fprintf(f, "sessions  %" PRIu32 "\n", st->sessions);
	fprintf(f, "pools     %" PRIu32 "\n", st->pools);
	fprintf(f, "used      %s (%" PRIu64 " bytes of device memory)\n",
		fmt_bytes(st->used_bytes, a, sizeof(a)), st->used_bytes);
	fprintf(f, "backups   %s (%" PRIu64 " bytes of host memory)\n",
		fmt_bytes(st->backup_bytes, a, sizeof(a)), st->backup_bytes);
	fprintf(f, "disk      %s (%" PRIu64 " bytes of backup files)\n",
		fmt_bytes(st->disk_backup_bytes, a, sizeof(a)),
		st->disk_backup_bytes);
	fprintf(f, "fds       %" PRIu32 " open in the daemon\n", st->open_fds);
	if (st->n_devices == 0) {
		fprintf(f, "devices   none\n");
		return status_print_quotas(f, s);
	}
	fprintf(f, "devices   %u\n", st->n_devices);

	t = table_new(cols, sizeof(cols) / sizeof(cols[0]));
	if (!t)
		return -ENOMEM;
	for (unsigned i = 0; i < st->n_devices && i < VRAM_MAX_DEVICES; i++) {
		const struct vram_device_info *d = &st->devices[i];
		uint64_t used = d->total_bytes > d->free_bytes ?
					d->total_bytes - d->free_bytes :
					0;

		table_cell(t, "%u", d->index);
		table_cell(t, "%s", d->uuid[0] ? d->uuid : "-");
		table_cell(t, "%s", fmt_bytes(d->total_bytes, a, sizeof(a)));
		table_cell(t, "%s", fmt_bytes(d->free_bytes, b, sizeof(b)));
		table_cell(t, "%s", fmt_bytes(used, c, sizeof(c)));
		table_cell(t, "%s", fmt_bytes(d->granularity, a, sizeof(a)));
	}
	fputc('\n', f);
	r = table_print(t, f, 0);
	table_free(t);
	return r < 0 ? r : status_print_quotas(f, s);
}

static int status_frame(struct ctl *ctl, void *arg CTL_UNUSED, FILE *f, unsigned cols CTL_UNUSED)
{
	char msg[CTL_FMT_MAX];
	struct status s = { .st = VRAM_STATS_INIT };
	int r = vram_stats(ctl->client, &s.st);

	if (r < 0) {
		ctl_save_error(r, msg, sizeof(msg));
		return ctl_report_error(ctl, "cannot read the daemon's stats",
					r, msg);
	}
	r = vram_quotas(ctl->client, sizeof(struct vram_quota), &s.quotas,
			&s.n_quotas);
	if (r < 0) {
		ctl_save_error(r, msg, sizeof(msg));
		return ctl_report_error(ctl, "cannot read the quotas", r, msg);
	}
	/* JSON only without --watch (refused there): f is stdout then. */
	r = ctl->json ? status_print_json(&s) : status_print_text(f, &s);
	free(s.quotas);
	return ctl_output_done(ctl, r);
}

static int status_option(struct ctl *ctl, int opt, const char *arg, void *data)
{
	int r = watch_option(data, opt, arg);

	if (r == -EINVAL)
		return ctl_usage_error(ctl, "bad value '%s'", arg);
	return r < 0 ? ctl_usage_error(ctl, "unexpected option") : 0;
}

int cmd_status(struct ctl *ctl, int argc, char **argv)
{
	static const struct option longopts[] = { CTL_COMMON_LONGOPTS,
						  CTL_WATCH_LONGOPTS,
						  { NULL, 0, NULL, 0 } };
	struct watch w = { 0 };
	int r;

	r = ctl_parse_args(ctl, argc, argv, CTL_COMMON_SHORTOPTS, longopts,
			   status_help, status_option, &w, CTL_OPERAND_NONE,
			   NULL);
	if (r != CTL_GO_ON)
		return r;
	if (w.on && ctl->json)
		return ctl_usage_error(ctl, "--watch shows text, not --json");
	r = ctl_connect(ctl);
	if (r)
		return r;
	if (w.on)
		return watch_run(ctl, &w, status_frame, NULL);
	return status_frame(ctl, NULL, stdout, 0);
}
