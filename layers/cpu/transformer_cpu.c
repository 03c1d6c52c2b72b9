/* Transformer kinds on the CPU: layernorm and gelu as vectorised OpenMP loops (one pass
 * over the data each, so they run at memory speed), multihead_attention through
 * cblas_sgemm (the packed q/k/v projection and the out projection over all tokens,
 * and per (sample, head) the scores Q K^T and their product with V, the heads spread
 * over the threads), and the token kinds (transpose, class_token, pos_embedding,
 * select) as copies. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "fast_math.h"

/* ---- layernorm -------------------------------------------------------------------------- */

/* One row: mean, variance about the mean (two passes: no cancellation), then the
 * normalised and scaled values. */
CPU_ISA_CLONES
static void layernorm_row(const float *x, float *y, int64_t d, const float *gamma, const float *beta, float eps)
{
    float sum = 0.0f, sq = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < d; i++)
        sum += x[i];
    float mean = sum / (float)d;
#pragma omp simd reduction(+ : sq)
    for (int64_t i = 0; i < d; i++)
        sq += (x[i] - mean) * (x[i] - mean);
    float rstd = 1.0f / sqrtf(sq / (float)d + eps);
    if (gamma && beta) {
#pragma omp simd
        for (int64_t i = 0; i < d; i++)
            y[i] = (x[i] - mean) * rstd * gamma[i] + beta[i];
    } else if (gamma) {
#pragma omp simd
        for (int64_t i = 0; i < d; i++)
            y[i] = (x[i] - mean) * rstd * gamma[i];
    } else {
#pragma omp simd
        for (int64_t i = 0; i < d; i++)
            y[i] = (x[i] - mean) * rstd;
    }
}

static void layernorm_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w_, void *out_)
{
    const float *w = w_;
    float *out = out_;
    const float *const *ins = (const float *const *)ins_;
    (void)env, (void)state;
    const float *in = ins[0];
    int64_t d = l->p.normalized_shape, rows = shape_numel(&l->in) / d;
    const float *gamma = l->p.affine ? w : NULL, *beta = l->n_weight_floats > d ? w + d : NULL;
    float eps = (float)l->p.eps;
    CPU_OMP_IF(rows * d > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t r = 0; r < rows; r++)
            layernorm_row(in + r * d, out + r * d, d, gamma, beta, eps););
}

/* ---- groupnorm ------------------------------------------------------------------------------ */

/* One (sample, group): cg channels of `spatial` elements, contiguous. The statistics in
 * double (a UNet's group holds 8 channels of 64x64, 32k elements, where a float sum
 * drifts past the tolerance), then per channel y = x * a + b. */
CPU_ISA_CLONES
static void groupnorm_run_one(const float *x, float *y, int64_t cg, int64_t spatial, const float *gamma,
                              const float *beta, double eps)
{
    int64_t n = cg * spatial;
    double sum = 0.0, sq = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; i++)
        sum += x[i];
    double mean = sum / (double)n;
#pragma omp simd reduction(+ : sq)
    for (int64_t i = 0; i < n; i++)
        sq += ((double)x[i] - mean) * ((double)x[i] - mean);
    double rstd = 1.0 / sqrt(sq / (double)n + eps);
    for (int64_t c = 0; c < cg; c++) {
        float a = (float)(rstd * (gamma ? gamma[c] : 1.0)), b = (float)((beta ? beta[c] : 0.0) - mean * a);
        const float *xc = x + c * spatial;
        float *yc = y + c * spatial;
#pragma omp simd
        for (int64_t i = 0; i < spatial; i++)
            yc[i] = xc[i] * a + b;
    }
}

static void groupnorm_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w_, void *out_)
{
    const float *in = ((const float *const *)ins_)[0], *w = w_;
    float *out = out_;
    (void)env, (void)state;
    int64_t c = l->p.num_channels, g = l->p.num_groups, cg = c / g, n = l->in.d[0];
    int64_t spatial = shape_numel(&l->in) / (n * c), run = cg * spatial;
    CPU_OMP_IF(n * g * run > CPU_PARALLEL_MIN && n * g > 1, "omp parallel for schedule(static)",
        for (int64_t b = 0; b < n * g; b++) {
            int64_t c0 = (b % g) * cg;
            groupnorm_run_one(in + b * run, out + b * run, cg, spatial, l->p.affine ? w + c0 : NULL,
                              l->p.affine ? w + c + c0 : NULL, l->p.eps);
        });
}

/* ---- gelu --------------------------------------------------------------------------------- */

CPU_ISA_CLONES
static void gelu_span(const float *in, float *out, int64_t n, bool tanh_approx)
{
    if (tanh_approx) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) {
            float x = in[i];
            out[i] = 0.5f * x * (1.0f + lb_tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
        }
    } else {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) {
            float x = in[i];
            out[i] = 0.5f * x * (1.0f + lb_erff(x * 0.7071067811865476f));
        }
    }
}

static void gelu_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w_, void *out_)
{
    const float *w = w_;
    float *out = out_;
    const float *const *ins = (const float *const *)ins_;
    (void)env, (void)state, (void)w;
    const float *in = ins[0];
    int64_t n = shape_numel(&l->in);
    bool tanh_approx = l->p.mode == GELU_TANH;
    CPU_OMP_IF(n > CPU_PARALLEL_MIN, "omp parallel",
        {
            int64_t lo, hi;
            cpu_thread_span(n, &lo, &hi);
            if (hi > lo)
                gelu_span(in + lo, out + lo, hi - lo, tanh_approx);
        });
}

/* ---- multihead_attention ------------------------------------------------------------------- */

/* The heads' loop runs QK^T, softmax and AV per (sample, head), the scores staying in
 * the caches; with the parts on, each thread adds up its time in each of the three
 * steps, and the loop's time is split between them in proportion. */
enum { MHA_STEP_QK, MHA_STEP_SOFTMAX, MHA_STEP_AV, MHA_STEPS, MHA_STEP_STRIDE = 8 /* a cache line per thread */ };

typedef struct mha_state {
    float *qkv;      /* [N S, 3E] */
    float *heads;    /* [N S, E]: the heads' outputs side by side */
    float *scores;   /* per thread, [S, S] */
    int threads;
    bool parts;      /* time the parts (in-model view) */
    double *steps;   /* per thread, MHA_STEP_STRIDE: seconds in each step of the heads' loop */
    double part_s[5];/* the last run: in_proj, qk, softmax, av, out_proj */
} mha_state;

static bench_status mha_setup(void *env, const layer *l, const void *w, void **state, char *impl, size_t len,
                              int64_t *ws)
{
    cpu_choices *search = cpu_env_choices(env);
    (void)w, (void)search;
    int64_t n = l->in.d[0], s = l->in.d[1], e = l->p.embed_dim;
    mha_state *m = calloc(1, sizeof *m);
    if (!m)
        return BENCH_ERR_NOMEM;
    m->threads = omp_get_max_threads();
    /* each thread's [S, S] scores: a product no tensor of the model bounds (-1 on
     * overflow, which bench_alloc_floats refuses) */
    int64_t scores = bench_mul(bench_mul(m->threads, s), s);
    m->qkv = bench_alloc_floats(n * s * 3 * e);
    m->heads = bench_alloc_floats(n * s * e);
    m->scores = bench_alloc_floats(scores);
    m->steps = calloc((size_t)m->threads * MHA_STEP_STRIDE, sizeof *m->steps);
    if (!m->qkv || !m->heads || !m->scores || !m->steps) {
        free(m->qkv), free(m->heads), free(m->scores), free(m->steps), free(m);
        return BENCH_ERR_NOMEM;
    }
    *ws = 4 * (n * s * 4 * e + scores);
    snprintf(impl, len, "sgemm qkv + per head QK^T softmax AV + sgemm out");
    *state = m;
    return BENCH_OK;
}

static void mha_free(void *env, void *state)
{
    (void)env;
    mha_state *m = state;
    if (m)
        free(m->qkv), free(m->heads), free(m->scores), free(m->steps);
    free(m);
}

void cpu_project(const float *x, const float *wt, const float *b, float *y, int64_t rows, int64_t f, int64_t o)
{
    if (b)
        for (int64_t r = 0; r < rows; r++)
            memcpy(y + r * o, b, (size_t)o * sizeof *y);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)rows, (blasint)o, (blasint)f, 1.0f, x, (blasint)f,
                wt, (blasint)f, b ? 1.0f : 0.0f, y, (blasint)o);
}

/* One (sample, head): scores = scale Q K^T, their softmax, head = P V. With steps, adds
 * the seconds of each step there. */
static void mha_head(const float *q, const float *k, const float *v, float *sc, float *head, int64_t s, int64_t e,
                     int64_t dh, float scale, double *steps)
{
    double t0 = steps ? bench_now() : 0;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)s, (blasint)s, (blasint)dh, scale, q,
                (blasint)(3 * e), k, (blasint)(3 * e), 0.0f, sc, (blasint)s);
    double t1 = steps ? bench_now() : 0;
    for (int64_t r = 0; r < s; r++)
        cpu_softmax_row(sc + r * s, sc + r * s, s);
    double t2 = steps ? bench_now() : 0;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)s, (blasint)dh, (blasint)s, 1.0f, sc, (blasint)s,
                v, (blasint)(3 * e), 0.0f, head, (blasint)e);
    if (steps) {
        double t3 = bench_now();
        steps[MHA_STEP_QK] += t1 - t0, steps[MHA_STEP_SOFTMAX] += t2 - t1, steps[MHA_STEP_AV] += t3 - t2;
    }
}

static void mha_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out)
{
    (void)env;
    mha_state *m = state;
    int64_t n = l->in.d[0], s = l->in.d[1], e = l->p.embed_dim, h = l->p.num_heads, dh = e / h;
    const float *in_w, *in_b, *out_w, *out_b;
    layer_mha_weights(l, w, &in_w, &in_b, &out_w, &out_b);
    double t0 = m->parts ? bench_now() : 0;
    cpu_project(ins[0], in_w, in_b, m->qkv, n * s, e, 3 * e);
    double t1 = m->parts ? bench_now() : 0;
    if (m->parts)
        memset(m->steps, 0, (size_t)m->threads * MHA_STEP_STRIDE * sizeof *m->steps);
    float scale = (float)(1.0 / sqrt((double)dh));
    /* one (sample, head) per iteration; OpenBLAS runs single-threaded inside a parallel
     * region */
#pragma omp parallel for schedule(dynamic) num_threads(m->threads) if (n * h > 1)
    for (int64_t t = 0; t < n * h; t++) {
        int64_t b = t / h, hd = t % h, th = omp_get_thread_num();
        const float *q = m->qkv + b * s * 3 * e + hd * dh;
        mha_head(q, q + e, q + 2 * e, m->scores + th * s * s, m->heads + b * s * e + hd * dh, s, e, dh, scale,
                 m->parts ? m->steps + th * MHA_STEP_STRIDE : NULL);
    }
    double t2 = m->parts ? bench_now() : 0;
    cpu_project(m->heads, out_w, out_b, out, n * s, e, e);
    if (m->parts) {
        double sum[MHA_STEPS] = {0}, all = 0;
        for (int th = 0; th < m->threads; th++)
            for (int k = 0; k < MHA_STEPS; k++)
                sum[k] += m->steps[th * MHA_STEP_STRIDE + k], all += m->steps[th * MHA_STEP_STRIDE + k];
        m->part_s[0] = t1 - t0;
        for (int k = 0; k < MHA_STEPS; k++)
            m->part_s[1 + k] = all > 0 ? (t2 - t1) * sum[k] / all : (t2 - t1) / MHA_STEPS;
        m->part_s[4] = bench_now() - t2;
    }
}

static bool mha_parts_enable(void *env, void *state, bool on)
{
    (void)env;
    ((mha_state *)state)->parts = on;
    return true;
}

static void mha_parts_read(void *env, void *state, double *seconds)
{
    (void)env;
    memcpy(seconds, ((mha_state *)state)->part_s, sizeof ((mha_state *)state)->part_s);
}

/* ---- the token kinds -------------------------------------------------------------------------- */

/* One tile of a transpose of single floats: dst[j * ds + i] = src[i * ss + j], written
 * a destination row at a time with the strides as plain increments (the index
 * arithmetic per element, not the memory, was what the general loop paid for). */
CPU_ISA_CLONES
static void transpose_tile(const float *src, int64_t ss, float *dst, int64_t ds, int64_t ni, int64_t nj)
{
    for (int64_t j = 0; j < nj; j++) {
        const float *s = src + j;
        float *d = dst + j * ds;
        for (int64_t i = 0; i < ni; i++)
            d[i] = s[i * ss];
    }
}

static void transpose_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w_, void *out_)
{
    const float *w = w_;
    float *out = out_;
    const float *const *ins = (const float *const *)ins_;
    (void)env, (void)state, (void)w;
    const float *in = ins[0];
    int64_t outer, a, mid, b, inner;
    layer_transpose_dims(l, &outer, &a, &mid, &b, &inner);
    /* out[o][j][m][i][k] = in[o][i][m][j][k]: blocks of 32 x 32 (i, j) for the caches */
    int64_t bi = 32, blocks_i = (a + bi - 1) / bi, blocks_j = (b + bi - 1) / bi;
    CPU_OMP_IF(shape_numel(&l->in) > CPU_PARALLEL_MIN, "omp parallel for collapse(2) schedule(static)",
        for (int64_t om = 0; om < outer * mid; om++)
            for (int64_t blk = 0; blk < blocks_i * blocks_j; blk++) {
                int64_t o = om / mid, mm = om % mid, i0 = (blk / blocks_j) * bi, j0 = (blk % blocks_j) * bi;
                int64_t i1 = i0 + bi < a ? i0 + bi : a, j1 = j0 + bi < b ? j0 + bi : b;
                const float *src = in + (((o * a + i0) * mid + mm) * b + j0) * inner;
                float *dst = out + (((o * b + j0) * mid + mm) * a + i0) * inner;
                if (inner == 1) {
                    transpose_tile(src, mid * b, dst, mid * a, i1 - i0, j1 - j0);
                    continue;
                }
                for (int64_t j = 0; j < j1 - j0; j++)
                    for (int64_t i = 0; i < i1 - i0; i++)
                        memcpy(dst + (j * mid * a + i) * inner, src + (i * mid * b + j) * inner,
                               (size_t)inner * sizeof *dst);
            });
}

static void class_token_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w_, void *out_)
{
    const float *w = w_;
    float *out = out_;
    const float *const *ins = (const float *const *)ins_;
    (void)env, (void)state;
    int64_t n = l->in.d[0], s = l->in.d[1], d = l->in.d[2];
    CPU_OMP_IF(n * s * d > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t b = 0; b < n; b++) {
            memcpy(out + b * (s + 1) * d, w, (size_t)d * sizeof *w);
            memcpy(out + b * (s + 1) * d + d, ins[0] + b * s * d, (size_t)(s * d) * sizeof *out);
        });
}

static void pos_embedding_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w_,
                              void *out_)
{
    const float *w = w_;
    float *out = out_;
    const float *const *ins = (const float *const *)ins_;
    (void)env, (void)state;
    const float *in = ins[0];
    int64_t n = l->in.d[0], sd = l->in.d[1] * l->in.d[2];
    w += l->p.kv_len * l->in.d[2]; /* the rows of positions kv_len to kv_len + S - 1 */
    CPU_OMP_IF(n * sd > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t b = 0; b < n; b++)
            cpu_add_span(in + b * sd, w, out + b * sd, sd););
}

static void select_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w_, void *out_)
{
    const float *w = w_;
    float *out = out_;
    const float *const *ins = (const float *const *)ins_;
    (void)env, (void)state, (void)w;
    int64_t outer, size, inner;
    layer_select_dims(l, &outer, &size, &inner);
    for (int64_t o = 0; o < outer; o++)
        memcpy(out + o * inner, ins[0] + (o * size + l->p.index) * inner, (size_t)inner * sizeof *out);
}

static void slice_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out_)
{
    float *out = out_;
    const float *in = ins[0];
    (void)env, (void)state, (void)w;
    int64_t outer, size, inner;
    layer_slice_dims(l, &outer, &size, &inner);
    int64_t n = (l->p.slice_end - l->p.slice_start) * inner;
    CPU_OMP_IF(outer * n > CPU_PARALLEL_MIN && outer > 1, "omp parallel for schedule(static)",
        for (int64_t o = 0; o < outer; o++)
            memcpy(out + o * n, in + (o * size + l->p.slice_start) * inner, (size_t)n * sizeof *out););
}

CPU_ISA_CLONES
static void scale_rows(const float *x, float *y, int64_t size, int64_t inner, const float *gamma)
{
    if (inner == 1) { /* gamma along the last dim */
#pragma omp simd
        for (int64_t s = 0; s < size; s++)
            y[s] = x[s] * gamma[s];
        return;
    }
    for (int64_t s = 0; s < size; s++) {
        float g = gamma[s];
#pragma omp simd
        for (int64_t i = 0; i < inner; i++)
            y[s * inner + i] = x[s * inner + i] * g;
    }
}

static void layer_scale_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out)
{
    (void)env, (void)state;
    int64_t outer, size, inner;
    layer_slice_dims(l, &outer, &size, &inner);
    const float *x = ins[0];
    float *y = out;
    CPU_OMP_IF(outer * size * inner > CPU_PARALLEL_MIN && outer > 1, "omp parallel for schedule(static)",
        for (int64_t o = 0; o < outer; o++)
            scale_rows(x + o * size * inner, y + o * size * inner, size, inner, w););
}

const backend_kernel cpu_layernorm_kernel = {.run = layernorm_run, .impl = "direct"};
const backend_kernel cpu_groupnorm_kernel = {.run = groupnorm_run, .impl = "direct"};
const backend_kernel cpu_gelu_kernel = {.run = gelu_run, .impl = "direct"};
const backend_kernel cpu_multihead_attention_kernel = {.setup = mha_setup, .run = mha_run, .free = mha_free,
                                                   .parts_enable = mha_parts_enable, .parts_read = mha_parts_read};
const backend_kernel cpu_transpose_kernel = {.run = transpose_run, .impl = "blocked copy"};
const backend_kernel cpu_class_token_kernel = {.run = class_token_run, .impl = "copy"};
const backend_kernel cpu_pos_embedding_kernel = {.run = pos_embedding_run, .impl = "direct"};
const backend_kernel cpu_select_kernel = {.run = select_run, .impl = "copy"};
const backend_kernel cpu_slice_kernel = {.run = slice_run, .impl = "copy"};
const backend_kernel cpu_layer_scale_kernel = {.run = layer_scale_run, .impl = "direct"};
