/* SPDX-License-Identifier: Apache-2.0 */
/* libvram's events: pause and resume (own and third-party, through a
 * waiting call, dispatch and the event thread; SAVE then PAUSE for a pool
 * whose content is kept), grow and drop events, growth of a pool by
 * vram_alloc, concurrency of callers, inspection and argument checks.
 *
 * Against the real vramd on the host backend (tests/integration/integ.h)
 * wherever the daemon need not misbehave. The cases that need a daemon to
 * send what vramd never would (events for unknown pools, chunks that do
 * not map, a SAVE for a layout not mapped here, a malformed frame, answers
 * out of order) use the scripted fake of client_fake.h, and
 * fake_sends_what_vramd_sends holds the fake to vramd.
 */
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "../integration/integ.h"
#include "client_fake.h"
#include "cuda_driver.h"
#include "cuda_fake.h"
#include "frame_send.h"
#include "vmm.h"

/* libvram's CUDA half, named so that the static link keeps it (vmm.c
 * refers to it weakly) for the case on the fake driver. */
static __attribute__((used)) int (*const cuda_half)(struct vmm **) =
	vmm_cuda_open;

static vram_pool *pool_create(vram_client *c, const char *name, int policy,
			      uint64_t reserve)
{
	struct vram_pool_options o = { .size = sizeof(o),
		.name = name,
		.tag = "t",
		.policy = policy,
		.reserve_bytes = reserve,
	};
	vram_pool *p = NULL;
	int r = vram_pool_create(c, &o, &p);
	if (r < 0)
		TEST_FAIL("vram_pool_create: %s (%s)", strerror(-r),
			  vram_last_error());
	return p;
}

/* The /proc/self/maps line that covers addr (with want in it, if want),
 * "" if none. */
static const char *maps_find(uintptr_t addr, const char *want)
{
	static char line[512];
	FILE *m = fopen("/proc/self/maps", "r");
	ASSERT(m);
	while (fgets(line, sizeof(line), m)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx", &lo, &hi) != 2)
			continue;
		if (want ? strstr(line, want) != NULL :
			   lo <= addr && addr < hi) {
			fclose(m);
			return line;
		}
	}
	fclose(m);
	line[0] = '\0';
	return line;
}

static const char *maps_line(uintptr_t addr)
{
	return maps_find(addr, NULL);
}

/* A chunk of vramd's host backend (or of the fake) is mapped at addr. */
static bool chunk_mapped(uintptr_t addr)
{
	const char *l = maps_line(addr);
	return strstr(l, "vramd-chunk") != NULL ||
	       strstr(l, "fake-chunk") != NULL;
}

/* Where this process maps vramd's backup of its one host pool. */
static const unsigned char *backup_mapping(void)
{
	unsigned long lo, hi;
	const char *l = maps_find(0, "vramd-backup");
	if (sscanf(l, "%lx-%lx", &lo, &hi) != 2)
		TEST_FAIL("no backup mapped in this process");
	return (const unsigned char *)lo;
}

static void fill(void *p, size_t len, unsigned seed)
{
	uint32_t *w = p;
	for (size_t i = 0; i < len / 4; i++)
		w[i] = seed * 2654435761u + (uint32_t)i;
}

static bool check(const void *p, size_t len, unsigned seed)
{
	const uint32_t *w = p;
	for (size_t i = 0; i < len / 4; i++)
		if (w[i] != seed * 2654435761u + (uint32_t)i)
			return false;
	return true;
}

/* Another client pauses or resumes a pool by name in its own thread, so
 * that this one can handle the events meanwhile. */
struct controller {
	vram_client *c;
	const char *name;
	bool resume;
	int r;
	struct vram_report rep;
	pthread_t thread;
};

static void *controller_main(void *arg)
{
	struct controller *k = arg;
	struct vram_selector sel = { .size = sizeof(sel), .name = k->name };
	k->r = k->resume ? vram_resume(k->c, &sel, 0, &k->rep) :
			   vram_pause(k->c, &sel, 0, &k->rep);
	return NULL;
}

static void controller_start(struct controller *k, vram_client *c,
			     const char *name, bool resume)
{
	*k = (struct controller){ .c = c,
				  .name = name,
				  .resume = resume,
				  .rep = { .size = sizeof(k->rep) } };
	ASSERT_OK(pthread_create(&k->thread, NULL, controller_main, k));
}

static void controller_join(struct controller *k)
{
	pthread_join(k->thread, NULL);
	if (k->r != 0)
		TEST_FAIL("%s of %s: %s", k->resume ? "resume" : "pause",
			  k->name, strerror(-k->r));
	ASSERT_EQ(k->rep.pools, 1);
	ASSERT_EQ(k->rep.failed, 0);
}

/* Waits for c's fd, then dispatches what came (one event or more). */
static void dispatch_some(vram_client *c)
{
	struct pollfd pfd = { .fd = vram_client_fd(c), .events = POLLIN };
	ASSERT_EQ(poll(&pfd, 1, 5000), 1);
	ASSERT_GE(vram_client_dispatch(c, 0), 1);
}

/* Dispatches c's events until p is in state want. */
static void dispatch_until(vram_client *c, vram_pool *p, enum vram_state want)
{
	for (int i = 0; i < 8 && vram_pool_state(p) != want; i++)
		dispatch_some(c);
	ASSERT_EQ(vram_pool_state(p), want);
}

/* ---- against vramd ------------------------------------------------- */

TEST(own_pause_saves_the_backup_resume_restores_at_the_same_address)
{
	struct vram_report rep = VRAM_REPORT_INIT;
	void *a;

	integ_start("256M");
	vram_client *c = integ_connect("unit");
	vram_pool *p = pool_create(c, "w", VRAM_POLICY_HOST, 256 * MiB);
	ASSERT_OK(vram_alloc(p, 8 * MiB, &a));
	uintptr_t base = vram_pool_base(p);
	ASSERT_EQ((uintptr_t)a, base);
	ASSERT_EQ(base % (2 * MiB), 0);
	fill(a, 8 * MiB, 5);

	/* SAVE and PAUSE for our own pool are handled inside the call. */
	ASSERT_OK(vram_pool_pause(p, &rep));
	ASSERT_EQ(rep.pools, 1);
	ASSERT_EQ(rep.failed, 0);
	ASSERT_UEQ(rep.bytes, 64 * MiB);
	ASSERT_UEQ(rep.free_after - rep.free_before, 64 * MiB);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_PAUSED);
	ASSERT_UEQ(vram_pool_size(p), 64 * MiB); /* kept while paused */
	ASSERT(!chunk_mapped(base));
	ASSERT(maps_line(base)[0] != '\0'); /* still reserved */
	ASSERT_UEQ(integ_stats(c).used_bytes, 0);
	/* The content went into the daemon's backup. */
	uint32_t word;
	memcpy(&word, backup_mapping() + 400, 4);
	ASSERT_EQ(word, 5 * 2654435761u + 100);
	void *b;
	ASSERT_EQ(vram_alloc(p, 4096, &b), -EBUSY);
	ASSERT_EQ(vram_pool_reserve(p, 128 * MiB), -EBUSY);
	ASSERT_EQ(vram_pool_pause(p, &rep), -EALREADY);

	ASSERT_OK(vram_pool_resume(p, &rep));
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_ACTIVE);
	ASSERT_EQ(vram_pool_base(p), base);
	ASSERT(chunk_mapped(base));
	ASSERT(check(a, 8 * MiB, 5));
	/* Allocations made before the pause are still ours. */
	ASSERT_OK(vram_alloc(p, 4096, &b));
	ASSERT_EQ((uintptr_t)b, base + 8 * MiB);
	ASSERT_OK(vram_free(p, a));
	ASSERT_OK(vram_free(p, b));
	vram_client_close(c);
	integ_stop();
}

TEST(discard_pause_drops_the_content)
{
	void *a;

	integ_start("256M");
	vram_client *c = integ_connect("unit");
	vram_pool *p = pool_create(c, "kv", VRAM_POLICY_DISCARD, 256 * MiB);
	ASSERT_OK(vram_alloc(p, 1 * MiB, &a));
	memset(a, 0xee, 1 * MiB);
	ASSERT_OK(vram_pool_pause(p, NULL));
	ASSERT(!chunk_mapped((uintptr_t)a));
	ASSERT_OK(vram_pool_resume(p, NULL));
	ASSERT_EQ(((unsigned char *)a)[1000], 0); /* fresh memory */
	vram_client_close(c);
	integ_stop();
}

/* Another client pauses our pool: the events arrive while we do nothing;
 * the program polls the fd and dispatches. */
TEST(third_party_pause_and_resume_through_dispatch)
{
	struct controller k;
	void *a;

	integ_start("256M");
	vram_client *c = integ_connect("unit");
	vram_client *t = integ_connect("ctl");
	vram_pool *p = pool_create(c, "w", VRAM_POLICY_HOST, 256 * MiB);
	ASSERT_OK(vram_alloc(p, 4 * MiB, &a));
	fill(a, 4 * MiB, 9);

	ASSERT_EQ(vram_client_dispatch(c, 0), 0);
	ASSERT_EQ(vram_client_dispatch(c, 30), 0); /* waits, nothing comes */
	controller_start(&k, t, "w", false);
	dispatch_until(c, p, VRAM_STATE_PAUSED); /* SAVE, then PAUSE */
	controller_join(&k);
	ASSERT_UEQ(k.rep.bytes, 64 * MiB);
	ASSERT(!chunk_mapped((uintptr_t)a));

	controller_start(&k, t, "w", true);
	dispatch_until(c, p, VRAM_STATE_ACTIVE);
	controller_join(&k);
	ASSERT(check(a, 4 * MiB, 9));
	vram_client_close(t);
	vram_client_close(c);
	integ_stop();
}

TEST(event_thread_handles_a_third_party_pause)
{
	void *a;

	integ_start("256M");
	vram_client *c = integ_connect("unit");
	vram_client *t = integ_connect("ctl");
	vram_pool *p = pool_create(c, "kv", VRAM_POLICY_DISCARD, 256 * MiB);
	ASSERT_OK(vram_alloc(p, 4096, &a));
	ASSERT_OK(vram_client_start_thread(c));
	struct vram_selector sel = { .size = sizeof(sel), .name = "kv" };
	struct vram_report rep = VRAM_REPORT_INIT;
	ASSERT_OK(vram_pause(t, &sel, 0, &rep));
	ASSERT_EQ(rep.pools, 1);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_PAUSED);
	/* Calls still work with the thread reading. */
	ASSERT_OK(vram_ping(c));
	vram_client_close(t);
	vram_client_close(c);
	integ_stop();
}

/* The first round of a host pause: SAVE copies the pool into its backup;
 * the PAUSE that follows only unmaps; the RESUME that restores brings back
 * what SAVE saw. A second mapper writes between the two: its PAUSE comes
 * only once the owner has saved, and it must not save again. (That SAVE
 * leaves the pool mapped and active is seen with the fake, in
 * save_refuses_a_partial_mapping: vramd sends PAUSE as soon as it is
 * acked.) */
TEST(save_then_pause_then_restore)
{
	struct controller k;
	void *a;

	integ_start("256M");
	vram_client *c = integ_connect("unit");
	vram_client *m = integ_connect("mapper");
	vram_client *t = integ_connect("ctl");
	vram_pool *p = pool_create(c, "w", VRAM_POLICY_HOST, 256 * MiB);
	ASSERT_OK(vram_alloc(p, 4 * MiB, &a));
	fill(a, 4 * MiB, 5);
	vram_pool *q;
	ASSERT_OK(vram_pool_open(m, "w", 0, &q));
	void *qa = (void *)vram_pool_base(q);
	ASSERT(check(qa, 4 * MiB, 5));
	ASSERT_OK(vram_client_start_thread(c));

	controller_start(&k, t, "w", false);
	struct pollfd pfd = { .fd = vram_client_fd(m), .events = POLLIN };
	ASSERT_EQ(poll(&pfd, 1, 5000), 1); /* PAUSE: the owner has saved */
	ASSERT_EQ(vram_pool_state(q), VRAM_STATE_ACTIVE);
	fill(qa, 4 * MiB, 6); /* after the save: not kept */
	dispatch_until(m, q, VRAM_STATE_PAUSED);
	controller_join(&k);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_PAUSED);
	ASSERT(!chunk_mapped((uintptr_t)a));
	ASSERT(!chunk_mapped((uintptr_t)qa));

	controller_start(&k, t, "w", true);
	dispatch_until(m, q, VRAM_STATE_ACTIVE);
	controller_join(&k);
	ASSERT(check(a, 4 * MiB, 5));
	ASSERT(check(qa, 4 * MiB, 5));
	vram_client_close(t);
	vram_client_close(m);
	vram_client_close(c);
	integ_stop();
}

TEST(open_maps_the_chunks_and_grow_events_add_more)
{
	void *ptr, *x, *y;

	integ_start("256M");
	vram_client *o = integ_connect("owner");
	vram_pool *w = pool_create(o, "shared", VRAM_POLICY_DISCARD, 256 * MiB);
	ASSERT_OK(vram_alloc(w, 8 * MiB, &x));
	memset(x, 0xab, 8 * MiB);
	vram_client *c = integ_connect("unit");
	vram_pool *p;
	ASSERT_EQ(vram_pool_open(c, "nope", 0, &p), -ENOENT);
	ASSERT_OK(vram_pool_open(c, "shared", 0, &p));
	vram_pool *again = (vram_pool *)1;
	ASSERT_EQ(vram_pool_open(c, "shared", 0, &again), -EALREADY);
	ASSERT(again == NULL);
	const unsigned char *b = (const unsigned char *)vram_pool_base(p);
	ASSERT_UEQ(vram_pool_size(p), 64 * MiB);
	ASSERT_EQ(b[0], 0xab);
	ASSERT_EQ(b[8 * MiB - 1], 0xab);
	/* Not ours to sub-allocate or grow. */
	ASSERT_EQ(vram_alloc(p, 256, &ptr), -EPERM);
	ASSERT_EQ(vram_pool_reserve(p, 128 * MiB), -EPERM);
	ASSERT_EQ(vram_free(p, (void *)b), -EINVAL);

	/* The owner grows: a GROW event brings us the new chunk. */
	ASSERT_OK(vram_alloc(w, 64 * MiB, &y));
	ASSERT_UEQ(vram_pool_size(w), 128 * MiB);
	/* y spans the old chunk's free end and the new chunk. */
	uintptr_t off = 64 * MiB;
	unsigned char *wb = (unsigned char *)vram_pool_base(w);
	ASSERT((unsigned char *)y <= wb + off &&
	       wb + off < (unsigned char *)y + 64 * MiB);
	wb[off] = 0xcd;
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	ASSERT_UEQ(vram_pool_size(p), 128 * MiB);
	ASSERT_EQ(b[off], 0xcd);
	ASSERT_EQ(integ_info(o, "shared").n_mappers, 2);
	vram_pool_close(p);
	ASSERT_OK(vram_ping(c)); /* the close went before the ping */
	ASSERT_EQ(integ_info(o, "shared").n_mappers, 1);
	vram_client_close(c);
	vram_client_close(o);
	integ_stop();
}

TEST(readonly_open_maps_read_only)
{
	vram_pool *p;
	void *x;

	integ_start("256M");
	vram_client *o = integ_connect("owner");
	vram_pool *w = pool_create(o, "w", VRAM_POLICY_HOST, 256 * MiB);
	ASSERT_OK(vram_alloc(w, 4 * MiB, &x));
	memset(x, 0x42, 4 * MiB);
	vram_client *c = integ_connect("unit");
	ASSERT_OK(vram_pool_open(c, "w", VRAM_OPEN_READONLY, &p));
	uintptr_t b = vram_pool_base(p);
	ASSERT_EQ(*(const unsigned char *)b, 0x42);
	const char *line = maps_line(b);
	ASSERT(strstr(line, " r--s ") != NULL);
	vram_client_close(c);
	vram_client_close(o);
	integ_stop();
}

TEST(reopened_persistent_pool_keeps_its_content_and_allocates_after_it)
{
	struct vram_pool_options opt = { .size = sizeof(opt), .name = "keep",
					 .tag = "t",
					 .policy = VRAM_POLICY_HOST,
					 .flags = VRAM_POOL_PERSIST,
					 .reserve_bytes = 256 * MiB };
	vram_pool *p, *w;
	void *ptr;

	integ_start("256M");
	/* A first owner fills it and lets go; the pool stays. */
	vram_client *o = integ_connect("first");
	ASSERT_OK(vram_pool_create(o, &opt, &w));
	ASSERT_OK(vram_alloc(w, 8 * MiB, &ptr));
	memset(ptr, 0x11, 8 * MiB);
	vram_pool_close(w);
	ASSERT_OK(vram_ping(o));
	vram_client_close(o);
	vram_client *peek = integ_connect("peek");
	ASSERT_EQ(integ_info(peek, "keep").owner_pid, 0);
	vram_client_close(peek);

	vram_client *c = integ_connect("unit");
	ASSERT_OK(vram_pool_open(c, "keep", 0, &p));
	uintptr_t b = vram_pool_base(p);
	uint64_t size = vram_pool_size(p);
	ASSERT_UEQ(size, 64 * MiB);
	ASSERT_OK(vram_alloc(p, 4096, &ptr));
	ASSERT_GE((uintptr_t)ptr, b + size);
	ASSERT_EQ(*(unsigned char *)(b + 8 * MiB - 1), 0x11);
	ASSERT_OK(vram_pool_drop(c, "keep"));
	vram_client_close(c);
	integ_stop();
}

TEST(drop_makes_the_pool_gone)
{
	void *a;
	struct vram_report rep = VRAM_REPORT_INIT;

	integ_start("256M");
	vram_client *c = integ_connect("unit");
	vram_pool *p = pool_create(c, "w", VRAM_POLICY_HOST, 256 * MiB);
	ASSERT_OK(vram_alloc(p, 4096, &a));
	ASSERT_EQ(vram_pool_drop(c, "nope"), -ENOENT);
	ASSERT_OK(vram_pool_drop(c, "w"));
	/* The DROP event came before the reply and was handled. */
	ASSERT(!chunk_mapped((uintptr_t)a));
	ASSERT_EQ(vram_alloc(p, 4096, &a), -ENOENT);
	ASSERT_EQ(vram_free(p, a), 0); /* a is NULL now */
	ASSERT_EQ(vram_pool_pause(p, &rep), -ENOENT);
	ASSERT_EQ(vram_pool_reserve(p, 1), -ENOENT);
	vram_pool_close(p);
	ASSERT_OK(vram_ping(c));
	ASSERT_EQ(integ_stats(c).pools, 0);
	vram_client_close(c);
	integ_stop();
}

/* Growth is seen in the pool's size: each grow at least doubles it. */
TEST(alloc_grows_geometrically_and_stops_at_the_range)
{
	void *a, *b, *x;

	integ_start("1G");
	vram_client *c = integ_connect("unit");
	vram_pool *p = pool_create(c, "w", VRAM_POLICY_DISCARD, 512 * MiB);
	ASSERT_UEQ(vram_pool_size(p), 0); /* nothing until the first alloc */
	ASSERT_OK(vram_alloc(p, 1, &a));
	ASSERT_UEQ(vram_pool_size(p), 64 * MiB);
	ASSERT_OK(vram_alloc(p, 64 * MiB - 256, &b)); /* fills it exactly */
	ASSERT_UEQ(vram_pool_size(p), 64 * MiB);
	ASSERT_OK(vram_alloc(p, 1, &x));
	ASSERT_UEQ(vram_pool_size(p), 128 * MiB); /* grew by its size */
	ASSERT_OK(vram_alloc(p, 100 * MiB, &x));
	ASSERT_UEQ(vram_pool_size(p), 256 * MiB); /* by its size again */
	ASSERT_EQ((uintptr_t)x % 256, 0);
	memset(x, 1, 100 * MiB);
	/* Never past the range: what fits is granted... */
	ASSERT_OK(vram_alloc(p, 200 * MiB, &x));
	ASSERT_UEQ(vram_pool_size(p), 512 * MiB);
	ASSERT_UEQ(integ_stats(c).used_bytes, 512 * MiB);
	/* ...and what does not is -ENOMEM from libvram, not the daemon's
	 * "pool is full" (148 MiB are free at the end, the range is used). */
	ASSERT_EQ(vram_alloc(p, 200 * MiB, &x), -ENOMEM);
	ASSERT(strstr(vram_last_error(), "w") != NULL);
	ASSERT_EQ(vram_pool_reserve(p, 600 * MiB), -ENOMEM);
	ASSERT_OK(vram_pool_reserve(p, 512 * MiB));
	ASSERT_OK(vram_free(p, b));
	ASSERT_EQ(vram_free(p, b), -EINVAL);
	ASSERT_EQ(vram_free(p, (char *)a + 256), -EINVAL);
	ASSERT_EQ(vram_free(p, &x), -EINVAL);
	ASSERT(strstr(vram_last_error(), "not allocated") != NULL);
	ASSERT_OK(vram_alloc(p, 32 * MiB, &x)); /* reuses b's room */
	ASSERT_UEQ(vram_pool_size(p), 512 * MiB);
	ASSERT_UEQ(integ_stats(c).used_bytes, 512 * MiB);
	vram_client_close(c);
	integ_stop();
}

TEST(reserve_grows_up_front_and_daemon_errors_come_back)
{
	void *x;

	integ_start("320M");
	vram_client *c = integ_connect("unit");
	vram_pool *p = pool_create(c, "w", VRAM_POLICY_DISCARD, 1024 * MiB);
	ASSERT_OK(vram_pool_reserve(p, 300 * MiB));
	ASSERT_UEQ(vram_pool_size(p), 300 * MiB);
	ASSERT_OK(vram_pool_reserve(p, 100 * MiB)); /* already */
	ASSERT_UEQ(vram_pool_size(p), 300 * MiB);
	ASSERT_OK(vram_alloc(p, 300 * MiB, &x)); /* fits without growing */
	/* The device has 20 MiB left: the daemon refuses the grow. */
	ASSERT_EQ(vram_alloc(p, 1, &x), -ENOMEM);
	ASSERT(strstr(vram_last_error(), "out of memory") != NULL);
	ASSERT_UEQ(vram_pool_size(p), 300 * MiB);
	vram_client_close(c);
	integ_stop();
}

struct allocer {
	vram_pool *p;
	unsigned seed;
	unsigned char tag; /* what this thread writes */
	int failures;
};

static void *allocer_main(void *arg)
{
	struct allocer *al = arg;
	void *live[32] = { 0 };
	size_t len[32] = { 0 };

	for (int i = 0; i < 400; i++) {
		int k = rand_r(&al->seed) % 32;
		if (live[k]) {
			/* Our pattern is intact: no one else got these bytes. */
			const unsigned char *m = live[k];
			if (m[0] != al->tag || m[len[k] - 1] != al->tag ||
			    vram_free(al->p, live[k]) != 0)
				al->failures++;
			live[k] = NULL;
		} else {
			len[k] = 1 + rand_r(&al->seed) % (512 * 1024);
			if (vram_alloc(al->p, len[k], &live[k]) != 0) {
				al->failures++;
				live[k] = NULL;
				continue;
			}
			memset(live[k], al->tag, len[k]);
		}
	}
	for (int k = 0; k < 32; k++)
		if (live[k] && vram_free(al->p, live[k]) != 0)
			al->failures++;
	return NULL;
}

TEST(concurrent_allocations_never_overlap)
{
	enum { T = 8 };
	pthread_t t[T];
	struct allocer al[T];
	const char *const extra[] = { "--host-capacity", "1G", "--chunk-max",
				      "64M", NULL };

	integ_start_args(extra);
	vram_client *c = integ_connect("unit");
	vram_pool *p = pool_create(c, "w", VRAM_POLICY_DISCARD, 1024 * MiB);
	for (int i = 0; i < T; i++) {
		al[i] = (struct allocer){ .p = p,
					  .seed = 1 + (unsigned)i,
					  .tag = (unsigned char)(0x10 + i) };
		ASSERT_OK(pthread_create(&t[i], NULL, allocer_main, &al[i]));
	}
	for (int i = 0; i < T; i++) {
		pthread_join(t[i], NULL);
		ASSERT_EQ(al[i].failures, 0);
	}
	/* Concurrent growers waited for each other instead of each asking:
	 * at most three grows (64, 64 and 128 MiB; each at least doubles). */
	ASSERT_LE(vram_pool_size(p), 256 * MiB);
	vram_client_close(c);
	integ_stop();
}

TEST(list_and_stats_convert_everything)
{
	struct vram_pool_info *infos = (void *)1;
	size_t n = 99;
	struct vram_stats st = VRAM_STATS_INIT;
	const char *const extra[] = { "--host-capacity", "256M", "--chunk-max",
				      "32M", NULL };
	void *x;

	integ_start_args(extra);
	vram_client *c = integ_connect("unit");
	vram_pool *a = pool_create(c, "a", VRAM_POLICY_HOST, 256 * MiB);
	vram_pool *b = pool_create(c, "b", VRAM_POLICY_DISCARD, 256 * MiB);
	ASSERT_OK(vram_alloc(a, 1, &x)); /* 64 MiB in two chunks */
	ASSERT_OK(vram_pool_pause(b, NULL));
	vram_client *m = integ_connect("someone");
	vram_pool *ma;
	ASSERT_OK(vram_pool_open(m, "a", VRAM_OPEN_READONLY, &ma));

	ASSERT_OK(vram_list(c, NULL, sizeof(*infos), &infos, &n));
	ASSERT_EQ(n, 2);
	ASSERT_STREQ(infos[0].name, "a");
	ASSERT_STREQ(infos[0].tag, "t");
	ASSERT_EQ(infos[0].policy, VRAM_POLICY_HOST);
	ASSERT_EQ(infos[0].state, VRAM_STATE_ACTIVE);
	ASSERT_UEQ(infos[0].bytes, 64 * MiB);
	ASSERT_UEQ(infos[0].reserve_bytes, 256 * MiB);
	ASSERT_EQ(infos[0].chunks, 2);
	ASSERT_EQ(infos[0].owner_pid, (uint32_t)getpid());
	ASSERT_EQ(infos[0].n_mappers, 2);
	ASSERT_EQ(infos[0].mappers[1].pid, (uint32_t)getpid());
	ASSERT_EQ(infos[0].mappers[1].uid, getuid());
	ASSERT_EQ(infos[0].mappers[1].readonly, 1);
	ASSERT_EQ(infos[0].mappers[0].readonly, 0);
	ASSERT_STREQ(infos[0].mappers[1].name, "someone");
	ASSERT_STREQ(infos[1].name, "b");
	ASSERT_EQ(infos[1].policy, VRAM_POLICY_DISCARD);
	ASSERT_EQ(infos[1].state, VRAM_STATE_PAUSED);
	ASSERT_STREQ(vram_state_name(infos[1].state), "paused");
	ASSERT_STREQ(vram_policy_name(infos[0].policy), "host");
	vram_pool_info_free(infos, n);
	vram_pool_info_free(NULL, 0);
	struct vram_selector all = { .size = sizeof(all), .all = 1 };
	ASSERT_OK(vram_list(c, &all, sizeof(*infos), &infos, &n));
	ASSERT_EQ(n, 2);
	vram_pool_info_free(infos, n);
	ASSERT_EQ(vram_list(c, NULL, sizeof(struct vram_pool_info), NULL, &n), -EINVAL);
	ASSERT_EQ(vram_list(c, NULL, sizeof(*infos), &infos, NULL), -EINVAL);

	ASSERT_OK(vram_stats(c, &st));
	ASSERT_STREQ(st.backend, "host");
	ASSERT(st.daemon_version[0] != '\0');
	ASSERT_GE(st.sessions, 2);
	ASSERT_EQ(st.pools, 2);
	ASSERT_UEQ(st.used_bytes, 64 * MiB);
	ASSERT_GT(st.open_fds, 2);
	ASSERT_EQ(st.n_devices, 1);
	ASSERT(st.devices[0].uuid[0] != '\0');
	ASSERT_UEQ(st.devices[0].total_bytes, 256 * MiB);
	ASSERT_UEQ(st.devices[0].free_bytes, 192 * MiB);
	ASSERT_UEQ(st.devices[0].granularity, 2 * MiB);
	ASSERT_EQ(vram_stats(c, NULL), -EINVAL);
	vram_client_close(m);
	vram_client_close(c);
	integ_stop();
}

/* Two processes map the pool and never answer: the pause times out and
 * the error names both. */
TEST(a_failed_transition_names_the_late_pids)
{
	struct vram_report rep = VRAM_REPORT_INIT;
	struct vram_selector sel = { .size = sizeof(sel), .name = "w" };
	pid_t pid[2];

	integ_start("256M");
	vram_client *c = integ_connect("unit");
	vram_pool *p = pool_create(c, "w", VRAM_POLICY_DISCARD, 256 * MiB);
	ASSERT_OK(vram_pool_reserve(p, 2 * MiB));
	for (int i = 0; i < 2; i++) {
		struct integ_sync s;
		integ_sync_init(&s);
		pid[i] = fork();
		ASSERT(pid[i] >= 0);
		if (pid[i] == 0) {
			vram_client *m = integ_connect("deaf");
			vram_pool *q;
			if (vram_pool_open(m, "w", 0, &q) != 0)
				_exit(2);
			integ_signal(s.to_parent[1]);
			pause(); /* never dispatches */
			_exit(0);
		}
		integ_wait_signal(s.to_parent[0]);
	}
	ASSERT_EQ(vram_pause(c, &sel, 100, &rep), -ETIMEDOUT);
	ASSERT_EQ(rep.failed, 1);
	ASSERT_EQ(rep.pools, 0);
	ASSERT_UEQ(rep.free_before, 254 * MiB);
	for (int i = 0; i < 2; i++) {
		char want[16];
		snprintf(want, sizeof(want), "%d", (int)pid[i]);
		if (!strstr(vram_last_error(), want))
			TEST_FAIL("pid %s not in \"%s\"", want,
				  vram_last_error());
	}
	for (int i = 0; i < 2; i++) {
		kill(pid[i], SIGKILL);
		ASSERT_EQ(harness_wait(pid[i], 5000), 128 + SIGKILL);
	}
	/* With the daemon's own message, that is what the caller sees. */
	struct vram_selector nope = { .size = sizeof(nope), .name = "nope" };
	ASSERT_EQ(vram_resume(c, &nope, 0, &rep), -ENOENT);
	ASSERT_STREQ(vram_last_error(), "no pool matched");
	vram_client_close(c);
	integ_stop();
}

static int log_count;
static enum vram_log_level log_worst = VRAM_LOG_DEBUG;

static void log_fn(enum vram_log_level level, const char *msg, void *userdata)
{
	ASSERT(msg && msg[0]);
	ASSERT(userdata == &log_count);
	log_count++;
	if (level < log_worst)
		log_worst = level;
}

TEST(log_handler_gets_messages_only_when_installed)
{
	integ_start("256M");
	vram_set_log_handler(log_fn, VRAM_LOG_DEBUG, &log_count);
	vram_client *c = integ_connect("unit");
	ASSERT_GT(log_count, 0); /* "connected to vramd ..." */
	int before = log_count;
	vram_set_log_handler(NULL, VRAM_LOG_DEBUG, NULL);
	vram_pool *p = pool_create(c, "w", VRAM_POLICY_DISCARD, 256 * MiB);
	vram_pool_close(p);
	ASSERT_EQ(log_count, before);
	/* Errors only: a failing call logs at debug, so nothing. */
	vram_set_log_handler(log_fn, VRAM_LOG_ERROR, &log_count);
	ASSERT_EQ(vram_pool_drop(c, "nope"), -ENOENT);
	ASSERT_EQ(log_count, before);
	vram_set_log_handler(NULL, 0, NULL);
	vram_client_close(c);
	integ_stop();
	ASSERT_STREQ(vram_version(), VRAM_VERSION_STRING);
	ASSERT_EQ(vram_version_number(), VRAM_VERSION_NUMBER);
	ASSERT_STREQ(vram_state_name((enum vram_state)9), "unknown");
}

/* VRAM_LOG prints to stderr while no handler is installed (read at the
 * first message: each case runs in a process of its own). */
TEST(vram_log_prints_to_stderr_until_a_handler_is_installed)
{
	char path[] = "/tmp/vram-log-XXXXXX";
	int fd = mkstemp(path);
	ASSERT(fd >= 0);
	unlink(path);
	int saved = dup(STDERR_FILENO);
	ASSERT(saved >= 0 && dup2(fd, STDERR_FILENO) == STDERR_FILENO);
	setenv("VRAM_LOG", "info", 1);

	integ_start("256M");
	vram_client *c = integ_connect("unit"); /* info: "connected ..." */
	vram_pool *p = pool_create(c, "w", VRAM_POLICY_DISCARD, 256 * MiB);
	vram_pool_close(p); /* debug: "closed pool w": not printed */
	fflush(stderr);
	off_t printed = lseek(fd, 0, SEEK_CUR);
	/* A handler takes over, and removing it does not bring VRAM_LOG
	 * back: the program chose. */
	vram_set_log_handler(log_fn, VRAM_LOG_DEBUG, &log_count);
	vram_set_log_handler(NULL, 0, NULL);
	p = pool_create(c, "w2", VRAM_POLICY_DISCARD, 256 * MiB); /* info */
	vram_pool_close(p);
	vram_client_close(c);
	integ_stop();
	fflush(stderr);
	ASSERT(dup2(saved, STDERR_FILENO) == STDERR_FILENO);
	close(saved);

	char buf[4096] = "";
	ASSERT_GT(pread(fd, buf, sizeof(buf) - 1, 0), 0);
	close(fd);
	ASSERT(strstr(buf, "libvram: info: ") == buf);
	ASSERT(strstr(buf, "closed pool") == NULL);
	ASSERT(strstr(buf, "w2") == NULL);
	ASSERT_EQ((off_t)strlen(buf), printed);
	unsetenv("VRAM_LOG");
}

TEST(bad_arguments_are_einval_with_a_message)
{
	vram_pool *p = (vram_pool *)1;
	void *ptr = (void *)1;
	struct vram_pool_options o = { .size = sizeof(o), .name = "ok" };
	char longname[200];

	integ_start("256M");
	vram_client *c = integ_connect("unit");
	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';

	/* A known message first (the daemon's), so that a call that set none
	 * would leave it. */
#define SENTINEL "no pool named sentinel"
#define EXPECT_EINVAL(call)                                        \
	do {                                                       \
		ASSERT_EQ(vram_pool_drop(c, "sentinel"), -ENOENT); \
		ASSERT_STREQ(vram_last_error(), SENTINEL);         \
		ASSERT_EQ(call, -EINVAL);                          \
		ASSERT(vram_last_error()[0] != '\0');              \
		ASSERT(strcmp(vram_last_error(), SENTINEL) != 0);  \
	} while (0)

	EXPECT_EINVAL(vram_pool_create(c, NULL, &p));
	ASSERT(p == NULL);
	EXPECT_EINVAL(vram_pool_create(c, &o, NULL));
	EXPECT_EINVAL(vram_pool_create(NULL, &o, &p));
	o.name = "";
	EXPECT_EINVAL(vram_pool_create(c, &o, &p));
	o.name = longname;
	EXPECT_EINVAL(vram_pool_create(c, &o, &p));
	o.name = "ok";
	o.tag = longname;
	EXPECT_EINVAL(vram_pool_create(c, &o, &p));
	o.tag = NULL;
	o.policy = (enum vram_policy)7;
	EXPECT_EINVAL(vram_pool_create(c, &o, &p));
	o.policy = VRAM_POLICY_HOST;
	o.flags = 0x80;
	EXPECT_EINVAL(vram_pool_create(c, &o, &p));
	o.flags = 0;
	o.device = 5;
	ASSERT_EQ(vram_pool_create(c, &o, &p), -ENODEV);
	EXPECT_EINVAL(vram_pool_open(c, NULL, 0, &p));
	EXPECT_EINVAL(vram_pool_open(c, "x", 0x10, &p));
	EXPECT_EINVAL(vram_pool_open(c, "x", 0, NULL));
	EXPECT_EINVAL(vram_pool_drop(c, NULL));
	EXPECT_EINVAL(vram_pause(c, NULL, 0, NULL));
	EXPECT_EINVAL(vram_resume(NULL, &(struct vram_selector){ .size = sizeof(struct vram_selector), .all = 1 }, 0,
				  NULL));
	EXPECT_EINVAL(vram_client_dispatch(c, -2));
	EXPECT_EINVAL(vram_client_start_thread(NULL));
	EXPECT_EINVAL(vram_ping(NULL));
	EXPECT_EINVAL(vram_stats(NULL, &(struct vram_stats)VRAM_STATS_INIT));

	o.device = 0;
	p = pool_create(c, "ok", VRAM_POLICY_DISCARD, 256 * MiB);
	EXPECT_EINVAL(vram_alloc(p, 0, &ptr));
	ASSERT(ptr == NULL);
	EXPECT_EINVAL(vram_alloc(p, 1, NULL));
	EXPECT_EINVAL(vram_alloc(NULL, 1, &ptr));
	EXPECT_EINVAL(vram_pool_reserve(NULL, 1));
	EXPECT_EINVAL(vram_pool_pause(NULL, NULL));
	ASSERT_EQ(vram_alloc(p, SIZE_MAX, &ptr), -ENOMEM);
	/* The pool is fine after all that. */
	ASSERT_OK(vram_alloc(p, 1, &ptr));
	vram_client_close(c);
	integ_stop();
}

/* ---- against the scripted fake ------------------------------------- */

TEST(events_for_unknown_pools_are_acked_and_their_fds_closed)
{
	struct fake f;

	fake_init(&f);
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	int base = harness_count_fds(0);
	uint64_t sizes[3] = { 2 * MiB, 2 * MiB, 4 * MiB };
	int fds[3];
	for (int i = 0; i < 3; i++)
		fds[i] = fake_memfd(sizes[i]);
	fake_send_event(&f, 0, VRAM__EVENT_KIND__EVENT_RESUME, 10, 999, true,
			sizes, fds, 3, 0);
	for (int i = 0; i < 3; i++)
		close(fds[i]);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f, f.n_acks == 1);
	ASSERT_EQ(f.last_ack_err, 0);
	ASSERT_EQ(harness_count_fds(0), base);

	fake_send_event(&f, 0, VRAM__EVENT_KIND__EVENT_SAVE, 11, 999, true,
			sizes, NULL, 3, 0);
	fake_send_event(&f, 0, VRAM__EVENT_KIND__EVENT_PAUSE, 12, 999, false,
			NULL, NULL, 0, 0);
	fake_send_event(&f, 0, VRAM__EVENT_KIND__EVENT_GROW, 0, 999, false,
			NULL, NULL, 0, 0);
	fake_send_event(&f, 0, VRAM__EVENT_KIND__EVENT_DROP, 0, 999, false,
			NULL, NULL, 0, 0);
	fake_send_event(&f, 0, 42, 13, 999, false, NULL, NULL, 0,
			0); /* unknown kind */
	FAKE_WAIT(&f, (vram_client_dispatch(c, 10), f.n_acks == 4));
	ASSERT_UEQ(f.last_ack_event, 13);
	ASSERT_EQ(f.last_ack_err, EOPNOTSUPP);
	ASSERT_OK(vram_ping(c)); /* the connection survived all that */
	vram_client_close(c);
	fake_stop(&f);
}

/* The fake's host pool "w" with 4096 bytes allocated at *a, filled from
 * seed, and paused (SAVE, then PAUSE). Returns its id. */
static uint64_t paused_filled_pool(struct fake *f, vram_client *c,
				   vram_pool **p, void **a, unsigned seed)
{
	*p = pool_create(c, "w", VRAM_POLICY_HOST, 256 * MiB);
	ASSERT_OK(vram_alloc(*p, 4096, a));
	fill(*a, 4096, seed);
	uint64_t id = fake_pool_id(f, "w");
	ASSERT_OK(vram_pool_pause(*p, NULL));
	return id;
}

/* A RESUME of pool id with two chunks of 32 MiB, from memfds of 32 MiB
 * and second bytes; more: a restore in parts. */
static void resume_two_chunks(struct fake *f, uint64_t event_id, uint64_t id,
			      uint64_t second, bool more)
{
	uint64_t sizes[2] = { 32 * MiB, 32 * MiB };
	int fds[2] = { fake_memfd(32 * MiB), fake_memfd(second) };
	fake_send_part(f, 0, VRAM__EVENT_KIND__EVENT_RESUME, event_id, id, true,
		       sizes, fds, 2, 0, more, 0);
	close(fds[0]);
	close(fds[1]);
}

/* The last part of a restore in parts after resume_two_chunks: a third
 * chunk of 32 MiB at 64 MiB. */
static void resume_last_chunk(struct fake *f, uint64_t event_id, uint64_t id)
{
	uint64_t size = 32 * MiB;
	int fd = fake_memfd(size);
	fake_send_part(f, 0, VRAM__EVENT_KIND__EVENT_RESUME_MORE, event_id, id,
		       true, &size, &fd, 1, 64 * MiB, false, 0);
	close(fd);
}

TEST(failed_resume_acks_the_error_and_stays_paused)
{
	struct fake f;
	vram_pool *p;
	void *a;

	fake_init(&f);
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	uint64_t id = paused_filled_pool(&f, c, &p, &a, 3);

	/* Two chunks; the second memfd is smaller than it claims: mapping it
	 * fails, and the first must be unmapped again. */
	resume_two_chunks(&f, 50, id, 1 * MiB, false);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f, f.last_ack_event == 50);
	ASSERT_EQ(f.last_ack_err, EINVAL);
	ASSERT(strstr(f.last_ack_msg, "w") != NULL);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_PAUSED);
	ASSERT(!chunk_mapped((uintptr_t)a));

	/* A layout smaller than what is allocated is refused too. */
	uint64_t small = 2 * MiB;
	int sfd = fake_memfd(small);
	fake_send_event(&f, 0, VRAM__EVENT_KIND__EVENT_RESUME, 51, id, true,
			&small, &sfd, 1, 0);
	close(sfd);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f, f.last_ack_event == 51);
	ASSERT_EQ(f.last_ack_err, EPROTO);

	/* A good resume then works, with the content from the backup. */
	ASSERT_OK(vram_pool_resume(p, NULL));
	ASSERT(check(a, 4096, 3));
	vram_client_close(c);
	fake_stop(&f);
}

/* A restore in parts (a RESUME with more set, then RESUME_MORE events of
 * its id): each chunk restored is reported once the next one's copy is
 * issued (so an event's last chunk is reported in the next event), the
 * ack waits for the last part and the content is back; the daemon's word that it could not make
 * the rest unmaps what was mapped and acks its error; a RESUME_MORE of no
 * restore under way is ignored. */
TEST(resume_in_parts_reports_each_chunk_and_acks_the_last)
{
	struct fake f;
	vram_pool *p;
	void *a;

	fake_init(&f);
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	uint64_t id = paused_filled_pool(&f, c, &p, &a, 5);

	/* The rest could not be made. */
	resume_two_chunks(&f, 60, id, 32 * MiB, true);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f,
		  f.last_progress_event == 60 && f.last_progress_restored == 1);
	ASSERT_EQ(f.n_progress, 1u);
	ASSERT(f.last_ack_event != 60);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_PAUSED);
	fake_send_part(&f, 0, VRAM__EVENT_KIND__EVENT_RESUME_MORE, 60, id, true,
		       NULL, NULL, 0, 0, false, ENOMEM);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f, f.last_ack_event == 60);
	ASSERT_EQ(f.last_ack_err, ENOMEM);
	ASSERT(strstr(f.last_ack_msg, "w") != NULL);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_PAUSED);
	ASSERT(!chunk_mapped((uintptr_t)a));

	/* No restore under way: ignored, no ack. */
	unsigned acks = f.n_acks;
	resume_last_chunk(&f, 61, id);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	ASSERT_EQ(f.n_acks, acks);
	ASSERT(!chunk_mapped((uintptr_t)a));

	/* Two parts: the ack comes with the second, the content is back. */
	resume_two_chunks(&f, 62, id, 32 * MiB, true);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f,
		  f.last_progress_event == 62 && f.last_progress_restored == 1);
	ASSERT_EQ(f.n_acks, acks);
	resume_last_chunk(&f, 62, id);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f, f.last_ack_event == 62);
	ASSERT_EQ(f.last_ack_err, 0);
	/* The second chunk reported with the third issued; the last is the
	 * ack. */
	ASSERT_EQ(f.last_progress_restored, 2u);
	ASSERT_EQ(f.n_progress, 3u);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_ACTIVE);
	ASSERT(check(a, 4096, 5));
	ASSERT_UEQ(vram_pool_size(p), 96 * MiB);
	vram_client_close(c);
	fake_stop(&f);
}

/* The restore in parts as a pipeline, on the CUDA half against the fake
 * driver, whose async copies land only when their stream is waited for:
 * an event leaves its last chunk's copy queued (the next chunk's copy is
 * issued before it is waited for), the daemon's failure waits for that
 * copy before it unmaps, and the last part waits for every copy before
 * the ack. No chunk is ever unmapped under a copy. */
/* The fake daemon on the cuda backend, with libvram's CUDA half on the
 * fake driver. */
static vram_client *fake_cuda_connect(struct fake *f)
{
	cuda_fake_load();
	fake_init(f);
	f->backend = "cuda";
	f->uuid = "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"; /* the fake's */
	fake_start(f);
	return fake_connect(f);
}

TEST(restore_in_parts_leaves_a_copy_queued_and_waits_before_unmapping)
{
	struct fake f;
	vram_pool *p;
	void *a;

	vram_client *c = fake_cuda_connect(&f);
	p = pool_create(c, "w", VRAM_POLICY_HOST, 256 * MiB);
	ASSERT_OK(vram_alloc(p, 96 * MiB, &a));
	uintptr_t base = (uintptr_t)a;
	/* Content at the start of each 32 MiB chunk the resume brings. */
	fill(a, 4096, 5);
	for (unsigned k = 1; k < 3; k++)
		*(uint32_t *)(base + k * 32 * MiB) = 0xc0de0000u + k;
	uint64_t id = fake_pool_id(&f, "w");
	ASSERT_OK(vram_pool_pause(p, NULL));

	resume_two_chunks(&f, 60, id, 32 * MiB, true);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f,
		  f.last_progress_event == 60 && f.last_progress_restored == 1);
	ASSERT(check(a, 4096, 5));
	ASSERT_EQ(*(uint32_t *)(base + 32 * MiB), 0u); /* still queued */
	fake_send_part(&f, 0, VRAM__EVENT_KIND__EVENT_RESUME_MORE, 60, id, true,
		       NULL, NULL, 0, 0, false, ENOMEM);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f, f.last_ack_event == 60);
	ASSERT_EQ(f.last_ack_err, ENOMEM);
	ASSERT_EQ(fake_count("busy_unmaps"), 0);
	ASSERT_EQ(fake_count("mapped"), 0);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_PAUSED);

	resume_two_chunks(&f, 62, id, 32 * MiB, true);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f,
		  f.last_progress_event == 62 && f.last_progress_restored == 1);
	resume_last_chunk(&f, 62, id);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f, f.last_ack_event == 62);
	ASSERT_EQ(f.last_ack_err, 0);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_ACTIVE);
	ASSERT(check(a, 4096, 5));
	for (unsigned k = 1; k < 3; k++)
		ASSERT_EQ(*(uint32_t *)(base + k * 32 * MiB), 0xc0de0000u + k);
	ASSERT_EQ(fake_count("busy_unmaps"), 0);
	ASSERT_EQ(fake_count("mapped"), 3);
	vram_client_close(c);
	fake_stop(&f);
}

/* A save in parts on the CUDA half against the fake driver: each chunk is
 * unmapped once its copy is waited for and reported, the last goes with
 * the ack, and no chunk is ever unmapped under a copy. A copy that fails
 * halfway leaves the chunks not reported mapped (the daemon still holds
 * them); a SAVE of those saves the rest, and the backup holds the pool.
 * VRAM_SAVE_IN_PARTS=0 says so in the hello: vramd then sends whole
 * saves (the fake as it does). The fake makes a chunk per grow, of the
 * size asked: three allocations of 64 MiB grow by 64, 64 and 128. */
static const uint64_t sp_size[3] = { 64 * MiB, 64 * MiB, 128 * MiB };
static const uint64_t sp_off[3] = { 0, 64 * MiB, 128 * MiB };

static vram_pool *three_chunks_marked(vram_client *c, uintptr_t *base,
				      unsigned flags)
{
	struct vram_pool_options o = { .size = sizeof(o),
				       .name = "w",
				       .tag = "t",
				       .policy = VRAM_POLICY_HOST,
				       .reserve_bytes = 256 * MiB,
				       .flags = flags };
	vram_pool *p = NULL;
	ASSERT_OK(vram_pool_create(c, &o, &p));
	for (unsigned k = 0; k < 3; k++) {
		void *a;
		ASSERT_OK(vram_alloc(p, 64 * MiB, &a));
		if (k == 0)
			*base = (uintptr_t)a;
	}
	ASSERT_UEQ(vram_pool_size(p), 256 * MiB);
	for (unsigned k = 0; k < 3; k++)
		*(uint32_t *)(*base + sp_off[k]) = 0xc0de0000u + k;
	return p;
}

static void three_chunks_check(uintptr_t base)
{
	for (unsigned k = 0; k < 3; k++)
		ASSERT_EQ(*(uint32_t *)(base + sp_off[k]), 0xc0de0000u + k);
}

/* A SAVE with release of chunks [first, 3), sent by hand. */
static void save_in_parts_send(struct fake *f, uint64_t event_id,
			       uint64_t id, unsigned first)
{
	pthread_mutex_lock(&f->lock);
	f->send_release = true;
	fake_send_event(f, 0, VRAM__EVENT_KIND__EVENT_SAVE, event_id, id, true,
			sp_size + first, NULL, 3 - first, sp_off[first]);
	f->send_release = false;
	pthread_mutex_unlock(&f->lock);
}

TEST(save_in_parts_unmaps_each_chunk_once_saved)
{
	struct fake f;
	uintptr_t base;

	vram_client *c = fake_cuda_connect(&f);
	vram_pool *p = three_chunks_marked(c, &base, 0);
	ASSERT_OK(vram_pool_pause(p, NULL));
	ASSERT_EQ(f.n_progress, 2u);
	ASSERT_EQ(f.last_progress_restored, 2u);
	ASSERT_EQ(fake_count("busy_unmaps"), 0);
	ASSERT_EQ(fake_count("mapped"), 0);
	ASSERT_OK(vram_pool_resume(p, NULL));
	three_chunks_check(base);

	/* The third copy fails: the first chunk went, the others stay. */
	uint64_t id = fake_pool_id(&f, "w");
	unsigned reports = f.n_progress;
	fake_fail_after("cuMemcpyDtoHAsync", CUDA_ERROR_ILLEGAL_ADDRESS, 2);
	save_in_parts_send(&f, 70, id, 0);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f, f.last_ack_event == 70);
	ASSERT_EQ(f.last_ack_err, EIO);
	ASSERT_EQ(f.n_progress, reports + 1);
	ASSERT_EQ(f.last_progress_restored, 1u);
	ASSERT_EQ(fake_count("mapped"), 2);
	ASSERT_EQ(fake_count("busy_unmaps"), 0);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_ACTIVE);

	/* The daemon asks again for what it still holds. */
	save_in_parts_send(&f, 71, id, 1);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f, f.last_ack_event == 71);
	ASSERT_EQ(f.last_ack_err, 0);
	ASSERT_EQ(f.n_progress, reports + 2);
	ASSERT_EQ(f.last_progress_restored, 2u);
	ASSERT_EQ(fake_count("mapped"), 0);
	ASSERT_EQ(fake_count("busy_unmaps"), 0);
	fake_send_event(&f, 0, VRAM__EVENT_KIND__EVENT_PAUSE, 72, id, false,
			NULL, NULL, 0, 0);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f, f.last_ack_event == 72);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_PAUSED);
	/* The backup holds all three: a RESUME of new chunks restores it. */
	int fds[3];
	for (unsigned k = 0; k < 3; k++)
		fds[k] = fake_memfd(sp_size[k]);
	fake_send_part(&f, 0, VRAM__EVENT_KIND__EVENT_RESUME, 73, id, true,
		       sp_size, fds, 3, 0, false, 0);
	for (unsigned k = 0; k < 3; k++)
		close(fds[k]);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f, f.last_ack_event == 73);
	ASSERT_EQ(f.last_ack_err, 0);
	three_chunks_check(base);
	vram_client_close(c);
	fake_stop(&f);

	/* A backup given back after each resume: the save in parts faults
	 * it in again ahead of its parts (mapping_ahead_start), bit for bit. */
	c = fake_cuda_connect(&f);
	p = three_chunks_marked(c, &base, VRAM_POOL_RELEASE_BACKUP);
	for (uint32_t cycle = 0; cycle < 3; cycle++) {
		/* New words each cycle: each save saves what is there now. */
		for (unsigned k = 0; k < 3; k++)
			*(uint32_t *)(base + sp_off[k] + 4) = cycle << 8 | k;
		unsigned before = f.n_progress;
		ASSERT_OK(vram_pool_pause(p, NULL));
		ASSERT_EQ(f.n_progress, before + 2);
		ASSERT_EQ(fake_count("busy_unmaps"), 0);
		ASSERT_OK(vram_pool_resume(p, NULL));
		three_chunks_check(base);
		for (unsigned k = 0; k < 3; k++)
			ASSERT_UEQ(*(uint32_t *)(base + sp_off[k] + 4),
				   cycle << 8 | k);
	}
	vram_client_close(c);
	fake_stop(&f);

	/* Without parts: one whole save, no reports. */
	setenv("VRAM_SAVE_IN_PARTS", "0", 1);
	c = fake_cuda_connect(&f);
	unsetenv("VRAM_SAVE_IN_PARTS");
	p = three_chunks_marked(c, &base, 0);
	ASSERT_OK(vram_pool_pause(p, NULL));
	ASSERT_EQ(f.n_progress, 0u);
	ASSERT_OK(vram_pool_resume(p, NULL));
	three_chunks_check(base);
	vram_client_close(c);
	fake_stop(&f);
}

/* A backup is pinned in slices of 256 MiB, and the driver refuses a copy
 * that spans two: a copy piece setting larger than that still saves and
 * restores a chunk larger than a slice, bit for bit. */
TEST(copy_pieces_larger_than_a_pinned_slice_still_copy)
{
	struct fake f;
	void *a;

	setenv("VRAM_CUDA_COPY_PIECE_MB", "1024", 1);
	vram_client *c = fake_cuda_connect(&f);
	vram_pool *p = pool_create(c, "w", VRAM_POLICY_HOST, 512 * MiB);
	ASSERT_OK(vram_alloc(p, 384 * MiB, &a));
	fill((char *)a + 200 * MiB, 112 * MiB, 9); /* across the first slice */
	ASSERT_OK(vram_pool_pause(p, NULL));
	ASSERT_OK(vram_pool_resume(p, NULL));
	ASSERT(check((char *)a + 200 * MiB, 112 * MiB, 9));
	ASSERT_EQ(fake_count("busy_unmaps"), 0);
	vram_client_close(c);
	fake_stop(&f);
}

/* A SAVE for a pool without a backup here (vramd sends SAVE only for host
 * pools): refused, and nothing is lost. */
TEST(failed_save_keeps_the_pool_active)
{
	struct fake f;
	void *a;

	fake_init(&f);
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	vram_pool *p = pool_create(c, "kv", VRAM_POLICY_DISCARD, 256 * MiB);
	ASSERT_OK(vram_alloc(p, 4096, &a));
	memset(a, 1, 4096);
	uint64_t id = fake_pool_id(&f, "kv");
	fake_send_event(&f, 0, VRAM__EVENT_KIND__EVENT_SAVE, 60, id, true, NULL,
			NULL, 0, 0);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f, f.last_ack_event == 60);
	ASSERT_EQ(f.last_ack_err, ENODEV);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_ACTIVE);
	ASSERT(chunk_mapped((uintptr_t)a));
	ASSERT_EQ(((unsigned char *)a)[10], 1); /* nothing was lost */
	vram_client_close(c);
	fake_stop(&f);
}

/* A SAVE whose layout is larger than what this process maps (a grow it
 * missed) is refused: a partial backup must never be trusted as whole. */
TEST(save_refuses_a_partial_mapping)
{
	struct fake f;
	void *a;

	fake_init(&f);
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	vram_pool *p = pool_create(c, "w", VRAM_POLICY_HOST, 256 * MiB);
	ASSERT_OK(vram_alloc(p, 4 * MiB, &a));
	uint64_t id = fake_pool_id(&f, "w");
	uint64_t mapped = vram_pool_size(p);
	uint64_t sizes[2] = { mapped, 64 * MiB };

	fake_send_event(&f, 0, VRAM__EVENT_KIND__EVENT_SAVE, 95, id, true,
			sizes, NULL, 2, 0);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f, f.n_acks == 1);
	ASSERT_EQ(f.last_ack_err, EIO);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_ACTIVE);
	ASSERT(chunk_mapped((uintptr_t)a));
	/* The right layout saves, and the pool stays mapped and active. */
	fake_send_event(&f, 0, VRAM__EVENT_KIND__EVENT_SAVE, 96, id, true,
			sizes, NULL, 1, 0);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f, f.n_acks == 2);
	ASSERT_EQ(f.last_ack_err, 0);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_ACTIVE);
	ASSERT(chunk_mapped((uintptr_t)a));
	vram_client_close(c);
	fake_stop(&f);
}

/* A PAUSE that asks to save is what vramd sent before its SAVE round: it
 * would save without SAVE's whole-pool check, so it is refused and nothing
 * is unmapped. */
TEST(pause_that_asks_to_save_is_refused)
{
	struct fake f;
	void *a;

	fake_init(&f);
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	vram_pool *p = pool_create(c, "w", VRAM_POLICY_HOST, 256 * MiB);
	ASSERT_OK(vram_alloc(p, 4 * MiB, &a));
	memset(a, 7, 4 * MiB);
	uint64_t id = fake_pool_id(&f, "w");

	fake_send_event(&f, 0, VRAM__EVENT_KIND__EVENT_PAUSE, 97, id, true,
			NULL, NULL, 0, 0);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f, f.last_ack_event == 97);
	ASSERT_EQ(f.last_ack_err, EPROTO);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_ACTIVE);
	ASSERT(chunk_mapped((uintptr_t)a));
	ASSERT_EQ(((unsigned char *)a)[12345], 7);
	vram_client_close(c);
	fake_stop(&f);
}

TEST(a_malformed_frame_ends_the_connection)
{
	struct fake f;
	static const unsigned char junk[] = { 0xff, 0xff, 0xff, 0xff, 0x0f };

	fake_init(&f);
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	ASSERT_OK(fake_send_frame(&f, 0, junk, sizeof(junk), NULL, 0));
	ASSERT_EQ(vram_client_dispatch(c, 5000), -EPIPE);
	ASSERT_EQ(vram_ping(c), -EPIPE);
	vram_client_close(c);
	fake_stop(&f);
}

struct pinger {
	vram_client *c;
	int rounds;
	int failures;
};

static void *pinger_main(void *arg)
{
	struct pinger *pg = arg;
	for (int i = 0; i < pg->rounds; i++)
		if (vram_ping(pg->c) != 0)
			pg->failures++;
	return NULL;
}

/* Eight threads wait at once; the daemon answers in batches of eight,
 * newest first: whoever reads delivers everyone's answer. */
TEST(many_threads_get_their_own_answers)
{
	struct fake f;
	enum { T = 8, ROUNDS = 50 };
	pthread_t t[T];
	struct pinger pg[T];

	fake_init(&f);
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	pthread_mutex_lock(&f.lock);
	f.ping_batch = T;
	pthread_mutex_unlock(&f.lock);
	for (int i = 0; i < T; i++) {
		pg[i] = (struct pinger){ .c = c, .rounds = ROUNDS };
		ASSERT_OK(pthread_create(&t[i], NULL, pinger_main, &pg[i]));
	}
	for (int i = 0; i < T; i++) {
		pthread_join(t[i], NULL);
		ASSERT_EQ(pg[i].failures, 0);
	}
	ASSERT_EQ(f.n_pings, T * ROUNDS);
	vram_client_close(c);
	fake_stop(&f);
}

/* ---- the fake held to vramd ---------------------------------------- */

/* A raw protocol client that records, in a line per message, the events
 * and replies its session gets, acking every event that wants an ack.
 * Pools are named, not numbered, so that two daemons compare. */
struct rec {
	const char *who;
	int sock;
	struct wire_rx rx;
	char log[4096];
	size_t len;
};

struct script {
	struct rec r[2]; /* the owner and requester, and another mapper */
	uint64_t next_id;
	uint64_t pool_id[4];
	const char *pool_name[4];
	unsigned n_pools;
};

static const char *script_pool(struct script *s, uint64_t id)
{
	for (unsigned i = 0; i < s->n_pools; i++)
		if (s->pool_id[i] == id)
			return s->pool_name[i];
	return "?";
}

static void rec_log(struct rec *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void rec_log(struct rec *r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(r->log + r->len, sizeof(r->log) - r->len, fmt, ap);
	va_end(ap);
	ASSERT(n > 0 && (size_t)n < sizeof(r->log) - r->len);
	r->len += (size_t)n;
}

static void rec_send(struct rec *r, Vram__Request *req)
{
	size_t len = vram__request__get_packed_size(req);
	uint8_t *buf = malloc(len ? len : 1);
	ASSERT(buf);
	vram__request__pack(req, buf);
	ASSERT_OK(frame_send(r->sock, buf, len, NULL, 0));
	free(buf);
}

static const char *event_name(int kind)
{
	switch (kind) {
	case VRAM__EVENT_KIND__EVENT_PAUSE:
		return "PAUSE";
	case VRAM__EVENT_KIND__EVENT_RESUME:
		return "RESUME";
	case VRAM__EVENT_KIND__EVENT_GROW:
		return "GROW";
	case VRAM__EVENT_KIND__EVENT_DROP:
		return "DROP";
	case VRAM__EVENT_KIND__EVENT_SAVE:
		return "SAVE";
	}
	return "?";
}

static void rec_event(struct script *s, struct rec *r, const Vram__Event *ev,
		      unsigned nfds)
{
	uint64_t bytes = 0, at = ev->n_chunks ? ev->chunks[0]->offset : 0;
	unsigned with_fd = 0;
	for (size_t i = 0; i < ev->n_chunks; i++) {
		bytes += ev->chunks[i]->size;
		if (ev->chunks[i]->fd_index >= 0)
			with_fd++;
	}
	rec_log(r,
		"%s %s pool=%s backup=%d chunks=%zu at=%lluM bytes=%lluM "
		"fds=%u/%u ack=%s\n",
		r->who, event_name(ev->kind), script_pool(s, ev->pool_id),
		ev->backup, ev->n_chunks, (unsigned long long)(at / MiB),
		(unsigned long long)(bytes / MiB), with_fd, nfds,
		ev->event_id ? "yes" : "no");
	if (!ev->event_id)
		return;
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__EventAck ack = VRAM__EVENT_ACK__INIT;
	ack.event_id = ev->event_id;
	ack.message = (char *)"";
	req.body_case = VRAM__REQUEST__BODY_ACK;
	req.ack = &ack;
	rec_send(r, &req);
}

static void rec_reply(struct rec *r, const Vram__Response *resp, unsigned nfds)
{
	rec_log(r, "%s reply err=%d", r->who, resp->err);
	switch (resp->body_case) {
	case VRAM__RESPONSE__BODY_POOL:
		rec_log(r, " pool chunks=%zu fds=%u backup=%d\n",
			resp->pool->n_chunks, nfds,
			resp->pool->backup_fd_index >= 0);
		break;
	case VRAM__RESPONSE__BODY_GROW:
		rec_log(r, " grow chunks=%zu fds=%u\n", resp->grow->n_chunks,
			nfds);
		break;
	case VRAM__RESPONSE__BODY_TRANSITION:
		rec_log(r, " transition pools=%u bytes=%lluM results=%zu\n",
			resp->transition->pools,
			(unsigned long long)(resp->transition->bytes / MiB),
			resp->transition->n_results);
		break;
	case VRAM__RESPONSE__BODY_HELLO:
		rec_log(r, " hello\n");
		break;
	default:
		rec_log(r, " body=%d\n", (int)resp->body_case);
	}
}

/* Sends req from session who and handles what both sessions get until its
 * reply. Returns the reply's message (vram__server_msg__free_unpacked). */
static Vram__ServerMsg *script_call(struct script *s, int who,
				    Vram__Request *req, bool log)
{
	uint64_t id = ++s->next_id;
	req->id = id;
	rec_send(&s->r[who], req);
	for (;;) {
		struct pollfd pfd[2];
		for (int i = 0; i < 2; i++)
			pfd[i] = (struct pollfd){ .fd = s->r[i].sock,
						  .events = POLLIN };
		int n = poll(pfd, 2, 5000);
		if (n <= 0)
			TEST_FAIL("no reply to request %llu of %s",
				  (unsigned long long)id, s->r[who].who);
		for (int i = 0; i < 2; i++) {
			struct rec *r = &s->r[i];
			struct wire_frame fr;
			int rr;
			if (!pfd[i].revents)
				continue;
			rr = wire_rx_read(&r->rx, r->sock);
			if (rr == -EAGAIN)
				continue;
			if (rr <= 0)
				TEST_FAIL("%s: the daemon hung up (%d)", r->who,
					  rr);
			while ((rr = wire_rx_next(&r->rx, &fr)) == 1) {
				Vram__ServerMsg *m = vram__server_msg__unpack(
					NULL, fr.len, fr.payload);
				ASSERT(m);
				unsigned nfds = fr.nfds;
				wire_frame_clear(&fr);
				if (m->body_case ==
				    VRAM__SERVER_MSG__BODY_EVENT) {
					rec_event(s, r, m->event, nfds);
					vram__server_msg__free_unpacked(m,
									NULL);
					continue;
				}
				ASSERT(m->body_case ==
				       VRAM__SERVER_MSG__BODY_RESPONSE);
				if (i != who || m->response->id != id)
					TEST_FAIL(
						"%s: a reply nobody waits for",
						r->who);
				if (log)
					rec_reply(r, m->response, nfds);
				return m;
			}
			ASSERT_EQ(rr, 0);
		}
	}
}

/* Everything sent to session who so far is handled (a ping's reply comes
 * after it). */
static void script_sync(struct script *s, int who)
{
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__Ping ping = VRAM__PING__INIT;
	req.body_case = VRAM__REQUEST__BODY_PING;
	req.ping = &ping;
	vram__server_msg__free_unpacked(script_call(s, who, &req, false), NULL);
}

static void script_connect(struct script *s, int who, const char *path,
			   const char *name)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct rec *r = &s->r[who];
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	r->who = name;
	r->sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT(r->sock >= 0);
	ASSERT_OK(connect(r->sock, (struct sockaddr *)&sa, sizeof(sa)));
	wire_rx_init(&r->rx);
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__Hello h = VRAM__HELLO__INIT;
	h.version = WIRE_PROTOCOL_VERSION;
	h.name = (char *)name;
	req.body_case = VRAM__REQUEST__BODY_HELLO;
	req.hello = &h;
	Vram__ServerMsg *m = script_call(s, who, &req, true);
	ASSERT_EQ(m->response->err, 0);
	vram__server_msg__free_unpacked(m, NULL);
}

static void script_create(struct script *s, const char *name, int policy)
{
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__PoolCreate pc = VRAM__POOL_CREATE__INIT;
	pc.name = (char *)name;
	pc.tag = (char *)"t";
	pc.policy = policy;
	pc.reserve_bytes = 256 * MiB;
	req.body_case = VRAM__REQUEST__BODY_POOL_CREATE;
	req.pool_create = &pc;
	Vram__ServerMsg *m = script_call(s, 0, &req, true);
	ASSERT_EQ(m->response->body_case, VRAM__RESPONSE__BODY_POOL);
	s->pool_id[s->n_pools] = m->response->pool->info->id;
	s->pool_name[s->n_pools++] = name;
	vram__server_msg__free_unpacked(m, NULL);
}

static uint64_t script_id(struct script *s, const char *name)
{
	for (unsigned i = 0; i < s->n_pools; i++)
		if (strcmp(s->pool_name[i], name) == 0)
			return s->pool_id[i];
	TEST_FAIL("no pool %s in the script", name);
}

static void script_simple(struct script *s, int who, Vram__Request *req)
{
	vram__server_msg__free_unpacked(script_call(s, who, req, true), NULL);
}

static void script_grow(struct script *s, const char *name, uint64_t bytes)
{
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__PoolGrow g = VRAM__POOL_GROW__INIT;
	g.pool_id = script_id(s, name);
	g.bytes = bytes;
	req.body_case = VRAM__REQUEST__BODY_POOL_GROW;
	req.pool_grow = &g;
	script_simple(s, 0, &req);
	script_sync(s, 1);
}

static void script_open(struct script *s, const char *name)
{
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__PoolOpen o = VRAM__POOL_OPEN__INIT;
	o.name = (char *)name;
	o.access = VRAM__ACCESS__ACCESS_RW;
	req.body_case = VRAM__REQUEST__BODY_POOL_OPEN;
	req.pool_open = &o;
	script_simple(s, 1, &req);
}

static void script_transition(struct script *s, const char *name, bool resume)
{
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__Transition t = VRAM__TRANSITION__INIT;
	Vram__Selector sel = VRAM__SELECTOR__INIT;
	sel.name = (char *)name;
	t.selector = &sel;
	req.body_case =
		resume ? VRAM__REQUEST__BODY_RESUME : VRAM__REQUEST__BODY_PAUSE;
	if (resume)
		req.resume = &t;
	else
		req.pause = &t;
	script_simple(s, 0, &req);
	script_sync(s, 1);
}

static void script_drop(struct script *s, const char *name)
{
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__PoolDrop d = VRAM__POOL_DROP__INIT;
	d.name = (char *)name;
	req.body_case = VRAM__REQUEST__BODY_POOL_DROP;
	req.pool_drop = &d;
	script_simple(s, 0, &req);
	script_sync(s, 1);
}

static void script_close(struct script *s, const char *name)
{
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__PoolClose c = VRAM__POOL_CLOSE__INIT;
	c.pool_id = script_id(s, name);
	req.body_case = VRAM__REQUEST__BODY_POOL_CLOSE;
	req.pool_close = &c;
	script_simple(s, 0, &req);
	script_sync(s, 1);
}

/* One script against the daemon at path: the owner A makes a discard pool
 * and a host pool, B maps both, A grows the host pool (GROW to B), pauses
 * both (PAUSE; SAVE to A, then PAUSE), resumes both (RESUME, restoring at
 * A), drops one and closes the other (DROP). */
static void script_run(struct script *s, const char *path)
{
	memset(s, 0, sizeof(*s));
	s->r[0].sock = s->r[1].sock = -1; /* poll() skips them */
	script_connect(s, 0, path, "A");
	script_connect(s, 1, path, "B");
	script_create(s, "kv", VRAM__POLICY__POLICY_DISCARD);
	script_create(s, "w", VRAM__POLICY__POLICY_HOST);
	script_grow(s, "kv", 64 * MiB);
	script_grow(s, "w", 64 * MiB);
	script_open(s, "kv");
	script_open(s, "w");
	script_grow(s, "w", 64 * MiB);
	script_transition(s, "kv", false);
	script_transition(s, "w", false);
	script_transition(s, "kv", true);
	script_transition(s, "w", true);
	script_drop(s, "kv");
	script_close(s, "w");
	for (int i = 0; i < 2; i++) {
		close(s->r[i].sock);
		wire_rx_free(&s->r[i].rx);
	}
}

static void script_compare(const struct script *real, const struct script *fake)
{
	for (int i = 0; i < 2; i++)
		if (strcmp(real->r[i].log, fake->r[i].log) != 0)
			TEST_FAIL("the fake's session %s differs from vramd's\n"
				  "---- vramd ----\n%s---- fake ----\n%s",
				  real->r[i].who, real->r[i].log,
				  fake->r[i].log);
}

TEST(fake_sends_what_vramd_sends)
{
	static struct script real, scripted;
	struct fake f;

	integ_start("256M");
	script_run(&real, integ_daemon.socket);
	integ_stop();
	/* What the review found drifting: a host pool's pause is SAVE to the
	 * saver alone, then PAUSE without backup to every mapper. */
	ASSERT(strstr(real.r[0].log,
		      "A SAVE pool=w backup=1 chunks=2 at=0M bytes=128M fds=0/0 ack=yes\n"
		      "A PAUSE pool=w backup=0 chunks=0 at=0M bytes=0M fds=0/0 ack=yes\n"
		      "A reply err=0 transition pools=1 bytes=128M") != NULL);
	ASSERT(strstr(real.r[1].log, "B SAVE") == NULL);
	ASSERT(strstr(real.r[1].log, "B GROW pool=w") != NULL);

	fake_init(&f);
	fake_start(&f);
	script_run(&scripted, f.path);
	fake_stop(&f);
	script_compare(&real, &scripted);
}
