/* The decoder kinds on the CPU (layers/llm.c says what each computes): embedding as row
 * copies, rmsnorm and rope as vectorised loops (rope's cosines and sines tabulated at
 * setup, as Hugging Face computes them once per forward, outside the layers), and
 * attention per (sample, kv head, token) over the threads: the query heads that share a
 * key/value head together, their scores against the keys the mask keeps (the cache's,
 * then the new tokens'), their softmax and the weighted sums of the values; a decode
 * step streams each kv head's cache once; where the GEMMs run AVX-512 and head_dim is a
 * multiple of 16, the scores take 16 keys at a time (scores16). In bf16, attention reads q, k, v and the cache
 * as bf16 and computes in fp32 (the queries widened once, each key and value as it is
 * read), so the cache is read at its own size; the other kinds run on fp32 copies
 * (convert_cpu.c). mla (DeepSeek's latent attention) runs absorbed, as vLLM's decode: a
 * multi-query attention over the latent rows with attention's spans. */
#include <math.h>
#include <omp.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "fast_math.h"

/* ---- embedding --------------------------------------------------------------------------- */

static void embedding_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w_, void *out_)
{
    (void)env, (void)state;
    const float *ids = ins_[0], *w = w_;
    float *out = out_;
    int64_t n = shape_numel(&l->in), d = l->p.embedding_dim;
    CPU_OMP_IF(n * d > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t i = 0; i < n; i++)
            memcpy(out + i * d, w + layer_token_id(l, ids[i]) * d, (size_t)d * sizeof *out););
}

const backend_kernel cpu_embedding_kernel = {.run = embedding_run, .impl = "row copies"};

/* bf16 and fp16: the rows copied as they are stored (a table on fp32 copies would be a
 * second, wider table: 1 GB for Llama-3.2-1B's), the ids read from the input's type */
static void embedding_run_16(void *env, const layer *l, void *state, const void *const *ins_, const void *w_,
                             void *out_)
{
    (void)env, (void)state;
    const uint16_t *ids = ins_[0], *w = w_;
    uint16_t *out = out_;
    int64_t n = shape_numel(&l->in), d = l->p.embedding_dim;
    bool bf = l->dtype == DTYPE_BF16;
    CPU_OMP_IF(n * d > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t i = 0; i < n; i++) {
            float x = bf ? dtype_bf16_to_f32(ids[i]) : dtype_fp16_to_f32(ids[i]);
            memcpy(out + i * d, w + layer_token_id(l, x) * d, (size_t)d * sizeof *out);
        });
}

const backend_kernel cpu_embedding_16_kernel = {.run = embedding_run_16, .impl = "row copies, 16-bit"};

/* ---- rmsnorm ----------------------------------------------------------------------------- */

CPU_ISA_CLONES
static void rmsnorm_row(const float *x, float *y, int64_t d, const float *w, float eps, float offset)
{
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t i = 0; i < d; i++)
        sq += x[i] * x[i];
    float inv = 1.0f / sqrtf(sq / (float)d + eps);
#pragma omp simd
    for (int64_t i = 0; i < d; i++)
        y[i] = x[i] * inv * (w[i] + offset);
}

static void rmsnorm_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w, void *out_)
{
    (void)env, (void)state;
    const float *in = ins_[0];
    float *out = out_;
    int64_t d = l->p.normalized_shape, rows = shape_numel(&l->in) / d;
    float eps = (float)l->p.eps, offset = (float)l->p.weight_offset;
    CPU_OMP_IF(rows * d > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t r = 0; r < rows; r++)
            rmsnorm_row(in + r * d, out + r * d, d, w, eps, offset););
}

const backend_kernel cpu_rmsnorm_kernel = {.run = rmsnorm_run, .impl = "direct"};

/* ---- rope -------------------------------------------------------------------------------- */

typedef struct rope_state {
    float *cos, *sin; /* [T][head_dim / 2] */
} rope_state;

/* the cosines and sines of each new token's angles, [T][head_dim / 2], scaled by the
 * attention factor (rope's and mla's) */
static void rope_tabulate(const layer *l, float **cos_, float **sin_)
{
    int64_t t_len = l->in.d[1], half = l->p.head_dim / 2;
    float *c = xmalloc((size_t)(t_len * half) * sizeof *c), *s = xmalloc((size_t)(t_len * half) * sizeof *s);
    float *inv = xmalloc((size_t)half * sizeof *inv);
    layer_rope_inv_freq(l, inv);
    double scale = layer_rope_attention_factor(l);
    for (int64_t t = 0; t < t_len; t++)
        for (int64_t i = 0; i < half; i++) {
            double a = layer_rope_angle(l, inv, t, i);
            c[t * half + i] = (float)(cos(a) * scale), s[t * half + i] = (float)(sin(a) * scale);
        }
    free(inv);
    *cos_ = c, *sin_ = s;
}

static bench_status rope_setup(void *env, const layer *l, const void *w, void **state, char *impl, size_t len,
                               int64_t *ws)
{
    (void)env, (void)w;
    int64_t t_len = l->in.d[1], half = l->p.head_dim / 2;
    rope_state *s = xcalloc(1, sizeof *s);
    rope_tabulate(l, &s->cos, &s->sin);
    *ws = 2 * t_len * half * (int64_t)sizeof(float);
    snprintf(impl, len, "%s, cos/sin tabulated at setup", l->p.interleaved ? "interleaved pairs" : "rotate-half");
    *state = s;
    return BENCH_OK;
}

CPU_ISA_CLONES
static void rope_head(const float *x, float *y, const float *c, const float *s, int64_t half)
{
#pragma omp simd
    for (int64_t i = 0; i < half; i++) {
        float a = x[i], b = x[i + half];
        y[i] = a * c[i] - b * s[i];
        y[i + half] = b * c[i] + a * s[i];
    }
}

/* one head, interleaved pairs (x[2i], x[2i + 1]) */
CPU_ISA_CLONES
static void rope_head_pairs(const float *x, float *y, const float *c, const float *s, int64_t half)
{
#pragma omp simd
    for (int64_t i = 0; i < half; i++) {
        float a = x[2 * i], b = x[2 * i + 1];
        y[2 * i] = a * c[i] - b * s[i];
        y[2 * i + 1] = b * c[i] + a * s[i];
    }
}

static void rope_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w, void *out_)
{
    (void)env, (void)w;
    const rope_state *s = state;
    const float *in = ins_[0];
    float *out = out_;
    int64_t rows = l->in.d[0] * l->in.d[1], t_len = l->in.d[1], heads = l->p.num_heads, d = l->p.head_dim;
    void (*head)(const float *, float *, const float *, const float *, int64_t) =
        l->p.interleaved ? rope_head_pairs : rope_head;
    CPU_OMP_IF(rows * heads * d > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t r = 0; r < rows; r++) {
            int64_t t = r % t_len;
            for (int64_t h = 0; h < heads; h++)
                head(in + (r * heads + h) * d, out + (r * heads + h) * d, s->cos + t * (d / 2), s->sin + t * (d / 2),
                     d / 2);
        });
}

static void rope_free(void *env, void *state)
{
    (void)env;
    rope_state *s = state;
    if (s)
        free(s->cos), free(s->sin), free(s);
}

const backend_kernel cpu_rope_kernel = {.setup = rope_setup, .run = rope_run, .free = rope_free};

/* rope's backward: the rotation's transpose (its sines negated) on the output's gradient
 * (in[2] of a backward run) into the input's */
static bench_status rope_bwd_setup(void *env, const layer *l, const void *w, void **state, char *impl, size_t len,
                                   int64_t *ws)
{
    bench_status st = rope_setup(env, l, w, state, impl, len, ws);
    rope_state *s = *state;
    for (int64_t i = 0, n = l->in.d[1] * (l->p.head_dim / 2); st == BENCH_OK && i < n; i++)
        s->sin[i] = -s->sin[i];
    return st;
}

static void rope_bwd_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out)
{
    rope_run(env, l, state, ins + 2, w, out);
}

const backend_kernel cpu_rope_bwd_kernel = {.setup = rope_bwd_setup, .run = rope_bwd_run, .free = rope_free};

/* ---- attention --------------------------------------------------------------------------- */

typedef struct attention_state {
    float *scratch; /* per thread: the group's scores [G][keys], then its queries widened,
                       its sums [G][head_dim] and up to 16 keys or a value widened [16][head_dim] */
    int64_t keys, per_thread;
    int threads;
    bool blocks16;  /* the scores of 16 keys at a time on AVX-512 (scores16) */
    bool dp;        /* ... with vdpbf16ps on bf16 queries and keys (scores16_dp) */
} attention_state;

static bench_status attention_setup(void *env, const layer *l, const void *w, void **state, char *impl, size_t len,
                                    int64_t *ws)
{
    (void)env, (void)w;
    const layer_params *p = &l->p;
    int64_t group = p->num_heads / p->num_kv_heads;
    attention_state *s = xcalloc(1, sizeof *s);
    s->keys = p->kv_len + l->ins[1].d[1]; /* a cross-attention's keys: their own tokens */
    s->per_thread = group * (s->keys + 2 * p->head_dim) + 16 * p->head_dim;
    s->threads = omp_get_max_threads();
    int64_t scratch = bench_mul(s->per_thread, s->threads);
    s->scratch = bench_alloc_floats(scratch);
    if (!s->scratch) {
        free(s);
        return BENCH_ERR_NOMEM;
    }
    /* where the GEMMs run their AVX-512 kernel (LAYERBENCH_CPU_GEMM_ISA holds both back) */
    s->blocks16 = p->head_dim % 16 == 0 && strcmp(cpu_pgemm_get()->isa, "avx512") == 0;
    s->dp = s->blocks16 && l->dtype == DTYPE_BF16 && p->head_dim % 32 == 0 && cpu_has_bf16();
    *ws = s->per_thread * s->threads * (int64_t)sizeof(float);
    snprintf(impl, len, "per (sample, kv head), its %lld queries together%s%s", (long long)group,
             s->dp ? ", 16-key vdpbf16ps scores, value sums in registers"
             : s->blocks16 ? ", 16-key avx512 scores, value sums in registers" : "",
             l->dtype == DTYPE_BF16 ? ", bf16 in, fp32 sums" : "");
    *state = s;
    return BENCH_OK;
}

/* The spans of a group's work, the G query heads that share a key/value head taking
 * each key and value once (grouped-query attention reads the cache once, not G times),
 * each span one call over many keys (a call per key cost more than the key): the scores
 * of n keys at k, stride elements apart, against the G queries q [G][d], into out (row
 * g at g * ld); the weighted sums of n values into acc [G][d]. bf16 keys and values are
 * widened once each into kf (the top half of a float's bits). */
CPU_ISA_CLONES
static void scores_f32(const float *q, int64_t G, const float *k, int64_t n, int64_t stride, int64_t d, float scale,
                       float *out, int64_t ld)
{
    for (int64_t j = 0; j < n; j++) {
        const float *kj = k + j * stride;
        for (int64_t g = 0; g < G; g++) {
            const float *qg = q + g * d;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int64_t i = 0; i < d; i++)
                s += qg[i] * kj[i];
            out[g * ld + j] = s * scale;
        }
    }
}

CPU_ISA_CLONES
static void widen(const uint16_t *x, float *y, int64_t d)
{
#pragma omp simd
    for (int64_t i = 0; i < d; i++) {
        union { uint32_t u; float f; } v = {.u = (uint32_t)x[i] << 16};
        y[i] = v.f;
    }
}

CPU_ISA_CLONES
static void scores_bf16(const float *q, int64_t G, const uint16_t *k, int64_t n, int64_t stride, int64_t d,
                        float scale, float *out, int64_t ld, float *kf)
{
    for (int64_t j = 0; j < n; j++) {
        widen(k + j * stride, kf, d);
        for (int64_t g = 0; g < G; g++) {
            const float *qg = q + g * d;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int64_t i = 0; i < d; i++)
                s += qg[i] * kf[i];
            out[g * ld + j] = s * scale;
        }
    }
}

CPU_ISA_CLONES
static void values_f32(const float *p, int64_t G, int64_t ld, const float *v, int64_t n, int64_t stride, int64_t d,
                       float *acc)
{
    for (int64_t j = 0; j < n; j++) {
        const float *vj = v + j * stride;
        for (int64_t g = 0; g < G; g++) {
            float a = p[g * ld + j], *ag = acc + g * d;
#pragma omp simd
            for (int64_t i = 0; i < d; i++)
                ag[i] += a * vj[i];
        }
    }
}

CPU_ISA_CLONES
static void values_bf16(const float *p, int64_t G, int64_t ld, const uint16_t *v, int64_t n, int64_t stride,
                        int64_t d, float *acc, float *kf)
{
    for (int64_t j = 0; j < n; j++) {
        widen(v + j * stride, kf, d);
        for (int64_t g = 0; g < G; g++) {
            float a = p[g * ld + j], *ag = acc + g * d;
#pragma omp simd
            for (int64_t i = 0; i < d; i++)
                ag[i] += a * kf[i];
        }
    }
}

#if defined(__x86_64__)
#define ATT_TARGET __attribute__((target("avx512f")))

/* 16 vectors into one: lane j the sum of a[j]'s lanes (a transpose and add in four
 * steps: within 128-bit lanes, then across them). */
ATT_TARGET static inline __m512 sum16(const __m512 *a)
{
    __m512 b[8], c[4], e[2];
    for (int k = 0; k < 8; k++)
        b[k] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * k], a[2 * k + 1]), _mm512_unpackhi_ps(a[2 * k], a[2 * k + 1]));
    for (int k = 0; k < 4; k++)
        c[k] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * k], b[2 * k + 1], 0x44), _mm512_shuffle_ps(b[2 * k], b[2 * k + 1], 0xee));
    for (int k = 0; k < 2; k++)
        e[k] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * k], c[2 * k + 1], 0x88),
                             _mm512_shuffle_f32x4(c[2 * k], c[2 * k + 1], 0xdd));
    return _mm512_add_ps(_mm512_shuffle_f32x4(e[0], e[1], 0x88), _mm512_shuffle_f32x4(e[0], e[1], 0xdd));
}

/* The scores of n keys (d % 16 == 0) 16 at a time: each query's 16 dot products summed
 * in 16 registers and reduced together (sum16), instead of one horizontal sum per score;
 * bf16 keys widened once per block into kf [16][d]. Returns the keys done (n rounded
 * down to 16); scores_f32 or scores_bf16 take the rest. */
ATT_TARGET static int64_t scores16(const float *q, int64_t G, const void *k, bool bf, int64_t n, int64_t stride,
                                   int64_t d, float scale, float *out, int64_t ld, float *kf)
{
    int64_t j = 0;
    __m512 sc = _mm512_set1_ps(scale);
    for (; j + 16 <= n; j += 16) {
        const float *kb = (const float *)k + j * stride;
        int64_t ks = stride;
        if (bf) { /* the block widened: [16][d] */
            const uint16_t *k16 = (const uint16_t *)k + j * stride;
            for (int jj = 0; jj < 16; jj++)
                for (int64_t i = 0; i < d; i += 16) {
                    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(k16 + jj * stride + i)));
                    _mm512_storeu_ps(kf + jj * d + i, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
                }
            kb = kf, ks = d;
        }
        for (int64_t g = 0; g < G; g++) {
            __m512 acc[16];
            for (int jj = 0; jj < 16; jj++)
                acc[jj] = _mm512_setzero_ps();
            for (int64_t i = 0; i < d; i += 16) {
                __m512 qv = _mm512_loadu_ps(q + g * d + i);
                for (int jj = 0; jj < 16; jj++)
                    acc[jj] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(kb + jj * ks + i), acc[jj]);
            }
            _mm512_storeu_ps(out + g * ld + j, _mm512_mul_ps(sum16(acc), sc));
        }
    }
    return j;
}

#define ATT_DP_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

/* scores16 for bf16 queries and keys on a CPU with AVX512_BF16 (d % 32 == 0): vdpbf16ps
 * takes them as stored, 32 elements a step, their products exact and summed in fp32, so
 * that nothing is widened. */
ATT_DP_TARGET static int64_t scores16_dp(const uint16_t *q, int64_t G, const uint16_t *k, int64_t n, int64_t stride,
                                         int64_t d, float scale, float *out, int64_t ld)
{
    int64_t j = 0;
    __m512 sc = _mm512_set1_ps(scale);
    for (; j + 16 <= n; j += 16)
        for (int64_t g = 0; g < G; g++) {
            __m512 acc[16];
            for (int jj = 0; jj < 16; jj++)
                acc[jj] = _mm512_setzero_ps();
            for (int64_t i = 0; i < d; i += 32) {
                __m512bh qv = (__m512bh)_mm512_loadu_si512(q + g * d + i);
                for (int jj = 0; jj < 16; jj++)
                    acc[jj] = _mm512_dpbf16_ps(acc[jj], qv, (__m512bh)_mm512_loadu_si512(k + (j + jj) * stride + i));
            }
            _mm512_storeu_ps(out + g * ld + j, _mm512_mul_ps(sum16(acc), sc));
        }
    return j;
}

/* The weighted sums of n values into acc [G][d] (d % 16 == 0, d <= 256), the sums held
 * in registers over all n values: queries in chunks of as many as 16 registers hold
 * (d / 16 each), each value row (widened in registers where bf16) read once per chunk
 * and once from memory in all (a chunk's rows come back from the L1 or L2 cache). Before,
 * each value was widened into memory by a call and each query's sums were loaded and
 * stored per value: 30% of a decode step's attention on Zen 4. */
ATT_TARGET static inline __attribute__((always_inline)) void
values16_nv(const float *p, int64_t G, int64_t ld, const void *v, bool bf, int64_t n, int64_t stride, int64_t lda,
            float *acc, const int nv)
{
    const int gs = 16 / nv; /* constants where inlined: the sums stay in registers */
    for (int64_t g0 = 0; g0 < G; g0 += gs) {
        int64_t gn = G - g0 < gs ? G - g0 : gs;
        __m512 a[16];
        for (int r = 0; r < 16; r++)
            a[r] = _mm512_setzero_ps();
        for (int64_t j = 0; j < n; j++) {
            __m512 vv[16];
            for (int i = 0; i < nv; i++)
                vv[i] = bf ? _mm512_castsi512_ps(_mm512_slli_epi32(
                                 _mm512_cvtepu16_epi32(_mm256_loadu_si256(
                                     (const __m256i *)((const uint16_t *)v + j * stride + 16 * i))),
                                 16))
                           : _mm512_loadu_ps((const float *)v + j * stride + 16 * i);
            for (int g = 0; g < gs; g++)
                if (g < gn) {
                    __m512 w = _mm512_set1_ps(p[(g0 + g) * ld + j]);
                    for (int i = 0; i < nv; i++)
                        a[g * nv + i] = _mm512_fmadd_ps(w, vv[i], a[g * nv + i]);
                }
        }
        for (int g = 0; g < gs; g++)
            if (g < gn)
                for (int i = 0; i < nv; i++) {
                    float *o = acc + (g0 + g) * lda + 16 * i;
                    _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), a[g * nv + i]));
                }
    }
}

/* d columns of the values (d % 16 == 0, d <= 256) into acc, whose rows are lda apart */
ATT_TARGET static void values16(const float *p, int64_t G, int64_t ld, const void *v, bool bf, int64_t n,
                                int64_t stride, int64_t d, float *acc, int64_t lda)
{
    switch (d / 16) {
#define VALUES16_CASE(NV)                                                                                        \
    case NV: values16_nv(p, G, ld, v, bf, n, stride, lda, acc, NV); break;
        VALUES16_CASE(1) VALUES16_CASE(2) VALUES16_CASE(3) VALUES16_CASE(4) VALUES16_CASE(5) VALUES16_CASE(6)
        VALUES16_CASE(7) VALUES16_CASE(8) VALUES16_CASE(9) VALUES16_CASE(10) VALUES16_CASE(11) VALUES16_CASE(12)
        VALUES16_CASE(13) VALUES16_CASE(14) VALUES16_CASE(15) VALUES16_CASE(16)
#undef VALUES16_CASE
    default: break;
    }
}
#endif

/* The weighted sums of n values into acc: in registers where blocks16, a chunk of
 * columns at a time, each chunk's sums held over all n values; else one value at a time.
 * The 16 registers of sums hold gs queries of 16 / gs vectors: each value vector loaded
 * (and widened) once per gs queries, each weight broadcast once per 16 / gs vectors, so
 * gs = 4 where four queries share the values (4 vectors, 64 columns a chunk) halves the
 * loads of gs = 1. Up to 128 columns stay one chunk (a second pass over the rows cost
 * more than it saved: 5% on a 128-wide GQA decode); wider ones are cut by the queries
 * that share them (Zen 5, bf16 decode at 2048 cached: a Gemma-3 head of 256 with 4
 * queries from 64 to 45 us; DeepSeek-V2's latent of 512 with 8 heads a thread, 166 to
 * 135 us). */
static void values(bool blocks16, const float *p, int64_t G, int64_t ld, const void *v, bool bf, int64_t n,
                   int64_t stride, int64_t d, float *acc, float *kf)
{
#if defined(__x86_64__)
    if (blocks16) {
        int64_t chunk = d <= 128 ? d : G >= 4 ? 64 : G >= 2 ? 128 : 256;
        for (int64_t c = 0; c < d; c += chunk)
            values16(p, G, ld, (const char *)v + c * (bf ? 2 : 4), bf, n, stride, d - c < chunk ? d - c : chunk,
                     acc + c, d);
        return;
    }
#else
    (void)blocks16;
#endif
    if (bf)
        values_bf16(p, G, ld, (const uint16_t *)v, n, stride, d, acc, kf);
    else
        values_f32(p, G, ld, (const float *)v, n, stride, d, acc);
}

/* The scores of n keys: 16 at a time where blocks16 (with vdpbf16ps on the bf16 queries
 * q16 where given), then one at a time. */
static void scores(bool blocks16, const float *q, const uint16_t *q16, int64_t G, const void *k, bool bf, int64_t n,
                   int64_t stride, int64_t d, float scale, float *out, int64_t ld, float *kf)
{
    int64_t done = 0;
#if defined(__x86_64__)
    if (blocks16 && q16)
        done = scores16_dp(q16, G, k, n, stride, d, scale, out, ld);
    else if (blocks16)
        done = scores16(q, G, k, bf, n, stride, d, scale, out, ld, kf);
#else
    (void)blocks16, (void)q16;
#endif
    if (done == n)
        return;
    if (bf)
        scores_bf16(q, G, (const uint16_t *)k + done * stride, n - done, stride, d, scale, out + done, ld, kf);
    else
        scores_f32(q, G, (const float *)k + done * stride, n - done, stride, d, scale, out + done, ld);
}

/* exp(s - max) in place, divided by their sum; a sink (gpt-oss's, -INFINITY: none)
 * joins the max and the sum, and takes no place of its own */
CPU_ISA_CLONES
static void softmax_span(float *s, int64_t n, float sink)
{
    float top = sink, sum = 0.0f;
#pragma omp simd reduction(max : top)
    for (int64_t j = 0; j < n; j++)
        top = s[j] > top ? s[j] : top;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; j++)
        sum += (s[j] = lb_expf(s[j] - top));
    if (sink > -INFINITY)
        sum += expf(sink - top);
    float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t j = 0; j < n; j++)
        s[j] *= inv;
}

/* The keys query t sees: [j0, j1] (layer_attention_sees: a contiguous range). */
static void attention_range(const layer *l, int64_t t, int64_t *j0, int64_t *j1)
{
    const layer_params *p = &l->p;
    int64_t keys = p->kv_len + l->ins[1].d[1], i = p->kv_len + t;
    *j1 = p->causal ? i : keys - 1;
    *j0 = p->causal && p->sliding_window > 0 ? i - p->sliding_window + 1 : 0;
    *j0 = *j0 < 0 ? 0 : *j0;
}

/* Token t of sample b, the G query heads of kv head g (consecutive: their queries and
 * outputs are G * d contiguous elements): the keys [j0, j1] they see, those in the
 * cache ([N, Hkv, S, D] in w, keys then values) and those of the new tokens (ins[1],
 * ins[2]: [N, T, Hkv * D]). x: the thread's scratch (attention_state). */
static void attention_group(const layer *l, const void *const *ins, const void *w, bool bf, bool blocks16, bool dp,
                            int64_t b, int64_t g, int64_t t, float *x, int64_t keys, void *y)
{
    const layer_params *p = &l->p;
    int64_t d = p->head_dim, s = p->kv_len, t_len = l->in.d[1], hkv = p->num_kv_heads, G = p->num_heads / hkv, j0, j1;
    attention_range(l, t, &j0, &j1);
    int64_t el = bf ? 2 : 4;
    float *sc = x, *qf = x + G * keys, *acc = qf + G * d, *kf = acc + G * d;
    const char *q = (const char *)ins[0] + ((b * t_len + t) * p->num_heads + g * G) * d * el;
    const float *qv = (const float *)(const void *)q;
    if (bf)
        dtype_to_f32(DTYPE_BF16, qf, q, G * d), qv = qf;
    float scale = p->attn_scale > 0 ? (float)p->attn_scale : 1.0f / sqrtf((float)d);
    /* the cache's keys [c0, c1] and values, then the new tokens' [n0, j1] */
    int64_t c0 = j0, c1 = j1 < s - 1 ? j1 : s - 1, n0 = j0 > s ? j0 : s, nc = c1 - c0 + 1, nn = j1 - n0 + 1;
    int64_t held = layer_attention_cached(l); /* the cache holds positions s - held to s - 1 */
    const char *kc = (const char *)w + ((b * hkv + g) * held + (c0 - (s - held))) * d * el,
               *vc = kc + layer_attention_cache_floats(l) / 2 * el;
    int64_t tk = l->ins[1].d[1];
    const char *kn = (const char *)ins[1] + ((b * tk + (n0 - s)) * hkv + g) * d * el;
    const char *vn = (const char *)ins[2] + ((b * tk + (n0 - s)) * hkv + g) * d * el;
    const uint16_t *q16 = dp ? (const uint16_t *)(const void *)q : NULL;
    if (nc > 0)
        scores(blocks16, qv, q16, G, kc, bf, nc, d, d, scale, sc + c0, keys, kf);
    if (nn > 0)
        scores(blocks16, qv, q16, G, kn, bf, nn, hkv * d, d, scale, sc + n0, keys, kf);
    if (p->softcap > 0) /* Gemma 2: softcap * tanh(score / softcap), before the softmax */
        for (int64_t i = 0; i < G; i++) {
            float cap = (float)p->softcap, *row = sc + i * keys;
            for (int64_t j = j0; j <= j1; j++)
                row[j] = cap * tanhf(row[j] / cap);
        }
    const char *sinks = p->sinks ? (const char *)w + layer_attention_cache_floats(l) * el : NULL;
    for (int64_t i = 0; i < G; i++) {
        float sink = -INFINITY;
        if (sinks) /* the query head's sink, g * G + i */
            dtype_to_f32(bf ? DTYPE_BF16 : DTYPE_FP32, &sink, sinks + (g * G + i) * el, 1);
        softmax_span(sc + i * keys + j0, j1 - j0 + 1, sink);
    }
    float *sum = bf ? acc : y;
    memset(sum, 0, (size_t)(G * d) * sizeof *sum);
    if (nc > 0)
        values(blocks16, sc + c0, G, keys, vc, bf, nc, d, d, sum, kf);
    if (nn > 0)
        values(blocks16, sc + n0, G, keys, vn, bf, nn, hkv * d, d, sum, kf);
    if (bf)
        dtype_from_f32(DTYPE_BF16, y, sum, G * d);
}

static void attention_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out)
{
    (void)env;
    attention_state *s = state;
    const layer_params *p = &l->p;
    int64_t n = l->in.d[0], t_len = l->in.d[1], h = p->num_heads, hkv = p->num_kv_heads, d = p->head_dim;
    bool bf = l->dtype == DTYPE_BF16;
    int64_t el = bf ? 2 : 4, tasks = n * hkv * t_len;
    CPU_OMP_IF(tasks > 1 && l->flops > 4 * CPU_PARALLEL_MIN, "omp parallel for schedule(dynamic)",
        for (int64_t task = 0; task < tasks; task++) {
            int64_t b = task / (hkv * t_len), g = task / t_len % hkv, t = task % t_len;
            int th = omp_get_thread_num();
            float *x = s->scratch + (th < s->threads ? th : 0) * s->per_thread;
            attention_group(l, ins, w, bf, s->blocks16, s->dp, b, g, t, x, s->keys,
                            (char *)out + ((b * t_len + t) * h + g * (h / hkv)) * d * el);
        });
}

static void attention_free(void *env, void *state)
{
    (void)env;
    attention_state *s = state;
    if (s)
        free(s->scratch), free(s);
}

const backend_kernel cpu_attention_kernel = {.setup = attention_setup, .run = attention_run, .free = attention_free};

/* ---- mla --------------------------------------------------------------------------------- */

/* DeepSeek's latent attention absorbed, as vLLM and SGLang run decode: each head's query
 * taken into the latent space (q_nope W_UK_h, beside its turned rope part), then one
 * multi-query attention of the H heads over the latent rows [c, k_pe] (the cache's,
 * then the new tokens'), the sums over c alone, and W_UV_h applied to each head's sum.
 * The attention is attention's spans (scores, softmax_span, values) over (sample, token,
 * a share of the heads). The products with kv_b_proj per head are cblas in fp32; in bf16
 * the cache, the new rows and kv_b_proj are read as stored (vdpbf16ps scores where the
 * CPU has them), one token's products with W_UK_h and W_UV_h widening the weights as they
 * are read, more tokens' through an fp32 copy of kv_b_proj made at setup (sgemm). */
typedef struct mla_state {
    float *cos, *sin;  /* [T][dr / 2] */
    void *rows;        /* the new tokens' latent rows [N T][L + dr], in the layer's dtype */
    float *qf;         /* the absorbed queries [N T][H][L + dr] */
    float *olat;       /* each head's sum of latents [N T][H][L] */
    float *scratch;    /* per thread: scores [heads of a share][kv_len + T], then [16][L + dr],
                          then (bf16) the share's queries as bf16 */
    float *q32, *kv32, *norm32, *out32; /* bf16: the inputs, the norm's weight and the output in fp32 */
    float *wb32;       /* bf16, more than one token: kv_b_proj in fp32 */
    int64_t per_thread, share;
    int threads;
    bool blocks16, dp;
} mla_state;

static void mla_free(void *env, void *state)
{
    (void)env;
    mla_state *s = state;
    if (s)
        free(s->cos), free(s->sin), free(s->rows), free(s->qf), free(s->olat), free(s->scratch), free(s->q32),
            free(s->kv32), free(s->norm32), free(s->out32), free(s->wb32), free(s);
}

static bench_status mla_setup(void *env, const layer *l, const void *w, void **state, char *impl, size_t len,
                              int64_t *ws)
{
    const layer_params *p = &l->p;
    int64_t m = l->in.d[0] * l->in.d[1], h = p->num_heads, lr = p->kv_lora_rank, kd = lr + p->head_dim,
            keys = p->kv_len + l->in.d[1], qd = p->qk_nope_head_dim + p->head_dim,
            nb = h * (p->qk_nope_head_dim + p->v_head_dim) * lr;
    bool bf = l->dtype == DTYPE_BF16;
    mla_state *s = xcalloc(1, sizeof *s);
    s->threads = omp_get_max_threads();
    /* the heads of a (sample, token) shared among the threads where the tokens are fewer */
    s->share = m >= s->threads ? h : (h + s->threads - 1) / s->threads;
    s->blocks16 = kd % 16 == 0 && lr % 16 == 0 && strcmp(cpu_pgemm_get()->isa, "avx512") == 0;
    s->dp = bf && s->blocks16 && kd % 32 == 0 && cpu_has_bf16();
    s->per_thread = s->share * keys + 16 * kd + (s->dp ? (s->share * kd + 1) / 2 : 0);
    rope_tabulate(l, &s->cos, &s->sin);
    s->rows = bf ? (void *)xmalloc((size_t)(m * kd) * 2) : (void *)bench_alloc_floats(m * kd);
    s->qf = bench_alloc_floats(m * h * kd);
    s->olat = bench_alloc_floats(m * h * lr);
    s->scratch = bench_alloc_floats(s->per_thread * s->threads);
    bool ok = s->rows && s->qf && s->olat && s->scratch;
    int64_t extra = 0;
    if (bf) {
        ok = ok && (s->q32 = bench_alloc_floats(m * h * qd)) && (s->kv32 = bench_alloc_floats(m * kd)) &&
             (s->norm32 = bench_alloc_floats(lr)) && (s->out32 = bench_alloc_floats(m * h * p->v_head_dim));
        extra = m * h * qd + m * kd + lr + m * h * p->v_head_dim;
        if (ok) /* the norm's weight, once: the weights a kernel is set up with are the ones it runs on */
            dtype_to_f32(DTYPE_BF16, s->norm32, w, lr);
        if (ok && m > 1) { /* the sgemm's weights: converted once, as a packed copy is */
            ok = (s->wb32 = bench_alloc_floats(nb)) != NULL;
            if (ok)
                dtype_to_f32(DTYPE_BF16, s->wb32, (const uint16_t *)w + lr, nb);
            extra += nb;
        }
    }
    if (!ok) {
        mla_free(env, s);
        return BENCH_ERR_NOMEM;
    }
    *ws = (m * (h * kd + h * lr) + s->per_thread * s->threads + extra) * (int64_t)sizeof(float) +
          m * kd * (bf ? 2 : 4);
    snprintf(impl, len, "absorbed (vLLM's decode): W_UK into the queries, one latent MQA of %lld heads%s, W_UV after; %s",
             (long long)h, s->dp ? " (16-key vdpbf16ps scores)" : s->blocks16 ? " (16-key avx512 scores)" : "",
             !bf ? "cblas per head" : m == 1 ? "bf16 cache and kv_b_proj as stored, fp32 sums" : "bf16 cache, kv_b_proj by sgemm on an fp32 copy");
    *state = s;
    return BENCH_OK;
}

static inline float bf16_value(uint16_t x)
{
    union { uint32_t u; float f; } v = {.u = (uint32_t)x << 16};
    return v.f;
}

/* y [n] += a * x [n], x bf16 */
CPU_ISA_CLONES
static void axpy_bf16(float a, const uint16_t *x, float *y, int64_t n)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        y[i] += a * bf16_value(x[i]);
}

/* x [n] bf16 . y [n] */
CPU_ISA_CLONES
static float dot_bf16(const uint16_t *x, const float *y, int64_t n)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++)
        s += bf16_value(x[i]) * y[i];
    return s;
}

/* One token's products with kv_b_proj in bf16, per head: the query absorbed (q_nope
 * W_UK_h into qf's first L) or the sum taken out (W_UV_h olat into out) */
static void mla_absorb_bf16(const layer *l, const uint16_t *wb, const float *q, float *qf)
{
    const layer_params *p = &l->p;
    int64_t h = p->num_heads, lr = p->kv_lora_rank, dn = p->qk_nope_head_dim, dv = p->v_head_dim,
            kd = lr + p->head_dim, qd = dn + p->head_dim;
    CPU_OMP_IF(h > 1, "omp parallel for schedule(static)",
        for (int64_t hh = 0; hh < h; hh++) {
            float *y = qf + hh * kd;
            memset(y, 0, (size_t)lr * sizeof *y);
            for (int64_t i = 0; i < dn; i++)
                axpy_bf16(q[hh * qd + i], wb + (hh * (dn + dv) + i) * lr, y, lr);
        });
}

static void mla_out_bf16(const layer *l, const uint16_t *wb, const float *olat, float *out)
{
    const layer_params *p = &l->p;
    int64_t h = p->num_heads, lr = p->kv_lora_rank, dn = p->qk_nope_head_dim, dv = p->v_head_dim;
    CPU_OMP_IF(h > 1, "omp parallel for schedule(static)",
        for (int64_t hh = 0; hh < h; hh++)
            for (int64_t j = 0; j < dv; j++)
                out[hh * dv + j] = dot_bf16(wb + (hh * (dn + dv) + dn + j) * lr, olat + hh * lr, lr););
}

static void mla_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w_, void *out_)
{
    (void)env;
    mla_state *s = state;
    const layer_params *p = &l->p;
    bool bf = l->dtype == DTYPE_BF16;
    int64_t t_len = l->in.d[1], m = l->in.d[0] * t_len, h = p->num_heads, lr = p->kv_lora_rank, dr = p->head_dim,
            dn = p->qk_nope_head_dim, dv = p->v_head_dim, kd = lr + dr, qd = dn + dr, sl = p->kv_len,
            keys = sl + t_len, half = dr / 2, el = bf ? 2 : 4, np = layer_mla_param_floats(l);
    const float *q = ins_[0], *kv = ins_[1], *norm = w_, *wb = (const float *)w_ + lr;
    const char *cache = (const char *)w_ + np * el;
    float *out = out_;
    if (bf) { /* the inputs in fp32 (the norm's weight converted at setup); the output after */
        dtype_to_f32(DTYPE_BF16, s->q32, ins_[0], m * h * qd), q = s->q32;
        dtype_to_f32(DTYPE_BF16, s->kv32, ins_[1], m * kd), kv = s->kv32;
        norm = s->norm32, wb = s->wb32, out = s->out32;
    }
    float eps = (float)p->eps, scale = (float)layer_mla_scale(l);
    /* the new tokens' latent rows: the latent normalised, the key's rope part turned */
    CPU_OMP_IF(m * kd > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t r = 0; r < m; r++) {
            int th = omp_get_thread_num(); /* the row in the thread's scratch (its 16 key rows' place) */
            float *row = s->scratch + (th < s->threads ? th : 0) * s->per_thread + s->share * keys;
            rmsnorm_row(kv + r * kd, row, lr, norm, eps, 0.0f);
            memcpy(row + lr, kv + r * kd + lr, (size_t)dr * sizeof *row);
            rope_head_pairs(row + lr, row + lr, s->cos + r % t_len * half, s->sin + r % t_len * half, half);
            if (bf)
                dtype_from_f32(DTYPE_BF16, (uint16_t *)s->rows + r * kd, row, kd);
            else
                memcpy((float *)s->rows + r * kd, row, (size_t)kd * sizeof(float));
        });
    /* the queries absorbed: q_nope W_UK_h into the first L of each head's row */
    if (bf && m == 1)
        mla_absorb_bf16(l, (const uint16_t *)w_ + lr, q, s->qf);
    else
        for (int64_t hh = 0; hh < h; hh++) {
            const float *wuk = wb + hh * (dn + dv) * lr;
            if (m == 1)
                cblas_sgemv(CblasRowMajor, CblasTrans, (blasint)dn, (blasint)lr, 1.0f, wuk, (blasint)lr, q + hh * qd,
                            1, 0.0f, s->qf + hh * kd, 1);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)m, (blasint)lr, (blasint)dn, 1.0f,
                            q + hh * qd, (blasint)(h * qd), wuk, (blasint)lr, 0.0f, s->qf + hh * kd, (blasint)(h * kd));
        }
    CPU_OMP_IF(m * h * dr > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t r = 0; r < m * h; r++) {
            float *x = s->qf + r * kd + lr;
            int64_t t = r / h % t_len;
            memcpy(x, q + r * qd + dn, (size_t)dr * sizeof *x);
            rope_head_pairs(x, x, s->cos + t * half, s->sin + t * half, half);
        });
    /* the attention: per (sample, token, share of the heads), the cache's rows then the
     * new tokens' up to this one */
    int64_t shares = (h + s->share - 1) / s->share, tasks = m * shares;
    CPU_OMP_IF(tasks > 1 && l->flops > 4 * CPU_PARALLEL_MIN, "omp parallel for schedule(dynamic)",
        for (int64_t task = 0; task < tasks; task++) {
            int64_t r = task / shares, h0 = task % shares * s->share, g = h - h0 < s->share ? h - h0 : s->share;
            int64_t b = r / t_len, t = r % t_len, seen = sl + t + 1;
            int th = omp_get_thread_num();
            float *sc = s->scratch + (th < s->threads ? th : 0) * s->per_thread, *kf = sc + s->share * keys;
            const float *qg = s->qf + (r * h + h0) * kd;
            const char *rows = (const char *)s->rows + b * t_len * kd * el, *cb = cache + b * sl * kd * el;
            uint16_t *q16 = NULL;
            if (s->dp) /* the share's queries as bf16, for vdpbf16ps */
                dtype_from_f32(DTYPE_BF16, q16 = (uint16_t *)(kf + 16 * kd), qg, g * kd);
            float *acc = s->olat + (r * h + h0) * lr;
            if (sl > 0)
                scores(s->blocks16, qg, q16, g, cb, bf, sl, kd, kd, scale, sc, keys, kf);
            scores(s->blocks16, qg, q16, g, rows, bf, t + 1, kd, kd, scale, sc + sl, keys, kf);
            for (int64_t i = 0; i < g; i++)
                softmax_span(sc + i * keys, seen, -INFINITY);
            memset(acc, 0, (size_t)(g * lr) * sizeof *acc);
            if (sl > 0)
                values(s->blocks16, sc, g, keys, cb, bf, sl, kd, lr, acc, kf);
            values(s->blocks16, sc + sl, g, keys, rows, bf, t + 1, kd, lr, acc, kf);
        });
    /* each head's sum out through W_UV_h */
    if (bf && m == 1)
        mla_out_bf16(l, (const uint16_t *)w_ + lr, s->olat, out);
    else
        for (int64_t hh = 0; hh < h; hh++) {
            const float *wuv = wb + (hh * (dn + dv) + dn) * lr;
            if (m == 1)
                cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)dv, (blasint)lr, 1.0f, wuv, (blasint)lr,
                            s->olat + hh * lr, 1, 0.0f, out + hh * dv, 1);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)m, (blasint)dv, (blasint)lr, 1.0f,
                            s->olat + hh * lr, (blasint)(h * lr), wuv, (blasint)lr, 0.0f, out + hh * dv,
                            (blasint)(h * dv));
        }
    if (bf)
        dtype_from_f32(DTYPE_BF16, out_, s->out32, m * h * dv);
}

const backend_kernel cpu_mla_kernel = {.setup = mla_setup, .run = mla_run, .free = mla_free};
