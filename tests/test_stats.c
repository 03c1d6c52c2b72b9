/* Statistics on known samples, and the Google Benchmark shim: it must hand back
 * exactly the iterations of the runs Google Benchmark reported, never warm-up or
 * iteration-estimation calls. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "gbench_shim.h"
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

int main(void)
{
    test_stats();
    test_shim(0.0, 1);
    test_shim(0.01, 1);
    test_shim(0.005, 3);
    gbs_options o = {0, 0.01, 1};
    gbs_result r;
    char err[256];
    EXPECT(gbs_run("failing", failing, NULL, &o, &r, err, sizeof err) != 0, "a failing iteration must fail the run");
    return test_summary("test_stats");
}
