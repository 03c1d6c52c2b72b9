/* softmax on the CPU: each (outer, inner) row of the reduced dimension is independent. */
#include <math.h>

#include "cpu_kernels.h"

static void softmax_run(const layer *l, void *state, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    (void)state, (void)w;
    int64_t outer = 1, n = l->in.d[l->p.dim], inner = 1;
    for (int64_t i = 0; i < l->p.dim; i++)
        outer *= l->in.d[i];
    for (int64_t i = l->p.dim + 1; i < l->in.rank; i++)
        inner *= l->in.d[i];
#pragma omp parallel for schedule(static) if (outer * n * inner > CPU_PARALLEL_MIN)
    for (int64_t r = 0; r < outer * inner; r++) {
        const float *x = in + (r / inner) * n * inner + r % inner;
        float *y = out + (r / inner) * n * inner + r % inner;
        float m = -INFINITY, s = 0.0f;
        for (int64_t i = 0; i < n; i++)
            m = x[i * inner] > m ? x[i * inner] : m;
        for (int64_t i = 0; i < n; i++)
            s += (y[i * inner] = expf(x[i * inner] - m));
        float inv = 1.0f / s;
        for (int64_t i = 0; i < n; i++)
            y[i * inner] *= inv;
    }
}

const cpu_kernel cpu_softmax_kernel = {.run = softmax_run, .impl = "direct"};
