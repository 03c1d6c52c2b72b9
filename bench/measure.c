#include "measure.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gbench_shim.h"

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

/* ---- isolated layers ------------------------------------------------------------------- */

typedef struct timed_layer {
    const backend *b;
    void *state;
    const float *in, *in2;
    float *out;
    int launches;   /* per sample */
    bool cold;      /* flush caches before each sample */
} timed_layer;

/* One sample: a launch (or `launches` back to back) between the backend's timer. */
static double time_one_layer(void *user)
{
    timed_layer *t = user;
    const backend_ops *ops = t->b->ops;
    if (t->cold && ops->flush_cache)
        ops->flush_cache(t->b->ctx);
    ops->timer_start(t->b->ctx);
    for (int i = 0; i < t->launches; i++)
        ops->layer_run(t->b->ctx, t->state, t->in, t->in2, t->out);
    double s = ops->timer_stop(t->b->ctx);
    return s < 0 ? s : s / t->launches;
}

static bench_status run_gbench(const backend *b, const char *name, gbs_iteration_fn fn, void *user,
                               const measure_options *o, layer_result *r, char *err, size_t errlen)
{
    gbs_options go = {o->warmup_time, o->min_time, o->repetitions};
    gbs_result gr;
    if (gbs_run(name, fn, user, &go, &gr, err, (int)errlen) != 0) {
        const char *why = backend_last_error(b);
        if (*why)
            snprintf(err, errlen, "%s: %s", name, why);
        return BENCH_ERR_BACKEND;
    }
    r->st = stats_compute(gr.samples, gr.n_samples);
    r->discarded = gr.discarded;
    if (r->launches < 1)
        r->launches = 1;
    free(gr.samples);
    return BENCH_OK;
}

/* Batch mode: enough back-to-back launches that one sample lasts about a
 * millisecond, far above the timer's resolution; between 1 and 1000. */
#define BATCH_SAMPLE_SECONDS 1e-3
static int batch_launches(timed_layer *t)
{
    double best = 1e9;
    for (int i = 0; i < 5; i++) {
        double s = time_one_layer(t);
        if (s >= 0 && s < best)
            best = s;
    }
    double n = best > 0 ? BATCH_SAMPLE_SECONDS / best : 1000;
    return n < 1 ? 1 : n > 1000 ? 1000 : (int)n;
}

static bench_status measure_layer(const layer *l, const backend *b, const measure_options *o, const char *mode,
                                  uint64_t seed, layer_result *r, char *err, size_t errlen)
{
    const backend_ops *ops = b->ops;
    const layer_desc *d = layer_desc_get(l->kind);
    float *in, *in2, *w;
    float *din = NULL, *din2 = NULL, *dw = NULL, *dout = NULL;
    void *state = NULL;
    bench_status st = measure_layer_data(l, seed, &in, &in2, &w);
    if (st != BENCH_OK)
        goto fail;
    st = BENCH_ERR_NOMEM;
    din = backend_alloc_floats(b, shape_numel(&l->in), in);
    din2 = in2 ? backend_alloc_floats(b, shape_numel(&l->in2), in2) : NULL;
    dw = w ? backend_alloc_floats(b, l->n_weight_floats, w) : NULL;
    dout = d->aliases_input ? din : backend_alloc_floats(b, shape_numel(&l->out), NULL);
    if (!din || (in2 && !din2) || (w && !dw) || !dout)
        goto fail;
    st = ops->layer_setup(b->ctx, l, dw, &state, r->impl, sizeof r->impl, &r->workspace_bytes);
    if (st != BENCH_OK)
        goto fail;
    timed_layer t = {b, state, din, din2, dout, 1, strcmp(mode, "cold") == 0};
    if (strcmp(mode, "batch") == 0)
        t.launches = batch_launches(&t);
    r->launches = t.launches;
    st = run_gbench(b, l->name, time_one_layer, &t, o, r, err, errlen);
fail:
    if (st == BENCH_ERR_NOMEM)
        snprintf(err, errlen, "out of memory setting up layer '%s'", l->name);
    else if (st == BENCH_ERR_BACKEND && *backend_last_error(b) && !*err)
        snprintf(err, errlen, "layer '%s': %s", l->name, backend_last_error(b));
    if (state)
        ops->layer_free(b->ctx, state);
    if (dout != din)
        ops->release(b->ctx, dout);
    ops->release(b->ctx, din);
    ops->release(b->ctx, din2);
    ops->release(b->ctx, dw);
    free(in), free(in2), free(w);
    return st;
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

static double time_chain(void *user)
{
    chain *c = user;
    const backend_ops *ops = c->b->ops;
    ops->timer_start(c->b->ctx);
    for (int i = 0; i < c->m->n_layers; i++) {
        const layer *l = &c->m->layers[i];
        ops->layer_run(c->b->ctx, c->states[i], c->values[l->input[0]],
                       l->input[1] >= 0 ? c->values[l->input[1]] : NULL, c->values[i + 1]);
    }
    return ops->timer_stop(c->b->ctx);
}

/* The captured forward replayed as one graph launch. */
typedef struct graph_run {
    const backend *b;
    void *graph;
} graph_run;

static double time_graph(void *user)
{
    graph_run *g = user;
    g->b->ops->timer_start(g->b->ctx);
    g->b->ops->graph_launch(g->b->ctx, g->graph);
    return g->b->ops->timer_stop(g->b->ctx);
}

/* A host<->device copy of the model's input or output. */
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

static void not_measured(layer_result *r, const char *why)
{
    r->status = BENCH_ERR_UNSUPPORTED;
    r->dedupe_of = -1;
    snprintf(r->note, sizeof r->note, "%s", why);
}

static bench_status measure_graph(const chain *c, const measure_options *o, layer_result *r, char *err,
                                  size_t errlen)
{
    const backend_ops *ops = c->b->ops;
    graph_run g = {c->b, NULL};
    if (!ops->graph_begin) {
        not_measured(r, "the backend has no graphs");
        return BENCH_OK;
    }
    bench_status st = ops->graph_begin(c->b->ctx);
    for (int i = 0; st == BENCH_OK && i < c->m->n_layers; i++) {
        const layer *l = &c->m->layers[i];
        ops->layer_run(c->b->ctx, c->states[i], c->values[l->input[0]],
                       l->input[1] >= 0 ? c->values[l->input[1]] : NULL, c->values[i + 1]);
    }
    if (st == BENCH_OK)
        st = ops->graph_end(c->b->ctx, &g.graph);
    if (st != BENCH_OK) {
        snprintf(err, errlen, "capturing the forward as a graph: %s", backend_last_error(c->b));
        return st;
    }
    snprintf(r->impl, sizeof r->impl, "graph replay");
    st = run_gbench(c->b, "graph", time_graph, &g, o, r, err, errlen);
    ops->graph_free(c->b->ctx, g.graph);
    return st;
}

static bench_status measure_copies(const chain *c, const measure_options *o, run_result *out, char *err,
                                   size_t errlen)
{
    const model *m = c->m;
    if (!c->b->ops->device_memory) {
        not_measured(&out->upload, "host memory: no copy");
        not_measured(&out->download, "host memory: no copy");
        return BENCH_OK;
    }
    int last = model_storage_of(m, m->n_layers);
    size_t in_bytes = (size_t)shape_numel(&m->input) * sizeof(float);
    size_t out_bytes = (size_t)shape_numel(&m->layers[m->n_layers - 1].out) * sizeof(float);
    float *host = bench_alloc_floats((int64_t)((in_bytes > out_bytes ? in_bytes : out_bytes) / sizeof(float)));
    if (!host) {
        snprintf(err, errlen, "out of memory for the copy buffers");
        return BENCH_ERR_NOMEM;
    }
    layer_rng rng;
    layer_rng_seed(&rng, o->seed);
    layer_fill_uniform(host, (int64_t)(in_bytes / sizeof(float)), -1.0f, 1.0f, &rng);
    copy_run up = {c->b, true, c->values[0], host, in_bytes}, down = {c->b, false, c->values[last], host, out_bytes};
    snprintf(out->upload.impl, sizeof out->upload.impl, "pageable host memory");
    snprintf(out->download.impl, sizeof out->download.impl, "pageable host memory");
    bench_status st = run_gbench(c->b, "upload", time_copy, &up, o, &out->upload, err, errlen);
    if (st == BENCH_OK)
        st = run_gbench(c->b, "download", time_copy, &down, o, &out->download, err, errlen);
    free(host);
    return st;
}

static bench_status measure_chain(const model *m, const backend *b, const measure_options *o, run_result *res,
                                  char *err, size_t errlen)
{
    layer_result *r = &res->chained;
    const backend_ops *ops = b->ops;
    int n = m->n_layers;
    chain c = {m, b, xcalloc((size_t)n, sizeof(void *)), xcalloc((size_t)n, sizeof(float *)),
               xcalloc((size_t)n + 1, sizeof(float *))};
    bench_status st = BENCH_ERR_NOMEM;
    layer_rng rng;
    layer_rng_seed(&rng, o->seed);
    float *host = bench_alloc_floats(shape_numel(&m->input));
    if (!host)
        goto fail;
    layer_fill_uniform(host, shape_numel(&m->input), -1.0f, 1.0f, &rng);
    c.values[0] = backend_alloc_floats(b, shape_numel(&m->input), host);
    free(host);
    if (!c.values[0])
        goto fail;
    for (int i = 0; i < n; i++) {
        const layer *l = &m->layers[i];
        const layer_desc *d = layer_desc_get(l->kind);
        if (d->aliases_input) {
            c.values[i + 1] = c.values[model_storage_of(m, l->input[0])];
        } else if (!(c.values[i + 1] = backend_alloc_floats(b, shape_numel(&l->out), NULL))) {
            goto fail;
        }
        if (l->n_weight_floats) {
            float *w = bench_alloc_floats(l->n_weight_floats);
            if (!w)
                goto fail;
            d->init_weights(l, w, &rng);
            c.weights[i] = backend_alloc_floats(b, l->n_weight_floats, w);
            free(w);
            if (!c.weights[i])
                goto fail;
        }
        char impl[96], why[160];
        int64_t ws;
        st = ops->layer_setup(b->ctx, l, c.weights[i], &c.states[i], impl, sizeof impl, &ws);
        if (st == BENCH_ERR_UNSUPPORTED) {
            snprintf(why, sizeof why, "not run: layer '%s' (%s) is not supported on %s", l->name, d->name, ops->name);
            not_measured(r, why);
            not_measured(&res->graph, why);
            not_measured(&res->upload, why);
            not_measured(&res->download, why);
            st = BENCH_OK;
            goto out;
        }
        if (st != BENCH_OK)
            goto fail;
        st = BENCH_ERR_NOMEM;
    }
    snprintf(r->impl, sizeof r->impl, "layer by layer");
    st = run_gbench(b, m->name, time_chain, &c, o, r, err, errlen);
    if (st == BENCH_OK)
        st = measure_graph(&c, o, &res->graph, err, errlen);
    if (st == BENCH_OK)
        st = measure_copies(&c, o, res, err, errlen);
    goto out;
fail:
    if (st == BENCH_ERR_NOMEM)
        snprintf(err, errlen, "out of memory setting up the chained forward");
    else
        snprintf(err, errlen, "setting up the chained forward: %s", backend_last_error(b));
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
    return st;
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
    out->chained.dedupe_of = out->graph.dedupe_of = out->upload.dedupe_of = out->download.dedupe_of = -1;
    for (int i = 0; i < m->n_layers; i++) {
        const layer *l = &m->layers[i];
        layer_result *r = &out->layers[i];
        int twin = o->dedupe ? find_twin(m, i) : -1;
        r->dedupe_of = -1;
        if (twin >= 0) {
            *r = out->layers[twin];
            r->dedupe_of = twin;
            snprintf(r->note, sizeof r->note, "timed once with layer %d (--dedupe)", twin);
        } else {
            progress(o, b, i, m->n_layers, l->name);
            bench_status st = measure_layer(l, b, o, mode, o->seed + (uint64_t)i, r, err, errlen);
            if (st == BENCH_ERR_UNSUPPORTED) {
                r->status = st;
                snprintf(r->note, sizeof r->note, "skipped: %s cannot run it%s%s", b->ops->name,
                         r->impl[0] ? ": " : "", r->impl);
                r->impl[0] = 0;
            } else if (st != BENCH_OK) {
                progress(o, b, 0, 0, NULL);
                return st;
            }
        }
        if (r->status == BENCH_OK)
            out->sum_medians += r->st.median;
    }
    if (!with_model)
        return BENCH_OK;
    progress(o, b, m->n_layers - 1, m->n_layers, "chained forward");
    bench_status st = measure_chain(m, b, o, out, err, errlen);
    progress(o, b, 0, 0, NULL);
    return st;
}

void run_result_free(run_result *r)
{
    free(r->layers);
    r->layers = NULL;
}
