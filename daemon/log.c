/* SPDX-License-Identifier: Apache-2.0 */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum log_level log_max_level = LOG_INFO;

static const char *const level_names[] = { "error", "warn", "info", "debug" };

/* syslog(3) priorities of the levels (LOG_ERR 3, LOG_WARNING 4, LOG_INFO 6,
 * LOG_DEBUG 7), spelled as numbers: <syslog.h> would clash with log.h. */
static const int level_priorities[] = { 3, 4, 6, 7 };

int log_level_parse(const char *s)
{
	for (int i = 0; i <= LOG_DEBUG; i++)
		if (strcmp(s, level_names[i]) == 0)
			return i;
	return -EINVAL;
}

int log_stderr_is_journal(void)
{
	const char *env = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	char end;

	if (!env || sscanf(env, "%llu:%llu%c", &dev, &ino, &end) != 2)
		return 0;
	if (fstat(2, &st) < 0)
		return 0;
	return (unsigned long long)st.st_dev == dev &&
	       (unsigned long long)st.st_ino == ino;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	/* Decided at the first line: stderr does not change under vramd. */
	static int journal = -1;
	char buf[1024];
	va_list ap;

	if (level > log_max_level)
		return;
	if (journal < 0)
		journal = log_stderr_is_journal();
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	/* One fprintf per line so that lines from a restart never interleave.
	 * The journal reads the priority from "<N>" and names the program
	 * itself, so there the "vramd: " prefix would only repeat it. */
	if (journal)
		fprintf(stderr, "<%d>%s: %s\n", level_priorities[level],
			level_names[level], buf);
	else
		fprintf(stderr, "vramd: %s: %s\n", level_names[level], buf);
}
