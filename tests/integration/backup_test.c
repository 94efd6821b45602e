/* SPDX-License-Identifier: Apache-2.0 */
/* Backup policies against a real vramd: a host backup released after a
 * resume (its pages back, the accounting back to 0) or retained, a
 * pageable one, and a disk backup the daemon owns in backup_dir (written
 * by a pause, read by a resume, released or kept, removed with the
 * pool). The accounting counts held pages (st_blocks), so these cases
 * also check that vramctl's figures are what the backups truly hold. */
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
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
	vram_pool *w = integ_pool(c, "w", "weights", VRAM_POLICY_HOST,
				  VRAM_POOL_RELEASE_BACKUP);
	void *a;
	ASSERT_OK(vram_alloc(w, DATA, &a));
	integ_fill(a, DATA, 7);
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
TEST(host_backup_retained_by_default)
{
	integ_start("256M");
	vram_client *c = integ_connect("engine");
	vram_pool *w = integ_pool(c, "w", "weights", VRAM_POLICY_HOST, 0);
	void *a;
	ASSERT_OK(vram_alloc(w, DATA, &a));
	integ_fill(a, DATA, 3);
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
	vram_pool *w = integ_pool(c, "w", "weights", VRAM_POLICY_HOST,
				  VRAM_POOL_RETAIN_BACKUP);
	void *a;
	ASSERT_OK(vram_alloc(w, DATA, &a));
	integ_fill(a, DATA, 3);
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
	vram_pool *w = integ_pool(c, "w", "weights", VRAM_POLICY_HOST,
				  VRAM_POOL_PAGEABLE_BACKUP |
					  VRAM_POOL_RELEASE_BACKUP);
	void *a;
	ASSERT_OK(vram_alloc(w, DATA, &a));
	integ_fill(a, DATA, 5);
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
		ASSERT_EQ(st.st_blocks, 0);
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
