/* Reading CSV files as RFC 4180 says (a UTF-8 byte-order mark first is skipped) (quoted fields, doubled quotes, commas and line
 * breaks inside quotes; \n or \r\n line ends): what `bench compare` reads. Every row
 * must have as many fields as the header. */
#ifndef LAYERBENCH_CSV_READ_H
#define LAYERBENCH_CSV_READ_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

typedef struct csv_table {
    int n_cols;
    int64_t n_rows;       /* data rows, the header not counted */
    char **cells;         /* (n_rows + 1) x n_cols, row 0 the header; pointers into arena */
    char *arena;          /* every cell's text, owned */
    int64_t *lines;       /* per data row: the line it starts on (from 1, the header's), for messages */
} csv_table;

/* Largest CSV read: 512 MiB. */
#define CSV_MAX_BYTES ((size_t)512 << 20)

/* Parses len bytes of text (name is for messages). On failure: BENCH_ERR_USAGE and
 * "name:line: what is wrong" in err; t needs no free. */
bench_status csv_parse(const char *name, const char *text, size_t len, csv_table *t, char *err, size_t errlen);
/* Reads and parses the file at path (a regular file, at most CSV_MAX_BYTES). */
bench_status csv_read_file(const char *path, csv_table *t, char *err, size_t errlen);

/* The column named name, or -1. */
int csv_col(const csv_table *t, const char *name);
/* Cell (row from 0, the first data row; col from csv_col); "" for col < 0. */
const char *csv_cell(const csv_table *t, int64_t row, int col);
/* Frees the cells; csv_table_free of a zeroed table is a no-op. */
void csv_table_free(csv_table *t);

#endif
