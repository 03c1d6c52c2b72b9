/* conv2d through cuDNN. The algorithm is chosen at setup, by timing the candidates
 * (--algo search, like cudnn.benchmark = True) or by cuDNN's heuristic (--algo
 * heuristic), among those of the requested math mode only: FMA (true FP32) unless
 * --tf32. The workspace is allocated once, at setup. Bias: cudnnAddTensor after the
 * convolution, inside the timed run. */
#include <stdlib.h>
#include <string.h>

#include "cuda_env.h"

typedef struct conv_cuda {
    cudnnTensorDescriptor_t x, y, b;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionFwdAlgo_t algo;
    void *workspace;
    size_t workspace_bytes;
    const float *weights, *bias;
} conv_cuda;

static const char *algo_name(cudnnConvolutionFwdAlgo_t a)
{
    switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    default: return "unknown";
    }
}

static void conv_free(cuda_env *env, void *state)
{
    conv_cuda *c = state;
    if (!c)
        return;
    cudnnDestroyTensorDescriptor(c->x), cudnnDestroyTensorDescriptor(c->y), cudnnDestroyTensorDescriptor(c->b);
    cudnnDestroyFilterDescriptor(c->w);
    cudnnDestroyConvolutionDescriptor(c->conv);
    if (c->workspace)
        CUDA_OK(env, cudaFree(c->workspace));
    free(c);
}

/* Picks the fastest successful candidate (cuDNN sorts them) allowed by the math mode:
 * strict FP32 takes FMA-math candidates only, so TF32 never slips in. */
static bool pick(const cudnnConvolutionFwdAlgoPerf_t *perf, int n, bool tf32, conv_cuda *c)
{
    for (int i = 0; i < n; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && (tf32 || perf[i].mathType == CUDNN_FMA_MATH)) {
            c->algo = perf[i].algo;
            c->workspace_bytes = perf[i].memory;
            return true;
        }
    return false;
}

static bench_status conv_setup(cuda_env *env, const layer *l, const float *w, void **state, char *impl,
                               size_t impl_len, int64_t *workspace_bytes)
{
    const layer_params *p = &l->p;
    conv_cuda *c = calloc(1, sizeof *c);
    if (!c)
        return BENCH_ERR_NOMEM;
    int64_t cg = l->in.d[1] / p->groups;
    cudnnMathType_t math = env->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    c->weights = w;
    c->bias = p->bias ? w + p->out_channels * cg * p->kernel[0] * p->kernel[1] : NULL;
    shape_t bias_shape = {4, {1, p->out_channels, 1, 1}};
    if (!cuda_tensor_desc(env, &c->x, &l->in) || !cuda_tensor_desc(env, &c->y, &l->out) ||
        !cuda_tensor_desc(env, &c->b, &bias_shape))
        goto fail;
    if (!CUDNN_OK(env, cudnnCreateFilterDescriptor(&c->w)) ||
        !CUDNN_OK(env, cudnnSetFilter4dDescriptor(c->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, (int)p->out_channels,
                                                  (int)cg, (int)p->kernel[0], (int)p->kernel[1])) ||
        !CUDNN_OK(env, cudnnCreateConvolutionDescriptor(&c->conv)) ||
        !CUDNN_OK(env, cudnnSetConvolution2dDescriptor(c->conv, (int)p->padding[0], (int)p->padding[1],
                                                       (int)p->stride[0], (int)p->stride[1], (int)p->dilation[0],
                                                       (int)p->dilation[1], CUDNN_CROSS_CORRELATION,
                                                       CUDNN_DATA_FLOAT)) ||
        !CUDNN_OK(env, cudnnSetConvolutionGroupCount(c->conv, (int)p->groups)) ||
        !CUDNN_OK(env, cudnnSetConvolutionMathType(c->conv, math)))
        goto fail;
    int n = 0;
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    if (env->algo == CUDA_ALGO_HEURISTIC) {
        if (!CUDNN_OK(env, cudnnGetConvolutionForwardAlgorithm_v7(env->cudnn, c->x, c->w, c->conv, c->y,
                                                                  CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf)))
            goto fail;
    } else {
        /* The search runs every candidate once on scratch output; it may use up to
         * 256 MiB of workspace, less if the device has less free. */
        size_t free_b = 0, total_b = 0, ws = (size_t)256 << 20;
        void *scratch_ws = NULL, *scratch_y = NULL;
        if (CUDA_OK(env, cudaMemGetInfo(&free_b, &total_b)) && free_b / 4 < ws)
            ws = free_b / 4;
        bool ok = CUDA_OK(env, cudaMalloc(&scratch_ws, ws)) &&
                  CUDA_OK(env, cudaMalloc(&scratch_y, (size_t)shape_numel(&l->out) * sizeof(float)));
        /* the input is only read: search on uninitialised memory of the right size */
        void *scratch_x = NULL;
        ok = ok && CUDA_OK(env, cudaMalloc(&scratch_x, (size_t)shape_numel(&l->in) * sizeof(float))) &&
             CUDNN_OK(env, cudnnFindConvolutionForwardAlgorithmEx(env->cudnn, c->x, scratch_x, c->w, w, c->conv, c->y,
                                                                  scratch_y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n,
                                                                  perf, scratch_ws, ws));
        cudaFree(scratch_ws), cudaFree(scratch_y), cudaFree(scratch_x);
        if (!ok)
            goto fail;
    }
    if (!pick(perf, n, env->tf32, c)) {
        snprintf(impl, impl_len, "no cuDNN algorithm in %s math", env->tf32 ? "TF32" : "FP32");
        conv_free(env, c);
        return BENCH_ERR_UNSUPPORTED;
    }
    if (c->workspace_bytes && !CUDA_OK(env, cudaMalloc(&c->workspace, c->workspace_bytes)))
        goto fail;
    snprintf(impl, impl_len, "%s%s", algo_name(c->algo), env->algo == CUDA_ALGO_HEURISTIC ? " (heuristic)" : "");
    *workspace_bytes = (int64_t)c->workspace_bytes;
    *state = c;
    return BENCH_OK;
fail:
    conv_free(env, c);
    return env->failed ? BENCH_ERR_BACKEND : BENCH_ERR_UNSUPPORTED;
}

static void conv_run(cuda_env *env, void *state, const float *in, const float *in2, float *out)
{
    (void)in2;
    conv_cuda *c = state;
    const float one = 1.0f, zero = 0.0f;
    CUDNN_OK(env, cudnnConvolutionForward(env->cudnn, &one, c->x, in, c->w, c->weights, c->conv, c->algo, c->workspace,
                                          c->workspace_bytes, &zero, c->y, out));
    if (c->bias)
        CUDNN_OK(env, cudnnAddTensor(env->cudnn, &one, c->b, c->bias, &one, c->y, out));
}

const cuda_kernel cuda_conv2d_kernel = {.setup = conv_setup, .run = conv_run, .free = conv_free};
