/* SPDX-License-Identifier: Apache-2.0 */
/* A recording stand-in for the HIP runtime, for the HIP backend's tests on
 * machines without AMD hardware (tests/unit/daemon_hip_*.c and
 * client_hip_*.c). fake_hip_api() returns a table of entry points
 * (common/hip_api.h) that the code under test gets through
 * backend_hip_open_with() and vmm_hip_open_with().
 *
 * Every call is logged as one line, "name(args)" with " =result" when it
 * made something, so a test can assert the exact sequence of a grow, a
 * pause or a resume (EXPECT_CALL). hipGetDevice, hipSetDevice and the error
 * strings are not logged; calls that depend on the current device log it
 * ("dev0"). Any logged call can be made to fail: the Nth from now
 * (fake_fail_nth) or the Nth of a name (fake_fail_call); a failing call
 * does nothing and its line ends in " -> ERR".
 *
 * The model behaves like ROCm where vramd depends on it:
 *  - Address ranges are real: hipMemAddressReserve maps PROT_NONE memory
 *    (at the hint when it is free, elsewhere when not), hipMemMap maps the
 *    allocation's memfd there (inaccessible until hipMemSetAccess), and
 *    hipMemUnmap puts PROT_NONE memory back. So copies move real bytes and
 *    a stale pointer faults. hipMemAddressFree takes only the start of a
 *    reservation with nothing mapped in it; a range cannot be freed piece
 *    by piece (as on ROCm, where hipMemAddressFree looks the range up by
 *    its start).
 *  - hipMemCreate allocates on the *current* device, whatever the
 *    properties say (as ROCclr does); a mismatch is counted.
 *  - hipMemImportFromShareableHandle refuses a NULL handle, i.e. fd 0 (as
 *    ROCclr does). Imports of the same memfd share one allocation.
 *  - Device memory is in use while a handle or a mapping holds the
 *    allocation. With fake.rocm_quirk set (the default) an unmapped
 *    allocation also stays in use until the reservation it was mapped in
 *    is freed: the ROCm behaviour of ROCm/legacy-rocm-build#6021, where
 *    hipMemUnmap leaves the dma-buf mmapped in the reserved range.
 *  - hipMemRelease of a handle already released fails and is counted
 *    (fake.bad_releases): a double release is a test failure.
 * fake_steal(addr, size) makes "another allocator" take an address range,
 * so a re-reserve at that address lands elsewhere.
 */
#ifndef VRAM_TEST_HIP_FAKE_H
#define VRAM_TEST_HIP_FAKE_H

#include <fcntl.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hip_api.h"
#include "test.h"

#define FAKE_FN static __attribute__((unused))
#define FAKE_MAX 1024
#define FAKE_LINE 192

struct fake_alloc {
	int id;
	int fd; /* memfd holding the "device memory" */
	dev_t st_dev;
	ino_t ino;
	size_t size;
	int dev;
	int refs;      /* live handles and mappings */
	int pinned_by; /* reservation id keeping it (the ROCm quirk), 0 */
	int in_use;    /* counted in the device's used memory */
};

struct fake_handle {
	int id;
	int live;
	struct fake_alloc *a;
};

struct fake_res {
	int id;
	uintptr_t addr;
	size_t size;
	int live;
};

struct fake_map {
	uintptr_t addr;
	size_t size;
	struct fake_handle *h;
	int live;
};

struct fake_stream {
	int dev;
	int live;
};

static struct {
	/* Settings (a test changes them before the calls). */
	int n_devices;
	int version;
	hipError_t init_error;
	size_t total;	   /* per device */
	size_t other_used; /* memory other processes use, per device */
	size_t gran, min_gran;
	int rocm_quirk;	     /* see the top of this file */
	int hold;	     /* allocations never leave the device */
	int no_readonly;     /* read-only access refused */
	int no_vmm;	     /* hipMemCreate: hipErrorNotSupported */
	int steal_next_free; /* the Nth hipMemAddressFree from now: another
				allocator takes the range at once */

	/* The log. */
	char (*lines)[FAKE_LINE];
	size_t n_lines, cap_lines, mark, cursor;

	/* Failure injection. */
	long fail_nth; /* counted down by every logged call; fails at 0 */
	hipError_t fail_nth_err;
	char fail_name[64];
	long fail_name_nth;
	hipError_t fail_name_err;

	/* State. */
	struct fake_alloc allocs[FAKE_MAX];
	int n_allocs;
	struct fake_handle handles[FAKE_MAX];
	int n_handles;
	struct fake_res res[FAKE_MAX];
	int n_res;
	struct fake_map maps[FAKE_MAX];
	int n_maps;
	struct fake_stream streams[FAKE_MAX];
	int n_streams;
	void *registered[FAKE_MAX];
	int n_registered;
	uintptr_t stolen[16];
	size_t stolen_size[16];
	int n_stolen;
	size_t used[16];

	/* Counters. */
	int bad_releases; /* release of a handle not live */
	int wrong_device; /* create/import not on the properties' device */
	int syncs, copies, stream_syncs;
	int inited;
} fake = {
	.n_devices = 1,
	.version = 70226015, /* HIP 7.2 */
	.total = 1ull << 30,
	.gran = 2u << 20,
	.min_gran = 4096,
	.rocm_quirk = 1,
	.fail_nth = -1,
	.fail_name_nth = -1,
};

static __thread int fake_cur_dev;

/* ---- the log and failure injection --------------------------------------- */

static __attribute__((format(printf, 2, 3), unused)) hipError_t
fake_begin(const char *name, const char *fmt, ...)
{
	va_list ap;
	hipError_t e = hipSuccess;

	if (fake.n_lines == fake.cap_lines) {
		fake.cap_lines = fake.cap_lines ? 2 * fake.cap_lines : 256;
		fake.lines = realloc(fake.lines,
				     fake.cap_lines * sizeof(*fake.lines));
		if (!fake.lines)
			abort();
	}
	char *line = fake.lines[fake.n_lines++];
	int n = snprintf(line, FAKE_LINE, "%s(", name);
	va_start(ap, fmt);
	n += vsnprintf(line + n, FAKE_LINE - (size_t)n, fmt, ap);
	va_end(ap);
	snprintf(line + n, FAKE_LINE - (size_t)n, ")");
	if (fake.fail_nth > 0 && --fake.fail_nth == 0)
		e = fake.fail_nth_err;
	if (!e && fake.fail_name_nth > 0 && strcmp(fake.fail_name, name) == 0 &&
	    --fake.fail_name_nth == 0)
		e = fake.fail_name_err;
	if (e) {
		size_t len = strlen(line);
		snprintf(line + len, FAKE_LINE - len, " -> %d", e);
	}
	return e;
}

/* Appends " =what" to the last line. */
static __attribute__((format(printf, 1, 2), unused)) void
fake_result(const char *fmt, ...)
{
	va_list ap;
	char *line = fake.lines[fake.n_lines - 1];
	size_t len = strlen(line);

	snprintf(line + len, FAKE_LINE - len, " =");
	len += 2;
	va_start(ap, fmt);
	vsnprintf(line + len, FAKE_LINE - len, fmt, ap);
	va_end(ap);
}

/* A logged call that fails by itself: " -> ERR" on its line. */
FAKE_FN hipError_t fake_ret(hipError_t e)
{
	char *line = fake.lines[fake.n_lines - 1];
	size_t len = strlen(line);

	snprintf(line + len, FAKE_LINE - len, " -> %d", e);
	return e;
}

/* For calls that are not logged: only the failure by name applies. */
FAKE_FN hipError_t fake_quiet(const char *name)
{
	if (fake.fail_name_nth > 0 && strcmp(fake.fail_name, name) == 0 &&
	    --fake.fail_name_nth == 0)
		return fake.fail_name_err;
	return hipSuccess;
}

/* The nth logged call from now (1: the next one) returns err. */
FAKE_FN void fake_fail_nth(long nth, hipError_t err)
{
	fake.fail_nth = nth;
	fake.fail_nth_err = err;
}

/* The nth call of name from now returns err. */
FAKE_FN void fake_fail_call(const char *name, long nth, hipError_t err)
{
	snprintf(fake.fail_name, sizeof(fake.fail_name), "%s", name);
	fake.fail_name_nth = nth;
	fake.fail_name_err = err;
}

FAKE_FN void fake_fail_none(void)
{
	fake.fail_nth = -1;
	fake.fail_name_nth = -1;
}

FAKE_FN void fake_mark(void)
{
	fake.mark = fake.cursor = fake.n_lines;
}

FAKE_FN size_t fake_calls_since_mark(void)
{
	return fake.n_lines - fake.mark;
}

FAKE_FN void fake_dump(void)
{
	fprintf(stderr, "calls since the mark:\n");
	for (size_t i = fake.mark; i < fake.n_lines; i++)
		fprintf(stderr, "  %s%s\n", fake.lines[i],
			i == fake.cursor ? "   <--" : "");
}

/* The next call since the mark must read exactly as formatted. */
#define EXPECT_CALL(...)                                                \
	do {                                                            \
		char want_[1024];                                       \
		snprintf(want_, sizeof(want_), __VA_ARGS__);            \
		if (fake.cursor >= fake.n_lines) {                      \
			fake_dump();                                    \
			TEST_FAIL("expected call %s, got none", want_); \
		}                                                       \
		if (strcmp(fake.lines[fake.cursor], want_) != 0) {      \
			fake_dump();                                    \
			TEST_FAIL("expected call %s, got %s", want_,    \
				  fake.lines[fake.cursor]);             \
		}                                                       \
		fake.cursor++;                                          \
	} while (0)

#define EXPECT_NO_MORE_CALLS()                              \
	do {                                                \
		if (fake.cursor != fake.n_lines) {          \
			fake_dump();                        \
			TEST_FAIL("unexpected call %s",     \
				  fake.lines[fake.cursor]); \
		}                                           \
	} while (0)

/* ---- model ------------------------------------------------------------- */

FAKE_FN int fake_dev_ok(int dev)
{
	return dev >= 0 && dev < fake.n_devices && dev < 16;
}

/* Recomputes whether a is in use after a change of refs or pins. */
FAKE_FN void fake_account(struct fake_alloc *a)
{
	int in_use = fake.hold || a->refs > 0 || a->pinned_by != 0;
	if (in_use && !a->in_use)
		fake.used[a->dev] += a->size;
	if (!in_use && a->in_use)
		fake.used[a->dev] -= a->size;
	a->in_use = in_use;
	/* Its memfd is needed to export and map it, while referenced. */
	if (a->refs == 0 && a->fd >= 0) {
		close(a->fd);
		a->fd = -1;
	}
}

FAKE_FN struct fake_handle *fake_handle_new(struct fake_alloc *a)
{
	if (fake.n_handles == FAKE_MAX)
		abort();
	struct fake_handle *h = &fake.handles[fake.n_handles];
	h->id = ++fake.n_handles;
	h->live = 1;
	h->a = a;
	a->refs++;
	fake_account(a);
	return h;
}

FAKE_FN struct fake_handle *fake_handle_of(hipMemGenericAllocationHandle_t h)
{
	struct fake_handle *fh = (struct fake_handle *)h;
	if (fh < fake.handles || fh >= fake.handles + fake.n_handles)
		return NULL;
	return fh;
}

FAKE_FN struct fake_res *fake_res_at(uintptr_t addr)
{
	for (int i = 0; i < fake.n_res; i++)
		if (fake.res[i].live && fake.res[i].addr == addr)
			return &fake.res[i];
	return NULL;
}

FAKE_FN struct fake_res *fake_res_holding(uintptr_t addr, size_t size)
{
	for (int i = 0; i < fake.n_res; i++) {
		struct fake_res *r = &fake.res[i];
		if (r->live && addr >= r->addr &&
		    addr + size <= r->addr + r->size)
			return r;
	}
	return NULL;
}

FAKE_FN struct fake_map *fake_map_overlapping(uintptr_t addr, size_t size)
{
	for (int i = 0; i < fake.n_maps; i++) {
		struct fake_map *m = &fake.maps[i];
		if (m->live && addr < m->addr + m->size &&
		    m->addr < addr + size)
			return m;
	}
	return NULL;
}

FAKE_FN int fake_live_handles(void)
{
	int n = 0;
	for (int i = 0; i < fake.n_handles; i++)
		n += fake.handles[i].live;
	return n;
}

/* The stand-in's own fds (a memfd per referenced allocation). */
FAKE_FN int fake_own_fds(void)
{
	int n = 0;
	for (int i = 0; i < fake.n_allocs; i++)
		n += fake.allocs[i].fd >= 0;
	return n;
}

FAKE_FN int fake_live_maps(void)
{
	int n = 0;
	for (int i = 0; i < fake.n_maps; i++)
		n += fake.maps[i].live;
	return n;
}

FAKE_FN int fake_live_res(void)
{
	int n = 0;
	for (int i = 0; i < fake.n_res; i++)
		n += fake.res[i].live;
	return n;
}

/* Bytes reserved in live reservations inside [addr, addr + size). */
FAKE_FN size_t fake_reserved_in(uintptr_t addr, size_t size)
{
	size_t n = 0;
	for (int i = 0; i < fake.n_res; i++) {
		struct fake_res *r = &fake.res[i];
		if (r->live && r->addr >= addr &&
		    r->addr + r->size <= addr + size)
			n += r->size;
	}
	return n;
}

/* Another allocator of this process takes [addr, addr + size). */
FAKE_FN void fake_steal(uintptr_t addr, size_t size)
{
	void *p = mmap((void *)addr, size, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE |
			       MAP_FIXED_NOREPLACE,
		       -1, 0);
	if (p != (void *)addr)
		TEST_FAIL("fake_steal: %#lx is not free", (unsigned long)addr);
	fake.stolen[fake.n_stolen] = addr;
	fake.stolen_size[fake.n_stolen++] = size;
}

/* The other allocator lets go. */
FAKE_FN void fake_unsteal(void)
{
	while (fake.n_stolen > 0) {
		fake.n_stolen--;
		munmap((void *)fake.stolen[fake.n_stolen],
		       fake.stolen_size[fake.n_stolen]);
	}
}

/* ---- entry points ------------------------------------------------------- */

static hipError_t fake_hipInit(unsigned int flags)
{
	hipError_t e = fake_begin("hipInit", "%u", flags);
	if (e)
		return e;
	if (fake.init_error)
		return fake_ret(fake.init_error);
	fake.inited = 1;
	return hipSuccess;
}

static hipError_t fake_hipRuntimeGetVersion(int *v)
{
	hipError_t e = fake_begin("hipRuntimeGetVersion", "%s", "");
	if (e)
		return e;
	*v = fake.version;
	return hipSuccess;
}

static hipError_t fake_hipDriverGetVersion(int *v)
{
	hipError_t e = fake_begin("hipDriverGetVersion", "%s", "");
	if (e)
		return e;
	*v = fake.version;
	return hipSuccess;
}

static hipError_t fake_hipGetDeviceCount(int *n)
{
	hipError_t e = fake_begin("hipGetDeviceCount", "%s", "");
	if (e)
		return e;
	if (fake.n_devices == 0)
		return fake_ret(hipErrorNoDevice);
	*n = fake.n_devices;
	return hipSuccess;
}

static hipError_t fake_hipGetDevice(int *dev)
{
	hipError_t e = fake_quiet("hipGetDevice");
	if (e)
		return e;
	*dev = fake_cur_dev;
	return hipSuccess;
}

static hipError_t fake_hipSetDevice(int dev)
{
	hipError_t e = fake_quiet("hipSetDevice");
	if (e)
		return e;
	if (!fake_dev_ok(dev))
		return hipErrorInvalidDevice;
	fake_cur_dev = dev;
	return hipSuccess;
}

static hipError_t fake_hipDeviceGetName(char *name, int len, hipDevice_t dev)
{
	hipError_t e = fake_begin("hipDeviceGetName", "%d", dev);
	if (e)
		return e;
	if (!fake_dev_ok(dev))
		return fake_ret(hipErrorInvalidDevice);
	snprintf(name, (size_t)len, "Fake AMD Instinct %d", dev);
	return hipSuccess;
}

static hipError_t fake_hipDeviceGetUuid(hipUUID *uuid, hipDevice_t dev)
{
	hipError_t e = fake_begin("hipDeviceGetUuid", "%d", dev);
	if (e)
		return e;
	if (!fake_dev_ok(dev))
		return fake_ret(hipErrorInvalidDevice);
	/* ROCm fills 16 printable characters (rocminfo's "GPU-..." less
	 * its prefix). */
	char s[32];
	snprintf(s, sizeof(s), "%015x%x", 0xabcdef, (unsigned)dev & 0xf);
	memcpy(uuid->bytes, s, 16);
	return hipSuccess;
}

static hipError_t fake_hipDeviceGetPCIBusId(char *bus, int len, int dev)
{
	hipError_t e = fake_begin("hipDeviceGetPCIBusId", "%d", dev);
	if (e)
		return e;
	if (!fake_dev_ok(dev))
		return fake_ret(hipErrorInvalidDevice);
	snprintf(bus, (size_t)len, "0000:%02x:00.0", 0x10 + dev);
	return hipSuccess;
}

static hipError_t fake_hipDeviceTotalMem(size_t *bytes, hipDevice_t dev)
{
	hipError_t e = fake_begin("hipDeviceTotalMem", "%d", dev);
	if (e)
		return e;
	if (!fake_dev_ok(dev))
		return fake_ret(hipErrorInvalidDevice);
	*bytes = fake.total;
	return hipSuccess;
}

static hipError_t fake_hipMemGetInfo(size_t *free_b, size_t *total)
{
	hipError_t e = fake_begin("hipMemGetInfo", "dev%d", fake_cur_dev);
	if (e)
		return e;
	size_t used = fake.used[fake_cur_dev] + fake.other_used;
	*total = fake.total;
	*free_b = used < fake.total ? fake.total - used : 0;
	return hipSuccess;
}

static hipError_t fake_hipDeviceSynchronize(void)
{
	hipError_t e =
		fake_begin("hipDeviceSynchronize", "dev%d", fake_cur_dev);
	if (e)
		return e;
	fake.syncs++;
	return hipSuccess;
}

static hipError_t fake_hipMemGetAllocationGranularity(
	size_t *gran, const hipMemAllocationProp *prop, int option)
{
	hipError_t e = fake_begin("hipMemGetAllocationGranularity", "dev%d,%s",
				  fake_cur_dev, option ? "rec" : "min");
	if (e)
		return e;
	if (prop->type != hipMemAllocationTypePinned ||
	    prop->location.type != hipMemLocationTypeDevice ||
	    !fake_dev_ok(prop->location.id))
		return fake_ret(hipErrorInvalidValue);
	*gran = option == hipMemAllocationGranularityRecommended ?
			fake.gran :
			fake.min_gran;
	return hipSuccess;
}

static hipError_t fake_hipMemCreate(hipMemGenericAllocationHandle_t *h,
				    size_t size,
				    const hipMemAllocationProp *prop,
				    unsigned long long flags)
{
	int dev = fake_cur_dev;
	hipError_t e = fake_begin("hipMemCreate", "%#zx,dev%d", size, dev);
	if (e)
		return e;
	if (fake.no_vmm)
		return fake_ret(hipErrorNotSupported);
	if (flags || prop->type != hipMemAllocationTypePinned ||
	    prop->location.type != hipMemLocationTypeDevice || size == 0 ||
	    size % fake.min_gran)
		return fake_ret(hipErrorInvalidValue);
	if (prop->requestedHandleType != hipMemHandleTypePosixFileDescriptor)
		return fake_ret(hipErrorNotSupported);
	if (prop->location.id != dev)
		fake.wrong_device++;
	if (fake.used[dev] + fake.other_used + size > fake.total)
		return fake_ret(hipErrorOutOfMemory);
	if (fake.n_allocs == FAKE_MAX)
		abort();
	struct fake_alloc *a = &fake.allocs[fake.n_allocs];
	struct stat st;
	a->fd = memfd_create("fake-vram", MFD_CLOEXEC);
	if (a->fd < 0 || ftruncate(a->fd, (off_t)size) < 0 ||
	    fstat(a->fd, &st) < 0)
		abort();
	a->id = ++fake.n_allocs;
	a->st_dev = st.st_dev;
	a->ino = st.st_ino;
	a->size = size;
	a->dev = dev;
	*h = (hipMemGenericAllocationHandle_t)fake_handle_new(a);
	fake_result("h%d", fake.n_handles);
	return hipSuccess;
}

static hipError_t fake_hipMemRelease(hipMemGenericAllocationHandle_t h)
{
	struct fake_handle *fh = fake_handle_of(h);
	hipError_t e = fake_begin("hipMemRelease", "h%d", fh ? fh->id : 0);
	if (e)
		return e;
	if (!fh || !fh->live) {
		fake.bad_releases++;
		return fake_ret(hipErrorInvalidValue);
	}
	fh->live = 0;
	fh->a->refs--;
	fake_account(fh->a);
	return hipSuccess;
}

static hipError_t
fake_hipMemExportToShareableHandle(void *shareable,
				   hipMemGenericAllocationHandle_t h, int type,
				   unsigned long long flags)
{
	struct fake_handle *fh = fake_handle_of(h);
	hipError_t e = fake_begin("hipMemExportToShareableHandle", "h%d,%d",
				  fh ? fh->id : 0, type);
	if (e)
		return e;
	if (!fh || !fh->live || flags || !shareable)
		return fake_ret(hipErrorInvalidValue);
	if (type != hipMemHandleTypePosixFileDescriptor)
		return fake_ret(hipErrorInvalidValue);
	/* Not CLOEXEC: the caller must make it so. */
	int fd = fcntl(fh->a->fd, F_DUPFD, 3);
	if (fd < 0)
		return fake_ret(hipErrorOperatingSystem);
	*(int *)shareable = fd;
	return hipSuccess;
}

static hipError_t
fake_hipMemImportFromShareableHandle(hipMemGenericAllocationHandle_t *h,
				     void *os_handle, int type)
{
	int fd = (int)(uintptr_t)os_handle;
	struct stat st;
	struct fake_alloc *a = NULL;

	if (os_handle && fstat(fd, &st) == 0) {
		for (int i = 0; i < fake.n_allocs; i++)
			if (fake.allocs[i].ino == st.st_ino &&
			    fake.allocs[i].st_dev == st.st_dev)
				a = &fake.allocs[i];
	}
	hipError_t e =
		fake_begin("hipMemImportFromShareableHandle", "a%d,dev%d",
			   a ? a->id : fake.n_allocs + 1, fake_cur_dev);
	if (e)
		return e;
	/* ROCclr: "osHandle == nullptr" is an invalid value, so fd 0 is. */
	if (!os_handle || type != hipMemHandleTypePosixFileDescriptor)
		return fake_ret(hipErrorInvalidValue);
	if (fstat(fd, &st) < 0)
		return fake_ret(hipErrorInvalidValue);
	if (a && a->fd < 0) {
		a->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
		if (a->fd < 0)
			abort();
	}
	if (!a) {
		if (fake.n_allocs == FAKE_MAX)
			abort();
		a = &fake.allocs[fake.n_allocs];
		a->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
		if (a->fd < 0)
			abort();
		a->id = ++fake.n_allocs;
		a->st_dev = st.st_dev;
		a->ino = st.st_ino;
		a->size = (size_t)st.st_size;
		a->dev = fake_cur_dev;
	}
	*h = (hipMemGenericAllocationHandle_t)fake_handle_new(a);
	fake_result("h%d", fake.n_handles);
	return hipSuccess;
}

static hipError_t fake_hipMemAddressReserve(void **ptr, size_t size,
					    size_t align, void *addr,
					    unsigned long long flags)
{
	hipError_t e = fake_begin("hipMemAddressReserve", "%#zx,%#zx,%#lx",
				  size, align, (unsigned long)(uintptr_t)addr);
	if (e)
		return e;
	if (flags || size == 0 || size % fake.min_gran || (align & (align - 1)))
		return fake_ret(hipErrorInvalidValue);
	if (fake.n_res == FAKE_MAX)
		abort();
	int prot_flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
	void *p = MAP_FAILED;
	if (addr)
		p = mmap(addr, size, PROT_NONE,
			 prot_flags | MAP_FIXED_NOREPLACE, -1, 0);
	if (p == MAP_FAILED || (addr && p != addr)) {
		/* Not at the hint: anywhere else, aligned. */
		if (p != MAP_FAILED)
			munmap(p, size);
		size_t a = align > 4096 ? align : 4096;
		char *q = mmap(NULL, size + a, PROT_NONE, prot_flags, -1, 0);
		if (q == MAP_FAILED)
			return fake_ret(hipErrorOutOfMemory);
		uintptr_t start = ((uintptr_t)q + a - 1) & ~(uintptr_t)(a - 1);
		if (start > (uintptr_t)q)
			munmap(q, start - (uintptr_t)q);
		uintptr_t end = (uintptr_t)q + size + a;
		if (end > start + size)
			munmap((void *)(start + size), end - (start + size));
		p = (void *)start;
	}
	struct fake_res *r = &fake.res[fake.n_res];
	r->id = ++fake.n_res;
	r->addr = (uintptr_t)p;
	r->size = size;
	r->live = 1;
	*ptr = p;
	fake_result("%#lx", (unsigned long)r->addr);
	return hipSuccess;
}

static hipError_t fake_hipMemAddressFree(void *ptr, size_t size)
{
	hipError_t e = fake_begin("hipMemAddressFree", "%#lx,%#zx",
				  (unsigned long)(uintptr_t)ptr, size);
	if (e)
		return e;
	struct fake_res *r = fake_res_at((uintptr_t)ptr);
	if (!r)
		return fake_ret(hipErrorInvalidValue);
	if (fake_map_overlapping(r->addr, r->size))
		return fake_ret(
			hipErrorInvalidValue); /* ROCr: resource still in use */
	munmap((void *)r->addr, r->size);
	r->live = 0;
	if (fake.steal_next_free > 0 && --fake.steal_next_free == 0)
		fake_steal(r->addr, r->size);
	for (int i = 0; i < fake.n_allocs; i++) {
		struct fake_alloc *a = &fake.allocs[i];
		if (a->pinned_by == r->id) {
			a->pinned_by = 0;
			fake_account(a);
		}
	}
	return hipSuccess;
}

static hipError_t fake_hipMemMap(void *ptr, size_t size, size_t offset,
				 hipMemGenericAllocationHandle_t h,
				 unsigned long long flags)
{
	struct fake_handle *fh = fake_handle_of(h);
	hipError_t e = fake_begin("hipMemMap", "%#lx,%#zx,h%d",
				  (unsigned long)(uintptr_t)ptr, size,
				  fh ? fh->id : 0);
	if (e)
		return e;
	uintptr_t addr = (uintptr_t)ptr;
	if (!fh || !fh->live || offset || flags || size == 0 ||
	    size > fh->a->size || size % fake.min_gran)
		return fake_ret(hipErrorInvalidValue);
	if (!fake_res_holding(addr, size) || fake_map_overlapping(addr, size))
		return fake_ret(hipErrorInvalidValue);
	if (fake.n_maps == FAKE_MAX)
		abort();
	void *p = mmap(ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, fh->a->fd,
		       0);
	if (p != ptr)
		return fake_ret(hipErrorMapFailed);
	struct fake_map *m = &fake.maps[fake.n_maps++];
	m->addr = addr;
	m->size = size;
	m->h = fh;
	m->live = 1;
	fh->a->refs++;
	fake_account(fh->a);
	return hipSuccess;
}

static hipError_t fake_hipMemUnmap(void *ptr, size_t size)
{
	hipError_t e = fake_begin("hipMemUnmap", "%#lx,%#zx",
				  (unsigned long)(uintptr_t)ptr, size);
	if (e)
		return e;
	struct fake_map *m = fake_map_overlapping((uintptr_t)ptr, size);
	if (!m || m->addr != (uintptr_t)ptr || m->size != size)
		return fake_ret(hipErrorInvalidValue);
	mmap(ptr, size, PROT_NONE,
	     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
	m->live = 0;
	struct fake_alloc *a = m->h->a;
	a->refs--;
	if (fake.rocm_quirk)
		a->pinned_by = fake_res_holding(m->addr, m->size)->id;
	fake_account(a);
	return hipSuccess;
}

static hipError_t fake_hipMemSetAccess(void *ptr, size_t size,
				       const hipMemAccessDesc *desc,
				       size_t count)
{
	hipError_t e = fake_begin(
		"hipMemSetAccess", "%#lx,%#zx,dev%d,%s",
		(unsigned long)(uintptr_t)ptr, size,
		count ? desc[0].location.id : -1,
		count && desc[0].flags == hipMemAccessFlagsProtRead ? "ro" :
		count && desc[0].flags == hipMemAccessFlagsProtReadWrite ?
								      "rw" :
								      "?");
	if (e)
		return e;
	struct fake_map *m = fake_map_overlapping((uintptr_t)ptr, size);
	if (count != 1 || !m || m->addr != (uintptr_t)ptr || m->size != size ||
	    desc[0].location.type != hipMemLocationTypeDevice ||
	    !fake_dev_ok(desc[0].location.id))
		return fake_ret(hipErrorInvalidValue);
	if (desc[0].flags == hipMemAccessFlagsProtRead) {
		if (fake.no_readonly)
			return fake_ret(hipErrorNotSupported);
		mprotect(ptr, size, PROT_READ);
	} else if (desc[0].flags == hipMemAccessFlagsProtReadWrite) {
		mprotect(ptr, size, PROT_READ | PROT_WRITE);
	} else {
		return fake_ret(hipErrorInvalidValue);
	}
	return hipSuccess;
}

static hipError_t fake_hipStreamCreateWithFlags(hipStream_t *s,
						unsigned int flags)
{
	hipError_t e = fake_begin("hipStreamCreateWithFlags", "dev%d,%u",
				  fake_cur_dev, flags);
	if (e)
		return e;
	if (fake.n_streams == FAKE_MAX)
		abort();
	struct fake_stream *st = &fake.streams[fake.n_streams++];
	st->dev = fake_cur_dev;
	st->live = 1;
	*s = (hipStream_t)st;
	return hipSuccess;
}

static hipError_t fake_hipStreamDestroy(hipStream_t s)
{
	hipError_t e = fake_begin("hipStreamDestroy", "%s", "");
	if (e)
		return e;
	struct fake_stream *st = (struct fake_stream *)s;
	if (!st || !st->live)
		return fake_ret(hipErrorInvalidHandle);
	st->live = 0;
	return hipSuccess;
}

static hipError_t fake_hipStreamSynchronize(hipStream_t s)
{
	hipError_t e = fake_begin("hipStreamSynchronize", "%s", "");
	if (e)
		return e;
	struct fake_stream *st = (struct fake_stream *)s;
	if (!st || !st->live)
		return fake_ret(hipErrorInvalidHandle);
	fake.stream_syncs++;
	return hipSuccess;
}

static hipError_t fake_hipMemcpyAsync(void *dst, const void *src, size_t len,
				      int kind, hipStream_t s)
{
	hipError_t e = fake_begin("hipMemcpyAsync", "%s,%#zx",
				  kind == hipMemcpyDeviceToHost ? "d2h" :
				  kind == hipMemcpyHostToDevice ? "h2d" :
								  "?",
				  len);
	if (e)
		return e;
	struct fake_stream *st = (struct fake_stream *)s;
	if (!st || !st->live || st->dev != fake_cur_dev ||
	    (kind != hipMemcpyDeviceToHost && kind != hipMemcpyHostToDevice))
		return fake_ret(hipErrorInvalidValue);
	memcpy(dst, src, len);
	fake.copies++;
	return hipSuccess;
}

static hipError_t fake_hipHostRegister(void *p, size_t len, unsigned int flags)
{
	hipError_t e = fake_begin("hipHostRegister", "%#zx,%u", len, flags);
	if (e)
		return e;
	for (int i = 0; i < fake.n_registered; i++)
		if (fake.registered[i] == p)
			return fake_ret(hipErrorHostMemoryAlreadyRegistered);
	fake.registered[fake.n_registered++] = p;
	return hipSuccess;
}

static hipError_t fake_hipHostUnregister(void *p)
{
	hipError_t e = fake_begin("hipHostUnregister", "%s", "");
	if (e)
		return e;
	for (int i = 0; i < fake.n_registered; i++) {
		if (fake.registered[i] == p) {
			fake.registered[i] =
				fake.registered[--fake.n_registered];
			return hipSuccess;
		}
	}
	return fake_ret(hipErrorHostMemoryNotRegistered);
}

static const char *fake_hipGetErrorName(hipError_t e)
{
	switch (e) {
	case hipErrorInvalidValue:
		return "hipErrorInvalidValue";
	case hipErrorOutOfMemory:
		return "hipErrorOutOfMemory";
	case hipErrorNotSupported:
		return "hipErrorNotSupported";
	case hipErrorNoDevice:
		return "hipErrorNoDevice";
	default:
		return "hipErrorUnknown";
	}
}

static const char *fake_hipGetErrorString(hipError_t e)
{
	return e == hipErrorOutOfMemory ? "out of memory" : "fake error";
}

/* The table to hand to the code under test. */
FAKE_FN struct hip_api fake_hip_api(void)
{
	struct hip_api a;

	memset(&a, 0, sizeof(a));
#define FAKE_SET_(member, params) a.member = fake_##member;
	HIP_API_SYMBOLS(FAKE_SET_)
#undef FAKE_SET_
	a.hipGetErrorName = fake_hipGetErrorName;
	a.hipGetErrorString = fake_hipGetErrorString;
	return a;
}

/* A memfd of size bytes, as the daemon sends chunks. */
FAKE_FN int fake_chunk_fd(size_t size)
{
	int fd = memfd_create("chunk", MFD_CLOEXEC);
	ASSERT(fd >= 0);
	ASSERT_OK(ftruncate(fd, (off_t)size));
	return fd;
}

#endif
