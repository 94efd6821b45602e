/* SPDX-License-Identifier: Apache-2.0 */
/* vramd: the per-node GPU memory broker. Settings come from defaults, then
 * the config file, then flags. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "config.h"
#include "log.h"
#include "server.h"

#define DEFAULT_CONFIG "/etc/vramd/vramd.conf"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: vramd [options]\n"
		"  -c, --config FILE        settings file (default " DEFAULT_CONFIG ")\n"
		"  -s, --socket PATH        listening socket (default /run/vramd/vramd.sock)\n"
		"  -b, --backend NAME       auto, cuda, hip or host\n"
		"      --host-capacity SIZE memory of each emulated device (host backend)\n"
		"      --host-devices N     emulated devices (host backend)\n"
		"      --chunk-max SIZE     largest chunk a pool grows by\n"
		"      --ack-timeout-ms MS  how long pause/resume wait for mappers\n"
		"      --metrics-listen ADDR   serve metrics on http://ADDR/metrics\n"
		"      --metrics-textfile PATH write them there for node_exporter\n"
		"      --reattach-grace-ms MS  after a restart, how long owners\n"
		"                           have to come back (docs/operations.md)\n"
		"  -l, --log-level LEVEL    error, warn, info or debug\n"
		"      --set KEY=VALUE      any setting of vramd.conf\n"
		"  -V, --version            print the version\n"
		"  -h, --help               this text\n");
}

/* The daemon holds an fd per chunk and per backup, and dups them while
 * they travel: lift the soft fd limit (1024 by default outside systemd) to
 * the hard one. libuv uses epoll, so fds past 1024 are fine. */
static void raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
		return;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		log_warn("cannot raise the fd limit: %s", strerror(errno));
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "socket", required_argument, NULL, 's' },
		{ "backend", required_argument, NULL, 'b' },
		{ "host-capacity", required_argument, NULL, 1 },
		{ "host-devices", required_argument, NULL, 2 },
		{ "chunk-max", required_argument, NULL, 3 },
		{ "ack-timeout-ms", required_argument, NULL, 4 },
		{ "metrics-listen", required_argument, NULL, 5 },
		{ "metrics-textfile", required_argument, NULL, 6 },
		{ "reattach-grace-ms", required_argument, NULL, 7 },
		{ "log-level", required_argument, NULL, 'l' },
		{ "set", required_argument, NULL, 8 },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	static const char *const keys[] = { NULL, "host_capacity", "host_devices",
					    "chunk_max", "ack_timeout_ms",
					    "metrics_listen", "metrics_textfile",
					    "reattach_grace_ms" };
	struct config cfg;
	const char *config_path = NULL;
	struct server srv;
	int c, r;

	config_defaults(&cfg);
	/* First pass: only --config, so flags override the file. */
	while ((c = getopt_long(argc, argv, "c:s:b:l:Vh", opts, NULL)) != -1) {
		if (c == 'c')
			config_path = optarg;
		else if (c == 'h') {
			usage(stdout);
			return 0;
		} else if (c == 'V') {
			printf("vramd %s\n", VRAMD_VERSION);
			return 0;
		} else if (c == '?') {
			usage(stderr);
			return 2;
		}
	}
	r = config_load(&cfg, config_path ? config_path : DEFAULT_CONFIG);
	if (r == -EINVAL || (r < 0 && config_path)) {
		log_err("cannot read %s: %s",
			config_path ? config_path : DEFAULT_CONFIG, strerror(-r));
		return 1;
	}
	optind = 1;
	while ((c = getopt_long(argc, argv, "c:s:b:l:Vh", opts, NULL)) != -1) {
		const char *key = NULL;
		switch (c) {
		case 's': key = "socket"; break;
		case 'b': key = "backend"; break;
		case 'l': key = "log_level"; break;
		case 1: case 2: case 3: case 4: case 5: case 6: case 7:
			key = keys[c];
			break;
		case 8: {
			/* --set key=value: any setting of the file. */
			char kv[256], *eq;
			snprintf(kv, sizeof(kv), "%s", optarg);
			eq = strchr(kv, '=');
			if (!eq || config_set(&cfg, (*eq = '\0', kv), eq + 1) < 0) {
				fprintf(stderr, "vramd: bad --set %s\n", optarg);
				return 2;
			}
			continue;
		}
		default: continue;
		}
		if (config_set(&cfg, key, optarg) < 0) {
			fprintf(stderr, "vramd: bad value for %s: %s\n", key,
				optarg);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "vramd: unexpected argument %s\n", argv[optind]);
		return 2;
	}
	log_max_level = cfg.log_level;
	raise_fd_limit();
	/* Writes to dead clients must fail with EPIPE, not kill the daemon. */
	signal(SIGPIPE, SIG_IGN);

	uv_loop_t loop;
	uv_loop_init(&loop);
	r = server_init(&srv, &loop, &cfg);
	if (r < 0) {
		uv_loop_close(&loop); /* no handle is open yet: frees the loop */
		return 1;
	}
	log_info("vramd %s ready (%s backend)", VRAMD_VERSION, srv.node.backend->ops->name);
	server_run(&srv);
	server_fini(&srv);
	uv_loop_close(&loop);
	log_info("stopped");
	return 0;
}
