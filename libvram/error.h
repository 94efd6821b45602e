/* SPDX-License-Identifier: Apache-2.0 */
/* The thread-local message behind vram_last_error(). */
#ifndef LIBVRAM_ERROR_H
#define LIBVRAM_ERROR_H

#define ERROR_MSG_MAX 512

/* Sets this thread's message (printf format) and returns -err; err may be
 * given positive or negative. Also logs the message at debug level. */
int error_set(int err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* A counter bumped by every error_set() on this thread. A public function
 * takes it on entry and hands it to error_finish() on the way out. */
unsigned error_generation(void);

/* Returns r. When r < 0 and no message was set since gen, sets one from
 * strerror(-r), so that every failure leaves a message. */
int error_finish(unsigned gen, int r);

/* This thread's message, and a way to put a saved one back: code that runs
 * on behalf of another thread (the reader role) saves and restores it so
 * that the thread it borrowed keeps its own last error. */
const char *error_get(void);
void error_restore(const char *saved);

#endif
