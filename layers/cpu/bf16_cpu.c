/* conv2d and linear in bf16 on the CPU: our register-tiled GEMM on AVX512_BF16's
 * vdpbf16ps, which multiplies pairs of bf16 and adds both products into fp32 lanes, so
 * the tensors stay bf16 and the sums fp32, as oneDNN and PyTorch do it. Where the CPU
 * lacks AVX512_BF16 (Zen 3, Skylake), or the layer is one the kernel does not take
 * (grouped convolutions, an odd feature count), the layer runs on fp32 copies around
 * the fp32 kernel (convert_cpu.c), and impl says which.
 *
 * The GEMM: C[m][n] = sum over k of A[m][k] B[k][n], K taken in pairs. A's pairs are
 * read in place (a row's A[m][2p], A[m][2p+1] sit side by side, broadcast as one 32-bit
 * value); B is packed into panels of 32 columns, each k pair as 32 interleaved pairs
 * (two zmm registers), with zeros past the last column and the last k. A tile of up to
 * 8 rows by 32 columns is summed in 16 zmm registers, then bias added, rounded to bf16
 * and stored (masked past the last column).
 *   conv2d direct (NCHW; dilation 1, at most 64 taps, strides up to 4): A = the weights
 *     [oc][tap][channel pair], B = the input's channel pairs interleaved once per run
 *     ([phase][pair][plane], inside a zero border), read in place: a tile's 32 output
 *     positions are 32 consecutive positions of the grid, and each tap an offset. A
 *     strided convolution is split into its stride phases (the input's rows and columns
 *     of each remainder), so that every tap reads one phase at stride 1 (stride 2: 4
 *     phases; a 1x1 stride-2 layer reads 1); the tiles, with the output channels split
 *     into blocks where they are too few, are shared between the threads.
 *   conv2d otherwise (dilation, larger strides or kernels): A = the weights [oc][K]
 *     (K = ic kh kw, padded to even at setup), B = the input's im2col, packed per run
 *     straight into panels, per image, each thread packing and computing its own
 *     panels; C = the output [oc][oh ow].
 *   linear: A = the input rows [rows][F], B = the weights transposed, packed once at
 *     setup; C = the output [rows][O].
 * linear with at most BF_GEMV_ROWS rows (a decode step's tokens) is a GEMV instead, on
 * the weights as they are stored ([O][F], no packed copy: a model near the memory's
 * size fits): a weight row at a time from each of eight (one input row) or two
 * far-apart parts of the thread's rows, 32 bf16 at a time against every input row in
 * vdpbf16ps, so that each weight is read once, in order, in that many sequential
 * streams; the sums reduced across the lanes once per output. */
#include <immintrin.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "host.h"

#define BF_MR 8
#define BF_NR 32
#define BF_GEMV_ROWS 4
/* The GEMV's weights (elements) from which it runs on every thread: 256 KB of bf16,
 * 14 us on one Zen 4 core, against a few for the parallel region. Before, the bound was
 * 1M elements, strictly above: Llama's k_proj and v_proj (2048 x 512) ran on one thread,
 * and a chain of 48 such GEMVs took 5.1 to 5.2 ms on two threads, 5.3 to 5.4 on one. */
#define BF_GEMV_PARALLEL_MIN (8 * CPU_PARALLEL_MIN)
/* How far ahead the GEMV asks for its weights, in bf16 (4 KB), into the L2 cache (not
 * the L1: a core has few L1 misses in flight, and asking the L1 for lines 4 KB ahead
 * held the streams to them). Into the L2, a decode step's up, down and lm_head chained
 * took 20.0 to 21.4 ms against 23.6 to 25.6 ms (Zen 4, 2 threads, five alternating
 * runs); 2, 8 and 16 KB ahead were no better than 4. */
#define BF_GEMV_AHEAD 2048
/* The direct convolution's largest stride along each dim (its phases: at most 16) */
#define BF_MAX_STRIDE 4

/* One stride phase of the direct convolution's input (pair_channels). */
typedef struct bf_phase {
    int64_t sy, sx, py, px, pad_y, pad_x;
    int64_t i0, i1, j0, j1; /* the phase's rows and columns that hold input */
} bf_phase;

bool cpu_has_bf16(void)
{
    return host_has(HOST_AVX512BF16) && host_has(HOST_AVX512BW) && getenv("LAYERBENCH_CPU_NO_BF16") == NULL;
}

#if defined(__x86_64__)
#define BF_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

/* One tile: rows [0, mr) of A (a: row-major pairs, lda pairs per row) against 32
 * columns of B, into c (ldc elements per row, bf16) for the first nv <= 32 columns. B's
 * pairs for step (t, q), t < ntap, q < nq, are the 64 values at b + boff[t] + q * bstep
 * (32 interleaved pairs), and A's pair for that step is a[t * nq + q]. rbias: one per
 * row; cbias: one per column; either may be NULL. */
BF_TARGET static inline __attribute__((always_inline)) void
bf_tile(int mr, const uint32_t *a, int64_t lda, const uint16_t *b, const int64_t *boff, int ntap, int64_t nq,
        int64_t bstep, uint16_t *c, int64_t ldc, int nv, const float *rbias, const float *cbias)
{
    __m512 acc[BF_MR][2];
    for (int m = 0; m < BF_MR; m++)
        acc[m][0] = acc[m][1] = _mm512_setzero_ps();
    for (int t = 0; t < ntap; t++) {
        const uint16_t *bt = b + boff[t];
        const uint32_t *at = a + (int64_t)t * nq;
        for (int64_t q = 0; q < nq; q++) {
            __m512bh b0 = (__m512bh)_mm512_loadu_si512(bt + q * bstep);
            __m512bh b1 = (__m512bh)_mm512_loadu_si512(bt + q * bstep + 32);
#pragma GCC unroll 8
            for (int m = 0; m < BF_MR; m++) {
                if (m < mr) {
                    __m512bh av = (__m512bh)_mm512_set1_epi32((int)at[m * lda + q]);
                    acc[m][0] = _mm512_dpbf16_ps(acc[m][0], av, b0);
                    acc[m][1] = _mm512_dpbf16_ps(acc[m][1], av, b1);
                }
            }
        }
    }
    __mmask16 k0 = nv >= 16 ? 0xffff : (__mmask16)((1u << nv) - 1);
    __mmask16 k1 = nv >= 32 ? 0xffff : nv <= 16 ? 0 : (__mmask16)((1u << (nv - 16)) - 1);
    __m512 cb0 = _mm512_setzero_ps(), cb1 = _mm512_setzero_ps();
    if (cbias) {
        cb0 = _mm512_maskz_loadu_ps(k0, cbias);
        cb1 = _mm512_maskz_loadu_ps(k1, cbias + 16);
    }
#pragma GCC unroll 8
    for (int m = 0; m < BF_MR; m++) {
        if (m < mr) {
            __m512 rb = _mm512_set1_ps(rbias ? rbias[m] : 0.0f);
            __m512 v0 = _mm512_add_ps(_mm512_add_ps(acc[m][0], rb), cb0);
            __m512 v1 = _mm512_add_ps(_mm512_add_ps(acc[m][1], rb), cb1);
            _mm256_mask_storeu_epi16(c + m * ldc, k0, (__m256i)_mm512_cvtneps_pbh(v0));
            _mm256_mask_storeu_epi16(c + m * ldc + 16, k1, (__m256i)_mm512_cvtneps_pbh(v1));
        }
    }
}

/* Every row tile of A against one block of 32 columns, the row count a constant in each
 * call so that the tile's loops unroll. */
BF_TARGET static void bf_panel(int64_t m_rows, const uint32_t *a, int64_t lda, const uint16_t *b, const int64_t *boff,
                               int ntap, int64_t nq, int64_t bstep, uint16_t *c, int64_t ldc, int nv,
                               const float *rbias, const float *cbias)
{
    int64_t m = 0;
    for (; m + BF_MR <= m_rows; m += BF_MR)
        bf_tile(BF_MR, a + m * lda, lda, b, boff, ntap, nq, bstep, c + m * ldc, ldc, nv, rbias ? rbias + m : NULL,
                cbias);
    switch (m_rows - m) {
#define BF_TAIL(r)                                                                                             \
    case r:                                                                                                    \
        bf_tile(r, a + m * lda, lda, b, boff, ntap, nq, bstep, c + m * ldc, ldc, nv, rbias ? rbias + m : NULL,  \
                cbias);                                                                                        \
        break;
        BF_TAIL(1) BF_TAIL(2) BF_TAIL(3) BF_TAIL(4) BF_TAIL(5) BF_TAIL(6) BF_TAIL(7)
#undef BF_TAIL
    default: break;
    }
}

/* y[r][j] = sum over k of x[r][k] w[j][k] (+ bias[j]), for the n <= BF_GEMV_ROWS rows of
 * x ([n][f]) and outputs [j0, j1) of w ([o][f]); y is [n][o]. One weight row at a time,
 * so that a thread's weights, rows j0 to j1 back to back, are one sequential stream (as
 * a packed panel is; four rows side by side were four streams a row apart, and ran at
 * 60% of the speed); four sums per input row, so that vdpbf16ps's latency does not
 * hold the stream back. Masked loads
 * take an f that is not a multiple of 32, odd included (a masked lane is zero on both
 * sides). */
BF_TARGET static void bf_gemv(int n, const uint16_t *x, int64_t f, const uint16_t *w, const float *bias, uint16_t *y,
                              int64_t o, int64_t j0, int64_t j1)
{
    int64_t full = f / 32 * 32;
    __mmask32 tail = (__mmask32)((1ull << (f - full)) - 1);
    for (int64_t j = j0; j < j1; j++) {
        const uint16_t *wj = w + j * f;
        __m512 acc[4][BF_GEMV_ROWS];
        for (int c = 0; c < 4; c++)
            for (int r = 0; r < BF_GEMV_ROWS; r++)
                acc[c][r] = _mm512_setzero_ps();
        int64_t k = 0;
        for (; k + 128 <= full; k += 128)
            for (int c = 0; c < 4; c++) {
                _mm_prefetch((const char *)(wj + k + 32 * c + BF_GEMV_AHEAD), _MM_HINT_T1);
                __m512bh wv = (__m512bh)_mm512_loadu_si512(wj + k + 32 * c);
                for (int r = 0; r < BF_GEMV_ROWS; r++)
                    if (r < n)
                        acc[c][r] = _mm512_dpbf16_ps(acc[c][r], wv, (__m512bh)_mm512_loadu_si512(x + r * f + k + 32 * c));
            }
        for (int c = 0; k < f; k += 32, c++) {
            __mmask32 m = k < full ? (__mmask32)0xffffffffu : tail;
            __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(m, wj + k);
            for (int r = 0; r < BF_GEMV_ROWS; r++)
                if (r < n)
                    acc[c][r] = _mm512_dpbf16_ps(acc[c][r], wv, (__m512bh)_mm512_maskz_loadu_epi16(m, x + r * f + k));
        }
        for (int r = 0; r < n; r++) {
            __m512 sum = _mm512_add_ps(_mm512_add_ps(acc[0][r], acc[1][r]), _mm512_add_ps(acc[2][r], acc[3][r]));
            y[r * o + j] = dtype_f32_to_bf16(_mm512_reduce_add_ps(sum) + (bias ? bias[j] : 0.0f));
        }
    }
}

/* A thread's outputs [j0, j1) over q streams: rows j0 + i, j0 + h + i, ..., j0 + (q-1) h
 * + i (h = (j1 - j0) / q) side by side, each q-th of the thread's weights one sequential
 * stream far from the others, so that the memory has q streams to fetch ahead at once;
 * one sum per stream and input row (the streams' sums are independent chains enough to
 * hide vdpbf16ps's latency). q is a constant at each call (bf_gemv_rows), so that the
 * sums stay in registers. Where f is not whole 32-element chunks or there are few rows,
 * and for the rows over, bf_gemv. */
#define BF_GEMV_STREAMS_MAX 8
BF_TARGET static inline __attribute__((always_inline)) void bf_gemv_streams(const int q, int n, const uint16_t *x, int64_t f,
                                                                   const uint16_t *w, const float *bias, uint16_t *y,
                                                                   int64_t o, int64_t j0, int64_t j1)
{
    int64_t h = f % 32 || j1 - j0 < 4 * q ? 0 : (j1 - j0) / q;
    for (int64_t i = 0; i < h; i++) {
        const uint16_t *ws[BF_GEMV_STREAMS_MAX];
        __m512 acc[BF_GEMV_STREAMS_MAX][BF_GEMV_ROWS];
        for (int s = 0; s < q; s++) {
            ws[s] = w + (j0 + s * h + i) * f;
            for (int r = 0; r < BF_GEMV_ROWS; r++)
                acc[s][r] = _mm512_setzero_ps();
        }
        for (int64_t k = 0; k < f; k += 32) {
            __m512bh v[BF_GEMV_STREAMS_MAX];
            for (int s = 0; s < q; s++) {
                _mm_prefetch((const char *)(ws[s] + k + BF_GEMV_AHEAD), _MM_HINT_T1);
                v[s] = (__m512bh)_mm512_loadu_si512(ws[s] + k);
            }
            for (int r = 0; r < BF_GEMV_ROWS; r++)
                if (r < n) {
                    __m512bh xv = (__m512bh)_mm512_loadu_si512(x + r * f + k);
                    for (int s = 0; s < q; s++)
                        acc[s][r] = _mm512_dpbf16_ps(acc[s][r], v[s], xv);
                }
        }
        for (int s = 0; s < q; s++)
            for (int r = 0; r < n; r++) {
                int64_t j = j0 + s * h + i;
                y[r * o + j] = dtype_f32_to_bf16(_mm512_reduce_add_ps(acc[s][r]) + (bias ? bias[j] : 0.0f));
            }
    }
    bf_gemv(n, x, f, w, bias, y, o, j0 + q * h, j1);
}

/* Eight streams for one input row (a decode step at batch 1), two for more. At batch 1,
 * a decode step's up, down and lm_head chained (gemv_chain.yaml, 592 MB of weights) took
 * 13.6 to 19.8 ms on eight streams against 19.2 to 21.2 on two (five alternating rounds,
 * Zen 4, 2 threads); a read-only stream over eight streams a thread read 11% to 35%
 * faster than over two in 11 of 12 interleaved rounds (results/cpu-2core-epyc/llm/
 * read_streams.txt). At 4 rows, four streams were slower than two in four rounds
 * of four (18.0 to 22.4 ms against 16.4 to 21.0); at 2 rows, eight were no better. */
BF_TARGET static void bf_gemv_rows(int n, const uint16_t *x, int64_t f, const uint16_t *w, const float *bias,
                                   uint16_t *y, int64_t o, int64_t j0, int64_t j1)
{
    if (n == 1)
        bf_gemv_streams(8, n, x, f, w, bias, y, o, j0, j1);
    else
        bf_gemv_streams(2, n, x, f, w, bias, y, o, j0, j1);
}

/* The direct convolution's input: one channel pair (c = 2, or 1 for an odd last
 * channel, its partner zero) of one stride phase (py, px) interleaved into xp, [hq][wq][2]:
 * element (i, j) is the padded input's (sy i + py, sx j + px), so that a strided
 * convolution reads each tap's inputs at stride 1 (tap (ky, kx) reads phase (ky % sy,
 * kx % sx) at (oy + ky / sy, ox + kx / sx)). Only the rows and columns that hold input
 * are written; the zero border is set once, at setup. For stride 1 the one phase is the
 * padded input. */
BF_TARGET static void pair_channels(const uint16_t *x, int c, int64_t h, int64_t w, uint16_t *xp, int64_t wq,
                                    const bf_phase *ph)
{
    for (int64_t i = ph->i0; i < ph->i1; i++) {
        int64_t y = ph->sy * i + ph->py - ph->pad_y;
        const uint16_t *r0 = x + y * w, *r1 = c > 1 ? r0 + h * w : NULL;
        uint32_t *d = (uint32_t *)(xp + 2 * (i * wq + ph->j0));
        int64_t n = ph->j1 - ph->j0, x0 = ph->sx * ph->j0 + ph->px - ph->pad_x, k = 0;
        if (ph->sx == 1) {
            for (; r1 && k + 16 <= n; k += 16) {
                __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(r0 + x0 + k)));
                __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(r1 + x0 + k)));
                _mm512_storeu_si512(d + k, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
            }
        } else if (ph->sx == 2) {
            /* 32 bf16 from x0 + 2k: the even ones are this phase's, in the low halves */
            __m512i low = _mm512_set1_epi32(0xffff);
            for (; k < n; k += 16) {
                int64_t left = 2 * (n - k) - 1; /* bf16 up to this phase's last one */
                __mmask32 m = left >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << left) - 1);
                __m512i a = _mm512_maskz_loadu_epi16(m, r0 + x0 + 2 * k);
                __m512i v = _mm512_and_si512(a, low);
                if (r1)
                    v = _mm512_or_si512(v, _mm512_slli_epi32(_mm512_maskz_loadu_epi16(m, r1 + x0 + 2 * k), 16));
                int64_t rest = n - k;
                _mm512_mask_storeu_epi32(d + k, rest >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << rest) - 1), v);
            }
        }
        for (; k < n; k++) {
            int64_t xx = x0 + ph->sx * k;
            d[k] = (uint32_t)r0[xx] | (r1 ? (uint32_t)r1[xx] << 16 : 0);
        }
    }
}

/* One tile as bf_tile, of the GEMMs whose K runs in blocks (linear's backward): A's
 * pairs a[m * lda + q], B one panel (nq pairs of 64 values), summed into c (fp32, ldc
 * per row; added to what it holds where acc, else written) for the first nv columns. */
BF_TARGET static inline __attribute__((always_inline)) void
bf_tile_f32(int mr, const uint32_t *a, int64_t lda, const uint16_t *b, int64_t nq, float *c, int64_t ldc, int nv,
            bool acc)
{
    __mmask16 k0 = nv >= 16 ? 0xffff : (__mmask16)((1u << nv) - 1);
    __mmask16 k1 = nv >= 32 ? 0xffff : nv <= 16 ? 0 : (__mmask16)((1u << (nv - 16)) - 1);
    __m512 s[BF_MR][2];
#pragma GCC unroll 8
    for (int m = 0; m < BF_MR; m++) {
        s[m][0] = m < mr && acc ? _mm512_maskz_loadu_ps(k0, c + m * ldc) : _mm512_setzero_ps();
        s[m][1] = m < mr && acc ? _mm512_maskz_loadu_ps(k1, c + m * ldc + 16) : _mm512_setzero_ps();
    }
    for (int64_t q = 0; q < nq; q++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + q * 64);
        __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + q * 64 + 32);
#pragma GCC unroll 8
        for (int m = 0; m < BF_MR; m++) {
            if (m < mr) {
                __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[m * lda + q]);
                s[m][0] = _mm512_dpbf16_ps(s[m][0], av, b0);
                s[m][1] = _mm512_dpbf16_ps(s[m][1], av, b1);
            }
        }
    }
#pragma GCC unroll 8
    for (int m = 0; m < BF_MR; m++) {
        if (m < mr) {
            _mm512_mask_storeu_ps(c + m * ldc, k0, s[m][0]);
            _mm512_mask_storeu_ps(c + m * ldc + 16, k1, s[m][1]);
        }
    }
}

/* Every row tile of m_rows rows of A against one panel, as bf_panel, summed in fp32 */
BF_TARGET static void bf_panel_f32(int64_t m_rows, const uint32_t *a, int64_t lda, const uint16_t *b, int64_t nq,
                                   float *c, int64_t ldc, int nv, bool acc)
{
    int64_t m = 0;
    for (; m + BF_MR <= m_rows; m += BF_MR)
        bf_tile_f32(BF_MR, a + m * lda, lda, b, nq, c + m * ldc, ldc, nv, acc);
    switch (m_rows - m) {
#define BF_TAIL(r)                                                                                             \
    case r:                                                                                                    \
        bf_tile_f32(r, a + m * lda, lda, b, nq, c + m * ldc, ldc, nv, acc);                                    \
        break;
        BF_TAIL(1) BF_TAIL(2) BF_TAIL(3) BF_TAIL(4) BF_TAIL(5) BF_TAIL(6) BF_TAIL(7)
#undef BF_TAIL
    default: break;
    }
}

/* B[K][N] (row-major, ld elements a row) packed into panels of 32 columns, [N/32][K
 * pairs][32][2], zeros past the last row and column: rows [k0, k1) of it (k0 even). */
BF_TARGET static void bf_pack_panels(const uint16_t *src, int64_t k, int64_t n, int64_t ld, uint16_t *bp, int64_t k0,
                                     int64_t k1)
{
    int64_t kp = (k + 1) / 2, np = (n + BF_NR - 1) / BF_NR;
    for (int64_t q = k0 / 2; q < (k1 + 1) / 2; q++) {
        const uint16_t *r0 = src + 2 * q * ld, *r1 = 2 * q + 1 < k ? r0 + ld : NULL;
        for (int64_t j = 0; j < np; j++) {
            uint32_t *d = (uint32_t *)(bp + (j * kp + q) * 64);
            int64_t c0 = j * BF_NR, nv = n - c0 < BF_NR ? n - c0 : BF_NR;
            for (int h = 0; h < 2; h++) { /* 16 columns at a time */
                int64_t left = nv - 16 * h;
                __mmask16 m = left >= 16 ? 0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
                __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, r0 + c0 + 16 * h));
                __m512i hi = r1 ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, r1 + c0 + 16 * h))
                                : _mm512_setzero_si512();
                _mm512_storeu_si512(d + 16 * h, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
            }
        }
    }
}

/* y [rows][n] (rows at most 32, ld elements apart; n and ld even) as one panel of B of a
 * GEMM whose K runs along n: [n pairs][32][2], each pair two neighbours in one row of y,
 * zeros past the last row. A pair of each of 16 rows at a time by a gather. */
BF_TARGET static void bf_pack_rows_panel(const uint16_t *y, int64_t rows, int64_t n, int64_t ld, uint16_t *bp)
{
    int64_t full = n / 2;
    uint32_t *d = (uint32_t *)bp;
    const int *base = (const int *)y;
    __m512i idx[2];
    __mmask16 live[2];
    for (int h = 0; h < 2; h++) {
        int ix[16];
        for (int i = 0; i < 16; i++)
            ix[i] = (int)((16 * h + i) * (ld / 2));
        idx[h] = _mm512_loadu_si512(ix);
        int64_t left = rows - 16 * h;
        live[h] = left >= 16 ? 0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
    }
    for (int64_t q = 0; q < full; q++)
        for (int h = 0; h < 2; h++)
            _mm512_storeu_si512(d + q * BF_NR + 16 * h,
                                _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live[h], idx[h], base + q, 4));
}
#else /* cpu_has_bf16() is false: the layers run on fp32 copies, never here */
static void bf_gemv(int n, const uint16_t *x, int64_t f, const uint16_t *w, const float *bias, uint16_t *y, int64_t o,
                    int64_t j0, int64_t j1)
{
    (void)n, (void)x, (void)f, (void)w, (void)bias, (void)y, (void)o, (void)j0, (void)j1;
}
static void bf_gemv_rows(int n, const uint16_t *x, int64_t f, const uint16_t *w, const float *bias, uint16_t *y,
                         int64_t o, int64_t j0, int64_t j1)
{
    (void)n, (void)x, (void)f, (void)w, (void)bias, (void)y, (void)o, (void)j0, (void)j1;
}
static void bf_panel(int64_t m_rows, const uint32_t *a, int64_t lda, const uint16_t *b, const int64_t *boff,
                     int ntap, int64_t nq, int64_t bstep, uint16_t *c, int64_t ldc, int nv, const float *rbias,
                     const float *cbias)
{
    (void)m_rows, (void)a, (void)lda, (void)b, (void)boff, (void)ntap, (void)nq, (void)bstep, (void)c, (void)ldc;
    (void)nv, (void)rbias, (void)cbias;
}
static void pair_channels(const uint16_t *x, int c, int64_t h, int64_t w, uint16_t *xp, int64_t wq, const bf_phase *ph)
{
    (void)x, (void)c, (void)h, (void)w, (void)xp, (void)wq, (void)ph;
}
static void bf_panel_f32(int64_t m_rows, const uint32_t *a, int64_t lda, const uint16_t *b, int64_t nq, float *c,
                         int64_t ldc, int nv, bool acc)
{
    (void)m_rows, (void)a, (void)lda, (void)b, (void)nq, (void)c, (void)ldc, (void)nv, (void)acc;
}
static void bf_pack_panels(const uint16_t *src, int64_t k, int64_t n, int64_t ld, uint16_t *bp, int64_t k0, int64_t k1)
{
    (void)src, (void)k, (void)n, (void)ld, (void)bp, (void)k0, (void)k1;
}
static void bf_pack_rows_panel(const uint16_t *y, int64_t rows, int64_t n, int64_t ld, uint16_t *bp)
{
    (void)y, (void)rows, (void)n, (void)ld, (void)bp;
}
#endif

/* ---- the kernels, and their fallback onto fp32 copies ---------------------------------- */

enum { BF_VIA, BF_DIRECT, BF_IM2COL, BF_LINEAR, BF_GEMV };

typedef struct bf_state {
    int path;
    void *via;           /* BF_VIA: the layer runs on fp32 copies (cpu_via_f32_kernel's state) */
    uint16_t *a;         /* conv: the weights as pairs, [oc][taps][channel pairs] (direct) or [oc][K pairs] */
    uint16_t *bp;        /* linear: the weights packed into panels; im2col: per thread, one panel */
    uint16_t *xp;        /* direct: the input's channel pairs inside their zero border */
    uint16_t *tmp;       /* direct: per thread, one tile of every output channel, [oc][32] */
    float *bias;         /* fp32 */
    int64_t k, kp;       /* im2col and linear: K and its pairs */
    int64_t cpn, plane, wq, hq; /* direct: channel pairs, pairs per plane, a phase's width and height */
    int64_t toff[64];    /* direct: each tap's offset in xp, in uint16 (at most 64 taps) */
    bf_phase phases[BF_MAX_STRIDE * BF_MAX_STRIDE]; /* direct: the stride phases the taps read */
    int nph;
    int taps, threads;
} bf_state;

static void bf_free(void *env, void *state)
{
    bf_state *s = state;
    if (!s)
        return;
    if (s->via)
        cpu_via_f32_kernel.free(env, s->via);
    free(s->a), free(s->bp), free(s->xp), free(s->tmp), free(s->bias);
    free(s);
}

static void bias_f32(bf_state *s, const uint16_t *w, int64_t at, int64_t n)
{
    if ((s->bias = bench_alloc_floats(n)))
        for (int64_t i = 0; i < n; i++)
            s->bias[i] = dtype_bf16_to_f32(w[at + i]);
}

/* Why the kernel does not take l (NULL: it does). */
static const char *bf_refuses(const layer *l)
{
    if (l->dtype != DTYPE_BF16)
        return "the kernel is bf16 only";
    if (!cpu_has_bf16())
        return getenv("LAYERBENCH_CPU_NO_BF16") ? "LAYERBENCH_CPU_NO_BF16 set" : "this CPU has no AVX512_BF16";
    if (l->kind == LAYER_CONV2D && l->p.groups != 1)
        return "grouped: no bf16 kernel";
    int64_t f = l->in.d[l->in.rank - 1];
    if (l->kind == LAYER_LINEAR && f % 2 && shape_numel(&l->in) / f > BF_GEMV_ROWS)
        return "an odd feature count: no bf16 GEMM kernel";
    return NULL;
}

/* The first index i >= 0 with s i + off >= 0, and one past the last with s i + off < n,
 * at most lim. */
static void phase_range(int64_t s, int64_t off, int64_t n, int64_t lim, int64_t *i0, int64_t *i1)
{
    *i0 = off >= 0 ? 0 : (-off + s - 1) / s;
    *i1 = n - 1 - off < 0 ? 0 : (n - 1 - off) / s + 1;
    *i1 = *i1 > lim ? lim : *i1;
    *i0 = *i0 > *i1 ? *i1 : *i0;
}

static bool bf_setup_direct(const layer *l, const uint16_t *w, bf_state *s, int64_t *ws)
{
    const layer_params *p = &l->p;
    int64_t oc = p->out_channels, c = l->in.d[1], kh = p->kernel[0], kw = p->kernel[1];
    int64_t sy = p->stride[0], sx = p->stride[1];
    int64_t npy = sy < kh ? sy : kh, npx = sx < kw ? sx : kw; /* the phases some tap reads */
    s->path = BF_DIRECT;
    s->taps = (int)(kh * kw);
    s->cpn = (c + 1) / 2;
    s->hq = (l->in.d[2] + 2 * p->padding[0] + sy - 1) / sy, s->wq = (l->in.d[3] + 2 * p->padding[1] + sx - 1) / sx;
    s->plane = s->hq * s->wq + 64; /* the last tile's loads run past the last row */
    s->nph = (int)(npy * npx);
    for (int64_t py = 0; py < npy; py++)
        for (int64_t px = 0; px < npx; px++) {
            bf_phase *ph = &s->phases[py * npx + px];
            *ph = (bf_phase){.sy = sy, .sx = sx, .py = py, .px = px, .pad_y = p->padding[0], .pad_x = p->padding[1]};
            phase_range(sy, py - p->padding[0], l->in.d[2], s->hq, &ph->i0, &ph->i1);
            phase_range(sx, px - p->padding[1], l->in.d[3], s->wq, &ph->j0, &ph->j1);
        }
    /* xp: [phase][channel pair][plane] */
    for (int t = 0; t < s->taps; t++) {
        int64_t ky = t / kw, kx = t % kw;
        s->toff[t] = 2 * (((ky % sy) * npx + kx % sx) * s->cpn * s->plane + ky / sy * s->wq + kx / sx);
    }
    s->a = calloc((size_t)(oc * s->taps * s->cpn * 2), sizeof *s->a);
    s->xp = calloc((size_t)(s->nph * s->cpn * s->plane * 2), sizeof *s->xp);
    s->tmp = malloc((size_t)(s->threads * oc * BF_NR) * sizeof *s->tmp);
    if (!s->a || !s->xp || !s->tmp)
        return false;
    for (int64_t o = 0; o < oc; o++)
        for (int t = 0; t < s->taps; t++)
            for (int64_t ci = 0; ci < c; ci++)
                s->a[((o * s->taps + t) * s->cpn + ci / 2) * 2 + ci % 2] = w[(o * c + ci) * s->taps + t];
    *ws = 2 * (oc * s->taps * s->cpn * 2 + s->nph * s->cpn * s->plane * 2 + s->threads * oc * BF_NR);
    return true;
}

static bench_status bf_setup_one(void *env, const layer *l, const void *w_, void **state, char *impl, size_t len,
                                 int64_t *workspace_bytes, bool via);
static void bf_run(void *env, const layer *l, void *state, const void *const *in, const void *w, void *out);

/* The best of a few timed runs after an untimed one, within about 50 ms; each in the
 * forward's conditions where forward (every cache emptied: the two ways hold their
 * weights in forms of their own; the input read again). */
static double bf_time(void *env, const layer *l, void *state, const void *in, void *out, bool forward)
{
    const void *ins[1] = {in};
    bf_run(env, l, state, ins, NULL, out);
    double best = 1e30, spent = 0;
    for (int r = 0; r < 3 && spent < 0.05; r++) {
        if (forward)
            cpu_forward_conditions_all(env, in, shape_numel(&l->in) * 2);
        double t0 = bench_now();
        bf_run(env, l, state, ins, NULL, out);
        double dt = bench_now() - t0;
        spent += dt, best = dt < best ? dt : best;
    }
    return best;
}

/* conv2d, and linear past a GEMV's rows, under --algo search: our bf16 kernel against
 * the fp32 algorithms' best on fp32 copies (Winograd does fewer multiplies than any
 * direct bf16 product), both timed once per shape on random bf16 data and the faster
 * kept (the choice is the backend's, so --algo-cache keeps it too); everything else, and
 * --algo heuristic, the bf16 kernel. A GEMV (a decode step) is not searched: it reads
 * the weights once, and bf16's are half of fp32's (nor are fp32 copies of an LLM's
 * largest weights made only to time them). */
static bench_status bf_setup(void *env, const layer *l, const void *w, void **state, char *impl, size_t len,
                             int64_t *workspace_bytes)
{
    cpu_choices *search = cpu_env_choices(env);
    bool searched = l->kind == LAYER_CONV2D ||
                    (l->kind == LAYER_LINEAR && shape_numel(&l->in) / l->in.d[l->in.rank - 1] > BF_GEMV_ROWS);
    if (!search || !searched || bf_refuses(l))
        return bf_setup_one(env, l, w, state, impl, len, workspace_bytes, false);
    const cpu_choice *known = cpu_choice_find(search, l);
    if (known && (known->algo[0] == 0 || known->algo[0] == 1))
        return bf_setup_one(env, l, w, state, impl, len, workspace_bytes, known->algo[0] == 1);
    if (known)
        search->stale++;
    void *st[2] = {NULL, NULL};
    char im[2][BACKEND_IMPL_LEN];
    int64_t ws[2];
    double t[2] = {1e30, 1e30};
    int64_t n_in = shape_numel(&l->in), n_out = shape_numel(&l->out);
    uint16_t *x = malloc((size_t)n_in * 2), *y = malloc((size_t)n_out * 2);
    if (x && y) {
        for (int64_t i = 0; i < n_in; i++) /* values in [-1, 1), never zeros */
            x[i] = (uint16_t)((i * 2654435761u >> 7 & 1 ? 0xbf00 : 0x3f00) | (i * 40503u >> 3 & 0x7f));
        for (int k = 0; k < 2; k++)
            if (bf_setup_one(env, l, w, &st[k], im[k], sizeof im[k], &ws[k], k == 1) == BENCH_OK)
                t[k] = bf_time(env, l, st[k], x, y, search->forward);
    }
    free(x), free(y);
    int pick = t[1] < t[0] ? 1 : 0;
    if (!st[pick]) {
        bf_free(env, st[1 - pick]);
        return bf_setup_one(env, l, w, state, impl, len, workspace_bytes, false);
    }
    bf_free(env, st[1 - pick]);
    cpu_choice_add(search, l, (const int64_t[3]){pick, 0, 0});
    *state = st[pick], *workspace_bytes = ws[pick];
    if (st[1 - pick])
        snprintf(impl, len, "%.60s [%.1f us; %s %.1f us]", im[pick], t[pick] * 1e6, pick ? "bf16 kernel" : "fp32 copies",
                 t[1 - pick] * 1e6);
    else
        snprintf(impl, len, "%s", im[pick]);
    return BENCH_OK;
}

/* One of the two ways: the bf16 kernel (where it takes l), or (via) fp32 copies. */
static bench_status bf_setup_one(void *env, const layer *l, const void *w_, void **state, char *impl, size_t len,
                                 int64_t *workspace_bytes, bool via)
{
    const uint16_t *w = w_;
    bf_state *s = calloc(1, sizeof *s);
    if (!s)
        return BENCH_ERR_NOMEM;
    const char *why = bf_refuses(l);
    if (why || via) {
        char inner[BACKEND_IMPL_LEN];
        s->path = BF_VIA;
        bench_status st = cpu_via_f32_kernel.setup(env, l, w, &s->via, inner, sizeof inner, workspace_bytes);
        snprintf(impl, len, why ? "%s (%s)" : "%s", inner, why);
        if (st != BENCH_OK)
            s->via = NULL, bf_free(env, s);
        else
            *state = s;
        return st;
    }
    s->threads = omp_get_max_threads();
    const layer_params *p = &l->p;
    bool ok;
    if (l->kind == LAYER_CONV2D && p->stride[0] <= BF_MAX_STRIDE && p->stride[1] <= BF_MAX_STRIDE &&
        p->dilation[0] == 1 && p->dilation[1] == 1 && p->kernel[0] * p->kernel[1] <= 64) {
        ok = bf_setup_direct(l, w, s, workspace_bytes);
        if (p->stride[0] == 1 && p->stride[1] == 1)
            snprintf(impl, len, "direct bf16 vdpbf16ps %dx%d, channel pairs", BF_MR, BF_NR);
        else
            snprintf(impl, len, "direct bf16 vdpbf16ps %dx%d, channel pairs, %d stride phases", BF_MR, BF_NR, s->nph);
    } else if (l->kind == LAYER_CONV2D) {
        int64_t oc = p->out_channels;
        s->path = BF_IM2COL;
        s->k = l->in.d[1] * p->kernel[0] * p->kernel[1];
        s->kp = (s->k + 1) / 2;
        s->a = calloc((size_t)(oc * s->kp * 2), sizeof *s->a);
        s->bp = malloc((size_t)(s->threads * s->kp * 64) * sizeof *s->bp);
        if ((ok = s->a && s->bp))
            for (int64_t o = 0; o < oc; o++)
                memcpy(s->a + o * s->kp * 2, w + o * s->k, (size_t)s->k * sizeof *w);
        *workspace_bytes = (oc * s->kp * 2 + s->threads * s->kp * 64) * 2;
        snprintf(impl, len, "im2col+gemm bf16 vdpbf16ps %dx%d", BF_MR, BF_NR);
    } else if (shape_numel(&l->in) / l->in.d[l->in.rank - 1] <= BF_GEMV_ROWS) {
        s->path = BF_GEMV;
        s->k = l->in.d[l->in.rank - 1];
        ok = true;
        *workspace_bytes = 0;
        snprintf(impl, len, "gemv bf16 vdpbf16ps on the weights as stored (%s per thread)",
                 s->k % 32 ? "one row stream" : shape_numel(&l->in) == s->k ? "8 row streams" : "2 row streams");
    } else {
        int64_t f = l->in.d[l->in.rank - 1], o = p->out_features, np = (o + BF_NR - 1) / BF_NR;
        s->path = BF_LINEAR;
        s->k = f, s->kp = f / 2;
        s->bp = calloc((size_t)(np * s->kp * 64), sizeof *s->bp);
        if ((ok = s->bp != NULL))
            for (int64_t j = 0; j < o; j++)
                for (int64_t k = 0; k < f; k++)
                    s->bp[((j / BF_NR) * s->kp + k / 2) * 64 + (j % BF_NR) * 2 + k % 2] = w[j * f + k];
        *workspace_bytes = np * s->kp * 64 * 2;
        snprintf(impl, len, "gemm bf16 vdpbf16ps %dx%d, weights packed at setup", BF_MR, BF_NR);
    }
    if (ok && p->bias) {
        int64_t n = l->kind == LAYER_CONV2D ? p->out_channels : p->out_features;
        bias_f32(s, w, (l->kind == LAYER_CONV2D ? l->in.d[1] * p->kernel[0] * p->kernel[1] : l->in.d[l->in.rank - 1]) * n,
                 n);
        ok = s->bias != NULL;
    }
    if (!ok) {
        bf_free(env, s);
        return BENCH_ERR_NOMEM;
    }
    *state = s;
    return BENCH_OK;
}

/* Output positions [n0, n0 + 32) of one image's im2col, packed as one panel. */
static void im2col_panel(const layer *l, const uint16_t *x, int64_t n0, int64_t kp, uint16_t *b)
{
    const layer_params *p = &l->p;
    int64_t c = l->in.d[1], h = l->in.d[2], wd = l->in.d[3], ow = l->out.d[3], ohw = l->out.d[2] * ow;
    int64_t kh = p->kernel[0], kw = p->kernel[1], k = c * kh * kw;
    int64_t iy[BF_NR], ix[BF_NR];
    int nv = (int)(ohw - n0 < BF_NR ? ohw - n0 : BF_NR);
    for (int j = 0; j < nv; j++) {
        int64_t pos = n0 + j;
        iy[j] = pos / ow * p->stride[0] - p->padding[0];
        ix[j] = pos % ow * p->stride[1] - p->padding[1];
    }
    for (int64_t q = 0; q < kp * 2; q++) {
        uint16_t *dst = b + (q / 2) * 64 + q % 2;
        if (q >= k) {
            for (int j = 0; j < BF_NR; j++)
                dst[j * 2] = 0;
            continue;
        }
        int64_t ci = q / (kh * kw), r = q % (kh * kw), dy = r / kw * p->dilation[0], dx = r % kw * p->dilation[1];
        const uint16_t *plane = x + ci * h * wd;
        for (int j = 0; j < nv; j++) {
            int64_t y = iy[j] + dy, xx = ix[j] + dx;
            dst[j * 2] = (y >= 0 && y < h && xx >= 0 && xx < wd) ? plane[y * wd + xx] : 0;
        }
        for (int j = nv; j < BF_NR; j++)
            dst[j * 2] = 0;
    }
}

/* The direct convolution of one image: the output computed on a phase's grid (stride 1:
 * the padded input's), 32 positions (r = oy * wq + ox) a tile, and the columns past ow
 * dropped as it is stored. The work is (tile, block of output channels) pairs: the
 * blocks split the channels only where the tiles are too few to share out evenly (14x14
 * maps: 7 tiles for 2 threads). */
static void bf_direct(const layer *l, bf_state *s, const uint16_t *x, uint16_t *y)
{
    int64_t c = l->in.d[1], h = l->in.d[2], w = l->in.d[3], oc = l->p.out_channels;
    int64_t oh = l->out.d[2], ow = l->out.d[3], ohw = oh * ow, r_end = (oh - 1) * s->wq + ow;
    int64_t panels = (r_end + BF_NR - 1) / BF_NR;
    /* channel blocks: enough items for 4 per thread, blocks of whole row tiles */
    int64_t blocks = panels >= 4 * s->threads ? 1 : (4 * s->threads + panels - 1) / panels;
    int64_t per = ((oc + blocks - 1) / blocks + BF_MR - 1) / BF_MR * BF_MR;
    blocks = (oc + per - 1) / per;
    int64_t pairs = s->nph * s->cpn;
    CPU_OMP_IF(c * h * w > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t i = 0; i < pairs; i++) {
            int64_t ph = i / s->cpn, cp = i % s->cpn;
            pair_channels(x + 2 * cp * h * w, c - 2 * cp < 2 ? 1 : 2, h, w, s->xp + 2 * i * s->plane, s->wq,
                          &s->phases[ph]);
        });
    CPU_OMP_IF(oc * ohw * c > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t item = 0; item < panels * blocks; item++) {
            int64_t pi = item / blocks, o0 = item % blocks * per, no = oc - o0 < per ? oc - o0 : per;
            uint16_t *tmp = s->tmp + (int64_t)omp_get_thread_num() * oc * BF_NR;
            int64_t r0 = pi * BF_NR;
            int nv = (int)(r_end - r0 < BF_NR ? r_end - r0 : BF_NR);
            bf_panel(no, (const uint32_t *)s->a + o0 * s->taps * s->cpn, s->taps * s->cpn, s->xp + 2 * r0, s->toff,
                     s->taps, s->cpn, 2 * s->plane, tmp, BF_NR, nv, s->bias ? s->bias + o0 : NULL, NULL);
            for (int64_t r = r0; r < r0 + nv;) { /* each row's run of valid columns */
                int64_t oy = r / s->wq, ox = r % s->wq, run = ow - ox;
                if (ox >= ow) {
                    r += s->wq - ox;
                    continue;
                }
                run = run < r0 + nv - r ? run : r0 + nv - r;
                for (int64_t o = 0; o < no; o++)
                    memcpy(y + (o0 + o) * ohw + oy * ow + ox, tmp + o * BF_NR + (r - r0), (size_t)run * sizeof *y);
                r += run;
            }
        });
}

static const int64_t bf_no_offset[1] = {0};

static void bf_run(void *env, const layer *l, void *state, const void *const *in, const void *w, void *out)
{
    bf_state *s = state;
    if (s->path == BF_VIA) {
        cpu_via_f32_kernel.run(env, l, s->via, in, w, out);
        return;
    }
    if (s->path == BF_GEMV) {
        int64_t f = s->k, rows = shape_numel(&l->in) / f, o = l->p.out_features;
        const uint16_t *x = in[0], *wt = w;
        uint16_t *y = out;
        CPU_OMP_IF(o * f >= BF_GEMV_PARALLEL_MIN, "omp parallel", {
            int64_t lo, hi;
            cpu_thread_span(o, &lo, &hi);
            bf_gemv_rows((int)rows, x, f, wt, s->bias, y, o, lo, hi);
        });
        return;
    }
    if (s->path != BF_LINEAR) {
        int64_t n = l->in.d[0], oc = l->p.out_channels, ohw = l->out.d[2] * l->out.d[3];
        int64_t panels = (ohw + BF_NR - 1) / BF_NR, plane = shape_numel(&l->in) / n;
        for (int64_t b = 0; b < n; b++) {
            const uint16_t *x = (const uint16_t *)in[0] + b * plane;
            uint16_t *y = (uint16_t *)out + b * oc * ohw;
            if (s->path == BF_DIRECT) {
                bf_direct(l, s, x, y);
                continue;
            }
            CPU_OMP_IF(oc * ohw * s->k > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
                for (int64_t pi = 0; pi < panels; pi++) {
                    uint16_t *bp = s->bp + (int64_t)omp_get_thread_num() * s->kp * 64;
                    int64_t n0 = pi * BF_NR;
                    im2col_panel(l, x, n0, s->kp, bp);
                    bf_panel(oc, (const uint32_t *)s->a, s->kp, bp, bf_no_offset, 1, s->kp, 64, y + n0, ohw,
                             (int)(ohw - n0 < BF_NR ? ohw - n0 : BF_NR), s->bias, NULL);
                });
        }
        return;
    }
    int64_t f = s->k, rows = shape_numel(&l->in) / f, o = l->p.out_features, np = (o + BF_NR - 1) / BF_NR;
    const uint32_t *a = in[0];
    uint16_t *y = out;
    /* the panels of outputs over the threads; each streams its packed weights once per
     * BF_MR rows */
    CPU_OMP_IF(rows * o * f > 64 * CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t j = 0; j < np; j++)
            bf_panel(rows, a, s->kp, s->bp + j * s->kp * 64, bf_no_offset, 1, s->kp, 64, y + j * BF_NR, o,
                     (int)(o - j * BF_NR < BF_NR ? o - j * BF_NR : BF_NR), NULL, s->bias ? s->bias + j * BF_NR : NULL););
}

static double bf_tolerance(void *env, const layer *l)
{
    return cpu_via_f32_kernel.tolerance(env, l);
}

const backend_kernel cpu_conv2d_bf16_kernel = {.setup = bf_setup, .run = bf_run, .free = bf_free,
                                               .tolerance = bf_tolerance};
const backend_kernel cpu_linear_bf16_kernel = {.setup = bf_setup, .run = bf_run, .free = bf_free,
                                               .tolerance = bf_tolerance};

/* ---- linear's and conv2d's backward in bf16 ------------------------------------------------- */

/* linear's backward on the same tiles: the input's gradient dX = dY W with A = dY's rows
 * (pairs of outputs, read in place: out_features even) and B = W packed once at setup;
 * the weights' dW = dY^T X with A = dY^T (pairs of rows) and B = X, both packed at each
 * run; the bias's as column sums of dY in fp32. Where K (out_features for dX, the rows
 * for dW) is more than BF_KB pairs, each tile sums it in blocks of BF_KB pairs into fp32
 * partial sums (BF_MB rows by a range of panels per work item, so that a block of A and
 * the panels' slices stay in the caches), rounded to bf16 at the end; else each tile's
 * sums go to bf16 at once, as the forward's. Where the kernel does not take the layer
 * (fp16, a CPU without AVX512_BF16, an odd out_features, a grouped convolution), fp32
 * copies around the fp32 kernel (cpu_bwd_via_f32_kernel), and impl says why.
 * conv2d (groups 1), per sample, as the fp32 kernel's im2col: the columns' gradient
 * W^T dY with A = W^T (pairs of output channels, packed once at setup) and B = dY
 * packed, summed in fp32 and added back into the input's gradient by the fp32 col2im,
 * rounded once per sample (a 1x1 stride-1 convolution's product is the input's gradient
 * itself); the weights' as dW = dY col^T over a group of samples at once (a layer of few
 * positions: bf_col_group): A = dY (pairs of output positions, the group's samples
 * side by side, each made even with a zero) and B = the group's im2col in bf16, written 32
 * rows at a time straight into panels (gathers), summed over the groups in fp32 and
 * rounded at the end; the bias's sums in fp32. */
#define BF_KB 256
#define BF_MB 64

/* C[m][n] = A[m][K] B[K][n] over the threads: A's rows as kp pairs (lda pairs a row), B
 * packed by bf_pack_panels; C bf16 (ldc elements a row), with cf fp32 [m][n] where kp >
 * BF_KB; or, c NULL, into cf alone (fp32, added to what it holds where acc). Work items:
 * blocks of BF_MB rows times ranges of panels, twice as many as the threads where the
 * rows allow. */
static void bf_gemm(int64_t m, int64_t n, int64_t kp, const uint32_t *a, int64_t lda, const uint16_t *bp, uint16_t *c,
                    int64_t ldc, float *cf, bool acc)
{
    int64_t np = (n + BF_NR - 1) / BF_NR, nmb = (m + BF_MB - 1) / BF_MB, threads = omp_get_max_threads();
    int64_t chunks = nmb >= 2 * threads ? 1 : (2 * threads + nmb - 1) / nmb;
    chunks = chunks > np ? np : chunks;
    int64_t items = nmb * chunks;
    bool blocked = kp > BF_KB || !c;
    CPU_OMP_IF(m * n * kp > CPU_PARALLEL_MIN, "omp parallel for schedule(dynamic, 1)",
        for (int64_t it = 0; it < items; it++) {
            int64_t r0 = it / chunks * BF_MB, rows = m - r0 < BF_MB ? m - r0 : BF_MB;
            int64_t j0 = it % chunks * np / chunks, j1 = (it % chunks + 1) * np / chunks;
            const uint32_t *ar = a + r0 * lda;
            for (int64_t q0 = 0; q0 < kp; q0 += blocked ? BF_KB : kp) {
                int64_t nq = blocked && kp - q0 > BF_KB ? BF_KB : kp - q0;
                for (int64_t j = j0; j < j1; j++) {
                    int nv = (int)(n - j * BF_NR < BF_NR ? n - j * BF_NR : BF_NR);
                    const uint16_t *b = bp + (j * kp + q0) * 64;
                    if (blocked)
                        bf_panel_f32(rows, ar + q0, lda, b, nq, cf + r0 * n + j * BF_NR, n, nv, q0 > 0 || acc);
                    else
                        bf_panel(rows, ar, lda, b, bf_no_offset, 1, kp, 64, c + r0 * ldc + j * BF_NR, ldc, nv, NULL,
                                 NULL);
                }
            }
            int64_t c0 = j0 * BF_NR, c1 = j1 * BF_NR < n ? j1 * BF_NR : n;
            for (int64_t r = r0; blocked && c && r < r0 + rows; r++)
                cpu_convert_span(c + r * ldc + c0, DTYPE_BF16, cf + r * n + c0, DTYPE_FP32, c1 - c0);
        });
}

/* rows [2 lo, 2 hi) of b ([k][n], ld n) into its panels, over the threads */
static void bf_pack_all(const uint16_t *b, int64_t k, int64_t n, uint16_t *bp)
{
    int64_t kp = (k + 1) / 2;
    CPU_OMP_IF(k * n > CPU_PARALLEL_MIN, "omp parallel", {
        int64_t lo, hi;
        cpu_thread_span(kp, &lo, &hi);
        if (hi > lo)
            bf_pack_panels(b, k, n, n, bp, 2 * lo, 2 * hi > k ? k : 2 * hi);
    });
}

/* at[j][q] = the pair (y[2q][j], y[2q + 1][j]) (zero past the last row): y^T ([rows][o])
 * as A's rows of pairs, 64 columns of y at a time so that each row of at is written in
 * order */
static void bf_pack_pairs_t(const uint16_t *y, int64_t rows, int64_t o, uint32_t *at)
{
    int64_t rp = (rows + 1) / 2;
    CPU_OMP_IF(rows * o > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t j0 = 0; j0 < o; j0 += 64) {
            int64_t j1 = o - j0 < 64 ? o : j0 + 64;
            for (int64_t q = 0; q < rp; q++) {
                const uint16_t *r0 = y + 2 * q * o, *r1 = 2 * q + 1 < rows ? r0 + o : NULL;
                for (int64_t j = j0; j < j1; j++)
                    at[j * rp + q] = (uint32_t)r0[j] | (r1 ? (uint32_t)r1[j] << 16 : 0u);
            }
        });
}

/* Row kk (channel ci, tap i, j) of one sample's im2col in bf16 into dst (pp elements:
 * the output's positions, then zeros), as cpu_col_move's */
static void bf_im2col_row(const layer *l, const uint16_t *x, int64_t kk, uint16_t *dst, int64_t pp)
{
    const layer_params *p = &l->p;
    int64_t h = l->in.d[2], wd = l->in.d[3], oh = l->out.d[2], ow = l->out.d[3], kh = p->kernel[0], kw = p->kernel[1];
    int64_t ci = kk / (kh * kw), i = kk / kw % kh, j = kk % kw;
    int64_t x0, x1, sx = p->stride[1], off = j * p->dilation[1] - p->padding[1];
    cpu_tap_span(l, j, &x0, &x1);
    for (int64_t y = 0; y < oh; y++) {
        int64_t iy = y * p->stride[0] - p->padding[0] + i * p->dilation[0];
        uint16_t *d = dst + y * ow;
        if (iy < 0 || iy >= h) {
            memset(d, 0, (size_t)ow * sizeof *d);
            continue;
        }
        const uint16_t *row = x + (ci * h + iy) * wd;
        for (int64_t xo = 0; xo < x0; xo++)
            d[xo] = 0;
        for (int64_t xo = x0; xo < x1; xo++)
            d[xo] = row[xo * sx + off];
        for (int64_t xo = x1; xo < ow; xo++)
            d[xo] = 0;
    }
    for (int64_t e = oh * ow; e < pp; e++)
        dst[e] = 0;
}

/* The im2col of gn samples (K = c kh kw rows, each of the samples' pp positions one after
 * another) straight into B's panels for dW = dY col^T (K of that GEMM: the positions),
 * 32 rows at a time through each thread's tmp [32][gn pp] */
static void bf_im2col_panels(const layer *l, const uint16_t *x, int64_t gn, uint16_t *bp, uint16_t *tmp, int64_t pp)
{
    int64_t k = l->in.d[1] * l->p.kernel[0] * l->p.kernel[1], np = (k + BF_NR - 1) / BF_NR, row = gn * pp;
    int64_t sample = l->in.d[1] * l->in.d[2] * l->in.d[3];
    CPU_OMP_IF(k * row > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t jp = 0; jp < np; jp++) {
            uint16_t *t = tmp + (int64_t)omp_get_thread_num() * BF_NR * row;
            int64_t rows = k - jp * BF_NR < BF_NR ? k - jp * BF_NR : BF_NR;
            for (int64_t r = 0; r < rows; r++)
                for (int64_t b = 0; b < gn; b++)
                    bf_im2col_row(l, x + b * sample, jp * BF_NR + r, t + r * row + b * pp, pp);
            bf_pack_rows_panel(t, rows, row, row, bp + jp * (row / 2) * 64);
        });
}

/* The samples whose im2col the weights' half packs at once: enough for BF_COL_POSITIONS
 * positions (one sample where it has that many), so that a layer of few positions (7 x 7
 * in ResNet's last) runs one GEMM of K = the group's positions rather than one of K = 25
 * pairs per sample, whose fp32 sums (512 x 4608) each sample read and wrote again; no
 * more, so that the threads' 32 rows of it stay in the caches (all of a batch's 12544
 * positions of ResNet's first convolution at once took 1.7x its time a sample at a time) */
#define BF_COL_POSITIONS 512
static int64_t bf_col_group(const layer *l, int64_t pp)
{
    int64_t g = (BF_COL_POSITIONS + pp - 1) / pp;
    return g > l->in.d[0] ? l->in.d[0] : g;
}

typedef struct bf_bwd {
    void *via;         /* fp32 copies: cpu_bwd_via_f32_kernel's state, where the kernel does not take l */
    uint16_t *wp;      /* linear: W packed as B of dX (K = out_features) */
    uint16_t *xp;      /* per run: linear: X packed as B of dW (K = rows); conv2d: a sample's dY as B of the
                          columns' gradient */
    uint32_t *at;      /* per run: linear: dY^T as A of dW, [out_features][row pairs] */
    uint32_t *wt;      /* conv2d: W^T as A of the columns' gradient, [K][out channel pairs] (setup) */
    uint16_t *col;     /* conv2d: a group of samples' im2col as B's panels of dW = dY col^T (bf_col_group) */
    uint16_t *tmp;     /* conv2d: per thread, 32 rows of the group's im2col */
    uint16_t *ay;      /* conv2d: the group's dY as A, [out channels][samples' positions, each made even]
                          (none where a group is one sample of even positions: dY read in place) */
    float *dcol, *dxf; /* conv2d, fp32: a sample's columns' gradient [K][positions], its input's gradient */
    float *cf, *db;    /* fp32: a blocked GEMM's sums (conv2d: dW summed over the batch); the bias's */
    bool split, parts; /* both halves run; their timing is on */
    double part_s[2];  /* backward data, backward weights */
} bf_bwd;

static void bf_bwd_free(void *env, void *state)
{
    bf_bwd *s = state;
    if (!s)
        return;
    if (s->via)
        cpu_bwd_via_f32_kernel.free(env, s->via);
    free(s->wp), free(s->xp), free(s->at), free(s->wt), free(s->col), free(s->tmp), free(s->ay), free(s->dcol);
    free(s->dxf), free(s->cf), free(s->db), free(s);
}

/* Why the kernel does not take l's backward (NULL: it does). */
static const char *bf_bwd_refuses(const layer *l)
{
    if (l->dtype != DTYPE_BF16)
        return "the kernel is bf16 only";
    if (!cpu_has_bf16())
        return getenv("LAYERBENCH_CPU_NO_BF16") ? "LAYERBENCH_CPU_NO_BF16 set" : "this CPU has no AVX512_BF16";
    if (l->kind == LAYER_LINEAR && l->p.out_features % 2)
        return "an odd out_features: no bf16 GEMM kernel";
    if (l->kind == LAYER_CONV2D && l->p.groups != 1)
        return "grouped: no bf16 kernel";
    return NULL;
}

/* linear's buffers (the weights packed); its fp32 floats for cf into *cf; false when out of memory */
static bool bf_linear_bwd_setup(const layer *l, const uint16_t *w, bf_bwd *s, int64_t *ws)
{
    int64_t f = l->in.d[l->in.rank - 1], rows = shape_numel(&l->in) / f, o = l->p.out_features;
    int64_t rp = (rows + 1) / 2, np = (f + BF_NR - 1) / BF_NR, cf = 0;
    bool data = !l->no_input_grad, weights = !l->frozen, ok = true;
    if (data) {
        ok = (s->wp = malloc((size_t)(np * (o / 2) * 64) * sizeof *s->wp)) != NULL;
        if (ok)
            bf_pack_all(w, o, f, s->wp);
        cf = o / 2 > BF_KB ? rows * f : 0;
    }
    if (ok && weights) {
        ok = (s->xp = malloc((size_t)(np * rp * 64) * sizeof *s->xp)) != NULL &&
             (s->at = malloc((size_t)(o * rp) * sizeof *s->at)) != NULL &&
             (!l->p.bias || (s->db = bench_alloc_floats(o)) != NULL);
        cf = rp > BF_KB && o * f > cf ? o * f : cf;
    }
    if (ok && cf)
        ok = (s->cf = bench_alloc_floats(cf)) != NULL;
    *ws = 2 * (data ? np * (o / 2) * 64 : 0) + (weights ? 2 * np * rp * 64 + 4 * o * rp + (l->p.bias ? 4 * o : 0) : 0) +
          4 * cf;
    return ok;
}

/* Whether conv2d l's columns are its input (1x1, stride 1, no padding): the data half's
 * product is the input's gradient itself, no col2im */
static bool bf_conv_is_pointwise(const layer *l)
{
    const layer_params *p = &l->p;
    return p->kernel[0] == 1 && p->kernel[1] == 1 && p->stride[0] == 1 && p->stride[1] == 1 && p->padding[0] == 0 &&
           p->padding[1] == 0;
}

/* conv2d's (groups 1): W^T as pairs, the columns' gradient, the im2col's panels, dW's sums */
static bool bf_conv_bwd_setup(const layer *l, const uint16_t *w, bf_bwd *s, int64_t *ws)
{
    const layer_params *p = &l->p;
    int64_t c = l->in.d[1], hw = l->in.d[2] * l->in.d[3], oc = p->out_channels, np = l->out.d[2] * l->out.d[3];
    int64_t k = c * p->kernel[0] * p->kernel[1], pp = np + np % 2, ocp = (oc + 1) / 2, xp = 0;
    int64_t kpan = (k + BF_NR - 1) / BF_NR * BF_NR, threads = omp_get_max_threads();
    bool data = !l->no_input_grad, weights = !l->frozen, ok = true, pointwise = bf_conv_is_pointwise(l);
    *ws = 0;
    if (data) {
        int64_t dcol = pointwise && ocp <= BF_KB ? 0 : k * np;
        ok = (s->wt = malloc((size_t)(k * ocp) * sizeof *s->wt)) != NULL &&
             (!dcol || (s->dcol = bench_alloc_floats(dcol)) != NULL) &&
             (pointwise || (s->dxf = bench_alloc_floats(c * hw)) != NULL);
        if (ok)
            bf_pack_pairs_t(w, oc, k, s->wt);
        xp = (np + BF_NR - 1) / BF_NR * ocp * 64;
        *ws += 4 * (k * ocp + dcol + (pointwise ? 0 : c * hw));
    }
    if (ok && weights) {
        int64_t row = bf_col_group(l, pp) * pp; /* the group's positions */
        ok = (s->col = malloc((size_t)(kpan * row) * sizeof *s->col)) != NULL &&
             (s->tmp = malloc((size_t)(threads * BF_NR * row) * sizeof *s->tmp)) != NULL &&
             (row == np || (s->ay = malloc((size_t)(oc * row) * sizeof *s->ay)) != NULL) &&
             (s->cf = bench_alloc_floats(oc * k)) != NULL && (!p->bias || (s->db = bench_alloc_floats(oc)) != NULL);
        *ws += 2 * (kpan * row + threads * BF_NR * row + (row == np ? 0 : oc * row)) + 4 * (oc * k + oc);
    }
    if (ok && xp)
        ok = (s->xp = malloc((size_t)xp * sizeof *s->xp)) != NULL;
    *ws += 2 * xp;
    return ok;
}

static bench_status bf_bwd_setup(void *env, const layer *l, const void *w, void **state, char *impl, size_t len,
                                 int64_t *ws)
{
    bf_bwd *s = calloc(1, sizeof *s);
    if (!s)
        return BENCH_ERR_NOMEM;
    const char *why = bf_bwd_refuses(l);
    if (why) {
        char inner[BACKEND_IMPL_LEN];
        bench_status st = cpu_bwd_via_f32_kernel.setup(env, l, w, &s->via, inner, sizeof inner, ws);
        snprintf(impl, len, "%s (%s)", inner, why);
        if (st != BENCH_OK) {
            free(s);
            return st;
        }
        *state = s;
        return BENCH_OK;
    }
    layer_part_info parts[LAYER_MAX_PARTS];
    s->split = layer_backward_parts(l, false, parts) == 2;
    bool conv = l->kind == LAYER_CONV2D;
    if (!(conv ? bf_conv_bwd_setup(l, w, s, ws) : bf_linear_bwd_setup(l, w, s, ws))) {
        bf_bwd_free(env, s);
        return BENCH_ERR_NOMEM;
    }
    if (conv)
        snprintf(impl, len, "im2col + gemm bf16 vdpbf16ps %dx%d (data: W^T dY per sample%s; weights: dY col^T over "
                 "groups of samples, summed in fp32)%s", BF_MR, BF_NR, bf_conv_is_pointwise(l) ? "" : " then col2im in fp32",
                 l->frozen ? "; frozen: no weights' gradient" : "");
    else
        snprintf(impl, len, "gemm bf16 vdpbf16ps %dx%d (data: dY W, W packed at setup; weights: dY^T X, packed per "
                 "run)%s", BF_MR, BF_NR, l->frozen ? "; frozen: no weights' gradient" : "");
    *state = s;
    return BENCH_OK;
}

/* conv2d: per sample, the columns' gradient W^T dY (fp32) added back into the input's
 * gradient (col2im in fp32, rounded once; a pointwise convolution's is the gradient
 * itself); dW = dY col^T summed over the batch in fp32, rounded at the end; the bias's
 * sums in fp32 */
static void bf_conv_bwd_run(void *env, const layer *l, bf_bwd *s, const uint16_t *x, const uint16_t *dy, uint16_t *out)
{
    const layer_params *p = &l->p;
    int64_t n = l->in.d[0], c = l->in.d[1], hw = l->in.d[2] * l->in.d[3], oc = p->out_channels;
    int64_t np = l->out.d[2] * l->out.d[3], k = c * p->kernel[0] * p->kernel[1], pp = np + np % 2, ocp = (oc + 1) / 2;
    uint16_t *dw = out + n * c * hw;
    bool pointwise = bf_conv_is_pointwise(l);
    double t0 = s->parts ? bench_now() : 0;
    for (int64_t b = 0; !l->no_input_grad && b < n; b++) {
        bf_pack_all(dy + b * oc * np, oc, np, s->xp);
        if (pointwise) {
            bf_gemm(k, np, ocp, s->wt, ocp, s->xp, out + b * c * hw, np, s->dcol, false);
            continue;
        }
        bf_gemm(k, np, ocp, s->wt, ocp, s->xp, NULL, 0, s->dcol, false);
        memset(s->dxf, 0, (size_t)(c * hw) * sizeof *s->dxf);
        cpu_col_move(l, s->dxf, s->dcol, c, true);
        cpu_convert(env, out + b * c * hw, DTYPE_BF16, s->dxf, DTYPE_FP32, c * hw);
    }
    double t1 = s->parts ? bench_now() : 0;
    if (!l->frozen) {
        int64_t g = bf_col_group(l, pp);
        for (int64_t b0 = 0; b0 < n; b0 += g) {
            int64_t gn = n - b0 < g ? n - b0 : g, row = gn * pp;
            /* A: one sample of even positions, dY in place; else each channel's positions of
             * the group's samples side by side, each sample's made even with a zero */
            const uint16_t *a = dy + b0 * oc * np;
            if (gn > 1 || pp != np) {
                a = s->ay;
                CPU_OMP_IF(oc * row > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
                    for (int64_t o = 0; o < oc; o++)
                        for (int64_t b = 0; b < gn; b++) {
                            memcpy(s->ay + o * row + b * pp, dy + ((b0 + b) * oc + o) * np, (size_t)np * sizeof *dy);
                            if (pp != np)
                                s->ay[o * row + b * pp + np] = 0;
                        });
            }
            bf_im2col_panels(l, x + b0 * c * hw, gn, s->col, s->tmp, pp);
            bf_gemm(oc, k, row / 2, (const uint32_t *)a, row / 2, s->col, NULL, 0, s->cf, b0 > 0);
        }
        cpu_convert(env, dw, DTYPE_BF16, s->cf, DTYPE_FP32, oc * k);
        float *db = s->db;
        if (db) {
            CPU_OMP_IF(n * oc * np > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
                for (int64_t o = 0; o < oc; o++) {
                    float sum = 0.0f;
                    for (int64_t b = 0; b < n; b++)
                        for (int64_t i = 0; i < np; i++)
                            sum += dtype_bf16_to_f32(dy[(b * oc + o) * np + i]);
                    db[o] = sum;
                });
            cpu_convert_span(dw + oc * k, DTYPE_BF16, db, DTYPE_FP32, oc);
        }
    }
    if (s->parts)
        s->part_s[0] = t1 - t0, s->part_s[1] = bench_now() - t1;
}

static void bf_bwd_run(void *env, const layer *l, void *state, const void *const *in, const void *w, void *out)
{
    bf_bwd *s = state;
    if (s->via) {
        cpu_bwd_via_f32_kernel.run(env, l, s->via, in, w, out);
        return;
    }
    if (l->kind == LAYER_CONV2D) {
        bf_conv_bwd_run(env, l, s, in[0], in[l->n_inputs + 1], out);
        return;
    }
    int64_t f = l->in.d[l->in.rank - 1], rows = shape_numel(&l->in) / f, o = l->p.out_features, rp = (rows + 1) / 2;
    const uint16_t *x = in[0], *dy = in[l->n_inputs + 1];
    uint16_t *dx = out, *dw = dx + rows * f;
    double t0 = s->parts ? bench_now() : 0;
    if (!l->no_input_grad)
        bf_gemm(rows, f, o / 2, (const uint32_t *)dy, o / 2, s->wp, dx, f, s->cf, false);
    double t1 = s->parts ? bench_now() : 0;
    if (!l->frozen) {
        bf_pack_pairs_t(dy, rows, o, s->at);
        bf_pack_all(x, rows, f, s->xp);
        bf_gemm(o, f, rp, s->at, rp, s->xp, dw, f, s->cf, false);
        if (s->db) { /* each thread its columns, row by row */
            float *db = s->db;
            CPU_OMP_IF(rows * o > CPU_PARALLEL_MIN, "omp parallel", {
                int64_t lo, hi;
                cpu_thread_span(o, &lo, &hi);
                for (int64_t j = lo; j < hi; j++)
                    db[j] = 0.0f;
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t j = lo; j < hi; j++)
                        db[j] += dtype_bf16_to_f32(dy[r * o + j]);
                if (hi > lo)
                    cpu_convert_span(dw + o * f + lo, DTYPE_BF16, db + lo, DTYPE_FP32, hi - lo);
            });
        }
    }
    if (s->parts)
        s->part_s[0] = t1 - t0, s->part_s[1] = bench_now() - t1;
}

static int bf_bwd_parts(void *env, void *state, const layer *l, layer_part_info *parts)
{
    bf_bwd *s = state;
    return s->via ? cpu_bwd_via_f32_kernel.parts(env, s->via, l, parts) : layer_backward_parts(l, false, parts);
}

static bool bf_bwd_parts_enable(void *env, void *state, bool on)
{
    bf_bwd *s = state;
    if (s->via)
        return cpu_bwd_via_f32_kernel.parts_enable(env, s->via, on);
    s->parts = on && s->split;
    return s->split;
}

static void bf_bwd_parts_read(void *env, void *state, double *seconds)
{
    bf_bwd *s = state;
    if (s->via)
        cpu_bwd_via_f32_kernel.parts_read(env, s->via, seconds);
    else
        memcpy(seconds, s->part_s, sizeof s->part_s);
}

static double bf_bwd_tolerance(void *env, const layer *l)
{
    return cpu_bwd_via_f32_kernel.tolerance(env, l);
}

const backend_kernel cpu_linear_bwd_bf16_kernel = {.setup = bf_bwd_setup, .run = bf_bwd_run, .free = bf_bwd_free,
                                                   .parts = bf_bwd_parts, .parts_enable = bf_bwd_parts_enable,
                                                   .parts_read = bf_bwd_parts_read, .tolerance = bf_bwd_tolerance};
const backend_kernel cpu_conv2d_bwd_bf16_kernel = {.setup = bf_bwd_setup, .run = bf_bwd_run, .free = bf_bwd_free,
                                                   .parts = bf_bwd_parts, .parts_enable = bf_bwd_parts_enable,
                                                   .parts_read = bf_bwd_parts_read, .tolerance = bf_bwd_tolerance};
