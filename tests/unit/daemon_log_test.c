/* SPDX-License-Identifier: Apache-2.0 */
/* vramd's log lines: with stderr the journal ($JOURNAL_STREAM names its
 * device and inode, as systemd sets it) each line starts with its syslog
 * priority, so that journalctl -p warning shows warnings and errors; on
 * anything else the plain "vramd: LEVEL: " form. stderr goes to a file,
 * which is then read back. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "test.h"

/* Points stderr at a fresh file; returns its fd for reading back. */
static int stderr_to_file(void)
{
	char path[] = "/tmp/vramd-log-XXXXXX";
	int fd = mkstemp(path);

	ASSERT(fd >= 0);
	unlink(path);
	ASSERT(dup2(fd, 2) == 2);
	return fd;
}

static void journal_stream_set(int fd, int match)
{
	struct stat st;
	char env[64];

	ASSERT_OK(fstat(fd, &st));
	snprintf(env, sizeof(env), "%llu:%llu", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino + (match ? 0 : 1));
	ASSERT_OK(setenv("JOURNAL_STREAM", env, 1));
}

static void every_level(void)
{
	log_max_level = LOG_DEBUG;
	log_err("an error %d", 1);
	log_warn("a warning");
	log_info("news");
	log_debug("details");
	fflush(stderr);
}

static void read_back(int fd, char *buf, size_t size)
{
	ssize_t n = pread(fd, buf, size - 1, 0);

	ASSERT(n >= 0);
	buf[n] = '\0';
}

TEST(journal_priorities)
{
	char buf[1024];
	int fd = stderr_to_file();

	journal_stream_set(fd, 1);
	ASSERT_EQ(log_stderr_is_journal(), 1);
	every_level();
	read_back(fd, buf, sizeof(buf));
	ASSERT_STREQ(buf, "<3>error: an error 1\n"
			  "<4>warn: a warning\n"
			  "<6>info: news\n"
			  "<7>debug: details\n");
}

TEST(plain_without_journal)
{
	char buf[1024];
	int fd = stderr_to_file();

	unsetenv("JOURNAL_STREAM");
	ASSERT_EQ(log_stderr_is_journal(), 0);
	every_level();
	read_back(fd, buf, sizeof(buf));
	ASSERT_STREQ(buf, "vramd: error: an error 1\n"
			  "vramd: warn: a warning\n"
			  "vramd: info: news\n"
			  "vramd: debug: details\n");
}

/* A child of the service that redirected stderr inherits JOURNAL_STREAM:
 * the stream it names is no longer stderr. */
TEST(plain_when_stderr_is_another_file)
{
	char buf[1024];
	int fd = stderr_to_file();

	journal_stream_set(fd, 0);
	ASSERT_EQ(log_stderr_is_journal(), 0);
	log_warn("a warning");
	fflush(stderr);
	read_back(fd, buf, sizeof(buf));
	ASSERT_STREQ(buf, "vramd: warn: a warning\n");
}

TEST(garbage_journal_stream)
{
	static const char *const bad[] = { "", "12", "a:b", "1:2:3", "1:2x" };
	int fd = stderr_to_file();

	(void)fd;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ASSERT_OK(setenv("JOURNAL_STREAM", bad[i], 1));
		ASSERT_EQ(log_stderr_is_journal(), 0);
	}
}

TEST(level_below_max_is_quiet)
{
	char buf[1024];
	int fd = stderr_to_file();

	journal_stream_set(fd, 1);
	log_max_level = LOG_WARN;
	log_info("not shown");
	log_debug("not shown");
	log_warn("shown");
	fflush(stderr);
	read_back(fd, buf, sizeof(buf));
	ASSERT_STREQ(buf, "<4>warn: shown\n");
}
