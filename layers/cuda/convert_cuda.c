/* bf16 and fp16 on the GPU. linear: cublasGemmEx on the 16-bit tensors with
 * CUBLAS_COMPUTE_32F passed explicitly (C has no default for it), as PyTorch runs
 * torch.nn.functional.linear in half precision, and the bias added by a kernel of ours
 * in fp32. Convolutions run on their 16-bit tensors too (conv2d_cuda.c, NCHW). Every
 * other kind, for now: its fp32 kernel on fp32 copies of its tensors, the conversions
 * on the device inside the timed run, and impl says "fp32 copies: ..."; its backward
 * likewise (every tensor it reads and the gradients it writes).
 * Written and compiled without a GPU: tests/test_layers.c runs every kind in bf16 and
 * fp16 on the next GPU (the cells are filled, so it does). */
#include <limits.h>
#include <stdlib.h>

#include "cuda_env.h"

static cudaDataType_t cuda_type(dtype_t t) { return t == DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F; }

/* ---- linear through cublasGemmEx ------------------------------------------------------- */

typedef struct linear_half {
    int n, f, o;
    const void *w;
    float *bias;               /* device, fp32; NULL without */
} linear_half;

static void linear_half_free(void *ctx, void *state)
{
    (void)ctx;
    linear_half *s = state;
    if (s && s->bias)
        cudaFree(s->bias);
    free(s);
}

static bench_status linear_half_setup(void *ctx, const layer *l, const void *w, void **state, char *impl, size_t len,
                                      int64_t *ws)
{
    cuda_env *env = ctx;
    int64_t f = l->in.d[l->in.rank - 1], rows = shape_numel(&l->in) / f, o = l->p.out_features;
    *ws = 0;
    if (rows > INT_MAX || f > INT_MAX || o > INT_MAX) {
        snprintf(impl, len, "dimensions beyond cuBLAS's int");
        return BENCH_ERR_UNSUPPORTED;
    }
    linear_half *s = calloc(1, sizeof *s);
    if (!s)
        return BENCH_ERR_NOMEM;
    s->n = (int)rows, s->f = (int)f, s->o = (int)o, s->w = w;
    bool ok = true;
    if (l->p.bias) { /* the bias after the weights, widened once to fp32 */
        ok = CUDA_OK(env, cudaMalloc((void **)&s->bias, (size_t)o * sizeof(float))) &&
             CUDA_OK(env, cuda_convert_launch(env->stream, s->bias, DTYPE_FP32,
                                              (const char *)w + (size_t)(o * f) * dtype_size(l->dtype), l->dtype, o)) &&
             CUDA_OK(env, cudaStreamSynchronize(env->stream));
        *ws = o * (int64_t)sizeof(float);
    }
    if (!ok) {
        linear_half_free(env, s);
        return BENCH_ERR_BACKEND;
    }
    snprintf(impl, len, "cublasGemmEx %s, fp32 compute%s", dtype_name(l->dtype), l->p.bias ? " + bias kernel" : "");
    *state = s;
    return BENCH_OK;
}

static void linear_half_run(void *ctx, const layer *l, void *state, const void *const *in, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)w_;
    linear_half *s = state;
    const float one = 1.0f, zero = 0.0f;
    cudaDataType_t t = cuda_type(l->dtype);
    /* row-major out[N, O] = in[N, F] W[O, F]^T, read column-major (as linear_cuda.c) */
    CUBLAS_OK(env, cublasSetMathMode(env->cublas, CUBLAS_DEFAULT_MATH));
    CUBLAS_OK(env, cublasGemmEx(env->cublas, CUBLAS_OP_T, CUBLAS_OP_N, s->o, s->n, s->f, &one, s->w, t, s->f, in[0], t,
                                s->f, &zero, out, t, s->o, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (s->bias)
        CUDA_OK(env, cuda_bias_rows_launch(env->stream, out, (int)l->dtype, s->bias, s->n, s->o));
}

/* The GEMM's tolerance; the dtype's rounding comes on top (backend_tolerance). */
const backend_kernel cuda_linear_half_kernel = {.setup = linear_half_setup, .run = linear_half_run,
                                                .free = linear_half_free, .tolerance = cuda_gemm_tolerance};

/* ---- any kind on fp32 copies ------------------------------------------------------------ */

/* A backward (PASS_BACKWARD) reads its inputs, then the forward's output and its
 * gradient, and writes layer_backward_floats elements. */
#define VIA_MAX_IN (LAYER_MAX_INPUTS + 2)

typedef struct via_f32 {
    const backend_kernel *inner;
    void *inner_state;
    layer l;                  /* the layer as fp32, which the inner kernel is set up on */
    float *in[VIA_MAX_IN], *out, *w; /* device */
    int n_in;
    int64_t in_elems[VIA_MAX_IN], out_elems;
} via_f32;

/* The fp32 kernel a layer of l's kind and pass runs on: its forward's (training mode
 * included) or its backward's. */
static const backend_kernel *via_inner(const layer *l)
{
    return l->pass == PASS_BACKWARD ? cuda_fp32_backward_kernel(l->kind) : cuda_fp32_kernel(l->kind);
}

static void via_free(void *ctx, void *state)
{
    via_f32 *v = state;
    if (!v)
        return;
    if (v->inner && v->inner->free && v->inner_state)
        v->inner->free(ctx, v->inner_state);
    for (int k = 0; k < VIA_MAX_IN; k++)
        if (v->in[k])
            cudaFree(v->in[k]);
    if (v->out)
        cudaFree(v->out);
    if (v->w)
        cudaFree(v->w);
    free(v);
}

static bench_status via_setup(void *ctx, const layer *l, const void *w, void **state, char *impl, size_t len,
                              int64_t *ws)
{
    cuda_env *env = ctx;
    const backend_kernel *inner = via_inner(l);
    if (!inner) {
        snprintf(impl, len, "no %s kernel", dtype_name(l->dtype));
        return BENCH_ERR_UNSUPPORTED;
    }
    bool backward = l->pass == PASS_BACKWARD;
    via_f32 *v = calloc(1, sizeof *v);
    if (!v)
        return BENCH_ERR_NOMEM;
    v->inner = inner;
    v->l = *l;
    v->l.dtype = DTYPE_FP32;
    v->n_in = l->n_inputs + (backward ? 2 : 0);
    for (int k = 0; k < v->n_in; k++)
        v->in_elems[k] = shape_numel(k < l->n_inputs ? &l->ins[k] : &l->out);
    v->out_elems = backward ? layer_backward_floats(l) : shape_numel(&l->out);
    int64_t copies = v->out_elems + l->n_weight_floats;
    bool ok = CUDA_OK(env, cudaMalloc((void **)&v->out, (size_t)v->out_elems * sizeof(float)));
    for (int k = 0; ok && k < v->n_in; k++) {
        ok = CUDA_OK(env, cudaMalloc((void **)&v->in[k], (size_t)v->in_elems[k] * sizeof(float)));
        copies += v->in_elems[k];
    }
    if (ok && l->n_weight_floats)
        ok = CUDA_OK(env, cudaMalloc((void **)&v->w, (size_t)l->n_weight_floats * sizeof(float))) &&
             CUDA_OK(env, cuda_convert_launch(env->stream, v->w, DTYPE_FP32, w, l->dtype, l->n_weight_floats)) &&
             CUDA_OK(env, cudaStreamSynchronize(env->stream));
    if (!ok) {
        via_free(env, v);
        return BENCH_ERR_BACKEND;
    }
    char inner_impl[BACKEND_IMPL_LEN] = "";
    bench_status st = BENCH_OK;
    if (inner->setup)
        st = inner->setup(env, &v->l, v->w, &v->inner_state, inner_impl, sizeof inner_impl, ws);
    else
        snprintf(inner_impl, sizeof inner_impl, "%s", inner->impl ? inner->impl : "");
    if (st != BENCH_OK) {
        snprintf(impl, len, "%s", inner_impl);
        v->inner_state = NULL;
        via_free(env, v);
        return st;
    }
    *ws += copies * (int64_t)sizeof(float);
    snprintf(impl, len, "fp32 copies: %s", inner_impl);
    *state = v;
    return BENCH_OK;
}

static void via_run(void *ctx, const layer *l, void *state, const void *const *in, const void *w, void *out)
{
    cuda_env *env = ctx;
    (void)w;
    via_f32 *v = state;
    for (int k = 0; k < v->n_in; k++)
        CUDA_OK(env, cuda_convert_launch(env->stream, v->in[k], DTYPE_FP32, in[k], l->dtype, v->in_elems[k]));
    v->inner->run(env, &v->l, v->inner_state, (const void *const *)v->in, v->w, v->out);
    CUDA_OK(env, cuda_convert_launch(env->stream, out, l->dtype, v->out, DTYPE_FP32, v->out_elems));
}

static double via_tolerance(void *ctx, const layer *l)
{
    const backend_kernel *inner = via_inner(l);
    layer l32 = *l;
    l32.dtype = DTYPE_FP32;
    return inner && inner->tolerance ? inner->tolerance(ctx, &l32) : layer_desc_get(l->kind)->tolerance;
}

const backend_kernel cuda_via_f32_kernel = {.setup = via_setup, .run = via_run, .free = via_free,
                                            .tolerance = via_tolerance};
