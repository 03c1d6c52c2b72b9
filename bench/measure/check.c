#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "log.h"
#include "measure.h"

/* Host inputs and weights in backend memory, in the layer's dtype, for one run of a
 * layer; frees what it holds. */
typedef struct device_data {
    void *in[LAYER_MAX_INPUTS + 2]; /* a backward run's: the inputs, the output, its gradient */
    void *w;
} device_data;

static bool to_device(const backend *b, const layer *l, float *const *in, const float *w, device_data *dd)
{
    bool ok = true;
    memset(dd, 0, sizeof *dd);
    for (int k = 0; k < l->n_inputs; k++)
        ok &= (dd->in[k] = backend_alloc_values(b, l->dtype, shape_numel(&l->ins[k]), in[k])) != NULL;
    dd->w = w ? backend_alloc_values(b, l->dtype, l->n_weight_floats, w) : NULL;
    return ok && (!w || dd->w);
}

static void release_device(const backend *b, const layer *l, device_data *dd)
{
    for (int k = 0; k < l->n_inputs; k++)
        b->ops->device.release(b->ctx, dd->in[k]);
    b->ops->device.release(b->ctx, dd->w);
}

/* An error's reason for its row: what the backend said, or what ran out. */
static void why_of(check_result *r, const backend *b, const layer *l)
{
    if (r->status == BENCH_OK || r->status == BENCH_ERR_CHECK || r->status == BENCH_ERR_UNSUPPORTED)
        return;
    const char *said = backend_last_error(b);
    char need[32];
    int64_t floats = l->n_weight_floats + 2 * shape_numel(&l->out);
    for (int k = 0; k < l->n_inputs; k++)
        floats += shape_numel(&l->ins[k]);
    if (r->status == BENCH_ERR_NOMEM)
        snprintf(r->why, sizeof r->why, "out of memory: its inputs, weights, output and reference take %s in fp32, "
                 "and as much again on the backend", bench_format_bytes(4 * floats, need, sizeof need));
    else
        snprintf(r->why, sizeof r->why, "%s", said && *said ? said : "the backend failed without a message");
}

/* The reference's gradients of l (its inputs', then its weights', layer_backward_floats)
 * into ref, from the training forward's output on in and w and the output gradient dy
 * (drawn from rng). */
static void reference_backward(const layer *l, float *const *in, const float *w, float *y, float *dy, float *ref,
                               layer_rng *rng)
{
    float *din[LAYER_MAX_INPUTS];
    int64_t n_out = shape_numel(&l->out);
    layer_fill_uniform(dy, n_out, -1.0f, 1.0f, rng);
    dtype_round(l->dtype, dy, n_out);
    layer_train_reference(l, (const float *const *)in, w, y);
    dtype_round(l->dtype, y, n_out); /* what the backend holds of it */
    int64_t at = 0;
    for (int k = 0; k < l->n_inputs; at += shape_numel(&l->ins[k]), k++)
        din[k] = ref + at;
    layer_desc_get(l->kind)->backward(l, (const float *const *)in, w, y, dy, din, ref + layer_backward_floats(l) -
                                                                                   l->n_weight_floats);
}

/* check_layer of a backward layer: its run reads the inputs, the output and its gradient
 * (backend.h, backward), and writes every gradient into one buffer */
static check_result check_backward(const layer *l, const backend *b, uint64_t seed)
{
    check_result r = {BENCH_ERR_NOMEM, 0.0, backend_tolerance(b, l) + CHECK_BACKWARD_TOLERANCE, 0, ""};
    int64_t n_out = shape_numel(&l->out), n_grad = layer_backward_floats(l);
    float *in[LAYER_MAX_INPUTS] = {NULL}, *w = NULL, *y = NULL, *dy = NULL, *ref = NULL, *got = NULL;
    void *extra[2] = {NULL, NULL}, *dgrad = NULL;
    device_data dd;
    memset(&dd, 0, sizeof dd);
    backend_layer *state = NULL;
    char impl[BACKEND_IMPL_LEN];
    int64_t ws;
    layer_rng rng;
    layer_rng_seed(&rng, seed ^ 0x9e3779b97f4a7c15ull);
    if (forward_layer_data(l, seed, in, &w) != BENCH_OK)
        return r;
    if (!(y = bench_alloc_floats(n_out)) || !(dy = bench_alloc_floats(n_out)) || !(ref = bench_alloc_floats(n_grad + 1)) ||
        !(got = bench_alloc_floats(n_grad + 1)))
        goto out;
    reference_backward(l, in, w, y, dy, ref, &rng);
    if (!to_device(b, l, in, w, &dd))
        goto out;
    for (int64_t i = 0; i < n_grad; i++) /* a gradient the backend never writes shows up as NaN */
        got[i] = NAN;
    if (!(dd.in[l->n_inputs] = extra[0] = backend_alloc_values(b, l->dtype, n_out, y)) ||
        !(dd.in[l->n_inputs + 1] = extra[1] = backend_alloc_values(b, l->dtype, n_out, dy)) ||
        !(dgrad = backend_alloc_values(b, l->dtype, n_grad, got)))
        goto out;
    if ((r.status = backend_layer_setup(b, l, dd.w, &state, impl, sizeof impl, &ws)) != BENCH_OK) {
        if (r.status == BENCH_ERR_UNSUPPORTED) /* the kernel's reason */
            snprintf(r.why, sizeof r.why, "%s", impl);
        goto out;
    }
    backend_layer_run(state, (const void *const *)dd.in, dgrad);
    if ((r.status = b->ops->device.sync(b->ctx)) != BENCH_OK ||
        (r.status = backend_download_values(b, l->dtype, got, dgrad, n_grad)) != BENCH_OK)
        goto out;
    int64_t at = 0;
    for (int k = 0; k <= l->n_inputs; k++) { /* each gradient's error, the worst of them (a frozen layer's weights have none) */
        int64_t n = k < l->n_inputs ? shape_numel(&l->ins[k]) : l->frozen ? 0 : l->n_weight_floats, bad;
        bool skip = k < l->n_inputs && l->no_input_grad; /* the step wants none: not computed */
        double err = n && !skip ? check_rel_err(got + at, ref + at, n, &bad) : 0.0;
        r.rel_err = err > r.rel_err ? err : r.rel_err;
        r.nonfinite += n && !skip ? bad : 0;
        at += n;
    }
    r.status = (r.nonfinite == 0 && r.rel_err <= r.tolerance) ? BENCH_OK : BENCH_ERR_CHECK;
out:
    why_of(&r, b, l);
    backend_layer_free(b, state);
    b->ops->device.release(b->ctx, extra[0]), b->ops->device.release(b->ctx, extra[1]);
    b->ops->device.release(b->ctx, dgrad);
    release_device(b, l, &dd);
    forward_free_data(l, in, &w);
    free(y), free(dy), free(ref), free(got);
    return r;
}

static check_result check_layer_forward(const layer *l, const backend *b, uint64_t seed, double tolerance);

check_result check_layer(const layer *l, const backend *b, uint64_t seed)
{
    check_result r = {BENCH_ERR_NOMEM, 0.0, backend_tolerance(b, l), 0, ""};
    backend_clear_error(b);
    if (l->pass != PASS_FORWARD && layer_is_view(l)) { /* as a timed row: a view, nothing runs */
        r.status = BENCH_ERR_UNSUPPORTED;
        snprintf(r.why, sizeof r.why, "a view: its gradient is its output's, nothing runs");
        return r;
    }
    backend_kernel_entry e = backend_kernel_of(b, l);
    if (!e.kernel) {
        r.status = BENCH_ERR_UNSUPPORTED;
        if (l->pass != PASS_FORWARD) /* forward rows leave it to the table's own reason */
            snprintf(r.why, sizeof r.why, "%s", e.unsupported ? e.unsupported : "no kernel");
        return r;
    }
    if (l->pass == PASS_BACKWARD)
        return check_backward(l, b, seed);
    if (l->pass == PASS_TRAIN) { /* the training forward first (below), then the backward */
        layer fl = *l;
        fl.pass = PASS_FORWARD;
        check_result f = check_layer_forward(l, b, seed, backend_tolerance(b, &fl)), g = r;
        if (f.status != BENCH_OK) {
            if (f.status == BENCH_ERR_CHECK)
                snprintf(f.why, sizeof f.why, "its training forward differs");
            return f;
        }
        if (layer_backward_idle(l)) { /* the step runs its forward alone */
            snprintf(f.why, sizeof f.why, "the training forward (no backward: nothing up to it learns)");
            return f;
        }
        layer bl = layer_as_backward(l);
        g = check_backward(&bl, b, seed); /* the row's figures are the gradients'; the forward's is said */
        if (!*g.why)
            snprintf(g.why, sizeof g.why, "the gradients; the training forward %.2e (tolerance %.1e)", f.rel_err,
                     f.tolerance);
        return g;
    }
    return check_layer_forward(l, b, seed, r.tolerance);
}

/* check_layer of a forward: against the reference (a train layer: the training forward's
 * reference, the kernel run in training mode) */
static check_result check_layer_forward(const layer *l, const backend *b, uint64_t seed, double tolerance)
{
    const backend_ops *ops = b->ops;
    check_result r = {BENCH_ERR_NOMEM, 0.0, tolerance, 0, ""};
    int64_t n_out = shape_numel(&l->out);
    float *in[LAYER_MAX_INPUTS] = {NULL}, *w = NULL, *ref = NULL, *got = NULL;
    void *dout = NULL;
    device_data dd;
    memset(&dd, 0, sizeof dd);
    backend_layer *state = NULL;
    char impl[BACKEND_IMPL_LEN];
    int64_t ws;
    /* the reference runs in fp32 (in double) on the inputs and weights rounded to the
     * layer's dtype: the values the backend holds */
    if (forward_layer_data(l, seed, in, &w) != BENCH_OK)
        return r;
    ref = bench_alloc_floats(n_out);
    got = bench_alloc_floats(n_out);
    if (!ref || !got)
        goto out;
    if (l->pass == PASS_TRAIN)
        layer_train_reference(l, (const float *const *)in, w, ref);
    else
        layer_desc_get(l->kind)->reference(l, (const float *const *)in, w, ref);
    /* poison the output so an element the backend never writes shows up as NaN */
    for (int64_t i = 0; i < n_out; i++)
        got[i] = NAN;
    if (!to_device(b, l, in, w, &dd))
        goto out;
    dout = layer_is_view(l) ? dd.in[0] : backend_alloc_values(b, l->dtype, n_out, got);
    if (!dout)
        goto out;
    r.status = backend_layer_setup(b, l, dd.w, &state, impl, sizeof impl, &ws);
    if (r.status != BENCH_OK)
        goto out;
    backend_layer_run(state, (const void *const *)dd.in, dout);
    if ((r.status = ops->device.sync(b->ctx)) != BENCH_OK ||
        (r.status = backend_download_values(b, l->dtype, got, dout, n_out)) != BENCH_OK)
        goto out;
    r.rel_err = check_rel_err(got, ref, n_out, &r.nonfinite);
    r.status = (r.nonfinite == 0 && r.rel_err <= r.tolerance) ? BENCH_OK : BENCH_ERR_CHECK;
out:
    why_of(&r, b, l);
    backend_layer_free(b, state);
    if (dout != dd.in[0])
        ops->device.release(b->ctx, dout);
    release_device(b, l, &dd);
    forward_free_data(l, in, &w);
    free(ref), free(got);
    return r;
}

/* The reference forward: the model's output from random input and weights drawn from
 * seed (input first, then each layer's weights in order, as check_forward draws them),
 * each layer's reference on its inputs' reference values; a value is freed after its
 * last reader. NULL when out of memory. */
static float *reference_forward(const model *m, uint64_t seed)
{
    int n = m->n_layers;
    float **v = xcalloc((size_t)n + 1, sizeof *v), *w = NULL, *result = NULL;
    int *last = xmalloc(((size_t)n + 1) * sizeof *last); /* the last layer reading each value */
    for (int i = 0; i <= n; i++)
        last[i] = -1;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < m->layers[i].n_inputs; k++)
            last[m->layers[i].inputs[k]] = i;
    layer_rng rng;
    layer_rng_seed(&rng, seed);
    int64_t n_in = shape_numel(&m->input);
    if (!(v[0] = bench_alloc_floats(n_in)))
        goto out;
    layer_fill_uniform(v[0], n_in, -1.0f, 1.0f, &rng);
    dtype_round(model_value_dtype(m, 0), v[0], n_in); /* as forward_build uploads it */
    for (int i = 0; i < n; i++) {
        const layer *l = &m->layers[i];
        const layer_desc *d = layer_desc_get(l->kind);
        const float *ins[LAYER_MAX_INPUTS];
        if (l->n_weight_floats) {
            if (!(w = bench_alloc_floats(l->n_weight_floats)))
                goto out;
            d->init_weights(l, w, &rng);
            layer_round_weights(l, w);
        }
        if (!(v[i + 1] = bench_alloc_floats(shape_numel(&l->out))))
            goto out;
        for (int k = 0; k < l->n_inputs; k++)
            ins[k] = v[l->inputs[k]];
        d->reference(l, ins, w, v[i + 1]);
        free(w), w = NULL;
        for (int k = 0; k < l->n_inputs; k++) /* an input read twice is freed once */
            if (last[l->inputs[k]] == i && l->inputs[k] != n)
                free(v[l->inputs[k]]), v[l->inputs[k]] = NULL;
    }
    result = v[n], v[n] = NULL;
out:
    for (int i = 0; i <= n; i++)
        free(v[i]);
    free(v), free(last), free(w);
    return result;
}

check_result check_forward(const model *m, const backend *b, uint64_t seed, const float *ref)
{
    int n = m->n_layers;
    check_result r = {BENCH_ERR_NOMEM, 0.0, 0.0, 0, ""};
    int64_t n_out = n ? shape_numel(&m->layers[n - 1].out) : shape_numel(&m->input);
    float *got = NULL;
    forward_net net = {0};
    char why[224] = "";
    backend_clear_error(b);
    check_chain_tol ct = {0};
    for (int i = 0; i < n; i++)
        if (!layer_is_view(&m->layers[i]))
            check_chain_tol_add(&ct, b, &m->layers[i], 0.0);
    r.tolerance = check_chain_tol_total(&ct);
    /* the same draws as reference_forward: the input, then each layer's weights */
    if (!ref || !(got = bench_alloc_floats(n_out)) ||
        (r.status = forward_build(&net, m, b, seed, why, sizeof why)) != BENCH_OK)
        goto out;
    forward_queue(&net, false);
    if ((r.status = b->ops->device.sync(b->ctx)) != BENCH_OK ||
        (r.status = backend_download_values(b, model_value_dtype(m, n), got, net.values[n], n_out)) != BENCH_OK)
        goto out;
    r.rel_err = check_rel_err(got, ref, n_out, &r.nonfinite);
    r.status = (r.nonfinite == 0 && r.rel_err <= r.tolerance) ? BENCH_OK : BENCH_ERR_CHECK;
out:
    if (r.status == BENCH_ERR_NOMEM)
        snprintf(r.why, sizeof r.why, "out of memory (for %s)", !ref ? "the reference forward's values" : "the forward");
    else if (r.status != BENCH_OK && r.status != BENCH_ERR_CHECK)
        snprintf(r.why, sizeof r.why, "%s", *why ? why : backend_last_error(b));
    forward_free(&net);
    free(got);
    return r;
}

/* One row of check_model's table; counts it. */
static void check_row(FILE *out, const char *index, const char *name, const char *kind, const backend *b,
                      check_result r, int *passed, int *failed, int *skipped, double *worst)
{
    /* out of memory, or left out (too large, too long): not checked, and said; never a pass */
    bool unchecked = r.status == BENCH_ERR_INTERRUPTED || r.status == BENCH_ERR_NOMEM;
    const char *verdict = r.status == BENCH_OK                ? "ok"
                          : r.status == BENCH_ERR_CHECK       ? "FAIL"
                          : r.status == BENCH_ERR_UNSUPPORTED ? "skipped (unsupported)"
                          : unchecked                         ? "not checked"
                                                              : "ERROR";
    if (r.status == BENCH_OK)
        (*passed)++;
    else if (r.status == BENCH_ERR_UNSUPPORTED || unchecked)
        (*skipped)++;
    else
        (*failed)++;
    if (r.rel_err > *worst)
        *worst = r.rel_err;
    bool measured = r.status == BENCH_OK || r.status == BENCH_ERR_CHECK;
    fprintf(out, "%4s  %-32.32s  %-18s  %-7s  ", index, name, kind, b->ops->name);
    if (measured)
        fprintf(out, "%10.2e  ", r.rel_err);
    else
        fprintf(out, "%10s  ", "-");
    fprintf(out, "%10.1e  %s", r.tolerance, verdict);
    if (r.nonfinite)
        fprintf(out, " (%lld non-finite outputs)", (long long)r.nonfinite);
    if (*r.why)
        fprintf(out, ": %s", r.why);
    fputc('\n', out);
}

/* The reference's seconds for layer l (or, l NULL, for m's whole forward), estimated. */
static double reference_seconds(const model *m, const layer *l)
{
    double flops = 0;
    for (int i = 0; !l && i < m->n_layers; i++)
        flops += (double)m->layers[i].flops;
    return (l ? (double)l->flops : flops) / CHECK_REFERENCE_FLOPS_PER_S;
}

static void say_seconds(double s, char *buf, size_t len)
{
    if (s < 120)
        snprintf(buf, len, "%.0f s", s);
    else if (s < 7200)
        snprintf(buf, len, "%.0f min", s / 60);
    else
        snprintf(buf, len, "%.1f h", s / 3600);
}

int64_t check_layer_bytes(const layer *l)
{
    int64_t floats = l->n_weight_floats + 2 * shape_numel(&l->out);
    for (int k = 0; k < l->n_inputs; k++)
        floats += shape_numel(&l->ins[k]);
    if (l->pass == PASS_BACKWARD) /* the inputs, output and its gradient, weights, and the gradients twice */
        floats = l->n_weight_floats + layer_backward_in_floats(l) + 2 * layer_backward_floats(l);
    return 2 * 4 * floats; /* host fp32, and the backend's copies at most as large */
}

int64_t check_forward_bytes(const model *m)
{
    model_memory mm;
    model_memory_plan(m, &mm);
    /* the forward as it runs (its weights, every activation), and the reference forward:
     * its fp32 values, each freed after its last reader (the forward's peak of them), and
     * one layer's weights at a time */
    int64_t widest = 0;
    for (int i = 0; i < m->n_layers; i++)
        widest = m->layers[i].n_weight_floats > widest ? m->layers[i].n_weight_floats : widest;
    /* ... and while the forward is set up, a layer's weights drawn in fp32 before its
     * upload; a quarter more for what the backends keep of their own (packed weights) */
    int64_t bytes = model_chained_bytes(m) + 4 * (mm.peak_activation_bytes / dtype_size(m->dtype) + 2 * widest);
    return bytes + bytes / 4;
}

bench_status check_model(const model *m, const backend *bs, int n_backends, const check_options *o, FILE *out)
{
    int failed = 0, skipped = 0, passed = 0, n = m->n_layers;
    bool chain = o->forward && m->pass != PASS_BACKWARD, train = m->pass == PASS_TRAIN; /* the forward, or the step */
    double worst = 0.0, total = reference_seconds(m, NULL) * (chain ? 2 : 1), timeout = o->timeout;
    if (train) /* the layers' counts are their forward's and backward's: the step's reference costs as much again */
        total = reference_seconds(m, NULL) * 2;
    char t[32], lim[32], a[32], b[32];
    if (total > CHECK_SAY_LONG_S) { /* before it starts, not after an hour of silence */
        say_seconds(total, t, sizeof t);
        if (timeout > 0)
            say_seconds(timeout, lim, sizeof lim);
        log_msg("check: the plain-C reference of %s (%.3g FLOPs%s) takes about %s at the %.0f GFLOP/s it runs at; %s%s",
                m->name, total * CHECK_REFERENCE_FLOPS_PER_S, chain ? ", the layers and the forward" : "", t,
                CHECK_REFERENCE_FLOPS_PER_S / 1e9,
                timeout > 0 ? "--timeout leaves out what would take over " : "--timeout S leaves out what would take "
                                                                          "longer",
                timeout > 0 ? lim : "");
    }
    /* per layer and backend, its verdict, for the identical layers that take it (--dedupe) */
    check_result *res = xcalloc((size_t)n * (size_t)(n_backends ? n_backends : 1), sizeof *res);
    fprintf(out, "%4s  %-32s  %-18s  %-7s  %10s  %10s  %s\n", "#", "Name", "Kind", "Backend", "Rel. error", "Tolerance",
            "Result");
    for (int i = 0; i < n; i++) {
        const layer *l = &m->layers[i];
        char index[16];
        snprintf(index, sizeof index, "%d", i);
        double est = reference_seconds(m, l);
        int twin = -1;
        for (int j = 0; o->dedupe && twin < 0 && j < i; j++)
            twin = layer_same_work(&m->layers[j], l) ? j : -1;
        int64_t need = check_layer_bytes(l);
        for (int k = 0; k < n_backends; k++) {
            check_result r = {BENCH_ERR_INTERRUPTED, 0, backend_tolerance(&bs[k], l), 0, ""};
            if (twin >= 0) {
                r = res[(size_t)twin * (size_t)n_backends + (size_t)k];
                snprintf(r.why, sizeof r.why, "as #%d, the same layer (--dedupe: checked once)", twin);
            } else if (o->available >= 0 && need > o->available) {
                layer twin;
                shape_t twin_ins[2];
                int64_t run = l->kind == LAYER_MOE ? layer_moe_twin(l, &twin, twin_ins) : 0;
                if (run > 0 && check_layer_bytes(&twin) <= o->available && !(timeout > 0 && reference_seconds(m, &twin) > timeout)) {
                    /* a mixture of experts: the experts a step runs, as a moe of those alone */
                    r = check_layer(&twin, &bs[k], o->seed + (uint64_t)i);
                    if (!*r.why)
                        snprintf(r.why, sizeof r.why, "as the %lld experts that run, of %lld (all need %s, %s is available)",
                                 (long long)run, (long long)l->p.num_experts, bench_format_bytes(need, a, sizeof a),
                                 bench_format_bytes(o->available, b, sizeof b));
                } else {
                    snprintf(r.why, sizeof r.why, "checking it alone needs %s, and %s is available",
                             bench_format_bytes(need, a, sizeof a), bench_format_bytes(o->available, b, sizeof b));
                }
            } else if (timeout > 0 && est > timeout) {
                say_seconds(est, t, sizeof t);
                snprintf(r.why, sizeof r.why, "its reference would take about %s, over --timeout", t);
            } else {
                r = check_layer(l, &bs[k], o->seed + (uint64_t)i);
            }
            res[(size_t)i * (size_t)n_backends + (size_t)k] = r;
            check_row(out, index, l->name, layer_kind_name(l->kind), &bs[k], r, &passed, &failed, &skipped, &worst);
        }
    }
    free(res);
    /* the chained forward (or step): every layer on the previous ones' outputs, where it all fits */
    double est = reference_seconds(m, NULL);
    int64_t need = train ? check_step_bytes(m) : check_forward_bytes(m);
    bool too_big = o->available >= 0 && need > o->available, too_long = timeout > 0 && est > timeout;
    float *ref = chain && !train && !too_big && !too_long ? reference_forward(m, o->seed) : NULL;
    for (int k = 0; chain && k < n_backends; k++) {
        check_result r = {BENCH_ERR_INTERRUPTED, 0, 0, 0, ""};
        if (too_big) {
            snprintf(r.why, sizeof r.why, "the whole model needs %s, and %s is available: its layers were checked alone",
                     bench_format_bytes(need, a, sizeof a), bench_format_bytes(o->available, b, sizeof b));
        } else if (too_long) {
            say_seconds(est, t, sizeof t);
            snprintf(r.why, sizeof r.why, "the reference %s would take about %s, over --timeout", train ? "step" : "forward", t);
        } else {
            r = train ? check_train_step(m, &bs[k], o->seed) : check_forward(m, &bs[k], o->seed, ref);
        }
        check_row(out, "-", train ? "training step (chained)" : "forward (chained, model output)", "model", &bs[k], r,
                  &passed, &failed, &skipped, &worst);
    }
    free(ref);
    fprintf(out, "\nworst relative error %.2e; %d passed, %d failed, %d skipped\n", worst, passed, failed, skipped);
    return failed ? BENCH_ERR_CHECK : BENCH_OK;
}
