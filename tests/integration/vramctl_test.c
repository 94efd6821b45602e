/* SPDX-License-Identifier: Apache-2.0 */
/* vramctl against a real vramd: the table, --json (checked by Python's
 * json module, so it is valid JSON and has every field), pause/resume by
 * tag and owner, and the documented exit codes. */
#include <sys/stat.h>

#include "integ.h"

static const char *ctl(void)
{
	const char *bin = getenv("VRAMCTL_BIN");
	return bin ? bin : "build/vramctl";
}

static int run_ctl(char *out, size_t cap, const char *a1, const char *a2,
		   const char *a3, const char *a4)
{
	const char *const argv[] = { ctl(), "--socket", integ_daemon.socket,
				     a1, a2, a3, a4, NULL };
	return harness_run_capture(argv, out, cap);
}

/* Runs python3 with a check of the JSON on its stdin; 0 when it holds. */
static int check_json(const char *json, const char *program)
{
	char path[] = "/tmp/vramctl-json-XXXXXX";
	int fd = mkstemp(path);
	ASSERT(fd >= 0);
	ASSERT_EQ(write(fd, json, strlen(json)), (ssize_t)strlen(json));
	close(fd);
	char script[2048];
	snprintf(script, sizeof(script),
		 "import json,sys\nd=json.load(open('%s'))\n%s\n", path, program);
	const char *const argv[] = { "python3", "-c", script, NULL };
	char out[4096];
	int r = harness_run_capture(argv, out, sizeof(out));
	unlink(path);
	if (r != 0)
		fprintf(stderr, "JSON check failed on:\n%s\n", json);
	return r;
}

TEST(ls_table_and_json)
{
	integ_start("256M");
	vram_client *c = integ_connect("engine");
	vram_pool *w = integ_pool(c, "engine.weights", "weights", VRAM_POLICY_HOST, 0);
	vram_pool *kv = integ_pool(c, "engine.kv", "kv_cache", VRAM_POLICY_DISCARD, 0);
	ASSERT_OK(vram_pool_reserve(w, 64 * MiB));
	ASSERT_OK(vram_pool_reserve(kv, 128 * MiB));
	ASSERT_OK(vram_client_start_thread(c));
	static char out[65536];

	ASSERT_EQ(run_ctl(out, sizeof(out), "ls", NULL, NULL, NULL), 0);
	ASSERT(strstr(out, "engine.weights") != NULL);
	ASSERT(strstr(out, "engine.kv") != NULL);
	ASSERT(strstr(out, "kv_cache") != NULL);
	ASSERT(strstr(out, "active") != NULL);
	ASSERT(strstr(out, "host") != NULL);
	ASSERT(strstr(out, "discard") != NULL);
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	ASSERT(strstr(out, pid) != NULL);

	ASSERT_EQ(run_ctl(out, sizeof(out), "--json", "ls", NULL, NULL), 0);
	char prog[1024];
	snprintf(prog, sizeof(prog),
		 "p={x['name']:x for x in d}\n"
		 "assert set(p)=={'engine.weights','engine.kv'}, p\n"
		 "w=p['engine.weights']\n"
		 "assert w['tag']=='weights' and w['policy']=='host'\n"
		 "assert w['state']=='active' and w['bytes']==%llu\n"
		 "assert w['owner_pid']==%d and w['owner_name']=='engine'\n"
		 "assert len(w['mappers'])==1 and w['mappers'][0]['access']=='rw'\n"
		 "assert p['engine.kv']['bytes']==%llu\n",
		 64 * MiB, (int)getpid(), 128 * MiB);
	ASSERT_OK(check_json(out, prog));

	/* Pause by tag through vramctl; ls shows it; resume by owner. */
	ASSERT_EQ(run_ctl(out, sizeof(out), "pause", "--tag", "kv_cache", NULL), 0);
	ASSERT_EQ(vram_pool_state(kv), VRAM_STATE_PAUSED);
	ASSERT_EQ(run_ctl(out, sizeof(out), "--json", "show", "engine.kv", NULL), 0);
	ASSERT_OK(check_json(out, "assert d['state']=='paused', d"));
	ASSERT_EQ(run_ctl(out, sizeof(out), "--json", "status", NULL, NULL), 0);
	ASSERT_OK(check_json(out, "assert d['backend']=='host' and d['pools']==2, d"));
	ASSERT_EQ(run_ctl(out, sizeof(out), "resume", "--owner", pid, NULL), 0);
	ASSERT_EQ(vram_pool_state(kv), VRAM_STATE_ACTIVE);
	vram_client_close(c);
	integ_stop();
}

TEST(exit_codes)
{
	static char out[8192];
	const char *const nodaemon[] = { ctl(), "--socket", "/nonexistent/vramd.sock",
					 "ls", NULL };
	ASSERT_EQ(harness_run_capture(nodaemon, out, sizeof(out)), 3);
	const char *const usage[] = { ctl(), "frobnicate", NULL };
	ASSERT_EQ(harness_run_capture(usage, out, sizeof(out)), 2);

	integ_start("256M");
	ASSERT_EQ(run_ctl(out, sizeof(out), "pause", "nosuchpool", NULL, NULL), 4);
	ASSERT_EQ(run_ctl(out, sizeof(out), "show", "nosuchpool", NULL, NULL), 4);

	/* A mapper that never acks: exit 5. */
	vram_client *c = integ_connect("deaf");
	vram_pool *w = integ_pool(c, "w", "weights", VRAM_POLICY_DISCARD, 0);
	ASSERT_OK(vram_pool_reserve(w, 2 * MiB));
	ASSERT_EQ(run_ctl(out, sizeof(out), "--timeout", "200", "pause", "w"), 5);
	ASSERT_EQ(run_ctl(out, sizeof(out), "drop", "w", NULL, NULL), 0);
	ASSERT_EQ(run_ctl(out, sizeof(out), "show", "w", NULL, NULL), 4);
	vram_client_close(c);
	integ_stop();
}

/* On the host backend audit lists vramd clients with what they map. */
TEST(audit_lists_clients_and_their_bytes)
{
	integ_start("256M");
	vram_client *c = integ_connect("engine");
	vram_pool *w = integ_pool(c, "w", "weights", VRAM_POLICY_DISCARD, 0);
	ASSERT_OK(vram_pool_reserve(w, 64 * MiB));
	struct vram_process_usage *u = NULL;
	size_t n = 0;
	int driver_info = -1;
	ASSERT_OK(vram_audit(c, sizeof(struct vram_process_usage), &u, &n,
			     &driver_info));
	ASSERT_EQ(driver_info, 0);
	ASSERT_EQ(n, 1);
	ASSERT_EQ(u[0].pid, (uint32_t)getpid());
	ASSERT_UEQ(u[0].vramd_bytes, 64 * MiB);
	ASSERT_STREQ(u[0].name, "engine");
	free(u);
	ASSERT_OK(vram_client_start_thread(c));
	static char out[8192];
	ASSERT_EQ(run_ctl(out, sizeof(out), "--json", "audit", NULL, NULL), 0);
	char prog[512];
	snprintf(prog, sizeof(prog),
		 "assert d['driver_info'] is False\n"
		 "p=d['processes']\n"
		 "assert len(p)==1 and p[0]['pid']==%d and p[0]['vramd_bytes']==%llu, p\n",
		 (int)getpid(), 64 * MiB);
	ASSERT_OK(check_json(out, prog));
	/* A paused pool holds nothing. */
	ASSERT_OK(vram_pool_pause(w, NULL));
	ASSERT_OK(
		vram_audit(c, sizeof(struct vram_process_usage), &u, &n, NULL));
	ASSERT_EQ(n, 0);
	free(u);
	vram_client_close(c);
	integ_stop();
}
