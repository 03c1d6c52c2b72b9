/* linear on the CPU: cblas_sgemv for one row, cblas_sgemm for several (a batch, or the
 * tokens of [N, S, F]). */
#include <cblas.h>

#include "cpu_kernels.h"

static void linear_run(const layer *l, void *state, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    (void)state;
    int64_t f = l->in.d[l->in.rank - 1], n = shape_numel(&l->in) / f, o = l->p.out_features;
    const float *bias = l->p.bias ? w + o * f : NULL;
    if (bias)
        for (int64_t b = 0; b < n; b++)
            for (int64_t j = 0; j < o; j++)
                out[b * o + j] = bias[j];
    float beta = bias ? 1.0f : 0.0f;
    if (n == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)o, (blasint)f, 1.0f, w, (blasint)f, in, 1, beta, out, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)n, (blasint)o, (blasint)f, 1.0f, in,
                    (blasint)f, w, (blasint)f, beta, out, (blasint)o);
}

const cpu_kernel cpu_linear_kernel = {.run = linear_run, .impl = "sgemm"};
