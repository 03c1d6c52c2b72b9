/* conv2d on the CPU. Paths (with --algo search, the default, every one that applies is
 * timed at setup on the real weights and the fastest kept, as cuDNN's Find does, once
 * per distinct layer for the backend's life (cpu_choices: the chained forward runs what
 * the isolated row ran); with --algo heuristic, the rule in conv_rule):
 *  - gemm-1x1:   1x1 kernel, stride 1, no padding: the input already is the GEMM's B matrix.
 *  - depthwise:  groups == in_channels == out_channels: a direct loop per channel plane,
 *                since a GEMM with M = 1 per group wastes the BLAS.
 *  - im2col+gemm: everything else, per sample and per group, through cblas_sgemm.
 *  - batched:    small outputs (under CONV_MIN_GEMM_N pixels) at batch > 1: several
 *                samples are unfolded side by side so one GEMM gets a useful width
 *                (ResNet's 7x7 maps give N = 49 per sample), then scattered to NCHW.
 *  - winograd:   3x3 stride 1, one group: F(2x2, 3x3) (winograd_cpu.c), in chunks of
 *                tiles per thread; a search candidate only (never the rule).
 *  - chunked:    im2col + GEMM per thread on chunks of output rows (of one group of one
 *                sample) whose unfolded input stays in its L2, OpenBLAS on one thread;
 *                a search candidate only. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

typedef enum { CONV_GEMM_1X1, CONV_DEPTHWISE, CONV_IM2COL, CONV_BATCHED, CONV_WINOGRAD, CONV_CHUNKED } conv_path;

typedef struct conv_state {
    conv_path path;
    int64_t samples;  /* batched: samples per GEMM; winograd: KiB of tiles per chunk; chunked: output rows
                         per chunk */
    float *col;       /* im2col workspace: K x samples*OH*OW floats (chunked: K x rows*OW per thread) */
    float *tmp;       /* batched: GEMM result, OC/groups x samples*OH*OW */
    cpu_winograd *wg; /* winograd: transformed weights and workspace */
} conv_state;

/* GEMM width below which samples are batched, and the most workspace that may take.
 * A GEMM still narrower than CONV_TRANSPOSE_N is computed transposed (pixels x
 * channels): OpenBLAS ran M=512 N=49 K=4608 at ~125 GFLOP/s and its transpose at ~150
 * on the 2-core EPYC VM, while from N=196 up both orders were within noise. */
#define CONV_MIN_GEMM_N 1024
#define CONV_TRANSPOSE_N 128
#define CONV_MAX_BATCHED_BYTES ((int64_t)64 << 20)
#define CONV_MAX_WINOGRAD_BYTES ((int64_t)256 << 20)
/* Winograd's chunk sizes the search tries, KiB of transformed tiles per thread: about a
 * core's L2, and larger chunks for wide layers on small maps (512 channels at 7x7 get
 * 16 tiles per 1 MiB chunk, a narrow GEMM); 0, the whole batch in one chunk with the 16
 * GEMMs split between the threads, is tried too. */
static const int64_t winograd_chunks_kib[] = {1024, 4096, 16384};
/* The chunked path's unfolded input per thread, KiB: candidates. */
static const int64_t chunked_kib[] = {512, 2048};


static void conv_free(void *state)
{
    conv_state *s = state;
    if (s)
        free(s->col), free(s->tmp), cpu_winograd_free(s->wg);
    free(s);
}

/* One algorithm: a path and, for the batched one, the samples per GEMM (Winograd: its
 * chunk size in KiB). */
typedef struct conv_algo {
    conv_path path;
    int64_t samples;
} conv_algo;

static bool is_pointwise(const layer_params *p)
{
    return p->kernel[0] == 1 && p->kernel[1] == 1 && p->stride[0] == 1 && p->stride[1] == 1 && p->padding[0] == 0 &&
           p->padding[1] == 0;
}

static int64_t conv_k(const layer *l)
{
    return (l->in.d[1] / l->p.groups) * l->p.kernel[0] * l->p.kernel[1];
}

/* Output rows per chunk for about kib KiB of unfolded input (at least one row). */
static int64_t chunk_rows(const layer *l, int64_t kib)
{
    int64_t rows = (kib << 10) / (4 * conv_k(l) * l->out.d[3]);
    return rows < 1 ? 1 : rows > l->out.d[2] ? l->out.d[2] : rows;
}

static int64_t batched_bytes(const layer *l, int64_t samples)
{
    return 4 * (conv_k(l) + l->p.out_channels / l->p.groups) * samples * l->out.d[2] * l->out.d[3];
}

/* The rule (--algo heuristic, and the first candidate of the search). */
static conv_algo conv_rule(const layer *l)
{
    const layer_params *p = &l->p;
    int64_t c = l->in.d[1], ohw = l->out.d[2] * l->out.d[3];
    if (p->groups == c && p->out_channels == c && c > 1)
        return (conv_algo){CONV_DEPTHWISE, 1};
    if ((l->in.d[0] > 1 && ohw < CONV_MIN_GEMM_N) || ohw < CONV_TRANSPOSE_N) {
        int64_t samples = (CONV_MIN_GEMM_N + ohw - 1) / ohw;
        if (samples > l->in.d[0])
            samples = l->in.d[0];
        while (samples > 1 && batched_bytes(l, samples) > CONV_MAX_BATCHED_BYTES)
            samples--;
        return (conv_algo){CONV_BATCHED, samples};
    }
    return (conv_algo){is_pointwise(p) ? CONV_GEMM_1X1 : CONV_IM2COL, 1};
}

/* A state with its workspace (w: the weights, which Winograd transforms), or NULL when
 * out of memory. */
static conv_state *conv_state_new(const layer *l, conv_algo a, const float *w, int64_t *workspace_bytes)
{
    conv_state *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    int64_t ohw = l->out.d[2] * l->out.d[3], ocg = l->p.out_channels / l->p.groups;
    s->path = a.path;
    s->samples = a.samples;
    *workspace_bytes = 0;
    if (s->path == CONV_IM2COL || s->path == CONV_BATCHED) {
        s->col = bench_alloc_floats(conv_k(l) * s->samples * ohw);
        s->tmp = s->path == CONV_BATCHED ? bench_alloc_floats(ocg * s->samples * ohw) : NULL;
        *workspace_bytes = 4 * (conv_k(l) + (s->tmp ? ocg : 0)) * s->samples * ohw;
        if (!s->col || (s->path == CONV_BATCHED && !s->tmp)) {
            conv_free(s);
            return NULL;
        }
    }
    if (s->path == CONV_CHUNKED) {
        int64_t floats = (int64_t)omp_get_max_threads() * conv_k(l) * s->samples * l->out.d[3];
        *workspace_bytes = 4 * floats;
        if (!(s->col = bench_alloc_floats(floats))) {
            conv_free(s);
            return NULL;
        }
    }
    if (s->path == CONV_WINOGRAD) {
        *workspace_bytes = cpu_winograd_bytes(l, s->samples << 10);
        if (!(s->wg = cpu_winograd_new(l, w, s->samples << 10))) {
            conv_free(s);
            return NULL;
        }
    }
    return s;
}

/* Every algorithm that applies, the rule's first: samples one at a time (the direct
 * 1x1 GEMM or im2col), and for maps small enough that a GEMM per sample is narrow,
 * 1, 2, 4, ... samples per GEMM up to the batch, within the workspace limit. */
#define CONV_MAX_CANDIDATES 12
#define CONV_SEARCH_MAX_N 4096

static void add_candidate(conv_algo *c, int *n, conv_algo a)
{
    for (int j = 0; j < *n; j++)
        if (c[j].path == a.path && c[j].samples == a.samples)
            return;
    if (*n < CONV_MAX_CANDIDATES)
        c[(*n)++] = a;
}

static int conv_candidates(const layer *l, conv_algo *c)
{
    int n = 0;
    add_candidate(c, &n, conv_rule(l));
    if (c[0].path == CONV_DEPTHWISE)
        return n;
    int64_t batch = l->in.d[0], ohw = l->out.d[2] * l->out.d[3];
    add_candidate(c, &n, (conv_algo){is_pointwise(&l->p) ? CONV_GEMM_1X1 : CONV_IM2COL, 1});
    /* chunked im2col, at each size that gives a different chunk */
    for (size_t k = 0; !is_pointwise(&l->p) && k < sizeof chunked_kib / sizeof *chunked_kib; k++)
        add_candidate(c, &n, (conv_algo){CONV_CHUNKED, chunk_rows(l, chunked_kib[k])});
    /* Winograd, at each chunk size that gives a different chunk */
    for (size_t k = 0; cpu_winograd_applies(l) && k < sizeof winograd_chunks_kib / sizeof *winograd_chunks_kib; k++) {
        int64_t kib = winograd_chunks_kib[k];
        if (k > 0 && cpu_winograd_tiles(l, kib << 10) == cpu_winograd_tiles(l, winograd_chunks_kib[k - 1] << 10))
            break;
        if (cpu_winograd_bytes(l, kib << 10) <= CONV_MAX_WINOGRAD_BYTES)
            add_candidate(c, &n, (conv_algo){CONV_WINOGRAD, kib});
    }
    if (cpu_winograd_applies(l) && cpu_winograd_bytes(l, 0) <= CONV_MAX_WINOGRAD_BYTES)
        add_candidate(c, &n, (conv_algo){CONV_WINOGRAD, 0});
    for (int64_t k = 1; ohw < CONV_SEARCH_MAX_N; k *= 2) {
        int64_t samples = k < batch ? k : batch;
        if (batched_bytes(l, samples) > CONV_MAX_BATCHED_BYTES)
            break;
        if (samples > 1 || ohw < CONV_TRANSPOSE_N) /* one sample untransposed is im2col plus a copy */
            add_candidate(c, &n, (conv_algo){CONV_BATCHED, samples});
        if (samples == batch || n == CONV_MAX_CANDIDATES)
            break;
    }
    return n;
}

static void conv_run(const layer *l, void *state, const float *const *ins, const float *w, float *out);

/* The best of up to three timed runs after one untimed one, within about 50 ms. */
static double conv_time(const layer *l, conv_state *s, const float *in, const float *w, float *out)
{
    const float *ins[1] = {in};
    conv_run(l, s, ins, w, out);
    double best = 1e30, spent = 0.0;
    for (int r = 0; r < 3 && spent < 0.05; r++) {
        double t0 = bench_now();
        conv_run(l, s, ins, w, out);
        double dt = bench_now() - t0;
        spent += dt;
        best = dt < best ? dt : best;
    }
    return best;
}

/* LAYERBENCH_CPU_CONV_ALGO forces one algorithm where it applies (tests, experiments):
 * "im2col", "gemm-1x1", "winograd" (chunks of 1 MiB), "winograd:KIB" (0: the whole
 * batch, GEMMs split), "chunked:ROWS" or "batched:N". */
static bool conv_forced(const layer *l, conv_algo *a)
{
    const char *e = getenv("LAYERBENCH_CPU_CONV_ALGO");
    if (!e || !*e || conv_rule(l).path == CONV_DEPTHWISE)
        return false;
    long long n;
    if (strcmp(e, "im2col") == 0)
        *a = (conv_algo){CONV_IM2COL, 1};
    else if (strcmp(e, "gemm-1x1") == 0 && is_pointwise(&l->p))
        *a = (conv_algo){CONV_GEMM_1X1, 1};
    else if (strcmp(e, "winograd") == 0 && cpu_winograd_applies(l))
        *a = (conv_algo){CONV_WINOGRAD, winograd_chunks_kib[0]};
    else if (sscanf(e, "winograd:%lld", &n) == 1 && n >= 0 && cpu_winograd_applies(l))
        *a = (conv_algo){CONV_WINOGRAD, (int64_t)n};
    else if (sscanf(e, "chunked:%lld", &n) == 1 && n >= 1)
        *a = (conv_algo){CONV_CHUNKED, n < l->out.d[2] ? (int64_t)n : l->out.d[2]};
    else if (sscanf(e, "batched:%lld", &n) == 1 && n >= 1)
        *a = (conv_algo){CONV_BATCHED, n < l->in.d[0] ? (int64_t)n : l->in.d[0]};
    else
        return false;
    return true;
}

/* The fastest candidate on scratch data with the real weights: its index, or -1 when
 * out of memory. */
static int conv_search(const layer *l, const float *w, const conv_algo *cand, int n)
{
    int64_t in_n = shape_numel(&l->in), out_n = shape_numel(&l->out);
    float *in = bench_alloc_floats(in_n), *out = bench_alloc_floats(out_n);
    int best = -1;
    double best_s = 1e30;
    if (in && out) {
        for (int64_t i = 0; i < in_n; i++)
            in[i] = (float)(i % 17) * 0.0625f - 0.5f;
        for (int i = 0; i < n; i++) {
            int64_t ws;
            conv_state *s = conv_state_new(l, cand[i], w, &ws);
            if (!s)
                continue;
            double t = conv_time(l, s, in, w, out);
            conv_free(s);
            if (t < best_s)
                best_s = t, best = i;
        }
    }
    free(in), free(out);
    return best;
}

static bench_status conv_setup(const layer *l, const float *w, cpu_choices *search, void **state, char *impl,
                               size_t impl_len, int64_t *workspace_bytes)
{
    conv_algo cand[CONV_MAX_CANDIDATES];
    int n = conv_candidates(l, cand);
    conv_algo chosen = cand[0];
    const cpu_choice *known = search ? cpu_choice_find(search, l) : NULL;
    if (conv_forced(l, &chosen)) {
        n = 1;
    } else if (known) {
        chosen = (conv_algo){(conv_path)known->algo[0], known->algo[1]};
        n = (int)known->algo[2];
    } else if (search && n > 1) {
        int best = conv_search(l, w, cand, n);
        if (best < 0)
            return BENCH_ERR_NOMEM;
        chosen = cand[best];
        cpu_choice_add(search, l, (const int64_t[3]){chosen.path, chosen.samples, n});
    }
    conv_state *s = conv_state_new(l, chosen, w, workspace_bytes);
    if (!s)
        return BENCH_ERR_NOMEM;
    static const char *names[] = {"gemm-1x1", "depthwise-direct", "im2col+sgemm", "im2col+sgemm",
                                  "winograd F2x2/3x3", "im2col+sgemm per thread"};
    int64_t ohw = l->out.d[2] * l->out.d[3];
    int at = s->path == CONV_BATCHED
                 ? snprintf(impl, impl_len, "im2col+sgemm%s x%lld sample%s", s->samples * ohw < CONV_TRANSPOSE_N ? "^T" : "",
                            (long long)s->samples, s->samples > 1 ? "s" : "")
             : s->path == CONV_CHUNKED
                 ? snprintf(impl, impl_len, "%s x%lld-row chunks", names[s->path], (long long)s->samples)
             : s->path == CONV_WINOGRAD && s->samples == 0
                 ? snprintf(impl, impl_len, "%s whole batch with GEMMs over threads", names[s->path])
             : s->path == CONV_WINOGRAD
                 ? snprintf(impl, impl_len, "%s x%lld-tile chunks", names[s->path],
                            (long long)cpu_winograd_tiles(l, s->samples << 10))
                 : snprintf(impl, impl_len, "%s", names[s->path]);
    if (search && n > 1 && at >= 0 && (size_t)at < impl_len)
        snprintf(impl + at, impl_len - (size_t)at, " (fastest of %d)", n);
    *state = s;
    return BENCH_OK;
}

/* Row r (ci, i, j) of one group's unfolding, output rows [y0, y1): the input pixels
 * that kernel tap (i, j) of channel ci meets at each output position, zeros where it
 * falls in padding, into dst ((y1 - y0) * OW floats). */
CPU_ISA_CLONES static void im2col_row(const layer *l, const float *in, float *dst, int64_t r, int64_t y0, int64_t y1)
{
    const layer_params *p = &l->p;
    int64_t h = l->in.d[2], w = l->in.d[3];
    int64_t kh = p->kernel[0], kw = p->kernel[1], ow = l->out.d[3];
    int64_t sh = p->stride[0], sw = p->stride[1], ph = p->padding[0], pw = p->padding[1];
    int64_t dh = p->dilation[0], dw = p->dilation[1];
    int64_t ci = r / (kh * kw), i = (r / kw) % kh, j = r % kw;
    const float *src = in + ci * h * w;
    /* output columns x whose input column x*sw - pw + j*dw lies inside [0, w) */
    int64_t off = j * dw - pw;
    int64_t x0 = off >= 0 ? 0 : (-off + sw - 1) / sw;
    int64_t x1 = w - off <= 0 ? 0 : (w - off + sw - 1) / sw;
    if (x1 > ow)
        x1 = ow;
    if (x0 > x1)
        x0 = x1;
    for (int64_t y = y0; y < y1; y++) {
        int64_t iy = y * sh - ph + i * dh;
        float *d = dst + (y - y0) * ow;
        if (iy < 0 || iy >= h) {
            memset(d, 0, (size_t)ow * sizeof *d);
            continue;
        }
        const float *s = src + iy * w + off;
        for (int64_t x = 0; x < x0; x++)
            d[x] = 0.0f;
        if (sw == 1)
            memcpy(d + x0, s + x0, (size_t)(x1 - x0) * sizeof *d);
        else
            for (int64_t x = x0; x < x1; x++)
                d[x] = s[x * sw];
        for (int64_t x = x1; x < ow; x++)
            d[x] = 0.0f;
    }
}

/* Unfolds one group of one sample: row r of col (rows ld floats apart) is im2col_row's
 * over every output row. */
static void im2col(const layer *l, const float *in, float *col, int64_t ld)
{
    int64_t rows = conv_k(l), oh = l->out.d[2], ow = l->out.d[3];
#pragma omp parallel for schedule(static) if (rows * oh * ow > CPU_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++)
        im2col_row(l, in, col + r * ld, r, 0, oh);
}

static void fill_bias(float *out, const float *bias, int64_t channels, int64_t plane)
{
#pragma omp parallel for schedule(static) if (channels * plane > CPU_PARALLEL_MIN)
    for (int64_t c = 0; c < channels; c++)
        for (int64_t i = 0; i < plane; i++)
            out[c * plane + i] = bias[c];
}

static void depthwise(const layer *l, const float *in, const float *w, const float *bias, float *out)
{
    const layer_params *p = &l->p;
    int64_t planes = l->in.d[0] * l->in.d[1], c = l->in.d[1], h = l->in.d[2], wd = l->in.d[3];
    int64_t kh = p->kernel[0], kw = p->kernel[1], oh = l->out.d[2], ow = l->out.d[3];
#pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < planes; pl++) {
        const float *src = in + pl * h * wd, *k = w + (pl % c) * kh * kw;
        float *dst = out + pl * oh * ow;
        float b = bias ? bias[pl % c] : 0.0f;
        for (int64_t y = 0; y < oh; y++)
            for (int64_t x = 0; x < ow; x++) {
                float acc = b;
                for (int64_t i = 0; i < kh; i++) {
                    int64_t iy = y * p->stride[0] - p->padding[0] + i * p->dilation[0];
                    if (iy < 0 || iy >= h)
                        continue;
                    for (int64_t j = 0; j < kw; j++) {
                        int64_t ix = x * p->stride[1] - p->padding[1] + j * p->dilation[1];
                        if (ix >= 0 && ix < wd)
                            acc += src[iy * wd + ix] * k[i * kw + j];
                    }
                }
                dst[y * ow + x] = acc;
            }
    }
}

/* Several samples per GEMM: unfold them side by side (sample j in columns
 * [j*OHW, (j+1)*OHW)), multiply once, then copy each sample's block (plus bias) out.
 * A product still narrower than CONV_TRANSPOSE_N is computed as col^T W^T, giving
 * tmp[pixel][channel], and transposed back while copying. */
static void batched(const layer *l, const conv_state *s, const float *in, const float *w, const float *bias,
                    float *out)
{
    const layer_params *p = &l->p;
    int64_t n = l->in.d[0], c = l->in.d[1], hw = l->in.d[2] * l->in.d[3];
    int64_t oc = l->out.d[1], ohw = l->out.d[2] * l->out.d[3];
    int64_t g = p->groups, cg = c / g, ocg = oc / g, k = cg * p->kernel[0] * p->kernel[1];
    for (int64_t b0 = 0; b0 < n; b0 += s->samples) {
        int64_t bs = n - b0 < s->samples ? n - b0 : s->samples, ld = bs * ohw;
        for (int64_t gi = 0; gi < g; gi++) {
            for (int64_t j = 0; j < bs; j++)
                im2col(l, in + ((b0 + j) * c + gi * cg) * hw, s->col + j * ohw, ld);
            bool t = ld < CONV_TRANSPOSE_N;
            if (t)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasTrans, (blasint)ld, (blasint)ocg, (blasint)k, 1.0f, s->col,
                            (blasint)ld, w + gi * ocg * k, (blasint)k, 0.0f, s->tmp, (blasint)ocg);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)ocg, (blasint)ld, (blasint)k, 1.0f,
                            w + gi * ocg * k, (blasint)k, s->col, (blasint)ld, 0.0f, s->tmp, (blasint)ld);
            /* element (o, pixel p of the batch) of the product */
            int64_t so = t ? 1 : ld, sp = t ? ocg : 1;
#pragma omp parallel for schedule(static) if (ocg * ld > CPU_PARALLEL_MIN)
            for (int64_t o = 0; o < ocg; o++)
                for (int64_t j = 0; j < bs; j++) {
                    const float *src = s->tmp + o * so + j * ohw * sp;
                    float *dst = out + ((b0 + j) * oc + gi * ocg + o) * ohw;
                    float b = bias ? bias[gi * ocg + o] : 0.0f;
                    for (int64_t i = 0; i < ohw; i++)
                        dst[i] = src[i * sp] + b;
                }
        }
    }
}

/* Chunks of s->samples output rows of one group of one sample, one per thread at a
 * time: its unfolded input into the thread's part of s->col, then one GEMM (OpenBLAS on
 * one thread inside the parallel region) straight into the output rows. */
static void chunked(const layer *l, const conv_state *s, const float *in, const float *w, const float *bias,
                    float *out)
{
    int64_t n = l->in.d[0], c = l->in.d[1], hw = l->in.d[2] * l->in.d[3];
    int64_t oc = l->out.d[1], oh = l->out.d[2], ow = l->out.d[3], ohw = oh * ow;
    int64_t g = l->p.groups, cg = c / g, ocg = oc / g, k = conv_k(l), rows = s->samples;
    int64_t per_plane = (oh + rows - 1) / rows, chunks = n * g * per_plane;
#pragma omp parallel
    {
        float *col = s->col + (int64_t)omp_get_thread_num() * k * rows * ow;
#pragma omp for schedule(dynamic)
        for (int64_t t = 0; t < chunks; t++) {
            int64_t b = t / (g * per_plane), gi = (t / per_plane) % g, y0 = (t % per_plane) * rows;
            int64_t y1 = y0 + rows < oh ? y0 + rows : oh, cols = (y1 - y0) * ow;
            const float *src = in + (b * c + gi * cg) * hw;
            for (int64_t r = 0; r < k; r++)
                im2col_row(l, src, col + r * cols, r, y0, y1);
            float *dst = out + (b * oc + gi * ocg) * ohw + y0 * ow;
            for (int64_t o = 0; bias && o < ocg; o++)
                for (int64_t i = 0; i < cols; i++)
                    dst[o * ohw + i] = bias[gi * ocg + o];
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)ocg, (blasint)cols, (blasint)k, 1.0f,
                        w + gi * ocg * k, (blasint)k, col, (blasint)cols, bias ? 1.0f : 0.0f, dst, (blasint)ohw);
        }
    }
}

static void conv_run(const layer *l, void *state, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    const conv_state *s = state;
    const layer_params *p = &l->p;
    int64_t n = l->in.d[0], c = l->in.d[1], hw = l->in.d[2] * l->in.d[3];
    int64_t oc = l->out.d[1], ohw = l->out.d[2] * l->out.d[3];
    int64_t g = p->groups, cg = c / g, ocg = oc / g, k = cg * p->kernel[0] * p->kernel[1];
    const float *bias = p->bias ? w + oc * k : NULL;
    if (s->path == CONV_DEPTHWISE) {
        depthwise(l, in, w, bias, out);
        return;
    }
    if (s->path == CONV_BATCHED) {
        batched(l, s, in, w, bias, out);
        return;
    }
    if (s->path == CONV_WINOGRAD) {
        cpu_winograd_run(l, s->wg, in, bias, out);
        return;
    }
    if (s->path == CONV_CHUNKED) {
        chunked(l, s, in, w, bias, out);
        return;
    }
    for (int64_t b = 0; b < n; b++) {
        float *ob = out + b * oc * ohw;
        if (bias)
            fill_bias(ob, bias, oc, ohw);
        for (int64_t gi = 0; gi < g; gi++) {
            const float *src = in + (b * c + gi * cg) * hw;
            if (s->path == CONV_IM2COL) {
                im2col(l, src, s->col, ohw);
                src = s->col;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)ocg, (blasint)ohw, (blasint)k,
                        1.0f, w + gi * ocg * k, (blasint)k, src, (blasint)ohw, bias ? 1.0f : 0.0f,
                        ob + gi * ocg * ohw, (blasint)ohw);
        }
    }
}

const cpu_kernel cpu_conv2d_kernel = {.setup = conv_setup, .run = conv_run, .free = conv_free};
