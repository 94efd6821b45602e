/* SPDX-License-Identifier: Apache-2.0 */
/* vramd's metrics endpoint from C, so that the HTTP thread, the buffer
 * swap and the counters also run under ASan (make asan skips the Python
 * suite, tests/python/test_metrics.py, which checks the rest): scrapes
 * over a plain TCP socket on 127.0.0.1 before and after a pause and a
 * resume. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "integ.h"

/* The port vramd logged ("... (port N): GET /metrics"), waiting for the
 * line a bounded while. */
static unsigned metrics_port(void)
{
	for (int i = 0; i < 500; i++) {
		const char *log = harness_daemon_log(&integ_daemon);
		const char *p = log ? strstr(log, "(port ") : NULL;
		if (p)
			return (unsigned)strtoul(p + 6, NULL, 10);
		harness_msleep(10);
	}
	TEST_FAIL("no metrics port in the log");
	return 0;
}

/* GET path over HTTP/1.0; the whole answer, headers too, into buf. */
static void http_get(unsigned port, const char *path, char *buf, size_t cap)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port) };
	char req[128];
	size_t off = 0;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT(fd >= 0);
	ASSERT_EQ(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\n\r\n", path);
	ASSERT_EQ(write(fd, req, (size_t)n), n);
	for (;;) {
		ASSERT(off + 1 < cap);
		ssize_t r = read(fd, buf + off, cap - 1 - off);
		ASSERT(r >= 0);
		if (r == 0)
			break;
		off += (size_t)r;
	}
	buf[off] = '\0';
	close(fd);
}

TEST(scrape_after_pause_and_resume)
{
	const char *const extra[] = { "--host-capacity", "64M",
				      "--metrics-listen", "127.0.0.1:0", NULL };
	static char body[1 << 17];

	integ_start_args(extra);
	unsigned port = metrics_port();
	ASSERT(port > 0);

	http_get(port, "/metrics", body, sizeof(body));
	ASSERT(strstr(body, "HTTP/1.0 200") || strstr(body, "HTTP/1.1 200"));
	ASSERT(strstr(body, "text/plain; version=0.0.4") != NULL);
	ASSERT(strstr(
		body,
		"vramd_pauses_total{device=\"0\",policy=\"discard\"} 0\n"));

	vram_client *c = integ_connect("metrics");
	ASSERT_OK(vram_client_start_thread(c));
	vram_pool *p =
		integ_pool(c, "m.kv", "kv_cache", VRAM_POLICY_DISCARD, 0);
	void *ptr = NULL;
	ASSERT_OK(vram_alloc(p, 4 * MiB, &ptr));
	struct vram_selector sel = VRAM_SELECTOR_INIT;
	sel.tag = "kv_cache";
	ASSERT_OK(vram_pause(c, &sel, 0, NULL));
	ASSERT_OK(vram_resume(c, &sel, 0, NULL));

	/* Published before the answers: no wait. */
	http_get(port, "/metrics", body, sizeof(body));
	ASSERT(strstr(
		body,
		"vramd_pauses_total{device=\"0\",policy=\"discard\"} 1\n"));
	ASSERT(strstr(
		body,
		"vramd_resumes_total{device=\"0\",policy=\"discard\"} 1\n"));
	ASSERT(strstr(body,
		      "vramd_pause_duration_seconds_bucket{policy=\"discard\","
		      "le=\"+Inf\"} 1\n"));
	ASSERT(strstr(
		body,
		"vramd_resume_duration_seconds_count{policy=\"discard\"} 1\n"));
	ASSERT(strstr(body, "vramd_pause_shortfalls_total{device=\"0\"} 0\n"));
	ASSERT(strstr(
		body,
		"vramd_pools{device=\"0\",tag=\"kv_cache\",state=\"active\","
		"policy=\"discard\"} 1\n"));

	http_get(port, "/healthz", body, sizeof(body));
	ASSERT(strstr(body, " 200 ") != NULL);
	http_get(port, "/other", body, sizeof(body));
	ASSERT(strstr(body, " 404 ") != NULL);

	vram_pool_close(p);
	vram_client_close(c);
	integ_stop();
}
