/* linear through cublasSgemm over the last dimension: N rows (every index but the
 * last). Row-major out[N, O] = in[N, F] x W[O, F]^T is, read column-major, out^T =
 * W^T(op T) x in^T. The bias, as PyTorch's addmm does it: written into every output row
 * first (our kernel), then the GEMM adds onto it (beta = 1); cudnnAddTensor after the
 * GEMM took 8.9 us against PyTorch's 5.7 at batch 1 on an H100. */
#include <limits.h>
#include <stdlib.h>

#include "cuda_env.h"

typedef struct linear_cuda {
    int n, f, o;
    bool tf32;                 /* tensor-core math for the GEMM (dtype tf32) */
    const float *w, *bias;
} linear_cuda;

static void linear_free(void *ctx, void *state)
{
    (void)ctx;
    free(state);
}

static bench_status linear_setup(void *ctx, const layer *l, const void *w_, void **state, char *impl,
                                 size_t len, int64_t *ws)
{
    const float *w = w_;
    (void)ctx, (void)ws;
    int64_t f = l->in.d[l->in.rank - 1], rows = shape_numel(&l->in) / f;
    if (rows > INT_MAX || f > INT_MAX || l->p.out_features > INT_MAX) {
        snprintf(impl, len, "dimensions beyond cuBLAS's int");
        return BENCH_ERR_UNSUPPORTED;
    }
    linear_cuda *s = calloc(1, sizeof *s);
    if (!s)
        return BENCH_ERR_NOMEM;
    s->n = (int)rows, s->f = (int)f, s->o = (int)l->p.out_features;
    s->w = w;
    s->bias = l->p.bias ? w + (int64_t)s->o * s->f : NULL;
    s->tf32 = l->dtype == DTYPE_TF32;
    snprintf(impl, len, "cublasSgemm%s%s", s->tf32 ? " (TF32)" : "", s->bias ? " onto the bias (beta 1)" : "");
    *state = s;
    return BENCH_OK;
}

static void linear_run(void *ctx, const layer *l_, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)l_, (void)w_;
    const float *in = ins[0];
    linear_cuda *s = state;
    const float one = 1.0f, zero = 0.0f;
    if (s->bias)
        CUDA_OK(env, cuda_fill_rows_launch(env->stream, out, s->bias, s->n, s->o));
    /* the handle's math mode is the layer's (set on the host: captured graphs keep it) */
    CUBLAS_OK(env, cublasSetMathMode(env->cublas, s->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    CUBLAS_OK(env, cublasSgemm(env->cublas, CUBLAS_OP_T, CUBLAS_OP_N, s->o, s->n, s->f, &one, s->w, s->f, in, s->f,
                               s->bias ? &one : &zero, out, s->o));
}

const backend_kernel cuda_linear_kernel = {.setup = linear_setup, .run = linear_run, .free = linear_free,
                                           .tolerance = cuda_gemm_tolerance};
