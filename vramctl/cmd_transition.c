/* SPDX-License-Identifier: Apache-2.0 */
/* vramctl pause and resume: move pools' physical memory off the device and
 * back, and say what that did to the device's free memory. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "vramctl.h"

static const char pause_help[] =
	"Usage: vramctl pause [POOL] [--tag TAG] [--owner PID|INSTANCE|/CGROUP] [--all]\n"
	"                     [--job JOB] [--owners PID,PID...] [--gang]\n"
	"                     [--timeout MS] [--json]\n"
	"\n"
	"Pauses the selected pools: every process that maps them saves the\n"
	"content (policy host) or drops it (policy discard), unmaps, and\n"
	"acknowledges; then the physical memory goes back to the device. The\n"
	"virtual addresses stay reserved, so pointers stay valid for resume.\n"
	"Prints the pools changed, the bytes released and the device's free\n"
	"memory before and after.\n"
	"\n"
	"Select pools by name, tag, owner (pid, instance name or cgroup; every\n"
	"one given must match), or\n"
	"--all for every pool of your uid (root and the admin group: of every\n"
	"uid; narrowed by the others when given). POOL is your uid's pool, or\n"
	"UID:NAME for another uid's (root). A process\n"
	"that does not acknowledge within --timeout MS (default: the daemon's\n"
	"ack timeout) is named, its pools stay pausing, and the exit status is\n"
	"5; run the command again to wait more. Pools already paused are not\n"
	"an error. Exit status 4 if no pool matched.\n"
	"\n"
	"--job selects the pools of the ranks that registered under JOB\n"
	"(VRAM_JOB in their environment); --owners those owned by one of the\n"
	"pids. --gang makes it all or nothing: if one pool fails, misses the\n"
	"deadline or loses its owner (a rank dies) before the end, the pools\n"
	"it had paused are resumed, and the rank (pid, instance, device) and\n"
	"why are printed. The free memory of each device is shown.\n";

static const char resume_help[] =
	"Usage: vramctl resume [POOL] [--tag TAG] [--owner PID|INSTANCE|/CGROUP] [--all]\n"
	"                      [--job JOB] [--owners PID,PID...] [--gang]\n"
	"                      [--timeout MS] [--json]\n"
	"\n"
	"Resumes the selected pools: the daemon makes the physical memory\n"
	"again, every process that maps them maps it at the same addresses,\n"
	"and host-policy pools get their content back. Prints the pools\n"
	"changed, the bytes restored and the device's free memory before and\n"
	"after. When the device lacks the memory the pools stay paused with\n"
	"their backups, and the command can be retried (exit status 1).\n"
	"\n"
	"Selection, --gang, --timeout and exit statuses are those of pause (a\n"
	"failed gang resume pauses again what it had resumed).\n";

struct transition {
	const char *verb;  /* "pause", "resume" */
	const char *done;  /* "paused", "resumed" */
	const char *moved; /* "released", "restored" */
	const char *help;
	bool resume;
	int (*call)(vram_client *c, const struct vram_selector *sel,
		    unsigned timeout_ms, struct vram_report *report);
	int (*gang_call)(vram_client *c, const struct vram_selector *sel,
			 unsigned timeout_ms, struct vram_report *report);
};

static const struct transition pause_transition = {
	"pause", "paused", "released", pause_help, false, vram_pause,
	vram_gang_pause,
};

static const struct transition resume_transition = {
	"resume", "resumed", "restored", resume_help, true, vram_resume,
	vram_gang_resume,
};

#define OWNERS_MAX 256

/* What pause and resume parse: the selector and its pid list, --gang. */
struct transition_args {
	struct vram_selector sel;
	uint32_t pids[OWNERS_MAX];
	bool gang;
};

/* "12,34,56" into a->pids. 0 or an exit code. */
static int owners_parse(struct ctl *ctl, struct transition_args *a,
			const char *arg)
{
	char buf[4096];
	char *save = NULL;
	uint64_t v;

	if (snprintf(buf, sizeof(buf), "%s", arg) >= (int)sizeof(buf))
		return ctl_usage_error(ctl, "--owners: the list is too long");
	for (char *tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (ctl_parse_uint(tok, UINT32_MAX, &v) < 0 || v == 0)
			return ctl_usage_error(ctl, "--owners wants pids, not '%s'",
					       tok);
		if (a->sel.n_owner_pids == OWNERS_MAX)
			return ctl_usage_error(ctl, "--owners: at most %d pids",
					       OWNERS_MAX);
		a->pids[a->sel.n_owner_pids++] = (uint32_t)v;
	}
	if (!a->sel.n_owner_pids)
		return ctl_usage_error(ctl, "--owners needs a pid list");
	a->sel.owner_pids = a->pids;
	return 0;
}

static int transition_option(struct ctl *ctl, int opt, const char *arg,
			     void *data)
{
	struct transition_args *a = data;

	switch (opt) {
	case 'g':
		a->gang = true;
		return 0;
	case 'J':
		if (!*arg)
			return ctl_usage_error(ctl, "--job needs a job name");
		a->sel.job = arg;
		return 0;
	case 'P':
		return owners_parse(ctl, a, arg);
	default:
		return ctl_selector_option(ctl, opt, arg, &a->sel);
	}
}

/* Describes a selector for people: "pool x", "pools with tag t owned by
 * pid 12", "all pools". */
static const char *selector_text(const struct vram_selector *sel, char *buf,
				 size_t size)
{
	char safe[CTL_FMT_MAX];
	size_t o = 0;

	if (sel->name) {
		o += snprintf(buf + o, size - o, "pool %s",
			      fmt_safe(sel->name, safe, sizeof(safe)));
	} else {
		o += snprintf(buf + o, size - o, "%s",
			      sel->all ? "all pools" : "pools");
	}
	if (o < size && sel->tag)
		o += snprintf(buf + o, size - o, " with tag %s",
			      fmt_safe(sel->tag, safe, sizeof(safe)));
	if (o < size && sel->owner_pid)
		o += snprintf(buf + o, size - o, " owned by pid %" PRIu32,
			      sel->owner_pid);
	if (o < size && sel->owner)
		o += snprintf(buf + o, size - o, " owned by %s",
			      fmt_safe(sel->owner, safe, sizeof(safe)));
	if (o < size && sel->job)
		o += snprintf(buf + o, size - o, " of job %s",
			      fmt_safe(sel->job, safe, sizeof(safe)));
	if (o < size && sel->n_owner_pids)
		snprintf(buf + o, size - o, " owned by %" PRIu32 " listed pid%s",
			 sel->n_owner_pids, sel->n_owner_pids == 1 ? "" : "s");
	return buf;
}

/* One object: the selector, the report, the error (or null) and the exit
 * code. Returns json_finish()'s result. */
static int transition_print_json(const struct transition *tr,
				 const struct vram_selector *sel, bool gang,
				 int err,
				 const char *msg, const struct vram_report *rep,
				 int code)
{
	struct json j;

	json_init(&j, stdout);
	json_object_begin(&j);
	json_kv_string(&j, "command", tr->verb);
	json_key(&j, "selector");
	json_object_begin(&j);
	json_kv_string(&j, "name", sel->name);
	json_kv_string(&j, "tag", sel->tag);
	json_kv_uint(&j, "owner_pid", sel->owner_pid);
	json_kv_string(&j, "owner", sel->owner);
	json_kv_bool(&j, "all", sel->all);
	json_kv_string(&j, "job", sel->job);
	json_key(&j, "owner_pids");
	json_array_begin(&j);
	for (uint32_t i = 0; i < sel->n_owner_pids; i++)
		json_uint(&j, sel->owner_pids[i]);
	json_array_end(&j);
	json_object_end(&j);
	json_kv_bool(&j, "gang", gang);
	json_kv_bool(&j, "ok", code == CTL_EXIT_OK);
	json_kv_bool(&j, "already", err == -EALREADY);
	json_kv_uint(&j, "pools", rep->pools);
	json_kv_uint(&j, "bytes", rep->bytes);
	json_kv_uint(&j, "free_before", rep->free_before);
	json_kv_uint(&j, "free_after", rep->free_after);
	json_kv_uint(&j, "failed", rep->failed);
	json_key(&j, "devices");
	json_array_begin(&j);
	for (uint32_t i = 0; i < rep->n_devices; i++) {
		json_object_begin(&j);
		json_kv_uint(&j, "index", rep->devices[i].index);
		json_kv_string(&j, "uuid", rep->devices[i].uuid);
		json_kv_uint(&j, "free_before", rep->devices[i].free_before);
		json_kv_uint(&j, "free_after", rep->devices[i].free_after);
		json_object_end(&j);
	}
	json_array_end(&j);
	json_kv_uint(&j, "rolled_back", rep->rolled_back);
	json_kv_uint(&j, "outside_procs", rep->outside_procs);
	json_kv_uint(&j, "outside_bytes", rep->outside_bytes);
	json_kv_uint(&j, "outside_count", rep->outside_count);
	json_kv_bool(&j, "outside_expandable_segments",
		     (rep->outside_flags & VRAM_OUTSIDE_EXPANDABLE) != 0);
	json_key(&j, "failed_rank");
	if (rep->failed_err) {
		json_object_begin(&j);
		json_kv_uint(&j, "pid", rep->failed_pid);
		json_kv_string(&j, "instance", rep->failed_instance);
		json_kv_uint(&j, "device", rep->failed_device);
		json_kv_string(&j, "pool", rep->failed_pool);
		json_kv_int(&j, "errno", rep->failed_err);
		json_kv_string(&j, "name", fmt_errno_name(rep->failed_err));
		json_object_end(&j);
	} else {
		json_null(&j);
	}
	json_key(&j, "error");
	if (err < 0 && err != -EALREADY) {
		json_object_begin(&j);
		json_kv_int(&j, "errno", -err);
		json_kv_string(&j, "name", fmt_errno_name(-err));
		json_kv_string(&j, "message", msg);
		json_object_end(&j);
	} else {
		json_null(&j);
	}
	json_kv_int(&j, "exit_code", code);
	json_object_end(&j);
	return json_finish(&j);
}

/* Prints the report. failed is shown only when the call failed: libvram
 * counts a pool that was already in the asked state as failed, which is
 * not a failure here. */
static void transition_print_text(const struct transition *tr,
				  const struct vram_report *rep, int err)
{
	char a[CTL_FMT_MAX], b[CTL_FMT_MAX], d[CTL_FMT_MAX];
	uint64_t delta;
	char sign;

	printf("%s %" PRIu32 " pool%s, %s %s (%" PRIu64 " bytes)\n", tr->done,
	       rep->pools, rep->pools == 1 ? "" : "s", tr->moved,
	       fmt_bytes(rep->bytes, a, sizeof(a)), rep->bytes);
	if (rep->free_after >= rep->free_before) {
		delta = rep->free_after - rep->free_before;
		sign = '+';
	} else {
		delta = rep->free_before - rep->free_after;
		sign = '-';
	}
	printf("device free %s -> %s (%c%s)\n",
	       fmt_bytes(rep->free_before, a, sizeof(a)),
	       fmt_bytes(rep->free_after, b, sizeof(b)), sign,
	       fmt_bytes(delta, d, sizeof(d)));
	for (uint32_t i = 0; i < rep->n_devices && rep->n_devices > 1; i++)
		printf("  device %u free %s -> %s\n", rep->devices[i].index,
		       fmt_bytes(rep->devices[i].free_before, a, sizeof(a)),
		       fmt_bytes(rep->devices[i].free_after, b, sizeof(b)));
	/* What libvram-preload.so's processes left outside their pools. */
	if (rep->outside_procs && !tr->resume)
		printf("outside: %s in %" PRIu64 " allocation%s (disable scopes), "
		       "plus the CUDA context%s%s\n",
		       fmt_bytes(rep->outside_bytes, a, sizeof(a)),
		       rep->outside_count, rep->outside_count == 1 ? "" : "s",
		       rep->outside_procs > 1 ? "s" : "",
		       rep->outside_flags & VRAM_OUTSIDE_EXPANDABLE ?
			       " and PyTorch's expandable segments" :
			       "");
	if (err < 0 && rep->failed)
		printf("%" PRIu32 " pool%s did not %s\n", rep->failed,
		       rep->failed == 1 ? "" : "s", tr->verb);
	if (rep->failed_err) {
		char safe[CTL_FMT_MAX];
		printf("gang undone by rank pid %" PRIu32 " (instance '%s', "
		       "device %u), pool %s: %s; %" PRIu32 " pool%s brought back\n",
		       rep->failed_pid,
		       fmt_safe(rep->failed_instance, safe, sizeof(safe)),
		       rep->failed_device, fmt_safe(rep->failed_pool, d, sizeof(d)),
		       fmt_errno_name(rep->failed_err), rep->rolled_back,
		       rep->rolled_back == 1 ? "" : "s");
	}
}

/* Says on stderr why a transition failed, with what to do about it. */
static void transition_explain(const struct ctl *ctl,
			       const struct transition *tr,
			       const struct vram_selector *sel, int err,
			       const char *msg)
{
	char what[CTL_FMT_MAX], safe[CTL_FMT_MAX];
	const char *advice = "";

	selector_text(sel, what, sizeof(what));
	/* The daemon's message says what state the pools are left in (and,
	 * for a timeout, that pausing again waits more). */
	if (err == -ENOMEM && tr->resume)
		advice = "\n  retry when the device has room";
	fprintf(stderr, "vramctl: %s %s: %s%s\n", ctl->command, what,
		fmt_safe(msg, safe, sizeof(safe)), advice);
}

static int transition_run(struct ctl *ctl, const struct transition *tr,
			  int argc, char **argv)
{
	static const struct option longopts[] = {
		CTL_COMMON_LONGOPTS,
		{ "tag", required_argument, NULL, 'T' },
		{ "owner", required_argument, NULL, 'o' },
		{ "all", no_argument, NULL, 'a' },
		{ "job", required_argument, NULL, 'J' },
		{ "owners", required_argument, NULL, 'P' },
		{ "gang", no_argument, NULL, 'g' },
		{ NULL, 0, NULL, 0 },
	};
	static struct transition_args args;
	struct vram_selector *selp = &args.sel;
	struct vram_report rep = VRAM_REPORT_INIT;
	char msg[CTL_FMT_MAX] = "";
	int r, code;

	args = (struct transition_args){ .sel = VRAM_SELECTOR_INIT };
	r = ctl_parse_args(ctl, argc, argv, CTL_COMMON_SHORTOPTS "T:o:aJ:P:g",
			   longopts, tr->help, transition_option, &args,
			   CTL_OPERAND_POOL_OPT, &selp->name);
	if (r != CTL_GO_ON)
		return r;
	const struct vram_selector sel = args.sel;
	if (!sel.name && !sel.tag && !sel.owner_pid && !sel.owner && !sel.all &&
	    !sel.job && !sel.n_owner_pids)
		return ctl_usage_error(ctl, "which pools? give POOL, --tag, "
					    "--owner, --job, --owners or --all");

	r = ctl_connect(ctl);
	if (r)
		return r;
	r = (args.gang ? tr->gang_call : tr->call)(ctl->client, &sel,
						   ctl->timeout_ms, &rep);
	if (r < 0)
		ctl_save_error(r, msg, sizeof(msg));
	/* Pools already in the asked state: the goal holds, so success. */
	code = r == -EALREADY ? CTL_EXIT_OK : ctl_exit_code(r);

	if (ctl->json) {
		int out = transition_print_json(tr, &sel, args.gang, r, msg,
						&rep, code);

		return out ? ctl_output_done(ctl, out) : code;
	}
	if (r == -ENOENT) {
		char what[CTL_FMT_MAX];

		fprintf(stderr, "vramctl: %s: no pool matched (%s)\n",
			ctl->command, selector_text(&sel, what, sizeof(what)));
		return code;
	}
	if (r == -EALREADY) {
		printf("nothing to do: already %s\n", tr->done);
		return code;
	}
	transition_print_text(tr, &rep, r);
	if (r < 0)
		transition_explain(ctl, tr, &sel, r, msg);
	return code;
}

int cmd_pause(struct ctl *ctl, int argc, char **argv)
{
	return transition_run(ctl, &pause_transition, argc, argv);
}

int cmd_resume(struct ctl *ctl, int argc, char **argv)
{
	return transition_run(ctl, &resume_transition, argc, argv);
}
