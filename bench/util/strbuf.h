/* A growing text buffer, for a file's whole content (the CSV, the JSON context, traces). */
#ifndef LAYERBENCH_STRBUF_H
#define LAYERBENCH_STRBUF_H

#include <stdbool.h>
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
/* s as a terminal shows it harmlessly: control characters (ESC, CR, BEL, ..., and the
 * C1 controls as UTF-8 writes them) as \xHH escapes, so that text from a file (a layer
 * name, a config value) can neither move the cursor, retitle the window nor break a
 * table's line. keep_newlines: \n and \t pass (a message's own lines). */
void strbuf_visible(strbuf *b, const char *s, bool keep_newlines);

#endif
