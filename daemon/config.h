/* SPDX-License-Identifier: Apache-2.0 */
/* vramd's settings: defaults, then the config file, then the command line. */
#ifndef VRAMD_CONFIG_H
#define VRAMD_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "quota.h"

/* The metrics_* keys (docs/metrics.md), for metrics_create. */
struct metrics_config {
	char listen[64];		/* HOST:PORT, empty: no HTTP */
	char textfile[256];		/* empty: no textfile */
	unsigned textfile_interval_ms;
	unsigned audit_interval_ms;	/* 0: no audit */
	unsigned max_tags;
};

struct config {
	char socket[108];
	/* The admin lane's socket (daemon/lane.h): "" for the default,
	 * the socket's path with ".admin" appended; "none": no lane. */
	char admin_socket[108];
	unsigned admin_lane_check_us; /* the most time between two looks */
	char backend[16];
	uint64_t host_capacity;
	unsigned host_devices;
	uint64_t host_granularity;
	int log_level;
	unsigned ack_timeout_ms;
	/* For this long from its start a pause or resume keeps the loop
	 * polling instead of sleeping (0: never; CONFIG_SPIN_AUTO:
	 * spin_default_ms(), common/spin.h). */
	unsigned transition_spin_ms;
	/* Threads that read the sessions (daemon/io.h; 0: io_threads_default). */
	unsigned io_threads;
	/* For this long after a reading thread last read a frame it polls
	 * its sockets instead of sleeping (daemon/io.h; 0: never;
	 * CONFIG_SPIN_AUTO: spin_io_default_us(), common/spin.h). */
	unsigned io_poll_us;
	uint64_t chunk_max;
	/* After this long with no change to the chunks and no pause or
	 * resume in flight, active pools' chunks let their fds go
	 * (daemon/fd_drop.h; 0: never). */
	unsigned chunk_fd_idle_ms;
	unsigned max_sessions;
	unsigned max_pools;
	unsigned max_chunks; /* per pool, at most WIRE_MAX_FDS - 10 */
	unsigned socket_mode;
	struct metrics_config metrics;
	unsigned reattach_grace_ms; /* after a restart (recover.h) */
	char backup_dir[256]; /* disk-policy backups; "" refuses the policy */
	/* host-policy backups: files in this tmpfs (or hugetlbfs) mount,
	 * where huge pages can be had; "": memfds */
	char host_backup_dir[256];
	/* Limits on clients (daemon/limits.c, docs/security.md). */
	unsigned admin_reserve;	       /* sessions only root/admin may use */
	unsigned max_sessions_per_uid;
	unsigned hello_timeout_ms;
	uint64_t max_queued;	       /* output queued for all sessions */
	uint64_t max_queued_per_uid;
	unsigned max_queued_fds;
	unsigned max_queued_fds_per_uid;
	char admin_group[64];	       /* name or gid; "" for root only */
	struct quota_set quotas;       /* "quota = ..." lines (quota.c) */
};

#define CONFIG_SPIN_AUTO UINT32_MAX

void config_defaults(struct config *cfg);

/* transition_spin_ms as it applies on this machine (CONFIG_SPIN_AUTO
 * resolved). */
unsigned config_spin_ms(const struct config *cfg);

/* io_poll_us as it applies on this machine (CONFIG_SPIN_AUTO resolved). */
unsigned config_io_poll_us(const struct config *cfg);

/* io_threads as it applies on this machine (0 resolved). */
unsigned config_io_threads(const struct config *cfg);

/* Reads "key = value" lines ('#' starts a comment). Returns 0, -ENOENT when
 * the file is missing, or -EINVAL with the line logged. */
int config_load(struct config *cfg, const char *path);

/* Sets one key from a string ("host_capacity", "8G"). -EINVAL if the key or
 * value is bad. */
int config_set(struct config *cfg, const char *key, const char *value);

/* The admin socket's path into buf (len bytes): admin_socket, or the
 * default derived from socket. Returns 0, -ENOENT when the lane is off
 * (admin_socket = none), or -ENAMETOOLONG when the path does not fit a
 * Unix socket address. */
int config_admin_socket(const struct config *cfg, char *buf, size_t len);

void config_backend(const struct config *cfg, struct backend_config *out);

#endif
