#include "measure.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gbench_shim.h"

const char *row_status_name(row_status s)
{
    static const char *const names[] = {"", "ok", "dedupe", "view", "skipped", "failed"};
    return s >= ROW_NONE && s <= ROW_FAILED ? names[s] : "?";
}

bench_status measure_layer_data(const layer *l, uint64_t seed, float **in, float **in2, float **w)
{
    const layer_desc *d = layer_desc_get(l->kind);
    layer_rng rng;
    layer_rng_seed(&rng, seed);
    *in = bench_alloc_floats(shape_numel(&l->in));
    *in2 = d->n_inputs == 2 ? bench_alloc_floats(shape_numel(&l->in2)) : NULL;
    *w = l->n_weight_floats ? bench_alloc_floats(l->n_weight_floats) : NULL;
    if (!*in || (d->n_inputs == 2 && !*in2) || (l->n_weight_floats && !*w)) {
        free(*in), free(*in2), free(*w);
        *in = *in2 = *w = NULL;
        return BENCH_ERR_NOMEM;
    }
    /* never zeros: they hide unwritten outputs and can run faster than real data */
    layer_fill_uniform(*in, shape_numel(&l->in), -1.0f, 1.0f, &rng);
    if (*in2)
        layer_fill_uniform(*in2, shape_numel(&l->in2), -1.0f, 1.0f, &rng);
    if (*w)
        d->init_weights(l, *w, &rng);
    return BENCH_OK;
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

/* ---- one timed sample -------------------------------------------------------------------- */

/* Starts a sample: the device is held (where the backend can) so that queuing the
 * launches is not timed, the caches are flushed for a cold sample, then the timer
 * starts. timer_stop releases the hold. */
static void begin_sample(const backend *b, bool hold, bool cold)
{
    const backend_ops *ops = b->ops;
    if (hold && ops->hold)
        ops->hold(b->ctx);
    if (cold && ops->flush_cache)
        ops->flush_cache(b->ctx);
    ops->timer_start(b->ctx);
}

typedef struct timed_layer {
    const backend *b;
    void *state;
    const float *in, *in2;
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
        ops->graph_launch(t->b->ctx, t->graph);
    else
        for (int i = 0; i < t->launches; i++)
            ops->layer_run(t->b->ctx, t->state, t->in, t->in2, t->out);
    return ops->timer_stop(t->b->ctx);
}

/* A sample function that gives up (fails) once a stop was asked for, so a long layer
 * does not delay an interruption. */
typedef struct stoppable {
    gbs_iteration_fn fn;
    void *user;
    const volatile int *stop;
} stoppable;

static double stoppable_sample(void *user)
{
    stoppable *s = user;
    return s->stop && *s->stop ? -1.0 : s->fn(s->user);
}

/* Runs Google Benchmark over fn and fills r's statistics, per launch. On failure the
 * row fails with the reason. */
static bench_status run_gbench(const backend *b, const char *name, gbs_iteration_fn fn, void *user, int launches,
                               const measure_options *o, layer_result *r)
{
    gbs_options go = {o->warmup_time, o->min_time, o->repetitions};
    gbs_result gr;
    char err[200];
    stoppable s = {fn, user, o->stop};
    if (gbs_run(name, stoppable_sample, &s, &go, &gr, err, (int)sizeof err) != 0) {
        const char *why = backend_last_error(b);
        row_fail(r, "timing failed: %s", *why ? why : err);
        return BENCH_ERR_BACKEND;
    }
    for (int64_t i = 0; i < gr.n_samples; i++)
        gr.samples[i] /= launches;
    r->st = stats_compute(gr.samples, gr.n_samples);
    r->discarded = gr.discarded;
    r->launches = launches;
    r->status = ROW_OK;
    free(gr.samples);
    return BENCH_OK;
}

/* Batch mode: enough back-to-back launches that one sample lasts about a
 * millisecond, far above the timer's resolution; between 1 and 1000. */
#define BATCH_SAMPLE_SECONDS 1e-3
#define BATCH_MAX_LAUNCHES 1000
/* Launches queued while the device is held, at most (a stream's launch queue holds a
 * thousand or so; a host blocked on a full queue would wait for the hold). */
#define HOLD_MAX_LAUNCHES 256

static int batch_launches(timed_layer *t)
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
    }
    double n = best > 0 ? BATCH_SAMPLE_SECONDS / best : BATCH_MAX_LAUNCHES;
    return n < 1 ? 1 : n > BATCH_MAX_LAUNCHES ? BATCH_MAX_LAUNCHES : (int)n;
}

/* Captures the batch's launches as one graph where the backend has graphs; otherwise
 * (or if the capture fails) they are launched from the stream, and the note says so. */
static void prepare_batch(timed_layer *t, layer_result *r)
{
    const backend_ops *ops = t->b->ops;
    t->launches = batch_launches(t);
    if (ops->graph_begin) {
        bench_status st = ops->graph_begin(t->b->ctx);
        for (int i = 0; st == BENCH_OK && i < t->launches; i++)
            ops->layer_run(t->b->ctx, t->state, t->in, t->in2, t->out);
        if (st == BENCH_OK)
            st = ops->graph_end(t->b->ctx, &t->graph);
        if (st == BENCH_OK) {
            snprintf(r->note, sizeof r->note, "%d launches per sample, captured as one graph", t->launches);
            return;
        }
        t->graph = NULL;
        snprintf(r->note, sizeof r->note, "graph capture failed (%s); %d launches per sample from the stream",
                 backend_last_error(t->b), t->launches);
        backend_clear_error(t->b); /* the layer can still be timed from the stream */
    } else {
        snprintf(r->note, sizeof r->note, "%d launches per sample from the stream", t->launches);
    }
    t->hold = t->launches <= HOLD_MAX_LAUNCHES;
}

/* ---- isolated layers ------------------------------------------------------------------- */

static void measure_layer(const layer *l, const backend *b, const measure_options *o, const char *mode,
                          uint64_t seed, layer_result *r)
{
    const backend_ops *ops = b->ops;
    float *in, *in2, *w;
    float *din = NULL, *din2 = NULL, *dw = NULL, *dout = NULL;
    void *state = NULL;
    backend_clear_error(b);
    timed_layer t = {.b = b, .launches = 1, .cold = strcmp(mode, "cold") == 0, .hold = true};
    if (measure_layer_data(l, seed, &in, &in2, &w) != BENCH_OK) {
        row_fail(r, "out of host memory for the layer's inputs and weights");
        return;
    }
    din = backend_alloc_floats(b, shape_numel(&l->in), in);
    din2 = in2 ? backend_alloc_floats(b, shape_numel(&l->in2), in2) : NULL;
    dw = w ? backend_alloc_floats(b, l->n_weight_floats, w) : NULL;
    dout = backend_alloc_floats(b, shape_numel(&l->out), NULL);
    if (!din || (in2 && !din2) || (w && !dw) || !dout) {
        const char *why = backend_last_error(b);
        row_fail(r, "out of %s memory for the layer's tensors%s%s", ops->device_memory ? "device" : "host",
                 *why ? ": " : "", why);
        goto out;
    }
    char why[96] = "";
    bench_status st = ops->layer_setup(b->ctx, l, dw, &state, why, sizeof why, &r->workspace_bytes);
    if (st == BENCH_ERR_UNSUPPORTED) {
        r->status = ROW_SKIPPED;
        snprintf(r->note, sizeof r->note, "skipped: %s cannot run it: %s", ops->name,
                 *why ? why : "no implementation for this configuration");
        goto out;
    }
    if (st != BENCH_OK) {
        row_fail(r, "setup failed: %s", st == BENCH_ERR_NOMEM ? "out of memory" : backend_last_error(b));
        goto out;
    }
    snprintf(r->impl, sizeof r->impl, "%s", why);
    t.state = state, t.in = din, t.in2 = din2, t.out = dout;
    if (strcmp(mode, "batch") == 0)
        prepare_batch(&t, r);
    run_gbench(b, l->name, time_layer_sample, &t, t.launches, o, r);
out:
    if (t.graph)
        ops->graph_free(b->ctx, t.graph);
    if (state)
        ops->layer_free(b->ctx, state);
    ops->release(b->ctx, dout);
    ops->release(b->ctx, din);
    ops->release(b->ctx, din2);
    ops->release(b->ctx, dw);
    free(in), free(in2), free(w);
}

/* Identical kind, shapes and parameters: the same work. */
static int find_twin(const model *m, int i)
{
    const layer *a = &m->layers[i];
    for (int j = 0; j < i; j++) {
        const layer *c = &m->layers[j];
        if (layer_same_work(c, a))
            return j;
    }
    return -1;
}

static void progress(const measure_options *o, const backend *b, int i, int n, const char *what)
{
    if (!o->progress)
        return;
    if (what)
        fprintf(stderr, "\r\033[K[%d/%d] %s: %s", i + 1, n, b->ops->name, what);
    else
        fprintf(stderr, "\r\033[K");
    fflush(stderr);
}

/* ---- the chained forward --------------------------------------------------------------- */

typedef struct chain {
    const model *m;
    const backend *b;
    void **states;
    float **weights;  /* per layer, backend memory */
    float **values;   /* per value id; views point at the buffer they alias */
} chain;

static void queue_forward(const chain *c)
{
    const backend_ops *ops = c->b->ops;
    for (int i = 0; i < c->m->n_layers; i++) {
        const layer *l = &c->m->layers[i];
        ops->layer_run(c->b->ctx, c->states[i], c->values[l->input[0]],
                       l->input[1] >= 0 ? c->values[l->input[1]] : NULL, c->values[i + 1]);
    }
}

static double time_chain(void *user)
{
    chain *c = user;
    begin_sample(c->b, true, false);
    queue_forward(c);
    return c->b->ops->timer_stop(c->b->ctx);
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
    g->b->ops->graph_launch(g->b->ctx, g->graph);
    return g->b->ops->timer_stop(g->b->ctx);
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
    ops->timer_start(c->b->ctx);
    bench_status st = c->upload ? ops->upload(c->b->ctx, c->device, c->host, c->bytes)
                                : ops->download(c->b->ctx, c->host, c->device, c->bytes);
    double s = ops->timer_stop(c->b->ctx);
    return st == BENCH_OK ? s : -1.0;
}

static void measure_graph(const chain *c, const measure_options *o, layer_result *r)
{
    const backend_ops *ops = c->b->ops;
    graph_run g = {c->b, NULL};
    if (!ops->graph_begin)
        return; /* ROW_NONE: no graph row */
    snprintf(r->impl, sizeof r->impl, "graph replay");
    bench_status st = ops->graph_begin(c->b->ctx);
    if (st == BENCH_OK) {
        queue_forward(c);
        st = ops->graph_end(c->b->ctx, &g.graph);
    }
    if (st != BENCH_OK) {
        row_fail(r, "capturing the forward as a graph failed: %s", backend_last_error(c->b));
        backend_clear_error(c->b);
        return;
    }
    run_gbench(c->b, "graph", time_graph, &g, 1, o, r);
    ops->graph_free(c->b->ctx, g.graph);
}

static void measure_copies(const chain *c, const measure_options *o, run_result *out)
{
    const model *m = c->m;
    if (!c->b->ops->device_memory)
        return; /* ROW_NONE: host memory, no copies */
    int last = model_storage_of(m, m->n_layers);
    size_t in_bytes = (size_t)shape_numel(&m->input) * sizeof(float);
    size_t out_bytes = (size_t)shape_numel(&m->layers[m->n_layers - 1].out) * sizeof(float);
    float *host = bench_alloc_floats((int64_t)((in_bytes > out_bytes ? in_bytes : out_bytes) / sizeof(float)));
    snprintf(out->upload.impl, sizeof out->upload.impl, "pageable host memory");
    snprintf(out->download.impl, sizeof out->download.impl, "pageable host memory");
    if (!host) {
        row_fail(&out->upload, "out of host memory for the copy buffer");
        row_fail(&out->download, "out of host memory for the copy buffer");
        return;
    }
    layer_rng rng;
    layer_rng_seed(&rng, o->seed);
    layer_fill_uniform(host, (int64_t)(in_bytes / sizeof(float)), -1.0f, 1.0f, &rng);
    copy_run up = {c->b, true, c->values[0], host, in_bytes}, down = {c->b, false, c->values[last], host, out_bytes};
    run_gbench(c->b, "upload", time_copy, &up, 1, o, &out->upload);
    run_gbench(c->b, "download", time_copy, &down, 1, o, &out->download);
    free(host);
}

/* Marks the whole-model rows as not run, with why. */
static void model_rows(run_result *res, row_status st, const char *why)
{
    layer_result *rows[] = {&res->chained, &res->graph, &res->upload, &res->download};
    for (int i = 0; i < 4; i++) {
        if (i == 1 && !res->backend_has_graphs)
            continue;
        if (i >= 2 && !res->backend_has_copies)
            continue;
        rows[i]->status = st;
        snprintf(rows[i]->note, sizeof rows[i]->note, "%s", why);
    }
}

static void measure_chain(const model *m, const backend *b, const measure_options *o, run_result *res)
{
    layer_result *r = &res->chained;
    const backend_ops *ops = b->ops;
    int n = m->n_layers;
    chain c = {m, b, xcalloc((size_t)n, sizeof(void *)), xcalloc((size_t)n, sizeof(float *)),
               xcalloc((size_t)n + 1, sizeof(float *))};
    char why[256] = "";
    layer_rng rng;
    layer_rng_seed(&rng, o->seed);
    backend_clear_error(b);
    float *host = bench_alloc_floats(shape_numel(&m->input));
    if (host) {
        layer_fill_uniform(host, shape_numel(&m->input), -1.0f, 1.0f, &rng);
        c.values[0] = backend_alloc_floats(b, shape_numel(&m->input), host);
        free(host);
    }
    if (!c.values[0])
        snprintf(why, sizeof why, "not run: out of memory for the model's input");
    for (int i = 0; !*why && i < n; i++) {
        const layer *l = &m->layers[i];
        const layer_desc *d = layer_desc_get(l->kind);
        if (d->aliases_input) {
            c.values[i + 1] = c.values[model_storage_of(m, l->input[0])];
        } else if (!(c.values[i + 1] = backend_alloc_floats(b, shape_numel(&l->out), NULL))) {
            snprintf(why, sizeof why, "not run: out of memory for the activations (at layer '%s')", l->name);
            break;
        }
        if (l->n_weight_floats) {
            float *w = bench_alloc_floats(l->n_weight_floats);
            if (w) {
                d->init_weights(l, w, &rng);
                c.weights[i] = backend_alloc_floats(b, l->n_weight_floats, w);
                free(w);
            }
            if (!c.weights[i]) {
                snprintf(why, sizeof why, "not run: out of memory for the weights (at layer '%s')", l->name);
                break;
            }
        }
        char impl[96] = "";
        int64_t ws;
        bench_status st = ops->layer_setup(b->ctx, l, c.weights[i], &c.states[i], impl, sizeof impl, &ws);
        if (st == BENCH_ERR_UNSUPPORTED) {
            snprintf(why, sizeof why, "not run: layer '%s' (%s) is not supported on %s", l->name, d->name, ops->name);
            model_rows(res, ROW_SKIPPED, why);
            goto out;
        }
        if (st != BENCH_OK)
            snprintf(why, sizeof why, "not run: setting up layer '%s' failed: %s", l->name,
                     st == BENCH_ERR_NOMEM ? "out of memory" : backend_last_error(b));
    }
    if (*why) {
        model_rows(res, ROW_FAILED, why);
        goto out;
    }
    snprintf(r->impl, sizeof r->impl, "layer by layer");
    run_gbench(b, m->name, time_chain, &c, 1, o, r);
    measure_graph(&c, o, &res->graph);
    measure_copies(&c, o, res);
out:
    for (int i = 0; i < n; i++) {
        if (c.states[i])
            ops->layer_free(b->ctx, c.states[i]);
        ops->release(b->ctx, c.weights[i]);
        if (!layer_desc_get(m->layers[i].kind)->aliases_input)
            ops->release(b->ctx, c.values[i + 1]);
    }
    ops->release(b->ctx, c.values[0]);
    free(c.states), free(c.weights), free(c.values);
}

/* Counts the failed rows and keeps the first failure's reason in err. */
static void tally(run_result *res, const layer_result *r, const char *name, char *err, size_t errlen)
{
    if (r->status != ROW_FAILED)
        return;
    if (res->failed++ == 0)
        snprintf(err, errlen, "%s on %s: %s", name, res->backend, r->note);
}

bench_status measure_model(const model *m, const backend *b, const measure_options *o, const char *mode,
                           bool with_model, run_result *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->m = m;
    out->backend = b->ops->name;
    out->mode = mode;
    out->threads = backend_threads(b);
    out->layers = xcalloc((size_t)m->n_layers, sizeof(layer_result));
    out->has_model = with_model;
    out->backend_has_graphs = b->ops->graph_begin != NULL;
    out->backend_has_copies = b->ops->device_memory;
    out->chained.dedupe_of = out->graph.dedupe_of = out->upload.dedupe_of = out->download.dedupe_of = -1;
    for (int i = 0; i < m->n_layers; i++) {
        const layer *l = &m->layers[i];
        layer_result *r = &out->layers[i];
        int twin = o->dedupe ? find_twin(m, i) : -1;
        r->dedupe_of = -1;
        if (layer_desc_get(l->kind)->aliases_input) {
            r->status = ROW_VIEW;
            snprintf(r->impl, sizeof r->impl, "view");
            snprintf(r->note, sizeof r->note, "a view of its input: nothing runs");
        } else if (twin >= 0 && out->layers[twin].status != ROW_VIEW) {
            *r = out->layers[twin];
            r->dedupe_of = twin;
            if (r->status == ROW_OK)
                r->status = ROW_DEDUPE;
            snprintf(r->note, sizeof r->note, "timed once with layer %d (--dedupe)", twin);
        } else {
            progress(o, b, i, m->n_layers, l->name);
            measure_layer(l, b, o, mode, o->seed + (uint64_t)i, r);
            if (o->stop && *o->stop) {
                progress(o, b, 0, 0, NULL);
                snprintf(err, errlen, "at layer %d of %d ('%s')", i + 1, m->n_layers, l->name);
                return BENCH_ERR_INTERRUPTED;
            }
            tally(out, r, l->name, err, errlen);
        }
        if (row_timed(r))
            out->sum_medians += r->st.median;
    }
    if (with_model) {
        progress(o, b, m->n_layers - 1, m->n_layers, "chained forward");
        measure_chain(m, b, o, out);
        if (o->stop && *o->stop) {
            progress(o, b, 0, 0, NULL);
            snprintf(err, errlen, "in the chained forward");
            return BENCH_ERR_INTERRUPTED;
        }
        tally(out, &out->chained, "the chained forward", err, errlen);
        tally(out, &out->graph, "the graph replay", err, errlen);
        tally(out, &out->upload, "the input copy", err, errlen);
        tally(out, &out->download, "the output copy", err, errlen);
    }
    progress(o, b, 0, 0, NULL);
    return out->failed ? BENCH_ERR_BACKEND : BENCH_OK;
}

void run_result_free(run_result *r)
{
    free(r->layers);
    r->layers = NULL;
}
