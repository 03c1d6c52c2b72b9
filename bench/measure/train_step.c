/* The chained training step's loss and backward (train_step.h). */
#include "train_step.h"

#include <stdlib.h>
#include <string.h>

/* One sum of an output's gradient: out = in[0] + in[1], by the backend's add kernel, run
 * just before layer's backward (the first of a value's sums reads two readers' slices,
 * the next ones the running sum and one more slice). */
typedef struct grad_sum {
    int layer;
    backend_layer *state;
    const void *in[2];
    void *out;
} grad_sum;

/* A layer made here (the loss's softmax, a sum's add), with the shapes it owns. */
typedef struct own_layer {
    layer l;
    shape_t ins[2];
    int inputs[2];
} own_layer;

struct train_step {
    const forward_net *net;
    int n;
    layer *bl;                /* per layer: as its backward kernel sees it */
    backend_layer **bstates;  /* per layer; NULL for a view or a layer the loss does not reach */
    void **grads;             /* per layer: its backward's output (backend memory), owned */
    const void ***bargs;      /* per layer: its inputs, its output, its output's gradient */
    grad_sum *sums;           /* in the order they run (layers descending) */
    int n_sums;
    own_layer *owned;         /* the sums' add layers, one per summed value, then the loss's softmax and add */
    int n_owned;
    void **sum_bufs;          /* per summed value: its gradient's buffer, owned */
    backend_layer **adds;     /* per summed value: the add its sums run, owned */
    int n_sum_bufs;
    train_loss loss;
    backend_layer *softmax;   /* cross-entropy: softmax over the logits' last dim into probs, */
    backend_layer *add;       /* ... then probs + minus_onehot into dloss */
    const void *logits;
    void *probs, *minus_onehot; /* (owned) */
    void *dloss;              /* the loss's gradient, the last layer's output's (owned) */
    backend_optimizer_args opt;     /* the update after the backward (kind OPTIMIZER_NONE: none) */
    bool *updates;                  /* per layer: its weights learn, and the optimizer updates them */
    void **moments;                 /* per layer: AdamW's m then v (2 n_weights floats), owned; NULL else */
    float **master;                 /* per 16-bit layer the optimizer updates: its fp32 master weights, owned */
    float *wide_grad;               /* the widest such layer's weights' gradient, widened to fp32 (owned) */
};

train_loss train_step_loss(const train_step *ts) { return ts->loss; }
const void *train_step_grads(const train_step *ts, int i) { return ts->bstates[i] ? ts->grads[i] : NULL; }
const backend_layer *train_step_backward(const train_step *ts, int i) { return ts->bstates[i]; }
const float *train_step_master(const train_step *ts, int i) { return ts->master ? ts->master[i] : NULL; }

/* A layer of kind over in (n_in inputs of that shape) in dtype t, named name, set up on
 * the backend's forward kernels; false with why. */
static bool own_setup(train_step *ts, const char *name, layer_kind kind, const shape_t *in, int n_in, dtype_t t,
                      backend_layer **state, char *why, size_t whylen)
{
    own_layer *o = &ts->owned[ts->n_owned++];
    const layer_desc *d = layer_desc_get(kind);
    memset(o, 0, sizeof *o);
    o->l.name = (char *)name;
    o->l.kind = kind, o->l.dtype = t, o->l.n_inputs = n_in;
    if (d->defaults)
        d->defaults(&o->l.p);
    o->l.p.dim = -1;
    for (int k = 0; k < n_in; k++)
        o->ins[k] = *in;
    o->l.ins = o->ins, o->l.in = *in, o->l.inputs = o->inputs;
    char impl[96] = "";
    int64_t ws;
    if (d->infer(&o->l, why, whylen) != 0 || layer_count(&o->l) != 0)
        return false;
    if (backend_layer_setup(ts->net->b, &o->l, NULL, state, impl, sizeof impl, &ws) != BENCH_OK) {
        snprintf(why, whylen, "%s (%s) cannot run on %s: %s", o->l.name, d->name, ts->net->b->ops->name,
                 *impl ? impl : backend_last_error(ts->net->b));
        return false;
    }
    return true;
}

/* Layer i's backward set up: its kernel, its output buffer. */
static bench_status backward_setup(train_step *ts, int i, char *why, size_t whylen)
{
    const forward_net *net = ts->net;
    const layer *l = &net->m->layers[i];
    ts->bl[i] = layer_as_backward(l); /* no_input_grad where nothing reads its inputs' (model_set_pass) */
    char impl[96] = "";
    int64_t ws;
    bench_status st = backend_layer_setup(net->b, &ts->bl[i], net->weights[i], &ts->bstates[i], impl, sizeof impl, &ws);
    if (st == BENCH_ERR_UNSUPPORTED) {
        snprintf(why, whylen, "layer '%s' (%s) has no backward on %s: %s", l->name, layer_kind_name(l->kind),
                 net->b->ops->name, impl);
        return st;
    }
    if (st != BENCH_OK) {
        snprintf(why, whylen, "setting up layer '%s''s backward failed: %s", l->name,
                 st == BENCH_ERR_NOMEM ? "out of memory" : backend_last_error(net->b));
        return st;
    }
    int64_t n = layer_backward_floats(l);
    if (!(ts->grads[i] = backend_alloc_values(net->b, l->dtype, n, NULL))) {
        snprintf(why, whylen, "out of memory for layer '%s''s gradients", l->name);
        return BENCH_ERR_NOMEM;
    }
    return BENCH_OK;
}

/* The gradient of value v (a layer's output, stored in itself): the slices of its
 * running readers' backward outputs (and the loss's, for the model's output). One is
 * read where it lies; several are summed into a buffer of their own, before the backward
 * of v's layer. NULL with why when out of memory or the add cannot run. */
static const void *value_grad(train_step *ts, int v, const bool *runs, char *why, size_t whylen)
{
    const model *m = ts->net->m;
    const layer *prod = &m->layers[v - 1];
    size_t es = dtype_size(prod->dtype);
    int nf = v == model_storage_of(m, m->n_layers);
    for (int r = v; r < m->n_layers; r++)
        for (int k = 0; runs[r] && k < m->layers[r].n_inputs; k++)
            nf += model_storage_of(m, m->layers[r].inputs[k]) == v;
    const void **from = xmalloc((size_t)(nf ? nf : 1) * sizeof *from);
    nf = 0;
    if (v == model_storage_of(m, m->n_layers))
        from[nf++] = ts->dloss;
    for (int r = v; r < m->n_layers; r++) {
        int64_t at = 0;
        for (int k = 0; runs[r] && k < m->layers[r].n_inputs; k++) {
            if (model_storage_of(m, m->layers[r].inputs[k]) == v)
                from[nf++] = (const char *)ts->grads[r] + at * (int64_t)es;
            at += shape_numel(&m->layers[r].ins[k]);
        }
    }
    const void *g = nf == 1 ? from[0] : NULL;
    if (nf > 1) {
        int64_t count = shape_numel(&prod->out);
        void *buf = ts->sum_bufs[ts->n_sum_bufs] = backend_alloc_values(ts->net->b, prod->dtype, count, NULL);
        backend_layer **add = &ts->adds[ts->n_sum_bufs];
        if (!buf) {
            snprintf(why, whylen, "out of memory for the gradient of layer '%s''s output", prod->name);
        } else if (own_setup(ts, "a gradient sum", LAYER_ADD, &prod->out, 2, prod->dtype, add, why, whylen)) {
            for (int k = 1; k < nf; k++)
                ts->sums[ts->n_sums++] = (grad_sum){v - 1, *add, {k == 1 ? from[0] : buf, from[k]}, buf};
            g = buf;
        }
        ts->n_sum_bufs++;
    }
    free(from);
    return g;
}

train_loss train_loss_of(const model *m)
{
    int out = model_storage_of(m, m->n_layers);
    return out > 0 && m->layers[out - 1].kind == LAYER_LINEAR ? LOSS_CROSS_ENTROPY : LOSS_SUM;
}

bool train_step_trainable(const model *m, char *why, size_t whylen)
{
    if (m->n_layers == 0 || model_storage_of(m, m->n_layers) == 0) {
        snprintf(why, whylen, "the model's output is its input (every layer is a view): a training step has nothing "
                              "to compute");
        return false;
    }
    bool *runs = xmalloc((size_t)m->n_layers), *input_grad = xmalloc((size_t)m->n_layers), any = false;
    model_grad_flow(m, runs, input_grad);
    for (int i = 0; i < m->n_layers; i++)
        any |= runs[i];
    free(runs), free(input_grad);
    if (!any)
        snprintf(why, whylen, "no weights the loss reaches learn (every layer with weights is frozen, or there is "
                              "none): a training step has no gradient to compute");
    return any;
}

void train_loss_weights(uint64_t seed, int64_t count, float *r)
{
    layer_rng rng;
    layer_rng_seed(&rng, seed ^ 0x73756d73u);
    layer_fill_uniform(r, count, -1.0f, 1.0f, &rng);
}

void train_loss_labels(uint64_t seed, int64_t rows, int64_t classes, int64_t *labels)
{
    layer_rng rng;
    layer_rng_seed(&rng, seed ^ 0x6c6f7373u);
    for (int64_t r = 0; r < rows; r++) {
        int64_t y = (int64_t)layer_rng_uniform(&rng, 0.0f, (float)classes);
        labels[r] = y < classes ? y : classes - 1;
    }
}

/* The loss: cross-entropy where the last layer is a linear (random labels drawn; its
 * gradient softmax(logits) - onehot(labels), as the backend's softmax and add over the
 * one-hot's negation, written once, so that it runs in the backend's memory on any
 * backend), else the weighted sum (its gradient, the weights, written once). */
static bool loss_setup(train_step *ts, uint64_t seed, char *why, size_t whylen)
{
    const model *m = ts->net->m;
    int last = model_storage_of(m, m->n_layers);
    const layer *l = &m->layers[last - 1];
    int64_t count = shape_numel(&l->out);
    ts->logits = ts->net->values[last];
    ts->loss = train_loss_of(m);
    float *host = ts->loss == LOSS_SUM ? bench_alloc_floats(count) : NULL;
    if (host)
        train_loss_weights(seed, count, host);
    ts->dloss = backend_alloc_values(ts->net->b, l->dtype, count, host);
    free(host);
    if (!ts->dloss) {
        snprintf(why, whylen, "out of memory for the loss's gradient");
        return false;
    }
    if (ts->loss == LOSS_SUM)
        return true;
    int64_t classes = l->out.d[l->out.rank - 1], rows = count / classes;
    int64_t *labels = xmalloc((size_t)rows * sizeof *labels);
    train_loss_labels(seed, rows, classes, labels);
    float *onehot = xcalloc((size_t)count, sizeof *onehot);
    for (int64_t r = 0; r < rows; r++)
        onehot[r * classes + labels[r]] = -1.0f;
    free(labels);
    ts->minus_onehot = backend_alloc_values(ts->net->b, l->dtype, count, onehot);
    ts->probs = backend_alloc_values(ts->net->b, l->dtype, count, NULL);
    free(onehot);
    if (!ts->minus_onehot || !ts->probs) {
        snprintf(why, whylen, "out of memory for the loss's one-hot labels and probabilities");
        return false;
    }
    return own_setup(ts, "the loss's softmax", LAYER_SOFTMAX, &l->out, 1, l->dtype, &ts->softmax, why, whylen) &&
           own_setup(ts, "the loss's gradient (softmax - one-hot)", LAYER_ADD, &l->out, 2, l->dtype, &ts->add, why,
                     whylen);
}

/* The optimizer (m->optimizer): which layers it updates (those whose backward runs and
 * whose weights learn), AdamW's moments zeroed; learning rate 0 until train_step_set_lr
 * (the same work, the weights unchanged: thousands of timed steps do not train the model
 * away from its draw). False with why where the backend has no update, or out of memory. */
static bool optimizer_setup(train_step *ts, const bool *runs, bench_status *status, char *why, size_t whylen)
{
    const model *m = ts->net->m;
    const backend *b = ts->net->b;
    ts->opt = (backend_optimizer_args){m->optimizer, 0.0f, 0.9f, 0.999f, 1e-8f, 0.01f, 0};
    if (m->optimizer == OPTIMIZER_NONE)
        return true;
    if (!b->ops->layers.optimizer_update) {
        snprintf(why, whylen, "--optimizer %s: the %s backend has no optimizer update", model_optimizer_name(m->optimizer),
                 b->ops->name);
        *status = BENCH_ERR_UNSUPPORTED;
        return false;
    }
    ts->updates = xcalloc((size_t)ts->n, sizeof *ts->updates);
    ts->moments = xcalloc((size_t)ts->n, sizeof *ts->moments);
    ts->master = xcalloc((size_t)ts->n, sizeof *ts->master);
    int states = model_optimizer_state(m->optimizer);
    int64_t widest = 0;
    for (int i = 0; i < ts->n; i++) {
        const layer *l = &m->layers[i];
        ts->updates[i] = runs[i] && layer_learns(l);
        if (ts->updates[i] && layer_master_weights(l)) { /* widened from the weights the kernels read */
            float *host = bench_alloc_floats(l->n_weights);
            if (!b->ops->device.convert) {
                snprintf(why, whylen, "--optimizer %s in %s: the %s backend converts no dtypes",
                         model_optimizer_name(m->optimizer), dtype_name(l->dtype), b->ops->name);
                *status = BENCH_ERR_UNSUPPORTED;
            } else if (!host || backend_download_values(b, l->dtype, host, ts->net->weights[i], l->n_weights) != BENCH_OK ||
                       !(ts->master[i] = backend_alloc_values(b, DTYPE_FP32, l->n_weights, host))) {
                snprintf(why, whylen, "out of memory for the fp32 master weights of layer '%s'", l->name);
                *status = BENCH_ERR_NOMEM;
            }
            free(host);
            if (*status != BENCH_OK)
                return false;
            widest = l->n_weights > widest ? l->n_weights : widest;
        }
        if (!ts->updates[i] || !states)
            continue;
        float *zeros = xcalloc((size_t)(states * l->n_weights), sizeof *zeros);
        ts->moments[i] = backend_alloc_values(b, DTYPE_FP32, states * l->n_weights, zeros);
        free(zeros);
        if (!ts->moments[i]) {
            snprintf(why, whylen, "out of memory for the optimizer's state of layer '%s'", l->name);
            *status = BENCH_ERR_NOMEM;
            return false;
        }
    }
    if (widest && !(ts->wide_grad = backend_alloc_values(b, DTYPE_FP32, widest, NULL))) {
        snprintf(why, whylen, "out of memory for the optimizer's fp32 gradient");
        *status = BENCH_ERR_NOMEM;
        return false;
    }
    return true;
}

void train_step_set_lr(train_step *ts, float lr) { ts->opt.lr = lr; }
int train_step_marks(const train_step *ts) { return 2 * ts->n + 1 + (ts->opt.kind != OPTIMIZER_NONE ? ts->n : 0); }
bool train_step_updates(const train_step *ts, int i) { return ts->updates && ts->updates[i]; }

train_step *train_step_build(const forward_net *net, uint64_t seed, bench_status *status, char *why, size_t whylen)
{
    const model *m = net->m;
    int n = m->n_layers;
    train_step *ts = xcalloc(1, sizeof *ts);
    *ts = (train_step){.net = net, .n = n, .bl = xcalloc((size_t)n, sizeof *ts->bl),
                       .bstates = xcalloc((size_t)n, sizeof *ts->bstates), .grads = xcalloc((size_t)n, sizeof *ts->grads),
                       .bargs = xcalloc((size_t)n, sizeof *ts->bargs),
                       .sums = xcalloc((size_t)n * LAYER_MAX_INPUTS + 1, sizeof *ts->sums),
                       .owned = xcalloc((size_t)n + 2, sizeof *ts->owned),
                       .sum_bufs = xcalloc((size_t)n, sizeof *ts->sum_bufs), .adds = xcalloc((size_t)n, sizeof *ts->adds)};
    *status = train_step_trainable(m, why, whylen) ? BENCH_OK : BENCH_ERR_UNSUPPORTED;
    bool *runs = xmalloc((size_t)n + 1), *input_grad = xmalloc((size_t)n + 1);
    model_grad_flow(m, runs, input_grad);
    for (int i = 0; *status == BENCH_OK && i < n; i++)
        if (runs[i])
            *status = backward_setup(ts, i, why, whylen);
    if (*status == BENCH_OK && !loss_setup(ts, seed, why, whylen))
        *status = ts->dloss ? BENCH_ERR_BACKEND : BENCH_ERR_NOMEM;
    if (*status == BENCH_OK)
        optimizer_setup(ts, runs, status, why, whylen);
    for (int i = n - 1; *status == BENCH_OK && i >= 0; i--) {
        if (!runs[i])
            continue;
        const layer *l = &m->layers[i];
        const void *g = value_grad(ts, i + 1, runs, why, whylen);
        if (!g) {
            *status = ts->sum_bufs[ts->n_sum_bufs - 1] ? BENCH_ERR_BACKEND : BENCH_ERR_NOMEM;
            break;
        }
        ts->bargs[i] = xmalloc(((size_t)l->n_inputs + 2) * sizeof *ts->bargs[i]);
        memcpy(ts->bargs[i], net->args[i], (size_t)l->n_inputs * sizeof *ts->bargs[i]);
        ts->bargs[i][l->n_inputs] = net->values[i + 1];
        ts->bargs[i][l->n_inputs + 1] = g;
    }
    free(runs), free(input_grad);
    if (*status != BENCH_OK) {
        train_step_free(ts);
        return NULL;
    }
    return ts;
}

void train_step_queue(train_step *ts, bool marks)
{
    const backend *b = ts->net->b;
    int n = ts->n;
    if (ts->softmax) { /* d loss / d logits = softmax - one-hot of the label */
        backend_layer_run(ts->softmax, &ts->logits, ts->probs);
        const void *sum[2] = {ts->probs, ts->minus_onehot};
        backend_layer_run(ts->add, sum, ts->dloss);
    }
    if (marks)
        b->ops->timing.timer_mark(b->ctx, n);
    const grad_sum *s = ts->sums, *end = ts->sums + ts->n_sums;
    for (int i = n - 1; i >= 0; i--) {
        for (; s < end && s->layer == i; s++)
            backend_layer_run(s->state, s->in, s->out);
        if (ts->bstates[i])
            backend_layer_run(ts->bstates[i], ts->bargs[i], ts->grads[i]);
        if (marks)
            b->ops->timing.timer_mark(b->ctx, 2 * n - i);
    }
    if (ts->opt.kind == OPTIMIZER_NONE)
        return;
    ts->opt.t++;
    for (int i = 0; i < n; i++) { /* the parameters in the model's order, as torch's optimizer holds them */
        const layer *l = &ts->net->m->layers[i];
        if (ts->updates[i]) {
            const void *g = (const char *)ts->grads[i] +
                            (layer_backward_floats(l) - l->n_weight_floats) * (int64_t)dtype_size(l->dtype);
            float *w = ts->master[i] ? ts->master[i] : ts->net->weights[i], *mv = ts->moments[i];
            if (ts->master[i]) { /* 16-bit: the gradient widened, the master updated, the weights rounded from it */
                b->ops->device.convert(b->ctx, ts->wide_grad, DTYPE_FP32, g, l->dtype, l->n_weights);
                g = ts->wide_grad;
            }
            b->ops->layers.optimizer_update(b->ctx, &ts->opt, w, g, mv, mv ? mv + l->n_weights : NULL, l->n_weights);
            if (ts->master[i])
                b->ops->device.convert(b->ctx, ts->net->weights[i], l->dtype, w, DTYPE_FP32, l->n_weights);
        }
        if (marks)
            b->ops->timing.timer_mark(b->ctx, 2 * n + 1 + i);
    }
}

void train_step_free(train_step *ts)
{
    if (!ts)
        return;
    const backend *b = ts->net->b;
    for (int i = 0; i < ts->n; i++) {
        backend_layer_free(b, ts->bstates[i]);
        b->ops->device.release(b->ctx, ts->grads[i]);
        free(ts->bargs[i]);
    }
    for (int j = 0; j < ts->n_sum_bufs; j++) {
        backend_layer_free(b, ts->adds[j]);
        b->ops->device.release(b->ctx, ts->sum_bufs[j]);
    }
    backend_layer_free(b, ts->softmax), backend_layer_free(b, ts->add);
    b->ops->device.release(b->ctx, ts->dloss);
    b->ops->device.release(b->ctx, ts->probs), b->ops->device.release(b->ctx, ts->minus_onehot);
    free(ts->bl), free(ts->bstates), free(ts->grads), free(ts->bargs), free(ts->sums), free(ts->owned);
    for (int i = 0; ts->moments && i < ts->n; i++)
        b->ops->device.release(b->ctx, ts->moments[i]), b->ops->device.release(b->ctx, ts->master[i]);
    b->ops->device.release(b->ctx, ts->wide_grad);
    free(ts->sum_bufs), free(ts->adds), free(ts->updates), free(ts->moments), free(ts->master);
    free(ts);
}
