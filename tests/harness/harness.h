/* SPDX-License-Identifier: Apache-2.0 */
/* Test harness: start and stop a real vramd on a temporary socket, spawn
 * and wait for programs, count fds. Linked into every test binary and
 * benchmark, so it uses plain libc only (no libvram, no libuv).
 *
 * Functions return 0 (or a count, a status) on success and -errno on
 * failure, like the rest of vramd. None of them exits or aborts: a test
 * asserts on what they return.
 */
#ifndef VRAM_HARNESS_H
#define VRAM_HARNESS_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* One vramd started by harness_daemon_start(). The caller owns the struct;
 * its fields are read-only outside harness.c.
 *
 * The daemon's sd_notify datagrams are read as they come by a small
 * collector process and appended to DIR/notify.log: a datagram socket
 * holds only net.unix.max_dgram_qlen (often 10) unread messages, and a
 * daemon whose STATUS= and WATCHDOG=1 nobody reads would block in
 * sd_notify() in the middle of a long test. */
#define MAX_HARNESS_ARGS 16

struct harness_daemon {
	pid_t pid;	    /* -1 once reaped */
	char dir[256];	    /* temporary directory, removed by stop */
	char socket[300];   /* DIR/vramd.sock, also exported as VRAM_SOCKET */
	char log[300];	    /* DIR/vramd.log: the daemon's stdout and stderr */
	char notify[300];   /* DIR/notify.sock: the daemon's NOTIFY_SOCKET */
	int notify_fd;	    /* DIR/notify.log, open for reading; -1: closed */
	int64_t notify_off; /* how much of it harness_wait_notify() consumed */
	pid_t collector;    /* the process filling notify.log; -1: none */
	int status;	    /* exit status once reaped (see harness_wait) */
	unsigned store_max; /* fd store mode: FileDescriptorStoreMax, or 0 */
	int store_ctl;	    /* the collector's control socket; -1: none */
	char args[MAX_HARNESS_ARGS][128]; /* extra_args, kept for restarts */
	unsigned n_args;
};

/* Set: the daemons started from now on run in a session of their own, as
 * vramd under systemd runs in a cgroup of its own, so that the kernel's
 * autogroup does not split one CPU share between the daemon and the
 * caller's threads (bench/load's 1024 client threads). Default false. */
extern bool harness_daemon_new_session;

/* Starts $VRAMD_BIN (default "build/vramd") with
 *   --socket DIR/vramd.sock --backend host --log-level debug EXTRA...
 * where extra_args is a NULL-terminated list (or NULL), and waits up to
 * 10 s for it to send READY=1 to its NOTIFY_SOCKET. Sets VRAM_SOCKET in
 * this process's environment so libvram connects to it.
 *
 * Returns 0, or -errno with the daemon stopped, its log printed on stderr
 * and nothing left behind: -ENOENT (no binary), -ESRCH (it exited before
 * READY=1), -ETIMEDOUT, -ENAMETOOLONG (the socket path does not fit).
 * d is overwritten: it must not hold a running daemon.
 *
 * A daemon still running when this process exits (a failed assertion
 * calls exit()) is killed then, its log printed on stderr and its
 * directory removed. Its own death signal is SIGKILL (PR_SET_PDEATHSIG),
 * so call this from a thread that outlives the daemon.
 * On success call harness_daemon_stop() once done with it. */
int harness_daemon_start(struct harness_daemon *d,
			 const char *const extra_args[]);

/* The same, with the daemon's fd store kept as systemd keeps it: the
 * collector also takes the fds of FDSTORE=1 messages (named by FDNAME=,
 * "stored" without), drops those named by FDSTOREREMOVE=1, refuses more
 * than store_max (the datagram's fds are closed, and a record
 * "HARNESS-FDSTORE-FULL NAME" goes to notify.log), and keeps them across
 * restarts. The daemon gets FDSTORE=store_max in its environment. Stopping
 * (harness_daemon_stop) drops the store, as systemd does on a stop. */
int harness_daemon_start_store(struct harness_daemon *d,
			       const char *const extra_args[],
			       unsigned store_max);

/* Starts the next vramd of a store-mode daemon that has exited (killed
 * and reaped with harness_daemon_wait): the same directory, socket, notify
 * socket and arguments (extra_args, when not NULL, replace the extra ones;
 * VRAMD_BIN is read again, so a test can upgrade the binary), with every
 * stored fd passed as systemd passes them: at fd 3 on, LISTEN_FDS,
 * LISTEN_FDNAMES, and LISTEN_PID set to the child's pid after the fork.
 * Waits for READY=1. Returns 0 or -errno (-EBUSY: the daemon still runs). */
int harness_daemon_restart(struct harness_daemon *d,
			   const char *const extra_args[]);

/* The names of the fds in the store, one per line, into out; returns their
 * count or -errno. */
int harness_store_list(struct harness_daemon *d, char *out, size_t cap);
/* How many fds in the store have a name starting with prefix, or -errno. */
int harness_store_count(struct harness_daemon *d, const char *prefix);

/* Puts fd into the store under name, as if the daemon had stored it (a
 * table written by an older vramd). 0 or -errno. */
int harness_store_put(struct harness_daemon *d, const char *name, int fd);

/* Drops every fd of the store, as systemd does when the service stops. */
int harness_store_drop(struct harness_daemon *d);

/* Sends SIGTERM, waits up to 10 s for the daemon to exit (then SIGKILL),
 * closes the notify socket and removes the temporary directory. Returns
 * the exit status (0 for a clean exit, 128+N when killed by signal N, as
 * harness_wait() does), or -ESRCH for a struct that holds no daemon.
 * Safe on a daemon already killed, and on a zeroed struct. */
int harness_daemon_stop(struct harness_daemon *d);

/* Sends sig to the daemon without waiting for it; harness_daemon_stop()
 * still has to be called to reap it and clean up. Returns 0 or -errno. */
int harness_daemon_kill(struct harness_daemon *d, int sig);

/* Waits up to timeout_ms (-1: forever) for the daemon to exit by itself,
 * e.g. after harness_daemon_kill(d, SIGTERM), and reaps it. Returns its
 * exit status as harness_daemon_stop() does, -ETIMEDOUT, or -ESRCH for a
 * struct that holds no daemon. harness_daemon_stop() must still be called
 * to clean up; it returns the same status then. */
int harness_daemon_wait(struct harness_daemon *d, int timeout_ms);

/* Waits up to timeout_ms (-1: forever) for a further sd_notify datagram
 * from the daemon that contains needle, e.g. "STOPPING=1", "WATCHDOG=1".
 * Datagrams without it are consumed. Returns 0, -ETIMEDOUT, or -ESRCH
 * when the daemon exited without sending it. */
int harness_wait_notify(struct harness_daemon *d, const char *needle,
			int timeout_ms);

/* The daemon's log (the last 64 KiB of it), for failure messages. The
 * buffer is static: valid until the next call. Never NULL. */
const char *harness_daemon_log(struct harness_daemon *d);

/* Number of open fds of a process: the entries of /proc/PID/fd. For this
 * process (pid 0 or getpid()) the directory's own fd is not counted.
 * Returns the count or -errno (-ENOENT: no such process). */
int harness_count_fds(pid_t pid);

/* Starts argv[0] (looked up in PATH when it has no '/') with argv, sharing
 * this process's stdio. Returns the pid, or -errno. Reap it with
 * harness_wait(). */
pid_t harness_spawn(const char *const argv[]);

/* Waits up to timeout_ms (-1: forever) for a child to exit. Returns its
 * exit status, 128+N when signal N killed it, -ETIMEDOUT (the child is
 * still running and still yours to reap), or -errno (-ECHILD). */
int harness_wait(pid_t pid, int timeout_ms);

/* Runs argv to completion (at most 30 s; then it is killed and the call
 * returns -ETIMEDOUT), its stdout captured into out (NUL-terminated,
 * truncated to cap - 1 bytes) and its stderr shared with this process.
 * Returns its exit status as harness_wait() does, or -errno. */
int harness_run_capture(const char *const argv[], char *out, size_t cap);

void harness_msleep(unsigned ms);
/* CLOCK_MONOTONIC in milliseconds. */
int64_t harness_now_ms(void);

#endif
