/* SPDX-License-Identifier: Apache-2.0 */
/* A give-back's thread and this process's mapping work (mapping.c's
 * gate): the thread unpins the backup's slices only while no map, unmap
 * or copy of any pool is under way, so a resume of another pool does not
 * queue in the driver behind the unpin (docs/gpu.md, "Host backups").
 * Against a stand-in backend whose map blocks until the test lets it go
 * and which records each host_unregister with whether a map was under
 * way then. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "mapping.h"
#include "test.h"
#include "vmm.h"

#define MiB (1ull << 20)

static struct {
	atomic_int in_map; /* a map is under way */
	atomic_int
		map_gate_fd; /* read end the blocking map waits on, -1: none */
	atomic_int registers, unregisters, unregisters_in_map;
	/* The save's order: 'r' per register, 'c' per copy, when logging. */
	atomic_int logging;
	char events[64];
	atomic_int n_events;
	/* Registers of a range some page of which was not resident. */
	atomic_int registers_unpopulated;
} rec;

static void rec_event(char e)
{
	int i = atomic_fetch_add(&rec.n_events, 1);
	if (i < (int)sizeof(rec.events) - 1)
		rec.events[i] = e;
}

/* Whether every page of [p, p + len) is in memory. */
static int range_resident(void *p, size_t len)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t n = (len + (size_t)page - 1) / (size_t)page;
	unsigned char *vec = malloc(n);
	int all = vec && mincore(p, len, vec) == 0;
	for (size_t i = 0; all && i < n; i++)
		all = vec[i] & 1;
	free(vec);
	return all;
}

/* Whether the first and last byte of every 64 MiB of [p, p + size) are
 * byte. */
static int range_holds(const uint8_t *p, uint64_t size, uint8_t byte)
{
	for (uint64_t off = 0; off < size; off += 64 * MiB)
		if (p[off] != byte || p[off + 64 * MiB - 1] != byte)
			return 0;
	return 1;
}

static int fake_reserve(struct vmm *v, unsigned dev, uint64_t size,
			uint64_t align, uintptr_t *addr)
{
	(void)v, (void)dev, (void)align;
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -ENOMEM;
	*addr = (uintptr_t)p;
	return 0;
}

static int fake_unreserve(struct vmm *v, uintptr_t addr, uint64_t size)
{
	(void)v;
	return munmap((void *)addr, size) < 0 ? -errno : 0;
}

static int fake_map(struct vmm *v, unsigned dev, uintptr_t addr, uint64_t size,
		    int fd, int readonly, uintptr_t *handle)
{
	(void)v, (void)dev, (void)addr, (void)size, (void)fd, (void)readonly;
	atomic_store(&rec.in_map, 1);
	int gate = atomic_load(&rec.map_gate_fd);
	char c;
	if (gate >= 0 && read(gate, &c, 1) != 1)
		return -EIO;
	atomic_store(&rec.in_map, 0);
	*handle = 1;
	return 0;
}

static int fake_unmap(struct vmm *v, unsigned dev, uintptr_t addr,
		      uint64_t size, uintptr_t handle)
{
	(void)v, (void)dev, (void)addr, (void)size, (void)handle;
	return 0;
}

static int fake_register(struct vmm *v, void *host, size_t len)
{
	(void)v;
	atomic_fetch_add(&rec.registers, 1);
	if (!range_resident(host, len))
		atomic_fetch_add(&rec.registers_unpopulated, 1);
	if (atomic_load(&rec.logging))
		rec_event('r');
	return 0;
}

static int fake_unregister(struct vmm *v, void *host, size_t len)
{
	(void)v, (void)host, (void)len;
	atomic_fetch_add(&rec.unregisters, 1);
	if (atomic_load(&rec.in_map))
		atomic_fetch_add(&rec.unregisters_in_map, 1);
	return 0;
}

/* The pool's "device memory" is the reserved range itself (read-write
 * here), so a copy is the host backend's: a memcpy between it and the
 * backup. */
static int fake_copy(struct vmm *v, unsigned dev, int to_host,
		     const struct vmm_span *spans, size_t n)
{
	static struct vmm *host;

	(void)v;
	if (atomic_load(&rec.logging))
		rec_event('c');
	if (!host && vmm_host_open(&host) < 0)
		return -ENOMEM;
	return host->ops->copy(host, dev, to_host, spans, n);
}

static const struct vmm_ops fake_ops = {
	.name = "gate-fake",
	.reserve = fake_reserve,
	.unreserve = fake_unreserve,
	.map = fake_map,
	.unmap = fake_unmap,
	.host_register = fake_register,
	.host_unregister = fake_unregister,
	.host_pins = true,
	.copy = fake_copy,
};

/* m: a pool of size bytes in the chunks d (one chunk of size if d is
 * NULL), with a host backup memfd, pinned at each copy (retain: from the
 * start, and kept). */
static void backup_mapping_make(struct mapping *m, struct vmm *v, uint64_t size,
				int retain, const struct mapping_desc *d,
				size_t n)
{
	struct mapping_desc one = { .offset = 0, .size = size, .fd = -1 };

	mapping_init(m, v, 0, 0);
	ASSERT(mapping_reserve(m, size, 2 * MiB) == 0);
	int fd = memfd_create("gate-test", MFD_CLOEXEC);
	ASSERT(fd >= 0);
	ASSERT(ftruncate(fd, (off_t)size) == 0);
	m->backup_pin = 1;
	m->backup_retain = retain;
	ASSERT(mapping_backup_map(m, fd) == 0);
	close(fd);
	ASSERT(mapping_append(m, d ? d : &one, d ? n : 1, 1) == 0);
}

struct appender {
	struct mapping *m;
	struct mapping_desc d;
	int r;
};

static void *append_run(void *arg)
{
	struct appender *a = arg;
	a->r = mapping_append(a->m, &a->d, 1, 1);
	return NULL;
}

TEST(a_give_back_unpins_only_while_no_pool_is_being_mapped)
{
	struct vmm v = { .ops = &fake_ops };
	struct mapping weights, kv;
	int pipefd[2];

	atomic_store(&rec.map_gate_fd, -1);
	ASSERT(pipe(pipefd) == 0);

	/* The weights: 1 GiB of chunk, a retained (so pinned at once)
	 * backup of 1 GiB, registered in 256 MiB slices. */
	backup_mapping_make(&weights, &v, 1024 * MiB, 1, NULL, 0);
	ASSERT(atomic_load(&rec.registers) == 4);

	/* The KV cache's resume is under way: its map blocks. */
	mapping_init(&kv, &v, 0, 0);
	ASSERT(mapping_reserve(&kv, 64 * MiB, 2 * MiB) == 0);
	atomic_store(&rec.map_gate_fd, pipefd[0]);
	struct appender a = { .m = &kv, .d = { 0, 64 * MiB, -1 } };
	pthread_t t;
	ASSERT(pthread_create(&t, NULL, append_run, &a) == 0);
	while (!atomic_load(&rec.in_map))
		harness_msleep(1);

	/* The weights give their backup back meanwhile: nothing is unpinned
	 * while the map is under way, however long it takes. */
	ASSERT(mapping_backup_give_back(&weights) == 0);
	harness_msleep(100);
	ASSERT(atomic_load(&rec.unregisters) == 0);

	/* The map ends: the thread goes on and unpins every slice. */
	ASSERT(write(pipefd[1], "x", 1) == 1);
	ASSERT(pthread_join(t, NULL) == 0);
	ASSERT(a.r == 0);
	ASSERT(mapping_backup_wait(&weights) == 0);
	ASSERT(atomic_load(&rec.unregisters) == 4);
	ASSERT(atomic_load(&rec.unregisters_in_map) == 0);

	atomic_store(&rec.map_gate_fd, -1);
	mapping_release(&kv);
	mapping_release(&weights);
	close(pipefd[0]);
	close(pipefd[1]);
}

/* A resume call holds a give-back's unpins back for as long as it runs
 * (mapping_gate_soft_enter), but gives way once a save needs the
 * give-back to move on: that save may be what the resume waits for. */
/* m: 1 GiB of chunk with a retained backup (four pinned slices), given
 * back under a resume call's soft hold, which the caller leaves. Returns
 * the unpins made before the give-back. */
static int backup_given_back_under_soft_hold(struct mapping *m, struct vmm *v)
{
	atomic_store(&rec.map_gate_fd, -1);
	backup_mapping_make(m, v, 1024 * MiB, 1, NULL, 0);
	int before = atomic_load(&rec.unregisters);

	mapping_gate_soft_enter();
	ASSERT(mapping_backup_give_back(m) == 0);
	return before;
}

TEST(a_resume_call_holds_unpins_back_until_a_save_needs_them)
{
	struct vmm v = { .ops = &fake_ops };
	struct mapping m;
	int before = backup_given_back_under_soft_hold(&m, &v);

	harness_msleep(100);
	ASSERT_EQ(atomic_load(&rec.unregisters), before);
	/* The save waits for the punch, so the unpins go on. */
	memset((void *)m.base, 0x5a, 1024 * MiB);
	ASSERT(mapping_save(&m) == 0);
	ASSERT_EQ(atomic_load(&rec.unregisters), before + 4);
	ASSERT(m.backup[0] == 0x5a && m.backup[1024 * MiB - 1] == 0x5a);
	mapping_gate_soft_leave();
	mapping_release(&m);
}

/* The soft hold outlasts a resume call by MAPPING_GATE_LINGER_MS, so
 * that the engine's next resume call (its KV cache after its weights)
 * finds no unpin under way; once no call came for that long, the unpins
 * go on by themselves. */
TEST(the_soft_hold_outlasts_a_resume_call_by_its_linger)
{
	struct vmm v = { .ops = &fake_ops };
	struct mapping m;

	/* The weights' resume call gives the backup back and returns; the
	 * KV cache's call follows 2 ms later, within the linger, and runs
	 * long. (Without the linger the four fake unpins, which take no
	 * time, are made in those 2 ms.) */
	int before = backup_given_back_under_soft_hold(&m, &v);
	mapping_gate_soft_leave();
	harness_msleep(2);
	mapping_gate_soft_enter();
	harness_msleep(100);
	ASSERT_EQ(atomic_load(&rec.unregisters), before);
	/* The last call returns: no unpin before its linger has passed,
	 * every one after it, without anyone waiting for them. */
	int64_t left = harness_now_ms();
	mapping_gate_soft_leave();
	while (atomic_load(&rec.unregisters) < before + 4 &&
	       harness_now_ms() - left < 10000)
		harness_msleep(1);
	int64_t took = harness_now_ms() - left;
	ASSERT_EQ(atomic_load(&rec.unregisters), before + 4);
	ASSERT(took >= MAPPING_GATE_LINGER_MS);
	ASSERT(mapping_backup_wait(&m) == 0);
	mapping_release(&m);
}

/* A save right after a give-back (a pause soon after a resume that gave
 * its backup back) fills the backup behind the give-back's punch, slice
 * by slice: every byte it saved is still there once the punch is done. */
TEST(a_save_behind_a_give_back_keeps_what_it_saved)
{
	const uint64_t size = 768 * MiB; /* three pin slices */
	struct vmm v = { .ops = &fake_ops };
	struct mapping m;

	atomic_store(&rec.map_gate_fd, -1);
	/* Pinned at each copy, given back after. */
	backup_mapping_make(&m, &v, size, 0, NULL, 0);
	uint8_t *dev = (uint8_t *)m.base;

	for (int cycle = 0; cycle < 3; cycle++) {
		uint8_t byte = (uint8_t)(0x11 * (cycle + 1));
		memset(dev, byte, size);
		ASSERT(mapping_save(&m) == 0);
		memset(dev, 0, size);
		ASSERT(mapping_restore(&m) == 0);
		ASSERT(range_holds(dev, size, byte));
		/* Given back, and saved again at once with new content. */
		memset(dev, byte + 1, size);
		ASSERT(mapping_backup_give_back(&m) == 0);
		ASSERT(mapping_save(&m) == 0);
		ASSERT(mapping_backup_wait(&m) == 0);
		ASSERT(range_holds(m.backup, size, (uint8_t)(byte + 1)));
		ASSERT(mapping_backup_give_back(&m) == 0);
	}
	ASSERT(mapping_backup_wait(&m) == 0);
	mapping_release(&m);
}

/* A save of a backup that was given back faults its pages in ahead of
 * the pins (threads: a pin alone faults them one by one) and copies each
 * slice as soon as it is pinned, so the copy of one slice runs while the
 * next is faulted in and pinned: registers and copies alternate. */
TEST(a_save_pins_populated_slices_and_copies_each_behind_its_pin)
{
	const uint64_t size = 1024 * MiB; /* four pin slices */
	struct vmm v = { .ops = &fake_ops };
	struct mapping m;

	atomic_store(&rec.map_gate_fd, -1);
	setenv("VRAM_POPULATE_THREADS", "3", 1);
	/* Two chunks, one of a slice and a half: slices start at each. */
	struct mapping_desc d[2] = { { 0, 384 * MiB, -1 },
				     { 384 * MiB, 640 * MiB, -1 } };
	backup_mapping_make(&m, &v, size, 0, d, 2);
	uint8_t *dev = (uint8_t *)m.base;

	for (int cycle = 0; cycle < 2; cycle++) {
		uint8_t byte = (uint8_t)(0x21 + cycle);
		memset(dev, byte, size);
		atomic_store(&rec.registers_unpopulated, 0);
		atomic_store(&rec.n_events, 0);
		memset(rec.events, 0, sizeof(rec.events));
		atomic_store(&rec.logging, 1);
		ASSERT(mapping_save(&m) == 0);
		atomic_store(&rec.logging, 0);
		/* Slices: [0,256) [256,384) [384,640) [640,896) [896,1024). */
		ASSERT_STREQ(rec.events, "rcrcrcrcrc");
		ASSERT(atomic_load(&rec.registers_unpopulated) == 0);
		ASSERT(range_holds(m.backup, size, byte));
		memset(dev, 0, size);
		ASSERT(mapping_restore(&m) == 0);
		ASSERT(dev[0] == byte && dev[size - 1] == byte);
		/* Given back: the next cycle's save finds no page. */
		ASSERT(mapping_backup_give_back(&m) == 0);
		ASSERT(mapping_backup_wait(&m) == 0);
		ASSERT(!range_resident(m.backup, 2 * MiB));
	}
	mapping_release(&m);
	unsetenv("VRAM_POPULATE_THREADS");
}
