/* Memory-bound kinds on the CPU: batchnorm2d, activations, add, and the views
 * (flatten, dropout), whose run does nothing because the output is the input. */
#include <math.h>

#include "cpu_kernels.h"

static void bn_run(const layer *l, void *state, const float *in, const float *in2, const float *w, float *out)
{
    (void)state, (void)in2;
    int64_t n = l->in.d[0], c = l->in.d[1], hw = l->in.d[2] * l->in.d[3];
    float eps = (float)l->p.eps;
#pragma omp parallel for schedule(static) if (n * c * hw > CPU_PARALLEL_MIN)
    for (int64_t pl = 0; pl < n * c; pl++) {
        int64_t ch = pl % c;
        float scale = w[ch] / sqrtf(w[3 * c + ch] + eps);
        float shift = w[c + ch] - w[2 * c + ch] * scale;
        const float *x = in + pl * hw;
        float *y = out + pl * hw;
#pragma omp simd
        for (int64_t i = 0; i < hw; i++)
            y[i] = x[i] * scale + shift;
    }
}

#define ELEMENTWISE(fn, expr)                                                                       \
    static void fn(const layer *l, void *state, const float *in, const float *in2, const float *w, \
                   float *out)                                                                      \
    {                                                                                               \
        (void)state, (void)w, (void)in2;                                                            \
        int64_t n = shape_numel(&l->out);                                                           \
        _Pragma("omp parallel for simd schedule(static) if (n > CPU_PARALLEL_MIN)")                 \
        for (int64_t i = 0; i < n; i++) {                                                           \
            float x = in[i];                                                                        \
            out[i] = (expr);                                                                        \
        }                                                                                           \
    }

ELEMENTWISE(relu_run, x > 0.0f ? x : 0.0f)
ELEMENTWISE(relu6_run, fminf(fmaxf(x, 0.0f), 6.0f))
ELEMENTWISE(sigmoid_run, 1.0f / (1.0f + expf(-x)))
ELEMENTWISE(add_run, x + in2[i])

static void view_run(const layer *l, void *state, const float *in, const float *in2, const float *w, float *out)
{
    (void)l, (void)state, (void)in, (void)in2, (void)w, (void)out;
}

const cpu_kernel cpu_batchnorm2d_kernel = {.run = bn_run, .impl = "direct"};
const cpu_kernel cpu_relu_kernel = {.run = relu_run, .impl = "direct"};
const cpu_kernel cpu_relu6_kernel = {.run = relu6_run, .impl = "direct"};
const cpu_kernel cpu_sigmoid_kernel = {.run = sigmoid_run, .impl = "direct"};
const cpu_kernel cpu_add_kernel = {.run = add_run, .impl = "direct"};
const cpu_kernel cpu_view_kernel = {.run = view_run, .impl = "view"};
