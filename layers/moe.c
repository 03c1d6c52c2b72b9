/* moe: a mixture-of-experts block as Mixtral computes it (transformers' modeling_mixtral.py,
 * MixtralSparseMoeBlock), after its router: the router is the linear layer before it
 * (block_sparse_moe.gate, hidden -> num_experts, no bias), and this kind is the experts.
 *
 * Inputs: the hidden states x [..., H] and the router's logits [..., E], the same rows.
 * Per row (token): the softmax of its logits (in fp32), top_k experts, their
 * probabilities renormalised to sum to 1 (Mixtral's routing_weights /= sum; normalize:
 * false keeps them as the softmax gives them, Qwen's norm_topk_prob false); the output
 * is the sum over those experts of probability * w2(silu(w1 x) * w3 x), each expert a
 * SwiGLU MLP with Mixtral's names: w1 (gate) [F, H], w3 (up) [F, H], w2 (down) [H, F], no
 * biases. Weights: expert 0's w1, w2, w3, then expert 1's, ... (E * 3 * H * F). gpt-oss's
 * experts: bias (b1 [F], b2 [H], b3 [F] after each expert's matrices, added to w1 x, w2 a
 * and w3 x) and activation clamped_swiglu (g = min(w1 x, limit), u = clamp(w3 x, -limit,
 * limit), g * sigmoid(alpha g) * (u + 1); swiglu_limit 7, swiglu_alpha 1.702); its
 * router's top-k softmax is normalize's (the softmax of the top k logits). DeepSeek-V2's:
 * routed_scaling_factor multiplies every gate (after the renormalisation, if any), and
 * with n_group > 1 the router picks its top_k among the experts of the topk_group groups
 * (num_experts / n_group consecutive experts each) whose best logit is highest
 * (group_limited_greedy). DeepSeek-V3's (noaux_tc): scoring sigmoid (each expert's
 * sigmoid, the gates those of the experts taken) and score_bias (a bias per expert after
 * the experts' weights, added to the scores for the choice only); its groups are ranked
 * by the sum of their best two scores, and the experts of the groups not chosen keep a
 * score of 0 (DeepSeek's masked_fill), not out of the choice.
 *
 * routing, which experts each token goes to (layer_moe_route):
 *   uniform (the default): a fixed assignment that gives every expert the same number of
 *     tokens, within one: the balanced load a trained router is trained towards. With
 *     load_skew s > 0, expert e's share of the R * top_k (token, expert) slots is
 *     proportional to 1 / (e + 1)^s (Zipf): the imbalance a user wants to see the cost
 *     of. Token t takes slots t, t + R, t + 2R, ... of the experts' slots laid out in
 *     order, so its experts are distinct (no expert holds more than R slots).
 *   router: the top_k of each token's logits (ties to the lower index), as the model
 *     does; with random weights the spread is what the data gives.
 * The probabilities always come from the logits, at the experts the token goes to.
 * FLOPs and bytes count the experts that run: those the assignment gives tokens (for
 * router, counted as uniform: the data's spread is not known before the run). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kind_util.h"
#include "util.h"

/* The most experts a block may have (DeepSeek-V3 has 256). */
#define MOE_MAX_EXPERTS 1024

static const char *const moe_routings[] = {"uniform", "router", NULL};
static const char *const moe_expert_names[] = {"w1_w2_w3", "gate_up_down", "fused", NULL};
static const char *const moe_acts[] = {"silu", "clamped_swiglu", NULL};
static const char *const moe_scorings[] = {"softmax", "sigmoid", NULL};

static const layer_param_spec moe_params[] = {
    {"num_experts", LP_INT, P_OFF(num_experts), true, 1, NULL},
    {"top_k", LP_INT, P_OFF(top_k), false, 1, NULL},
    {"ffn_dim", LP_INT, P_OFF(ffn_dim), true, 1, NULL},
    {"routing", LP_ENUM, P_OFF(routing), false, 0, moe_routings},
    {"load_skew", LP_FLOAT, P_OFF(load_skew), false, 0, NULL},
    {"expert_names", LP_ENUM, P_OFF(expert_names), false, 0, moe_expert_names},
    {"normalize", LP_BOOL, P_OFF(normalize), false, 0, NULL},
    {"bias", LP_BOOL, P_OFF(bias), false, 0, NULL},
    {"activation", LP_ENUM, P_OFF(moe_act), false, 0, moe_acts},
    {"swiglu_limit", LP_FLOAT, P_OFF(swiglu_limit), false, 0, NULL},
    {"swiglu_alpha", LP_FLOAT, P_OFF(swiglu_alpha), false, 0, NULL},
    {"routed_scaling_factor", LP_FLOAT, P_OFF(routed_scale), false, 0, NULL},
    {"n_group", LP_INT, P_OFF(n_group), false, 1, NULL},
    {"topk_group", LP_INT, P_OFF(topk_group), false, 1, NULL},
    {"scoring", LP_ENUM, P_OFF(moe_scoring), false, 0, moe_scorings},
    {"score_bias", LP_BOOL, P_OFF(score_bias), false, 0, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static void moe_defaults(layer_params *p)
{
    p->top_k = 2;
    p->normalize = true;
    p->swiglu_limit = 7.0, p->swiglu_alpha = 1.702; /* gpt-oss's */
    p->routed_scale = 1.0;
    p->n_group = p->topk_group = 1;
}

int64_t layer_moe_expert_floats(const layer *l)
{
    int64_t h = l->in.d[l->in.rank - 1], f = l->p.ffn_dim;
    return layer_count_add(layer_count_mul(3, layer_count_mul(h, f)), l->p.bias ? layer_count_add(2 * f, h) : 0);
}

double layer_moe_act(const layer *l, double g, double u)
{
    if (l->p.moe_act == MOE_ACT_SILU)
        return g / (1.0 + exp(-g)) * u;
    double lim = l->p.swiglu_limit;
    g = g < lim ? g : lim;
    u = u < -lim ? -lim : u > lim ? lim : u;
    return g / (1.0 + exp(-l->p.swiglu_alpha * g)) * (u + 1.0);
}

static int moe_infer(layer *l, char *err, size_t len)
{
    const layer_params *p = &l->p;
    char a[96], b[96];
    if (p->num_experts > MOE_MAX_EXPERTS)
        return kind_fail(err, len, "num_experts %lld: at most %d", (long long)p->num_experts, MOE_MAX_EXPERTS);
    if (p->top_k > p->num_experts)
        return kind_fail(err, len, "top_k %lld is more than num_experts %lld", (long long)p->top_k,
                         (long long)p->num_experts);
    if (p->moe_act == MOE_ACT_CLAMPED_SWIGLU && !(p->swiglu_limit > 0 && p->swiglu_alpha > 0))
        return kind_fail(err, len, "clamped_swiglu needs swiglu_limit and swiglu_alpha above 0, got %g and %g",
                         p->swiglu_limit, p->swiglu_alpha);
    if (!(p->routed_scale > 0) || !isfinite(p->routed_scale))
        return kind_fail(err, len, "routed_scaling_factor must be a finite number above 0, got %g", p->routed_scale);
    if (p->num_experts % p->n_group || p->topk_group > p->n_group ||
        p->top_k > p->topk_group * (p->num_experts / p->n_group))
        return kind_fail(err, len, "n_group %lld must divide num_experts %lld, and its topk_group %lld best groups "
                                   "hold top_k %lld experts or more",
                         (long long)p->n_group, (long long)p->num_experts, (long long)p->topk_group,
                         (long long)p->top_k);
    if (p->routing == MOE_ROUTER && p->load_skew != 0)
        return kind_fail(err, len, "load_skew sets the uniform assignment's spread; routing: router takes the "
                                   "router's own");
    const shape_t *x = &l->ins[0], *g = &l->ins[1];
    bool rows_match = x->rank == g->rank;
    for (int i = 0; rows_match && i < x->rank - 1; i++)
        rows_match = x->d[i] == g->d[i];
    if (!rows_match || g->d[g->rank - 1] != p->num_experts)
        return kind_fail(err, len, "the router's logits (input 1) are %s: expected the rows of the hidden states "
                                   "(input 0, %s) with %lld experts' logits each",
                         shape_format(g, a, sizeof a), shape_format(x, b, sizeof b), (long long)p->num_experts);
    l->out = *x;
    return 0;
}

int64_t layer_moe_rows(const layer *l) { return shape_numel(&l->in) / l->in.d[l->in.rank - 1]; }

void layer_moe_counts(const layer *l, int64_t *count)
{
    const layer_params *p = &l->p;
    int64_t e_n = p->num_experts, rows = layer_moe_rows(l), left = layer_count_mul(rows, p->top_k);
    double share[MOE_MAX_EXPERTS], total = 0;
    bool capped[MOE_MAX_EXPERTS];
    double s = p->routing == MOE_ROUTER ? 0.0 : p->load_skew;
    for (int64_t e = 0; e < e_n; e++) {
        share[e] = pow((double)(e + 1), -s), capped[e] = false, count[e] = 0;
        total += share[e];
    }
    /* water-filling: an expert whose share is more than every row is given every row, and
     * the rest is shared out again among the others; then floors, and the remainder one
     * each by the largest fractions (ties to the lower index) */
    for (bool again = true; again;) {
        again = false;
        for (int64_t e = 0; e < e_n; e++)
            if (!capped[e] && (double)left * share[e] / total > (double)rows) {
                capped[e] = true, count[e] = rows, left -= rows, total -= share[e], again = true;
            }
    }
    int64_t given = 0;
    for (int64_t e = 0; e < e_n; e++)
        if (!capped[e]) {
            count[e] = (int64_t)floor((double)left * share[e] / total);
            given += count[e];
        }
    for (int64_t r = left - given; r > 0; r--) {
        int64_t best = -1;
        double best_frac = -1;
        for (int64_t e = 0; e < e_n; e++) {
            double frac = (double)left * share[e] / total - (double)count[e];
            if (!capped[e] && count[e] < rows && frac > best_frac)
                best = e, best_frac = frac;
        }
        if (best < 0)
            break;
        count[best]++;
    }
}

/* A row's scores the router chooses by: softmax's probabilities (ranked as the logits
 * are) or sigmoid's, plus the correction bias where there is one (DeepSeek-V3's) */
static void choice_scores(const layer *l, const float *z, const float *bias, double *c)
{
    int64_t e_n = l->p.num_experts;
    double top = -INFINITY, sum = 0;
    for (int64_t e = 0; e < e_n; e++)
        top = z[e] > top ? z[e] : top;
    for (int64_t e = 0; e < e_n; e++)
        sum += c[e] = l->p.moe_scoring == MOE_SIGMOID ? 1.0 / (1.0 + exp(-(double)z[e])) : exp((double)z[e] - top);
    for (int64_t e = 0; e < e_n; e++)
        c[e] = (l->p.moe_scoring == MOE_SIGMOID ? c[e] : c[e] / sum) + (bias ? bias[e] : 0.0);
}

void layer_moe_route(const layer *l, const float *logits, const float *bias, int64_t *experts, int64_t *count)
{
    const layer_params *p = &l->p;
    int64_t e_n = p->num_experts, k = p->top_k, rows = layer_moe_rows(l);
    if (p->routing == MOE_ROUTER) {
        for (int64_t e = 0; e < e_n; e++)
            count[e] = 0;
        int64_t ng = p->n_group > 1 ? p->n_group : 1, per_group = e_n / ng; /* (a layer made without defaults: 0) */
        bool in_group[MOE_MAX_EXPERTS];
        double c[MOE_MAX_EXPERTS];
        for (int64_t r = 0; r < rows; r++) {
            int64_t *pick = experts + r * k;
            choice_scores(l, logits + r * e_n, bias, c);
            /* the groups by their best score (softmax) or the sum of their best two
             * (sigmoid: DeepSeek-V3's noaux_tc), topk_group of them, ties to the lower
             * index; every group where n_group is 1 */
            for (int64_t gi = 0; gi < ng; gi++)
                in_group[gi] = ng == 1;
            for (int64_t j = 0; j < p->topk_group && ng > 1; j++) {
                int64_t best = -1;
                double best_s = 0;
                for (int64_t gi = 0; gi < ng; gi++) {
                    const double *g = c + gi * per_group;
                    double m1 = g[0], m2 = -INFINITY;
                    for (int64_t e = 1; e < per_group; e++)
                        if (g[e] > m1)
                            m2 = m1, m1 = g[e];
                        else if (g[e] > m2)
                            m2 = g[e];
                    double sc = p->moe_scoring == MOE_SIGMOID && per_group > 1 ? m1 + m2 : m1;
                    if (!in_group[gi] && (best < 0 || sc > best_s))
                        best = gi, best_s = sc;
                }
                in_group[best] = true;
            }
            /* the other groups' scores become 0, as DeepSeek's masked_fill leaves them (not
             * out of the choice: an expert of theirs beats a chosen group's below 0) */
            for (int64_t e = 0; e < e_n; e++)
                c[e] = in_group[e / per_group] ? c[e] : 0.0;
            for (int64_t j = 0; j < k; j++) { /* the j-th largest not yet taken, ties to the lower index */
                int64_t best = -1;
                for (int64_t e = 0; e < e_n; e++) {
                    bool taken = false;
                    for (int64_t i = 0; i < j; i++)
                        taken |= pick[i] == e;
                    if (!taken && (best < 0 || c[e] > c[best]))
                        best = e;
                }
                pick[j] = best;
                count[best]++;
            }
        }
        return;
    }
    layer_moe_counts(l, count);
    int64_t slot = 0;
    for (int64_t e = 0; e < e_n; e++)
        for (int64_t c = 0; c < count[e]; c++, slot++)
            experts[(slot % rows) * k + slot / rows] = e;
}

/* FLOPs per token and expert: w1, w3 and w2 (2 per MAC each), silu (5) and the multiply
 * per hidden unit (clamped_swiglu: 3 more for the clamps, the slope and the + 1; bias: 2
 * per hidden unit and 1 per output); per slot the weighted sum into the output (2 per element); per token
 * the softmax over the logits (5 per logit, as softmax) and, with normalize, the
 * renormalisation (2 per expert taken). Bytes: the inputs, the output, and the weights of the experts that run. */
static void moe_count(layer *l)
{
    const layer_params *p = &l->p;
    int64_t h = l->in.d[l->in.rank - 1], f = p->ffn_dim, e_n = p->num_experts, rows = layer_moe_rows(l);
    int64_t per_expert = layer_moe_expert_floats(l), count[MOE_MAX_EXPERTS], active = 0;
    l->n_weights = l->n_weight_floats = layer_count_add(layer_count_mul(e_n, per_expert), p->score_bias ? e_n : 0);
    if (l->n_weights < 0) {
        l->macs = l->flops = l->bytes = -1;
        return;
    }
    layer_moe_counts(l, count);
    for (int64_t e = 0; e < e_n; e++)
        active += count[e] > 0;
    int64_t slots = layer_count_mul(rows, p->top_k);
    l->macs = layer_count_mul(slots, layer_count_mul(3, layer_count_mul(h, f)));
    int64_t act = layer_count_mul(slots, layer_count_add(layer_count_mul(p->moe_act == MOE_ACT_SILU ? 6 : 9, f),
                                                         p->bias ? 2 * f + h : 0));
    int64_t combine = layer_count_mul(slots, 2 * h), route = layer_count_add(layer_count_mul(rows, 5 * e_n),
                                                                            layer_count_mul(slots, p->normalize ? 2 : 0));
    l->flops = layer_count_add(layer_count_add(layer_count_mul(2, l->macs), act), layer_count_add(combine, route));
    int64_t io = layer_count_add(layer_count_mul(2, shape_numel(&l->in)), shape_numel(&l->ins[1]));
    l->bytes = layer_count_mul(4, layer_count_add(layer_count_add(io, layer_count_mul(active, per_expert)),
                                                  p->score_bias ? e_n : 0));
}

static void moe_init(const layer *l, float *w, layer_rng *rng)
{
    int64_t h = l->in.d[l->in.rank - 1], f = l->p.ffn_dim;
    float bh = (float)(1.0 / sqrt((double)h)), bf = (float)(1.0 / sqrt((double)f));
    for (int64_t e = 0; e < l->p.num_experts; e++) {
        float *we = w + e * layer_moe_expert_floats(l);
        layer_fill_uniform(we, h * f, -bh, bh, rng);             /* w1 */
        layer_fill_uniform(we + h * f, h * f, -bf, bf, rng);     /* w2 */
        layer_fill_uniform(we + 2 * h * f, h * f, -bh, bh, rng); /* w3 */
        if (l->p.bias) { /* b1, b2, b3, as nn.Linear draws them */
            layer_fill_uniform(we + 3 * h * f, f, -bh, bh, rng);
            layer_fill_uniform(we + 3 * h * f + f, h, -bf, bf, rng);
            layer_fill_uniform(we + 3 * h * f + f + h, f, -bh, bh, rng);
        }
    }
    if (l->p.score_bias) /* large enough beside the sigmoid's spread to change the choice */
        layer_fill_uniform(w + l->p.num_experts * layer_moe_expert_floats(l), l->p.num_experts, -0.5f, 0.5f, rng);
}

void layer_moe_gates(const layer *l, const float *logits, const int64_t *pick, double *gate)
{
    int64_t k = l->p.top_k;
    double c[MOE_MAX_EXPERTS], taken = 0;
    choice_scores(l, logits, NULL, c); /* the router's scores without the bias: the gates' */
    for (int64_t j = 0; j < k; j++)
        taken += gate[j] = c[pick[j]];
    double f = l->p.routed_scale > 0 ? l->p.routed_scale : 1.0; /* infer refuses 0; a layer made without defaults */
    for (int64_t j = 0; j < k; j++)
        gate[j] = (l->p.normalize ? gate[j] / taken : gate[j]) * f;
}

int64_t layer_moe_twin(const layer *l, layer *twin, shape_t *ins)
{
    int64_t run = layer_count_mul(layer_moe_rows(l), l->p.top_k);
    if (run < 0 || run >= l->p.num_experts)
        return 0;
    *twin = *l;
    ins[0] = l->ins[0], ins[1] = l->ins[1];
    ins[1].d[ins[1].rank - 1] = run;
    twin->ins = ins, twin->in = ins[0];
    twin->p.num_experts = run;
    twin->p.n_group = twin->p.topk_group = 1; /* groups choose among all the experts: routing's, not the arithmetic's */
    return layer_count(twin) == 0 ? run : 0;
}

const float *layer_moe_score_bias(const layer *l, const float *w)
{
    return l->p.score_bias ? w + layer_count_mul(l->p.num_experts, layer_moe_expert_floats(l)) : NULL;
}

static void moe_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const layer_params *p = &l->p;
    int64_t h = l->in.d[l->in.rank - 1], f = p->ffn_dim, e_n = p->num_experts, k = p->top_k, rows = layer_moe_rows(l);
    int64_t *pick = xmalloc((size_t)(rows * k) * sizeof *pick), *count = xmalloc((size_t)e_n * sizeof *count);
    double *gate = xmalloc((size_t)k * sizeof *gate), *act = xmalloc((size_t)f * sizeof *act);
    double *acc = xmalloc((size_t)h * sizeof *acc);
    layer_moe_route(l, ins[1], layer_moe_score_bias(l, w), pick, count);
    for (int64_t r = 0; r < rows; r++) {
        const float *x = ins[0] + r * h;
        for (int64_t i = 0; i < h; i++)
            acc[i] = 0;
        layer_moe_gates(l, ins[1] + r * e_n, pick + r * k, gate);
        for (int64_t j = 0; j < k; j++) {
            const float *w1 = w + pick[r * k + j] * layer_moe_expert_floats(l), *w2 = w1 + h * f, *w3 = w2 + h * f;
            const float *b1 = w3 + h * f, *b2 = b1 + f, *b3 = b2 + h;
            for (int64_t u = 0; u < f; u++) {
                double g = p->bias ? b1[u] : 0, v = p->bias ? b3[u] : 0;
                for (int64_t i = 0; i < h; i++)
                    g += (double)x[i] * w1[u * h + i], v += (double)x[i] * w3[u * h + i];
                act[u] = layer_moe_act(l, g, v);
            }
            for (int64_t i = 0; i < h; i++) {
                double y = p->bias ? b2[i] : 0;
                for (int64_t u = 0; u < f; u++)
                    y += act[u] * w2[i * f + u];
                acc[i] += gate[j] * y;
            }
        }
        for (int64_t i = 0; i < h; i++)
            out[r * h + i] = (float)acc[i];
    }
    free(pick), free(count), free(gate), free(act), free(acc);
}

const layer_desc layer_moe_desc = {
    .name = "moe", .n_inputs = 2, .params = moe_params, .defaults = moe_defaults, .infer = moe_infer,
    .count = moe_count, .init_weights = moe_init, .reference = moe_reference, .tolerance = 2e-6,
};
