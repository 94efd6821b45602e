/* libvram against a fake vramd (client_fake.h): pause and resume events
 * (own and third-party, through a waiting call, dispatch and the event
 * thread), backups, grow and drop events, events for unknown pools,
 * failures, growth of a pool by vram_alloc, concurrency of callers,
 * inspection and argument checks. */
#include <poll.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "client_fake.h"

#define MiB FAKE_MiB

static vram_pool *pool_create(vram_client *c, const char *name, int policy,
			      uint64_t reserve)
{
	struct vram_pool_options o = {
		.size = sizeof(o),
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

/* The /proc/self/maps line that covers addr, "" if none. */
static const char *maps_line(uintptr_t addr)
{
	static char line[512];
	FILE *m = fopen("/proc/self/maps", "r");
	ASSERT(m);
	while (fgets(line, sizeof(line), m)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && lo <= addr &&
		    addr < hi) {
			fclose(m);
			return line;
		}
	}
	fclose(m);
	line[0] = '\0';
	return line;
}

static bool chunk_mapped(uintptr_t addr)
{
	return strstr(maps_line(addr), "fake-chunk") != NULL;
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

/* A pool index of the fake by name (under its lock). */
static struct fake_pool *fpool(struct fake *f, const char *name)
{
	int i = fake_pool_find(f, 0, name);
	ASSERT(i >= 0);
	return &f->pools[i];
}

TEST(own_pause_saves_the_backup_resume_restores_at_the_same_address)
{
	struct fake f;
	struct vram_report rep = VRAM_REPORT_INIT;
	void *a;

	fake_init(&f);
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	vram_pool *p = pool_create(c, "w", VRAM_POLICY_HOST, 256 * MiB);
	ASSERT_OK(vram_alloc(p, 8 * MiB, &a));
	uintptr_t base = vram_pool_base(p);
	ASSERT_EQ((uintptr_t)a, base);
	ASSERT_EQ(base % (2 * MiB), 0);
	fill(a, 8 * MiB, 5);

	/* The PAUSE event for our own pool is handled inside the call. */
	ASSERT_OK(vram_pool_pause(p, &rep));
	ASSERT_EQ(rep.pools, 1);
	ASSERT_EQ(rep.failed, 0);
	ASSERT_UEQ(rep.bytes, 64 * MiB);
	ASSERT_UEQ(rep.free_after - rep.free_before, 64 * MiB);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_PAUSED);
	ASSERT_UEQ(vram_pool_size(p), 64 * MiB); /* kept while paused */
	ASSERT(!chunk_mapped(base));
	ASSERT(maps_line(base)[0] != '\0'); /* still reserved */
	/* The content went into the daemon's backup. */
	uint32_t word;
	ASSERT_EQ(pread(fpool(&f, "w")->backup_fd, &word, 4, 400), 4);
	ASSERT_EQ(word, 5 * 2654435761u + 100);
	ASSERT_EQ(f.last_ack_err, 0);
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
	fake_stop(&f);
}

TEST(discard_pause_drops_the_content)
{
	struct fake f;
	void *a;

	fake_init(&f);
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	vram_pool *p = pool_create(c, "kv", VRAM_POLICY_DISCARD, 256 * MiB);
	ASSERT_OK(vram_alloc(p, 1 * MiB, &a));
	memset(a, 0xee, 1 * MiB);
	ASSERT_OK(vram_pool_pause(p, NULL));
	ASSERT(!chunk_mapped((uintptr_t)a));
	ASSERT_OK(vram_pool_resume(p, NULL));
	ASSERT_EQ(((unsigned char *)a)[1000], 0); /* fresh memory */
	vram_client_close(c);
	fake_stop(&f);
}

/* Another process pauses our pool: the event arrives while we do nothing;
 * the program polls the fd and dispatches. */
TEST(third_party_pause_and_resume_through_dispatch)
{
	struct fake f;
	void *a;

	fake_init(&f);
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	vram_pool *p = pool_create(c, "w", VRAM_POLICY_HOST, 256 * MiB);
	ASSERT_OK(vram_alloc(p, 4 * MiB, &a));
	fill(a, 4 * MiB, 9);
	uint64_t id = fpool(&f, "w")->id;

	ASSERT_EQ(vram_client_dispatch(c, 0), 0);
	ASSERT_EQ(vram_client_dispatch(c, 30), 0); /* waits, nothing comes */
	fake_send_event(&f, VRAM__EVENT_KIND__EVENT_PAUSE, 77, id, true, NULL,
			NULL, 0, 0);
	struct pollfd pfd = { .fd = vram_client_fd(c), .events = POLLIN };
	ASSERT_EQ(poll(&pfd, 1, 5000), 1);
	ASSERT_EQ(vram_client_dispatch(c, 0), 1);
	FAKE_WAIT(&f, f.n_acks == 1);
	ASSERT_UEQ(f.last_ack_event, 77);
	ASSERT_EQ(f.last_ack_err, 0);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_PAUSED);
	ASSERT(!chunk_mapped((uintptr_t)a));

	uint64_t size = 64 * MiB;
	int fd = fake_memfd(size);
	fake_send_event(&f, VRAM__EVENT_KIND__EVENT_RESUME, 78, id, true, &size,
			&fd, 1, 0);
	close(fd); /* the client holds the only reference now */
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f, f.n_acks == 2);
	ASSERT_EQ(f.last_ack_err, 0);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_ACTIVE);
	ASSERT(check(a, 4 * MiB, 9));
	vram_client_close(c);
	fake_stop(&f);
}

TEST(event_thread_handles_a_third_party_pause)
{
	struct fake f;
	void *a;

	fake_init(&f);
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	vram_pool *p = pool_create(c, "kv", VRAM_POLICY_DISCARD, 256 * MiB);
	ASSERT_OK(vram_alloc(p, 4096, &a));
	ASSERT_OK(vram_client_start_thread(c));
	fake_send_event(&f, VRAM__EVENT_KIND__EVENT_PAUSE, 5,
			fpool(&f, "kv")->id, false, NULL, NULL, 0, 0);
	FAKE_WAIT(&f, f.n_acks == 1);
	ASSERT_EQ(f.last_ack_err, 0);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_PAUSED);
	/* Calls still work with the thread reading. */
	ASSERT_OK(vram_ping(c));
	vram_client_close(c);
	fake_stop(&f);
}

TEST(events_for_unknown_pools_are_acked_and_their_fds_closed)
{
	struct fake f;

	fake_init(&f);
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	int base = fake_count_fds();
	uint64_t sizes[3] = { 2 * MiB, 2 * MiB, 4 * MiB };
	int fds[3];
	for (int i = 0; i < 3; i++)
		fds[i] = fake_memfd(sizes[i]);
	fake_send_event(&f, VRAM__EVENT_KIND__EVENT_RESUME, 10, 999, true,
			sizes, fds, 3, 0);
	for (int i = 0; i < 3; i++)
		close(fds[i]);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f, f.n_acks == 1);
	ASSERT_EQ(f.last_ack_err, 0);
	ASSERT_EQ(fake_count_fds(), base);

	fake_send_event(&f, VRAM__EVENT_KIND__EVENT_PAUSE, 11, 999, true, NULL,
			NULL, 0, 0);
	fake_send_event(&f, VRAM__EVENT_KIND__EVENT_GROW, 0, 999, false, NULL,
			NULL, 0, 0);
	fake_send_event(&f, VRAM__EVENT_KIND__EVENT_DROP, 0, 999, false, NULL,
			NULL, 0, 0);
	fake_send_event(&f, 42, 12, 999, false, NULL, NULL, 0,
			0); /* unknown kind */
	FAKE_WAIT(&f, (vram_client_dispatch(c, 10), f.n_acks == 3));
	ASSERT_UEQ(f.last_ack_event, 12);
	ASSERT_EQ(f.last_ack_err, EOPNOTSUPP);
	ASSERT_OK(vram_ping(c)); /* the connection survived all that */
	vram_client_close(c);
	fake_stop(&f);
}

TEST(failed_resume_acks_the_error_and_stays_paused)
{
	struct fake f;
	void *a;

	fake_init(&f);
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	vram_pool *p = pool_create(c, "w", VRAM_POLICY_HOST, 256 * MiB);
	ASSERT_OK(vram_alloc(p, 4096, &a));
	fill(a, 4096, 3);
	uint64_t id = fpool(&f, "w")->id;
	ASSERT_OK(vram_pool_pause(p, NULL));

	/* Two chunks; the second memfd is smaller than it claims: mapping it
	 * fails, and the first must be unmapped again. */
	uint64_t sizes[2] = { 32 * MiB, 32 * MiB };
	int fds[2] = { fake_memfd(32 * MiB), fake_memfd(1 * MiB) };
	fake_send_event(&f, VRAM__EVENT_KIND__EVENT_RESUME, 50, id, true, sizes,
			fds, 2, 0);
	close(fds[0]);
	close(fds[1]);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f, f.last_ack_event == 50);
	ASSERT_EQ(f.last_ack_err, EINVAL);
	ASSERT(strstr(f.last_ack_msg, "w") != NULL);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_PAUSED);
	ASSERT(!chunk_mapped((uintptr_t)a));

	/* A layout smaller than what is allocated is refused too. */
	uint64_t small = 2 * MiB;
	int sfd = fake_memfd(small);
	fake_send_event(&f, VRAM__EVENT_KIND__EVENT_RESUME, 51, id, true,
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

TEST(failed_save_keeps_the_pool_active)
{
	struct fake f;
	void *a;

	fake_init(&f);
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	/* Discard policy: no backup mapped; a PAUSE asking to save cannot. */
	vram_pool *p = pool_create(c, "kv", VRAM_POLICY_DISCARD, 256 * MiB);
	ASSERT_OK(vram_alloc(p, 4096, &a));
	memset(a, 1, 4096);
	fake_send_event(&f, VRAM__EVENT_KIND__EVENT_PAUSE, 60,
			fpool(&f, "kv")->id, true, NULL, NULL, 0, 0);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f, f.last_ack_event == 60);
	ASSERT_EQ(f.last_ack_err, ENODEV);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_ACTIVE);
	ASSERT_EQ(((unsigned char *)a)[10], 1); /* nothing was lost */
	vram_client_close(c);
	fake_stop(&f);
}

TEST(open_maps_the_chunks_and_grow_events_add_more)
{
	struct fake f;
	void *ptr;

	fake_init(&f);
	fake_pool_add(&f, "shared", VRAM__POLICY__POLICY_DISCARD, 2, 4 * MiB,
		      0xab);
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	vram_pool *p;
	ASSERT_EQ(vram_pool_open(c, "nope", 0, &p), -ENOENT);
	ASSERT_OK(vram_pool_open(c, "shared", 0, &p));
	vram_pool *again = (vram_pool *)1;
	ASSERT_EQ(vram_pool_open(c, "shared", 0, &again), -EALREADY);
	ASSERT(again == NULL);
	const unsigned char *b = (const unsigned char *)vram_pool_base(p);
	ASSERT_UEQ(vram_pool_size(p), 8 * MiB);
	ASSERT_EQ(b[0], 0xab);
	ASSERT_EQ(b[8 * MiB - 1], 0xab);
	/* Not ours to sub-allocate or grow. */
	ASSERT_EQ(vram_alloc(p, 256, &ptr), -EPERM);
	ASSERT_EQ(vram_pool_reserve(p, 16 * MiB), -EPERM);
	ASSERT_EQ(vram_free(p, (void *)b), -EINVAL);

	uint64_t size = 4 * MiB;
	int fd = fake_memfd(size);
	ASSERT_EQ(pwrite(fd, "\xcd", 1, 0), 1);
	fake_send_event(&f, VRAM__EVENT_KIND__EVENT_GROW, 0,
			fpool(&f, "shared")->id, false, &size, &fd, 1, 8 * MiB);
	close(fd);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	ASSERT_UEQ(vram_pool_size(p), 12 * MiB);
	ASSERT_EQ(b[8 * MiB], 0xcd);
	vram_pool_close(p);
	ASSERT_OK(vram_ping(c));
	ASSERT_EQ(f.n_closes, 1);
	vram_client_close(c);
	fake_stop(&f);
}

TEST(readonly_open_maps_read_only)
{
	struct fake f;
	vram_pool *p;

	fake_init(&f);
	fake_pool_add(&f, "w", VRAM__POLICY__POLICY_HOST, 1, 4 * MiB, 0x42);
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	ASSERT_OK(vram_pool_open(c, "w", VRAM_OPEN_READONLY, &p));
	uintptr_t b = vram_pool_base(p);
	ASSERT_EQ(*(const unsigned char *)b, 0x42);
	const char *line = maps_line(b);
	ASSERT(strstr(line, " r--s ") != NULL);
	vram_client_close(c);
	fake_stop(&f);
}

TEST(reopened_persistent_pool_keeps_its_content_and_allocates_after_it)
{
	struct fake f;
	vram_pool *p;
	void *ptr;

	fake_init(&f);
	int i = fake_pool_add(&f, "keep", VRAM__POLICY__POLICY_HOST, 2, 4 * MiB,
			      0x11);
	f.pools[i].flags = VRAM_POOL_PERSIST;
	f.pools[i].owner_pid = (uint32_t)getpid(); /* we took it over */
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	ASSERT_OK(vram_pool_open(c, "keep", 0, &p));
	uintptr_t b = vram_pool_base(p);
	ASSERT_OK(vram_alloc(p, 4096, &ptr));
	ASSERT_GE((uintptr_t)ptr, b + 8 * MiB);
	ASSERT_EQ(*(unsigned char *)(b + 8 * MiB - 1), 0x11);
	vram_client_close(c);
	fake_stop(&f);
}

TEST(drop_makes_the_pool_gone)
{
	struct fake f;
	void *a;
	struct vram_report rep = VRAM_REPORT_INIT;

	fake_init(&f);
	fake_start(&f);
	vram_client *c = fake_connect(&f);
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
	ASSERT_EQ(f.n_closes, 0); /* nothing to close at the daemon */
	vram_client_close(c);
	fake_stop(&f);
}

TEST(alloc_grows_geometrically_and_stops_at_the_range)
{
	struct fake f;
	void *a, *b, *x;

	fake_init(&f);
	f.chunk_max = 64 * MiB;
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	vram_pool *p = pool_create(c, "w", VRAM_POLICY_DISCARD, 512 * MiB);
	ASSERT_UEQ(vram_pool_size(p), 0); /* nothing until the first alloc */
	ASSERT_OK(vram_alloc(p, 1, &a));
	ASSERT_EQ(f.n_grows, 1);
	ASSERT_UEQ(f.grow_bytes[0], 64 * MiB);
	ASSERT_OK(vram_alloc(p, 64 * MiB - 256, &b)); /* fills it exactly */
	ASSERT_EQ(f.n_grows, 1);
	ASSERT_OK(vram_alloc(p, 1, &x));
	ASSERT_EQ(f.n_grows, 2);
	ASSERT_UEQ(f.grow_bytes[1], 64 * MiB); /* the pool's size */
	ASSERT_OK(vram_alloc(p, 100 * MiB, &x));
	ASSERT_EQ(f.n_grows, 3);
	ASSERT_UEQ(f.grow_bytes[2], 128 * MiB); /* the size again: 128 */
	ASSERT_UEQ(vram_pool_size(p), 256 * MiB);
	ASSERT_EQ((uintptr_t)x % 256, 0);
	memset(x, 1, 100 * MiB);
	/* Never past the range: what fits is granted... */
	ASSERT_OK(vram_alloc(p, 200 * MiB, &x));
	ASSERT_UEQ(vram_pool_size(p), 512 * MiB);
	/* ...and what does not is -ENOMEM without asking the daemon
	 * (148 MiB are free at the end, the range is all used). */
	unsigned grows = f.n_grows;
	ASSERT_EQ(vram_alloc(p, 200 * MiB, &x), -ENOMEM);
	ASSERT(strstr(vram_last_error(), "w") != NULL);
	ASSERT_EQ(f.n_grows, grows);
	ASSERT_EQ(vram_pool_reserve(p, 600 * MiB), -ENOMEM);
	ASSERT_OK(vram_pool_reserve(p, 512 * MiB));
	ASSERT_OK(vram_free(p, b));
	ASSERT_EQ(vram_free(p, b), -EINVAL);
	ASSERT_EQ(vram_free(p, (char *)a + 256), -EINVAL);
	ASSERT_EQ(vram_free(p, &f), -EINVAL);
	ASSERT(strstr(vram_last_error(), "not allocated") != NULL);
	ASSERT_OK(vram_alloc(p, 32 * MiB, &x)); /* reuses b's room */
	ASSERT_EQ(f.n_grows, grows);
	vram_client_close(c);
	fake_stop(&f);
}

TEST(reserve_grows_up_front_and_daemon_errors_come_back)
{
	struct fake f;
	void *x;

	fake_init(&f);
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	vram_pool *p = pool_create(c, "w", VRAM_POLICY_DISCARD, 1024 * MiB);
	ASSERT_OK(vram_pool_reserve(p, 300 * MiB));
	ASSERT_EQ(f.n_grows, 1);
	ASSERT_UEQ(f.grow_bytes[0], 300 * MiB);
	ASSERT_UEQ(vram_pool_size(p), 300 * MiB);
	ASSERT_OK(vram_pool_reserve(p, 100 * MiB)); /* already */
	ASSERT_EQ(f.n_grows, 1);
	pthread_mutex_lock(&f.lock);
	f.grow_err = ENOMEM;
	pthread_mutex_unlock(&f.lock);
	ASSERT_OK(vram_alloc(p, 300 * MiB, &x)); /* fits without growing */
	ASSERT_EQ(vram_alloc(p, 1, &x), -ENOMEM);
	ASSERT(strstr(vram_last_error(), "refused by the test") != NULL);
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
	f.ping_batch = T;
	fake_start(&f);
	vram_client *c = fake_connect(&f);
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
	struct fake f;
	enum { T = 8 };
	pthread_t t[T];
	struct allocer al[T];

	fake_init(&f);
	f.chunk_max = 64 * MiB;
	fake_start(&f);
	vram_client *c = fake_connect(&f);
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
	/* Concurrent growers waited for each other instead of each asking. */
	ASSERT_LE(f.n_grows, 3);
	vram_client_close(c);
	fake_stop(&f);
}

TEST(list_and_stats_convert_everything)
{
	struct fake f;
	struct vram_pool_info *infos = (void *)1;
	size_t n = 99;
	struct vram_stats st = VRAM_STATS_INIT;

	fake_init(&f);
	fake_pool_add(&f, "a", VRAM__POLICY__POLICY_HOST, 2, 2 * MiB, 0);
	fake_pool_add(&f, "b", VRAM__POLICY__POLICY_DISCARD, 0, 0, 0);
	f.pools[1].state = VRAM__STATE__STATE_PAUSED;
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	ASSERT_OK(
		vram_list(c, NULL, sizeof(struct vram_pool_info), &infos, &n));
	ASSERT_EQ(n, 2);
	ASSERT_STREQ(infos[0].name, "a");
	ASSERT_STREQ(infos[0].tag, "t");
	ASSERT_EQ(infos[0].policy, VRAM_POLICY_HOST);
	ASSERT_EQ(infos[0].state, VRAM_STATE_ACTIVE);
	ASSERT_UEQ(infos[0].bytes, 4 * MiB);
	ASSERT_EQ(infos[0].chunks, 2);
	ASSERT_EQ(infos[0].owner_pid, 1);
	ASSERT_EQ(infos[0].n_mappers, 2);
	ASSERT_EQ(infos[0].mappers[1].pid, 4242);
	ASSERT_EQ(infos[0].mappers[1].readonly, 1);
	ASSERT_STREQ(infos[0].mappers[1].name, "someone");
	ASSERT_STREQ(infos[1].name, "b");
	ASSERT_EQ(infos[1].state, VRAM_STATE_PAUSED);
	ASSERT_STREQ(vram_state_name(infos[1].state), "paused");
	ASSERT_STREQ(vram_policy_name(infos[0].policy), "host");
	vram_pool_info_free(infos, n);
	vram_pool_info_free(NULL, 0);
	struct vram_selector all = { .size = sizeof(all), .all = 1 };
	ASSERT_OK(
		vram_list(c, &all, sizeof(struct vram_pool_info), &infos, &n));
	vram_pool_info_free(infos, n);
	ASSERT_EQ(vram_list(c, NULL, sizeof(struct vram_pool_info), NULL, &n),
		  -EINVAL);
	ASSERT_EQ(
		vram_list(c, NULL, sizeof(struct vram_pool_info), &infos, NULL),
		-EINVAL);

	ASSERT_OK(vram_stats(c, &st));
	ASSERT_STREQ(st.backend, "host");
	ASSERT_STREQ(st.daemon_version, "fake-1");
	ASSERT_EQ(st.sessions, 3);
	ASSERT_EQ(st.pools, 2);
	ASSERT_UEQ(st.used_bytes, 12345);
	ASSERT_EQ(st.open_fds, 17);
	ASSERT_EQ(st.n_devices, 1);
	ASSERT_STREQ(st.devices[0].uuid, "fake-0");
	ASSERT_UEQ(st.devices[0].granularity, 2 * MiB);
	ASSERT_EQ(vram_stats(c, NULL), -EINVAL);
	vram_client_close(c);
	fake_stop(&f);
}

TEST(a_failed_transition_names_the_late_pids)
{
	struct fake f;
	struct vram_report rep = VRAM_REPORT_INIT;
	struct vram_selector sel = { .size = sizeof(sel), .name = "w" };

	fake_init(&f);
	f.transition_err = ETIMEDOUT;
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	ASSERT_EQ(vram_pause(c, &sel, 100, &rep), -ETIMEDOUT);
	ASSERT_EQ(rep.failed, 1);
	ASSERT_EQ(rep.pools, 0);
	ASSERT_UEQ(rep.free_before, 5);
	ASSERT(strstr(vram_last_error(), "111") != NULL);
	ASSERT(strstr(vram_last_error(), "222") != NULL);
	pthread_mutex_lock(&f.lock);
	f.transition_err = 0;
	pthread_mutex_unlock(&f.lock);
	/* With the daemon's own message, that is what the caller sees. */
	ASSERT_EQ(vram_resume(c, &sel, 0, &rep), -ENOENT);
	ASSERT_STREQ(vram_last_error(), "no pool matched");
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
	pthread_mutex_lock(&f.send_lock);
	ASSERT_OK(sock_send(f.sock, junk, sizeof(junk), NULL, 0));
	pthread_mutex_unlock(&f.send_lock);
	ASSERT_EQ(vram_client_dispatch(c, 5000), -EPIPE);
	ASSERT_EQ(vram_ping(c), -EPIPE);
	vram_client_close(c);
	fake_stop(&f);
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
	struct fake f;

	fake_init(&f);
	fake_start(&f);
	vram_set_log_handler(log_fn, VRAM_LOG_DEBUG, &log_count);
	vram_client *c = fake_connect(&f);
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
	fake_stop(&f);
	ASSERT_STREQ(vram_version(), VRAM_VERSION_STRING);
	ASSERT_EQ(vram_version_number(), VRAM_VERSION_NUMBER);
	ASSERT_STREQ(vram_state_name((enum vram_state)9), "unknown");
}

TEST(bad_arguments_are_einval_with_a_message)
{
	struct fake f;
	vram_pool *p = (vram_pool *)1;
	void *ptr = (void *)1;
	struct vram_pool_options o = { .size = sizeof(o), .name = "ok" };
	char longname[200];

	fake_init(&f);
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';

#define EXPECT_EINVAL(call)                           \
	do {                                          \
		error_restore("");                    \
		ASSERT_EQ(call, -EINVAL);             \
		ASSERT(vram_last_error()[0] != '\0'); \
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
	EXPECT_EINVAL(vram_resume(
		NULL,
		&(struct vram_selector){ .size = sizeof(struct vram_selector),
					 .all = 1 },
		0, NULL));
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
	fake_stop(&f);
}

/* The first round of a host pause: SAVE copies the pool into its backup
 * and keeps it mapped; the PAUSE that follows only unmaps; the RESUME that
 * restores brings back what SAVE saw. */
TEST(save_then_pause_then_restore)
{
	struct fake f;
	void *a;

	fake_init(&f);
	fake_start(&f);
	vram_client *c = fake_connect(&f);
	vram_pool *p = pool_create(c, "w", VRAM_POLICY_HOST, 256 * MiB);
	ASSERT_OK(vram_alloc(p, 4 * MiB, &a));
	fill(a, 4 * MiB, 5);
	uint64_t id = fpool(&f, "w")->id;

	fake_send_event(&f, VRAM__EVENT_KIND__EVENT_SAVE, 90, id, true, NULL,
			NULL, 0, 0);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f, f.n_acks == 1);
	ASSERT_UEQ(f.last_ack_event, 90);
	ASSERT_EQ(f.last_ack_err, 0);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_ACTIVE);
	ASSERT(chunk_mapped((uintptr_t)a));
	fill(a, 4 * MiB, 6); /* after the save: not kept */

	fake_send_event(&f, VRAM__EVENT_KIND__EVENT_PAUSE, 91, id, false, NULL,
			NULL, 0, 0);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f, f.n_acks == 2);
	ASSERT_EQ(f.last_ack_err, 0);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_PAUSED);
	ASSERT(!chunk_mapped((uintptr_t)a));

	uint64_t size = 64 * MiB;
	int fd = fake_memfd(size);
	fake_send_event(&f, VRAM__EVENT_KIND__EVENT_RESUME, 92, id, true, &size,
			&fd, 1, 0);
	close(fd);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f, f.n_acks == 3);
	ASSERT_EQ(f.last_ack_err, 0);
	ASSERT(check(a, 4 * MiB, 5));
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
	uint64_t id = fpool(&f, "w")->id;
	uint64_t mapped = vram_pool_size(p);
	uint64_t sizes[2] = { mapped, 64 * MiB };

	fake_send_event(&f, VRAM__EVENT_KIND__EVENT_SAVE, 95, id, true, sizes,
			NULL, 2, 0);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f, f.n_acks == 1);
	ASSERT_EQ(f.last_ack_err, EIO);
	ASSERT_EQ(vram_pool_state(p), VRAM_STATE_ACTIVE);
	ASSERT(chunk_mapped((uintptr_t)a));
	/* The right layout saves. */
	fake_send_event(&f, VRAM__EVENT_KIND__EVENT_SAVE, 96, id, true, sizes,
			NULL, 1, 0);
	ASSERT_EQ(vram_client_dispatch(c, 5000), 1);
	FAKE_WAIT(&f, f.n_acks == 2);
	ASSERT_EQ(f.last_ack_err, 0);
	vram_client_close(c);
	fake_stop(&f);
}
