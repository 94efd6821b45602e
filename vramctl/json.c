/* SPDX-License-Identifier: Apache-2.0 */
/* A small streaming JSON writer for vramctl --json. It writes as it goes
 * (no tree in memory), indents two spaces per level, and escapes strings so
 * that the output is valid JSON whatever bytes a pool or client name holds:
 * names come from other users' processes and are not trusted to be UTF-8.
 */
#include <errno.h>
#include <inttypes.h>

#include "vramctl.h"

void json_init(struct json *j, FILE *f)
{
	*j = (struct json){ .f = f };
	j->first[0] = true;
}

static void json_indent(struct json *j)
{
	for (int i = 0; i < j->depth; i++)
		fputs("  ", j->f);
}

/* Writes what must come before a value at the current level: nothing at
 * the top, the separator and indentation inside an array, nothing after a
 * key. Returns false (and records the misuse) when no value may go here. */
static bool json_value_prefix(struct json *j)
{
	if (j->err)
		return false;
	if (j->depth == 0) {
		if (!j->first[0]) {
			j->err = -EINVAL; /* a second top-level value */
			return false;
		}
		j->first[0] = false;
		return true;
	}
	if (j->in_object[j->depth]) {
		if (!j->have_key) {
			j->err = -EINVAL;
			return false;
		}
		j->have_key = false;
		return true;
	}
	fputs(j->first[j->depth] ? "\n" : ",\n", j->f);
	j->first[j->depth] = false;
	json_indent(j);
	return true;
}

static void json_open(struct json *j, char c, bool object)
{
	if (!json_value_prefix(j))
		return;
	if (j->depth + 1 >= JSON_MAX_DEPTH) {
		j->err = -EINVAL;
		return;
	}
	fputc(c, j->f);
	j->depth++;
	j->first[j->depth] = true;
	j->in_object[j->depth] = object;
}

static void json_close(struct json *j, char c, bool object)
{
	if (j->err)
		return;
	if (j->depth == 0 || j->in_object[j->depth] != object || j->have_key) {
		j->err = -EINVAL;
		return;
	}
	bool empty = j->first[j->depth];
	j->depth--;
	if (!empty) {
		fputc('\n', j->f);
		json_indent(j);
	}
	fputc(c, j->f);
}

void json_object_begin(struct json *j)
{
	json_open(j, '{', true);
}

void json_object_end(struct json *j)
{
	json_close(j, '}', true);
}

void json_array_begin(struct json *j)
{
	json_open(j, '[', false);
}

void json_array_end(struct json *j)
{
	json_close(j, ']', false);
}

static void json_write_string(FILE *f, const char *str)
{
	const unsigned char *s = (const unsigned char *)str;

	fputc('"', f);
	while (*s) {
		unsigned c = *s;
		switch (c) {
		case '"':
			fputs("\\\"", f);
			break;
		case '\\':
			fputs("\\\\", f);
			break;
		case '\n':
			fputs("\\n", f);
			break;
		case '\r':
			fputs("\\r", f);
			break;
		case '\t':
			fputs("\\t", f);
			break;
		case '\b':
			fputs("\\b", f);
			break;
		case '\f':
			fputs("\\f", f);
			break;
		default:
			if (c < 0x20 || c == 0x7f) {
				fprintf(f, "\\u%04x", c);
			} else {
				size_t len = fmt_utf8_len(s);
				if (len == 0) {
					fputs("\\ufffd", f);
				} else {
					fwrite(s, 1, len, f);
					s += len - 1;
				}
			}
		}
		s++;
	}
	fputc('"', f);
}

void json_key(struct json *j, const char *key)
{
	if (j->err)
		return;
	if (j->depth == 0 || !j->in_object[j->depth] || j->have_key) {
		j->err = -EINVAL;
		return;
	}
	fputs(j->first[j->depth] ? "\n" : ",\n", j->f);
	j->first[j->depth] = false;
	json_indent(j);
	json_write_string(j->f, key);
	fputs(": ", j->f);
	j->have_key = true;
}

void json_string(struct json *j, const char *s)
{
	if (!s) {
		json_null(j);
		return;
	}
	if (json_value_prefix(j))
		json_write_string(j->f, s);
}

void json_uint(struct json *j, uint64_t v)
{
	if (json_value_prefix(j))
		fprintf(j->f, "%" PRIu64, v);
}

void json_int(struct json *j, int64_t v)
{
	if (json_value_prefix(j))
		fprintf(j->f, "%" PRId64, v);
}

void json_bool(struct json *j, bool v)
{
	if (json_value_prefix(j))
		fputs(v ? "true" : "false", j->f);
}

void json_null(struct json *j)
{
	if (json_value_prefix(j))
		fputs("null", j->f);
}

int json_finish(struct json *j)
{
	if (!j->err && (j->depth != 0 || j->first[0]))
		j->err = -EINVAL; /* unclosed, or nothing written */
	if (j->err)
		return j->err;
	fputc('\n', j->f);
	return 0;
}

void json_kv_string(struct json *j, const char *key, const char *s)
{
	json_key(j, key);
	json_string(j, s);
}

void json_kv_uint(struct json *j, const char *key, uint64_t v)
{
	json_key(j, key);
	json_uint(j, v);
}

void json_kv_int(struct json *j, const char *key, int64_t v)
{
	json_key(j, key);
	json_int(j, v);
}

void json_kv_bool(struct json *j, const char *key, bool v)
{
	json_key(j, key);
	json_bool(j, v);
}
