/* upsample: torch.nn.Upsample (F.interpolate) in modes nearest and bilinear, with size or
 * scale_factor, and align_corners for bilinear. The source coordinates follow
 * PyTorch's kernels exactly: with scale_factor given, the scale is 1 / scale_factor
 * (torch passes the factor on unless recompute_scale_factor is set), otherwise
 * in / out; bilinear without align_corners samples at (dst + 0.5) * scale - 0.5,
 * clamped at 0. FLOPs: none for nearest (a gather), 8 per output element for bilinear
 * (two lerps along the width, one along the height). */
#include <math.h>

#include "kind_util.h"

static const char *const upsample_modes[] = {"nearest", "bilinear", NULL};

static const layer_param_spec upsample_params[] = {
    {"size", LP_PAIR, P_OFF(output_size), false, 1, NULL},
    {"scale_factor", LP_FPAIR, P_OFF(scale_factor), false, 0, NULL},
    {"mode", LP_ENUM, P_OFF(mode), false, 0, upsample_modes},
    {"align_corners", LP_BOOL, P_OFF(align_corners), false, 0, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static int upsample_infer(layer *l, char *err, size_t len)
{
    layer_params *p = &l->p;
    if (kind_need_nchw(l, err, len))
        return -1;
    bool size = p->output_size[0] > 0, scale = p->scale_factor[0] > 0;
    if (size == scale)
        return kind_fail(err, len, "give either size or scale_factor, %s", size ? "not both" : "one of them");
    if (p->align_corners && p->mode != UPSAMPLE_BILINEAR)
        return kind_fail(err, len, "align_corners applies to bilinear only (mode is nearest)");
    int64_t o[2];
    for (int a = 0; a < 2; a++) {
        if (size) {
            o[a] = p->output_size[a];
        } else {
            double v = floor((double)l->in.d[2 + a] * p->scale_factor[a]);
            if (!(v >= 1) || v > (double)INT32_MAX)
                return kind_fail(err, len, "scale_factor %g gives %.0f along %s (expected 1 to %d)",
                                 p->scale_factor[a], v, a ? "the width" : "the height", INT32_MAX);
            o[a] = (int64_t)v;
        }
    }
    l->out = (shape_t){4, {l->in.d[0], l->in.d[1], o[0], o[1]}};
    return 0;
}

static void upsample_count(layer *l)
{
    l->n_weights = l->n_weight_floats = l->macs = 0;
    l->flops = l->p.mode == UPSAMPLE_BILINEAR ? layer_count_mul(8, shape_numel(&l->out)) : 0;
    kind_count_bytes(l);
}

double layer_upsample_scale(const layer *l, int axis)
{
    const layer_params *p = &l->p;
    int64_t in = l->in.d[2 + axis], out = l->out.d[2 + axis];
    if (p->mode == UPSAMPLE_BILINEAR && p->align_corners)
        return out > 1 ? (double)(in - 1) / (double)(out - 1) : 0.0;
    return p->scale_factor[axis] > 0 ? 1.0 / p->scale_factor[axis] : (double)in / (double)out;
}

int64_t layer_upsample_nearest(const layer *l, int axis, int64_t dst)
{
    /* torch's nearest_idx, in float as torch computes it for float tensors */
    int64_t in = l->in.d[2 + axis], out = l->out.d[2 + axis];
    if (out == in)
        return dst;
    if (out == 2 * in)
        return dst >> 1;
    double sf = l->p.scale_factor[axis];
    float scale = sf > 0 ? (float)(1.0 / sf) : (float)in / (float)out;
    int64_t s = (int64_t)floorf((float)dst * scale);
    return s < in - 1 ? s : in - 1;
}

void layer_upsample_linear(const layer *l, int axis, int64_t dst, int64_t *i0, int64_t *i1, double *w1)
{
    double scale = layer_upsample_scale(l, axis);
    int64_t in = l->in.d[2 + axis];
    double real = l->p.align_corners ? scale * (double)dst : scale * ((double)dst + 0.5) - 0.5;
    if (real < 0)
        real = 0;
    *i0 = (int64_t)real;
    if (*i0 > in - 1)
        *i0 = in - 1;
    *i1 = *i0 + (*i0 < in - 1);
    *w1 = real - (double)*i0;
}

static void upsample_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    (void)w;
    int64_t planes = l->in.d[0] * l->in.d[1], h = l->in.d[2], wd = l->in.d[3], oh = l->out.d[2], ow = l->out.d[3];
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t y = 0; y < oh; y++)
            for (int64_t x = 0; x < ow; x++) {
                const float *src = in + pl * h * wd;
                double v;
                if (l->p.mode == UPSAMPLE_NEAREST) {
                    v = src[layer_upsample_nearest(l, 0, y) * wd + layer_upsample_nearest(l, 1, x)];
                } else {
                    int64_t y0, y1, x0, x1;
                    double ly, lx;
                    layer_upsample_linear(l, 0, y, &y0, &y1, &ly);
                    layer_upsample_linear(l, 1, x, &x0, &x1, &lx);
                    v = (1 - ly) * ((1 - lx) * src[y0 * wd + x0] + lx * src[y0 * wd + x1]) +
                        ly * ((1 - lx) * src[y1 * wd + x0] + lx * src[y1 * wd + x1]);
                }
                out[(pl * oh + y) * ow + x] = (float)v;
            }
}

const layer_desc layer_upsample_desc = {
    .name = "upsample", .n_inputs = 1, .params = upsample_params, .infer = upsample_infer,
    .count = upsample_count, .reference = upsample_reference, .tolerance = 1e-6,
};
