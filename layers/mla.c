/* mla: DeepSeek-V2's and V3's multi-head latent attention (transformers'
 * modeling_deepseek_v2.py, DeepseekV2Attention), from the query and the latent to the
 * heads' outputs before o_proj. The projections around it are linear layers: q_proj (or
 * q_a_proj, q_a_layernorm and q_b_proj) before input 0, kv_a_proj_with_mqa before input
 * 1, o_proj after.
 *
 * Inputs: q [N, T, H * (dn + dr)] (each head's dn dims without rope, then its dr =
 * head_dim with), and kv [N, T, L + dr] (L = kv_lora_rank: each token's compressed
 * latent, then its key's rope part, one for all heads). Output [N, T, H * dv].
 * Per token: c = RMSNorm(latent) (kv_a_layernorm, eps); per head h, its key is
 * [W_UK_h c, rope(k_pe)] and its value W_UV_h c, where kv_b_proj's weight [H * (dn + dv),
 * L] holds W_UK_h (dn rows) then W_UV_h (dv rows) for each head in turn; its query is
 * [q_nope, rope(q_pe)]. rope turns interleaved pairs (x[2i], x[2i + 1]), as DeepSeek's
 * checkpoints are trained (transformers' view_as_complex form); the rope parameters are
 * rope's (layers/llm.c), over head_dim dims. Scores are q . k * scale, scale (0: the
 * default) 1 / sqrt(dn + dr), times mscale^2 where yarn gives mscale_all_dim (mscale =
 * 0.1 mscale_all_dim ln(factor) + 1, as DeepseekV2Attention scales its softmax), then a
 * causal softmax: query t at position kv_len + t sees positions <= kv_len + t.
 *
 * The decode cache holds per cached token what the keys and values are computed from:
 * c and the turned k_pe, L + dr floats (576 for DeepSeek-V2 and V3, against 2 * H * 128 =
 * 4096 for V2-Lite's 16 heads expanded), [N, kv_len, L + dr] after the parameters.
 * The reference expands every key and value, as transformers does; the backends may
 * absorb W_UK_h into the query and W_UV_h after the sums, as vLLM and SGLang run decode
 * (layers/cpu/llm_cpu.c says what it runs). FLOPs are counted as absorbed (docs/flops.md). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kind_util.h"
#include "util.h"

static const layer_param_spec mla_params[] = {
    {"num_heads", LP_INT, P_OFF(num_heads), true, 1, NULL},
    {"kv_lora_rank", LP_INT, P_OFF(kv_lora_rank), true, 1, NULL},
    {"qk_nope_head_dim", LP_INT, P_OFF(qk_nope_head_dim), true, 1, NULL},
    {"qk_rope_head_dim", LP_INT, P_OFF(head_dim), true, 2, NULL},
    {"v_head_dim", LP_INT, P_OFF(v_head_dim), true, 1, NULL},
    {"eps", LP_FLOAT, P_OFF(eps), false, 0, NULL},
    {"scale", LP_FLOAT, P_OFF(attn_scale), false, 0, NULL},
    KIND_ROPE_PARAMS,
    {"kv_len", LP_INT, P_OFF(kv_len), false, 0, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static void mla_defaults(layer_params *p)
{
    kind_rope_defaults(p);
    p->eps = 1e-6;
    p->causal = true; /* the pairs and the mask are attention's causal ones */
}

static int mla_infer(layer *l, char *err, size_t len)
{
    const layer_params *p = &l->p;
    char a[96], b[96];
    if (p->head_dim % 2)
        return kind_fail(err, len, "qk_rope_head_dim must be even (rope turns pairs), got %lld", (long long)p->head_dim);
    if (!(p->eps > 0))
        return kind_fail(err, len, "eps must be above 0, got %g", p->eps);
    if (!(p->attn_scale >= 0) || !isfinite(p->attn_scale))
        return kind_fail(err, len, "scale must be a finite number, 0 or above (0: the default), got %g", p->attn_scale);
    if (kind_rope_check(l, err, len))
        return -1;
    int64_t qd = layer_count_mul(p->num_heads, p->qk_nope_head_dim + p->head_dim), kd = p->kv_lora_rank + p->head_dim;
    const shape_t *q = &l->ins[0], *kv = &l->ins[1];
    if (q->rank != 3 || q->d[2] != qd)
        return kind_fail(err, len, "mla: the query (input 0) expects [N, T, %lld] (%lld heads of %lld + %lld), got %s",
                         (long long)qd, (long long)p->num_heads, (long long)p->qk_nope_head_dim,
                         (long long)p->head_dim, shape_format(q, a, sizeof a));
    if (kv->rank != 3 || kv->d[0] != q->d[0] || kv->d[1] != q->d[1] || kv->d[2] != kd)
        return kind_fail(err, len, "mla: the latent (input 1) expects [%lld, %lld, %lld] (kv_lora_rank %lld + "
                                   "qk_rope_head_dim %lld for the query's %s), got %s",
                         (long long)q->d[0], (long long)q->d[1], (long long)kd, (long long)p->kv_lora_rank,
                         (long long)p->head_dim, shape_format(q, b, sizeof b), shape_format(kv, a, sizeof a));
    l->out = *q;
    l->out.d[2] = layer_count_mul(p->num_heads, p->v_head_dim);
    return 0;
}

int64_t layer_mla_param_floats(const layer *l)
{
    const layer_params *p = &l->p;
    return layer_count_add(p->kv_lora_rank, layer_count_mul(layer_count_mul(p->num_heads, p->qk_nope_head_dim +
                                                                                           p->v_head_dim),
                                                            p->kv_lora_rank));
}

/* yarn's mscale: 0.1 m ln(s) + 1 above a factor of 1 (DeepSeek's yarn_get_mscale) */
double layer_mla_scale(const layer *l)
{
    const layer_params *p = &l->p;
    if (p->attn_scale > 0)
        return p->attn_scale;
    double s = 1.0 / sqrt((double)(p->qk_nope_head_dim + p->head_dim));
    if (p->rope_type == ROPE_YARN && p->mscale_all_dim > 0 && p->rope_factor > 1) {
        double m = 0.1 * p->mscale_all_dim * log(p->rope_factor) + 1.0;
        s *= m * m;
    }
    return s;
}

static void mla_count(layer *l)
{
    const layer_params *p = &l->p;
    int64_t n = l->in.d[0], t = l->in.d[1], h = p->num_heads, lr = p->kv_lora_rank, dr = p->head_dim;
    int64_t pairs = layer_attention_pairs(l), per = layer_count_mul(n, h);
    l->n_weights = layer_mla_param_floats(l);
    l->n_weight_floats = layer_count_add(l->n_weights, layer_count_mul(layer_count_mul(n, p->kv_len), lr + dr));
    /* absorbed, per query and head: W_UK_h into the query (dn L) and W_UV_h out of the
     * sums (L dv); per (query, key) pair and head: the score over L + dr, the value sum
     * over L */
    l->macs = layer_count_add(layer_count_mul(per, layer_count_mul(t, (p->qk_nope_head_dim + p->v_head_dim) * lr)),
                              layer_count_mul(per, layer_count_mul(pairs, 2 * lr + dr)));
    /* 2 per MAC; the scale and softmax 6 per score (as attention); the latent's RMSNorm 4
     * per element; rope 3 per element turned (the query's heads and the key's part) */
    l->flops = layer_count_add(layer_count_add(layer_count_mul(2, l->macs), layer_count_mul(6, layer_count_mul(per, pairs))),
                               layer_count_add(layer_count_mul(4, layer_count_mul(n * t, lr)),
                                               layer_count_mul(3, layer_count_mul(n * t, (h + 1) * dr))));
    kind_count_bytes(l);
}

static void mla_init(const layer *l, float *w, layer_rng *rng)
{
    const layer_params *p = &l->p;
    float b = (float)(1.0 / sqrt((double)p->kv_lora_rank));
    layer_fill_uniform(w, p->kv_lora_rank, 0.5f, 1.5f, rng);
    int64_t np = layer_mla_param_floats(l);
    layer_fill_uniform(w + p->kv_lora_rank, np - p->kv_lora_rank, -b, b, rng);
    layer_fill_uniform(w + np, l->n_weight_floats - np, -1.0f, 1.0f, rng);
}

/* x [head_dim] turned in place at token t (interleaved pairs), in double */
static void rope_pairs(const layer *l, const float *inv, double scale, int64_t t, double *x)
{
    for (int64_t i = 0; i < l->p.head_dim / 2; i++) {
        double a = layer_rope_angle(l, inv, t, i), c = cos(a) * scale, s = sin(a) * scale;
        double x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = x0 * c - x1 * s, x[2 * i + 1] = x1 * c + x0 * s;
    }
}

static void mla_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const layer_params *p = &l->p;
    int64_t n = l->in.d[0], t_len = l->in.d[1], h = p->num_heads, lr = p->kv_lora_rank, dr = p->head_dim,
            dn = p->qk_nope_head_dim, dv = p->v_head_dim, s = p->kv_len, keys = s + t_len, kd = lr + dr;
    const float *norm = w, *wb = w + lr, *cache = w + layer_mla_param_floats(l);
    float *inv = xmalloc((size_t)(dr / 2) * sizeof *inv);
    layer_rope_inv_freq(l, inv);
    double rs = layer_rope_attention_factor(l), scale = layer_mla_scale(l);
    /* every key's latent and rope part [keys][L + dr], then expanded per head: k_nope
     * [keys][H][dn], v [keys][H][dv] */
    double *lat = xmalloc((size_t)(keys * kd) * sizeof *lat), *kn = xmalloc((size_t)(keys * h * dn) * sizeof *kn),
           *v = xmalloc((size_t)(keys * h * dv) * sizeof *v), *q = xmalloc((size_t)(dn + dr) * sizeof *q),
           *sc = xmalloc((size_t)keys * sizeof *sc);
    for (int64_t b = 0; b < n; b++) {
        for (int64_t j = 0; j < keys; j++) {
            double *r = lat + j * kd;
            if (j < s) {
                for (int64_t i = 0; i < kd; i++)
                    r[i] = cache[(b * s + j) * kd + i];
                continue;
            }
            const float *x = ins[1] + (b * t_len + (j - s)) * kd;
            double sq = 0;
            for (int64_t i = 0; i < lr; i++)
                sq += (double)x[i] * x[i];
            double rms = 1.0 / sqrt(sq / (double)lr + p->eps);
            for (int64_t i = 0; i < lr; i++)
                r[i] = x[i] * rms * norm[i];
            for (int64_t i = 0; i < dr; i++)
                r[lr + i] = x[lr + i];
            rope_pairs(l, inv, rs, j - s, r + lr);
        }
        for (int64_t j = 0; j < keys; j++)
            for (int64_t hh = 0; hh < h; hh++)
                for (int64_t o = 0; o < dn + dv; o++) {
                    const float *row = wb + (hh * (dn + dv) + o) * lr;
                    double acc = 0;
                    for (int64_t i = 0; i < lr; i++)
                        acc += row[i] * lat[j * kd + i];
                    if (o < dn)
                        kn[(j * h + hh) * dn + o] = acc;
                    else
                        v[(j * h + hh) * dv + (o - dn)] = acc;
                }
        for (int64_t t = 0; t < t_len; t++)
            for (int64_t hh = 0; hh < h; hh++) {
                const float *x = ins[0] + ((b * t_len + t) * h + hh) * (dn + dr);
                for (int64_t i = 0; i < dn + dr; i++)
                    q[i] = x[i];
                rope_pairs(l, inv, rs, t, q + dn);
                double top = -INFINITY, sum = 0;
                int64_t last = s + t; /* causal: positions <= s + t */
                for (int64_t j = 0; j <= last; j++) {
                    double dot = 0;
                    for (int64_t i = 0; i < dn; i++)
                        dot += q[i] * kn[(j * h + hh) * dn + i];
                    for (int64_t i = 0; i < dr; i++)
                        dot += q[dn + i] * lat[j * kd + lr + i];
                    sc[j] = dot * scale;
                    top = sc[j] > top ? sc[j] : top;
                }
                for (int64_t j = 0; j <= last; j++)
                    sum += (sc[j] = exp(sc[j] - top));
                float *y = out + ((b * t_len + t) * h + hh) * dv;
                for (int64_t i = 0; i < dv; i++) {
                    double acc = 0;
                    for (int64_t j = 0; j <= last; j++)
                        acc += sc[j] * v[(j * h + hh) * dv + i];
                    y[i] = (float)(acc / sum);
                }
            }
    }
    free(inv), free(lat), free(kn), free(v), free(q), free(sc);
}

const layer_desc layer_mla_desc = {
    .name = "mla", .n_inputs = 2, .params = mla_params, .defaults = mla_defaults, .infer = mla_infer,
    .count = mla_count, .init_weights = mla_init, .reference = mla_reference, .tolerance = 2e-6,
};
