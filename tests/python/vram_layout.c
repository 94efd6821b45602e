/* SPDX-License-Identifier: Apache-2.0 */
/* Prints the layout of every public struct of vram.h, and its constants,
 * for tests/python/test_abi.py to hold python/vram/_lib.py's ctypes
 * mirrors against. One line each:
 *
 *   struct NAME SIZEOF
 *   field NAME FIELD OFFSET SIZE
 *   const NAME VALUE
 *
 * A field added to vram.h but not here still shows: its struct's size
 * changes.
 */
#include <stddef.h>
#include <stdio.h>

#include "vram.h"

#define S(t) printf("struct %s %zu\n", #t, sizeof(struct t))
#define F(t, f)                                                        \
	printf("field %s %s %zu %zu\n", #t, #f, offsetof(struct t, f), \
	       sizeof(((struct t *)0)->f))
#define C(name) printf("const %s %lld\n", #name, (long long)(name))

int main(void)
{
	S(vram_pool_options);
	F(vram_pool_options, size);
	F(vram_pool_options, name);
	F(vram_pool_options, tag);
	F(vram_pool_options, device);
	F(vram_pool_options, policy);
	F(vram_pool_options, reserve_bytes);
	F(vram_pool_options, flags);
	F(vram_pool_options, device_uuid);

	S(vram_selector);
	F(vram_selector, size);
	F(vram_selector, name);
	F(vram_selector, tag);
	F(vram_selector, owner_pid);
	F(vram_selector, all);
	F(vram_selector, owner);
	F(vram_selector, job);
	F(vram_selector, owner_pids);
	F(vram_selector, n_owner_pids);

	S(vram_device_free);
	F(vram_device_free, index);
	F(vram_device_free, uuid);
	F(vram_device_free, free_before);
	F(vram_device_free, free_after);

	S(vram_report);
	F(vram_report, size);
	F(vram_report, pools);
	F(vram_report, bytes);
	F(vram_report, free_before);
	F(vram_report, free_after);
	F(vram_report, failed);
	F(vram_report, n_devices);
	F(vram_report, devices);
	F(vram_report, rolled_back);
	F(vram_report, failed_err);
	F(vram_report, failed_pid);
	F(vram_report, failed_device);
	F(vram_report, failed_instance);
	F(vram_report, failed_pool);
	F(vram_report, outside_procs);
	F(vram_report, outside_flags);
	F(vram_report, outside_bytes);
	F(vram_report, outside_count);

	S(vram_mapper_info);
	F(vram_mapper_info, pid);
	F(vram_mapper_info, uid);
	F(vram_mapper_info, name);
	F(vram_mapper_info, readonly);

	S(vram_pool_info);
	F(vram_pool_info, size);
	F(vram_pool_info, id);
	F(vram_pool_info, name);
	F(vram_pool_info, tag);
	F(vram_pool_info, device);
	F(vram_pool_info, state);
	F(vram_pool_info, policy);
	F(vram_pool_info, bytes);
	F(vram_pool_info, reserve_bytes);
	F(vram_pool_info, backup_bytes);
	F(vram_pool_info, chunks);
	F(vram_pool_info, owner_pid);
	F(vram_pool_info, owner_uid);
	F(vram_pool_info, owner_name);
	F(vram_pool_info, flags);
	F(vram_pool_info, n_mappers);
	F(vram_pool_info, mappers);
	F(vram_pool_info, owner_instance);
	F(vram_pool_info, owner_cgroup);
	F(vram_pool_info, owner_job);
	F(vram_pool_info, device_uuid);

	S(vram_device_info);
	F(vram_device_info, index);
	F(vram_device_info, uuid);
	F(vram_device_info, total_bytes);
	F(vram_device_info, free_bytes);
	F(vram_device_info, granularity);

	S(vram_stats);
	F(vram_stats, size);
	F(vram_stats, backend);
	F(vram_stats, daemon_version);
	F(vram_stats, sessions);
	F(vram_stats, pools);
	F(vram_stats, used_bytes);
	F(vram_stats, backup_bytes);
	F(vram_stats, open_fds);
	F(vram_stats, uptime_ms);
	F(vram_stats, n_devices);
	F(vram_stats, devices);
	F(vram_stats, disk_backup_bytes);

	S(vram_process_usage);
	F(vram_process_usage, size);
	F(vram_process_usage, pid);
	F(vram_process_usage, device);
	F(vram_process_usage, used_known);
	F(vram_process_usage, used_bytes);
	F(vram_process_usage, vramd_bytes);
	F(vram_process_usage, is_vramd);
	F(vram_process_usage, name);
	F(vram_process_usage, outside_reported);
	F(vram_process_usage, outside_flags);
	F(vram_process_usage, outside_bytes);
	F(vram_process_usage, outside_count);
	S(vram_quota);
	F(vram_quota, size);
	F(vram_quota, group);
	F(vram_quota, id);
	F(vram_quota, from_default);
	F(vram_quota, exempt);
	F(vram_quota, pools_limit);
	F(vram_quota, device_limit);
	F(vram_quota, host_limit);
	F(vram_quota, pools);
	F(vram_quota, host_bytes);
	F(vram_quota, n_devices);
	F(vram_quota, device_bytes);

	C(VRAM_LOG_ERROR);
	C(VRAM_LOG_WARN);
	C(VRAM_LOG_INFO);
	C(VRAM_LOG_DEBUG);
	C(VRAM_POLICY_DISCARD);
	C(VRAM_POLICY_HOST);
	C(VRAM_STATE_INVALID);
	C(VRAM_STATE_ACTIVE);
	C(VRAM_STATE_PAUSING);
	C(VRAM_STATE_PAUSED);
	C(VRAM_STATE_RESUMING);
	C(VRAM_POOL_PERSIST);
	C(VRAM_OPEN_READONLY);
	C(VRAM_CONNECT_RECONNECT);
	C(VRAM_CONNECT_WAIT);
	C(VRAM_CONNECT_ADMIN);
	C(VRAM_MAX_DEVICES);
	C(VRAM_VERSION_NUMBER);
	return 0;
}
