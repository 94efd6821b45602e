/* SPDX-License-Identifier: Apache-2.0 */
/* vram.h: the whole public API of libvram, the vramd client library.
 *
 * libvram connects to vramd, the per-node GPU memory broker, maps the
 * memory of pools the daemon owns into this process at fixed virtual
 * addresses, sub-allocates inside them, and pauses and resumes pools (its
 * own or, with permission, anyone's on the node).
 *
 * Conventions:
 * - Functions return 0 (or a count) on success and a negative errno on
 *   failure. vram_last_error() then holds a message for this thread.
 * - Handles are opaque. Closing NULL is a no-op; closing twice is a no-op;
 *   vram_client_close() may run before or after the pools it made are
 *   closed, and at exit (libvram closes what is left from an atexit handler
 *   and from its destructor, in a safe order).
 * - Nothing is printed unless a log handler is installed, or VRAM_LOG
 *   is set (below, vram_set_log_handler).
 * - No thread that outlives a call is started unless
 *   vram_client_start_thread() is called, but for one: a host backup
 *   given back on resume is unpinned and punched on a thread of its own
 *   (it ends when that is done). Saving a host backup that has no pages
 *   faults them in from short-lived threads within the call.
 * - Thread safety: a client and its pools may be used from several threads.
 * - fork(): a child cannot use the clients and pools it inherits (they are
 *   the parent's session): calls on them return -EPIPE, closing them is a
 *   no-op, and the child holds neither the connection nor pool memory.
 *   Connect again in the child.
 * - Structs grow at their end: every struct the caller allocates and passes
 *   in (vram_pool_options, vram_selector, vram_report, vram_stats) starts
 *   with uint32_t size, which the caller sets to sizeof the struct, best
 *   with its VRAM_*_INIT macro. libvram reads and writes only the bytes
 *   that size covers, so a program built against an older vram.h keeps
 *   working with a newer libvram, and the other way round: fields a
 *   library does not know are left as the caller set them (zero with the
 *   INIT macro). A size of 0 (a struct not initialised) or below the
 *   struct's first sized layout is refused with -EINVAL. Arrays libvram
 *   allocates (vram_list, vram_audit) are laid out with the entry size the
 *   caller passes, and each entry's size field says it. The structs nested
 *   in these (vram_mapper_info, vram_device_info) are fixed: what they may
 *   one day add comes as new fields of the struct that holds them.
 */
#ifndef VRAM_H
#define VRAM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h> /* ssize_t */

#ifdef __cplusplus
extern "C" {
#endif

#define VRAM_VERSION_MAJOR 0
#define VRAM_VERSION_MINOR 2
#define VRAM_VERSION_PATCH 0
#define VRAM_VERSION_STRING "0.2.0"
#define VRAM_VERSION_NUMBER \
	(VRAM_VERSION_MAJOR * 10000 + VRAM_VERSION_MINOR * 100 + VRAM_VERSION_PATCH)

/* The library's version string and number, which may differ from the
 * header's when a newer libvram.so runs under an older program. */
const char *vram_version(void);
int vram_version_number(void);

/* Default socket; the VRAM_SOCKET environment variable overrides it. */
#define VRAM_DEFAULT_SOCKET "/run/vramd/vramd.sock"

/* An initialiser for a sized struct: size set, every other field zero.
 * Designated in C, so that -Wextra's missing-field-initializers stays
 * quiet; in C++ (designated initialisers came in C++20) a lambda that
 * value-initialises one and sets its size. */
#ifdef __cplusplus
#define VRAM_SIZED_INIT_(type)           \
	([] {                            \
		type vram_t_{};          \
		vram_t_.size = sizeof(type); \
		return vram_t_;          \
	}())
#else
#define VRAM_SIZED_INIT_(type) { .size = sizeof(type) }
#endif

typedef struct vram_client vram_client;
typedef struct vram_pool vram_pool;

/* ---- logging ---------------------------------------------------------- */

enum vram_log_level {
	VRAM_LOG_ERROR = 0,
	VRAM_LOG_WARN = 1,
	VRAM_LOG_INFO = 2,
	VRAM_LOG_DEBUG = 3,
};

typedef void (*vram_log_fn)(enum vram_log_level level, const char *msg,
			    void *userdata);

/* Installs a process-wide log handler for messages up to max_level. NULL
 * removes it (the default: libvram prints nothing). The message string is
 * only valid during the call. The handler may run on any thread that is in
 * a libvram call, or on the event thread, with a client's lock held: it
 * must not call libvram functions, except these, which take no lock:
 * vram_last_error(), vram_set_log_handler() (to remove itself, say),
 * vram_version(), vram_version_number(), vram_state_name() and
 * vram_policy_name(). Any other call may deadlock.
 *
 * With no handler installed, the environment variable VRAM_LOG ("error",
 * "warn", "info" or "debug", read at the first message) prints messages
 * up to that level to stderr as "libvram: LEVEL: message": the debug
 * level has each pool's map, restore, give-back and save times. */
void vram_set_log_handler(vram_log_fn fn, enum vram_log_level max_level,
			  void *userdata);

/* The message of the last failed call on this thread ("" if none). Valid
 * until the next libvram call on this thread. */
const char *vram_last_error(void);

/* ---- connection --------------------------------------------------------- */

/* Connects to vramd. path: the socket, or NULL for $VRAM_SOCKET or
 * VRAM_DEFAULT_SOCKET. name: shown by vramctl (NULL: the program's name).
 * flags: 0, or VRAM_CONNECT_RECONNECT: when vramd restarts (its pools
 * kept in systemd's fd store, docs/operations.md) the client reconnects,
 * with a backoff of 20 ms doubling to 2 s, and opens its pools again
 * without remapping them; calls made while vramd is away fail at once
 * with -ENOTCONN. VRAM_CONNECT_WAIT: the same, but such calls wait for
 * the reconnection (60 s at most, then -ENOTCONN). On success *out is a client the caller owns until
 * vram_client_close(). Errors: -ENOENT/-ECONNREFUSED no daemon, -EPROTO
 * version mismatch, -EINVAL. */
#define VRAM_CONNECT_RECONNECT 0x1u
#define VRAM_CONNECT_WAIT 0x2u
/* VRAM_CONNECT_ADMIN: connect through the admin lane, the daemon's
 * second socket for root and its admin group, whose requests are served
 * ahead of a busy daemon's other clients (docs/security.md, "The admin
 * lane"): $VRAM_ADMIN_SOCKET, or the socket's path with ".admin"
 * appended. Where that socket is missing, refused or not ours to open
 * (ENOENT, ECONNREFUSED, EACCES), the client connects to the main socket
 * as without the flag. It gives priority, not rights. vramctl uses it. */
#define VRAM_CONNECT_ADMIN 0x4u
int vram_connect(const char *path, const char *name, unsigned flags,
		 vram_client **out);

/* Unmaps every pool this client still has open (their handles become
 * closed, see vram_pool_close), closes the connection and frees the client.
 * NULL and a second call are no-ops. Pools owned by this client are dropped
 * by the daemon unless created with VRAM_POOL_PERSIST. */
void vram_client_close(vram_client *c);

/* A no-op round trip to the daemon: 0 when it answers. For health checks
 * and for measuring the control path's latency. Errors: -EINVAL not an
 * open client, -EPIPE the connection is gone (or the client was inherited
 * through fork()). */
int vram_ping(vram_client *c);

/* Backend the daemon runs: "host", "cuda" or "hip". Owned by the client.
 * NULL (vram_last_error() set) if c is not an open client. */
const char *vram_client_backend(vram_client *c);

/* ---- events from the daemon ---------------------------------------------
 * A third party (an RL controller, vramctl) may pause or resume a pool this
 * process has mapped. The daemon then sends an event that libvram must
 * handle: it waits for GPU work, saves the backup, unmaps and acknowledges.
 * Events are handled during any libvram call that waits on the daemon, and
 * otherwise by one of:
 * - poll vram_client_fd() for POLLIN in the program's loop and call
 *   vram_client_dispatch(c, 0) when readable;
 * - or call vram_client_start_thread() once: a background thread does it.
 */

/* The connection's fd, for poll/epoll (POLLIN). Owned by the client: do
 * not read from it or close it. Errors: -EINVAL not an open client,
 * -EPIPE inherited through fork(). */
int vram_client_fd(vram_client *c);

/* Handles every event that has arrived, waiting up to timeout_ms (0: do not
 * wait, -1: forever) for the first one. Returns the number handled (0
 * when another thread holds the reader role, and so handles them) or
 * -errno: -EPIPE the daemon went away (pools keep their memory), -EINVAL
 * a timeout below -1 or not an open client. */
int vram_client_dispatch(vram_client *c, int timeout_ms);

/* Starts one background thread that handles events until the client is
 * closed. Returns 0, -EALREADY, -EPIPE the connection is gone, -EINVAL
 * not an open client, or -errno from pthread_create. */
int vram_client_start_thread(vram_client *c);

/* ---- pools -------------------------------------------------------------- */

enum vram_policy {
	VRAM_POLICY_DISCARD = 0, /* content dropped on pause (KV cache) */
	VRAM_POLICY_HOST = 1,    /* content kept in host memory (weights) */
	VRAM_POLICY_DISK = 2,    /* content kept in a file vramd owns in its
				  * backup_dir (vramd.conf); -ENOTSUP when the
				  * daemon has none */
};

enum vram_state {
	VRAM_STATE_INVALID = -1, /* vram_pool_state() on a closed or unknown
				  * handle; never a pool's state */
	VRAM_STATE_ACTIVE = 0,
	VRAM_STATE_PAUSING = 1,
	VRAM_STATE_PAUSED = 2,
	VRAM_STATE_RESUMING = 3,
};

/* Pool creation flags. */
#define VRAM_POOL_PERSIST 0x1u /* outlives its owner's session; re-open it */
/* Backup flags (host and disk policies). By default a backup keeps its
 * pages (registered with the driver) across cycles, so every pause writes
 * at the copy limit without allocating, and the backup stays readable
 * while the pool is active. RELEASE_BACKUP gives them back to the OS (or
 * the file system) once a resume has restored the pool and every mapper
 * maps it: host memory is free between cycles, and the next pause pays
 * for faulting and registering it again (torch_memory_saver's default).
 * RETAIN_BACKUP asks for the default explicitly; both together are
 * -EINVAL. */
#define VRAM_POOL_RETAIN_BACKUP 0x2u
#define VRAM_POOL_RELEASE_BACKUP 0x8u
/* The host backup is not registered (pinned) with the driver: copies run
 * from pageable memory, slower, and no host memory is pinned. A disk
 * backup is never registered. */
#define VRAM_POOL_PAGEABLE_BACKUP 0x4u

/* Open flags. */
#define VRAM_OPEN_READONLY 0x1u

struct vram_pool_options {
	uint32_t size;          /* sizeof(struct vram_pool_options) */
	const char *name;       /* unique on the node; required */
	const char *tag;        /* e.g. "weights", "kv_cache"; NULL: "default" */
	unsigned device;        /* device index */
	enum vram_policy policy;
	uint64_t reserve_bytes; /* virtual range size; 0: the device's total */
	unsigned flags;         /* VRAM_POOL_* */
	const char *device_uuid; /* NULL, or the device by UUID (as vramctl
				  * status and nvidia-smi -L print it), which
				  * then replaces device */
};

#define VRAM_POOL_OPTIONS_INIT VRAM_SIZED_INIT_(struct vram_pool_options)

/* Creates a pool owned by this client and reserves its virtual range. No
 * physical memory is taken until the first vram_alloc/vram_pool_reserve.
 * *out is owned by the caller until vram_pool_close() or until the client
 * is closed. opts->size must be set (VRAM_POOL_OPTIONS_INIT). Errors:
 * -EEXIST name taken, -ENODEV no such device, -EINVAL (bad or missing
 * argument, name, tag, policy, flags or size), -ENOMEM, -EPIPE the
 * connection is gone. */
int vram_pool_create(vram_client *c, const struct vram_pool_options *opts,
		     vram_pool **out);

/* Maps an existing pool (another process's, or a persistent pool of ours
 * that lost its owner: then this client becomes the owner). flags:
 * VRAM_OPEN_READONLY. Other processes' pools can be read and written at
 * vram_pool_base() but not sub-allocated. -ENOENT no such pool, -EPERM,
 * -EALREADY if this client has it open already, -EBUSY while it pauses or
 * resumes, -EINVAL (bad name, flags or client), -ENOMEM, -EPIPE. */
int vram_pool_open(vram_client *c, const char *name, unsigned flags,
		   vram_pool **out);

/* Unmaps the pool and frees the handle; pointers into it become invalid.
 * If this client owns the pool it is dropped (unless VRAM_POOL_PERSIST).
 * NULL and a second call are no-ops. */
void vram_pool_close(vram_pool *p);

/* Drops a pool by name (owner, same uid, or root): every mapper loses it
 * and its memory and backup are freed. Errors: -ENOENT no such pool,
 * -EPERM not the owner, the owner's uid or root, -EINVAL bad name or
 * client, -EPIPE the connection is gone. */
int vram_pool_drop(vram_client *c, const char *name);

/* Accessors. On a closed or unknown handle they return 0 (NULL for the
 * name, VRAM_STATE_INVALID for the state), with vram_last_error() set. */

/* Base address of the pool's virtual range (device pointer on GPUs); stays
 * the same across pause and resume. */
uintptr_t vram_pool_base(vram_pool *p);
/* Physical bytes mapped (0 while paused is not reported: this is the
 * pool's size, which pause keeps). */
uint64_t vram_pool_size(vram_pool *p);
/* State as this process last saw it. */
enum vram_state vram_pool_state(vram_pool *p);
const char *vram_pool_name(vram_pool *p);

/* The pool's backup as this process maps it (host and disk policies, a
 * read-write mapper): *host gets its address (stable for the life of the
 * handle: the same address across every pause and resume) and *len its
 * length; the content at offset o is the pool's byte at base + o as the
 * last pause saved it, while the pool is paused, and after a resume only
 * with VRAM_POOL_RETAIN_BACKUP until vram_pool_backup_release() (this call
 * waits for the pages that call gives back to be gone). Errors:
 * -ENODEV no backup here (discard policy, read-only), -EINVAL not an open
 * pool, or host or len NULL. */
int vram_pool_backup(vram_pool *p, void **host, uint64_t *len);

/* Gives the backup's pages back (to the OS, or to the file system for a
 * disk backup), keeping its mapping and address: for a caller that
 * decides at resume time whether a backup is kept (torch_memory_saver's
 * retain_cpu_backup). This process lets go of them before the call
 * returns (its RSS falls); unpinning and freeing them, which takes
 * seconds for GiBs, runs on a libvram thread that the next use of the
 * backup (a pause, a resume) waits for. On a paused pool it drops the
 * saved content: the next resume brings back zeroed memory. Errors:
 * -ENODEV no backup here, -EINVAL not an open pool, -errno from the
 * kernel. */
int vram_pool_backup_release(vram_pool *p);

/* Grows the pool so that at least bytes are mapped. Errors: -ENOMEM the
 * range or the device is full, -EBUSY while paused, -EPERM a pool this
 * client does not own, -ENOENT dropped, -EINVAL not an open pool,
 * -EPIPE. */
int vram_pool_reserve(vram_pool *p, uint64_t bytes);

/* Sub-allocates size bytes (aligned to 256) from the pool, growing it by a
 * large chunk through the daemon when full. The pointer is valid until
 * vram_free or vram_pool_close, across pause/resume (its content is lost
 * on pause for VRAM_POLICY_DISCARD). -EBUSY while paused, -ENOMEM,
 * -EPERM on a pool this client does not own, -ENOENT dropped, -EINVAL
 * (size 0, ptr NULL, not an open pool), -EPIPE. */
int vram_alloc(vram_pool *p, size_t size, void **ptr);
/* Frees a pointer from vram_alloc. NULL is a no-op; -EINVAL if unknown or
 * not an open pool, -ENOENT if the pool was dropped. */
int vram_free(vram_pool *p, void *ptr);

/* ---- pause and resume --------------------------------------------------- */

/* Which pools: every field that is set must match. An empty selector
 * matches nothing unless all is 1. */
struct vram_selector {
	uint32_t size;     /* sizeof(struct vram_selector) */
	const char *name;  /* pool name or NULL */
	const char *tag;   /* tag or NULL */
	uint32_t owner_pid; /* 0: any */
	int all;           /* 1: every pool (with the fields above) */
	/* The owner's instance name (VRAM_INSTANCE in its environment), or
	 * a cgroup path starting with '/' (that cgroup or one below it);
	 * NULL: any. Since 0.3. */
	const char *owner;
	/* Since 0.3: the owner's job name (VRAM_JOB in its environment, the
	 * job its ranks register under), NULL: any; and a list of owner
	 * pids (the owner is one of them), n_owner_pids 0: any. */
	const char *job;
	const uint32_t *owner_pids;
	uint32_t n_owner_pids;
};

#define VRAM_SELECTOR_INIT VRAM_SIZED_INIT_(struct vram_selector)

#define VRAM_MAX_DEVICES 16

/* One device's free memory around a pause or resume. */
struct vram_device_free {
	unsigned index;
	char uuid[64];
	uint64_t free_before;
	uint64_t free_after;
};

/* What a pause or resume did. */
struct vram_report {
	uint32_t size;        /* sizeof(struct vram_report), set by the caller */
	uint32_t pools;       /* pools that changed state */
	uint64_t bytes;       /* bytes released (pause) or brought back */
	uint64_t free_before; /* device free memory before, all devices */
	uint64_t free_after;  /* and after */
	uint32_t failed;      /* pools that did not complete */
	/* Since 0.3: the free figures of each device of the node. */
	uint32_t n_devices;
	struct vram_device_free devices[VRAM_MAX_DEVICES];
	/* Since 0.3, for a gang (vram_gang_pause): the pools brought back
	 * after a failure, and the failure that undid the gang (failed_err
	 * 0: none): its errno (positive), pool and rank (the pool owner's
	 * pid, instance name and device). */
	uint32_t rolled_back;
	int32_t failed_err;
	uint32_t failed_pid;
	unsigned failed_device;
	char failed_instance[64];
	char failed_pool[128];
	/* Since 0.3: what the owners of the pools that changed said they
	 * allocated outside vramd's pools (vram_report_outside, sent by
	 * libvram-preload.so), summed over those owners (outside_procs of
	 * them): their CUDA contexts come on top. */
	uint32_t outside_procs;
	unsigned outside_flags; /* VRAM_OUTSIDE_*, of any of them */
	uint64_t outside_bytes;
	uint64_t outside_count;
};

#define VRAM_REPORT_INIT VRAM_SIZED_INIT_(struct vram_report)

/* Pauses every selected pool: mappers save backups and unmap, then the
 * physical memory returns to the device. Blocks until done or until
 * timeout_ms (0: the daemon's default) passes for a mapper's ack. report
 * may be NULL; if not, its size must be set (VRAM_REPORT_INIT). Returns 0
 * when every pool paused; -ETIMEDOUT (pools stay PAUSING, vram_last_error
 * names the late pids; call again to wait more), -EALREADY if all were
 * paused, -ENOENT if none matched, -EPERM, -EINVAL (bad selector, sizes
 * or client: then nothing is sent), -EPIPE the connection is gone; report
 * is filled in every case but -EINVAL. */
int vram_pause(vram_client *c, const struct vram_selector *sel,
	       unsigned timeout_ms, struct vram_report *report);

/* Resumes every selected pool at the same addresses, restoring backups.
 * Same arguments, report and errors as vram_pause, and -ENOMEM if the
 * device lacks the memory: the pool stays PAUSED with its backup, and the
 * call can be retried. */
int vram_resume(vram_client *c, const struct vram_selector *sel,
		unsigned timeout_ms, struct vram_report *report);

/* Gang pause and resume: vram_pause and vram_resume, all or nothing over
 * the selected pools (a tag across the devices and ranks of a job: select
 * by job, by owner_pids, or by tag). If one pool fails, misses the
 * deadline or loses its owner (a rank dies) before the end, the pools the
 * call had moved are brought back to where they were, and it returns that
 * pool's error (-ESRCH for an owner gone, -ETIMEDOUT for a late rank);
 * report->failed_* names the rank and report->rolled_back counts what was
 * undone. A late rank's own pool is left as the deadline found it (a late
 * ack still completes it). Same other errors as vram_pause. Since 0.3. */
int vram_gang_pause(vram_client *c, const struct vram_selector *sel,
		    unsigned timeout_ms, struct vram_report *report);
int vram_gang_resume(vram_client *c, const struct vram_selector *sel,
		     unsigned timeout_ms, struct vram_report *report);

/* Shortcuts for one pool of this client, with vram_pause's errors, and
 * -ENOENT if the pool was dropped, -EINVAL if p is not an open pool. */
int vram_pool_pause(vram_pool *p, struct vram_report *report);
int vram_pool_resume(vram_pool *p, struct vram_report *report);

/* ---- inspection --------------------------------------------------------- */

struct vram_mapper_info {
	uint32_t pid;
	uint32_t uid;
	char name[64];
	int readonly;
};

/* An entry of vram_list()'s array. size is the entry size the caller
 * passed, which is also the array's stride: leave it as it is for
 * vram_pool_info_free(). */
struct vram_pool_info {
	uint32_t size;
	uint64_t id;
	char name[128];
	char tag[64];
	unsigned device;
	enum vram_state state;
	enum vram_policy policy;
	uint64_t bytes;         /* pool size (kept while paused) */
	uint64_t reserve_bytes;
	uint64_t backup_bytes;
	uint32_t chunks;
	uint32_t owner_pid;     /* 0: orphaned persistent pool */
	uint32_t owner_uid;
	char owner_name[64];
	unsigned flags;
	uint32_t n_mappers;
	struct vram_mapper_info *mappers; /* n_mappers entries */
	/* Since 0.3: the owner's instance name ("" if it gave none) and its
	 * cgroup as the kernel reports it to vramd ("" if unknown). */
	char owner_instance[64];
	char owner_cgroup[256];
	/* Since 0.3: the owner's job name ("" if it gave none), and the
	 * UUID of the pool's device as the daemon names it. */
	char owner_job[64];
	char device_uuid[64];
};

/* Lists pools matching sel (NULL: all; an empty selector lists every pool
 * too). entry_size: sizeof(struct vram_pool_info), the entry layout the
 * caller was built with. *out is an array of *n entries of entry_size
 * bytes owned by the caller (NULL when *n is 0); free it with
 * vram_pool_info_free(*out, *n), which also frees each entry's mappers.
 * Errors: -EINVAL (out or n NULL, bad selector, entry_size 0, too small
 * or not a multiple of the struct's alignment, bad client), -ENOMEM,
 * -EPIPE the connection is gone. */
int vram_list(vram_client *c, const struct vram_selector *sel,
	      size_t entry_size, struct vram_pool_info **out, size_t *n);
/* Frees vram_list()'s array. NULL is a no-op. */
void vram_pool_info_free(struct vram_pool_info *infos, size_t n);

struct vram_device_info {
	unsigned index;
	char uuid[64];
	uint64_t total_bytes;
	uint64_t free_bytes;
	uint64_t granularity;
};


/* The daemon's figures, for vramctl status. */
struct vram_stats {
	uint32_t size;         /* sizeof(struct vram_stats), set by the caller */
	char backend[16];      /* "host", "cuda" or "hip" */
	char daemon_version[32];
	uint32_t sessions;     /* clients connected */
	uint32_t pools;        /* pools on the node */
	uint64_t used_bytes;   /* device bytes held through vramd */
	uint64_t backup_bytes; /* host bytes in backups */
	uint32_t open_fds;     /* the daemon's open fds */
	uint64_t uptime_ms;
	unsigned n_devices;    /* devices[] entries filled */
	struct vram_device_info devices[VRAM_MAX_DEVICES];
	uint64_t disk_backup_bytes; /* disk bytes in backup files (since
				     * 0.2: beyond an older size, left as the
				     * caller set it) */
};

#define VRAM_STATS_INIT VRAM_SIZED_INIT_(struct vram_stats)

/* Fills *out (its size set: VRAM_STATS_INIT). The part size covers is
 * zeroed first, so it is whole even on failure. Errors: -EINVAL (out NULL,
 * bad size or client), -EPROTO a reply that makes no sense, -EPIPE the
 * connection is gone. */
int vram_stats(vram_client *c, struct vram_stats *out);

/* One process using a device: what it maps through vramd, and what the
 * driver charges to the process itself: its context and the memory it
 * allocated outside vramd, which no pause frees. (The CUDA driver does
 * not charge memory imported from vramd to the importer: measured on an
 * H200, a process with a 1 GiB vramd pool and a context was charged
 * 518 MiB.) */
struct vram_process_usage {
	uint32_t size;        /* the entry size passed to vram_audit */
	uint32_t pid;
	unsigned device;
	int used_known;       /* 0: the driver did not report this process */
	uint64_t used_bytes;  /* charged to it by the driver, when used_known */
	uint64_t vramd_bytes; /* bytes of active vramd pools it maps */
	int is_vramd;         /* the daemon itself */
	char name[64];        /* its vramd client name, "" if none */
	/* Since 0.3: what the process said it allocated outside vramd's
	 * pools (vram_report_outside), the process's figures on each of its
	 * rows; outside_reported 0 when it said nothing. */
	int outside_reported;
	unsigned outside_flags; /* VRAM_OUTSIDE_* */
	uint64_t outside_bytes;
	uint64_t outside_count;
};

/* Lists every process using a device (as the driver reports them) and
 * every vramd client, with the memory each holds. entry_size:
 * sizeof(struct vram_process_usage). *out is an array of *n entries of
 * entry_size bytes owned by the caller: free it with free(), as its
 * entries own no memory (unlike vram_list's, which need
 * vram_pool_info_free). driver_info (may be NULL) is set to 0 when the
 * backend cannot list processes (the host backend): then only vramd
 * clients appear. Errors: -EINVAL (out or n NULL, bad entry_size or
 * client), -ENOMEM, -EPROTO, -EPIPE. */
int vram_audit(vram_client *c, size_t entry_size,
	       struct vram_process_usage **out, size_t *n, int *driver_info);

/* What this process allocated on its devices outside vramd's pools:
 * live allocations a capturing library (libvram-preload.so) passed to the
 * runtime itself. The daemon keeps the last one sent on this client's
 * session and shows it in vram_audit and in the reports of pauses of the
 * pools this client owns. */
#define VRAM_OUTSIDE_EXPANDABLE 0x1u /* PyTorch's expandable segments were
				      * asked for: memory mapped with the
				      * driver (cuMem*), not counted here */
struct vram_outside {
	uint32_t size; /* sizeof(struct vram_outside) */
	unsigned flags; /* VRAM_OUTSIDE_* */
	uint64_t bytes;
	uint64_t count;
};

#define VRAM_OUTSIDE_INIT VRAM_SIZED_INIT_(struct vram_outside)

/* Sends *o to the daemon (see struct vram_outside). Errors: -EINVAL (NULL
 * or bad size), -EOPNOTSUPP a daemon older than 0.3, -EPIPE. */
int vram_report_outside(vram_client *c, const struct vram_outside *o);

/* Human names: "active", "paused", ...; "discard", "host"; "unknown" for a
 * value that is none of them (VRAM_STATE_INVALID: "invalid"). Static. */
const char *vram_state_name(enum vram_state s);
const char *vram_policy_name(enum vram_policy p);

/* ---- PyTorch allocator ----------------------------------------------------
 * Entry points for PyTorch's pluggable allocator, so that a
 * torch.cuda.MemPool takes its memory from vramd pools:
 *
 *   alloc = torch.cuda.memory.CUDAPluggableAllocator(
 *           "/path/to/libvram.so.0", "vram_torch_malloc", "vram_torch_free")
 *   mempool = torch.cuda.MemPool(alloc.allocator())
 *
 * The Python package (vram.torch, see docs/python.md) does this; C and C++
 * programs may too. Allocations come from the pool current on the calling
 * thread: the top of a per-thread stack of pools (vram_torch_push_pool),
 * else the process's default pool (vram_torch_set_default_pool). Only pools
 * this process owns (made with vram_pool_create) can be used. A pool
 * pushed or made default is remembered, by its range, until a pool whose
 * range overlaps it is registered (its range is then free again, so it was
 * closed): vram_torch_free finds a pointer's pool that way, on any thread.
 *
 * On the cuda backend, growing a pool from vram_torch_malloc runs in the
 * relaxed stream-capture mode, so allocations during a CUDA graph capture
 * work, and vram_torch_free first waits for the allocation's stream (as
 * cudaFree waits for the device) unless that stream is capturing. Driver
 * calls use the device's primary context, PyTorch's.
 */

/* PyTorch's malloc: size bytes on device (the pool's device as this
 * process numbers it, which may differ from the daemon's index; -1: any) for
 * stream (unused: pool memory is not tied to a stream). Returns the
 * pointer, owned by the pool until vram_torch_free, or NULL on failure:
 * no pool current, another device, the pool paused or full. The reason is
 * logged (VRAM_LOG_WARN for a full pool, else VRAM_LOG_ERROR) and kept for
 * vram_torch_last_error(). */
void *vram_torch_malloc(ssize_t size, int device, void *stream);

/* PyTorch's free: gives back ptr from vram_torch_malloc, whatever pool is
 * current. NULL is a no-op. An unknown pointer is logged and ignored, and
 * so, quietly (VRAM_LOG_DEBUG), is a pointer whose pool was closed before
 * PyTorch let go of it (as at exit). size, device and stream are those of
 * the allocation. */
void vram_torch_free(void *ptr, ssize_t size, int device, void *stream);

/* Makes p the current pool of this thread until the matching pop; pushes
 * nest (at most 64 deep). p must be a pool this client owns. Returns 0,
 * -EINVAL (not an open pool), -EPERM (a pool opened, not owned),
 * -EOVERFLOW. */
int vram_torch_push_pool(vram_pool *p);

/* Undoes the last push on this thread: 0, or -EINVAL if there is none. */
int vram_torch_pop_pool(void);

/* Sets the pool used on threads that have pushed none (NULL: none, the
 * default; allocations then fail). Same errors as vram_torch_push_pool. */
int vram_torch_set_default_pool(vram_pool *p);

/* Why the last vram_torch_malloc on this thread failed; "" if it did not.
 * Valid until the next vram_torch_malloc on this thread. */
const char *vram_torch_last_error(void);

/* ---- Quotas --------------------------------------------------------------
 * Since 0.3. The quota lines of vramd.conf (docs/vramd.conf.5) as they
 * apply to the caller, with what its pools hold now. */

/* A limit that is not set. */
#define VRAM_QUOTA_NONE UINT64_MAX

/* One uid's or group's quota and usage. size is the entry size the
 * caller passed to vram_quotas. */
struct vram_quota {
	uint32_t size;
	int group;             /* 1: a gid's (the pools whose owner has it as
				* primary group); 0: a uid's */
	uint32_t id;           /* the uid or gid */
	int from_default;      /* a uid without a rule of its own: these are
				* the default rule's limits */
	int exempt;            /* root: not held to quotas */
	uint64_t pools_limit;  /* VRAM_QUOTA_NONE: no limit */
	uint64_t device_limit; /* bytes on each device */
	uint64_t host_limit;   /* host backup bytes */
	uint64_t pools;        /* held now */
	uint64_t host_bytes;   /* held now: size of its host-policy pools */
	unsigned n_devices;    /* device_bytes[] entries filled */
	uint64_t device_bytes[VRAM_MAX_DEVICES]; /* held now, by device index */
};

#define VRAM_QUOTA_INIT VRAM_SIZED_INIT_(struct vram_quota)

/* The quotas that apply to the caller: its own uid's entry first (there
 * even without a rule: its usage, no limits), then its primary group's if
 * a rule names it. Root and the admin group get their own entry, then
 * every uid and group with a rule or pools, by id. entry_size:
 * sizeof(struct vram_quota). *out is an array of *n entries of entry_size
 * bytes owned by the caller: free() it. Errors: -EINVAL (out or n NULL,
 * bad entry_size or client), -ENOMEM, -EPROTO, -EPIPE. */
int vram_quotas(vram_client *c, size_t entry_size, struct vram_quota **out,
		size_t *n);

#ifdef __cplusplus
}
#endif
#endif
