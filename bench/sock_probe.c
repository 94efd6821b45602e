/* SPDX-License-Identifier: Apache-2.0 */
/* The machine's own floor under bench/rpc's 64-client ping: the same
 * shape with no vramd and no libvram. Client threads each send a 32-byte
 * frame on their own Unix stream socket and wait for a 32-byte answer;
 * server threads each watch their share of the sockets with epoll and
 * answer every frame at once. It prints p50 / p99 / max in microseconds,
 * the calls a second and the process's CPU a call, for each way the two
 * sides can wait:
 *
 *   server sleeps   epoll_wait(-1) whenever nothing is ready
 *   server polls    epoll_wait(0) again until POLL_US passed with nothing
 *                   ready, then sleeps
 *   client sleeps   poll() on its socket, then read()
 *   client polls    read(MSG_DONTWAIT) and sched_yield() until SPIN_US,
 *                   then poll()
 *
 * So it says whether a p99 under 200 us is within what the machine's
 * wake-ups allow, and which side's sleeping makes the tail.
 *
 *   build/bench/sock_probe [CLIENTS [SERVERS [ITERS]]]   (64, 4, 5000)
 *   SOCK_PROBE_POLL_US, SOCK_PROBE_SPIN_US   the windows (default 200)
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FRAME 32
#define MAX_CLIENTS 256
#define MAX_SERVERS 64

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

struct server {
	pthread_t thread;
	int epfd;
	int stop_fd; /* the read end of a pipe: readable when the run ends */
	bool polls;
	int64_t poll_ns;
};

struct client {
	pthread_t thread;
	int fd;
	int peer_fd; /* the server's end */
	int iters;
	bool polls;
	int64_t spin_ns;
	double *lat_us;
	pthread_barrier_t *start;
};

static void *server_run(void *arg)
{
	struct server *s = arg;
	struct epoll_event ev[64];
	int64_t last = now_ns();

	for (;;) {
		bool polling = s->polls && now_ns() - last < s->poll_ns;
		int n = epoll_wait(s->epfd, ev, 64, polling ? 0 : -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n > 0)
			last = now_ns();
		for (int i = 0; i < n; i++) {
			int fd = ev[i].data.fd;
			char buf[FRAME * 16];
			if (fd == s->stop_fd)
				return NULL;
			ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (r <= 0)
				continue;
			/* One answer per whole frame read. */
			for (ssize_t off = 0; off + FRAME <= r; off += FRAME)
				if (send(fd, buf + off, FRAME, MSG_DONTWAIT) !=
				    FRAME)
					perror("sock_probe: send");
		}
	}
}

/* Reads one whole frame, waiting as the client was told to. */
static int client_read(struct client *c, char *buf)
{
	size_t got = 0;
	int64_t until = c->polls ? now_ns() + c->spin_ns : 0;

	while (got < FRAME) {
		ssize_t r = recv(c->fd, buf + got, FRAME - got, MSG_DONTWAIT);
		if (r > 0) {
			got += (size_t)r;
			continue;
		}
		if (r == 0 || (errno != EAGAIN && errno != EINTR))
			return -1;
		if (c->polls && now_ns() < until) {
			sched_yield();
			continue;
		}
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		if (poll(&p, 1, -1) < 0 && errno != EINTR)
			return -1;
	}
	return 0;
}

static void *client_run(void *arg)
{
	struct client *c = arg;
	char buf[FRAME];

	memset(buf, 'p', sizeof(buf));
	pthread_barrier_wait(c->start);
	for (int i = 0; i < c->iters; i++) {
		int64_t t0 = now_ns();
		if (send(c->fd, buf, FRAME, 0) != FRAME || client_read(c, buf)) {
			perror("sock_probe: client");
			return NULL;
		}
		c->lat_us[i] = (double)(now_ns() - t0) / 1e3;
	}
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double cpu_us(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

static void probe_run(int nclients, int nservers, int iters, bool spolls,
		      bool cpolls, int64_t poll_ns, int64_t spin_ns)
{
	static struct server srv[MAX_SERVERS];
	static struct client cl[MAX_CLIENTS];
	double *lat = calloc((size_t)nclients * (size_t)iters, sizeof(*lat));
	pthread_barrier_t start;
	int stop[2];

	if (!lat || pipe(stop) < 0) {
		perror("sock_probe");
		exit(1);
	}
	for (int s = 0; s < nservers; s++) {
		srv[s] = (struct server){ .epfd = epoll_create1(EPOLL_CLOEXEC),
					  .stop_fd = stop[0],
					  .polls = spolls,
					  .poll_ns = poll_ns };
		struct epoll_event ev = { .events = EPOLLIN,
					  .data.fd = stop[0] };
		epoll_ctl(srv[s].epfd, EPOLL_CTL_ADD, stop[0], &ev);
	}
	pthread_barrier_init(&start, NULL, (unsigned)nclients + 1);
	for (int i = 0; i < nclients; i++) {
		int sv[2];
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
			perror("sock_probe: socketpair");
			exit(1);
		}
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = sv[1] };
		epoll_ctl(srv[i % nservers].epfd, EPOLL_CTL_ADD, sv[1], &ev);
		cl[i] = (struct client){ .fd = sv[0],
					 .peer_fd = sv[1],
					 .iters = iters,
					 .polls = cpolls,
					 .spin_ns = spin_ns,
					 .lat_us = lat + (size_t)i * (size_t)iters,
					 .start = &start };
	}
	for (int s = 0; s < nservers; s++)
		pthread_create(&srv[s].thread, NULL, server_run, &srv[s]);
	for (int i = 0; i < nclients; i++)
		pthread_create(&cl[i].thread, NULL, client_run, &cl[i]);
	pthread_barrier_wait(&start);
	double c0 = cpu_us();
	int64_t t0 = now_ns();
	for (int i = 0; i < nclients; i++)
		pthread_join(cl[i].thread, NULL);
	double secs = (double)(now_ns() - t0) / 1e9, cpu = cpu_us() - c0;
	if (write(stop[1], "x", 1) != 1)
		perror("sock_probe: stop");
	for (int s = 0; s < nservers; s++) {
		pthread_join(srv[s].thread, NULL);
		close(srv[s].epfd);
	}
	size_t n = (size_t)nclients * (size_t)iters;
	qsort(lat, n, sizeof(*lat), cmp_double);
	printf("%-8s %-8s %4d %3d %9.1f %9.1f %9.1f %10.0f %9.2f\n",
	       spolls ? "polls" : "sleeps", cpolls ? "polls" : "sleeps",
	       nclients, nservers, lat[n / 2], lat[n * 99 / 100], lat[n - 1],
	       (double)n / secs, cpu / (double)n);
	fflush(stdout);
	for (int i = 0; i < nclients; i++) {
		close(cl[i].fd);
		close(cl[i].peer_fd);
	}
	close(stop[0]);
	close(stop[1]);
	pthread_barrier_destroy(&start);
	free(lat);
}

static int64_t env_us(const char *name, int64_t def)
{
	const char *v = getenv(name);

	return (v && *v ? strtoll(v, NULL, 10) : def) * 1000;
}

int main(int argc, char **argv)
{
	int nclients = argc > 1 ? atoi(argv[1]) : 64;
	int nservers = argc > 2 ? atoi(argv[2]) : 4;
	int iters = argc > 3 ? atoi(argv[3]) : 5000;
	int64_t poll_ns = env_us("SOCK_PROBE_POLL_US", 200);
	int64_t spin_ns = env_us("SOCK_PROBE_SPIN_US", 200);

	if (nclients < 1 || nclients > MAX_CLIENTS || nservers < 1 ||
	    nservers > MAX_SERVERS || iters < 1) {
		fprintf(stderr, "usage: sock_probe [CLIENTS (1-%d) [SERVERS "
				"(1-%d) [ITERS]]]\n",
			MAX_CLIENTS, MAX_SERVERS);
		return 2;
	}
	printf("sock_probe: %d clients, %d server threads, %d calls each, "
	       "%ld CPUs; server poll window %lld us, client spin %lld us\n",
	       nclients, nservers, iters, sysconf(_SC_NPROCESSORS_ONLN),
	       (long long)(poll_ns / 1000), (long long)(spin_ns / 1000));
	printf("%-8s %-8s %4s %3s %9s %9s %9s %10s %9s\n", "server", "client",
	       "cli", "srv", "p50 us", "p99 us", "max us", "calls/s",
	       "cpu us");
	for (int s = 0; s < 2; s++)
		for (int c = 0; c < 2; c++)
			probe_run(nclients, nservers, iters, s, c, poll_ns,
				  spin_ns);
	return 0;
}
