/* The connection to vramd: socket, hello, requests and their responses, and
 * the reader role.
 *
 * One thread at a time is the reader: it reads frames from the socket,
 * delivers responses to the threads waiting for them and handles events.
 * A thread that waits for a response becomes the reader if nobody is, and
 * otherwise sleeps on the client's condition variable until its response
 * has been delivered or the role is free. vram_client_dispatch() takes the
 * role when it is free; the event thread holds it for as long as it runs.
 * The reader drops the client's lock only while it reads or polls, so
 * frames are handled in the order they came, with the lock held.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "clock.h"
#include "log.h"

enum pump_mode {
	PUMP_CALL,     /* until a call's response has come */
	PUMP_DISPATCH, /* until events were handled or the deadline */
	PUMP_THREAD,   /* until the client stops */
};

/* Milliseconds left before deadline (-1: none) for poll(). */
static int remaining_ms(int64_t deadline)
{
	if (deadline < 0)
		return -1;
	int64_t left = deadline - clock_now_ms();
	if (left <= 0)
		return 0;
	return left > INT_MAX ? INT_MAX : (int)left;
}

int connection_connect(const char *path, int *sock)
{
	struct sockaddr_un sa;
	socklen_t len;
	size_t n = strlen(path);
	int fd, r;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if (n == 0)
		return error_set(EINVAL, "empty socket path");
	if (n >= sizeof(sa.sun_path))
		return error_set(ENAMETOOLONG, "socket path too long: %s",
				 path);
	if (path[0] == '@') {
		/* Abstract namespace: a leading NUL, no terminator. */
		memcpy(sa.sun_path + 1, path + 1, n - 1);
		len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
	} else {
		memcpy(sa.sun_path, path, n);
		len = (socklen_t)sizeof(sa);
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return error_set(errno, "socket: %s", strerror(errno));
	do
		r = connect(fd, (struct sockaddr *)&sa, len);
	while (r < 0 && errno == EINTR);
	if (r < 0) {
		int err = errno;
		close(fd);
		return error_set(err, "cannot connect to vramd at %s: %s", path,
				 strerror(err));
	}
	/* Non-blocking from here on: the reader polls, wire_send waits. */
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) {
		int err = errno;
		close(fd);
		return error_set(err, "fcntl: %s", strerror(err));
	}
	*sock = fd;
	return 0;
}

static uint64_t connection_next_id(struct vram_client *c)
{
	if (c->next_id == 0)
		c->next_id = 1;
	return c->next_id++;
}

/* Writes one request frame. Requests carry no fds. Does not need c->lock;
 * takes send_lock. */
static int connection_send(struct vram_client *c, const Vram__Request *req)
{
	size_t len = vram__request__get_packed_size(req);
	uint8_t *buf;
	int r;

	if (len > WIRE_MAX_PAYLOAD)
		return -EMSGSIZE;
	buf = malloc(len ? len : 1);
	if (!buf)
		return -ENOMEM;
	vram__request__pack(req, buf);
	pthread_mutex_lock(&c->send_lock);
	r = wire_send(c->sock, buf, len, NULL, 0);
	pthread_mutex_unlock(&c->send_lock);
	free(buf);
	return r;
}

static void connection_wake(struct vram_client *c)
{
	uint64_t one = 1;

	if (c->wake_fd >= 0 && write(c->wake_fd, &one, sizeof(one)) < 0) {
		/* EAGAIN: the counter is already non-zero, which is enough. */
	}
}

void connection_break(struct vram_client *c, int err, const char *why)
{
	if (c->broken)
		return;
	c->broken = true;
	if (!c->closing)
		log_write(VRAM_LOG_WARN, "connection to vramd lost: %s (%s)",
			  why, strerror(err < 0 ? -err : err));
	while (c->calls) {
		struct call *call = c->calls;
		c->calls = call->next;
		call->next = NULL;
		call->done = true;
		call->err = -EPIPE;
		snprintf(call->errmsg, sizeof(call->errmsg),
			 "connection to vramd lost: %s", why);
	}
	pthread_cond_broadcast(&c->cond);
	connection_wake(c);
}

static void call_unlink(struct vram_client *c, struct call *call)
{
	for (struct call **pp = &c->calls; *pp; pp = &(*pp)->next) {
		if (*pp == call) {
			*pp = call->next;
			call->next = NULL;
			return;
		}
	}
}

void call_release(struct call *call)
{
	if (call->msg)
		vram__server_msg__free_unpacked(call->msg, NULL);
	call->msg = NULL;
}

/* Hands a response to the call waiting for it (and runs its completion);
 * takes msg. */
static void connection_deliver(struct vram_client *c, Vram__ServerMsg *msg,
			       const struct wire_frame *f)
{
	Vram__Response *r = msg->response;
	struct call *call = NULL;

	for (struct call **pp = &c->calls; *pp; pp = &(*pp)->next) {
		if ((*pp)->id == r->id) {
			call = *pp;
			*pp = call->next;
			call->next = NULL;
			break;
		}
	}
	if (!call) {
		/* The answer to a request sent without waiting (pool close),
		 * or to one that timed out. */
		log_write(VRAM_LOG_DEBUG,
			  "response to request %llu dropped (err %d)",
			  (unsigned long long)r->id, r->err);
		vram__server_msg__free_unpacked(msg, NULL);
		return;
	}
	call->msg = msg;
	if (r->err != 0) {
		int e = r->err > 0 && r->err < 4096 ? r->err : EPROTO;
		call->err = -e;
		snprintf(call->errmsg, sizeof(call->errmsg), "%s",
			 r->message && r->message[0] ? r->message :
						       strerror(e));
	} else {
		call->remote_ok = true;
		if (call->complete) {
			char saved[ERROR_MSG_MAX];
			unsigned gen = error_generation();

			/* The completion's message belongs to the caller's
			 * thread, not to the reader's. */
			snprintf(saved, sizeof(saved), "%s", error_get());
			int rc = call->complete(c, call, r, f);
			if (rc < 0) {
				call->err = rc;
				snprintf(call->errmsg, sizeof(call->errmsg),
					 "%s",
					 gen != error_generation() ?
						 error_get() :
						 strerror(-rc));
			}
			error_restore(saved);
		}
	}
	call->done = true;
	pthread_cond_broadcast(&c->cond);
}

/* Decodes and handles one frame. Returns 1 for an event, 0 for a response,
 * -EPROTO when the frame makes no sense (the connection must go). */
static int connection_process(struct vram_client *c, const struct wire_frame *f)
{
	Vram__ServerMsg *msg =
		vram__server_msg__unpack(NULL, f->len, f->payload);

	if (!msg)
		return -EPROTO;
	if (msg->body_case == VRAM__SERVER_MSG__BODY_RESPONSE &&
	    msg->response) {
		connection_deliver(c, msg, f);
		return 0;
	}
	if (msg->body_case == VRAM__SERVER_MSG__BODY_EVENT && msg->event) {
		char saved[ERROR_MSG_MAX];

		snprintf(saved, sizeof(saved), "%s", error_get());
		events_handle(c, msg->event, f);
		error_restore(saved);
		vram__server_msg__free_unpacked(msg, NULL);
		return 1;
	}
	vram__server_msg__free_unpacked(msg, NULL);
	return -EPROTO;
}

/* Handles every complete frame already read. Returns events handled. */
static int connection_drain(struct vram_client *c)
{
	int handled = 0;

	while (!c->broken) {
		struct wire_frame f;
		int r = wire_rx_next(&c->rx, &f);
		if (r == 0)
			break;
		if (r < 0) {
			connection_break(c, r, "malformed frame from vramd");
			break;
		}
		r = connection_process(c, &f);
		wire_frame_clear(&f);
		if (r < 0) {
			connection_break(c, r,
					 "undecodable message from vramd");
			break;
		}
		handled += r;
	}
	return handled;
}

/* The reader's loop: c->reader is set and c->lock held by the caller.
 * Every complete frame read is handled before it returns, so that none is
 * stranded in the buffer where poll() on the socket cannot see it.
 * Returns the events handled, or -ETIMEDOUT (PUMP_CALL past deadline). */
static int connection_pump(struct vram_client *c, enum pump_mode mode,
			   const struct call *want, int64_t deadline)
{
	int handled = 0;

	for (;;) {
		handled += connection_drain(c);
		if (c->broken)
			return handled;
		if (mode == PUMP_CALL && want->done)
			return handled;
		if (mode != PUMP_CALL && c->stopping)
			return handled;

		pthread_mutex_unlock(&c->lock);
		int r = wire_rx_read(&c->rx, c->sock);
		if (r == -EAGAIN || r == -EINTR) {
			int wait = remaining_ms(deadline);
			if ((mode == PUMP_DISPATCH && handled > 0) ||
			    wait == 0) {
				pthread_mutex_lock(&c->lock);
				if (mode == PUMP_CALL)
					return -ETIMEDOUT;
				return handled;
			}
			struct pollfd pfd[2] = {
				{ .fd = c->sock, .events = POLLIN },
				{ .fd = c->wake_fd, .events = POLLIN },
			};
			int pr = poll(pfd, 2, wait);
			int perr = errno;
			if (pr > 0 && (pfd[1].revents & POLLIN)) {
				uint64_t v;
				if (read(c->wake_fd, &v, sizeof(v)) < 0) {
					/* Another reader emptied it. */
				}
			}
			pthread_mutex_lock(&c->lock);
			if (pr < 0 && perr != EINTR)
				connection_break(c, -perr, "poll failed");
			continue;
		}
		pthread_mutex_lock(&c->lock);
		if (r == 0)
			connection_break(c, -EPIPE,
					 "vramd closed the connection");
		else if (r < 0)
			connection_break(c, r, "reading from vramd failed");
	}
}

/* Waits for call's response, as the reader or asleep. c->lock held. */
static int connection_wait(struct vram_client *c, struct call *call,
			   int64_t deadline)
{
	while (!call->done) {
		if (!c->reader) {
			c->reader = true;
			int r = connection_pump(c, PUMP_CALL, call, deadline);
			c->reader = false;
			pthread_cond_broadcast(&c->cond);
			if (r == -ETIMEDOUT && !call->done) {
				call_unlink(c, call);
				return -ETIMEDOUT;
			}
		} else if (deadline < 0) {
			pthread_cond_wait(&c->cond, &c->lock);
		} else {
			struct timespec ts = {
				.tv_sec = deadline / 1000,
				.tv_nsec = (deadline % 1000) * 1000000,
			};
			pthread_cond_timedwait(&c->cond, &c->lock, &ts);
			if (!call->done && remaining_ms(deadline) == 0) {
				call_unlink(c, call);
				return -ETIMEDOUT;
			}
		}
	}
	return call->err;
}

int connection_call(struct vram_client *c, Vram__Request *req,
		    struct call *call, int timeout_ms)
{
	int64_t deadline = timeout_ms < 0 ? -1 : clock_now_ms() + timeout_ms;
	int r;

	call->done = false;
	call->remote_ok = false;
	call->err = 0;
	call->errmsg[0] = '\0';
	call->msg = NULL;
	call->next = NULL;
	if (c->broken)
		return error_set(EPIPE, "connection to vramd lost");
	call->id = req->id = connection_next_id(c);
	call->next = c->calls;
	c->calls = call;
	pthread_mutex_unlock(&c->lock);
	r = connection_send(c, req);
	pthread_mutex_lock(&c->lock);
	if (r < 0) {
		if (!call->done)
			call_unlink(c, call);
		if (r == -EMSGSIZE || r == -ENOMEM)
			return error_set(r, "cannot send request: %s",
					 strerror(-r));
		/* Part of a frame may have gone out: the stream is lost. */
		connection_break(c, r, "writing to vramd failed");
		return error_set(EPIPE, "connection to vramd lost: %s",
				 strerror(-r));
	}
	r = connection_wait(c, call, deadline);
	if (!call->done)
		return error_set(ETIMEDOUT, "vramd did not answer within %d ms",
				 timeout_ms);
	if (r < 0)
		return error_set(r, "%s",
				 call->errmsg[0] ? call->errmsg : strerror(-r));
	return 0;
}

int connection_post(struct vram_client *c, Vram__Request *req)
{
	int r;

	if (c->broken)
		return -EPIPE;
	req->id = connection_next_id(c);
	r = connection_send(c, req);
	if (r < 0 && r != -EMSGSIZE && r != -ENOMEM)
		connection_break(c, r, "writing to vramd failed");
	return r;
}

int connection_ack(struct vram_client *c, uint64_t event_id, int err,
		   const char *message)
{
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__EventAck ack = VRAM__EVENT_ACK__INIT;
	int r;

	if (c->broken)
		return -EPIPE;
	ack.event_id = event_id;
	ack.err = err < 0 ? -err : err;
	ack.message = (char *)(message ? message : "");
	req.id = 0;
	req.body_case = VRAM__REQUEST__BODY_ACK;
	req.ack = &ack;
	r = connection_send(c, &req);
	if (r < 0)
		connection_break(c, r, "writing to vramd failed");
	return r;
}

int connection_dispatch(struct vram_client *c, int timeout_ms)
{
	int64_t deadline = timeout_ms < 0 ? -1 : clock_now_ms() + timeout_ms;
	int r;

	if (c->broken)
		return error_set(EPIPE, "connection to vramd lost");
	if (c->reader)
		return 0; /* another thread reads, and handles events */
	c->reader = true;
	r = connection_pump(c, PUMP_DISPATCH, NULL, deadline);
	c->reader = false;
	pthread_cond_broadcast(&c->cond);
	if (r == 0 && c->broken)
		return error_set(EPIPE, "connection to vramd lost");
	return r;
}

static void *connection_thread_main(void *arg)
{
	struct vram_client *c = arg;

	pthread_mutex_lock(&c->lock);
	while (!c->stopping) {
		if (c->broken || c->reader) {
			pthread_cond_wait(&c->cond, &c->lock);
			continue;
		}
		c->reader = true;
		connection_pump(c, PUMP_THREAD, NULL, -1);
		c->reader = false;
		pthread_cond_broadcast(&c->cond);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

int connection_thread_start(struct vram_client *c)
{
	sigset_t all, old;
	int r;

	if (c->thread_started)
		return error_set(EALREADY, "the event thread already runs");
	if (c->broken)
		return error_set(EPIPE, "connection to vramd lost");
	/* A guest thread takes no signals meant for the program. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&c->thread, NULL, connection_thread_main, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r != 0)
		return error_set(r, "cannot start the event thread: %s",
				 strerror(r));
	pthread_setname_np(c->thread, "vram-events");
	c->thread_started = true;
	return 0;
}

static void connection_free(struct vram_client *c)
{
	vmm_destroy(c->vmm);
	wire_rx_free(&c->rx);
	if (c->sock >= 0)
		close(c->sock);
	if (c->wake_fd >= 0)
		close(c->wake_fd);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->send_lock);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

static int connection_hello(struct vram_client *c)
{
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__Hello hello = VRAM__HELLO__INIT;
	struct call call = { 0 };
	int r;

	hello.version = WIRE_PROTOCOL_VERSION;
	hello.name = c->name;
	req.body_case = VRAM__REQUEST__BODY_HELLO;
	req.hello = &hello;
	r = connection_call(c, &req, &call, CONNECT_TIMEOUT_MS);
	if (r == -EPROTONOSUPPORT)
		r = error_set(EPROTO,
			      "vramd does not speak protocol version %u: %s",
			      WIRE_PROTOCOL_VERSION, vram_last_error());
	if (r < 0)
		goto out;
	const Vram__Response *resp = call.msg->response;
	if (resp->body_case != VRAM__RESPONSE__BODY_HELLO || !resp->hello) {
		r = error_set(EPROTO,
			      "vramd answered hello with something else");
		goto out;
	}
	const Vram__HelloReply *h = resp->hello;
	if (h->version != WIRE_PROTOCOL_VERSION) {
		r = error_set(EPROTO,
			      "vramd speaks protocol version %u, libvram %u",
			      h->version, WIRE_PROTOCOL_VERSION);
		goto out;
	}
	snprintf(c->backend, sizeof(c->backend), "%s",
		 h->backend ? h->backend : "");
	snprintf(c->daemon_version, sizeof(c->daemon_version), "%s",
		 h->daemon_version ? h->daemon_version : "");
	c->session_id = h->session_id;
	c->max_chunks = h->max_chunks;
	c->n_devices = 0;
	for (size_t i = 0; i < h->n_devices && c->n_devices < VRAM_MAX_DEVICES;
	     i++) {
		const Vram__DeviceInfo *d = h->devices[i];
		if (!d)
			continue;
		struct client_device *cd = &c->devices[c->n_devices++];
		cd->index = d->index;
		snprintf(cd->uuid, sizeof(cd->uuid), "%s",
			 d->uuid ? d->uuid : "");
		cd->total_bytes = d->total_bytes;
		cd->free_bytes = d->free_bytes;
		cd->granularity = d->granularity;
	}
out:
	call_release(&call);
	return r;
}

int connection_open(int sock, const char *name, struct vram_client **out)
{
	pthread_condattr_t ca;
	struct vram_client *c;
	int r, fl;

	c = calloc(1, sizeof(*c));
	if (!c) {
		close(sock);
		return error_set(ENOMEM, "out of memory");
	}
	c->sock = sock;
	c->wake_fd = -1;
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->send_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cond, &ca);
	pthread_condattr_destroy(&ca);
	wire_rx_init(&c->rx);
	c->next_id = 1;
	snprintf(c->name, sizeof(c->name), "%s", name);

	fl = fcntl(sock, F_GETFL);
	if (fl < 0 || fcntl(sock, F_SETFL, fl | O_NONBLOCK) < 0 ||
	    fcntl(sock, F_SETFD, FD_CLOEXEC) < 0) {
		r = error_set(errno, "fcntl: %s", strerror(errno));
		goto fail;
	}
	c->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->wake_fd < 0) {
		r = error_set(errno, "eventfd: %s", strerror(errno));
		goto fail;
	}
	pthread_mutex_lock(&c->lock);
	r = connection_hello(c);
	pthread_mutex_unlock(&c->lock);
	if (r < 0)
		goto fail;
	r = vmm_open(c->backend, &c->vmm);
	if (r < 0) {
		r = error_set(
			r,
			"vramd runs the \"%s\" backend, which libvram cannot use here: %s",
			c->backend, strerror(-r));
		goto fail;
	}
	for (unsigned i = 0; i < c->n_devices; i++)
		if (c->devices[i].index < VMM_MAX_DEVICES)
			snprintf(c->vmm->dev_uuid[c->devices[i].index],
				 sizeof(c->vmm->dev_uuid[0]), "%s",
				 c->devices[i].uuid);
	log_write(VRAM_LOG_INFO,
		  "connected to vramd %s (backend %s, session %llu)",
		  c->daemon_version, c->backend,
		  (unsigned long long)c->session_id);
	registry_client_add(c);
	*out = c;
	return 0;
fail:
	connection_free(c);
	return r;
}

static bool connection_idle(struct vram_client *c)
{
	if (__atomic_load_n(&c->busy, __ATOMIC_SEQ_CST) != 0 || c->reader)
		return false;
	for (struct vram_pool *p = c->pools; p; p = p->next)
		if (__atomic_load_n(&p->users, __ATOMIC_SEQ_CST) != 0)
			return false;
	return true;
}

void connection_close(struct vram_client *c)
{
	pthread_mutex_lock(&c->lock);
	if (c->thread_started && pthread_equal(pthread_self(), c->thread)) {
		/* Only a log handler could get here; closing would free the
		 * thread under its own feet. */
		pthread_mutex_unlock(&c->lock);
		log_write(
			VRAM_LOG_ERROR,
			"vram_client_close() from the event thread is not supported");
		return;
	}
	c->closing = true;
	c->stopping = true;
	/* The daemon treats the end of the session as a close of every pool
	 * (dropping those this client owns unless persistent), so nothing
	 * more is sent: the socket goes, and every waiter learns at once
	 * (the connection is marked broken and the reader woken). */
	connection_break(c, -ESHUTDOWN, "client closed");
	/* No shutdown(): a forked child may share this socket's open file,
	 * and only closing our fd is ours to do. */
	connection_wake(c);
	pthread_cond_broadcast(&c->cond);
	while (!connection_idle(c))
		pthread_cond_wait(&c->cond, &c->lock);
	if (c->thread_started) {
		pthread_mutex_unlock(&c->lock);
		pthread_join(c->thread, NULL);
		pthread_mutex_lock(&c->lock);
		c->thread_started = false;
	}
	while (c->pools) {
		struct vram_pool *p = c->pools;
		pool_unlink(p);
		pool_free(p);
	}
	pthread_mutex_unlock(&c->lock);
	connection_free(c);
}
