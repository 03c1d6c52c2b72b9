/* Pooling: maxpool2d, avgpool2d (torch.nn.MaxPool2d / AvgPool2d, including ceil_mode and
 * count_include_pad), adaptive_avgpool2d (torch.nn.AdaptiveAvgPool2d) and mean (x.mean(dim),
 * the global pool MNASNet writes as x.mean([2, 3])). No weights.
 * FLOPs: one per window element read, per output (compare or add); see docs/flops.md. */
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "kind_util.h"
#include "util.h"

static const layer_param_spec maxpool_params[] = {
    {"kernel_size", LP_PAIR, P_OFF(kernel), true, 1, NULL},
    {"stride", LP_PAIR, P_OFF(stride), false, 1, NULL},
    {"padding", LP_PAIR, P_OFF(padding), false, 0, NULL},
    {"dilation", LP_PAIR, P_OFF(dilation), false, 1, NULL},
    {"ceil_mode", LP_BOOL, P_OFF(ceil_mode), false, 0, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static const layer_param_spec avgpool_params[] = {
    {"kernel_size", LP_PAIR, P_OFF(kernel), true, 1, NULL},
    {"stride", LP_PAIR, P_OFF(stride), false, 1, NULL},
    {"padding", LP_PAIR, P_OFF(padding), false, 0, NULL},
    {"ceil_mode", LP_BOOL, P_OFF(ceil_mode), false, 0, NULL},
    {"count_include_pad", LP_BOOL, P_OFF(count_include_pad), false, 0, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static const layer_param_spec adaptive_params[] = {
    {"output_size", LP_PAIR, P_OFF(output_size), true, 1, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static void pool_defaults(layer_params *p)
{
    p->dilation[0] = p->dilation[1] = 1;
    p->count_include_pad = true;
    /* stride stays 0: torch's default stride is the kernel size, resolved in infer. */
}

static int pool_infer(layer *l, char *err, size_t len)
{
    layer_params *p = &l->p;
    if (kind_need_nchw(l, err, len))
        return -1;
    for (int a = 0; a < 2; a++) {
        if (p->stride[a] == 0)
            p->stride[a] = p->kernel[a];
        if (p->padding[a] > p->kernel[a] / 2)
            return kind_fail(err, len, "padding %lld must be at most half the kernel size %lld",
                             (long long)p->padding[a], (long long)p->kernel[a]);
    }
    int64_t oh = layer_out_dim(l->in.d[2], p->kernel[0], p->stride[0], p->padding[0], p->dilation[0], p->ceil_mode);
    int64_t ow = layer_out_dim(l->in.d[3], p->kernel[1], p->stride[1], p->padding[1], p->dilation[1], p->ceil_mode);
    if (oh < 1 || ow < 1)
        return kind_fail(err, len, "pool window %lldx%lld is larger than its padded input %lldx%lld",
                         (long long)(p->dilation[0] * (p->kernel[0] - 1) + 1),
                         (long long)(p->dilation[1] * (p->kernel[1] - 1) + 1),
                         (long long)(l->in.d[2] + 2 * p->padding[0]),
                         (long long)(l->in.d[3] + 2 * p->padding[1]));
    l->out = (shape_t){4, {l->in.d[0], l->in.d[1], oh, ow}};
    return 0;
}

static void pool_count(layer *l)
{
    l->n_weights = l->n_weight_floats = l->macs = 0;
    l->flops = layer_count_mul(layer_count_mul(shape_numel(&l->out), l->p.kernel[0]), l->p.kernel[1]);
    kind_count_bytes(l);
}

static void maxpool_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    (void)w;
    const layer_params *p = &l->p;
    int64_t planes = l->in.d[0] * l->in.d[1], h = l->in.d[2], wd = l->in.d[3];
    int64_t oh = l->out.d[2], ow = l->out.d[3];
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t y = 0; y < oh; y++)
            for (int64_t x = 0; x < ow; x++) {
                float m = -INFINITY;
                for (int64_t i = 0; i < p->kernel[0]; i++)
                    for (int64_t j = 0; j < p->kernel[1]; j++) {
                        int64_t iy = y * p->stride[0] - p->padding[0] + i * p->dilation[0];
                        int64_t ix = x * p->stride[1] - p->padding[1] + j * p->dilation[1];
                        if (iy >= 0 && iy < h && ix >= 0 && ix < wd && in[(pl * h + iy) * wd + ix] > m)
                            m = in[(pl * h + iy) * wd + ix];
                    }
                out[(pl * oh + y) * ow + x] = m;
            }
}

static void avgpool_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    (void)w;
    const layer_params *p = &l->p;
    int64_t planes = l->in.d[0] * l->in.d[1], h = l->in.d[2], wd = l->in.d[3];
    int64_t oh = l->out.d[2], ow = l->out.d[3];
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t y = 0; y < oh; y++)
            for (int64_t x = 0; x < ow; x++) {
                double sum = 0.0;
                int64_t valid = 0, padded = 0;
                for (int64_t i = 0; i < p->kernel[0]; i++)
                    for (int64_t j = 0; j < p->kernel[1]; j++) {
                        int64_t iy = y * p->stride[0] - p->padding[0] + i;
                        int64_t ix = x * p->stride[1] - p->padding[1] + j;
                        /* torch divides by the window clipped to the padded input */
                        if (iy < h + p->padding[0] && ix < wd + p->padding[1])
                            padded++;
                        if (iy >= 0 && iy < h && ix >= 0 && ix < wd) {
                            sum += in[(pl * h + iy) * wd + ix];
                            valid++;
                        }
                    }
                int64_t div = p->count_include_pad ? padded : valid;
                out[(pl * oh + y) * ow + x] = div ? (float)(sum / (double)div) : 0.0f;
            }
}

/* Each output's gradient goes to its window's first largest input (the index torch's
 * forward saves), summed where windows overlap */
static void maxpool_backward(const layer *l, const float *const *ins, const float *w, const float *out,
                             const float *dout, float *const *din, float *dw)
{
    (void)w, (void)out, (void)dw;
    const layer_params *p = &l->p;
    int64_t planes = l->in.d[0] * l->in.d[1], h = l->in.d[2], wd = l->in.d[3];
    int64_t oh = l->out.d[2], ow = l->out.d[3];
    double *g = xcalloc((size_t)shape_numel(&l->in), sizeof *g);
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t y = 0; y < oh; y++)
            for (int64_t x = 0; x < ow; x++) {
                int64_t arg = -1;
                for (int64_t i = 0; i < p->kernel[0]; i++)
                    for (int64_t j = 0; j < p->kernel[1]; j++) {
                        int64_t iy = y * p->stride[0] - p->padding[0] + i * p->dilation[0];
                        int64_t ix = x * p->stride[1] - p->padding[1] + j * p->dilation[1];
                        int64_t at = (pl * h + iy) * wd + ix;
                        if (iy >= 0 && iy < h && ix >= 0 && ix < wd && (arg < 0 || ins[0][at] > ins[0][arg]))
                            arg = at;
                    }
                if (arg >= 0)
                    g[arg] += dout[(pl * oh + y) * ow + x];
            }
    kind_store_grad(din[0], g, shape_numel(&l->in));
}

/* Each output's gradient shared over the inputs of its window by the forward's divisor */
static void avgpool_backward(const layer *l, const float *const *ins, const float *w, const float *out,
                             const float *dout, float *const *din, float *dw)
{
    (void)ins, (void)w, (void)out, (void)dw;
    const layer_params *p = &l->p;
    int64_t planes = l->in.d[0] * l->in.d[1], h = l->in.d[2], wd = l->in.d[3];
    int64_t oh = l->out.d[2], ow = l->out.d[3];
    double *g = xcalloc((size_t)shape_numel(&l->in), sizeof *g);
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t y = 0; y < oh; y++)
            for (int64_t x = 0; x < ow; x++) {
                int64_t valid = 0, padded = 0;
                for (int64_t pass = 0; pass < 2; pass++) { /* the divisor, then the shares */
                    int64_t div = p->count_include_pad ? padded : valid;
                    for (int64_t i = 0; i < p->kernel[0]; i++)
                        for (int64_t j = 0; j < p->kernel[1]; j++) {
                            int64_t iy = y * p->stride[0] - p->padding[0] + i;
                            int64_t ix = x * p->stride[1] - p->padding[1] + j;
                            bool inside = iy >= 0 && iy < h && ix >= 0 && ix < wd;
                            if (pass == 0) {
                                padded += iy < h + p->padding[0] && ix < wd + p->padding[1];
                                valid += inside;
                            } else if (inside && div) {
                                g[(pl * h + iy) * wd + ix] += dout[(pl * oh + y) * ow + x] / (double)div;
                            }
                        }
                }
            }
    kind_store_grad(din[0], g, shape_numel(&l->in));
}

const layer_desc layer_maxpool2d_desc = {
    .name = "maxpool2d", .n_inputs = 1, .params = maxpool_params, .defaults = pool_defaults,
    .infer = pool_infer, .count = pool_count, .reference = maxpool_reference, .tolerance = 0.0,
    .backward = maxpool_backward,
};

const layer_desc layer_avgpool2d_desc = {
    .name = "avgpool2d", .n_inputs = 1, .params = avgpool_params, .defaults = pool_defaults,
    .infer = pool_infer, .count = pool_count, .reference = avgpool_reference, .tolerance = 1e-6,
    .backward = avgpool_backward,
};

/* adaptive_avgpool2d: window i covers [floor(i*in/out), ceil((i+1)*in/out)). */
static int adaptive_infer(layer *l, char *err, size_t len)
{
    if (kind_need_nchw(l, err, len))
        return -1;
    l->out = (shape_t){4, {l->in.d[0], l->in.d[1], l->p.output_size[0], l->p.output_size[1]}};
    return 0;
}

static int64_t gcd(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b, b = t;
    }
    return a;
}

/* The sizes of the `out` windows along an axis of `in`, summed: window i covers
 * [floor(i*in/out), ceil((i+1)*in/out)). In closed form, so the cost does not grow with
 * the sizes: sum(ceil((i+1)*in/out)) - sum(floor(i*in/out)) = in + out - gcd(in, out),
 * since the two sums of floors differ by `in` and (i+1)*in/out is an integer for
 * gcd(in, out) values of i. (tests/test_layers.c checks it against the loop.) */
int64_t layer_adaptive_window_sum(int64_t in, int64_t out)
{
    return in + out - gcd(in, out);
}

static void adaptive_count(layer *l)
{
    l->n_weights = l->n_weight_floats = l->macs = 0;
    /* every output reads its window once; sums of window sizes per axis multiply */
    l->flops = layer_count_mul(layer_count_mul(layer_count_mul(l->in.d[0], l->in.d[1]), layer_adaptive_window_sum(l->in.d[2], l->out.d[2])),
                         layer_adaptive_window_sum(l->in.d[3], l->out.d[3]));
    kind_count_bytes(l);
}

static void adaptive_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    (void)w;
    int64_t planes = l->in.d[0] * l->in.d[1], h = l->in.d[2], wd = l->in.d[3];
    int64_t oh = l->out.d[2], ow = l->out.d[3];
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t y = 0; y < oh; y++)
            for (int64_t x = 0; x < ow; x++) {
                int64_t y0 = (int64_t)floor((double)y * h / oh), y1 = (int64_t)ceil((double)(y + 1) * h / oh);
                int64_t x0 = (int64_t)floor((double)x * wd / ow), x1 = (int64_t)ceil((double)(x + 1) * wd / ow);
                double sum = 0.0;
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++)
                        sum += in[(pl * h + iy) * wd + ix];
                out[(pl * oh + y) * ow + x] = (float)(sum / (double)((y1 - y0) * (x1 - x0)));
            }
}

static void adaptive_backward(const layer *l, const float *const *ins, const float *w, const float *out,
                              const float *dout, float *const *din, float *dw)
{
    (void)ins, (void)w, (void)out, (void)dw;
    int64_t planes = l->in.d[0] * l->in.d[1], h = l->in.d[2], wd = l->in.d[3];
    int64_t oh = l->out.d[2], ow = l->out.d[3];
    double *g = xcalloc((size_t)shape_numel(&l->in), sizeof *g);
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t y = 0; y < oh; y++)
            for (int64_t x = 0; x < ow; x++) {
                int64_t y0 = (int64_t)floor((double)y * h / oh), y1 = (int64_t)ceil((double)(y + 1) * h / oh);
                int64_t x0 = (int64_t)floor((double)x * wd / ow), x1 = (int64_t)ceil((double)(x + 1) * wd / ow);
                double share = dout[(pl * oh + y) * ow + x] / (double)((y1 - y0) * (x1 - x0));
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++)
                        g[(pl * h + iy) * wd + ix] += share;
            }
    kind_store_grad(din[0], g, shape_numel(&l->in));
}

const layer_desc layer_adaptive_avgpool2d_desc = {
    .name = "adaptive_avgpool2d", .n_inputs = 1, .params = adaptive_params,
    .infer = adaptive_infer, .count = adaptive_count, .reference = adaptive_reference,
    .tolerance = 1e-6, .backward = adaptive_backward,
};

/* ---- mean: x.mean(dim, keepdim) over one dim or two next to each other ------------------ */

static const layer_param_spec mean_params[] = {
    {"dim", LP_PAIR, P_OFF(mean_dims), true, INT64_MIN, NULL},
    {"keepdim", LP_BOOL, P_OFF(keepdim), false, 0, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static int mean_infer(layer *l, char *err, size_t len)
{
    int64_t r = l->in.rank, a = l->p.mean_dims[0], b = l->p.mean_dims[1];
    a += a < 0 ? r : 0;
    b += b < 0 ? r : 0;
    if (a > b) {
        int64_t t = a;
        a = b, b = t;
    }
    if (a < 1 || b >= r)
        return kind_fail(err, len, "dim [%lld, %lld] must name dims from 1 to %lld of a rank-%lld input (dim 0 is "
                                   "the batch; negative dims count from the end)",
                         (long long)l->p.mean_dims[0], (long long)l->p.mean_dims[1], (long long)(r - 1), (long long)r);
    if (b - a > 1)
        return kind_fail(err, len, "dim [%lld, %lld]: the dims averaged must be one, or two next to each other",
                         (long long)l->p.mean_dims[0], (long long)l->p.mean_dims[1]);
    l->p.mean_dims[0] = a, l->p.mean_dims[1] = b;
    shape_t o = {0, {0}};
    for (int64_t k = 0; k < r; k++)
        if (k < a || k > b)
            o.d[o.rank++] = l->in.d[k];
        else if (l->p.keepdim)
            o.d[o.rank++] = 1;
    l->out = o;
    return 0;
}

void layer_mean_dims(const layer *l, int64_t *outer, int64_t *size, int64_t *inner)
{
    *outer = 1, *size = 1, *inner = 1;
    for (int64_t k = 0; k < l->in.rank; k++)
        *(k < l->p.mean_dims[0] ? outer : k > l->p.mean_dims[1] ? inner : size) *= l->in.d[k];
}

/* one add per input element (the division per output is left out, as for the pools) */
static void mean_count(layer *l)
{
    l->n_weights = l->n_weight_floats = l->macs = 0;
    l->flops = shape_numel(&l->in);
    kind_count_bytes(l);
}

static void mean_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    (void)w;
    int64_t outer, size, inner;
    layer_mean_dims(l, &outer, &size, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double sum = 0.0;
            for (int64_t k = 0; k < size; k++)
                sum += in[(o * size + k) * inner + i];
            out[o * inner + i] = (float)(sum / (double)size);
        }
}

static void mean_backward(const layer *l, const float *const *ins, const float *w, const float *out,
                          const float *dout, float *const *din, float *dw)
{
    (void)ins, (void)w, (void)out, (void)dw;
    int64_t outer, size, inner;
    layer_mean_dims(l, &outer, &size, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++)
            for (int64_t k = 0; k < size; k++)
                din[0][(o * size + k) * inner + i] = (float)(dout[o * inner + i] / (double)size);
}

const layer_desc layer_mean_desc = {
    .name = "mean", .n_inputs = 1, .params = mean_params, .infer = mean_infer, .count = mean_count,
    .reference = mean_reference, .tolerance = 1e-6, .backward = mean_backward,
};
