/* The decoder kinds on the CPU (layers/llm.c says what each computes): embedding as row
 * copies, rmsnorm and rope as vectorised loops (rope's cosines and sines tabulated at
 * setup, as Hugging Face computes them once per forward, outside the layers), and
 * attention per (sample, head) over the threads: each query's scores against the keys
 * its mask keeps (the cache's, then the new tokens'), their softmax, and the weighted
 * sum of the values; decode (one query) streams the cache once. In bf16, attention reads
 * q, k, v and the cache as bf16 and computes in fp32 (the query widened once, each key
 * and value on the fly), so the cache is read at its own size; the other kinds run on
 * fp32 copies (convert_cpu.c). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "fast_math.h"

/* ---- embedding --------------------------------------------------------------------------- */

static void embedding_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w_, void *out_)
{
    (void)env, (void)state;
    const float *ids = ins_[0], *w = w_;
    float *out = out_;
    int64_t n = shape_numel(&l->in), d = l->p.embedding_dim;
    CPU_OMP_IF(n * d > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t i = 0; i < n; i++)
            memcpy(out + i * d, w + layer_token_id(l, ids[i]) * d, (size_t)d * sizeof *out););
}

const backend_kernel cpu_embedding_kernel = {.run = embedding_run, .impl = "row copies"};

/* ---- rmsnorm ----------------------------------------------------------------------------- */

CPU_ISA_CLONES
static void rmsnorm_row(const float *x, float *y, int64_t d, const float *w, float eps)
{
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t i = 0; i < d; i++)
        sq += x[i] * x[i];
    float inv = 1.0f / sqrtf(sq / (float)d + eps);
#pragma omp simd
    for (int64_t i = 0; i < d; i++)
        y[i] = x[i] * inv * w[i];
}

static void rmsnorm_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w, void *out_)
{
    (void)env, (void)state;
    const float *in = ins_[0];
    float *out = out_;
    int64_t d = l->p.normalized_shape, rows = shape_numel(&l->in) / d;
    float eps = (float)l->p.eps;
    CPU_OMP_IF(rows * d > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t r = 0; r < rows; r++)
            rmsnorm_row(in + r * d, out + r * d, d, w, eps););
}

const backend_kernel cpu_rmsnorm_kernel = {.run = rmsnorm_run, .impl = "direct"};

/* ---- rope -------------------------------------------------------------------------------- */

typedef struct rope_state {
    float *cos, *sin; /* [T][head_dim / 2] */
} rope_state;

static bench_status rope_setup(void *env, const layer *l, const void *w, void **state, char *impl, size_t len,
                               int64_t *ws)
{
    (void)env, (void)w;
    int64_t t_len = l->in.d[1], half = l->p.head_dim / 2;
    rope_state *s = xcalloc(1, sizeof *s);
    s->cos = xmalloc((size_t)(t_len * half) * sizeof *s->cos);
    s->sin = xmalloc((size_t)(t_len * half) * sizeof *s->sin);
    float *inv = xmalloc((size_t)half * sizeof *inv);
    layer_rope_inv_freq(l, inv);
    for (int64_t t = 0; t < t_len; t++)
        for (int64_t i = 0; i < half; i++) {
            double a = layer_rope_angle(l, inv, t, i);
            s->cos[t * half + i] = (float)cos(a), s->sin[t * half + i] = (float)sin(a);
        }
    free(inv);
    *ws = 2 * t_len * half * (int64_t)sizeof(float);
    snprintf(impl, len, "rotate-half, cos/sin tabulated at setup");
    *state = s;
    return BENCH_OK;
}

CPU_ISA_CLONES
static void rope_head(const float *x, float *y, const float *c, const float *s, int64_t half)
{
#pragma omp simd
    for (int64_t i = 0; i < half; i++) {
        float a = x[i], b = x[i + half];
        y[i] = a * c[i] - b * s[i];
        y[i + half] = b * c[i] + a * s[i];
    }
}

static void rope_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w, void *out_)
{
    (void)env, (void)w;
    const rope_state *s = state;
    const float *in = ins_[0];
    float *out = out_;
    int64_t rows = l->in.d[0] * l->in.d[1], t_len = l->in.d[1], heads = l->p.num_heads, d = l->p.head_dim;
    CPU_OMP_IF(rows * heads * d > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t r = 0; r < rows; r++) {
            int64_t t = r % t_len;
            for (int64_t h = 0; h < heads; h++)
                rope_head(in + (r * heads + h) * d, out + (r * heads + h) * d, s->cos + t * (d / 2),
                          s->sin + t * (d / 2), d / 2);
        });
}

static void rope_free(void *env, void *state)
{
    (void)env;
    rope_state *s = state;
    if (s)
        free(s->cos), free(s->sin), free(s);
}

const backend_kernel cpu_rope_kernel = {.setup = rope_setup, .run = rope_run, .free = rope_free};

/* ---- attention --------------------------------------------------------------------------- */

typedef struct attention_state {
    float *scores; /* per thread: one query's scores over every key, then (bf16) the query
                      widened and the output's sums */
    int64_t keys, per_thread;
    int threads;
} attention_state;

static bench_status attention_setup(void *env, const layer *l, const void *w, void **state, char *impl, size_t len,
                                    int64_t *ws)
{
    (void)env, (void)w;
    attention_state *s = xcalloc(1, sizeof *s);
    s->keys = l->p.kv_len + l->in.d[1];
    s->per_thread = s->keys + 2 * l->p.head_dim;
    s->threads = omp_get_max_threads();
    s->scores = xmalloc((size_t)(s->per_thread * s->threads) * sizeof *s->scores);
    *ws = s->per_thread * s->threads * (int64_t)sizeof(float);
    snprintf(impl, len, "per (sample, head) over threads%s%s", l->dtype == DTYPE_BF16 ? ", bf16 in, fp32 sums" : "",
             l->p.kv_len ? ", cache read once per query" : "");
    *state = s;
    return BENCH_OK;
}

CPU_ISA_CLONES
static float dot(const float *a, const float *b, int64_t d)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < d; i++)
        s += a[i] * b[i];
    return s;
}

CPU_ISA_CLONES
static void axpy(float a, const float *x, float *y, int64_t d)
{
#pragma omp simd
    for (int64_t i = 0; i < d; i++)
        y[i] += a * x[i];
}

/* bf16 as fp32: the top half of the float's bits */
CPU_ISA_CLONES
static float dot_bf16(const float *a, const uint16_t *b, int64_t d)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < d; i++) {
        union { uint32_t u; float f; } v = {.u = (uint32_t)b[i] << 16};
        s += a[i] * v.f;
    }
    return s;
}

CPU_ISA_CLONES
static void axpy_bf16(float a, const uint16_t *x, float *y, int64_t d)
{
#pragma omp simd
    for (int64_t i = 0; i < d; i++) {
        union { uint32_t u; float f; } v = {.u = (uint32_t)x[i] << 16};
        y[i] += a * v.f;
    }
}

/* The keys query t sees: [j0, j1] (layer_attention_sees: a contiguous range). */
static void attention_range(const layer *l, int64_t t, int64_t *j0, int64_t *j1)
{
    const layer_params *p = &l->p;
    int64_t keys = p->kv_len + l->in.d[1], i = p->kv_len + t;
    *j1 = p->causal ? i : keys - 1;
    *j0 = p->causal && p->sliding_window > 0 ? i - p->sliding_window + 1 : 0;
    *j0 = *j0 < 0 ? 0 : *j0;
}

/* One query in bf16: q, the keys, the values and y bf16; sums in fp32 (qf, acc: d
 * floats of the thread's). */
static void attention_query_bf16(const layer *l, const uint16_t *const *ins, const uint16_t *w, int64_t b, int64_t hh,
                                 int64_t g, int64_t t, float *sc, float *qf, float *acc, uint16_t *y)
{
    const layer_params *p = &l->p;
    int64_t d = p->head_dim, j0, j1;
    attention_range(l, t, &j0, &j1);
    dtype_to_f32(DTYPE_BF16, qf, ins[0] + ((b * l->in.d[1] + t) * p->num_heads + hh) * d, d);
    float scale = 1.0f / sqrtf((float)d), top = -INFINITY, sum = 0.0f;
    int source;
    for (int64_t j = j0; j <= j1; j++) {
        int64_t at = layer_attention_kv_at(l, 0, b, g, j, &source);
        sc[j] = dot_bf16(qf, (source ? ins[source] : w) + at, d) * scale;
        top = sc[j] > top ? sc[j] : top;
    }
    for (int64_t j = j0; j <= j1; j++)
        sum += (sc[j] = lb_expf(sc[j] - top));
    memset(acc, 0, (size_t)d * sizeof *acc);
    for (int64_t j = j0; j <= j1; j++) {
        int64_t at = layer_attention_kv_at(l, 1, b, g, j, &source);
        axpy_bf16(sc[j] / sum, (source ? ins[source] : w) + at, acc, d);
    }
    dtype_from_f32(DTYPE_BF16, y, acc, d);
}

/* One query: the keys [j0, j1] it sees (layer_attention_sees: a contiguous range). */
static void attention_query(const layer *l, const float *const *ins, const float *w, int64_t b, int64_t hh,
                            int64_t g, int64_t t, float *sc, float *y)
{
    const layer_params *p = &l->p;
    int64_t d = p->head_dim, j0, j1;
    attention_range(l, t, &j0, &j1);
    const float *q = ins[0] + ((b * l->in.d[1] + t) * p->num_heads + hh) * d;
    float scale = 1.0f / sqrtf((float)d), top = -INFINITY, sum = 0.0f;
    for (int64_t j = j0; j <= j1; j++) {
        sc[j] = dot(q, layer_attention_kv(l, ins, w, 0, b, g, j), d) * scale;
        top = sc[j] > top ? sc[j] : top;
    }
    for (int64_t j = j0; j <= j1; j++)
        sum += (sc[j] = lb_expf(sc[j] - top));
    memset(y, 0, (size_t)d * sizeof *y);
    for (int64_t j = j0; j <= j1; j++)
        axpy(sc[j] / sum, layer_attention_kv(l, ins, w, 1, b, g, j), y, d);
}

static void attention_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w_, void *out_)
{
    (void)env;
    attention_state *s = state;
    const layer_params *p = &l->p;
    int64_t n = l->in.d[0], t_len = l->in.d[1], h = p->num_heads, d = p->head_dim, group = h / p->num_kv_heads;
    bool bf16 = l->dtype == DTYPE_BF16;
    CPU_OMP_IF(n * h > 1 && l->flops > 4 * CPU_PARALLEL_MIN, "omp parallel for schedule(dynamic)",
        for (int64_t task = 0; task < n * h; task++) {
            int64_t b = task / h, hh = task % h;
            int th = omp_get_thread_num();
            float *sc = s->scores + (th < s->threads ? th : 0) * s->per_thread;
            for (int64_t t = 0; t < t_len; t++) {
                int64_t at = ((b * t_len + t) * h + hh) * d;
                if (bf16)
                    attention_query_bf16(l, (const uint16_t *const *)ins_, w_, b, hh, hh / group, t, sc, sc + s->keys,
                                         sc + s->keys + d, (uint16_t *)out_ + at);
                else
                    attention_query(l, (const float *const *)ins_, w_, b, hh, hh / group, t, sc, (float *)out_ + at);
            }
        });
}

static void attention_free(void *env, void *state)
{
    (void)env;
    attention_state *s = state;
    if (s)
        free(s->scores), free(s);
}

const backend_kernel cpu_attention_kernel = {.setup = attention_setup, .run = attention_run, .free = attention_free};
