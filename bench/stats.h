/* Summary statistics of timed samples (seconds). */
#ifndef LAYERBENCH_STATS_H
#define LAYERBENCH_STATS_H

#include <stdint.h>

typedef struct stats {
    int64_t n;
    double median, mean, min, max;
    double stddev;   /* sample standard deviation (n - 1) */
    double cv;       /* stddev / mean */
    double p90;      /* 90th percentile, linear interpolation between order statistics */
} stats;

/* Computes the summary of n >= 1 samples; sorts x in place. With n == 0 every field is 0. */
stats stats_compute(double *x, int64_t n);

/* The q-quantile (0..1) of sorted x, interpolating linearly (numpy's default). */
double stats_quantile_sorted(const double *x, int64_t n, double q);

#endif
