/* SPDX-License-Identifier: Apache-2.0 */
/* Quotas per uid and per group (vramd.conf's quota lines): pools, device
 * bytes on each device, host backup bytes. A pool counts against its
 * owner's uid and the owner's (primary) group as they were when it was
 * made. Root is not held to quotas. docs/security.md says how to set
 * them. */
#ifndef VRAMD_QUOTA_H
#define VRAMD_QUOTA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#define QUOTA_MAX_RULES 64
#define QUOTA_UNLIMITED UINT64_MAX

enum quota_subject { QUOTA_DEFAULT, QUOTA_UID, QUOTA_GID };

/* One "quota = SUBJECT pools=N device=SIZE host=SIZE" line. */
struct quota_rule {
	enum quota_subject subject;
	uint32_t id;				  /* the uid or gid */
	uint64_t pools, device_bytes, host_bytes; /* QUOTA_UNLIMITED: none */
};

struct quota_set {
	struct quota_rule rules[QUOTA_MAX_RULES];
	unsigned n;
};

/* What a uid or group holds, summed by the caller over its pools. */
struct quota_usage {
	uint64_t pools;
	uint64_t device_bytes; /* on the device in question */
	uint64_t host_bytes;
};

/* Parses one rule's text ("uid:1000 pools=8 device=4G host=16G",
 * "group:ml device=40G", "default pools=16"; names are looked up now)
 * and adds it, replacing an earlier rule for the same subject. Returns 0
 * or -EINVAL (or -ENOSPC past QUOTA_MAX_RULES). */
int quota_parse(struct quota_set *q, const char *text);

/* The rule for uid (its own, else the default), and the one for gid
 * (NULL when none). */
const struct quota_rule *quota_for_uid(const struct quota_set *q, uint32_t uid);
const struct quota_rule *quota_for_gid(const struct quota_set *q, uint32_t gid);

/* Whether usage plus the asked-for amounts stays within rule (NULL: no
 * limit). On refusal, why says which limit. */
bool quota_allows(const struct quota_rule *rule, const struct quota_usage *u,
		  uint64_t more_pools, uint64_t more_device, uint64_t more_host,
		  char *why, size_t len);

struct node;
struct identity;

/* Checks a request of who (root passes) against the quotas of its uid
 * and its group: more_pools new pools, more_bytes on device (counted as
 * host backup bytes too when host_backup). Sums the usage over the
 * node's pools. Returns 0, or -EDQUOT with the reason in why. */
int quota_check(const struct quota_set *q, const struct node *n,
		const struct identity *who, unsigned device,
		uint64_t more_pools, uint64_t more_bytes, bool host_backup,
		char *why, size_t len);

/* One line of a status report: a uid's or a group's limits (those that
 * quota_check holds it to) and what its pools hold now. */
struct quota_line {
	bool group;	   /* a gid's (pools whose owner has it as primary
			    * group); else a uid's */
	uint32_t id;	   /* the uid or gid */
	bool from_default; /* a uid without its own rule: the default's */
	bool exempt;	   /* root: not held to quotas */
	uint64_t pools_limit, device_limit, host_limit; /* QUOTA_UNLIMITED */
	uint64_t pools, host_bytes;
	uint64_t device_bytes[BACKEND_MAX_DEVICES]; /* by device index */
};

/* What `vramctl status` shows of quotas to who: its own uid's line and,
 * when a rule names its group, its group's; to an admin (root or the
 * admin group), the caller's own line, then every uid and every group
 * that has a rule or pools, by id. *out (free() it) and the count, or
 * -ENOMEM. */
int quota_report(const struct quota_set *q, const struct node *n,
		 const struct identity *who, bool admin,
		 struct quota_line **out);

#endif
