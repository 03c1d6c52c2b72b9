#define _GNU_SOURCE
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "strbuf.h"

/* The message with its control characters made visible (strbuf_visible): what a file or
 * a command line put into it reaches the terminal as text, never as escape sequences. */
static void emit(const char *prefix, const char *fmt, va_list ap, const char *suffix)
{
    char *msg = NULL;
    if (vasprintf(&msg, fmt, ap) < 0) {
        fputs(prefix, stderr);
        fputs("(out of memory formatting a message)", stderr);
        fputs(suffix, stderr);
        return;
    }
    strbuf b = {0};
    strbuf_visible(&b, msg, true);
    fputs(prefix, stderr);
    fputs(b.data, stderr);
    fputs(suffix, stderr);
    strbuf_free(&b);
    free(msg);
}
void log_msg(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit("bench: ", fmt, ap, "\n");
    va_end(ap);
}

void log_warning(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit("bench: warning: ", fmt, ap, "\n");
    va_end(ap);
}

void log_progress(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit("\r\033[K", fmt, ap, "");
    va_end(ap);
}

void log_raw(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit("", fmt, ap, "");
    va_end(ap);
}
