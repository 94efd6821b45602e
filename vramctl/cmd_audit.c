/* SPDX-License-Identifier: Apache-2.0 */
/* vramctl audit: per process and device, what it maps through vramd next
 * to the memory the driver charges to the process itself (allocated
 * outside vramd, which a pause cannot free), so an engine's unmanaged
 * allocations show at once. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "vramctl.h"

static const char audit_help[] =
	"Usage: vramctl audit [--json]\n"
	"\n"
	"Lists every process using a GPU, as the driver reports them, and every\n"
	"vramd client. OUTSIDE is the device memory the driver charges to the\n"
	"process itself: its context and every allocation vramd does not manage,\n"
	"which no pause can free. The driver does not charge memory a process\n"
	"imported from vramd (measured on an H200: a process with a 1 GiB vramd\n"
	"pool and a context was charged 518 MiB); VIA-VRAMD is that memory.\n"
	"The host backend cannot list processes: only vramd clients appear.\n";

static int audit_print_json(const struct vram_process_usage *u, size_t n,
			    int driver_info)
{
	struct json j;

	json_init(&j, stdout);
	json_object_begin(&j);
	json_kv_bool(&j, "driver_info", driver_info != 0);
	json_key(&j, "processes");
	json_array_begin(&j);
	for (size_t i = 0; i < n; i++) {
		json_object_begin(&j);
		json_kv_uint(&j, "pid", u[i].pid);
		json_kv_uint(&j, "device", u[i].device);
		json_kv_string(&j, "name", u[i].name);
		json_kv_bool(&j, "is_vramd", u[i].is_vramd != 0);
		json_kv_bool(&j, "used_known", u[i].used_known != 0);
		json_kv_uint(&j, "used_bytes", u[i].used_bytes);
		json_kv_uint(&j, "vramd_bytes", u[i].vramd_bytes);
		json_kv_uint(&j, "outside_bytes", u[i].used_known ? u[i].used_bytes : 0);
		json_key(&j, "reported_outside");
		if (u[i].outside_reported) {
			json_object_begin(&j);
			json_kv_uint(&j, "bytes", u[i].outside_bytes);
			json_kv_uint(&j, "count", u[i].outside_count);
			json_kv_bool(&j, "expandable_segments",
				     (u[i].outside_flags &
				      VRAM_OUTSIDE_EXPANDABLE) != 0);
			json_object_end(&j);
		} else {
			json_null(&j);
		}
		json_object_end(&j);
	}
	json_array_end(&j);
	json_object_end(&j);
	return json_finish(&j);
}

static int audit_print_text(const struct vram_process_usage *u, size_t n,
			    int driver_info)
{
	static const struct table_column cols[] = {
		{ "PID", TABLE_RIGHT },	      { "NAME", TABLE_LEFT },
		{ "DEV", TABLE_RIGHT },	      { "VIA-VRAMD", TABLE_RIGHT },
		{ "OUTSIDE", TABLE_RIGHT },
	};
	char a[CTL_FMT_MAX], b[CTL_FMT_MAX];
	struct table *t;
	int r;

	if (!driver_info)
		printf("(this backend cannot list device processes: vramd clients only)\n");
	if (n == 0) {
		printf("no processes\n");
		return 0;
	}
	t = table_new(cols, sizeof(cols) / sizeof(cols[0]));
	if (!t)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		table_cell(t, "%" PRIu32, u[i].pid);
		table_cell(t, "%s", u[i].is_vramd ? "(vramd)" :
				    u[i].name[0]   ? u[i].name :
						     "-");
		table_cell(t, "%u", u[i].device);
		table_cell(t, "%s", fmt_bytes(u[i].vramd_bytes, b, sizeof(b)));
		if (u[i].used_known)
			table_cell(t, "%s", fmt_bytes(u[i].used_bytes, a, sizeof(a)));
		else
			table_cell(t, "%s", "?");
	}
	r = table_print(t, stdout, 0);
	table_free(t);
	/* What processes under libvram-preload.so said they left outside
	 * their pools: once per process. */
	for (size_t i = 0; i < n && r >= 0; i++) {
		int seen = 0;
		if (!u[i].outside_reported)
			continue;
		for (size_t k = 0; k < i && !seen; k++)
			seen = u[k].pid == u[i].pid && u[k].outside_reported;
		if (seen)
			continue;
		printf("pid %" PRIu32 " outside: %s in %" PRIu64
		       " allocation%s (disable scopes), plus the CUDA "
		       "context%s\n",
		       u[i].pid, fmt_bytes(u[i].outside_bytes, a, sizeof(a)),
		       u[i].outside_count, u[i].outside_count == 1 ? "" : "s",
		       u[i].outside_flags & VRAM_OUTSIDE_EXPANDABLE ?
			       " and PyTorch's expandable segments" :
			       "");
	}
	return r;
}

int cmd_audit(struct ctl *ctl, int argc, char **argv)
{
	static const struct option longopts[] = { CTL_COMMON_LONGOPTS,
						  { NULL, 0, NULL, 0 } };
	char msg[CTL_FMT_MAX];
	struct vram_process_usage *u = NULL;
	size_t n = 0;
	int driver_info = 0, r;

	r = ctl_parse_args(ctl, argc, argv, CTL_COMMON_SHORTOPTS, longopts,
			   audit_help, NULL, NULL, CTL_OPERAND_NONE, NULL);
	if (r != CTL_GO_ON)
		return r;
	r = ctl_connect(ctl);
	if (r)
		return r;
	r = vram_audit(ctl->client, sizeof(struct vram_process_usage), &u, &n,
		       &driver_info);
	if (r < 0) {
		ctl_save_error(r, msg, sizeof(msg));
		return ctl_report_error(ctl, "cannot audit the devices", r, msg);
	}
	r = ctl->json ? audit_print_json(u, n, driver_info) :
			audit_print_text(u, n, driver_info);
	free(u);
	return ctl_output_done(ctl, r);
}
