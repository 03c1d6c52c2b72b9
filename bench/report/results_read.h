/* A results CSV and its JSON context read back (--resume, bench merge), as if a
 * stranger wrote them: the rows grouped into their (model, backend, batch, dtype,
 * tokens, kv_len) sets, and each set checked to be whole before it counts as finished.
 *
 * A set is whole when the JSON context beside the CSV lists it as completed with the
 * number of rows it wrote ("rows", report_csv_rows), the CSV holds exactly that many,
 * and no row is there twice (the same mode, layer index and part). A CSV cut short, a
 * set the JSON never confirmed (its CSV write failed, a checkpoint never ran), or rows
 * pasted twice are caught here, never counted as done. Everything is O(n log n) in the
 * rows. */
#ifndef LAYERBENCH_RESULTS_READ_H
#define LAYERBENCH_RESULTS_READ_H

#include <jansson.h>

#include "csv_read.h"
#include "report.h"

/* The largest JSON context read back. */
#define RESULTS_JSON_MAX_BYTES ((size_t)64 << 20)

typedef struct results_set {
    report_set key;        /* backend, batch, dtype, tokens, kv_len (-1: empty cells) */
    const char *model;     /* the model column (borrowed from the table) */
    int64_t first_row;     /* its first row, to keep the file's order */
    int64_t n_rows;        /* rows the CSV holds */
    int64_t json_rows;     /* rows the JSON context says it wrote; -1: not listed there */
    int64_t duplicate_row; /* a row whose key came before in the set (0-based), or -1 */
} results_set;

typedef struct results_file {
    csv_table t;
    results_set *sets;
    int n_sets;
    int *row_set;          /* per row: its set */
    bool has_json;         /* a JSON context was read (results_read_json) */
} results_file;

/* Reads the results CSV at path (csv_read.h) and groups its rows into sets. Its columns
 * must be this version's (report_csv_header). BENCH_ERR_USAGE with "path:line: what"
 * for a file that is not a results CSV or a row whose set cells are not valid. */
bench_status results_read_csv(const char *path, results_file *f, char *err, size_t errlen);

/* Reads the JSON context at path and fills the sets' json_rows from its "completed"
 * list. BENCH_ERR_USAGE when it is not a layerbench JSON context (not JSON, not an
 * object, a completed entry without its fields); a file that is not there is
 * BENCH_OK with has_json false. */
bench_status results_read_json(const char *path, results_file *f, char *err, size_t errlen);
/* The same from a JSON context already parsed (root, borrowed; path for messages). */
bench_status results_take_json(const char *path, const json_t *root, results_file *f, char *err, size_t errlen);

/* Whether set i is whole (above); false with the reason in why ("5 of its 37 rows").
 * Without a JSON context no set is: nothing confirms it finished. */
bool results_set_whole(const results_file *f, int i, char *why, size_t len);

/* Set i's rows appended to b as CSV lines, in the file's order. */
void results_set_csv(const results_file *f, int i, strbuf *b);

/* "batch 8 on cpu in bf16[, 128 tokens after 1024 cached]" */
const char *results_set_describe(const report_set *s, char *buf, size_t len);

void results_free(results_file *f);

#endif
