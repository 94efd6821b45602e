/* SPDX-License-Identifier: Apache-2.0 */
/* vram_last_error(): one message per thread, set by every failing call. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "log.h"
#include "vram.h"

static __thread char error_msg[ERROR_MSG_MAX];
static __thread unsigned error_gen;

int error_set(int err, const char *fmt, ...)
{
	va_list ap;

	if (err < 0)
		err = -err;
	if (err == 0)
		err = EIO; /* a failure always has an errno */
	va_start(ap, fmt);
	vsnprintf(error_msg, sizeof(error_msg), fmt, ap);
	va_end(ap);
	error_gen++;
	log_write(VRAM_LOG_DEBUG, "error: %s", error_msg);
	return -err;
}

unsigned error_generation(void)
{
	return error_gen;
}

int error_finish(unsigned gen, int r)
{
	if (r < 0 && gen == error_gen)
		error_set(-r, "%s", strerror(-r));
	return r;
}

const char *error_get(void)
{
	return error_msg;
}

void error_restore(const char *saved)
{
	if (saved != error_msg)
		snprintf(error_msg, sizeof(error_msg), "%s", saved);
}

const char *vram_last_error(void)
{
	return error_msg;
}
