/* Winograd F(2x2, 3x3) for 3x3 stride-1 convolutions (Lavin and Gray, "Fast Algorithms
 * for Convolutional Neural Networks", 2016): each 2x2 block of outputs of every output
 * channel comes from a 4x4 tile of the input with 16 multiplies per input channel
 * instead of 36. The input tiles are transformed (V = B^T d B), the weights once at
 * setup (U = G g G^T), the 16 element-wise products summed over the input channels
 * become 16 GEMMs (M[xi] = U[xi] V[xi], K x C times C x tiles, through cblas_sgemm), and
 * the outputs are transformed back (Y = A^T m A).
 *
 * The transforms are vectorised across tiles: a tile row's four input rows are padded
 * into a buffer, combined row-wise first (B^T), then column-wise with stride-2 loads
 * (B); the output's 16 rows of a tile row combine the same way (A^T, then A). Each
 * plane's transform runs on one thread, in a function compiled per ISA
 * (CPU_ISA_CLONES). The rounding error is larger than the direct convolution's (the
 * transforms add and subtract tiles' values): cpu_tolerance() gives these layers
 * CPU_WINOGRAD_TOLERANCE, 5e-6 (ResNet-18's 3x3 layers measured 2.5e-7 to 4.9e-7 against
 * the reference, the same layers through im2col 2e-7 to 3e-7). */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

struct cpu_winograd {
    int64_t th, tw, tiles;  /* tile rows and columns per sample; tiles of the batch */
    float *u;               /* [16][K][C] transformed weights */
    float *v;               /* [16][C][tiles] transformed input */
    float *m;               /* [16][K][tiles] products */
    float *rows;            /* per thread: 8 rows of 2 tw + 2 floats */
    int threads;
};

bool cpu_winograd_applies(const layer *l)
{
    const layer_params *p = &l->p;
    return l->kind == LAYER_CONV2D && p->kernel[0] == 3 && p->kernel[1] == 3 && p->stride[0] == 1 &&
           p->stride[1] == 1 && p->dilation[0] == 1 && p->dilation[1] == 1 && p->groups == 1;
}

static void tiles_of(const layer *l, int64_t *th, int64_t *tw)
{
    *th = (l->out.d[2] + 1) / 2, *tw = (l->out.d[3] + 1) / 2;
}

int64_t cpu_winograd_bytes(const layer *l)
{
    int64_t th, tw, k = l->p.out_channels, c = l->in.d[1];
    tiles_of(l, &th, &tw);
    int64_t tiles = l->in.d[0] * th * tw;
    return 4 * 16 * (k * c + (c + k) * tiles);
}

void cpu_winograd_free(cpu_winograd *wg)
{
    if (wg)
        free(wg->u), free(wg->v), free(wg->m), free(wg->rows);
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

cpu_winograd *cpu_winograd_new(const layer *l, const float *w)
{
    int64_t k = l->p.out_channels, c = l->in.d[1];
    cpu_winograd *wg = calloc(1, sizeof *wg);
    if (!wg)
        return NULL;
    tiles_of(l, &wg->th, &wg->tw);
    wg->tiles = l->in.d[0] * wg->th * wg->tw;
    wg->threads = omp_get_max_threads();
    wg->u = bench_alloc_floats(16 * k * c);
    wg->v = bench_alloc_floats(16 * c * wg->tiles);
    wg->m = bench_alloc_floats(16 * k * wg->tiles);
    wg->rows = bench_alloc_floats((int64_t)wg->threads * 8 * (2 * wg->tw + 2));
    if (!wg->u || !wg->v || !wg->m || !wg->rows) {
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

/* One input plane (h x w) into v: tile (ty, tx) is column ty * tw + tx of the 16 rows
 * v + xi * stride. rows: 8 rows of wp = 2 tw + 2 floats. */
CPU_ISA_CLONES static void input_plane(const float *in, int64_t h, int64_t w, int64_t ph, int64_t pw, int64_t th,
                                       int64_t tw, float *v, int64_t stride, float *rows)
{
    int64_t wp = 2 * tw + 2;
    float *d[4] = {rows, rows + wp, rows + 2 * wp, rows + 3 * wp};
    float *t[4] = {rows + 4 * wp, rows + 5 * wp, rows + 6 * wp, rows + 7 * wp};
    int64_t x0 = pw, x1 = pw + w < wp ? pw + w : wp; /* padded columns [x0, x1) hold the input */
    memset(rows, 0, (size_t)(4 * wp) * sizeof(float)); /* the padding columns stay zero */
    for (int64_t ty = 0; ty < th; ty++) {
        for (int r = 0; r < 4; r++) {
            int64_t iy = 2 * ty - ph + r;
            if (iy < 0 || iy >= h)
                memset(d[r] + x0, 0, (size_t)(x1 - x0) * sizeof(float));
            else
                memcpy(d[r] + x0, in + iy * w, (size_t)(x1 - x0) * sizeof(float));
        }
        rows_bt(d[0], d[1], d[2], d[3], t[0], t[1], t[2], t[3], wp);
        for (int i = 0; i < 4; i++) {
            float *o = v + (i * 4) * stride + ty * tw;
            row_b(t[i], o, o + stride, o + 2 * stride, o + 3 * stride, tw);
        }
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

/* One output plane (oh x ow) from the 16 rows m + xi * stride (tile (ty, tx) in column
 * ty * tw + tx), plus bias. rows: 2 rows of 2 tw floats (and more, unused). */
CPU_ISA_CLONES static void output_plane(const float *m, int64_t stride, int64_t th, int64_t tw, int64_t oh,
                                        int64_t ow, float bias, float *out, float *rows)
{
    float *y0 = rows, *y1 = rows + 2 * tw;
    for (int64_t ty = 0; ty < th; ty++) {
        tile_row_out(m + ty * tw, stride, tw, bias, y0, y1);
        memcpy(out + 2 * ty * ow, y0, (size_t)ow * sizeof(float));
        if (2 * ty + 1 < oh)
            memcpy(out + (2 * ty + 1) * ow, y1, (size_t)ow * sizeof(float));
    }
}

void cpu_winograd_run(const layer *l, cpu_winograd *wg, const float *in, const float *bias, float *out)
{
    int64_t n = l->in.d[0], c = l->in.d[1], h = l->in.d[2], w = l->in.d[3];
    int64_t k = l->out.d[1], oh = l->out.d[2], ow = l->out.d[3];
    int64_t th = wg->th, tw = wg->tw, tiles = wg->tiles, per_sample = th * tw, wp = 2 * tw + 2;
    int64_t ph = l->p.padding[0], pw = l->p.padding[1];
    /* V: the planes of the batch, sample b's tiles in columns [b per_sample, ...) */
#pragma omp parallel for schedule(static) num_threads(wg->threads)
    for (int64_t pl = 0; pl < n * c; pl++) {
        int64_t b = pl / c, ci = pl % c;
        input_plane(in + pl * h * w, h, w, ph, pw, th, tw, wg->v + ci * tiles + b * per_sample, c * tiles,
                    wg->rows + (int64_t)omp_get_thread_num() * 8 * wp);
    }
    for (int xi = 0; xi < 16; xi++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)k, (blasint)tiles, (blasint)c, 1.0f,
                    wg->u + xi * k * c, (blasint)c, wg->v + xi * c * tiles, (blasint)tiles, 0.0f,
                    wg->m + xi * k * tiles, (blasint)tiles);
#pragma omp parallel for schedule(static) num_threads(wg->threads)
    for (int64_t pl = 0; pl < n * k; pl++) {
        int64_t b = pl / k, o = pl % k;
        output_plane(wg->m + o * tiles + b * per_sample, k * tiles, th, tw, oh, ow, bias ? bias[o] : 0.0f,
                     out + pl * oh * ow, wg->rows + (int64_t)omp_get_thread_num() * 8 * wp);
    }
}
