/* Results files: checked before any work, never half-written, never clobbering what
 * they should not.
 *
 * - A regular file (or a path not there yet) is replaced atomically: the whole content
 *   goes to "<file>.tmp.<pid>" beside it, which is renamed over it. Each write replaces
 *   the file again, so a long run can checkpoint what it has finished. An existing
 *   file's permissions are kept; one the user may not write is refused.
 * - A symbolic link is followed: the file it points to is replaced, the link stays.
 * - stdout ("-"), a device (/dev/null, /dev/stdout) or a FIFO is written in place:
 *   each write appends only what is new.
 * - A directory, an empty path, a missing folder, or one of the files the run reads
 *   (the config) is refused with a usage error, before anything is measured.
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
    char *target;      /* the regular file replaced atomically; NULL when written in place; owned */
    FILE *direct;      /* in place: stdout, or the device/FIFO opened at the first write */
    bool is_stdout;
    mode_t mode;       /* permissions for the replacement */
    size_t written;    /* bytes already written in place */
} bench_output;

/* Checks that path can be written and is not one of `inputs` (NULL-terminated paths the
 * run reads; may be NULL), removes temporary files that dead runs left beside it, and
 * fills o. Nothing is created yet. On failure: BENCH_ERR_USAGE, the reason in err
 * ("cannot write 'x': ..."), and o needs no close. */
bench_status bench_output_open(bench_output *o, const char *path, const char *const *inputs, char *err,
                               size_t errlen);
/* Replaces the file's content with the first len bytes of data (a regular file), or
 * writes what is beyond the bytes written before (in place). BENCH_ERR_IO with the reason
 * in err on failure; the previous content of a regular file is then untouched. */
bench_status bench_output_write(bench_output *o, const char *data, size_t len, char *err, size_t errlen);
/* Frees o (and closes an in-place file); close(NULL-filled o) is a no-op. */
void bench_output_close(bench_output *o);

#endif
