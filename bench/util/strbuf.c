#define _GNU_SOURCE
#include "strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

void strbuf_append(strbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->data = xrealloc(b->data, b->cap);
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
}

void strbuf_printf(strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0) { /* said here, not through log.c: the logger itself builds its lines in a strbuf */
        fputs("bench: out of memory\n", stderr);
        exit(1);
    }
    strbuf_append(b, s, (size_t)n);
    free(s);
}

void strbuf_free(strbuf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

void strbuf_json(strbuf *f, const char *s)
{
    strbuf_append(f, "\"", 1);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            strbuf_printf(f, "\\%c", ch);
        else if (ch < 0x20)
            strbuf_printf(f, "\\u%04x", ch);
        else
            strbuf_append(f, s, 1);
    }
    strbuf_append(f, "\"", 1);
}

void strbuf_visible(strbuf *b, const char *s, bool keep_newlines)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t run = 0; /* the plain bytes up to the next control */
        while (p[run] && !(p[run] < 0x20 || p[run] == 0x7f || (p[run] == 0xc2 && p[run + 1] >= 0x80 && p[run + 1] <= 0x9f)))
            run++;
        strbuf_append(b, (const char *)p, run);
        p += run;
        if (!*p)
            break;
        if (keep_newlines && (*p == '\n' || *p == '\t')) {
            strbuf_append(b, (const char *)p++, 1);
            continue;
        }
        int n = *p == 0xc2 ? 2 : 1;
        for (int k = 0; k < n; k++) {
            char esc[4] = {'\\', 'x', hex[p[k] >> 4], hex[p[k] & 15]};
            strbuf_append(b, esc, 4);
        }
        p += n;
    }
    strbuf_append(b, "", 0);
}
