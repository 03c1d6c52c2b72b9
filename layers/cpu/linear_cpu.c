/* linear on the CPU (and matmul of two activations, at the end): cblas_sgemv for one row; for a few rows (a small batch) our
 * register-tiled kernel (pgemm_cpu.c) on weights packed once at setup; cblas_sgemm for
 * more rows (a large batch, or the tokens of [N, S, F]).
 *
 * A small batch is what OpenBLAS does worst: with 8 rows, 1000 outputs and 512
 * features (ResNet's fc at batch 8) it packs the 2 MB of weights again on every call
 * and took 124-149 us on the 2-core Zen 5 VM, where oneDNN takes 27-29 us. Packed at
 * setup into panels of the kernel's nr outputs, feature-major, the weights stream
 * through once per mr rows, each panel's tile summed in registers. */
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

/* Rows up to which the packed kernel runs: each further group of mr rows reads the
 * weights again, which OpenBLAS's blocking avoids. */
#define LINEAR_TILED_MAX_TILES 4
/* The packed path's k block: an nr-wide panel of 256 features (32 KB at nr 32) stays
 * in L1 for the row tiles after the first. */
#define LINEAR_KC 256

/* The fp32 GEMV (one row): q row streams a thread, as the bf16 decode GEMV
 * (bf16_cpu.c): each of q far-apart parts of the thread's weight rows one sequential
 * stream, a row at a time from each, prefetched 4 KB ahead into the L2; one sum per
 * stream. GEMV_F32_AHEAD is in floats. */
#define GEMV_F32_STREAMS 8
#define GEMV_F32_AHEAD 1024
/* From this many weights it runs on every thread (as the bf16 GEMV: 512 KB of fp32). */
#define GEMV_F32_PARALLEL_MIN (8 * CPU_PARALLEL_MIN)

/* Rows [j0, j1) over a single stream, for the rows the streams leave over. */
__attribute__((target("avx512f"))) static void gemv_f32_rows_512(const float *x, int64_t f, const float *w,
                                                                 const float *bias, float *y, int64_t j0, int64_t j1)
{
    int64_t full = f / 16 * 16;
    __mmask16 tail = (__mmask16)((1u << (f - full)) - 1);
    for (int64_t j = j0; j < j1; j++) {
        const float *wj = w + j * f;
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        int64_t k = 0;
        for (; k + 32 <= full; k += 32) {
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(wj + k), _mm512_loadu_ps(x + k), a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(wj + k + 16), _mm512_loadu_ps(x + k + 16), a1);
        }
        for (; k < f; k += 16) {
            __mmask16 m = k < full ? (__mmask16)0xffff : tail;
            a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, wj + k), _mm512_maskz_loadu_ps(m, x + k), a0);
        }
        y[j] = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1)) + (bias ? bias[j] : 0.0f);
    }
}

__attribute__((target("avx512f"))) static void gemv_f32_512(const float *x, int64_t f, const float *w,
                                                            const float *bias, float *y, int64_t j0, int64_t j1)
{
    enum { Q = GEMV_F32_STREAMS };
    int64_t h = f % 16 || j1 - j0 < 4 * Q ? 0 : (j1 - j0) / Q;
    for (int64_t i = 0; i < h; i++) {
        const float *ws[Q];
        __m512 acc[Q];
        for (int q = 0; q < Q; q++)
            ws[q] = w + (j0 + q * h + i) * f, acc[q] = _mm512_setzero_ps();
        for (int64_t k = 0; k < f; k += 16) {
            __m512 xv = _mm512_loadu_ps(x + k);
            for (int q = 0; q < Q; q++) {
                _mm_prefetch((const char *)(ws[q] + k + GEMV_F32_AHEAD), _MM_HINT_T1);
                acc[q] = _mm512_fmadd_ps(_mm512_loadu_ps(ws[q] + k), xv, acc[q]);
            }
        }
        for (int q = 0; q < Q; q++) {
            int64_t j = j0 + q * h + i;
            y[j] = _mm512_reduce_add_ps(acc[q]) + (bias ? bias[j] : 0.0f);
        }
    }
    gemv_f32_rows_512(x, f, w, bias, y, j0 + Q * h, j1);
}

/* The sum of a ymm's eight lanes. */
__attribute__((target("avx2,fma"))) static float hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma"))) static void gemv_f32_avx2(const float *x, int64_t f, const float *w,
                                                              const float *bias, float *y, int64_t j0, int64_t j1)
{
    enum { Q = GEMV_F32_STREAMS };
    int64_t h = f % 8 || j1 - j0 < 4 * Q ? 0 : (j1 - j0) / Q;
    for (int64_t i = 0; i < h; i++) {
        const float *ws[Q];
        __m256 acc[Q];
        for (int q = 0; q < Q; q++)
            ws[q] = w + (j0 + q * h + i) * f, acc[q] = _mm256_setzero_ps();
        for (int64_t k = 0; k < f; k += 8) {
            __m256 xv = _mm256_loadu_ps(x + k);
            for (int q = 0; q < Q; q++) {
                if (k % 16 == 0)
                    _mm_prefetch((const char *)(ws[q] + k + GEMV_F32_AHEAD), _MM_HINT_T1);
                acc[q] = _mm256_fmadd_ps(_mm256_loadu_ps(ws[q] + k), xv, acc[q]);
            }
        }
        for (int q = 0; q < Q; q++) {
            int64_t j = j0 + q * h + i;
            y[j] = hsum256(acc[q]) + (bias ? bias[j] : 0.0f);
        }
    }
    for (int64_t j = j0 + Q * h; j < j1; j++) { /* the rows over, one stream */
        const float *wj = w + j * f;
        __m256 a = _mm256_setzero_ps();
        int64_t k = 0;
        for (; k + 8 <= f; k += 8)
            a = _mm256_fmadd_ps(_mm256_loadu_ps(wj + k), _mm256_loadu_ps(x + k), a);
        float sum = hsum256(a);
        for (; k < f; k++)
            sum += wj[k] * x[k];
        y[j] = sum + (bias ? bias[j] : 0.0f);
    }
}

typedef void (*gemv_f32_fn)(const float *x, int64_t f, const float *w, const float *bias, float *y, int64_t j0,
                            int64_t j1);

typedef struct linear_state {
    gemv_f32_fn gemv;   /* one row: our GEMV (AVX-512 or AVX2), NULL: OpenBLAS's sgemv */
    const cpu_pgemm *g; /* NULL: OpenBLAS */
    float *wp;          /* [panel][F][nr]: output features ip nr .. ip nr + nr - 1, zero past the last */
    float *a;           /* the rows, packed per run: [row tile][F][mr] */
} linear_state;

static void linear_free(void *env, void *state)
{
    (void)env;
    linear_state *s = state;
    if (s)
        free(s->wp), free(s->a);
    free(s);
}

static bench_status linear_setup(void *env, const layer *l, const void *w_, void **state, char *impl,
                                 size_t impl_len, int64_t *workspace_bytes)
{
    const float *w = w_;
    cpu_choices *search = cpu_env_choices(env);
    (void)search;
    int64_t f = l->in.d[l->in.rank - 1], n = shape_numel(&l->in) / f, o = l->p.out_features;
    linear_state *s = calloc(1, sizeof *s);
    if (!s)
        return BENCH_ERR_NOMEM;
    const cpu_pgemm *g = cpu_pgemm_get();
    if (n > 1 && n <= LINEAR_TILED_MAX_TILES * g->mr && strcmp(g->isa, "generic") != 0) {
        int64_t np = (o + g->nr - 1) / g->nr, tiles = (n + g->mr - 1) / g->mr;
        s->g = g;
        s->wp = bench_alloc_floats(np * f * g->nr);
        s->a = bench_alloc_floats(tiles * f * g->mr);
        if (!s->wp || !s->a) {
            linear_free(NULL, s);
            return BENCH_ERR_NOMEM;
        }
        for (int64_t ip = 0; ip < np; ip++)
            for (int64_t k = 0; k < f; k++)
                for (int64_t i = 0; i < g->nr; i++) {
                    int64_t j = ip * g->nr + i;
                    s->wp[(ip * f + k) * g->nr + i] = j < o ? w[j * f + k] : 0.0f;
                }
        *workspace_bytes = 4 * (np * f * g->nr + tiles * f * g->mr);
        snprintf(impl, impl_len, "packed tiles %s %dx%d", g->isa, g->mr, g->nr);
    } else if (n == 1 && strcmp(g->isa, "generic") != 0) {
        bool avx512 = strcmp(g->isa, "avx512") == 0;
        s->gemv = avx512 ? gemv_f32_512 : gemv_f32_avx2;
        snprintf(impl, impl_len, "gemv fp32 %s (%s per thread)", avx512 ? "avx512" : "avx2",
                 f % (avx512 ? 16 : 8) ? "one row stream" : "8 row streams");
    } else {
        snprintf(impl, impl_len, "%s", n == 1 ? "sgemv" : "sgemm");
    }
    *state = s;
    return BENCH_OK;
}

/* Output panels [p_lo, p_hi) of every row tile. */
static void linear_panels(const linear_state *s, int64_t n, int64_t f, int64_t o, const float *bias, float *out,
                          int64_t p_lo, int64_t p_hi)
{
    const cpu_pgemm *g = s->g;
    for (int64_t ip = p_lo; ip < p_hi; ip++)
        for (int64_t q = 0; q < n; q += g->mr)
            for (int64_t kb = 0; kb < f; kb += LINEAR_KC) {
                int64_t o0 = ip * g->nr;
                g->kernel((int)(n - q < g->mr ? n - q : g->mr), (int)(o - o0 < g->nr ? o - o0 : g->nr),
                          &(cpu_pgemm_args){.ntap = 1, .kc = f - kb < LINEAR_KC ? f - kb : LINEAR_KC,
                                            .a = s->a + (q / g->mr * f + kb) * g->mr, .lda = g->mr, .sa = 1,
                                            .b = s->wp + (ip * f + kb) * g->nr, .ldb = g->nr, .c = out + q * o + o0,
                                            .ldc = o, .cbias = bias ? bias + o0 : NULL, .accumulate = kb > 0});
            }
}

static void linear_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w_, void *out_)
{
    const float *w = w_;
    float *out = out_;
    const float *const *ins = (const float *const *)ins_;
    (void)env;
    const linear_state *s = state;
    const float *in = ins[0];
    int64_t f = l->in.d[l->in.rank - 1], n = shape_numel(&l->in) / f, o = l->p.out_features;
    const float *bias = l->p.bias ? w + o * f : NULL;
    if (s->g) {
        int64_t mr = s->g->mr, np = (o + s->g->nr - 1) / s->g->nr;
        for (int64_t q = 0; q < n; q += mr) /* the rows, feature-major per tile of mr */
            for (int64_t k = 0; k < f; k++)
                for (int64_t i = 0; i < mr; i++)
                    s->a[(q / mr * f + k) * mr + i] = q + i < n ? in[(q + i) * f + k] : 0.0f;
        CPU_OMP_IF(n * o * f > 64 * CPU_PARALLEL_MIN, "omp parallel", {
            int64_t lo, hi;
            cpu_thread_span(np, &lo, &hi);
            linear_panels(s, n, f, o, bias, out, lo, hi);
        });
        return;
    }
    if (s->gemv) {
        CPU_OMP_IF(o * f >= GEMV_F32_PARALLEL_MIN, "omp parallel", {
            int64_t lo, hi;
            cpu_thread_span(o, &lo, &hi);
            s->gemv(in, f, w, bias, out, lo, hi);
        });
        return;
    }
    if (bias)
        for (int64_t b = 0; b < n; b++)
            for (int64_t j = 0; j < o; j++)
                out[b * o + j] = bias[j];
    float beta = bias ? 1.0f : 0.0f;
    if (n == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)o, (blasint)f, 1.0f, w, (blasint)f, in, 1, beta, out, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)n, (blasint)o, (blasint)f, 1.0f, in,
                    (blasint)f, w, (blasint)f, beta, out, (blasint)o);
}

const backend_kernel cpu_linear_kernel = {.setup = linear_setup, .run = linear_run, .free = linear_free};

/* matmul: one cblas_sgemm per index of the leading dims; many small products spread
 * over the threads (OpenBLAS single-threaded inside), few large ones threaded inside. */
static void matmul_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out_)
{
    (void)env, (void)state, (void)w;
    const float *a = ins[0], *b = ins[1];
    float *out = out_;
    int64_t batch, m, k, n;
    layer_matmul_dims(l, &batch, &m, &k, &n);
    int threads = omp_get_max_threads();
#pragma omp parallel for schedule(dynamic) num_threads(threads) if (batch >= threads && threads > 1)
    for (int64_t i = 0; i < batch; i++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)m, (blasint)n, (blasint)k, 1.0f, a + i * m * k,
                    (blasint)k, b + i * k * n, (blasint)n, 0.0f, out + i * m * n, (blasint)n);
}

const backend_kernel cpu_matmul_kernel = {.run = matmul_run, .impl = "sgemm per leading index"};
