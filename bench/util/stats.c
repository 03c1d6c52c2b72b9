#include "stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

int64_t stats_median_ci_rank(int64_t n)
{
    if (n > 1000) {
        int64_t r = (int64_t)floor((double)n / 2.0 - 0.98 * sqrt((double)n)); /* 1.96 sqrt(n) / 2 */
        return r < 1 ? 1 : r;
    }
    /* P(B = m) for B ~ binomial(n, 1/2), summed from m = 0 in log space */
    double cdf = 0.0, ln_all = (double)n * log(2.0);
    int64_t r = 1;
    for (int64_t m = 0; m < n; m++) {
        cdf += exp(lgamma((double)n + 1) - lgamma((double)m + 1) - lgamma((double)(n - m) + 1) - ln_all);
        if (cdf > 0.025)
            break;
        r = m + 1;
    }
    return r;
}

/* The k-th smallest (0-based) of x[0..n), reordering x (Hoare's selection). */
static double select_kth(double *x, int64_t n, int64_t k)
{
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        double pivot = x[lo + (hi - lo) / 2];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (x[i] < pivot)
                i++;
            while (x[j] > pivot)
                j--;
            if (i <= j) {
                double t = x[i];
                x[i] = x[j], x[j] = t;
                i++, j--;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            return x[k];
    }
    return x[k];
}

void stats_median_ci(const double *x, int64_t n, double *median, double *lo, double *hi)
{
    *median = *lo = *hi = 0.0;
    if (n <= 0)
        return;
    double *c = malloc((size_t)n * sizeof *c);
    if (!c)
        return;
    memcpy(c, x, (size_t)n * sizeof *c);
    int64_t r = stats_median_ci_rank(n);
    /* each selection leaves smaller values before k and larger after it */
    double m_hi = select_kth(c, n, n / 2);
    *median = n % 2 ? m_hi : 0.5 * (m_hi + select_kth(c, n / 2, n / 2 - 1));
    *hi = select_kth(c + n / 2, n - n / 2, n - r - n / 2);
    *lo = select_kth(c, n / 2 + (n % 2), r - 1);
    free(c);
}

double stats_ci_rel(double median, double lo, double hi)
{
    return median > 0 ? (hi - lo) / 2.0 / median : 0.0;
}

stats stats_compute(double *x, int64_t n)
{
    stats s;
    memset(&s, 0, sizeof s);
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
    s.p99 = stats_quantile_sorted(x, n, 0.99);
    int64_t r = stats_median_ci_rank(n);
    s.ci_low = x[r - 1];
    s.ci_high = x[n - r];
    double q1 = stats_quantile_sorted(x, n, 0.25), q3 = stats_quantile_sorted(x, n, 0.75);
    double fence_lo = q1 - 1.5 * (q3 - q1), fence_hi = q3 + 1.5 * (q3 - q1);
    double *dev = malloc((size_t)n * sizeof *dev);
    for (int64_t i = 0; i < n; i++) {
        s.outliers += x[i] < fence_lo || x[i] > fence_hi;
        if (dev)
            dev[i] = fabs(x[i] - s.median);
    }
    if (dev) {
        qsort(dev, (size_t)n, sizeof *dev, cmp_double);
        s.mad = stats_quantile_sorted(dev, n, 0.5);
        free(dev);
    }
    s.noise = s.median > 0 ? 1.4826 * s.mad / s.median : 0.0;
    return s;
}
