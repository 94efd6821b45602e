/* SPDX-License-Identifier: Apache-2.0 */
/* The pool table's bytes (the format is in table.h). */
#include "table.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void buf_put(struct table_buf *b, const void *data, size_t len)
{
	if (b->err)
		return;
	if (b->len + len > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + len)
			cap *= 2;
		unsigned char *d = realloc(b->data, cap);
		if (!d) {
			b->err = -ENOMEM;
			return;
		}
		b->data = d;
		b->cap = cap;
	}
	memcpy(b->data + b->len, data, len);
	b->len += len;
}

void table_buf_free(struct table_buf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

void table_put_header(struct table_buf *b, uint32_t version, uint32_t n,
		      uint64_t next_pool_id, uint64_t next_event_id,
		      uint64_t generation)
{
	buf_put(b, TABLE_MAGIC, 8);
	buf_put(b, &version, 4);
	buf_put(b, &n, 4);
	buf_put(b, &next_pool_id, 8);
	buf_put(b, &next_event_id, 8);
	buf_put(b, &generation, 8);
}

void table_put_field(struct table_buf *b, uint16_t tag, uint16_t flags,
		     const void *data, uint32_t len)
{
	buf_put(b, &tag, 2);
	buf_put(b, &flags, 2);
	buf_put(b, &len, 4);
	buf_put(b, data, len);
}

static void put_u32(struct table_buf *b, uint16_t tag, uint32_t v)
{
	table_put_field(b, tag, 0, &v, 4);
}

static void put_u64(struct table_buf *b, uint16_t tag, uint64_t v)
{
	table_put_field(b, tag, 0, &v, 8);
}

/* An identity as 12 bytes of ids and 64 of name. */
static void put_identity(unsigned char *out, const struct identity *who)
{
	memcpy(out, &who->pid, 4);
	memcpy(out + 4, &who->uid, 4);
	memcpy(out + 8, &who->gid, 4);
	memset(out + 12, 0, 64);
	memcpy(out + 12, who->name, strnlen(who->name, 63));
}

static void get_identity(const unsigned char *in, struct identity *who)
{
	memcpy(&who->pid, in, 4);
	memcpy(&who->uid, in + 4, 4);
	memcpy(&who->gid, in + 8, 4);
	memcpy(who->name, in + 12, 63);
	who->name[63] = '\0';
}

#define IDENTITY_LEN 76

void table_put_pool(struct table_buf *b, const struct pool *p,
		    uint64_t owner_sid)
{
	unsigned char id[IDENTITY_LEN + 1];
	uint32_t len = 0;
	size_t at = b->len;

	/* The record's length goes first: written as 0, set once the fields
	 * are in (straight into b, with no buffer of its own). */
	buf_put(b, &len, 4);
	put_u64(b, TABLE_ID, p->id);
	table_put_field(b, TABLE_NAME, 0, p->name, (uint32_t)strlen(p->name));
	table_put_field(b, TABLE_TAG, 0, p->tag, (uint32_t)strlen(p->tag));
	put_u32(b, TABLE_DEVICE, p->device);
	put_u32(b, TABLE_POLICY, p->policy);
	put_u32(b, TABLE_FLAGS, p->flags);
	put_u64(b, TABLE_RESERVE, p->reserve);
	put_u32(b, TABLE_STATE, p->state);
	put_u64(b, TABLE_BYTES, p->bytes);
	put_u64(b, TABLE_BACKUP, p->backup_valid ? p->bytes : 0);
	if (p->saved && !p->save_failed)
		put_u32(b, TABLE_SAVED, p->saved);
	/* An orphan's too (pid 0): its uid scopes its name and its rights
	 * (an older table without it gives the pool to uid 0). */
	put_identity(id, &p->owner_id);
	table_put_field(b, TABLE_OWNER, 0, id, IDENTITY_LEN);
	put_u64(b, TABLE_OWNER_SID, owner_sid);
	for (unsigned i = 0; i < p->n_chunks; i++) {
		unsigned char c[17];
		memcpy(c, &p->chunks[i].offset, 8);
		memcpy(c + 8, &p->chunks[i].size, 8);
		c[16] = p->chunks[i].fd >= 0;
		table_put_field(b, TABLE_CHUNK, 0, c, sizeof(c));
	}
	for (const struct mapper *m = p->mappers; m; m = m->next) {
		put_identity(id, &m->who);
		id[IDENTITY_LEN] = m->readonly;
		table_put_field(b, TABLE_MAPPER, 0, id, IDENTITY_LEN + 1);
	}
	if (b->err)
		return;
	len = (uint32_t)(b->len - at - 4);
	memcpy(b->data + at, &len, 4);
}

static uint64_t get_uint(const unsigned char *d, uint32_t len)
{
	uint64_t v = 0;
	if (len == 4) {
		uint32_t w;
		memcpy(&w, d, 4);
		v = w;
	} else if (len == 8) {
		memcpy(&v, d, 8);
	}
	return v;
}

static int grow_array(void **a, unsigned n, size_t elem)
{
	/* Doubling at powers of two: n is the count before the new one. */
	if (n & (n - 1) && n)
		return 0;
	void *na = realloc(*a, (n ? 2 * n : 1) * elem);
	if (!na)
		return -ENOMEM;
	*a = na;
	return 0;
}

static int parse_pool(const unsigned char *d, size_t len, uint32_t version,
		      struct table_pool *p)
{
	size_t off = 0;

	memset(p, 0, sizeof(*p));
	while (off < len) {
		uint16_t tag, flags;
		uint32_t flen;
		if (len - off < 8)
			return -EINVAL;
		memcpy(&tag, d + off, 2);
		memcpy(&flags, d + off + 2, 2);
		memcpy(&flen, d + off + 4, 4);
		off += 8;
		if (flen > len - off)
			return -EINVAL;
		const unsigned char *v = d + off;
		off += flen;
		switch (tag) {
		case TABLE_ID:
			p->id = get_uint(v, flen);
			break;
		case TABLE_NAME:
		case TABLE_TAG: {
			char *s = tag == TABLE_NAME ? p->name : p->tag;
			size_t max = tag == TABLE_NAME ? POOL_NAME_MAX :
							 POOL_TAG_MAX;
			if (flen >= max)
				return -EINVAL;
			memcpy(s, v, flen);
			s[flen] = '\0';
			break;
		}
		case TABLE_DEVICE:
			p->device = (unsigned)get_uint(v, flen);
			break;
		case TABLE_POLICY:
			p->policy = (enum pool_policy)get_uint(v, flen);
			break;
		case TABLE_FLAGS:
			p->flags = (unsigned)get_uint(v, flen);
			break;
		case TABLE_RESERVE:
			p->reserve = get_uint(v, flen);
			break;
		case TABLE_STATE:
			p->state = (enum pool_state)get_uint(v, flen);
			break;
		case TABLE_BYTES:
			p->bytes = get_uint(v, flen);
			break;
		case TABLE_BACKUP:
			p->backup_bytes = get_uint(v, flen);
			break;
		case TABLE_OWNER_SID:
			p->owner_sid = get_uint(v, flen);
			break;
		case TABLE_SAVED:
			p->saved = (unsigned)get_uint(v, flen);
			break;
		case TABLE_OWNER:
			if (flen < IDENTITY_LEN)
				return -EINVAL;
			get_identity(v, &p->owner);
			break;
		case TABLE_CHUNK: {
			if (flen < 16)
				return -EINVAL;
			if (grow_array((void **)&p->chunks, p->n_chunks,
				       sizeof(*p->chunks)) < 0)
				return -ENOMEM;
			struct table_chunk *c = &p->chunks[p->n_chunks++];
			memcpy(&c->offset, v, 8);
			memcpy(&c->size, v + 8, 8);
			c->held = flen > 16 && version >= 2 ? v[16] != 0 : -1;
			break;
		}
		case TABLE_MAPPER: {
			if (flen < IDENTITY_LEN + 1)
				return -EINVAL;
			if (grow_array((void **)&p->mappers, p->n_mappers,
				       sizeof(*p->mappers)) < 0)
				return -ENOMEM;
			struct table_mapper *m = &p->mappers[p->n_mappers++];
			get_identity(v, &m->who);
			m->readonly = v[IDENTITY_LEN] != 0;
			break;
		}
		default:
			if (flags & TABLE_FIELD_MUST)
				p->unknown_must = tag;
			break;
		}
	}
	if (!p->id || !p->name[0] || !p->reserve ||
	    (p->policy != POOL_DISCARD && p->policy != POOL_HOST) ||
	    p->state > POOL_PAUSING_UNDO)
		return -EINVAL;
	return 0;
}

int table_parse(const unsigned char *data, size_t len, struct table *out)
{
	size_t off = 40;
	uint32_t n;
	int r = 0;

	memset(out, 0, sizeof(*out));
	if (len < 40 || memcmp(data, TABLE_MAGIC, 8) != 0)
		return -EINVAL;
	memcpy(&out->version, data + 8, 4);
	memcpy(&n, data + 12, 4);
	memcpy(&out->next_pool_id, data + 16, 8);
	memcpy(&out->next_event_id, data + 24, 8);
	memcpy(&out->generation, data + 32, 8);
	if (out->version == 0 || n > (len - 40) / 4)
		return -EINVAL;
	out->pools = calloc(n ? n : 1, sizeof(*out->pools));
	if (!out->pools)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t rlen;
		if (len - off < 4) {
			r = -EINVAL;
			break;
		}
		memcpy(&rlen, data + off, 4);
		off += 4;
		if (rlen > len - off) {
			r = -EINVAL;
			break;
		}
		out->n_pools++;
		r = parse_pool(data + off, rlen, out->version, &out->pools[i]);
		if (r < 0)
			break;
		off += rlen;
	}
	if (r < 0)
		table_free(out);
	return r;
}

void table_free(struct table *t)
{
	for (unsigned i = 0; i < t->n_pools; i++) {
		free(t->pools[i].chunks);
		free(t->pools[i].mappers);
	}
	free(t->pools);
	memset(t, 0, sizeof(*t));
}
