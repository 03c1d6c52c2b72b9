/* Memory-bound kinds on the CPU: batchnorm2d, the activations, add, mul (broadcast),
 * concat, and the views (flatten, dropout, stochastic_depth), whose run does nothing
 * because the output is the input. */
#include <math.h>
#include <string.h>

#include "cpu_kernels.h"
#include "fast_math.h"

CPU_ISA_CLONES
static void affine_span(const float *x, float *y, int64_t n, float scale, float shift)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * scale + shift;
}

static void bn_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w_, void *out_)
{
    const float *w = w_;
    float *out = out_;
    const float *const *ins = (const float *const *)ins_;
    (void)env;
    const float *in = ins[0];
    (void)state;
    int64_t n = l->in.d[0], c = l->in.d[1], hw = l->in.d[2] * l->in.d[3];
    float eps = (float)l->p.eps;
    CPU_OMP_IF(n * c * hw > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t pl = 0; pl < n * c; pl++) {
            int64_t ch = pl % c;
            float scale = w[ch] / sqrtf(w[3 * c + ch] + eps);
            affine_span(in + pl * hw, out + pl * hw, hw, scale, w[c + ch] - w[2 * c + ch] * scale);
        });
}

/* One element-wise loop per kind: x is a[i] (and b[i] the second input's element), in
 * a function cloned per ISA that each thread runs on its share. */
#define ELEMENTWISE(fn, expr)                                                                       \
    CPU_ISA_CLONES static void fn##_span(const float *a, const float *b, float *out, int64_t n)     \
    {                                                                                               \
        (void)b;                                                                                    \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++)                                         \
        {                                                                                           \
            float x = a[i];                                                                         \
            out[i] = (expr);                                                                        \
        }                                                                                           \
    }                                                                                               \
    static void fn(void *env, const layer *l, void *state, const void *const *in, const void *w,           \
                   void *out_)                                                                      \
    {                                                                                               \
        (void)env, (void)state, (void)w;                                                            \
        const float *a = in[0], *b = l->n_inputs > 1 ? in[1] : NULL;                                \
        float *out = out_;                                                                          \
        int64_t n = shape_numel(&l->out);                                                           \
        if (n <= CPU_PARALLEL_MIN) {                                                                \
            fn##_span(a, b, out, n);                                                                \
            return;                                                                                 \
        }                                                                                           \
        _Pragma("omp parallel")                                                                     \
        {                                                                                           \
            int64_t lo, hi;                                                                         \
            cpu_thread_span(n, &lo, &hi);                                                           \
            if (hi > lo)                                                                            \
                fn##_span(a + lo, b ? b + lo : NULL, out + lo, hi - lo);                            \
        }                                                                                           \
    }

ELEMENTWISE(relu_run, x > 0.0f ? x : 0.0f)
ELEMENTWISE(relu6_run, fminf(fmaxf(x, 0.0f), 6.0f))
ELEMENTWISE(sigmoid_run, 1.0f / (1.0f + lb_expf(-x)))
ELEMENTWISE(silu_run, x / (1.0f + lb_expf(-x)))
ELEMENTWISE(hardsigmoid_run, fminf(fmaxf(x + 3.0f, 0.0f), 6.0f) / 6.0f)
ELEMENTWISE(hardswish_run, x * (fminf(fmaxf(x + 3.0f, 0.0f), 6.0f) / 6.0f))
ELEMENTWISE(tanh_run, lb_tanhf(x))
ELEMENTWISE(add_run, x + b[i])
ELEMENTWISE(mul_same_run, x * b[i])

void cpu_add_span(const float *a, const float *b, float *y, int64_t n) { add_run_span(a, b, y, n); }

/* mul where one input is [N, C, 1, 1] and the other [N, C, H, W] (squeeze-and-excitation's
 * scale): one scalar per plane. Any other broadcast takes the general loop. */
static bool is_plane_scale(const shape_t *s, const shape_t *out)
{
    return s->rank == 4 && s->d[0] == out->d[0] && s->d[1] == out->d[1] && s->d[2] == 1 && s->d[3] == 1;
}

static void mul_run(void *env, const layer *l, void *state, const void *const *in_, const void *w_, void *out_)
{
    const float *w = w_;
    float *out = out_;
    const float *const *in = (const float *const *)in_;
    (void)env;
    const shape_t *o = &l->out;
    int64_t n = shape_numel(o);
    if (shape_equal(&l->ins[0], &l->ins[1])) {
        mul_same_run(env, l, state, in_, w, out);
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
                affine_span(x + pl * hw, out + pl * hw, hw, s[pl], 0.0f););
        return;
    }
    CPU_OMP_IF(n > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t i = 0; i < n; i++)
            out[i] = in[0][layer_broadcast_index(&l->ins[0], o, i)] * in[1][layer_broadcast_index(&l->ins[1], o, i)];);
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
const backend_kernel cpu_add_kernel = {.run = add_run, .impl = "direct"};
const backend_kernel cpu_mul_kernel = {.run = mul_run, .impl = "direct"};
const backend_kernel cpu_concat_kernel = {.run = concat_run, .impl = "copy"};
const backend_kernel cpu_view_kernel = {.run = view_run, .impl = "view"};
