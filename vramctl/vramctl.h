/* SPDX-License-Identifier: Apache-2.0 */
/* vramctl: the admin CLI of vramd. Internal declarations shared by its
 * files. vramctl talks to the daemon only through the public API in vram.h,
 * which keeps that API honest: whatever an operator can see or do here, any
 * program linked with libvram can too.
 *
 * Files: main.c (global options, dispatch, exit codes), ctl.c (connection,
 * option helpers, error reporting), format.c (sizes, durations, safe text),
 * table.c (column-aligned tables), json.c (a small JSON writer),
 * cmd_status.c, cmd_pools.c (ls, show, drop), cmd_transition.c (pause,
 * resume), cmd_top.c (top), watch.c (frames redrawn in place: top's and
 * the --watch of ls and status).
 */
#ifndef VRAMCTL_H
#define VRAMCTL_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "vram.h"

/* Exit codes. Documented in vramctl(1), `vramctl --help` and
 * docs/operations.md; scripts depend on them, so never renumber. */
enum ctl_exit {
	CTL_EXIT_OK = 0,       /* success */
	CTL_EXIT_FAILED = 1,   /* the daemon refused or the operation failed */
	CTL_EXIT_USAGE = 2,    /* bad command line */
	CTL_EXIT_CONNECT = 3,  /* cannot connect to vramd (or lost it) */
	CTL_EXIT_NO_MATCH = 4, /* no pool matched */
	CTL_EXIT_TIMEOUT = 5,  /* a mapper did not acknowledge in time */
};

/* State of one vramctl run: the global options and the connection. */
struct ctl {
	const char *socket;  /* --socket, or NULL for libvram's default */
	bool json;	     /* --json */
	unsigned timeout_ms; /* --timeout: ack deadline, 0 = daemon default */
	const char *command; /* the command's name, for messages */
	vram_client *client; /* NULL until ctl_connect() */
};

/* After a parameter a callback's type passes and this one does not use
 * (vramctl sees only vram.h, not common/attr.h). */
#define CTL_UNUSED __attribute__((unused))

/* ---- ctl.c -------------------------------------------------------------- */

/* Options every command accepts, before or after the command name. A
 * command's getopt_long() tables start with these; unknown results go to
 * ctl_common_option(). */
#define CTL_COMMON_SHORTOPTS "hjs:t:"
/* clang-format off */
#define CTL_COMMON_LONGOPTS                                       \
	{ "help", no_argument, NULL, 'h' },                       \
	{ "json", no_argument, NULL, 'j' },                       \
	{ "socket", required_argument, NULL, 's' },               \
	{ "timeout", required_argument, NULL, 't' }
/* clang-format on */

/* Returned by ctl_common_option() for -h/--help. */
#define CTL_HELP (-1)

/* Handles one result of getopt_long() that is a common option. Returns 0
 * when handled, CTL_HELP when the caller should print its help and exit 0,
 * or CTL_EXIT_USAGE after printing why. */
int ctl_common_option(struct ctl *ctl, int opt, const char *arg);

/* Returned by ctl_parse_args() when the command should go on and run. */
#define CTL_GO_ON (-2)

/* A command's own options: called by ctl_parse_args() for each option that
 * is not a common one. Returns 0, or an exit code (CTL_EXIT_USAGE after
 * ctl_usage_error()). */
typedef int (*ctl_option_fn)(struct ctl *ctl, int opt, const char *arg,
			     void *data);

/* The operand a command takes after its options. */
enum ctl_operand {
	CTL_OPERAND_NONE,     /* none */
	CTL_OPERAND_POOL_OPT, /* at most one POOL, not empty */
	CTL_OPERAND_POOL,     /* exactly one POOL, not empty */
};

/* The one option loop of every command: shortopts and longopts are the
 * command's whole getopt_long() tables (CTL_COMMON_* first); own (may be
 * NULL) gets the options that are not common ones, with data. *pool gets
 * the operand, or NULL. Returns CTL_GO_ON when the command should run, or
 * the code to exit with: CTL_EXIT_OK after printing help, CTL_EXIT_USAGE
 * after saying what was wrong. */
int ctl_parse_args(struct ctl *ctl, int argc, char **argv,
		   const char *shortopts, const struct option *longopts,
		   const char *help, ctl_option_fn own, void *data,
		   enum ctl_operand want, const char **pool);

/* An ctl_option_fn for the selector options --tag, --owner and --all;
 * data is a struct vram_selector. */
int ctl_selector_option(struct ctl *ctl, int opt, const char *arg,
			void *data);

/* Parses a decimal unsigned number that must fit in max. 0 or -EINVAL. */
int ctl_parse_uint(const char *s, uint64_t max, uint64_t *out);

/* Prints "vramctl CMD: message" and "Try ..." on stderr; returns
 * CTL_EXIT_USAGE so that callers can `return ctl_usage_error(...)`. */
int ctl_usage_error(const struct ctl *ctl, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Connects to the daemon as "vramctl" if not yet connected. On failure
 * reports the error (text or JSON) and returns CTL_EXIT_CONNECT. */
int ctl_connect(struct ctl *ctl);

/* Closes the connection; safe to call twice. */
void ctl_disconnect(struct ctl *ctl);

/* Maps a libvram error to an exit code: ENOENT no match, ETIMEDOUT
 * timeout, a lost connection 3, anything else 1. */
int ctl_exit_code(int err);

/* Reports a failed libvram call: on stderr as "vramctl CMD: what: message"
 * in text mode, as a JSON object {"error": ...} on stdout with --json.
 * message is the saved vram_last_error() (may be empty). Returns the exit
 * code for err. */
int ctl_report_error(const struct ctl *ctl, const char *what, int err,
		     const char *message);

/* Ends a command's output: r is what printing returned (0, -ENOMEM from a
 * table, -EINVAL from misused JSON). Returns the exit code: 0, or 1 after
 * saying what went wrong. */
int ctl_output_done(const struct ctl *ctl, int r);

/* Copies vram_last_error() into buf (it is only valid until the next
 * libvram call), falling back to strerror(-err) when it is empty. */
void ctl_save_error(int err, char *buf, size_t size);

/* ---- format.c ----------------------------------------------------------- */

/* Enough for any formatted size, duration or sanitised 127-byte name. */
#define CTL_FMT_MAX 512

/* "512B", "64M", "1.5G": binary units (K = 1024), one decimal unless the
 * value is a whole number of its unit. Returns buf. */
const char *fmt_bytes(uint64_t bytes, char *buf, size_t size);

/* "850ms", "42s", "3m 5s", "1h 2m", "3d 4h". Returns buf. */
const char *fmt_duration_ms(uint64_t ms, char *buf, size_t size);

/* Copies s into buf, replacing control characters (including ESC) with '?'
 * so that a hostile pool or client name cannot drive the terminal. NULL
 * becomes "". Returns buf. */
const char *fmt_safe(const char *s, char *buf, size_t size);

/* Length of the valid UTF-8 sequence at s (1 to 4 bytes), or 0 if it is
 * not one: overlong forms, surrogates and code points past U+10FFFF are
 * invalid. Never reads past a NUL. */
size_t fmt_utf8_len(const unsigned char *s);

/* Display width of UTF-8 text: one column per code point. */
size_t fmt_width(const char *s);

/* "ENOENT" for 2 and so on; "E?" for unknown values. Static. */
const char *fmt_errno_name(int err);

/* Names that never return NULL, even for values this vramctl predates. */
const char *fmt_state(enum vram_state s);
const char *fmt_policy(enum vram_policy p);

/* ---- table.c ------------------------------------------------------------ */

enum table_align { TABLE_LEFT, TABLE_RIGHT };

struct table_column {
	const char *header;
	enum table_align align;
};

struct table;

/* Makes a table with n (1 to 32) columns; cols must outlive it. NULL on
 * ENOMEM or a bad n. */
struct table *table_new(const struct table_column *cols, size_t n);

/* Appends the next cell, filling rows left to right; a row is complete
 * after n cells. The text is sanitised with fmt_safe(). 0 or -ENOMEM; a
 * failure sticks, so callers may ignore it here and check table_print(). */
int table_cell(struct table *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Prints the header and rows, each column padded to its widest cell, two
 * spaces apart, no trailing blanks; indent spaces before each line. Returns
 * 0, the first table_cell() failure (nothing printed), or -EINVAL if the
 * last row is incomplete. */
int table_print(const struct table *t, FILE *f, unsigned indent);

/* NULL is a no-op. */
void table_free(struct table *t);

/* ---- json.c ------------------------------------------------------------- */

#define JSON_MAX_DEPTH 16

/* Writes one JSON value, pretty-printed, to a FILE. Calls nest; a key must
 * precede every value inside an object. Misuse (a value without a key,
 * nesting past JSON_MAX_DEPTH) sets err and stops output, so a bug shows
 * as a failed run rather than as invalid JSON. */
struct json {
	FILE *f;
	int depth;
	bool first[JSON_MAX_DEPTH]; /* nothing written yet at this level */
	bool in_object[JSON_MAX_DEPTH];
	bool have_key;
	int err;
};

void json_init(struct json *j, FILE *f);
void json_object_begin(struct json *j);
void json_object_end(struct json *j);
void json_array_begin(struct json *j);
void json_array_end(struct json *j);
void json_key(struct json *j, const char *key);
/* NULL writes null. Invalid UTF-8 becomes U+FFFD so the output stays
 * valid JSON whatever bytes a name holds. */
void json_string(struct json *j, const char *s);
void json_uint(struct json *j, uint64_t v);
void json_int(struct json *j, int64_t v);
void json_bool(struct json *j, bool v);
void json_null(struct json *j);
/* Ends the document with a newline. 0, or -EINVAL after misuse. */
int json_finish(struct json *j);

/* Shorthands for a key and its value. */
void json_kv_string(struct json *j, const char *key, const char *s);
void json_kv_uint(struct json *j, const char *key, uint64_t v);
void json_kv_int(struct json *j, const char *key, int64_t v);
void json_kv_bool(struct json *j, const char *key, bool v);

/* ---- commands ----------------------------------------------------------- */

/* Each command gets argv with argv[0] = "vramctl NAME", parses its own
 * options and operands, connects, and returns an exit code. */
int cmd_status(struct ctl *ctl, int argc, char **argv);
int cmd_audit(struct ctl *ctl, int argc, char **argv);
int cmd_ls(struct ctl *ctl, int argc, char **argv);
int cmd_show(struct ctl *ctl, int argc, char **argv);
int cmd_drop(struct ctl *ctl, int argc, char **argv);
int cmd_pause(struct ctl *ctl, int argc, char **argv);
int cmd_resume(struct ctl *ctl, int argc, char **argv);
int cmd_top(struct ctl *ctl, int argc, char **argv);

/* ---- watch.c: frames refreshed in place --------------------------------- */

/* --watch, --interval MS and --count N, of top and of ls and status. */
/* clang-format off */
#define CTL_WATCH_LONGOPTS                                        \
	{ "watch", no_argument, NULL, 'W' },                      \
	{ "interval", required_argument, NULL, 'I' },             \
	{ "count", required_argument, NULL, 'C' }
/* clang-format on */

struct watch {
	bool on;	      /* --watch (top: always) */
	unsigned interval_ms; /* 0: 1000 */
	unsigned count;	      /* frames, 0: until q, Ctrl-C or SIGTERM */
};

/* Takes one of the options above: 0, -EINVAL for a bad value, -ENOENT
 * when opt is none of them. */
int watch_option(struct watch *w, int opt, const char *arg);

/* Renders one frame into f; cols is the terminal's width (0: not a
 * terminal). Returns an exit code: anything but CTL_EXIT_OK stops. */
typedef int (*watch_frame_fn)(struct ctl *ctl, void *arg, FILE *f,
			      unsigned cols);

/* Shows frame after frame every w->interval_ms: redrawn in place on a
 * terminal, plain lines otherwise. Returns the last frame's exit code. */
int watch_run(struct ctl *ctl, const struct watch *w, watch_frame_fn frame,
	      void *arg);

/* ls's table of pools, into f (cmd_pools.c; also top's), and its order. */
int pools_print_text(FILE *f, const struct vram_pool_info *pools, size_t n,
		     bool filtered);
int pools_compare_name(const void *a, const void *b);

/* Writes one pool as a JSON object (cmd_pools.c; also used by show). */
void pool_json(struct json *j, const struct vram_pool_info *p);
/* A pool's name as commands take it from this uid: NAME for a pool of
 * ours, UID:NAME for another uid's (the daemon scopes names per uid). */
const char *pool_address(const struct vram_pool_info *p, char *buf,
			 size_t size);

#endif
