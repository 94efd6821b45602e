/* SPDX-License-Identifier: Apache-2.0 */
/* The client's side of the HIP backend: chunk fds from vramd imported and
 * mapped into ranges reserved with the HIP runtime's VMM API (ROCm 6.0 or
 * later), and copies between a pool and its host backup.
 *
 * Every HIP call goes through a table of entry points (hip_api.h): the
 * runtime is loaded with dlopen, so libvram works where ROCm is absent, and
 * the unit tests put a recording stand-in in its place.
 *
 * Devices: HIP has no contexts to push; calls that concern a device (import,
 * which ROCclr makes on the current device, set access, sync, streams) set
 * the calling thread's current device for the call and put the previous one
 * back, so events handled on libvram's background thread work and the host
 * program's threads find their device as they left it. The runtime starts
 * at the first call that needs a device, not when the library opens.
 *
 * Physical release on ROCm. On ROCm (up to 7.2 at least, and no release is
 * known to have the fix) hipMemUnmap + hipMemRelease do not give the memory
 * back while the address range it was mapped in stays reserved: ROCr leaves
 * the dma-buf mmapped in the range until the range is freed
 * (ROCm/legacy-rocm-build#6021, ROCm/rocm-systems#4363; vLLM's fix frees
 * the range and reserves it again at the same address). And a range is
 * freed whole: hipMemAddressFree finds it by its start. So when
 * re-reserving is on (VRAM_HIP_RERESERVE, default auto: on), this file keeps
 * each pool range as a list of runtime reservations, one per chunk plus the
 * unused tail, and:
 *  - map carves the chunk's own reservation out of the one that holds it
 *    (frees that one, reserves the pieces again at their addresses) the
 *    first time a chunk is mapped there, so a reservation never holds two
 *    chunks;
 *  - unmap, after hipMemUnmap + hipMemRelease, frees the chunk's
 *    reservation and at once reserves the same address again, and checks
 *    the runtime returned exactly that address. If it did not (another
 *    allocator of the process took it in between), the wrong reservation is
 *    freed, the piece is marked lost and the unmap fails with
 *    -EADDRNOTAVAIL naming both addresses: a range is never silently moved.
 *    The chunk is unmapped and released either way, so nothing is released
 *    twice; the next map at that address first reserves it again (a resume
 *    retries), and fails the same way while it is taken.
 * docs/rocm.md explains the choice.
 *
 * Copies: copy.c plans them (pieces round-robin over a few streams per
 * device); this file gives it hipStreamCreateWithFlags, hipMemcpyAsync and
 * hipStreamSynchronize. The mapped backup is registered with
 * hipHostRegister by host_register() and stays registered until
 * host_unregister(), so no copy pays for pinning.
 *
 * Settings (read once):
 *   VRAM_HIP_RERESERVE      auto (default), always, never
 *   VRAM_HIP_COPY_STREAMS   streams per device, 1-16 (default 2)
 *   VRAM_HIP_COPY_PIECE_MB  largest single copy in MiB (default 256)
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "copy.h"
#include "attr.h"
#include "error.h"
#include "hip_api.h"
#include "hip.h"
#include "host_regs.h"
#include "log.h"
#include "vmm.h"

#define VMM_HIP_MAX_DEVICES VMM_MAX_DEVICES

/* No runtime version is known to free released memory while its range
 * stays reserved; set this to the first that does once one is (its
 * hipRuntimeGetVersion() value), and "auto" stops re-reserving there. */
#define RERESERVE_FIXED_IN 0

enum piece_state {
	PIECE_RESERVED, /* a runtime reservation of ours, nothing mapped */
	PIECE_MAPPED,	/* reserved, a chunk mapped over all of it */
	PIECE_STUCK,	/* reserved; unmapping its chunk failed, so it may
			   still be mapped: unmap is tried again first */
	PIECE_UNFREED,	/* reserved; its chunk unmapped and released, but
			   freeing the range failed (the memory may stay) */
	PIECE_LOST,	/* not reserved: freed, and not got back yet */
};

/* One runtime reservation (or lost one) of a pool's range. A step of a
 * pause that fails leaves the piece in a state that says what is left to
 * do, and the next map there (a resume) or unreserve does it. */
struct piece {
	uintptr_t addr;
	uint64_t size;
	int state;
	/* The import whose hipMemRelease failed: released again later,
	 * never twice once released. */
	hipMemGenericAllocationHandle_t unreleased;
};

/* A range from reserve(): pieces in address order, covering it. Without
 * re-reserving it stays one piece, the runtime's single reservation. */
struct hip_range {
	uintptr_t base;
	uint64_t size;
	struct piece *p;
	size_t n, cap;
};

struct vmm_hip {
	struct vmm base;
	struct hip_api api;
	pthread_mutex_t lock;	 /* inited, local */
	pthread_mutex_t vm_lock; /* ranges; held across their calls */
	int inited; /* 1: runtime started; < 0: it failed with that errno */
	char init_msg[256]; /* why it failed, for every later call */
	int n_devices;
	/* This process's index of each of the daemon's devices, found by UUID
	 * (-1: not looked up yet); see vh_local(). */
	int local[VMM_HIP_MAX_DEVICES];
	int version;
	int mode;      /* enum vmm_hip_rereserve */
	int rereserve; /* decided when the runtime starts */
	struct hip_range *ranges;
	size_t n_ranges, cap_ranges;
	struct host_regs regs;
	struct vmm_copy copy; /* its queues by this process's index */
	uint64_t rereserves, lost;
	unsigned mapped;
};

static const struct vmm_ops hip_vmm_ops;

static struct vmm_hip *vh_of(struct vmm *v)
{
	return (struct vmm_hip *)v;
}

/* Keeps the runtime's words for vram_last_error() and returns the errno. */
static int vh_err(const struct vmm_hip *vh, const char *what, hipError_t e)
{
	return error_set(hip_errno(e), "hip: %s: %s", what,
			 hip_strerror(&vh->api, e));
}

int vmm_hip_rereserve_parse(const char *s)
{
	if (!s)
		return -EINVAL;
	if (strcmp(s, "auto") == 0)
		return VMM_HIP_RERESERVE_AUTO;
	if (strcmp(s, "always") == 0 || strcmp(s, "1") == 0)
		return VMM_HIP_RERESERVE_ALWAYS;
	if (strcmp(s, "never") == 0 || strcmp(s, "0") == 0)
		return VMM_HIP_RERESERVE_NEVER;
	return -EINVAL;
}

int vmm_hip_rereserve_needed(int runtime_version)
{
	return RERESERVE_FIXED_IN == 0 || runtime_version < RERESERVE_FIXED_IN;
}

/* ---- the runtime and devices ------------------------------------------ */

/* Starts the runtime once and decides re-reserving. */
static int vh_ready(struct vmm_hip *vh)
{
	hipError_t e;
	int r;

	pthread_mutex_lock(&vh->lock);
	if (vh->inited != 0)
		goto out;
	e = vh->api.hipInit(0);
	if (e == hipSuccess)
		e = vh->api.hipRuntimeGetVersion(&vh->version);
	if (e == hipSuccess)
		e = vh->api.hipGetDeviceCount(&vh->n_devices);
	if (e != hipSuccess) {
		/* Remembered: every later call fails the same way. */
		vh->inited = vh_err(vh, "starting the HIP runtime", e);
		goto out;
	}
	if (vh->version < HIP_VERSION_MIN) {
		vh->inited = error_set(ENOSYS,
				       "hip: the HIP runtime is %d.%d; libvram "
				       "needs ROCm 6.0 or later",
				       HIP_VERSION_MAJOR_OF(vh->version),
				       HIP_VERSION_MINOR_OF(vh->version));
		goto out;
	}
	vh->rereserve = vh->mode == VMM_HIP_RERESERVE_ALWAYS ?
				1 :
			vh->mode == VMM_HIP_RERESERVE_NEVER ?
				0 :
				vmm_hip_rereserve_needed(vh->version);
	log_write(VRAM_LOG_INFO,
		  "hip: HIP runtime %d.%d.%d, %d device(s); ranges are %s "
		  "after release (VRAM_HIP_RERESERVE=%s)",
		  HIP_VERSION_MAJOR_OF(vh->version),
		  HIP_VERSION_MINOR_OF(vh->version),
		  HIP_VERSION_PATCH_OF(vh->version), vh->n_devices,
		  vh->rereserve ? "freed and re-reserved" : "kept",
		  vh->mode == VMM_HIP_RERESERVE_ALWAYS ? "always" :
		  vh->mode == VMM_HIP_RERESERVE_NEVER  ? "never" :
							 "auto");
	vh->inited = 1;
out:
	if (vh->inited < 0 && !vh->init_msg[0])
		snprintf(vh->init_msg, sizeof(vh->init_msg), "%s", error_get());
	r = vh->inited < 0 ? vh->inited : 0;
	if (r < 0)
		error_set(-r, "%s", vh->init_msg);
	pthread_mutex_unlock(&vh->lock);
	return r;
}

#define VH_NOT_VISIBLE UINT32_MAX

/* This process's index of the daemon's device dev: the device with the
 * UUID the daemon announced, since HIP_VISIBLE_DEVICES (or
 * ROCR_VISIBLE_DEVICES) may renumber or hide devices here; dev itself when
 * the daemon named no UUID. VH_NOT_VISIBLE when it is not visible here. */
static unsigned vh_local(struct vmm_hip *vh, unsigned dev)
{
	char have[64];
	hipUUID uuid;
	int found;

	if (dev >= VMM_HIP_MAX_DEVICES || dev >= VMM_MAX_DEVICES ||
	    !vh->base.dev_uuid[dev][0] || vh_ready(vh) < 0)
		return dev;
	pthread_mutex_lock(&vh->lock);
	if (vh->local[dev] == -1) {
		found = -2;
		for (int i = 0; i < vh->n_devices && found < 0; i++) {
			if (vh->api.hipDeviceGetUuid(&uuid, i) != hipSuccess)
				continue;
			hip_format_uuid(&uuid, have, sizeof(have));
			if (strcmp(have, vh->base.dev_uuid[dev]) == 0)
				found = i;
		}
		vh->local[dev] = found;
	}
	found = vh->local[dev];
	pthread_mutex_unlock(&vh->lock);
	return found >= 0 ? (unsigned)found : VH_NOT_VISIBLE;
}

static int vh_check_dev(struct vmm_hip *vh, unsigned dev)
{
	if (dev == VH_NOT_VISIBLE)
		return error_set(ENODEV,
				 "hip: the daemon's device is not visible in "
				 "this process (check HIP_VISIBLE_DEVICES and "
				 "ROCR_VISIBLE_DEVICES)");
	if (dev >= VMM_HIP_MAX_DEVICES || (int)dev >= vh->n_devices)
		return error_set(ENODEV,
				 "hip: no device %u in this process (%d "
				 "visible): it must see the daemon's devices "
				 "(check HIP_VISIBLE_DEVICES and "
				 "ROCR_VISIBLE_DEVICES)",
				 dev, vh->n_devices);
	return 0;
}

/* Makes dev the calling thread's current device; *saved gets the one to
 * put back with vh_pop(). */
static int vh_push(struct vmm_hip *vh, unsigned dev, int *saved)
{
	hipError_t e = vh->api.hipGetDevice(saved);

	if (e != hipSuccess)
		return vh_err(vh, "hipGetDevice", e);
	if (*saved == (int)dev)
		return 0;
	e = vh->api.hipSetDevice((int)dev);
	if (e != hipSuccess)
		return vh_err(vh, "hipSetDevice", e);
	return 0;
}

static void vh_pop(struct vmm_hip *vh, unsigned dev, int saved)
{
	if (saved != (int)dev)
		vh->api.hipSetDevice(saved);
}

/* The runtime started, dev valid and current: for a call on dev. */
static int vh_enter(struct vmm_hip *vh, unsigned dev, int *saved)
{
	int r = vh_ready(vh);

	if (r == 0)
		r = vh_check_dev(vh, dev);
	if (r == 0)
		r = vh_push(vh, dev, saved);
	return r;
}

/* ---- ranges (vm_lock held) ------------------------------------------------ */

static struct hip_range *range_holding(struct vmm_hip *vh, uintptr_t addr,
				       uint64_t size)
{
	for (size_t i = 0; i < vh->n_ranges; i++) {
		struct hip_range *r = &vh->ranges[i];
		if (addr >= r->base && size <= r->size &&
		    addr - r->base <= r->size - size)
			return r;
	}
	return NULL;
}

/* The index of the piece of r that holds addr (which r holds). */
static size_t piece_at(const struct hip_range *r, uintptr_t addr)
{
	size_t i = 0;
	while (i + 1 < r->n && r->p[i].addr + r->p[i].size <= addr)
		i++;
	return i;
}

static int pieces_room(struct hip_range *r, size_t n)
{
	if (n <= r->cap)
		return 0;
	size_t cap = r->cap ? 2 * r->cap : 8;
	while (cap < n)
		cap *= 2;
	struct piece *p = realloc(r->p, cap * sizeof(*p));
	if (!p)
		return error_set(ENOMEM, "hip: out of memory");
	r->p = p;
	r->cap = cap;
	return 0;
}

/* Reserves [addr, addr + size) again, at exactly that address. If the
 * runtime puts it elsewhere, that reservation is freed: -EADDRNOTAVAIL,
 * with both addresses in the message (and the log). */
static int reserve_exact(struct vmm_hip *vh, uintptr_t addr, uint64_t size,
			 const char *when, const char *then)
{
	void *p = NULL;
	hipError_t e =
		vh->api.hipMemAddressReserve(&p, size, 0, (void *)addr, 0);
	int r;

	if (e != hipSuccess) {
		r = error_set(EADDRNOTAVAIL,
			      "hip: cannot reserve %#lx (%llu bytes) again %s: "
			      "hipMemAddressReserve: %s; %s",
			      (unsigned long)addr, (unsigned long long)size,
			      when, hip_strerror(&vh->api, e), then);
		log_write(VRAM_LOG_ERROR, "%s", error_get());
		return r;
	}
	if ((uintptr_t)p == addr)
		return 0;
	e = vh->api.hipMemAddressFree(p, size);
	r = error_set(EADDRNOTAVAIL,
		      "hip: reserving %#lx (%llu bytes) again %s, the runtime "
		      "returned %#lx instead (the address was taken in between)"
		      "%s; nothing was moved: %s",
		      (unsigned long)addr, (unsigned long long)size, when,
		      (unsigned long)(uintptr_t)p,
		      e == hipSuccess ? ", which was freed" :
					", which could not be freed",
		      then);
	log_write(VRAM_LOG_ERROR, "%s", error_get());
	return r;
}

/* Finishes what a failed pause left on a piece: unmaps a stuck mapping
 * and releases a handle whose release failed. A piece left stuck fails
 * (its range cannot be freed or mapped under the old mapping). */
static int piece_clean(struct vmm_hip *vh, struct piece *p)
{
	hipError_t e;

	if (p->state == PIECE_STUCK) {
		e = vh->api.hipMemUnmap((void *)p->addr, p->size);
		if (e != hipSuccess)
			return error_set(EBUSY,
					 "hip: %#lx (%llu bytes) is still "
					 "mapped after a failed unmap: "
					 "hipMemUnmap: %s",
					 (unsigned long)p->addr,
					 (unsigned long long)p->size,
					 hip_strerror(&vh->api, e));
		p->state = PIECE_UNFREED;
	}
	if (p->unreleased) {
		e = vh->api.hipMemRelease(p->unreleased);
		if (e != hipSuccess)
			return vh_err(vh, "hipMemRelease (again)", e);
		p->unreleased = NULL;
	}
	return 0;
}

/* Frees the runtime reservation of a reserved or unfreed piece. */
static int piece_free(struct vmm_hip *vh, struct piece *p)
{
	hipError_t e = vh->api.hipMemAddressFree((void *)p->addr, p->size);

	if (e != hipSuccess)
		return error_set(
			hip_errno(e), "hip: hipMemAddressFree(%#lx, %llu): %s",
			(unsigned long)p->addr, (unsigned long long)p->size,
			hip_strerror(&vh->api, e));
	p->state = PIECE_LOST;
	return 0;
}

/* Makes the piece of r at [addr, addr + size) exactly one reservation of
 * ours with nothing mapped, freeing and reserving again the pieces that
 * hold it as needed; *idx gets its index. On failure nothing is mapped
 * and every piece is in a state a later call can go on from. */
static int range_carve(struct vmm_hip *vh, struct hip_range *r, uintptr_t addr,
		       uint64_t size, size_t *idx)
{
	size_t i = piece_at(r, addr), j = piece_at(r, addr + size - 1);
	int rc;

	for (size_t k = i; k <= j; k++)
		if (r->p[k].state == PIECE_MAPPED)
			return error_set(EBUSY,
					 "hip: %#lx (%llu bytes) overlaps a "
					 "mapped chunk",
					 (unsigned long)addr,
					 (unsigned long long)size);
	for (size_t k = i; k <= j; k++) {
		rc = piece_clean(vh, &r->p[k]);
		if (rc < 0)
			return rc;
	}
	if (i == j && r->p[i].addr == addr && r->p[i].size == size) {
		struct piece *p = &r->p[i];
		/* The range of a chunk released by a pause that could not
		 * free it: freed now, so its memory goes before more comes. */
		if (p->state == PIECE_UNFREED) {
			rc = piece_free(vh, p);
			if (rc < 0)
				return rc;
		}
		if (p->state == PIECE_LOST) {
			rc = reserve_exact(vh, addr, size,
					   "to map a chunk there",
					   "the chunk is not mapped; it can be "
					   "once the address is free");
			if (rc < 0)
				return rc;
			p->state = PIECE_RESERVED;
		}
		*idx = i;
		return 0;
	}
	rc = pieces_room(r, r->n + 2);
	if (rc < 0)
		return rc;
	/* A reservation is freed whole: free the ones that hold the chunk,
	 * then reserve the chunk's part and what is left around it. */
	for (size_t k = i; k <= j; k++) {
		if (r->p[k].state == PIECE_LOST)
			continue;
		rc = piece_free(vh, &r->p[k]);
		if (rc < 0)
			return rc;
	}
	uintptr_t lo = r->p[i].addr, hi = r->p[j].addr + r->p[j].size;
	struct piece np[3];
	size_t nn = 0, want;
	if (lo < addr)
		np[nn++] = (struct piece){ lo, addr - lo, PIECE_LOST, NULL };
	want = i + nn;
	np[nn++] = (struct piece){ addr, size, PIECE_LOST, NULL };
	if (addr + size < hi)
		np[nn++] = (struct piece){ addr + size, hi - addr - size,
					   PIECE_LOST, NULL };
	memmove(&r->p[i + nn], &r->p[j + 1], (r->n - j - 1) * sizeof(*r->p));
	memcpy(&r->p[i], np, nn * sizeof(*np));
	r->n = r->n - (j - i + 1) + nn;

	char msg[ERROR_MSG_MAX] = "";
	rc = 0;
	for (size_t k = i; k < i + nn; k++) {
		int rk = reserve_exact(
			vh, r->p[k].addr, r->p[k].size,
			k == want ? "to map a chunk there" : "next to a chunk",
			k == want ? "the chunk is not mapped; it can be once "
				    "the address is free" :
				    "it is tried again when a chunk is mapped "
				    "there");
		if (rk == 0) {
			r->p[k].state = PIECE_RESERVED;
		} else {
			vh->lost++;
			if (k == want) {
				rc = rk;
				snprintf(msg, sizeof(msg), "%s", error_get());
			}
		}
		/* A neighbour not got back is retried when a chunk is
		 * mapped there; unreserve skips it. */
	}
	if (rc < 0)
		return error_set(-rc, "%s", msg);
	*idx = want;
	return 0;
}

/* Unmaps and releases an import; with re-reserving (r not NULL, its piece
 * idx mapped there), frees the chunk's reservation and reserves the same
 * address again. The piece never ends mapped: reserved when all went
 * well, else in the state that says what is left to do (see struct
 * piece). Returns the error whose message is the thread's last. */
static int hip_unmap_release(struct vmm_hip *vh, struct hip_range *r,
			     size_t idx, uintptr_t addr, uint64_t size,
			     hipMemGenericAllocationHandle_t h)
{
	hipError_t eu, er;
	int rc = 0, rr;

	/* Both steps are tried whatever the first did: a handle left behind
	 * would hold the memory until this process exits. */
	eu = vh->api.hipMemUnmap((void *)addr, size);
	er = vh->api.hipMemRelease(h);
	if (eu != hipSuccess)
		rc = vh_err(vh, "hipMemUnmap", eu);
	else if (er != hipSuccess)
		rc = vh_err(vh, "hipMemRelease", er);
	if (!r) {
		if (er != hipSuccess)
			log_write(VRAM_LOG_WARN,
				  "hip: an import of %llu bytes could not be "
				  "released: %s",
				  (unsigned long long)size,
				  hip_strerror(&vh->api, er));
		return rc;
	}
	struct piece *p = &r->p[idx];
	if (er != hipSuccess)
		p->unreleased = h;
	if (eu != hipSuccess) {
		/* Its range is not freed under a mapping that may remain. */
		p->state = PIECE_STUCK;
		return rc;
	}
	p->state = PIECE_UNFREED;
	rr = piece_free(vh, p);
	if (rr < 0) {
		char msg[ERROR_MSG_MAX];
		snprintf(msg, sizeof(msg), "%s", error_get());
		rr = error_set(-rr,
			       "%s, after releasing a chunk; its memory may "
			       "stay allocated until the pool resumes or "
			       "closes",
			       msg);
		log_write(VRAM_LOG_WARN, "%s", error_get());
		return rr;
	}
	rr = reserve_exact(vh, addr, size, "after releasing a chunk",
			   "the chunk is released and pointers into it stay "
			   "where they were; the resume reserves that address "
			   "again");
	if (rr < 0) {
		vh->lost++;
		return rr;
	}
	p->state = PIECE_RESERVED;
	vh->rereserves++;
	return rc;
}

/* ---- vmm operations ------------------------------------------------------- */

static int hip_reserve(struct vmm *v, unsigned dev, uint64_t size,
		       uint64_t align, uintptr_t *addr)
{
	struct vmm_hip *vh = vh_of(v);
	/* From here on dev is this process's index of the device. */
	dev = vh_local(vh, dev);
	void *p = NULL;
	hipError_t e;
	int r;

	pthread_mutex_lock(&vh->vm_lock);
	r = vh_ready(vh);
	if (r == 0)
		r = vh_check_dev(vh, dev);
	if (r < 0)
		goto out;
	if (vh->n_ranges == vh->cap_ranges) {
		size_t cap = vh->cap_ranges ? 2 * vh->cap_ranges : 8;
		struct hip_range *rs = realloc(vh->ranges, cap * sizeof(*rs));
		if (!rs) {
			r = error_set(ENOMEM, "hip: out of memory");
			goto out;
		}
		vh->ranges = rs;
		vh->cap_ranges = cap;
	}
	struct hip_range *rg = &vh->ranges[vh->n_ranges];
	memset(rg, 0, sizeof(*rg));
	r = pieces_room(rg, 1);
	if (r < 0)
		goto out;
	/* One reservation serves every device: the runtime's is
	 * process-wide. */
	e = vh->api.hipMemAddressReserve(&p, size, align, NULL, 0);
	if (e != hipSuccess) {
		free(rg->p);
		r = vh_err(vh, "hipMemAddressReserve", e);
		goto out;
	}
	rg->base = (uintptr_t)p;
	rg->size = size;
	rg->p[0] = (struct piece){ rg->base, size, PIECE_RESERVED, NULL };
	rg->n = 1;
	vh->n_ranges++;
	*addr = rg->base;
out:
	pthread_mutex_unlock(&vh->vm_lock);
	return r;
}

static int hip_unreserve(struct vmm *v, uintptr_t addr, uint64_t size UNUSED)
{
	struct vmm_hip *vh = vh_of(v);
	struct hip_range *rg = NULL;
	int r = 0, rk;

	pthread_mutex_lock(&vh->vm_lock);
	for (size_t i = 0; i < vh->n_ranges; i++)
		if (vh->ranges[i].base == addr)
			rg = &vh->ranges[i];
	if (!rg) {
		r = error_set(EINVAL, "hip: no range reserved at %#lx",
			      (unsigned long)addr);
		goto out;
	}
	for (size_t k = 0; k < rg->n; k++) {
		struct piece *p = &rg->p[k];
		if (p->state == PIECE_MAPPED) {
			/* Freeing under a mapping fails on ROCm anyway. */
			if (r == 0)
				r = error_set(EBUSY,
					      "hip: %#lx (%llu bytes) is still "
					      "mapped; its range is left",
					      (unsigned long)p->addr,
					      (unsigned long long)p->size);
			continue;
		}
		rk = piece_clean(vh, p);
		if (rk == 0 && p->state != PIECE_LOST)
			rk = piece_free(vh, p);
		if (rk < 0 && r == 0)
			r = rk;
	}
	/* Forgotten whatever happened: the caller will not call again. */
	free(rg->p);
	*rg = vh->ranges[--vh->n_ranges];
out:
	pthread_mutex_unlock(&vh->vm_lock);
	return r;
}

/* vmm_grant_access()'s runtime call for hip_map; dev is this process's
 * index. */
static int vh_grant(struct vmm *v, uintptr_t addr, uint64_t size, int dev,
		    int readonly)
{
	struct vmm_hip *vh = vh_of(v);
	hipMemAccessDesc access = {
		.location = { hipMemLocationTypeDevice, dev },
		.flags = readonly ? hipMemAccessFlagsProtRead :
				    hipMemAccessFlagsProtReadWrite,
	};
	hipError_t e = vh->api.hipMemSetAccess((void *)addr, size, &access, 1);

	return e == hipSuccess ? 0 : vh_err(vh, "hipMemSetAccess", e);
}

static int hip_map(struct vmm *v, unsigned dev, uintptr_t addr, uint64_t size,
		   int fd, int readonly, uintptr_t *handle)
{
	struct vmm_hip *vh = vh_of(v);
	/* From here on dev is this process's index of the device. */
	dev = vh_local(vh, dev);
	const struct hip_api *api = &vh->api;
	hipMemGenericAllocationHandle_t h = NULL;
	struct hip_range *rg;
	size_t idx = 0;
	hipError_t e;
	int r, saved = 0, ifd = fd;

	pthread_mutex_lock(&vh->vm_lock);
	r = vh_ready(vh);
	if (r == 0)
		r = vh_check_dev(vh, dev);
	if (r < 0)
		goto out_unlock;
	rg = size ? range_holding(vh, addr, size) : NULL;
	if (!rg) {
		r = error_set(EINVAL,
			      "hip: %#lx (%llu bytes) is not in a range "
			      "reserved here",
			      (unsigned long)addr, (unsigned long long)size);
		goto out_unlock;
	}
	if (vh->rereserve) {
		r = range_carve(vh, rg, addr, size, &idx);
		if (r < 0)
			goto out_unlock;
	}
	r = vh_push(vh, dev, &saved);
	if (r < 0)
		goto out_unlock;
	/* ROCclr takes a NULL handle for "none": fd 0 must be another. */
	if (fd == 0) {
		ifd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
		if (ifd < 0) {
			r = error_set(errno, "hip: dup of chunk fd 0: %s",
				      strerror(errno));
			goto out_pop;
		}
	}
	/* A POSIX fd handle is passed by value, cast to a pointer. */
	e = api->hipMemImportFromShareableHandle(
		&h, (void *)(uintptr_t)ifd,
		hipMemHandleTypePosixFileDescriptor);
	if (ifd != fd)
		close(ifd);
	if (e != hipSuccess) {
		r = vh_err(vh, "hipMemImportFromShareableHandle", e);
		goto out_pop;
	}
	e = api->hipMemMap((void *)addr, size, 0, h, 0);
	if (e != hipSuccess) {
		r = vh_err(vh, "hipMemMap", e);
		hipError_t er = api->hipMemRelease(h);
		if (er != hipSuccess)
			log_write(VRAM_LOG_WARN,
				  "hip: hipMemRelease after a failed map: %s",
				  hip_strerror(api, er));
		goto out_pop;
	}
	if (vh->rereserve)
		rg->p[idx].state = PIECE_MAPPED;
	r = vmm_grant_access(v, addr, size, (int)dev, readonly, vh_grant);
	if (r < 0) {
		char msg[ERROR_MSG_MAX];
		snprintf(msg, sizeof(msg), "%s", error_get());
		/* Undone as a pause would, so the memory really goes. */
		if (hip_unmap_release(vh, vh->rereserve ? rg : NULL, idx, addr,
				      size, h) < 0)
			log_write(VRAM_LOG_WARN,
				  "hip: undoing a failed map: %s", error_get());
		error_set(-r, "%s", msg);
		goto out_pop;
	}
	vh->mapped++;
	*handle = (uintptr_t)h;
out_pop:
	vh_pop(vh, dev, saved);
out_unlock:
	pthread_mutex_unlock(&vh->vm_lock);
	return r;
}

static int hip_unmap(struct vmm *v, unsigned dev, uintptr_t addr, uint64_t size,
		     uintptr_t handle)
{
	struct vmm_hip *vh = vh_of(v);
	/* From here on dev is this process's index of the device. */
	dev = vh_local(vh, dev);
	struct hip_range *rg = NULL;
	size_t idx = 0;
	int r, saved = (int)dev;

	pthread_mutex_lock(&vh->vm_lock);
	if (vh->rereserve) {
		rg = range_holding(vh, addr, size);
		if (rg) {
			idx = piece_at(rg, addr);
			struct piece *p = &rg->p[idx];
			if (p->addr != addr || p->size != size ||
			    p->state != PIECE_MAPPED)
				rg = NULL;
		}
	}
	/* Unmap and release need no current device; a failure to set it
	 * must not leave the import behind. */
	if (vh_push(vh, dev, &saved) < 0)
		saved = (int)dev;
	r = hip_unmap_release(vh, rg, idx, addr, size,
			      (hipMemGenericAllocationHandle_t)handle);
	if (r == 0 && vh->rereserve && !rg)
		r = error_set(EINVAL,
			      "hip: %#lx (%llu bytes) was not mapped here; "
			      "unmapped and released without re-reserving",
			      (unsigned long)addr, (unsigned long long)size);
	if (vh->mapped > 0)
		vh->mapped--;
	vh_pop(vh, dev, saved);
	pthread_mutex_unlock(&vh->vm_lock);
	return r;
}

static int hip_sync(struct vmm *v, unsigned dev)
{
	struct vmm_hip *vh = vh_of(v);
	/* From here on dev is this process's index of the device. */
	dev = vh_local(vh, dev);
	int saved = 0, r = vh_enter(vh, dev, &saved);

	if (r < 0)
		return r;
	/* All work of this process on the device, every stream. */
	hipError_t e = vh->api.hipDeviceSynchronize();
	vh_pop(vh, dev, saved);
	if (e != hipSuccess)
		return vh_err(vh, "hipDeviceSynchronize", e);
	return 0;
}

/* ---- host memory and copies -------------------------------------------- */

static int hip_host_register(struct vmm *v, void *host, size_t len)
{
	struct vmm_hip *vh = vh_of(v);
	hipError_t e;
	int r = vh_ready(vh);

	if (r < 0)
		return r;
	/* The caller has faulted the pages in (see cuda_host_register). */
	/* Portable: usable whichever device copies. */
	e = vh->api.hipHostRegister(host, len, hipHostRegisterPortable);
	if (e != hipSuccess)
		return vh_err(vh, "hipHostRegister", e);
	r = host_regs_add(&vh->regs, host, len);
	/* Unknown to destroy, it would stay pinned: undo it. */
	if (r < 0)
		vh->api.hipHostUnregister(host);
	return r;
}

static int hip_host_unregister(struct vmm *v, void *host, size_t len UNUSED)
{
	struct vmm_hip *vh = vh_of(v);
	int r = host_regs_remove(&vh->regs, host);

	if (r < 0)
		return r;
	hipError_t e = vh->api.hipHostUnregister(host);
	if (e != hipSuccess)
		return vh_err(vh, "hipHostUnregister", e);
	return 0;
}

/* copy.c's runtime calls, with the device current. */
static int vh_stream_create(void *drv, void **stream)
{
	struct vmm_hip *vh = drv;
	hipError_t e = vh->api.hipStreamCreateWithFlags((hipStream_t *)stream,
							hipStreamNonBlocking);
	return e == hipSuccess ? 0 : vh_err(vh, "hipStreamCreateWithFlags", e);
}

static int vh_memcpy_async(void *drv, int to_host, uintptr_t dev, void *host,
			   size_t len, void *stream)
{
	struct vmm_hip *vh = drv;
	hipError_t e;

	if (to_host)
		e = vh->api.hipMemcpyAsync(host, (void *)dev, len,
					   hipMemcpyDeviceToHost,
					   (hipStream_t)stream);
	else
		e = vh->api.hipMemcpyAsync((void *)dev, host, len,
					   hipMemcpyHostToDevice,
					   (hipStream_t)stream);
	return e == hipSuccess ? 0 : vh_err(vh, "hipMemcpyAsync", e);
}

static int vh_stream_sync(void *drv, void *stream)
{
	struct vmm_hip *vh = drv;
	hipError_t e = vh->api.hipStreamSynchronize((hipStream_t)stream);
	return e == hipSuccess ? 0 : vh_err(vh, "hipStreamSynchronize", e);
}

static const struct vmm_copy_ops vh_copy_ops = {
	.stream_create = vh_stream_create,
	.memcpy_async = vh_memcpy_async,
	.stream_sync = vh_stream_sync,
};

static int hip_copy(struct vmm *v, unsigned dev, int to_host,
		    const struct vmm_span *spans, size_t n)
{
	struct vmm_hip *vh = vh_of(v);
	/* From here on dev is this process's index of the device. */
	dev = vh_local(vh, dev);
	int saved = 0, r = vh_enter(vh, dev, &saved);

	if (r < 0)
		return r;
	r = vmm_copy_run(&vh->copy, dev, to_host, spans, n);
	vh_pop(vh, dev, saved);
	return r;
}

static int hip_copy_issue(struct vmm *v, unsigned dev, unsigned lane,
			  int to_host, const struct vmm_span *spans, size_t n)
{
	struct vmm_hip *vh = vh_of(v);
	dev = vh_local(vh, dev);
	int saved = 0, r = vh_enter(vh, dev, &saved);

	if (r < 0)
		return r;
	r = vmm_copy_issue(&vh->copy, dev, lane, to_host, spans, n);
	vh_pop(vh, dev, saved);
	return r;
}

static int hip_copy_wait(struct vmm *v, unsigned dev, unsigned lane)
{
	struct vmm_hip *vh = vh_of(v);
	dev = vh_local(vh, dev);
	int saved = 0, r = vh_enter(vh, dev, &saved);

	if (r < 0)
		return r;
	r = vmm_copy_wait(&vh->copy, dev, lane);
	vh_pop(vh, dev, saved);
	return r;
}

static int hip_local_device(struct vmm *v, unsigned dev)
{
	struct vmm_hip *vh = vh_of(v);
	unsigned local = vh_local(vh, dev);
	int r = vh_ready(vh);

	if (r == 0)
		r = vh_check_dev(vh, local);
	return r < 0 ? r : (int)local;
}

/* ---- lifetime ------------------------------------------------------------ */

static void hip_destroy(struct vmm *v)
{
	struct vmm_hip *vh = vh_of(v);

	/* Registrations the caller left would pin their pages until exit. */
	void *host;
	size_t len;
	while (host_regs_pop(&vh->regs, &host, &len))
		vh->api.hipHostUnregister(host);
	for (unsigned i = 0; i < VMM_HIP_MAX_DEVICES; i++) {
		void *streams[VMM_COPY_LANES * VMM_COPY_MAX_STREAMS];
		unsigned n = vmm_copy_streams(&vh->copy, i, streams);
		int saved;
		if (!n || vh_push(vh, i, &saved) < 0)
			continue;
		for (unsigned s = 0; s < n; s++)
			vh->api.hipStreamDestroy((hipStream_t)streams[s]);
		vh_pop(vh, i, saved);
	}
	vmm_copy_fini(&vh->copy);
	/* Ranges left are the mappings' to free (mapping_release); only the
	 * bookkeeping goes here. */
	for (size_t i = 0; i < vh->n_ranges; i++)
		free(vh->ranges[i].p);
	free(vh->ranges);
	host_regs_fini(&vh->regs);
	pthread_mutex_destroy(&vh->vm_lock);
	pthread_mutex_destroy(&vh->lock);
	/* libamdhip64 stays loaded (hip_api.h says why). */
	free(vh);
}

int vmm_hip_stats(struct vmm *v, struct vmm_hip_stats *st)
{
	if (!v || v->ops != &hip_vmm_ops || !st)
		return -EINVAL;
	struct vmm_hip *vh = vh_of(v);
	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&vh->vm_lock);
	st->rereserve = vh->inited > 0 && vh->rereserve;
	st->runtime_version = vh->inited > 0 ? vh->version : 0;
	st->rereserves = vh->rereserves;
	st->lost = vh->lost;
	st->mapped = vh->mapped;
	for (size_t i = 0; i < vh->n_ranges; i++)
		for (size_t k = 0; k < vh->ranges[i].n; k++)
			st->reservations +=
				vh->ranges[i].p[k].state != PIECE_LOST;
	pthread_mutex_unlock(&vh->vm_lock);
	return 0;
}

static const struct vmm_ops hip_vmm_ops = {
	.name = "hip",
	.destroy = hip_destroy,
	.reserve = hip_reserve,
	.unreserve = hip_unreserve,
	.map = hip_map,
	.unmap = hip_unmap,
	.sync = hip_sync,
	.host_register = hip_host_register,
	.host_pins = true,
	.host_unregister = hip_host_unregister,
	.copy = hip_copy,
	.copy_issue = hip_copy_issue,
	.copy_wait = hip_copy_wait,
	.local_device = hip_local_device,
};

int vmm_hip_open_with(const struct hip_api *api, struct vmm **out)
{
	const char *missing = hip_api_missing(api);
	const char *mode = getenv("VRAM_HIP_RERESERVE");
	struct vmm_hip *vh;

	if (missing)
		return error_set(EINVAL, "hip: entry point table lacks %s",
				 missing);
	vh = calloc(1, sizeof(*vh));
	if (!vh)
		return -ENOMEM;
	vh->api = *api;
	vh->mode = VMM_HIP_RERESERVE_AUTO;
	for (unsigned i = 0; i < VMM_HIP_MAX_DEVICES; i++)
		vh->local[i] = -1;
	if (mode && *mode) {
		int m = vmm_hip_rereserve_parse(mode);
		if (m < 0)
			log_write(VRAM_LOG_WARN,
				  "hip: VRAM_HIP_RERESERVE=%s ignored (auto, "
				  "always or never); using auto",
				  mode);
		else
			vh->mode = m;
	}
	pthread_mutex_init(&vh->lock, NULL);
	host_regs_init(&vh->regs);
	pthread_mutex_init(&vh->vm_lock, NULL);
	vmm_copy_init(&vh->copy, &vh_copy_ops, vh, "VRAM_HIP_COPY_STREAMS",
		      "VRAM_HIP_COPY_PIECE_MB");
	vh->base.ops = &hip_vmm_ops;
	*out = &vh->base;
	return 0;
}

/* Opens the client side of the HIP backend: loads libamdhip64 (or
 * $VRAM_LIBHIP) and nothing more; the runtime starts at the first call that
 * needs a device. *out is the caller's until vmm_destroy(). -ENOENT without
 * the library, -ENOSYS with one that is not a HIP runtime of ROCm 6.0 or
 * later. */
int vmm_hip_open(struct vmm **out)
{
	struct hip_api api;
	char why[512];
	int r = hip_api_load(&api, why, sizeof(why));

	if (r < 0) {
		log_write(VRAM_LOG_DEBUG, "hip: %s", why);
		return r;
	}
	return vmm_hip_open_with(&api, out);
}
