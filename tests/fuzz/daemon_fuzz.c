/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: the daemon's receive path. The real server (libuv
 * loop, sessions, request handling, the host backend) runs in this
 * process on a temporary socket; each input is one client connection.
 *
 * An input is a list of records: a byte of flags, a little-endian 16-bit
 * length, and that many bytes. Flag bit 0: send the bytes as they are
 * (raw stream bytes: headers, truncation, garbage); otherwise they are a
 * frame's payload (a protobuf Request) and the harness adds the header.
 * Bit 1: attach an fd (/dev/null) to the frame. Every connection starts
 * with a valid hello unless the first record's bit 2 is set, so that
 * every request type is reached.
 *
 * After every input the daemon must hold nothing: no session, no pool,
 * no device byte, and as many fds as before; otherwise the target aborts,
 * which libFuzzer reports as a crash. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "node.h"
#include "server.h"

#include "fuzz_fds.h"

static uv_loop_t fuzz_loop;
static struct server fuzz_srv;
static char fuzz_sock[108];
static unsigned fuzz_base_fds;

static void fuzz_cleanup(void)
{
	server_fini(&fuzz_srv);
}

/* Starts the daemon once for the whole run. */
static void fuzz_start(void)
{
	struct config cfg;

	signal(SIGPIPE, SIG_IGN);
	log_max_level = getenv("FUZZ_LOG") ? LOG_DEBUG : LOG_ERR;
	config_defaults(&cfg);
	snprintf(fuzz_sock, sizeof(fuzz_sock), "/tmp/vramd-fuzz-%d.sock",
		 (int)getpid());
	config_set(&cfg, "socket", fuzz_sock);
	config_set(&cfg, "backend", "host");
	config_set(&cfg, "host_capacity", "64M");
	config_set(&cfg, "host_devices", "2");
	config_set(&cfg, "ack_timeout_ms", "50");
	uv_loop_init(&fuzz_loop);
	if (server_init(&fuzz_srv, &fuzz_loop, &cfg) < 0)
		abort();
	atexit(fuzz_cleanup);
}

static int fuzz_connect(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		abort();
	memcpy(a.sun_path, fuzz_sock, strlen(fuzz_sock));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		abort();
	return fd;
}

/* Runs the loop without blocking, reading what the daemon sent so its
 * queue drains. */
static void fuzz_spin(int fd, unsigned rounds)
{
	char buf[65536];

	for (unsigned i = 0; i < rounds; i++) {
		uv_run(&fuzz_loop, UV_RUN_NOWAIT);
		while (fd >= 0) {
			struct msghdr m = { 0 };
			struct iovec v = { buf, sizeof(buf) };
			union {
				struct cmsghdr h;
				char c[CMSG_SPACE(sizeof(int) * 256)];
			} ctl;
			m.msg_iov = &v;
			m.msg_iovlen = 1;
			m.msg_control = ctl.c;
			m.msg_controllen = sizeof(ctl.c);
			ssize_t n = recvmsg(fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
			if (n <= 0)
				break;
			for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c;
			     c = CMSG_NXTHDR(&m, c)) {
				if (c->cmsg_type != SCM_RIGHTS)
					continue;
				int *fds = (int *)CMSG_DATA(c);
				size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
				for (size_t j = 0; j < k; j++)
					close(fds[j]);
			}
		}
	}
}

static void fuzz_frame(int fd, const uint8_t *p, size_t len, bool with_fd)
{
	uint8_t hdr[12];
	uint32_t h[3] = { 0x4d415256u, (uint32_t)len, with_fd ? 1u : 0u };
	struct iovec v[2] = { { hdr, sizeof(hdr) }, { (void *)p, len } };
	struct msghdr m = { .msg_iov = v, .msg_iovlen = 2 };
	union {
		struct cmsghdr h;
		char c[CMSG_SPACE(sizeof(int))];
	} ctl;
	int extra = -1;

	memcpy(hdr, h, sizeof(hdr));
	if (with_fd) {
		extra = open("/dev/null", O_RDONLY | O_CLOEXEC);
		memset(&ctl, 0, sizeof(ctl));
		m.msg_control = ctl.c;
		m.msg_controllen = sizeof(ctl.c);
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &extra, sizeof(int));
	}
	(void)!sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (extra >= 0)
		close(extra);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Request{id = 1, hello{version = 1, name = "fuzz"}}. */
	static const uint8_t hello[] = { 0x08, 0x01, 0x52, 0x08, 0x08, 0x01,
					 0x12, 0x04, 'f',  'u',	 'z',  'z' };
	static bool started;

	if (!started) {
		fuzz_start();
		started = true;
		fuzz_spin(-1, 4);
		fuzz_base_fds = fuzz_fds_count();
	}
	uint64_t accepted = fuzz_srv.next_session_id;
	int fd = fuzz_connect();
	if (!(size > 0 && (data[0] & 4)))
		fuzz_frame(fd, hello, sizeof(hello), false);
	size_t off = 0;
	while (off + 3 <= size) {
		uint8_t flags = data[off];
		size_t len = (size_t)data[off + 1] | (size_t)data[off + 2] << 8;
		off += 3;
		if (len > size - off)
			len = size - off;
		if (flags & 1)
			(void)!send(fd, data + off, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		else
			fuzz_frame(fd, data + off, len, flags & 2);
		off += len;
		fuzz_spin(fd, 2);
	}
	shutdown(fd, SHUT_WR);
	/* The session's end is read on a reading thread (daemon/io.h) and
	 * reaches the loop through its queue: wait until it was accepted
	 * and is gone (bounded). */
	for (unsigned i = 0;
	     i < 20000 &&
	     (fuzz_srv.n_sessions || fuzz_srv.next_session_id == accepted);
	     i++) {
		fuzz_spin(fd, 1);
		usleep(50);
	}
	close(fd);
	/* Persistent pools outlive their session by design: drop them. */
	while (fuzz_srv.node.n_pools)
		node_pool_drop(&fuzz_srv.node,
			       fuzz_srv.node.pools[fuzz_srv.node.n_pools - 1],
			       NULL);
	fuzz_spin(-1, 8);
	if (fuzz_srv.n_sessions || fuzz_srv.node.backend->used_bytes ||
	    fuzz_srv.limits.queued_bytes || fuzz_srv.limits.queued_fds) {
		fprintf(stderr, "fuzz: left %u sessions, %llu bytes, %zu queued\n",
			fuzz_srv.n_sessions,
			(unsigned long long)fuzz_srv.node.backend->used_bytes,
			fuzz_srv.limits.queued_bytes);
		abort();
	}
	/* A session parked on a libuv worker is freed when its work comes
	 * back: wait for that (bounded), not a fixed time. */
	unsigned fds = fuzz_fds_count();
	for (unsigned i = 0; i < 2000 && fds != fuzz_base_fds; i++) {
		usleep(100);
		fuzz_spin(-1, 1);
		fds = fuzz_fds_count();
	}
	if (fds != fuzz_base_fds) {
		fprintf(stderr, "fuzz: %u fds, %u at start\n", fds, fuzz_base_fds);
		fuzz_fds_list();
		abort();
	}
	return 0;
}
