/* What the cuda backend decides without a GPU, run on the host:
 * - its backward plans (layers/cuda/cuda_plan.c): each GEMM of linear's backward plan run
 *   as cuBLAS would run it (column-major, op(A) and op(B) as the call says) against the
 *   plain-C reference backward, on awkward shapes, with and without a bias, frozen and
 *   without an input gradient; the parts a plan leaves out left unwritten; a plan with
 *   one transpose flipped caught; dimensions past cuBLAS's int refused; and where each
 *   gradient lies in a backward's output;
 * - the decoder kinds' arithmetic (layers/cuda/llm_cuda_math.h): the token ids an
 *   embedding reads, the keys each query sees, and the attention kernel's whole order of
 *   work (keys split over blocks and warps, an online softmax per warp, the merges, the
 *   sinks) against the reference attention, on causal, grouped-query, windowed,
 *   cached, soft-capped, sink and cross-attention layers; a wrong mask caught;
 * - the moving kinds' sources (layers/cuda/index_cuda_math.h, with cuda_move_plan's
 *   parameters): roll, patch_merge, window_partition and window_merge read on the
 *   reference's output of an input that holds each element's own index; numpy
 *   broadcasting's index against layer_broadcast_index. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_plan.h"
#include "llm_cuda_math.h"
#include "test_util.h"

/* C = op(A) op(B) column-major, as cublasGemmEx with beta 0, summed in double */
static void host_gemm(const cuda_gemm_call *g, const float *a, const float *b, float *c)
{
    for (int64_t j = 0; j < g->n; j++)
        for (int64_t i = 0; i < g->m; i++) {
            double s = 0;
            for (int64_t p = 0; p < g->k; p++)
                s += (double)(g->ta ? a[p + i * g->lda] : a[i + p * g->lda]) *
                     (double)(g->tb ? b[j + p * g->ldb] : b[p + j * g->ldb]);
            c[i + j * g->ldc] = (float)s;
        }
}

static double rel_err(const float *got, const float *ref, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(got[i]))
            return INFINITY;
        num += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static bool make_linear(layer *l, shape_t in, int64_t out_features, bool bias)
{
    static int inputs[1];
    static shape_t ins[1];
    const layer_desc *d = layer_desc_get(LAYER_LINEAR);
    char err[256];
    memset(l, 0, sizeof *l);
    l->name = "fc";
    l->kind = LAYER_LINEAR;
    if (d->defaults)
        d->defaults(&l->p);
    l->p.out_features = out_features;
    l->p.bias = bias;
    l->in = ins[0] = in;
    l->n_inputs = 1;
    l->inputs = inputs;
    l->ins = ins;
    if (d->infer(l, err, sizeof err) != 0 || layer_count(l) != 0)
        return false;
    *l = layer_as_backward(l);
    return true;
}

/* Runs the plan on the host; returns its worst relative error against the reference,
 * or -1 if it wrote what it should have left alone. flip: op(A) of the first call
 * inverted (a wrong plan the check must catch). */
static double run_linear(const layer *l, bool flip)
{
    int64_t nx = shape_numel(&l->in), ny = shape_numel(&l->out), nw = l->n_weight_floats;
    int64_t f = l->in.d[l->in.rank - 1], rows = nx / f, o = l->p.out_features;
    float *x = malloc(sizeof(float) * (size_t)nx), *w = malloc(sizeof(float) * (size_t)nw);
    float *y = malloc(sizeof(float) * (size_t)ny), *dy = malloc(sizeof(float) * (size_t)ny);
    float *ones = malloc(sizeof(float) * (size_t)rows);
    int64_t ng = layer_backward_floats(l);
    float *ref = calloc((size_t)ng, sizeof(float)), *got = malloc(sizeof(float) * (size_t)ng);
    layer_rng rng;
    layer_rng_seed(&rng, 7 + (uint64_t)nx);
    layer_fill_uniform(x, nx, -1, 1, &rng);
    layer_fill_uniform(w, nw, -1, 1, &rng);
    layer_fill_uniform(dy, ny, -1, 1, &rng);
    for (int64_t r = 0; r < rows; r++)
        ones[r] = 1.0f;
    for (int64_t i = 0; i < ng; i++)
        got[i] = NAN;
    const float *in[1] = {x};
    layer_desc_get(LAYER_LINEAR)->reference(l, in, w, y);
    float *din[1] = {ref + cuda_bwd_offset(l, 0)};
    layer_desc_get(LAYER_LINEAR)->backward(l, in, w, y, dy, din, ref + cuda_bwd_offset(l, 1));

    cuda_gemm_call calls[3];
    char why[128];
    int n = cuda_linear_bwd_plan(l, calls, why, sizeof why);
    EXPECT(n >= 0, "plan: %s", why);
    float *dw = got + cuda_bwd_offset(l, 1);
    const float *operand[CUDA_PLAN_OPERANDS] = {x, w, dy, got + cuda_bwd_offset(l, 0), dw, dw + o * f, ones};
    if (flip && n > 0)
        calls[0].ta = !calls[0].ta, calls[0].lda = calls[0].ta ? calls[0].k : calls[0].m;
    for (int i = 0; i < n; i++)
        host_gemm(&calls[i], operand[calls[i].a], operand[calls[i].b], (float *)operand[calls[i].c]);
    double worst = 0;
    int64_t at_w = cuda_bwd_offset(l, 1);
    if (l->no_input_grad) { /* untouched: NaN as set */
        for (int64_t i = 0; i < at_w; i++)
            if (!isnan(got[i]))
                worst = -1;
    } else {
        double e = rel_err(got, ref, at_w);
        worst = e > worst ? e : worst;
    }
    if (worst >= 0 && l->frozen) {
        for (int64_t i = at_w; i < ng; i++)
            if (!isnan(got[i]))
                worst = -1;
    } else if (worst >= 0) {
        double e = rel_err(got + at_w, ref + at_w, nw);
        worst = e > worst ? e : worst;
    }
    free(x), free(w), free(y), free(dy), free(ones), free(ref), free(got);
    return worst;
}

static void linear_plans(void)
{
    const struct {
        shape_t in;
        int64_t o;
        bool bias;
    } cases[] = {
        {{2, {5, 7}}, 3, true},  {{2, {1, 13}}, 9, false}, {{3, {2, 3, 17}}, 1, true},
        {{2, {33, 1}}, 5, true}, {{3, {1, 1, 64}}, 130, true}, {{4, {2, 3, 4, 6}}, 11, false},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        layer l;
        EXPECT(make_linear(&l, cases[c].in, cases[c].o, cases[c].bias), "case %zu builds", c);
        for (int mode = 0; mode < 3; mode++) { /* all, frozen, no input gradient */
            l.frozen = mode == 1, l.no_input_grad = mode == 2;
            cuda_gemm_call calls[3];
            char why[128];
            int n = cuda_linear_bwd_plan(&l, calls, why, sizeof why);
            int want = (mode != 2) + (mode != 1) * (1 + cases[c].bias);
            EXPECT(n == want, "case %zu mode %d: %d calls, want %d", c, mode, n, want);
            for (int i = 0; i < n; i++)
                EXPECT(strcmp(calls[i].part, calls[i].c == CUDA_PLAN_DX ? "backward data" : "backward weights") == 0,
                       "case %zu: call %d's part %s", c, i, calls[i].part);
            double e = run_linear(&l, false);
            printf("  linear %zu (rows x %lld -> %lld%s) mode %d: rel. error %.2e\n", c,
                   (long long)l.in.d[l.in.rank - 1], (long long)cases[c].o, cases[c].bias ? ", bias" : "", mode, e);
            EXPECT(e >= 0 && e < 1e-6, "case %zu mode %d: relative error %.3e", c, mode, e);
        }
        l.frozen = l.no_input_grad = false;
        /* a wrong plan is caught (where W is a vector or square, W^T lies as W does in
         * memory: a flipped transpose computes the same) */
        int64_t f = l.in.d[l.in.rank - 1];
        if (f != cases[c].o && f > 1 && cases[c].o > 1) {
            double e = run_linear(&l, true);
            EXPECT(e < 0 || e > 1e-2, "case %zu: a flipped transpose passed (%.3e)", c, e);
        }
    }
    /* past cuBLAS's int: refused with the reason */
    layer big;
    EXPECT(make_linear(&big, (shape_t){2, {4, (int64_t)1 << 31}}, 2, false), "the large layer builds");
    cuda_gemm_call calls[3];
    char why[128] = "";
    EXPECT(cuda_linear_bwd_plan(&big, calls, why, sizeof why) == -1 && strstr(why, "int"), "refused: '%s'", why);
}

static void offsets(void)
{
    static shape_t ins[3] = {{2, {2, 3}}, {2, {2, 5}}, {2, {2, 1}}};
    layer l = {.kind = LAYER_CONCAT, .n_inputs = 3, .ins = ins};
    EXPECT(cuda_bwd_offset(&l, 0) == 0 && cuda_bwd_offset(&l, 1) == 6 && cuda_bwd_offset(&l, 2) == 16 &&
               cuda_bwd_offset(&l, 3) == 18,
           "concat offsets %lld %lld %lld %lld", (long long)cuda_bwd_offset(&l, 0), (long long)cuda_bwd_offset(&l, 1),
           (long long)cuda_bwd_offset(&l, 2), (long long)cuda_bwd_offset(&l, 3));
}

/* ---- the decoder kinds' arithmetic ------------------------------------------------------ */

static void token_ids(void)
{
    layer l = {.kind = LAYER_EMBEDDING};
    int bad = 0;
    for (int64_t v = 1; v <= 130; v += 43) {
        l.p.num_embeddings = v;
        for (int i = -1000; i <= 1000; i++) {
            float x = (float)i / 1000.0f;
            bad += lb_token_id(x, v) != layer_token_id(&l, x);
            bad += lb_token_id(nextafterf(x, 2.0f), v) != layer_token_id(&l, nextafterf(x, 2.0f));
        }
    }
    EXPECT(bad == 0, "%d token ids differ from layer_token_id", bad);
}

typedef struct attn_case {
    const char *what;
    int64_t n, t, tk, h, hkv, d, s, window;
    bool causal, sinks;
    double softcap;
    int sms;
} attn_case;

static bool make_attention(layer *l, const attn_case *c, shape_t *ins)
{
    static int inputs[3];
    const layer_desc *d = layer_desc_get(LAYER_ATTENTION);
    char err[256];
    memset(l, 0, sizeof *l);
    l->name = "attn";
    l->kind = LAYER_ATTENTION;
    d->defaults(&l->p);
    l->p.num_heads = c->h, l->p.num_kv_heads = c->hkv, l->p.head_dim = c->d, l->p.kv_len = c->s;
    l->p.sliding_window = c->window, l->p.causal = c->causal, l->p.sinks = c->sinks, l->p.softcap = c->softcap;
    ins[0] = (shape_t){3, {c->n, c->t, c->h * c->d}};
    ins[1] = ins[2] = (shape_t){3, {c->n, c->tk, c->hkv * c->d}};
    l->in = ins[0];
    l->n_inputs = 3, l->inputs = inputs, l->ins = ins;
    if (d->infer(l, err, sizeof err) != 0) {
        printf("  %s: %s\n", c->what, err);
        return false;
    }
    return layer_count(l) == 0;
}

static lb_attn attn_of(const layer *l)
{
    lb_attn a = {l->in.d[0], l->in.d[1], l->ins[1].d[1], l->p.num_heads, l->p.num_kv_heads, l->p.head_dim,
                 l->p.kv_len, layer_attention_cached(l), l->p.sliding_window, l->p.causal,
                 (float)(1.0 / sqrt((double)l->p.head_dim)), (float)l->p.softcap};
    return a;
}

/* The attention kernels' order of work on the host (cuda_kernels.cu's attention_kernel and
 * attention_merge_kernel): per query, its keys split over splits blocks and each block's
 * share over warps, an online softmax per warp, the warps merged per block, the blocks
 * merged, the sink last. The dot products sum in a different order than the warp's
 * shuffles, in fp32 as they do. */
static void host_attention(const lb_attn *a, int splits, int warps, const float *const *ins, const float *cache,
                           const float *sinks, float *out)
{
    float wacc[LB_ATTN_LANE_DIMS * 32], bacc[LB_ATTN_LANE_DIMS * 32], acc[LB_ATTN_LANE_DIMS * 32];
    for (int64_t query = 0; query < a->n * a->t * a->h; query++) {
        int64_t hh = query % a->h, tt = (query / a->h) % a->t, b = query / (a->h * a->t);
        int64_t g = hh / (a->h / a->hkv), qo = ((b * a->t + tt) * a->h + hh) * a->d, lo, hi;
        const float *q = ins[0] + qo;
        lb_attn_keys(a, tt, &lo, &hi);
        float m = -INFINITY, l = 0, f, f2;
        for (int64_t i = 0; i < a->d; i++)
            acc[i] = 0;
        for (int sp = 0; sp < splits; sp++) {
            int64_t from, to;
            lb_split(lo, hi, sp, splits, &from, &to);
            float bm = -INFINITY, bl = 0;
            for (int64_t i = 0; i < a->d; i++)
                bacc[i] = 0;
            for (int w = 0; w < warps; w++) {
                int64_t first, last;
                lb_split(from, to, w, warps, &first, &last);
                float wm = -INFINITY, wl = 0;
                for (int64_t i = 0; i < a->d; i++)
                    wacc[i] = 0;
                for (int64_t j = first; j <= last; j++) {
                    int cached;
                    int64_t ko = lb_attn_kv_at(a, 0, b, g, j, &cached);
                    const float *k = (cached ? cache : ins[1]) + ko;
                    float dot = 0, p;
                    for (int64_t i = 0; i < a->d; i++)
                        dot += q[i] * k[i];
                    f = lb_online_push(&wm, &wl, lb_attn_score(a, dot), &p);
                    int64_t vo = lb_attn_kv_at(a, 1, b, g, j, &cached);
                    const float *v = (cached ? cache : ins[2]) + vo;
                    for (int64_t i = 0; i < a->d; i++)
                        wacc[i] = wacc[i] * f + p * v[i];
                }
                f = lb_online_merge(&bm, &bl, wm, wl, &f2);
                for (int64_t i = 0; i < a->d; i++)
                    bacc[i] = bacc[i] * f + wacc[i] * f2;
            }
            f = lb_online_merge(&m, &l, bm, bl, &f2);
            for (int64_t i = 0; i < a->d; i++)
                acc[i] = acc[i] * f + bacc[i] * f2;
        }
        f = 1;
        if (sinks)
            f = lb_online_merge(&m, &l, sinks[hh], 1.0f, &f2);
        for (int64_t i = 0; i < a->d; i++)
            out[qo + i] = acc[i] * f / l;
    }
}

static void attention_order(void)
{
    const attn_case cases[] = {
        {"prefill, causal, grouped-query", 2, 7, 7, 4, 2, 16, 0, 0, true, false, 0, 132},
        {"decode after 1000 cached, 1 kv head", 1, 1, 1, 4, 1, 64, 1000, 0, true, false, 0, 132},
        {"window 16 over a cache of 40", 2, 5, 5, 2, 2, 8, 40, 16, true, false, 0, 132},
        {"softcap and sinks, head_dim 40, 600 cached", 1, 3, 3, 4, 2, 40, 600, 0, true, true, 30.0, 132},
        {"cross-attention, 9 keys", 2, 3, 9, 3, 3, 24, 0, 0, false, false, 0, 132},
        {"head_dim 256, window 512 over 700 cached", 1, 1, 1, 2, 1, 256, 700, 512, true, false, 0, 8},
        {"decode, batch 3, few multiprocessors", 3, 1, 1, 2, 2, 32, 2047, 0, true, true, 0, 4},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        layer l;
        shape_t ins_s[3];
        EXPECT(make_attention(&l, &cases[c], ins_s), "attention case %zu builds", c);
        if (l.kind != LAYER_ATTENTION || !l.ins)
            continue;
        lb_attn a = attn_of(&l);
        /* the keys each query sees: the reference's mask exactly */
        int bad = 0;
        for (int64_t t = 0; t < a.t; t++) {
            int64_t lo, hi;
            lb_attn_keys(&a, t, &lo, &hi);
            for (int64_t j = 0; j < a.s + a.tk; j++)
                bad += (j >= lo && j <= hi) != layer_attention_sees(&l, t, j);
        }
        EXPECT(bad == 0, "%s: %d (query, key) pairs seen differently from the reference", cases[c].what, bad);
        int splits, warps;
        lb_attn_grid(&a, cases[c].sms, &splits, &warps);
        int64_t nq = shape_numel(&l.ins[0]), nk = shape_numel(&l.ins[1]), nw = l.n_weight_floats;
        float *q = malloc(sizeof(float) * (size_t)nq), *k = malloc(sizeof(float) * (size_t)nk);
        float *v = malloc(sizeof(float) * (size_t)nk), *w = malloc(sizeof(float) * (size_t)(nw ? nw : 1));
        float *ref = malloc(sizeof(float) * (size_t)nq), *got = malloc(sizeof(float) * (size_t)nq);
        layer_rng rng;
        layer_rng_seed(&rng, 11 + c);
        layer_fill_uniform(q, nq, -1, 1, &rng);
        layer_fill_uniform(k, nk, -1, 1, &rng);
        layer_fill_uniform(v, nk, -1, 1, &rng);
        layer_fill_uniform(w, nw, -1, 1, &rng);
        const float *ins[3] = {q, k, v};
        layer_desc_get(LAYER_ATTENTION)->reference(&l, ins, w, ref);
        host_attention(&a, splits, warps, ins, w, layer_attention_sinks(&l, w), got);
        double e = rel_err(got, ref, nq);
        printf("  attention: %s: %d split(s) x %d warp(s), rel. error %.2e\n", cases[c].what, splits, warps, e);
        EXPECT(e < 1e-5, "%s: relative error %.3e", cases[c].what, e);
        /* the test can fail: with a window one key shorter (it reads nothing the cache lacks),
         * or without the causal mask, it must */
        if (a.window > 1 || (a.causal && a.s == 0)) {
            lb_attn wrong = a;
            if (a.window > 1)
                wrong.window = a.window - 1;
            else
                wrong.causal = 0;
            host_attention(&wrong, splits, warps, ins, w, layer_attention_sinks(&l, w), got);
            double ew = rel_err(got, ref, nq);
            EXPECT(ew > 1e-2, "%s: a wrong mask passed (%.3e)", cases[c].what, ew);
        }
        free(q), free(k), free(v), free(w), free(ref), free(got);
    }
    /* the launch's shape: a decode step on a large GPU is split; a prefill is not */
    lb_attn dec = {1, 1, 1, 32, 8, 64, 1024, 1024, 0, 1, 0.125f, 0};
    int splits, warps;
    lb_attn_grid(&dec, 132, &splits, &warps);
    EXPECT(splits == 4 && warps == 8, "Llama-3.2-1B's decode at 1024: %d splits x %d warps, want 4 x 8", splits, warps);
    lb_attn pre = {1, 128, 128, 32, 8, 64, 0, 0, 0, 1, 0.125f, 0};
    lb_attn_grid(&pre, 132, &splits, &warps);
    EXPECT(splits == 1 && warps == 2, "a 128-token prefill: %d splits x %d warps, want 1 x 2", splits, warps);
}

/* ---- the moves and broadcasting ---------------------------------------------------------- */

static bool make_one(layer *l, layer_kind kind, shape_t in, void (*set)(layer_params *))
{
    static int inputs[1];
    static shape_t ins[1];
    const layer_desc *d = layer_desc_get(kind);
    char err[256];
    memset(l, 0, sizeof *l);
    l->name = "move";
    l->kind = kind;
    if (d->defaults)
        d->defaults(&l->p);
    set(&l->p);
    l->in = ins[0] = in;
    l->n_inputs = 1, l->inputs = inputs, l->ins = ins;
    if (d->infer(l, err, sizeof err) != 0) {
        printf("  %s: %s\n", d->name, err);
        return false;
    }
    return layer_count(l) == 0;
}

static void roll_2(layer_params *p)
{
    int64_t s[] = {2, -3, 5}, d[] = {2, 1, -1};
    memcpy(p->roll_shifts, s, sizeof s), memcpy(p->roll_dims, d, sizeof d);
}
static void roll_1(layer_params *p)
{
    int64_t s[] = {1, 9}, d[] = {1, 2};
    memcpy(p->roll_shifts, s, sizeof s), memcpy(p->roll_dims, d, sizeof d);
}
static void no_params(layer_params *p) { (void)p; }
static void windows_3x2(layer_params *p) { p->window_size[0] = 3, p->window_size[1] = 2; }
static void merge_3x2(layer_params *p)
{
    p->window_size[0] = 3, p->window_size[1] = 2, p->partitions[0] = 2, p->partitions[1] = 3;
}

static void moves(void)
{
    const struct {
        const char *what;
        layer_kind kind;
        shape_t in;
        void (*set)(layer_params *);
    } cases[] = {
        {"roll of two dims, one negative", LAYER_ROLL, {4, {2, 5, 7, 3}}, roll_2},
        {"roll by more than the size", LAYER_ROLL, {3, {1, 4, 6}}, roll_1},
        {"patch_merge of odd H and W (padded)", LAYER_PATCH_MERGE, {4, {2, 5, 3, 4}}, no_params},
        {"patch_merge of even H and W", LAYER_PATCH_MERGE, {4, {1, 4, 6, 2}}, no_params},
        {"window_partition 3x2", LAYER_WINDOW_PARTITION, {4, {2, 3, 6, 6}}, windows_3x2},
        {"window_merge 3x2", LAYER_WINDOW_MERGE, {4, {2, 6, 6, 5}}, merge_3x2},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        layer l;
        EXPECT(make_one(&l, cases[c].kind, cases[c].in, cases[c].set), "%s builds", cases[c].what);
        lb_move m;
        char why[128] = "";
        EXPECT(cuda_move_plan(&l, &m, why, sizeof why), "%s: %s", cases[c].what, why);
        int64_t n_in = shape_numel(&l.in), n_out = shape_numel(&l.out);
        float *in = malloc(sizeof(float) * (size_t)n_in), *ref = malloc(sizeof(float) * (size_t)n_out);
        for (int64_t i = 0; i < n_in; i++)
            in[i] = (float)(i + 1); /* 0 stays the padding's */
        const float *ins[1] = {in};
        layer_desc_get(l.kind)->reference(&l, ins, NULL, ref);
        int bad = 0;
        for (int64_t o = 0; o < n_out; o++) {
            int64_t src = lb_move_source(&m, o);
            bad += (src < -1 || src >= n_in) || ref[o] != (src < 0 ? 0.0f : (float)(src + 1));
        }
        printf("  move: %s: %lld elements, %d differ\n", cases[c].what, (long long)n_out, bad);
        EXPECT(bad == 0, "%s: %d of %lld elements read another source than the reference", cases[c].what, bad,
               (long long)n_out);
        free(in), free(ref);
    }
    layer conv = {.kind = LAYER_CONV2D};
    lb_move m;
    char why[128] = "";
    EXPECT(!cuda_move_plan(&conv, &m, why, sizeof why) && strstr(why, "not a move"), "conv2d refused: '%s'", why);

    /* broadcasting: [2, 1, 4, 1] and [1, 3, 1, 5] to [2, 3, 4, 5], both ways round */
    shape_t a = {4, {2, 1, 4, 1}}, b = {4, {1, 3, 1, 5}}, out = {4, {2, 3, 4, 5}};
    lb_dims da = cuda_lb_dims(&a), db = cuda_lb_dims(&b), dout = cuda_lb_dims(&out);
    int bad = 0;
    for (int64_t o = 0; o < shape_numel(&out); o++)
        bad += lb_broadcast_index(&da, &dout, o) != layer_broadcast_index(&a, &out, o) ||
               lb_broadcast_index(&db, &dout, o) != layer_broadcast_index(&b, &out, o) ||
               lb_broadcast_index(&dout, &dout, o) != o;
    EXPECT(bad == 0, "%d broadcast indices differ from layer_broadcast_index", bad);
}

int main(void)
{
    linear_plans();
    offsets();
    token_ids();
    attention_order();
    moves();
    return test_summary("test_cuda_plan");
}
