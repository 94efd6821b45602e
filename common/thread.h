/* SPDX-License-Identifier: Apache-2.0 */
/* Threads that take no signals: vramd's and libvram's helper threads.
 * Header only, like env.h: each side compiles its own copy. */
#ifndef VRAM_COMMON_THREAD_H
#define VRAM_COMMON_THREAD_H

#include <pthread.h>
#include <signal.h>

/* pthread_create() with every signal blocked in the new thread, so that
 * signals stay with the thread that handles them (vramd's libuv loop, a
 * client program's own threads). Returns pthread_create()'s result. */
static inline int thread_start_unsignalled(pthread_t *t,
					   const pthread_attr_t *attr,
					   void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	int r;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(t, attr, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return r;
}

#endif
