/* SPDX-License-Identifier: Apache-2.0 */
/* Leveled logging on stderr: "vramd: LEVEL: message". Under systemd the
 * journal adds time stamps, so none are printed here; when stderr is the
 * journal, lines start with their syslog priority instead ("<4>warn: ...",
 * sd-daemon(3)), so that journalctl -p filters them. */
#ifndef VRAMD_LOG_H
#define VRAMD_LOG_H

enum log_level { LOG_ERR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

extern enum log_level log_max_level;

/* "error", "warn", "info", "debug" → level; -EINVAL otherwise. */
int log_level_parse(const char *s);

/* 1 if stderr is a journal stream: $JOURNAL_STREAM ("DEV:INO", set by
 * systemd) names stderr's device and inode; 0 otherwise (a terminal, a
 * file, or stderr redirected by a child of the service). */
int log_stderr_is_journal(void);

/* Prints one line at level if log_max_level allows it. */
void log_msg(enum log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define log_err(...) log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...)                                    \
	do {                                              \
		if (log_max_level >= LOG_DEBUG)           \
			log_msg(LOG_DEBUG, __VA_ARGS__);  \
	} while (0)

#endif
