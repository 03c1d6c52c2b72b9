/* flatten, reshape, dropout and stochastic_depth: views of their input at inference
 * (torch's eval mode: dropout and torchvision's StochasticDepth are the identity).
 * Nothing runs and nothing is timed; the output is the input buffer. In training,
 * dropout (p > 0) draws its mask (layer_is_view, layer_dropout_scale) and runs.
 *
 * model_input: a further input of the model (a UNet's timestep embedding, a DiT's
 * conditioning vector, encoder states for cross-attention), [N, *shape]. Its values are
 * drawn as the first input's and held as the layer's data (not parameters); each run
 * copies them into its output, as a framework's input arrives in its own buffer. */
#include <string.h>

#include "kind_util.h"

static const layer_param_spec dropout_params[] = {
    {"p", LP_FLOAT, P_OFF(p), false, 0, NULL},
    {"inplace", LP_BOOL, P_OFF(inplace), false, 0, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static void dropout_defaults(layer_params *p) { p->p = 0.5; }

static const char *const stochastic_modes[] = {"row", "batch", NULL};

static const layer_param_spec stochastic_params[] = {
    {"p", LP_FLOAT, P_OFF(p), true, 0, NULL},
    {"mode", LP_ENUM, P_OFF(mode), true, 0, stochastic_modes},
    {NULL, 0, 0, false, 0, NULL},
};

static const layer_param_spec flatten_params[] = {
    {"start_dim", LP_INT, P_OFF(start_dim), false, INT64_MIN, NULL},
    {"end_dim", LP_INT, P_OFF(end_dim), false, INT64_MIN, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static void flatten_defaults(layer_params *p)
{
    p->start_dim = 1;
    p->end_dim = -1;
}

/* nn.Flatten(start_dim, end_dim): dims start..end merged into one ([N, C, H, W] with
 * start_dim 2 gives [N, C, H*W]); never the batch (dim 0). A view. */
static int flatten_infer(layer *l, char *err, size_t len)
{
    int64_t r = l->in.rank, a = l->p.start_dim, b = l->p.end_dim;
    a += a < 0 ? r : 0;
    b += b < 0 ? r : 0;
    if (a < 1 || a >= r || b < a || b >= r)
        return kind_fail(err, len, "start_dim %lld and end_dim %lld must name dims 1 to %lld of a rank-%lld input, "
                                   "start before end (dim 0 is the batch)",
                         (long long)l->p.start_dim, (long long)l->p.end_dim, (long long)(r - 1), (long long)r);
    shape_t o = {0, {0}};
    for (int64_t i = 0; i < a; i++)
        o.d[o.rank++] = l->in.d[i];
    int64_t merged = 1;
    for (int64_t i = a; i <= b; i++)
        merged *= l->in.d[i];
    o.d[o.rank++] = merged;
    for (int64_t i = b + 1; i < r; i++)
        o.d[o.rank++] = l->in.d[i];
    l->out = o;
    return 0;
}

static const layer_param_spec reshape_params[] = {
    {"shape", LP_DIMS, P_OFF(perm), true, -1, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

/* [N, *shape] from the per-sample dims in p->perm (the count first; one -1 takes what
 * is left, as torch's view does); 0, or -1 with the reason. */
static int per_sample_shape(layer *l, const int64_t *dims, shape_t *o, int64_t numel, char *err, size_t len)
{
    if (dims[0] > SHAPE_MAX_RANK - 1)
        return kind_fail(err, len, "shape: at most %d dims per sample (the batch comes first), got %lld",
                         SHAPE_MAX_RANK - 1, (long long)dims[0]);
    *o = (shape_t){(int)dims[0] + 1, {l->in.d[0]}};
    int64_t known = 1, free_dim = -1;
    for (int64_t k = 0; k < dims[0]; k++) {
        int64_t d = dims[1 + k];
        if (d == -1 && free_dim < 0)
            free_dim = k + 1;
        else if (d < 1)
            return kind_fail(err, len, "shape: dims must be 1 or more, with at most one -1; got %lld", (long long)d);
        else
            known *= d;
        o->d[k + 1] = d;
    }
    if (numel < 0) /* model_input: no -1 */
        return free_dim < 0 ? 0 : kind_fail(err, len, "shape: a model input's dims are all given (no -1)");
    int64_t per_sample = numel / l->in.d[0];
    if (free_dim >= 0 && per_sample % known == 0)
        o->d[free_dim] = per_sample / known, known = per_sample;
    if (known != per_sample)
        return kind_fail(err, len, "shape: %lld elements per sample cannot be viewed as the %lld given",
                         (long long)per_sample, (long long)known);
    return 0;
}

/* x.view(N, *shape), x.reshape, x.unsqueeze, x[:, :, None, None]: a view */
static int reshape_infer(layer *l, char *err, size_t len)
{
    return per_sample_shape(l, l->p.perm, &l->out, shape_numel(&l->in), err, len);
}

static int model_input_infer(layer *l, char *err, size_t len)
{
    if (per_sample_shape(l, l->p.perm, &l->out, -1, err, len))
        return -1;
    if (shape_numel_checked(&l->out) < 0)
        return kind_fail(err, len, "shape: a model input of more than 2^40 values per batch");
    return 0;
}

/* its values, per whole batch; no parameters; bytes: the values read and the output written */
static void model_input_count(layer *l)
{
    l->n_weights = l->macs = l->flops = 0;
    l->n_weight_floats = shape_numel(&l->out);
    l->bytes = layer_count_mul(8, l->n_weight_floats);
}

static void model_input_init(const layer *l, float *w, layer_rng *rng)
{
    layer_fill_uniform(w, l->n_weight_floats, -1.0f, 1.0f, rng);
}

static void model_input_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    (void)ins;
    memcpy(out, w, (size_t)l->n_weight_floats * sizeof *out);
}

static int dropout_infer(layer *l, char *err, size_t len)
{
    if (l->p.p > 1.0)
        return kind_fail(err, len, "%s probability p must be between 0 and 1, got %g", layer_kind_name(l->kind), l->p.p);
    l->out = l->in;
    return 0;
}

static void view_count(layer *l)
{
    l->n_weights = l->n_weight_floats = l->macs = l->flops = 0;
    l->bytes = 0; /* a view moves nothing */
}

static void copy_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    (void)w;
    memcpy(out, in, (size_t)shape_numel(&l->in) * sizeof *in);
}

/* A view's gradient is d out, in the input's shape */
static void copy_backward(const layer *l, const float *const *ins, const float *w, const float *out,
                          const float *dout, float *const *din, float *dw)
{
    (void)ins, (void)w, (void)out, (void)dw;
    memcpy(din[0], dout, (size_t)shape_numel(&l->in) * sizeof(float));
}

/* Dropout in training (layer_is_view false): a multiply per element by the mask's
 * factor, reading the input and writing the output */
static void dropout_count(layer *l)
{
    view_count(l);
    if (layer_is_view(l))
        return;
    int64_t n = shape_numel(&l->in);
    l->flops = n;
    l->bytes = layer_count_mul(8, n);
}

static void dropout_train_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    (void)w;
    uint32_t seed, threshold;
    float keep;
    layer_dropout_params(l, &seed, &threshold, &keep);
    for (int64_t i = 0; i < shape_numel(&l->in); i++)
        out[i] = ins[0][i] * layer_dropout_scale(seed, threshold, keep, i);
}

/* The same mask again: d in = d out times its factor */
static void dropout_backward(const layer *l, const float *const *ins, const float *w, const float *out,
                             const float *dout, float *const *din, float *dw)
{
    (void)ins, (void)out, (void)dw;
    dropout_train_reference(l, &dout, w, din[0]);
}

const layer_desc layer_flatten_desc = {
    .name = "flatten", .n_inputs = 1, .aliases_input = true, .params = flatten_params, .defaults = flatten_defaults,
    .infer = flatten_infer, .count = view_count, .reference = copy_reference, .tolerance = 0.0,
    .backward = copy_backward,
};

const layer_desc layer_dropout_desc = {
    .name = "dropout", .n_inputs = 1, .aliases_input = true, .params = dropout_params,
    .defaults = dropout_defaults, .infer = dropout_infer, .count = dropout_count,
    .reference = copy_reference, .tolerance = 0.0, .train_reference = dropout_train_reference,
    .backward = dropout_backward,
};

const layer_desc layer_stochastic_depth_desc = {
    .name = "stochastic_depth", .n_inputs = 1, .aliases_input = true, .params = stochastic_params,
    .infer = dropout_infer, .count = view_count, .reference = copy_reference, .tolerance = 0.0,
};

const layer_desc layer_reshape_desc = {
    .name = "reshape", .n_inputs = 1, .aliases_input = true, .params = reshape_params, .infer = reshape_infer,
    .count = view_count, .reference = copy_reference, .tolerance = 0.0, .backward = copy_backward,
};

const layer_desc layer_model_input_desc = {
    .name = "model_input", .n_inputs = 1, .params = reshape_params, .infer = model_input_infer,
    .count = model_input_count, .init_weights = model_input_init, .reference = model_input_reference,
    .tolerance = 0.0,
};
