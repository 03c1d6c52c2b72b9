/* linear on the CPU (and matmul of two activations, at the end): our GEMV for one row;
 * for two rows and more, a GEMM blocked for the caches on our register-tiled kernel
 * (pgemm_cpu.c) with the weights packed once at setup, or cblas_sgemm, whichever the
 * search finds faster in the forward's conditions (--algo heuristic: ours).
 *
 * OpenBLAS packs the weights again on every call. With a small batch that is most of
 * the work: 8 rows, 1000 outputs and 512 features (ResNet's fc at batch 8) took
 * 124-149 us on the 2-core Zen 5 VM, where oneDNN takes 27-29 us. With many rows it is
 * its blocking: BERT-base's 128x768 -> 3072 took 1.51 ms in sgemm, 1.17 ms in oneDNN's
 * brgemm. Ours keeps the weights in the order its loops read them, [k block][panel of
 * nr outputs][kc][nr]: for each k block of LINEAR_KC features, an nr-wide panel of it
 * (48 KB at 384 x 32) stays in L1 while every row tile of a block of them (the rows
 * packed per call, [k block][tile][kc][mr], a block sized for L2) runs past it. */
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

/* The blocked GEMM's k block (features), and the bytes of packed rows per k block
 * that one pass over the weight panels reads from L2. */
#define LINEAR_KC 384
#define LINEAR_ROW_BLOCK_BYTES (256 << 10)

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

/* The ways a linear layer of two rows and more runs, in the search's order: the first
 * is the rule's (--algo heuristic). */
typedef enum { LINEAR_BLOCKED, LINEAR_SGEMM, LINEAR_WAYS } linear_way;

typedef struct linear_state {
    gemv_f32_fn gemv;   /* one row: our GEMV (AVX-512 or AVX2), NULL: OpenBLAS's sgemv */
    const cpu_pgemm *g; /* the blocked GEMM's kernel; NULL: OpenBLAS */
    int mr;             /* rows a tile: at most the kernel's, the tiles as even as they go */
    int64_t tiles, np;  /* row tiles, nr-wide output panels */
    int64_t tb;         /* row tiles a block (LINEAR_ROW_BLOCK_BYTES a k block) */
    float *wp;          /* [k block][panel][kc][nr]: outputs ip nr .. ip nr + nr - 1, zero past the last */
    float *a;           /* the rows, packed per run: [k block][tile][kc][mr], zero past the last */
} linear_state;

static void linear_free(void *env, void *state)
{
    (void)env;
    linear_state *s = state;
    if (s)
        free(s->wp), free(s->a);
    free(s);
}

/* The blocked GEMM's state for f features, n rows and o outputs, its weights packed. */
static bool blocked_setup(linear_state *s, const cpu_pgemm *g, const float *w, int64_t n, int64_t f, int64_t o,
                          int64_t *workspace_bytes)
{
    int64_t nr = g->nr, tiles = (n + g->mr - 1) / g->mr;
    s->g = g;
    s->mr = (int)((n + tiles - 1) / tiles);
    s->tiles = (n + s->mr - 1) / s->mr;
    s->np = (o + nr - 1) / nr;
    s->tb = LINEAR_ROW_BLOCK_BYTES / (LINEAR_KC * s->mr * (int64_t)sizeof(float));
    s->tb = s->tb < 1 ? 1 : s->tb;
    s->wp = bench_alloc_floats(s->np * nr * f);
    s->a = bench_alloc_floats(s->tiles * s->mr * f);
    if (!s->wp || !s->a)
        return false;
    for (int64_t k0 = 0; k0 < f; k0 += LINEAR_KC) {
        int64_t kc = f - k0 < LINEAR_KC ? f - k0 : LINEAR_KC;
        float *blk = s->wp + k0 * s->np * nr;
        for (int64_t ip = 0; ip < s->np; ip++)
            for (int64_t k = 0; k < kc; k++)
                for (int64_t i = 0; i < nr; i++) {
                    int64_t j = ip * nr + i;
                    blk[(ip * kc + k) * nr + i] = j < o ? w[j * f + k0 + k] : 0.0f;
                }
    }
    *workspace_bytes = 4 * (s->np * nr * f + s->tiles * s->mr * f);
    return true;
}

/* Row tiles [t0, t1) of the input into s->a, every k block: a row at a time, its
 * features read in order. */
static void blocked_pack(const linear_state *s, const float *in, int64_t n, int64_t f, int64_t t0, int64_t t1)
{
    int64_t mr = s->mr;
    for (int64_t t = t0; t < t1; t++)
        for (int64_t k0 = 0; k0 < f; k0 += LINEAR_KC) {
            int64_t kc = f - k0 < LINEAR_KC ? f - k0 : LINEAR_KC;
            float *d = s->a + k0 * s->tiles * mr + t * kc * mr;
            for (int64_t i = 0; i < mr; i++) {
                int64_t r = t * mr + i;
                const float *src = in + r * f + k0;
                if (r < n)
                    for (int64_t k = 0; k < kc; k++)
                        d[k * mr + i] = src[k];
                else
                    for (int64_t k = 0; k < kc; k++)
                        d[k * mr + i] = 0.0f;
            }
        }
}

/* The blocked GEMM on the calling thread's share of it, thread tid of nt: its row tiles
 * packed, then (after every thread's) for each k block and block of row tiles its even
 * share of the (panel, tile) pairs, panel by panel, so that a panel stays in L1 over its
 * tiles. A pair falls to the same thread in every k block, which adds to what it left. */
static void blocked_part(const linear_state *s, const float *in, int64_t n, int64_t f, int64_t o, const float *bias,
                         float *out, int64_t tid, int64_t nt)
{
    const cpu_pgemm *g = s->g;
    int64_t mr = s->mr, nr = g->nr;
    blocked_pack(s, in, n, f, s->tiles * tid / nt, s->tiles * (tid + 1) / nt);
    _Pragma("omp barrier");
    for (int64_t k0 = 0; k0 < f; k0 += LINEAR_KC) {
        int64_t kc = f - k0 < LINEAR_KC ? f - k0 : LINEAR_KC;
        for (int64_t b0 = 0; b0 < s->tiles; b0 += s->tb) {
            int64_t bt = s->tiles - b0 < s->tb ? s->tiles - b0 : s->tb, pairs = s->np * bt;
            for (int64_t u = pairs * tid / nt; u < pairs * (tid + 1) / nt; u++) {
                int64_t ip = u / bt, t = b0 + u % bt, r0 = t * mr, o0 = ip * nr;
                g->kernel((int)(n - r0 < mr ? n - r0 : mr), (int)(o - o0 < nr ? o - o0 : nr),
                          &(cpu_pgemm_args){.ntap = 1, .kc = kc, .a = s->a + k0 * s->tiles * mr + t * kc * mr,
                                            .lda = mr, .sa = 1, .b = s->wp + k0 * s->np * nr + ip * kc * nr,
                                            .ldb = nr, .c = out + r0 * o + o0, .ldc = o,
                                            .cbias = bias ? bias + o0 : NULL, .accumulate = k0 > 0});
            }
        }
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
        CPU_OMP_IF(n * o * f > 64 * CPU_PARALLEL_MIN, "omp parallel",
                   { blocked_part(s, in, n, f, o, bias, out, omp_get_thread_num(), omp_get_num_threads()); });
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

/* One way's state for layer l (n rows of f features to o outputs). */
static linear_state *linear_way_new(const layer *l, linear_way way, const float *w, int64_t *workspace_bytes)
{
    int64_t f = l->in.d[l->in.rank - 1], n = shape_numel(&l->in) / f, o = l->p.out_features;
    linear_state *s = calloc(1, sizeof *s);
    *workspace_bytes = 0;
    if (s && way == LINEAR_BLOCKED && !blocked_setup(s, cpu_pgemm_get(), w, n, f, o, workspace_bytes)) {
        linear_free(NULL, s);
        return NULL;
    }
    return s;
}

/* Before a timed run in the forward's conditions: the weights as the way reads them and
 * the output out of the caches, the input read. */
static void linear_forward_conditions(const layer *l, const linear_state *s, const float *w, const float *in,
                                      float *out)
{
    cpu_span cold[3] = {{w, l->n_weight_floats * (int64_t)sizeof *w},
                        {s->wp, s->wp ? s->np * s->g->nr * l->in.d[l->in.rank - 1] * (int64_t)sizeof *s->wp : 0},
                        {out, shape_numel(&l->out) * (int64_t)sizeof *out}};
    cpu_forward_conditions(cold, 3, in, shape_numel(&l->in) * (int64_t)sizeof *in);
}

/* The two ways as cpu_search_rounds runs them. */
typedef struct linear_ways {
    const layer *l;
    linear_state **st;
    const float *w, *in;
    float *out;
} linear_ways;

static void way_conditions(void *user, int k)
{
    linear_ways *x = user;
    linear_forward_conditions(x->l, x->st[k], x->w, x->in, x->out);
}

static void way_run(void *user, int k)
{
    linear_ways *x = user;
    const float *ins[1] = {x->in};
    linear_run(NULL, x->l, x->st[k], (const void *const *)ins, x->w, x->out);
}

/* The faster way for l on scratch rows with its real weights, timed in rounds
 * (cpu_search_rounds, at most 0.3 s); a tie (CPU_SEARCH_TIE) goes to ours, which packs
 * nothing per call. -1 when out of memory. */
static int linear_search(const layer *l, const float *w, bool forward)
{
    int64_t in_n = shape_numel(&l->in), out_n = shape_numel(&l->out), ws;
    float *in = bench_alloc_floats(in_n), *out = bench_alloc_floats(out_n);
    linear_state *st[LINEAR_WAYS] = {NULL};
    double best[LINEAR_WAYS];
    int pick = -1;
    bool all = in && out;
    for (int k = 0; all && k < LINEAR_WAYS; k++)
        all = (st[k] = linear_way_new(l, (linear_way)k, w, &ws)) != NULL;
    if (all) {
        const float *ins[1] = {in};
        for (int64_t i = 0; i < in_n; i++)
            in[i] = (float)(i % 17) * 0.0625f - 0.5f;
        for (int k = 0; k < LINEAR_WAYS; k++) /* warm, untimed */
            linear_run(NULL, l, st[k], (const void *const *)ins, w, out);
        linear_ways x = {l, st, w, in, out};
        cpu_search_rounds(LINEAR_WAYS, 0.3, forward ? way_conditions : NULL, way_run, &x, best);
        pick = best[LINEAR_SGEMM] < best[LINEAR_BLOCKED] * (1 - CPU_SEARCH_TIE) ? LINEAR_SGEMM : LINEAR_BLOCKED;
        const char *e = getenv("LAYERBENCH_CPU_SEARCH_LOG");
        if (e && *e && strcmp(e, "0") != 0)
            bench_diag("cpu search %s: blocked %.1f us, sgemm %.1f us: %s kept\n", l->name, 1e6 * best[LINEAR_BLOCKED],
                       1e6 * best[LINEAR_SGEMM], pick == LINEAR_SGEMM ? "sgemm" : "blocked");
    }
    for (int k = 0; k < LINEAR_WAYS; k++)
        linear_free(NULL, st[k]);
    free(in), free(out);
    return pick;
}

static bench_status linear_setup(void *env, const layer *l, const void *w_, void **state, char *impl,
                                 size_t impl_len, int64_t *workspace_bytes)
{
    const float *w = w_;
    cpu_choices *search = cpu_env_choices(env);
    int64_t f = l->in.d[l->in.rank - 1], n = shape_numel(&l->in) / f;
    const cpu_pgemm *g = cpu_pgemm_get();
    bool ours = strcmp(g->isa, "generic") != 0, searched = false;
    linear_state *s = NULL;
    *workspace_bytes = 0;
    if (n == 1) {
        if (!(s = calloc(1, sizeof *s)))
            return BENCH_ERR_NOMEM;
        bool avx512 = strcmp(g->isa, "avx512") == 0;
        s->gemv = !ours ? NULL : avx512 ? gemv_f32_512 : gemv_f32_avx2;
        if (ours)
            snprintf(impl, impl_len, "gemv fp32 %s (%s per thread)", avx512 ? "avx512" : "avx2",
                     f % (avx512 ? 16 : 8) ? "one row stream" : "8 row streams");
        else
            snprintf(impl, impl_len, "sgemv");
        *state = s;
        return BENCH_OK;
    }
    linear_way way = ours ? LINEAR_BLOCKED : LINEAR_SGEMM;
    const cpu_choice *known = ours && search ? cpu_choice_find(search, l) : NULL;
    if (known && known->given && !(known->algo[0] >= 0 && known->algo[0] < LINEAR_WAYS && known->algo[2] == LINEAR_WAYS))
        search->stale++, known = NULL; /* from --algo-cache, and not one of these ways */
    if (known) {
        way = (linear_way)known->algo[0];
        searched = true;
    } else if (ours && search) {
        int best = linear_search(l, w, search->forward);
        if (best < 0)
            return BENCH_ERR_NOMEM;
        way = (linear_way)best;
        searched = true;
        cpu_choice_add(search, l, (const int64_t[3]){way, 0, LINEAR_WAYS});
    }
    if (!(s = linear_way_new(l, way, w, workspace_bytes)))
        return BENCH_ERR_NOMEM;
    int at = way == LINEAR_BLOCKED ? snprintf(impl, impl_len, "blocked %s %dx%d", g->isa, s->mr, g->nr)
                                   : snprintf(impl, impl_len, "sgemm");
    if (searched && at >= 0 && (size_t)at < impl_len)
        snprintf(impl + at, impl_len - (size_t)at, " (fastest of %d %s)", LINEAR_WAYS,
                 search->forward ? "in the forward's conditions" : "timed warm alone");
    *state = s;
    return BENCH_OK;
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
