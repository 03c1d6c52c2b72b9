/* `bench compare BASE.csv NEW.csv`: is the new run faster, slower or the same, row by
 * row, taking both rows' noise into account (as Google Benchmark's compare.py and
 * NVBench's nvbench_compare.py answer it).
 *
 * Rows are matched by model, backend, mode, batch and layer name (and, for a name that
 * repeats, its occurrence). A layer that auto mode timed warm in one run and batch in
 * the other is matched across the two modes, and says so. The verdict of a pair uses
 * the larger of --threshold and the two rows' noise figures as its threshold t (a change
 * within a row's own noise is not reported, as NVBench's compare does): SLOWER when even
 * the most favourable reading of the two confidence intervals of the medians (new low
 * end / base high end) is more than 1 + t; FASTER when even the least favourable (new
 * high end / base low end) is below 1 / (1 + t); SAME otherwise. Rows without an
 * interval or noise figure (CSVs of older versions) compare their medians.
 *
 * Rows that are not comparable get a verdict of their own and none of the three: IMPL
 * CHANGED (the backend chose other kernels at the same thread count: a different figure,
 * not a faster one; across thread counts the choice is part of what is compared),
 * CONTENDED (other processes had the CPUs in either run: csv column contended) and
 * INVALID (a median that is no time: 0, negative, NaN, infinite). A row's noise is the
 * larger of its noise figure and half the spread between its worker processes. The two
 * runs' canaries (canary_us: a fixed workload timed in every round) say whether the
 * machine itself ran slower or faster in NEW; a drift of 2% or more is said, and widens
 * the threshold on its own side only (a machine 10% slower widens SLOWER's, never
 * FASTER's), so that a slower machine is not blamed on the layers and a faster one hides
 * no slowdown. Canaries are compared only where they time the same thing: rows of the
 * same thread count (the canary joins a thread pool), in runs of the same build (the
 * JSON contexts say which); otherwise the output says why no drift applies.
 *
 * The in-model rows (a layer inside the chained forward) are left out unless asked
 * for: a small layer's time there depends on what the layer before it left behind
 * (threads, caches), and varies between two runs of the same build by more than its
 * samples' noise (ResNet-18's ReLUs and adds: 10-40% between runs on the 2-core VM),
 * so they would cry wolf. */
#ifndef LAYERBENCH_COMPARE_H
#define LAYERBENCH_COMPARE_H

#include <stdbool.h>
#include <stdio.h>

#include "csv_read.h"

typedef struct compare_options {
    double threshold;   /* fraction, default 0.05 */
    bool markdown;      /* --format md */
    bool inmodel;       /* --inmodel: compare the in-model rows too */
    const char *base_build, *new_build; /* which build made each run (version, git revision, build
                                         * type, compiler: the JSON context's); NULL: not known, and
                                         * then the canaries are not compared */
} compare_options;

#define COMPARE_DEFAULT_THRESHOLD 0.05
/* A drift of the canary this large between the two runs is said, and widens the band. */
#define COMPARE_DRIFT_SAID 0.02

typedef enum compare_verdict { VERDICT_SAME, VERDICT_FASTER, VERDICT_SLOWER } compare_verdict;

/* The verdict for one pair of rows (medians and interval ends in any one unit; an
 * interval end <= 0 means "not known", and the median stands for it; noise figures and
 * threshold are fractions). */
compare_verdict compare_verdict_of(double base, double base_lo, double base_hi, double base_noise, double new_,
                                   double new_lo, double new_hi, double new_noise, double threshold);

/* The same with a band of its own on each side: SLOWER beyond 1 + slower, FASTER below
 * 1 / (1 + faster) (the machine's drift widens one side only). */
compare_verdict compare_verdict_band(double base, double base_lo, double base_hi, double base_noise, double new_,
                                     double new_lo, double new_hi, double new_noise, double slower, double faster);

/* Compares two parsed results CSVs and prints the table and a summary to out. Returns
 * the exit status: 0, 1 when some row is SLOWER, 2 when a file is not a results CSV
 * (the reason on stderr). */
int compare_tables(const char *base_name, const csv_table *base, const char *new_name, const csv_table *new_,
                   const compare_options *o, FILE *out);

#endif
