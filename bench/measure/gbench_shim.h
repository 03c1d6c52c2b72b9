/* A pure C face for Google Benchmark. Google Benchmark decides how many iterations
 * to run (warm-up for warmup_time, then iteration counts grown until one run lasts
 * min_time, then `repetitions` runs of that count); the callback times each
 * iteration itself and returns the seconds, which are the samples. Google Benchmark
 * takes as manual time the larger of that and the call's wall time, so that untimed
 * work inside the call (a cache flush) counts against its time limits. Samples from warm-up and from the runs that only estimated the iteration
 * count are dropped: what comes back is exactly the iterations of the runs Google
 * Benchmark reported. */
#ifndef LAYERBENCH_GBENCH_SHIM_H
#define LAYERBENCH_GBENCH_SHIM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Runs one iteration and returns its duration in seconds, or a negative value on
 * error (the benchmark then stops). */
typedef double (*gbs_iteration_fn)(void *user);

typedef struct gbs_options {
    double warmup_time;  /* seconds of untimed warm-up; 0 for none */
    double min_time;     /* seconds each reported run lasts at least */
    int repetitions;     /* reported runs, >= 1 */
    int64_t iterations;  /* > 0: exactly this many per run (no estimation; warm-up is then
                          * at least this many too, so use 0 warm-up with it); 0: Google
                          * Benchmark grows the count until a run lasts min_time */
} gbs_options;

typedef struct gbs_result {
    double *samples;          /* per-iteration seconds, in order; caller frees with free() */
    int64_t n_samples;
    int64_t iterations;       /* iterations per reported run */
    int repetitions;          /* reported runs matched */
    int64_t discarded;        /* warm-up and estimation iterations not in samples */
    int64_t first_kept;       /* with one repetition: the call number (from 0) of samples[0];
                               * the kept samples are the calls that follow it */
    double cost;              /* seconds Google Benchmark counted for every call (kept or
                               * not): the run's share of a time budget */
} gbs_result;

/* Returns 0, or -1 with a message in err (the callback failed, or the runs Google
 * Benchmark reported could not be matched with the recorded ones). */
int gbs_run(const char *name, gbs_iteration_fn fn, void *user, const gbs_options *opt, gbs_result *out,
            char *err, int errlen);

/* The Google Benchmark version this was built against, e.g. "1.7.1". */
const char *gbs_version(void);

#ifdef __cplusplus
}
#endif

#endif
