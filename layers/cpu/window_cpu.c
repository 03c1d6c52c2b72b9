/* The Swin kinds on the CPU (layers/window.c): roll and patch_merge as copies of whole
 * rows, window_attention as one gather of the tokens in window order (padding, roll and
 * partition in one pass), the qkv and proj projections over all tokens on cblas_sgemm,
 * per (window, head) the scores q k^T with the bias and mask, their softmax and the
 * product with v (the windows spread over the threads), and one scatter back;
 * window_partition and window_merge as copies a map row at a time. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

/* ---- roll: two copies per row of the last rolled dim -------------------------------------- */

static void roll_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out_)
{
    (void)env, (void)state, (void)w;
    const float *in = ins[0];
    float *out = out_;
    const shape_t *s = &l->in;
    int64_t last = 0, shift[SHAPE_MAX_RANK] = {0};
    for (int64_t k = 0; k < l->p.roll_dims[0]; k++) {
        int64_t d = l->p.roll_dims[1 + k];
        shift[d] = l->p.roll_shifts[1 + k];
        last = d > last ? d : last;
    }
    int64_t inner = 1, rows = 1, n = s->d[last], k = shift[last];
    for (int64_t d = last + 1; d < s->rank; d++)
        inner *= s->d[d];
    for (int64_t d = 0; d < last; d++)
        rows *= s->d[d];
    CPU_OMP_IF(shape_numel(s) > CPU_PARALLEL_MIN && rows > 1, "omp parallel for schedule(static)",
        for (int64_t r = 0; r < rows; r++) {
            /* the source row: each rolled dim before the last moved back by its shift */
            int64_t rest = r, src = 0, stride = 1;
            for (int64_t d = last - 1; d >= 0; d--) {
                int64_t c = rest % s->d[d];
                rest /= s->d[d];
                src += ((c - shift[d] + s->d[d]) % s->d[d]) * stride;
                stride *= s->d[d];
            }
            const float *x = in + src * n * inner;
            float *y = out + r * n * inner;
            memcpy(y + k * inner, x, (size_t)((n - k) * inner) * sizeof *y);
            memcpy(y, x + (n - k) * inner, (size_t)(k * inner) * sizeof *y);
        });
}

/* ---- patch_merge -------------------------------------------------------------------------- */

static void patch_merge_run(void *env, const layer *l, void *state, const void *const *ins, const void *w,
                            void *out_)
{
    (void)env, (void)state, (void)w;
    const float *in = ins[0];
    float *out = out_;
    int64_t n = l->in.d[0], h = l->in.d[1], wd = l->in.d[2], c = l->in.d[3], ho = l->out.d[1], wo = l->out.d[2];
    CPU_OMP_IF(shape_numel(&l->out) > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t bi = 0; bi < n * ho; bi++) {
            int64_t b = bi / ho, i = bi % ho;
            for (int64_t j = 0; j < wo; j++)
                for (int q = 0; q < 4; q++) {
                    int64_t y = 2 * i + (q & 1), x = 2 * j + (q >> 1);
                    float *dst = out + ((bi * wo + j) * 4 + q) * c;
                    if (y < h && x < wd)
                        memcpy(dst, in + ((b * h + y) * wd + x) * c, (size_t)c * sizeof *dst);
                    else
                        memset(dst, 0, (size_t)c * sizeof *dst);
                }
        });
}

/* ---- window_attention --------------------------------------------------------------------- */

typedef struct window_state {
    int64_t p, nw;        /* tokens per sample (padded), per window */
    int64_t *pixel;       /* [p]: the input pixel of each token in window order, -1 for padding */
    int *label;           /* [p]: mask labels (shifted windows), else NULL */
    float *x;             /* [N p, C]: the tokens in window order; then the proj's output */
    float *qkv;           /* [N p, 3C] */
    float *heads;         /* [N p, C] */
    float *bias;          /* [heads, nw, nw] */
    float *qkv_b;         /* cosine: the qkv bias with its k part zeroed, [3C] */
    float *cpb_hidden;    /* cosine: [rows, hidden], then [rows, heads] after it */
    float *scratch;       /* per thread: scores [nw, nw], and with cosine q and k normalized [2, nw, C/heads] */
    int64_t scratch_floats;
    int threads;
} window_state;

static void window_free(void *env, void *state)
{
    (void)env;
    window_state *s = state;
    if (s)
        free(s->pixel), free(s->label), free(s->x), free(s->qkv), free(s->heads), free(s->bias), free(s->qkv_b),
            free(s->cpb_hidden), free(s->scratch);
    free(s);
}

static bench_status window_setup(void *env, const layer *l, const void *w, void **state, char *impl, size_t len,
                                 int64_t *ws)
{
    (void)w;
    int64_t ph, pw, sh, sw, n = l->in.d[0], c = l->in.d[3], h = l->p.num_heads;
    layer_window_geometry(l, &ph, &pw, &sh, &sw);
    window_state *s = calloc(1, sizeof *s);
    if (!s)
        return BENCH_ERR_NOMEM;
    s->p = ph * pw, s->nw = l->p.window_size[0] * l->p.window_size[1], s->threads = omp_get_max_threads();
    int64_t rows = (2 * l->p.window_size[0] - 1) * (2 * l->p.window_size[1] - 1);
    s->scratch_floats = s->nw * s->nw + (l->p.cosine ? 2 * s->nw * (c / h) : 0);
    s->scratch_floats = (s->scratch_floats + 15) / 16 * 16; /* a cache line apart */
    s->pixel = malloc((size_t)s->p * sizeof *s->pixel);
    s->label = sh || sw ? malloc((size_t)s->p * sizeof *s->label) : NULL;
    s->x = bench_alloc_floats(n * s->p * c);
    s->qkv = bench_alloc_floats(n * s->p * 3 * c);
    s->heads = bench_alloc_floats(n * s->p * c);
    s->bias = bench_alloc_floats(h * s->nw * s->nw);
    s->scratch = bench_alloc_floats(s->threads * s->scratch_floats);
    if (l->p.cosine) {
        s->qkv_b = bench_alloc_floats(3 * c);
        s->cpb_hidden = bench_alloc_floats(rows * (LAYER_WINDOW_CPB_HIDDEN + h));
    }
    if (!s->pixel || ((sh || sw) && !s->label) || !s->x || !s->qkv || !s->heads || !s->bias || !s->scratch ||
        (l->p.cosine && (!s->qkv_b || !s->cpb_hidden))) {
        window_free(env, s);
        return BENCH_ERR_NOMEM;
    }
    for (int64_t t = 0; t < s->p; t++) {
        s->pixel[t] = layer_window_pixel(l, t);
        if (s->label)
            s->label[t] = (int)layer_window_label(l, t);
    }
    *ws = 4 * (n * s->p * 5 * c + h * s->nw * s->nw + s->threads * s->scratch_floats +
               (l->p.cosine ? 3 * c + rows * (LAYER_WINDOW_CPB_HIDDEN + h) : 0));
    snprintf(impl, len, "%ssgemm qkv and proj; per window and head %sQK^T+bias%s softmax AV",
             l->p.partitioned ? "" : "windows gathered; ", l->p.cosine ? "cosine " : "", s->label ? "+mask" : "");
    *state = s;
    return BENCH_OK;
}

/* The position bias of every head and in-window pair, from the table or (cosine) its MLP,
 * as torch computes it at every call. */
static void window_bias(const layer *l, window_state *s, const layer_window_w *r)
{
    int64_t h = l->p.num_heads, nw = s->nw, hid = LAYER_WINDOW_CPB_HIDDEN;
    const float *table = r->table;
    if (l->p.cosine) {
        int64_t rows = (2 * l->p.window_size[0] - 1) * (2 * l->p.window_size[1] - 1);
        float *hidden = s->cpb_hidden, *t = hidden + rows * hid;
        for (int64_t u = 0; u < rows; u++) {
            float xy[2];
            layer_window_cpb_coords(l, u, xy);
            for (int64_t j = 0; j < hid; j++) {
                float z = r->cpb_b1[j] + r->cpb_w1[2 * j] * xy[0] + r->cpb_w1[2 * j + 1] * xy[1];
                hidden[u * hid + j] = z > 0 ? z : 0;
            }
        }
        cpu_project(hidden, r->cpb_w2, NULL, t, rows, hid, h);
        table = t;
    }
    for (int64_t k = 0; k < h; k++)
        for (int64_t i = 0; i < nw; i++)
            for (int64_t j = 0; j < nw; j++) {
                float v = table[layer_window_rel_index(l, i, j) * h + k];
                s->bias[(k * nw + i) * nw + j] = l->p.cosine ? 16.0f / (1.0f + expf(-v)) : v;
            }
}

/* rows x dh at src (stride ld) divided by their norms (F.normalize) into dst [rows, dh] */
static void normalize_rows(const float *src, int64_t ld, float *dst, int64_t rows, int64_t dh)
{
    for (int64_t i = 0; i < rows; i++) {
        float sq = 0;
        for (int64_t d = 0; d < dh; d++)
            sq += src[i * ld + d] * src[i * ld + d];
        float inv = 1.0f / fmaxf(sqrtf(sq), 1e-12f);
        for (int64_t d = 0; d < dh; d++)
            dst[i * dh + d] = src[i * ld + d] * inv;
    }
}

/* One (window, head): scores, bias and mask, softmax, then P V into the heads. */
static void window_head(const layer *l, window_state *s, const layer_window_w *r, int64_t win, int64_t k,
                        float *scratch)
{
    int64_t c = l->in.d[3], dh = c / l->p.num_heads, nw = s->nw;
    const float *q = s->qkv + win * nw * 3 * c + k * dh, *kk = q + c, *v = q + 2 * c;
    float *sc = scratch;
    if (l->p.cosine) {
        float *qn = scratch + nw * nw, *kn = qn + nw * dh;
        normalize_rows(q, 3 * c, qn, nw, dh);
        normalize_rows(kk, 3 * c, kn, nw, dh);
        float ls = expf(fminf(r->logit_scale[k], logf(100.0f)));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)nw, (blasint)nw, (blasint)dh, ls, qn,
                    (blasint)dh, kn, (blasint)dh, 0.0f, sc, (blasint)nw);
    } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)nw, (blasint)nw, (blasint)dh,
                    (float)layer_window_scale(l), q, (blasint)(3 * c), kk, (blasint)(3 * c), 0.0f, sc, (blasint)nw);
    }
    const float *bias = s->bias + k * nw * nw;
    const int *label = s->label ? s->label + (win * nw) % s->p : NULL;
    for (int64_t i = 0; i < nw; i++) {
        float *row = sc + i * nw;
        for (int64_t j = 0; j < nw; j++)
            row[j] += bias[i * nw + j] - (label && label[i] != label[j] ? 100.0f : 0.0f);
        cpu_softmax_row(row, row, nw);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)nw, (blasint)dh, (blasint)nw, 1.0f, sc,
                (blasint)nw, v, (blasint)(3 * c), 0.0f, s->heads + win * nw * c + k * dh, (blasint)c);
}

static void window_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out_)
{
    (void)env;
    window_state *s = state;
    const float *in = ins[0];
    float *out = out_;
    layer_window_w r = layer_window_weights(l, w);
    int64_t n = l->in.d[0], hw = l->in.d[1] * l->in.d[2], c = l->in.d[3], h = l->p.num_heads;
    int64_t tokens = n * s->p, windows = tokens / s->nw;
    window_bias(l, s, &r);
    if (!l->p.partitioned) /* windows given (MaxViT's) are read and written in place */
        CPU_OMP_IF(tokens * c > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
            for (int64_t t = 0; t < tokens; t++) {
                int64_t px = s->pixel[t % s->p];
                if (px < 0)
                    memset(s->x + t * c, 0, (size_t)c * sizeof *s->x);
                else
                    memcpy(s->x + t * c, in + ((t / s->p) * hw + px) * c, (size_t)c * sizeof *s->x);
            });
    const float *qkv_b = r.qkv_b;
    if (l->p.cosine && qkv_b) { /* V2 applies no k bias */
        memcpy(s->qkv_b, qkv_b, (size_t)(3 * c) * sizeof *s->qkv_b);
        memset(s->qkv_b + c, 0, (size_t)c * sizeof *s->qkv_b);
        qkv_b = s->qkv_b;
    }
    cpu_project(l->p.partitioned ? in : s->x, r.qkv_w, qkv_b, s->qkv, tokens, c, 3 * c);
#pragma omp parallel for schedule(dynamic) num_threads(s->threads) if (windows * h > 1)
    for (int64_t task = 0; task < windows * h; task++)
        window_head(l, s, &r, task / h, task % h, s->scratch + omp_get_thread_num() * s->scratch_floats);
    cpu_project(s->heads, r.proj_w, r.proj_b, l->p.partitioned ? out : s->x, tokens, c, c);
    if (!l->p.partitioned)
        CPU_OMP_IF(tokens * c > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
            for (int64_t t = 0; t < tokens; t++) {
                int64_t px = s->pixel[t % s->p];
                if (px >= 0)
                    memcpy(out + ((t / s->p) * hw + px) * c, s->x + t * c, (size_t)c * sizeof *out);
            });
}

/* ---- window_partition and window_merge: [N, C, H, W] <-> [N, G, P, C] --------------------- */

/* One row y of sample b: its W pixels of every channel, between the map and the windows
 * (to_windows: map -> windows). */
static void window_row(const layer *l, const shape_t *map, const float *src, float *dst, int64_t b, int64_t y,
                       bool to_windows)
{
    int64_t w0 = l->p.window_size[0], w1 = l->p.window_size[1], ch = map->d[1], h = map->d[2], wd = map->d[3];
    int64_t across = wd / w1, windows = (h / w0) * across;
    for (int64_t x = 0; x < wd; x++) {
        int64_t g = (y / w0) * across + x / w1, k = (y % w0) * w1 + x % w1;
        int64_t tok = ((b * windows + g) * w0 * w1 + k) * ch, pix = (b * ch * h + y) * wd + x;
        if (to_windows)
            for (int64_t c = 0; c < ch; c++)
                dst[tok + c] = src[pix + c * h * wd];
        else
            for (int64_t c = 0; c < ch; c++)
                dst[pix + c * h * wd] = src[tok + c];
    }
}

static void window_move_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out)
{
    (void)env, (void)state, (void)w;
    bool to_windows = l->kind == LAYER_WINDOW_PARTITION;
    const shape_t *map = to_windows ? &l->in : &l->out;
    int64_t rows = map->d[0] * map->d[2];
    CPU_OMP_IF(shape_numel(map) > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t r = 0; r < rows; r++)
            window_row(l, map, ins[0], out, r / map->d[2], r % map->d[2], to_windows););
}

const backend_kernel cpu_roll_kernel = {.run = roll_run, .impl = "copy"};
const backend_kernel cpu_patch_merge_kernel = {.run = patch_merge_run, .impl = "copy"};
const backend_kernel cpu_window_attention_kernel = {.setup = window_setup, .run = window_run, .free = window_free};
const backend_kernel cpu_window_move_kernel = {.run = window_move_run, .impl = "copy"};
