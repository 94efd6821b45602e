/* SPDX-License-Identifier: Apache-2.0 */
/* Log handler: nothing is printed unless the program asks for it (a
 * handler, or VRAM_LOG). The rules are in vram.h (vram_set_log_handler). */
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static vram_log_fn log_fn;
static enum vram_log_level log_max = VRAM_LOG_ERROR;
static void *log_userdata;
static bool log_set; /* a handler was installed (or removed) */
static pthread_once_t log_env_once = PTHREAD_ONCE_INIT;
static int log_env_max = -1; /* VRAM_LOG's level, -1: unset */

static const char *const log_names[] = { "error", "warn", "info", "debug" };

static void log_env_read(void)
{
	const char *v = getenv("VRAM_LOG");

	for (int i = 0; v && i <= VRAM_LOG_DEBUG; i++)
		if (strcmp(v, log_names[i]) == 0)
			log_env_max = i;
}

static void log_stderr(enum vram_log_level level, const char *msg,
		       void *userdata)
{
	(void)userdata;
	fprintf(stderr, "libvram: %s: %s\n", log_names[level], msg);
}

void vram_set_log_handler(vram_log_fn fn, enum vram_log_level max_level,
			  void *userdata)
{
	if ((int)max_level < VRAM_LOG_ERROR)
		max_level = VRAM_LOG_ERROR;
	if (max_level > VRAM_LOG_DEBUG)
		max_level = VRAM_LOG_DEBUG;
	pthread_mutex_lock(&log_lock);
	log_fn = fn;
	log_max = max_level;
	log_userdata = userdata;
	log_set = true;
	pthread_mutex_unlock(&log_lock);
}

void log_write(enum vram_log_level level, const char *fmt, ...)
{
	char msg[1024];
	vram_log_fn fn;
	void *userdata;
	enum vram_log_level max;
	va_list ap;

	/* Copy the handler out so that it runs without our lock held: a
	 * handler may call vram_set_log_handler() (to remove itself) and the
	 * other lock-free calls vram.h names. It must not make any other
	 * libvram call: log_write() runs with a client's lock held, which
	 * such a call would take again. */
	pthread_once(&log_env_once, log_env_read);
	pthread_mutex_lock(&log_lock);
	fn = log_fn;
	max = log_max;
	userdata = log_userdata;
	if (!log_set && log_env_max >= 0) {
		fn = log_stderr;
		max = (enum vram_log_level)log_env_max;
	}
	pthread_mutex_unlock(&log_lock);
	if (!fn || level > max)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fn(level, msg, userdata);
}
