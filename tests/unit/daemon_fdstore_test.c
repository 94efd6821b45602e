/* SPDX-License-Identifier: Apache-2.0 */
/* The fd store's sync (daemon/fdstore.c) against a datagram socket that
 * plays systemd's part: a sync with nothing changed sends nothing and makes
 * no pass over the fds; a chunk let go and made again between two syncs,
 * under the same fd number, is stored again (the store must not keep the
 * old file under the chunk's name); a change of the table alone (a mapper)
 * stores a new table without a pass over the fds. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include "backend.h"
#include "fdstore.h"
#include "harness.h"
#include "node.h"
#include "notify.h"
#include "pool.h"
#include "test.h"

#define MiB (1ull << 20)

/* What the store side read: the names stored (with the inode of the fd
 * that came with each) and removed, in order. */
struct seen {
	char stored[64][64];
	ino_t ino[64];
	unsigned n_stored;
	char removed[64][64];
	unsigned n_removed;
};

static int store_sock = -1;
static char store_dir[64];

/* The store: a datagram socket at $NOTIFY_SOCKET, FDSTORE=1024. */
static void store_open(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	char path[96];

	snprintf(store_dir, sizeof(store_dir), "/tmp/vram-fdstore-XXXXXX");
	ASSERT(mkdtemp(store_dir));
	snprintf(path, sizeof(path), "%s/notify", store_dir);
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	store_sock =
		socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	ASSERT_GE(store_sock, 0);
	ASSERT_OK(bind(store_sock, (struct sockaddr *)&a, sizeof(a)));
	setenv("NOTIFY_SOCKET", path, 1);
	setenv("FDSTORE", "1024", 1);
}

static void store_close(void)
{
	char path[128];

	close(store_sock);
	snprintf(path, sizeof(path), "%s/notify", store_dir);
	unlink(path);
	rmdir(store_dir);
}

/* Reads every datagram the daemon side sent since the last call. */
static void store_read(struct seen *out)
{
	memset(out, 0, sizeof(*out));
	for (;;) {
		char buf[512];
		union {
			struct cmsghdr align;
			char b[CMSG_SPACE(sizeof(int) * 4)];
		} control;
		struct iovec iov = { .iov_base = buf,
				     .iov_len = sizeof(buf) - 1 };
		struct msghdr msg = { .msg_iov = &iov,
				      .msg_iovlen = 1,
				      .msg_control = control.b,
				      .msg_controllen = sizeof(control.b) };
		ssize_t n = recvmsg(store_sock, &msg, MSG_CMSG_CLOEXEC);
		if (n < 0)
			break;
		buf[n] = '\0';
		int fd = -1;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c;
		     c = CMSG_NXTHDR(&msg, c))
			if (c->cmsg_level == SOL_SOCKET &&
			    c->cmsg_type == SCM_RIGHTS)
				memcpy(&fd, CMSG_DATA(c), sizeof(int));
		const char *name = strstr(buf, "FDNAME=");
		ASSERT(name);
		name += 7;
		if (strstr(buf, "FDSTOREREMOVE=1")) {
			ASSERT_LT(out->n_removed, 64);
			snprintf(out->removed[out->n_removed++], 64, "%s",
				 name);
		} else {
			struct stat st = { 0 };
			ASSERT_GE(fd, 0);
			ASSERT_OK(fstat(fd, &st));
			ASSERT_LT(out->n_stored, 64);
			out->ino[out->n_stored] = st.st_ino;
			snprintf(out->stored[out->n_stored++], 64, "%s", name);
		}
		if (fd >= 0)
			close(fd);
	}
}

/* Index of name among the names stored, or -1. */
static int seen_stored(const struct seen *s, const char *name)
{
	for (unsigned i = 0; i < s->n_stored; i++)
		if (strcmp(s->stored[i], name) == 0)
			return (int)i;
	return -1;
}

static bool seen_removed(const struct seen *s, const char *name)
{
	for (unsigned i = 0; i < s->n_removed; i++)
		if (strcmp(s->removed[i], name) == 0)
			return true;
	return false;
}

static unsigned seen_tables(const struct seen *s)
{
	unsigned k = 0;
	for (unsigned i = 0; i < s->n_stored; i++)
		k += strncmp(s->stored[i], "vramd-t-", 8) == 0;
	return k;
}

struct world {
	uv_loop_t loop;
	struct backend *b;
	struct node node;
	struct fdstore store;
};

static void world_open(struct world *w)
{
	struct backend_config cfg = { .name = "host",
				      .host_capacity = 256 * MiB,
				      .host_devices = 1,
				      .host_granularity = 2 * MiB };

	store_open();
	ASSERT_OK(uv_loop_init(&w->loop));
	ASSERT_OK(backend_open(&cfg, &w->b));
	node_init(&w->node, &w->loop, w->b);
	w->node.next_pool_id = 1;
	ASSERT_OK(fdstore_init(&w->store));
	ASSERT(w->store.on);
}

static struct pool *world_pool(struct world *w, const char *name,
			       uint64_t bytes)
{
	struct identity who = { .pid = 1, .uid = 0, .gid = 0 };
	struct pool *p;
	unsigned first;

	ASSERT_OK(pool_create(w->node.next_pool_id++, name, "t", 0,
			      POOL_DISCARD, 0, 64 * MiB, NULL, NULL, &who, &p));
	ASSERT_OK(node_pool_add(&w->node, p));
	ASSERT_OK(pool_grow(p, w->b, bytes, 2 * MiB, 64, &first));
	return p;
}

static void world_close(struct world *w)
{
	while (w->node.n_pools)
		pool_destroy(w->node.pools[--w->node.n_pools], w->b);
	fdstore_fini(&w->store);
	node_fini(&w->node);
	backend_destroy(w->b);
	uv_loop_close(&w->loop);
	store_close();
}

/* What a ping's answer costs the store once it is in step: nothing. */
TEST(sync_without_change_sends_nothing)
{
	struct world w;
	struct seen s;

	world_open(&w);
	world_pool(&w, "a", 4 * MiB);
	world_pool(&w, "b", 2 * MiB);
	fdstore_sync(&w.store, &w.node);
	store_read(&s);
	ASSERT_GE(seen_stored(&s, "vramd-c-1-0"), 0);
	ASSERT_GE(seen_stored(&s, "vramd-c-1-1"), 0);
	ASSERT_GE(seen_stored(&s, "vramd-c-2-0"), 0);
	ASSERT_EQ(seen_tables(&s), 1);
	uint64_t passes = w.store.fd_passes;

	for (int i = 0; i < 10; i++)
		fdstore_sync(&w.store, &w.node);
	store_read(&s);
	ASSERT_EQ(s.n_stored, 0);
	ASSERT_EQ(s.n_removed, 0);
	ASSERT_UEQ(w.store.fd_passes, passes);
	world_close(&w);
}

/* A pause and a resume between two syncs: the chunk's fd number comes
 * back, its file is new, and the store must hold the new one. */
TEST(chunk_made_again_under_the_same_fd_is_stored_again)
{
	struct world w;
	struct seen s;

	world_open(&w);
	struct pool *p = world_pool(&w, "a", 2 * MiB);
	fdstore_sync(&w.store, &w.node);
	store_read(&s);
	int old_fd = p->chunks[0].fd;
	struct stat before;
	ASSERT_OK(fstat(old_fd, &before));

	backend_chunk_release(w.b, 0, &p->chunks[0]);
	ASSERT_OK(backend_chunk_create(w.b, 0, &p->chunks[0]));
	struct stat after;
	ASSERT_OK(fstat(p->chunks[0].fd, &after));
	ASSERT(after.st_ino != before.st_ino);
	/* The case this guards: the same number for another file. */
	ASSERT_EQ(p->chunks[0].fd, old_fd);

	fdstore_sync(&w.store, &w.node);
	store_read(&s);
	int i = seen_stored(&s, "vramd-c-1-0");
	ASSERT_GE(i, 0);
	ASSERT_UEQ(s.ino[i], after.st_ino);
	/* The old file goes first, or the removal would take the new one
	 * too; the table reads the same. */
	ASSERT_EQ(s.n_removed, 1);
	ASSERT_STREQ(s.removed[0], "vramd-c-1-0");
	ASSERT_EQ(seen_tables(&s), 0);
	world_close(&w);
}

/* A change the fds do not show (a mapper opened the pool) still reaches
 * the table, without a pass over the fds; a pool made or dropped makes
 * one. */
TEST(table_change_alone_stores_a_table)
{
	struct world w;
	struct seen s;
	struct identity who = { .pid = 2, .uid = 0, .gid = 0 };
	static int mapper_tag;

	world_open(&w);
	struct pool *p = world_pool(&w, "a", 2 * MiB);
	fdstore_sync(&w.store, &w.node);
	store_read(&s);
	uint64_t passes = w.store.fd_passes;

	ASSERT_OK(
		pool_mapper_add(p, (struct session *)&mapper_tag, &who, false));
	fdstore_sync(&w.store, &w.node);
	store_read(&s);
	ASSERT_EQ(s.n_stored, 1);
	ASSERT_EQ(seen_tables(&s), 1);
	ASSERT_UEQ(w.store.fd_passes, passes);

	/* A second pool: its chunk is stored. */
	world_pool(&w, "b", 2 * MiB);
	fdstore_sync(&w.store, &w.node);
	store_read(&s);
	ASSERT_GE(seen_stored(&s, "vramd-c-2-0"), 0);
	ASSERT_UEQ(w.store.fd_passes, passes + 1);

	/* The first dropped (no chunk made or let go by the node itself in
	 * between, the pool count says it): its chunk leaves the store. */
	w.node.n_pools = 0;
	w.node.pools[w.node.n_pools++] = w.node.pools[1];
	struct pool *gone = p;
	fdstore_sync(&w.store, &w.node);
	store_read(&s);
	ASSERT(seen_removed(&s, "vramd-c-1-0"));
	ASSERT_EQ(seen_tables(&s), 1);
	pool_destroy(gone, w.b);
	world_close(&w);
}

/* Takes the next datagram, which must be a barrier, and plays systemd:
 * closes the fd that came with it, or keeps it (returned) when hold. */
static int store_take_barrier(bool hold)
{
	char buf[64];
	union {
		struct cmsghdr align;
		char b[CMSG_SPACE(sizeof(int))];
	} control;
	struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) - 1 };
	struct msghdr msg = { .msg_iov = &iov,
			      .msg_iovlen = 1,
			      .msg_control = control.b,
			      .msg_controllen = sizeof(control.b) };
	struct pollfd pf = { .fd = store_sock, .events = POLLIN };
	ASSERT_EQ(poll(&pf, 1, 5000), 1);
	ssize_t n = recvmsg(store_sock, &msg, MSG_CMSG_CLOEXEC);
	ASSERT_GT(n, 0);
	buf[n] = '\0';
	ASSERT_STREQ(buf, "BARRIER=1");
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	ASSERT(c && c->cmsg_type == SCM_RIGHTS);
	int fd;
	memcpy(&fd, CMSG_DATA(c), sizeof(int));
	if (hold)
		return fd;
	close(fd);
	return -1;
}

struct barrier_call {
	int timeout_ms, r;
	bool done;
};

static void *barrier_run(void *arg)
{
	struct barrier_call *b = arg;
	b->r = notify_barrier(b->timeout_ms);
	__atomic_store_n(&b->done, true, __ATOMIC_RELEASE);
	return NULL;
}

/* notify_barrier returns once the store side has handled its datagram
 * (closed the fd that came with it), not before; one whose datagram is
 * never handled times out; none without NOTIFY_SOCKET. A pause under
 * the store waits on it (transition.c). */
TEST(barrier_waits_for_the_store_to_read_it)
{
	store_open();
	struct barrier_call b = { .timeout_ms = 10000 };
	pthread_t t;
	ASSERT_OK(pthread_create(&t, NULL, barrier_run, &b));
	int held = store_take_barrier(true);
	harness_msleep(100);
	ASSERT(!__atomic_load_n(&b.done, __ATOMIC_ACQUIRE));
	close(held);
	pthread_join(t, NULL);
	ASSERT_EQ(b.r, 0);

	/* Read but held: the wait runs out. */
	b = (struct barrier_call){ .timeout_ms = 50 };
	ASSERT_OK(pthread_create(&t, NULL, barrier_run, &b));
	held = store_take_barrier(true);
	pthread_join(t, NULL);
	ASSERT_EQ(b.r, -ETIMEDOUT);
	close(held);

	/* Handled at once. */
	b = (struct barrier_call){ .timeout_ms = 10000 };
	ASSERT_OK(pthread_create(&t, NULL, barrier_run, &b));
	store_take_barrier(false);
	pthread_join(t, NULL);
	ASSERT_EQ(b.r, 0);
	store_close();
}

TEST(barrier_without_systemd_is_enoent)
{
	unsetenv("NOTIFY_SOCKET");
	ASSERT_EQ(notify_barrier(10), -ENOENT);
}
