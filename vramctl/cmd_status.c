/* SPDX-License-Identifier: Apache-2.0 */
/* vramctl status: the daemon and its devices at a glance. */
#include <errno.h>
#include <inttypes.h>

#include "vramctl.h"

static const char status_help[] =
	"Usage: vramctl status [--json] [--watch [--interval MS] [--count N]]\n"
	"\n"
	"Shows the daemon's version, backend and uptime, its sessions, pools,\n"
	"the device bytes it holds, the host bytes in backups, its open fds,\n"
	"and for each device: index, uuid, total, free memory, granularity.\n"
	"--watch redraws it in place every --interval MS (default 1000), as\n"
	"vramctl ls --watch does.\n";

static int status_print_json(const struct vram_stats *st)
{
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
	json_object_end(&j);
	return json_finish(&j);
}

static int status_print_text(FILE *f, const struct vram_stats *st)
{
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
		return 0;
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
	return r;
}

static int status_frame(struct ctl *ctl, void *arg CTL_UNUSED, FILE *f, unsigned cols CTL_UNUSED)
{
	char msg[CTL_FMT_MAX];
	struct vram_stats st = VRAM_STATS_INIT;
	int r = vram_stats(ctl->client, &st);

	if (r < 0) {
		ctl_save_error(r, msg, sizeof(msg));
		return ctl_report_error(ctl, "cannot read the daemon's stats",
					r, msg);
	}
	/* JSON only without --watch (refused there): f is stdout then. */
	r = ctl->json ? status_print_json(&st) : status_print_text(f, &st);
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
