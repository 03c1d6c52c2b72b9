#include "log.h"

#include <stdarg.h>
#include <stdio.h>

static void emit(const char *prefix, const char *fmt, va_list ap, const char *suffix)
{
    fputs(prefix, stderr);
    vfprintf(stderr, fmt, ap);
    fputs(suffix, stderr);
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
