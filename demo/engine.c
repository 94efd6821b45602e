/* SPDX-License-Identifier: Apache-2.0 */
/* The inference engine of the RL-cycle demo (demo/run.sh).
 *
 * It does what an engine co-located with a trainer does with libvram: it
 * puts its weights in a pool with policy host (kept across a pause) and its
 * KV cache in a pool with policy discard (dropped on pause), fills the
 * weights with a known stream, and then lets a background thread answer the
 * daemon's pause and resume events while the trainer borrows the memory.
 * When told to go on it checks that every byte of the weights came back at
 * the same addresses, and exits 0 only if they did.
 *
 *   engine [--socket PATH] [--weights-mib N] [--kv-mib N] [--notify-fd FD]
 *
 * With --notify-fd, "loaded" is written to FD once the weights are in
 * place. Then the engine waits for a line (or end of file) on stdin before
 * it verifies.
 *
 * The demo touches pool memory with the CPU, which is only possible on the
 * host backend; on a GPU the same pointers are device pointers and the
 * fills and checks would be kernels or cudaMemcpy.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "demo.h"
#include "vram.h"

#define N_LAYERS 4
#define SEED UINT64_C(0x9e3779b97f4a7c15)

struct engine {
	vram_client *client;
	vram_pool *weights;
	vram_pool *kv;
	uintptr_t weights_base; /* to check that resume keeps addresses */
	uintptr_t kv_base;
	void *layer[N_LAYERS];
	size_t layer_bytes;
	void *kv_cache;
	size_t kv_bytes;
	uint64_t checksum;
};

/* xorshift64*: a fast stream that is the same on every run for a seed, so
 * the content can be checked without keeping a copy of it. */
static uint64_t xorshift_next(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * UINT64_C(0x2545f4914f6cdd1d);
}

static uint64_t layer_seed(int i)
{
	return SEED ^ ((uint64_t)(i + 1) * UINT64_C(0xbf58476d1ce4e5b9));
}

/* FNV-1a over 64-bit words: the checksum printed before and after. */
static uint64_t checksum_add(uint64_t h, uint64_t w)
{
	return (h ^ w) * UINT64_C(0x100000001b3);
}

static void die_vram(const char *what, int r)
{
	const char *msg = vram_last_error();

	fprintf(stderr, "engine: %s: %s\n", what,
		msg && *msg ? msg : strerror(-r));
	exit(1);
}

/* Writes step to the notify fd, if there is one. */
static void notify(int fd, const char *step)
{
	char line[64];
	int n = snprintf(line, sizeof(line), "%s\n", step);

	if (fd >= 0 && write(fd, line, (size_t)n) != n) {
		fprintf(stderr, "engine: cannot notify '%s': %s\n", step,
			strerror(errno));
		exit(1);
	}
}

static vram_pool *engine_pool(struct engine *e, const char *name,
			      const char *tag, enum vram_policy policy)
{
	struct vram_pool_options opts = {
		.size = sizeof(opts),
		.name = name,
		.tag = tag,
		.device = 0,
		.policy = policy,
	};
	vram_pool *p;
	int r = vram_pool_create(e->client, &opts, &p);

	if (r < 0)
		die_vram(name, r);
	return p;
}

static void engine_load(struct engine *e, uint64_t weights_mib, uint64_t kv_mib)
{
	char a[32], b[32];
	uint64_t h = 0xcbf29ce484222325;
	int r;

	e->weights =
		engine_pool(e, "engine.weights", "weights", VRAM_POLICY_HOST);
	e->kv = engine_pool(e, "engine.kv", "kv_cache", VRAM_POLICY_DISCARD);

	/* Weights as a few tensors, the way a model has layers: they come
	 * from one pool through the sub-allocator. */
	e->layer_bytes = weights_mib * MIB / N_LAYERS;
	for (int i = 0; i < N_LAYERS; i++) {
		uint64_t s = layer_seed(i);
		uint64_t *w;

		r = vram_alloc(e->weights, e->layer_bytes, &e->layer[i]);
		if (r < 0)
			die_vram("allocating weights", r);
		w = e->layer[i];
		for (size_t k = 0; k < e->layer_bytes / 8; k++) {
			w[k] = xorshift_next(&s);
			h = checksum_add(h, w[k]);
		}
	}
	e->checksum = h;
	e->weights_base = vram_pool_base(e->weights);

	e->kv_bytes = kv_mib * MIB;
	r = vram_alloc(e->kv, e->kv_bytes, &e->kv_cache);
	if (r < 0)
		die_vram("allocating the KV cache", r);
	memset(e->kv_cache, 0x5a, e->kv_bytes);
	e->kv_base = vram_pool_base(e->kv);

	printf("engine: weights %s in %d tensors at %#" PRIxPTR
	       " (pool %s), checksum %016" PRIx64 "\n",
	       demo_size_text(weights_mib * MIB, a, sizeof(a)), N_LAYERS,
	       e->weights_base,
	       demo_size_text(vram_pool_size(e->weights), b, sizeof(b)),
	       e->checksum);
	printf("engine: KV cache %s at %#" PRIxPTR " (pool %s)\n",
	       demo_size_text(e->kv_bytes, a, sizeof(a)), e->kv_base,
	       demo_size_text(vram_pool_size(e->kv), b, sizeof(b)));
}

/* Checks every byte of the weights against the stream that wrote them.
 * Returns true when all match. */
static bool engine_verify(struct engine *e)
{
	uint64_t h = 0xcbf29ce484222325;
	bool ok = true;

	if (vram_pool_state(e->weights) != VRAM_STATE_ACTIVE ||
	    vram_pool_state(e->kv) != VRAM_STATE_ACTIVE) {
		printf("engine: FAILED: pools are %s and %s, not active\n",
		       vram_state_name(vram_pool_state(e->weights)),
		       vram_state_name(vram_pool_state(e->kv)));
		return false;
	}
	if (vram_pool_base(e->weights) != e->weights_base ||
	    vram_pool_base(e->kv) != e->kv_base) {
		printf("engine: FAILED: a pool moved: weights %#" PRIxPTR
		       " -> %#" PRIxPTR ", KV %#" PRIxPTR " -> %#" PRIxPTR "\n",
		       e->weights_base, vram_pool_base(e->weights), e->kv_base,
		       vram_pool_base(e->kv));
		return false;
	}
	for (int i = 0; i < N_LAYERS; i++) {
		const uint64_t *w = e->layer[i];
		uint64_t s = layer_seed(i);

		for (size_t k = 0; k < e->layer_bytes / 8; k++) {
			uint64_t want = xorshift_next(&s);

			h = checksum_add(h, w[k]);
			if (w[k] != want && ok) {
				printf("engine: FAILED: tensor %d differs at byte "
				       "%zu: %016" PRIx64 ", want %016" PRIx64
				       "\n",
				       i, k * 8, w[k], want);
				ok = false;
			}
		}
	}
	printf("engine: checksum %016" PRIx64 " (was %016" PRIx64 ")\n", h,
	       e->checksum);
	if (!ok || h != e->checksum)
		return false;

	/* The KV cache's content was dropped by its policy; what matters is
	 * that it is mapped again, at the same address, and writable. */
	memset(e->kv_cache, 0xa5, e->kv_bytes);
	return true;
}

static void usage(FILE *f)
{
	fputs("usage: engine [--socket PATH] [--weights-mib N] [--kv-mib N] "
	      "[--notify-fd FD]\n",
	      f);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "weights-mib", required_argument, NULL, 'w' },
		{ "kv-mib", required_argument, NULL, 'k' },
		{ "notify-fd", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct engine e = { 0 };
	const char *socket = NULL;
	uint64_t weights_mib = 256, kv_mib = 512, fd;
	int notify_fd = -1, opt, r;
	char line[64];
	bool ok;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case 's':
			socket = optarg;
			break;
		case 'w':
			if (demo_parse_uint(optarg, 1, 1 << 20, &weights_mib) <
			    0)
				goto usage_error;
			break;
		case 'k':
			if (demo_parse_uint(optarg, 1, 1 << 20, &kv_mib) < 0)
				goto usage_error;
			break;
		case 'n':
			if (demo_parse_uint(optarg, 0, 1023, &fd) < 0)
				goto usage_error;
			notify_fd = (int)fd;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			goto usage_error;
		}
	}
	if (optind < argc)
		goto usage_error;

	r = vram_connect(socket, "engine", 0, &e.client);
	if (r < 0)
		die_vram("cannot connect to vramd", r);
	if (strcmp(vram_client_backend(e.client), "host") != 0) {
		fprintf(stderr,
			"engine: the demo writes pool memory with the "
			"CPU, so it needs vramd's host backend, not %s\n",
			vram_client_backend(e.client));
		return 1;
	}
	engine_load(&e, weights_mib, kv_mib);

	/* From here the daemon may send pause and resume events at any time;
	 * the thread answers them while this thread waits. */
	r = vram_client_start_thread(e.client);
	if (r < 0)
		die_vram("cannot start the event thread", r);
	printf("engine: serving as pid %ld; pause and resume are handled by "
	       "libvram's event thread\n",
	       (long)getpid());
	notify(notify_fd, "loaded");
	if (!fgets(line, sizeof(line), stdin) && ferror(stdin)) {
		fprintf(stderr, "engine: reading stdin: %s\n", strerror(errno));
		return 1;
	}

	ok = engine_verify(&e);
	if (ok)
		printf("engine: weights verified byte for byte at the same "
		       "addresses; KV cache mapped and writable: OK\n");
	vram_pool_close(e.kv);
	vram_pool_close(e.weights);
	vram_client_close(e.client);
	return ok ? 0 : 1;

usage_error:
	usage(stderr);
	return 2;
}
