/* SPDX-License-Identifier: Apache-2.0 */
/* A stand-in for libcuda.so.1, so that the CUDA backend's logic (loading,
 * error paths, fd handling, contexts pushed and popped, copies cut into
 * pieces) is tested on machines without a GPU. tests/unit/cuda_fake.h
 * compiles it into a shared library at test time and points VRAM_LIBCUDA
 * at it; it is not part of any build.
 *
 * Device memory is a memfd per allocation, a reserved range is a PROT_NONE
 * mapping, mapping is mmap(MAP_FIXED) of the memfd into it, and copies are
 * memcpy, as in the host backend (an async one runs only once its stream
 * is waited for: pending_queue). Tests read counters with fake_count()
 * and make the next call to a function fail with fake_fail().
 *
 * The device is shared by every process that loads the fake, as a GPU is:
 * its used memory is the sum of the live "fake-gpu" memfds in any process
 * (found in /proc/PID/fd and /proc/PID/maps; the size is in the name), and
 * its capacity FAKE_CUDA_CAPACITY_MB (default 1024). So the GPU tests
 * (tests/gpu) also run against it, daemon and children included:
 *   VRAM_LIBCUDA=/path/libcuda.so.1 make test-gpu
 *
 * Devices: the node has FAKE_CUDA_DEVICES of them (default 1); physical
 * device N has UUID bytes 16N..16N+15. A process sees the subset that
 * CUDA_VISIBLE_DEVICES names, renumbered from 0, as with the real driver
 * (see visible_physical()), so a test can give the daemon every device and
 * a worker one of them.
 *
 * Freeing memory takes time on a real GPU (0.45-0.8 ms per GiB on the
 * H200), paid by whoever drops the last reference: the last mapper's
 * unmap, or vramd's release of a chunk (its creating handle's release,
 * then its fd's close). A handle here holds its memfd open, so it costs the process
 * an fd, where the driver's costs none. A process that preloads the fake
 * (LD_PRELOAD, besides VRAM_LIBCUDA) has its close() go through the fake,
 * cuMemRelease's included, which then charges
 * FAKE_CUDA_RELEASE_US_PER_GIB for such a last close,
 * and with FAKE_CUDA_RELEASE_HOLD=FIFO first waits for one byte on that
 * fifo: a test holds a release for as long as it likes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

#define OK 0
#define INVALID_VALUE 1
#define OUT_OF_MEMORY 2
#define INVALID_CONTEXT 201
#define ILLEGAL_ADDRESS 700
#define HOST_NOT_REGISTERED 713
#define NOT_SUPPORTED 801

/* cuda.h's CUmemAllocationProp, as far as the fake reads it. */
struct fake_alloc_prop {
	int type, requested_handle_types;
	struct {
		int type, id;
	} location;
	void *win32_metadata;
	struct {
		unsigned char compression_type, gpu_direct_rdma_capable;
		unsigned short usage;
		unsigned char reserved[4];
	} alloc_flags;
};

struct handle {
	int fd;
	size_t size;
};

struct access_desc {
	int loc_type, loc_id;
	int flags;
};

/* Ranges mapped read-only: device writes there fail as a GPU fault would. */
#define MAX_RO 256
static struct {
	uintptr_t start, end;
} ro_ranges[MAX_RO];

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int ctx_depth;
static int handles, mapped, retained, streams, registered, copies, syncs,
	ctx_syncs, creates, readonly_maps, rdma_creates, busy_unmaps;
/* This thread's stream-capture mode, and what it was at the last cuMemMap
 * of any thread; the device of the last cuMemSetAccess. */
static __thread int capture_mode;
static int map_capture_mode = -1, access_device = -1;
static void *capturing_stream; /* the stream that "captures a graph" */
static char fail_fn[64];
static int fail_code;
static int fail_skip; /* calls of fail_fn that still succeed first */

int fake_count(const char *what);
void fake_fail(const char *fn, int code);
void fake_fail_after(const char *fn, int code, int skip);
void fake_set_capturing(void *stream);
static void capture_note_map(void);

int fake_count(const char *what)
{
	static const struct {
		const char *name;
		int *v;
	} counters[] = {
		{ "handles", &handles },
		{ "mapped", &mapped },
		{ "retained", &retained },
		{ "streams", &streams },
		{ "registered", &registered },
		{ "copies", &copies },
		{ "syncs", &syncs },
		{ "ctx_syncs", &ctx_syncs },
		{ "creates", &creates },
		{ "rdma_creates", &rdma_creates },
		{ "readonly_maps", &readonly_maps },
		{ "map_capture_mode", &map_capture_mode },
		{ "access_device", &access_device },
		{ "busy_unmaps", &busy_unmaps },
	};
	if (strcmp(what, "ctx_depth") == 0)
		return ctx_depth;
	if (strcmp(what, "capture_mode") == 0)
		return capture_mode;
	for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++)
		if (strcmp(what, counters[i].name) == 0) {
			pthread_mutex_lock(&lock);
			int v = *counters[i].v;
			pthread_mutex_unlock(&lock);
			return v;
		}
	return -1;
}

/* The call of fn after the next skip ones returns code (once). */
void fake_fail_after(const char *fn, int code, int skip)
{
	pthread_mutex_lock(&lock);
	snprintf(fail_fn, sizeof(fail_fn), "%s", fn);
	fail_code = code;
	fail_skip = skip;
	pthread_mutex_unlock(&lock);
}

/* The next call of fn returns code (once). */
void fake_fail(const char *fn, int code)
{
	fake_fail_after(fn, code, 0);
}

static int failing(const char *fn)
{
	int code = 0;
	pthread_mutex_lock(&lock);
	if (strcmp(fail_fn, fn) == 0 && fail_skip > 0) {
		fail_skip--;
	} else if (strcmp(fail_fn, fn) == 0) {
		code = fail_code;
		fail_fn[0] = 0;
	}
	pthread_mutex_unlock(&lock);
	return code;
}

static void bump(int *counter, int by)
{
	pthread_mutex_lock(&lock);
	*counter += by;
	pthread_mutex_unlock(&lock);
}

/* An async copy runs when its stream (or the context) is synchronized or
 * destroyed: the latest a device may run it, so a caller that reads or
 * unmaps the memory before it waits sees what the device would not have
 * written yet. An unmap over a copy still queued drops it and counts in
 * "busy_unmaps", where the device would fault. */
struct pending_copy {
	void *stream;
	char *dst;
	const char *src;
	size_t len;
	uintptr_t dev; /* the device side, for unmaps */
	struct pending_copy *next;
};
static struct pending_copy *pending;

static int pending_queue(void *stream, void *dst, const void *src, size_t len,
			 uintptr_t dev)
{
	struct pending_copy *c = malloc(sizeof(*c)), **at;

	if (!c)
		return OUT_OF_MEMORY;
	*c = (struct pending_copy){ stream, dst, src, len, dev, NULL };
	pthread_mutex_lock(&lock);
	for (at = &pending; *at; at = &(*at)->next)
		;
	*at = c;
	pthread_mutex_unlock(&lock);
	return OK;
}

/* Runs (in order) the copies queued on stream, or every one (NULL). */
static void pending_run(void *stream)
{
	pthread_mutex_lock(&lock);
	for (struct pending_copy **at = &pending; *at;) {
		struct pending_copy *c = *at;
		if (stream && c->stream != stream) {
			at = &c->next;
			continue;
		}
		memcpy(c->dst, c->src, c->len);
		*at = c->next;
		free(c);
	}
	pthread_mutex_unlock(&lock);
}

/* Drops the copies queued into or out of [ptr, ptr + size). */
static void pending_drop(uintptr_t ptr, size_t size)
{
	pthread_mutex_lock(&lock);
	for (struct pending_copy **at = &pending; *at;) {
		struct pending_copy *c = *at;
		if (c->dev < ptr + size && ptr < c->dev + c->len) {
			busy_unmaps++;
			*at = c->next;
			free(c);
		} else {
			at = &c->next;
		}
	}
	pthread_mutex_unlock(&lock);
}

static int env_int(const char *name, int def)
{
	const char *s = getenv(name);
	return s && *s ? atoi(s) : def;
}

/* ---- devices this process sees ------------------------------------------- */

/* The physical device behind this process's ordinal, or -1. Like the real
 * driver, CUDA_VISIBLE_DEVICES lists physical indices in the order the
 * process numbers them, and the list ends at the first entry that is not
 * a device (unset: every device, in order). */
static int visible_physical(int ordinal)
{
	const char *list = getenv("CUDA_VISIBLE_DEVICES");
	int n = env_int("FAKE_CUDA_DEVICES", 1);

	if (ordinal < 0)
		return -1;
	if (!list)
		return ordinal < n ? ordinal : -1;
	for (int i = 0; *list; i++) {
		char *end;
		long phys = strtol(list, &end, 10);
		if (end == list || phys < 0 || phys >= n ||
		    (*end && *end != ','))
			return -1;
		if (i == ordinal)
			return (int)phys;
		list = *end ? end + 1 : end;
	}
	return -1;
}

static int visible_count(void)
{
	int n = 0;
	while (visible_physical(n) >= 0)
		n++;
	return n;
}

/* Makes cuStreamIsCapturing report stream as capturing a graph (NULL:
 * none). */
void fake_set_capturing(void *stream)
{
	pthread_mutex_lock(&lock);
	capturing_stream = stream;
	pthread_mutex_unlock(&lock);
}

#define FAIL_POINT(fn)                   \
	do {                             \
		int code_ = failing(fn); \
		if (code_)               \
			return code_;    \
	} while (0)

#define NEED_CONTEXT()                          \
	do {                                    \
		if (ctx_depth == 0)             \
			return INVALID_CONTEXT; \
	} while (0)

/* ---- the shared device ------------------------------------------------------ */

static uint64_t capacity(void)
{
	return (uint64_t)env_int("FAKE_CUDA_CAPACITY_MB", 1024) << 20;
}

/* Device memory is a memfd named fake-gpu:SIZE, sparse until written. */
static int device_memfd(size_t size)
{
	char name[64];
	snprintf(name, sizeof(name), "fake-gpu:%zu", size);
	int fd = memfd_create(name, MFD_CLOEXEC);
	if (fd >= 0 && ftruncate(fd, (off_t)size) < 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

#define MAX_SEEN 8192
struct seen {
	unsigned long inode[MAX_SEEN];
	int n;
	uint64_t bytes;
};

static void seen_add(struct seen *s, unsigned long inode, const char *name)
{
	const char *p = strstr(name, "memfd:fake-gpu:");
	if (!p)
		return;
	for (int i = 0; i < s->n; i++)
		if (s->inode[i] == inode)
			return;
	if (s->n < MAX_SEEN)
		s->inode[s->n++] = inode;
	s->bytes += strtoull(p + strlen("memfd:fake-gpu:"), NULL, 10);
}

/* Bytes of device memory alive in any process. */
static uint64_t device_used(void)
{
	static struct seen s;
	DIR *proc = opendir("/proc");
	struct dirent *e;
	char path[600], target[512], line[1024];

	s.n = 0;
	s.bytes = 0;
	if (!proc)
		return 0;
	while ((e = readdir(proc))) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/fd", e->d_name);
		DIR *fds = opendir(path);
		struct dirent *f;
		while (fds && (f = readdir(fds))) {
			struct stat st;
			snprintf(path, sizeof(path), "/proc/%s/fd/%s",
				 e->d_name, f->d_name);
			ssize_t n = readlink(path, target, sizeof(target) - 1);
			if (n <= 0)
				continue;
			target[n] = 0;
			if (strstr(target, "memfd:fake-gpu:") &&
			    stat(path, &st) == 0)
				seen_add(&s, (unsigned long)st.st_ino, target);
		}
		if (fds)
			closedir(fds);
		snprintf(path, sizeof(path), "/proc/%s/maps", e->d_name);
		FILE *maps = fopen(path, "re");
		while (maps && fgets(line, sizeof(line), maps)) {
			unsigned long inode = 0;
			if (!strstr(line, "memfd:fake-gpu:"))
				continue;
			if (sscanf(line, "%*s %*s %*s %*s %lu", &inode) == 1)
				seen_add(&s, inode, line);
		}
		if (maps)
			fclose(maps);
	}
	closedir(proc);
	return s.bytes;
}

static int ro_hit(uintptr_t start, size_t len)
{
	int hit = 0;
	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_RO; i++)
		if (ro_ranges[i].end > start &&
		    ro_ranges[i].start < start + len)
			hit = 1;
	pthread_mutex_unlock(&lock);
	return hit;
}

static void ro_set(uintptr_t start, size_t len, int readonly)
{
	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_RO; i++) {
		if (!readonly && ro_ranges[i].start == start)
			ro_ranges[i].start = ro_ranges[i].end = 0;
		else if (readonly && ro_ranges[i].end == 0) {
			ro_ranges[i].start = start;
			ro_ranges[i].end = start + len;
			break;
		}
	}
	pthread_mutex_unlock(&lock);
}

/* ---- the cost of freeing ---------------------------------------------------- */

/* The inode of a fake-gpu memfd behind fd, or 0. */
static unsigned long device_inode(const char *fd_path)
{
	char target[256];
	struct stat st;
	ssize_t n = readlink(fd_path, target, sizeof(target) - 1);

	if (n <= 0)
		return 0;
	target[n] = 0;
	if (!strstr(target, "memfd:fake-gpu:") || stat(fd_path, &st) < 0)
		return 0;
	return (unsigned long)st.st_ino;
}

/* Does any fd or mapping of inode exist, in any process, but this
 * process's fd self_fd? (Then closing self_fd frees nothing.) */
static int inode_held_elsewhere(unsigned long inode, int self_fd)
{
	DIR *proc = opendir("/proc");
	struct dirent *e;
	char path[600], line[1024], self[32];
	int held = 0;

	if (!proc)
		return 1;
	snprintf(self, sizeof(self), "%d", (int)getpid());
	while (!held && (e = readdir(proc))) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		int is_self = strcmp(e->d_name, self) == 0;
		snprintf(path, sizeof(path), "/proc/%s/fd", e->d_name);
		DIR *fds = opendir(path);
		struct dirent *f;
		while (!held && fds && (f = readdir(fds))) {
			if (f->d_name[0] == '.' ||
			    (is_self && atoi(f->d_name) == self_fd))
				continue;
			snprintf(path, sizeof(path), "/proc/%s/fd/%s",
				 e->d_name, f->d_name);
			held = device_inode(path) == inode;
		}
		if (fds)
			closedir(fds);
		snprintf(path, sizeof(path), "/proc/%s/maps", e->d_name);
		FILE *maps = held ? NULL : fopen(path, "re");
		while (maps && fgets(line, sizeof(line), maps)) {
			unsigned long ino = 0;
			if (strstr(line, "memfd:fake-gpu:") &&
			    sscanf(line, "%*s %*s %*s %*s %lu", &ino) == 1 &&
			    ino == inode)
				held = 1;
		}
		if (maps)
			fclose(maps);
	}
	closedir(proc);
	return held;
}

/* Waits for a byte on the fifo at path (a test's hold on a release). */
static void release_hold(const char *path)
{
	char c;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	while (read(fd, &c, 1) < 0 && errno == EINTR)
		;
	syscall(SYS_close, fd);
}

/* close() for a process that preloads the fake: the last close of device
 * memory is the driver's free and costs what the environment says. */
int close(int fd)
{
	const char *hold = getenv("FAKE_CUDA_RELEASE_HOLD");
	int us_per_gib = env_int("FAKE_CUDA_RELEASE_US_PER_GIB", 0);

	if ((hold && *hold) || us_per_gib > 0) {
		char path[64], target[256];
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		unsigned long inode = device_inode(path);
		ssize_t n = inode ? readlink(path, target, sizeof(target) - 1) : -1;
		if (n > 0 && !inode_held_elsewhere(inode, fd)) {
			target[n] = 0;
			const char *sz = strstr(target, "memfd:fake-gpu:");
			uint64_t size = strtoull(sz + strlen("memfd:fake-gpu:"),
						 NULL, 10);
			if (hold && *hold)
				release_hold(hold);
			if (us_per_gib > 0)
				usleep((useconds_t)(size * (uint64_t)us_per_gib >> 30));
		}
	}
	return (int)syscall(SYS_close, fd);
}

/* ---- the driver API ------------------------------------------------------- */

CUresult cuInit(unsigned flags)
{
	return env_int("FAKE_CUDA_INIT_ERROR", 0);
}

CUresult cuDriverGetVersion(int *v)
{
	*v = 13000;
	return OK;
}

CUresult cuGetErrorString(CUresult e, const char **s)
{
	*s = e == OUT_OF_MEMORY ? "out of memory" : "fake failure";
	return OK;
}

CUresult cuGetErrorName(CUresult e, const char **s)
{
	*s = e == OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY" :
				  "CUDA_ERROR_FAKE";
	return OK;
}

CUresult cuDeviceGetCount(int *n)
{
	*n = visible_count();
	return OK;
}

CUresult cuDeviceGet(int *dev, int ordinal)
{
	if (visible_physical(ordinal) < 0)
		return 101;
	*dev = ordinal;
	return OK;
}

CUresult cuDeviceGetName(char *name, int len, int dev)
{
	snprintf(name, (size_t)len, "Fake GPU %d", dev);
	return OK;
}

CUresult cuDeviceGetUuid_v2(unsigned char *uuid, int dev)
{
	int phys = visible_physical(dev);

	if (phys < 0)
		return 101;
	for (int i = 0; i < 16; i++)
		uuid[i] = (unsigned char)(i + 16 * phys);
	return OK;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev)
{
	*bytes = capacity();
	return OK;
}

/* 102: VMM, 110: GPUDirect RDMA with VMM (FAKE_CUDA_NO_RDMA=1: none;
 * FAKE_CUDA_RDMA_CLAIMED=1: claimed all the same). */
CUresult cuDeviceGetAttribute(int *v, int attr, int dev)
{
	*v = attr == 102 ? !env_int("FAKE_CUDA_NO_VMM", 0) :
	     attr == 110 ? !env_int("FAKE_CUDA_NO_RDMA", 0) ||
				   env_int("FAKE_CUDA_RDMA_CLAIMED", 0) :
			   1;
	return OK;
}

CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev)
{
	static int ctxs[16];
	*ctx = &ctxs[dev & 15];
	bump(&retained, 1);
	return OK;
}

CUresult cuDevicePrimaryCtxRelease_v2(int dev)
{
	bump(&retained, -1);
	return OK;
}

CUresult cuCtxPushCurrent_v2(void *ctx)
{
	FAIL_POINT("cuCtxPushCurrent");
	ctx_depth++;
	return OK;
}

CUresult cuCtxPopCurrent_v2(void **ctx)
{
	if (ctx_depth == 0)
		return INVALID_CONTEXT;
	ctx_depth--;
	return OK;
}

/* Setting replaces the top of this thread's stack (an empty one grows). */
CUresult cuCtxSetCurrent(void *ctx)
{
	if (ctx && ctx_depth == 0)
		ctx_depth = 1;
	else if (!ctx && ctx_depth > 0)
		ctx_depth--;
	return OK;
}

CUresult cuCtxSynchronize(void)
{
	NEED_CONTEXT();
	FAIL_POINT("cuCtxSynchronize");
	pending_run(NULL);
	bump(&ctx_syncs, 1);
	return OK;
}

CUresult cuMemGetInfo_v2(size_t *f, size_t *t)
{
	uint64_t used = device_used();
	*t = capacity();
	*f = used < *t ? *t - used : 0;
	return OK;
}

CUresult cuMemGetAllocationGranularity(size_t *g, const void *prop, int option)
{
	*g = 2u << 20;
	return OK;
}

static struct handle *handle_new(int fd, size_t size)
{
	struct handle *h = malloc(sizeof(*h));
	h->fd = fd;
	h->size = size;
	bump(&handles, 1);
	return h;
}

CUresult cuMemCreate(unsigned long long *out, size_t size, const void *prop,
		     unsigned long long flags)
{
	FAIL_POINT("cuMemCreate");
	/* The RDMA flag is the driver's to refuse on a device without it. */
	const struct fake_alloc_prop *p = prop;
	int rdma = p && p->alloc_flags.gpu_direct_rdma_capable;
	if (rdma && env_int("FAKE_CUDA_NO_RDMA", 0))
		return INVALID_VALUE;
	if (device_used() + size > capacity())
		return OUT_OF_MEMORY;
	int fd = device_memfd(size);
	if (fd < 0)
		return OUT_OF_MEMORY;
	*out = (uintptr_t)handle_new(fd, size);
	bump(&creates, 1);
	if (rdma)
		bump(&rdma_creates, 1);
	return OK;
}

CUresult cuMemRelease(unsigned long long hv)
{
	struct handle *h = (struct handle *)(uintptr_t)hv;
	close(h->fd);
	free(h);
	bump(&handles, -1);
	return OK;
}

CUresult cuMemExportToShareableHandle(void *out, unsigned long long hv,
				      int type, unsigned long long flags)
{
	struct handle *h = (struct handle *)(uintptr_t)hv;
	FAIL_POINT("cuMemExportToShareableHandle");
	if (type != 1)
		return INVALID_VALUE;
	/* Like the driver: not CLOEXEC; the backend must set it. */
	*(int *)out = dup(h->fd);
	return OK;
}

CUresult cuMemImportFromShareableHandle(unsigned long long *out, void *os,
					int type)
{
	int fd = (int)(intptr_t)os;
	struct stat st;
	FAIL_POINT("cuMemImportFromShareableHandle");
	if (type != 1 || fstat(fd, &st) < 0)
		return INVALID_VALUE;
	*out = (uintptr_t)handle_new(fcntl(fd, F_DUPFD_CLOEXEC, 0),
				     (size_t)st.st_size);
	return OK;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align,
			     CUdeviceptr addr, unsigned long long flags)
{
	FAIL_POINT("cuMemAddressReserve");
	if (align == 0)
		align = 2u << 20;
	char *p = mmap(NULL, size + align, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return OUT_OF_MEMORY;
	uintptr_t a = ((uintptr_t)p + align - 1) / align * align;
	if (a > (uintptr_t)p)
		munmap(p, a - (uintptr_t)p);
	if ((uintptr_t)p + size + align > a + size)
		munmap((void *)(a + size),
		       (uintptr_t)p + size + align - (a + size));
	*ptr = a;
	return OK;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	return munmap((void *)(uintptr_t)ptr, size) == 0 ? OK : INVALID_VALUE;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t off,
		  unsigned long long hv, unsigned long long flags)
{
	struct handle *h = (struct handle *)(uintptr_t)hv;
	FAIL_POINT("cuMemMap");
	/* The driver maps a handle from its start only ("offset: currently
	 * must be zero"): the H200 answered CUDA_ERROR_NOT_SUPPORTED. */
	if (off != 0)
		return NOT_SUPPORTED;
	if (size > h->size)
		return INVALID_VALUE;
	/* No access until cuMemSetAccess, as on a GPU. */
	if (mmap((void *)(uintptr_t)ptr, size, PROT_NONE,
		 MAP_SHARED | MAP_FIXED, h->fd, (off_t)off) == MAP_FAILED)
		return INVALID_VALUE;
	bump(&mapped, 1);
	capture_note_map();
	return OK;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	FAIL_POINT("cuMemUnmap");
	pending_drop((uintptr_t)ptr, size);
	ro_set((uintptr_t)ptr, size, 0);
	if (mmap((void *)(uintptr_t)ptr, size, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
		 0) == MAP_FAILED)
		return INVALID_VALUE;
	bump(&mapped, -1);
	return OK;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size,
			const struct access_desc *desc, size_t count)
{
	FAIL_POINT("cuMemSetAccess");
	if (count != 1 || desc->loc_type != 1)
		return INVALID_VALUE;
	if (desc->flags == 1 && env_int("FAKE_CUDA_NO_READONLY", 0))
		return INVALID_VALUE;
	if (desc->flags == 1)
		bump(&readonly_maps, 1);
	pthread_mutex_lock(&lock);
	access_device = desc->loc_id;
	pthread_mutex_unlock(&lock);
	/* Host-side writes (the fake's copies) stay possible; device-side
	 * writes into read-only ranges fail in the copy and memset calls. */
	ro_set((uintptr_t)ptr, size, desc->flags == 1);
	return mprotect((void *)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE) ==
			       0 ?
		       OK :
		       INVALID_VALUE;
}

CUresult cuStreamCreate(void **s, unsigned flags)
{
	static int ids;
	NEED_CONTEXT();
	FAIL_POINT("cuStreamCreate");
	pthread_mutex_lock(&lock);
	*s = (void *)(intptr_t)++ids;
	streams++;
	pthread_mutex_unlock(&lock);
	return OK;
}

CUresult cuStreamDestroy_v2(void *s)
{
	NEED_CONTEXT();
	pending_run(s);
	bump(&streams, -1);
	return OK;
}

CUresult cuStreamSynchronize(void *s)
{
	NEED_CONTEXT();
	pending_run(s);
	bump(&syncs, 1);
	return OK;
}

/* An event holds the stream it was last recorded on; waiting for it runs
 * that stream's queued copies (all of them: the work queued after the
 * record may be done too, as on a GPU), every stream's for the NULL one. */
CUresult cuEventCreate(void **e, unsigned flags)
{
	*e = calloc(1, sizeof(void *));
	return *e ? OK : OUT_OF_MEMORY;
}

CUresult cuEventRecord(void *e, void *s)
{
	*(void **)e = s;
	return OK;
}

CUresult cuEventSynchronize(void *e)
{
	pending_run(*(void **)e);
	return OK;
}

CUresult cuEventDestroy_v2(void *e)
{
	free(e);
	return OK;
}

/* Host ranges registered: an async copy that touches one must lie
 * within it, as the driver refuses one that spans two registrations (or
 * runs past one) with CUDA_ERROR_INVALID_VALUE. */
#define MAX_REGS 1024
static struct {
	uintptr_t start, end;
} regs[MAX_REGS];

CUresult cuMemHostRegister_v2(void *p, size_t len, unsigned flags)
{
	NEED_CONTEXT();
	FAIL_POINT("cuMemHostRegister");
	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_REGS; i++)
		if (regs[i].end == 0) {
			regs[i].start = (uintptr_t)p;
			regs[i].end = (uintptr_t)p + len;
			break;
		}
	registered++;
	pthread_mutex_unlock(&lock);
	return OK;
}

CUresult cuMemHostUnregister(void *p)
{
	NEED_CONTEXT();
	pthread_mutex_lock(&lock);
	int found = registered > 0;
	for (int i = 0; i < MAX_REGS; i++)
		if (regs[i].end && regs[i].start == (uintptr_t)p)
			regs[i].start = regs[i].end = 0;
	if (found)
		registered--;
	pthread_mutex_unlock(&lock);
	return found ? OK : HOST_NOT_REGISTERED;
}

/* 0 when [p, p + len) is inside one registration or touches none. */
static int host_span_bad(const void *p, size_t len)
{
	uintptr_t a = (uintptr_t)p, b = a + len;
	int bad = 0;

	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_REGS && !bad; i++)
		if (regs[i].end && a < regs[i].end && regs[i].start < b)
			bad = a < regs[i].start || b > regs[i].end;
	pthread_mutex_unlock(&lock);
	return bad;
}

CUresult cuMemAllocHost_v2(void **p, size_t len)
{
	*p = malloc(len);
	return *p ? OK : OUT_OF_MEMORY;
}

CUresult cuMemFreeHost(void *p)
{
	free(p);
	return OK;
}

/* Device memory of this process: a mapped fake-gpu memfd. The size sits
 * in the page before the pointer. */
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t len)
{
	size_t page = 4096, total = page + (len + page - 1) / page * page;
	if (device_used() + len > capacity())
		return OUT_OF_MEMORY;
	int fd = device_memfd(total);
	if (fd < 0)
		return OUT_OF_MEMORY;
	char *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return OUT_OF_MEMORY;
	*(size_t *)m = total;
	*p = (uintptr_t)(m + page);
	return OK;
}

CUresult cuMemFree_v2(CUdeviceptr p)
{
	char *m = (char *)(uintptr_t)p - 4096;
	munmap(m, *(size_t *)m);
	return OK;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t len)
{
	if (ro_hit((uintptr_t)dst, len))
		return ILLEGAL_ADDRESS;
	memcpy((void *)(uintptr_t)dst, src, len);
	return OK;
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t len)
{
	memcpy(dst, (const void *)(uintptr_t)src, len);
	return OK;
}

CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n)
{
	if (ro_hit((uintptr_t)dst, n))
		return ILLEGAL_ADDRESS;
	memset((void *)(uintptr_t)dst, v, n);
	return OK;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t len,
			      void *s)
{
	NEED_CONTEXT();
	FAIL_POINT("cuMemcpyHtoDAsync");
	if (ro_hit((uintptr_t)dst, len))
		return ILLEGAL_ADDRESS;
	if (host_span_bad(src, len))
		return INVALID_VALUE;
	bump(&copies, 1);
	return pending_queue(s, (void *)(uintptr_t)dst, src, len,
			     (uintptr_t)dst);
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t len, void *s)
{
	NEED_CONTEXT();
	FAIL_POINT("cuMemcpyDtoHAsync");
	if (host_span_bad(dst, len))
		return INVALID_VALUE;
	bump(&copies, 1);
	return pending_queue(s, dst, (const void *)(uintptr_t)src, len,
			     (uintptr_t)src);
}

CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned v, size_t n)
{
	if (ro_hit((uintptr_t)dst, n * 4))
		return ILLEGAL_ADDRESS;
	unsigned *p = (unsigned *)(uintptr_t)dst;
	for (size_t i = 0; i < n; i++)
		p[i] = v;
	return OK;
}

/* ---- stream capture ------------------------------------------------------- */

/* What cuMemMap saw: a map during a graph capture is legal only in the
 * relaxed mode. */
static void capture_note_map(void)
{
	pthread_mutex_lock(&lock);
	map_capture_mode = capture_mode;
	pthread_mutex_unlock(&lock);
}

CUresult cuThreadExchangeStreamCaptureMode(int *mode)
{
	int old = capture_mode;
	capture_mode = *mode;
	*mode = old;
	return OK;
}

CUresult cuStreamIsCapturing(void *s, int *status)
{
	NEED_CONTEXT();
	pthread_mutex_lock(&lock);
	*status = s && s == capturing_stream; /* 1: ACTIVE */
	pthread_mutex_unlock(&lock);
	return OK;
}
