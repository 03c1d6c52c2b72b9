#include "results_read.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"

/* The columns a set's key and a row's place in it are read from. */
enum { C_MODEL, C_BACKEND, C_BATCH, C_DTYPE, C_PASS, C_TOKENS, C_KV, C_MODE, C_INDEX, C_PART, C_COUNT };
static const char *const key_cols[C_COUNT] = {"model", "backend", "batch", "dtype", "pass", "tokens", "kv_len",
                                              "mode", "layer_index", "part"};

/* qsort's comparators see no context: the table being sorted, for the one sort at a time
 * (results are read on one thread). */
static const csv_table *sort_table;
static const int *sort_cols;

static int cmp_cells(int64_t a, int64_t b, int from, int to)
{
    for (int k = from; k < to; k++) {
        int c = strcmp(csv_cell(sort_table, a, sort_cols[k]), csv_cell(sort_table, b, sort_cols[k]));
        if (c)
            return c;
    }
    return 0;
}

/* rows by set key, then by their place in the set, then by position */
static int cmp_rows(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    int c = cmp_cells(a, b, 0, C_COUNT);
    return c ? c : (a > b) - (a < b);
}


/* The name of the first of row r's key cells that layerbench never writes so, or NULL. */
static const char *bad_key_cell(const csv_table *t, int64_t r, const int *col)
{
    long long v;
    const char *backend = csv_cell(t, r, col[C_BACKEND]), *tokens = csv_cell(t, r, col[C_TOKENS]),
               *kv = csv_cell(t, r, col[C_KV]);
    if (!*csv_cell(t, r, col[C_MODEL]))
        return "model";
    if (!*backend || strlen(backend) >= sizeof ((report_set *)0)->backend)
        return "backend";
    if (!fileio_whole_int(csv_cell(t, r, col[C_BATCH]), 1, INT32_MAX, &v))
        return "batch";
    if (dtype_from_name(csv_cell(t, r, col[C_DTYPE])) < 0)
        return "dtype";
    if (layer_pass_from_name(csv_cell(t, r, col[C_PASS])) < 0)
        return "pass";
    if (*tokens && !fileio_whole_int(tokens, 1, INT64_MAX, &v))
        return "tokens";
    if (*kv && !fileio_whole_int(kv, 0, INT64_MAX, &v))
        return "kv_len";
    if (!fileio_whole_int(csv_cell(t, r, col[C_INDEX]), -1, INT32_MAX, &v))
        return "layer_index";
    if (!*csv_cell(t, r, col[C_MODE]))
        return "mode";
    return NULL;
}

static const results_set *sort_sets;

static int cmp_first_row(const void *x, const void *y)
{
    int64_t a = sort_sets[*(const int *)x].first_row, b = sort_sets[*(const int *)y].first_row;
    return (a > b) - (a < b);
}

bench_status results_read_csv(const char *path, results_file *f, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    bench_status st = csv_read_file(path, &f->t, err, errlen);
    if (st != BENCH_OK)
        return st;
    int n_cols;
    const report_column *cols = report_csv_columns(&n_cols);
    bool same = f->t.n_cols == n_cols;
    for (int i = 0; same && i < n_cols; i++)
        same = strcmp(f->t.cells[i], cols[i].name) == 0;
    if (!same) {
        snprintf(err, errlen, "%s: not a layerbench CSV of this version (its header differs)", path);
        results_free(f);
        return BENCH_ERR_USAGE;
    }
    int col[C_COUNT];
    for (int k = 0; k < C_COUNT; k++)
        col[k] = csv_col(&f->t, key_cols[k]);
    int64_t n = f->t.n_rows;
    int64_t *order = xmalloc((size_t)(n ? n : 1) * sizeof *order);
    for (int64_t r = 0; r < n; r++) {
        const char *bad = bad_key_cell(&f->t, r, col);
        if (bad) {
            snprintf(err, errlen, "%s:%lld: its %s cell is not one layerbench writes", path, (long long)f->t.lines[r],
                     bad);
            free(order);
            results_free(f);
            return BENCH_ERR_USAGE;
        }
        order[r] = r;
    }
    sort_table = &f->t, sort_cols = col;
    qsort(order, (size_t)n, sizeof *order, cmp_rows);
    f->row_set = xmalloc((size_t)(n ? n : 1) * sizeof *f->row_set);
    int cap = 0;
    for (int64_t k = 0; k < n; k++) {
        int64_t r = order[k];
        bool new_set = k == 0 || cmp_cells(order[k - 1], r, 0, C_KV + 1) != 0;
        if (new_set) {
            if (f->n_sets == cap)
                f->sets = xrealloc(f->sets, (size_t)(cap = cap ? 2 * cap : 8) * sizeof *f->sets);
            results_set *s = &f->sets[f->n_sets++];
            long long v = 0;
            memset(s, 0, sizeof *s);
            s->model = csv_cell(&f->t, r, col[C_MODEL]);
            snprintf(s->key.backend, sizeof s->key.backend, "%s", csv_cell(&f->t, r, col[C_BACKEND]));
            fileio_whole_int(csv_cell(&f->t, r, col[C_BATCH]), 1, INT32_MAX, &v);
            s->key.batch = v;
            s->key.dtype = (dtype_t)dtype_from_name(csv_cell(&f->t, r, col[C_DTYPE]));
            s->key.pass = (layer_pass)layer_pass_from_name(csv_cell(&f->t, r, col[C_PASS]));
            s->key.tokens = fileio_whole_int(csv_cell(&f->t, r, col[C_TOKENS]), 1, INT64_MAX, &v) ? v : -1;
            s->key.kv_len = fileio_whole_int(csv_cell(&f->t, r, col[C_KV]), 0, INT64_MAX, &v) ? v : -1;
            s->key.rows = -1;
            s->first_row = r, s->json_rows = -1, s->duplicate_row = -1;
        }
        results_set *s = &f->sets[f->n_sets - 1];
        if (!new_set && s->duplicate_row < 0 && cmp_cells(order[k - 1], r, C_MODE, C_COUNT) == 0)
            s->duplicate_row = r;
        s->first_row = r < s->first_row ? r : s->first_row;
        s->n_rows++;
        f->row_set[r] = f->n_sets - 1;
    }
    free(order);
    /* the sets in the file's order (by their first rows), row_set renumbered to match */
    int *by_first = xmalloc((size_t)(f->n_sets ? f->n_sets : 1) * sizeof *by_first);
    int *renumber = xmalloc((size_t)(f->n_sets ? f->n_sets : 1) * sizeof *renumber);
    for (int i = 0; i < f->n_sets; i++)
        by_first[i] = i;
    sort_sets = f->sets;
    qsort(by_first, (size_t)f->n_sets, sizeof *by_first, cmp_first_row);
    results_set *sorted = xmalloc((size_t)(f->n_sets ? f->n_sets : 1) * sizeof *sorted);
    for (int i = 0; i < f->n_sets; i++)
        sorted[i] = f->sets[by_first[i]], renumber[by_first[i]] = i;
    for (int64_t r = 0; r < n; r++)
        f->row_set[r] = renumber[f->row_set[r]];
    free(f->sets);
    f->sets = sorted;
    free(by_first), free(renumber);
    return BENCH_OK;
}

bench_status results_read_json(const char *path, results_file *f, char *err, size_t errlen)
{
    strbuf text = {0};
    bool missing;
    bench_status st = fileio_read(path, RESULTS_JSON_MAX_BYTES, FILEIO_TEXT | FILEIO_MISSING_OK, NULL, &text, &missing,
                                  err, errlen);
    f->has_json = false;
    if (st != BENCH_OK || missing) {
        strbuf_free(&text);
        return st;
    }
    json_error_t je;
    json_t *root = json_loadb(text.data, text.len, 0, &je);
    strbuf_free(&text);
    if (!root) {
        snprintf(err, errlen, "%s:%d:%d: not JSON (%s): not a layerbench JSON context", path, je.line, je.column,
                 je.text);
        return BENCH_ERR_USAGE;
    }
    st = results_take_json(path, root, f, err, errlen);
    json_decref(root);
    return st;
}

bench_status results_take_json(const char *path, const json_t *root, results_file *f, char *err, size_t errlen)
{
    json_t *done = json_is_object(root) ? json_object_get(root, "completed") : NULL;
    f->has_json = false;
    if (!json_is_array(done)) {
        snprintf(err, errlen, "%s: not a layerbench JSON context (no \"completed\" list)", path);
        return BENCH_ERR_USAGE;
    }
    size_t k;
    json_t *e;
    json_array_foreach(done, k, e) {
        json_t *b = json_object_get(e, "backend"), *n = json_object_get(e, "batch"), *d = json_object_get(e, "dtype"),
               *tk = json_object_get(e, "tokens"), *kv = json_object_get(e, "kv_len"), *rows = json_object_get(e, "rows"),
               *ps = json_object_get(e, "pass");
        if (!json_is_string(b) || !json_is_integer(n) || !json_is_string(d) || (tk && !json_is_integer(tk)) ||
            (kv && !json_is_integer(kv)) || (rows && !json_is_integer(rows)) || (ps && !json_is_string(ps))) {
            snprintf(err, errlen, "%s: completed set %zu is not one layerbench writes (backend, batch, dtype, rows)",
                     path, k + 1);
            return BENCH_ERR_USAGE;
        }
        int64_t tokens = tk ? json_integer_value(tk) : -1, kv_len = kv ? json_integer_value(kv) : -1;
        const char *pass = ps ? json_string_value(ps) : "forward";
        for (int i = 0; i < f->n_sets; i++) {
            report_set *s = &f->sets[i].key;
            if (strcmp(s->backend, json_string_value(b)) == 0 && s->batch == json_integer_value(n) &&
                strcmp(dtype_name(s->dtype), json_string_value(d)) == 0 && strcmp(layer_pass_name(s->pass), pass) == 0 &&
                s->tokens == tokens && s->kv_len == kv_len)
                f->sets[i].json_rows = rows ? json_integer_value(rows) : -1;
        }
    }
    f->has_json = true;
    return BENCH_OK;
}

const char *results_set_describe(const report_set *s, char *buf, size_t len)
{
    int k = snprintf(buf, len, "batch %lld on %s in %s%s%s", (long long)s->batch, s->backend, dtype_name(s->dtype),
                     s->pass != PASS_FORWARD ? ", " : "", s->pass != PASS_FORWARD ? layer_pass_name(s->pass) : "");
    if ((s->tokens >= 0 || s->kv_len >= 0) && k >= 0 && (size_t)k < len)
        snprintf(buf + k, len - (size_t)k, ", %lld tokens after %lld cached", (long long)(s->tokens > 0 ? s->tokens : 0),
                 (long long)(s->kv_len > 0 ? s->kv_len : 0));
    return buf;
}

bool results_set_whole(const results_file *f, int i, char *why, size_t len)
{
    const results_set *s = &f->sets[i];
    if (s->duplicate_row >= 0)
        snprintf(why, len, "line %lld repeats a row of the set (the same mode, layer and part)",
                 (long long)f->t.lines[s->duplicate_row]);
    else if (!f->has_json)
        snprintf(why, len, "no JSON context beside the CSV says the set finished");
    else if (s->json_rows < 0)
        snprintf(why, len, "the JSON context does not list it as finished (its run stopped, or a write failed)");
    else if (s->json_rows != s->n_rows)
        snprintf(why, len, "the CSV holds %lld of its %lld rows", (long long)s->n_rows, (long long)s->json_rows);
    else
        return true;
    return false;
}

void results_set_csv(const results_file *f, int i, strbuf *b)
{
    for (int64_t r = f->sets[i].first_row; r < f->t.n_rows; r++) {
        if (f->row_set[r] != i)
            continue;
        for (int c = 0; c < f->t.n_cols; c++) {
            if (c)
                strbuf_append(b, ",", 1);
            report_csv_field(b, csv_cell(&f->t, r, c));
        }
        strbuf_append(b, "\n", 1);
    }
}

void results_free(results_file *f)
{
    csv_table_free(&f->t);
    free(f->sets);
    free(f->row_set);
    memset(f, 0, sizeof *f);
}
