/* SPDX-License-Identifier: Apache-2.0 */
/* A small test framework. Each test file defines cases with TEST(name);
 * tests/test_main.c gives every test binary a main that lists its cases
 * (--list) or runs one (--run NAME). tests/runner.c runs each case in its
 * own process with a timeout and prints "N passed, N failed, N skipped".
 *
 * Assertions print both sides and abort the case (exit 1). SKIP() ends the
 * case as skipped (exit 77), e.g. a GPU test on a machine without a GPU.
 */
#ifndef VRAM_TEST_H
#define VRAM_TEST_H

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_EXIT_SKIP 77

typedef void (*test_fn)(void);
void test_register(const char *name, test_fn fn);

#define TEST(name)                                                    \
	static void test_##name(void);                                \
	__attribute__((constructor)) static void test_reg_##name(void) \
	{                                                             \
		test_register(#name, test_##name);                    \
	}                                                             \
	static void test_##name(void)

#define TEST_FAIL(...)                                                \
	do {                                                          \
		fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);       \
		fprintf(stderr, __VA_ARGS__);                         \
		fputc('\n', stderr);                                  \
		exit(1);                                              \
	} while (0)

#define SKIP(...)                                                     \
	do {                                                          \
		fprintf(stderr, "skip: ");                            \
		fprintf(stderr, __VA_ARGS__);                         \
		fputc('\n', stderr);                                  \
		exit(TEST_EXIT_SKIP);                                 \
	} while (0)

#define ASSERT(cond)                                                  \
	do {                                                          \
		if (!(cond))                                          \
			TEST_FAIL("assertion failed: %s", #cond);     \
	} while (0)

#define ASSERT_CMP_(a, op, b, fmt, type)                              \
	do {                                                          \
		type a_ = (type)(a), b_ = (type)(b);                  \
		if (!(a_ op b_))                                      \
			TEST_FAIL("%s %s %s: " fmt " vs " fmt, #a, #op, #b, a_, b_); \
	} while (0)

#define ASSERT_EQ(a, b) ASSERT_CMP_(a, ==, b, "%" PRId64, int64_t)
#define ASSERT_NE(a, b) ASSERT_CMP_(a, !=, b, "%" PRId64, int64_t)
#define ASSERT_LT(a, b) ASSERT_CMP_(a, <, b, "%" PRId64, int64_t)
#define ASSERT_LE(a, b) ASSERT_CMP_(a, <=, b, "%" PRId64, int64_t)
#define ASSERT_GT(a, b) ASSERT_CMP_(a, >, b, "%" PRId64, int64_t)
#define ASSERT_GE(a, b) ASSERT_CMP_(a, >=, b, "%" PRId64, int64_t)
#define ASSERT_UEQ(a, b) ASSERT_CMP_(a, ==, b, "%" PRIu64, uint64_t)

/* Asserts a call returned 0; prints the errno name on failure. */
#define ASSERT_OK(expr)                                               \
	do {                                                          \
		long r_ = (long)(expr);                               \
		if (r_ != 0)                                          \
			TEST_FAIL("%s returned %ld (%s)", #expr, r_,  \
				  r_ < 0 ? strerror((int)-r_) : "not 0"); \
	} while (0)

#define ASSERT_STREQ(a, b)                                            \
	do {                                                          \
		const char *a_ = (a), *b_ = (b);                      \
		if (!a_ || !b_ || strcmp(a_, b_) != 0)                \
			TEST_FAIL("%s == %s: \"%s\" vs \"%s\"", #a, #b, \
				  a_ ? a_ : "(null)", b_ ? b_ : "(null)"); \
	} while (0)

#endif
