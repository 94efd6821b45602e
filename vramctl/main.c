/* SPDX-License-Identifier: Apache-2.0 */
/* vramctl: the admin CLI of vramd. Parses the global options, finds the
 * command and runs it; the exit code says what happened (see usage()). */
#include <stdlib.h>
#include <string.h>

#include "vramctl.h"

struct command {
	const char *name;
	int (*run)(struct ctl *ctl, int argc, char **argv);
	const char *summary;
};

static const struct command commands[] = {
	{ "status", cmd_status, "daemon version, backend, uptime, devices" },
	{ "ls", cmd_ls, "list pools [--tag TAG] [--owner PID|INSTANCE|/CGROUP]" },
	{ "top", cmd_top, "a live view: devices, pools, recent transitions" },
	{ "show", cmd_show, "every field of one pool, its mappers too" },
	{ "pause", cmd_pause, "pause POOL | --tag TAG | --owner PID | --all" },
	{ "resume", cmd_resume,
	  "resume POOL | --tag TAG | --owner PID | --all" },
	{ "drop", cmd_drop, "drop a pool: free its memory and backup" },
	{ "audit", cmd_audit,
	  "per process: device memory used vs held through vramd" },
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
	fputs("Usage: vramctl [--socket PATH] [--json] [--timeout MS] COMMAND [ARGS]\n"
	      "\n"
	      "Inspects and controls vramd, the node's GPU memory broker.\n"
	      "\n"
	      "Commands:\n",
	      f);
	for (size_t i = 0; i < N_COMMANDS; i++)
		fprintf(f, "  %-8s %s\n", commands[i].name,
			commands[i].summary);
	fputs("  help     help [COMMAND]: this text, or a command's\n"
	      "\n"
	      "Options (also accepted after the command):\n"
	      "  -s, --socket PATH  vramd's socket (default $VRAM_SOCKET, else\n"
	      "                     " VRAM_DEFAULT_SOCKET ")\n"
	      "  -j, --json         machine-readable output (ls: an array of pools)\n"
	      "  -t, --timeout MS   how long pause/resume wait for each process's\n"
	      "                     acknowledgement (default: the daemon's)\n"
	      "  -h, --help         this text; after a command, that command's\n"
	      "  -V, --version      vramctl's and libvram's versions\n"
	      "\n"
	      "Exit status:\n"
	      "  0  success (also: pools were already in the asked state)\n"
	      "  1  the operation failed (the daemon's error is printed)\n"
	      "  2  usage error\n"
	      "  3  cannot connect to vramd, or the connection was lost\n"
	      "  4  no pool matched\n"
	      "  5  timed out: a process did not acknowledge a pause or resume\n"
	      "\n"
	      "See vramctl(1) and docs/operations.md.\n",
	      f);
}

static const struct command *command_find(const char *name)
{
	for (size_t i = 0; i < N_COMMANDS; i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

/* `vramctl help [COMMAND]`: runs COMMAND --help. */
static int help_run(struct ctl *ctl, int argc, char **argv)
{
	static char help_opt[] = "--help";
	const struct command *cmd;
	char name[64];
	char *args[3];

	if (argc < 2) {
		usage(stdout);
		return CTL_EXIT_OK;
	}
	if (argc > 2)
		return ctl_usage_error(ctl, "unexpected argument '%s'",
				       argv[2]);
	cmd = command_find(argv[1]);
	if (!cmd)
		return ctl_usage_error(ctl, "no command '%s'", argv[1]);
	snprintf(name, sizeof(name), "vramctl %s", cmd->name);
	args[0] = name;
	args[1] = help_opt;
	args[2] = NULL;
	ctl->command = cmd->name;
	optind = 0;
	return cmd->run(ctl, 2, args);
}

/* Runs a command with argv[0] = "vramctl NAME", so that getopt's messages
 * name it, and a fresh getopt state. */
static int command_run(struct ctl *ctl, const struct command *cmd, int argc,
		       char **argv)
{
	char name[64];
	char **args;
	int r;

	args = calloc((size_t)argc + 1, sizeof(*args));
	if (!args) {
		fputs("vramctl: out of memory\n", stderr);
		return CTL_EXIT_FAILED;
	}
	snprintf(name, sizeof(name), "vramctl %s", cmd->name);
	args[0] = name;
	for (int i = 1; i < argc; i++)
		args[i] = argv[i];
	ctl->command = cmd->name;
	optind = 0; /* glibc: start over, resetting its internal state */
	r = cmd->run(ctl, argc, args);
	free(args);
	return r;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		CTL_COMMON_LONGOPTS,
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct ctl ctl = { 0 };
	const struct command *cmd;
	int opt, r;

	/* "+": stop at the command name; the command parses the rest. */
	while ((opt = getopt_long(argc, argv, "+" CTL_COMMON_SHORTOPTS "V",
				  longopts, NULL)) != -1) {
		if (opt == 'V') {
			printf("vramctl %s (libvram %s)\n", VRAM_VERSION_STRING,
			       vram_version());
			return CTL_EXIT_OK;
		}
		r = ctl_common_option(&ctl, opt, optarg);
		if (r == CTL_HELP) {
			usage(stdout);
			return CTL_EXIT_OK;
		}
		if (r)
			return r;
	}
	if (optind >= argc) {
		usage(stderr);
		return CTL_EXIT_USAGE;
	}

	if (strcmp(argv[optind], "help") == 0) {
		ctl.command = "help";
		r = help_run(&ctl, argc - optind, argv + optind);
	} else {
		cmd = command_find(argv[optind]);
		if (!cmd)
			return ctl_usage_error(&ctl, "no command '%s'",
					       argv[optind]);
		r = command_run(&ctl, cmd, argc - optind, argv + optind);
	}
	ctl_disconnect(&ctl);

	/* A full disk or a closed pipe must not pass for success. */
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "vramctl: cannot write the output\n");
		if (r == CTL_EXIT_OK)
			r = CTL_EXIT_FAILED;
	}
	return r;
}
