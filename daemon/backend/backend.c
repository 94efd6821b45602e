/* SPDX-License-Identifier: Apache-2.0 */
/* Picks a backend and keeps the daemon's accounting of what it holds. */
#include "backend.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_driver.h"
#include "hip_api.h"
#include "log.h"

/* A GPU backend is compiled in when its file is part of the build; the
 * weak references let a build without one link and report ENOENT. */
__attribute__((weak)) int backend_cuda_open(const struct backend_config *cfg,
					    struct backend **out);
__attribute__((weak)) int backend_hip_open(const struct backend_config *cfg,
					   struct backend **out);

static int open_gpu(int (*open_fn)(const struct backend_config *,
				   struct backend **),
		    const struct backend_config *cfg, struct backend **out)
{
	return open_fn ? open_fn(cfg, out) : -ENOENT;
}

/* Finds a PCI display controller (class 0x03xxxx) of vendor in sysfs
 * ($VRAM_PCI_SYSFS, for the tests, else /sys/bus/pci/devices); its address
 * goes into addr. Returns 1 if there is one, 0 if not. */
static int gpu_find(unsigned vendor, char *addr, size_t size)
{
	const char *root = getenv("VRAM_PCI_SYSFS");
	struct dirent *e;
	int found = 0;
	DIR *d;

	if (!root || !*root)
		root = "/sys/bus/pci/devices";
	d = opendir(root);
	if (!d)
		return 0;
	while (!found && (e = readdir(d))) {
		unsigned id[2] = { 0, 0 }; /* vendor, class */
		static const char *const files[] = { "vendor", "class" };

		if (e->d_name[0] == '.' || strlen(e->d_name) >= size)
			continue;
		for (int i = 0; i < 2; i++) {
			char path[1024];
			FILE *f;

			snprintf(path, sizeof(path), "%s/%s/%s", root,
				 e->d_name, files[i]);
			f = fopen(path, "re");
			if (!f)
				break;
			if (fscanf(f, "%x", &id[i]) != 1)
				id[i] = 0;
			fclose(f);
		}
		if (id[0] == vendor && id[1] >> 16 == 0x03) {
			snprintf(addr, size, "%s", e->d_name);
			found = 1;
		}
	}
	closedir(d);
	return found;
}

/* Under backend = auto, a GPU whose backend failed (r) is an error, not a
 * reason to serve host memory in its place: says so with the driver's
 * reason and returns 1 if the node has a GPU of vendor; 0 if it has none.
 * The backends log a missing driver library at debug only (normal on a
 * machine without a GPU), so its message is fetched again here. */
static int gpu_unusable(unsigned vendor, const char *maker, const char *name,
			int r)
{
	char addr[256], why[256] = "";

	if (!gpu_find(vendor, addr, sizeof(addr)))
		return 0;
	if (r == -ENOENT && vendor == 0x10de) {
		struct cuda_driver d = { 0 };
		if (cuda_driver_load(&d, why, sizeof(why)) == 0)
			why[0] = '\0';
	} else if (r == -ENOENT) {
		struct hip_api a;
		if (hip_api_load(&a, why, sizeof(why)) == 0)
			why[0] = '\0';
	}
	log_err("backend auto: %s GPU at %s, but the %s backend failed (%s%s%s); "
		"set backend = host to use host memory on purpose",
		maker, addr, name, strerror(-r), why[0] ? ": " : "", why);
	return 1;
}

int backend_open(const struct backend_config *cfg, struct backend **out)
{
	int r;

	if (strcmp(cfg->name, "host") == 0)
		return backend_host_open(cfg, out);
	if (strcmp(cfg->name, "cuda") == 0)
		return open_gpu(backend_cuda_open, cfg, out);
	if (strcmp(cfg->name, "hip") == 0)
		return open_gpu(backend_hip_open, cfg, out);
	if (strcmp(cfg->name, "auto") != 0)
		return -EINVAL;

	r = open_gpu(backend_cuda_open, cfg, out);
	if (r == 0)
		return 0;
	if (gpu_unusable(0x10de, "NVIDIA", "cuda", r))
		return r;
	log_info("backend auto: cuda unavailable (%s)", strerror(-r));
	r = open_gpu(backend_hip_open, cfg, out);
	if (r == 0)
		return 0;
	if (gpu_unusable(0x1002, "AMD", "hip", r))
		return r;
	log_info("backend auto: hip unavailable (%s); using host memory",
		 strerror(-r));
	return backend_host_open(cfg, out);
}

void backend_destroy(struct backend *b)
{
	if (b)
		b->ops->destroy(b);
}

int backend_chunk_create(struct backend *b, unsigned dev, struct chunk *c)
{
	if (dev >= b->n_devices)
		return -ENODEV;
	if (c->size == 0 || c->size % b->devices[dev].granularity)
		return -EINVAL;
	int r = b->ops->chunk_create(b, dev, c);
	c->serial = ++b->chunk_gen;
	if (r < 0) {
		c->fd = -1;
		c->serial = 0;
		return r;
	}
	c->counted = true;
	b->devices[dev].used_bytes += c->size;
	b->used_bytes += c->size;
	return 0;
}

bool backend_chunk_held(const struct chunk *c)
{
	return c->fd >= 0 || c->handle != 0;
}

int backend_chunk_fd(struct backend *b, unsigned dev, struct chunk *c)
{
	if (c->fd >= 0)
		return c->fd;
	if (!c->handle || !b->ops->chunk_export)
		return -EBADF;
	int r = b->ops->chunk_export(b, dev, c);
	if (r < 0)
		return r;
	c->serial = ++b->chunk_gen;
	return c->fd;
}

bool backend_chunk_unexport(struct backend *b, unsigned dev, struct chunk *c)
{
	if (c->fd < 0 || !c->handle || !b->ops->chunk_unexport)
		return false;
	b->ops->chunk_unexport(b, dev, c);
	b->chunk_gen++;
	c->fd = -1;
	c->serial = 0;
	return true;
}

void backend_chunk_unref(struct backend *b, unsigned dev, struct chunk *c)
{
	if (!backend_chunk_held(c))
		return;
	b->ops->chunk_release(b, dev, c);
	b->chunk_gen++;
	c->fd = -1;
	c->handle = 0;
}

void backend_chunk_release(struct backend *b, unsigned dev, struct chunk *c)
{
	backend_chunk_unref(b, dev, c);
	if (!c->counted)
		return;
	c->counted = false;
	b->devices[dev].used_bytes -= c->size;
	b->used_bytes -= c->size;
}

int backend_mem_info(struct backend *b, unsigned dev, uint64_t *free_bytes,
		     uint64_t *total_bytes)
{
	uint64_t f = 0, t = 0;
	if (dev >= b->n_devices)
		return -ENODEV;
	int r = b->ops->mem_info(b, dev, &f, &t);
	if (r < 0)
		return r;
	if (free_bytes)
		*free_bytes = f;
	if (total_bytes)
		*total_bytes = t;
	return 0;
}

uint64_t backend_free_bytes(struct backend *b)
{
	uint64_t sum = 0;
	for (unsigned i = 0; i < b->n_devices; i++) {
		uint64_t f = 0;
		if (backend_mem_info(b, i, &f, NULL) == 0)
			sum += f;
	}
	return sum;
}

void backend_settle(struct backend *b)
{
	if (b->ops->settle)
		b->ops->settle(b);
}

bool backend_settled(struct backend *b)
{
	return !b->ops->settled || b->ops->settled(b);
}

void backend_pump_set(struct backend *b, unsigned dev, bool on)
{
	if (dev < b->n_devices && b->ops->pump_set)
		b->ops->pump_set(b, dev, on);
}
