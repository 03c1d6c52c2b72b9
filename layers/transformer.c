/* The kinds of transformer blocks, as torch.nn defines them: layernorm (over the last
 * dimension), groupnorm (nn.GroupNorm, the UNet's and diffusion models'), gelu (exact, or the tanh approximation) and multihead_attention
 * (self-attention as nn.MultiheadAttention with batch_first=True, on [N, S, E]).
 *
 * multihead_attention's weights, in torch's order: in_proj_weight [3E, E] (the query,
 * key and value projections packed), in_proj_bias [3E], out_proj.weight [E, E],
 * out_proj.bias [E] (the biases with bias: true). Per head h of E / num_heads columns:
 * softmax(Q_h K_h^T / sqrt(E / num_heads)) V_h, the heads side by side, then the out
 * projection. FLOPs (docs/flops.md): the four projections' 2 per MAC plus their bias
 * adds, QK^T and AV 2 per MAC each, the scale 1 and the softmax 5 per score. */
#include <math.h>
#include <stdlib.h>

#include "kind_util.h"
#include "util.h"

/* ---- layernorm ------------------------------------------------------------------------ */

static const layer_param_spec layernorm_params[] = {
    {"normalized_shape", LP_INT, P_OFF(normalized_shape), false, 1, NULL},
    {"eps", LP_FLOAT, P_OFF(eps), false, 0, NULL},
    {"elementwise_affine", LP_BOOL, P_OFF(affine), false, 0, NULL},
    {"bias", LP_BOOL, P_OFF(bias), false, 0, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static void layernorm_defaults(layer_params *p)
{
    p->eps = 1e-5;
    p->affine = true;
    p->bias = true;
}

static int layernorm_infer(layer *l, char *err, size_t len)
{
    int64_t d = l->in.d[l->in.rank - 1];
    if (l->p.normalized_shape == 0)
        l->p.normalized_shape = d;
    if (l->p.normalized_shape != d)
        return kind_fail(err, len, "normalized_shape %lld must be the input's last dimension, %lld (layerbench "
                                   "normalizes over the last dimension only)",
                         (long long)l->p.normalized_shape, (long long)d);
    if (!(l->p.eps > 0))
        return kind_fail(err, len, "eps must be above 0, got %g", l->p.eps);
    l->out = l->in;
    return 0;
}

/* gamma[D] then beta[D] (beta with bias only; neither without elementwise_affine) */
static void layernorm_count(layer *l)
{
    int64_t d = l->p.normalized_shape;
    l->n_weights = l->n_weight_floats = l->p.affine ? (l->p.bias ? 2 * d : d) : 0;
    l->macs = 0;
    /* per element: the mean's add, the subtraction, the variance's multiply and add,
     * the scale; with affine, gamma's multiply and beta's add */
    l->flops = layer_count_mul(l->p.affine ? 7 : 5, shape_numel(&l->out));
    kind_count_bytes(l);
}

static void layernorm_init(const layer *l, float *w, layer_rng *rng)
{
    int64_t d = l->p.normalized_shape;
    layer_fill_uniform(w, d, 0.5f, 1.5f, rng);
    if (l->n_weight_floats > d)
        layer_fill_uniform(w + d, d, -0.5f, 0.5f, rng);
}

/* A row's mean and 1 / sqrt(var + eps), the variance biased as torch normalises */
static void row_stats(const float *x, int64_t d, double eps, double *mean, double *rstd)
{
    double m = 0, var = 0;
    for (int64_t i = 0; i < d; i++)
        m += x[i];
    m /= (double)d;
    for (int64_t i = 0; i < d; i++)
        var += (x[i] - m) * (x[i] - m);
    *mean = m, *rstd = 1.0 / sqrt(var / (double)d + eps);
}

static void layernorm_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    int64_t d = l->p.normalized_shape, rows = shape_numel(&l->in) / d;
    for (int64_t r = 0; r < rows; r++) {
        const float *x = in + r * d;
        double mean, rstd;
        row_stats(x, d, l->p.eps, &mean, &rstd);
        for (int64_t i = 0; i < d; i++) {
            double y = (x[i] - mean) * rstd;
            if (l->p.affine)
                y = y * w[i] + (l->n_weight_floats > d ? w[d + i] : 0.0);
            out[r * d + i] = (float)y;
        }
    }
}

/* Per row, with x^ = (x - mean) rstd and g = d out * gamma: d x = rstd (g - mean(g) -
 * x^ mean(g x^)); d gamma = sum over rows of d out x^, d beta of d out */
static void layernorm_backward(const layer *l, const float *const *ins, const float *w, const float *out,
                               const float *dout, float *const *din, float *dw)
{
    (void)out;
    int64_t d = l->p.normalized_shape, rows = shape_numel(&l->in) / d;
    double *gw = xcalloc((size_t)l->n_weight_floats + 1, sizeof *gw);
    for (int64_t r = 0; r < rows; r++) {
        const float *x = ins[0] + r * d, *dy = dout + r * d;
        double mean, rstd, mg = 0, mgx = 0;
        row_stats(x, d, l->p.eps, &mean, &rstd);
        for (int64_t i = 0; i < d; i++) {
            double xh = (x[i] - mean) * rstd, g = dy[i] * (l->p.affine ? w[i] : 1.0);
            mg += g, mgx += g * xh;
            if (l->p.affine)
                gw[i] += dy[i] * xh;
            if (l->n_weight_floats > d)
                gw[d + i] += dy[i];
        }
        mg /= (double)d, mgx /= (double)d;
        for (int64_t i = 0; i < d; i++) {
            double xh = (x[i] - mean) * rstd, g = dy[i] * (l->p.affine ? w[i] : 1.0);
            din[0][r * d + i] = (float)(rstd * (g - mg - xh * mgx));
        }
    }
    kind_store_grad(dw, gw, l->n_weight_floats);
}

/* ---- groupnorm: torch.nn.GroupNorm over [N, C, *] ---------------------------------------- */

static const layer_param_spec groupnorm_params[] = {
    {"num_groups", LP_INT, P_OFF(num_groups), true, 1, NULL},
    {"num_channels", LP_INT, P_OFF(num_channels), false, 1, NULL},
    {"eps", LP_FLOAT, P_OFF(eps), false, 0, NULL},
    {"affine", LP_BOOL, P_OFF(affine), false, 0, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static void groupnorm_defaults(layer_params *p)
{
    p->eps = 1e-5;
    p->affine = true;
}

static int groupnorm_infer(layer *l, char *err, size_t len)
{
    if (l->in.rank < 2)
        return kind_fail(err, len, "groupnorm expects [N, C, ...], got a rank-%d input", (int)l->in.rank);
    int64_t c = l->in.d[1];
    if (l->p.num_channels && l->p.num_channels != c)
        return kind_fail(err, len, "num_channels %lld differs from the input's %lld channels", (long long)l->p.num_channels,
                         (long long)c);
    if (c % l->p.num_groups)
        return kind_fail(err, len, "num_groups %lld must divide the input's %lld channels", (long long)l->p.num_groups,
                         (long long)c);
    if (!(l->p.eps > 0))
        return kind_fail(err, len, "eps must be above 0, got %g", l->p.eps);
    l->p.num_channels = c;
    l->out = l->in;
    return 0;
}

/* gamma[C] then beta[C], with affine */
static void groupnorm_count(layer *l)
{
    l->n_weights = l->n_weight_floats = l->p.affine ? 2 * l->p.num_channels : 0;
    l->macs = 0;
    /* per element as layernorm's: the mean's add, the subtraction, the variance's
     * multiply and add, the scale; with affine, gamma's multiply and beta's add */
    l->flops = layer_count_mul(l->p.affine ? 7 : 5, shape_numel(&l->out));
    kind_count_bytes(l);
}

static void groupnorm_init(const layer *l, float *w, layer_rng *rng)
{
    int64_t c = l->p.num_channels;
    layer_fill_uniform(w, c, 0.5f, 1.5f, rng);
    layer_fill_uniform(w + c, c, -0.5f, 0.5f, rng);
}

/* A group's channels are contiguous in [N, C, *]: each (sample, group) is one run of
 * C / num_groups channels of `spatial` elements. */
static void groupnorm_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    int64_t c = l->p.num_channels, g = l->p.num_groups, cg = c / g;
    int64_t spatial = shape_numel(&l->in) / (l->in.d[0] * c), run = cg * spatial;
    for (int64_t b = 0; b < l->in.d[0] * g; b++) {
        const float *x = in + b * run;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < run; i++)
            mean += x[i];
        mean /= (double)run;
        for (int64_t i = 0; i < run; i++)
            var += (x[i] - mean) * (x[i] - mean);
        double rstd = 1.0 / sqrt(var / (double)run + l->p.eps);
        for (int64_t i = 0; i < run; i++) {
            int64_t ch = (b % g) * cg + i / spatial;
            double y = (x[i] - mean) * rstd;
            if (l->p.affine)
                y = y * w[ch] + w[c + ch];
            out[b * run + i] = (float)y;
        }
    }
}

const layer_desc layer_groupnorm_desc = {
    .name = "groupnorm", .n_inputs = 1, .params = groupnorm_params, .defaults = groupnorm_defaults,
    .infer = groupnorm_infer, .count = groupnorm_count, .init_weights = groupnorm_init,
    .reference = groupnorm_reference, .tolerance = 2e-6,
};

const layer_desc layer_layernorm_desc = {
    .name = "layernorm", .n_inputs = 1, .params = layernorm_params, .defaults = layernorm_defaults,
    .infer = layernorm_infer, .count = layernorm_count, .init_weights = layernorm_init,
    .reference = layernorm_reference, .tolerance = 2e-6, .backward = layernorm_backward,
};

/* ---- gelu ------------------------------------------------------------------------------- */

static const char *const gelu_modes[] = {"none", "tanh", NULL};

static const layer_param_spec gelu_params[] = {
    {"approximate", LP_ENUM, P_OFF(mode), false, 0, gelu_modes},
    {NULL, 0, 0, false, 0, NULL},
};

static int gelu_infer(layer *l, char *err, size_t len)
{
    (void)err, (void)len;
    l->out = l->in;
    return 0;
}

/* exact: x / 2 (1 + erf(x / sqrt 2)): the scale, erf, the add and two multiplies, 5;
 * tanh: the cube (2), its multiply-add (2), the scale, tanh, the add and two
 * multiplies, 9 */
static void gelu_count(layer *l)
{
    l->n_weights = l->n_weight_floats = l->macs = 0;
    l->flops = layer_count_mul(l->p.mode == GELU_TANH ? 9 : 5, shape_numel(&l->out));
    kind_count_bytes(l);
}

static void gelu_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    (void)w;
    for (int64_t i = 0, n = shape_numel(&l->in); i < n; i++) {
        double x = in[i];
        out[i] = (float)(l->p.mode == GELU_TANH
                             ? 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)))
                             : 0.5 * x * (1.0 + erf(x / sqrt(2.0))));
    }
}

/* exact: Phi(x) + x phi(x); tanh: 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2 / pi) (1 + 3 * 0.044715 x^2) */
static void gelu_backward(const layer *l, const float *const *ins, const float *w, const float *out,
                          const float *dout, float *const *din, float *dw)
{
    (void)w, (void)out, (void)dw;
    for (int64_t i = 0, n = shape_numel(&l->in); i < n; i++) {
        double x = ins[0][i], g;
        if (l->p.mode == GELU_TANH) {
            double k = sqrt(2.0 / M_PI), t = tanh(k * (x + 0.044715 * x * x * x));
            g = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
        } else {
            g = 0.5 * (1.0 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
        }
        din[0][i] = (float)(dout[i] * g);
    }
}

const layer_desc layer_gelu_desc = {
    .name = "gelu", .n_inputs = 1, .params = gelu_params, .infer = gelu_infer, .count = gelu_count,
    .reference = gelu_reference, .tolerance = 1e-6, .backward = gelu_backward,
};

/* ---- multihead_attention ------------------------------------------------------------------ */

static const layer_param_spec mha_params[] = {
    {"embed_dim", LP_INT, P_OFF(embed_dim), true, 1, NULL},
    {"num_heads", LP_INT, P_OFF(num_heads), true, 1, NULL},
    {"bias", LP_BOOL, P_OFF(bias), false, 0, NULL},
    {"dropout", LP_FLOAT, P_OFF(p), false, 0, NULL},
    {"batch_first", LP_BOOL, P_OFF(batch_first), false, 0, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static void mha_defaults(layer_params *p)
{
    p->bias = true;
    p->batch_first = true;
}

static int mha_infer(layer *l, char *err, size_t len)
{
    const layer_params *p = &l->p;
    char s[96];
    if (!p->batch_first)
        return kind_fail(err, len, "batch_first: false is not supported: layerbench's tokens are [N, S, E] "
                                   "(write batch_first: true, and the model as nn.MultiheadAttention(batch_first=True))");
    if (l->in.rank != 3)
        return kind_fail(err, len, "multihead_attention expects tokens [N, S, E], got %s (a per-sample input of "
                                   "[S, E])",
                         shape_format(&l->in, s, sizeof s));
    if (l->in.d[2] != p->embed_dim)
        return kind_fail(err, len, "embed_dim %lld differs from the input's last dimension %lld",
                         (long long)p->embed_dim, (long long)l->in.d[2]);
    if (p->embed_dim % p->num_heads)
        return kind_fail(err, len, "embed_dim %lld is not divisible by num_heads %lld (each head takes embed_dim / "
                                   "num_heads columns)",
                         (long long)p->embed_dim, (long long)p->num_heads);
    if (p->p > 1.0)
        return kind_fail(err, len, "dropout must be between 0 and 1, got %g", p->p);
    l->out = l->in;
    return 0;
}

static void mha_count(layer *l)
{
    int64_t n = l->in.d[0], s = l->in.d[1], e = l->p.embed_dim, h = l->p.num_heads;
    int64_t tokens = layer_count_mul(n, s);
    l->n_weights = l->n_weight_floats = layer_count_add(layer_count_mul(4, layer_count_mul(e, e)), l->p.bias ? 4 * e : 0);
    int64_t proj = layer_count_mul(layer_count_mul(tokens, e), 4 * e);                /* q, k, v and out: 4 E^2 per token */
    int64_t attn = layer_count_mul(2, layer_count_mul(layer_count_mul(tokens, s), e));      /* QK^T and AV: S E per token each */
    l->macs = layer_count_add(proj, attn);
    int64_t scores = layer_count_mul(layer_count_mul(n, h), layer_count_mul(s, s));
    l->flops = layer_count_add(layer_count_add(layer_count_mul(2, l->macs), layer_count_mul(6, scores)),
                         l->p.bias ? layer_count_mul(tokens, 4 * e) : 0);
    kind_count_bytes(l);
}

static void mha_init(const layer *l, float *w, layer_rng *rng)
{
    /* torch: xavier_uniform for in_proj_weight, the Linear default for out_proj */
    int64_t e = l->p.embed_dim;
    float a = (float)sqrt(6.0 / (double)(e + 3 * e)), b = (float)(1.0 / sqrt((double)e));
    layer_fill_uniform(w, 3 * e * e, -a, a, rng);
    layer_fill_uniform(w + 3 * e * e, l->n_weight_floats - 3 * e * e, -b, b, rng);
}

/* Offsets of the four weight blocks (layer_weights: torch's order). */
void layer_mha_weights(const layer *l, const float *w, const float **in_w, const float **in_b, const float **out_w,
                       const float **out_b)
{
    int64_t e = l->p.embed_dim;
    *in_w = w;
    *in_b = l->p.bias ? w + 3 * e * e : NULL;
    *out_w = w + 3 * e * e + (l->p.bias ? 3 * e : 0);
    *out_b = l->p.bias ? *out_w + e * e : NULL;
}

/* The reference keeps one sample's projections and heads in double (its one allocation:
 * recomputing them would cost S times more). */
static void mha_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    int64_t n = l->in.d[0], s = l->in.d[1], e = l->p.embed_dim, h = l->p.num_heads, dh = e / h;
    const float *in_w, *in_b, *out_w, *out_b;
    layer_mha_weights(l, w, &in_w, &in_b, &out_w, &out_b);
    double *qkv = xmalloc((size_t)(s * 3 * e) * sizeof *qkv), *o = xmalloc((size_t)(s * e) * sizeof *o),
           *p = xmalloc((size_t)s * sizeof *p);
    double scale = 1.0 / sqrt((double)dh);
    for (int64_t b = 0; b < n; b++) {
        const float *x = in + b * s * e;
        for (int64_t t = 0; t < s; t++)
            for (int64_t j = 0; j < 3 * e; j++) {
                double acc = in_b ? in_b[j] : 0.0;
                for (int64_t i = 0; i < e; i++)
                    acc += (double)x[t * e + i] * in_w[j * e + i];
                qkv[t * 3 * e + j] = acc;
            }
        for (int64_t hd = 0; hd < h; hd++)
            for (int64_t t = 0; t < s; t++) {
                const double *q = qkv + t * 3 * e + hd * dh;
                double m = -INFINITY, sum = 0;
                for (int64_t u = 0; u < s; u++) {
                    const double *k = qkv + u * 3 * e + e + hd * dh;
                    double dot = 0;
                    for (int64_t d = 0; d < dh; d++)
                        dot += q[d] * k[d];
                    p[u] = dot * scale;
                    m = p[u] > m ? p[u] : m;
                }
                for (int64_t u = 0; u < s; u++)
                    sum += p[u] = exp(p[u] - m);
                for (int64_t d = 0; d < dh; d++) {
                    double acc = 0;
                    for (int64_t u = 0; u < s; u++)
                        acc += p[u] * qkv[u * 3 * e + 2 * e + hd * dh + d];
                    o[t * e + hd * dh + d] = acc / sum;
                }
            }
        for (int64_t t = 0; t < s; t++)
            for (int64_t j = 0; j < e; j++) {
                double acc = out_b ? out_b[j] : 0.0;
                for (int64_t i = 0; i < e; i++)
                    acc += o[t * e + i] * out_w[j * e + i];
                out[b * s * e + t * e + j] = (float)acc;
            }
    }
    free(qkv), free(o), free(p);
}

/* One sample's heads: from its q, k, v (qkv [S, 3E]) and the heads' output gradient dO [S,
 * E], the probabilities recomputed, then dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(P
 * dP)), dQ = scale dS K, dK = scale dS^T Q into dqkv [S, 3E] (zeroed by the caller); the
 * heads' output into o [S, E] on the way */
static void mha_heads_backward(const layer *l, const double *qkv, const double *d_o, double *o, double *dqkv, double *p,
                               double *dp)
{
    int64_t s = l->in.d[1], e = l->p.embed_dim, h = l->p.num_heads, dh = e / h;
    double scale = 1.0 / sqrt((double)dh);
    for (int64_t hd = 0; hd < h; hd++)
        for (int64_t t = 0; t < s; t++) {
            const double *q = qkv + t * 3 * e + hd * dh, *g = d_o + t * e + hd * dh;
            double m = -INFINITY, sum = 0, dot = 0;
            for (int64_t u = 0; u < s; u++) {
                double acc = 0;
                for (int64_t d = 0; d < dh; d++)
                    acc += q[d] * qkv[u * 3 * e + e + hd * dh + d];
                p[u] = acc * scale;
                m = p[u] > m ? p[u] : m;
            }
            for (int64_t u = 0; u < s; u++)
                sum += p[u] = exp(p[u] - m);
            for (int64_t u = 0; u < s; u++) {
                const double *v = qkv + u * 3 * e + 2 * e + hd * dh;
                p[u] /= sum, dp[u] = 0;
                for (int64_t d = 0; d < dh; d++)
                    dp[u] += g[d] * v[d], o[t * e + hd * dh + d] += p[u] * v[d];
                dot += p[u] * dp[u];
            }
            for (int64_t u = 0; u < s; u++) {
                double ds = p[u] * (dp[u] - dot) * scale;
                for (int64_t d = 0; d < dh; d++) {
                    dqkv[t * 3 * e + hd * dh + d] += ds * qkv[u * 3 * e + e + hd * dh + d];
                    dqkv[u * 3 * e + e + hd * dh + d] += ds * q[d];
                    dqkv[u * 3 * e + 2 * e + hd * dh + d] += p[u] * g[d];
                }
            }
        }
}

/* Per sample: qkv = x W_in^T + b_in; dO = dY W_out and the out projection's gradients
 * (o from the heads); the heads' (mha_heads_backward); then the in projection's and
 * dX = dqkv W_in. The weights' gradients in the weights' order (layer_mha_weights). */
static void mha_backward(const layer *l, const float *const *ins, const float *w, const float *out, const float *dout,
                         float *const *din, float *dw)
{
    (void)out;
    int64_t n = l->in.d[0], s = l->in.d[1], e = l->p.embed_dim, bias = l->p.bias;
    const float *in_w, *in_b, *out_w, *out_b;
    layer_mha_weights(l, w, &in_w, &in_b, &out_w, &out_b);
    int64_t o_inb = 3 * e * e, o_outw = o_inb + (bias ? 3 * e : 0), o_outb = o_outw + e * e;
    double *gw = xcalloc((size_t)l->n_weight_floats, sizeof *gw), *qkv = xmalloc((size_t)(s * 3 * e) * sizeof *qkv);
    double *dqkv = xmalloc((size_t)(s * 3 * e) * sizeof *dqkv), *o = xmalloc((size_t)(s * e) * sizeof *o);
    double *d_o = xmalloc((size_t)(s * e) * sizeof *d_o), *p = xmalloc((size_t)(2 * s) * sizeof *p);
    for (int64_t b = 0; b < n; b++) {
        const float *x = ins[0] + b * s * e, *dy = dout + b * s * e;
        for (int64_t t = 0; t < s; t++) {
            for (int64_t j = 0; j < 3 * e; j++) {
                double acc = in_b ? in_b[j] : 0.0;
                for (int64_t i = 0; i < e; i++)
                    acc += (double)x[t * e + i] * in_w[j * e + i];
                qkv[t * 3 * e + j] = acc, dqkv[t * 3 * e + j] = 0;
            }
            for (int64_t i = 0; i < e; i++) {
                double acc = 0;
                for (int64_t j = 0; j < e; j++)
                    acc += (double)dy[t * e + j] * out_w[j * e + i];
                d_o[t * e + i] = acc, o[t * e + i] = 0;
            }
        }
        mha_heads_backward(l, qkv, d_o, o, dqkv, p, p + s);
        for (int64_t t = 0; t < s; t++) {
            for (int64_t j = 0; j < e; j++) {
                for (int64_t i = 0; i < e; i++)
                    gw[o_outw + j * e + i] += dy[t * e + j] * o[t * e + i];
                if (bias)
                    gw[o_outb + j] += dy[t * e + j];
            }
            for (int64_t j = 0; j < 3 * e; j++) {
                for (int64_t i = 0; i < e; i++)
                    gw[j * e + i] += dqkv[t * 3 * e + j] * x[t * e + i];
                if (bias)
                    gw[o_inb + j] += dqkv[t * 3 * e + j];
            }
            for (int64_t i = 0; i < e; i++) {
                double acc = 0;
                for (int64_t j = 0; j < 3 * e; j++)
                    acc += dqkv[t * 3 * e + j] * in_w[j * e + i];
                din[0][b * s * e + t * e + i] = (float)acc;
            }
        }
    }
    kind_store_grad(dw, gw, l->n_weight_floats);
    free(qkv), free(dqkv), free(o), free(d_o), free(p);
}

/* The stages every backend runs in this order: the packed q/k/v projection, the scaled
 * scores QK^T of every head, their softmax, the heads' outputs AV, the out-projection.
 * FLOPs as mha_count splits them (the scale goes with QK^T); bytes: what each stage reads
 * and writes, q/k/v and the scores included. */
static int mha_parts(const layer *l, layer_part_info *parts)
{
    int64_t n = l->in.d[0], s = l->in.d[1], e = l->p.embed_dim, h = l->p.num_heads;
    int64_t tokens = layer_count_mul(n, s), te = layer_count_mul(tokens, e), scores = layer_count_mul(layer_count_mul(n, h), layer_count_mul(s, s));
    int64_t bias = l->p.bias ? 1 : 0, ee = layer_count_mul(e, e);
    int64_t attn = layer_count_mul(2, layer_count_mul(layer_count_mul(tokens, s), e)); /* FLOPs of QK^T, and of AV */
    parts[0] = (layer_part_info){"in_proj", layer_count_add(layer_count_mul(6, layer_count_mul(te, e)), layer_count_mul(bias, layer_count_mul(3, te))),
                                 layer_count_mul(4, layer_count_add(layer_count_add(te, layer_count_mul(3, ee)), layer_count_add(layer_count_mul(3, bias * e),
                                                                                                    layer_count_mul(3, te))))};
    parts[1] = (layer_part_info){"qk", layer_count_add(attn, scores), layer_count_mul(4, layer_count_add(layer_count_mul(2, te), scores))};
    parts[2] = (layer_part_info){"softmax", layer_count_mul(5, scores), layer_count_mul(8, scores)};
    parts[3] = (layer_part_info){"av", attn, layer_count_mul(4, layer_count_add(scores, layer_count_mul(2, te)))};
    parts[4] = (layer_part_info){"out_proj", layer_count_add(layer_count_mul(2, layer_count_mul(te, e)), layer_count_mul(bias, te)),
                                 layer_count_mul(4, layer_count_add(layer_count_add(layer_count_mul(2, te), ee), bias * e))};
    return 5;
}

const layer_desc layer_multihead_attention_desc = {
    .name = "multihead_attention", .n_inputs = 1, .params = mha_params, .defaults = mha_defaults,
    .infer = mha_infer, .count = mha_count, .init_weights = mha_init, .reference = mha_reference,
    .tolerance = 5e-6, .parts = mha_parts, .backward = mha_backward,
};
