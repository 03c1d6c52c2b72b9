/* The measurement policy, without hardware: a fake backend whose clock only moves when
 * a layer "runs" (each layer's launch costs a known time), that counts launches, holds,
 * flushes and samples, records the order of launches, and fails where a test tells it
 * to. Checks batch mode's launch count and total time, that cold mode flushes before
 * every sample, that views are not timed, the stopping rule (noise, --min-samples,
 * --timeout), auto mode against the timer's floor, that layers are sampled in
 * interleaved rounds, the in-model view, and that a failed layer, a failed sample or a
 * failed graph capture becomes a row with its reason while the rest goes on. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_registry.h"
#include "cfg.h"
#include "forward.h"
#include "measure.h"
#include "test_util.h"

typedef struct fake {
    double clock, t0;          /* fake seconds */
    double cost[8];            /* seconds per launch of layer i (by index in the model) */
    double jitter;             /* relative, deterministic pseudo-random, per launch */
    double timer_cost;         /* fake seconds an empty sample takes */
    uint64_t rng;
    long launches, holds, flushes, starts, stops;
    bool capturing;
    long captured;
    double captured_cost;
    const char *fail_setup;    /* name of a layer whose setup fails */
    long fail_stop_at;         /* the stop with this number fails (0: none) */
    bool fail_graph;           /* graph_end fails */
    char order[4096];          /* the layer index of every launch outside graphs, as letters */
    int n_order;
    double marks[8];
    bool parts_on[8];          /* per layer: parts_enable(true) was called */
    long parts_while_capturing;/* parts_enable calls during a graph capture */
    double parts[8][LAYER_MAX_PARTS]; /* per layer: its parts' times in the last run */
    char error[128];
    bool failed;
    double waited;             /* fake seconds the threads waited for a CPU, so far */
    long disturb_every;        /* every this many samples is disturbed (0: none) ... */
    double disturb_wait, disturb_cost; /* ... waiting this long, and taking this much longer */
} fake;

typedef struct fake_layer {
    int index;
    bool view;
} fake_layer;

typedef struct fake_graph {
    long launches;
    double cost;               /* fake seconds of one replay */
} fake_graph;

static fake F;
static const model *M;

static double launch_cost(int i)
{
    double c = F.cost[i];
    if (F.jitter > 0) {
        F.rng = F.rng * 6364136223846793005ull + 1442695040888963407ull;
        c *= 1.0 + F.jitter * ((double)(F.rng >> 11) / 9007199254740992.0 - 0.5);
    }
    return c;
}

static void *f_alloc(void *ctx, size_t bytes) { (void)ctx; return calloc(1, bytes ? bytes : 1); }
static void f_release(void *ctx, void *p) { (void)ctx; free(p); }
static bench_status f_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    memcpy(dst, src, bytes);
    F.clock += 1e-6;
    return BENCH_OK;
}
static bench_status f_sync(void *ctx) { (void)ctx; return F.failed ? BENCH_ERR_BACKEND : BENCH_OK; }
static void f_timer_start(void *ctx) { (void)ctx; F.starts++; F.t0 = F.clock; }
static double f_timer_stop(void *ctx)
{
    (void)ctx;
    F.clock += F.timer_cost;
    if (F.disturb_every && (F.stops + 1) % F.disturb_every == 0)
        F.clock += F.disturb_cost, F.waited += F.disturb_wait;
    if (++F.stops == F.fail_stop_at) {
        snprintf(F.error, sizeof F.error, "injected timer failure");
        F.failed = true;
    }
    return F.failed ? -1.0 : F.clock - F.t0;
}
static void f_hold(void *ctx) { (void)ctx; F.holds++; }
static void f_flush(void *ctx) { (void)ctx; F.flushes++; F.clock += 50e-6; /* untimed */ }
static bench_status f_marks_prepare(void *ctx, int n) { (void)ctx; return n <= 8 ? BENCH_OK : BENCH_ERR_BACKEND; }
static void f_mark(void *ctx, int i) { (void)ctx; F.marks[i] = F.clock - F.t0; }
static void f_marks_read(void *ctx, double *s, int n)
{
    (void)ctx;
    memcpy(s, F.marks, (size_t)n * sizeof *s);
}
static bench_status f_init(const backend_options *o, void **ctx, char *err, size_t len)
{
    (void)o, (void)err, (void)len;
    *ctx = &F;
    return BENCH_OK;
}
static void f_free(void *ctx) { (void)ctx; }
static bench_status f_setup(void *ctx, const layer *l, const void *w, void **state, char *impl, size_t len,
                            int64_t *ws)
{
    (void)ctx, (void)w;
    *ws = 0;
    if (F.fail_setup && strcmp(l->name, F.fail_setup) == 0) {
        snprintf(F.error, sizeof F.error, "injected setup failure");
        F.failed = true;
        return BENCH_ERR_BACKEND;
    }
    snprintf(impl, len, "fake");
    fake_layer *fl = malloc(sizeof *fl);
    fl->index = (int)(l - M->layers);
    fl->view = layer_desc_get(l->kind)->aliases_input;
    *state = fl;
    return BENCH_OK;
}
static void f_run(void *ctx, const layer *l, void *state, const void *const *in, const void *w, void *out)
{
    (void)ctx, (void)l, (void)in, (void)w, (void)out;
    fake_layer *fl = state;
    if (fl->view)
        return; /* a view: nothing runs, as on the real backends */
    if (F.capturing) {
        F.captured++;
        F.captured_cost += F.cost[fl->index];
        return;
    }
    F.launches++;
    double c = launch_cost(fl->index);
    F.clock += c;
    /* a split layer's parts: 1/15, 2/15, ... 5/15 of its time */
    for (int k = 0; F.parts_on[fl->index] && k < 5; k++)
        F.parts[fl->index][k] = c * (k + 1) / 15;
    if (F.n_order < (int)sizeof F.order - 1)
        F.order[F.n_order++] = (char)('a' + fl->index);
}
static void f_layer_free(void *ctx, void *state) { (void)ctx; free(state); }
static bool f_parts_enable(void *ctx, void *state, bool on)
{
    (void)ctx;
    F.parts_while_capturing += F.capturing;
    F.parts_on[((fake_layer *)state)->index] = on;
    return true;
}
static void f_parts_read(void *ctx, void *state, double *s)
{
    (void)ctx;
    memcpy(s, F.parts[((fake_layer *)state)->index], 5 * sizeof *s);
}
static const char *f_describe(void *ctx) { (void)ctx; return "{}"; }
static bench_status f_graph_begin(void *ctx)
{
    (void)ctx;
    F.capturing = true;
    F.captured = 0;
    F.captured_cost = 0;
    return BENCH_OK;
}
static bench_status f_graph_end(void *ctx, void **graph)
{
    (void)ctx;
    F.capturing = false;
    *graph = NULL;
    if (F.fail_graph) {
        snprintf(F.error, sizeof F.error, "injected capture failure");
        F.failed = true;
        return BENCH_ERR_BACKEND;
    }
    fake_graph *g = malloc(sizeof *g);
    g->launches = F.captured;
    g->cost = F.captured_cost;
    *graph = g;
    return BENCH_OK;
}
static void f_graph_launch(void *ctx, void *graph)
{
    (void)ctx;
    fake_graph *g = graph;
    F.launches += g->launches;
    F.clock += g->cost;
}
static void f_graph_free(void *ctx, void *graph) { (void)ctx; free(graph); }
static const char *f_last_error(void *ctx) { (void)ctx; return F.error; }
static void f_clear_error(void *ctx) { (void)ctx; F.failed = false; F.error[0] = 0; }

/* One fake kernel for every kind, in fp32 (filled by f_init). */
static const backend_kernel fake_kernel = {.setup = f_setup, .run = f_run, .free = f_layer_free,
                                           .parts_enable = f_parts_enable, .parts_read = f_parts_read};
static backend_kernel_table fake_kernels;

static backend_ops fake_ops = {
    .name = "fake",
    .device_memory = true,
    .device = {.init = f_init, .free = f_free, .alloc = f_alloc, .release = f_release, .upload = f_copy,
               .download = f_copy, .sync = f_sync, .describe = f_describe, .last_error = f_last_error,
               .clear_error = f_clear_error},
    .timing = {.timer_start = f_timer_start, .timer_stop = f_timer_stop, .hold = f_hold, .flush_cache = f_flush,
               .marks_prepare = f_marks_prepare, .timer_mark = f_mark, .marks_read = f_marks_read,
               .graph_begin = f_graph_begin, .graph_end = f_graph_end, .graph_launch = f_graph_launch,
               .graph_free = f_graph_free},
    .layers = {.kernels = &fake_kernels},
};

static char cfg_path[256];

static model *load(const char *yaml)
{
    FILE *f = fopen(cfg_path, "w");
    fputs(yaml, f);
    fclose(f);
    model *m;
    char err[512];
    bench_status st = cfg_load(cfg_path, 0, &m, err, sizeof err);
    EXPECT(st == BENCH_OK, "config: %s", err);
    return st == BENCH_OK ? m : NULL;
}

/* layers a, b, a view, c: indices 0, 1, 2, 3 */
static const char *const tiny = "name: tiny\ninput: [2, 5, 5]\nlayers:\n"
                                "  - {kind: relu, name: a}\n  - {kind: relu6, name: b}\n"
                                "  - {kind: flatten, name: flat}\n  - {kind: sigmoid, name: c}\n";

static void reset(double cost)
{
    memset(&F, 0, sizeof F);
    for (int i = 0; i < 8; i++)
        F.cost[i] = cost;
}

static measure_options opts(void)
{
    return (measure_options){.warmup_time = 0.005, .min_time = 0.01, .max_noise = 0.01, .min_samples = 10,
                             .timeout = 1.0, .seed = 7};
}

static const timer_floor no_floor = {0.0, 0.0};

/* Batch mode: 2 us launches give 500 per sample (1 ms); the statistics are per launch;
 * Google Benchmark's time limits apply to whole samples, so a layer costs about its
 * warm-up, estimation and a chunk of fake time, not 500 times that. */
static void test_batch(backend *b, model *m, bool graphs)
{
    reset(2e-6);
    backend_ops saved = fake_ops;
    if (!graphs)
        fake_ops.timing.graph_begin = NULL;
    measure_options o = opts();
    run_result r;
    char err[256];
    EXPECT(measure_model(m, b, &o, MODE_BATCH, &no_floor, false, &r, err, sizeof err) == BENCH_OK, "batch: %s", err);
    const layer_result *a = &r.layers[0];
    EXPECT(a->status == ROW_OK && a->mode == MODE_BATCH, "batch row: %s", a->note);
    EXPECT(a->launches == 500, "launches per sample %d, expected 500", a->launches);
    EXPECT(fabs(a->st.median - 2e-6) < 1e-12 && fabs(a->st.max - 2e-6) < 1e-12, "per-launch median %g max %g",
           a->st.median, a->st.max);
    EXPECT(a->stop == STOP_NOISE && a->st.n >= o.min_samples, "noise-free samples stop on noise: %s, %lld samples",
           measure_stop_reason_name(a->stop), (long long)a->st.n);
    double per_layer = F.clock / 3; /* three timed layers */
    EXPECT(per_layer < 10 * (o.warmup_time + o.min_time), "a batch layer took %.3f s of fake time", per_layer);
    EXPECT(strstr(a->note, graphs ? "captured as one graph" : "launches per sample") != NULL, "note: %s", a->note);
    /* holds: one per sample where launches were captured; 500 stream launches are not held */
    EXPECT(graphs ? F.holds == F.stops : F.holds == 3 * 5, "holds %ld for %ld samples", F.holds, F.stops);
    EXPECT(r.layers[2].status == ROW_VIEW, "flatten is a view, %s", measure_row_status_name(r.layers[2].status));
    run_result_free(&r);
    fake_ops = saved;
}

/* Cold mode: a flush before every single timed sample (and no more), never timed. */
static void test_cold(backend *b, model *m)
{
    reset(30e-6);
    measure_options o = opts();
    run_result r;
    char err[256];
    EXPECT(measure_model(m, b, &o, MODE_COLD, &no_floor, false, &r, err, sizeof err) == BENCH_OK, "cold: %s", err);
    long single = 3 * 5; /* auto-mode probes: five single warm samples per layer */
    EXPECT(F.flushes == F.stops - single && F.flushes > 0, "%ld flushes for %ld samples", F.flushes, F.stops - single);
    EXPECT(F.holds == F.stops, "%ld holds for %ld samples", F.holds, F.stops);
    EXPECT(r.layers[0].launches == 1 && fabs(r.layers[0].st.median - 30e-6) < 1e-12, "cold median %g",
           r.layers[0].st.median);
    EXPECT(r.layers[0].st.max < 31e-6, "a flush was timed: max %g", r.layers[0].st.max);
    int64_t n = 0;
    for (int i = 0; i < m->n_layers; i++)
        n += r.layers[i].status == ROW_OK ? r.layers[i].st.n + r.layers[i].discarded : 0;
    EXPECT(n == F.stops - single, "%lld samples kept or discarded, %ld taken", (long long)n, F.stops - single);
    run_result_free(&r);
}

/* The stopping rule: noisy samples run until --min-samples and the interval allow, or
 * until --timeout, and the row says which. */
static void test_stopping(backend *b, model *m)
{
    run_result r;
    char err[256];
    measure_options o = opts();
    reset(100e-6); /* 100 samples per 10 ms chunk */
    o.min_samples = 450;
    measure_model(m, b, &o, MODE_WARM, &no_floor, false, &r, err, sizeof err);
    EXPECT(r.layers[0].stop == STOP_NOISE && r.layers[0].st.n >= 450 && r.layers[0].st.n < 600,
           "--min-samples 450: %lld samples, stopped on %s", (long long)r.layers[0].st.n,
           measure_stop_reason_name(r.layers[0].stop));
    run_result_free(&r);

    reset(100e-6);
    F.jitter = 0.5; /* +-25%: a 0.01% interval takes far more than the time allowed */
    o = opts();
    o.max_noise = 1e-4;
    o.timeout = 0.05;
    double t0 = bench_now();
    measure_model(m, b, &o, MODE_WARM, &no_floor, false, &r, err, sizeof err);
    double wall = bench_now() - t0;
    EXPECT(r.layers[0].stop == STOP_TIMEOUT && strstr(r.layers[0].note, "stopped on --timeout"), "timeout: %s, %s",
           measure_stop_reason_name(r.layers[0].stop), r.layers[0].note);
    EXPECT(wall < 3 * 0.05 * 3 + 1.0, "three layers with a 0.05 s timeout took %.2f s", wall);
    EXPECT(r.layers[0].st.ci_low <= r.layers[0].st.median && r.layers[0].st.median <= r.layers[0].st.ci_high,
           "the interval holds the median");
    run_result_free(&r);

    /* with jitter and a reachable target: stops on noise with the interval within 1% */
    reset(100e-6);
    F.jitter = 0.2;
    o = opts();
    measure_model(m, b, &o, MODE_WARM, &no_floor, false, &r, err, sizeof err);
    const stats *s = &r.layers[0].st;
    EXPECT(r.layers[0].stop == STOP_NOISE && (s->ci_high - s->ci_low) / 2 <= 0.01 * s->median + 1e-15,
           "noise stop: %s, interval %g..%g around %g", measure_stop_reason_name(r.layers[0].stop), s->ci_low, s->ci_high,
           s->median);
    run_result_free(&r);
}

/* Long samples (0.2 s, a big model's forward): --timeout does not stop a layer before
 * it has 3 samples, and chunks keep their first sample (no re-warming sample is spent
 * on something that long). */
static void test_long_samples(backend *b, model *m)
{
    run_result r;
    char err[256];
    measure_options o = opts();
    reset(0.2);
    o.timeout = 0.3;
    o.warmup_time = 0;
    measure_model(m, b, &o, MODE_WARM, &no_floor, false, &r, err, sizeof err);
    const layer_result *a = &r.layers[0];
    EXPECT(a->status == ROW_OK && a->st.n >= 3 && a->stop == STOP_TIMEOUT, "0.2 s samples, 0.3 s timeout: %lld samples, "
           "stopped on %s", (long long)a->st.n, measure_stop_reason_name(a->stop));
    /* no warm-up asked for, and later chunks drop no re-warming sample: nothing discarded
     * (with re-warming, each chunk after the first would discard one) */
    EXPECT(a->discarded == 0, "%lld kept, %lld discarded", (long long)a->st.n, (long long)a->discarded);
    run_result_free(&r);
    /* --min-samples below 3 is honoured */
    reset(0.2);
    o.min_samples = 1;
    measure_model(m, b, &o, MODE_WARM, &no_floor, false, &r, err, sizeof err);
    EXPECT(r.layers[0].st.n >= 1 && r.layers[0].st.n < 3, "--min-samples 1: %lld samples", (long long)r.layers[0].st.n);
    run_result_free(&r);
}

/* Layers are sampled in rounds: a's samples come before and after b's. */
static void test_interleaving(backend *b, model *m)
{
    run_result r;
    char err[256];
    measure_options o = opts();
    o.min_samples = 300;
    reset(100e-6);
    measure_model(m, b, &o, MODE_WARM, &no_floor, false, &r, err, sizeof err);
    const char *first_b = strchr(F.order, 'b'), *last_a = strrchr(F.order, 'a');
    EXPECT(first_b && last_a && last_a > first_b, "layer a was not sampled again after layer b: %.60s...", F.order);
    run_result_free(&r);
}

/* auto: a call under 20 floors is batched, a longer one is timed warm; a row near the
 * floor says so. */
static void test_auto(backend *b, model *m)
{
    run_result r;
    char err[256];
    measure_options o = opts();
    reset(10e-6);
    F.cost[0] = 0.3e-6;
    F.timer_cost = 50e-9;
    timer_floor fl;
    EXPECT(measure_timer_floor(b, &o, &fl, err, sizeof err) == BENCH_OK, "floor: %s", err);
    EXPECT(fabs(fl.warm - 50e-9) < 1e-12 && fabs(fl.cold - 50e-9) < 1e-12, "floor %g / %g", fl.warm, fl.cold);
    measure_model(m, b, &o, MODE_AUTO, &fl, false, &r, err, sizeof err);
    EXPECT(r.layers[0].mode == MODE_BATCH && r.layers[0].launches > 1, "a 0.3 us layer: %s x%d",
           measure_mode_name(r.layers[0].mode), r.layers[0].launches);
    EXPECT(r.layers[1].mode == MODE_WARM && r.layers[1].launches == 1, "a 10 us layer: %s",
           measure_mode_name(r.layers[1].mode));
    EXPECT(!r.layers[0].near_floor && !r.layers[1].near_floor, "nothing near the floor in auto mode");
    run_result_free(&r);
    measure_model(m, b, &o, MODE_WARM, &fl, false, &r, err, sizeof err);
    EXPECT(r.layers[0].near_floor && strstr(r.layers[0].note, "floor"), "a 0.3 us call against a 50 ns floor: %s",
           r.layers[0].note);
    run_result_free(&r);
}

/* A failing layer, a failing sample and a failing graph capture each become a row with
 * the reason; everything else runs. */
static void test_row_failures(backend *b, model *m)
{
    run_result r;
    char err[256];
    measure_options o = opts();
    reset(10e-6);
    F.fail_setup = "b";
    EXPECT(measure_model(m, b, &o, MODE_WARM, &no_floor, true, &r, err, sizeof err) == BENCH_ERR_BACKEND, "a failed row");
    EXPECT(r.layers[0].status == ROW_OK, "layer a: %s", r.layers[0].note);
    EXPECT(r.layers[1].status == ROW_FAILED && strstr(r.layers[1].note, "injected setup failure"), "layer b: %s %s",
           measure_row_status_name(r.layers[1].status), r.layers[1].note);
    EXPECT(r.layers[3].status == ROW_OK, "the layer after a failed one: %s", r.layers[3].note);
    EXPECT(r.chained.status == ROW_FAILED && strstr(r.chained.note, "'b'"), "chained: %s", r.chained.note);
    EXPECT(strstr(err, "injected setup failure") != NULL, "first failure: %s", err);
    run_result_free(&r);

    reset(10e-6);
    F.fail_stop_at = 20; /* after the probes of a: in its first chunk */
    measure_model(m, b, &o, MODE_WARM, &no_floor, false, &r, err, sizeof err);
    EXPECT(r.layers[0].status == ROW_FAILED && strstr(r.layers[0].note, "injected timer failure"), "layer a: %s",
           r.layers[0].note);
    EXPECT(r.layers[1].status == ROW_OK && r.layers[3].status == ROW_OK, "layers after a failed sample: %s / %s",
           r.layers[1].note, r.layers[3].note);
    run_result_free(&r);

    reset(10e-6);
    F.fail_graph = true;
    EXPECT(measure_model(m, b, &o, MODE_WARM, &no_floor, true, &r, err, sizeof err) == BENCH_ERR_BACKEND, "graph failure");
    EXPECT(r.chained.status == ROW_OK, "chained: %s", r.chained.note);
    EXPECT(r.graph.status == ROW_FAILED && strstr(r.graph.note, "injected capture failure"), "graph row: %s %s",
           measure_row_status_name(r.graph.status), r.graph.note);
    EXPECT(r.upload.status == ROW_OK && r.download.status == ROW_OK, "copies after a failed graph");
    EXPECT(r.failed == 1, "%d failed rows", r.failed);
    run_result_free(&r);
    /* batch mode on the same backend falls back to stream launches, and says so */
    measure_model(m, b, &o, MODE_BATCH, &no_floor, false, &r, err, sizeof err);
    EXPECT(r.layers[0].status == ROW_OK && strstr(r.layers[0].note, "graph capture failed"), "batch fallback: %s",
           r.layers[0].note);
    run_result_free(&r);
}

/* The chained forward: one sample runs every layer once, held, never flushed; the
 * in-model view gives each layer its own time inside it. */
static void test_chain(backend *b, model *m)
{
    run_result r;
    char err[256];
    measure_options o = opts();
    reset(0);
    F.cost[0] = 10e-6, F.cost[1] = 20e-6, F.cost[3] = 40e-6;
    EXPECT(measure_model(m, b, &o, MODE_WARM, &no_floor, true, &r, err, sizeof err) == BENCH_OK, "%s", err);
    EXPECT(r.chained.status == ROW_OK && fabs(r.chained.st.median - 70e-6) < 1e-12, "chained median %g",
           r.chained.st.median);
    EXPECT(r.graph.status == ROW_OK && fabs(r.graph.st.median - 70e-6) < 1e-12, "graph: %s %g", r.graph.note,
           r.graph.st.median);
    EXPECT(fabs(r.sum_medians - 70e-6) < 1e-12, "sum of medians %g", r.sum_medians);
    EXPECT(r.inmodel != NULL, "in-model rows");
    if (r.inmodel) {
        double want[] = {10e-6, 20e-6, 0, 40e-6}, sum = 0;
        for (int i = 0; i < 4; i++) {
            if (i == 2) {
                EXPECT(r.inmodel[2].status == ROW_VIEW, "the view's in-model row");
                continue;
            }
            EXPECT(r.inmodel[i].status == ROW_OK && fabs(r.inmodel[i].st.median - want[i]) < 1e-12,
                   "in-model %d: %g, expected %g", i, r.inmodel[i].st.median, want[i]);
            EXPECT(r.inmodel[i].st.n == r.chained.st.n, "one in-model sample per kept chained sample: %lld vs %lld",
                   (long long)r.inmodel[i].st.n, (long long)r.chained.st.n);
            sum += r.inmodel[i].st.median;
        }
        EXPECT(fabs(sum - r.chained.st.median) < 1e-12, "in-model times add up to the forward: %g vs %g", sum,
               r.chained.st.median);
    }
    run_result_free(&r);
}

/* A layer with parts (attention): turned on after the graph was captured, only in the
 * chained forward; one part sample per kept forward sample, in the kind's order. */
static void test_parts(backend *b)
{
    model *m = load("name: attn\ninput: [6, 8]\nlayers:\n  - {kind: relu, name: a}\n"
                    "  - {kind: multihead_attention, name: attn, embed_dim: 8, num_heads: 2}\n");
    if (!m)
        return;
    const model *saved = M;
    M = m;
    run_result r;
    char err[256];
    measure_options o = opts();
    reset(0);
    F.cost[0] = 10e-6, F.cost[1] = 30e-6;
    EXPECT(measure_model(m, b, &o, MODE_WARM, &no_floor, true, &r, err, sizeof err) == BENCH_OK, "%s", err);
    EXPECT(F.parts_while_capturing == 0 && F.parts_on[1] && !F.parts_on[0], "parts enabled: %ld in captures",
           F.parts_while_capturing);
    EXPECT(r.n_parts == 5, "%d parts", r.n_parts);
    const char *names[] = {"in_proj", "qk", "softmax", "av", "out_proj"};
    int64_t flops = 0;
    for (int k = 0; k < r.n_parts && k < 5; k++) {
        const part_result *p = &r.parts[k];
        flops += p->info.flops;
        EXPECT(p->layer == 1 && p->index == k && strcmp(p->info.name, names[k]) == 0, "part %d: layer %d %s", k,
               p->layer, p->info.name);
        EXPECT(p->r.status == ROW_OK && fabs(p->r.st.median - 30e-6 * (k + 1) / 15) < 1e-12 &&
                   p->r.st.n == r.inmodel[1].st.n && p->r.mode == MODE_INMODEL,
               "part %s: %s median %g, %lld samples vs %lld", p->info.name, measure_row_status_name(p->r.status),
               p->r.st.median, (long long)p->r.st.n, (long long)r.inmodel[1].st.n);
        EXPECT(r.forward_sample && fabs(p->sample - 30e-6 * (k + 1) / 15) < 1e-12, "part %s in the kept sample",
               p->info.name);
    }
    EXPECT(flops == m->layers[1].flops, "the parts' FLOPs %lld, the layer's %lld", (long long)flops,
           (long long)m->layers[1].flops);
    run_result_free(&r);
    /* without the in-model view (no marks), no parts */
    backend_ops saved_ops = fake_ops;
    fake_ops.timing.marks_prepare = NULL;
    reset(0);
    F.cost[0] = 10e-6, F.cost[1] = 30e-6;
    measure_model(m, b, &o, MODE_WARM, &no_floor, true, &r, err, sizeof err);
    EXPECT(r.n_parts == 0 && r.parts == NULL && !F.parts_on[1], "parts without marks");
    run_result_free(&r);
    fake_ops = saved_ops;
    M = saved;
    model_free(m);
}

/* A layer that takes no time at all ends quickly, at the floor, and says so. */
static void test_zero_time(backend *b, model *m)
{
    run_result r;
    char err[256];
    measure_options o = opts();
    reset(0.0);
    timer_floor fl = {1e-9, 1e-9};
    double t0 = bench_now();
    measure_model(m, b, &o, MODE_WARM, &fl, false, &r, err, sizeof err);
    EXPECT(bench_now() - t0 < 10.0, "zero-time layers took %.1f s", bench_now() - t0);
    EXPECT(r.layers[0].status == ROW_OK && r.layers[0].st.median == 0 && r.layers[0].near_floor, "zero time: %s %s",
           measure_row_status_name(r.layers[0].status), r.layers[0].note);
    run_result_free(&r);
}

/* The forward's buffers: a value's buffer is never shared with a value alive at the same
 * time (from the layer writing it to its last reader, through views; the input and the
 * output to the end), views share their input's, and buffers are reused: fewer than the
 * values that own storage. */
static void test_net_buffers(backend *b)
{
    model *m = load("name: reuse\ninput: [2, 4, 4]\nlayers:\n  - {kind: relu, name: pre}\n"
                    "  - kind: residual\n    body:\n      - {kind: relu6, name: a}\n"
                    "      - {kind: sigmoid, name: b}\n      - {kind: tanh, name: c}\n"
                    "  - {kind: flatten, name: flat}\n  - {kind: relu, name: post}\n");
    if (!m)
        return;
    reset(0);
    M = m; /* the fake backend's setup reads it */
    forward_net net;
    char why[200];
    int n = m->n_layers, owners = 0;
    EXPECT(forward_build(&net, m, b, 7, why, sizeof why) == BENCH_OK, "%s", why);
    int *last = malloc(((size_t)n + 1) * sizeof *last);
    model_last_readers(m, last);
    last[0] = last[model_storage_of(m, n)] = n;
    for (int u = 0; u <= n; u++) {
        if (model_storage_of(m, u) != u) {
            EXPECT(net.values[u] == net.values[model_storage_of(m, u)], "view %d shares its input's buffer", u);
            continue;
        }
        owners++;
        for (int v = u + 1; v <= n; v++) {
            int bu = u ? u - 1 : 0, bv = v - 1; /* born: the layer writing it */
            if (model_storage_of(m, v) == v && bv <= last[u] && bu <= last[v])
                EXPECT(net.values[u] != net.values[v], "values %d and %d are alive together in one buffer", u, v);
        }
    }
    EXPECT(net.n_bufs < owners, "%d buffers for %d values: none reused", net.n_bufs, owners);
    free(last);
    forward_free(&net);
    M = NULL;
    model_free(m);
}

static double fake_waited(void *user) { (void)user; return F.waited; }

/* Contention: a sample during which the threads waited for a CPU for more than 1% of it
 * is dropped and counted; a row left with too few clean ones is contended and its
 * statistics keep the disturbed ones; a sample that waited less is kept; every round
 * times the canary. */
static void test_contention(backend *b, model *m)
{
    run_result r;
    char err[256];
    measure_options o = opts();
    o.waited = fake_waited;
    backend_ops saved = fake_ops;
    fake_ops.device_memory = false; /* a GPU's timings do not look at the host's waits */
    reset(100e-6); /* every 4th sample waits 50 us and takes 200 us longer */
    F.disturb_every = 4, F.disturb_wait = 50e-6, F.disturb_cost = 200e-6;
    EXPECT(measure_model(m, b, &o, MODE_WARM, &no_floor, false, &r, err, sizeof err) == BENCH_OK, "%s", err);
    const layer_result *a = &r.layers[0];
    EXPECT(a->disturbed > 0 && a->disturbed * 3 < a->st.n + a->disturbed && !a->contended,
           "every 4th sample disturbed: %lld of %lld, contended %d", (long long)a->disturbed,
           (long long)(a->st.n + a->disturbed), a->contended);
    EXPECT(fabs(a->st.max - 100e-6) < 1e-12, "a disturbed sample was kept: max %g", a->st.max);
    EXPECT(r.n_canary > 0, "no canary was timed");
    run_result_free(&r);

    reset(100e-6); /* every 2nd sample waits: enough clean ones, but over a quarter disturbed */
    F.disturb_every = 2, F.disturb_wait = 50e-6, F.disturb_cost = 200e-6;
    measure_model(m, b, &o, MODE_WARM, &no_floor, false, &r, err, sizeof err);
    a = &r.layers[0];
    EXPECT(a->contended && a->st.n >= o.min_samples && fabs(a->st.max - 100e-6) < 1e-12,
           "half disturbed: contended %d, %lld clean, max %g", a->contended, (long long)a->st.n, a->st.max);
    run_result_free(&r);

    reset(100e-6); /* every sample waits: too few clean ones */
    F.disturb_every = 1, F.disturb_wait = 50e-6, F.disturb_cost = 200e-6;
    o.timeout = 0.1;
    measure_model(m, b, &o, MODE_WARM, &no_floor, false, &r, err, sizeof err);
    a = &r.layers[0];
    EXPECT(a->status == ROW_OK && a->contended && a->disturbed == a->st.n && strstr(a->note, "contended"),
           "all disturbed: contended %d, %lld of %lld, note %s", a->contended, (long long)a->disturbed,
           (long long)a->st.n, a->note);
    EXPECT(fabs(a->st.median - 300e-6) < 1e-9, "the contended row keeps its disturbed samples: median %g",
           a->st.median);
    run_result_free(&r);

    reset(100e-6); /* every sample waits 0.5 us of 100: undisturbed, all kept */
    F.disturb_every = 1, F.disturb_wait = 0.5e-6, F.disturb_cost = 0;
    o = opts();
    o.waited = fake_waited;
    measure_model(m, b, &o, MODE_WARM, &no_floor, false, &r, err, sizeof err);
    EXPECT(r.layers[0].disturbed == 0 && !r.layers[0].contended && r.layers[0].st.n >= o.min_samples,
           "waits under 1%% dropped %lld samples", (long long)r.layers[0].disturbed);
    run_result_free(&r);
    fake_ops = saved;
}

int main(void)
{
    snprintf(cfg_path, sizeof cfg_path, "/tmp/layerbench_test_measure_%ld.yaml", (long)getpid());
    for (int k = 0; k < LAYER_KIND_COUNT; k++)
        fake_kernels[k][DTYPE_FP32].kernel = &fake_kernel;
    backend b;
    char err[128];
    EXPECT(backend_open(&fake_ops, NULL, &b, err, sizeof err) == BENCH_OK, "fake backend");
    model *m = load(tiny);
    if (m) {
        M = m;
        test_batch(&b, m, true);
        test_batch(&b, m, false);
        test_cold(&b, m);
        test_stopping(&b, m);
        test_long_samples(&b, m);
        test_interleaving(&b, m);
        test_auto(&b, m);
        test_row_failures(&b, m);
        test_chain(&b, m);
        test_zero_time(&b, m);
        test_contention(&b, m);
        model_free(m);
    }
    test_parts(&b);
    test_net_buffers(&b);
    backend_close(&b);
    unlink(cfg_path);
    return test_summary("test_measure");
}
