/* SPDX-License-Identifier: Apache-2.0 */
/* A real vramd against hostile and malformed peers speaking the raw
 * protocol: each bad frame closes that session and every fd it brought;
 * the daemon goes on serving others, and its fd count returns to baseline. */
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "frame_send.h"
#include "harness.h"
#include "test.h"
#include "vram.pb-c.h"
#include "wire.h"

static struct harness_daemon d;

static void start(const char *const extra[])
{
	int r = harness_daemon_start(&d, extra);
	if (r < 0)
		TEST_FAIL("cannot start vramd: %s", strerror(-r));
}

static int raw_connect(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT(fd >= 0);
	ASSERT(strlen(d.socket) < sizeof(a.sun_path));
	memcpy(a.sun_path, d.socket, strlen(d.socket) + 1);
	ASSERT_OK(connect(fd, (struct sockaddr *)&a, sizeof(a)));
	return fd;
}

static void send_request(int fd, Vram__Request *req)
{
	size_t len = vram__request__get_packed_size(req);
	uint8_t *buf = malloc(len + 1);
	vram__request__pack(req, buf);
	ASSERT_OK(frame_send(fd, buf, len, NULL, 0));
	free(buf);
}

/* Waits for the next message; NULL when the daemon closed the session. */
static Vram__ServerMsg *recv_msg(int fd, struct wire_rx *rx)
{
	struct wire_frame f;
	for (;;) {
		memset(&f, 0, sizeof(f));
		int r = wire_rx_next(rx, &f);
		ASSERT(r >= 0);
		if (r == 1) {
			Vram__ServerMsg *m = vram__server_msg__unpack(NULL, f.len, f.payload);
			wire_frame_clear(&f);
			ASSERT(m);
			return m;
		}
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ASSERT_EQ(poll(&p, 1, 5000), 1);
		r = wire_rx_read(rx, fd);
		if (r == 0 || r == -ECONNRESET)
			return NULL;
		ASSERT(r > 0 || r == -EAGAIN);
	}
}

static int hello(int fd, struct wire_rx *rx, uint32_t version)
{
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__Hello h = VRAM__HELLO__INIT;
	h.version = version;
	h.name = "hostile";
	req.id = 1;
	req.body_case = VRAM__REQUEST__BODY_HELLO;
	req.hello = &h;
	send_request(fd, &req);
	Vram__ServerMsg *m = recv_msg(fd, rx);
	ASSERT(m && m->body_case == VRAM__SERVER_MSG__BODY_RESPONSE);
	int err = m->response->err;
	vram__server_msg__free_unpacked(m, NULL);
	return err;
}

/* The daemon closed this session: reading gives EOF. */
static void assert_closed(int fd)
{
	struct wire_rx rx;
	wire_rx_init(&rx);
	ASSERT(recv_msg(fd, &rx) == NULL);
	wire_rx_free(&rx);
	close(fd);
}

/* A fresh client still gets served. */
static void assert_serving(void)
{
	struct wire_rx rx;
	wire_rx_init(&rx);
	int fd = raw_connect();
	ASSERT_EQ(hello(fd, &rx, WIRE_PROTOCOL_VERSION), 0);
	wire_rx_free(&rx);
	close(fd);
}

static void wait_fds(int want)
{
	int n = -1;
	for (int i = 0; i < 200; i++) {
		n = harness_count_fds(d.pid);
		if (n == want)
			return;
		harness_msleep(10);
	}
	TEST_FAIL("daemon has %d fds open, expected %d\n%s", n, want,
		  harness_daemon_log(&d));
}

static void send_raw(int fd, uint32_t magic, uint32_t len, uint32_t nfds,
		     const void *payload, size_t plen, const int *fds, unsigned n)
{
	uint8_t hdr[12];
	uint32_t v[3] = { magic, len, nfds };
	memcpy(hdr, v, sizeof(hdr)); /* x86-64: little-endian already */
	struct iovec iov[2] = { { hdr, sizeof(hdr) }, { (void *)payload, plen } };
	char cbuf[CMSG_SPACE(sizeof(int) * 8)];
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = plen ? 2 : 1 };
	if (n) {
		msg.msg_control = cbuf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * n);
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * n);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
	}
	ASSERT(sendmsg(fd, &msg, MSG_NOSIGNAL) > 0);
}

TEST(oversize_frame_closes_session_only)
{
	start(NULL);
	int base = harness_count_fds(d.pid);
	int fd = raw_connect();
	send_raw(fd, WIRE_MAGIC, WIRE_MAX_PAYLOAD + 1, 0, NULL, 0, NULL, 0);
	assert_closed(fd);
	fd = raw_connect();
	send_raw(fd, WIRE_MAGIC, 0xffffffffu, 0, NULL, 0, NULL, 0);
	assert_closed(fd);
	assert_serving();
	wait_fds(base);
	ASSERT_EQ(harness_daemon_stop(&d), 0);
}

TEST(bad_magic_and_garbage_payload)
{
	start(NULL);
	int base = harness_count_fds(d.pid);
	int fd = raw_connect();
	send_raw(fd, 0xdeadbeef, 4, 0, "abcd", 4, NULL, 0);
	assert_closed(fd);
	/* A well-framed payload that does not decode as a request. */
	fd = raw_connect();
	uint8_t junk[64];
	memset(junk, 0xff, sizeof(junk));
	send_raw(fd, WIRE_MAGIC, sizeof(junk), 0, junk, sizeof(junk), NULL, 0);
	assert_closed(fd);
	assert_serving();
	wait_fds(base);
	ASSERT_EQ(harness_daemon_stop(&d), 0);
}

TEST(unexpected_and_missing_fds_are_closed)
{
	start(NULL);
	int base = harness_count_fds(d.pid);
	int fds[4];
	for (int i = 0; i < 4; i++)
		fds[i] = memfd_create("junk", MFD_CLOEXEC);

	/* Announces 3 fds, sends none. */
	int fd = raw_connect();
	send_raw(fd, WIRE_MAGIC, 0, 3, NULL, 0, NULL, 0);
	assert_closed(fd);

	/* Announces 1, sends 4. */
	fd = raw_connect();
	send_raw(fd, WIRE_MAGIC, 0, 1, NULL, 0, fds, 4);
	assert_closed(fd);

	/* A valid hello carrying fds nobody asked for. */
	fd = raw_connect();
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__Hello h = VRAM__HELLO__INIT;
	h.version = WIRE_PROTOCOL_VERSION;
	req.id = 1;
	req.body_case = VRAM__REQUEST__BODY_HELLO;
	req.hello = &h;
	uint8_t buf[64];
	size_t len = vram__request__pack(&req, buf);
	send_raw(fd, WIRE_MAGIC, (uint32_t)len, 2, buf, len, fds, 2);
	assert_closed(fd);

	/* Every fd the daemon received was closed with its session. */
	wait_fds(base);
	assert_serving();
	for (int i = 0; i < 4; i++)
		close(fds[i]);
	ASSERT_EQ(harness_daemon_stop(&d), 0);
}

TEST(request_before_hello_and_wrong_version)
{
	start(NULL);
	struct wire_rx rx;
	wire_rx_init(&rx);
	int fd = raw_connect();
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__Stats st = VRAM__STATS__INIT;
	req.id = 5;
	req.body_case = VRAM__REQUEST__BODY_STATS;
	req.stats = &st;
	send_request(fd, &req);
	assert_closed(fd);

	fd = raw_connect();
	ASSERT_EQ(hello(fd, &rx, 99), EPROTONOSUPPORT);
	/* The session stays open for a correct hello. */
	ASSERT_EQ(hello(fd, &rx, WIRE_PROTOCOL_VERSION), 0);
	ASSERT_EQ(hello(fd, &rx, WIRE_PROTOCOL_VERSION), EALREADY);
	wire_rx_free(&rx);
	close(fd);
	ASSERT_EQ(harness_daemon_stop(&d), 0);
}

TEST(partial_frame_then_disconnect)
{
	start(NULL);
	int base = harness_count_fds(d.pid);
	int fd = raw_connect();
	uint8_t hdr[6] = { 0x56, 0x52, 0x41, 0x4d, 10, 0 };
	ASSERT_EQ(write(fd, hdr, sizeof(hdr)), (ssize_t)sizeof(hdr));
	harness_msleep(50);
	close(fd);
	assert_serving();
	wait_fds(base);
	ASSERT_EQ(harness_daemon_stop(&d), 0);
}

TEST(burst_of_clients_all_served)
{
	start(NULL);
	int fds[100];
	struct wire_rx rx;
	for (int i = 0; i < 100; i++) {
		wire_rx_init(&rx);
		fds[i] = raw_connect();
		ASSERT_EQ(hello(fds[i], &rx, WIRE_PROTOCOL_VERSION), 0);
		wire_rx_free(&rx);
	}
	for (int i = 0; i < 100; i++)
		close(fds[i]);
	assert_serving();
	ASSERT_EQ(harness_daemon_stop(&d), 0);
}

TEST(random_frames_never_kill_the_daemon)
{
	start(NULL);
	int base = harness_count_fds(d.pid);
	uint32_t x = 12345;
	for (int i = 0; i < 300; i++) {
		int fd = raw_connect();
		uint8_t buf[256];
		for (size_t k = 0; k < sizeof(buf); k++) {
			x ^= x << 13;
			x ^= x >> 17;
			x ^= x << 5;
			buf[k] = (uint8_t)x;
		}
		uint32_t len = x % sizeof(buf);
		/* Half the frames are well framed with random payloads. */
		if (i & 1)
			send_raw(fd, WIRE_MAGIC, len, 0, buf, len, NULL, 0);
		else
			ASSERT(write(fd, buf, len + 1) > 0);
		close(fd);
	}
	assert_serving();
	wait_fds(base);
	ASSERT_EQ(harness_daemon_stop(&d), 0);
}

/* Names with control characters would forge log lines: refused. */
TEST(control_characters_in_names_are_refused)
{
	start(NULL);
	struct wire_rx rx;
	wire_rx_init(&rx);
	int fd = raw_connect();
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__Hello h = VRAM__HELLO__INIT;
	h.version = WIRE_PROTOCOL_VERSION;
	h.name = "evil\nvramd: error: forged";
	req.id = 1;
	req.body_case = VRAM__REQUEST__BODY_HELLO;
	req.hello = &h;
	send_request(fd, &req);
	Vram__ServerMsg *m = recv_msg(fd, &rx);
	ASSERT(m && m->response->err == EINVAL);
	vram__server_msg__free_unpacked(m, NULL);
	ASSERT_EQ(hello(fd, &rx, WIRE_PROTOCOL_VERSION), 0);

	Vram__PoolCreate pc = VRAM__POOL_CREATE__INIT;
	pc.name = "pool\x1b[31m";
	pc.tag = "t";
	req.id = 2;
	req.body_case = VRAM__REQUEST__BODY_POOL_CREATE;
	req.pool_create = &pc;
	send_request(fd, &req);
	m = recv_msg(fd, &rx);
	ASSERT(m && m->response->err == EINVAL);
	vram__server_msg__free_unpacked(m, NULL);
	pc.name = "fine";
	pc.tag = "tab\there";
	req.id = 3;
	send_request(fd, &req);
	m = recv_msg(fd, &rx);
	ASSERT(m && m->response->err == EINVAL);
	vram__server_msg__free_unpacked(m, NULL);
	ASSERT(strstr(harness_daemon_log(&d), "forged") == NULL);
	wire_rx_free(&rx);
	close(fd);
	ASSERT_EQ(harness_daemon_stop(&d), 0);
}
