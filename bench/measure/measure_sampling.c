/* The sampling policy: units sampled in rounds of chunks (one Google Benchmark run each),
 * the stopping rules, samples disturbed by waits for a CPU, the canary and the timer's
 * floor. Nothing here knows what a unit times. */
#include "measure_internal.h"
#include "log.h"

#include <stdlib.h>
#include <string.h>

/* The names of rows' statuses, stopping reasons and timing modes, as the CSV and the
 * command line spell them. */
const char *measure_row_status_name(row_status s)
{
    static const char *const names[] = {"", "ok", "dedupe", "view", "skipped", "failed"};
    return s >= ROW_NONE && s <= ROW_FAILED ? names[s] : "?";
}

const char *measure_stop_reason_name(stop_reason s)
{
    static const char *const names[] = {"", "noise", "timeout", "samples"};
    return s >= STOP_NONE && s <= STOP_SAMPLES ? names[s] : "?";
}

static const char *const mode_names[MODE_COUNT] = {NULL,      "auto",    "warm",  "cold",     "batch",
                                                    "inmodel", "chained", "graph", "transfer", "floor"};

const char *measure_mode_name(timing_mode m) { return m > MODE_NONE && m < MODE_COUNT ? mode_names[m] : NULL; }

timing_mode measure_mode_from_name(const char *name)
{
    for (int m = MODE_AUTO; m <= MODE_BATCH; m++)
        if (name && strcmp(name, mode_names[m]) == 0)
            return (timing_mode)m;
    return MODE_NONE;
}

void measure_row_fail(layer_result *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    r->status = ROW_FAILED;
    vsnprintf(r->note, sizeof r->note, fmt, ap);
    va_end(ap);
}

void measure_note_append(layer_result *r, const char *fmt, ...)
{
    size_t len = strlen(r->note);
    if (len && len + 2 < sizeof r->note)
        strcpy(r->note + len, "; "), len += 2;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->note + len, sizeof r->note - len, fmt, ap);
    va_end(ap);
}

void dvec_push(dvec *d, double x)
{
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 256;
        d->v = xrealloc(d->v, (size_t)d->cap * sizeof *d->v);
    }
    d->v[d->n++] = x;
}

/* ---- one timed sample -------------------------------------------------------------------- */

/* Starts a sample: the device is held (where the backend can) so that queuing the
 * launches is not timed, the caches are flushed for a cold sample, then the timer
 * starts. timer_stop releases the hold. */
void measure_begin_sample(const backend *b, bool hold, bool cold)
{
    const backend_ops *ops = b->ops;
    if (hold && ops->timing.hold)
        ops->timing.hold(b->ctx);
    if (cold && ops->timing.flush_cache)
        ops->timing.flush_cache(b->ctx);
    ops->timing.timer_start(b->ctx);
}

/* An empty sample, held and flushed like a real one: the timer's floor. */
typedef struct empty_sample {
    const backend *b;
    bool cold;
} empty_sample;

static double time_empty_sample(void *user)
{
    empty_sample *e = user;
    measure_begin_sample(e->b, true, e->cold);
    return e->b->ops->timing.timer_stop(e->b->ctx);
}

/* ---- units: what is sampled in rounds ----------------------------------------------------- */

/* A sample function that gives up (fails) once a stop was asked for, so a long layer
 * does not delay an interruption, and that records how long the threads waited for a
 * CPU during each call (outside the timed part). */
typedef struct stoppable {
    gbs_iteration_fn fn;
    void *user;
    const measure_options *o;
    dvec *waits;    /* per call of the chunk: seconds waited; -1 unknown */
} stoppable;

static double stoppable_sample(void *user)
{
    stoppable *s = user;
    const measure_options *o = s->o;
    if (o->stop && *o->stop)
        return -1.0;
    double w0 = o->waited ? o->waited(o->waited_user) : -1.0;
    double t = s->fn(s->user);
    double w1 = o->waited && w0 >= 0 ? o->waited(o->waited_user) : -1.0;
    dvec_push(s->waits, w1 >= 0 ? w1 - w0 : -1.0);
    return t;
}

/* A sample whose threads waited for a CPU for more than MEASURE_DISTURBED_SHARE of it. */
bool measure_disturbed(double waited, double sample) { return waited > MEASURE_DISTURBED_SHARE * sample; }

/* A sample this long re-warms the caches within itself: its chunks keep their first
 * sample. Reloading a layer's data after other layers ran costs a fraction of a
 * millisecond (a few MB from memory), 1% of 50 ms; dropping a sample of a 0.5 s forward
 * would halve what --timeout buys. */
#define REWARM_MAX_SECONDS 0.05

/* One chunk: a Google Benchmark run. The first has the warm-up and the iteration
 * estimate; later ones run the first's count plus one, whose first sample (the caches
 * were left to other layers in between) is dropped, unless samples are long
 * (REWARM_MAX_SECONDS). */
static bench_status run_chunk(unit *u, const measure_options *o, bool first)
{
    bool rewarm = !first && !(u->samples.n > 0 && u->samples.v[0] >= REWARM_MAX_SECONDS);
    gbs_options go = {first ? o->warmup_time : 0.0, o->min_time, 1,
                      first ? 0 : u->chunk_iterations + (rewarm ? 1 : 0)};
    gbs_result gr;
    char err[200];
    u->waits.n = 0;
    stoppable s = {u->fn, u->user, o, &u->waits};
    backend_clear_error(u->b); /* a failure of another unit (or at setup) was reported there */
    double t0 = bench_now();
    int rc = gbs_run(u->name, stoppable_sample, &s, &go, &gr, err, (int)sizeof err);
    /* the budget Google Benchmark counted (untimed work included); the wall clock
     * where the run failed */
    u->spent += rc == 0 ? gr.cost : bench_now() - t0;
    if (rc != 0) {
        const char *why = backend_last_error(u->b);
        measure_row_fail(u->r, "timing failed: %s", *why ? why : err);
        return BENCH_ERR_BACKEND;
    }
    int64_t skip = !rewarm || gr.n_samples < 2 ? 0 : 1;
    if (first)
        u->chunk_iterations = gr.iterations;
    bool *dist = xcalloc((size_t)(gr.n_samples > 0 ? gr.n_samples : 1), sizeof *dist);
    for (int64_t i = skip; i < gr.n_samples && u->samples.n < MEASURE_MAX_SAMPLES; i++) {
        int64_t call = gr.first_kept + i;
        dist[i - skip] = call < u->waits.n && measure_disturbed(u->waits.v[call], gr.samples[i]);
        dvec_push(&u->samples, gr.samples[i]);
        if (dist[i - skip])
            u->r->disturbed++;
        else
            dvec_push(&u->clean, gr.samples[i]);
    }
    u->r->discarded += gr.discarded + skip;
    if (u->kept)
        u->kept(u, gr.first_kept + skip, gr.n_samples - skip, dist);
    free(dist);
    free(gr.samples);
    return BENCH_OK;
}

/* The stopping rule, after each chunk, on the undisturbed samples: a contended unit
 * goes on sampling, for clean samples, until --timeout. */
static void check_done(unit *u, const measure_options *o)
{
    double med, lo, hi;
    if (u->clean.n >= o->min_samples) {
        stats_median_ci(u->clean.v, u->clean.n, &med, &lo, &hi);
        if (stats_ci_rel(med, lo, hi) <= o->max_noise) {
            u->done = true, u->r->stop = STOP_NOISE;
            return;
        }
    }
    int64_t least = o->min_samples < TIMEOUT_MIN_SAMPLES ? o->min_samples : TIMEOUT_MIN_SAMPLES;
    if (u->spent >= o->timeout && u->samples.n >= least)
        u->done = true, u->r->stop = STOP_TIMEOUT;
    else if (u->samples.n >= MEASURE_MAX_SAMPLES)
        u->done = true, u->r->stop = STOP_SAMPLES;
}

void measure_row_stats(layer_result *r, const double *samples, int64_t n)
{
    free(r->kept);
    r->kept = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *r->kept);
    memcpy(r->kept, samples, (size_t)n * sizeof *samples);
    r->n_kept = n;
    double *sorted = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *sorted);
    memcpy(sorted, samples, (size_t)n * sizeof *samples);
    r->st = stats_compute(sorted, n);
    free(sorted);
}

/* Whether a unit's statistics are of its clean samples alone: when it has at least
 * TIMEOUT_MIN_SAMPLES of them. The row is contended when samples were disturbed and
 * fewer than min_samples (or than all it took) stayed clean, or more than
 * MEASURE_CONTENDED_SHARE of them were disturbed: a process that shares the cores that
 * often also evicts the caches between samples, which the waits do not show (with a
 * busy loop on one of two cores, ResNet-18's convolutions with 41% and 76% of their
 * samples disturbed ran 12% and 16% slower in their undisturbed ones). */
bool unit_use_clean(const unit *u) { return u->clean.n >= TIMEOUT_MIN_SAMPLES || u->clean.n == u->samples.n; }

/* Statistics per launch from the kept samples. */
void unit_finish(unit *u, const measure_options *o)
{
    layer_result *r = u->r;
    if (r->status == ROW_FAILED)
        return;
    dvec *d = unit_use_clean(u) ? &u->clean : &u->samples;
    for (int64_t i = 0; i < d->n; i++)
        d->v[i] /= u->launches;
    measure_row_stats(r, d->v, d->n);
    int64_t want = o->min_samples < u->samples.n ? o->min_samples : u->samples.n;
    r->contended = r->disturbed > 0 && (u->clean.n < want || r->disturbed > MEASURE_CONTENDED_SHARE * u->samples.n);
    r->launches = u->launches;
    r->status = ROW_OK;
    r->near_floor = r->st.median * u->launches < NEAR_FLOOR_FACTOR * u->floor;
    if (r->stop == STOP_TIMEOUT)
        measure_note_append(r, "stopped on --timeout: median known to +-%.1f%%",
                    100 * stats_ci_rel(r->st.median, r->st.ci_low, r->st.ci_high));
    if (r->near_floor)
        measure_note_append(r, "within 10x of the timer's floor");
    if (r->contended)
        measure_note_append(r, "contended: %lld of %lld samples measure_disturbed (its threads waited for a CPU)%s",
                    (long long)r->disturbed, (long long)u->samples.n, unit_use_clean(u) ? "" : "; all are in the statistics");
}

void unit_free(unit *u)
{
    free(u->samples.v), free(u->clean.v), free(u->waits.v);
}

/* ---- the canary --------------------------------------------------------------------------- */

double measure_canary(void)
{
    double a = 1.0, b = 1.5, c = 2.0, d = 2.5;
    double t0 = bench_now();
    for (int i = 0; i < 65536; i++) {
        a = a * 0.999999 + 1e-6, b = b * 0.999999 + 1e-6, c = c * 0.999999 + 1e-6, d = d * 0.999999 + 1e-6;
        __asm__ volatile("" : "+x"(a), "+x"(b), "+x"(c), "+x"(d)); /* four chains, as written */
    }
    double t = bench_now() - t0;
    __asm__ volatile("" ::"x"(a + b + c + d));
    return t;
}

/* One call of a round's probe, fn(ctx), into *v: false when its threads waited for a CPU
 * (measure_disturbed over the call's wall time). */
static bool probe_undisturbed(const measure_options *o, double (*fn)(void *), void *ctx, double *v)
{
    double w0 = o->waited ? o->waited(o->waited_user) : -1.0, t0 = bench_now();
    *v = fn(ctx);
    double t = bench_now() - t0;
    double w1 = w0 >= 0 ? o->waited(o->waited_user) : -1.0;
    return !(w1 >= 0 && measure_disturbed(w1 - w0, t));
}

static double host_canary(void *ctx)
{
    (void)ctx;
    return measure_canary();
}

/* The canary of one round: the backend's (backend_ops.canary), or the single-thread
 * chain; the median of five timings, the disturbed ones left out. */
static double canary_round(const measure_options *o, const backend *b)
{
    double v[5];
    int n = 0;
    for (int k = 0; k < 8 && n < 5; k++)
        n += probe_undisturbed(o, b->ops->timing.canary ? b->ops->timing.canary : host_canary, b->ctx, &v[n]);
    if (n == 0)
        return 0.0;
    stats s = stats_compute(v, n);
    return s.median;
}

/* The read stream of one round: the first of three tries that was not disturbed, else
 * the fastest of the three (on a busy machine every try may be: then the figure is as
 * slow as the step's own samples, which are kept as contended rows); 0 where the
 * backend could not measure it. */
static double stream_round(const measure_options *o, const backend *b)
{
    double best = 0.0;
    for (int k = 0; k < 3; k++) {
        double v = 0.0;
        if (probe_undisturbed(o, b->ops->timing.stream, b->ctx, &v))
            return v > 0 ? v : 0.0;
        best = v > best ? v : best;
    }
    return best;
}

/* The median, min and max of a per-round series; zeros when empty. */
static stats round_series(const double *v, int n)
{
    if (n == 0)
        return (stats){0};
    double *w = xmalloc((size_t)n * sizeof *w);
    memcpy(w, v, (size_t)n * sizeof *w);
    stats s = stats_compute(w, n);
    free(w);
    return s;
}

void measure_stream_summary(const run_result *r, double *median, double *min, double *max)
{
    stats s = round_series(r->stream, r->n_stream);
    *median = s.median, *min = s.min, *max = s.max;
}

void measure_canary_summary(const run_result *r, double *median, double *drift)
{
    stats s = round_series(r->canary, r->n_canary);
    *median = s.median;
    *drift = s.median > 0 ? (s.max - s.min) / s.median : 0.0;
}

void measure_progress(const measure_options *o, const backend *b, timing_mode mode, int round, int left, int n,
                     const char *what)
{
    if (!o->progress)
        return;
    if (what)
        log_progress("%s%s%s %s: round %d, %d of %d sampling: %s", o->label ? o->label : "",
                o->label ? ", " : "", b->ops->name, measure_mode_name(mode), round + 1, left, n, what);
    else
        log_progress("%s", "");
    fflush(stderr);
}

/* The read stream is timed at the start of a round once this many times its last
 * timing's duration has passed since: it takes at most a tenth of the sampling (0.4 s
 * apart for its 40 ms on the 2-vCPU VM), however short the rounds. */
#define STREAM_SHARE_INV 9.0

/* Samples every unit in rounds until each has stopped; with canary, times the canary
 * at the start of every round (its per-round medians appended to *canary); with stream,
 * the backend's read stream (STREAM_SHARE_INV). */
bench_status measure_sample_units(unit *units, int n, const measure_options *o, const backend *b, timing_mode mode,
                                 dvec *canary, dvec *stream, char *err, size_t errlen)
{
    bool streams = stream && b->ops->timing.stream;
    double next_stream = 0.0;
    for (int round = 0;; round++) {
        int left = 0;
        for (int i = 0; i < n; i++)
            left += !units[i].done;
        if (!left)
            return BENCH_OK;
        double c = canary ? canary_round(o, b) : 0.0;
        if (c > 0) /* 0: every timing of it was disturbed */
            dvec_push(canary, c);
        if (streams && bench_now() >= next_stream) {
            double t0 = bench_now(), bw = stream_round(o, b), t1 = bench_now();
            next_stream = t1 + STREAM_SHARE_INV * (t1 - t0);
            if (bw > 0)
                dvec_push(stream, bw);
        }
        for (int i = 0; i < n; i++) {
            unit *u = &units[i];
            if (u->done)
                continue;
            if (o->at)
                o->at(o->at_user, u->layer);
            measure_progress(o, b, mode, round, left, n, u->name);
            if (run_chunk(u, o, round == 0) != BENCH_OK)
                u->done = true;
            if (o->stop && *o->stop) {
                measure_progress(o, b, mode, 0, 0, 0, NULL);
                snprintf(err, errlen, "in round %d, at '%s'", round + 1, u->name);
                return BENCH_ERR_INTERRUPTED;
            }
            if (!u->done)
                check_done(u, o);
        }
    }
}

/* ---- the timer's floor -------------------------------------------------------------------- */

bench_status measure_timer_floor(const backend *b, const measure_options *o, timer_floor *f, char *err,
                                 size_t errlen)
{
    measure_options fo = *o;
    fo.warmup_time = 0.01;
    fo.min_time = 0.01;
    fo.max_noise = 0.0; /* a fixed budget: */
    fo.timeout = 0.05;
    fo.min_samples = 1;
    empty_sample warm = {b, false}, cold = {b, true};
    layer_result rw, rc;
    memset(&rw, 0, sizeof rw), memset(&rc, 0, sizeof rc);
    unit units[2] = {{.b = b, .r = &rw, .layer = -1, .name = "floor (warm)", .fn = time_empty_sample, .user = &warm,
                      .launches = 1},
                     {.b = b, .r = &rc, .layer = -1, .name = "floor (cold)", .fn = time_empty_sample, .user = &cold,
                      .launches = 1}};
    int n = b->ops->timing.flush_cache ? 2 : 1;
    backend_clear_error(b);
    bench_status st = measure_sample_units(units, n, &fo, b, MODE_FLOOR, NULL, NULL, err, errlen);
    for (int i = 0; i < n; i++)
        unit_finish(&units[i], &fo);
    f->warm = rw.st.median;
    f->cold = n == 2 ? rc.st.median : rw.st.median;
    for (int i = 0; i < 2; i++)
        unit_free(&units[i]);
    free(rw.kept), free(rc.kept);
    if (st == BENCH_OK && (rw.status == ROW_FAILED || rc.status == ROW_FAILED)) {
        snprintf(err, errlen, "timing an empty sample failed: %s", rw.status == ROW_FAILED ? rw.note : rc.note);
        st = BENCH_ERR_BACKEND;
    }
    return st;
}
