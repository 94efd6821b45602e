/* SPDX-License-Identifier: Apache-2.0 */
/* A save in parts against a real vramd under an fd store driven as systemd
 * drives it (harness_daemon_start_store), spoken in the raw protocol so
 * that the test holds no chunk: the daemon and the store let go of each
 * chunk as the saver reports it saved, not at the end of the pause; a
 * saver that fails after some chunks leaves the pool pausing and a pause
 * again saves the rest; a daemon killed during a save in parts comes back
 * with the pool paused and its backup trusted, as libvram always finishes
 * the copies it began (daemon/recover.c), restored only once its owner is
 * back, while one killed after such a save failed does not trust it. */
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "raw_peer.h"
#include "test.h"

#define MiB (1ull << 20)
#define CHUNK (2 * MiB)
#define N_CHUNKS 4

static struct harness_daemon d;

static void sp_start(void)
{
	const char *const extra[] = { "--host-capacity", "64M",
				      "--chunk-max",	 "2M",
				      "--ack-timeout-ms", "3000",
				      "--reattach-grace-ms", "60000",
				      NULL };
	int r = harness_daemon_start_store(&d, extra, 4096);
	if (r < 0)
		TEST_FAIL("cannot start vramd: %s", strerror(-r));
}

/* How many chunk fds the store holds. */
static int sp_store_chunks(void)
{
	int n = harness_store_count(&d, "vramd-c-");
	ASSERT_GE(n, 0);
	return n;
}

/* Waits up to 5 s for the store to hold want chunk fds. */
static void sp_store_wait(int want, const char *what)
{
	int n = -1;
	for (int i = 0; i < 500 && (n = sp_store_chunks()) != want; i++)
		harness_msleep(10);
	if (n != want)
		TEST_FAIL("%s: the store holds %d chunks, not %d\n%s", what, n,
			  want, harness_daemon_log(&d));
}

/* The owner, saving in parts, with a host pool "w" of N_CHUNKS chunks;
 * its backup's fd in *backup. */
static uint64_t sp_owner(struct peer *owner, int *backup)
{
	peer_connect(owner, &d);
	owner->save_in_parts = true;
	peer_hello(owner, "owner");
	uint64_t id = peer_create_as(owner, "w", VRAM__POLICY__POLICY_HOST,
				     64 * MiB, backup);
	ASSERT(*backup >= 0);
	peer_grow(owner, id, N_CHUNKS * CHUNK);
	sp_store_wait(N_CHUNKS, "grown");
	return id;
}

/* The SAVE the owner is sent: with release, of the chunks from first. */
static uint64_t sp_save_event(struct peer *owner, unsigned first)
{
	Vram__ServerMsg *m = peer_event(owner, VRAM__EVENT_KIND__EVENT_SAVE);
	ASSERT(m->event->backup);
	ASSERT(m->event->release);
	ASSERT_EQ(m->event->n_chunks, N_CHUNKS - first);
	ASSERT_UEQ(m->event->chunks[0]->offset, first * CHUNK);
	uint64_t ev = m->event->event_id;
	vram__server_msg__free_unpacked(m, NULL);
	return ev;
}

/* Writes (or checks) a word at each chunk's offset of the backup: what a
 * saver's copies put there. */
static void sp_backup_words(int fd, bool write)
{
	uint32_t *m = mmap(NULL, N_CHUNKS * CHUNK, PROT_READ | PROT_WRITE,
			   MAP_SHARED, fd, 0);
	ASSERT(m != MAP_FAILED);
	for (unsigned k = 0; k < N_CHUNKS; k++) {
		uint32_t *w = m + k * CHUNK / sizeof(*m);
		if (write)
			*w = 0x5a7e0000u + k;
		else
			ASSERT_UEQ(*w, 0x5a7e0000u + k);
	}
	munmap(m, N_CHUNKS * CHUNK);
}

static void sp_kill_and_restart(void)
{
	ASSERT_OK(harness_daemon_kill(&d, SIGKILL));
	ASSERT_EQ(harness_daemon_wait(&d, 10000), 128 + SIGKILL);
	int r = harness_daemon_restart(&d, NULL);
	if (r < 0)
		TEST_FAIL("restart: %s", strerror(-r));
}

/* A new owner (this pid: it takes the pool over) resumes "w": whether its
 * RESUME asks it to restore the backup. */
static bool sp_resume_restores(void)
{
	struct peer p, ctl;
	peer_connect(&p, &d);
	peer_hello(&p, "again");
	Vram__ServerMsg *m = peer_open_call(&p, "w", NULL);
	ASSERT_EQ(m->response->err, 0);
	ASSERT_EQ(m->response->pool->info->state, VRAM__STATE__STATE_PAUSED);
	vram__server_msg__free_unpacked(m, NULL);
	peer_connect(&ctl, &d);
	peer_hello(&ctl, "ctl");
	uint64_t rid = peer_transition(&ctl, "w", true);
	m = peer_event(&p, VRAM__EVENT_KIND__EVENT_RESUME);
	bool backup = m->event->backup;
	ASSERT_EQ(m->event->n_chunks, N_CHUNKS);
	uint64_t ev = m->event->event_id;
	vram__server_msg__free_unpacked(m, NULL);
	peer_ack(&p, ev, 0);
	ASSERT_EQ(peer_response(&ctl, rid, "resume reply"), 0);
	peer_close(&ctl);
	peer_close(&p);
	return backup;
}

/* Starts vramd, the owner with "w" and a controller that pauses it: the
 * owner's SAVE event id; the pause's request id in *pause_id. */
static uint64_t sp_saving(struct peer *owner, struct peer *ctl, int *backup,
			  uint64_t *pause_id)
{
	sp_start();
	sp_owner(owner, backup);
	peer_connect(ctl, &d);
	peer_hello(ctl, "ctl");
	*pause_id = peer_transition(ctl, "w", false);
	return sp_save_event(owner, 0);
}

/* sp_saving, then the owner reports one chunk saved and fails. */
static void sp_fails_after_one(struct peer *owner, struct peer *ctl,
			       int *backup)
{
	uint64_t pid;
	uint64_t ev = sp_saving(owner, ctl, backup, &pid);
	peer_progress(owner, ev, 1);
	sp_store_wait(N_CHUNKS - 1, "one saved");
	peer_ack(owner, ev, EIO);
	ASSERT_EQ(peer_response(ctl, pid, "pause reply"), EIO);
}

TEST(chunks_leave_the_store_as_they_are_reported_saved)
{
	struct peer owner, ctl;
	int backup = -1;
	uint64_t pid;
	uint64_t ev = sp_saving(&owner, &ctl, &backup, &pid);
	sp_backup_words(backup, true);
	peer_progress(&owner, ev, 1);
	sp_store_wait(N_CHUNKS - 1, "one saved");
	peer_progress(&owner, ev, 3);
	sp_store_wait(N_CHUNKS - 3, "three saved");
	ASSERT(strstr(harness_daemon_log(&d),
		      "pool w: saved 3 of 4 chunk(s); released 2"));
	/* Reports behind or past the pool change nothing. */
	peer_progress(&owner, ev, 2);
	peer_progress(&owner, ev, 9);
	peer_ack(&owner, ev, 0);
	peer_ack_event(&owner, VRAM__EVENT_KIND__EVENT_PAUSE);
	ASSERT_EQ(peer_response(&ctl, pid, "pause reply"), 0);
	sp_store_wait(0, "paused");
	peer_close(&owner);
	peer_close(&ctl);
	close(backup);
	harness_daemon_stop(&d);
}

TEST(a_failed_save_in_parts_stays_pausing_and_saves_the_rest_again)
{
	struct peer owner, ctl;
	int backup = -1;
	sp_fails_after_one(&owner, &ctl, &backup);
	ASSERT(strstr(harness_daemon_log(&d), "pause again to save it"));
	/* A resume is refused; a pause again asks for the rest alone. */
	ASSERT_EQ(peer_response(&ctl, peer_transition(&ctl, "w", true),
				"resume reply"),
		  EBUSY);
	uint64_t pid = peer_transition(&ctl, "w", false);
	uint64_t ev = sp_save_event(&owner, 1);
	sp_backup_words(backup, true);
	peer_progress(&owner, ev, 3);
	sp_store_wait(1, "three saved");
	peer_ack(&owner, ev, 0);
	peer_ack_event(&owner, VRAM__EVENT_KIND__EVENT_PAUSE);
	ASSERT_EQ(peer_response(&ctl, pid, "pause reply"), 0);
	sp_store_wait(0, "paused");

	/* The owner is asked to restore what the two saves saved. */
	uint64_t rid = peer_transition(&ctl, "w", true);
	Vram__ServerMsg *m = peer_event(&owner, VRAM__EVENT_KIND__EVENT_RESUME);
	ASSERT(m->event->backup);
	ASSERT_EQ(m->event->n_chunks, N_CHUNKS);
	ev = m->event->event_id;
	vram__server_msg__free_unpacked(m, NULL);
	peer_ack(&owner, ev, 0);
	ASSERT_EQ(peer_response(&ctl, rid, "resume reply"), 0);
	sp_backup_words(backup, false);
	peer_close(&ctl);
	peer_close(&owner);
	close(backup);
	harness_daemon_stop(&d);
}

TEST(a_restart_during_a_save_in_parts_trusts_the_backup)
{
	struct peer owner, ctl;
	int backup = -1;
	uint64_t pid;
	uint64_t ev = sp_saving(&owner, &ctl, &backup, &pid);
	peer_progress(&owner, ev, 2);
	sp_store_wait(N_CHUNKS - 2, "two saved");
	/* The saver finishes its copies whatever the daemon does. */
	sp_backup_words(backup, true);
	sp_kill_and_restart();
	peer_close(&owner);
	peer_close(&ctl);
	ASSERT(strstr(harness_daemon_log(&d),
		      "a save in parts was under way (2 of 4 chunks saved)"));
	sp_store_wait(0, "recovered");
	/* Another process (not the owner) may not restore it before the
	 * owner is back: its saver could still be copying. */
	pid_t child = fork();
	if (child == 0) {
		struct peer q;
		peer_connect(&q, &d);
		peer_hello(&q, "other");
		Vram__ServerMsg *m = peer_open_call(&q, "w", NULL);
		ASSERT_EQ(m->response->err, 0);
		vram__server_msg__free_unpacked(m, NULL);
		uint64_t rid = peer_transition(&q, "w", true);
		m = peer_recv(&q, 10000, "resume reply");
		ASSERT_EQ(m->body_case, VRAM__SERVER_MSG__BODY_RESPONSE);
		ASSERT_UEQ(m->response->id, rid);
		ASSERT_EQ(m->response->err, EBUSY);
		ASSERT(m->response->message &&
		       strstr(m->response->message, "cut its save in parts"));
		_exit(0);
	}
	ASSERT_EQ(harness_wait(child, 10000), 0);
	ASSERT(sp_resume_restores());
	sp_backup_words(backup, false);
	close(backup);
	harness_daemon_stop(&d);
}

TEST(a_restart_after_a_failed_save_in_parts_does_not_trust_it)
{
	struct peer owner, ctl;
	int backup = -1;
	sp_fails_after_one(&owner, &ctl, &backup);
	sp_kill_and_restart();
	peer_close(&owner);
	peer_close(&ctl);
	ASSERT(strstr(harness_daemon_log(&d),
		      "comes back paused without its content"));
	ASSERT(!sp_resume_restores());
	close(backup);
	harness_daemon_stop(&d);
}
