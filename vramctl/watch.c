/* SPDX-License-Identifier: Apache-2.0 */
/* Frames refreshed in place, for top and the --watch of ls and status.
 * Each frame is rendered into memory first and written in one go, cut to
 * the terminal's size, so the screen never shows half a frame; when
 * stdout is not a terminal the frames are plain lines, one after the
 * other, with no escape sequence. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "vramctl.h"

static volatile sig_atomic_t watch_stop;

static void watch_on_signal(int sig CTL_UNUSED)
{
	watch_stop = 1;
}

int watch_option(struct watch *w, int opt, const char *arg)
{
	uint64_t v;

	switch (opt) {
	case 'W':
		w->on = true;
		return 0;
	case 'I':
		if (ctl_parse_uint(arg, 3600 * 1000, &v) < 0 || v < 50)
			return -EINVAL;
		w->interval_ms = (unsigned)v;
		return 0;
	case 'C':
		if (ctl_parse_uint(arg, UINT32_MAX, &v) < 0 || v == 0)
			return -EINVAL;
		w->count = (unsigned)v;
		return 0;
	default:
		return -ENOENT;
	}
}

/* Writes buf (a frame) to the terminal: from the top left, each line cut
 * to cols columns and cleared to its end, at most rows lines, and the
 * rest of the screen cleared. */
static void frame_to_terminal(const char *buf, unsigned rows, unsigned cols)
{
	const char *p = buf;
	unsigned row = 0;

	fputs("\033[H", stdout);
	while (*p && row < rows) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		size_t off = 0, width = 0;
		/* Cut by columns, never inside a UTF-8 sequence. */
		while (off < len && width < cols) {
			size_t k = fmt_utf8_len((const unsigned char *)p + off);
			if (k == 0)
				k = 1;
			off += k;
			width++;
		}
		fwrite(p, 1, off, stdout);
		fputs("\033[K", stdout);
		if (++row < rows)
			fputc('\n', stdout); /* the tty's onlcr adds the \r */
		p = nl ? nl + 1 : p + len;
	}
	fputs("\033[J", stdout);
	fflush(stdout);
}

static void terminal_size(unsigned *rows, unsigned *cols)
{
	struct winsize ws;

	*rows = 24;
	*cols = 80;
	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row &&
	    ws.ws_col) {
		*rows = ws.ws_row;
		*cols = ws.ws_col;
	}
}

/* Waits ms, or less when a key came: returns true when it was q. */
static bool wait_for_key(bool keys, unsigned ms)
{
	struct pollfd pfd = { .fd = STDIN_FILENO, .events = POLLIN };
	int64_t left = ms;
	struct timespec t0, t1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (left > 0 && !watch_stop) {
		int r = poll(&pfd, keys ? 1 : 0, (int)left);
		if (r > 0) {
			char c;
			if (read(STDIN_FILENO, &c, 1) == 1 &&
			    (c == 'q' || c == 'Q'))
				return true;
			if (r > 0 && (pfd.revents & (POLLHUP | POLLERR)))
				keys = false;
		}
		clock_gettime(CLOCK_MONOTONIC, &t1);
		left = ms - ((t1.tv_sec - t0.tv_sec) * 1000 +
			     (t1.tv_nsec - t0.tv_nsec) / 1000000);
	}
	return false;
}

int watch_run(struct ctl *ctl, const struct watch *w, watch_frame_fn frame,
	      void *arg)
{
	bool tty = isatty(STDOUT_FILENO);
	bool keys = tty && isatty(STDIN_FILENO);
	unsigned interval = w->interval_ms ? w->interval_ms : 1000;
	struct termios saved, raw;
	struct sigaction sa = { .sa_handler = watch_on_signal };
	int r = CTL_EXIT_OK;

	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (keys && tcgetattr(STDIN_FILENO, &saved) == 0) {
		raw = saved;
		raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
		tcsetattr(STDIN_FILENO, TCSANOW, &raw);
	} else {
		keys = false;
	}
	if (tty)
		fputs("\033[?25l\033[2J",
		      stdout); /* no cursor; a clean screen */
	for (unsigned n = 0; !watch_stop && (!w->count || n < w->count); n++) {
		char *buf = NULL;
		size_t len = 0;
		unsigned rows, cols;
		FILE *f = open_memstream(&buf, &len);

		if (!f) {
			r = CTL_EXIT_FAILED;
			break;
		}
		terminal_size(&rows, &cols);
		r = frame(ctl, arg, f, tty ? cols : 0);
		fclose(f);
		if (tty) {
			frame_to_terminal(buf ? buf : "", rows, cols);
		} else {
			if (n)
				putchar('\n');
			fwrite(buf, 1, len, stdout);
			fflush(stdout);
		}
		free(buf);
		if (r != CTL_EXIT_OK)
			break;
		if (w->count && n + 1 == w->count)
			break;
		if (wait_for_key(keys, interval))
			break;
	}
	if (tty) {
		fputs("\033[?25h\n", stdout);
		fflush(stdout);
	}
	if (keys)
		tcsetattr(STDIN_FILENO, TCSANOW, &saved);
	return r;
}
