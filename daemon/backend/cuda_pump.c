/* SPDX-License-Identifier: Apache-2.0 */
/* The clearing pump: see cuda_pump.h. */
#include "cuda_pump.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "env.h"
#include "log.h"
#include "thread.h"

struct cuda_pump_device {
	bool on;
	int64_t until_ns; /* on until then at the latest */
	uint64_t size;	  /* of one allocation: the device's granularity */
	CUmemAllocationProp prop;
	bool warned;
};

struct cuda_pump {
	const struct cuda_driver *cu;
	unsigned every_ms;
	unsigned n_devices;
	pthread_mutex_t lock;
	pthread_cond_t wake; /* a device turned on, or stop */
	unsigned n_on;
	bool stop, started;
	pthread_t thread;
	struct cuda_pump_device devs[BACKEND_MAX_DEVICES];
};

/* One stroke on dev: one allocation made and released. Thread only. */
static void pump_stroke(struct cuda_pump *p, unsigned dev)
{
	struct cuda_pump_device *d = &p->devs[dev];
	CUmemGenericAllocationHandle h;
	CUresult cr = p->cu->cuMemCreate(&h, d->size, &d->prop, 0);

	if (cr != CUDA_SUCCESS) {
		/* A full device, say: the next stroke tries again. */
		if (!d->warned)
			log_debug("cuda: clearing pump on device %u: "
				  "cuMemCreate: %s",
				  dev, cuda_strerror(p->cu, cr));
		d->warned = true;
		return;
	}
	p->cu->cuMemRelease(h);
}

static void *pump_main(void *arg)
{
	struct cuda_pump *p = arg;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (p->n_on == 0 && !p->stop)
			pthread_cond_wait(&p->wake, &p->lock);
		/* A period first, then a stroke: the first stroke after the
		 * pump is turned on comes a period later, not at once beside
		 * the daemon's own creates. */
		int64_t until = clock_now_ns() + (int64_t)p->every_ms * 1000000;
		struct timespec ts = { .tv_sec = until / 1000000000,
				       .tv_nsec = until % 1000000000 };
		while (p->n_on > 0 && !p->stop &&
		       pthread_cond_clockwait(&p->wake, &p->lock,
					      CLOCK_MONOTONIC, &ts) == 0)
			;
		if (p->stop)
			break;
		bool on[BACKEND_MAX_DEVICES];
		int64_t now = clock_now_ns();
		for (unsigned i = 0; i < p->n_devices; i++) {
			struct cuda_pump_device *d = &p->devs[i];
			if (d->on && now >= d->until_ns) {
				log_debug("cuda: clearing pump on device %u off "
					  "after %u ms",
					  i, CUDA_PUMP_MAX_MS);
				d->on = false;
				p->n_on--;
			}
			on[i] = d->on;
		}
		pthread_mutex_unlock(&p->lock);
		for (unsigned i = 0; i < p->n_devices; i++)
			if (on[i])
				pump_stroke(p, i);
		pthread_mutex_lock(&p->lock);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

static unsigned pump_every_ms(void)
{
	const char *bad;
	unsigned v = env_unsigned("VRAM_CUDA_PUMP_MS", CUDA_PUMP_DEFAULT_MS, 0,
				  1000, &bad);

	if (bad)
		log_warn("cuda: VRAM_CUDA_PUMP_MS=%s ignored (0-1000)", bad);
	return v;
}

int cuda_pump_open(const struct cuda_driver *cu, const CUdevice *cudev,
		   const uint64_t *granularity, unsigned n_devices,
		   struct cuda_pump **out)
{
	struct cuda_pump *p;
	unsigned every = pump_every_ms();

	*out = NULL;
	if (every == 0)
		return 0;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->cu = cu;
	p->every_ms = every;
	p->n_devices = n_devices;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->wake, NULL);
	for (unsigned i = 0; i < n_devices; i++) {
		struct cuda_pump_device *d = &p->devs[i];
		/* Plain memory: nothing exports it, nothing maps it. */
		d->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
		d->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		d->prop.location.id = cudev[i];
		d->size = granularity[i];
	}
	*out = p;
	return 0;
}

/* Starts the thread (lock held), with every signal blocked: they stay
 * with the main thread, where libuv handles them. */
static void pump_start(struct cuda_pump *p)
{
	int r = thread_start_unsignalled(&p->thread, NULL, pump_main, p);

	p->started = true;
	if (r != 0) {
		log_warn("cuda: cannot start the clearing pump: %s",
			 strerror(r));
		p->started = false;
		p->every_ms = 0;
	}
}

void cuda_pump_set(struct cuda_pump *p, unsigned dev, bool on)
{
	if (!p || dev >= p->n_devices)
		return;
	pthread_mutex_lock(&p->lock);
	struct cuda_pump_device *d = &p->devs[dev];
	if (on)
		d->until_ns = clock_now_ns() + CUDA_PUMP_MAX_MS * 1000000LL;
	if (d->on != on && p->every_ms) {
		d->on = on;
		p->n_on += on ? 1 : -1;
		if (!p->started)
			pump_start(p);
		pthread_cond_broadcast(&p->wake);
		log_debug("cuda: clearing pump on device %u %s", dev,
			  on ? "on" : "off");
	}
	pthread_mutex_unlock(&p->lock);
}

void cuda_pump_close(struct cuda_pump *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->lock);
	if (p->started)
		pthread_join(p->thread, NULL);
	pthread_cond_destroy(&p->wake);
	pthread_mutex_destroy(&p->lock);
	free(p);
}
