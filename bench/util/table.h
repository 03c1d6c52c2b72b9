/* Tables for the console and for markdown: every table bench prints (per layer,
 * grouped, blocks, the sweep, list, compare) is built as rows of strings, then written
 * as aligned text or as a GitHub markdown table (--format md). */
#ifndef LAYERBENCH_TABLE_H
#define LAYERBENCH_TABLE_H

#include <stdbool.h>
#include <stdio.h>

typedef enum table_format { TABLE_TEXT = 0, TABLE_MD } table_format;

/* "text" or "md"; false for anything else. */
bool table_format_parse(const char *s, table_format *f);

typedef struct table table;

/* ncols columns; align holds one letter per column: 'l' left, 'r' right. */
table *table_create(int ncols, const char *align);
/* A column's header, and the most characters text output shows of its cells (0: all;
 * markdown always shows all). */
void table_header(table *t, int col, const char *header, int max_width);
/* Appends a row of ncols cells (copied; NULL is an empty cell). */
void table_row(table *t, const char *const *cells);
/* The same, printf-style for one cell at a time: table_cell() fills the next cell of the
 * row being built; table_end_row() closes it. */
void table_cell(table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void table_end_row(table *t);
int table_rows(const table *t);
/* Text: columns padded to their widest cell, two spaces apart, each line after indent;
 * the last column is not padded. Markdown: a header, the alignment row, and the rows,
 * with '|' escaped; indent is not used. */
void table_print(const table *t, FILE *out, table_format f, const char *indent);
void table_free(table *t);

/* A heading: text "title:" on its own line after a blank one; markdown "### title". */
void table_heading(FILE *out, table_format f, int level, const char *title);

#endif
