/* linear through cublasSgemm (plus cudnnAddTensor for the bias), over the last
 * dimension: N rows (every index but the last). Row-major out[N, O] = in[N, F] x
 * W[O, F]^T is, read column-major, out^T = W^T(op T) x in^T. */
#include <limits.h>
#include <stdlib.h>

#include "cuda_env.h"

typedef struct linear_cuda {
    int n, f, o;
    bool tf32;                 /* tensor-core math for the GEMM (dtype tf32) */
    const float *w, *bias;
    cudnnTensorDescriptor_t y, b;
} linear_cuda;

static void linear_free(void *ctx, void *state)
{
    (void)ctx;
    linear_cuda *s = state;
    if (!s)
        return;
    cudnnDestroyTensorDescriptor(s->y), cudnnDestroyTensorDescriptor(s->b);
    free(s);
}

static bench_status linear_setup(void *ctx, const layer *l, const void *w_, void **state, char *impl,
                                 size_t len, int64_t *ws)
{
    const float *w = w_;
    cuda_env *env = ctx;
    (void)ws;
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
    shape_t bias_shape = {2, {1, s->o}}, out_rows = {2, {s->n, s->o}};
    bool ok = !s->bias || (cuda_tensor_desc(env, &s->y, &out_rows, impl, len) &&
                           cuda_tensor_desc(env, &s->b, &bias_shape, impl, len));
    if (!ok) {
        linear_free(env, s);
        return env->failed ? BENCH_ERR_BACKEND : BENCH_ERR_UNSUPPORTED;
    }
    s->tf32 = l->dtype == DTYPE_TF32;
    snprintf(impl, len, "cublasSgemm%s", s->tf32 ? " (TF32)" : "");
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
    /* the handle's math mode is the layer's (set on the host: captured graphs keep it) */
    CUBLAS_OK(env, cublasSetMathMode(env->cublas, s->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    CUBLAS_OK(env, cublasSgemm(env->cublas, CUBLAS_OP_T, CUBLAS_OP_N, s->o, s->n, s->f, &one, s->w, s->f, in, s->f,
                               &zero, out, s->o));
    if (s->bias)
        CUDNN_OK(env, cudnnAddTensor(env->cudnn, &one, s->b, s->bias, &one, s->y, out));
}

const backend_kernel cuda_linear_kernel = {.setup = linear_setup, .run = linear_run, .free = linear_free,
                                           .tolerance = cuda_gemm_tolerance};
