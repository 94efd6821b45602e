/* SPDX-License-Identifier: Apache-2.0 */
/* The HIP backend: physical memory of AMD GPUs made with the HIP runtime's
 * VMM API (ROCm 6.0 or later) and exported as POSIX fds (dma-bufs).
 *
 * Every HIP call goes through a table of entry points (hip_api.h), loaded
 * from libamdhip64 with dlopen, so vramd starts where ROCm is absent
 * (-ENOENT, and --backend auto moves on to host) and the unit tests run the
 * whole backend against a recording stand-in.
 *
 * The current device: ROCclr's hipMemCreate allocates on the calling
 * thread's current device, whatever the properties' location says, and
 * hipMemGetAllocationGranularity and hipMemGetInfo answer for it too. So
 * every call that concerns a device sets it first (hipSetDevice: in HIP this
 * only picks the device; the runtime made its per-device state when it
 * started).
 *
 * The creating handle is kept (c->handle) until the chunk is released,
 * rather than released right after export as the CUDA backend does. On
 * Linux the exported dma-buf holds the buffer object in the kernel, so the
 * fd alone should keep the memory alive; but no ROCm document promises it,
 * ROCr's export path has changed between releases, and the case cannot be
 * tried without AMD hardware. Keeping the handle costs no device memory
 * (the same buffer) and one runtime object per chunk; guessing wrong would
 * free memory under a client's mapping. VRAM_HIP_KEEP_HANDLE=0 releases it
 * at once (the fd is then the daemon's whole reference, as on CUDA) for
 * those who verify it on their ROCm. docs/rocm.md says more.
 *
 * Free memory comes from the amdgpu driver's sysfs files (mem_info_vram_
 * total and _used of the device's PCI function), which count every process
 * and need no runtime call, else from hipMemGetInfo with the device set.
 * After vramd releases chunks, the settle operation (run by the daemon on
 * a worker thread, before it reports free memory or makes chunks) waits
 * up to VRAM_HIP_RELEASE_WAIT_MS (default 100 ms) for their memory to show
 * up as free, and reports, as a warning and in a counter, a release that
 * did not: on ROCm "released" is not always "freed" (docs/rocm.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "attr.h"
#include "clock.h"
#include "env.h"
#include "hip_api.h"
#include "hip.h"
#include "log.h"

#define FREE_UNKNOWN UINT64_MAX
#define RELEASE_WAIT_DEFAULT_MS 100
#define RELEASE_WAIT_MAX_MS 10000
#define RELEASE_POLL_NS (2 * 1000 * 1000)

/* sysfs, pending and base_free change on the loop thread and in the
 * settle on a worker: hip_backend's lock guards them. */
struct hip_dev {
	char bus_id[32];    /* "0000:c1:00.0", "" when unknown */
	int sysfs;	    /* its sysfs memory files are readable */
	uint64_t pending;   /* bytes released and not yet checked */
	uint64_t base_free; /* free memory before the first of those */
};

struct hip_backend {
	struct backend base;
	struct hip_api api;
	int keep_handle;
	unsigned release_wait_ms; /* 0: no check */
	uint64_t release_misses;
	pthread_mutex_t lock;	     /* the dev[] bookkeeping, release_misses */
	pthread_mutex_t settle_lock; /* one settle at a time */
	char sysfs_root[256];
	struct hip_dev dev[BACKEND_MAX_DEVICES];
};

static const struct backend_ops hip_ops;

static struct hip_backend *hip_of(struct backend *b)
{
	return (struct hip_backend *)b;
}

static const char *hip_err(const struct hip_backend *hb, hipError_t e)
{
	return hip_strerror(&hb->api, e);
}

/* A setting from the environment, with a warning when it is rejected. */
static unsigned hip_setting(const char *name, unsigned def, unsigned hi)
{
	const char *bad;
	unsigned v = env_unsigned(name, def, 0, hi, &bad);

	if (bad)
		log_warn("hip: %s=%s ignored (0-%u)", name, bad, hi);
	return v;
}

/* ---- free memory ---------------------------------------------------------- */

static int sysfs_read(const struct hip_backend *hb, const struct hip_dev *d,
		      const char *file, uint64_t *v)
{
	char path[512], buf[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/%s/%s", hb->sysfs_root, d->bus_id,
		 file);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -EIO;
	buf[n] = 0;
	char *end;
	unsigned long long x = strtoull(buf, &end, 10);
	if (end == buf)
		return -EIO;
	*v = x;
	return 0;
}

/* Reads dev's free and total memory as the device sees them. */
static int hip_dev_free(struct hip_backend *hb, unsigned dev,
			uint64_t *free_bytes, uint64_t *total_bytes)
{
	struct hip_dev *d = &hb->dev[dev];
	size_t f = 0, t = 0;
	hipError_t e;

	pthread_mutex_lock(&hb->lock);
	int sysfs = d->sysfs;
	pthread_mutex_unlock(&hb->lock);
	if (sysfs) {
		uint64_t total, used;
		if (sysfs_read(hb, d, "mem_info_vram_total", &total) == 0 &&
		    sysfs_read(hb, d, "mem_info_vram_used", &used) == 0) {
			*total_bytes = total;
			*free_bytes = total > used ? total - used : 0;
			return 0;
		}
		log_warn("hip: device %u: cannot read %s/%s/mem_info_vram_*; "
			 "free memory from hipMemGetInfo from now on",
			 dev, hb->sysfs_root, d->bus_id);
		pthread_mutex_lock(&hb->lock);
		d->sysfs = 0;
		pthread_mutex_unlock(&hb->lock);
	}
	e = hb->api.hipSetDevice((int)dev);
	if (e == hipSuccess)
		e = hb->api.hipMemGetInfo(&f, &t);
	if (e != hipSuccess) {
		log_err("hip: device %u: hipMemGetInfo: %s", dev,
			hip_err(hb, e));
		return hip_errno(e);
	}
	*free_bytes = f;
	*total_bytes = t;
	return 0;
}

/* Notes that size bytes of dev are being released by vramd, so that the
 * next settle checks they came back. Loop thread. */
static void hip_release_note(struct hip_backend *hb, unsigned dev,
			     uint64_t size)
{
	struct hip_dev *d = &hb->dev[dev];
	uint64_t f = 0, t, base = FREE_UNKNOWN;

	if (hb->release_wait_ms == 0)
		return;
	pthread_mutex_lock(&hb->lock);
	bool first = d->pending == 0;
	pthread_mutex_unlock(&hb->lock);
	if (first && hip_dev_free(hb, dev, &f, &t) == 0)
		base = f;
	pthread_mutex_lock(&hb->lock);
	if (d->pending == 0)
		d->base_free = base;
	d->pending += size;
	pthread_mutex_unlock(&hb->lock);
}

/* Waits, boundedly, for the checked bytes of dev to show up as free, and
 * reports it when they do not. Worker thread: a chunk the loop makes
 * meanwhile lowers base_free, so the target is read again each time. */
static void hip_release_check(struct hip_backend *hb, unsigned dev,
			      uint64_t checked)
{
	struct hip_dev *d = &hb->dev[dev];
	uint64_t slack = hb->base.devices[dev].granularity;
	uint64_t deadline = (uint64_t)clock_now_ms() + hb->release_wait_ms;
	uint64_t free_b = 0, total, want = 0;

	for (;;) {
		pthread_mutex_lock(&hb->lock);
		uint64_t base = d->base_free;
		pthread_mutex_unlock(&hb->lock);
		if (base == FREE_UNKNOWN ||
		    hip_dev_free(hb, dev, &free_b, &total) < 0)
			return;
		want = base + checked;
		if (free_b + slack >= want ||
		    (uint64_t)clock_now_ms() >= deadline)
			break;
		struct timespec ts = { 0, RELEASE_POLL_NS };
		nanosleep(&ts, NULL);
	}
	if (free_b + slack < want) {
		pthread_mutex_lock(&hb->lock);
		hb->release_misses++;
		pthread_mutex_unlock(&hb->lock);
		log_warn("hip: device %u: %llu MiB released by vramd are not "
			 "free after %u ms (free %llu MiB, expected %llu MiB): "
			 "something still holds them (a mapper that kept its "
			 "import, another process, or a ROCm runtime that "
			 "keeps released memory while its address range stays "
			 "reserved: see VRAM_HIP_RERESERVE in docs/rocm.md)",
			 dev, (unsigned long long)(checked >> 20),
			 hb->release_wait_ms,
			 (unsigned long long)(free_b >> 20),
			 (unsigned long long)(want >> 20));
	}
}

/* Checks the releases noted so far, one device after the other. Releases
 * noted while it runs wait for the next settle: what this one checked is
 * taken off pending, and base_free moves up by it. */
static void hip_settle(struct backend *b)
{
	struct hip_backend *hb = hip_of(b);

	pthread_mutex_lock(&hb->settle_lock);
	for (unsigned dev = 0; dev < b->n_devices; dev++) {
		struct hip_dev *d = &hb->dev[dev];
		pthread_mutex_lock(&hb->lock);
		uint64_t checked = d->pending;
		pthread_mutex_unlock(&hb->lock);
		if (!checked)
			continue;
		hip_release_check(hb, dev, checked);
		pthread_mutex_lock(&hb->lock);
		d->pending = d->pending > checked ? d->pending - checked : 0;
		if (d->base_free != FREE_UNKNOWN)
			d->base_free += checked;
		pthread_mutex_unlock(&hb->lock);
	}
	pthread_mutex_unlock(&hb->settle_lock);
}

static bool hip_settled(struct backend *b)
{
	struct hip_backend *hb = hip_of(b);
	bool none = true;

	pthread_mutex_lock(&hb->lock);
	for (unsigned dev = 0; dev < b->n_devices; dev++)
		if (hb->dev[dev].pending)
			none = false;
	pthread_mutex_unlock(&hb->lock);
	return none;
}

/* ---- backend operations ------------------------------------------------ */

static void hip_backend_free(struct hip_backend *hb)
{
	pthread_mutex_destroy(&hb->settle_lock);
	pthread_mutex_destroy(&hb->lock);
	free(hb);
}

static void hip_destroy(struct backend *b)
{
	/* libamdhip64 stays loaded (hip_api.h says why). */
	hip_backend_free(hip_of(b));
}

static int hip_mem_info(struct backend *b, unsigned dev, uint64_t *free_bytes,
			uint64_t *total_bytes)
{
	struct hip_backend *hb = hip_of(b);
	const struct backend_device *d = &b->devices[dev];
	int r = hip_dev_free(hb, dev, free_bytes, total_bytes);

	if (r < 0) {
		/* What vramd knows: the total less its own chunks. */
		*total_bytes = d->total_bytes;
		*free_bytes = d->total_bytes > d->used_bytes ?
				      d->total_bytes - d->used_bytes :
				      0;
	}
	return 0;
}

static int hip_chunk_create(struct backend *b, unsigned dev, struct chunk *c)
{
	struct hip_backend *hb = hip_of(b);
	const struct hip_api *api = &hb->api;
	hipMemAllocationProp prop;
	hipMemGenericAllocationHandle_t h = NULL;
	hipError_t e;
	int fd = -1, flags, r;

	/* hipMemCreate allocates on the current device. */
	e = api->hipSetDevice((int)dev);
	if (e != hipSuccess) {
		log_err("hip: hipSetDevice(%u): %s", dev, hip_err(hb, e));
		return hip_errno(e);
	}
	hip_chunk_prop(&prop, (int)dev);
	e = api->hipMemCreate(&h, c->size, &prop, 0);
	if (e != hipSuccess) {
		if (e == hipErrorOutOfMemory)
			log_debug("hip: device %u: no room for %llu MiB", dev,
				  (unsigned long long)(c->size >> 20));
		else
			log_err("hip: hipMemCreate(%llu MiB) on device %u: %s",
				(unsigned long long)(c->size >> 20), dev,
				hip_err(hb, e));
		return hip_errno(e);
	}
	e = api->hipMemExportToShareableHandle(
		&fd, h, hipMemHandleTypePosixFileDescriptor, 0);
	if (e != hipSuccess) {
		log_err("hip: hipMemExportToShareableHandle: %s",
			hip_err(hb, e));
		r = hip_errno(e);
		goto err_release;
	}
	flags = fcntl(fd, F_GETFD);
	if (flags < 0 || fcntl(fd, F_SETFD, flags | FD_CLOEXEC) < 0) {
		r = -errno;
		log_err("hip: exported fd %d: %s", fd, strerror(errno));
		close(fd);
		goto err_release;
	}
	if (!hb->keep_handle) {
		/* The fd (the dma-buf) is now the whole reference. */
		e = api->hipMemRelease(h);
		if (e != hipSuccess)
			log_err("hip: hipMemRelease after export: %s (%llu MiB "
				"stay allocated until vramd exits)",
				hip_err(hb, e),
				(unsigned long long)(c->size >> 20));
		h = NULL;
	}
	/* A chunk made between releases and the reading that checks them
	 * takes its size from what should come back. */
	struct hip_dev *d = &hb->dev[dev];
	pthread_mutex_lock(&hb->lock);
	if (d->pending && d->base_free != FREE_UNKNOWN)
		d->base_free =
			d->base_free > c->size ? d->base_free - c->size : 0;
	pthread_mutex_unlock(&hb->lock);
	c->fd = fd;
	c->handle = (uintptr_t)h;
	return 0;

err_release:
	e = api->hipMemRelease(h);
	if (e != hipSuccess)
		log_err("hip: hipMemRelease after a failed export: %s",
			hip_err(hb, e));
	return r;
}

static void hip_chunk_release(struct backend *b, unsigned dev, struct chunk *c)
{
	struct hip_backend *hb = hip_of(b);

	hip_release_note(hb, dev, c->size);
	close(c->fd);
	c->fd = -1;
	if (c->handle) {
		hipError_t e = hb->api.hipMemRelease(
			(hipMemGenericAllocationHandle_t)c->handle);
		if (e != hipSuccess)
			log_err("hip: hipMemRelease of a %llu MiB chunk: %s "
				"(its memory may stay allocated until vramd "
				"exits)",
				(unsigned long long)(c->size >> 20),
				hip_err(hb, e));
		c->handle = 0;
	}
}

static const struct backend_ops hip_ops = {
	.name = "hip",
	.destroy = hip_destroy,
	.mem_info = hip_mem_info,
	.chunk_create = hip_chunk_create,
	.chunk_release = hip_chunk_release,
	.settle = hip_settle,
	.settled = hip_settled,
};

uint64_t backend_hip_release_misses(const struct backend *b)
{
	if (!b || b->ops != &hip_ops)
		return 0;
	struct hip_backend *hb = (struct hip_backend *)b;
	pthread_mutex_lock(&hb->lock);
	uint64_t n = hb->release_misses;
	pthread_mutex_unlock(&hb->lock);
	return n;
}

/* ---- opening ------------------------------------------------------------ */

/* Makes, exports and frees one granule on dev: vramd cannot serve a
 * device whose runtime lacks VMM memory or its export as an fd, and that
 * is better said at start than at the first grow. */
static int hip_device_probe(struct hip_backend *hb, unsigned i, size_t gran,
			    const char *name)
{
	const struct hip_api *api = &hb->api;
	hipMemAllocationProp prop;
	hipMemGenericAllocationHandle_t h = NULL;
	hipError_t e;
	int fd = -1;

	hip_chunk_prop(&prop, (int)i);
	e = api->hipMemCreate(&h, gran, &prop, 0);
	if (e == hipErrorOutOfMemory) {
		log_warn("hip: device %u is full at start; could not check "
			 "that it exports VMM memory",
			 i);
		return 0;
	}
	if (e != hipSuccess) {
		log_err("hip: device %u (%s) cannot make VMM memory with an fd "
			"handle: hipMemCreate: %s",
			i, name, hip_err(hb, e));
		return -ENODEV;
	}
	e = api->hipMemExportToShareableHandle(
		&fd, h, hipMemHandleTypePosixFileDescriptor, 0);
	if (e == hipSuccess)
		close(fd);
	else
		log_err("hip: device %u (%s) cannot export VMM memory as an "
			"fd (dma-buf): %s",
			i, name, hip_err(hb, e));
	hipError_t er = api->hipMemRelease(h);
	if (er != hipSuccess)
		log_warn("hip: device %u: hipMemRelease of the probe: %s", i,
			 hip_err(hb, er));
	return e == hipSuccess ? 0 : -ENODEV;
}

/* Fills b->devices[i] for HIP device i; -ENODEV if it cannot serve. */
static int hip_device_init(struct hip_backend *hb, unsigned i)
{
	const struct hip_api *api = &hb->api;
	struct backend_device *d = &hb->base.devices[i];
	struct hip_dev *hd = &hb->dev[i];
	hipMemAllocationProp prop;
	hipUUID uuid;
	char name[96] = "?", probe[512];
	size_t total = 0, gran = 0;
	hipError_t e;

	e = api->hipSetDevice((int)i);
	if (e == hipSuccess)
		e = api->hipDeviceTotalMem(&total, (int)i);
	if (e != hipSuccess) {
		log_err("hip: device %u: %s", i, hip_err(hb, e));
		return -ENODEV;
	}
	api->hipDeviceGetName(name, sizeof(name), (int)i);
	name[sizeof(name) - 1] = 0;
	if (api->hipDeviceGetPCIBusId(hd->bus_id, sizeof(hd->bus_id), (int)i) !=
	    hipSuccess)
		hd->bus_id[0] = 0;
	hd->bus_id[sizeof(hd->bus_id) - 1] = 0;
	for (char *p = hd->bus_id; *p; p++) /* sysfs spells it lowercase */
		if (*p >= 'A' && *p <= 'F')
			*p = (char)(*p - 'A' + 'a');
	if (api->hipDeviceGetUuid(&uuid, (int)i) == hipSuccess)
		hip_format_uuid(&uuid, d->uuid, sizeof(d->uuid));
	else
		snprintf(d->uuid, sizeof(d->uuid), "HIP-%u-%s", i,
			 hd->bus_id[0] ? hd->bus_id : "?");
	hip_chunk_prop(&prop, (int)i);
	e = api->hipMemGetAllocationGranularity(
		&gran, &prop, hipMemAllocationGranularityRecommended);
	if (e != hipSuccess || gran == 0)
		e = api->hipMemGetAllocationGranularity(
			&gran, &prop, hipMemAllocationGranularityMinimum);
	if (e != hipSuccess || gran == 0) {
		log_err("hip: device %u (%s): allocation granularity: %s", i,
			name, hip_err(hb, e));
		return -ENODEV;
	}
	if (hip_device_probe(hb, i, gran, name) < 0)
		return -ENODEV;
	d->index = i;
	d->total_bytes = total;
	d->granularity = gran;
	d->used_bytes = 0;
	uint64_t v;
	hd->sysfs = hd->bus_id[0] &&
		    sysfs_read(hb, hd, "mem_info_vram_total", &v) == 0 &&
		    sysfs_read(hb, hd, "mem_info_vram_used", &v) == 0;
	snprintf(probe, sizeof(probe), "%s/%s/mem_info_vram_*", hb->sysfs_root,
		 hd->bus_id);
	log_info("hip: device %u: %s %s (PCI %s), %.1f GiB, granularity %llu "
		 "KiB; free memory from %s",
		 i, name, d->uuid, hd->bus_id[0] ? hd->bus_id : "?",
		 (double)total / (1 << 30), (unsigned long long)(gran >> 10),
		 hd->sysfs ? probe : "hipMemGetInfo");
	return 0;
}

int backend_hip_open_with(const struct backend_config *cfg UNUSED,
			  const struct hip_api *api, struct backend **out)
{
	struct hip_backend *hb;
	const char *missing = hip_api_missing(api);
	int count = 0, version = 0, driver = 0, r;
	hipError_t e;

	if (missing) {
		log_err("hip: entry point table lacks %s", missing);
		return -EINVAL;
	}
	hb = calloc(1, sizeof(*hb));
	if (!hb)
		return -ENOMEM;
	hb->api = *api;
	pthread_mutex_init(&hb->lock, NULL);
	pthread_mutex_init(&hb->settle_lock, NULL);
	e = hb->api.hipInit(0);
	if (e != hipSuccess) {
		if (e == hipErrorNoDevice)
			log_info("hip: no HIP device");
		else
			log_err("hip: hipInit: %s", hip_err(hb, e));
		r = -ENODEV;
		goto err;
	}
	e = hb->api.hipRuntimeGetVersion(&version);
	if (e != hipSuccess) {
		log_err("hip: hipRuntimeGetVersion: %s", hip_err(hb, e));
		r = -ENODEV;
		goto err;
	}
	if (version < HIP_VERSION_MIN) {
		log_err("hip: the HIP runtime is %d.%d; vramd needs ROCm 6.0 "
			"or later (its VMM API and allocation properties)",
			HIP_VERSION_MAJOR_OF(version),
			HIP_VERSION_MINOR_OF(version));
		r = -ENOSYS;
		goto err;
	}
	e = hb->api.hipGetDeviceCount(&count);
	if (e != hipSuccess || count <= 0) {
		if (e == hipSuccess || e == hipErrorNoDevice)
			log_info("hip: no HIP device");
		else
			log_err("hip: hipGetDeviceCount: %s", hip_err(hb, e));
		r = -ENODEV;
		goto err;
	}
	if (count > BACKEND_MAX_DEVICES) {
		log_warn("hip: using the first %d of %d devices",
			 BACKEND_MAX_DEVICES, count);
		count = BACKEND_MAX_DEVICES;
	}
	hb->api.hipDriverGetVersion(&driver);
	hb->keep_handle = (int)hip_setting("VRAM_HIP_KEEP_HANDLE", 1, 1);
	hb->release_wait_ms =
		hip_setting("VRAM_HIP_RELEASE_WAIT_MS", RELEASE_WAIT_DEFAULT_MS,
			    RELEASE_WAIT_MAX_MS);
	const char *root = getenv("VRAM_HIP_SYSFS");
	snprintf(hb->sysfs_root, sizeof(hb->sysfs_root), "%s",
		 root && *root ? root : "/sys/bus/pci/devices");
	log_info("hip: HIP runtime %d.%d.%d (driver %d), %d device(s); "
		 "chunk handles %s",
		 HIP_VERSION_MAJOR_OF(version), HIP_VERSION_MINOR_OF(version),
		 HIP_VERSION_PATCH_OF(version), driver, count,
		 hb->keep_handle ? "kept until release" :
				   "released after export");
	hb->base.ops = &hip_ops;
	hb->base.n_devices = (unsigned)count;
	for (unsigned i = 0; i < hb->base.n_devices; i++) {
		r = hip_device_init(hb, i);
		if (r < 0)
			goto err;
	}
	*out = &hb->base;
	return 0;

err:
	hip_backend_free(hb);
	return r;
}

/* Opens the HIP backend: loads libamdhip64 (or $VRAM_LIBHIP), starts the
 * runtime, one backend device per HIP device (HIP_VISIBLE_DEVICES and
 * ROCR_VISIBLE_DEVICES apply), each checked by making and exporting one
 * granule. -ENOENT without the library, -ENOSYS for a runtime older than
 * ROCm 6.0 or a library that is not one, -ENODEV without a usable device.
 * *out is the caller's until backend_destroy(). */
int backend_hip_open(const struct backend_config *cfg, struct backend **out)
{
	struct hip_api api;
	char why[512] = "";
	int r = hip_api_load(&api, why, sizeof(why));

	if (r < 0) {
		if (r == -ENOENT)
			log_debug("hip: no HIP runtime library: %s", why);
		else
			log_err("hip: %s", why);
		return r;
	}
	return backend_hip_open_with(cfg, &api, out);
}
