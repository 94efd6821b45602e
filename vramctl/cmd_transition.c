/* vramctl pause and resume: move pools' physical memory off the device and
 * back, and say what that did to the device's free memory. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "vramctl.h"

static const char pause_help[] =
	"Usage: vramctl pause [POOL] [--tag TAG] [--owner PID|INSTANCE|/CGROUP] [--all]\n"
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
	"--all for every pool (narrowed by the others when given). A process\n"
	"that does not acknowledge within --timeout MS (default: the daemon's\n"
	"ack timeout) is named, its pools stay pausing, and the exit status is\n"
	"5; run the command again to wait more. Pools already paused are not\n"
	"an error. Exit status 4 if no pool matched.\n";

static const char resume_help[] =
	"Usage: vramctl resume [POOL] [--tag TAG] [--owner PID|INSTANCE|/CGROUP] [--all]\n"
	"                      [--timeout MS] [--json]\n"
	"\n"
	"Resumes the selected pools: the daemon makes the physical memory\n"
	"again, every process that maps them maps it at the same addresses,\n"
	"and host-policy pools get their content back. Prints the pools\n"
	"changed, the bytes restored and the device's free memory before and\n"
	"after. When the device lacks the memory the pools stay paused with\n"
	"their backups, and the command can be retried (exit status 1).\n"
	"\n"
	"Selection, --timeout and exit statuses are those of pause.\n";

struct transition {
	const char *verb;  /* "pause", "resume" */
	const char *done;  /* "paused", "resumed" */
	const char *moved; /* "released", "restored" */
	const char *help;
	bool resume;
	int (*call)(vram_client *c, const struct vram_selector *sel,
		    unsigned timeout_ms, struct vram_report *report);
};

static const struct transition pause_transition = {
	"pause", "paused", "released", pause_help, false, vram_pause,
};

static const struct transition resume_transition = {
	"resume", "resumed", "restored", resume_help, true, vram_resume,
};

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
		snprintf(buf + o, size - o, " owned by %s",
			 fmt_safe(sel->owner, safe, sizeof(safe)));
	return buf;
}

/* One object: the selector, the report, the error (or null) and the exit
 * code. Returns json_finish()'s result. */
static int transition_print_json(const struct transition *tr,
				 const struct vram_selector *sel, int err,
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
	json_object_end(&j);
	json_kv_bool(&j, "ok", code == CTL_EXIT_OK);
	json_kv_bool(&j, "already", err == -EALREADY);
	json_kv_uint(&j, "pools", rep->pools);
	json_kv_uint(&j, "bytes", rep->bytes);
	json_kv_uint(&j, "free_before", rep->free_before);
	json_kv_uint(&j, "free_after", rep->free_after);
	json_kv_uint(&j, "failed", rep->failed);
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
	if (err < 0 && rep->failed)
		printf("%" PRIu32 " pool%s did not %s\n", rep->failed,
		       rep->failed == 1 ? "" : "s", tr->verb);
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
		{ NULL, 0, NULL, 0 },
	};
	struct vram_selector sel = VRAM_SELECTOR_INIT;
	struct vram_report rep = VRAM_REPORT_INIT;
	char msg[CTL_FMT_MAX] = "";
	int r, code;

	r = ctl_parse_args(ctl, argc, argv, CTL_COMMON_SHORTOPTS "T:o:a",
			   longopts, tr->help, ctl_selector_option, &sel,
			   CTL_OPERAND_POOL_OPT, &sel.name);
	if (r != CTL_GO_ON)
		return r;
	if (!sel.name && !sel.tag && !sel.owner_pid && !sel.owner && !sel.all)
		return ctl_usage_error(ctl, "which pools? give POOL, --tag, "
					    "--owner or --all");

	r = ctl_connect(ctl);
	if (r)
		return r;
	r = tr->call(ctl->client, &sel, ctl->timeout_ms, &rep);
	if (r < 0)
		ctl_save_error(r, msg, sizeof(msg));
	/* Pools already in the asked state: the goal holds, so success. */
	code = r == -EALREADY ? CTL_EXIT_OK : ctl_exit_code(r);

	if (ctl->json) {
		int out = transition_print_json(tr, &sel, r, msg, &rep, code);

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
