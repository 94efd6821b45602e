/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: libvram's reply and event handling. A fake daemon on
 * a thread of this process answers the hello properly, then sends the
 * input's frames (records as in daemon_fuzz.c: a flags byte, a 16-bit
 * length, the bytes; bit 0 raw stream bytes, bit 1 attach a memfd of
 * 2 MiB, otherwise the bytes are a ServerMsg frame's payload) and hangs
 * up, while the client makes requests (stats, list, create, grow, a
 * pause) and dispatches events, so responses and events of every kind
 * meet a real client. Request ids go 2, 3, ... in that order.
 * After each input the process holds as many sockets and memfds as
 * before (LSan checks the heap at exit). */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "vram.h"
#include "vram.pb-c.h"

#include "fuzz_fds.h"

static char fuzz_path[108];
static int fuzz_listen = -1;

struct fuzz_input {
	const uint8_t *data;
	size_t size;
};

static void fuzz_send(int fd, const void *p, size_t len, bool with_fd)
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
		extra = memfd_create("fuzz-chunk", MFD_CLOEXEC);
		if (extra >= 0 && ftruncate(extra, 2 << 20) < 0) {
			close(extra);
			extra = -1;
		}
	}
	if (extra >= 0) {
		memset(&ctl, 0, sizeof(ctl));
		m.msg_control = ctl.c;
		m.msg_controllen = sizeof(ctl.c);
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &extra, sizeof(int));
	} else {
		h[2] = 0;
		memcpy(hdr, h, sizeof(hdr));
	}
	(void)!sendmsg(fd, &m, MSG_NOSIGNAL);
	if (extra >= 0)
		close(extra);
}

/* The hello reply, as vramd answers: packed once. */
static uint8_t fuzz_hello[256];
static size_t fuzz_hello_len;

static void fuzz_hello_pack(void)
{
	Vram__ServerMsg msg = VRAM__SERVER_MSG__INIT;
	Vram__Response resp = VRAM__RESPONSE__INIT;
	Vram__HelloReply hr = VRAM__HELLO_REPLY__INIT;
	Vram__DeviceInfo dev = VRAM__DEVICE_INFO__INIT, *devp = &dev;

	dev.uuid = "GPU-00000000-0000-0000-0000-000000000001";
	dev.total_bytes = 64 << 20;
	dev.free_bytes = 64 << 20;
	dev.granularity = 2 << 20;
	hr.version = 1;
	hr.backend = "host";
	hr.session_id = 1;
	hr.max_chunks = 240;
	hr.n_devices = 1;
	hr.devices = &devp;
	hr.daemon_version = "0.2.0";
	resp.id = 1;
	resp.body_case = VRAM__RESPONSE__BODY_HELLO;
	resp.hello = &hr;
	msg.body_case = VRAM__SERVER_MSG__BODY_RESPONSE;
	msg.response = &resp;
	fuzz_hello_len = vram__server_msg__get_packed_size(&msg);
	if (fuzz_hello_len > sizeof(fuzz_hello))
		abort();
	vram__server_msg__pack(&msg, fuzz_hello);
}

/* One connection of the fake daemon: the hello, the input's records,
 * then a hang-up once the client has said all it will. */
static void fuzz_serve(int fd, const struct fuzz_input *in)
{
	uint8_t buf[4096];

	/* The hello: read its frame, answer it as vramd does. */
	(void)!read(fd, buf, sizeof(buf));
	fuzz_send(fd, fuzz_hello, fuzz_hello_len, false);
	size_t off = 0;
	while (off + 3 <= in->size) {
		uint8_t flags = in->data[off];
		size_t n = (size_t)in->data[off + 1] | (size_t)in->data[off + 2] << 8;
		off += 3;
		if (n > in->size - off)
			n = in->size - off;
		if (flags & 1)
			(void)!send(fd, in->data + off, n, MSG_NOSIGNAL);
		else
			fuzz_send(fd, in->data + off, n, flags & 2);
		off += n;
	}
	/* Drain what the client sent, then hang up. */
	shutdown(fd, SHUT_WR);
	while (read(fd, buf, sizeof(buf)) > 0)
		;
}

/* The input being run, set before the client connects; the thread
 * posts fuzz_done once it has closed that input's connection. A thread
 * for the whole run rather than one per input: under ASan a thread's
 * start (its allocator cache, its stacks) cost more than the input. */
static const struct fuzz_input *fuzz_cur;
static sem_t fuzz_done;

static void *fuzz_daemon(void *arg)
{
	(void)arg;
	for (;;) {
		int fd = accept4(fuzz_listen, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR)
				continue;
			abort();
		}
		fuzz_serve(fd, __atomic_load_n(&fuzz_cur, __ATOMIC_ACQUIRE));
		close(fd);
		sem_post(&fuzz_done);
	}
	return NULL;
}

/* The socket's name goes with the process (the fake daemon's thread is
 * still in accept then; exit does not wait for it). */
static void fuzz_unlink(void)
{
	unlink(fuzz_path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static unsigned base;
	struct fuzz_input in = { data, size };

	if (fuzz_listen < 0) {
		struct sockaddr_un a = { .sun_family = AF_UNIX };
		signal(SIGPIPE, SIG_IGN);
		snprintf(fuzz_path, sizeof(fuzz_path), "/tmp/vram-cfuzz-%d.sock",
			 (int)getpid());
		unlink(fuzz_path);
		memcpy(a.sun_path, fuzz_path, strlen(fuzz_path));
		fuzz_listen = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fuzz_listen < 0 ||
		    bind(fuzz_listen, (struct sockaddr *)&a, sizeof(a)) < 0 ||
		    listen(fuzz_listen, 4) < 0)
			abort();
		atexit(fuzz_unlink);
		vram_set_log_handler(NULL, VRAM_LOG_ERROR, NULL);
		fuzz_hello_pack();
		pthread_t t;
		if (sem_init(&fuzz_done, 0, 0) < 0 ||
		    pthread_create(&t, NULL, fuzz_daemon, NULL) != 0)
			abort();
		pthread_detach(t);
		base = fuzz_fds_count();
	}
	__atomic_store_n(&fuzz_cur, &in, __ATOMIC_RELEASE);
	vram_client *c = NULL;
	if (vram_connect(fuzz_path, "fuzz", 0, &c) == 0) {
		struct vram_stats st = VRAM_STATS_INIT;
		struct vram_pool_info *infos = NULL;
		size_t n = 0;
		vram_stats(c, &st);
		if (vram_list(c, NULL, sizeof(*infos), &infos, &n) == 0)
			vram_pool_info_free(infos, n);
		struct vram_pool_options o = VRAM_POOL_OPTIONS_INIT;
		vram_pool *p = NULL;
		o.name = "p";
		o.reserve_bytes = 4 << 20;
		if (vram_pool_create(c, &o, &p) == 0) {
			vram_pool_reserve(p, 2 << 20);
			vram_client_dispatch(c, 0);
			struct vram_selector sel = { .size = sizeof(sel), .name = "p" };
			vram_pause(c, &sel, 0, NULL);
		}
		vram_client_dispatch(c, 0);
		vram_client_close(c);
	}
	/* vram_connect always connects (the socket listens), so the fake
	 * daemon has this input's connection and closes it. */
	while (sem_wait(&fuzz_done) < 0)
		;
	unsigned fds = fuzz_fds_count();
	if (fds != base) {
		fprintf(stderr, "client fuzz: %u sockets and memfds, %u at start\n",
			fds, base);
		abort();
	}
	return 0;
}
