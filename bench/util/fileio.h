/* Reading the files a user names (configs, config.json, CSVs, the choices cache, a
 * sweep folder's lists and statuses, parts' JSON), one way everywhere, as if a stranger
 * wrote them:
 *
 * - only a regular file is read: a FIFO, a socket, a device (/dev/zero, /dev/full) or a
 *   folder is refused at once, never waited on (the file is opened O_NONBLOCK, then
 *   fstat'ed, so even opening a FIFO with no writer does not block);
 * - every kind of file has a size limit, checked before anything is allocated, so a
 *   2 GB file named by mistake is refused in microseconds instead of read whole;
 * - text files may be asked to hold no NUL byte (a line after one would be dropped
 *   silently by every string function);
 * - the content goes to the heap (never a large stack buffer: `ulimit -s 64` must not
 *   crash a run).
 *
 * Messages read "WHAT: 'PATH': what is wrong" (WHAT may be NULL: "'PATH': ..."). */
#ifndef LAYERBENCH_FILEIO_H
#define LAYERBENCH_FILEIO_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

#include "strbuf.h"
#include "util.h"

/* flags of fileio_read */
#define FILEIO_TEXT 1u        /* a NUL byte anywhere is refused */
#define FILEIO_MISSING_OK 2u  /* a path that does not exist is BENCH_OK with *missing set and
                               * out empty (the first run of a cache, of a --resume) */

/* Opens path for reading as a regular file of at most limit bytes; its descriptor (the
 * caller closes it) and its stat into *st, or -1 with the reason in err. *missing (may be
 * NULL) is set when the path does not exist (ENOENT). */
int fileio_open(const char *path, size_t limit, const char *what, struct stat *st, bool *missing, char *err,
                size_t errlen);

/* Reads the whole regular file at path into out (appended; NUL-terminated), as above.
 * BENCH_ERR_USAGE with err when it is refused (not a regular file, too large, a NUL byte
 * in a text file, missing without FILEIO_MISSING_OK); BENCH_ERR_IO when reading fails. */
bench_status fileio_read(const char *path, size_t limit, unsigned flags, const char *what, strbuf *out,
                         bool *missing, char *err, size_t errlen);

/* A whole decimal integer from lo to hi, the whole of s ("12"; never "12x", " 12", "",
 * "abc" or one out of range): how a field read back from a file is parsed. */
bool fileio_whole_int(const char *s, long long lo, long long hi, long long *out);

/* "1 MiB", "512 MiB", "64 KiB": a size limit for messages. */
const char *fileio_limit_text(size_t limit, char *buf, size_t len);

#endif
