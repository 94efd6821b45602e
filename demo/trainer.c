/* SPDX-License-Identifier: Apache-2.0 */
/* The trainer of the RL-cycle demo (demo/run.sh).
 *
 * It borrows the device memory of a co-located engine for a training step,
 * as an RL loop does between rollouts:
 *
 *   probed   it cannot get N MiB while the engine holds its pools (this
 *            proves that the device's capacity is real);
 *   paused   it pauses the engine's pools, by the engine's pid, and prints
 *            the bytes released and the device's free memory before/after;
 *   trained  it gets N MiB in a pool of its own and writes and checks them;
 *   freed    it closes that pool, which gives the memory back;
 *   resumed  it resumes the engine's pools.
 *
 *   trainer --engine-pid PID [--socket PATH] [--mib N] [--notify-fd FD]
 *
 * With --notify-fd, the name of each step is written to FD when the step is
 * done, and the trainer waits for a line on stdin before the next one, so
 * that a script can look at the node in between. Exit status 0 when every
 * step did what it should.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "demo.h"
#include "vram.h"

struct trainer {
	vram_client *client;
	uint32_t engine_pid;
	uint64_t bytes; /* what the training step needs */
	int notify_fd;	/* -1: run straight through */
};

static void fail_vram(const char *what, int r)
{
	const char *msg = vram_last_error();

	fprintf(stderr, "trainer: %s: %s\n", what,
		msg && *msg ? msg : strerror(-r));
	exit(1);
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Ends a step: tells the script and waits for its go-ahead. */
static void trainer_step_done(struct trainer *t, const char *step)
{
	char line[64];
	int n = snprintf(line, sizeof(line), "%s\n", step);

	if (t->notify_fd < 0)
		return;
	if (write(t->notify_fd, line, (size_t)n) != n) {
		fprintf(stderr, "trainer: cannot notify '%s': %s\n", step,
			strerror(errno));
		exit(1);
	}
	if (!fgets(line, sizeof(line), stdin)) {
		fprintf(stderr, "trainer: no go-ahead after '%s'\n", step);
		exit(1);
	}
}

static uint64_t device_free(struct trainer *t)
{
	struct vram_stats st = VRAM_STATS_INIT;
	int r = vram_stats(t->client, &st);

	if (r < 0)
		fail_vram("reading the daemon's stats", r);
	if (st.n_devices == 0) {
		fprintf(stderr, "trainer: the daemon has no device\n");
		exit(1);
	}
	return st.devices[0].free_bytes;
}

static vram_pool *trainer_pool(struct trainer *t, const char *name)
{
	struct vram_pool_options opts = {
		.size = sizeof(opts),
		.name = name,
		.tag = "train",
		.device = 0,
		.policy = VRAM_POLICY_DISCARD,
	};
	vram_pool *p;
	int r = vram_pool_create(t->client, &opts, &p);

	if (r < 0)
		fail_vram(name, r);
	return p;
}

/* Step 1: N MiB must not fit while the engine holds its memory. If they
 * did, the rest of the demo would prove nothing. */
static void trainer_probe(struct trainer *t)
{
	char a[32], b[32];
	vram_pool *p = trainer_pool(t, "trainer.probe");
	uint64_t free_bytes = device_free(t);
	void *ptr;
	int r;

	r = vram_alloc(p, t->bytes, &ptr);
	if (r == 0) {
		printf("trainer: FAILED: got %s while the engine holds its "
		       "memory; the device is larger than the demo assumes\n",
		       demo_size_text(t->bytes, a, sizeof(a)));
		exit(1);
	}
	if (r != -ENOMEM)
		fail_vram("probing", r);
	printf("trainer: %s does not fit now (device free %s): %s, as "
	       "expected\n",
	       demo_size_text(t->bytes, a, sizeof(a)),
	       demo_size_text(free_bytes, b, sizeof(b)), strerror(-r));
	vram_pool_close(p);
}

/* Runs a pause or resume of the engine's pools and prints its report. */
static void trainer_transition(struct trainer *t, bool pause)
{
	struct vram_selector sel = { .size = sizeof(sel),
				     .owner_pid = t->engine_pid };
	struct vram_report rep = VRAM_REPORT_INIT;
	char a[32], b[32], c[32];
	double start = now_ms(), ms;
	int r;

	r = pause ? vram_pause(t->client, &sel, 0, &rep) :
		    vram_resume(t->client, &sel, 0, &rep);
	ms = now_ms() - start;
	if (r < 0)
		fail_vram(pause ? "pausing the engine" : "resuming the engine",
			  r);
	printf("trainer: %s %" PRIu32 " pools of pid %" PRIu32 " in %.1f ms: "
	       "%s %s; device free %s -> %s\n",
	       pause ? "paused" : "resumed", rep.pools, t->engine_pid, ms,
	       pause ? "released" : "restored",
	       demo_size_text(rep.bytes, a, sizeof(a)),
	       demo_size_text(rep.free_before, b, sizeof(b)),
	       demo_size_text(rep.free_after, c, sizeof(c)));
	if (rep.pools == 0 || rep.bytes == 0 || rep.failed) {
		printf("trainer: FAILED: expected the engine's pools to %s\n",
		       pause ? "pause" : "resume");
		exit(1);
	}
	/* Measured, not taken on trust: the device must really have gained
	 * (pause) or given (resume) the memory. */
	if (pause ? rep.free_after < rep.free_before + rep.bytes :
		    rep.free_before < rep.free_after + rep.bytes) {
		printf("trainer: FAILED: the device's free memory did not "
		       "move by %s\n",
		       demo_size_text(rep.bytes, a, sizeof(a)));
		exit(1);
	}
}

/* Step 3: a training step that needs the borrowed memory. Returns the pool,
 * which holds the memory until closed. */
static vram_pool *trainer_train(struct trainer *t)
{
	char a[32], b[32], c[32];
	vram_pool *p = trainer_pool(t, "trainer.grads");
	uint64_t *w, sum = 0;
	double start;
	void *ptr;
	int r;

	r = vram_alloc(p, t->bytes, &ptr);
	if (r < 0)
		fail_vram("allocating the borrowed memory", r);
	start = now_ms();
	w = ptr;
	for (size_t i = 0; i < t->bytes / 8; i++)
		w[i] = i * UINT64_C(0x9e3779b97f4a7c15);
	for (size_t i = 0; i < t->bytes / 8; i++)
		sum += w[i] == i * UINT64_C(0x9e3779b97f4a7c15);
	if (sum != t->bytes / 8) {
		printf("trainer: FAILED: the borrowed memory did not keep what "
		       "was written\n");
		exit(1);
	}
	printf("trainer: allocated %s (pool %s) and wrote it in %.0f ms; "
	       "device free now %s\n",
	       demo_size_text(t->bytes, a, sizeof(a)),
	       demo_size_text(vram_pool_size(p), b, sizeof(b)),
	       now_ms() - start, demo_size_text(device_free(t), c, sizeof(c)));
	return p;
}

static void usage(FILE *f)
{
	fputs("usage: trainer --engine-pid PID [--socket PATH] [--mib N] "
	      "[--notify-fd FD]\n",
	      f);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "engine-pid", required_argument, NULL, 'p' },
		{ "mib", required_argument, NULL, 'm' },
		{ "notify-fd", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct trainer t = { .notify_fd = -1, .bytes = 700 * MIB };
	const char *socket = NULL;
	char a[32];
	vram_pool *grads;
	uint64_t v;
	int opt, r;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case 's':
			socket = optarg;
			break;
		case 'p':
			if (demo_parse_uint(optarg, 1, UINT32_MAX, &v) < 0)
				goto usage_error;
			t.engine_pid = (uint32_t)v;
			break;
		case 'm':
			if (demo_parse_uint(optarg, 1, 1 << 20, &v) < 0)
				goto usage_error;
			t.bytes = v * MIB;
			break;
		case 'n':
			if (demo_parse_uint(optarg, 0, 1023, &v) < 0)
				goto usage_error;
			t.notify_fd = (int)v;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			goto usage_error;
		}
	}
	if (optind < argc || t.engine_pid == 0)
		goto usage_error;

	r = vram_connect(socket, "trainer", 0, &t.client);
	if (r < 0)
		fail_vram("cannot connect to vramd", r);
	if (strcmp(vram_client_backend(t.client), "host") != 0) {
		fprintf(stderr,
			"trainer: the demo writes pool memory with the "
			"CPU, so it needs vramd's host backend, not %s\n",
			vram_client_backend(t.client));
		return 1;
	}

	trainer_probe(&t);
	trainer_step_done(&t, "probed");

	trainer_transition(&t, true);
	trainer_step_done(&t, "paused");

	grads = trainer_train(&t);
	trainer_step_done(&t, "trained");

	vram_pool_close(grads);
	printf("trainer: closed its pool; device free now %s\n",
	       demo_size_text(device_free(&t), a, sizeof(a)));
	trainer_step_done(&t, "freed");

	trainer_transition(&t, false);
	trainer_step_done(&t, "resumed");

	vram_client_close(t.client);
	return 0;

usage_error:
	usage(stderr);
	return 2;
}
