/* SPDX-License-Identifier: Apache-2.0 */
/* Runs every case of every test binary named on the command line, each in
 * its own process with a timeout, and prints one line per case and the
 * totals last: "N passed, N failed, N skipped".
 *
 * A case passes when it exits 0, is skipped when it exits 77, and fails
 * otherwise (a signal, another status, or the timeout). The output of a
 * failed case is printed; others' is kept quiet unless VRAM_TEST_VERBOSE is
 * set. TEST_TIMEOUT (seconds, default 60) and TEST_FILTER (a substring of
 * "binary/case") tune a run.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SKIP_STATUS 77

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Runs argv with stdout+stderr into a temporary file; returns its exit
 * status (or 128+signal), -1 on timeout. */
static int run_case(char *const argv[], int timeout_s, FILE **log)
{
	FILE *out = tmpfile();
	if (!out)
		return -2;
	pid_t pid = fork();
	if (pid < 0) {
		fclose(out);
		return -2;
	}
	if (pid == 0) {
		setpgid(0, 0);
		dup2(fileno(out), 1);
		dup2(fileno(out), 2);
		execv(argv[0], argv);
		_exit(127);
	}
	setpgid(pid, pid);
	double deadline = now() + timeout_s;
	int status, rc;
	for (;;) {
		pid_t w = waitpid(pid, &status, WNOHANG);
		if (w == pid)
			break;
		if (now() > deadline) {
			kill(-pid, SIGKILL);
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			*log = out;
			return -1;
		}
		usleep(2000);
	}
	/* Whatever the case started in its group goes with it. */
	kill(-pid, SIGKILL);
	if (WIFEXITED(status))
		rc = WEXITSTATUS(status);
	else
		rc = 128 + WTERMSIG(status);
	*log = out;
	return rc;
}

static void dump(FILE *f)
{
	char buf[4096];
	size_t n;
	rewind(f);
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		fwrite(buf, 1, n, stdout);
}

int main(int argc, char **argv)
{
	int passed = 0, failed = 0, skipped = 0;
	const char *t = getenv("TEST_TIMEOUT");
	int timeout_s = t ? atoi(t) : 60;
	const char *filter = getenv("TEST_FILTER");
	int verbose = getenv("VRAM_TEST_VERBOSE") != NULL;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 1; i < argc; i++) {
		char cmd[4096];
		snprintf(cmd, sizeof(cmd), "'%s' --list", argv[i]);
		FILE *p = popen(cmd, "r");
		if (!p) {
			printf("FAIL %s: cannot list cases\n", argv[i]);
			failed++;
			continue;
		}
		char name[256];
		const char *base = strrchr(argv[i], '/');
		base = base ? base + 1 : argv[i];
		char names[256][256];
		int n = 0;
		while (n < 256 && fgets(name, sizeof(name), p)) {
			name[strcspn(name, "\n")] = 0;
			snprintf(names[n++], sizeof(names[0]), "%s", name);
		}
		if (pclose(p) != 0 || n == 0) {
			printf("FAIL %s: cannot list cases\n", base);
			failed++;
			continue;
		}
		for (int k = 0; k < n; k++) {
			char full[600];
			snprintf(full, sizeof(full), "%.300s/%.255s", base, names[k]);
			if (filter && !strstr(full, filter))
				continue;
			char *cargv[] = { argv[i], "--run", names[k], NULL };
			FILE *log = NULL;
			double t0 = now();
			int rc = run_case(cargv, timeout_s, &log);
			double dt = now() - t0;
			if (rc == 0) {
				printf("ok   %s (%.2fs)\n", full, dt);
				passed++;
				if (verbose && log)
					dump(log);
			} else if (rc == SKIP_STATUS) {
				printf("skip %s\n", full);
				skipped++;
				if (log)
					dump(log);
			} else {
				if (rc == -1)
					printf("FAIL %s: timed out after %ds\n", full, timeout_s);
				else
					printf("FAIL %s: exit %d (%.2fs)\n", full, rc, dt);
				if (log)
					dump(log);
				failed++;
			}
			if (log)
				fclose(log);
		}
	}
	printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
	return failed ? 1 : 0;
}
