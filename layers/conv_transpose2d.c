/* conv_transpose2d: torch.nn.ConvTranspose2d (zero padding). Weights: [IC, OC/groups, KH, KW]
 * (torch's layout) then bias [OC]. Output: (H - 1) * stride - 2 * padding + dilation *
 * (KH - 1) + output_padding + 1. Every input element meets every kernel tap of its
 * group's output channels: MACs = N * IC * H * W * OC/groups * KH * KW. */
#include <math.h>

#include "kind_util.h"

static const layer_param_spec convt_params[] = {
    {"out_channels", LP_INT, P_OFF(out_channels), true, 1, NULL},
    {"kernel_size", LP_PAIR, P_OFF(kernel), true, 1, NULL},
    {"stride", LP_PAIR, P_OFF(stride), false, 1, NULL},
    {"padding", LP_PAIR, P_OFF(padding), false, 0, NULL},
    {"output_padding", LP_PAIR, P_OFF(output_padding), false, 0, NULL},
    {"groups", LP_INT, P_OFF(groups), false, 1, NULL},
    {"bias", LP_BOOL, P_OFF(bias), false, 0, NULL},
    {"dilation", LP_PAIR, P_OFF(dilation), false, 1, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static void convt_defaults(layer_params *p)
{
    p->stride[0] = p->stride[1] = 1;
    p->dilation[0] = p->dilation[1] = 1;
    p->groups = 1;
    p->bias = true;
}

static int convt_infer(layer *l, char *err, size_t len)
{
    const layer_params *p = &l->p;
    if (kind_need_nchw(l, err, len))
        return -1;
    int64_t c = l->in.d[1];
    if (c % p->groups || p->out_channels % p->groups)
        return kind_fail(err, len, "in_channels %lld (from the input) and out_channels %lld must be divisible by "
                                   "groups %lld",
                         (long long)c, (long long)p->out_channels, (long long)p->groups);
    int64_t o[2];
    for (int a = 0; a < 2; a++) {
        if (p->output_padding[a] >= p->stride[a] && p->output_padding[a] >= p->dilation[a])
            return kind_fail(err, len, "output_padding %lld must be smaller than either stride %lld or dilation %lld",
                             (long long)p->output_padding[a], (long long)p->stride[a], (long long)p->dilation[a]);
        /* every term is below 2^33: no overflow in 64 bits */
        o[a] = (l->in.d[2 + a] - 1) * p->stride[a] - 2 * p->padding[a] + p->dilation[a] * (p->kernel[a] - 1) +
               p->output_padding[a] + 1;
        if (o[a] < 1)
            return kind_fail(err, len, "the padding %lld leaves no output (%lld) along %s", (long long)p->padding[a],
                             (long long)o[a], a ? "the width" : "the height");
    }
    l->out = (shape_t){4, {l->in.d[0], p->out_channels, o[0], o[1]}};
    return 0;
}

/* Weights per input channel: OC/groups x KH x KW; -1 when out of range. */
static int64_t convt_k(const layer *l)
{
    return layer_count_mul(layer_count_mul(l->p.out_channels / l->p.groups, l->p.kernel[0]), l->p.kernel[1]);
}

static void convt_count(layer *l)
{
    int64_t k = convt_k(l), outs = shape_numel(&l->out);
    l->n_weights = layer_count_add(layer_count_mul(l->in.d[1], k), l->p.bias ? l->p.out_channels : 0);
    l->n_weight_floats = l->n_weights;
    l->macs = layer_count_mul(shape_numel(&l->in), k);
    l->flops = layer_count_add(layer_count_mul(2, l->macs), l->p.bias ? outs : 0);
    kind_count_bytes(l);
}

static void convt_init(const layer *l, float *w, layer_rng *rng)
{
    /* torch's bound: 1/sqrt(fan_in), where ConvTranspose2d's fan_in is OC/groups x KH x KW */
    float b = (float)(1.0 / sqrt((double)convt_k(l)));
    layer_fill_uniform(w, l->n_weight_floats, -b, b, rng);
}

static void convt_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    const layer_params *p = &l->p;
    int64_t n = l->in.d[0], c = l->in.d[1], h = l->in.d[2], wd = l->in.d[3];
    int64_t oc = l->out.d[1], oh = l->out.d[2], ow = l->out.d[3];
    int64_t cg = c / p->groups, ocg = oc / p->groups, kh = p->kernel[0], kw = p->kernel[1];
    const float *bias = p->bias ? w + c * ocg * kh * kw : NULL;
    /* gathered per output element (a sum in double, in a fixed order) */
    for (int64_t b = 0; b < n; b++)
        for (int64_t o = 0; o < oc; o++) {
            int64_t g = o / ocg, og = o % ocg;
            for (int64_t y = 0; y < oh; y++)
                for (int64_t x = 0; x < ow; x++) {
                    double acc = bias ? bias[o] : 0.0;
                    for (int64_t i = 0; i < kh; i++) {
                        int64_t ty = y + p->padding[0] - i * p->dilation[0];
                        if (ty < 0 || ty % p->stride[0] || ty / p->stride[0] >= h)
                            continue;
                        for (int64_t j = 0; j < kw; j++) {
                            int64_t tx = x + p->padding[1] - j * p->dilation[1];
                            if (tx < 0 || tx % p->stride[1] || tx / p->stride[1] >= wd)
                                continue;
                            for (int64_t ci = 0; ci < cg; ci++) {
                                int64_t ch = g * cg + ci;
                                acc += (double)in[((b * c + ch) * h + ty / p->stride[0]) * wd + tx / p->stride[1]] *
                                       w[((ch * ocg + og) * kh + i) * kw + j];
                            }
                        }
                    }
                    out[((b * oc + o) * oh + y) * ow + x] = (float)acc;
                }
        }
}

const layer_desc layer_conv_transpose2d_desc = {
    .name = "conv_transpose2d", .n_inputs = 1, .params = convt_params, .defaults = convt_defaults,
    .infer = convt_infer, .count = convt_count, .init_weights = convt_init, .reference = convt_reference,
    .tolerance = 2e-6,
};
