/* SPDX-License-Identifier: Apache-2.0 */
/* vramd's loop never waits for the device. A real vramd runs the CUDA
 * backend against the fake driver (tests/unit/cuda_fake/), preloaded so
 * that the daemon's close of an exported chunk fd, the driver's free, can
 * be held by the test for as long as it likes (FAKE_CUDA_RELEASE_HOLD).
 * While a pause waits for that release to finish, before it reports the
 * free memory after, other sessions are served. The tests speak the raw
 * protocol, so that nothing in the test process holds the chunks and the
 * daemon's close is the last reference. And a session that breaks while
 * the daemon sends to it is closed from the loop, not the sender. */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "cuda_fake.h"
#include "frame_send.h"
#include "harness.h"
#include "test.h"
#include "raw_peer.h"
#include "vram.pb-c.h"
#include "wire.h"

static struct harness_daemon d;

TEST(ping_answered_while_a_release_is_held)
{
	char so[64], fifo[128];
	int hold_fd;

	cuda_fake_build(so, sizeof(so));
	snprintf(fifo, sizeof(fifo), "%s.hold", so);
	ASSERT_OK(mkfifo(fifo, 0600));
	/* Held open for the daemon's whole life, so its reads block on data,
	 * never on a missing writer. */
	hold_fd = open(fifo, O_RDWR | O_CLOEXEC);
	ASSERT(hold_fd >= 0);
	setenv("VRAM_LIBCUDA", so, 1);
	setenv("VRAM_LIBNVML", "/nonexistent/libnvidia-ml.so.1", 1);
	setenv("FAKE_CUDA_RELEASE_HOLD", fifo, 1);
	setenv("LD_PRELOAD", so, 1);
	/* A sanitized vramd wants its runtime first; the fake's close() must
	 * come before libc's, and asan's order check does not matter here. */
	const char *asan = getenv("ASAN_OPTIONS");
	char asan_opts[512];
	snprintf(asan_opts, sizeof(asan_opts), "%s%sverify_asan_link_order=0",
		 asan ? asan : "", asan && *asan ? ":" : "");
	setenv("ASAN_OPTIONS", asan_opts, 1);
	const char *const extra[] = { "--backend", "cuda", NULL };
	int r = harness_daemon_start(&d, extra);
	unsetenv("LD_PRELOAD");
	unsetenv("FAKE_CUDA_RELEASE_HOLD");
	if (r < 0)
		TEST_FAIL("cannot start vramd on the fake driver: %s",
			  strerror(-r));

	/* The owner makes a pool of one chunk and keeps no fd of it. */
	struct peer owner, pauser, other;
	peer_connect(&owner, &d);
	peer_hello(&owner, "owner");
	uint64_t pool_id = peer_create(&owner, "held");
	peer_grow(&owner, pool_id, 2u << 20);

	/* Another client pauses it: the daemon's close of the chunk, the
	 * last reference, is the free that the fake now holds. */
	peer_connect(&pauser, &d);
	peer_hello(&pauser, "pauser");
	uint64_t pause_id = peer_transition(&pauser, "held", false);

	/* The owner acks, and pings on the same socket: the daemon reads the
	 * ping only after the ack, which ends the pause's round, so the pause
	 * is then waiting for the held release. */
	peer_ack_event(&owner, VRAM__EVENT_KIND__EVENT_PAUSE);
	ASSERT_EQ(peer_response(&owner, peer_ping(&owner), "ping reply"), 0);

	/* A client that comes now is served too. */
	peer_connect(&other, &d);
	peer_hello(&other, "other");
	ASSERT_EQ(peer_response(&other, peer_ping(&other), "ping reply"), 0);

	/* The release is still held, so the pause has not answered. */
	ASSERT(!peer_has_message(&pauser));
	ASSERT_EQ(write(hold_fd, "go", 2), 2);
	ASSERT_EQ(peer_response(&pauser, pause_id, "pause reply"), 0);

	peer_close(&other);
	peer_close(&pauser);
	peer_close(&owner);
	ASSERT_EQ(harness_daemon_stop(&d), 0);
	close(hold_fd);
	unlink(fifo);
	cuda_fake_remove(so);
}

/* A session whose peer no longer reads breaks on the next event sent to
 * it and is closed from the loop's list of sessions to close: its socket
 * is closed and its mapping is gone. */
TEST(session_that_breaks_is_closed_from_the_loop)
{
	const char *const extra[] = { "--host-capacity", "64M", NULL };
	int r = harness_daemon_start(&d, extra);
	if (r < 0)
		TEST_FAIL("cannot start vramd: %s", strerror(-r));
	struct peer owner, deaf;
	peer_connect(&owner, &d);
	peer_hello(&owner, "owner");
	uint64_t pool_id = peer_create(&owner, "shared");
	peer_connect(&deaf, &d);
	peer_hello(&deaf, "deaf");
	Vram__ServerMsg *m = peer_open_call(&deaf, "shared", NULL);
	ASSERT_EQ(m->response->err, 0);
	vram__server_msg__free_unpacked(m, NULL);
	/* The daemon's next write to it fails (EPIPE); it sees no EOF. */
	ASSERT_OK(shutdown(deaf.fd, SHUT_RD));
	peer_grow(&owner, pool_id, 2u << 20);
	/* Hung up once the daemon closed its end too, after the node forgot
	 * the session (the fd is closed last). Asking for no event waits for
	 * the hang-up alone. */
	struct pollfd pf = { .fd = deaf.fd, .events = 0 };
	if (poll(&pf, 1, 10000) != 1 || !(pf.revents & POLLHUP))
		TEST_FAIL("the broken session was not closed\n%s",
			  harness_daemon_log(&d));

	Vram__List l = VRAM__LIST__INIT;
	Vram__Request req = VRAM__REQUEST__INIT;
	req.body_case = VRAM__REQUEST__BODY_LIST;
	req.list = &l;
	/* peer_call checks the answer is the list's. */
	m = peer_call(&owner, &req, "list reply", NULL);
	ASSERT_EQ(m->response->list->n_pools, 1);
	ASSERT_EQ(m->response->list->pools[0]->n_mappers, 1);
	ASSERT_EQ(m->response->list->pools[0]->mappers[0]->pid,
		  (uint32_t)getpid());
	ASSERT_STREQ(m->response->list->pools[0]->mappers[0]->name, "owner");
	vram__server_msg__free_unpacked(m, NULL);
	peer_close(&deaf);
	peer_close(&owner);
	ASSERT_EQ(harness_daemon_stop(&d), 0);
}

/* The clearing pump (daemon/backend/cuda_pump.h) runs from a resume's
 * start until no pool of the device is left paused: not while pools are
 * paused and the trainer works, on through an engine's wakes one after
 * another, off once the last pool is back. The daemon's log says when. */
TEST(the_clearing_pump_runs_from_a_resume_until_nothing_is_paused)
{
	char so[64];

	cuda_fake_build(so, sizeof(so));
	setenv("VRAM_LIBCUDA", so, 1);
	setenv("VRAM_LIBNVML", "/nonexistent/libnvidia-ml.so.1", 1);
	setenv("VRAM_CUDA_PUMP_MS", "1", 1);
	const char *const extra[] = { "--backend", "cuda", NULL };
	int r = harness_daemon_start(&d, extra);
	unsetenv("VRAM_CUDA_PUMP_MS");
	if (r < 0)
		TEST_FAIL("cannot start vramd on the fake driver: %s",
			  strerror(-r));
	struct peer owner, engine;
	peer_connect(&owner, &d);
	peer_hello(&owner, "owner");
	peer_grow(&owner, peer_create(&owner, "weights"), 2u << 20);
	peer_grow(&owner, peer_create(&owner, "kv"), 2u << 20);
	peer_connect(&engine, &d);
	peer_hello(&engine, "engine");

	/* Both paused: no pump. */
	for (int i = 0; i < 2; i++) {
		uint64_t id =
			peer_transition(&engine, i ? "kv" : "weights", false);
		peer_ack_event(&owner, VRAM__EVENT_KIND__EVENT_PAUSE);
		ASSERT_EQ(peer_response(&engine, id, "pause reply"), 0);
	}
	ASSERT(!strstr(harness_daemon_log(&d), "clearing pump"));

	/* The weights wake: on, and still on with the KV cache paused. */
	uint64_t id = peer_transition(&engine, "weights", true);
	peer_ack_event(&owner, VRAM__EVENT_KIND__EVENT_RESUME);
	ASSERT_EQ(peer_response(&engine, id, "resume reply"), 0);
	ASSERT(strstr(harness_daemon_log(&d), "clearing pump on device 0 on"));
	ASSERT(!strstr(harness_daemon_log(&d),
		       "clearing pump on device 0 off"));

	/* The KV cache wakes: nothing is paused, so off. */
	id = peer_transition(&engine, "kv", true);
	peer_ack_event(&owner, VRAM__EVENT_KIND__EVENT_RESUME);
	ASSERT_EQ(peer_response(&engine, id, "resume reply"), 0);
	ASSERT(strstr(harness_daemon_log(&d), "clearing pump on device 0 off"));

	peer_close(&engine);
	peer_close(&owner);
	ASSERT_EQ(harness_daemon_stop(&d), 0);
	cuda_fake_remove(so);
}

/* Starts vramd on the fake driver (built into so) with --set set. */
static void fake_daemon_start(char *so, size_t n, const char *set)
{
	cuda_fake_build(so, n);
	setenv("VRAM_LIBCUDA", so, 1);
	setenv("VRAM_LIBNVML", "/nonexistent/libnvidia-ml.so.1", 1);
	const char *const extra[] = { "--backend", "cuda", "--set", set, NULL };
	int r = harness_daemon_start(&d, extra);
	if (r < 0)
		TEST_FAIL("cannot start vramd on the fake driver: %s",
			  strerror(-r));
}

/* How many fds of process pid are the file with inode ino. */
static int fds_of_inode(pid_t pid, ino_t ino)
{
	char dir[64], path[sizeof(dir) + 256 + 1];
	int n = 0;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	DIR *dp = opendir(dir);
	ASSERT(dp);
	for (struct dirent *e; (e = readdir(dp));) {
		struct stat st;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (e->d_name[0] != '.' && stat(path, &st) == 0 &&
		    st.st_ino == ino)
			n++;
	}
	closedir(dp);
	return n;
}

/* Waits up to 5 s for the daemon to hold want fds of ino. */
static void daemon_fds_wait(ino_t ino, int want, const char *what)
{
	int n = -1;
	for (int i = 0; i < 500 && (n = fds_of_inode(d.pid, ino)) != want; i++)
		harness_msleep(10);
	if (n != want)
		TEST_FAIL("%s: vramd holds %d fds of the chunk, not %d\n%s",
			  what, n, want, harness_daemon_log(&d));
}

/* Maps fd (size bytes) and checks or writes its first and last words. */
static void chunk_pattern(int fd, size_t size, bool write, uint32_t v)
{
	uint32_t *m =
		mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ASSERT(m != MAP_FAILED);
	uint32_t *last = m + size / sizeof(*m) - 1;
	if (write) {
		*m = v;
		*last = ~v;
	} else {
		ASSERT_UEQ(*m, v);
		ASSERT_UEQ(*last, ~v);
	}
	munmap(m, size);
}

/* Idle, an active pool's chunks let their fds go (daemon/fd_drop.h): the
 * fake's handle, one memfd fd in vramd, then holds each chunk alone. A
 * client that opens the pool then is sent the chunk exported again, the
 * same memory with what was written in it, and a pause still gives it
 * all back. */
TEST(idle_pools_let_their_chunk_fds_go_and_send_them_again)
{
	char so[64];
	const size_t size = 4u << 20;

	fake_daemon_start(so, sizeof(so), "chunk_fd_idle_ms=30");
	struct peer owner, other;
	peer_connect(&owner, &d);
	peer_hello(&owner, "owner");
	uint64_t pool_id = peer_create(&owner, "kv");

	/* The owner writes into its chunk and lets go of its fd. */
	int fd = -1;
	Vram__ServerMsg *m = peer_grow_call(&owner, pool_id, size, &fd);
	ASSERT_EQ(m->response->err, 0);
	ASSERT_EQ(m->response->grow->n_chunks, 1);
	vram__server_msg__free_unpacked(m, NULL);
	ASSERT(fd >= 0);
	struct stat st;
	ASSERT_OK(fstat(fd, &st));
	chunk_pattern(fd, size, true, 0x5eed1234);
	close(fd);

	/* The exported fd and the handle's memfd, then the handle's alone. */
	daemon_fds_wait(st.st_ino, 1, "idle");
	ASSERT(strstr(harness_daemon_log(&d),
		      "let the fds of 1 chunk(s) of 1 active pool(s) go"));

	/* Another client opens the pool: the chunk comes exported again. */
	peer_connect(&other, &d);
	peer_hello(&other, "other");
	fd = -1;
	m = peer_open_call(&other, "kv", &fd);
	ASSERT_EQ(m->response->err, 0);
	ASSERT_EQ(m->response->pool->n_chunks, 1);
	vram__server_msg__free_unpacked(m, NULL);
	ASSERT(fd >= 0);
	struct stat st2;
	ASSERT_OK(fstat(fd, &st2));
	ASSERT_UEQ(st2.st_ino, st.st_ino);
	chunk_pattern(fd, size, false, 0x5eed1234);
	close(fd);
	daemon_fds_wait(st.st_ino, 1, "idle again after the open");

	/* A pause of it: both mappers ack; vramd holds nothing of it. */
	uint64_t id = peer_transition(&owner, "kv", false);
	peer_ack_event(&owner, VRAM__EVENT_KIND__EVENT_PAUSE);
	peer_ack_event(&other, VRAM__EVENT_KIND__EVENT_PAUSE);
	ASSERT_EQ(peer_response(&owner, id, "pause reply"), 0);
	ASSERT_EQ(fds_of_inode(d.pid, st.st_ino), 0);
	ASSERT_EQ(fds_of_inode(getpid(), st.st_ino), 0);

	peer_close(&other);
	peer_close(&owner);
	ASSERT_EQ(harness_daemon_stop(&d), 0);
	cuda_fake_remove(so);
}

/* chunk_fd_idle_ms 0: the fds stay, however long the pool is idle. */
TEST(chunk_fds_stay_with_chunk_fd_idle_ms_0)
{
	char so[64];

	fake_daemon_start(so, sizeof(so), "chunk_fd_idle_ms=0");
	struct peer owner;
	peer_connect(&owner, &d);
	peer_hello(&owner, "owner");
	peer_grow(&owner, peer_create(&owner, "kv"), 2u << 20);
	harness_msleep(300);
	ASSERT(!strstr(harness_daemon_log(&d), "let the fds of"));
	ASSERT(!strstr(harness_daemon_log(&d), "chunk_fd_idle_ms"));
	peer_close(&owner);
	ASSERT_EQ(harness_daemon_stop(&d), 0);
	cuda_fake_remove(so);
}
