/* SPDX-License-Identifier: Apache-2.0 */
/* vramctl top: the node at a glance, refreshed (watch.c draws it). The
 * recent transitions are what this vramctl saw change between two
 * frames. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vramctl.h"

#define TOP_RECENT 8

static const char top_help[] =
	"Usage: vramctl top [--interval MS] [--count N]\n"
	"\n"
	"A live view of the node, refreshed every --interval MS (default\n"
	"1000): the daemon (sessions, pools, bytes held and in backups), each\n"
	"device's total, free and used memory with a bar, the pools (as ls),\n"
	"and the recent transitions this view saw (a pool created, dropped, or\n"
	"changing state). On a terminal it redraws in place, cut to the\n"
	"window's size; q or Ctrl-C ends it. When stdout is not a terminal it\n"
	"prints each frame as plain lines. --count N stops after N frames.\n";

/* ---- top ------------------------------------------------------------------- */

struct top_seen {
	uint64_t id;
	char name[128];
	enum vram_state state;
	bool alive;
};

struct top {
	struct top_seen *seen;
	size_t n_seen;
	bool first;
	char recent[TOP_RECENT][256];
	unsigned n_recent, next_recent;
};

static void top_note(struct top *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void top_note(struct top *t, const char *fmt, ...)
{
	char *line = t->recent[t->next_recent];
	time_t now = time(NULL);
	struct tm tm;
	va_list ap;

	localtime_r(&now, &tm);
	size_t o = strftime(line, sizeof(t->recent[0]), "%H:%M:%S  ", &tm);
	va_start(ap, fmt);
	vsnprintf(line + o, sizeof(t->recent[0]) - o, fmt, ap);
	va_end(ap);
	t->next_recent = (t->next_recent + 1) % TOP_RECENT;
	if (t->n_recent < TOP_RECENT)
		t->n_recent++;
}

/* What changed since the last frame, into the recent list. */
static int top_diff(struct top *t, const struct vram_pool_info *pools, size_t n)
{
	char a[CTL_FMT_MAX];
	struct top_seen *next = calloc(n + 1, sizeof(*next));

	if (!next)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const struct vram_pool_info *p = &pools[i];
		struct top_seen *old = NULL;
		for (size_t k = 0; k < t->n_seen; k++)
			if (t->seen[k].id == p->id)
				old = &t->seen[k];
		next[i].id = p->id;
		snprintf(next[i].name, sizeof(next[i].name), "%s", p->name);
		next[i].state = p->state;
		if (old) {
			old->alive = true;
			if (old->state != p->state)
				top_note(t, "%s -> %s  %s",
					 fmt_state(old->state),
					 fmt_state(p->state),
					 fmt_safe(p->name, a, sizeof(a)));
		} else if (!t->first) {
			top_note(t, "created %s  %s", fmt_state(p->state),
				 fmt_safe(p->name, a, sizeof(a)));
		}
	}
	for (size_t k = 0; k < t->n_seen; k++)
		if (!t->seen[k].alive)
			top_note(t, "dropped  %s",
				 fmt_safe(t->seen[k].name, a, sizeof(a)));
	free(t->seen);
	t->seen = next;
	t->n_seen = n;
	t->first = false;
	return 0;
}

static void top_bar(FILE *f, uint64_t part, uint64_t whole, unsigned width)
{
	unsigned fill =
		whole ? (unsigned)((part * width + whole / 2) / whole) : 0;
	if (fill > width)
		fill = width;
	fputc('[', f);
	for (unsigned i = 0; i < width; i++)
		fputc(i < fill ? '#' : '.', f);
	fputc(']', f);
}

static int top_frame(struct ctl *ctl, void *arg, FILE *f, unsigned cols)
{
	struct top *t = arg;
	struct vram_stats st = VRAM_STATS_INIT;
	struct vram_pool_info *pools = NULL;
	char a[CTL_FMT_MAX], b[CTL_FMT_MAX], c[CTL_FMT_MAX], msg[CTL_FMT_MAX];
	size_t n = 0;
	int r;

	r = vram_stats(ctl->client, &st);
	if (r < 0) {
		ctl_save_error(r, msg, sizeof(msg));
		return ctl_report_error(ctl, "cannot read the daemon's stats",
					r, msg);
	}
	r = vram_list(ctl->client, NULL, sizeof(struct vram_pool_info), &pools,
		      &n);
	if (r < 0 && r != -ENOENT) {
		ctl_save_error(r, msg, sizeof(msg));
		return ctl_report_error(ctl, "cannot list pools", r, msg);
	}
	if (r == -ENOENT)
		n = 0;
	if (top_diff(t, pools, n) < 0) {
		vram_pool_info_free(pools, n);
		return CTL_EXIT_FAILED;
	}

	time_t now = time(NULL);
	struct tm tm;
	char clock[16];
	localtime_r(&now, &tm);
	strftime(clock, sizeof(clock), "%H:%M:%S", &tm);
	fprintf(f, "vramd %s (%s)  up %s  %s\n",
		fmt_safe(st.daemon_version, a, sizeof(a)),
		fmt_safe(st.backend, b, sizeof(b)),
		fmt_duration_ms(st.uptime_ms, c, sizeof(c)), clock);
	fprintf(f,
		"sessions %" PRIu32 "  pools %" PRIu32 "  held %s  backups %s"
		"  fds %" PRIu32 "\n\n",
		st.sessions, st.pools, fmt_bytes(st.used_bytes, a, sizeof(a)),
		fmt_bytes(st.backup_bytes, b, sizeof(b)), st.open_fds);
	/* The bar takes what the line leaves, between 10 and 40 columns. */
	unsigned barw = cols > 50 ? cols - 50 : 10;
	if (barw > 40)
		barw = 40;
	fprintf(f, "DEV  %8s  %8s  %8s\n", "TOTAL", "FREE", "USED");
	for (unsigned i = 0; i < st.n_devices && i < VRAM_MAX_DEVICES; i++) {
		const struct vram_device_info *d = &st.devices[i];
		uint64_t used = d->total_bytes > d->free_bytes ?
					d->total_bytes - d->free_bytes :
					0;
		fprintf(f, "%3u  %8s  %8s  %8s  ", d->index,
			fmt_bytes(d->total_bytes, a, sizeof(a)),
			fmt_bytes(d->free_bytes, b, sizeof(b)),
			fmt_bytes(used, c, sizeof(c)));
		top_bar(f, used, d->total_bytes, barw);
		fputc('\n', f);
	}
	fputc('\n', f);
	if (n > 1)
		qsort(pools, n, sizeof(*pools), pools_compare_name);
	r = pools_print_text(f, pools, n, false);
	vram_pool_info_free(pools, n);
	if (r < 0)
		return ctl_output_done(ctl, r);
	fprintf(f, "\nRECENT\n");
	if (t->n_recent == 0)
		fprintf(f, "  (no change seen yet)\n");
	for (unsigned i = 0; i < t->n_recent; i++) {
		unsigned k = (t->next_recent + TOP_RECENT - 1 - i) % TOP_RECENT;
		fprintf(f, "  %s\n", t->recent[k]);
	}
	return CTL_EXIT_OK;
}

static int top_own_option(struct ctl *ctl, int opt, const char *arg, void *data)
{
	int r = watch_option(data, opt, arg);
	if (r == -EINVAL)
		return ctl_usage_error(ctl, "bad value '%s'", arg);
	if (r < 0)
		return ctl_usage_error(ctl, "unexpected option");
	return 0;
}

int cmd_top(struct ctl *ctl, int argc, char **argv)
{
	static const struct option longopts[] = {
		CTL_COMMON_LONGOPTS,
		CTL_WATCH_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	struct watch w = { .on = true };
	struct top t = { .first = true };
	int r;

	r = ctl_parse_args(ctl, argc, argv, CTL_COMMON_SHORTOPTS, longopts,
			   top_help, top_own_option, &w, CTL_OPERAND_NONE,
			   NULL);
	if (r != CTL_GO_ON)
		return r;
	if (ctl->json)
		return ctl_usage_error(ctl, "top shows text, not --json");
	r = ctl_connect(ctl);
	if (r)
		return r;
	r = watch_run(ctl, &w, top_frame, &t);
	free(t.seen);
	return r;
}
