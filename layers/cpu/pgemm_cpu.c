/* The register-tiled GEMM kernel behind the packed convolution paths (conv2d_cpu.c):
 * one call computes a tile of mr rows by nr columns,
 *     c[r][j] = init + sum over taps t, k < kc of a_t[k*lda + r*sa] * b_t[k*ldb + j],
 * where a value of a per row is broadcast (rows sa = 1 or 2 floats apart) and b is read
 * a vector row at a time (at least the kernel's nr columns readable: the caller pads);
 * a_t and b_t are a and b moved by tap t's offsets. init is c[r][j] itself when
 * accumulating (the later blocks of a split k), otherwise rbias[r] + cbias[j] (either
 * may be NULL). Columns past nr are computed and not stored. With one tap and a packed
 * k-major (sa 1), this is a GEMM on an unfolded input; with the taps of a kernel window
 * and a the input itself (lda: one channel plane, sa: the stride), it is a direct
 * convolution of one output row's pixels.
 *
 * A convolution keeps one operand packed from setup (its weights) and unfolds the input
 * into the other per call; unlike cblas_sgemm, nothing is packed again on every call,
 * and the tile's shape can follow the layer (7x7 maps give 49 = 7 x 7 pixel rows). The
 * accumulators stay in registers over the whole k: 14 rows x 32 columns in 28 zmm on
 * AVX-512, 6 x 16 in 12 ymm on AVX2 + FMA, a plain C loop elsewhere. Each variant is
 * compiled with its own target attribute and chosen at run time from what the CPU has
 * (LAYERBENCH_CPU_GEMM_ISA=avx2|generic picks a lower one: tests, comparisons). */
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "host.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define PG_X86 1
#endif

#define PG_UNROLL _Pragma("GCC unroll 16")

/* Tap t's operands: a and b moved by its offsets (none: the taps follow each other). */
#define PG_TAP_A(x, t) ((x)->a + ((x)->atap ? (x)->atap[t] : (t) * (x)->kc * (x)->lda))
#define PG_TAP_B(x, t) ((x)->b + ((x)->btap ? (x)->btap[t] : (t) * (x)->kc * (x)->ldb))

static void pg_generic(int mr, int nr, const cpu_pgemm_args *x)
{
    float acc[4][8] = {{0.0f}};
    for (int64_t t = 0; t < x->ntap; t++) {
        const float *a = PG_TAP_A(x, t), *b = PG_TAP_B(x, t);
        for (int64_t k = 0; k < x->kc; k++)
            for (int r = 0; r < mr; r++)
                for (int j = 0; j < 8; j++)
                    acc[r][j] += a[k * x->lda + r * x->sa] * b[k * x->ldb + j];
    }
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nr; j++) {
            float *d = x->c + r * x->ldc + j;
            *d = (x->accumulate ? *d : (x->rbias ? x->rbias[r] : 0.0f) + (x->cbias ? x->cbias[j] : 0.0f)) + acc[r][j];
        }
}

#ifdef PG_X86
/* The AVX-512 tile: mr (a constant once inlined) rows of two zmm. */
__attribute__((always_inline, target("avx512f"))) static inline void
pg512(const int mr, const int sa, int nr, const cpu_pgemm_args *args)
{
    __m512 x[14], y[14];
    int64_t kc = args->kc, lda = args->lda, ldb = args->ldb, ldc = args->ldc;
    const float *rbias = args->rbias, *cbias = args->cbias;
    float *c = args->c;
    bool accumulate = args->accumulate;
    PG_UNROLL for (int r = 0; r < mr; r++) x[r] = _mm512_setzero_ps(), y[r] = _mm512_setzero_ps();
    for (int64_t t = 0; t < args->ntap; t++) {
        const float *a = PG_TAP_A(args, t), *b = PG_TAP_B(args, t);
        for (int64_t k = 0; k < kc; k++, a += lda, b += ldb) {
            __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
            PG_UNROLL for (int r = 0; r < mr; r++)
            {
                __m512 s = _mm512_set1_ps(a[r * sa]);
                x[r] = _mm512_fmadd_ps(s, b0, x[r]);
                y[r] = _mm512_fmadd_ps(s, b1, y[r]);
            }
        }
    }
    __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
    __mmask16 m1 = nr >= 32 ? 0xffff : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
    __m512 i0 = _mm512_setzero_ps(), i1 = _mm512_setzero_ps();
    if (cbias && !accumulate)
        i0 = _mm512_maskz_loadu_ps(m0, cbias), i1 = _mm512_maskz_loadu_ps(m1, cbias + 16);
    PG_UNROLL for (int r = 0; r < mr; r++)
    {
        float *d = c + r * ldc;
        __m512 s0 = i0, s1 = i1;
        if (accumulate)
            s0 = _mm512_maskz_loadu_ps(m0, d), s1 = _mm512_maskz_loadu_ps(m1, d + 16);
        else if (rbias)
            s0 = _mm512_add_ps(s0, _mm512_set1_ps(rbias[r])), s1 = _mm512_add_ps(s1, _mm512_set1_ps(rbias[r]));
        _mm512_mask_storeu_ps(d, m0, _mm512_add_ps(s0, x[r]));
        _mm512_mask_storeu_ps(d + 16, m1, _mm512_add_ps(s1, y[r]));
    }
}

/* One case per tile height, for a broadcast stride of 1 or 2 (a constant in the loop:
 * the addresses stay immediate offsets). */
#define PG_CASE(ISA, N)                                                                                                \
    case N:                                                                                                            \
        if (x->sa == 1)                                                                                                \
            ISA(N, 1, nr, x);                                                                                          \
        else                                                                                                           \
            ISA(N, 2, nr, x);                                                                                          \
        break;

__attribute__((target("avx512f"))) static void pg_avx512(int mr, int nr, const cpu_pgemm_args *x)
{
    switch (mr) {
        PG_CASE(pg512, 1) PG_CASE(pg512, 2) PG_CASE(pg512, 3) PG_CASE(pg512, 4) PG_CASE(pg512, 5)
        PG_CASE(pg512, 6) PG_CASE(pg512, 7) PG_CASE(pg512, 8) PG_CASE(pg512, 9) PG_CASE(pg512, 10)
        PG_CASE(pg512, 11) PG_CASE(pg512, 12) PG_CASE(pg512, 13) PG_CASE(pg512, 14)
    }
}

/* The AVX2 tile: mr rows of two ymm. */
__attribute__((always_inline, target("avx2,fma"))) static inline void
pg256(const int mr, const int sa, int nr, const cpu_pgemm_args *args)
{
    __m256 x[6], y[6];
    int64_t kc = args->kc, lda = args->lda, ldb = args->ldb, ldc = args->ldc;
    const float *rbias = args->rbias, *cbias = args->cbias;
    float *c = args->c;
    bool accumulate = args->accumulate;
    PG_UNROLL for (int r = 0; r < mr; r++) x[r] = _mm256_setzero_ps(), y[r] = _mm256_setzero_ps();
    for (int64_t t = 0; t < args->ntap; t++) {
        const float *a = PG_TAP_A(args, t), *b = PG_TAP_B(args, t);
        for (int64_t k = 0; k < kc; k++, a += lda, b += ldb) {
            __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
            PG_UNROLL for (int r = 0; r < mr; r++)
            {
                __m256 s = _mm256_broadcast_ss(a + r * sa);
                x[r] = _mm256_fmadd_ps(s, b0, x[r]);
                y[r] = _mm256_fmadd_ps(s, b1, y[r]);
            }
        }
    }
    __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), lane);
    __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr - 8), lane);
    __m256 i0 = _mm256_setzero_ps(), i1 = _mm256_setzero_ps();
    if (cbias && !accumulate)
        i0 = _mm256_maskload_ps(cbias, m0), i1 = _mm256_maskload_ps(cbias + 8, m1);
    PG_UNROLL for (int r = 0; r < mr; r++)
    {
        float *d = c + r * ldc;
        __m256 s0 = i0, s1 = i1;
        if (accumulate)
            s0 = _mm256_maskload_ps(d, m0), s1 = _mm256_maskload_ps(d + 8, m1);
        else if (rbias)
            s0 = _mm256_add_ps(s0, _mm256_set1_ps(rbias[r])), s1 = _mm256_add_ps(s1, _mm256_set1_ps(rbias[r]));
        _mm256_maskstore_ps(d, m0, _mm256_add_ps(s0, x[r]));
        _mm256_maskstore_ps(d + 8, m1, _mm256_add_ps(s1, y[r]));
    }
}

__attribute__((target("avx2,fma"))) static void pg_avx2(int mr, int nr, const cpu_pgemm_args *x)
{
    switch (mr) {
        PG_CASE(pg256, 1) PG_CASE(pg256, 2) PG_CASE(pg256, 3) PG_CASE(pg256, 4) PG_CASE(pg256, 5)
        PG_CASE(pg256, 6)
    }
}
#endif

static const cpu_pgemm pg_variants[] = {
#ifdef PG_X86
    {"avx512", 14, 32, pg_avx512},
    {"avx2", 6, 16, pg_avx2},
#endif
    {"generic", 4, 8, pg_generic},
};

static bool pg_runs(const cpu_pgemm *g)
{
    if (strcmp(g->isa, "avx512") == 0)
        return host_has(HOST_AVX512F);
    if (strcmp(g->isa, "avx2") == 0)
        return host_has(HOST_AVX2) && host_has(HOST_FMA);
    return true;
}

const char *cpu_pgemm_env_problem(char *buf, size_t len)
{
    const char *want = getenv("LAYERBENCH_CPU_GEMM_ISA");
    size_t n = sizeof pg_variants / sizeof *pg_variants;
    if (!want)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (strcmp(want, pg_variants[i].isa) == 0)
            return NULL;
    int k = snprintf(buf, len, "LAYERBENCH_CPU_GEMM_ISA='%.40s': expected ", want);
    for (size_t i = 0; i < n && k >= 0 && (size_t)k < len; i++)
        k += snprintf(buf + k, len - (size_t)k, "%s%s", pg_variants[i].isa, i + 2 < n ? ", " : i + 1 < n ? " or " : "");
    return buf;
}

const cpu_pgemm *cpu_pgemm_get(void)
{
    const char *want = getenv("LAYERBENCH_CPU_GEMM_ISA");
    size_t n = sizeof pg_variants / sizeof *pg_variants;
    for (size_t i = 0; want && i < n; i++)
        if (pg_runs(&pg_variants[i]) && strcmp(want, pg_variants[i].isa) == 0)
            return &pg_variants[i];
    for (size_t i = 0; i < n; i++) /* the best this CPU runs (the generic loop runs everywhere) */
        if (pg_runs(&pg_variants[i]))
            return &pg_variants[i];
    return &pg_variants[n - 1];
}
