#include "csv_read.h"

#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct cellvec {
    char **v;
    int64_t n, cap;
} cellvec;

static void push_cell(cellvec *c, char *s)
{
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        c->v = xrealloc(c->v, (size_t)c->cap * sizeof *c->v);
    }
    c->v[c->n++] = s;
}

/* Where a parse is in its text, and where it says what is wrong. */
typedef struct csv_lexer {
    const char *name, *text;
    size_t len, i;
    int64_t line;
    char *err;
    size_t errlen;
} csv_lexer;

/* One field at x->i (quoted or not) into field, its length in *f: up to what ends it (a
 * comma, a line end or the text's end), which is left to read. False on a malformed
 * field, said in x->err. */
static bool lex_field(csv_lexer *x, char *field, size_t *f)
{
    const char *text = x->text;
    int64_t start_line = x->line;
    *f = 0;
    if (text[x->i] != '"') {
        while (x->i < x->len && text[x->i] != ',' && text[x->i] != '\n' && text[x->i] != '\r') {
            if (text[x->i] == '"') {
                snprintf(x->err, x->errlen, "%s:%lld: a quote inside an unquoted field", x->name, (long long)x->line);
                return false;
            }
            field[(*f)++] = text[x->i++];
        }
    } else {
        for (x->i++;;) {
            if (x->i >= x->len) {
                snprintf(x->err, x->errlen, "%s:%lld: a quoted field is not closed", x->name, (long long)start_line);
                return false;
            }
            if (text[x->i] == '"' && x->i + 1 < x->len && text[x->i + 1] == '"') {
                field[(*f)++] = '"';
                x->i += 2;
            } else if (text[x->i] == '"') {
                x->i++;
                break;
            } else {
                x->line += text[x->i] == '\n';
                field[(*f)++] = text[x->i++];
            }
        }
        if (x->i < x->len && text[x->i] != ',' && text[x->i] != '\n' && text[x->i] != '\r') {
            snprintf(x->err, x->errlen, "%s:%lld: text after a quoted field", x->name, (long long)x->line);
            return false;
        }
    }
    if (memchr(field, 0, *f)) {
        snprintf(x->err, x->errlen, "%s:%lld: a NUL character in a field", x->name, (long long)x->line);
        return false;
    }
    return true;
}

bench_status csv_parse(const char *name, const char *text, size_t len, csv_table *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    cellvec cells = {0};
    /* every cell in one arena, NUL-terminated in turn: a cell costs its bytes and a
     * pointer, never an allocation of its own (a 100 MB CSV holds millions) */
    size_t fields = 1;
    for (size_t k = 0; k < len; k++)
        fields += text[k] == ',' || text[k] == '\n' || text[k] == '\r';
    char *arena = xmalloc(len + fields + 1), *field = arena;
    int64_t row_fields = 0, rows = 0, row_line = 1, *lines = NULL, cap_lines = 0;
    int n_cols = -1;
    bench_status st = BENCH_OK;
    /* a UTF-8 byte-order mark, as spreadsheets save CSV, is not part of the first field */
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        text += 3, len -= 3;
    csv_lexer x = {name, text, len, 0, 1, err, errlen};
    if (len == 0) {
        snprintf(err, errlen, "%s: the file is empty", name);
        st = BENCH_ERR_USAGE;
    }
    while (st == BENCH_OK && x.i < len) {
        size_t f;
        int64_t start_line = x.line;
        if (row_fields == 0)
            row_line = x.line;
        if (!lex_field(&x, field, &f)) {
            st = BENCH_ERR_USAGE;
            break;
        }
        field[f] = 0;
        push_cell(&cells, field);
        field += f + 1;
        row_fields++;
        /* what ends it: a comma (another field follows) or a line end (the row ends) */
        if (x.i < len && text[x.i] == ',') {
            if (++x.i < len)
                continue;
            *field = 0; /* a trailing comma: one more, empty, field */
            push_cell(&cells, field++);
            row_fields++;
        } else if (x.i < len && text[x.i] == '\r') {
            x.i += 1 + (x.i + 1 < len && text[x.i + 1] == '\n');
        } else if (x.i < len) {
            x.i++; /* \n */
        }
        if (n_cols >= 0 && row_fields != n_cols) {
            snprintf(err, errlen, "%s:%lld: %lld fields, but the header has %d", name, (long long)start_line,
                     (long long)row_fields, n_cols);
            st = BENCH_ERR_USAGE;
            break;
        }
        if (n_cols < 0) {
            n_cols = (int)row_fields;
        } else {
            if (rows == cap_lines)
                lines = xrealloc(lines, (size_t)(cap_lines = cap_lines ? 2 * cap_lines : 256) * sizeof *lines);
            lines[rows++] = row_line;
        }
        row_fields = 0;
        x.line++;
    }
    if (st != BENCH_OK) {
        free(arena);
        free(cells.v);
        free(lines);
        return st;
    }
    *t = (csv_table){.n_cols = n_cols, .n_rows = rows, .cells = cells.v, .arena = arena, .lines = lines};
    return BENCH_OK;
}

bench_status csv_read_file(const char *path, csv_table *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    strbuf text = {0};
    bench_status st = fileio_read(path, CSV_MAX_BYTES, 0, NULL, &text, NULL, err, errlen);
    if (st == BENCH_OK)
        st = csv_parse(path, text.data, text.len, t, err, errlen);
    strbuf_free(&text);
    return st == BENCH_OK ? BENCH_OK : BENCH_ERR_USAGE;
}

int csv_col(const csv_table *t, const char *name)
{
    for (int c = 0; c < t->n_cols; c++)
        if (strcmp(t->cells[c], name) == 0)
            return c;
    return -1;
}

const char *csv_cell(const csv_table *t, int64_t row, int col)
{
    if (col < 0 || row < 0 || row >= t->n_rows)
        return "";
    return t->cells[(row + 1) * t->n_cols + col];
}

void csv_table_free(csv_table *t)
{
    free(t->arena);
    free(t->cells);
    free(t->lines);
    memset(t, 0, sizeof *t);
}
