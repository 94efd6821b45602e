/* SPDX-License-Identifier: Apache-2.0 */
/* Backup policies against a real vramd: a host backup released after a
 * resume (its pages back, the accounting back to 0) or retained, a
 * pageable one, and a disk backup the daemon owns in backup_dir (written
 * by a pause, read by a resume, released or kept, removed with the
 * pool), and host backups kept in a tmpfs (host_backup_dir). The
 * accounting counts held pages (st_blocks), so these cases also check
 * that vramctl's figures are what the backups truly hold. */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <linux/magic.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>

#include "integ.h"

#define DATA (8 * MiB)

static uint64_t pool_backup(vram_client *c, const char *name)
{
	struct vram_pool_info *pi = NULL;
	size_t n = 0;
	struct vram_selector sel = { .size = sizeof(sel), .name = name };
	int r = vram_list(c, &sel, sizeof(*pi), &pi, &n);
	if (r < 0 || n != 1)
		TEST_FAIL("vram_list %s: %d (%s)", name, r, vram_last_error());
	uint64_t b = pi[0].backup_bytes;
	vram_pool_info_free(pi, n);
	return b;
}

/* Pauses and resumes p, checking its content survives. */
/* A host pool named name, tagged "weights", with one allocation of bytes
 * at *a filled from seed. */
static vram_pool *weights_filled(vram_client *c, const char *name,
				 unsigned flags, size_t bytes, uint32_t seed,
				 void **a)
{
	vram_pool *w = integ_pool(c, name, "weights", VRAM_POLICY_HOST, flags);
	ASSERT_OK(vram_alloc(w, bytes, a));
	integ_fill(*a, bytes, seed);
	return w;
}

static void cycle(vram_pool *p, void *a, uint32_t seed)
{
	ASSERT_OK(vram_pool_pause(p, NULL));
	ASSERT_OK(vram_pool_resume(p, NULL));
	ASSERT_OK(integ_check(a, DATA, seed));
}

TEST(host_backup_released_after_resume)
{
	integ_start("256M");
	vram_client *c = integ_connect("engine");
	void *a;
	vram_pool *w =
		weights_filled(c, "w", VRAM_POOL_RELEASE_BACKUP, DATA, 7, &a);
	/* Sparse until a pause writes it. */
	ASSERT_UEQ(pool_backup(c, "w"), 0);
	for (int i = 0; i < 3; i++) {
		ASSERT_OK(vram_pool_pause(w, NULL));
		ASSERT(pool_backup(c, "w") >= DATA);
		ASSERT(integ_stats(c).backup_bytes >= DATA);
		ASSERT_OK(vram_pool_resume(w, NULL));
		ASSERT_OK(integ_check(a, DATA, 7));
		/* Every mapper maps the restored pool: the pages went back. */
		ASSERT_UEQ(pool_backup(c, "w"), 0);
		ASSERT_UEQ(integ_stats(c).backup_bytes,
			   integ_base.backup_bytes);
		integ_fill(a, DATA, 8 + (uint32_t)i);
		ASSERT_OK(vram_pool_pause(w, NULL));
		ASSERT_OK(vram_pool_resume(w, NULL));
		ASSERT_OK(integ_check(a, DATA, 8 + (uint32_t)i));
		integ_fill(a, DATA, 7);
	}
	vram_client_close(c);
	integ_stop();
}

/* The default keeps the pages: nothing to ask for, and both flags at once
 * are refused. */
/* A restore comes in parts: the daemon makes the chunks as the restorer
 * reports them restored (its log says how far each report got), and the
 * content is back whole; a client that says no (VRAM_RESUME_IN_PARTS=0)
 * gets every chunk at once. */
TEST(host_restore_comes_in_parts_unless_the_client_says_no)
{
	integ_start_chunked("256M", "8M"); /* the pool below has 6 chunks */
	for (int parts = 1; parts >= 0; parts--) {
		if (!parts)
			setenv("VRAM_RESUME_IN_PARTS", "0", 1);
		vram_client *c = integ_connect("engine");
		const char *name = parts ? "w" : "w0";
		void *a[6];
		vram_pool *w = integ_pool(c, name, "weights", VRAM_POLICY_HOST,
					  0);
		for (int i = 0; i < 6; i++) {
			ASSERT_OK(vram_alloc(w, DATA, &a[i]));
			integ_fill(a[i], DATA, 20 + (uint32_t)i);
		}
		struct vram_pool_info in = integ_info(c, name);
		ASSERT(in.chunks >= 6);
		char said[128];
		snprintf(said, sizeof(said), "pool %s: restored 1 of %u chunk(s)",
			 name, in.chunks);
		ASSERT_OK(vram_pool_pause(w, NULL));
		ASSERT_OK(vram_pool_resume(w, NULL));
		for (int i = 0; i < 6; i++)
			ASSERT_OK(integ_check(a[i], DATA, 20 + (uint32_t)i));
		ASSERT_EQ(strstr(harness_daemon_log(&integ_daemon), said) != NULL,
			  parts);
		vram_client_close(c);
		unsetenv("VRAM_RESUME_IN_PARTS");
	}
	integ_stop();
}

TEST(host_backup_retained_by_default)
{
	integ_start("256M");
	vram_client *c = integ_connect("engine");
	void *a;
	vram_pool *w = weights_filled(c, "w", 0, DATA, 3, &a);
	cycle(w, a, 3);
	ASSERT(pool_backup(c, "w") >= DATA);
	struct vram_pool_options o = VRAM_POOL_OPTIONS_INIT;
	vram_pool *p = NULL;
	o.name = "both";
	o.policy = VRAM_POLICY_HOST;
	o.flags = VRAM_POOL_RETAIN_BACKUP | VRAM_POOL_RELEASE_BACKUP;
	ASSERT_EQ(vram_pool_create(c, &o, &p), -EINVAL);
	vram_client_close(c);
	integ_stop();
}

TEST(host_backup_retained_across_cycles_and_counted)
{
	integ_start("256M");
	vram_client *c = integ_connect("engine");
	void *a;
	vram_pool *w =
		weights_filled(c, "w", VRAM_POOL_RETAIN_BACKUP, DATA, 3, &a);
	for (int i = 0; i < 3; i++) {
		cycle(w, a, 3);
		/* Kept while active, and counted: vramctl used to say 0. */
		ASSERT(pool_backup(c, "w") >= DATA);
		ASSERT(integ_stats(c).backup_bytes >= DATA);
	}
	/* Dropping the pool gives them back (integ_stop checks the total). */
	vram_client_close(c);
	integ_stop();
}

TEST(pageable_host_backup_keeps_content)
{
	integ_start("256M");
	vram_client *c = integ_connect("engine");
	void *a;
	vram_pool *w = weights_filled(
		c, "w", VRAM_POOL_PAGEABLE_BACKUP | VRAM_POOL_RELEASE_BACKUP,
		DATA, 5, &a);
	cycle(w, a, 5);
	cycle(w, a, 5);
	ASSERT_UEQ(pool_backup(c, "w"), 0);
	vram_client_close(c);
	integ_stop();
}

/* ---- disk ---------------------------------------------------------------- */

static char disk_dir[64], disk_conf[96];

/* Starts vramd with backup_dir set to a fresh directory. */
static void disk_start(void)
{
	snprintf(disk_dir, sizeof(disk_dir), "/tmp/vramd-backup-XXXXXX");
	if (!mkdtemp(disk_dir))
		TEST_FAIL("mkdtemp: %s", strerror(errno));
	snprintf(disk_conf, sizeof(disk_conf), "%s.conf", disk_dir);
	FILE *f = fopen(disk_conf, "w");
	ASSERT(f != NULL);
	fprintf(f, "# written by backup_test\nbackup_dir = %s\n", disk_dir);
	fclose(f);
	const char *const extra[] = { "--host-capacity",
				      "256M",
				      "--ack-timeout-ms",
				      "10000",
				      "--config",
				      disk_conf,
				      NULL };
	integ_start_args(extra);
}

/* The one backup file in disk_dir, into path; 0 when there is none. */
static int disk_file(char *path, size_t len)
{
	DIR *d = opendir(disk_dir);
	struct dirent *e;
	int n = 0;
	ASSERT(d != NULL);
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, len, "%s/%s", disk_dir, e->d_name);
		n++;
	}
	closedir(d);
	return n;
}

static void disk_stop(void)
{
	char path[512];
	integ_stop();
	ASSERT_EQ(disk_file(path, sizeof(path)), 0);
	unlink(disk_conf);
	ASSERT_OK(rmdir(disk_dir));
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The release of a backup runs on a worker of the daemon after the
 * resume has answered: waits for its blocks to go (a bound only a daemon
 * that never releases reaches). */
static void wait_file_released(const char *path)
{
	struct stat st;

	for (int i = 0; i < 1000; i++) {
		ASSERT_OK(stat(path, &st));
		if (st.st_blocks == 0)
			return;
		usleep(10000);
	}
	TEST_FAIL("%s still holds %lld blocks after the resume", path,
		  (long long)st.st_blocks);
}

static void disk_case(unsigned flags)
{
	char path[512];
	struct stat st;
	disk_start();
	vram_client *c = integ_connect("engine");
	vram_pool *w = integ_pool(c, "w/1", "weights", VRAM_POLICY_DISK, flags);
	void *a;
	ASSERT_OK(vram_alloc(w, DATA, &a));
	integ_fill(a, DATA, 11);
	ASSERT_EQ(disk_file(path, sizeof(path)), 1);
	ASSERT(strstr(path, "w_1") != NULL);
	ASSERT_OK(stat(path, &st));
	ASSERT_EQ(st.st_mode & 0777, 0600);
	ASSERT_EQ(st.st_blocks, 0);

	double t0 = now_s();
	ASSERT_OK(vram_pool_pause(w, NULL));
	double t1 = now_s();
	/* On disk, in the file, and counted as disk, not host memory. */
	ASSERT_OK(stat(path, &st));
	ASSERT((uint64_t)st.st_blocks * 512 >= DATA);
	void *copy = malloc(DATA);
	int fd = open(path, O_RDONLY);
	ASSERT(fd >= 0 && copy != NULL);
	ASSERT_EQ(pread(fd, copy, DATA, 0), (ssize_t)DATA);
	close(fd);
	ASSERT_OK(integ_check(copy, DATA, 11));
	free(copy);
	struct vram_stats s = integ_stats(c);
	ASSERT(s.disk_backup_bytes >= DATA);
	ASSERT_UEQ(s.backup_bytes, integ_base.backup_bytes);
	ASSERT(pool_backup(c, "w/1") >= DATA);

	double t2 = now_s();
	ASSERT_OK(vram_pool_resume(w, NULL));
	double t3 = now_s();
	ASSERT_OK(integ_check(a, DATA, 11));
	/* The pool's whole size is copied (its first chunk), not only what
	 * was written. VRAM_TEST_VERBOSE=1 shows the line. */
	double bytes = (double)vram_pool_size(w);
	printf("disk backup of %.0f MiB: pause %.1f MB/s, resume %.1f MB/s\n",
	       bytes / MiB, bytes / 1e6 / (t1 - t0), bytes / 1e6 / (t3 - t2));
	ASSERT_OK(stat(path, &st));
	if (flags & VRAM_POOL_RETAIN_BACKUP)
		ASSERT((uint64_t)st.st_blocks * 512 >= DATA);
	else
		wait_file_released(path);
	/* A second cycle writes it again. */
	integ_fill(a, DATA, 12);
	cycle(w, a, 12);
	vram_client_close(c);
	/* Dropped with the pool: disk_stop checks the directory is empty. */
	disk_stop();
}

TEST(disk_backup_written_read_and_released)
{
	disk_case(VRAM_POOL_RELEASE_BACKUP);
}

TEST(disk_backup_retained_until_the_pool_goes)
{
	disk_case(VRAM_POOL_RETAIN_BACKUP);
}

TEST(disk_policy_refused_without_backup_dir)
{
	integ_start("256M");
	vram_client *c = integ_connect("engine");
	struct vram_pool_options o = VRAM_POOL_OPTIONS_INIT;
	vram_pool *p = NULL;
	o.name = "d";
	o.policy = VRAM_POLICY_DISK;
	o.reserve_bytes = 64 * MiB;
	ASSERT_EQ(vram_pool_create(c, &o, &p), -ENOTSUP);
	ASSERT(strstr(vram_last_error(), "backup_dir") != NULL);
	o.policy = VRAM_POLICY_HOST;
	o.flags = 0x80;
	ASSERT_EQ(vram_pool_create(c, &o, &p), -EINVAL);
	vram_client_close(c);
	integ_stop();
}

/* This process's resident set, in bytes. */
static uint64_t backup_test_rss(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	unsigned long long size = 0, resident = 0;

	ASSERT(f != NULL);
	ASSERT_EQ(fscanf(f, "%llu %llu", &size, &resident), 2);
	fclose(f);
	return resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

TEST(backup_readable_and_released_by_the_client)
{
	integ_start("256M");
	vram_client *c = integ_connect("engine");
	vram_pool *w = integ_pool(c, "w", "weights", VRAM_POLICY_HOST,
				  VRAM_POOL_RETAIN_BACKUP);
	vram_pool *kv = integ_pool(c, "kv", "kv", VRAM_POLICY_DISCARD, 0);
	void *a, *host = NULL, *again = NULL;
	uint64_t len = 0, len2 = 0;
	ASSERT_OK(vram_alloc(w, DATA, &a));
	integ_fill(a, DATA, 21);
	ASSERT_EQ(vram_pool_backup(kv, &host, &len), -ENODEV);
	ASSERT_EQ(vram_pool_backup(w, NULL, &len), -EINVAL);
	ASSERT_OK(vram_pool_pause(w, NULL));
	ASSERT_OK(vram_pool_backup(w, &host, &len));
	ASSERT(len >= DATA);
	/* The saved content, at the pool's offsets. */
	ASSERT_OK(integ_check((char *)host + ((uintptr_t)a - vram_pool_base(w)),
			      DATA, 21));
	ASSERT_OK(vram_pool_resume(w, NULL));
	/* Retained: same address, still the content, still counted. */
	ASSERT_OK(vram_pool_backup(w, &again, &len2));
	ASSERT(again == host);
	ASSERT_OK(integ_check((char *)host + ((uintptr_t)a - vram_pool_base(w)),
			      DATA, 21));
	ASSERT(pool_backup(c, "w") >= DATA);
	/* The client decides: its pages leave the process at once, and go
	 * for the daemon's figures too once the punch on libvram's thread
	 * is done (the next use of the backup waits for it). */
	uint64_t rss0 = backup_test_rss();
	ASSERT_OK(vram_pool_backup_release(w));
	ASSERT(rss0 - backup_test_rss() >= DATA * 9 / 10);
	ASSERT_OK(vram_pool_backup(w, &again, &len2));
	ASSERT_UEQ(pool_backup(c, "w"), 0);
	ASSERT_OK(integ_check(a, DATA, 21));
	cycle(w, a, 21);
	ASSERT_EQ(vram_pool_backup_release(kv), -ENODEV);
	vram_client_close(c);
	integ_stop();
}

/* ---- the release of a backup runs off the loop ---------------------------- */

#define PUNCH_SRC "tests/integration/punch_hold/punch_hold.c"

static char punch_dir[64], punch_so[128], punch_note[128], punch_hold[128];
static int punch_note_fd = -1, punch_hold_fd = -1;

/* Starts vramd with tests/integration/punch_hold preloaded: its first
 * hole punch says so on the note fifo and waits on the hold fifo. */
static void punch_start(void)
{
	char out[4096];
	const char *cc = getenv("CC");

	if (access(PUNCH_SRC, R_OK) != 0)
		SKIP("%s not found (run from the source tree)", PUNCH_SRC);
	snprintf(punch_dir, sizeof(punch_dir), "/tmp/vram-punch-XXXXXX");
	ASSERT(mkdtemp(punch_dir) != NULL);
	snprintf(punch_so, sizeof(punch_so), "%s/libpunch_hold.so", punch_dir);
	snprintf(punch_note, sizeof(punch_note), "%s/note", punch_dir);
	snprintf(punch_hold, sizeof(punch_hold), "%s/hold", punch_dir);
	const char *const argv[] = { cc && *cc ? cc : "cc", "-shared", "-fPIC",
				     "-O1", "-o", punch_so, PUNCH_SRC, NULL };
	if (harness_run_capture(argv, out, sizeof(out)) != 0)
		SKIP("cannot build %s: %s", PUNCH_SRC, out);
	ASSERT_OK(mkfifo(punch_note, 0600));
	ASSERT_OK(mkfifo(punch_hold, 0600));
	/* Open for the daemon's whole life at both ends, so that its opens
	 * never block and its read waits for data only. */
	punch_note_fd = open(punch_note, O_RDWR | O_CLOEXEC);
	punch_hold_fd = open(punch_hold, O_RDWR | O_CLOEXEC);
	ASSERT(punch_note_fd >= 0 && punch_hold_fd >= 0);
	setenv("LD_PRELOAD", punch_so, 1);
	setenv("PUNCH_HOLD_NOTE", punch_note, 1);
	setenv("PUNCH_HOLD", punch_hold, 1);
	const char *asan = getenv("ASAN_OPTIONS");
	char asan_opts[512];
	snprintf(asan_opts, sizeof(asan_opts), "%s%sverify_asan_link_order=0",
		 asan ? asan : "", asan && *asan ? ":" : "");
	setenv("ASAN_OPTIONS", asan_opts, 1);
	const char *const extra[] = { "--host-capacity", "256M", NULL };
	integ_start_args(extra);
	unsetenv("LD_PRELOAD");
	unsetenv("PUNCH_HOLD_NOTE");
	unsetenv("PUNCH_HOLD");
}

static void punch_stop(void)
{
	integ_stop();
	close(punch_note_fd);
	close(punch_hold_fd);
	unlink(punch_note);
	unlink(punch_hold);
	unlink(punch_so);
	rmdir(punch_dir);
}

/* Waits for the daemon's first punch to be held. The bound is only met by
 * a daemon that never releases. */
static void punch_wait_held(void)
{
	struct pollfd pf = { .fd = punch_note_fd, .events = POLLIN };
	char c;

	if (poll(&pf, 1, 10000) != 1)
		TEST_FAIL("the release never began punching");
	ASSERT_EQ(read(punch_note_fd, &c, 1), 1);
}

struct pauser {
	vram_pool *p;
	int r;
};

static void *pause_thread(void *arg)
{
	struct pauser *pa = arg;
	pa->r = vram_pool_pause(pa->p, NULL);
	return NULL;
}

/* The resume that leaves a release due answers, and the daemon serves
 * other clients, while the release's punch is held: it runs on a worker,
 * not on the loop (which used to punch before it answered anything). A
 * pause that comes while the punch is under way stops it before it saves,
 * so its new backup is whole: read from the backup itself, then on the
 * device after the resume. */
TEST(release_punches_off_the_loop_and_a_pause_stops_it)
{
	punch_start();
	vram_client *c = integ_connect("engine");
	vram_pool *w = integ_pool(c, "w", "weights", VRAM_POLICY_HOST,
				  VRAM_POOL_RELEASE_BACKUP);
	void *a, *host;
	uint64_t len;
	ASSERT_OK(vram_alloc(w, DATA, &a));
	integ_fill(a, DATA, 21);
	ASSERT_OK(vram_pool_pause(w, NULL));
	ASSERT(pool_backup(c, "w") >= DATA);
	ASSERT_OK(vram_pool_resume(w, NULL));
	ASSERT_OK(integ_check(a, DATA, 21));
	punch_wait_held();

	/* The punch is held on its worker: the loop answers. */
	ASSERT_OK(vram_ping(c));
	vram_client *other = integ_connect("other");
	ASSERT_OK(vram_ping(other));
	/* Counted as given back already: a list does not depend on how far
	 * the worker got. */
	ASSERT_UEQ(pool_backup(other, "w"), 0);

	/* New content, paused while the punch is still held; the hold is let
	 * go at once, before or after the pause reaches the daemon. */
	integ_fill(a, DATA, 22);
	struct pauser pa = { .p = w, .r = -1 };
	pthread_t t;
	ASSERT_OK(pthread_create(&t, NULL, pause_thread, &pa));
	ASSERT_EQ(write(punch_hold_fd, "g", 1), 1);
	ASSERT_OK(pthread_join(t, NULL));
	ASSERT_OK(pa.r);
	ASSERT_OK(vram_pool_backup(w, &host, &len));
	ASSERT(len >= DATA);
	ASSERT_OK(integ_check(host, DATA, 22));
	ASSERT(pool_backup(other, "w") >= DATA);
	ASSERT_OK(vram_pool_resume(w, NULL));
	ASSERT_OK(integ_check(a, DATA, 22));
	ASSERT_UEQ(pool_backup(other, "w"), 0);
	vram_client_close(other);
	vram_client_close(c);
	punch_stop();
}

/* host_backup_dir: host backups are unnamed files in that tmpfs, where a
 * mount option can give them huge pages; what they hold is counted the
 * same, and goes back the same. A directory on anything but tmpfs or
 * hugetlbfs stops the daemon from starting, saying why. */
static uint64_t backup_test_fs_used(const char *dir)
{
	struct statfs sf;
	ASSERT(statfs(dir, &sf) == 0);
	return (uint64_t)(sf.f_blocks - sf.f_bfree) * (uint64_t)sf.f_bsize;
}

/* Starts vramd (a 256 MiB device) with host_backup_dir at dir. */
static void backup_test_start_in(const char *dir)
{
	char set[PATH_MAX + 32];
	snprintf(set, sizeof(set), "host_backup_dir=%s", dir);
	const char *const extra[] = { "--host-capacity", "256M", "--set", set,
				      NULL };
	integ_start_args(extra);
}

TEST(host_backup_dir_keeps_host_backups_in_its_tmpfs)
{
	char dir[] = "/dev/shm/vramd-host-backup-XXXXXX";
	struct statfs sf;
	if (statfs("/dev/shm", &sf) < 0 || sf.f_type != TMPFS_MAGIC)
		SKIP("no tmpfs at /dev/shm");
	ASSERT(mkdtemp(dir) != NULL);
	backup_test_start_in(dir);
	vram_client *c = integ_connect("engine");
	void *a;
	vram_pool *w =
		weights_filled(c, "w", VRAM_POOL_RELEASE_BACKUP, DATA, 21, &a);
	uint64_t before = backup_test_fs_used(dir);
	for (int i = 0; i < 2; i++) {
		ASSERT_OK(vram_pool_pause(w, NULL));
		ASSERT(pool_backup(c, "w") >= DATA);
		ASSERT(backup_test_fs_used(dir) >= before + DATA);
		ASSERT_OK(vram_pool_resume(w, NULL));
		ASSERT_OK(integ_check(a, DATA, 21));
		ASSERT_UEQ(pool_backup(c, "w"), 0);
		/* Given back off the loop, as from a memfd. */
		for (int k = 0; k < 500 && backup_test_fs_used(dir) >= before + DATA; k++)
			harness_msleep(10);
		ASSERT_LT(backup_test_fs_used(dir), before + DATA);
	}
	/* Unnamed: nothing to list, nothing left behind. */
	DIR *d = opendir(dir);
	ASSERT(d != NULL);
	int names = 0;
	for (struct dirent *e; (e = readdir(d));)
		names += e->d_name[0] != '.';
	closedir(d);
	ASSERT_EQ(names, 0);
	vram_client_close(c);
	integ_stop();
	ASSERT(rmdir(dir) == 0);

	/* A directory on a disk (or anything not memory) is refused. */
	char disk[] = "/var/tmp/vramd-host-backup-disk-XXXXXX";
	ASSERT(mkdtemp(disk) != NULL);
	if (statfs(disk, &sf) == 0 && sf.f_type != TMPFS_MAGIC) {
		char real[PATH_MAX], bad[PATH_MAX + 32];
		ASSERT(realpath(disk, real) != NULL);
		snprintf(bad, sizeof(bad), "host_backup_dir=%s", real);
		char cmd[2 * PATH_MAX + 128], out[1024] = "";
		const char *bin = getenv("VRAMD_BIN");
		snprintf(cmd, sizeof(cmd),
			 "%s --backend host --socket %s/s --set %s 2>&1",
			 bin ? bin : "build/vramd", real, bad);
		FILE *f = popen(cmd, "r");
		ASSERT(f != NULL);
		size_t n = fread(out, 1, sizeof(out) - 1, f);
		out[n] = 0;
		ASSERT(WEXITSTATUS(pclose(f)) != 0);
		ASSERT(strstr(out, "is not a tmpfs or hugetlbfs mount") != NULL);
	}
	ASSERT(rmdir(disk) == 0);
}

/* In a mount namespace of this case's own (skipped without
 * CAP_SYS_ADMIN), mounts a tmpfs of mib MiB at dir (a mkdtemp template)
 * and starts vramd with host_backup_dir there. */
static void backup_test_start_small(char *dir, unsigned mib)
{
	char opts[64];

	if (unshare(CLONE_NEWNS) < 0)
		SKIP("no mount namespace here: %s", strerror(errno));
	ASSERT(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0);
	ASSERT(mkdtemp(dir) != NULL);
	snprintf(opts, sizeof(opts), "size=%um,mode=0700", mib);
	if (mount("vramd-test", dir, "tmpfs", 0, opts) < 0) {
		rmdir(dir);
		SKIP("cannot mount a tmpfs: %s", strerror(errno));
	}
	backup_test_start_in(dir);
}

/* A host_backup_dir without room for a backup refuses the pause (ENOSPC,
 * the pool stays active with its content): a save into a full tmpfs would
 * fault in the saver, not fail. In a mount namespace of the case's own,
 * with a 16 MiB tmpfs (needs CAP_SYS_ADMIN: skipped without). */
TEST(host_backup_dir_without_room_refuses_the_pause)
{
	char dir[] = "/tmp/vramd-small-backup-XXXXXX";
	backup_test_start_small(dir, 16);
	vram_client *c = integ_connect("engine");
	void *a;
	vram_pool *w = weights_filled(c, "w", 0, 32 * MiB, 5, &a);
	ASSERT_EQ(vram_pool_pause(w, NULL), -ENOSPC);
	ASSERT(strstr(vram_last_error(), "host_backup_dir") != NULL);
	ASSERT_EQ(integ_info(c, "w").state, VRAM_STATE_ACTIVE);
	ASSERT_OK(integ_check(a, 32 * MiB, 5));
	vram_client_close(c);
	integ_stop();
	ASSERT(umount(dir) == 0);
	ASSERT(rmdir(dir) == 0);
}

/* What the saves under way there are still to write counts against the
 * room: with a 96 MiB tmpfs, a 64 MiB pool whose saver never answers
 * keeps a second 64 MiB pool from pausing until it is gone. */
TEST(host_backup_dir_room_counts_the_saves_under_way)
{
	char dir[] = "/tmp/vramd-small-backup-XXXXXX";
	backup_test_start_small(dir, 96);
	struct integ_sync s;
	integ_sync_init(&s);
	pid_t pid = fork();
	if (pid == 0) {
		vram_client *c = integ_connect("stuck");
		vram_pool *w = integ_pool(c, "a", "weights", VRAM_POLICY_HOST, 0);
		void *a;
		ASSERT_OK(vram_alloc(w, 32 * MiB, &a));
		integ_signal(s.to_parent[1]);
		pause(); /* never handles the save event */
		_exit(0);
	}
	integ_wait_signal(s.to_parent[0]);
	vram_client *c = integ_connect("engine");
	void *b;
	vram_pool *w = weights_filled(c, "b", 0, 32 * MiB, 9, &b);
	struct vram_selector sel = { .size = sizeof(sel), .name = "a" };
	ASSERT_EQ(vram_pause(c, &sel, 200, NULL), -ETIMEDOUT);
	ASSERT_EQ(integ_info(c, "a").state, VRAM_STATE_PAUSING);
	ASSERT_EQ(vram_pool_pause(w, NULL), -ENOSPC);
	ASSERT_EQ(integ_info(c, "b").state, VRAM_STATE_ACTIVE);
	/* The stuck saver goes: its pool is dropped, and b fits. */
	kill(pid, SIGKILL);
	ASSERT_EQ(harness_wait(pid, 5000), 128 + SIGKILL);
	for (int i = 0; i < 200 && vram_pool_pause(w, NULL) == -ENOSPC; i++)
		harness_msleep(10);
	ASSERT_EQ(integ_info(c, "b").state, VRAM_STATE_PAUSED);
	ASSERT_OK(vram_pool_resume(w, NULL));
	ASSERT_OK(integ_check(b, 32 * MiB, 9));
	vram_client_close(c);
	integ_stop();
	ASSERT(umount(dir) == 0);
	ASSERT(rmdir(dir) == 0);
}
