/* Tables as aligned text or markdown (table.h). */
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "strbuf.h"
#include "table.h"
#include "util.h"

/* A cell as the terminal may show it: text from files (layer names from a CSV) with
 * its control characters made visible, so that none breaks a line or moves the cursor. */
static char *cell_text(const char *s)
{
    strbuf b = {0};
    strbuf_visible(&b, s, false);
    return b.data;
}

struct table {
    int ncols;
    char *align;
    char **headers;
    int *max_width;
    char **cells;   /* rows * ncols */
    int rows, cap;
    int filling;    /* cells of the row being built by table_cell */
};

bool table_format_parse(const char *s, table_format *f)
{
    if (strcmp(s, "text") == 0)
        *f = TABLE_TEXT;
    else if (strcmp(s, "md") == 0 || strcmp(s, "markdown") == 0)
        *f = TABLE_MD;
    else
        return false;
    return true;
}

table *table_create(int ncols, const char *align)
{
    BENCH_ASSERT(ncols > 0 && (int)strlen(align) == ncols);
    table *t = xcalloc(1, sizeof *t);
    t->ncols = ncols;
    t->align = xstrdup(align);
    t->headers = xcalloc((size_t)ncols, sizeof *t->headers);
    t->max_width = xcalloc((size_t)ncols, sizeof *t->max_width);
    return t;
}

void table_header(table *t, int col, const char *header, int max_width)
{
    BENCH_ASSERT(col >= 0 && col < t->ncols);
    free(t->headers[col]);
    t->headers[col] = xstrdup(header);
    t->max_width[col] = max_width;
}

static char **new_row(table *t)
{
    if (t->rows == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 16;
        t->cells = xrealloc(t->cells, (size_t)t->cap * (size_t)t->ncols * sizeof *t->cells);
    }
    char **row = t->cells + (size_t)t->rows * (size_t)t->ncols;
    memset(row, 0, (size_t)t->ncols * sizeof *row);
    t->rows++;
    return row;
}

void table_row(table *t, const char *const *cells)
{
    BENCH_ASSERT(t->filling == 0);
    char **row = new_row(t);
    for (int c = 0; c < t->ncols; c++)
        row[c] = cell_text(cells[c] ? cells[c] : "");
}

void table_cell(table *t, const char *fmt, ...)
{
    if (t->filling == 0)
        new_row(t);
    BENCH_ASSERT(t->filling < t->ncols);
    va_list ap;
    va_start(ap, fmt);
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    t->cells[(size_t)(t->rows - 1) * (size_t)t->ncols + (size_t)t->filling++] = cell_text(buf);
}

void table_end_row(table *t)
{
    BENCH_ASSERT(t->filling > 0);
    char **row = t->cells + (size_t)(t->rows - 1) * (size_t)t->ncols;
    for (int c = t->filling; c < t->ncols; c++)
        row[c] = xstrdup("");
    t->filling = 0;
}

int table_rows(const table *t) { return t->rows; }

/* Display width: UTF-8 continuation bytes take no column. */
static int width(const char *s)
{
    int w = 0;
    for (; *s; s++)
        w += ((unsigned char)*s & 0xc0) != 0x80;
    return w;
}

/* Bytes of s that fill at most n columns. */
static int bytes_for(const char *s, int n)
{
    int b = 0, w = 0;
    while (s[b]) {
        if (((unsigned char)s[b] & 0xc0) != 0x80) {
            if (w == n)
                break;
            w++;
        }
        b++;
    }
    return b;
}

static void print_text(const table *t, FILE *o, const char *indent)
{
    int *w = xcalloc((size_t)t->ncols, sizeof *w);
    for (int c = 0; c < t->ncols; c++) {
        w[c] = t->headers[c] ? width(t->headers[c]) : 0;
        for (int r = 0; r < t->rows; r++) {
            int x = width(t->cells[(size_t)r * (size_t)t->ncols + (size_t)c]);
            w[c] = x > w[c] ? x : w[c];
        }
        if (t->max_width[c] > 0 && w[c] > t->max_width[c])
            w[c] = t->max_width[c];
    }
    size_t cap = 256, len;
    char *line = xmalloc(cap);
    for (int r = -1; r < t->rows; r++) {
        len = 0;
        for (int c = 0; c < t->ncols; c++) {
            const char *s = r < 0 ? (t->headers[c] ? t->headers[c] : "") : t->cells[(size_t)r * (size_t)t->ncols + (size_t)c];
            int n = bytes_for(s, w[c]), pad = w[c] - width(s);
            pad = pad < 0 ? 0 : pad;
            size_t need = len + (size_t)n + (size_t)pad + 3;
            if (need > cap) {
                cap = 2 * need;
                line = xrealloc(line, cap);
            }
            if (t->align[c] == 'r')
                memset(line + len, ' ', (size_t)pad), len += (size_t)pad;
            memcpy(line + len, s, (size_t)n), len += (size_t)n;
            if (t->align[c] != 'r')
                memset(line + len, ' ', (size_t)pad), len += (size_t)pad;
            if (c < t->ncols - 1)
                line[len++] = ' ', line[len++] = ' ';
        }
        while (len && line[len - 1] == ' ') /* no trailing blanks */
            len--;
        fprintf(o, "%s%.*s\n", indent, (int)len, line);
    }
    free(line);
    free(w);
}

static void md_cell(FILE *o, const char *s)
{
    fputc(' ', o);
    for (; *s; s++) {
        if (*s == '|')
            fputc('\\', o);
        fputc(*s == '\n' ? ' ' : *s, o);
    }
    fputs(" |", o);
}

static void print_md(const table *t, FILE *o)
{
    fputc('|', o);
    for (int c = 0; c < t->ncols; c++)
        md_cell(o, t->headers[c] ? t->headers[c] : "");
    fputs("\n|", o);
    for (int c = 0; c < t->ncols; c++)
        fputs(t->align[c] == 'r' ? " ---: |" : " --- |", o);
    fputc('\n', o);
    for (int r = 0; r < t->rows; r++) {
        fputc('|', o);
        for (int c = 0; c < t->ncols; c++)
            md_cell(o, t->cells[(size_t)r * (size_t)t->ncols + (size_t)c]);
        fputc('\n', o);
    }
}

void table_print(const table *t, FILE *out, table_format f, const char *indent)
{
    if (f == TABLE_MD) {
        fputc('\n', out);
        print_md(t, out);
    } else {
        print_text(t, out, indent ? indent : "");
    }
}

void table_free(table *t)
{
    if (!t)
        return;
    for (int r = 0; r < t->rows; r++)
        for (int c = 0; c < t->ncols; c++)
            free(t->cells[(size_t)r * (size_t)t->ncols + (size_t)c]);
    for (int c = 0; c < t->ncols; c++)
        free(t->headers[c]);
    free(t->cells), free(t->headers), free(t->max_width), free(t->align), free(t);
}

void table_heading(FILE *out, table_format f, int level, const char *title)
{
    if (f == TABLE_MD)
        fprintf(out, "\n%.*s %s\n", level < 1 ? 1 : level > 6 ? 6 : level, "######", title);
    else
        fprintf(out, "\n%s\n", title);
}
