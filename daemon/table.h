/* SPDX-License-Identifier: Apache-2.0 */
/* The pool table as bytes: what a vramd started from the fd store needs
 * to rebuild its pools (names, tags, owners, policies, layouts, states,
 * backup sizes, mapper identities), kept in a sealed memfd in the store.
 *
 * Format (little-endian, the host's; the table never leaves the node):
 *
 *   header  "VRAMDTBL" | u32 version | u32 n_pools | u64 next_pool_id |
 *           u64 next_event_id | u64 generation
 *   pool    u32 length of the fields that follow, then fields
 *   field   u16 tag | u16 flags | u32 length | length bytes
 *
 * A reader skips the fields whose tag it does not know, so a newer table
 * is read by an older vramd and an older one by a newer vramd; a field
 * with TABLE_FIELD_MUST in its flags is one a reader that does not know it
 * must not ignore (the pool would come back wrong): that pool is then
 * dropped with an error in the log instead of being rebuilt wrongly.
 *
 * Version 1 had the pool's fields 1-12 and chunk fields of 16 bytes;
 * version 2 adds the chunk's "held" byte (17 bytes), the mappers (13) and
 * the owner's session id (14). Tags 32-47 are kept for the backup
 * policies (issue 9: where a backup lives, how long it is kept), 48-63
 * for limits and quotas; 64 up for whatever comes next. */
#ifndef VRAMD_TABLE_H
#define VRAMD_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "pool.h"

#define TABLE_VERSION 2
#define TABLE_MAGIC "VRAMDTBL"
#define TABLE_FIELD_MUST 0x1

enum table_tag {
	TABLE_ID = 1,	      /* u64 */
	TABLE_NAME = 2,	      /* bytes */
	TABLE_TAG = 3,	      /* bytes */
	TABLE_DEVICE = 4,     /* u32 */
	TABLE_POLICY = 5,     /* u32: enum pool_policy */
	TABLE_FLAGS = 6,      /* u32 */
	TABLE_RESERVE = 7,    /* u64 */
	TABLE_STATE = 8,      /* u32: enum pool_state */
	TABLE_BYTES = 9,      /* u64 */
	TABLE_BACKUP = 10,    /* u64: bytes of valid backup, 0 if none */
	TABLE_OWNER = 11,     /* identity: u32 pid, uid, gid, name[64] */
	TABLE_CHUNK = 12,     /* u64 offset, u64 size (v2: u8 held) */
	TABLE_MAPPER = 13,    /* identity, u8 readonly */
	TABLE_OWNER_SID = 14, /* u64: the owner's session id, 0 if none */
	TABLE_SAVED = 15,     /* u32: chunks a save in parts under way has
			       * saved and let go of (0: none, or it
			       * failed) */
};

struct table_chunk {
	uint64_t offset, size;
	int held; /* the daemon held its fd: 1, 0, or -1 unknown (v1) */
};

struct table_mapper {
	struct identity who;
	int readonly;
};

struct table_pool {
	uint64_t id;
	char name[POOL_NAME_MAX];
	char tag[POOL_TAG_MAX];
	unsigned device;
	enum pool_policy policy;
	unsigned flags;
	uint64_t reserve;
	enum pool_state state;
	uint64_t bytes;
	uint64_t backup_bytes;
	struct identity owner;
	uint64_t owner_sid;
	unsigned saved;
	struct table_chunk *chunks;
	unsigned n_chunks;
	struct table_mapper *mappers;
	unsigned n_mappers;
	int unknown_must; /* a field it must understand and does not */
};

struct table {
	uint32_t version;
	uint64_t next_pool_id, next_event_id, generation;
	struct table_pool *pools;
	unsigned n_pools;
};

/* A growing byte buffer. */
struct table_buf {
	unsigned char *data;
	size_t len, cap;
	int err;
};

/* Writes the header of a table of n pools. */
void table_put_header(struct table_buf *b, uint32_t version, uint32_t n,
		      uint64_t next_pool_id, uint64_t next_event_id,
		      uint64_t generation);
/* Writes one pool record (owner_sid: its owner's session id or 0; held
 * bits are the chunks' fd >= 0). */
void table_put_pool(struct table_buf *b, const struct pool *p,
		    uint64_t owner_sid);
/* A field, for writers of older or newer tables (tests). */
void table_put_field(struct table_buf *b, uint16_t tag, uint16_t flags,
		     const void *data, uint32_t len);
void table_buf_free(struct table_buf *b);

/* Reads a table. Returns 0, -EINVAL (not a table, or damaged), -ENOMEM.
 * Free with table_free. */
int table_parse(const unsigned char *data, size_t len, struct table *out);
void table_free(struct table *t);

#endif
