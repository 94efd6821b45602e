/* SPDX-License-Identifier: Apache-2.0 */
/* The process-wide log handler set by vram_set_log_handler(). libvram
 * prints nothing by itself: without a handler, log_write() does nothing. */
#ifndef LIBVRAM_LOG_H
#define LIBVRAM_LOG_H

#include "vram.h"

/* Formats and hands a message to the handler if one is installed for this
 * level. Safe from any thread, with or without libvram locks held: the
 * log's own lock is not held while the handler runs. */
void log_write(enum vram_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
