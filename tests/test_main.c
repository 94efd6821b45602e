/* SPDX-License-Identifier: Apache-2.0 */
/* main() for every test binary: --list prints the cases, --run NAME runs
 * one in this process, no argument runs all of them in this process (for
 * a debugger; the runner uses --run so that each case is isolated). */
#include "test.h"

#define TEST_MAX 256

static struct {
	const char *name;
	test_fn fn;
} tests[TEST_MAX];
static int n_tests;

void test_register(const char *name, test_fn fn)
{
	if (n_tests == TEST_MAX) {
		fprintf(stderr, "too many tests\n");
		exit(2);
	}
	tests[n_tests].name = name;
	tests[n_tests].fn = fn;
	n_tests++;
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "--list") == 0) {
		for (int i = 0; i < n_tests; i++)
			printf("%s\n", tests[i].name);
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "--run") == 0) {
		for (int i = 0; i < n_tests; i++) {
			if (strcmp(tests[i].name, argv[2]) == 0) {
				tests[i].fn();
				return 0;
			}
		}
		fprintf(stderr, "no test named %s\n", argv[2]);
		return 2;
	}
	for (int i = 0; i < n_tests; i++) {
		printf("-- %s\n", tests[i].name);
		fflush(stdout);
		tests[i].fn();
	}
	return 0;
}
