/* SPDX-License-Identifier: Apache-2.0 */
/* vramctl ls, show and drop: the pools on the node. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vramctl.h"

static const char ls_help[] =
	"Usage: vramctl ls [--tag TAG] [--owner PID|INSTANCE|/CGROUP] [--json]\n"
	"                  [--watch [--interval MS] [--count N]]\n"
	"\n"
	"Lists the pools of your uid, one row each: NAME, UID (the owner's),\n"
	"OWNER (pid/name@instance), TAG, DEV, STATE, BYTES, POLICY, MAPPERS.\n"
	"Names are scoped per uid; root and the admin group see every uid's\n"
	"pools, another uid's named UID:NAME, as commands take them.\n"
	"--owner takes the owner's pid, its instance name (VRAM_INSTANCE in its\n"
	"environment) or a cgroup path (that cgroup or one below it).\n"
	"With --tag or --owner only\n"
	"the pools that match (both, when both are given); then exit status 4\n"
	"says that none did. --json prints an array of pool objects with every\n"
	"field, mappers included. --watch redraws the table in place every\n"
	"--interval MS (default 1000) until q or Ctrl-C, or --count N frames\n"
	"(plain lines, frame after frame, when stdout is not a terminal).\n";

static const char show_help[] =
	"Usage: vramctl show POOL [--json]\n"
	"\n"
	"POOL is a pool of your uid, or UID:NAME (root and the admin group).\n"
	"Shows every field of one pool: owner, state, policy, sizes, chunks,\n"
	"backup, flags, and each process that maps it (pid, uid, name, rw/ro).\n"
	"Exit status 4 if there is no such pool.\n";

static const char drop_help[] =
	"Usage: vramctl drop POOL [--json]\n"
	"\n"
	"POOL is a pool of your uid, or UID:NAME (root, for another uid's).\n"
	"Drops a pool: every process that maps it loses it, and its device\n"
	"memory and host backup are freed. Needs the owner's uid or root.\n"
	"Exit status 4 if there is no such pool.\n";

/* Names for the VRAM_POOL_* bits we know, comma-separated; others print
 * as hex. */
static const char *pool_flags_text(unsigned flags, char *buf, size_t size)
{
	static const struct {
		unsigned bit;
		const char *name;
	} names[] = {
		{ VRAM_POOL_PERSIST, "persist" },
		{ VRAM_POOL_RETAIN_BACKUP, "retain-backup" },
		{ VRAM_POOL_RELEASE_BACKUP, "release-backup" },
		{ VRAM_POOL_PAGEABLE_BACKUP, "pageable-backup" },
	};
	unsigned unknown = flags;
	size_t n = 0;

	buf[0] = 0;
	if (flags == 0) {
		snprintf(buf, size, "none");
		return buf;
	}
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (!(flags & names[i].bit))
			continue;
		unknown &= ~names[i].bit;
		n += (size_t)snprintf(buf + n, n < size ? size - n : 0, "%s%s",
				      n ? "," : "", names[i].name);
		if (n >= size)
			return buf;
	}
	if (unknown)
		snprintf(buf + n, size - n, "%s0x%x", n ? "," : "", unknown);
	return buf;
}

const char *pool_address(const struct vram_pool_info *p, char *buf,
			 size_t size)
{
	if (p->owner_uid == (uint32_t)getuid())
		snprintf(buf, size, "%s", p->name);
	else
		snprintf(buf, size, "%" PRIu32 ":%s", p->owner_uid, p->name);
	return buf;
}

void pool_json(struct json *j, const struct vram_pool_info *p)
{
	char addr[CTL_FMT_MAX];

	json_object_begin(j);
	json_kv_uint(j, "id", p->id);
	json_kv_string(j, "name", p->name);
	json_kv_string(j, "address", pool_address(p, addr, sizeof(addr)));
	json_kv_string(j, "tag", p->tag);
	json_kv_uint(j, "device", p->device);
	json_kv_string(j, "device_uuid", p->device_uuid);
	json_kv_string(j, "owner_job", p->owner_job);
	json_kv_string(j, "state", fmt_state(p->state));
	json_kv_string(j, "policy", fmt_policy(p->policy));
	json_kv_uint(j, "bytes", p->bytes);
	json_kv_uint(j, "reserve_bytes", p->reserve_bytes);
	json_kv_uint(j, "backup_bytes", p->backup_bytes);
	json_kv_uint(j, "chunks", p->chunks);
	json_kv_uint(j, "owner_pid", p->owner_pid);
	json_kv_uint(j, "owner_uid", p->owner_uid);
	json_kv_string(j, "owner_name", p->owner_name);
	json_kv_string(j, "owner_instance", p->owner_instance);
	json_kv_string(j, "owner_cgroup", p->owner_cgroup);
	json_kv_bool(j, "orphaned", p->owner_pid == 0);
	json_kv_uint(j, "flags", p->flags);
	json_kv_bool(j, "persistent", (p->flags & VRAM_POOL_PERSIST) != 0);
	json_key(j, "mappers");
	json_array_begin(j);
	for (uint32_t i = 0; i < p->n_mappers && p->mappers; i++) {
		const struct vram_mapper_info *m = &p->mappers[i];

		json_object_begin(j);
		json_kv_uint(j, "pid", m->pid);
		json_kv_uint(j, "uid", m->uid);
		json_kv_string(j, "name", m->name);
		json_kv_string(j, "access", m->readonly ? "ro" : "rw");
		json_object_end(j);
	}
	json_array_end(j);
	json_object_end(j);
}

/* "1234/engine", "1234/engine@pod-a" when the owner named its instance,
 * or "-" for an orphaned persistent pool. */
static const char *pool_owner_text(const struct vram_pool_info *p, char *buf,
				   size_t size)
{
	int o;

	if (p->owner_pid == 0)
		o = snprintf(buf, size, "-");
	else if (p->owner_name[0])
		o = snprintf(buf, size, "%" PRIu32 "/%s", p->owner_pid,
			     p->owner_name);
	else
		o = snprintf(buf, size, "%" PRIu32, p->owner_pid);
	if (p->owner_pid && p->owner_instance[0] && o > 0 && (size_t)o < size)
		snprintf(buf + o, size - (size_t)o, "@%s", p->owner_instance);
	return buf;
}

int pools_compare_name(const void *a, const void *b)
{
	const struct vram_pool_info *x = a, *y = b;

	return strcmp(x->name, y->name);
}

int pools_print_text(FILE *f, const struct vram_pool_info *pools, size_t n,
		     bool filtered)
{
	static const struct table_column cols[] = {
		{ "NAME", TABLE_LEFT },	  { "UID", TABLE_RIGHT },
		{ "OWNER", TABLE_LEFT },  { "TAG", TABLE_LEFT },
		{ "DEV", TABLE_RIGHT },
		{ "STATE", TABLE_LEFT },  { "BYTES", TABLE_RIGHT },
		{ "POLICY", TABLE_LEFT }, { "BACKUP", TABLE_RIGHT },
		{ "MAPPERS", TABLE_RIGHT },
	};
	char owner[CTL_FMT_MAX], size[CTL_FMT_MAX], held[CTL_FMT_MAX];
	char addr[CTL_FMT_MAX];
	struct table *t;
	int r;

	if (n == 0) {
		/* A header over nothing reads like a glitch. */
		fprintf(f, "%s\n", filtered ? "no pool matches" : "no pools");
		return 0;
	}
	t = table_new(cols, sizeof(cols) / sizeof(cols[0]));
	if (!t)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const struct vram_pool_info *p = &pools[i];

		table_cell(t, "%s", pool_address(p, addr, sizeof(addr)));
		table_cell(t, "%" PRIu32, p->owner_uid);
		table_cell(t, "%s", pool_owner_text(p, owner, sizeof(owner)));
		table_cell(t, "%s", p->tag);
		table_cell(t, "%u", p->device);
		table_cell(t, "%s", fmt_state(p->state));
		table_cell(t, "%s", fmt_bytes(p->bytes, size, sizeof(size)));
		table_cell(t, "%s", fmt_policy(p->policy));
		/* What the backup holds now (its pages or blocks), not what
		 * it would hold: "-" for a pool with no backup. */
		if (p->policy == VRAM_POLICY_DISCARD)
			table_cell(t, "-");
		else
			table_cell(t, "%s",
				   fmt_bytes(p->backup_bytes, held, sizeof(held)));
		table_cell(t, "%" PRIu32, p->n_mappers);
	}
	r = table_print(t, f, 0);
	table_free(t);
	return r;
}

static int ls_print_json(const struct vram_pool_info *pools, size_t n)
{
	struct json j;

	json_init(&j, stdout);
	json_array_begin(&j);
	for (size_t i = 0; i < n; i++)
		pool_json(&j, &pools[i]);
	json_array_end(&j);
	return json_finish(&j);
}

/* ls's selector and --watch. */
struct ls_args {
	struct vram_selector sel;
	struct watch watch;
	bool filtered;
};

static int ls_option(struct ctl *ctl, int opt, const char *arg, void *data)
{
	struct ls_args *a = data;
	int r = watch_option(&a->watch, opt, arg);

	if (r == -EINVAL)
		return ctl_usage_error(ctl, "bad value '%s'", arg);
	if (r == 0)
		return 0;
	return ctl_selector_option(ctl, opt, arg, &a->sel);
}

/* One listing: text or JSON, to f. */
static int ls_frame(struct ctl *ctl, void *arg, FILE *f, unsigned cols CTL_UNUSED)
{
	struct ls_args *a = arg;
	struct vram_pool_info *pools = NULL;
	char msg[CTL_FMT_MAX];
	size_t n = 0;
	int r;

	/* all = 1 with fields set means "every pool with these fields". */
	r = vram_list(ctl->client, a->filtered ? &a->sel : NULL,
		      sizeof(struct vram_pool_info), &pools, &n);
	if (r == -ENOENT) {
		n = 0; /* nothing matched: an empty list, not a failure */
	} else if (r < 0) {
		ctl_save_error(r, msg, sizeof(msg));
		return ctl_report_error(ctl, "cannot list pools", r, msg);
	}
	if (n > 1)
		qsort(pools, n, sizeof(*pools), pools_compare_name);
	/* JSON only without --watch (refused there): f is stdout then. */
	r = ctl->json ? ls_print_json(pools, n) :
			pools_print_text(f, pools, n, a->filtered);
	vram_pool_info_free(pools, n);
	r = ctl_output_done(ctl, r);
	if (r == CTL_EXIT_OK && a->filtered && n == 0 && !a->watch.on)
		return CTL_EXIT_NO_MATCH;
	return r;
}

int cmd_ls(struct ctl *ctl, int argc, char **argv)
{
	static const struct option longopts[] = {
		CTL_COMMON_LONGOPTS,
		{ "tag", required_argument, NULL, 'T' },
		{ "owner", required_argument, NULL, 'o' },
		CTL_WATCH_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	struct ls_args a = { .sel = { .size = sizeof(a.sel), .all = 1 } };
	int r;

	r = ctl_parse_args(ctl, argc, argv, CTL_COMMON_SHORTOPTS "T:o:",
			   longopts, ls_help, ls_option, &a, CTL_OPERAND_NONE,
			   NULL);
	if (r != CTL_GO_ON)
		return r;
	a.filtered = a.sel.tag || a.sel.owner_pid || a.sel.owner;
	if (a.watch.on && ctl->json)
		return ctl_usage_error(ctl, "--watch shows text, not --json");

	r = ctl_connect(ctl);
	if (r)
		return r;
	if (a.watch.on)
		return watch_run(ctl, &a.watch, ls_frame, &a);
	r = ls_frame(ctl, &a, stdout, 0);
	return r;
}

static int show_print_text(const struct vram_pool_info *p)
{
	static const struct table_column cols[] = {
		{ "PID", TABLE_RIGHT },
		{ "UID", TABLE_RIGHT },
		{ "NAME", TABLE_LEFT },
		{ "ACCESS", TABLE_LEFT },
	};
	char a[CTL_FMT_MAX], b[CTL_FMT_MAX];
	struct table *t;
	int r;

	printf("name      %s\n", fmt_safe(p->name, a, sizeof(a)));
	printf("address   %s (uid %" PRIu32 ")\n",
	       fmt_safe(pool_address(p, b, sizeof(b)), a, sizeof(a)),
	       p->owner_uid);
	printf("id        %" PRIu64 "\n", p->id);
	printf("tag       %s\n", fmt_safe(p->tag, a, sizeof(a)));
	printf("device    %u\n", p->device);
	printf("state     %s\n", fmt_state(p->state));
	printf("policy    %s\n", fmt_policy(p->policy));
	if (p->owner_pid)
		printf("owner     pid %" PRIu32 " (%s), uid %" PRIu32 "\n",
		       p->owner_pid, fmt_safe(p->owner_name, a, sizeof(a)),
		       p->owner_uid);
	if (p->owner_pid && p->owner_instance[0])
		printf("instance  %s\n", fmt_safe(p->owner_instance, a, sizeof(a)));
	if (p->owner_pid && p->owner_cgroup[0])
		printf("cgroup    %s\n", fmt_safe(p->owner_cgroup, a, sizeof(a)));
	else
		printf("owner     none (orphaned; uid %" PRIu32
		       " may re-open it)\n",
		       p->owner_uid);
	printf("bytes     %s (%" PRIu64 ")\n",
	       fmt_bytes(p->bytes, a, sizeof(a)), p->bytes);
	printf("chunks    %" PRIu32 "\n", p->chunks);
	printf("reserve   %s (%" PRIu64 ")\n",
	       fmt_bytes(p->reserve_bytes, a, sizeof(a)), p->reserve_bytes);
	printf("backup    %s (%" PRIu64 ")\n",
	       fmt_bytes(p->backup_bytes, a, sizeof(a)), p->backup_bytes);
	printf("flags     %s\n", pool_flags_text(p->flags, b, sizeof(b)));
	printf("mappers   %" PRIu32 "\n", p->n_mappers);
	if (p->n_mappers == 0 || !p->mappers)
		return 0;

	t = table_new(cols, sizeof(cols) / sizeof(cols[0]));
	if (!t)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->n_mappers; i++) {
		const struct vram_mapper_info *m = &p->mappers[i];

		table_cell(t, "%" PRIu32, m->pid);
		table_cell(t, "%" PRIu32, m->uid);
		table_cell(t, "%s", m->name[0] ? m->name : "-");
		table_cell(t, "%s", m->readonly ? "ro" : "rw");
	}
	r = table_print(t, stdout, 2);
	table_free(t);
	return r;
}

/* Parses a command that takes only the common options and one POOL. */
static int pool_command_args(struct ctl *ctl, int argc, char **argv,
			     const char *help, const char **name)
{
	static const struct option longopts[] = { CTL_COMMON_LONGOPTS,
						  { NULL, 0, NULL, 0 } };

	return ctl_parse_args(ctl, argc, argv, CTL_COMMON_SHORTOPTS, longopts,
			      help, NULL, NULL, CTL_OPERAND_POOL, name);
}

int cmd_show(struct ctl *ctl, int argc, char **argv)
{
	struct vram_selector sel = VRAM_SELECTOR_INIT;
	struct vram_pool_info *pools = NULL;
	char msg[CTL_FMT_MAX], what[CTL_FMT_MAX];
	size_t n = 0;
	int r;

	r = pool_command_args(ctl, argc, argv, show_help, &sel.name);
	if (r != CTL_GO_ON)
		return r;
	r = ctl_connect(ctl);
	if (r)
		return r;
	r = vram_list(ctl->client, &sel, sizeof(struct vram_pool_info), &pools,
		      &n);
	if (r == -ENOENT) {
		pools = NULL; /* nothing matched */
		n = 0;
	} else if (r < 0) {
		ctl_save_error(r, msg, sizeof(msg));
		return ctl_report_error(ctl, "cannot list pools", r, msg);
	}
	if (n == 0) {
		vram_pool_info_free(pools, n);
		return ctl_report_error(ctl,
					fmt_safe(sel.name, what, sizeof(what)),
					-ENOENT, "no such pool");
	}
	if (ctl->json) {
		struct json j;

		json_init(&j, stdout);
		pool_json(&j, &pools[0]);
		r = json_finish(&j);
	} else {
		r = show_print_text(&pools[0]);
	}
	vram_pool_info_free(pools, n);
	return ctl_output_done(ctl, r);
}

int cmd_drop(struct ctl *ctl, int argc, char **argv)
{
	const char *name = NULL;
	char msg[CTL_FMT_MAX], safe[CTL_FMT_MAX];
	int r;

	r = pool_command_args(ctl, argc, argv, drop_help, &name);
	if (r != CTL_GO_ON)
		return r;
	r = ctl_connect(ctl);
	if (r)
		return r;
	r = vram_pool_drop(ctl->client, name);
	if (r < 0) {
		ctl_save_error(r, msg, sizeof(msg));
		return ctl_report_error(ctl, fmt_safe(name, safe, sizeof(safe)),
					r, msg);
	}
	if (ctl->json) {
		struct json j;

		json_init(&j, stdout);
		json_object_begin(&j);
		json_kv_string(&j, "command", "drop");
		json_kv_string(&j, "pool", name);
		json_kv_bool(&j, "dropped", true);
		json_object_end(&j);
		return ctl_output_done(ctl, json_finish(&j));
	}
	printf("dropped %s\n", fmt_safe(name, safe, sizeof(safe)));
	return CTL_EXIT_OK;
}
