/* SPDX-License-Identifier: Apache-2.0 */
/* What every vramctl command shares: the common options, the connection to
 * vramd, and turning libvram errors into messages and exit codes. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "vramctl.h"

int ctl_parse_uint(const char *s, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	/* strtoull accepts "-1" as a huge number and leading blanks: we
	 * want plain decimal digits only. */
	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

/* The line that follows every usage error. */
static void ctl_usage_hint(const struct ctl *ctl)
{
	if (ctl->command)
		fprintf(stderr, "Try 'vramctl %s --help'.\n", ctl->command);
	else
		fputs("Try 'vramctl --help'.\n", stderr);
}

int ctl_usage_error(const struct ctl *ctl, const char *fmt, ...)
{
	va_list ap;

	fputs("vramctl: ", stderr);
	if (ctl->command)
		fprintf(stderr, "%s: ", ctl->command);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	ctl_usage_hint(ctl);
	return CTL_EXIT_USAGE;
}

int ctl_common_option(struct ctl *ctl, int opt, const char *arg)
{
	uint64_t v;

	switch (opt) {
	case 'h':
		return CTL_HELP;
	case 'j':
		ctl->json = true;
		return 0;
	case 's':
		if (!*arg)
			return ctl_usage_error(ctl, "--socket needs a path");
		ctl->socket = arg;
		return 0;
	case 't':
		if (ctl_parse_uint(arg, UINT32_MAX, &v) < 0)
			return ctl_usage_error(
				ctl, "--timeout wants milliseconds, not '%s'",
				arg);
		ctl->timeout_ms = (unsigned)v;
		return 0;
	default:
		/* getopt_long has printed what was wrong. */
		ctl_usage_hint(ctl);
		return CTL_EXIT_USAGE;
	}
}

int ctl_parse_args(struct ctl *ctl, int argc, char **argv,
		   const char *shortopts, const struct option *longopts,
		   const char *help, ctl_option_fn own, void *data,
		   enum ctl_operand want, const char **pool)
{
	int opt, r;

	if (pool)
		*pool = NULL;
	while ((opt = getopt_long(argc, argv, shortopts, longopts, NULL)) !=
	       -1) {
		/* '?': getopt_long has said what was wrong; the common
		 * handler adds the hint. */
		if (own && opt != '?' && !strchr(CTL_COMMON_SHORTOPTS, opt))
			r = own(ctl, opt, optarg, data);
		else
			r = ctl_common_option(ctl, opt, optarg);
		if (r == CTL_HELP) {
			fputs(help, stdout);
			return CTL_EXIT_OK;
		}
		if (r)
			return r;
	}
	if (want == CTL_OPERAND_POOL && optind >= argc)
		return ctl_usage_error(ctl, "which pool? (give its name)");
	if (want != CTL_OPERAND_NONE && optind < argc) {
		if (!argv[optind][0])
			return ctl_usage_error(ctl,
					       "a pool name cannot be empty");
		*pool = argv[optind++];
	}
	if (optind < argc)
		return ctl_usage_error(ctl, "unexpected argument '%s'",
				       argv[optind]);
	return CTL_GO_ON;
}

int ctl_selector_option(struct ctl *ctl, int opt, const char *arg,
			void *data)
{
	struct vram_selector *sel = data;
	uint64_t v;

	switch (opt) {
	case 'T':
		if (!*arg)
			return ctl_usage_error(ctl, "--tag needs a tag");
		sel->tag = arg;
		return 0;
	case 'o':
		/* A number is a pid; anything else the owner's instance name,
		 * or a cgroup path when it starts with '/'. */
		if (*arg >= '0' && *arg <= '9') {
			if (ctl_parse_uint(arg, UINT32_MAX, &v) < 0 || v == 0)
				return ctl_usage_error(
					ctl, "--owner wants a pid, not '%s'", arg);
			sel->owner_pid = (uint32_t)v;
			return 0;
		}
		if (!*arg)
			return ctl_usage_error(
				ctl, "--owner needs a pid, an instance or a cgroup");
		sel->owner = arg;
		return 0;
	case 'a':
		sel->all = 1;
		return 0;
	default:
		ctl_usage_hint(ctl);
		return CTL_EXIT_USAGE;
	}
}

void ctl_save_error(int err, char *buf, size_t size)
{
	const char *msg = vram_last_error();

	if (!msg || !*msg)
		msg = strerror(err < 0 ? -err : err);
	snprintf(buf, size, "%s", msg);
}

int ctl_exit_code(int err)
{
	switch (err < 0 ? -err : err) {
	case 0:
		return CTL_EXIT_OK;
	case ENOENT:
		return CTL_EXIT_NO_MATCH;
	case ETIMEDOUT:
		return CTL_EXIT_TIMEOUT;
	case EPIPE:
	case ECONNRESET:
	case ENOTCONN:
		return CTL_EXIT_CONNECT;
	default:
		return CTL_EXIT_FAILED;
	}
}

/* Prints an error as ctl_report_error() describes, with a given exit code
 * (shown in the JSON form) and returns that code. */
static int ctl_print_error(const struct ctl *ctl, const char *what, int err,
			   const char *message, int code)
{
	char safe[CTL_FMT_MAX];

	if (err < 0)
		err = -err;
	if (ctl->json) {
		struct json j;

		json_init(&j, stdout);
		json_object_begin(&j);
		json_kv_string(&j, "command", ctl->command);
		json_key(&j, "error");
		json_object_begin(&j);
		json_kv_string(&j, "what", what);
		json_kv_int(&j, "errno", err);
		json_kv_string(&j, "name", fmt_errno_name(err));
		json_kv_string(&j, "message", message);
		json_object_end(&j);
		json_kv_int(&j, "exit_code", code);
		json_object_end(&j);
		json_finish(&j);
	} else {
		fprintf(stderr, "vramctl: %s%s%s: %s\n",
			ctl->command ? ctl->command : "",
			ctl->command ? ": " : "", what,
			fmt_safe(message, safe, sizeof(safe)));
	}
	return code;
}

int ctl_report_error(const struct ctl *ctl, const char *what, int err,
		     const char *message)
{
	return ctl_print_error(ctl, what, err, message, ctl_exit_code(err));
}

int ctl_output_done(const struct ctl *ctl, int r)
{
	if (r == 0)
		return CTL_EXIT_OK;
	/* Said on stderr even with --json: stdout holds a partial result. */
	fprintf(stderr, "vramctl: %s: cannot print the result: %s\n",
		ctl->command ? ctl->command : "", strerror(-r));
	return CTL_EXIT_FAILED;
}

/* The socket libvram will use, for messages only. */
static const char *ctl_socket_path(const struct ctl *ctl)
{
	const char *env = getenv("VRAM_SOCKET");

	if (ctl->socket)
		return ctl->socket;
	return env && *env ? env : VRAM_DEFAULT_SOCKET;
}

int ctl_connect(struct ctl *ctl)
{
	char err[CTL_FMT_MAX], msg[CTL_FMT_MAX + 64], what[CTL_FMT_MAX];
	const char *hint = "";
	int r;

	if (ctl->client)
		return 0;
	/* The admin lane, so that a busy daemon still answers at once; the
	 * main socket where there is none or it is not ours (vram.h). */
	r = vram_connect(ctl->socket, "vramctl", VRAM_CONNECT_ADMIN,
			 &ctl->client);
	if (r == 0)
		return 0;
	ctl->client = NULL;
	/* For the usual failures the errno says it all (libvram's message
	 * would repeat the path we print); otherwise, such as a protocol
	 * mismatch, libvram's message is the useful part. */
	if (r == -ENOENT || r == -ECONNREFUSED) {
		snprintf(err, sizeof(err), "%s", strerror(-r));
		hint = " (is vramd running?)";
	} else if (r == -EACCES) {
		snprintf(err, sizeof(err), "%s", strerror(-r));
		hint = " (is this user in the socket's group?)";
	} else {
		ctl_save_error(r, err, sizeof(err));
	}
	snprintf(msg, sizeof(msg), "%s%s", err, hint);
	snprintf(what, sizeof(what), "cannot connect to vramd at %s",
		 ctl_socket_path(ctl));
	return ctl_print_error(ctl, what, r, msg, CTL_EXIT_CONNECT);
}

void ctl_disconnect(struct ctl *ctl)
{
	vram_client_close(ctl->client);
	ctl->client = NULL;
}
