/* conv2d: torch.nn.Conv2d (zero padding). Weights: [OC, C/groups, KH, KW] then bias [OC]. */
#include <math.h>
#include <stdlib.h>

#include "kind_util.h"
#include "util.h"

static const layer_param_spec conv2d_params[] = {
    {"out_channels", LP_INT, P_OFF(out_channels), true, 1, NULL},
    {"kernel_size", LP_PAIR, P_OFF(kernel), true, 1, NULL},
    {"stride", LP_PAIR, P_OFF(stride), false, 1, NULL},
    {"padding", LP_PAIR, P_OFF(padding), false, 0, NULL},
    {"dilation", LP_PAIR, P_OFF(dilation), false, 1, NULL},
    {"groups", LP_INT, P_OFF(groups), false, 1, NULL},
    {"bias", LP_BOOL, P_OFF(bias), false, 0, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static void conv2d_defaults(layer_params *p)
{
    p->stride[0] = p->stride[1] = 1;
    p->dilation[0] = p->dilation[1] = 1;
    p->groups = 1;
    p->bias = true;
}

static int conv2d_infer(layer *l, char *err, size_t len)
{
    const layer_params *p = &l->p;
    if (kind_need_nchw(l, err, len))
        return -1;
    int64_t c = l->in.d[1];
    if (c % p->groups)
        return kind_fail(err, len, "in_channels %lld (from the input) is not divisible by groups %lld",
                         (long long)c, (long long)p->groups);
    if (p->out_channels % p->groups)
        return kind_fail(err, len, "out_channels %lld is not divisible by groups %lld",
                         (long long)p->out_channels, (long long)p->groups);
    int64_t oh = layer_out_dim(l->in.d[2], p->kernel[0], p->stride[0], p->padding[0], p->dilation[0], false);
    int64_t ow = layer_out_dim(l->in.d[3], p->kernel[1], p->stride[1], p->padding[1], p->dilation[1], false);
    if (oh < 1 || ow < 1)
        return kind_fail(err, len,
                         "kernel %lldx%lld (dilation %lldx%lld) is larger than the padded input %lldx%lld",
                         (long long)p->kernel[0], (long long)p->kernel[1], (long long)p->dilation[0],
                         (long long)p->dilation[1], (long long)(l->in.d[2] + 2 * p->padding[0]),
                         (long long)(l->in.d[3] + 2 * p->padding[1]));
    l->out = (shape_t){4, {l->in.d[0], p->out_channels, oh, ow}};
    return 0;
}

/* Weights per output channel (C/groups x KH x KW), -1 when out of range. */
static int64_t conv2d_k(const layer *l)
{
    return layer_count_mul(layer_count_mul(l->in.d[1] / l->p.groups, l->p.kernel[0]), l->p.kernel[1]);
}

static void conv2d_count(layer *l)
{
    int64_t k = conv2d_k(l), outs = shape_numel(&l->out);
    l->n_weights = layer_count_add(layer_count_mul(l->p.out_channels, k), l->p.bias ? l->p.out_channels : 0);
    l->n_weight_floats = l->n_weights;
    l->macs = layer_count_mul(outs, k);
    l->flops = layer_count_add(layer_count_mul(2, l->macs), l->p.bias ? outs : 0);
    kind_count_bytes(l);
}

static void conv2d_init(const layer *l, float *w, layer_rng *rng)
{
    /* torch's default init bound for both weight and bias: 1/sqrt(fan_in). */
    float b = (float)(1.0 / sqrt((double)conv2d_k(l)));
    layer_fill_uniform(w, l->n_weight_floats, -b, b, rng);
}

static void conv2d_reference(const layer *l, const float *const *ins, const float *w,
                             float *out)
{
    const float *in = ins[0];
    const layer_params *p = &l->p;
    int64_t n = l->in.d[0], c = l->in.d[1], h = l->in.d[2], wd = l->in.d[3];
    int64_t oc = l->out.d[1], oh = l->out.d[2], ow = l->out.d[3];
    int64_t cg = c / p->groups, ocg = oc / p->groups, kh = p->kernel[0], kw = p->kernel[1];
    const float *bias = p->bias ? w + oc * cg * kh * kw : NULL;
    for (int64_t b = 0; b < n; b++)
        for (int64_t o = 0; o < oc; o++) {
            int64_t g = o / ocg;
            for (int64_t y = 0; y < oh; y++)
                for (int64_t x = 0; x < ow; x++) {
                    double acc = bias ? bias[o] : 0.0;
                    for (int64_t ci = 0; ci < cg; ci++)
                        for (int64_t i = 0; i < kh; i++) {
                            int64_t iy = y * p->stride[0] - p->padding[0] + i * p->dilation[0];
                            if (iy < 0 || iy >= h)
                                continue;
                            for (int64_t j = 0; j < kw; j++) {
                                int64_t ix = x * p->stride[1] - p->padding[1] + j * p->dilation[1];
                                if (ix < 0 || ix >= wd)
                                    continue;
                                acc += (double)in[((b * c + g * cg + ci) * h + iy) * wd + ix] *
                                       w[((o * cg + ci) * kh + i) * kw + j];
                            }
                        }
                    out[((b * oc + o) * oh + y) * ow + x] = (float)acc;
                }
        }
}

/* The forward's loops, each product's gradient sent back to the input element and the
 * weight it multiplied (in double, then rounded once) */
static void conv2d_backward(const layer *l, const float *const *ins, const float *w, const float *out,
                            const float *dout, float *const *din, float *dw)
{
    (void)out;
    const float *in = ins[0];
    const layer_params *p = &l->p;
    int64_t n = l->in.d[0], c = l->in.d[1], h = l->in.d[2], wd = l->in.d[3];
    int64_t oc = l->out.d[1], oh = l->out.d[2], ow = l->out.d[3];
    int64_t cg = c / p->groups, ocg = oc / p->groups, kh = p->kernel[0], kw = p->kernel[1];
    int64_t n_in = shape_numel(&l->in);
    double *gx = xcalloc((size_t)n_in, sizeof *gx), *gw = xcalloc((size_t)l->n_weight_floats, sizeof *gw);
    for (int64_t b = 0; b < n; b++)
        for (int64_t o = 0; o < oc; o++) {
            int64_t g = o / ocg;
            for (int64_t y = 0; y < oh; y++)
                for (int64_t x = 0; x < ow; x++) {
                    double dy = dout[((b * oc + o) * oh + y) * ow + x];
                    if (p->bias)
                        gw[oc * cg * kh * kw + o] += dy;
                    for (int64_t ci = 0; ci < cg; ci++)
                        for (int64_t i = 0; i < kh; i++) {
                            int64_t iy = y * p->stride[0] - p->padding[0] + i * p->dilation[0];
                            for (int64_t j = 0; iy >= 0 && iy < h && j < kw; j++) {
                                int64_t ix = x * p->stride[1] - p->padding[1] + j * p->dilation[1];
                                if (ix < 0 || ix >= wd)
                                    continue;
                                int64_t at = ((b * c + g * cg + ci) * h + iy) * wd + ix, wi = ((o * cg + ci) * kh + i) * kw + j;
                                gx[at] += dy * w[wi];
                                gw[wi] += dy * in[at];
                            }
                        }
                }
        }
    kind_store_grad(din[0], gx, n_in);
    kind_store_grad(dw, gw, l->n_weight_floats);
}

/* int8: the weight [oc, ic/groups, kh, kw], a scale per output channel; the bias stays fp32 */
static int64_t conv2d_int8_weights(const layer *l, int64_t *rows)
{
    *rows = l->p.out_channels;
    return layer_count_mul(l->p.out_channels, conv2d_k(l));
}

const layer_desc layer_conv2d_desc = {
    .name = "conv2d",
    .n_inputs = 1,
    .params = conv2d_params,
    .defaults = conv2d_defaults,
    .infer = conv2d_infer,
    .count = conv2d_count,
    .init_weights = conv2d_init,
    .reference = conv2d_reference,
    .tolerance = 2e-6,
    .int8_weights = conv2d_int8_weights,
    .backward = conv2d_backward,
};
