/* The backward kernels of the CPU (fp32), the backward pass's table (backend.h,
 * backend_layers_i.backward): each reads the forward's inputs, its output and the
 * output's gradient, and writes the gradients of the inputs, then of the weights, what
 * layer_desc.backward computes (tests/test_layers.c checks every one against it).
 *  - conv2d: per sample and group, im2col then two sgemm calls, the weights' gradient
 *    dY col^T and the columns' W^T dY, folded back into the input's gradient (col2im);
 *  - linear: two sgemm calls, dY W and dY^T X, and the bias's column sums;
 *  - batch norm (training mode): per channel, its statistics recomputed from the input
 *    (torch keeps them from the forward: one more read of the input here), then the
 *    gradients;
 *  - the activations, add and mul, max and average pooling, rmsnorm, layernorm,
 *    softmax, embedding (the table's gradient written dense, as torch's sparse=False
 *    does: zeroed, then each token's row added) and rope (the rotation's transpose):
 *    loops over the thread pool;
 *  - attention (no cache, no sinks): the plain backward, the scores kept per head and
 *    five sgemm per head; multihead_attention: its projections again, then the same per
 *    head, then the projections' gradients, all on sgemm;
 *  - transpose and channel_shuffle, class_token, pos_embedding and select: row copies, and
 *    the tables' gradients summed over the batch; concat's slices, mean's spread and
 *    scale_shift's scale;
 *  - the views (flatten, reshape): their gradient is the output's, nothing runs. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "fast_math.h"

/* A backward run's inputs after the forward's: the forward's output, then its gradient */
#define DOUT(l, ins) ((const float *)(ins)[(l)->n_inputs + 1])
#define FOUT(l, ins) ((const float *)(ins)[(l)->n_inputs])

/* ---- conv2d ---------------------------------------------------------------------------------- */

/* Where a backward runs its two halves apart (conv2d, linear: layer_backward_parts), the
 * last run's seconds in each, when the in-model view asks for them. */
typedef struct bwd_halves {
    bool split, parts; /* it computes both halves; their timing is on */
    double part_s[2]; /* backward data, backward weights */
} bwd_halves;

typedef struct conv_bwd {
    bwd_halves h;
    float *col, *dcol; /* K x OH*OW each: one sample's group's columns and their gradient */
} conv_bwd;

static bench_status conv_bwd_setup(void *env, const layer *l, const void *w, void **state, char *impl, size_t len,
                                   int64_t *ws)
{
    (void)env, (void)w;
    int64_t k = l->in.d[1] / l->p.groups * l->p.kernel[0] * l->p.kernel[1], ohw = l->out.d[2] * l->out.d[3];
    conv_bwd *s = xcalloc(1, sizeof *s);
    s->col = bench_alloc_floats(k * ohw);
    s->dcol = bench_alloc_floats(k * ohw);
    if (!s->col || !s->dcol) {
        free(s->col), free(s->dcol), free(s);
        return BENCH_ERR_NOMEM;
    }
    *ws = 2 * k * ohw * (int64_t)sizeof(float);
    layer_part_info parts[LAYER_MAX_PARTS];
    s->h.split = layer_backward_parts(l, false, parts) == 2;
    snprintf(impl, len, "im2col + sgemm per sample and group (data: W^T dY then col2im; weights: dY col^T)%s",
             l->frozen ? "; frozen: no weights' gradient" : "");
    *state = s;
    return BENCH_OK;
}

static void conv_bwd_free(void *env, void *state)
{
    (void)env;
    conv_bwd *s = state;
    if (s)
        free(s->col), free(s->dcol), free(s);
}

static bool halves_enable(void *env, void *state, bool on)
{
    (void)env;
    bwd_halves *h = state;
    h->parts = on && h->split;
    return h->split;
}

static void halves_read(void *env, void *state, double *seconds)
{
    (void)env;
    memcpy(seconds, ((bwd_halves *)state)->part_s, sizeof ((bwd_halves *)state)->part_s);
}

static void halves_free(void *env, void *state)
{
    (void)env;
    free(state);
}

static int halves_parts(void *env, void *state, const layer *l, layer_part_info *parts)
{
    (void)env, (void)state;
    return layer_backward_parts(l, false, parts);
}

/* The input's gradient: per sample and group, W^T dY into columns, added back (col2im) */
static void conv_bwd_data(const layer *l, conv_bwd *s, const float *w, const float *dy, float *dx)
{
    int64_t n = l->in.d[0], c = l->in.d[1], hw = l->in.d[2] * l->in.d[3], oc = l->out.d[1];
    int64_t ohw = l->out.d[2] * l->out.d[3], g = l->p.groups, cg = c / g, ocg = oc / g;
    int64_t k = cg * l->p.kernel[0] * l->p.kernel[1];
    memset(dx, 0, (size_t)(n * c * hw) * sizeof *dx);
    for (int64_t b = 0; b < n; b++)
        for (int64_t gi = 0; gi < g; gi++) {
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)k, (blasint)ohw, (blasint)ocg, 1.0f,
                        w + gi * ocg * k, (blasint)k, dy + (b * oc + gi * ocg) * ohw, (blasint)ohw, 0.0f, s->dcol,
                        (blasint)ohw);
            cpu_col_move(l, dx + (b * c + gi * cg) * hw, s->dcol, cg, true);
        }
}

/* The weights' gradient: per sample and group, dY col^T summed over the batch; the bias's */
static void conv_bwd_weights(const layer *l, conv_bwd *s, const float *x, const float *dy, float *dw)
{
    int64_t n = l->in.d[0], c = l->in.d[1], hw = l->in.d[2] * l->in.d[3], oc = l->out.d[1];
    int64_t ohw = l->out.d[2] * l->out.d[3], g = l->p.groups, cg = c / g, ocg = oc / g;
    int64_t k = cg * l->p.kernel[0] * l->p.kernel[1];
    for (int64_t b = 0; b < n; b++)
        for (int64_t gi = 0; gi < g; gi++) {
            cpu_col_move(l, (float *)x + (b * c + gi * cg) * hw, s->col, cg, false);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)ocg, (blasint)k, (blasint)ohw, 1.0f,
                        dy + (b * oc + gi * ocg) * ohw, (blasint)ohw, s->col, (blasint)ohw, b ? 1.0f : 0.0f,
                        dw + gi * ocg * k, (blasint)k);
        }
    if (!l->p.bias)
        return;
    float *db = dw + oc * k;
    CPU_OMP_IF(n * oc * ohw > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t o = 0; o < oc; o++) {
            double sum = 0;
            for (int64_t b = 0; b < n; b++)
                for (int64_t i = 0; i < ohw; i++)
                    sum += dy[(b * oc + o) * ohw + i];
            db[o] = (float)sum;
        });
}

static void conv_bwd_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out)
{
    (void)env;
    conv_bwd *s = state;
    const float *dy = DOUT(l, ins);
    float *dx = out, *dw = dx + shape_numel(&l->in);
    double t0 = s->h.parts ? bench_now() : 0;
    if (!l->no_input_grad)
        conv_bwd_data(l, s, w, dy, dx);
    double t1 = s->h.parts ? bench_now() : 0;
    if (!l->frozen)
        conv_bwd_weights(l, s, ins[0], dy, dw);
    if (s->h.parts)
        s->h.part_s[0] = t1 - t0, s->h.part_s[1] = bench_now() - t1;
}

/* Column sums of a [rows, cols] into out[cols]: a bias's gradient */
static void col_sums(const float *a, int64_t rows, int64_t cols, float *out)
{
    CPU_OMP_IF(rows * cols > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t j = 0; j < cols; j++) {
            float sum = 0;
            for (int64_t r = 0; r < rows; r++)
                sum += a[r * cols + j];
            out[j] = sum;
        });
}

/* ---- linear ---------------------------------------------------------------------------------- */

static bench_status linear_bwd_setup(void *env, const layer *l, const void *w, void **state, char *impl, size_t len,
                                     int64_t *ws)
{
    (void)env, (void)w, (void)ws;
    bwd_halves *h = xcalloc(1, sizeof *h);
    layer_part_info parts[LAYER_MAX_PARTS];
    h->split = layer_backward_parts(l, false, parts) == 2;
    *state = h;
    snprintf(impl, len, "sgemm (data: dY W; weights: dY^T X)%s", l->frozen ? "; frozen: no weights' gradient" : "");
    return BENCH_OK;
}

static void linear_bwd_run(void *env, const layer *l, void *state, const void *const *ins, const void *w_, void *out)
{
    (void)env;
    bwd_halves *h = state;
    const float *x = ins[0], *dy = DOUT(l, ins), *w = w_;
    int64_t f = l->in.d[l->in.rank - 1], n = shape_numel(&l->in) / f, o = l->p.out_features;
    float *dx = out, *dw = dx + n * f;
    double t0 = h->parts ? bench_now() : 0;
    if (!l->no_input_grad)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)n, (blasint)f, (blasint)o, 1.0f, dy, (blasint)o,
                    w, (blasint)f, 0.0f, dx, (blasint)f);
    double t1 = h->parts ? bench_now() : 0;
    if (!l->frozen) {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)o, (blasint)f, (blasint)n, 1.0f, dy, (blasint)o,
                    x, (blasint)f, 0.0f, dw, (blasint)f);
        if (l->p.bias)
            col_sums(dy, n, o, dw + o * f);
    }
    if (h->parts)
        h->part_s[0] = t1 - t0, h->part_s[1] = bench_now() - t1;
}

/* ---- batchnorm2d (training mode) ------------------------------------------------------------- */

/* The sums over one channel's plane: x's; then (x - mean)'s square, g (x - mean) and g's */
CPU_ISA_CLONES
static float bn_sum(const float *x, int64_t n)
{
    float a = 0;
#pragma omp simd reduction(+ : a)
    for (int64_t i = 0; i < n; i++)
        a += x[i];
    return a;
}

CPU_ISA_CLONES
static void bn_sums(const float *x, const float *g, int64_t n, float mean, float *s)
{
    float b = 0, c = 0, d = 0;
#pragma omp simd reduction(+ : b, c, d)
    for (int64_t i = 0; i < n; i++) {
        float v = x[i] - mean;
        b += v * v, c += g[i] * v, d += g[i];
    }
    s[1] += b, s[2] += c, s[3] += d;
}

CPU_ISA_CLONES
static void bn_grad_span(const float *x, const float *g, float *dx, int64_t n, float a, float m, float db, float mean,
                         float rdg)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        dx[i] = a * (m * g[i] - db - (x[i] - mean) * rdg);
}

static void bn_bwd_run(void *env, const layer *l, void *state, const void *const *ins, const void *w_, void *out)
{
    (void)env, (void)state;
    const float *x = ins[0], *dy = DOUT(l, ins), *w = w_;
    int64_t n = l->in.d[0], c = l->in.d[1], hw = l->in.d[2] * l->in.d[3];
    float *dx = out, *dw = dx + n * c * hw, m = (float)(n * hw);
    CPU_OMP_IF(n * c * hw > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t ch = 0; ch < c; ch++) {
            float sum = 0, s[4] = {0};
            for (int64_t b = 0; b < n; b++)
                sum += bn_sum(x + (b * c + ch) * hw, hw);
            float mean = sum / m;
            for (int64_t b = 0; b < n; b++)
                bn_sums(x + (b * c + ch) * hw, dy + (b * c + ch) * hw, hw, mean, s);
            float rstd = 1.0f / sqrtf(s[1] / m + (float)l->p.eps), dg = s[2] * rstd, db = s[3];
            float a = w[ch] * rstd / m;
            for (int64_t b = 0; b < n; b++)
                bn_grad_span(x + (b * c + ch) * hw, dy + (b * c + ch) * hw, dx + (b * c + ch) * hw, hw, a, m, db, mean,
                             rstd * dg);
            dw[ch] = l->p.affine ? dg : 0.0f;
            dw[c + ch] = l->p.affine ? db : 0.0f;
            dw[2 * c + ch] = dw[3 * c + ch] = 0.0f;
        });
}

CPU_ISA_CLONES
static float bn_centred_squares(const float *x, int64_t n, float mean)
{
    float a = 0;
#pragma omp simd reduction(+ : a)
    for (int64_t i = 0; i < n; i++)
        a += (x[i] - mean) * (x[i] - mean);
    return a;
}

CPU_ISA_CLONES
static void bn_affine_span(const float *x, float *y, int64_t n, float scale, float shift)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * scale + shift;
}

/* The forward in training mode (bn_run calls it for a layer of PASS_TRAIN): normalised by
 * the batch's statistics, the running ones updated as torch does, (1 - momentum) r +
 * momentum s with the variance unbiased, in the weights the layer was given (the backend
 * allocated them writable; the kernel table's const is the forward's promise). */
void cpu_bn_train_forward(const layer *l, const float *x, const float *w_, float *out)
{
    int64_t n = l->in.d[0], c = l->in.d[1], hw = l->in.d[2] * l->in.d[3];
    float *w = (float *)w_, m = (float)(n * hw), mom = (float)l->p.momentum;
    CPU_OMP_IF(n * c * hw > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t ch = 0; ch < c; ch++) {
            float sum = 0, sq = 0;
            for (int64_t b = 0; b < n; b++)
                sum += bn_sum(x + (b * c + ch) * hw, hw);
            float mean = sum / m;
            for (int64_t b = 0; b < n; b++)
                sq += bn_centred_squares(x + (b * c + ch) * hw, hw, mean);
            float rstd = 1.0f / sqrtf(sq / m + (float)l->p.eps), a = w[ch] * rstd;
            for (int64_t b = 0; b < n; b++)
                bn_affine_span(x + (b * c + ch) * hw, out + (b * c + ch) * hw, hw, a, w[c + ch] - mean * a);
            w[2 * c + ch] = (1 - mom) * w[2 * c + ch] + mom * mean;
            w[3 * c + ch] = (1 - mom) * w[3 * c + ch] + mom * (m > 1 ? sq / (m - 1) : 0.0f);
        });
}

/* ---- dropout (training: its mask drawn) -------------------------------------------------------- */

CPU_ISA_CLONES
static void dropout_span(const float *x, float *y, int64_t from, int64_t n, uint32_t seed, uint32_t threshold, float keep)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * layer_dropout_scale(seed, threshold, keep, from + i);
}

/* y = x times the mask's factor, over the threads in blocks; nothing where l is a view
 * (the forward pass, or p = 0) */
static void dropout_apply(const layer *l, const float *x, float *y)
{
    if (layer_is_view(l))
        return;
    uint32_t seed, threshold;
    float keep;
    layer_dropout_params(l, &seed, &threshold, &keep);
    int64_t n = shape_numel(&l->in), block = 16384, blocks = (n + block - 1) / block;
    CPU_OMP_IF(n > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t k = 0; k < blocks; k++) {
            int64_t from = k * block;
            dropout_span(x + from, y + from, from, n - from < block ? n - from : block, seed, threshold, keep);
        });
}

static void dropout_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out)
{
    (void)env, (void)state, (void)w;
    dropout_apply(l, ins[0], out);
}

/* the same mask again, computed rather than stored: d in = d out times its factor */
static void dropout_bwd_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out)
{
    (void)env, (void)state, (void)w;
    dropout_apply(l, DOUT(l, ins), out);
}

/* ---- the activations ------------------------------------------------------------------------- */

/* The derivatives on fast_math.h's exp, erf and tanh, so that the loops vectorise (the C
 * library's are calls they cannot) */
CPU_ISA_CLONES
static void act_bwd_span(layer_kind kind, int gelu_tanh, const float *x, const float *dy, float *dx, int64_t n)
{
    switch (kind) {
    case LAYER_RELU:
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
        break;
    case LAYER_RELU6:
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            dx[i] = x[i] > 0.0f && x[i] < 6.0f ? dy[i] : 0.0f;
        break;
    case LAYER_SILU:
#pragma omp simd
        for (int64_t i = 0; i < n; i++) {
            float s = 1.0f / (1.0f + lb_expf(-x[i]));
            dx[i] = dy[i] * s * (1.0f + x[i] * (1.0f - s));
        }
        break;
    case LAYER_SIGMOID:
#pragma omp simd
        for (int64_t i = 0; i < n; i++) {
            float s = 1.0f / (1.0f + lb_expf(-x[i]));
            dx[i] = dy[i] * s * (1.0f - s);
        }
        break;
    case LAYER_TANH:
#pragma omp simd
        for (int64_t i = 0; i < n; i++) {
            float t = lb_tanhf(x[i]);
            dx[i] = dy[i] * (1.0f - t * t);
        }
        break;
    case LAYER_HARDSWISH:
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            dx[i] = dy[i] * (x[i] < -3.0f ? 0.0f : x[i] > 3.0f ? 1.0f : x[i] / 3.0f + 0.5f);
        break;
    case LAYER_HARDSIGMOID:
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            dx[i] = x[i] > -3.0f && x[i] < 3.0f ? dy[i] / 6.0f : 0.0f;
        break;
    default: /* LAYER_GELU */
        if (gelu_tanh) {
#pragma omp simd
            for (int64_t i = 0; i < n; i++) {
                float v = x[i], k = 0.7978845608f, t = lb_tanhf(k * (v + 0.044715f * v * v * v));
                dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * v * v));
            }
        } else {
#pragma omp simd
            for (int64_t i = 0; i < n; i++) {
                float v = x[i];
                dx[i] = dy[i] * (0.5f * (1.0f + lb_erff(v * 0.70710678f)) + v * lb_expf(-0.5f * v * v) * 0.39894228f);
            }
        }
    }
}

static void act_bwd_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out)
{
    (void)env, (void)state, (void)w;
    const float *x = ins[0], *dy = DOUT(l, ins);
    float *dx = out;
    int64_t n = shape_numel(&l->in);
    int gt = l->kind == LAYER_GELU && l->p.mode == GELU_TANH;
    CPU_OMP_IF(n > CPU_PARALLEL_MIN, "omp parallel",
        {
            int64_t lo, hi;
            cpu_thread_span(n, &lo, &hi);
            act_bwd_span(l->kind, gt, x + lo, dy + lo, dx + lo, hi - lo);
        });
}

/* ---- add and mul ----------------------------------------------------------------------------- */

/* Same shapes: add copies the gradient to both inputs, mul multiplies it by the other;
 * broadcast inputs sum it over the dimensions they were repeated along (one thread) */
static void binary_bwd_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out)
{
    (void)env, (void)state, (void)w;
    const float *a = ins[0], *b = ins[1], *dy = DOUT(l, ins);
    int64_t n = shape_numel(&l->out), na = shape_numel(&l->ins[0]), nb = shape_numel(&l->ins[1]);
    float *da = out, *db = da + na;
    bool mul = l->kind == LAYER_MUL;
    if (na == n && nb == n) {
        CPU_OMP_IF(n > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
            for (int64_t i = 0; i < n; i++) {
                da[i] = mul ? dy[i] * b[i] : dy[i];
                db[i] = mul ? dy[i] * a[i] : dy[i];
            });
        return;
    }
    memset(da, 0, (size_t)(na + nb) * sizeof *da);
    for (int64_t i = 0; i < n; i++) {
        int64_t ia = layer_broadcast_index(&l->ins[0], &l->out, i), ib = layer_broadcast_index(&l->ins[1], &l->out, i);
        da[ia] += mul ? dy[i] * b[ib] : dy[i];
        db[ib] += mul ? dy[i] * a[ia] : dy[i];
    }
}

/* ---- the activations, add and mul in bf16 and fp16 --------------------------------------------- */

/* The fp32 loops above on BWD16_CHUNK elements at a time, widened from the layer's dtype
 * into the thread's stack and the gradients rounded back: the tensors read and written
 * once in 16 bits, where fp32 copies of them (cpu_bwd_via_f32_kernel) took longer than
 * the backward itself (ResNet-18's relu in bf16: 10 ms of conversions to its 5). */
#define BWD16_CHUNK 1024
#define BWD16_BUFS 5

/* Over the threads, chunk by chunk of n elements: the n_src 16-bit tensors src widened
 * into bufs[0, n_src), fn computing in fp32 into bufs[n_src, n_src + n_dst), those
 * rounded into the n_dst tensors dst (all of l's dtype). */
typedef void (*bwd16_fn)(const layer *l, float *const *bufs, int64_t m);

static void bwd16_chunks(const layer *l, int64_t n, const void *const *src, int n_src, void *const *dst, int n_dst,
                         bwd16_fn fn)
{
    dtype_t t = l->dtype;
    int64_t es = (int64_t)dtype_size(t);
    CPU_OMP_IF(n > CPU_PARALLEL_MIN, "omp parallel",
        {
            int64_t lo, hi;
            float buf[BWD16_BUFS][BWD16_CHUNK], *bufs[BWD16_BUFS];
            for (int k = 0; k < BWD16_BUFS; k++)
                bufs[k] = buf[k];
            cpu_thread_span(n, &lo, &hi);
            for (int64_t i = lo; i < hi; i += BWD16_CHUNK) {
                int64_t m = hi - i < BWD16_CHUNK ? hi - i : BWD16_CHUNK;
                for (int k = 0; k < n_src; k++)
                    cpu_convert_span(bufs[k], DTYPE_FP32, (const char *)src[k] + i * es, t, m);
                fn(l, bufs, m);
                for (int k = 0; k < n_dst; k++)
                    cpu_convert_span((char *)dst[k] + i * es, t, bufs[n_src + k], DTYPE_FP32, m);
            }
        });
}

/* x, dy -> dx */
static void act_bwd16_chunk(const layer *l, float *const *b, int64_t m)
{
    act_bwd_span(l->kind, l->kind == LAYER_GELU && l->p.mode == GELU_TANH, b[0], b[1], b[2], m);
}

static void act_bwd16_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out)
{
    (void)env, (void)state, (void)w;
    const void *src[2] = {ins[0], ins[l->n_inputs + 1]};
    void *dst[1] = {out};
    bwd16_chunks(l, shape_numel(&l->in), src, 2, dst, 1, act_bwd16_chunk);
}

/* a, b, dy -> da = dy b, db = dy a */
static void mul_bwd16_chunk(const layer *l, float *const *b, int64_t m)
{
    (void)l;
    for (int64_t k = 0; k < m; k++)
        b[3][k] = b[2][k] * b[1][k], b[4][k] = b[2][k] * b[0][k];
}

/* add's gradient is the output's, copied to each input; mul's the output's times the
 * other input. Broadcast inputs: their sums over the repeated dimensions in fp32 (the
 * state's, na + nb floats), one thread, then rounded. */
static bench_status binary_bwd16_setup(void *env, const layer *l, const void *w, void **state, char *impl, size_t len,
                                       int64_t *ws)
{
    (void)env, (void)w;
    int64_t n = shape_numel(&l->out), na = shape_numel(&l->ins[0]), nb = shape_numel(&l->ins[1]);
    *ws = 0;
    if (na == n && nb == n) {
        snprintf(impl, len, "direct, %s in and out, fp32 inside", dtype_name(l->dtype));
        return BENCH_OK;
    }
    float *sums = bench_alloc_floats(na + nb);
    if (!sums)
        return BENCH_ERR_NOMEM;
    *ws = (na + nb) * (int64_t)sizeof(float), *state = sums;
    snprintf(impl, len, "direct, %s in and out, a broadcast input's sums in fp32 on one thread", dtype_name(l->dtype));
    return BENCH_OK;
}

static void binary_bwd16_free(void *env, void *state)
{
    (void)env;
    free(state);
}

static void binary_bwd16_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out)
{
    (void)env, (void)w;
    dtype_t t = l->dtype;
    int64_t n = shape_numel(&l->out), na = shape_numel(&l->ins[0]), nb = shape_numel(&l->ins[1]);
    int64_t es = (int64_t)dtype_size(t);
    const char *a = ins[0], *b = ins[1], *dy = ins[l->n_inputs + 1];
    char *da = out, *db = da + na * es;
    bool mul = l->kind == LAYER_MUL;
    if (!state && !mul) { /* the same gradient, twice */
        memcpy(da, dy, (size_t)(n * es));
        memcpy(db, dy, (size_t)(n * es));
        return;
    }
    if (!state) {
        const void *src[3] = {a, b, dy};
        void *dst[2] = {da, db};
        bwd16_chunks(l, n, src, 3, dst, 2, mul_bwd16_chunk);
        return;
    }
    float *sa = state, *sb = sa + na;
    memset(sa, 0, (size_t)(na + nb) * sizeof *sa);
    for (int64_t i = 0; i < n; i++) {
        int64_t ia = layer_broadcast_index(&l->ins[0], &l->out, i), ib = layer_broadcast_index(&l->ins[1], &l->out, i);
        float g, x, y;
        cpu_convert_span(&g, DTYPE_FP32, dy + i * es, t, 1);
        if (mul) {
            cpu_convert_span(&x, DTYPE_FP32, a + ia * es, t, 1);
            cpu_convert_span(&y, DTYPE_FP32, b + ib * es, t, 1);
        }
        sa[ia] += mul ? g * y : g;
        sb[ib] += mul ? g * x : g;
    }
    cpu_convert_span(da, t, sa, DTYPE_FP32, na);
    cpu_convert_span(db, t, sb, DTYPE_FP32, nb);
}

/* ---- pooling --------------------------------------------------------------------------------- */

/* One plane of max pooling: each output's gradient to its window's first largest input
 * (the search without branches on the values: random data mispredicts them) */
static void maxpool_bwd_plane(const layer *l, const float *x, const float *dy, float *dx)
{
    const layer_params *p = &l->p;
    int64_t h = l->in.d[2], wd = l->in.d[3], oh = l->out.d[2], ow = l->out.d[3];
    memset(dx, 0, (size_t)(h * wd) * sizeof *dx);
    for (int64_t y = 0; y < oh; y++)
        for (int64_t xo = 0; xo < ow; xo++) {
            int64_t arg = -1;
            float best = -INFINITY;
            for (int64_t i = 0; i < p->kernel[0]; i++) {
                int64_t iy = y * p->stride[0] - p->padding[0] + i * p->dilation[0];
                if (iy < 0 || iy >= h)
                    continue;
                for (int64_t j = 0; j < p->kernel[1]; j++) {
                    int64_t ix = xo * p->stride[1] - p->padding[1] + j * p->dilation[1];
                    if (ix < 0 || ix >= wd)
                        continue;
                    float v = x[iy * wd + ix];
                    int64_t take = -(int64_t)(v > best); /* all ones or none; the first finite one is taken */
                    best = v > best ? v : best;
                    arg = (arg & ~take) | ((iy * wd + ix) & take);
                }
            }
            if (arg >= 0)
                dx[arg] += dy[y * ow + xo];
        }
}

/* Per plane (over the threads): max pooling's gradient to each window's first largest
 * input, average pooling's shared by the forward's divisor, adaptive pooling's by its
 * window's size */
static void pool_bwd_plane(const layer *l, const float *x, const float *dy, float *dx)
{
    const layer_params *p = &l->p;
    int64_t h = l->in.d[2], wd = l->in.d[3], oh = l->out.d[2], ow = l->out.d[3];
    memset(dx, 0, (size_t)(h * wd) * sizeof *dx);
    for (int64_t y = 0; y < oh; y++)
        for (int64_t xo = 0; xo < ow; xo++) {
            float g = dy[y * ow + xo];
            if (l->kind == LAYER_ADAPTIVE_AVGPOOL2D) {
                int64_t y0 = y * h / oh, y1 = ((y + 1) * h + oh - 1) / oh, x0 = xo * wd / ow, x1 = ((xo + 1) * wd + ow - 1) / ow;
                g /= (float)((y1 - y0) * (x1 - x0));
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++)
                        dx[iy * wd + ix] += g;
                continue;
            }
            int64_t arg = -1, valid = 0, padded = 0, dil0 = l->kind == LAYER_MAXPOOL2D ? p->dilation[0] : 1,
                    dil1 = l->kind == LAYER_MAXPOOL2D ? p->dilation[1] : 1;
            for (int pass = 0; pass < 2; pass++)
                for (int64_t i = 0; i < p->kernel[0]; i++)
                    for (int64_t j = 0; j < p->kernel[1]; j++) {
                        int64_t iy = y * p->stride[0] - p->padding[0] + i * dil0;
                        int64_t ix = xo * p->stride[1] - p->padding[1] + j * dil1;
                        bool in = iy >= 0 && iy < h && ix >= 0 && ix < wd;
                        if (pass == 0) {
                            padded += iy < h + p->padding[0] && ix < wd + p->padding[1];
                            valid += in;
                            if (in && (arg < 0 || x[iy * wd + ix] > x[arg]))
                                arg = iy * wd + ix;
                        } else if (in && l->kind == LAYER_AVGPOOL2D) {
                            int64_t div = p->count_include_pad ? padded : valid;
                            dx[iy * wd + ix] += div ? g / (float)div : 0.0f;
                        }
                    }
            if (l->kind == LAYER_MAXPOOL2D && arg >= 0)
                dx[arg] += g;
        }
}

static void pool_bwd_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out)
{
    (void)env, (void)state, (void)w;
    const float *x = ins[0], *dy = DOUT(l, ins);
    int64_t planes = l->in.d[0] * l->in.d[1], ihw = l->in.d[2] * l->in.d[3], ohw = l->out.d[2] * l->out.d[3];
    float *dx = out;
    CPU_OMP_IF(planes * ihw > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t pl = 0; pl < planes; pl++)
            (l->kind == LAYER_MAXPOOL2D ? maxpool_bwd_plane : pool_bwd_plane)(l, x + pl * ihw, dy + pl * ohw,
                                                                               dx + pl * ihw););
}

/* ---- the norms and softmax, row by row --------------------------------------------------------- */

/* One row of d: rmsnorm's (s = w + offset, no mean) or layernorm's (gamma where it has
 * it) input gradient; its mean and 1 / std kept in stat[2] for the weights' pass */
CPU_ISA_CLONES
static void norm_bwd_row(const layer *l, const float *x, const float *dy, const float *w, float *dx, float *stat)
{
    int64_t d = l->p.normalized_shape;
    bool rms = l->kind == LAYER_RMSNORM, affine = rms || l->p.affine;
    float mean = 0, var = 0, mg = 0, mgx = 0, off = rms ? (float)l->p.weight_offset : 0.0f;
    if (!rms) {
#pragma omp simd reduction(+ : mean)
        for (int64_t i = 0; i < d; i++)
            mean += x[i];
        mean /= (float)d;
    }
#pragma omp simd reduction(+ : var)
    for (int64_t i = 0; i < d; i++)
        var += (x[i] - mean) * (x[i] - mean);
    float rstd = 1.0f / sqrtf(var / (float)d + (float)l->p.eps);
#pragma omp simd reduction(+ : mg, mgx)
    for (int64_t i = 0; i < d; i++) {
        float g = dy[i] * (affine ? w[i] + off : 1.0f);
        mg += g, mgx += g * (x[i] - mean) * rstd;
    }
    mg = rms ? 0.0f : mg / (float)d, mgx /= (float)d;
#pragma omp simd
    for (int64_t i = 0; i < d; i++)
        dx[i] = rstd * (dy[i] * (affine ? w[i] + off : 1.0f) - mg - (x[i] - mean) * rstd * mgx);
    stat[0] = mean, stat[1] = rstd;
}

/* One row's share of the weights' gradient over a span of features: g += dy x^, b += dy */
CPU_ISA_CLONES
static void norm_wgrad_span(const float *x, const float *dy, int64_t n, float mean, float rstd, float *g, float *b)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        g[i] += dy[i] * (x[i] - mean) * rstd, b[i] += dy[i];
}

typedef struct norm_bwd {
    float *stat; /* per row: its mean and 1 / std */
} norm_bwd;

static bench_status norm_bwd_setup(void *env, const layer *l, const void *w, void **state, char *impl, size_t len,
                                   int64_t *ws)
{
    (void)env, (void)w;
    int64_t rows = shape_numel(&l->in) / l->p.normalized_shape;
    norm_bwd *s = xcalloc(1, sizeof *s);
    if (!(s->stat = bench_alloc_floats(2 * rows))) {
        free(s);
        return BENCH_ERR_NOMEM;
    }
    *ws = 2 * rows * (int64_t)sizeof(float);
    snprintf(impl, len, "per row (statistics recomputed) then the weights' gradient per feature");
    *state = s;
    return BENCH_OK;
}

static void norm_bwd_free(void *env, void *state)
{
    (void)env;
    norm_bwd *s = state;
    if (s)
        free(s->stat), free(s);
}

/* The rows over the threads, then the weights' gradient over the features: d gamma_i =
 * sum over rows of d out x^ (rmsnorm's weight alike), d beta_i of d out */
static void norm_bwd_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out)
{
    (void)env;
    const float *x = ins[0], *dy = DOUT(l, ins);
    float *stat = ((norm_bwd *)state)->stat;
    int64_t d = l->p.normalized_shape, rows = shape_numel(&l->in) / d;
    bool rms = l->kind == LAYER_RMSNORM, affine = rms || l->p.affine, beta = !rms && l->n_weight_floats > d;
    float *dx = out, *dw = dx + rows * d;
    CPU_OMP_IF(rows * d > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t r = 0; r < rows; r++)
            norm_bwd_row(l, x + r * d, dy + r * d, w, dx + r * d, stat + 2 * r););
    if (!affine)
        return;
    /* the weights' gradient by chunks of 64 features over the threads, each chunk's rows in
     * turn (contiguous reads, where a feature at a time strides the rows) */
    int64_t chunks = (d + 63) / 64;
    CPU_OMP_IF(rows * d > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t ch = 0; ch < chunks; ch++) {
            int64_t i0 = ch * 64, span = d - i0 < 64 ? d - i0 : 64;
            float g[64] = {0}, bs[64] = {0};
            for (int64_t r = 0; r < rows; r++)
                norm_wgrad_span(x + r * d + i0, dy + r * d + i0, span, stat[2 * r], stat[2 * r + 1], g, bs);
            memcpy(dw + i0, g, (size_t)span * sizeof *g);
            if (beta)
                memcpy(dw + d + i0, bs, (size_t)span * sizeof *bs);
        });
}

static void softmax_bwd_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out)
{
    (void)env, (void)state, (void)w;
    const float *y = FOUT(l, ins), *dy = DOUT(l, ins);
    float *dx = out;
    int64_t outer, n, inner;
    layer_softmax_dims(l, &outer, &n, &inner);
    CPU_OMP_IF(outer * n * inner > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t o = 0; o < outer; o++)
            for (int64_t k = 0; k < inner; k++) {
                int64_t at = o * n * inner + k;
                float dot = 0;
                for (int64_t i = 0; i < n; i++)
                    dot += dy[at + i * inner] * y[at + i * inner];
                for (int64_t i = 0; i < n; i++)
                    dx[at + i * inner] = y[at + i * inner] * (dy[at + i * inner] - dot);
            });
}

/* ---- the token moves: transpose (and channel_shuffle), class_token, pos_embedding, select ---- */

/* d out [outer, b, mid, a, inner] back to the input's [outer, a, mid, b, inner] */
static void transpose_bwd_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out)
{
    (void)env, (void)state, (void)w;
    const float *dy = DOUT(l, ins);
    float *dx = out;
    int64_t outer, a, mid, b, inner;
    layer_transpose_dims(l, &outer, &a, &mid, &b, &inner);
    CPU_OMP_IF(shape_numel(&l->in) > CPU_PARALLEL_MIN, "omp parallel for collapse(2) schedule(static)",
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < a; i++)
                for (int64_t m = 0; m < mid; m++)
                    for (int64_t j = 0; j < b; j++)
                        memcpy(dx + (((o * a + i) * mid + m) * b + j) * inner,
                               dy + (((o * b + j) * mid + m) * a + i) * inner, (size_t)inner * sizeof *dx););
}

/* class_token: the tokens' rows of d out, and the first row summed over the batch;
 * pos_embedding: d out itself, and summed over the batch into the rows read; select: the
 * slice, zeros around it */
static void token_bwd_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out)
{
    (void)env, (void)state, (void)w;
    const float *dy = DOUT(l, ins);
    float *dx = out;
    int64_t n = l->in.d[0], s = l->in.rank > 1 ? l->in.d[1] : 1, d = l->in.d[l->in.rank - 1];
    if (l->kind == LAYER_SELECT) {
        int64_t outer, size, inner;
        layer_select_dims(l, &outer, &size, &inner);
        memset(dx, 0, (size_t)shape_numel(&l->in) * sizeof *dx);
        for (int64_t o = 0; o < outer; o++)
            memcpy(dx + (o * size + l->p.index) * inner, dy + o * inner, (size_t)inner * sizeof *dx);
        return;
    }
    bool cls = l->kind == LAYER_CLASS_TOKEN;
    int64_t rows = cls ? s + 1 : s, keep = cls ? 1 : 0; /* d out's rows per sample; those not the input's */
    float *dw = dx + n * s * d, *table = cls ? dw : dw + l->p.kv_len * d;
    for (int64_t b = 0; b < n; b++)
        memcpy(dx + b * s * d, dy + (b * rows + keep) * d, (size_t)(s * d) * sizeof *dx);
    if (!cls)
        memset(dw, 0, (size_t)l->n_weight_floats * sizeof *dw);
    int64_t span = cls ? d : s * d; /* the class token's one row, or the positions' rows */
    CPU_OMP_IF(n * span > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t i = 0; i < span; i++) {
            float sum = 0;
            for (int64_t b = 0; b < n; b++)
                sum += dy[b * rows * d + i];
            table[i] = sum;
        });
}

/* ---- concat, mean, scale_shift ---------------------------------------------------------------- */

/* concat: each input's slice of d out; mean: d out / size spread over the dims it
 * averaged; scale_shift: d out times the scale */
static void spread_bwd_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out)
{
    (void)env, (void)state, (void)w;
    const float *dy = DOUT(l, ins);
    float *dx = out;
    if (l->kind == LAYER_SCALE_SHIFT) {
        int64_t n = shape_numel(&l->in);
        float a = (float)l->p.attn_scale;
        CPU_OMP_IF(n > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
            for (int64_t i = 0; i < n; i++)
                dx[i] = dy[i] * a;);
        return;
    }
    if (l->kind == LAYER_MEAN) {
        int64_t outer, size, inner;
        layer_mean_dims(l, &outer, &size, &inner);
        float inv = 1.0f / (float)size;
        CPU_OMP_IF(outer * size * inner > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
            for (int64_t o = 0; o < outer; o++)
                for (int64_t k = 0; k < size; k++)
                    for (int64_t i = 0; i < inner; i++)
                        dx[(o * size + k) * inner + i] = dy[o * inner + i] * inv;);
        return;
    }
    int64_t outer = 1, inner = 1, dim = l->p.dim, at = 0; /* concat */
    for (int64_t i = 0; i < dim; i++)
        outer *= l->out.d[i];
    for (int64_t i = dim + 1; i < l->out.rank; i++)
        inner *= l->out.d[i];
    for (int k = 0; k < l->n_inputs; k++) {
        int64_t span = l->ins[k].d[dim] * inner;
        for (int64_t o = 0; o < outer; o++)
            memcpy(dx + o * span, dy + o * l->out.d[dim] * inner + at, (size_t)span * sizeof *dx);
        dx += outer * span, at += span;
    }
}

/* ---- embedding --------------------------------------------------------------------------------- */

static void embedding_bwd_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out)
{
    (void)env, (void)state, (void)w;
    const float *ids = ins[0], *dy = DOUT(l, ins);
    int64_t n = shape_numel(&l->in), d = l->p.embedding_dim;
    float *dids = out, *dw = dids + n;
    memset(dids, 0, (size_t)n * sizeof *dids);
    memset(dw, 0, (size_t)l->n_weight_floats * sizeof *dw);
    for (int64_t i = 0; i < n; i++) {
        float *row = dw + layer_token_id(l, ids[i]) * d;
        for (int64_t k = 0; k < d; k++)
            row[k] += dy[i * d + k];
    }
}

/* ---- attention ------------------------------------------------------------------------------ */

/* Two ways, each named in the row's impl:
 *  - plain (the scores kept whole per head, as eager attention's autograd keeps them), per
 *    (sample, kv head) over the threads, each of its query heads in turn: S = scale Q K^T
 *    (softcapped), P = softmax under the mask; dV += P^T dO; dP = dO V^T; dS = P (dP -
 *    rowsum(P dP)) through the softcap; dQ = scale dS K; dK += scale dS^T Q. Five sgemm
 *    over T x Tk scores, two such arrays per thread;
 *  - blocks (memory-efficient, FlashAttention-2's backward): per block of ATTN_BR
 *    queries, the rows' log-sum-exp L from the scores by blocks of ATTN_BC keys (the
 *    forward does not keep it), D = rowsum(dO O) from the forward's output, then per key
 *    block the scores again, P = exp(S - L), dV += P^T dO, dP = dO V^T, dS = P (dP - D),
 *    dQ += scale dS K, dK += scale dS^T Q. The scores are computed twice (six products
 *    to the plain one's five) and never held beyond a block: three ATTN_BR x ATTN_BC
 *    blocks per thread, whatever the length. Blocks the mask hides wholly are skipped.
 * LAYERBENCH_CPU_ATTN_BWD=plain|blocks forces one (tests, experiments); else --algo
 * search times both (cpu_search_rounds) and keeps the faster, up to ATTN_SEARCH_SCORES
 * scores in the layer; past it, and under --algo heuristic, the rule: blocks where the
 * mask is causal (they skip the hidden half: 16-34% faster from 512 tokens on a Zen 4),
 * else plain (its five products: 9-21% faster) while its scores per thread stay within
 * ATTN_PLAIN_RULE_BYTES. */
typedef enum attn_bwd_way { ATTN_PLAIN, ATTN_BLOCKS, ATTN_WAYS } attn_bwd_way;
static const char *const attn_bwd_way_names[ATTN_WAYS] = {"plain", "blocks"};

#define ATTN_BR 64
#define ATTN_BC 64

typedef struct attn_bwd {
    float *scratch; /* per thread: plain: P and dS, T x Tk each; blocks: three blocks and L, D */
    int64_t per_thread; /* floats */
    int threads;
    attn_bwd_way way;
} attn_bwd;

/* The most scratch the plain backward takes: past it, only the memory-efficient one */
#define ATTN_BWD_MAX_BYTES ((int64_t)1 << 30)
/* The rule: plain (not causal) while its two score arrays per thread stay within this */
#define ATTN_PLAIN_RULE_BYTES ((int64_t)64 << 20)
/* The search times both ways (a dozen runs) up to this many scores (batch x heads x T x
 * Tk: 512 tokens of Llama-3.2-1B's 32 heads, a backward of about 60 ms) */
#define ATTN_SEARCH_SCORES ((int64_t)1 << 23)

static int64_t attn_bwd_floats(const layer *l, attn_bwd_way way)
{
    int64_t t = l->in.d[1], tk = l->ins[1].d[1];
    return way == ATTN_PLAIN ? 2 * t * tk : 3 * ATTN_BR * ATTN_BC + 2 * ATTN_BR;
}

static attn_bwd *attn_bwd_new(const layer *l, attn_bwd_way way, int64_t *ws)
{
    attn_bwd *s = xcalloc(1, sizeof *s);
    s->threads = omp_get_max_threads(), s->way = way, s->per_thread = attn_bwd_floats(l, way);
    if (!(s->scratch = bench_alloc_floats(s->threads * s->per_thread))) {
        free(s);
        return NULL;
    }
    *ws = s->threads * s->per_thread * (int64_t)sizeof(float);
    return s;
}

static void attn_bwd_free(void *env, void *state)
{
    (void)env;
    attn_bwd *s = state;
    if (s)
        free(s->scratch), free(s);
}

/* The keys [*j0, *j1) query t sees (layer_attention_sees: a contiguous range, moving
 * forward with t; no cache in training) */
static void attn_row_keys(const layer *l, int64_t t, int64_t tk, int64_t *j0, int64_t *j1)
{
    *j0 = 0, *j1 = tk;
    if (l->p.causal) {
        *j1 = t + 1 < tk ? t + 1 : tk;
        if (l->p.sliding_window > 0 && t - l->p.sliding_window + 1 > 0)
            *j0 = t - l->p.sliding_window + 1;
    }
}

/* The scores' probabilities of one head into p [T, Tk] (masked ones 0), in place */
static void attn_probs(const layer *l, float *p, int64_t t_len, int64_t tk)
{
    float cap = (float)l->p.softcap;
    for (int64_t t = 0; t < t_len; t++) {
        float *row = p + t * tk, top = -INFINITY, sum = 0;
        int64_t j0, j1;
        attn_row_keys(l, t, tk, &j0, &j1);
        if (cap > 0)
            for (int64_t j = j0; j < j1; j++)
                row[j] = cap * lb_tanhf(row[j] / cap);
        for (int64_t j = j0; j < j1; j++)
            top = row[j] > top ? row[j] : top;
        for (int64_t j = 0; j < tk; j++)
            row[j] = j >= j0 && j < j1 ? lb_expf(row[j] - top) : 0.0f;
        for (int64_t j = j0; j < j1; j++)
            sum += row[j];
        float inv = sum > 0 ? 1.0f / sum : 0.0f;
        for (int64_t j = j0; j < j1; j++)
            row[j] *= inv;
    }
}

/* One head's tensors as the backward reads and writes them: rows of q, dO, O and dq
 * strided by qs, of k, v, dk and dv by ks (the heads side by side) */
typedef struct attn_head {
    const float *q, *k, *v, *dout, *o;
    float *dq, *dk, *dv;
    int64_t qs, ks, t_len, tk, d;
    float scale, cap;
} attn_head;

static attn_head attn_head_at(const layer *l, const void *const *ins, float *grad, int64_t b, int64_t hh)
{
    int64_t t_len = l->in.d[1], tk = l->ins[1].d[1], h = l->p.num_heads, hkv = l->p.num_kv_heads, d = l->p.head_dim;
    int64_t g = hh / (h / hkv), qs = h * d, ks = hkv * d;
    attn_head a = {.qs = qs, .ks = ks, .t_len = t_len, .tk = tk, .d = d, .cap = (float)l->p.softcap,
                   .scale = (float)(l->p.attn_scale > 0 ? l->p.attn_scale : 1.0 / sqrt((double)d))};
    a.q = (const float *)ins[0] + b * t_len * qs + hh * d, a.k = (const float *)ins[1] + b * tk * ks + g * d;
    a.v = (const float *)ins[2] + b * tk * ks + g * d, a.dout = DOUT(l, ins) + b * t_len * qs + hh * d;
    a.o = FOUT(l, ins) + b * t_len * qs + hh * d;
    a.dq = grad + b * t_len * qs + hh * d, a.dk = grad + shape_numel(&l->ins[0]) + b * tk * ks + g * d;
    a.dv = a.dk + shape_numel(&l->ins[1]);
    return a;
}

/* The plain way for one query head: its gradients into dq (its own rows) and added into
 * dk and dv (its kv head's) */
static void attn_bwd_plain(const layer *l, const attn_head *a, float *p)
{
    int64_t t_len = a->t_len, tk = a->tk, d = a->d, qs = a->qs, ks = a->ks;
    float *ds = p + t_len * tk;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)t_len, (blasint)tk, (blasint)d, a->scale, a->q,
                (blasint)qs, a->k, (blasint)ks, 0.0f, p, (blasint)tk);
    attn_probs(l, p, t_len, tk);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)tk, (blasint)d, (blasint)t_len, 1.0f, p, (blasint)tk,
                a->dout, (blasint)qs, 1.0f, a->dv, (blasint)ks);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)t_len, (blasint)tk, (blasint)d, 1.0f, a->dout,
                (blasint)qs, a->v, (blasint)ks, 0.0f, ds, (blasint)tk);
    for (int64_t t = 0; t < t_len; t++) {
        float *pr = p + t * tk, *dr = ds + t * tk, dot = 0;
        for (int64_t j = 0; j < tk; j++)
            dot += pr[j] * dr[j];
        for (int64_t j = 0; j < tk; j++)
            dr[j] = pr[j] * (dr[j] - dot);
    }
    if (a->cap > 0) { /* through the cap: d s = d capped (1 - tanh^2), tanh from the raw scores again */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)t_len, (blasint)tk, (blasint)d, a->scale, a->q,
                    (blasint)qs, a->k, (blasint)ks, 0.0f, p, (blasint)tk);
        for (int64_t i = 0; i < t_len * tk; i++) {
            float th = lb_tanhf(p[i] / a->cap);
            ds[i] *= 1.0f - th * th;
        }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)t_len, (blasint)d, (blasint)tk, a->scale, ds,
                (blasint)tk, a->k, (blasint)ks, 0.0f, a->dq, (blasint)qs);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)tk, (blasint)d, (blasint)t_len, a->scale, ds,
                (blasint)tk, a->q, (blasint)qs, 1.0f, a->dk, (blasint)ks);
}

/* Scores of queries [t0, t0 + br) against keys [j0, j0 + bc) into s [br x ATTN_BC]:
 * scaled and capped (the cap's tanh into th where given); each row's visible columns
 * [c0[r], c1[r]) (the others -inf) */
static void attn_block_scores(const layer *l, const attn_head *a, int64_t t0, int64_t br, int64_t j0, int64_t bc,
                              float *s, float *th, int64_t *c0, int64_t *c1)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)br, (blasint)bc, (blasint)a->d, a->scale,
                a->q + t0 * a->qs, (blasint)a->qs, a->k + j0 * a->ks, (blasint)a->ks, 0.0f, s, ATTN_BC);
    for (int64_t r = 0; r < br; r++) {
        int64_t k0, k1;
        attn_row_keys(l, t0 + r, a->tk, &k0, &k1);
        k0 = k0 - j0 < 0 ? 0 : k0 - j0 > bc ? bc : k0 - j0;
        k1 = k1 - j0 < k0 ? k0 : k1 - j0 > bc ? bc : k1 - j0;
        c0[r] = k0, c1[r] = k1;
        float *row = s + r * ATTN_BC, *tr = th ? th + r * ATTN_BC : NULL;
        for (int64_t c = 0; c < k0; c++)
            row[c] = -INFINITY;
        for (int64_t c = k1; c < bc; c++)
            row[c] = -INFINITY;
        if (a->cap > 0)
            for (int64_t c = k0; c < k1; c++) {
                float t = lb_tanhf(row[c] / a->cap);
                if (tr)
                    tr[c] = t;
                row[c] = a->cap * t;
            }
    }
}

/* The blocks way for one query head (see above): dq's rows zeroed then summed into, dk
 * and dv added into. x: the thread's scratch (three blocks, then L and D per query). */
static void attn_bwd_blocks(const layer *l, const attn_head *a, float *x)
{
    int64_t t_len = a->t_len, tk = a->tk, d = a->d, qs = a->qs, ks = a->ks;
    float *s = x, *ds = s + ATTN_BR * ATTN_BC, *th = ds + ATTN_BR * ATTN_BC, *lse = th + ATTN_BR * ATTN_BC;
    float *dd = lse + ATTN_BR;
    for (int64_t t = 0; t < t_len; t++)
        memset(a->dq + t * qs, 0, (size_t)d * sizeof(float));
    for (int64_t t0 = 0; t0 < t_len; t0 += ATTN_BR) {
        int64_t br = t_len - t0 < ATTN_BR ? t_len - t0 : ATTN_BR, k0, k1, unused, c0[ATTN_BR], c1[ATTN_BR];
        attn_row_keys(l, t0, tk, &k0, &unused); /* the keys the block's queries see between them */
        attn_row_keys(l, t0 + br - 1, tk, &unused, &k1);
        float top[ATTN_BR], sum[ATTN_BR];
        for (int64_t r = 0; r < br; r++) {
            top[r] = -INFINITY, sum[r] = 0;
            const float *o = a->o + (t0 + r) * qs, *g = a->dout + (t0 + r) * qs;
            float dot = 0;
            for (int64_t i = 0; i < d; i++)
                dot += o[i] * g[i];
            dd[r] = dot;
        }
        for (int64_t j0 = k0; j0 < k1; j0 += ATTN_BC) { /* the rows' log-sum-exp, online */
            int64_t bc = k1 - j0 < ATTN_BC ? k1 - j0 : ATTN_BC;
            attn_block_scores(l, a, t0, br, j0, bc, s, NULL, c0, c1);
            for (int64_t r = 0; r < br; r++) {
                const float *row = s + r * ATTN_BC;
                float m = top[r], acc = 0;
                for (int64_t c = c0[r]; c < c1[r]; c++)
                    m = row[c] > m ? row[c] : m;
                if (c0[r] == c1[r])
                    continue;
                for (int64_t c = c0[r]; c < c1[r]; c++)
                    acc += lb_expf(row[c] - m);
                sum[r] = acc + (sum[r] > 0 ? sum[r] * lb_expf(top[r] - m) : 0.0f);
                top[r] = m;
            }
        }
        for (int64_t r = 0; r < br; r++) /* a row that sees nothing: every p 0 */
            lse[r] = sum[r] > 0 ? top[r] + logf(sum[r]) : INFINITY;
        for (int64_t j0 = k0; j0 < k1; j0 += ATTN_BC) {
            int64_t bc = k1 - j0 < ATTN_BC ? k1 - j0 : ATTN_BC;
            attn_block_scores(l, a, t0, br, j0, bc, s, th, c0, c1);
            for (int64_t r = 0; r < br; r++) {
                float *row = s + r * ATTN_BC;
                for (int64_t c = 0; c < bc; c++)
                    row[c] = c >= c0[r] && c < c1[r] ? lb_expf(row[c] - lse[r]) : 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)bc, (blasint)d, (blasint)br, 1.0f, s, ATTN_BC,
                        a->dout + t0 * qs, (blasint)qs, 1.0f, a->dv + j0 * ks, (blasint)ks);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)br, (blasint)bc, (blasint)d, 1.0f,
                        a->dout + t0 * qs, (blasint)qs, a->v + j0 * ks, (blasint)ks, 0.0f, ds, ATTN_BC);
            for (int64_t r = 0; r < br; r++) {
                float *dr = ds + r * ATTN_BC, *tr = th + r * ATTN_BC;
                const float *pr = s + r * ATTN_BC;
                for (int64_t c = 0; c < bc; c++)
                    dr[c] = pr[c] * (dr[c] - dd[r]);
                if (a->cap > 0)
                    for (int64_t c = c0[r]; c < c1[r]; c++)
                        dr[c] *= 1.0f - tr[c] * tr[c];
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)br, (blasint)d, (blasint)bc, a->scale, ds,
                        ATTN_BC, a->k + j0 * ks, (blasint)ks, 1.0f, a->dq + t0 * qs, (blasint)qs);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)bc, (blasint)d, (blasint)br, a->scale, ds,
                        ATTN_BC, a->q + t0 * qs, (blasint)qs, 1.0f, a->dk + j0 * ks, (blasint)ks);
        }
    }
}

static void attn_bwd_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out)
{
    (void)env, (void)w;
    attn_bwd *s = state;
    int64_t n = l->in.d[0], h = l->p.num_heads, hkv = l->p.num_kv_heads;
    int64_t per = h / hkv;
    float *grad = out, *dk = grad + shape_numel(&l->ins[0]);
    memset(dk, 0, (size_t)(shape_numel(&l->ins[1]) + shape_numel(&l->ins[2])) * sizeof *dk); /* summed into */
    /* one (sample, kv head) per iteration: its query heads add into its dk and dv in turn;
     * OpenBLAS runs single-threaded inside a parallel region */
#pragma omp parallel for schedule(dynamic) num_threads(s->threads) if (n * hkv > 1)
    for (int64_t i = 0; i < n * hkv; i++) {
        float *x = s->scratch + (int64_t)omp_get_thread_num() * s->per_thread;
        for (int64_t k = 0; k < per; k++) {
            attn_head a = attn_head_at(l, ins, grad, i / hkv, i % hkv * per + k);
            if (s->way == ATTN_PLAIN)
                attn_bwd_plain(l, &a, x);
            else
                attn_bwd_blocks(l, &a, x);
        }
    }
}

/* Both ways timed on scratch tensors of the layer's shapes, in rounds (at most 0.3 s,
 * each run warm: a backward reads what the forward just wrote); a tie goes to blocks,
 * which keeps less. -1 when out of memory. */
typedef struct attn_ways {
    const layer *l;
    attn_bwd **st;
    const void *const *ins;
    float *out;
} attn_ways;

static void attn_way_run(void *user, int k)
{
    attn_ways *x = user;
    attn_bwd_run(NULL, x->l, x->st[k], x->ins, NULL, x->out);
}

static int attn_bwd_search(const layer *l)
{
    int64_t in_n = layer_backward_in_floats(l), out_n = layer_backward_floats(l), ws;
    float *in = bench_alloc_floats(in_n), *out = bench_alloc_floats(out_n);
    attn_bwd *st[ATTN_WAYS] = {NULL};
    int pick = -1;
    bool all = in && out;
    for (int k = 0; all && k < ATTN_WAYS; k++)
        all = (st[k] = attn_bwd_new(l, (attn_bwd_way)k, &ws)) != NULL;
    if (all) {
        const void *ins[LAYER_MAX_INPUTS + 2];
        const float *at = in;
        for (int k = 0; k < l->n_inputs; k++)
            ins[k] = at, at += shape_numel(&l->ins[k]);
        ins[l->n_inputs] = at, at += shape_numel(&l->out);
        ins[l->n_inputs + 1] = at;
        for (int64_t i = 0; i < in_n; i++)
            in[i] = (float)(i % 17) * 0.0625f - 0.5f;
        attn_ways x = {l, st, ins, out};
        double best[ATTN_WAYS];
        for (int k = 0; k < ATTN_WAYS; k++) /* warm, untimed */
            attn_way_run(&x, k);
        cpu_search_rounds(ATTN_WAYS, 0.3, NULL, attn_way_run, &x, best);
        pick = best[ATTN_PLAIN] < best[ATTN_BLOCKS] * (1 - CPU_SEARCH_TIE) ? ATTN_PLAIN : ATTN_BLOCKS;
        const char *e = getenv("LAYERBENCH_CPU_SEARCH_LOG");
        if (e && *e && strcmp(e, "0") != 0)
            bench_diag("cpu search %s backward: plain %.1f us, blocks %.1f us: %s kept\n", l->name,
                       1e6 * best[ATTN_PLAIN], 1e6 * best[ATTN_BLOCKS], attn_bwd_way_names[pick]);
    }
    for (int k = 0; k < ATTN_WAYS; k++)
        attn_bwd_free(NULL, st[k]);
    free(in), free(out);
    return pick;
}

static bench_status attn_bwd_setup(void *env, const layer *l, const void *w, void **state, char *impl, size_t len,
                                   int64_t *ws)
{
    (void)w;
    if (l->p.kv_len || l->p.sinks) {
        snprintf(impl, len, "the cpu backward takes no KV cache and no sinks yet (training has neither)");
        return BENCH_ERR_UNSUPPORTED;
    }
    int64_t t = l->in.d[1], tk = l->ins[1].d[1], threads = omp_get_max_threads();
    int64_t plain_bytes = threads * attn_bwd_floats(l, ATTN_PLAIN) * (int64_t)sizeof(float);
    const char *forced = getenv("LAYERBENCH_CPU_ATTN_BWD"), *why;
    cpu_choices *search = cpu_env_choices(env);
    attn_bwd_way way;
    char whyb[80];
    if (forced && *forced) {
        way = strcmp(forced, "plain") == 0 ? ATTN_PLAIN : ATTN_BLOCKS;
        why = "LAYERBENCH_CPU_ATTN_BWD";
        if (way == ATTN_PLAIN && plain_bytes > ATTN_BWD_MAX_BYTES) {
            snprintf(impl, len, "LAYERBENCH_CPU_ATTN_BWD=plain: the plain backward keeps %lld x %lld scores per thread "
                                "(over 1 GiB)", (long long)t, (long long)tk);
            return BENCH_ERR_UNSUPPORTED;
        }
    } else if (plain_bytes > ATTN_BWD_MAX_BYTES) {
        way = ATTN_BLOCKS, why = "the plain one's scores would take over 1 GiB";
    } else if (!search || l->in.d[0] * l->p.num_heads * t * tk > ATTN_SEARCH_SCORES) {
        way = l->p.causal || plain_bytes > ATTN_PLAIN_RULE_BYTES ? ATTN_BLOCKS : ATTN_PLAIN;
        snprintf(whyb, sizeof whyb, "%s: %s", search ? "the rule, too large to time both" : "--algo heuristic",
                 l->p.causal ? "causal" : way == ATTN_PLAIN ? "not causal" : "over 64 MiB of scores");
        why = whyb;
    } else {
        const cpu_choice *known = cpu_choice_find(search, l);
        if (known && known->given && !(known->algo[0] >= 0 && known->algo[0] < ATTN_WAYS && known->algo[2] == ATTN_WAYS))
            search->stale++, known = NULL; /* from --algo-cache, and not one of these ways */
        int pick = known ? (int)known->algo[0] : attn_bwd_search(l);
        if (pick < 0)
            return BENCH_ERR_NOMEM;
        if (!known)
            cpu_choice_add(search, l, (const int64_t[3]){pick, 0, ATTN_WAYS});
        way = (attn_bwd_way)pick;
        snprintf(whyb, sizeof whyb, "the faster of %d, timed warm", ATTN_WAYS);
        why = whyb;
    }
    attn_bwd *s = attn_bwd_new(l, way, ws);
    if (!s)
        return BENCH_ERR_NOMEM;
    if (way == ATTN_PLAIN)
        snprintf(impl, len, "plain: the scores kept per head, 5 sgemm (QK^T, dO V^T, dS K, dS^T Q, P^T dO) (%s)", why);
    else
        snprintf(impl, len, "blocks: memory-efficient, the scores recomputed by %dx%d blocks, 6 sgemm (%s)", ATTN_BR,
                 ATTN_BC, why);
    *state = s;
    return BENCH_OK;
}

/* ---- multihead_attention ----------------------------------------------------------------------- */

/* qkv = X W_in^T + b_in again; dO = dY W_out; per (sample, head) over the threads the
 * probabilities, the head's output (for W_out's gradient) and dQ, dK, dV into dqkv, by
 * sgemm; then the projections' gradients and dX = dqkv W_in */
typedef struct mha_bwd {
    float *qkv, *dqkv, *o, *d_o; /* [N S, 3E], [N S, 3E], [N S, E], [N S, E] */
    float *scratch;               /* per thread: P and dS, S x S each */
    int threads;
} mha_bwd;

static bench_status mha_bwd_setup(void *env, const layer *l, const void *w, void **state, char *impl, size_t len,
                                  int64_t *ws)
{
    (void)env, (void)w;
    int64_t ns = l->in.d[0] * l->in.d[1], s = l->in.d[1], e = l->p.embed_dim;
    mha_bwd *m = xcalloc(1, sizeof *m);
    m->threads = omp_get_max_threads();
    int64_t per = 2 * s * s, floats = 8 * ns * e + m->threads * per;
    m->qkv = bench_alloc_floats(floats);
    if (!m->qkv) {
        free(m);
        return BENCH_ERR_NOMEM;
    }
    m->dqkv = m->qkv + 3 * ns * e, m->o = m->dqkv + 3 * ns * e, m->d_o = m->o + ns * e, m->scratch = m->d_o + ns * e;
    *ws = floats * (int64_t)sizeof(float);
    snprintf(impl, len, "sgemm: the projections again then per head P (kept) and its gradients");
    *state = m;
    return BENCH_OK;
}

static void mha_bwd_free(void *env, void *state)
{
    (void)env;
    mha_bwd *m = state;
    if (m)
        free(m->qkv), free(m);
}

/* One (sample, head): P = softmax(scale Q K^T), o = P V, dV = P^T dO, dS = P (dO V^T -
 * rowsum), dQ = scale dS K, dK = scale dS^T Q (its own columns of dqkv: no other head
 * writes them) */
static void mha_bwd_head(const layer *l, mha_bwd *m, float *p, int64_t b, int64_t hd)
{
    int64_t s = l->in.d[1], e = l->p.embed_dim, dh = e / l->p.num_heads, ld = 3 * e;
    float scale = (float)(1.0 / sqrt((double)dh)), *ds = p + s * s;
    const float *q = m->qkv + b * s * ld + hd * dh, *k = q + e, *v = q + 2 * e, *g = m->d_o + b * s * e + hd * dh;
    float *dq = m->dqkv + b * s * ld + hd * dh, *dk = dq + e, *dv = dq + 2 * e;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)s, (blasint)s, (blasint)dh, scale, q, (blasint)ld, k,
                (blasint)ld, 0.0f, p, (blasint)s);
    for (int64_t r = 0; r < s; r++)
        cpu_softmax_row(p + r * s, p + r * s, s);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)s, (blasint)dh, (blasint)s, 1.0f, p, (blasint)s, v,
                (blasint)ld, 0.0f, m->o + b * s * e + hd * dh, (blasint)e);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)s, (blasint)dh, (blasint)s, 1.0f, p, (blasint)s, g,
                (blasint)e, 0.0f, dv, (blasint)ld);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)s, (blasint)s, (blasint)dh, 1.0f, g, (blasint)e, v,
                (blasint)ld, 0.0f, ds, (blasint)s);
    for (int64_t t = 0; t < s; t++) {
        float dot = 0, *pr = p + t * s, *dr = ds + t * s;
        for (int64_t u = 0; u < s; u++)
            dot += pr[u] * dr[u];
        for (int64_t u = 0; u < s; u++)
            dr[u] = pr[u] * (dr[u] - dot);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)s, (blasint)dh, (blasint)s, scale, ds, (blasint)s,
                k, (blasint)ld, 0.0f, dq, (blasint)ld);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)s, (blasint)dh, (blasint)s, scale, ds, (blasint)s, q,
                (blasint)ld, 0.0f, dk, (blasint)ld);
}

static void mha_bwd_run(void *env, const layer *l, void *state, const void *const *ins, const void *w_, void *out)
{
    (void)env;
    mha_bwd *m = state;
    const float *x = ins[0], *dy = DOUT(l, ins), *in_w, *in_b, *out_w, *out_b;
    layer_mha_weights(l, w_, &in_w, &in_b, &out_w, &out_b);
    int64_t n = l->in.d[0], s = l->in.d[1], e = l->p.embed_dim, h = l->p.num_heads, ns = n * s;
    float *dx = out, *dw = dx + ns * e, *d_inb = dw + 3 * e * e, *d_outw = d_inb + (in_b ? 3 * e : 0);
    float *d_outb = d_outw + e * e;
    cpu_project(x, in_w, in_b, m->qkv, ns, e, 3 * e);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)ns, (blasint)e, (blasint)e, 1.0f, dy, (blasint)e,
                out_w, (blasint)e, 0.0f, m->d_o, (blasint)e);
    /* OpenBLAS runs single-threaded inside a parallel region */
#pragma omp parallel for schedule(dynamic) num_threads(m->threads) if (n * h > 1)
    for (int64_t i = 0; i < n * h; i++)
        mha_bwd_head(l, m, m->scratch + (int64_t)omp_get_thread_num() * 2 * s * s, i / h, i % h);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)e, (blasint)e, (blasint)ns, 1.0f, dy, (blasint)e,
                m->o, (blasint)e, 0.0f, d_outw, (blasint)e);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)(3 * e), (blasint)e, (blasint)ns, 1.0f, m->dqkv,
                (blasint)(3 * e), x, (blasint)e, 0.0f, dw, (blasint)e);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)ns, (blasint)e, (blasint)(3 * e), 1.0f, m->dqkv,
                (blasint)(3 * e), in_w, (blasint)e, 0.0f, dx, (blasint)e);
    if (in_b) {
        col_sums(m->dqkv, ns, 3 * e, d_inb);
        col_sums(dy, ns, e, d_outb);
    }
}

const backend_kernel cpu_multihead_attention_bwd_kernel = {.setup = mha_bwd_setup, .run = mha_bwd_run,
                                                           .free = mha_bwd_free};

const backend_kernel cpu_attention_bwd_kernel = {.setup = attn_bwd_setup, .run = attn_bwd_run, .free = attn_bwd_free};

const backend_kernel cpu_conv2d_bwd_kernel = {.setup = conv_bwd_setup, .run = conv_bwd_run, .free = conv_bwd_free,
                                             .parts_enable = halves_enable, .parts_read = halves_read,
                                             .parts = halves_parts};
const backend_kernel cpu_linear_bwd_kernel = {.setup = linear_bwd_setup, .run = linear_bwd_run, .free = halves_free,
                                             .parts_enable = halves_enable, .parts_read = halves_read,
                                             .parts = halves_parts};
const backend_kernel cpu_dropout_kernel = {.run = dropout_run, .impl = "the mask hashed per element (a view outside training)"};
const backend_kernel cpu_dropout_bwd_kernel = {.run = dropout_bwd_run, .impl = "the mask hashed again per element"};
const backend_kernel cpu_batchnorm2d_bwd_kernel = {
    .run = bn_bwd_run, .impl = "per channel (the batch's statistics recomputed from the input)"};
const backend_kernel cpu_act_bwd_kernel = {.run = act_bwd_run, .impl = "direct"};
const backend_kernel cpu_binary_bwd_kernel = {.run = binary_bwd_run, .impl = "direct"};
const backend_kernel cpu_act_bwd16_kernel = {.run = act_bwd16_run,
                                            .impl = "direct, 16-bit in and out, fp32 inside by chunks of 1024"};
const backend_kernel cpu_binary_bwd16_kernel = {.setup = binary_bwd16_setup, .run = binary_bwd16_run,
                                               .free = binary_bwd16_free};
const backend_kernel cpu_pool_bwd_kernel = {.run = pool_bwd_run, .impl = "direct per plane (max: the window searched again)"};
const backend_kernel cpu_norm_bwd_kernel = {.setup = norm_bwd_setup, .run = norm_bwd_run, .free = norm_bwd_free};
const backend_kernel cpu_softmax_bwd_kernel = {.run = softmax_bwd_run, .impl = "from the saved output"};
const backend_kernel cpu_spread_bwd_kernel = {.run = spread_bwd_run, .impl = "direct"};
const backend_kernel cpu_transpose_bwd_kernel = {.run = transpose_bwd_run, .impl = "row copies"};
const backend_kernel cpu_token_bwd_kernel = {.run = token_bwd_run, .impl = "row copies and sums over the batch"};
const backend_kernel cpu_embedding_bwd_kernel = {.run = embedding_bwd_run,
                                                 .impl = "dense table gradient (zeroed then each token's row added)"};

/* ---- the optimizer's update (backend_layers_i.optimizer_update) ------------------------------ */

CPU_ISA_CLONES
static void sgd_span(float *w, const float *g, int64_t n, float lr)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        w[i] -= lr * g[i];
}

CPU_ISA_CLONES
static void adamw_span(float *w, const float *g, float *m, float *v, int64_t n, const backend_optimizer_args *a,
                       float c1, float c2)
{
    float b1 = a->beta1, b2 = a->beta2, decay = 1.0f - a->lr * a->weight_decay;
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        w[i] = w[i] * decay - a->lr * (m[i] * c1) / (sqrtf(v[i] * c2) + a->eps);
    }
}

/* Over the thread pool in spans of 16K parameters: one read of w and g (and m and v), one
 * write of w (and m and v), as torch's single-tensor loops do */
void cpu_optimizer_update(void *ctx, const backend_optimizer_args *a, float *w, const float *g, float *m, float *v,
                          int64_t n)
{
    (void)ctx;
    const int64_t span = 16384;
    int64_t spans = (n + span - 1) / span;
    float c1 = 1.0f / (1.0f - powf(a->beta1, (float)a->t)), c2 = 1.0f / (1.0f - powf(a->beta2, (float)a->t));
    CPU_OMP_IF(n > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t k = 0; k < spans; k++) {
            int64_t at = k * span, len = n - at < span ? n - at : span;
            if (a->kind == OPTIMIZER_SGD)
                sgd_span(w + at, g + at, len, a->lr);
            else
                adamw_span(w + at, g + at, m + at, v + at, len, a, c1, c2);
        });
}
