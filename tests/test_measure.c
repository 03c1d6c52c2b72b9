/* The measurement policy, without hardware: a fake backend whose clock only moves when
 * a layer "runs" (each launch costs a fixed, known time), that counts launches, holds,
 * flushes and samples, and fails where a test tells it to. Checks batch mode's launch
 * count and total time, that cold mode flushes before every sample, that views are not
 * timed, that a failed layer, a failed sample or a failed graph capture becomes a row
 * with its reason while the rest of the run goes on, and that a call taking no time
 * cannot make Google Benchmark run forever. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "cfg.h"
#include "measure.h"
#include "test_util.h"

typedef struct fake {
    double clock, t0;          /* fake seconds */
    double cost;               /* seconds per launch of a layer */
    long launches, holds, flushes, starts, stops;
    bool capturing;
    long captured;
    const char *fail_setup;    /* name of a layer whose setup fails */
    long fail_stop_at;         /* the stop with this number fails (0: none) */
    bool fail_graph;           /* graph_end fails */
    char error[128];
    bool failed;
} fake;

typedef struct fake_graph {
    long launches;
} fake_graph;

static fake F;

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
    if (++F.stops == F.fail_stop_at) {
        snprintf(F.error, sizeof F.error, "injected timer failure");
        F.failed = true;
    }
    return F.failed ? -1.0 : F.clock - F.t0;
}
static void f_hold(void *ctx) { (void)ctx; F.holds++; }
static void f_flush(void *ctx) { (void)ctx; F.flushes++; F.clock += 50e-6; /* untimed */ }
static bench_status f_init(const backend_options *o, void **ctx, char *err, size_t len)
{
    (void)o, (void)err, (void)len;
    *ctx = &F;
    return BENCH_OK;
}
static void f_free(void *ctx) { (void)ctx; }
static bench_status f_setup(void *ctx, const layer *l, const float *w, void **state, char *impl, size_t len,
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
    *state = (void *)l;
    return BENCH_OK;
}
static void f_run(void *ctx, void *state, const float *in, const float *in2, float *out)
{
    (void)ctx, (void)in, (void)in2, (void)out;
    if (layer_desc_get(((const layer *)state)->kind)->aliases_input)
        return; /* a view: nothing runs, as on the real backends */
    if (F.capturing) {
        F.captured++;
        return;
    }
    F.launches++;
    F.clock += F.cost;
}
static void f_layer_free(void *ctx, void *state) { (void)ctx, (void)state; }
static const char *f_describe(void *ctx) { (void)ctx; return "{}"; }
static bench_status f_graph_begin(void *ctx) { (void)ctx; F.capturing = true; F.captured = 0; return BENCH_OK; }
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
    *graph = g;
    return BENCH_OK;
}
static void f_graph_launch(void *ctx, void *graph)
{
    (void)ctx;
    fake_graph *g = graph;
    F.launches += g->launches;
    F.clock += F.cost * (double)g->launches;
}
static void f_graph_free(void *ctx, void *graph) { (void)ctx; free(graph); }
static const char *f_last_error(void *ctx) { (void)ctx; return F.error; }
static void f_clear_error(void *ctx) { (void)ctx; F.failed = false; F.error[0] = 0; }

static const char *const f_modes[] = {"cold", "batch", NULL};

static backend_ops fake_ops = {
    .name = "fake", .init = f_init, .free = f_free, .alloc = f_alloc, .release = f_release,
    .upload = f_copy, .download = f_copy, .sync = f_sync, .timer_start = f_timer_start,
    .timer_stop = f_timer_stop, .hold = f_hold, .flush_cache = f_flush, .layer_setup = f_setup,
    .layer_run = f_run, .layer_free = f_layer_free, .describe = f_describe, .modes = f_modes,
    .device_memory = true, .graph_begin = f_graph_begin, .graph_end = f_graph_end,
    .graph_launch = f_graph_launch, .graph_free = f_graph_free, .last_error = f_last_error,
    .clear_error = f_clear_error,
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

static const char *const tiny = "name: tiny\ninput: [2, 5, 5]\nlayers:\n"
                                "  - {kind: relu, name: a}\n  - {kind: relu, name: b}\n"
                                "  - {kind: flatten, name: flat}\n  - {kind: relu, name: c}\n";

static void reset(double cost)
{
    memset(&F, 0, sizeof F);
    F.cost = cost;
}

static const measure_options mo = {.warmup_time = 0.005, .min_time = 0.01, .repetitions = 2, .seed = 7};

/* Batch mode: 2 us launches give 500 per sample (1 ms); the statistics are per launch;
 * Google Benchmark's time limits apply to whole samples, so the layer costs about
 * warm-up + estimation + repetitions x min_time of fake time, not 500 times that. */
static void test_batch(backend *b, model *m, bool graphs)
{
    reset(2e-6);
    backend_ops saved = fake_ops;
    if (!graphs)
        fake_ops.graph_begin = NULL;
    run_result r;
    char err[256];
    EXPECT(measure_model(m, b, &mo, "batch", false, &r, err, sizeof err) == BENCH_OK, "batch: %s", err);
    const layer_result *a = &r.layers[0];
    EXPECT(a->status == ROW_OK, "batch row: %s", a->note);
    EXPECT(a->launches == 500, "launches per sample %d, expected 500", a->launches);
    EXPECT(fabs(a->st.median - 2e-6) < 1e-12 && fabs(a->st.max - 2e-6) < 1e-12, "per-launch median %g max %g",
           a->st.median, a->st.max);
    double per_layer = F.clock / 3; /* three timed layers */
    EXPECT(per_layer < 10 * (mo.warmup_time + mo.repetitions * mo.min_time),
           "a batch layer took %.3f s of fake time, min time %.3f", per_layer, mo.min_time);
    EXPECT(strstr(a->note, graphs ? "captured as one graph" : "from the stream") != NULL, "note: %s", a->note);
    /* holds: one per sample where launches were captured, none for 500 stream launches */
    EXPECT(graphs ? F.holds == F.stops : F.holds == 5 * 3, "holds %ld for %ld samples", F.holds, F.stops);
    EXPECT(r.layers[2].status == ROW_VIEW, "flatten is a view, %s", row_status_name(r.layers[2].status));
    run_result_free(&r);
    fake_ops = saved;
}

/* Cold mode: a flush before every single timed sample (and no more). */
static void test_cold(backend *b, model *m)
{
    reset(30e-6);
    run_result r;
    char err[256];
    EXPECT(measure_model(m, b, &mo, "cold", false, &r, err, sizeof err) == BENCH_OK, "cold: %s", err);
    EXPECT(F.flushes == F.stops && F.flushes > 0, "%ld flushes for %ld samples", F.flushes, F.stops);
    EXPECT(F.holds == F.stops, "%ld holds for %ld samples", F.holds, F.stops);
    EXPECT(r.layers[0].launches == 1 && fabs(r.layers[0].st.median - 30e-6) < 1e-12, "cold median %g",
           r.layers[0].st.median);
    /* the flush itself (50 us of fake time before the timer starts) is never timed */
    EXPECT(r.layers[0].st.max < 31e-6, "a flush was timed: max %g", r.layers[0].st.max);
    int64_t n = 0;
    for (int i = 0; i < m->n_layers; i++)
        n += r.layers[i].status == ROW_OK ? r.layers[i].st.n + r.layers[i].discarded : 0;
    EXPECT(n == F.stops, "%lld samples kept or discarded, %ld taken", (long long)n, F.stops);
    run_result_free(&r);
}

/* A failing layer, a failing sample and a failing graph capture each become a row with
 * the reason; everything else runs. */
static void test_row_failures(backend *b, model *m)
{
    run_result r;
    char err[256];
    reset(10e-6);
    F.fail_setup = "b";
    EXPECT(measure_model(m, b, &mo, "cold", true, &r, err, sizeof err) == BENCH_ERR_BACKEND, "a failed row");
    EXPECT(r.layers[0].status == ROW_OK, "layer a: %s", r.layers[0].note);
    EXPECT(r.layers[1].status == ROW_FAILED && strstr(r.layers[1].note, "injected setup failure"), "layer b: %s %s",
           row_status_name(r.layers[1].status), r.layers[1].note);
    EXPECT(r.layers[3].status == ROW_OK, "the layer after a failed one: %s", r.layers[3].note);
    EXPECT(r.chained.status == ROW_FAILED && strstr(r.chained.note, "'b'"), "chained: %s", r.chained.note);
    EXPECT(strstr(err, "injected setup failure") != NULL, "first failure: %s", err);
    run_result_free(&r);

    reset(10e-6);
    F.fail_stop_at = 3;
    measure_model(m, b, &mo, "cold", false, &r, err, sizeof err);
    EXPECT(r.layers[0].status == ROW_FAILED && strstr(r.layers[0].note, "injected timer failure"), "layer a: %s",
           r.layers[0].note);
    EXPECT(r.layers[1].status == ROW_OK && r.layers[3].status == ROW_OK, "layers after a failed sample: %s / %s",
           r.layers[1].note, r.layers[3].note);
    run_result_free(&r);

    reset(10e-6);
    F.fail_graph = true;
    EXPECT(measure_model(m, b, &mo, "cold", true, &r, err, sizeof err) == BENCH_ERR_BACKEND, "graph failure");
    EXPECT(r.chained.status == ROW_OK, "chained: %s", r.chained.note);
    EXPECT(r.graph.status == ROW_FAILED && strstr(r.graph.note, "injected capture failure"), "graph row: %s %s",
           row_status_name(r.graph.status), r.graph.note);
    EXPECT(r.upload.status == ROW_OK && r.download.status == ROW_OK, "copies after a failed graph");
    EXPECT(r.failed == 1, "%d failed rows", r.failed);
    /* batch mode on the same backend falls back to stream launches, and says so */
    run_result_free(&r);
    measure_model(m, b, &mo, "batch", false, &r, err, sizeof err);
    EXPECT(r.layers[0].status == ROW_OK && strstr(r.layers[0].note, "graph capture failed"), "batch fallback: %s",
           r.layers[0].note);
    run_result_free(&r);
}

/* The chained forward: one sample runs every layer once, held, never flushed. */
static void test_chain(backend *b, model *m)
{
    run_result r;
    char err[256];
    reset(10e-6);
    EXPECT(measure_model(m, b, &mo, "cold", true, &r, err, sizeof err) == BENCH_OK, "%s", err);
    EXPECT(r.chained.status == ROW_OK && fabs(r.chained.st.median - 3 * 10e-6) < 1e-12, "chained median %g",
           r.chained.st.median);
    EXPECT(r.graph.status == ROW_OK && fabs(r.graph.st.median - 3 * 10e-6) < 1e-12, "graph median %g",
           r.graph.st.median);
    EXPECT(fabs(r.sum_medians - 3 * 10e-6) < 1e-12, "sum of medians %g", r.sum_medians);
    run_result_free(&r);
}

/* A layer that takes no time at all must not run Google Benchmark to 1e9 iterations. */
static void test_zero_time(backend *b, model *m)
{
    run_result r;
    char err[256];
    reset(0.0);
    measure_model(m, b, &mo, "cold", false, &r, err, sizeof err);
    EXPECT(r.layers[0].status == ROW_FAILED && strstr(r.layers[0].note, "no measurable time"), "zero time: %s",
           r.layers[0].note);
    run_result_free(&r);
}

int main(void)
{
    snprintf(cfg_path, sizeof cfg_path, "/tmp/layerbench_test_measure_%ld.yaml", (long)getpid());
    backend b;
    char err[128];
    EXPECT(backend_open(&fake_ops, NULL, &b, err, sizeof err) == BENCH_OK, "fake backend");
    model *m = load(tiny);
    if (m) {
        test_batch(&b, m, true);
        test_batch(&b, m, false);
        test_cold(&b, m);
        test_row_failures(&b, m);
        test_chain(&b, m);
        test_zero_time(&b, m);
        model_free(m);
    }
    backend_close(&b);
    unlink(cfg_path);
    return test_summary("test_measure");
}
