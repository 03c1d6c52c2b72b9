#include "stats.h"

#include <math.h>
#include <stdlib.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double stats_quantile_sorted(const double *x, int64_t n, double q)
{
    if (n <= 0)
        return 0.0;
    double pos = q * (double)(n - 1);
    int64_t lo = (int64_t)floor(pos);
    int64_t hi = lo + 1 < n ? lo + 1 : lo;
    return x[lo] + (pos - (double)lo) * (x[hi] - x[lo]);
}

stats stats_compute(double *x, int64_t n)
{
    stats s = {0};
    if (n <= 0)
        return s;
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += x[i];
    s.n = n;
    s.mean = sum / (double)n;
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        ss += (x[i] - s.mean) * (x[i] - s.mean);
    s.stddev = n > 1 ? sqrt(ss / (double)(n - 1)) : 0.0;
    s.cv = s.mean > 0 ? s.stddev / s.mean : 0.0;
    s.min = x[0];
    s.max = x[n - 1];
    s.median = stats_quantile_sorted(x, n, 0.5);
    s.p90 = stats_quantile_sorted(x, n, 0.9);
    return s;
}
