#include "measure.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "gbench_shim.h"
#include "schedstat.h"

const char *row_status_name(row_status s)
{
    static const char *const names[] = {"", "ok", "dedupe", "view", "skipped", "failed"};
    return s >= ROW_NONE && s <= ROW_FAILED ? names[s] : "?";
}

const char *stop_reason_name(stop_reason s)
{
    static const char *const names[] = {"", "noise", "timeout", "samples"};
    return s >= STOP_NONE && s <= STOP_SAMPLES ? names[s] : "?";
}

bool measure_mode_valid(const char *mode)
{
    return !strcmp(mode, "auto") || !strcmp(mode, "warm") || !strcmp(mode, "cold") || !strcmp(mode, "batch");
}

bench_status measure_layer_data(const layer *l, uint64_t seed, float **in, float **w)
{
    const layer_desc *d = layer_desc_get(l->kind);
    layer_rng rng;
    layer_rng_seed(&rng, seed);
    bool ok = true;
    for (int k = 0; k < l->n_inputs; k++)
        ok &= (in[k] = bench_alloc_floats(shape_numel(&l->ins[k]))) != NULL;
    *w = l->n_weight_floats ? bench_alloc_floats(l->n_weight_floats) : NULL;
    if (!ok || (l->n_weight_floats && !*w)) {
        measure_free_data(l, in, w);
        return BENCH_ERR_NOMEM;
    }
    /* never zeros: they hide unwritten outputs and can run faster than real data */
    for (int k = 0; k < l->n_inputs; k++)
        layer_fill_uniform(in[k], shape_numel(&l->ins[k]), -1.0f, 1.0f, &rng);
    if (*w)
        d->init_weights(l, *w, &rng);
    return BENCH_OK;
}

void measure_free_data(const layer *l, float **in, float **w)
{
    for (int k = 0; k < l->n_inputs; k++)
        free(in[k]), in[k] = NULL;
    free(*w);
    *w = NULL;
}

static void row_fail(layer_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void row_fail(layer_result *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    r->status = ROW_FAILED;
    vsnprintf(r->note, sizeof r->note, fmt, ap);
    va_end(ap);
}

static void note_append(layer_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note_append(layer_result *r, const char *fmt, ...)
{
    size_t len = strlen(r->note);
    if (len && len + 2 < sizeof r->note)
        strcpy(r->note + len, "; "), len += 2;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->note + len, sizeof r->note - len, fmt, ap);
    va_end(ap);
}

/* A growing array of doubles. */
typedef struct dvec {
    double *v;
    int64_t n, cap;
} dvec;

static void dvec_push(dvec *d, double x)
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
static void begin_sample(const backend *b, bool hold, bool cold)
{
    const backend_ops *ops = b->ops;
    if (hold && ops->timing.hold)
        ops->timing.hold(b->ctx);
    if (cold && ops->timing.flush_cache)
        ops->timing.flush_cache(b->ctx);
    ops->timing.timer_start(b->ctx);
}

typedef struct timed_layer {
    const backend *b;
    backend_layer *state;
    const float **in;   /* the layer's inputs */
    float *out;
    int launches;   /* per sample */
    bool cold;      /* flush caches before each sample */
    bool hold;      /* hold the device while the launches are queued */
    void *graph;    /* batch mode: the launches captured as one graph, or NULL */
} timed_layer;

/* One sample: the whole time of one launch, or of `launches` back to back (one graph
 * launch where they were captured). Google Benchmark gets this whole time, so its
 * warm-up and --min-time mean what they say; the kept samples are divided by the
 * launch count afterwards. */
static double time_layer_sample(void *user)
{
    timed_layer *t = user;
    const backend_ops *ops = t->b->ops;
    begin_sample(t->b, t->hold, t->cold);
    if (t->graph)
        ops->timing.graph_launch(t->b->ctx, t->graph);
    else
        for (int i = 0; i < t->launches; i++)
            backend_layer_run(t->state, t->in, t->out);
    return ops->timing.timer_stop(t->b->ctx);
}

/* An empty sample, held and flushed like a real one: the timer's floor. */
typedef struct empty_sample {
    const backend *b;
    bool cold;
} empty_sample;

static double time_empty_sample(void *user)
{
    empty_sample *e = user;
    begin_sample(e->b, true, e->cold);
    return e->b->ops->timing.timer_stop(e->b->ctx);
}

#define BATCH_SAMPLE_SECONDS 1e-3

/* The fastest of a few single warm samples: how long one call takes. */
static double single_call_seconds(timed_layer *t)
{
    double best = 1e9;
    timed_layer one = *t;
    one.launches = 1;
    one.cold = false;
    one.graph = NULL;
    for (int i = 0; i < 5; i++) {
        double s = time_layer_sample(&one);
        if (s >= 0 && s < best)
            best = s;
        if (best > BATCH_SAMPLE_SECONDS) /* long enough that the floor does not matter */
            break;
    }
    return best;
}

/* Batch mode: enough back-to-back launches that one sample lasts about a
 * millisecond (BATCH_SAMPLE_SECONDS), far above the timer's floor; between 1 and 1000. */
#define BATCH_MAX_LAUNCHES 1000
/* Launches queued while the device is held, at most (a stream's launch queue holds a
 * thousand or so; a host blocked on a full queue would wait for the hold). */
#define HOLD_MAX_LAUNCHES 256
/* auto: batch for a call shorter than this many timer floors. */
#define AUTO_BATCH_FLOORS 20.0
/* A row whose sample is shorter than this many floors is marked near_floor. */
#define NEAR_FLOOR_FACTOR 10.0

/* Captures the batch's launches as one graph where the backend has graphs; otherwise
 * (or if the capture fails) they are launched from the stream, and the note says so. */
static void prepare_batch(timed_layer *t, double single, layer_result *r)
{
    const backend_ops *ops = t->b->ops;
    double n = single > 0 ? BATCH_SAMPLE_SECONDS / single : BATCH_MAX_LAUNCHES;
    t->launches = n < 1 ? 1 : n > BATCH_MAX_LAUNCHES ? BATCH_MAX_LAUNCHES : (int)n;
    if (ops->timing.graph_begin) {
        bench_status st = ops->timing.graph_begin(t->b->ctx);
        for (int i = 0; st == BENCH_OK && i < t->launches; i++)
            backend_layer_run(t->state, t->in, t->out);
        if (st == BENCH_OK)
            st = ops->timing.graph_end(t->b->ctx, &t->graph);
        if (st == BENCH_OK) {
            note_append(r, "%d launches per sample, captured as one graph", t->launches);
            return;
        }
        t->graph = NULL;
        note_append(r, "graph capture failed (%s); %d launches per sample from the stream", backend_last_error(t->b),
                    t->launches);
        backend_clear_error(t->b); /* the layer can still be timed from the stream */
    } else {
        note_append(r, "%d launches per sample", t->launches);
    }
    t->hold = t->launches <= HOLD_MAX_LAUNCHES;
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
static bool disturbed(double waited, double sample) { return waited > MEASURE_DISTURBED_SHARE * sample; }

typedef struct unit unit;
struct unit {
    const backend *b;
    layer_result *r;        /* the row its statistics go to */
    int layer;              /* the layer it times, -1 for the whole-model rows and the floor */
    const char *name;
    gbs_iteration_fn fn;
    void *user;
    int launches;           /* per sample */
    double floor;           /* the timer's floor for its mode (near_floor) */
    double spent;           /* seconds its chunks cost so far (Google Benchmark's count) */
    int64_t chunk_iterations; /* iterations of every chunk after the first */
    dvec samples;           /* whole-sample seconds, kept, disturbed or not */
    dvec clean;             /* ... of them, those not disturbed */
    dvec waits;             /* per call of the chunk being run: seconds waited for a CPU */
    bool done;
    /* optional: called with the calls [first, first + n) that Google Benchmark kept
     * from the chunk just run, and which of them were disturbed (the chained forward
     * collects its in-model marks) */
    void (*kept)(unit *u, int64_t first, int64_t n, const bool *dist);
};

/* A sample this long re-warms the caches within itself: its chunks keep their first
 * sample. Reloading a layer's data after other layers ran costs a fraction of a
 * millisecond (a few MB from memory), 1% of 50 ms; dropping a sample of a 0.5 s forward
 * would halve what --timeout buys. */
#define REWARM_MAX_SECONDS 0.05
/* --timeout stops a unit once it has this many samples (or --min-samples, if fewer),
 * and not before: fewer give neither a median worth the name nor a noise figure. */
#define TIMEOUT_MIN_SAMPLES 3

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
        row_fail(u->r, "timing failed: %s", *why ? why : err);
        return BENCH_ERR_BACKEND;
    }
    int64_t skip = !rewarm || gr.n_samples < 2 ? 0 : 1;
    if (first)
        u->chunk_iterations = gr.iterations;
    bool *dist = xcalloc((size_t)(gr.n_samples > 0 ? gr.n_samples : 1), sizeof *dist);
    for (int64_t i = skip; i < gr.n_samples && u->samples.n < MEASURE_MAX_SAMPLES; i++) {
        int64_t call = gr.first_kept + i;
        dist[i - skip] = call < u->waits.n && disturbed(u->waits.v[call], gr.samples[i]);
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
static bool use_clean(const unit *u) { return u->clean.n >= TIMEOUT_MIN_SAMPLES || u->clean.n == u->samples.n; }

/* Statistics per launch from the kept samples. */
static void finish_unit(unit *u, const measure_options *o)
{
    layer_result *r = u->r;
    if (r->status == ROW_FAILED)
        return;
    dvec *d = use_clean(u) ? &u->clean : &u->samples;
    for (int64_t i = 0; i < d->n; i++)
        d->v[i] /= u->launches;
    measure_row_stats(r, d->v, d->n);
    int64_t want = o->min_samples < u->samples.n ? o->min_samples : u->samples.n;
    r->contended = r->disturbed > 0 && (u->clean.n < want || r->disturbed > MEASURE_CONTENDED_SHARE * u->samples.n);
    r->launches = u->launches;
    r->status = ROW_OK;
    r->near_floor = r->st.median * u->launches < NEAR_FLOOR_FACTOR * u->floor;
    if (r->stop == STOP_TIMEOUT)
        note_append(r, "stopped on --timeout: median known to +-%.1f%%",
                    100 * stats_ci_rel(r->st.median, r->st.ci_low, r->st.ci_high));
    if (r->near_floor)
        note_append(r, "within 10x of the timer's floor");
    if (r->contended)
        note_append(r, "contended: %lld of %lld samples disturbed (its threads waited for a CPU)%s",
                    (long long)r->disturbed, (long long)u->samples.n, use_clean(u) ? "" : "; all are in the statistics");
}

static void free_unit(unit *u)
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

/* The canary of one round: the backend's (backend_ops.canary), or the single-thread
 * chain; the median of five timings, the disturbed ones left out. */
static double canary_round(const measure_options *o, const backend *b)
{
    double v[5];
    int n = 0;
    for (int k = 0; k < 8 && n < 5; k++) {
        double w0 = o->waited ? o->waited(o->waited_user) : -1.0;
        double t = b->ops->timing.canary ? b->ops->timing.canary(b->ctx) : measure_canary();
        double w1 = w0 >= 0 ? o->waited(o->waited_user) : -1.0;
        if (!(w1 >= 0 && disturbed(w1 - w0, t)))
            v[n++] = t;
    }
    if (n == 0)
        return 0.0;
    stats s = stats_compute(v, n);
    return s.median;
}

void measure_canary_summary(const run_result *r, double *median, double *drift)
{
    *median = *drift = 0.0;
    if (r->n_canary == 0)
        return;
    double *v = xmalloc((size_t)r->n_canary * sizeof *v);
    memcpy(v, r->canary, (size_t)r->n_canary * sizeof *v);
    stats s = stats_compute(v, r->n_canary);
    free(v);
    *median = s.median;
    *drift = s.median > 0 ? (s.max - s.min) / s.median : 0.0;
}

static void progress(const measure_options *o, const backend *b, const char *mode, int round, int left, int n,
                     const char *what)
{
    if (!o->progress)
        return;
    if (what)
        fprintf(stderr, "\r\033[K%s%s%s %s: round %d, %d of %d sampling: %s", o->label ? o->label : "",
                o->label ? ", " : "", b->ops->name, mode, round + 1, left, n, what);
    else
        fprintf(stderr, "\r\033[K");
    fflush(stderr);
}

/* Samples every unit in rounds until each has stopped; with canary, times the canary
 * at the start of every round (its per-round medians appended to *canary). */
static bench_status sample_units(unit *units, int n, const measure_options *o, const backend *b, const char *mode,
                                 dvec *canary, char *err, size_t errlen)
{
    for (int round = 0;; round++) {
        int left = 0;
        for (int i = 0; i < n; i++)
            left += !units[i].done;
        if (!left)
            return BENCH_OK;
        double c = canary ? canary_round(o, b) : 0.0;
        if (c > 0) /* 0: every timing of it was disturbed */
            dvec_push(canary, c);
        for (int i = 0; i < n; i++) {
            unit *u = &units[i];
            if (u->done)
                continue;
            if (o->at)
                o->at(o->at_user, u->layer);
            progress(o, b, mode, round, left, n, u->name);
            if (run_chunk(u, o, round == 0) != BENCH_OK)
                u->done = true;
            if (o->stop && *o->stop) {
                progress(o, b, mode, 0, 0, 0, NULL);
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
    bench_status st = sample_units(units, n, &fo, b, "floor", NULL, err, errlen);
    for (int i = 0; i < n; i++)
        finish_unit(&units[i], &fo);
    f->warm = rw.st.median;
    f->cold = n == 2 ? rc.st.median : rw.st.median;
    for (int i = 0; i < 2; i++)
        free_unit(&units[i]);
    free(rw.kept), free(rc.kept);
    if (st == BENCH_OK && (rw.status == ROW_FAILED || rc.status == ROW_FAILED)) {
        snprintf(err, errlen, "timing an empty sample failed: %s", rw.status == ROW_FAILED ? rw.note : rc.note);
        st = BENCH_ERR_BACKEND;
    }
    return st;
}

/* ---- isolated layers ---------------------------------------------------------------------- */

/* Buffers every isolated layer shares: each runs alone, so one input area (random,
 * never zeros) holding all of a layer's inputs side by side, and one output of the
 * largest size, serve them all. */
typedef struct scratch {
    float *in, *out;
} scratch;

typedef struct layer_unit {
    timed_layer t;
    const float **in; /* into the scratch input: n_inputs pointers; owned */
    float *w;         /* weights in backend memory */
} layer_unit;

static bench_status scratch_alloc(const model *m, const backend *b, uint64_t seed, scratch *s)
{
    int64_t in = 1, out = 1;
    for (int i = 0; i < m->n_layers; i++) {
        const layer *l = &m->layers[i];
        int64_t all = 0;
        for (int k = 0; k < l->n_inputs; k++)
            all += shape_numel(&l->ins[k]);
        in = all > in ? all : in;
        out = shape_numel(&l->out) > out ? shape_numel(&l->out) : out;
    }
    float *host = bench_alloc_floats(in);
    if (!host)
        return BENCH_ERR_NOMEM;
    layer_rng rng;
    layer_rng_seed(&rng, seed);
    layer_fill_uniform(host, in, -1.0f, 1.0f, &rng);
    s->in = backend_alloc_floats(b, in, host);
    s->out = backend_alloc_floats(b, out, NULL);
    free(host);
    return s->in && s->out ? BENCH_OK : BENCH_ERR_NOMEM;
}

/* Untimed setup of one isolated layer in its mode: weights, the backend's setup, and
 * for batch mode the launch count (and graph). Fills r on failure. */
static void setup_layer(const layer *l, int index, const backend *b, const char *mode, const timer_floor *floor,
                        const scratch *s, uint64_t seed, layer_unit *lu, layer_result *r, unit *u)
{
    const backend_ops *ops = b->ops;
    float *w = NULL;
    backend_clear_error(b);
    lu->in = xmalloc((size_t)l->n_inputs * sizeof *lu->in);
    for (int k = 0, at = 0; k < l->n_inputs; k++) {
        lu->in[k] = s->in + at;
        at += (int)shape_numel(&l->ins[k]);
    }
    lu->t = (timed_layer){.b = b, .in = lu->in, .out = s->out, .launches = 1, .hold = true};
    if (l->n_weight_floats) {
        layer_rng rng;
        layer_rng_seed(&rng, seed);
        if (!(w = bench_alloc_floats(l->n_weight_floats))) {
            row_fail(r, "out of host memory for the layer's weights");
            return;
        }
        layer_desc_get(l->kind)->init_weights(l, w, &rng);
    }
    lu->w = w ? backend_alloc_floats(b, l->n_weight_floats, w) : NULL;
    free(w);
    if (w && !lu->w) {
        const char *why = backend_last_error(b);
        row_fail(r, "out of %s memory for the layer's weights%s%s", ops->device_memory ? "device" : "host",
                 *why ? ": " : "", why);
        return;
    }
    char why[96] = "";
    bench_status st = backend_layer_setup(b, l, lu->w, &lu->t.state, why, sizeof why, &r->workspace_bytes);
    if (st == BENCH_ERR_UNSUPPORTED) {
        r->status = ROW_SKIPPED;
        snprintf(r->note, sizeof r->note, "skipped: %s cannot run it: %s", ops->name,
                 *why ? why : "no implementation for this configuration");
        return;
    }
    if (st != BENCH_OK) {
        row_fail(r, "setup failed: %s", st == BENCH_ERR_NOMEM ? "out of memory" : backend_last_error(b));
        lu->t.state = NULL;
        return;
    }
    snprintf(r->impl, sizeof r->impl, "%s", why);
    backend_layer_isolate(lu->t.state, lu->t.in, r->impl, sizeof r->impl);
    /* One call, unheld and untimed, before any sample: what a library does on its first
     * call (CUDA loads a kernel's module lazily) must not happen while the stream is
     * held, where it would wait for the hold (seen on an H100: 2 s, then the hold gave
     * up). */
    backend_layer_run(lu->t.state, lu->t.in, lu->t.out);
    if (ops->device.sync(b->ctx) != BENCH_OK) {
        row_fail(r, "the first call failed: %s", backend_last_error(b));
        return;
    }
    double single = single_call_seconds(&lu->t);
    if (*backend_last_error(b)) {  /* a sample failed: say why here, not at the next call */
        row_fail(r, "%s", backend_last_error(b));
        return;
    }
    const char *use = mode;
    if (strcmp(mode, "auto") == 0)
        use = single < AUTO_BATCH_FLOORS * floor->warm ? "batch" : "warm";
    if (strcmp(use, "cold") == 0 && !ops->timing.flush_cache)
        use = "warm"; /* no cache to flush: the note says so */
    r->mode = use;
    if (use != mode && strcmp(mode, "cold") == 0)
        note_append(r, "%s has no cache flush: timed warm", ops->name);
    if (strcmp(use, "batch") == 0)
        prepare_batch(&lu->t, single, r);
    lu->t.cold = strcmp(use, "cold") == 0;
    *u = (unit){.b = b, .r = r, .layer = index, .name = l->name, .fn = time_layer_sample, .user = &lu->t,
                .launches = lu->t.launches, .floor = lu->t.cold ? floor->cold : floor->warm};
}

static void free_layer(const backend *b, layer_unit *lu)
{
    if (lu->t.graph)
        b->ops->timing.graph_free(b->ctx, lu->t.graph);
    backend_layer_free(b, lu->t.state);
    b->ops->device.release(b->ctx, lu->w);
    free(lu->in);
}

/* Identical kind, shapes and parameters: the same work. */
static int find_twin(const model *m, int i)
{
    const layer *a = &m->layers[i];
    for (int j = 0; j < i; j++)
        if (layer_same_work(&m->layers[j], a))
            return j;
    return -1;
}

/* ---- the chained forward, with the in-model view ----------------------------------------- */

typedef struct chain {
    const model *m;
    const backend *b;
    measure_net net;
    bool marks;       /* the backend records a mark after each layer */
    double *mark_buf; /* per call of this chunk: n_layers marks (seconds from the start) */
    int64_t mark_calls, mark_cap;
    dvec *inmodel;    /* per layer: seconds inside the forward, one per kept sample */
    bool *dist;       /* per kept sample: it was disturbed (contention); n_dist of them */
    int64_t n_dist, cap_dist;
    int n_parts;      /* parts of layers timed inside the forward, all layers together */
    part_result *parts; /* n_parts: which layer and part each is */
    double *part_buf; /* per call of this chunk: n_parts seconds */
    dvec *part_times; /* per part: seconds, one per kept sample */
} chain;

/* The activation buffers of a forward being built: the smallest free one at least need
 * floats large, as an allocator's free list hands out a freed block, or a new one. The
 * buffer's index, or -1 when out of memory. */
typedef struct buffer_pool {
    int64_t *floats; /* per buffer: its size */
    bool *busy;      /* per buffer: a live value is in it */
} buffer_pool;

static int pool_take(measure_net *net, buffer_pool *p, int64_t need)
{
    int j = -1;
    for (int q = 0; q < net->n_bufs; q++)
        if (!p->busy[q] && p->floats[q] >= need && (j < 0 || p->floats[q] < p->floats[j]))
            j = q;
    if (j < 0 && (net->bufs[net->n_bufs] = backend_alloc_floats(net->b, need, NULL)))
        j = net->n_bufs++, p->floats[j] = need;
    if (j >= 0)
        p->busy[j] = true;
    return j;
}

bench_status measure_net_build(measure_net *net, const model *m, const backend *b, uint64_t seed, char *why,
                               size_t whylen)
{
    const backend_ops *ops = b->ops;
    int n = m->n_layers;
    *net = (measure_net){.m = m, .b = b, .states = xcalloc((size_t)n, sizeof(backend_layer *)),
                         .weights = xcalloc((size_t)n, sizeof(float *)),
                         .values = xcalloc((size_t)n + 1, sizeof(float *)),
                         .args = xcalloc((size_t)n, sizeof(float **)),
                         .impl = xcalloc((size_t)n, sizeof *net->impl)};
    layer_rng rng;
    layer_rng_seed(&rng, seed);
    net->bufs = xcalloc((size_t)n + 1, sizeof *net->bufs);
    buffer_pool pool = {xcalloc((size_t)n + 1, sizeof *pool.floats), xcalloc((size_t)n + 1, sizeof *pool.busy)};
    int *last = xmalloc(((size_t)n + 1) * sizeof *last), *buf_of = xcalloc((size_t)n + 1, sizeof *buf_of);
    bench_status st = BENCH_ERR_NOMEM;
    model_last_readers(m, last);
    last[0] = last[model_storage_of(m, n)] = n; /* every forward reads the input; the output is downloaded */
    float *host = bench_alloc_floats(shape_numel(&m->input));
    if (host) {
        layer_fill_uniform(host, shape_numel(&m->input), -1.0f, 1.0f, &rng);
        net->values[0] = net->bufs[0] = backend_alloc_floats(b, shape_numel(&m->input), host);
        free(host);
    }
    if (!net->values[0]) {
        snprintf(why, whylen, "out of memory for the model's input");
        goto out;
    }
    net->n_bufs = 1, pool.busy[0] = true;
    for (int i = 0; i < n; i++) {
        const layer *l = &m->layers[i];
        const layer_desc *d = layer_desc_get(l->kind);
        net->args[i] = xmalloc((size_t)l->n_inputs * sizeof *net->args[i]);
        for (int k = 0; k < l->n_inputs; k++)
            net->args[i][k] = net->values[l->inputs[k]];
        if (d->aliases_input) {
            net->values[i + 1] = net->values[model_storage_of(m, l->inputs[0])];
        } else if ((buf_of[i + 1] = pool_take(net, &pool, shape_numel(&l->out))) >= 0) {
            net->values[i + 1] = net->bufs[buf_of[i + 1]];
        } else {
            snprintf(why, whylen, "out of memory for the activations (at layer '%s')", l->name);
            goto out;
        }
        /* a buffer is free once the last layer reading its value has run (not before its
         * output is placed: a layer never writes over its own input) */
        for (int k = 0; k < l->n_inputs; k++)
            if (last[model_storage_of(m, l->inputs[k])] == i)
                pool.busy[buf_of[model_storage_of(m, l->inputs[k])]] = false;
        if (!d->aliases_input && last[i + 1] == i)
            pool.busy[buf_of[i + 1]] = false;
        if (l->n_weight_floats) {
            float *w = bench_alloc_floats(l->n_weight_floats);
            if (w) {
                d->init_weights(l, w, &rng);
                net->weights[i] = backend_alloc_floats(b, l->n_weight_floats, w);
                free(w);
            }
            if (!net->weights[i]) {
                snprintf(why, whylen, "out of memory for the weights (at layer '%s')", l->name);
                goto out;
            }
        }
        int64_t ws;
        bench_status set = backend_layer_setup(b, l, net->weights[i], &net->states[i], net->impl[i],
                                                sizeof net->impl[i], &ws);
        if (set != BENCH_OK) {
            net->states[i] = NULL, st = set;
            if (set == BENCH_ERR_UNSUPPORTED)
                snprintf(why, whylen, "layer '%s' (%s) is not supported on %s", l->name, d->name, ops->name);
            else
                snprintf(why, whylen, "setting up layer '%s' failed: %s", l->name,
                         set == BENCH_ERR_NOMEM ? "out of memory" : backend_last_error(b));
            goto out;
        }
    }
    st = BENCH_OK;
    if (backend_model_link(b, m, net->states, net->values, net->impl[0], sizeof net->impl[0]) != BENCH_OK) {
        snprintf(why, whylen, "linking the layers failed: %s", backend_last_error(b));
        st = BENCH_ERR_BACKEND;
    }
out:
    free(pool.floats), free(pool.busy), free(last), free(buf_of);
    return st;
}

void measure_net_free(measure_net *net)
{
    const backend_ops *ops = net->b ? net->b->ops : NULL;
    for (int i = 0; net->states && i < net->m->n_layers; i++) {
        backend_layer_free(net->b, net->states[i]);
        ops->device.release(net->b->ctx, net->weights[i]);
        free(net->args[i]);
    }
    for (int j = 0; j < net->n_bufs; j++)
        ops->device.release(net->b->ctx, net->bufs[j]);
    free(net->states), free(net->weights), free(net->values), free(net->args), free(net->impl), free(net->bufs);
    memset(net, 0, sizeof *net);
}

/* Queues the forward; with marks, the backend records a mark after each layer. */
static void queue_forward(const measure_net *net, bool marks)
{
    const backend_ops *ops = net->b->ops;
    for (int i = 0; i < net->m->n_layers; i++) {
        backend_layer_run(net->states[i], net->args[i], net->values[i + 1]);
        if (marks)
            ops->timing.timer_mark(net->b->ctx, i);
    }
}

void measure_net_queue(const measure_net *net) { queue_forward(net, false); }

static double time_chain(void *user)
{
    chain *c = user;
    begin_sample(c->b, true, false);
    queue_forward(&c->net, c->marks);
    double s = c->b->ops->timing.timer_stop(c->b->ctx);
    if (c->marks && s >= 0) {
        int n = c->m->n_layers, np = c->n_parts;
        if (c->mark_calls == c->mark_cap) { /* grows between samples, outside the timed part */
            c->mark_cap = c->mark_cap ? 2 * c->mark_cap : 64;
            c->mark_buf = xrealloc(c->mark_buf, (size_t)(c->mark_cap * n) * sizeof *c->mark_buf);
            if (np)
                c->part_buf = xrealloc(c->part_buf, (size_t)(c->mark_cap * np) * sizeof *c->part_buf);
        }
        c->b->ops->timing.marks_read(c->b->ctx, c->mark_buf + c->mark_calls * n, n);
        for (int k = 0; k < np; k++) /* each split layer writes all its parts at its first */
            if (c->parts[k].index == 0)
                backend_layer_parts_read(c->net.states[c->parts[k].layer], c->part_buf + c->mark_calls * np + k);
    }
    c->mark_calls++;
    return s;
}

/* After a chunk of the chained forward: each kept sample's marks become one in-model
 * time per layer (from the previous layer's mark to its own), and its parts' times. */
static void chain_kept(unit *u, int64_t first, int64_t n, const bool *dist)
{
    chain *c = u->user;
    int nl = c->m->n_layers, np = c->n_parts;
    for (int64_t k = first; c->marks && k < first + n && k < c->mark_calls && c->inmodel[0].n < MEASURE_MAX_SAMPLES;
         k++) {
        const double *mk = c->mark_buf + k * nl;
        if (c->n_dist == c->cap_dist)
            c->dist = xrealloc(c->dist, (size_t)(c->cap_dist = c->cap_dist ? 2 * c->cap_dist : 256) * sizeof *c->dist);
        c->dist[c->n_dist++] = dist[k - first];
        for (int i = 0; i < nl; i++)
            dvec_push(&c->inmodel[i], mk[i] - (i ? mk[i - 1] : 0.0));
        for (int j = 0; j < np; j++)
            dvec_push(&c->part_times[j], c->part_buf[k * np + j]);
    }
    c->mark_calls = 0;
}

/* Turns on the parts of the layers the backend splits inside the forward (after the
 * graph was captured: the graph replays the forward without them). */
static void enable_parts(chain *c)
{
    if (!c->marks)
        return;
    layer_part_info info[LAYER_MAX_PARTS];
    for (int i = 0; i < c->m->n_layers; i++) {
        const backend_layer *state = c->net.states[i];
        int np = backend_layer_parts(state, info);
        if (np == 0)
            np = layer_parts(&c->m->layers[i], info);
        if (np == 0 || !backend_layer_parts_enable(state, true))
            continue;
        c->parts = xrealloc(c->parts, (size_t)(c->n_parts + np) * sizeof *c->parts);
        for (int j = 0; j < np; j++)
            c->parts[c->n_parts++] = (part_result){.layer = i, .index = j, .info = info[j]};
    }
    if (c->n_parts)
        c->part_times = xcalloc((size_t)c->n_parts, sizeof *c->part_times);
}

/* The captured forward replayed as one graph launch. */
typedef struct graph_run {
    const backend *b;
    void *graph;
} graph_run;

static double time_graph(void *user)
{
    graph_run *g = user;
    begin_sample(g->b, true, false);
    g->b->ops->timing.graph_launch(g->b->ctx, g->graph);
    return g->b->ops->timing.timer_stop(g->b->ctx);
}

/* A host<->device copy of the model's input or output. Not held: a copy from pageable
 * host memory waits for the stream to drain before it starts. */
typedef struct copy_run {
    const backend *b;
    bool upload;
    void *device;
    float *host;
    size_t bytes;
} copy_run;

static double time_copy(void *user)
{
    copy_run *c = user;
    const backend_ops *ops = c->b->ops;
    ops->timing.timer_start(c->b->ctx);
    bench_status st = c->upload ? ops->device.upload(c->b->ctx, c->device, c->host, c->bytes)
                                : ops->device.download(c->b->ctx, c->host, c->device, c->bytes);
    double s = ops->timing.timer_stop(c->b->ctx);
    return st == BENCH_OK ? s : -1.0;
}

/* The whole-model units, set up together. */
typedef struct model_units {
    chain c;
    graph_run g;
    copy_run up, down;
    float *host;
} model_units;

/* Marks the whole-model rows that apply as not run, with why. */
static void model_rows(run_result *res, const backend *b, row_status st, const char *why)
{
    layer_result *rows[] = {&res->chained, &res->graph, &res->upload, &res->download};
    for (int i = 0; i < 4; i++) {
        if ((i == 1 && !b->ops->timing.graph_begin) || (i >= 2 && !b->ops->device_memory))
            continue;
        rows[i]->status = st;
        snprintf(rows[i]->note, sizeof rows[i]->note, "%s", why);
    }
}

/* Sets up the chained forward (and its graph and copies); appends their units. */
static void setup_model(const model *m, const backend *b, const measure_options *o, const timer_floor *floor,
                        run_result *res, model_units *mu, unit *units, int *n_units)
{
    const backend_ops *ops = b->ops;
    int n = m->n_layers;
    chain *c = &mu->c;
    *c = (chain){.m = m, .b = b};
    char why[200] = "", note[224];
    backend_clear_error(b);
    int64_t free_before = ops->device.mem_available ? ops->device.mem_available(b->ctx) : -1;
    bench_status built = measure_net_build(&c->net, m, b, o->seed, why, sizeof why);
    if (built != BENCH_OK) {
        snprintf(note, sizeof note, "not run: %s", why);
        model_rows(res, b, built == BENCH_ERR_UNSUPPORTED ? ROW_SKIPPED : ROW_FAILED, note);
        return;
    }
    if (free_before >= 0) {
        int64_t free_after = ops->device.mem_available(b->ctx);
        res->forward_device_bytes = free_after >= 0 ? free_before - free_after : -1;
    }
    res->chained.mode = "chained";
    snprintf(res->chained.impl, sizeof res->chained.impl, "layer by layer");
    c->marks = ops->timing.marks_prepare && ops->timing.marks_prepare(b->ctx, n) == BENCH_OK;
    if (c->marks) {
        c->inmodel = xcalloc((size_t)n, sizeof *c->inmodel);
        res->inmodel = xcalloc((size_t)n, sizeof *res->inmodel);
    }
    backend_clear_error(b);
    units[(*n_units)++] = (unit){.b = b, .r = &res->chained, .layer = -1, .name = m->name, .fn = time_chain, .user = c,
                                 .launches = 1, .floor = floor->warm, .kept = chain_kept};
    if (ops->timing.graph_begin) {
        res->graph.mode = "graph";
        snprintf(res->graph.impl, sizeof res->graph.impl, "graph replay");
        bench_status st = ops->timing.graph_begin(b->ctx);
        if (st == BENCH_OK) {
            queue_forward(&c->net, false);
            st = ops->timing.graph_end(b->ctx, &mu->g.graph);
        }
        mu->g.b = b;
        if (st != BENCH_OK) {
            row_fail(&res->graph, "capturing the forward as a graph failed: %s", backend_last_error(b));
            mu->g.graph = NULL;
            backend_clear_error(b);
        } else {
            units[(*n_units)++] = (unit){.b = b, .r = &res->graph, .layer = -1, .name = "graph", .fn = time_graph, .user = &mu->g,
                                         .launches = 1, .floor = floor->warm};
        }
    }
    enable_parts(c);
    if (ops->device_memory) {
        int last = model_storage_of(m, n);
        size_t in_bytes = (size_t)shape_numel(&m->input) * sizeof(float);
        size_t out_bytes = (size_t)shape_numel(&m->layers[n - 1].out) * sizeof(float);
        res->upload.mode = res->download.mode = "transfer";
        snprintf(res->upload.impl, sizeof res->upload.impl, "pageable host memory");
        snprintf(res->download.impl, sizeof res->download.impl, "pageable host memory");
        mu->host = bench_alloc_floats((int64_t)((in_bytes > out_bytes ? in_bytes : out_bytes) / sizeof(float)));
        if (!mu->host) {
            row_fail(&res->upload, "out of host memory for the copy buffer");
            row_fail(&res->download, "out of host memory for the copy buffer");
            return;
        }
        layer_rng rng;
        layer_rng_seed(&rng, o->seed + 1);
        layer_fill_uniform(mu->host, (int64_t)(in_bytes / sizeof(float)), -1.0f, 1.0f, &rng);
        mu->up = (copy_run){b, true, c->net.values[0], mu->host, in_bytes};
        mu->down = (copy_run){b, false, c->net.values[last], mu->host, out_bytes};
        units[(*n_units)++] = (unit){.b = b, .r = &res->upload, .layer = -1, .name = "upload", .fn = time_copy, .user = &mu->up,
                                     .launches = 1, .floor = floor->warm};
        units[(*n_units)++] = (unit){.b = b, .r = &res->download, .layer = -1, .name = "download", .fn = time_copy,
                                     .user = &mu->down, .launches = 1, .floor = floor->warm};
    }
}

static void free_model_units(const model *m, const backend *b, model_units *mu)
{
    chain *c = &mu->c;
    if (mu->g.graph)
        b->ops->timing.graph_free(b->ctx, mu->g.graph);
    measure_net_free(&c->net);
    for (int i = 0; c->inmodel && i < m->n_layers; i++)
        free(c->inmodel[i].v);
    for (int j = 0; j < c->n_parts; j++)
        free(c->part_times[j].v);
    free(c->parts), free(c->part_times), free(c->part_buf), free(c->dist);
    free(c->inmodel), free(c->mark_buf), free(mu->host);
}

static int cmp_total(const void *a, const void *b)
{
    double x = ((const double *)a)[0], y = ((const double *)b)[0];
    return (x > y) - (x < y);
}

/* One real forward for the trace and the flame graph: of the kept samples, the one
 * whose layers add up to the median total; its per-layer times tile it exactly. */
static void keep_forward_sample(const model *m, model_units *mu, run_result *res)
{
    int nl = m->n_layers;
    if (!res->inmodel || !row_timed(&res->chained) || nl == 0)
        return;
    int64_t n = mu->c.inmodel[0].n;
    for (int i = 1; i < nl; i++)
        n = mu->c.inmodel[i].n < n ? mu->c.inmodel[i].n : n;
    if (n == 0)
        return;
    double *tot = xmalloc((size_t)n * 2 * sizeof *tot); /* (total, sample index) pairs */
    for (int64_t k = 0; k < n; k++) {
        double t = 0;
        for (int i = 0; i < nl; i++)
            t += mu->c.inmodel[i].v[k];
        tot[2 * k] = t, tot[2 * k + 1] = (double)k;
    }
    qsort(tot, (size_t)n, 2 * sizeof *tot, cmp_total);
    int64_t k = (int64_t)tot[2 * (n / 2) + 1];
    free(tot);
    res->forward_sample = xmalloc((size_t)nl * sizeof *res->forward_sample);
    for (int i = 0; i < nl; i++)
        res->forward_sample[i] = mu->c.inmodel[i].v[k];
    for (int j = 0; j < res->n_parts; j++)
        res->parts[j].sample = k < mu->c.part_times[j].n ? mu->c.part_times[j].v[k] : 0.0;
}

/* The parts' rows, where the layer inside the forward was timed. */
static void finish_parts(model_units *mu, run_result *res)
{
    chain *c = &mu->c;
    if (!c->n_parts)
        return;
    res->parts = xmalloc((size_t)c->n_parts * sizeof *res->parts);
    res->n_parts = c->n_parts;
    for (int j = 0; j < c->n_parts; j++) {
        part_result *p = &res->parts[j];
        const layer_result *whole = &res->inmodel[c->parts[j].layer];
        *p = c->parts[j];
        p->r = (layer_result){.status = whole->status, .mode = "inmodel", .dedupe_of = -1, .launches = 1,
                              .stop = whole->stop};
        snprintf(p->r.impl, sizeof p->r.impl, "%s", whole->impl);
        snprintf(p->r.note, sizeof p->r.note, "%s", whole->note);
        if (whole->status == ROW_OK && c->part_times[j].n)
            measure_row_stats(&p->r, c->part_times[j].v, c->part_times[j].n);
        else if (whole->status == ROW_OK)
            p->r.status = ROW_FAILED, snprintf(p->r.note, sizeof p->r.note, "no sample of this part was kept");
    }
}

/* Leaves out the forward samples that were disturbed, from the in-model and part times,
 * where the chained row's statistics leave them out (the rule of use_clean). */
static void drop_disturbed(chain *c)
{
    int64_t clean = 0;
    for (int64_t k = 0; k < c->n_dist; k++)
        clean += !c->dist[k];
    if (clean == c->n_dist || clean < TIMEOUT_MIN_SAMPLES)
        return;
    for (int i = 0; i < c->m->n_layers + c->n_parts; i++) {
        dvec *d = i < c->m->n_layers ? &c->inmodel[i] : &c->part_times[i - c->m->n_layers];
        int64_t w = 0;
        for (int64_t k = 0; k < d->n && k < c->n_dist; k++)
            if (!c->dist[k])
                d->v[w++] = d->v[k];
        d->n = w;
    }
}

/* The in-model rows: each layer's time inside the forward, from the chain's marks. */
static void finish_inmodel(const model *m, model_units *mu, run_result *res)
{
    if (res->inmodel)
        drop_disturbed(&mu->c);
    for (int i = 0; res->inmodel && i < m->n_layers; i++) {
        layer_result *r = &res->inmodel[i];
        dvec *d = &mu->c.inmodel[i];
        r->mode = "inmodel";
        r->dedupe_of = -1;
        r->launches = 1;
        snprintf(r->impl, sizeof r->impl, "%s", mu->c.net.impl && *mu->c.net.impl[i] ? mu->c.net.impl[i] : res->layers[i].impl);
        if (res->layers[i].status == ROW_VIEW) {
            r->status = ROW_VIEW;
            snprintf(r->note, sizeof r->note, "a view of its input: nothing runs");
            continue;
        }
        if (!row_timed(&res->chained) || d->n == 0) {
            r->status = res->chained.status == ROW_OK ? ROW_FAILED : res->chained.status;
            snprintf(r->note, sizeof r->note, "the chained forward did not run");
            continue;
        }
        measure_row_stats(r, d->v, d->n);
        r->stop = res->chained.stop;
        r->contended = res->chained.contended;
        r->status = ROW_OK;
    }
    finish_parts(mu, res);
    keep_forward_sample(m, mu, res);
}

/* Counts the failed rows and keeps the first failure's reason in err. */
static void tally(run_result *res, const layer_result *r, const char *name, char *err, size_t errlen)
{
    if (r->status != ROW_FAILED)
        return;
    if (res->failed++ == 0)
        snprintf(err, errlen, "%s on %s: %s", name, res->backend, r->note);
}

bench_status measure_model(const model *m, const backend *b, const measure_options *opt, const char *mode,
                           const timer_floor *floor, bool with_model, run_result *out, char *err, size_t errlen)
{
    double t0 = bench_now();
    measure_options host = *opt, *o = &host;
    if (b->ops->device_memory) /* a held device's events do not see the host's waits, and its runtime's */
        host.waited = NULL;    /* sleeping threads would count as disturbing it */
    int n = m->n_layers;
    memset(out, 0, sizeof *out);
    out->m = m;
    out->forward_device_bytes = -1;
    out->backend = b->ops->name;
    out->mode = mode;
    out->threads = backend_threads(b);
    out->floor = *floor;
    out->layers = xcalloc((size_t)n, sizeof(layer_result));
    out->has_model = with_model;
    out->chained.dedupe_of = out->graph.dedupe_of = out->upload.dedupe_of = out->download.dedupe_of = -1;
    unit *units = xcalloc((size_t)n + 4, sizeof *units);
    layer_unit *lus = xcalloc((size_t)n, sizeof *lus);
    model_units mu;
    memset(&mu, 0, sizeof mu);
    int n_units = 0;
    char first_failure[512] = "";
    scratch s = {NULL, NULL};
    bench_status st = scratch_alloc(m, b, o->seed, &s);
    for (int i = 0; i < n; i++) {
        const layer *l = &m->layers[i];
        layer_result *r = &out->layers[i];
        r->dedupe_of = -1;
        if (layer_desc_get(l->kind)->aliases_input) {
            r->status = ROW_VIEW;
            snprintf(r->impl, sizeof r->impl, "view");
            snprintf(r->note, sizeof r->note, "a view of its input: nothing runs");
            continue;
        }
        int twin = o->dedupe ? find_twin(m, i) : -1;
        if (twin >= 0) {
            r->dedupe_of = twin; /* filled in once the twin is measured */
            continue;
        }
        if (st != BENCH_OK) {
            row_fail(r, "out of memory for the isolated layers' shared input and output");
            continue;
        }
        if (o->skip && o->skip[i]) {
            row_fail(r, "left out of this process");
            continue;
        }
        if (o->at)
            o->at(o->at_user, i);
        setup_layer(l, i, b, mode, floor, &s, o->seed + (uint64_t)i, &lus[i], r, &units[n_units]);
        if (units[n_units].r)
            n_units++;
    }
    if (with_model && o->skip_model) {
        model_rows(out, b, ROW_FAILED, "left out of this process");
    } else if (with_model) {
        if (o->at)
            o->at(o->at_user, -1);
        setup_model(m, b, o, floor, out, &mu, units, &n_units);
    }
    sched_others others;
    if (o->waited)
        sched_others_begin(&others);
    dvec canary = {0};
    if (o->waited_reset)
        o->waited_reset(o->waited_user);
    st = sample_units(units, n_units, o, b, mode, &canary, err, errlen);
    progress(o, b, mode, 0, 0, 0, NULL);
    out->canary = canary.v, out->n_canary = (int)canary.n;
    int64_t disturbed = 0;
    for (int i = 0; i < n_units; i++) {
        finish_unit(&units[i], o);
        disturbed += units[i].r->disturbed;
        free_unit(&units[i]);
    }
    if (o->waited) {
        if (disturbed)
            sched_others_end(&others, out->contention, sizeof out->contention);
        sched_others_free(&others);
    }
    if (with_model)
        finish_inmodel(m, &mu, out);
    for (int i = 0; i < n; i++) {
        layer_result *r = &out->layers[i];
        if (r->dedupe_of >= 0) {
            int twin = r->dedupe_of;
            *r = out->layers[twin];
            r->kept = NULL, r->n_kept = 0; /* the twin owns them */
            r->dedupe_of = twin;
            if (r->status == ROW_OK)
                r->status = ROW_DEDUPE;
            snprintf(r->note, sizeof r->note, "timed once with layer %d (--dedupe)", twin);
        }
        free_layer(b, &lus[i]);
        if (row_timed(r))
            out->sum_medians += r->st.median;
        else if (r->status == ROW_FAILED)
            tally(out, r, m->layers[i].name, first_failure, sizeof first_failure);
    }
    if (with_model) {
        free_model_units(m, b, &mu);
        tally(out, &out->chained, "the chained forward", first_failure, sizeof first_failure);
        tally(out, &out->graph, "the graph replay", first_failure, sizeof first_failure);
        tally(out, &out->upload, "the input copy", first_failure, sizeof first_failure);
        tally(out, &out->download, "the output copy", first_failure, sizeof first_failure);
    }
    b->ops->device.release(b->ctx, s.in), b->ops->device.release(b->ctx, s.out);
    free(units), free(lus);
    out->seconds = bench_now() - t0;
    if (st == BENCH_ERR_INTERRUPTED)
        return st; /* err says where */
    if (out->failed)
        snprintf(err, errlen, "%s", first_failure);
    return out->failed ? BENCH_ERR_BACKEND : BENCH_OK;
}

void run_result_free(run_result *r)
{
    int n = r->m ? r->m->n_layers : 0;
    for (int i = 0; i < n; i++) {
        if (r->layers)
            free(r->layers[i].kept);
        if (r->inmodel)
            free(r->inmodel[i].kept);
    }
    for (int j = 0; j < r->n_parts; j++)
        free(r->parts[j].r.kept);
    free(r->chained.kept), free(r->graph.kept), free(r->upload.kept), free(r->download.kept);
    r->chained.kept = r->graph.kept = r->upload.kept = r->download.kept = NULL;
    free(r->canary);
    r->canary = NULL, r->n_canary = 0;
    free(r->layers);
    free(r->inmodel);
    free(r->forward_sample);
    free(r->parts);
    r->parts = NULL;
    r->n_parts = 0;
    r->layers = r->inmodel = NULL;
    r->forward_sample = NULL;
}
