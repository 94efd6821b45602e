/* Leveled logging on stderr: "vramd: LEVEL: message". Under systemd the
 * journal adds time stamps, so none are printed here. */
#ifndef VRAMD_LOG_H
#define VRAMD_LOG_H

enum log_level { LOG_ERR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

extern enum log_level log_max_level;

/* "error", "warn", "info", "debug" → level; -EINVAL otherwise. */
int log_level_parse(const char *s);

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
