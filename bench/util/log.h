/* The one path of bench's messages to stderr, so that they read alike ("bench: ...")
 * and a later change (a quiet flag, a log file) touches one place. Results never go
 * here: they go to stdout and the output files. */
#ifndef LAYERBENCH_LOG_H
#define LAYERBENCH_LOG_H

/* "bench: <message>\n": what happened, an error or a note. */
void log_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "bench: warning: <message>\n": something that may make the figures wrong. */
void log_warning(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Progress on a terminal: the message replaces the current line (no newline). */
void log_progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The message as it is (its own prefix and line breaks). */
void log_raw(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
