/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io.h"
#include "log.h"
#include "spin.h"
#include "wire.h"

void config_defaults(struct config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	snprintf(cfg->socket, sizeof(cfg->socket), "/run/vramd/vramd.sock");
	snprintf(cfg->backend, sizeof(cfg->backend), "auto");
	cfg->host_capacity = 8ull << 30;
	cfg->host_devices = 1;
	cfg->host_granularity = 2ull << 20;
	cfg->log_level = LOG_INFO;
	cfg->ack_timeout_ms = 10000;
	cfg->transition_spin_ms = CONFIG_SPIN_AUTO;
	cfg->io_poll_us = CONFIG_SPIN_AUTO;
	/* A grow is one chunk (docs/gpu.md, "Chunks sized to the work"): the
	 * cap is past any device's memory. */
	cfg->chunk_max = 256ull << 30;
	/* Past the gaps between one engine's wakes (weights, KV, graph),
	 * well inside the time it then runs before it sleeps again. */
	cfg->chunk_fd_idle_ms = 100;
	/* 1024 clients of one uid, others, and root or the admin group. */
	cfg->max_sessions = 2048;
	cfg->max_pools = 1024;
	cfg->max_chunks = 240;
	cfg->socket_mode = 0660;
	cfg->admin_lane_check_us = 1000;
	cfg->metrics.textfile_interval_ms = 15000;
	cfg->metrics.audit_interval_ms = 15000;
	cfg->metrics.max_tags = 32;
	cfg->reattach_grace_ms = 30000;
	cfg->admin_reserve = 32;
	cfg->max_sessions_per_uid = 1024;
	cfg->hello_timeout_ms = 5000;
	cfg->max_queued = 512ull << 20;
	cfg->max_queued_per_uid = 256ull << 20;
	cfg->max_queued_fds = 16384;
	cfg->max_queued_fds_per_uid = 8192;
}

unsigned config_spin_ms(const struct config *cfg)
{
	if (cfg->transition_spin_ms != CONFIG_SPIN_AUTO)
		return cfg->transition_spin_ms;
	return spin_default_ms();
}

unsigned config_io_poll_us(const struct config *cfg)
{
	if (cfg->io_poll_us != CONFIG_SPIN_AUTO)
		return cfg->io_poll_us;
	return spin_io_default_us();
}

unsigned config_io_threads(const struct config *cfg)
{
	return cfg->io_threads ? cfg->io_threads : io_threads_default();
}

/* "8G", "512M", "4096" → bytes; -EINVAL on garbage or overflow. */
static int config_parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *s == '-')
		return -EINVAL;
	unsigned shift = 0;
	switch (toupper((unsigned char)*end)) {
	case 'K': shift = 10; end++; break;
	case 'M': shift = 20; end++; break;
	case 'G': shift = 30; end++; break;
	case 'T': shift = 40; end++; break;
	default: break;
	}
	if (*end == 'i' || *end == 'B')
		end++;
	if (*end == 'B')
		end++;
	if (*end != '\0')
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

static int parse_uint(const char *s, unsigned min, unsigned max, unsigned *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 0);
	if (errno || end == s || *end || *s == '-' || v < min || v > max)
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

int config_set(struct config *cfg, const char *key, const char *value)
{
	uint64_t size;
	int r;

	if (strcmp(key, "socket") == 0) {
		if (strlen(value) >= sizeof(cfg->socket) || !*value)
			return -EINVAL;
		snprintf(cfg->socket, sizeof(cfg->socket), "%s", value);
		return 0;
	}
	if (strcmp(key, "admin_socket") == 0) {
		if (strlen(value) >= sizeof(cfg->admin_socket))
			return -EINVAL;
		snprintf(cfg->admin_socket, sizeof(cfg->admin_socket), "%s",
			 value);
		return 0;
	}
	if (strcmp(key, "backup_dir") == 0) {
		/* Absolute, so that a relative name does not follow the
		 * daemon's working directory; "" (or none) refuses the disk
		 * policy. */
		if (strlen(value) >= sizeof(cfg->backup_dir) ||
		    (value[0] && value[0] != '/'))
			return -EINVAL;
		snprintf(cfg->backup_dir, sizeof(cfg->backup_dir), "%s", value);
		return 0;
	}
	if (strcmp(key, "host_backup_dir") == 0) {
		if (strlen(value) >= sizeof(cfg->host_backup_dir) ||
		    (value[0] && value[0] != '/'))
			return -EINVAL;
		snprintf(cfg->host_backup_dir, sizeof(cfg->host_backup_dir),
			 "%s", value);
		return 0;
	}
	if (strcmp(key, "backend") == 0) {
		if (strcmp(value, "auto") && strcmp(value, "host") &&
		    strcmp(value, "cuda") && strcmp(value, "hip"))
			return -EINVAL;
		snprintf(cfg->backend, sizeof(cfg->backend), "%s", value);
		return 0;
	}
	if (strcmp(key, "log_level") == 0) {
		r = log_level_parse(value);
		if (r < 0)
			return r;
		cfg->log_level = r;
		return 0;
	}
	if (strcmp(key, "host_capacity") == 0 || strcmp(key, "chunk_max") == 0 ||
	    strcmp(key, "host_granularity") == 0) {
		r = config_parse_size(value, &size);
		if (r < 0 || size == 0)
			return -EINVAL;
		if (key[0] == 'c')
			cfg->chunk_max = size;
		else if (strcmp(key, "host_capacity") == 0)
			cfg->host_capacity = size;
		else if (size & (size - 1) || size < 4096)
			return -EINVAL; /* a power of two, at least a page */
		else
			cfg->host_granularity = size;
		return 0;
	}
	if (strcmp(key, "max_queued") == 0 ||
	    strcmp(key, "max_queued_per_uid") == 0) {
		r = config_parse_size(value, &size);
		if (r < 0 || size < (1u << 20))
			return -EINVAL; /* at least one frame */
		if (strcmp(key, "max_queued") == 0)
			cfg->max_queued = size;
		else
			cfg->max_queued_per_uid = size;
		return 0;
	}
	if (strcmp(key, "admin_group") == 0) {
		if (strlen(value) >= sizeof(cfg->admin_group))
			return -EINVAL;
		snprintf(cfg->admin_group, sizeof(cfg->admin_group), "%s", value);
		return 0;
	}
	if (strcmp(key, "quota") == 0)
		return quota_parse(&cfg->quotas, value) < 0 ? -EINVAL : 0;
	if (strcmp(key, "admin_reserve") == 0)
		return parse_uint(value, 0, 65536, &cfg->admin_reserve);
	if (strcmp(key, "admin_lane_check_us") == 0)
		return parse_uint(value, 0, 1000000, &cfg->admin_lane_check_us);
	if (strcmp(key, "max_sessions_per_uid") == 0)
		return parse_uint(value, 1, 65536, &cfg->max_sessions_per_uid);
	if (strcmp(key, "hello_timeout_ms") == 0)
		return parse_uint(value, 1, 3600 * 1000, &cfg->hello_timeout_ms);
	if (strcmp(key, "max_queued_fds") == 0)
		return parse_uint(value, WIRE_MAX_FDS, 1 << 20, &cfg->max_queued_fds);
	if (strcmp(key, "max_queued_fds_per_uid") == 0)
		return parse_uint(value, WIRE_MAX_FDS, 1 << 20,
				  &cfg->max_queued_fds_per_uid);
	if (strcmp(key, "host_devices") == 0)
		return parse_uint(value, 1, BACKEND_MAX_DEVICES, &cfg->host_devices);
	if (strcmp(key, "ack_timeout_ms") == 0)
		return parse_uint(value, 1, 3600 * 1000, &cfg->ack_timeout_ms);
	if (strcmp(key, "transition_spin_ms") == 0)
		return parse_uint(value, 0, 1000, &cfg->transition_spin_ms);
	if (strcmp(key, "io_threads") == 0)
		return parse_uint(value, 0, 64, &cfg->io_threads);
	if (strcmp(key, "io_poll_us") == 0)
		return parse_uint(value, 0, 1000000, &cfg->io_poll_us);
	if (strcmp(key, "chunk_fd_idle_ms") == 0)
		return parse_uint(value, 0, 3600 * 1000,
				  &cfg->chunk_fd_idle_ms);
	if (strcmp(key, "max_sessions") == 0)
		return parse_uint(value, 1, 65536, &cfg->max_sessions);
	if (strcmp(key, "max_pools") == 0)
		return parse_uint(value, 1, 1 << 20, &cfg->max_pools);
	if (strcmp(key, "reattach_grace_ms") == 0)
		return parse_uint(value, 0, 86400000, &cfg->reattach_grace_ms);
	if (strcmp(key, "max_chunks") == 0)
		return parse_uint(value, 1, WIRE_MAX_FDS - 10, &cfg->max_chunks);
	if (strcmp(key, "metrics_listen") == 0) {
		if (strlen(value) >= sizeof(cfg->metrics.listen))
			return -EINVAL;
		snprintf(cfg->metrics.listen, sizeof(cfg->metrics.listen), "%s", value);
		return 0;
	}
	if (strcmp(key, "metrics_textfile") == 0) {
		if (strlen(value) >= sizeof(cfg->metrics.textfile))
			return -EINVAL;
		snprintf(cfg->metrics.textfile, sizeof(cfg->metrics.textfile), "%s",
			 value);
		return 0;
	}
	if (strcmp(key, "metrics_textfile_interval_ms") == 0)
		return parse_uint(value, 100, 3600 * 1000,
				  &cfg->metrics.textfile_interval_ms);
	if (strcmp(key, "metrics_audit_interval_ms") == 0) {
		r = parse_uint(value, 0, 3600 * 1000, &cfg->metrics.audit_interval_ms);
		if (r == 0 && cfg->metrics.audit_interval_ms &&
		    cfg->metrics.audit_interval_ms < 100)
			return -EINVAL; /* a driver call more than 10 times a second */
		return r;
	}
	if (strcmp(key, "metrics_max_tags") == 0)
		return parse_uint(value, 1, 64, &cfg->metrics.max_tags);
	if (strcmp(key, "socket_mode") == 0) {
		char *end;
		unsigned long m = strtoul(value, &end, 8);
		if (end == value || *end || m > 0777)
			return -EINVAL;
		cfg->socket_mode = (unsigned)m;
		return 0;
	}
	return -EINVAL;
}

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	char *e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

int config_load(struct config *cfg, const char *path)
{
	FILE *f = fopen(path, "re");
	char line[512];
	int lineno = 0, r = 0;

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		char *hash = strchr(line, '#');
		if (hash)
			*hash = '\0';
		char *s = trim(line);
		if (!*s)
			continue;
		char *eq = strchr(s, '=');
		if (!eq) {
			log_err("%s:%d: expected key = value", path, lineno);
			r = -EINVAL;
			break;
		}
		*eq = '\0';
		char *key = trim(s), *value = trim(eq + 1);
		if (config_set(cfg, key, value) < 0) {
			log_err("%s:%d: bad setting %s = %s", path, lineno, key, value);
			r = -EINVAL;
			break;
		}
	}
	fclose(f);
	return r;
}

int config_admin_socket(const struct config *cfg, char *buf, size_t len)
{
	int n;

	if (strcmp(cfg->admin_socket, "none") == 0)
		return -ENOENT;
	if (cfg->admin_socket[0])
		n = snprintf(buf, len, "%s", cfg->admin_socket);
	else
		n = snprintf(buf, len, "%s.admin", cfg->socket);
	/* sun_path's 108 bytes, with its terminator. */
	if (n < 0 || (size_t)n >= len || n >= 108)
		return -ENAMETOOLONG;
	return 0;
}

void config_backend(const struct config *cfg, struct backend_config *out)
{
	out->name = cfg->backend;
	out->host_capacity = cfg->host_capacity;
	out->host_devices = cfg->host_devices;
	out->host_granularity = cfg->host_granularity;
}
