/* Memory-bound kinds on the CPU: batchnorm2d, the activations, add, mul (broadcast),
 * concat, and the views (flatten, dropout, stochastic_depth), whose run does nothing
 * because the output is the input. */
#include <math.h>
#include <string.h>

#include "cpu_kernels.h"
#include "fast_math.h"

/* bf16 in fp32 registers: widening is exact (the top half of an fp32); narrowing rounds
 * to nearest even as vcvtneps2bf16 does, NaN kept a NaN, in integer steps the loops
 * vectorise. */
static inline float bf16_load(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t bf16_store(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1)) >> 16;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40 : r);
}

CPU_ISA_CLONES
static void affine_span(const float *x, float *y, int64_t n, float scale, float shift)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * scale + shift;
}

CPU_ISA_CLONES
static void affine_span16(const uint16_t *x, uint16_t *y, int64_t n, float scale, float shift)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        y[i] = bf16_store(bf16_load(x[i]) * scale + shift);
}

/* batchnorm2d in bf16: the statistics widened once per channel, the planes in fp32
 * registers. */
static void bn_bf16_run(void *env, const layer *l, void *state, const void *const *ins, const void *w_, void *out_)
{
    (void)env, (void)state;
    const uint16_t *in = ins[0], *w = w_;
    uint16_t *out = out_;
    int64_t n = l->in.d[0], c = l->in.d[1], hw = l->in.d[2] * l->in.d[3];
    float eps = (float)l->p.eps;
    CPU_OMP_IF(n * c * hw > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t pl = 0; pl < n * c; pl++) {
            int64_t ch = pl % c;
            float scale = bf16_load(w[ch]) / sqrtf(bf16_load(w[3 * c + ch]) + eps);
            affine_span16(in + pl * hw, out + pl * hw, hw, scale,
                          bf16_load(w[c + ch]) - bf16_load(w[2 * c + ch]) * scale);
        });
}

static void bn_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w_, void *out_)
{
    const float *w = w_;
    float *out = out_;
    const float *const *ins = (const float *const *)ins_;
    (void)env;
    const float *in = ins[0];
    (void)state;
    if (l->pass == PASS_TRAIN) {
        cpu_bn_train_forward(l, in, w, out);
        return;
    }
    int64_t n = l->in.d[0], c = l->in.d[1], hw = l->in.d[2] * l->in.d[3];
    float eps = (float)l->p.eps;
    CPU_OMP_IF(n * c * hw > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t pl = 0; pl < n * c; pl++) {
            int64_t ch = pl % c;
            float scale = w[ch] / sqrtf(w[3 * c + ch] + eps);
            affine_span(in + pl * hw, out + pl * hw, hw, scale, w[c + ch] - w[2 * c + ch] * scale);
        });
}

/* One element-wise loop per kind: x is a[i] (and y the second input's b[i]), in a
 * function cloned per ISA that each thread runs on its share; fn runs fp32 tensors,
 * fn##_bf16 bf16 ones (the table's bf16 entry), computing in fp32. */
#define ELEMENTWISE_SPANS(fn, expr)                                                    \
    CPU_ISA_CLONES static void fn##_span(const float *a, const float *b, float *out, int64_t n)     \
    {                                                                                               \
        if (b) {                                                                                    \
            _Pragma("omp simd") for (int64_t i = 0; i < n; i++)                                     \
            {                                                                                       \
                float x = a[i], y = b[i];                                                           \
                (void)y;                                                                            \
                out[i] = (expr);                                                                    \
            }                                                                                       \
            return;                                                                                 \
        }                                                                                           \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++)                                         \
        {                                                                                           \
            float x = a[i], y = 0.0f;                                                               \
            (void)y;                                                                                \
            out[i] = (expr);                                                                        \
        }                                                                                           \
    }                                                                                               \
    CPU_ISA_CLONES static void fn##_span16(const uint16_t *a, const uint16_t *b, uint16_t *out,     \
                                           int64_t n)                                               \
    {                                                                                               \
        if (b) {                                                                                    \
            _Pragma("omp simd") for (int64_t i = 0; i < n; i++)                                     \
            {                                                                                       \
                float x = bf16_load(a[i]), y = bf16_load(b[i]);                                     \
                (void)y;                                                                            \
                out[i] = bf16_store(expr);                                                          \
            }                                                                                       \
            return;                                                                                 \
        }                                                                                           \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++)                                         \
        {                                                                                           \
            float x = bf16_load(a[i]), y = 0.0f;                                                    \
            (void)y;                                                                                \
            out[i] = bf16_store(expr);                                                              \
        }                                                                                           \
    }

/* A kernel's run on elements of type T, each thread's share through span. */
#define ELEMENTWISE_RUN(name, T, span)                                                              \
    static void name(void *env, const layer *l, void *state, const void *const *in, const void *w, \
                     void *out_)                                                                    \
    {                                                                                               \
        (void)env, (void)state, (void)w;                                                            \
        const T *a = in[0], *b = l->n_inputs > 1 ? in[1] : NULL;                                    \
        T *out = out_;                                                                              \
        int64_t n = shape_numel(&l->out);                                                           \
        if (n <= CPU_PARALLEL_MIN) {                                                                \
            span(a, b, out, n);                                                                     \
            return;                                                                                 \
        }                                                                                           \
        _Pragma("omp parallel")                                                                     \
        {                                                                                           \
            int64_t lo, hi;                                                                         \
            cpu_thread_span(n, &lo, &hi);                                                           \
            if (hi > lo)                                                                            \
                span(a + lo, b ? b + lo : NULL, out + lo, hi - lo);                                 \
        }                                                                                           \
    }

#define ELEMENTWISE(fn, expr)                                                                       \
    ELEMENTWISE_SPANS(fn, expr)                                                                 \
    ELEMENTWISE_RUN(fn, float, fn##_span)                                                           \
    ELEMENTWISE_RUN(fn##_bf16, uint16_t, fn##_span16)

/* x clamped to [0, 6] by comparisons, which vectorise (fminf and fmaxf are library calls
 * without -ffinite-math-only: they treat NaN apart); a NaN stays NaN, as in torch */
static inline float clamp06(float x) { return x < 0.0f ? 0.0f : x > 6.0f ? 6.0f : x; }

ELEMENTWISE(relu_run, x > 0.0f ? x : 0.0f)
ELEMENTWISE(relu6_run, clamp06(x))
ELEMENTWISE(sigmoid_run, 1.0f / (1.0f + lb_expf(-x)))
ELEMENTWISE(silu_run, x / (1.0f + lb_expf(-x)))
ELEMENTWISE(hardsigmoid_run, clamp06(x + 3.0f) / 6.0f)
ELEMENTWISE(hardswish_run, x * (clamp06(x + 3.0f) / 6.0f))
ELEMENTWISE(tanh_run, lb_tanhf(x))
ELEMENTWISE(add_same_run, x + y)
ELEMENTWISE(mul_same_run, x * y)

void cpu_add_span(const float *a, const float *b, float *y, int64_t n) { add_same_run_span(a, b, y, n); }

/* add and mul where one input is [N, C, 1, 1] and the other [N, C, H, W] (squeeze-and-
 * excitation's scale, a UNet's timestep embedding): one scalar per plane. Any other
 * broadcast takes the general loop. */
static bool is_plane_scale(const shape_t *s, const shape_t *out)
{
    return s->rank == 4 && s->d[0] == out->d[0] && s->d[1] == out->d[1] && s->d[2] == 1 && s->d[3] == 1;
}

static void binary_run(void *env, const layer *l, void *state, const void *const *in_, const void *w_, void *out_)
{
    const float *w = w_;
    float *out = out_;
    const float *const *in = (const float *const *)in_;
    bool add = l->kind == LAYER_ADD;
    (void)env;
    const shape_t *o = &l->out;
    int64_t n = shape_numel(o);
    if (shape_equal(&l->ins[0], &l->ins[1])) {
        (add ? add_same_run : mul_same_run)(env, l, state, in_, w, out);
        return;
    }
    int scale = is_plane_scale(&l->ins[0], o) && shape_equal(&l->ins[1], o)   ? 0
                : is_plane_scale(&l->ins[1], o) && shape_equal(&l->ins[0], o) ? 1
                                                                               : -1;
    if (scale >= 0) {
        const float *s = in[scale], *x = in[1 - scale];
        int64_t planes = o->d[0] * o->d[1], hw = o->d[2] * o->d[3];
        CPU_OMP_IF(n > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
            for (int64_t pl = 0; pl < planes; pl++)
                affine_span(x + pl * hw, out + pl * hw, hw, add ? 1.0f : s[pl], add ? s[pl] : 0.0f););
        return;
    }
    if (add)
        CPU_OMP_IF(n > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
            for (int64_t i = 0; i < n; i++)
                out[i] = in[0][layer_broadcast_index(&l->ins[0], o, i)] + in[1][layer_broadcast_index(&l->ins[1], o, i)];);
    else
        CPU_OMP_IF(n > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
            for (int64_t i = 0; i < n; i++)
                out[i] = in[0][layer_broadcast_index(&l->ins[0], o, i)] * in[1][layer_broadcast_index(&l->ins[1], o, i)];);
}

/* add and mul in bf16: equal shapes in the vector loop, any broadcast element by element. */
static void binary_bf16_run(void *env, const layer *l, void *state, const void *const *in, const void *w, void *out_)
{
    bool add = l->kind == LAYER_ADD;
    if (shape_equal(&l->ins[0], &l->ins[1])) {
        (add ? add_same_run_bf16 : mul_same_run_bf16)(env, l, state, in, w, out_);
        return;
    }
    const uint16_t *a = in[0], *b = in[1];
    uint16_t *out = out_;
    const shape_t *o = &l->out;
    int64_t n = shape_numel(o);
    CPU_OMP_IF(n > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t i = 0; i < n; i++) {
            float x = bf16_load(a[layer_broadcast_index(&l->ins[0], o, i)]);
            float y = bf16_load(b[layer_broadcast_index(&l->ins[1], o, i)]);
            out[i] = bf16_store(add ? x + y : x * y);
        });
}

/* concat: each input's block of every outer index is copied to its place, in any dtype. */
static void concat_run(void *env, const layer *l, void *state, const void *const *in, const void *w, void *out_)
{
    (void)env, (void)state, (void)w;
    char *out = out_;
    size_t size = dtype_size(l->dtype);
    int64_t outer = 1, inner = 1, dim = l->p.dim;
    for (int64_t i = 0; i < dim; i++)
        outer *= l->out.d[i];
    for (int64_t i = dim + 1; i < l->out.rank; i++)
        inner *= l->out.d[i];
    int64_t row = l->out.d[dim] * inner;
    CPU_OMP_IF(shape_numel(&l->out) > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t o = 0; o < outer; o++) {
            int64_t at = 0;
            for (int k = 0; k < l->n_inputs; k++) {
                int64_t span = l->ins[k].d[dim] * inner;
                memcpy(out + (o * row + at) * (int64_t)size, (const char *)in[k] + o * span * (int64_t)size,
                       (size_t)span * size);
                at += span;
            }
        });
}

/* scale_shift: scale * x + shift, in fp32 or bf16 */
static void scale_shift_run(void *env, const layer *l, void *state, const void *const *in, const void *w, void *out)
{
    (void)env, (void)state, (void)w;
    int64_t n = shape_numel(&l->out);
    float a = (float)l->p.attn_scale, b = (float)l->p.shift;
    bool bf = l->dtype == DTYPE_BF16;
    CPU_OMP_IF(n > CPU_PARALLEL_MIN, "omp parallel",
        {
            int64_t lo, hi;
            cpu_thread_span(n, &lo, &hi);
            if (hi > lo && bf)
                affine_span16((const uint16_t *)in[0] + lo, (uint16_t *)out + lo, hi - lo, a, b);
            else if (hi > lo)
                affine_span((const float *)in[0] + lo, (float *)out + lo, hi - lo, a, b);
        });
}

/* model_input: its values (held as its weights, in its dtype) copied into its output */
static void model_input_run(void *env, const layer *l, void *state, const void *const *in, const void *w, void *out)
{
    (void)env, (void)state, (void)in;
    memcpy(out, w, (size_t)(shape_numel(&l->out) * (int64_t)dtype_size(l->dtype)));
}

static void view_run(void *env, const layer *l, void *state, const void *const *in, const void *w, void *out)
{
    (void)env, (void)l, (void)state, (void)in, (void)w, (void)out;
}

const backend_kernel cpu_batchnorm2d_kernel = {.run = bn_run, .impl = "direct"};
const backend_kernel cpu_relu_kernel = {.run = relu_run, .impl = "direct"};
const backend_kernel cpu_relu6_kernel = {.run = relu6_run, .impl = "direct"};
const backend_kernel cpu_sigmoid_kernel = {.run = sigmoid_run, .impl = "direct"};
const backend_kernel cpu_silu_kernel = {.run = silu_run, .impl = "direct"};
const backend_kernel cpu_hardsigmoid_kernel = {.run = hardsigmoid_run, .impl = "direct"};
const backend_kernel cpu_hardswish_kernel = {.run = hardswish_run, .impl = "direct"};
const backend_kernel cpu_tanh_kernel = {.run = tanh_run, .impl = "direct"};
const backend_kernel cpu_add_kernel = {.run = binary_run, .impl = "direct"};
/* bf16 in and out, fp32 inside */
const backend_kernel cpu_batchnorm2d_bf16_kernel = {.run = bn_bf16_run, .impl = "direct bf16"};
const backend_kernel cpu_relu_bf16_kernel = {.run = relu_run_bf16, .impl = "direct bf16"};
const backend_kernel cpu_relu6_bf16_kernel = {.run = relu6_run_bf16, .impl = "direct bf16"};
const backend_kernel cpu_sigmoid_bf16_kernel = {.run = sigmoid_run_bf16, .impl = "direct bf16"};
const backend_kernel cpu_silu_bf16_kernel = {.run = silu_run_bf16, .impl = "direct bf16"};
const backend_kernel cpu_hardsigmoid_bf16_kernel = {.run = hardsigmoid_run_bf16, .impl = "direct bf16"};
const backend_kernel cpu_hardswish_bf16_kernel = {.run = hardswish_run_bf16, .impl = "direct bf16"};
const backend_kernel cpu_tanh_bf16_kernel = {.run = tanh_run_bf16, .impl = "direct bf16"};
const backend_kernel cpu_add_bf16_kernel = {.run = binary_bf16_run, .impl = "direct bf16"};
const backend_kernel cpu_mul_bf16_kernel = {.run = binary_bf16_run, .impl = "direct bf16"};
const backend_kernel cpu_mul_kernel = {.run = binary_run, .impl = "direct"};
const backend_kernel cpu_concat_kernel = {.run = concat_run, .impl = "copy"};
const backend_kernel cpu_view_kernel = {.run = view_run, .impl = "view"};
const backend_kernel cpu_scale_shift_kernel = {.run = scale_shift_run, .impl = "direct"};
const backend_kernel cpu_model_input_kernel = {.run = model_input_run, .impl = "copy of the input's values"};
