/* Winograd F(2x2, 3x3) for 3x3 stride-1 convolutions (Lavin and Gray, "Fast Algorithms
 * for Convolutional Neural Networks", 2016): each 2x2 block of outputs of every output
 * channel comes from a 4x4 tile of the input with 16 multiplies per input channel
 * instead of 36. The input tiles are transformed (V = B^T d B), the weights once at
 * setup (U = G g G^T), the 16 element-wise products summed over the input channels
 * become 16 GEMMs (M[xi] = U[xi] V[xi], K x C times C x tiles, through cblas_sgemm), and
 * the outputs are transformed back (Y = A^T m A).
 *
 * The batch's tile rows are cut into chunks small enough that a chunk's transformed
 * input and products (16 (C + K) floats per tile) stay in a core's L2: each thread
 * takes a chunk at a time, transforms its input, runs the 16 GEMMs on it (OpenBLAS on
 * one thread inside the parallel region) and transforms the products back, so nothing
 * but the input, the weights and the output goes through memory. Where the batch has
 * too few tiles for that (512 channels on 7x7 maps: 16 tiles at batch 1), chunk_bytes 0
 * keeps every tile in one chunk and splits the 16 GEMMs between the threads instead. The transforms are
 * vectorised across tiles: a tile row's four input rows are padded into a buffer,
 * combined row-wise first (B^T), then column-wise with stride-2 loads (B); the
 * output's 16 rows of a tile row combine the same way (A^T, then A); both are compiled
 * per ISA (CPU_ISA_CLONES). The rounding error is larger than the direct convolution's (the
 * transforms add and subtract tiles' values): cpu_tolerance() gives these layers
 * CPU_WINOGRAD_TOLERANCE, 5e-6 (ResNet-18's 3x3 stride-1 layers measured 2.6e-7 to 4.9e-7 against
 * the reference, the same layers through im2col 2.8e-7 to 3.0e-7). */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

struct cpu_winograd {
    int64_t th, tw;          /* tile rows and columns per sample */
    int64_t chunk_rows;      /* tile rows per chunk */
    int64_t chunk;           /* tiles per chunk: chunk_rows * tw */
    bool whole;              /* one chunk of every tile, its GEMMs split between the threads */
    float *u;                /* [16][K][C] transformed weights */
    float *work;             /* per thread: V [16][C][chunk], M [16][K][chunk], 8 rows of 2 tw + 2
                                (whole: one V and M, then the threads' rows) */
    int64_t work_floats;     /* per thread (whole: V and M; the rows come after) */
    int threads;
};

bool cpu_winograd_applies(const layer *l)
{
    const layer_params *p = &l->p;
    return l->kind == LAYER_CONV2D && p->kernel[0] == 3 && p->kernel[1] == 3 && p->stride[0] == 1 &&
           p->stride[1] == 1 && p->dilation[0] == 1 && p->dilation[1] == 1 && p->groups == 1;
}

/* Tiles, chunks (whose transformed input and products take at most about chunk_bytes,
 * or one tile row if that is more; 0: one chunk of the whole batch) and the floats of
 * one thread's work area (whole: of V and M). */
static void plan(const layer *l, int64_t chunk_bytes, int threads, int64_t *th, int64_t *tw, int64_t *chunk_rows,
                 int64_t *work_floats)
{
    int64_t c = l->in.d[1], k = l->p.out_channels;
    *th = (l->out.d[2] + 1) / 2, *tw = (l->out.d[3] + 1) / 2;
    int64_t rows = chunk_bytes / (4 * 16 * (c + k) * *tw), all = l->in.d[0] * *th;
    /* at least one row, at most the batch's, and enough chunks for every thread */
    rows = rows < 1 ? 1 : rows;
    rows = rows > (all + threads - 1) / threads ? (all + threads - 1) / threads : rows;
    *chunk_rows = chunk_bytes == 0 ? all : rows;
    *work_floats = 16 * (c + k) * *chunk_rows * *tw + (chunk_bytes == 0 ? 0 : 8 * (2 * *tw + 2));
}

int64_t cpu_winograd_tiles(const layer *l, int64_t chunk_bytes)
{
    int64_t th, tw, rows, work;
    plan(l, chunk_bytes, omp_get_max_threads(), &th, &tw, &rows, &work);
    return rows * tw;
}

int64_t cpu_winograd_bytes(const layer *l, int64_t chunk_bytes)
{
    int threads = omp_get_max_threads();
    int64_t th, tw, rows, work;
    plan(l, chunk_bytes, threads, &th, &tw, &rows, &work);
    int64_t rowbufs = (int64_t)threads * 8 * (2 * tw + 2);
    return 4 * (16 * l->p.out_channels * l->in.d[1] + (chunk_bytes == 0 ? work + rowbufs : threads * work));
}

void cpu_winograd_free(cpu_winograd *wg)
{
    if (wg)
        free(wg->u), free(wg->work);
    free(wg);
}

/* U = G g G^T of one 3x3 kernel, into u[xi * stride]. */
static void weight_tile(const float *g, float *u, int64_t stride)
{
    float gg[4][3];
    for (int j = 0; j < 3; j++) {
        float a = g[j], b = g[3 + j], c = g[6 + j];
        gg[0][j] = a, gg[1][j] = 0.5f * (a + b + c), gg[2][j] = 0.5f * (a - b + c), gg[3][j] = c;
    }
    for (int i = 0; i < 4; i++) {
        float a = gg[i][0], b = gg[i][1], c = gg[i][2];
        u[(i * 4 + 0) * stride] = a;
        u[(i * 4 + 1) * stride] = 0.5f * (a + b + c);
        u[(i * 4 + 2) * stride] = 0.5f * (a - b + c);
        u[(i * 4 + 3) * stride] = c;
    }
}

cpu_winograd *cpu_winograd_new(const layer *l, const float *w, int64_t chunk_bytes)
{
    int64_t k = l->p.out_channels, c = l->in.d[1];
    cpu_winograd *wg = calloc(1, sizeof *wg);
    if (!wg)
        return NULL;
    wg->threads = omp_get_max_threads();
    plan(l, chunk_bytes, wg->threads, &wg->th, &wg->tw, &wg->chunk_rows, &wg->work_floats);
    wg->chunk = wg->chunk_rows * wg->tw;
    wg->whole = chunk_bytes == 0;
    wg->u = bench_alloc_floats(16 * k * c);
    wg->work = bench_alloc_floats(wg->whole ? wg->work_floats + (int64_t)wg->threads * 8 * (2 * wg->tw + 2)
                                            : (int64_t)wg->threads * wg->work_floats);
    if (!wg->u || !wg->work) {
        cpu_winograd_free(wg);
        return NULL;
    }
    for (int64_t o = 0; o < k; o++)
        for (int64_t i = 0; i < c; i++)
            weight_tile(w + (o * c + i) * 9, wg->u + o * c + i, k * c);
    return wg;
}

/* B^T d over four padded rows (n floats each) into four rows. */
static inline void rows_bt(const float *restrict d0, const float *restrict d1, const float *restrict d2,
                           const float *restrict d3, float *restrict t0, float *restrict t1, float *restrict t2,
                           float *restrict t3, int64_t n)
{
    for (int64_t x = 0; x < n; x++)
        t0[x] = d0[x] - d2[x], t1[x] = d1[x] + d2[x], t2[x] = d2[x] - d1[x], t3[x] = d1[x] - d3[x];
}

/* (B^T d) B along one row s: tile x reads s[2x .. 2x + 3]. */
static inline void row_b(const float *restrict s, float *restrict o0, float *restrict o1, float *restrict o2,
                         float *restrict o3, int64_t tw)
{
    for (int64_t x = 0; x < tw; x++) {
        float a = s[2 * x], b = s[2 * x + 1], c = s[2 * x + 2], e = s[2 * x + 3];
        o0[x] = a - c, o1[x] = b + c, o2[x] = c - b, o3[x] = b - e;
    }
}

/* Tile row ty of one input plane (h x w) into 16 rows of tw tiles at v + xi * stride.
 * rows: 8 rows of wp = 2 tw + 2 floats. */
CPU_ISA_CLONES static void input_row(const float *in, int64_t h, int64_t w, int64_t ph, int64_t pw, int64_t ty,
                                     int64_t tw, float *v, int64_t stride, float *rows)
{
    int64_t wp = 2 * tw + 2;
    float *d[4] = {rows, rows + wp, rows + 2 * wp, rows + 3 * wp};
    float *t[4] = {rows + 4 * wp, rows + 5 * wp, rows + 6 * wp, rows + 7 * wp};
    int64_t x0 = pw, x1 = pw + w < wp ? pw + w : wp; /* padded columns [x0, x1) hold the input */
    for (int r = 0; r < 4; r++) {
        int64_t iy = 2 * ty - ph + r;
        memset(d[r], 0, (size_t)x0 * sizeof(float));
        if (iy < 0 || iy >= h)
            memset(d[r] + x0, 0, (size_t)(x1 - x0) * sizeof(float));
        else
            memcpy(d[r] + x0, in + iy * w, (size_t)(x1 - x0) * sizeof(float));
        memset(d[r] + x1, 0, (size_t)(wp - x1) * sizeof(float));
    }
    rows_bt(d[0], d[1], d[2], d[3], t[0], t[1], t[2], t[3], wp);
    for (int i = 0; i < 4; i++) {
        float *o = v + (i * 4) * stride;
        row_b(t[i], o, o + stride, o + 2 * stride, o + 3 * stride, tw);
    }
}

/* A^T m A for one tile row: the 16 rows q[xi * stride + x] into two output rows of 2 tw
 * floats, plus bias. */
static inline void tile_row_out(const float *restrict q, int64_t stride, int64_t tw, float bias, float *restrict y0,
                                float *restrict y1)
{
    for (int64_t x = 0; x < tw; x++) {
        float m[16];
        for (int k = 0; k < 16; k++)
            m[k] = q[k * stride + x];
        float s00 = m[0] + m[4] + m[8], s01 = m[1] + m[5] + m[9], s02 = m[2] + m[6] + m[10], s03 = m[3] + m[7] + m[11];
        float s10 = m[4] - m[8] - m[12], s11 = m[5] - m[9] - m[13], s12 = m[6] - m[10] - m[14],
              s13 = m[7] - m[11] - m[15];
        y0[2 * x] = s00 + s01 + s02 + bias, y0[2 * x + 1] = s01 - s02 - s03 + bias;
        y1[2 * x] = s10 + s11 + s12 + bias, y1[2 * x + 1] = s11 - s12 - s13 + bias;
    }
}

/* Tile row ty of one output plane (oh x ow) from the 16 rows m + xi * stride, plus
 * bias. rows: 2 rows of 2 tw floats (and more, unused). */
CPU_ISA_CLONES static void output_row(const float *m, int64_t stride, int64_t ty, int64_t tw, int64_t oh, int64_t ow,
                                      float bias, float *out, float *rows)
{
    float *y0 = rows, *y1 = rows + 2 * tw;
    tile_row_out(m, stride, tw, bias, y0, y1);
    memcpy(out + 2 * ty * ow, y0, (size_t)ow * sizeof(float));
    if (2 * ty + 1 < oh)
        memcpy(out + (2 * ty + 1) * ow, y1, (size_t)ow * sizeof(float));
}

void cpu_winograd_run(const layer *l, cpu_winograd *wg, const float *in, const float *bias, float *out)
{
    int64_t c = l->in.d[1], h = l->in.d[2], w = l->in.d[3];
    int64_t k = l->out.d[1], oh = l->out.d[2], ow = l->out.d[3];
    int64_t th = wg->th, tw = wg->tw, chunk = wg->chunk, rows_per = wg->chunk_rows;
    int64_t all = l->in.d[0] * th, chunks = (all + rows_per - 1) / rows_per;
    int64_t ph = l->p.padding[0], pw = l->p.padding[1];
    if (wg->whole) {
        float *v = wg->work, *m = v + 16 * c * chunk, *rowbufs = m + 16 * k * chunk;
        int64_t tiles = all * tw;
#pragma omp parallel num_threads(wg->threads)
        {
            float *rows = rowbufs + (int64_t)omp_get_thread_num() * 8 * (2 * tw + 2);
#pragma omp for schedule(static)
            for (int64_t t = 0; t < c * all; t++) {
                int64_t ci = t / all, r = t % all;
                input_row(in + ((r / th) * c + ci) * h * w, h, w, ph, pw, r % th, tw, v + ci * chunk + r * tw,
                          c * chunk, rows);
            }
#pragma omp for schedule(dynamic)
            for (int xi = 0; xi < 16; xi++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)k, (blasint)tiles, (blasint)c, 1.0f,
                            wg->u + xi * k * c, (blasint)c, v + xi * c * chunk, (blasint)chunk, 0.0f,
                            m + xi * k * chunk, (blasint)chunk);
#pragma omp for schedule(static)
            for (int64_t t = 0; t < k * all; t++) {
                int64_t o = t / all, r = t % all;
                output_row(m + o * chunk + r * tw, k * chunk, r % th, tw, oh, ow, bias ? bias[o] : 0.0f,
                           out + ((r / th) * k + o) * oh * ow, rows);
            }
        }
        return;
    }
#pragma omp parallel num_threads(wg->threads)
    {
        float *v = wg->work + (int64_t)omp_get_thread_num() * wg->work_floats, *m = v + 16 * c * chunk;
        float *rows = m + 16 * k * chunk;
#pragma omp for schedule(dynamic)
        for (int64_t ch = 0; ch < chunks; ch++) {
            int64_t r0 = ch * rows_per, r1 = r0 + rows_per < all ? r0 + rows_per : all, tiles = (r1 - r0) * tw;
            for (int64_t ci = 0; ci < c; ci++)
                for (int64_t r = r0; r < r1; r++)
                    input_row(in + ((r / th) * c + ci) * h * w, h, w, ph, pw, r % th, tw,
                              v + ci * chunk + (r - r0) * tw, c * chunk, rows);
            for (int xi = 0; xi < 16; xi++) /* one thread each: inside a parallel region */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)k, (blasint)tiles, (blasint)c, 1.0f,
                            wg->u + xi * k * c, (blasint)c, v + xi * c * chunk, (blasint)chunk, 0.0f,
                            m + xi * k * chunk, (blasint)chunk);
            for (int64_t o = 0; o < k; o++)
                for (int64_t r = r0; r < r1; r++)
                    output_row(m + o * chunk + (r - r0) * tw, k * chunk, r % th, tw, oh, ow, bias ? bias[o] : 0.0f,
                               out + ((r / th) * k + o) * oh * ow, rows);
        }
    }
}
