/* batchnorm2d: torch.nn.BatchNorm2d in inference mode (running statistics); in training
 * mode (train_reference, backward) by the batch's own statistics over N, H and W.
 * Weights: gamma[C], beta[C], running_mean[C], running_var[C]. */
#include <math.h>

#include "kind_util.h"

static const layer_param_spec bn_params[] = {
    {"eps", LP_FLOAT, P_OFF(eps), false, 0, NULL},
    {"momentum", LP_FLOAT, P_OFF(momentum), false, 0, NULL},
    {"affine", LP_BOOL, P_OFF(affine), false, 0, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static void bn_defaults(layer_params *p)
{
    p->eps = 1e-5;
    p->momentum = 0.1;
    p->affine = true;
}

static int bn_infer(layer *l, char *err, size_t len)
{
    if (kind_need_nchw(l, err, len))
        return -1;
    if (!(l->p.eps > 0))
        return kind_fail(err, len, "eps must be greater than 0");
    l->out = l->in;
    return 0;
}

static void bn_count(layer *l)
{
    int64_t c = l->in.d[1];
    l->n_weights = l->p.affine ? layer_count_mul(2, c) : 0; /* running stats are buffers, not parameters */
    l->n_weight_floats = layer_count_mul(4, c);
    l->macs = 0;
    l->flops = layer_count_mul(2, shape_numel(&l->out)); /* x * scale + shift, folded per channel */
    kind_count_bytes(l);
}

static void bn_init(const layer *l, float *w, layer_rng *rng)
{
    int64_t c = l->in.d[1];
    layer_fill_uniform(w, c, 0.5f, 1.5f, rng);            /* gamma */
    layer_fill_uniform(w + c, c, -0.5f, 0.5f, rng);       /* beta */
    layer_fill_uniform(w + 2 * c, c, -0.5f, 0.5f, rng);   /* running mean */
    layer_fill_uniform(w + 3 * c, c, 0.25f, 2.0f, rng);   /* running var > 0 */
    if (!l->p.affine)
        for (int64_t i = 0; i < c; i++)
            w[i] = 1.0f, w[c + i] = 0.0f;
}

static void bn_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    int64_t n = l->in.d[0], c = l->in.d[1], hw = l->in.d[2] * l->in.d[3];
    for (int64_t b = 0; b < n; b++)
        for (int64_t ch = 0; ch < c; ch++) {
            double inv = 1.0 / sqrt((double)w[3 * c + ch] + l->p.eps);
            for (int64_t i = 0; i < hw; i++) {
                int64_t at = (b * c + ch) * hw + i;
                out[at] = (float)(((double)in[at] - w[2 * c + ch]) * inv * w[ch] + w[c + ch]);
            }
        }
}

/* Channel ch's mean and 1 / sqrt(var + eps) over the batch (var biased, as torch
 * normalises in training mode) */
static void bn_batch_stats(const layer *l, const float *in, int64_t ch, double *mean, double *rstd)
{
    int64_t n = l->in.d[0], c = l->in.d[1], hw = l->in.d[2] * l->in.d[3];
    double sum = 0.0, sq = 0.0;
    for (int64_t b = 0; b < n; b++)
        for (int64_t i = 0; i < hw; i++)
            sum += in[(b * c + ch) * hw + i];
    *mean = sum / (double)(n * hw);
    for (int64_t b = 0; b < n; b++)
        for (int64_t i = 0; i < hw; i++) {
            double v = in[(b * c + ch) * hw + i] - *mean;
            sq += v * v;
        }
    *rstd = 1.0 / sqrt(sq / (double)(n * hw) + l->p.eps);
}

/* The running statistics are what training updates, not what it normalises by: they are
 * not read here (the update itself, (1 - momentum) r + momentum s, is the kernels') */
static void bn_train_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    int64_t n = l->in.d[0], c = l->in.d[1], hw = l->in.d[2] * l->in.d[3];
    for (int64_t ch = 0; ch < c; ch++) {
        double mean, rstd;
        bn_batch_stats(l, ins[0], ch, &mean, &rstd);
        for (int64_t b = 0; b < n; b++)
            for (int64_t i = 0; i < hw; i++) {
                int64_t at = (b * c + ch) * hw + i;
                out[at] = (float)((ins[0][at] - mean) * rstd * w[ch] + w[c + ch]);
            }
    }
}

/* Per channel over its M = N H W values, with x^ = (x - mean) rstd: d gamma = sum d out
 * x^, d beta = sum d out, d x = gamma rstd / M (M d out - d beta - x^ d gamma) */
static void bn_backward(const layer *l, const float *const *ins, const float *w, const float *out,
                        const float *dout, float *const *din, float *dw)
{
    (void)out;
    int64_t n = l->in.d[0], c = l->in.d[1], hw = l->in.d[2] * l->in.d[3];
    double m = (double)(n * hw);
    for (int64_t ch = 0; ch < c; ch++) {
        double mean, rstd, dg = 0.0, db = 0.0;
        bn_batch_stats(l, ins[0], ch, &mean, &rstd);
        for (int64_t b = 0; b < n; b++)
            for (int64_t i = 0; i < hw; i++) {
                int64_t at = (b * c + ch) * hw + i;
                dg += dout[at] * (ins[0][at] - mean) * rstd;
                db += dout[at];
            }
        for (int64_t b = 0; b < n; b++)
            for (int64_t i = 0; i < hw; i++) {
                int64_t at = (b * c + ch) * hw + i;
                double xh = (ins[0][at] - mean) * rstd;
                din[0][at] = (float)(w[ch] * rstd / m * (m * dout[at] - db - xh * dg));
            }
        dw[ch] = l->p.affine ? (float)dg : 0.0f;
        dw[c + ch] = l->p.affine ? (float)db : 0.0f;
        dw[2 * c + ch] = dw[3 * c + ch] = 0.0f;
    }
}

const layer_desc layer_batchnorm2d_desc = {
    .name = "batchnorm2d",
    .n_inputs = 1,
    .params = bn_params,
    .defaults = bn_defaults,
    .infer = bn_infer,
    .count = bn_count,
    .init_weights = bn_init,
    .reference = bn_reference,
    .tolerance = 1e-6,
    .train_reference = bn_train_reference,
    .backward = bn_backward,
};
