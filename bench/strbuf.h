/* A growing text buffer, for a file's whole content (the CSV, the JSON context, traces). */
#ifndef LAYERBENCH_STRBUF_H
#define LAYERBENCH_STRBUF_H

#include <stddef.h>

typedef struct strbuf {
    char *data;        /* NUL-terminated; owned */
    size_t len, cap;
} strbuf;
void strbuf_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void strbuf_append(strbuf *b, const char *s, size_t n);
void strbuf_free(strbuf *b);
/* s as a JSON string, quoted and escaped. */
void strbuf_json(strbuf *b, const char *s);

#endif
