#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum log_level log_max_level = LOG_INFO;

static const char *const level_names[] = { "error", "warn", "info", "debug" };

int log_level_parse(const char *s)
{
	for (int i = 0; i <= LOG_DEBUG; i++)
		if (strcmp(s, level_names[i]) == 0)
			return i;
	return -EINVAL;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	if (level > log_max_level)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	/* One fprintf per line so that lines from a restart never interleave. */
	fprintf(stderr, "vramd: %s: %s\n", level_names[level], buf);
}
