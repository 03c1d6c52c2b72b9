/* Statistics on known samples, and the Google Benchmark shim: it must hand back
 * exactly the iterations of the runs Google Benchmark reported, never warm-up or
 * iteration-estimation calls. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gbench_shim.h"
#include "procs.h"
#include "stats.h"
#include "test_util.h"

static void test_stats(void)
{
    double a[] = {5, 1, 4, 2, 3};
    stats s = stats_compute(a, 5);
    EXPECT(s.n == 5 && s.median == 3 && s.mean == 3 && s.min == 1 && s.max == 5, "odd count");
    EXPECT(fabs(s.stddev - sqrt(2.5)) < 1e-12, "stddev %g", s.stddev);
    EXPECT(fabs(s.cv - sqrt(2.5) / 3) < 1e-12, "cv %g", s.cv);
    EXPECT(fabs(s.p90 - 4.6) < 1e-12, "p90 %g (numpy: 4.6)", s.p90);
    double b[] = {10, 40, 20, 30};
    s = stats_compute(b, 4);
    EXPECT(s.median == 25 && fabs(s.p90 - 37) < 1e-12, "even count: median %g p90 %g", s.median, s.p90);
    double c[] = {7};
    s = stats_compute(c, 1);
    EXPECT(s.median == 7 && s.stddev == 0 && s.cv == 0 && s.p90 == 7, "one sample");
    s = stats_compute(NULL, 0);
    EXPECT(s.n == 0 && s.median == 0, "no samples");

    /* robust figures: one wild outlier moves the CV, not the noise figure */
    double d[] = {10, 11, 9, 10, 12, 8, 10, 11, 9, 1000};
    s = stats_compute(d, 10);
    EXPECT(s.median == 10 && s.mad == 1, "median %g, MAD %g (deviations 0,1,1,0,2,2,0,1,1,990)", s.median, s.mad);
    EXPECT(fabs(s.noise - 0.14826) < 1e-12, "noise %g = 1.4826 MAD / median", s.noise);
    EXPECT(s.cv > 2.5, "the CV is not robust: %g", s.cv);
    EXPECT(s.outliers == 1, "Tukey's fences flag the 1000 only: %lld", (long long)s.outliers);
    /* sorted: 8 9 9 10 10 10 11 11 12 1000; p99 at 0.99 x 9 = 8.91: 12 + 0.91 x (1000 - 12) */
    EXPECT(fabs(s.p99 - (12.0 + 0.91 * 988.0)) < 1e-9, "p99 %g", s.p99);
}

/* The order statistics that bound the 95% confidence interval of the median, as the
 * binomial tables give them (e.g. Conover, Practical Nonparametric Statistics). */
static void test_median_ci(void)
{
    struct { int64_t n, r; } t[] = {{1, 1}, {5, 1}, {6, 1}, {7, 1}, {8, 1}, {9, 2}, {10, 2}, {20, 6}, {30, 10},
                                    {50, 18}, {100, 40}};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        EXPECT(stats_median_ci_rank(t[i].n) == t[i].r, "n = %lld: rank %lld, expected %lld", (long long)t[i].n,
               (long long)stats_median_ci_rank(t[i].n), (long long)t[i].r);
    /* exact below 1000 and approximate above meet: */
    int64_t a = stats_median_ci_rank(1000), b = stats_median_ci_rank(1001);
    EXPECT(a >= 468 && a <= 470 && b >= 468 && b <= 471, "ranks near the switch: %lld, %lld", (long long)a, (long long)b);
    /* the selection-based interval equals the sorted one, odd and even counts */
    for (int64_t n = 1; n <= 301; n += 15) {
        double *x = malloc((size_t)n * sizeof *x), med, lo, hi;
        uint64_t state = (uint64_t)n * 2654435761u;
        for (int64_t i = 0; i < n; i++) {
            state = state * 6364136223846793005ull + 1;
            x[i] = (double)(state >> 40) + (i % 7 == 0 ? 1e6 : 0); /* with outliers and ties */
        }
        stats_median_ci(x, n, &med, &lo, &hi);
        stats s = stats_compute(x, n); /* sorts x */
        EXPECT(med == s.median && lo == s.ci_low && hi == s.ci_high, "n = %lld: selection %g [%g, %g] vs sort %g [%g, %g]",
               (long long)n, med, lo, hi, s.median, s.ci_low, s.ci_high);
        EXPECT(lo <= med && med <= hi, "n = %lld: the interval holds the median", (long long)n);
        free(x);
    }
}

/* The callback returns 1 ms plus its call number in nanoseconds, so every sample
 * names the call that produced it. */
typedef struct counter {
    int64_t calls;
} counter;

static double numbered(void *user)
{
    counter *c = user;
    return 1e-3 + 1e-9 * (double)(c->calls++);
}

static void test_shim(double warmup, int reps)
{
    counter c = {0};
    gbs_options o = {warmup, 0.02, reps};
    gbs_result r;
    char err[256];
    int rc = gbs_run("numbered", numbered, &c, &o, &r, err, sizeof err);
    EXPECT(rc == 0, "gbs_run: %s", err);
    if (rc)
        return;
    EXPECT(r.repetitions == reps, "%d repetitions reported, asked %d", r.repetitions, reps);
    EXPECT(r.n_samples == (int64_t)reps * r.iterations, "%lld samples for %d x %lld", (long long)r.n_samples, reps,
           (long long)r.iterations);
    /* 20 ms of 1 ms iterations: the reported run has about 20 */
    EXPECT(r.iterations >= 20 && r.iterations < 100, "iterations %lld", (long long)r.iterations);
    EXPECT(r.discarded + r.n_samples == c.calls, "discarded %lld + kept %lld != calls %lld", (long long)r.discarded,
           (long long)r.n_samples, (long long)c.calls);
    if (warmup > 0)
        EXPECT(r.discarded > 0, "warm-up calls must be discarded");
    /* the kept samples are consecutive calls within each repetition, and the last
     * repetition ends with the last call */
    bool consecutive = true;
    for (int64_t i = 1; i < r.n_samples; i++)
        if (i % r.iterations && fabs(r.samples[i] - r.samples[i - 1] - 1e-9) > 1e-12)
            consecutive = false;
    EXPECT(consecutive, "samples of one repetition are not consecutive calls");
    double last = 1e-3 + 1e-9 * (double)(c.calls - 1);
    EXPECT(fabs(r.samples[r.n_samples - 1] - last) < 1e-13, "last sample is not the last call");
    /* with one repetition, the kept samples are exactly the last calls: every warm-up
     * and estimation call came before them */
    if (reps == 1) {
        double first_kept = (r.samples[0] - 1e-3) * 1e9;
        EXPECT(fabs(first_kept - (double)(c.calls - r.n_samples)) < 0.5, "first kept call %.0f", first_kept);
    }
    free(r.samples);
}

static double failing(void *user)
{
    (void)user;
    return -1.0;
}

/* A fixed iteration count runs exactly that many, with no estimation. */
static void test_fixed_iterations(void)
{
    counter c = {0};
    gbs_options o = {0.0, 0.02, 1, 37};
    gbs_result r;
    char err[256];
    EXPECT(gbs_run("fixed", numbered, &c, &o, &r, err, sizeof err) == 0, "%s", err);
    EXPECT(r.n_samples == 37 && r.discarded == 0 && c.calls == 37 && r.first_kept == 0, "%lld kept, %lld discarded",
           (long long)r.n_samples, (long long)r.discarded);
    EXPECT(fabs(r.cost - (37e-3 + 1e-9 * 36 * 37 / 2)) < 1e-9, "the run's cost %g", r.cost);
    free(r.samples);
}

/* Pooling worker processes: the interval widens to hold the spread of the processes'
 * medians (t with k - 1 degrees of freedom), never narrows; workers whose layers took
 * more than 5% longer in all than the fastest's are the slow phase. */
static void test_processes(void)
{
    double med[3] = {100, 102, 104}, lo = 99.5, hi = 100.5;
    procs_pool_interval(102, med, 3, &lo, &hi);
    double h = 4.303 * 2.0 / sqrt(3.0); /* s = 2 */
    EXPECT(fabs(lo - (102 - h)) < 1e-2 && fabs(hi - (102 + h)) < 1e-2, "pooled interval %g..%g, expected +-%g", lo,
           hi, h);
    double same[3] = {100, 100, 100};
    lo = 99, hi = 101;
    procs_pool_interval(100, same, 3, &lo, &hi);
    EXPECT(lo == 99 && hi == 101, "equal medians narrowed or moved the interval: %g..%g", lo, hi);
    lo = 99, hi = 101;
    procs_pool_interval(100, med, 1, &lo, &hi);
    EXPECT(lo == 99 && hi == 101, "one process changed the interval: %g..%g", lo, hi);
    /* two processes: both medians and their distance again, not t(1) = 12.7 times it */
    double two[2] = {100, 104};
    lo = 101.5, hi = 102.5;
    procs_pool_interval(102, two, 2, &lo, &hi);
    EXPECT(fabs(lo - 98) < 1e-9 && fabs(hi - 106) < 1e-9, "two processes: %g..%g, expected 98..106", lo, hi);

    double sums[5] = {7000, 8100, 7300, 0, 7400}, precise[5] = {0};
    bool fast[5];
    int n = procs_fast_phase(sums, precise, 5, PROCS_PHASE_BAND, fast);
    EXPECT(n == 3 && fast[0] && !fast[1] && fast[2] && fast[3] && !fast[4],
           "fast phase: %d (%d %d %d %d %d), expected 7000, 7300 and the unknown", n, fast[0], fast[1], fast[2], fast[3],
           fast[4]);
    double all_slow[3] = {9000, 9100, 8900};
    EXPECT(procs_fast_phase(all_slow, precise, 3, PROCS_PHASE_BAND, fast) == 3, "one phase for all: none set aside");
    /* sums known to +-3% each: 7400 is within 5% + 3% + 3% of 7000, 8100 is not */
    double rough[5] = {0.03, 0.03, 0.03, 0.03, 0.03};
    n = procs_fast_phase(sums, rough, 5, PROCS_PHASE_BAND, fast);
    EXPECT(n == 4 && fast[4] && !fast[1], "rough sums: %d fast, 7400 %d, 8100 %d", n, fast[4], fast[1]);
    /* --phase-band 20: 8100 is within 20% of 7000; off: every worker is kept */
    n = procs_fast_phase(sums, precise, 5, 0.20, fast);
    EXPECT(n == 5, "a 20%% band: %d fast, expected all five", n);
    double far[3] = {1000, 5000, 9000};
    n = procs_fast_phase(far, precise, 3, -1, fast);
    EXPECT(n == 3 && fast[1] && fast[2], "band off: %d fast, expected all three", n);
}

/* The worker's set (procs.h) through its bytes and back: every byte of the struct
 * arrives (a field added to it reaches the workers with nobody forwarding it), its
 * strings and skipped layers with it, its options' pointers cleared; cut or padded
 * bytes are refused. */
static void test_measure_set(void)
{
    measure_set a;
    unsigned char *raw = (unsigned char *)&a;
    for (size_t i = 0; i < sizeof a; i++) /* every byte its own value, padding too */
        raw[i] = (unsigned char)(i * 37 + 11);
    a.batch = 3, a.dtype = DTYPE_BF16, a.pass = PASS_BACKWARD, a.mode = MODE_COLD, a.index = 2, a.count = 3;
    a.optimizer = OPTIMIZER_ADAMW;
    snprintf(a.backend, sizeof a.backend, "onednn");
    int skip[] = {4, -1, 7};
    a.skip = skip, a.n_skip = 3;
    a.str[SET_CONFIG] = "configs/resnet18.yaml", a.str[SET_ALGO_CACHE] = NULL, a.str[SET_FREEZE] = "layer1.*,fc";
    strbuf buf = {0};
    procs_set_encode(&a, &buf);
    measure_set b;
    EXPECT(procs_set_decode(buf.data, buf.len, &b), "a set decodes");
    EXPECT(b.str[SET_CONFIG] && !strcmp(b.str[SET_CONFIG], "configs/resnet18.yaml") && !b.str[SET_ALGO_CACHE] &&
               b.str[SET_FREEZE] && !strcmp(b.str[SET_FREEZE], "layer1.*,fc"),
           "its strings");
    EXPECT(b.n_skip == 3 && b.skip && b.skip[0] == 4 && b.skip[1] == -1 && b.skip[2] == 7, "its skipped layers");
    EXPECT(!b.mo.stop && !b.mo.waited && !b.mo.waited_user && !b.mo.waited_reset && !b.mo.label && !b.mo.at &&
               !b.mo.at_user && !b.mo.skip,
           "the options' pointers are the worker's own");
    /* every other byte as sent: the pointers set alike on both sides first */
    measure_set x, y;
    memcpy(&x, &a, sizeof x), memcpy(&y, &b, sizeof y);
    x.mo.stop = y.mo.stop = NULL, x.mo.waited = y.mo.waited = NULL, x.mo.waited_user = y.mo.waited_user = NULL;
    x.mo.waited_reset = y.mo.waited_reset = NULL, x.mo.label = y.mo.label = NULL, x.mo.at = y.mo.at = NULL;
    x.mo.at_user = y.mo.at_user = NULL, x.mo.skip = y.mo.skip = NULL;
    for (int i = 0; i < SET_STRINGS; i++)
        x.str[i] = y.str[i] = NULL;
    x.skip = y.skip = NULL;
    EXPECT(memcmp(&x, &y, sizeof x) == 0, "every byte of the set arrives");
    free(b.skip);
    EXPECT(!procs_set_decode(buf.data, buf.len - 1, &b), "a set cut short is refused");
    strbuf_append(&buf, "x", 1);
    EXPECT(!procs_set_decode(buf.data, buf.len, &b), "a set with bytes after it is refused");
    EXPECT(!procs_set_decode(buf.data, 10, &b), "ten bytes are not a set");
    strbuf_free(&buf);
}

int main(void)
{
    test_measure_set();
    test_processes();
    test_stats();
    test_median_ci();
    test_fixed_iterations();
    test_shim(0.0, 1);
    test_shim(0.01, 1);
    test_shim(0.005, 3);
    gbs_options o = {0, 0.01, 1};
    gbs_result r;
    char err[256];
    EXPECT(gbs_run("failing", failing, NULL, &o, &r, err, sizeof err) != 0, "a failing iteration must fail the run");
    return test_summary("test_stats");
}
