/* `bench check --pass train`'s whole step: the chained training step's weights'
 * gradients against the reference step's, from the same draws. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "forward.h"
#include "measure.h"
#include "train_step.h"

/* The reference step, in fp32 arrays (each layer's reference sums in double). */
typedef struct ref_step {
    int n;
    float **store;   /* per value that owns its storage (model_storage_of): its values */
    float **weights; /* per layer, NULL without */
    float **vgrad;   /* per value that owns its storage: its gradient, its readers' summed */
    float **wgrad;   /* per layer the loss reaches, with weights: their gradient */
} ref_step;

static void ref_step_free(ref_step *r)
{
    for (int v = 0; r->store && v <= r->n; v++)
        free(r->store[v]), free(r->vgrad[v]);
    for (int i = 0; r->weights && i < r->n; i++)
        free(r->weights[i]), free(r->wgrad[i]);
    free(r->store), free(r->vgrad), free(r->weights), free(r->wgrad);
}

/* The gradient of the loss with respect to the model's output g, from the output y:
 * cross-entropy's softmax less one at the label (summed over rows), or the weighted sum's weights. */
static void ref_loss_grad(const model *m, uint64_t seed, const float *y, float *g)
{
    const layer *l = &m->layers[model_storage_of(m, m->n_layers) - 1];
    int64_t count = shape_numel(&l->out);
    if (train_loss_of(m) == LOSS_SUM) {
        train_loss_weights(seed, count, g);
        return;
    }
    int64_t classes = l->out.d[l->out.rank - 1], rows = count / classes;
    int64_t *labels = xmalloc((size_t)rows * sizeof *labels);
    train_loss_labels(seed, rows, classes, labels);
    for (int64_t r = 0; r < rows; r++) {
        const float *z = y + r * classes;
        double mx = z[0], sum = 0.0;
        for (int64_t c = 1; c < classes; c++)
            mx = z[c] > mx ? z[c] : mx;
        for (int64_t c = 0; c < classes; c++)
            sum += exp(z[c] - mx);
        for (int64_t c = 0; c < classes; c++)
            g[r * classes + c] = (float)(exp(z[c] - mx) / sum - (c == labels[r]));
    }
    free(labels);
}

/* Layer i's backward in the reference step: its inputs' gradients added into their
 * values' (but the model input's), its weights' kept. False when out of memory. */
static bool ref_layer_backward(const model *m, ref_step *r, int i)
{
    const layer *l = &m->layers[i];
    const float *ins[LAYER_MAX_INPUTS];
    float *din[LAYER_MAX_INPUTS] = {NULL};
    bool ok = r->vgrad[i + 1] && (!l->n_weight_floats || (r->wgrad[i] = bench_alloc_floats(l->n_weight_floats)));
    for (int k = 0; k < l->n_inputs; k++) {
        ins[k] = r->store[model_storage_of(m, l->inputs[k])];
        ok = ok && (din[k] = bench_alloc_floats(shape_numel(&l->ins[k])));
    }
    if (ok)
        layer_desc_get(l->kind)->backward(l, ins, r->weights[i], r->store[i + 1], r->vgrad[i + 1], din, r->wgrad[i]);
    for (int k = 0; k < l->n_inputs; k++) {
        int s = model_storage_of(m, l->inputs[k]);
        int64_t count = shape_numel(&l->ins[k]);
        if (ok && s > 0 && !r->vgrad[s] && (r->vgrad[s] = bench_alloc_floats(count)))
            memset(r->vgrad[s], 0, (size_t)count * sizeof(float));
        ok = ok && (s == 0 || r->vgrad[s]);
        for (int64_t e = 0; ok && s > 0 && e < count; e++)
            r->vgrad[s][e] += din[k][e];
        free(din[k]);
    }
    return ok;
}

/* The reference step's training forward from seed, drawn as forward_build draws (the
 * input, then each layer's weights in order). False when out of memory. */
static bool ref_forward(const model *m, uint64_t seed, ref_step *r)
{
    int n = m->n_layers;
    *r = (ref_step){n, xcalloc((size_t)n + 1, sizeof(float *)), xcalloc((size_t)n, sizeof(float *)),
                    xcalloc((size_t)n + 1, sizeof(float *)), xcalloc((size_t)n, sizeof(float *))};
    layer_rng rng;
    layer_rng_seed(&rng, seed);
    int64_t n_in = shape_numel(&m->input);
    if (!(r->store[0] = bench_alloc_floats(n_in)))
        return false;
    layer_fill_uniform(r->store[0], n_in, -1.0f, 1.0f, &rng);
    dtype_round(model_value_dtype(m, 0), r->store[0], n_in);
    for (int i = 0; i < n; i++) {
        const layer *l = &m->layers[i];
        const float *ins[LAYER_MAX_INPUTS];
        if (l->n_weight_floats) {
            if (!(r->weights[i] = bench_alloc_floats(l->n_weight_floats)))
                return false;
            layer_desc_get(l->kind)->init_weights(l, r->weights[i], &rng);
            layer_round_weights(l, r->weights[i]);
        }
        if (layer_is_view(l))
            continue;
        if (!(r->store[i + 1] = bench_alloc_floats(shape_numel(&l->out))))
            return false;
        for (int k = 0; k < l->n_inputs; k++)
            ins[k] = r->store[model_storage_of(m, l->inputs[k])];
        layer_train_reference(l, ins, r->weights[i], r->store[i + 1]);
    }
    return true;
}

/* Layer i's weights' gradient from the step on b against the reference's want: its
 * relative error into r where it is the worst so far (*worst: that layer). */
static void compare_wgrad(const model *m, const backend *b, const train_step *ts, int i, const float *want,
                          check_result *r, int *worst)
{
    const layer *l = &m->layers[i];
    if (!want || !train_step_grads(ts, i) || l->frozen) /* a frozen layer's is not computed */
        return;
    int64_t all = layer_backward_floats(l), bad;
    float *got = bench_alloc_floats(all);
    if (!got) {
        r->status = BENCH_ERR_NOMEM;
        return;
    }
    r->status = backend_download_values(b, l->dtype, got, train_step_grads(ts, i), all);
    double err = check_rel_err(got + all - l->n_weight_floats, want, l->n_weight_floats, &bad);
    r->nonfinite += bad;
    if (*worst < 0 || err > r->rel_err)
        r->rel_err = err, *worst = i;
    free(got);
}

/* The reference step's backward: the loss's labels as the step's, the backward reference
 * of every layer whose backward runs (model_grad_flow) in reverse on the values in
 * r->store, each layer's weights' gradient compared with the step's on b as soon as it
 * is computed (compare_wgrad), then freed with the output's gradient it came from and,
 * without an optimizer to check, the layer's weights: the reference holds its weights
 * and values, and one layer's gradients at a time (Llama-3.2-1B's bf16 step checked in
 * 19.1 GiB at its peak, where the estimate was 36.3 GiB before). The worst error into r; false when out of memory. */
static bool ref_backward(const model *m, uint64_t seed, const backend *b, const train_step *ts, ref_step *ref,
                         check_result *r)
{
    int n = m->n_layers, out = model_storage_of(m, n), worst = -1;
    if (!(ref->vgrad[out] = bench_alloc_floats(shape_numel(&m->layers[out - 1].out))))
        return false;
    ref_loss_grad(m, seed, ref->store[out], ref->vgrad[out]);
    bool *runs = xmalloc((size_t)n * sizeof *runs), *input_grad = xmalloc((size_t)n * sizeof *input_grad), ok = true;
    model_grad_flow(m, runs, input_grad);
    r->status = BENCH_OK;
    for (int i = n - 1; ok && r->status == BENCH_OK && i >= 0; i--) {
        if (!runs[i])
            continue;
        ok = ref_layer_backward(m, ref, i);
        if (ok)
            compare_wgrad(m, b, ts, i, ref->wgrad[i], r, &worst);
        free(ref->wgrad[i]), ref->wgrad[i] = NULL;
        free(ref->vgrad[i + 1]), ref->vgrad[i + 1] = NULL; /* its producer was its last user */
        if (m->optimizer == OPTIMIZER_NONE)
            free(ref->weights[i]), ref->weights[i] = NULL;
    }
    free(runs), free(input_grad);
    if (ok && r->status == BENCH_OK) {
        snprintf(r->why, sizeof r->why, "the weights' gradients, the worst in layer '%s'",
                 worst >= 0 ? m->layers[worst].name : "-");
        r->status = r->nonfinite == 0 && r->rel_err <= r->tolerance ? BENCH_OK : BENCH_ERR_CHECK;
    }
    return ok;
}

int64_t check_step_bytes(const model *m)
{
    /* the reference's fp32 weights and values, each value's gradient (at most all at once),
     * and the largest layer's gradients (its inputs' and weights', and its download of
     * the step's to compare) */
    int64_t floats = shape_numel(&m->input), largest = 0;
    for (int i = 0; i < m->n_layers; i++) {
        const layer *l = &m->layers[i];
        int64_t grads = layer_is_view(l) ? 0 : 2 * layer_backward_floats(l);
        floats += l->n_weight_floats + (layer_is_view(l) ? 0 : 2 * shape_numel(&l->out));
        largest = grads > largest ? grads : largest;
    }
    /* the step's on the backend: as planned (model_train_plan), and a packed copy of the
     * weights, as a run counts it */
    model_train_memory tm = {0};
    model_train_plan(m, &tm);
    return 4 * (floats + largest) + tm.peak_bytes + tm.weight_bytes;
}

/* The optimizer's update (one step at a learning rate of 1e-3 from the reference's
 * weights, which are the step's draw): each updated layer's change of its weights
 * against the change the step's own gradient makes (SGD: -lr g; AdamW's first step: -lr
 * (wd w + g / (|g| + eps))), in double. The step's gradients are compared on their own
 * (compare_wgrads): a gradient that is zero but for rounding (a bias before a batch
 * norm) would give AdamW's update, about lr g / |g|, any sign. The change is a small
 * difference of two floats: the tolerance is 1e-4 plus twice the new weights' rounding
 * (half a unit in the last place each) over the change's norm. The worst error against
 * its tolerance into r. */
static void compare_updates(const model *m, const backend *b, const forward_net *net, const train_step *ts,
                            const ref_step *ref, check_result *r)
{
    const double lr = 1e-3, wd = 0.01, eps = 1e-8;
    double worst = 0.0, worst_tol = 1e-4;
    int at = -1;
    for (int i = 0; r->status == BENCH_OK && i < m->n_layers; i++) {
        const layer *l = &m->layers[i];
        int64_t n = l->n_weights, all = layer_backward_floats(l), bad = 0;
        if (!train_step_updates(ts, i))
            continue;
        float *got = bench_alloc_floats(n), *want = bench_alloc_floats(n), *grads = bench_alloc_floats(all);
        bool ok = got && want && grads;
        const float *master = train_step_master(ts, i);
        const void *updated = master ? (const void *)master : net->weights[i];
        r->status = !ok ? BENCH_ERR_NOMEM
                    : backend_download_values(b, DTYPE_FP32, got, updated, n) != BENCH_OK ||
                              backend_download_values(b, l->dtype, grads, train_step_grads(ts, i), all) != BENCH_OK
                        ? BENCH_ERR_BACKEND
                        : BENCH_OK;
        double round = 0.0, norm = 0.0;
        for (int64_t k = 0; r->status == BENCH_OK && k < n; k++) {
            float w16 = ref->weights[i][k]; /* the weights as the backend holds them (its master: widened) */
            dtype_round(l->dtype, &w16, 1);
            double w = w16, g = grads[all - l->n_weight_floats + k];
            double d = m->optimizer == OPTIMIZER_SGD ? -lr * g : -lr * (wd * w + g / (fabs(g) + eps));
            double ulp = fabs((double)got[k]) * 0x1p-23;
            want[k] = (float)d, got[k] = (float)((double)got[k] - w);
            round += ulp * ulp / 4, norm += d * d;
        }
        if (r->status == BENCH_OK) {
            double err = check_rel_err(got, want, n, &bad), tol = 1e-4 + (norm > 0 ? 2 * sqrt(round / norm) : 0.0);
            r->nonfinite += bad;
            if (at < 0 || err / tol > worst / worst_tol)
                worst = err, worst_tol = tol, at = i;
        }
        free(got), free(want), free(grads);
    }
    if (r->status != BENCH_OK || at < 0)
        return;
    snprintf(r->why + strlen(r->why), sizeof r->why - strlen(r->why), "; %s's update %.1e (tolerance %.1e), in '%s'",
             model_optimizer_name(m->optimizer), worst, worst_tol, m->layers[at].name);
    if (worst > worst_tol || r->nonfinite)
        r->status = BENCH_ERR_CHECK;
}

/* The step's forward output against the reference's (its wiring: within the layers'
 * forward tolerances, as check_forward); then the reference takes the backend's forward
 * values as its own, so that the backward's masks (relu's sign, max pooling's argmax)
 * are the same: a value a hair from a kink on either side would otherwise flip one
 * element's gradient, an error of 1 / sqrt(its elements) that says nothing of the
 * backward. False with r failed when the outputs differ or out of memory. */
static bool take_forward(const model *m, const backend *b, const forward_net *net, ref_step *ref, check_result *r)
{
    int n = m->n_layers, out = model_storage_of(m, n);
    check_chain_tol ct = {0};
    for (int i = 0; i < n; i++) {
        layer fl = m->layers[i];
        fl.pass = PASS_FORWARD;
        if (!layer_is_view(&fl))
            check_chain_tol_add(&ct, b, &fl, 0.0);
    }
    double tol = check_chain_tol_total(&ct);
    for (int v = 1; v <= n; v++) {
        if (!ref->store[v])
            continue;
        int64_t count = shape_numel(&m->layers[v - 1].out), bad;
        float *got = bench_alloc_floats(count);
        if (!got || backend_download_values(b, m->layers[v - 1].dtype, got, net->values[v], count) != BENCH_OK) {
            free(got);
            r->status = got ? BENCH_ERR_BACKEND : BENCH_ERR_NOMEM;
            return false;
        }
        double err = v == out ? check_rel_err(got, ref->store[v], count, &bad) : 0.0;
        if (v == out && (bad || err > tol)) {
            r->status = BENCH_ERR_CHECK, r->rel_err = err, r->nonfinite = bad, r->tolerance = tol;
            snprintf(r->why, sizeof r->why, "the training forward's output differs from the reference's");
            free(got);
            return false;
        }
        free(ref->store[v]);
        ref->store[v] = got;
    }
    return true;
}

check_result check_train_step(const model *m, const backend *b, uint64_t seed)
{
    check_result r = {BENCH_ERR_NOMEM, 0.0, 0.0, 0, ""};
    char why[224] = "";
    bool *runs = xmalloc((size_t)m->n_layers + 1), *input_grad = xmalloc((size_t)m->n_layers + 1);
    model_grad_flow(m, runs, input_grad);
    check_chain_tol ct = {0};
    for (int i = 0; i < m->n_layers; i++) { /* each layer's error adds up along the step */
        layer bl = layer_as_backward(&m->layers[i]);
        if (runs[i])
            check_chain_tol_add(&ct, b, &bl, CHECK_BACKWARD_TOLERANCE);
    }
    r.tolerance = check_chain_tol_total(&ct);
    free(runs), free(input_grad);
    ref_step ref = {0};
    forward_net net = {0};
    train_step *ts = NULL;
    backend_clear_error(b);
    if (!train_step_trainable(m, r.why, sizeof r.why)) {
        r.status = BENCH_ERR_UNSUPPORTED;
    } else if (!ref_forward(m, seed, &ref)) {
        snprintf(r.why, sizeof r.why, "out of memory (for the reference step's values)");
    } else if ((r.status = forward_build(&net, m, b, seed, why, sizeof why)) == BENCH_OK &&
               (ts = train_step_build(&net, seed, &r.status, why, sizeof why))) {
        forward_queue(&net, false);
        train_step_set_lr(ts, 1e-3f); /* a real change to compare (the timed steps run at 0) */
        train_step_queue(ts, false);
        if ((r.status = b->ops->device.sync(b->ctx)) == BENCH_OK && take_forward(m, b, &net, &ref, &r)) {
            if (!ref_backward(m, seed, b, ts, &ref, &r)) {
                r.status = BENCH_ERR_NOMEM;
                snprintf(r.why, sizeof r.why, "out of memory (for the reference step's gradients)");
            } else if (r.status == BENCH_OK && m->optimizer != OPTIMIZER_NONE) {
                compare_updates(m, b, &net, ts, &ref, &r);
            }
        }
    }
    if (r.status != BENCH_OK && r.status != BENCH_ERR_CHECK && !*r.why)
        snprintf(r.why, sizeof r.why, "%s", *why ? why : backend_last_error(b));
    train_step_free(ts);
    forward_free(&net);
    ref_step_free(&ref);
    return r;
}
