/* SPDX-License-Identifier: Apache-2.0 */
/* The peer's identity: SO_PEERCRED, then a pidfd (SO_PEERPIDFD, Linux 6.5,
 * or pidfd_open on older kernels) held while its /proc/PID/cgroup is read
 * and checked alive afterwards, so the cgroup is the peer's own. */
#include "peer.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

static int peer_pidfd(int fd, pid_t pid)
{
	int pidfd = -1;
	socklen_t len = sizeof(pidfd);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) == 0 &&
	    pidfd >= 0)
		return pidfd;
	/* Older kernels: a pidfd of the pid SO_PEERCRED gave; the check
	 * below still tells whether that process was the peer's and lives. */
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* The cgroup v2 line ("0::/path") of /proc/PID/cgroup, or v1's first. */
static void cgroup_read(pid_t pid, char *out, size_t size)
{
	char path[64], line[512];
	FILE *f;

	out[0] = '\0';
	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	if (!(f = fopen(path, "re")))
		return;
	while (fgets(line, sizeof(line), f)) {
		char *p = strchr(line, ':');
		p = p ? strchr(p + 1, ':') : NULL;
		if (!p)
			continue;
		line[strcspn(line, "\n")] = '\0';
		bool v2 = strncmp(line, "0::", 3) == 0;
		if (v2 || !out[0])
			snprintf(out, size, "%s", p + 1);
		if (v2)
			break;
	}
	fclose(f);
}

int peer_identify(int fd, struct identity *who)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return -errno;
	memset(who, 0, sizeof(*who));
	who->pid = (uint32_t)cred.pid;
	who->uid = cred.uid;
	who->gid = cred.gid;
	snprintf(who->name, sizeof(who->name), "pid%d", cred.pid);
	if (cred.pid <= 0)
		return 0; /* outside vramd's PID namespace: no /proc entry */
	int pidfd = peer_pidfd(fd, cred.pid);
	if (pidfd < 0)
		return 0;
	cgroup_read(cred.pid, who->cgroup, sizeof(who->cgroup));
	/* Dead now: the pid may be another process's already. */
	if (syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) < 0) {
		log_debug("peer pid %d went away while identified", cred.pid);
		who->cgroup[0] = '\0';
	}
	close(pidfd);
	return 0;
}

bool peer_in_cgroup(const struct identity *who, const char *path)
{
	size_t n = strlen(path);

	while (n > 1 && path[n - 1] == '/')
		n--; /* "/a/" is "/a" */
	if (!who->cgroup[0] || strncmp(who->cgroup, path, n) != 0)
		return false;
	return who->cgroup[n] == '\0' || who->cgroup[n] == '/' || n == 1;
}
