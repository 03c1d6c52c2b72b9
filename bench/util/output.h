/* Results files: checked before any work, never half-written, never clobbering what
 * they should not, never written through a link a stranger planted.
 *
 * - A regular file (or a path not there yet) is replaced atomically: the whole content
 *   goes to a new temporary file beside it, "<file>.tmp.<pid>.<random>", created with
 *   O_CREAT|O_EXCL|O_NOFOLLOW (so a link or file planted at that name is never written
 *   through, CERT FIO21-C), then renamed over it. Each write replaces the file again, so
 *   a long run can checkpoint what it has finished. An existing file's permissions are
 *   kept; one the user may not write is refused.
 * - A symbolic link the user names is followed: the file it points to is replaced, the
 *   link stays. A link that points nowhere is refused (it would be written through).
 * - stdout ("-", or a path that is the file stdout already writes, such as /dev/stdout
 *   or the file a shell redirected it to), a device (/dev/null) or a FIFO is a stream:
 *   it cannot be rewritten. A CSV (bench_output.append) is written a row at a time as
 *   it grows; anything else (a JSON context, a trace, stacks) is written once, whole,
 *   by bench_output_commit at the end, so the stream holds one valid document.
 * - A directory, an empty path, a missing folder, or one of the files the run reads
 *   (the config) is refused with a usage error, before anything is measured; so are two
 *   outputs that are the same file however they are spelt (bench_output_same).
 */
#ifndef LAYERBENCH_OUTPUT_H
#define LAYERBENCH_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "strbuf.h"
#include "util.h"

typedef struct bench_output {
    char *path;        /* as given; owned */
    char *target;      /* the regular file replaced atomically; NULL for a stream; owned */
    char *identity;    /* which file it is (device and inode, or its folder's and its name
                        * when it does not exist yet; "stdout"): bench_output_same; owned */
    FILE *direct;      /* a stream: stdout, or the device/FIFO opened at the first write */
    bool is_stdout;
    bool append;       /* a stream written as the content grows (set by the caller: a CSV,
                        * whose every version begins with the one before) */
    char *pending;     /* a stream's content not written yet (!append): bench_output_commit */
    size_t pending_len;
    mode_t mode;       /* permissions for the replacement */
    size_t written;    /* bytes already written to an append stream */
} bench_output;

/* Checks that path can be written and is not one of `inputs` (NULL-terminated paths the
 * run reads; may be NULL), removes temporary files that dead runs left beside it, and
 * fills o. Nothing is created yet. On failure: BENCH_ERR_USAGE, the reason in err
 * ("cannot write 'x': ..."), and o needs no close. */
bench_status bench_output_open(bench_output *o, const char *path, const char *const *inputs, char *err,
                               size_t errlen);
/* Whether two outputs are the same file, however their paths are spelt (hard links,
 * symbolic links, "./x", /dev/stdout beside "-"). */
bool bench_output_same(const bench_output *a, const bench_output *b);
/* Replaces the file's content with the first len bytes of data (a regular file); for a
 * stream, writes what is beyond the bytes written before (append) or keeps data to be
 * written by bench_output_commit. BENCH_ERR_IO with the reason in err on failure; the
 * previous content of a regular file is then untouched. */
bench_status bench_output_write(bench_output *o, const char *data, size_t len, char *err, size_t errlen);
/* A stream's kept content, written once (a no-op for files and append streams, and for a
 * stream given nothing). */
bench_status bench_output_commit(bench_output *o, char *err, size_t errlen);
/* Frees o (and closes an in-place file); close(NULL-filled o) is a no-op. */
void bench_output_close(bench_output *o);

#endif
