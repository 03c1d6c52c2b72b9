/* Summary statistics of timed samples (seconds). The headline is the median; the noise
 * figure is robust to a few outliers (1.4826 MAD / median, which equals the CV for
 * normally distributed samples); the precision of the median is its distribution-free
 * 95% confidence interval from order statistics. docs/csv.md says the same. */
#ifndef LAYERBENCH_STATS_H
#define LAYERBENCH_STATS_H

#include <stdint.h>

typedef struct stats {
    int64_t n;
    double median, mean, min, max;
    double stddev;   /* sample standard deviation (n - 1) */
    double cv;       /* stddev / mean: not robust, one preempted sample can double it */
    double p90, p99; /* percentiles, linear interpolation between order statistics */
    double ci_low, ci_high; /* 95% confidence interval of the median (order statistics) */
    double mad;      /* median absolute deviation from the median */
    double noise;    /* 1.4826 MAD / median: the robust noise figure (a fraction) */
    int64_t outliers;/* samples outside Tukey's fences, Q1 - 1.5 IQR and Q3 + 1.5 IQR */
} stats;

/* Computes the summary of n >= 1 samples; sorts x in place. With n == 0 every field is 0. */
stats stats_compute(double *x, int64_t n);

/* The q-quantile (0..1) of sorted x, interpolating linearly (numpy's default). */
double stats_quantile_sorted(const double *x, int64_t n, double q);

/* 1-based ranks (r, n + 1 - r) of the order statistics that bound the distribution-free
 * 95% confidence interval of the median: the largest r with P(B <= r - 1) <= 2.5%, B
 * binomial(n, 1/2), exact up to n = 1000 and from the normal approximation above. Below
 * 6 samples no such interval exists and r = 1 (the range, with less coverage). */
int64_t stats_median_ci_rank(int64_t n);

/* Median and its 95% confidence interval of x (not sorted, not changed) without a
 * full sort: selection on a copy. The stopping rule calls it after every chunk. */
void stats_median_ci(const double *x, int64_t n, double *median, double *lo, double *hi);

/* The half-width of the interval relative to the median: (hi - lo) / 2 / median. */
double stats_ci_rel(double median, double lo, double hi);

#endif
