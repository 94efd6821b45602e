/* SPDX-License-Identifier: Apache-2.0 */
/* Column-aligned tables for vramctl's text output. Cells are kept until the
 * table is printed, because a column is as wide as its widest cell. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "vramctl.h"

#define TABLE_MAX_COLS 32

struct table {
	const struct table_column *cols;
	size_t n_cols;
	char **cells; /* row-major, n_cells of cap */
	size_t n_cells;
	size_t cap;
	int err; /* the first failure of table_cell(), reported by print */
};

struct table *table_new(const struct table_column *cols, size_t n)
{
	struct table *t;

	if (n == 0 || n > TABLE_MAX_COLS)
		return NULL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->cols = cols;
	t->n_cols = n;
	return t;
}

int table_cell(struct table *t, const char *fmt, ...)
{
	char raw[CTL_FMT_MAX], safe[CTL_FMT_MAX];
	va_list ap;
	char *cell;

	if (t->err)
		return t->err;
	if (t->n_cells == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 64;
		char **cells = realloc(t->cells, cap * sizeof(*cells));
		if (!cells)
			return t->err = -ENOMEM;
		t->cells = cells;
		t->cap = cap;
	}
	va_start(ap, fmt);
	vsnprintf(raw, sizeof(raw), fmt, ap);
	va_end(ap);
	cell = strdup(fmt_safe(raw, safe, sizeof(safe)));
	if (!cell)
		return t->err = -ENOMEM;
	t->cells[t->n_cells++] = cell;
	return 0;
}

static void table_pad(FILE *f, size_t n)
{
	while (n--)
		fputc(' ', f);
}

/* Prints one line: cells[0..n_cols). The last column is not padded when
 * left-aligned, so lines carry no trailing blanks. */
static void table_line(const struct table *t, FILE *f, unsigned indent,
		       const char *const *cells, const size_t *width)
{
	table_pad(f, indent);
	for (size_t c = 0; c < t->n_cols; c++) {
		size_t w = fmt_width(cells[c]);
		bool last = c + 1 == t->n_cols;

		if (c > 0)
			fputs("  ", f);
		if (t->cols[c].align == TABLE_RIGHT)
			table_pad(f, width[c] - w);
		fputs(cells[c], f);
		if (t->cols[c].align == TABLE_LEFT && !last)
			table_pad(f, width[c] - w);
	}
	fputc('\n', f);
}

int table_print(const struct table *t, FILE *f, unsigned indent)
{
	const char *headers[TABLE_MAX_COLS];
	size_t width[TABLE_MAX_COLS];

	if (t->err)
		return t->err;
	if (t->n_cells % t->n_cols != 0)
		return -EINVAL;
	for (size_t c = 0; c < t->n_cols; c++) {
		headers[c] = t->cols[c].header;
		width[c] = fmt_width(headers[c]);
	}
	for (size_t i = 0; i < t->n_cells; i++) {
		size_t w = fmt_width(t->cells[i]);
		size_t c = i % t->n_cols;
		if (w > width[c])
			width[c] = w;
	}
	table_line(t, f, indent, headers, width);
	for (size_t i = 0; i < t->n_cells; i += t->n_cols)
		table_line(t, f, indent, (const char *const *)t->cells + i,
			   width);
	return 0;
}

void table_free(struct table *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n_cells; i++)
		free(t->cells[i]);
	free(t->cells);
	free(t);
}
