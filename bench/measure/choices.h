/* --algo-cache FILE: the algorithm choices of --algo search, saved and reused, as FFTW
 * saves its "wisdom", so that two runs of a comparison run the same kernels and a choice
 * between near-equal candidates is made once instead of by each run's noise.
 *
 * The file is text, one choice a line: the context, the layer's key and the choice,
 * separated by tabs, after a header line. The context names what a choice depends on
 * besides the layer: the backend, the CPU model and its vector extensions, the
 * backend's libraries, threads and settings (its describe() JSON), the dtype and the
 * format. A choice is taken only in its own context; lines of other contexts (another
 * machine, another thread count) are kept in the file and not used, and the load says
 * how many. A choice the backend finds no longer applies (its candidate is gone) is
 * searched again and counted stale. The worker processes of one run share a file (a
 * temporary one without --algo-cache), so they all run what the first one chose. */
#ifndef LAYERBENCH_CHOICES_H
#define LAYERBENCH_CHOICES_H

#include "backend.h"
#include "output.h"

typedef struct choices_report {
    int taken;      /* lines of this context given to the backends */
    int foreign;    /* lines of other contexts: not used */
    int malformed;  /* lines that are no choice: not used */
    char other[160];/* the first foreign context's differing part, for the message */
} choices_report;

/* Gives the backends the choices of their contexts in path. A missing file is an empty
 * cache. BENCH_ERR_USAGE with err when it is unreadable or not a choices file. */
bench_status choices_load(const char *path, const backend *bs, int nb, choices_report *rep, char *err, size_t errlen);

/* Writes the backends' choices into path, keeping the lines of other contexts and the
 * choices of this one they did not remake; atomically. *stale: choices found stale. */
bench_status choices_save(const char *path, const backend *bs, int nb, int *stale, char *err, size_t errlen);

/* One line for stderr and the JSON's warnings about what a load left unused, or "". */
void choices_warning(const char *path, const choices_report *rep, char *buf, size_t len);

#endif
