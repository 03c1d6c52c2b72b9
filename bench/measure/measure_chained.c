/* The whole-model rows: the chained forward with the in-model view (a mark after each
 * layer, and the parts of the layers a backend splits), its graph replay, and the
 * input and output copies of a backend with its own memory. */
#include "measure_internal.h"
#include "train_step.h"

#include <stdlib.h>
#include <string.h>

typedef struct chain {
    const model *m;
    const backend *b;
    forward_net net;
    train_step *train; /* a train model: the loss and the backward after the forward, or NULL */
    int n_marks;      /* n_layers; a training step's train_step_marks */
    dvec loss;        /* a training step: the loss's seconds inside it, one per kept sample */
    bool marks;       /* the backend records a mark after each layer */
    double *mark_buf; /* per call of this chunk: n_marks marks (seconds from the start) */
    int64_t mark_calls, mark_cap;
    dvec *inmodel;    /* per layer: seconds inside the forward, one per kept sample */
    bool *dist;       /* per kept sample: it was measure_disturbed (contention); n_dist of them */
    int64_t n_dist, cap_dist;
    int n_parts;      /* parts of layers timed inside the forward, all layers together */
    part_result *parts; /* n_parts: which layer and part each is */
    const backend_layer **part_src; /* per part: the kernel whose parts_read times it (read at its first part), or
                                       NULL: a training step's forward or whole backward, from the marks */
    double *part_buf; /* per call of this chunk: n_parts seconds */
    dvec *part_times; /* per part: seconds, one per kept sample */
} chain;

/* The whole-model units, set up together. */
/* The captured forward replayed as one graph launch. */
typedef struct graph_run {
    const backend *b;
    void *graph;
} graph_run;

/* A host<->device copy of the model's input or output. Not held: a copy from pageable
 * host memory waits for the stream to drain before it starts. */
typedef struct copy_run {
    const backend *b;
    bool upload;
    void *device;
    float *host;
    size_t bytes;
} copy_run;

struct model_units {
    chain c;
    graph_run g;
    copy_run up, down;
    float *host;
};

static double time_chain(void *user)
{
    chain *c = user;
    measure_begin_sample(c->b, true, false);
    forward_queue(&c->net, c->marks);
    if (c->train)
        train_step_queue(c->train, c->marks);
    double s = c->b->ops->timing.timer_stop(c->b->ctx);
    if (c->marks && s >= 0) {
        int n = c->n_marks, np = c->n_parts;
        if (c->mark_calls == c->mark_cap) { /* grows between samples, outside the timed part */
            c->mark_cap = c->mark_cap ? 2 * c->mark_cap : 64;
            c->mark_buf = xrealloc(c->mark_buf, (size_t)(c->mark_cap * n) * sizeof *c->mark_buf);
            if (np)
                c->part_buf = xrealloc(c->part_buf, (size_t)(c->mark_cap * np) * sizeof *c->part_buf);
        }
        c->b->ops->timing.marks_read(c->b->ctx, c->mark_buf + c->mark_calls * n, n);
        for (int k = 0; k < np; k++) /* each split kernel writes all its parts at its first */
            if (c->part_src[k] && (k == 0 || c->part_src[k - 1] != c->part_src[k]))
                backend_layer_parts_read(c->part_src[k], c->part_buf + c->mark_calls * np + k);
    }
    c->mark_calls++;
    return s;
}

/* A training step's sample: each layer's forward (from the previous mark to its own)
 * and its backward (from the mark of the layer after it, in reverse, to its own) are its
 * parts (the backward's own where its kernel splits it, in pb already) and together its
 * in-model time; the loss's span apart. */
static void train_kept(chain *c, const double *mk, double *pb)
{
    int n = c->m->n_layers;
    bool opt = c->n_marks > 2 * n + 1; /* layer i's update from mark 2n + i to 2n + 1 + i */
    for (int j = 0; j < c->n_parts; j++) {
        int i = c->parts[j].layer, b = 2 * n - i;
        if (c->part_src[j])
            continue;
        pb[j] = c->parts[j].index == 0                  ? mk[i] - (i ? mk[i - 1] : 0.0)
                : !strcmp(c->parts[j].info.name, "update") ? mk[2 * n + 1 + i] - mk[2 * n + i]
                                                            : mk[b] - mk[b - 1];
    }
    for (int i = 0; i < n; i++)
        dvec_push(&c->inmodel[i], mk[i] - (i ? mk[i - 1] : 0.0) + mk[2 * n - i] - mk[2 * n - i - 1] +
                                      (opt ? mk[2 * n + 1 + i] - mk[2 * n + i] : 0.0));
    dvec_push(&c->loss, mk[n] - mk[n - 1]);
}

/* After a chunk of the chained forward: each kept sample's marks become one in-model
 * time per layer (from the previous layer's mark to its own), and its parts' times. */
static void chain_kept(unit *u, int64_t first, int64_t n, const bool *dist)
{
    chain *c = u->user;
    int nl = c->m->n_layers, np = c->n_parts;
    for (int64_t k = first; c->marks && k < first + n && k < c->mark_calls && c->inmodel[0].n < MEASURE_MAX_SAMPLES;
         k++) {
        const double *mk = c->mark_buf + k * c->n_marks;
        if (c->n_dist == c->cap_dist)
            c->dist = xrealloc(c->dist, (size_t)(c->cap_dist = c->cap_dist ? 2 * c->cap_dist : 256) * sizeof *c->dist);
        c->dist[c->n_dist++] = dist[k - first];
        if (c->train)
            train_kept(c, mk, np ? c->part_buf + k * np : NULL);
        for (int i = 0; i < nl && !c->train; i++)
            dvec_push(&c->inmodel[i], mk[i] - (i ? mk[i - 1] : 0.0));
        for (int j = 0; j < np; j++)
            dvec_push(&c->part_times[j], c->part_buf[k * np + j]);
    }
    c->mark_calls = 0;
}

/* Appends np parts of layer i, its index from first on, timed by src (NULL: the marks). */
static void add_parts(chain *c, int i, int first, const layer_part_info *info, int np, const backend_layer *src)
{
    c->parts = xrealloc(c->parts, (size_t)(c->n_parts + np) * sizeof *c->parts);
    c->part_src = xrealloc(c->part_src, (size_t)(c->n_parts + np) * sizeof *c->part_src);
    for (int j = 0; j < np; j++) {
        c->part_src[c->n_parts] = src;
        c->parts[c->n_parts++] = (part_result){.layer = i, .index = first + j, .info = info[j]};
    }
}

/* A training step's parts: each layer's forward, then its backward, whole or as its
 * kernel splits it (conv2d's and linear's data and weights halves), then its optimizer's
 * update where there is one. */
static void enable_train_parts(chain *c)
{
    layer_part_info info[LAYER_MAX_PARTS];
    for (int i = 0; i < c->m->n_layers; i++) {
        const layer *l = &c->m->layers[i];
        if (layer_is_view(l))
            continue;
        layer f = *l;
        f.pass = PASS_FORWARD;
        layer_count(&f);
        add_parts(c, i, 0, &(layer_part_info){"forward", f.flops, f.bytes}, 1, NULL);
        const backend_layer *bs = train_step_backward(c->train, i);
        int np = bs ? backend_layer_parts(bs, info) : 0;
        if (np > 1 && backend_layer_parts_enable(bs, true))
            add_parts(c, i, 1, info, np, bs);
        else if (np == 1) /* one half only, named: its span from the marks */
            add_parts(c, i, 1, info, 1, NULL);
        else if (bs) /* none where it runs no backward (the loss does not reach it, or nothing in it learns) */
            add_parts(c, i, 1, &(layer_part_info){"backward", bs->l->flops, bs->l->bytes}, 1, NULL);
        if (train_step_updates(c->train, i)) { /* the optimizer's: a few FLOPs a parameter, memory-bound */
            layer_part_info u = {"update", 0, 0};
            model_optimizer_count(c->m->optimizer, l->n_weights, &u.flops, &u.bytes);
            add_parts(c, i, 1 + (np > 1 ? np : 1), &u, 1, NULL);
        }
    }
}

/* Turns on the parts of the layers the backend splits inside the forward (after the
 * graph was captured: the graph replays the forward without them). */
static void enable_parts(chain *c)
{
    if (!c->marks)
        return;
    layer_part_info info[LAYER_MAX_PARTS];
    if (c->train)
        enable_train_parts(c);
    for (int i = 0; i < c->m->n_layers && !c->train; i++) {
        const backend_layer *state = c->net.states[i];
        int np = backend_layer_parts(state, info);
        if (np == 0)
            np = layer_parts(&c->m->layers[i], info);
        if (np > 0 && backend_layer_parts_enable(state, true))
            add_parts(c, i, 0, info, np, state);
    }
    if (c->n_parts)
        c->part_times = xcalloc((size_t)c->n_parts, sizeof *c->part_times);
}

static double time_graph(void *user)
{
    graph_run *g = user;
    measure_begin_sample(g->b, true, false);
    g->b->ops->timing.graph_launch(g->b->ctx, g->graph);
    return g->b->ops->timing.timer_stop(g->b->ctx);
}

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

/* Marks the whole-model rows that apply as not run, with why. */
void chained_rows_not_run(run_result *res, const backend *b, row_status st, const char *why)
{
    layer_result *rows[] = {&res->chained, &res->graph, &res->upload, &res->download};
    for (int i = 0; i < 4; i++) {
        if ((i == 1 && !b->ops->timing.graph_begin) || (i >= 2 && !b->ops->device_memory))
            continue;
        rows[i]->status = st;
        snprintf(rows[i]->note, sizeof rows[i]->note, "%s", why);
    }
}

void measure_model_not_run(run_result *res, const backend *b, const char *why)
{
    res->has_model = true;
    chained_rows_not_run(res, b, ROW_SKIPPED, why);
}

model_units *chained_setup(const model *m, const backend *b, const measure_options *o, const timer_floor *floor,
                           run_result *res, unit *units, int *n_units)
{
    model_units *mu = xcalloc(1, sizeof *mu);
    const backend_ops *ops = b->ops;
    int n = m->n_layers;
    chain *c = &mu->c;
    *c = (chain){.m = m, .b = b};
    char why[200] = "", note[224];
    backend_clear_error(b);
    int64_t free_before = ops->device.mem_available ? ops->device.mem_available(b->ctx) : -1;
    bench_status built = forward_build(&c->net, m, b, o->seed, why, sizeof why);
    if (built == BENCH_OK && m->pass == PASS_TRAIN)
        c->train = train_step_build(&c->net, o->seed, &built, why, sizeof why);
    if (built != BENCH_OK) {
        snprintf(note, sizeof note, "not run: %s", why);
        chained_rows_not_run(res, b, built == BENCH_ERR_UNSUPPORTED ? ROW_SKIPPED : ROW_FAILED, note);
        return mu;
    }
    if (free_before >= 0) {
        int64_t free_after = ops->device.mem_available(b->ctx);
        res->forward_device_bytes = free_after >= 0 ? free_before - free_after : -1;
    }
    res->chained.mode = MODE_CHAINED;
    snprintf(res->chained.impl, sizeof res->chained.impl, "%s",
             !c->train ? "layer by layer"
             : train_step_loss(c->train) == LOSS_CROSS_ENTROPY ? "training step: forward, cross-entropy, backward"
                                                                : "training step: forward, a weighted sum of the output, backward");
    if (c->train && m->optimizer != OPTIMIZER_NONE)
        snprintf(res->chained.impl + strlen(res->chained.impl), sizeof res->chained.impl - strlen(res->chained.impl),
                 ", %s update (learning rate 0 while timed)", model_optimizer_name(m->optimizer));
    c->n_marks = c->train ? train_step_marks(c->train) : n;
    c->marks = ops->timing.marks_prepare && ops->timing.marks_prepare(b->ctx, c->n_marks) == BENCH_OK;
    if (c->marks) {
        c->inmodel = xcalloc((size_t)n, sizeof *c->inmodel);
        res->inmodel = xcalloc((size_t)n, sizeof *res->inmodel);
    }
    backend_clear_error(b);
    units[(*n_units)++] = (unit){.b = b, .r = &res->chained, .layer = -1, .name = m->name, .fn = time_chain, .user = c,
                                 .launches = 1, .floor = floor->warm, .kept = chain_kept};
    if (ops->timing.graph_begin && !c->train) {
        res->graph.mode = MODE_GRAPH;
        snprintf(res->graph.impl, sizeof res->graph.impl, "graph replay");
        bench_status st = ops->timing.graph_begin(b->ctx);
        if (st == BENCH_OK) {
            forward_queue(&c->net, false);
            st = ops->timing.graph_end(b->ctx, &mu->g.graph);
        }
        mu->g.b = b;
        if (st != BENCH_OK) {
            measure_row_fail(&res->graph, "capturing the forward as a graph failed: %s", backend_last_error(b));
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
        dtype_t in_type = model_value_dtype(m, 0), out_type = model_value_dtype(m, last);
        size_t in_bytes = (size_t)shape_numel(&m->input) * dtype_size(in_type);
        size_t out_bytes = (size_t)shape_numel(&m->layers[n - 1].out) * dtype_size(out_type);
        res->upload.mode = res->download.mode = MODE_TRANSFER;
        snprintf(res->upload.impl, sizeof res->upload.impl, "pageable host memory");
        snprintf(res->download.impl, sizeof res->download.impl, "pageable host memory");
        int64_t in_n = shape_numel(&m->input), floats = in_n > (int64_t)(out_bytes / 4) ? in_n : (int64_t)(out_bytes / 4);
        mu->host = bench_alloc_floats(floats + 1);
        if (!mu->host) {
            measure_row_fail(&res->upload, "out of host memory for the copy buffer");
            measure_row_fail(&res->download, "out of host memory for the copy buffer");
            return mu;
        }
        layer_rng rng;
        layer_rng_seed(&rng, o->seed + 1);
        /* the upload writes the model's input: values of its dtype, not fp32 bits */
        layer_fill_uniform(mu->host, in_n, -1.0f, 1.0f, &rng);
        dtype_from_f32(in_type, mu->host, mu->host, in_n); /* narrows in place, front to back */
        mu->up = (copy_run){b, true, c->net.values[0], mu->host, in_bytes};
        mu->down = (copy_run){b, false, c->net.values[last], mu->host, out_bytes};
        units[(*n_units)++] = (unit){.b = b, .r = &res->upload, .layer = -1, .name = "upload", .fn = time_copy, .user = &mu->up,
                                     .launches = 1, .floor = floor->warm};
        units[(*n_units)++] = (unit){.b = b, .r = &res->download, .layer = -1, .name = "download", .fn = time_copy,
                                     .user = &mu->down, .launches = 1, .floor = floor->warm};
    }
    return mu;
}

void chained_free(const model *m, const backend *b, model_units *mu)
{
    if (!mu)
        return;
    chain *c = &mu->c;
    if (mu->g.graph)
        b->ops->timing.graph_free(b->ctx, mu->g.graph);
    train_step_free(c->train);
    forward_free(&c->net);
    free(c->loss.v);
    for (int i = 0; c->inmodel && i < m->n_layers; i++)
        free(c->inmodel[i].v);
    for (int j = 0; j < c->n_parts; j++)
        free(c->part_times[j].v);
    free(c->parts), free(c->part_src), free(c->part_times), free(c->part_buf), free(c->dist);
    free(c->inmodel), free(c->mark_buf), free(mu->host);
    free(mu);
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
        return; /* a training step's: each layer's forward and backward (its parts), the loss aside */
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
        p->r = (layer_result){.status = whole->status, .mode = MODE_INMODEL, .dedupe_of = -1, .launches = 1,
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
    for (int i = 0; i <= c->m->n_layers + c->n_parts; i++) {
        dvec *d = i < c->m->n_layers ? &c->inmodel[i] : i < c->m->n_layers + c->n_parts ? &c->part_times[i - c->m->n_layers] : &c->loss;
        int64_t w = 0;
        for (int64_t k = 0; k < d->n && k < c->n_dist; k++)
            if (!c->dist[k])
                d->v[w++] = d->v[k];
        d->n = w;
    }
}

/* The in-model rows: each layer's time inside the forward, from the chain's marks. */
void chained_finish_inmodel(const model *m, model_units *mu, run_result *res)
{
    if (!mu) /* left out of this process (--worker's skip) */
        return;
    if (res->inmodel)
        drop_disturbed(&mu->c);
    for (int i = 0; res->inmodel && i < m->n_layers; i++) {
        layer_result *r = &res->inmodel[i];
        dvec *d = &mu->c.inmodel[i];
        r->mode = MODE_INMODEL;
        r->dedupe_of = -1;
        r->launches = 1;
        snprintf(r->impl, sizeof r->impl, "%s",
                 mu->c.net.impl && *mu->c.net.impl[i] && !mu->c.train ? mu->c.net.impl[i] : res->layers[i].impl);
        /* the isolated row's kernels, unless the forward's link ran another implementation */
        snprintf(r->kernels, sizeof r->kernels, "%s",
                 mu->c.net.impl && *mu->c.net.impl[i] && strcmp(mu->c.net.impl[i], res->layers[i].impl) != 0
                     ? ""
                     : res->layers[i].kernels);
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
    if (mu->c.train && train_step_loss(mu->c.train) == LOSS_CROSS_ENTROPY && mu->c.loss.n && row_timed(&res->chained)) {
        double med, lo, hi;
        stats_median_ci(mu->c.loss.v, mu->c.loss.n, &med, &lo, &hi);
        measure_note_append(&res->chained, "the loss (softmax, then add the labels' negated one-hot) took %.1f us of it "
                            "(median)", med * 1e6);
    }
}
