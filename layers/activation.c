/* Element-wise activations: relu, relu6, sigmoid, silu, hardswish, hardsigmoid, tanh, as
 * torch.nn defines them; and scale_shift, scale * x + shift with numbers (torch's x + 1,
 * x * 0.5, 1 - x, x / 8: DiT's 1 + scale). Any input rank. */
#include <math.h>

#include "kind_util.h"
#include "util.h"

static const layer_param_spec act_params[] = {
    /* Accepted so torch models transcribe as they are; we always run out of place. */
    {"inplace", LP_BOOL, P_OFF(inplace), false, 0, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static int act_infer(layer *l, char *err, size_t len)
{
    (void)err, (void)len;
    l->out = l->in;
    return 0;
}

/* FLOPs per element: relu 1 (max), relu6 2 (max, min), sigmoid 4 (neg, exp, add, div),
 * silu 5 (sigmoid's and a multiply), hardsigmoid 4 (add, max, min, divide), hardswish 5
 * (hardsigmoid's and a multiply), tanh 5 (as two exponentials' worth: exp, add, sub,
 * div and the negation). docs/flops.md lists them. */
static void act_count_per(layer *l, int64_t per)
{
    l->n_weights = l->n_weight_floats = l->macs = 0;
    l->flops = layer_count_mul(per, shape_numel(&l->out));
    kind_count_bytes(l);
}
static void relu_count(layer *l) { act_count_per(l, 1); }
static void relu6_count(layer *l) { act_count_per(l, 2); }
static void sigmoid_count(layer *l) { act_count_per(l, 4); }
static void four_count(layer *l) { act_count_per(l, 4); }
static void five_count(layer *l) { act_count_per(l, 5); }

static void relu_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    (void)w;
    for (int64_t i = 0, n = shape_numel(&l->in); i < n; i++)
        out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

static void relu6_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    (void)w;
    for (int64_t i = 0, n = shape_numel(&l->in); i < n; i++)
        out[i] = in[i] < 0.0f ? 0.0f : in[i] > 6.0f ? 6.0f : in[i];
}

static void sigmoid_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    (void)w;
    for (int64_t i = 0, n = shape_numel(&l->in); i < n; i++)
        out[i] = (float)(1.0 / (1.0 + exp(-(double)in[i])));
}

static double hardsigmoid(double x) { return x <= -3.0 ? 0.0 : x >= 3.0 ? 1.0 : x / 6.0 + 0.5; }

static void silu_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    (void)w;
    for (int64_t i = 0, n = shape_numel(&l->in); i < n; i++)
        out[i] = (float)((double)in[i] / (1.0 + exp(-(double)in[i])));
}

static void hardswish_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    (void)w;
    for (int64_t i = 0, n = shape_numel(&l->in); i < n; i++)
        out[i] = (float)((double)in[i] * hardsigmoid(in[i]));
}

static void hardsigmoid_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    (void)w;
    for (int64_t i = 0, n = shape_numel(&l->in); i < n; i++)
        out[i] = (float)hardsigmoid(in[i]);
}

static void tanh_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    (void)w;
    for (int64_t i = 0, n = shape_numel(&l->in); i < n; i++)
        out[i] = (float)tanh((double)in[i]);
}

/* The derivative of kind k at x, as torch's backward takes it (relu's and relu6's 0 at
 * their corners, hardswish's and hardsigmoid's one-sided ones at +-3) */
static double act_slope(layer_kind k, double x)
{
    double s = 1.0 / (1.0 + exp(-x)), t;
    switch (k) {
    case LAYER_RELU: return x > 0.0;
    case LAYER_RELU6: return x > 0.0 && x < 6.0;
    case LAYER_SIGMOID: return s * (1.0 - s);
    case LAYER_SILU: return s * (1.0 + x * (1.0 - s));
    case LAYER_HARDSWISH: return x < -3.0 ? 0.0 : x > 3.0 ? 1.0 : x / 3.0 + 0.5;
    case LAYER_HARDSIGMOID: return x > -3.0 && x < 3.0 ? 1.0 / 6.0 : 0.0;
    case LAYER_TANH: t = tanh(x); return 1.0 - t * t;
    default: BENCH_ASSERT(!"an activation without a slope"); return 0.0;
    }
}

/* d in = d out * f'(in) */
static void act_backward(const layer *l, const float *const *ins, const float *w, const float *out,
                         const float *dout, float *const *din, float *dw)
{
    (void)w, (void)out, (void)dw;
    for (int64_t i = 0, n = shape_numel(&l->in); i < n; i++)
        din[0][i] = (float)(dout[i] * act_slope(l->kind, ins[0][i]));
}

#define ACTIVATION(kind_name, counter, ref)                                                       \
    const layer_desc layer_##kind_name##_desc = {                                                 \
        .name = #kind_name, .n_inputs = 1, .params = act_params, .infer = act_infer,              \
        .count = counter, .reference = ref, .tolerance = 1e-6, .backward = act_backward,          \
    }

ACTIVATION(relu, relu_count, relu_reference);
ACTIVATION(relu6, relu6_count, relu6_reference);
ACTIVATION(sigmoid, sigmoid_count, sigmoid_reference);
ACTIVATION(silu, five_count, silu_reference);
ACTIVATION(hardswish, five_count, hardswish_reference);
ACTIVATION(hardsigmoid, four_count, hardsigmoid_reference);
ACTIVATION(tanh, five_count, tanh_reference);

/* ---- scale_shift ---------------------------------------------------------------------------- */

static const layer_param_spec scale_shift_params[] = {
    {"scale", LP_FLOAT, P_OFF(attn_scale), false, INT64_MIN, NULL},
    {"shift", LP_FLOAT, P_OFF(shift), false, INT64_MIN, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static void scale_shift_defaults(layer_params *p) { p->attn_scale = 1.0; }

/* 2 per element: the multiply and the add, as one fused multiply-add counts */
static void two_count(layer *l) { act_count_per(l, 2); }

static void scale_shift_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    (void)w;
    for (int64_t i = 0, n = shape_numel(&l->in); i < n; i++)
        out[i] = (float)((double)ins[0][i] * l->p.attn_scale + l->p.shift);
}

static void scale_shift_backward(const layer *l, const float *const *ins, const float *w, const float *out,
                                 const float *dout, float *const *din, float *dw)
{
    (void)ins, (void)w, (void)out, (void)dw;
    for (int64_t i = 0, n = shape_numel(&l->in); i < n; i++)
        din[0][i] = (float)(dout[i] * l->p.attn_scale);
}

const layer_desc layer_scale_shift_desc = {
    .name = "scale_shift", .n_inputs = 1, .params = scale_shift_params, .defaults = scale_shift_defaults,
    .infer = act_infer, .count = two_count, .reference = scale_shift_reference, .tolerance = 1e-6,
    .backward = scale_shift_backward,
};
