/* softmax on the CPU: each (outer, inner) row of the reduced dimension is independent. */
#include <math.h>

#include "cpu_kernels.h"
#include "fast_math.h"

/* One contiguous row (the reduced dimension is the last): max, exp and sum, scale. */
CPU_ISA_CLONES
static void softmax_row(const float *x, float *y, int64_t n)
{
    float m = -INFINITY, s = 0.0f;
#pragma omp simd reduction(max : m)
    for (int64_t i = 0; i < n; i++)
        m = x[i] > m ? x[i] : m;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) {
        y[i] = lb_expf(x[i] - m);
        s += y[i];
    }
    float inv = 1.0f / s;
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        y[i] *= inv;
}

/* Exported as a plain function: clang names a cloned function's ifunc apart from its
 * symbol, so other files call the clones through this. */
void cpu_softmax_row(const float *x, float *y, int64_t n) { softmax_row(x, y, n); }

/* A strided row (inner > 1): the same, element by element. */
static void softmax_strided(const float *x, float *y, int64_t n, int64_t inner)
{
    float m = -INFINITY, s = 0.0f;
    for (int64_t i = 0; i < n; i++)
        m = x[i * inner] > m ? x[i * inner] : m;
    for (int64_t i = 0; i < n; i++)
        s += (y[i * inner] = lb_expf(x[i * inner] - m));
    float inv = 1.0f / s;
    for (int64_t i = 0; i < n; i++)
        y[i * inner] *= inv;
}

static void softmax_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w_, void *out_)
{
    const float *w = w_;
    float *out = out_;
    const float *const *ins = (const float *const *)ins_;
    (void)env;
    const float *in = ins[0];
    (void)state, (void)w;
    int64_t outer, n, inner;
    layer_softmax_dims(l, &outer, &n, &inner);
    CPU_OMP_IF(outer * n * inner > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t r = 0; r < outer * inner; r++) {
            int64_t at = (r / inner) * n * inner + r % inner;
            if (inner == 1)
                softmax_row(in + at, out + at, n);
            else
                softmax_strided(in + at, out + at, n, inner);
        });
}

const backend_kernel cpu_softmax_kernel = {.run = softmax_run, .impl = "direct"};
