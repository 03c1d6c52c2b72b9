/* Winograd F(m x m, 3x3), m = 2 or 4, for 3x3 stride-1 convolutions (Lavin and Gray,
 * "Fast Algorithms for Convolutional Neural Networks", 2016): each m x m block of
 * outputs of every output channel comes from an a x a tile of the input (a = m + 2)
 * with a^2 multiplies per input channel instead of 9 m^2 (F(2x2): 16 for 36, F(4x4):
 * 36 for 144). The input tiles are transformed (V = B^T d B), the weights once at setup
 * (U = G g G^T), the a^2 element-wise products summed over the input channels become
 * a^2 GEMMs (M[xi] = U[xi] V[xi], K x C times C x tiles, through cblas_sgemm), and the
 * outputs are transformed back (Y = A^T m A).
 *
 * The batch's tile rows are cut into chunks small enough that a chunk's transformed
 * input and products (a^2 (C + K) floats per tile) stay in a core's L2: each thread
 * takes a chunk at a time, transforms its input, runs the a^2 GEMMs on it (OpenBLAS on
 * one thread inside the parallel region) and transforms the products back, so nothing
 * but the input, the weights and the output goes through memory. Where the batch has
 * too few tiles for that (512 channels on 7x7 maps: 16 tiles at batch 1), chunk_bytes 0
 * keeps every tile in one chunk and splits the GEMMs between the threads instead. The
 * transforms are vectorised across tiles, all of a chunk's at once for each channel:
 * each tile row's a input rows are padded into a buffer and combined row-wise (B^T),
 * the tile rows side by side, then column-wise with stride-m loads (B); the output's
 * a^2 rows combine in one loop over the chunk's tiles (A^T, then A); both are compiled
 * per ISA (CPU_ISA_CLONES).
 *
 * The rounding error is larger than the direct convolution's (the transforms add and
 * subtract tiles' values, F(4x4)'s with factors up to 8 and weights divided by 24):
 * cpu_tolerance() gives these layers CPU_WINOGRAD_TOLERANCE (see cpu_kernels.h for what
 * ResNet-18's layers measured). */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

struct cpu_winograd {
    int m;                   /* outputs per tile side: 2 or 4 */
    int64_t th, tw;          /* tile rows and columns per sample */
    int64_t chunk_rows;      /* tile rows per chunk */
    int64_t chunk;           /* tiles per chunk: chunk_rows * tw */
    bool whole;              /* one chunk of every tile, its GEMMs split between the threads */
    float *u;                /* [a^2][K][C] transformed weights */
    int64_t u_floats;
    float *work;             /* per thread: V [a^2][C][chunk], M [a^2][K][chunk], then its rows
                                (whole: one V and M, then the threads' rows) */
    int64_t work_floats;     /* per thread (whole: of V and M; the rows come after) */
    int threads;
};

bool cpu_winograd_applies(const layer *l)
{
    const layer_params *p = &l->p;
    return l->kind == LAYER_CONV2D && p->kernel[0] == 3 && p->kernel[1] == 3 && p->stride[0] == 1 &&
           p->stride[1] == 1 && p->dilation[0] == 1 && p->dilation[1] == 1 && p->groups == 1;
}

/* One thread's row buffers for nr tile rows: a padded input rows of m tw + 2 floats,
 * a transformed rows of nr m tw + 2 floats (the tile rows side by side) and 2 nr
 * floats per transformed row for each tile row's last 2 columns; the output's m rows
 * of nr m tw floats fit in the transformed rows. */
static int64_t row_floats(int m, int64_t tw, int64_t nr)
{
    int64_t a = m + 2;
    return a * (m * tw + 2) + a * (nr * m * tw + 2) + a * 2 * nr;
}

/* Tiles, chunks (whose transformed input and products take at most about chunk_bytes,
 * or one tile row if that is more; 0: one chunk of the whole batch) and the floats of
 * one thread's work area (whole: of V and M). */
static void plan(const layer *l, int m, int64_t chunk_bytes, int threads, int64_t *th, int64_t *tw,
                 int64_t *chunk_rows, int64_t *work_floats)
{
    int64_t c = l->in.d[1], k = l->p.out_channels, a2 = (m + 2) * (m + 2);
    *th = (l->out.d[2] + m - 1) / m, *tw = (l->out.d[3] + m - 1) / m;
    int64_t rows = chunk_bytes / (4 * a2 * (c + k) * *tw), all = l->in.d[0] * *th;
    /* at least one row, at most the batch's, and enough chunks for every thread */
    rows = rows < 1 ? 1 : rows;
    rows = rows > (all + threads - 1) / threads ? (all + threads - 1) / threads : rows;
    *chunk_rows = chunk_bytes == 0 ? all : rows;
    *work_floats = a2 * (c + k) * *chunk_rows * *tw + (chunk_bytes == 0 ? 0 : row_floats(m, *tw, *chunk_rows));
}

/* The floats of the whole work area: per thread V, M and rows, or (whole) one V and M
 * and each thread's rows. */
static int64_t work_total(bool whole, int threads, int m, int64_t tw, int64_t chunk_rows, int64_t work_floats)
{
    return whole ? work_floats + (int64_t)threads * row_floats(m, tw, chunk_rows) : (int64_t)threads * work_floats;
}

int64_t cpu_winograd_tiles(const layer *l, int m, int64_t chunk_bytes)
{
    int64_t th, tw, rows, work;
    plan(l, m, chunk_bytes, omp_get_max_threads(), &th, &tw, &rows, &work);
    return rows * tw;
}

int64_t cpu_winograd_bytes(const layer *l, int m, int64_t chunk_bytes)
{
    int threads = omp_get_max_threads();
    int64_t th, tw, rows, work;
    plan(l, m, chunk_bytes, threads, &th, &tw, &rows, &work);
    return 4 * ((m + 2) * (m + 2) * l->p.out_channels * l->in.d[1] +
                work_total(chunk_bytes == 0, threads, m, tw, rows, work));
}

cpu_span cpu_winograd_weights(const cpu_winograd *wg)
{
    return (cpu_span){wg->u, wg->u_floats * (int64_t)sizeof *wg->u};
}

void cpu_winograd_free(cpu_winograd *wg)
{
    if (wg)
        free(wg->u), free(wg->work);
    free(wg);
}

/* G's rows applied to one column (a, b, c) of a 3x3 kernel, into g[0 .. m + 1]. */
static void weight_column(int m, double a, double b, double c, double *g)
{
    if (m == 2) {
        g[0] = a, g[1] = 0.5 * (a + b + c), g[2] = 0.5 * (a - b + c), g[3] = c;
        return;
    }
    g[0] = a / 4.0, g[1] = -(a + b + c) / 6.0, g[2] = -(a - b + c) / 6.0;
    g[3] = a / 24.0 + b / 12.0 + c / 6.0, g[4] = a / 24.0 - b / 12.0 + c / 6.0, g[5] = c;
}

/* U = G g G^T of one 3x3 kernel (in double), into u[xi * stride]. */
static void weight_tile(int m, const float *g, float *u, int64_t stride)
{
    int a = m + 2;
    double gg[6][3], row[6];
    for (int j = 0; j < 3; j++) {
        double col[6];
        weight_column(m, g[j], g[3 + j], g[6 + j], col);
        for (int i = 0; i < a; i++)
            gg[i][j] = col[i];
    }
    for (int i = 0; i < a; i++) {
        weight_column(m, gg[i][0], gg[i][1], gg[i][2], row);
        for (int j = 0; j < a; j++)
            u[(i * a + j) * stride] = (float)row[j];
    }
}

cpu_winograd *cpu_winograd_create(const layer *l, const float *w, int m, int64_t chunk_bytes)
{
    int64_t k = l->p.out_channels, c = l->in.d[1], a2 = (m + 2) * (m + 2);
    cpu_winograd *wg = calloc(1, sizeof *wg);
    if (!wg)
        return NULL;
    wg->m = m;
    wg->threads = omp_get_max_threads();
    plan(l, m, chunk_bytes, wg->threads, &wg->th, &wg->tw, &wg->chunk_rows, &wg->work_floats);
    wg->chunk = wg->chunk_rows * wg->tw;
    wg->whole = chunk_bytes == 0;
    wg->u_floats = a2 * k * c;
    wg->u = bench_alloc_floats(wg->u_floats);
    wg->work = bench_alloc_floats(work_total(wg->whole, wg->threads, m, wg->tw, wg->chunk_rows, wg->work_floats));
    if (!wg->u || !wg->work) {
        cpu_winograd_free(wg);
        return NULL;
    }
    for (int64_t o = 0; o < k; o++)
        for (int64_t i = 0; i < c; i++)
            weight_tile(m, w + (o * c + i) * 9, wg->u + o * c + i, k * c);
    return wg;
}

/* The loops below take each row as a restrict parameter: GCC vectorises them only then
 * (restrict locals copied from an array of row pointers left them scalar). */

/* F(2x2): B^T d over four padded rows (n floats each) into four rows. */
static inline void rows_bt2(const float *restrict d0, const float *restrict d1, const float *restrict d2,
                            const float *restrict d3, float *restrict t0, float *restrict t1, float *restrict t2,
                            float *restrict t3, int64_t n)
{
    for (int64_t x = 0; x < n; x++)
        t0[x] = d0[x] - d2[x], t1[x] = d1[x] + d2[x], t2[x] = d2[x] - d1[x], t3[x] = d1[x] - d3[x];
}

/* F(2x2): (B^T d) B along one row s, tile x reading s[2x .. 2x + 3]. */
static inline void row_b2(const float *restrict s, float *restrict o0, float *restrict o1, float *restrict o2,
                          float *restrict o3, int64_t tw)
{
    for (int64_t x = 0; x < tw; x++) {
        float a = s[2 * x], b = s[2 * x + 1], c = s[2 * x + 2], e = s[2 * x + 3];
        o0[x] = a - c, o1[x] = b + c, o2[x] = c - b, o3[x] = b - e;
    }
}

/* F(4x4): B^T d over six padded rows into six rows. */
static inline void rows_bt4(const float *restrict d0, const float *restrict d1, const float *restrict d2,
                            const float *restrict d3, const float *restrict d4, const float *restrict d5,
                            float *restrict t0, float *restrict t1, float *restrict t2, float *restrict t3,
                            float *restrict t4, float *restrict t5, int64_t n)
{
    for (int64_t x = 0; x < n; x++) {
        float p = d4[x] - 4.0f * d2[x], q = d3[x] - 4.0f * d1[x], r = d4[x] - d2[x], s = 2.0f * (d3[x] - d1[x]);
        t0[x] = 4.0f * d0[x] - 5.0f * d2[x] + d4[x];
        t1[x] = p + q, t2[x] = p - q, t3[x] = r + s, t4[x] = r - s;
        t5[x] = 4.0f * d1[x] - 5.0f * d3[x] + d5[x];
    }
}

/* F(4x4): (B^T d) B along one row s, tile x reading s[4x .. 4x + 5]. */
static inline void row_b4(const float *restrict s, float *restrict o0, float *restrict o1, float *restrict o2,
                          float *restrict o3, float *restrict o4, float *restrict o5, int64_t tw)
{
    for (int64_t x = 0; x < tw; x++) {
        const float *e = s + 4 * x;
        float p = e[4] - 4.0f * e[2], q = e[3] - 4.0f * e[1], r = e[4] - e[2], t = 2.0f * (e[3] - e[1]);
        o0[x] = 4.0f * e[0] - 5.0f * e[2] + e[4];
        o1[x] = p + q, o2[x] = p - q, o3[x] = r + t, o4[x] = r - t;
        o5[x] = 4.0f * e[1] - 5.0f * e[3] + e[5];
    }
}

/* (B^T d) B of n tiles along the transformed row s into the a rows o + j * stride. */
static inline void row_b(int m, const float *s, float *o, int64_t stride, int64_t n)
{
    if (m == 2)
        row_b2(s, o, o + stride, o + 2 * stride, o + 3 * stride, n);
    else
        row_b4(s, o, o + stride, o + 2 * stride, o + 3 * stride, o + 4 * stride, o + 5 * stride, n);
}

/* Channel ci's tile rows [r0, r1) of the batch (row r: sample r / th, tile row r % th)
 * into a^2 rows of (r1 - r0) tw tiles at v + xi * stride. Each tile row's a input rows
 * are padded and combined (B^T) into the transformed rows, the tile rows side by side,
 * so that the second step (B) runs over all the chunk's tiles at once: a loop as long
 * as one tile row (7 tiles at F(4x4) on 28x28) would leave the vector loop unused. That
 * step reads the next tile row's first 2 columns for each row's last tile, which is
 * then done again from the 2 columns kept aside. */
CPU_ISA_CLONES static void input_rows(int m, const float *in, int64_t c, int64_t ci, int64_t h, int64_t w,
                                      int64_t th, int64_t ph, int64_t pw, int64_t r0, int64_t r1, int64_t tw,
                                      float *v, int64_t stride, float *rows)
{
    int a = m + 2;
    int64_t wp = m * tw + 2, pitch = m * tw, nr = r1 - r0, tlen = nr * pitch + 2;
    float *d[6], *t[6], *ext = rows + a * wp + a * tlen; /* ext: [a][nr][2] */
    for (int r = 0; r < a; r++)
        d[r] = rows + r * wp, t[r] = rows + a * wp + r * tlen;
    int64_t x0 = pw, x1 = pw + w < wp ? pw + w : wp; /* padded columns [x0, x1) hold the input */
    for (int r = 0; r < a; r++) /* the padding columns, zero for every tile row */
        memset(d[r], 0, (size_t)x0 * sizeof(float)), memset(d[r] + x1, 0, (size_t)(wp - x1) * sizeof(float));
    for (int64_t rr = 0; rr < nr; rr++) {
        int64_t row = r0 + rr, ty = row % th;
        const float *plane = in + ((row / th) * c + ci) * h * w;
        for (int r = 0; r < a; r++) {
            int64_t iy = m * ty - ph + r;
            if (iy < 0 || iy >= h)
                memset(d[r] + x0, 0, (size_t)(x1 - x0) * sizeof(float));
            else
                memcpy(d[r] + x0, plane + iy * w, (size_t)(x1 - x0) * sizeof(float));
        }
        int64_t at = rr * pitch; /* this row's last 2 columns land on the next row's first 2 */
        if (m == 2)
            rows_bt2(d[0], d[1], d[2], d[3], t[0] + at, t[1] + at, t[2] + at, t[3] + at, wp);
        else
            rows_bt4(d[0], d[1], d[2], d[3], d[4], d[5], t[0] + at, t[1] + at, t[2] + at, t[3] + at, t[4] + at,
                     t[5] + at, wp);
        for (int i = 0; i < a; i++)
            ext[(i * nr + rr) * 2] = t[i][at + pitch], ext[(i * nr + rr) * 2 + 1] = t[i][at + pitch + 1];
    }
    for (int i = 0; i < a; i++) {
        float *o = v + (int64_t)(i * a) * stride;
        row_b(m, t[i], o, stride, nr * tw);
        for (int64_t rr = 0; rr < nr - 1; rr++) { /* each row's last tile again, from its own columns */
            int64_t x = rr * tw + tw - 1;
            float e[6];
            memcpy(e, t[i] + m * x, (size_t)m * sizeof(float));
            e[m] = ext[(i * nr + rr) * 2], e[m + 1] = ext[(i * nr + rr) * 2 + 1];
            row_b(m, e, o + x, stride, 1);
        }
    }
}

/* F(2x2): A^T m A for tw tiles side by side, the 16 rows q[xi * stride + x] into two
 * output rows of 2 tw floats, plus bias. */
static inline void tiles_out2(const float *restrict q, int64_t stride, int64_t tw, float bias, float *restrict y0,
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

/* F(4x4): the same from 36 rows into four output rows of 4 tw floats. A^T's rows:
 * (1 1 1 1 1 0), (0 1 -1 2 -2 0), (0 1 1 4 4 0), (0 1 -1 8 -8 1). */
static inline void tiles_out4(const float *restrict q, int64_t stride, int64_t tw, float bias, float *restrict y0,
                              float *restrict y1, float *restrict y2, float *restrict y3)
{
    for (int64_t x = 0; x < tw; x++) {
        float s[4][6];
        for (int j = 0; j < 6; j++) {
            float a0 = q[j * stride + x], a1 = q[(6 + j) * stride + x], a2 = q[(12 + j) * stride + x],
                  a3 = q[(18 + j) * stride + x], a4 = q[(24 + j) * stride + x], a5 = q[(30 + j) * stride + x];
            float p = a1 + a2, r = a1 - a2, u = a3 + a4, v = a3 - a4;
            s[0][j] = a0 + p + u, s[1][j] = r + 2.0f * v, s[2][j] = p + 4.0f * u, s[3][j] = r + 8.0f * v + a5;
        }
        float *out[4] = {y0 + 4 * x, y1 + 4 * x, y2 + 4 * x, y3 + 4 * x};
        for (int i = 0; i < 4; i++) {
            float p = s[i][1] + s[i][2], r = s[i][1] - s[i][2], u = s[i][3] + s[i][4], v = s[i][3] - s[i][4];
            out[i][0] = s[i][0] + p + u + bias, out[i][1] = r + 2.0f * v + bias;
            out[i][2] = p + 4.0f * u + bias, out[i][3] = r + 8.0f * v + s[i][5] + bias;
        }
    }
}

/* Tile rows [r0, r1) of one output channel (row r: sample r / th, tile row r % th; the
 * channel's plane of sample n at out + n * sample_step) from the a^2 rows q + xi *
 * stride, plus bias, all the chunk's tiles in one loop into m rows of (r1 - r0) m tw
 * floats, in which each tile row's m output rows lie whole. */
CPU_ISA_CLONES static void output_rows(int m, const float *q, int64_t stride, int64_t r0, int64_t r1, int64_t th,
                                       int64_t tw, int64_t oh, int64_t ow, float bias, float *out,
                                       int64_t sample_step, float *rows)
{
    int64_t nr = r1 - r0, tiles = nr * tw, pitch = m * tw;
    float *y[4]; /* F(2x2) uses two (four rows of 2 * tiles floats still fit in rows) */
    for (int i = 0; i < 4; i++)
        y[i] = rows + i * m * tiles;
    if (m == 2)
        tiles_out2(q, stride, tiles, bias, y[0], y[1]);
    else
        tiles_out4(q, stride, tiles, bias, y[0], y[1], y[2], y[3]);
    for (int64_t rr = 0; rr < nr; rr++) {
        int64_t row = r0 + rr, ty = row % th;
        float *plane = out + (row / th) * sample_step;
        for (int i = 0; i < m && m * ty + i < oh; i++)
            memcpy(plane + (m * ty + i) * ow, y[i] + rr * pitch, (size_t)ow * sizeof(float));
    }
}

void cpu_winograd_run(const layer *l, cpu_winograd *wg, const float *in, const float *bias, float *out)
{
    int64_t c = l->in.d[1], h = l->in.d[2], w = l->in.d[3];
    int64_t k = l->out.d[1], oh = l->out.d[2], ow = l->out.d[3];
    int64_t th = wg->th, tw = wg->tw, chunk = wg->chunk, rows_per = wg->chunk_rows;
    int64_t all = l->in.d[0] * th, chunks = (all + rows_per - 1) / rows_per;
    int64_t ph = l->p.padding[0], pw = l->p.padding[1];
    int m = wg->m, a2 = (m + 2) * (m + 2);
    if (wg->whole) {
        float *v = wg->work, *mm = v + a2 * c * chunk, *rowbufs = mm + a2 * k * chunk;
        int64_t tiles = all * tw;
#pragma omp parallel num_threads(wg->threads)
        {
            float *rows = rowbufs + (int64_t)omp_get_thread_num() * row_floats(m, tw, all);
#pragma omp for schedule(static)
            for (int64_t ci = 0; ci < c; ci++)
                input_rows(m, in, c, ci, h, w, th, ph, pw, 0, all, tw, v + ci * chunk, c * chunk, rows);
#pragma omp for schedule(dynamic)
            for (int xi = 0; xi < a2; xi++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)k, (blasint)tiles, (blasint)c, 1.0f,
                            wg->u + xi * k * c, (blasint)c, v + xi * c * chunk, (blasint)chunk, 0.0f,
                            mm + xi * k * chunk, (blasint)chunk);
#pragma omp for schedule(static)
            for (int64_t o = 0; o < k; o++)
                output_rows(m, mm + o * chunk, k * chunk, 0, all, th, tw, oh, ow, bias ? bias[o] : 0.0f,
                            out + o * oh * ow, k * oh * ow, rows);
        }
        return;
    }
#pragma omp parallel num_threads(wg->threads)
    {
        float *v = wg->work + (int64_t)omp_get_thread_num() * wg->work_floats, *mm = v + a2 * c * chunk;
        float *rows = mm + a2 * k * chunk;
#pragma omp for schedule(dynamic)
        for (int64_t ch = 0; ch < chunks; ch++) {
            int64_t r0 = ch * rows_per, r1 = r0 + rows_per < all ? r0 + rows_per : all, tiles = (r1 - r0) * tw;
            for (int64_t ci = 0; ci < c; ci++)
                input_rows(m, in, c, ci, h, w, th, ph, pw, r0, r1, tw, v + ci * chunk, c * chunk, rows);
            for (int xi = 0; xi < a2; xi++) /* one thread each: inside a parallel region */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)k, (blasint)tiles, (blasint)c, 1.0f,
                            wg->u + xi * k * c, (blasint)c, v + xi * c * chunk, (blasint)chunk, 0.0f,
                            mm + xi * k * chunk, (blasint)chunk);
            for (int64_t o = 0; o < k; o++)
                output_rows(m, mm + o * chunk, k * chunk, r0, r1, th, tw, oh, ow, bias ? bias[o] : 0.0f,
                            out + o * oh * ow, k * oh * ow, rows);
        }
    }
}
