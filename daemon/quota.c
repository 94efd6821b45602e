/* SPDX-License-Identifier: Apache-2.0 */
/* Quotas per uid and per group: see quota.h. */
#include "quota.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"
#include "pool.h"

/* "8G", "512M", "4096", "none" → bytes (QUOTA_UNLIMITED for none). */
static int quota_parse_amount(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	if (strcmp(s, "none") == 0 || strcmp(s, "unlimited") == 0) {
		*out = QUOTA_UNLIMITED;
		return 0;
	}
	if (*s < '0' || *s > '9')
		return -EINVAL;
	v = strtoull(s, &end, 10);
	switch (*end) {
	case 'K':
	case 'k':
		shift = 10;
		end++;
		break;
	case 'M':
	case 'm':
		shift = 20;
		end++;
		break;
	case 'G':
	case 'g':
		shift = 30;
		end++;
		break;
	case 'T':
	case 't':
		shift = 40;
		end++;
		break;
	default:
		break;
	}
	if (*end == 'i')
		end++;
	if (*end == 'B')
		end++;
	if (*end || (shift && v > (QUOTA_UNLIMITED >> shift)))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

static int quota_parse_subject(const char *s, struct quota_rule *r)
{
	char *end;

	if (strcmp(s, "default") == 0) {
		r->subject = QUOTA_DEFAULT;
		return 0;
	}
	if (!strncmp(s, "uid:", 4) || !strncmp(s, "gid:", 4)) {
		unsigned long v = strtoul(s + 4, &end, 10);
		if (end == s + 4 || *end || v > UINT32_MAX)
			return -EINVAL;
		r->subject = s[0] == 'u' ? QUOTA_UID : QUOTA_GID;
		r->id = (uint32_t)v;
		return 0;
	}
	if (!strncmp(s, "user:", 5)) {
		struct passwd *pw = getpwnam(s + 5);
		if (!pw)
			return -EINVAL;
		r->subject = QUOTA_UID;
		r->id = pw->pw_uid;
		return 0;
	}
	if (!strncmp(s, "group:", 6)) {
		struct group *gr = getgrnam(s + 6);
		if (!gr)
			return -EINVAL;
		r->subject = QUOTA_GID;
		r->id = gr->gr_gid;
		return 0;
	}
	return -EINVAL;
}

int quota_parse(struct quota_set *q, const char *text)
{
	struct quota_rule r = { .pools = QUOTA_UNLIMITED,
				.device_bytes = QUOTA_UNLIMITED,
				.host_bytes = QUOTA_UNLIMITED };
	char buf[256], *save = NULL, *tok;
	bool first = true;

	if (strlen(text) >= sizeof(buf))
		return -EINVAL;
	snprintf(buf, sizeof(buf), "%s", text);
	for (tok = strtok_r(buf, " \t", &save); tok;
	     tok = strtok_r(NULL, " \t", &save)) {
		if (first) {
			if (quota_parse_subject(tok, &r) < 0)
				return -EINVAL;
			first = false;
			continue;
		}
		char *eq = strchr(tok, '=');
		if (!eq)
			return -EINVAL;
		*eq = '\0';
		uint64_t *field = !strcmp(tok, "pools")	 ? &r.pools :
				  !strcmp(tok, "device") ? &r.device_bytes :
				  !strcmp(tok, "host")	 ? &r.host_bytes :
							   NULL;
		if (!field || quota_parse_amount(eq + 1, field) < 0)
			return -EINVAL;
	}
	if (first)
		return -EINVAL;
	for (unsigned i = 0; i < q->n; i++) {
		if (q->rules[i].subject == r.subject &&
		    (r.subject == QUOTA_DEFAULT || q->rules[i].id == r.id)) {
			q->rules[i] = r;
			return 0;
		}
	}
	if (q->n == QUOTA_MAX_RULES)
		return -ENOSPC;
	q->rules[q->n++] = r;
	return 0;
}

static const struct quota_rule *
quota_find(const struct quota_set *q, enum quota_subject subject, uint32_t id)
{
	for (unsigned i = 0; i < q->n; i++)
		if (q->rules[i].subject == subject &&
		    (subject == QUOTA_DEFAULT || q->rules[i].id == id))
			return &q->rules[i];
	return NULL;
}

const struct quota_rule *quota_for_uid(const struct quota_set *q, uint32_t uid)
{
	const struct quota_rule *r = quota_find(q, QUOTA_UID, uid);
	return r ? r : quota_find(q, QUOTA_DEFAULT, 0);
}

const struct quota_rule *quota_for_gid(const struct quota_set *q, uint32_t gid)
{
	return quota_find(q, QUOTA_GID, gid);
}

/* Whether have + more passes limit, without overflowing. */
static bool quota_over(uint64_t have, uint64_t more, uint64_t limit)
{
	return limit != QUOTA_UNLIMITED && more > 0 &&
	       (have > limit || more > limit - have);
}

bool quota_allows(const struct quota_rule *rule, const struct quota_usage *u,
		  uint64_t more_pools, uint64_t more_device, uint64_t more_host,
		  char *why, size_t len)
{
	const char *who = !rule			     ? "" :
			  rule->subject == QUOTA_GID ? "group " :
						       "uid ";

	if (!rule)
		return true;
	if (quota_over(u->pools, more_pools, rule->pools)) {
		snprintf(why, len, "the %squota of %llu pools is reached", who,
			 (unsigned long long)rule->pools);
		return false;
	}
	if (quota_over(u->device_bytes, more_device, rule->device_bytes)) {
		snprintf(
			why, len,
			"the %squota of %llu device bytes would be passed (%llu held, %llu asked)",
			who, (unsigned long long)rule->device_bytes,
			(unsigned long long)u->device_bytes,
			(unsigned long long)more_device);
		return false;
	}
	if (quota_over(u->host_bytes, more_host, rule->host_bytes)) {
		snprintf(
			why, len,
			"the %squota of %llu host backup bytes would be passed (%llu held, %llu asked)",
			who, (unsigned long long)rule->host_bytes,
			(unsigned long long)u->host_bytes,
			(unsigned long long)more_host);
		return false;
	}
	return true;
}

int quota_check(const struct quota_set *q, const struct node *n,
		const struct identity *who, unsigned device,
		uint64_t more_pools, uint64_t more_bytes, bool host_backup,
		char *why, size_t len)
{
	const struct quota_rule *ur, *gr;
	struct quota_usage uu = { 0 }, gu = { 0 };

	if (who->uid == 0 || q->n == 0)
		return 0;
	ur = quota_for_uid(q, who->uid);
	gr = quota_for_gid(q, who->gid);
	if (!ur && !gr)
		return 0;
	for (unsigned i = 0; i < n->n_pools; i++) {
		const struct pool *p = n->pools[i];
		struct quota_usage *u[2] = {
			p->owner_id.uid == who->uid ? &uu : NULL,
			p->owner_id.gid == who->gid ? &gu : NULL,
		};
		for (int k = 0; k < 2; k++) {
			if (!u[k])
				continue;
			u[k]->pools++;
			if (p->device == device)
				u[k]->device_bytes += p->bytes;
			if (p->policy == POOL_HOST)
				u[k]->host_bytes += p->bytes;
		}
	}
	uint64_t host = host_backup ? more_bytes : 0;
	if (!quota_allows(ur, &uu, more_pools, more_bytes, host, why, len) ||
	    !quota_allows(gr, &gu, more_pools, more_bytes, host, why, len))
		return -EDQUOT;
	return 0;
}

/* The report's lines as they are gathered: find or add. */
struct quota_lines {
	struct quota_line *a;
	unsigned n, cap;
};

static struct quota_line *quota_line_get(struct quota_lines *ls, bool group,
					 uint32_t id)
{
	for (unsigned i = 0; i < ls->n; i++)
		if (ls->a[i].group == group && ls->a[i].id == id)
			return &ls->a[i];
	if (ls->n == ls->cap) {
		unsigned cap = ls->cap ? 2 * ls->cap : 8;
		struct quota_line *a = realloc(ls->a, cap * sizeof(*a));
		if (!a)
			return NULL;
		ls->a = a;
		ls->cap = cap;
	}
	struct quota_line *l = &ls->a[ls->n++];
	memset(l, 0, sizeof(*l));
	l->group = group;
	l->id = id;
	return l;
}

/* A line's limits: those quota_check holds the uid or group to. */
static void quota_line_limits(const struct quota_set *q, struct quota_line *l)
{
	const struct quota_rule *r;

	if (l->group) {
		r = quota_for_gid(q, l->id);
	} else {
		r = quota_find(q, QUOTA_UID, l->id);
		if (!r) {
			r = quota_find(q, QUOTA_DEFAULT, 0);
			l->from_default = r != NULL;
		}
		l->exempt = l->id == 0;
	}
	l->pools_limit = r && !l->exempt ? r->pools : QUOTA_UNLIMITED;
	l->device_limit = r && !l->exempt ? r->device_bytes : QUOTA_UNLIMITED;
	l->host_limit = r && !l->exempt ? r->host_bytes : QUOTA_UNLIMITED;
}

/* Uids before groups, each by id (the caller's own line is kept out of
 * the sort, first). */
static int quota_line_order(const void *a, const void *b)
{
	const struct quota_line *x = a, *y = b;
	if (x->group != y->group)
		return x->group ? 1 : -1;
	return x->id < y->id ? -1 : x->id > y->id;
}

int quota_report(const struct quota_set *q, const struct node *n,
		 const struct identity *who, bool admin,
		 struct quota_line **out)
{
	struct quota_lines ls = { 0 };
	bool ok = quota_line_get(&ls, false, who->uid) != NULL;

	*out = NULL;
	if (ok && quota_for_gid(q, who->gid))
		ok = quota_line_get(&ls, true, who->gid) != NULL;
	for (unsigned i = 0; admin && ok && i < q->n; i++)
		if (q->rules[i].subject != QUOTA_DEFAULT)
			ok = quota_line_get(&ls, q->rules[i].subject == QUOTA_GID,
					    q->rules[i].id) != NULL;
	for (unsigned i = 0; ok && i < n->n_pools; i++) {
		const struct pool *p = n->pools[i];
		const struct quota_line *l;
		int at[2] = { -1, -1 };
		/* A non-admin's report counts only the lines it has; an
		 * admin's gets a line for every owner and group. Indices,
		 * not pointers: quota_line_get may move the array. */
		if (admin) {
			ok = (l = quota_line_get(&ls, false, p->owner_id.uid));
			at[0] = ok ? (int)(l - ls.a) : -1;
			ok = ok && (l = quota_line_get(&ls, true, p->owner_id.gid));
			at[1] = ok ? (int)(l - ls.a) : -1;
		}
		for (unsigned k = 0; !admin && k < ls.n; k++)
			if (ls.a[k].id == (ls.a[k].group ? p->owner_id.gid :
							   p->owner_id.uid))
				at[ls.a[k].group] = (int)k;
		for (int k = 0; ok && k < 2; k++) {
			if (at[k] < 0)
				continue;
			struct quota_line *u = &ls.a[at[k]];
			u->pools++;
			if (p->device < BACKEND_MAX_DEVICES)
				u->device_bytes[p->device] += p->bytes;
			if (p->policy == POOL_HOST)
				u->host_bytes += p->bytes;
		}
	}
	if (!ok) {
		free(ls.a);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < ls.n; i++)
		quota_line_limits(q, &ls.a[i]);
	/* The caller's own line stays first. */
	if (ls.n > 2)
		qsort(ls.a + 1, ls.n - 1, sizeof(*ls.a), quota_line_order);
	*out = ls.a;
	return (int)ls.n;
}
