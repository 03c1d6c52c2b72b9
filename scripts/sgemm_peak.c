/* Peak cblas_sgemm GFLOP/s on this machine: the ceiling for the convolutions.
 * usage: sgemm_peak [threads] [size]   (defaults: all cores, 2048)
 * Times square row-major SGEMMs on random data for about a second and prints
 * the best and median GFLOP/s over the repetitions. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "stats.h"
#include "util.h"

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 0, n = argc > 2 ? atoi(argv[2]) : 2048;
    if (threads > 0)
        openblas_set_num_threads(threads);
    if (n < 16 || n > 16384) {
        fprintf(stderr, "usage: sgemm_peak [threads] [size 16..16384]\n");
        return 2;
    }
    float *a = bench_alloc_floats((int64_t)n * n), *b = bench_alloc_floats((int64_t)n * n),
          *c = bench_alloc_floats((int64_t)n * n);
    if (!a || !b || !c)
        return 1;
    for (int64_t i = 0; i < (int64_t)n * n; i++)
        a[i] = (float)(i % 7) * 0.1f - 0.3f, b[i] = (float)(i % 5) * 0.2f - 0.4f;
    double samples[1000];
    int reps = 0;
    double start = bench_now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n); /* warm-up */
    while (reps < 1000 && (bench_now() - start < 1.0 || reps < 5)) {
        double t0 = bench_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        samples[reps++] = bench_now() - t0;
    }
    stats s = stats_compute(samples, reps);
    double flops = 2.0 * n * (double)n * n;
    printf("cblas_sgemm %dx%dx%d, %d threads: best %.1f GFLOP/s, median %.1f GFLOP/s (%d runs, CV %.1f%%)\n", n, n, n,
           openblas_get_num_threads(), flops / s.min * 1e-9, flops / s.median * 1e-9, reps, 100 * s.cv);
    free(a), free(b), free(c);
    return 0;
}
