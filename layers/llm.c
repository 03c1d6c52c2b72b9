/* The kinds of decoder LLMs, with the semantics of Hugging Face's Llama code
 * (modeling_llama.py): embedding, rmsnorm, rope and attention. A decoder layer is these
 * and the kinds it shares with other models: q/k/v/o and the MLP's projections are
 * linear layers, the SwiGLU activation silu and mul, the residuals add.
 *
 * embedding: token ids to rows of a [num_embeddings, embedding_dim] table. The harness
 *   draws every input uniformly in [-1, 1]; an embedding reads value x as the token id
 *   floor((x + 1) / 2 * num_embeddings), clamped to the table: ids spread over the
 *   vocabulary, the same on every backend and in the reference (layer_token_id).
 * rmsnorm: x / sqrt(mean(x^2) + eps) * weight over the last dimension, as LlamaRMSNorm.
 * rope: rotary position embedding of q or k, [N, T, num_heads * head_dim], in the
 *   rotate-half convention Llama applies: each head's dimension i < head_dim / 2 pairs
 *   with i + head_dim / 2; with interleaved, the original paper's (Meta's reference Llama,
 *   GPT-J): dimension 2i pairs with 2i + 1, at the same frequency i. Token t
 *   sits at position kv_len + t. Angles are computed in fp32 as Hugging Face computes
 *   them (inv_freq, then position * inv_freq), their cosines and sines in double; the
 *   rope_type linear divides the positions by factor, llama3 rescales inv_freq by
 *   wavelength, yarn blends the interpolated and extrapolated frequencies over a ramp
 *   between beta_fast and beta_slow rotations, longrope divides each frequency by its
 *   factor (short_factor while the sequence, kv_len + T, is within
 *   original_max_position_embeddings, long_factor past it) (layer_rope_inv_freq); yarn
 *   and longrope scale the cosines and sines by an attention factor, given or inferred
 *   from factor as transformers infers it (layer_rope_attention_factor).
 * attention: softmax(q k^T / sqrt(head_dim)) v per head, torch's
 *   scaled_dot_product_attention as Llama calls it, on q [N, T, H * D], k and v
 *   [N, T, Hkv * D] (grouped-query: query head h reads key/value head h / (H / Hkv)).
 *   With kv_len = S > 0 it attends to S cached tokens too: the KV cache, held as the
 *   layer's weights (no parameters), keys then values, each [N, Hkv, S, D] as Hugging
 *   Face's DynamicCache holds them. Query t sits at position S + t; causal: it sees keys
 *   at positions <= S + t; sliding_window W: and > S + t - W (Mistral's window). Without
 *   causal and cache, k and v may have tokens of their own (cross-attention: a UNet's
 *   text states). With sinks, head h's learned logit s_h joins every softmax of that
 *   head's scores, in the denominator only: exp(score) / (sum exp(scores) + exp(s_h)),
 *   as gpt-oss's attention sinks (a parameter per head, after the cache in the
 *   weights). FLOPs count the pairs the mask keeps, in closed form (docs/flops.md). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kind_util.h"
#include "util.h"

int64_t layer_token_id(const layer *l, float x)
{
    int64_t v = l->p.num_embeddings;
    double id = floor(((double)x + 1.0) * 0.5 * (double)v);
    return id < 0 ? 0 : id >= (double)v ? v - 1 : (int64_t)id;
}

/* ---- embedding -------------------------------------------------------------------------- */

static const layer_param_spec embedding_params[] = {
    {"num_embeddings", LP_INT, P_OFF(num_embeddings), true, 1, NULL},
    {"embedding_dim", LP_INT, P_OFF(embedding_dim), true, 1, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static int embedding_infer(layer *l, char *err, size_t len)
{
    char s[96];
    if (l->in.rank >= SHAPE_MAX_RANK)
        return kind_fail(err, len, "embedding expects token ids [N, T], got %s", shape_format(&l->in, s, sizeof s));
    l->out = l->in;
    l->out.d[l->out.rank++] = l->p.embedding_dim;
    return 0;
}

/* only the rows it gathers move: the ids, one row per id, the output */
static void embedding_count(layer *l)
{
    int64_t ids = shape_numel(&l->in), out = shape_numel(&l->out);
    l->n_weights = l->n_weight_floats = layer_count_mul(l->p.num_embeddings, l->p.embedding_dim);
    l->macs = l->flops = 0;
    l->bytes = layer_count_mul(4, layer_count_add(ids, layer_count_mul(2, out)));
}

static void embedding_init(const layer *l, float *w, layer_rng *rng)
{
    layer_fill_uniform(w, l->n_weight_floats, -1.0f, 1.0f, rng);
}

static void embedding_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    int64_t ids = shape_numel(&l->in), d = l->p.embedding_dim;
    for (int64_t i = 0; i < ids; i++)
        memcpy(out + i * d, w + layer_token_id(l, ins[0][i]) * d, (size_t)d * sizeof *out);
}

/* The rows the ids read get their tokens' gradients, summed where an id repeats: sparse
 * in truth (torch's sparse=False writes it dense, as here); the ids have none */
static void embedding_backward(const layer *l, const float *const *ins, const float *w, const float *out,
                               const float *dout, float *const *din, float *dw)
{
    (void)w, (void)out;
    int64_t ids = shape_numel(&l->in), d = l->p.embedding_dim;
    double *g = xcalloc((size_t)l->n_weight_floats, sizeof *g);
    for (int64_t i = 0; i < ids; i++) {
        int64_t row = layer_token_id(l, ins[0][i]);
        for (int64_t k = 0; k < d; k++)
            g[row * d + k] += dout[i * d + k];
        din[0][i] = 0.0f;
    }
    kind_store_grad(dw, g, l->n_weight_floats);
}

const layer_desc layer_embedding_desc = {
    .name = "embedding", .n_inputs = 1, .params = embedding_params, .infer = embedding_infer,
    .count = embedding_count, .init_weights = embedding_init, .reference = embedding_reference, .tolerance = 0.0,
    .backward = embedding_backward,
};

/* ---- rmsnorm ----------------------------------------------------------------------------- */

static const layer_param_spec rmsnorm_params[] = {
    {"normalized_shape", LP_INT, P_OFF(normalized_shape), false, 1, NULL},
    {"eps", LP_FLOAT, P_OFF(eps), false, 0, NULL},
    {"weight_offset", LP_FLOAT, P_OFF(weight_offset), false, 0, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static void rmsnorm_defaults(layer_params *p) { p->eps = 1e-6; }

static int rmsnorm_infer(layer *l, char *err, size_t len)
{
    int64_t d = l->in.d[l->in.rank - 1];
    if (l->p.normalized_shape == 0)
        l->p.normalized_shape = d;
    if (l->p.normalized_shape != d)
        return kind_fail(err, len, "normalized_shape %lld must be the input's last dimension, %lld",
                         (long long)l->p.normalized_shape, (long long)d);
    if (!(l->p.eps > 0))
        return kind_fail(err, len, "eps must be above 0, got %g", l->p.eps);
    if (!isfinite(l->p.weight_offset))
        return kind_fail(err, len, "weight_offset must be a finite number");
    l->out = l->in;
    return 0;
}

static void rmsnorm_count(layer *l)
{
    l->n_weights = l->n_weight_floats = l->p.normalized_shape;
    l->macs = 0;
    /* per element: the square and its sum, the scale by 1/rms, the weight's multiply (and
     * with an offset, per weight its add) */
    l->flops = layer_count_mul(4, shape_numel(&l->out)) + (l->p.weight_offset != 0 ? l->p.normalized_shape : 0);
    kind_count_bytes(l);
}

/* the scale weight + weight_offset in [0.5, 1.5] */
static void rmsnorm_init(const layer *l, float *w, layer_rng *rng)
{
    float o = (float)l->p.weight_offset;
    layer_fill_uniform(w, l->n_weight_floats, 0.5f - o, 1.5f - o, rng);
}

static void rmsnorm_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    int64_t d = l->p.normalized_shape, rows = shape_numel(&l->in) / d;
    for (int64_t r = 0; r < rows; r++) {
        const float *x = ins[0] + r * d;
        double sq = 0;
        for (int64_t i = 0; i < d; i++)
            sq += (double)x[i] * x[i];
        double inv = 1.0 / sqrt(sq / (double)d + l->p.eps);
        for (int64_t i = 0; i < d; i++)
            out[r * d + i] = (float)(x[i] * inv * ((double)w[i] + l->p.weight_offset));
    }
}

/* Per row, with r = 1 / rms and s = weight + offset: d x = r (d out s - x r^2 mean(d out s
 * x)); d weight = sum over rows of d out x r */
static void rmsnorm_backward(const layer *l, const float *const *ins, const float *w, const float *out,
                             const float *dout, float *const *din, float *dw)
{
    (void)out;
    int64_t d = l->p.normalized_shape, rows = shape_numel(&l->in) / d;
    double *gw = xcalloc((size_t)d, sizeof *gw);
    for (int64_t r = 0; r < rows; r++) {
        const float *x = ins[0] + r * d, *dy = dout + r * d;
        double sq = 0, dot = 0;
        for (int64_t i = 0; i < d; i++)
            sq += (double)x[i] * x[i];
        double inv = 1.0 / sqrt(sq / (double)d + l->p.eps);
        for (int64_t i = 0; i < d; i++) {
            dot += dy[i] * ((double)w[i] + l->p.weight_offset) * x[i];
            gw[i] += dy[i] * x[i] * inv;
        }
        dot /= (double)d;
        for (int64_t i = 0; i < d; i++)
            din[0][r * d + i] = (float)(inv * (dy[i] * ((double)w[i] + l->p.weight_offset) - x[i] * inv * inv * dot));
    }
    kind_store_grad(dw, gw, d);
}

const layer_desc layer_rmsnorm_desc = {
    .name = "rmsnorm", .n_inputs = 1, .params = rmsnorm_params, .defaults = rmsnorm_defaults,
    .infer = rmsnorm_infer, .count = rmsnorm_count, .init_weights = rmsnorm_init, .reference = rmsnorm_reference,
    .tolerance = 1e-6, .backward = rmsnorm_backward,
};

/* ---- rope -------------------------------------------------------------------------------- */

const char *const kind_rope_types[] = {"default", "linear", "llama3", "yarn", "longrope", NULL};

static const layer_param_spec rope_params[] = {
    {"num_heads", LP_INT, P_OFF(num_heads), true, 1, NULL},
    {"head_dim", LP_INT, P_OFF(head_dim), true, 2, NULL},
    KIND_ROPE_PARAMS,
    {"interleaved", LP_BOOL, P_OFF(interleaved), false, 0, NULL},
    {"kv_len", LP_INT, P_OFF(kv_len), false, 0, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

void kind_rope_defaults(layer_params *p)
{
    p->rope_theta = 10000.0;
    p->rope_factor = 1.0;
    p->low_freq_factor = 1.0, p->high_freq_factor = 4.0;
    p->original_max_pos = 8192;
    p->beta_fast = 32.0, p->beta_slow = 1.0; /* yarn's, as transformers defaults them */
    p->truncate = true;
}

/* [N, T, heads * head_dim]: the projections' output, before the view into heads */
static int need_heads(const layer *l, const shape_t *s, int64_t heads, const char *what, char *err, size_t len)
{
    char b[96];
    if (s->rank != 3 || s->d[2] != heads * l->p.head_dim)
        return kind_fail(err, len, "%s: %s expects [N, T, %lld] (%lld heads of %lld), got %s", layer_kind_name(l->kind),
                         what, (long long)(heads * l->p.head_dim), (long long)heads, (long long)l->p.head_dim,
                         shape_format(s, b, sizeof b));
    return 0;
}

int kind_rope_check(const layer *l, char *err, size_t len)
{
    const layer_params *p = &l->p;
    if (p->head_dim % 2)
        return kind_fail(err, len, "head_dim must be even (rotate-half pairs its halves), got %lld", (long long)p->head_dim);
    if (!(p->rope_theta > 1.0))
        return kind_fail(err, len, "rope_theta must be above 1, got %g", p->rope_theta);
    if (p->rope_type != ROPE_DEFAULT && !(p->rope_factor > 0))
        return kind_fail(err, len, "factor must be above 0, got %g", p->rope_factor);
    if (p->rope_type == ROPE_LLAMA3 && !(p->high_freq_factor > p->low_freq_factor && p->low_freq_factor > 0))
        return kind_fail(err, len, "llama3 needs high_freq_factor > low_freq_factor > 0, got %g and %g",
                         p->high_freq_factor, p->low_freq_factor);
    if (p->rope_type == ROPE_YARN && !(p->beta_fast > 0 && p->beta_slow > 0))
        return kind_fail(err, len, "yarn needs beta_fast and beta_slow above 0, got %g and %g", p->beta_fast,
                         p->beta_slow);
    if (p->rope_type == ROPE_LONGROPE)
        for (int k = 0; k < 2; k++) {
            const layer_floats *f = k ? &p->long_factor : &p->short_factor;
            if (f->n != p->head_dim / 2)
                return kind_fail(err, len, "longrope needs %s with head_dim / 2 = %lld factors, got %lld",
                                 k ? "long_factor" : "short_factor", (long long)(p->head_dim / 2), (long long)f->n);
        }
    else if (p->short_factor.n || p->long_factor.n)
        return kind_fail(err, len, "short_factor and long_factor are longrope's (rope_type: longrope)");
    if (p->rope_type == ROPE_LONGROPE && p->attention_factor == 0 && p->rope_factor > 1 && p->original_max_pos < 2)
        return kind_fail(err, len, "longrope infers its attention factor from ln(original_max_position_embeddings), "
                                   "which must be 2 or more, got %lld (or give attention_factor)",
                         (long long)p->original_max_pos);
    return 0;
}

static int rope_infer(layer *l, char *err, size_t len)
{
    const layer_params *p = &l->p;
    if (kind_rope_check(l, err, len))
        return -1;
    if (need_heads(l, &l->in, p->num_heads, "its input", err, len))
        return -1;
    l->out = l->in;
    return 0;
}

static void rope_count(layer *l)
{
    l->n_weights = l->n_weight_floats = 0;
    l->macs = 0;
    l->flops = layer_count_mul(3, shape_numel(&l->out)); /* per pair: 4 multiplies, 2 adds */
    kind_count_bytes(l);
}

/* yarn's dimension at which a frequency turns num_rotations times over the original
 * context (transformers' find_correction_dim) */
static double yarn_correction_dim(const layer_params *p, double num_rotations)
{
    const double pi = 3.14159265358979323846;
    return (double)p->head_dim * log((double)p->original_max_pos / (num_rotations * 2.0 * pi)) /
           (2.0 * log(p->rope_theta));
}

void layer_rope_inv_freq(const layer *l, float *inv_freq)
{
    const layer_params *p = &l->p;
    int64_t half = p->head_dim / 2;
    const float pi = 3.14159265358979323846f;
    /* yarn's ramp over the pairs, from low (extrapolated: the frequency as it is) to high
     * (interpolated: divided by factor), transformers' find_correction_range */
    double low = 0, high = 1;
    if (p->rope_type == ROPE_YARN) {
        low = yarn_correction_dim(p, p->beta_fast), high = yarn_correction_dim(p, p->beta_slow);
        if (p->truncate)
            low = floor(low), high = ceil(high);
        low = low > 0 ? low : 0, high = high < (double)(p->head_dim - 1) ? high : (double)(p->head_dim - 1);
        if (low == high)
            high += 0.001; /* as transformers avoids the division by zero */
    }
    /* longrope: the long factors once the sequence passes the original context */
    const layer_floats *ext = p->kv_len + l->in.d[1] > p->original_max_pos ? &p->long_factor : &p->short_factor;
    for (int64_t i = 0; i < half; i++) {
        float e = (float)(2 * i) / (float)p->head_dim;
        /* 1 / theta^(2i / d), in fp32 as torch evaluates it */
        float f = (float)(1.0 / pow(p->rope_theta, (double)(float)(2 * i) / (double)(float)p->head_dim));
        if (p->rope_type == ROPE_LLAMA3) { /* transformers' _compute_llama3_parameters */
            float factor = (float)p->rope_factor, lo = (float)p->low_freq_factor, hi = (float)p->high_freq_factor;
            float old = (float)p->original_max_pos, wavelen = 2.0f * pi / f;
            float lo_wavelen = old / lo, hi_wavelen = old / hi;
            float scaled = wavelen > lo_wavelen ? f / factor : f;
            float smooth = (old / wavelen - lo) / (hi - lo);
            float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
            f = !(wavelen < hi_wavelen) && !(wavelen > lo_wavelen) ? smoothed : scaled;
        } else if (p->rope_type == ROPE_YARN) { /* _compute_yarn_parameters */
            float pos_freq = (float)pow(p->rope_theta, (double)e);
            float extrapolated = 1.0f / pos_freq, interpolated = 1.0f / ((float)p->rope_factor * pos_freq);
            float ramp = ((float)i - (float)low) / (float)(high - low);
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            float keep = 1.0f - ramp; /* the extrapolation's share */
            f = interpolated * (1.0f - keep) + extrapolated * keep;
        } else if (p->rope_type == ROPE_LONGROPE) { /* _compute_longrope_parameters */
            f = 1.0f / (ext->v[i] * (float)pow(p->rope_theta, (double)e));
        }
        inv_freq[i] = f;
    }
}

/* yarn's mscale: 0.1 m ln(s) + 1 above a factor of 1 */
static double yarn_mscale(double s, double m) { return s <= 1 ? 1.0 : 0.1 * m * log(s) + 1.0; }

double layer_rope_attention_factor(const layer *l)
{
    const layer_params *p = &l->p;
    if (p->rope_type != ROPE_YARN && p->rope_type != ROPE_LONGROPE)
        return 1.0;
    if (p->attention_factor > 0)
        return p->attention_factor;
    double s = p->rope_factor;
    if (p->rope_type == ROPE_LONGROPE)
        return s <= 1 ? 1.0 : sqrt(1.0 + log(s) / log((double)p->original_max_pos));
    if (p->mscale > 0 && p->mscale_all_dim > 0)
        return yarn_mscale(s, p->mscale) / yarn_mscale(s, p->mscale_all_dim);
    return yarn_mscale(s, 1.0);
}

float layer_rope_angle(const layer *l, const float *inv_freq, int64_t t, int64_t i)
{
    float pos = (float)(l->p.kv_len + t);
    if (l->p.rope_type == ROPE_LINEAR)
        pos /= (float)l->p.rope_factor;
    return pos * inv_freq[i];
}

/* Turns every pair of x by its angle (sign 1: the forward) or back by it (sign -1: the
 * backward, the rotation's transpose), into y */
static void rope_turn(const layer *l, const float *x_all, float *y_all, double sign)
{
    int64_t n = l->in.d[0], t_len = l->in.d[1], heads = l->p.num_heads, d = l->p.head_dim, half = d / 2;
    float *inv = xmalloc((size_t)half * sizeof *inv);
    layer_rope_inv_freq(l, inv);
    double scale = layer_rope_attention_factor(l);
    for (int64_t b = 0; b < n; b++)
        for (int64_t t = 0; t < t_len; t++)
            for (int64_t h = 0; h < heads; h++) {
                const float *x = x_all + ((b * t_len + t) * heads + h) * d;
                float *y = y_all + ((b * t_len + t) * heads + h) * d;
                for (int64_t i = 0; i < half; i++) {
                    double a = layer_rope_angle(l, inv, t, i), c = cos(a) * scale, s = sign * sin(a) * scale;
                    /* the pair frequency i turns: (i, i + half), or (2i, 2i + 1) interleaved */
                    int64_t u = l->p.interleaved ? 2 * i : i, v = l->p.interleaved ? 2 * i + 1 : i + half;
                    y[u] = (float)(x[u] * c - x[v] * s);
                    y[v] = (float)(x[v] * c + x[u] * s);
                }
            }
    free(inv);
}

static void rope_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    (void)w;
    rope_turn(l, ins[0], out, 1.0);
}

static void rope_backward(const layer *l, const float *const *ins, const float *w, const float *out,
                          const float *dout, float *const *din, float *dw)
{
    (void)ins, (void)w, (void)out, (void)dw;
    rope_turn(l, dout, din[0], -1.0);
}

const layer_desc layer_rope_desc = {
    .name = "rope", .n_inputs = 1, .params = rope_params, .defaults = kind_rope_defaults, .infer = rope_infer,
    .count = rope_count, .reference = rope_reference, .tolerance = 1e-6, .backward = rope_backward,
};

/* ---- attention --------------------------------------------------------------------------- */

static const layer_param_spec attention_params[] = {
    {"num_heads", LP_INT, P_OFF(num_heads), true, 1, NULL},
    {"num_key_value_heads", LP_INT, P_OFF(num_kv_heads), false, 1, NULL},
    {"head_dim", LP_INT, P_OFF(head_dim), true, 1, NULL},
    {"causal", LP_BOOL, P_OFF(causal), false, 0, NULL},
    {"sliding_window", LP_INT, P_OFF(sliding_window), false, 0, NULL},
    {"kv_len", LP_INT, P_OFF(kv_len), false, 0, NULL},
    {"scale", LP_FLOAT, P_OFF(attn_scale), false, 0, NULL},
    {"softcap", LP_FLOAT, P_OFF(softcap), false, 0, NULL},
    {"sinks", LP_BOOL, P_OFF(sinks), false, 0, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static void attention_defaults(layer_params *p) { p->causal = true; }

static int attention_infer(layer *l, char *err, size_t len)
{
    layer_params *p = &l->p;
    if (p->num_kv_heads == 0)
        p->num_kv_heads = p->num_heads;
    if (p->num_heads % p->num_kv_heads)
        return kind_fail(err, len, "num_heads %lld must be a multiple of num_key_value_heads %lld",
                         (long long)p->num_heads, (long long)p->num_kv_heads);
    if (p->sliding_window && !p->causal)
        return kind_fail(err, len, "sliding_window needs causal: true");
    if (!(p->attn_scale >= 0) || !isfinite(p->attn_scale))
        return kind_fail(err, len, "scale must be a finite number, 0 or above (0: 1/sqrt(head_dim)), got %g", p->attn_scale);
    if (!(p->softcap >= 0) || !isfinite(p->softcap))
        return kind_fail(err, len, "softcap must be a finite number, 0 or above (0: none), got %g", p->softcap);
    static const char *const what[3] = {"the query (input 0)", "the key (input 1)", "the value (input 2)"};
    for (int k = 0; k < 3; k++)
        if (need_heads(l, &l->ins[k], k ? p->num_kv_heads : p->num_heads, what[k], err, len))
            return -1;
    char a[96], b[96];
    for (int k = 1; k < 3; k++)
        if (l->ins[k].d[0] != l->ins[0].d[0] || l->ins[k].d[1] != l->ins[1].d[1])
            return kind_fail(err, len, "%s is %s but the %s is %s: the batch and the key's and value's tokens must "
                                       "match",
                             what[k], shape_format(&l->ins[k], a, sizeof a), k == 1 ? "query" : "key",
                             shape_format(&l->ins[k == 1 ? 0 : 1], b, sizeof b));
    if (l->ins[1].d[1] != l->in.d[1] && (p->causal || p->kv_len))
        return kind_fail(err, len, "the key has %lld tokens and the query %lld: cross-attention (keys from another "
                                   "sequence) takes causal: false and no kv_len",
                         (long long)l->ins[1].d[1], (long long)l->in.d[1]);
    l->out = l->ins[0];
    return 0;
}

/* The (query, key) pairs the mask keeps, per (sample, head): query t (0 <= t < T) sits
 * at position S + t and sees keys at positions j <= S + t (causal), and j > S + t - W
 * (sliding window W); every one of the S + Tk without causal (Tk = T, or a cross-
 * attention's key tokens). Closed forms. */
int64_t layer_attention_pairs(const layer *l)
{
    const layer_params *p = &l->p;
    int64_t t = l->in.d[1], s = p->kv_len, w = p->sliding_window;
    if (!p->causal)
        return layer_count_mul(t, layer_count_add(s, l->ins[1].d[1]));
    /* query t sees min(S + t + 1, W) keys: S + t + 1 while t < W - S, then W */
    int64_t t0 = w <= 0 ? t : w - s < 0 ? 0 : w - s > t ? t : w - s;
    int64_t before = layer_count_add(layer_count_mul(t0, s), t0 * (t0 + 1) / 2);
    return layer_count_add(before, layer_count_mul(t - t0, w > 0 ? w : 0));
}

static void attention_count(layer *l)
{
    const layer_params *p = &l->p;
    int64_t n = l->in.d[0], per = layer_count_mul(n, p->num_heads), pairs = layer_attention_pairs(l);
    /* the cache: keys and values, [N, Hkv, C, D] each (C: layer_attention_cached), not
     * parameters; with sinks a parameter per head after it */
    l->n_weights = p->sinks ? p->num_heads : 0;
    l->n_weight_floats = layer_count_add(layer_attention_cache_floats(l), l->n_weights);
    /* q k^T and p v: 2 per MAC each; the scale 1 and the softmax 5 per score (as
     * multihead_attention); a softcap's divide, tanh and multiply 3 more; a sink 5 per
     * softmax (its max, subtract, exp, add) */
    l->macs = layer_count_mul(per, layer_count_mul(2 * p->head_dim, pairs));
    l->flops = layer_count_add(layer_count_add(layer_count_mul(2, l->macs),
                                               layer_count_mul(p->softcap > 0 ? 9 : 6, layer_count_mul(per, pairs))),
                               p->sinks ? layer_count_mul(5, layer_count_mul(per, l->in.d[1])) : 0);
    kind_count_bytes(l);
}

static void attention_init(const layer *l, float *w, layer_rng *rng)
{
    layer_fill_uniform(w, l->n_weight_floats, -1.0f, 1.0f, rng);
}

int64_t layer_attention_cache_floats(const layer *l)
{
    const layer_params *p = &l->p;
    return layer_count_mul(2, layer_count_mul(layer_count_mul(l->in.d[0], p->num_kv_heads),
                                              layer_count_mul(layer_attention_cached(l), p->head_dim)));
}

const float *layer_attention_sinks(const layer *l, const float *w)
{
    return l->p.sinks ? w + layer_attention_cache_floats(l) : NULL;
}

int64_t layer_attention_cached(const layer *l)
{
    const layer_params *p = &l->p;
    int64_t w = p->sliding_window;
    if (!p->causal || w <= 0 || p->kv_len < w - 1)
        return p->kv_len;
    return w - 1; /* query 0 at position S sees back to S - W + 1; the rest see less of the cache */
}

/* Key (or value, with the cache's second half and input 2) j of head g of sample b:
 * cached for j < S (the cache holding positions S - C to S - 1), else token j - S of the
 * input. */
/* Where that vector starts: in the weights (the cache: *cached) or in input 1 + value */
static int64_t attention_kv_at(const layer *l, int value, int64_t b, int64_t g, int64_t j, bool *cached)
{
    const layer_params *p = &l->p;
    int64_t hkv = p->num_kv_heads, s = p->kv_len, c = layer_attention_cached(l), d = p->head_dim,
            t_len = l->ins[1].d[1];
    *cached = j < s;
    if (j < s)
        return (int64_t)value * (layer_attention_cache_floats(l) / 2) + ((b * hkv + g) * c + (j - (s - c))) * d;
    return ((b * t_len + (j - s)) * hkv + g) * d;
}

const float *layer_attention_kv(const layer *l, const float *const *ins, const float *w, int value, int64_t b,
                                int64_t g, int64_t j)
{
    bool cached;
    int64_t at = attention_kv_at(l, value, b, g, j, &cached);
    return (cached ? w : ins[1 + value]) + at;
}

float layer_attention_score(const layer *l, double dot)
{
    double s = dot * (l->p.attn_scale > 0 ? l->p.attn_scale : 1.0 / sqrt((double)l->p.head_dim));
    return (float)(l->p.softcap > 0 ? l->p.softcap * tanh(s / l->p.softcap) : s);
}

bool layer_attention_sees(const layer *l, int64_t t, int64_t j)
{
    int64_t i = l->p.kv_len + t;
    return !l->p.causal || (j <= i && (l->p.sliding_window <= 0 || i - j < l->p.sliding_window));
}

static void attention_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const layer_params *p = &l->p;
    int64_t n = l->in.d[0], t_len = l->in.d[1], h = p->num_heads, d = p->head_dim, keys = p->kv_len + l->ins[1].d[1];
    double *score = xmalloc((size_t)keys * sizeof *score), *acc = xmalloc((size_t)d * sizeof *acc);
    const float *sinks = layer_attention_sinks(l, w);
    for (int64_t b = 0; b < n; b++)
        for (int64_t hh = 0; hh < h; hh++) {
            int64_t g = hh / (h / p->num_kv_heads);
            for (int64_t t = 0; t < t_len; t++) {
                const float *q = ins[0] + ((b * t_len + t) * h + hh) * d;
                double top = -INFINITY, sum = 0;
                for (int64_t j = 0; j < keys; j++) {
                    score[j] = -INFINITY;
                    if (!layer_attention_sees(l, t, j))
                        continue;
                    const float *k = layer_attention_kv(l, ins, w, 0, b, g, j);
                    double dot = 0;
                    for (int64_t i = 0; i < d; i++)
                        dot += (double)q[i] * k[i];
                    score[j] = layer_attention_score(l, dot);
                    top = score[j] > top ? score[j] : top;
                }
                if (sinks) /* gpt-oss: the head's sink joins the max and the denominator */
                    top = sinks[hh] > top ? sinks[hh] : top, sum = exp((double)sinks[hh] - top);
                for (int64_t i = 0; i < d; i++)
                    acc[i] = 0;
                for (int64_t j = 0; j < keys; j++) {
                    if (score[j] == -INFINITY)
                        continue;
                    double e = exp(score[j] - top);
                    sum += e;
                    const float *v = layer_attention_kv(l, ins, w, 1, b, g, j);
                    for (int64_t i = 0; i < d; i++)
                        acc[i] += e * v[i];
                }
                float *y = out + ((b * t_len + t) * h + hh) * d;
                for (int64_t i = 0; i < d; i++)
                    y[i] = (float)(acc[i] / sum);
            }
        }
    free(score), free(acc);
}

/* The gradients of one (sample, head, query) row, from its probabilities p[keys] (the
 * forward's, recomputed) and its output's gradient dy: d v_j += p_j dy; d s_j = p_j (dy . v_j
 * - sum_i p_i dy . v_i) (a sink's value is none: its d = -p_sink times that sum); through the
 * softcap and the scale to the dot product, then d q += d dot_j k_j, d k_j += d dot_j q.
 * g[0..2]: q's, k's and v's gradients; g[3]: the weights' (the cache, then the sinks). */
static void attention_row_backward(const layer *l, const float *const *ins, const float *w, const double *prob,
                                   double p_sink, const float *dy, int64_t b, int64_t hh, int64_t t, double **g)
{
    const layer_params *p = &l->p;
    int64_t h = p->num_heads, d = p->head_dim, keys = p->kv_len + l->ins[1].d[1], kv = hh / (h / p->num_kv_heads);
    double scale = p->attn_scale > 0 ? p->attn_scale : 1.0 / sqrt((double)d), dsum = 0;
    const float *q = ins[0] + ((b * l->in.d[1] + t) * h + hh) * d;
    for (int64_t j = 0; j < keys; j++)
        for (int64_t i = 0; prob[j] > 0 && i < d; i++)
            dsum += prob[j] * dy[i] * layer_attention_kv(l, ins, w, 1, b, kv, j)[i];
    for (int64_t j = 0; j < keys; j++) {
        if (!(prob[j] > 0))
            continue;
        bool kc, vc;
        int64_t ka = attention_kv_at(l, 0, b, kv, j, &kc), va = attention_kv_at(l, 1, b, kv, j, &vc);
        const float *k = (kc ? w : ins[1]) + ka, *v = (vc ? w : ins[2]) + va;
        double *gk = (kc ? g[3] : g[1]) + ka, *gv = (vc ? g[3] : g[2]) + va;
        double dot = 0, dp = 0;
        for (int64_t i = 0; i < d; i++)
            dot += (double)q[i] * k[i], dp += (double)dy[i] * v[i], gv[i] += prob[j] * dy[i];
        double th = p->softcap > 0 ? tanh(dot * scale / p->softcap) : 0.0;
        double ddot = prob[j] * (dp - dsum) * scale * (1.0 - th * th);
        for (int64_t i = 0; i < d; i++)
            g[0][((b * l->in.d[1] + t) * h + hh) * d + i] += ddot * k[i], gk[i] += ddot * q[i];
    }
    if (p->sinks)
        g[3][layer_attention_cache_floats(l) + hh] -= p_sink * dsum;
}

/* Each (sample, head, query) row's probabilities recomputed from q and k, as the forward
 * computes them, then its gradients. The cache's keys and values get theirs too (the
 * weights' gradient: what the forward read), and a sink its own. */
static void attention_backward(const layer *l, const float *const *ins, const float *w, const float *out,
                               const float *dout, float *const *din, float *dw)
{
    (void)out;
    const layer_params *p = &l->p;
    int64_t n = l->in.d[0], t_len = l->in.d[1], h = p->num_heads, d = p->head_dim, keys = p->kv_len + l->ins[1].d[1];
    double *g[4], *prob = xmalloc((size_t)keys * sizeof *prob);
    for (int k = 0; k < 3; k++)
        g[k] = xcalloc((size_t)shape_numel(&l->ins[k]), sizeof *g[k]);
    g[3] = xcalloc((size_t)l->n_weight_floats + 1, sizeof *g[3]);
    const float *sinks = layer_attention_sinks(l, w);
    for (int64_t b = 0; b < n; b++)
        for (int64_t hh = 0; hh < h; hh++)
            for (int64_t t = 0; t < t_len; t++) {
                const float *q = ins[0] + ((b * t_len + t) * h + hh) * d;
                double top = sinks ? sinks[hh] : -INFINITY, sum = 0;
                for (int64_t j = 0; j < keys; j++) {
                    prob[j] = -INFINITY;
                    if (!layer_attention_sees(l, t, j))
                        continue;
                    const float *k = layer_attention_kv(l, ins, w, 0, b, hh / (h / p->num_kv_heads), j);
                    double dot = 0;
                    for (int64_t i = 0; i < d; i++)
                        dot += (double)q[i] * k[i];
                    prob[j] = layer_attention_score(l, dot);
                    top = prob[j] > top ? prob[j] : top;
                }
                double p_sink = sinks ? exp((double)sinks[hh] - top) : 0.0;
                sum = p_sink;
                for (int64_t j = 0; j < keys; j++)
                    sum += prob[j] = prob[j] == -INFINITY ? 0.0 : exp(prob[j] - top);
                for (int64_t j = 0; j < keys; j++)
                    prob[j] /= sum;
                attention_row_backward(l, ins, w, prob, p_sink / sum, dout + ((b * t_len + t) * h + hh) * d, b, hh, t, g);
            }
    for (int k = 0; k < 3; k++)
        kind_store_grad(din[k], g[k], shape_numel(&l->ins[k]));
    kind_store_grad(dw, g[3], l->n_weight_floats);
    free(prob);
}

const layer_desc layer_attention_desc = {
    .name = "attention", .n_inputs = 3, .params = attention_params, .defaults = attention_defaults,
    .infer = attention_infer, .count = attention_count, .init_weights = attention_init,
    .reference = attention_reference, .tolerance = 2e-6, .backward = attention_backward,
};
