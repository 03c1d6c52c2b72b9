/* The backward of conv2d and linear on cuda (backend.h: a backward run reads the
 * forward's input, its output and the output's gradient, and writes the input's
 * gradient, then the weights'), and of add and mul:
 *   - conv2d: cuDNN's backward data (cudnnConvolutionBackwardData) and backward filter
 *     (cudnnConvolutionBackwardFilter, the bias's by cudnnConvolutionBackwardBias), each
 *     with its own algorithm: timed by cuDNN's search (--algo search, the default, as
 *     cudnn.benchmark does) or cuDNN's heuristic first choice (--algo heuristic), among
 *     those of the layer's math (strict FP32 takes FMA results only; tf32 and the 16-bit
 *     types allow tensor cores), the first whose workspace can be allocated. bf16 and
 *     fp16 run on their 16-bit NCHW tensors with float compute, as the forward does.
 *   - linear: cuBLAS's cublasGemmEx on the layer's dtype with fp32 sums, as the
 *     column-major GEMMs of cuda_plan.h (dX, dW, and db as dY^T times a vector of ones).
 *   - add (same shapes): the output's gradient copied to each input's, any dtype; mul
 *     (same shapes): cudnnOpTensor's products, 16-bit on fp32 copies (convert_cuda.c).
 * conv2d and linear skip the input's gradient where the step wants none
 * (no_input_grad) and the weights' where the layer is frozen; their rows time "backward
 * data" and "backward weights" apart with CUDA events (layer_backward_parts).
 * Written and compiled without a GPU: tests/test_cuda_plan.c runs linear's plan on the
 * host; test_layers cuda checks every backward case on the next GPU. */
#include <stdlib.h>
#include <string.h>

#include "cuda_env.h"
#include "cuda_plan.h"

/* ---- the parts: events before, between and after the data and weights halves --------- */

typedef struct bwd_parts {
    cudaEvent_t ev[3];
    bool on;
    bool data, weights;  /* which halves run */
} bwd_parts;

static bool parts_enable(cuda_env *env, bwd_parts *p, bool on)
{
    for (int i = 0; on && i < 3; i++)
        if (!p->ev[i] && !CUDA_OK(env, cudaEventCreate(&p->ev[i])))
            return false;
    p->on = on;
    return true;
}

static void parts_mark(cuda_env *env, const bwd_parts *p, int i)
{
    if (p->on)
        CUDA_OK(env, cudaEventRecord(p->ev[i], env->stream));
}

/* After timer_stop: the seconds of the halves that ran, data first (layer_backward_parts). */
static void parts_read(cuda_env *env, const bwd_parts *p, double *seconds)
{
    int n = 0;
    for (int i = 0; i < 2; i++) {
        if (!(i == 0 ? p->data : p->weights))
            continue;
        float ms = 0;
        seconds[n++] = CUDA_OK(env, cudaEventElapsedTime(&ms, p->ev[i], p->ev[i + 1])) ? 1e-3 * (double)ms : 0.0;
    }
}

static void parts_free(bwd_parts *p)
{
    for (int i = 0; i < 3; i++)
        if (p->ev[i])
            cudaEventDestroy(p->ev[i]);
}

/* ---- linear ------------------------------------------------------------------------------ */

typedef struct linear_bwd {
    cuda_gemm_call calls[3];
    int n_calls;
    const void *w;
    void *ones;          /* rows ones of the layer's dtype, for the bias's gradient */
    bwd_parts parts;
} linear_bwd;

static cudaDataType_t blas_type(dtype_t t)
{
    return t == DTYPE_BF16 ? CUDA_R_16BF : t == DTYPE_FP16 ? CUDA_R_16F : CUDA_R_32F;
}

static void linear_bwd_free(void *ctx, void *state)
{
    (void)ctx;
    linear_bwd *s = state;
    if (!s)
        return;
    if (s->ones)
        cudaFree(s->ones);
    parts_free(&s->parts);
    free(s);
}

static bench_status linear_bwd_setup(void *ctx, const layer *l, const void *w, void **state, char *impl, size_t len,
                                     int64_t *ws)
{
    cuda_env *env = ctx;
    linear_bwd *s = calloc(1, sizeof *s);
    if (!s)
        return BENCH_ERR_NOMEM;
    s->w = w;
    if ((s->n_calls = cuda_linear_bwd_plan(l, s->calls, impl, len)) < 0) {
        free(s);
        return BENCH_ERR_UNSUPPORTED;
    }
    s->parts.data = !l->no_input_grad, s->parts.weights = !l->frozen;
    int64_t f = l->in.d[l->in.rank - 1], rows = shape_numel(&l->in) / f;
    *ws = 0;
    if (l->p.bias && !l->frozen) {
        size_t es = dtype_size(l->dtype);
        void *host = malloc((size_t)rows * es);
        float one = 1.0f;
        bool ok = host != NULL;
        for (int64_t r = 0; ok && r < rows; r++)
            dtype_from_f32(l->dtype, (char *)host + r * (int64_t)es, &one, 1);
        ok = ok && CUDA_OK(env, cudaMalloc(&s->ones, (size_t)rows * es)) &&
             CUDA_OK(env, cudaMemcpy(s->ones, host, (size_t)rows * es, cudaMemcpyHostToDevice));
        free(host);
        if (!ok) {
            linear_bwd_free(env, s);
            return env->failed ? BENCH_ERR_BACKEND : BENCH_ERR_NOMEM;
        }
        *ws = rows * (int64_t)es;
    }
    snprintf(impl, len, "cublasGemmEx %s%s, fp32 sums: %d GEMMs%s", dtype_name(l->dtype),
             l->dtype == DTYPE_TF32 ? " (TF32)" : "", s->n_calls, l->p.bias && !l->frozen ? " (the bias's by ones)" : "");
    *state = s;
    return BENCH_OK;
}

static void linear_bwd_run(void *ctx, const layer *l, void *state, const void *const *in, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)w_;
    linear_bwd *s = state;
    size_t es = dtype_size(l->dtype);
    char *dw = (char *)out + cuda_bwd_offset(l, 1) * (int64_t)es;
    const void *operand[CUDA_PLAN_OPERANDS] = {
        [CUDA_PLAN_X] = in[0], [CUDA_PLAN_W] = s->w, [CUDA_PLAN_DY] = in[2], [CUDA_PLAN_DX] = out,
        [CUDA_PLAN_DW] = dw, [CUDA_PLAN_DB] = dw + l->p.out_features * l->in.d[l->in.rank - 1] * (int64_t)es,
        [CUDA_PLAN_ONES] = s->ones};
    cudaDataType_t t = blas_type(l->dtype);
    cublasComputeType_t compute = l->dtype == DTYPE_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_OK(env, cublasSetMathMode(env->cublas, CUBLAS_DEFAULT_MATH));
    bool between = false; /* the mark between the data half and the weights half */
    parts_mark(env, &s->parts, 0);
    for (int i = 0; i < s->n_calls; i++) {
        const cuda_gemm_call *g = &s->calls[i];
        if (g->c != CUDA_PLAN_DX && !between)
            parts_mark(env, &s->parts, 1), between = true;
        CUBLAS_OK(env, cublasGemmEx(env->cublas, g->ta ? CUBLAS_OP_T : CUBLAS_OP_N, g->tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    (int)g->m, (int)g->n, (int)g->k, &one, operand[g->a], t, (int)g->lda,
                                    operand[g->b], t, (int)g->ldb, &zero, (void *)operand[g->c], t, (int)g->ldc,
                                    compute, CUBLAS_GEMM_DEFAULT));
    }
    if (!between)
        parts_mark(env, &s->parts, 1);
    parts_mark(env, &s->parts, 2);
}

static bool linear_bwd_parts_enable(void *ctx, void *state, bool on)
{
    return parts_enable(ctx, &((linear_bwd *)state)->parts, on);
}

static void linear_bwd_parts_read(void *ctx, void *state, double *seconds)
{
    parts_read(ctx, &((linear_bwd *)state)->parts, seconds);
}

const backend_kernel cuda_linear_bwd_kernel = {.setup = linear_bwd_setup, .run = linear_bwd_run,
                                               .free = linear_bwd_free, .parts_enable = linear_bwd_parts_enable,
                                               .parts_read = linear_bwd_parts_read, .tolerance = cuda_gemm_tolerance};

/* ---- conv2d ------------------------------------------------------------------------------ */

typedef struct conv_bwd {
    cudnnTensorDescriptor_t x, y, b;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv_data, conv_filter; /* each with its algorithm's math */
    int data_algo, filter_algo;                          /* -1: that half does not run */
    void *workspace;                                     /* the larger of the two halves' */
    size_t workspace_bytes;
    const void *weights;
    int64_t weight_elems;                                /* before the bias */
    bwd_parts parts;
} conv_bwd;

static void conv_bwd_free(void *ctx, void *state)
{
    cuda_env *env = ctx;
    conv_bwd *c = state;
    if (!c)
        return;
    cudnnDestroyTensorDescriptor(c->x), cudnnDestroyTensorDescriptor(c->y), cudnnDestroyTensorDescriptor(c->b);
    cudnnDestroyFilterDescriptor(c->w);
    cudnnDestroyConvolutionDescriptor(c->conv_data), cudnnDestroyConvolutionDescriptor(c->conv_filter);
    if (c->workspace)
        CUDA_OK(env, cudaFree(c->workspace));
    parts_free(&c->parts);
    free(c);
}

/* One half's candidates, as cuDNN gives them (the search's fastest first, or the
 * heuristic's order): algorithm, status, math, workspace. */
typedef struct bwd_candidate {
    int algo;
    cudnnStatus_t status;
    cudnnMathType_t math;
    size_t workspace;
    float ms;
} bwd_candidate;

#define TO_BWD_CANDIDATES(perf, n, cand)                                                                       \
    for (int i_ = 0; i_ < (n); i_++)                                                                           \
        (cand)[i_] = (bwd_candidate){(int)(perf)[i_].algo, (perf)[i_].status, (perf)[i_].mathType,              \
                                     (perf)[i_].memory, (perf)[i_].time}

/* The candidates of the data (filter false) or filter half into cand (max); how many, or
 * -1 when a call failed. */
static int bwd_candidates(cuda_env *env, conv_bwd *c, bool filter, bwd_candidate *cand, int max)
{
    int n = 0;
    bool ok;
    if (filter) {
        cudnnConvolutionBwdFilterAlgoPerf_t *perf = calloc((size_t)max, sizeof *perf);
        if (!perf)
            return -1;
        ok = env->algo == CUDA_ALGO_HEURISTIC
                 ? CUDNN_OK(env, cudnnGetConvolutionBackwardFilterAlgorithm_v7(env->cudnn, c->x, c->y, c->conv_filter,
                                                                               c->w, max, &n, perf))
                 : CUDNN_OK(env, cudnnFindConvolutionBackwardFilterAlgorithm(env->cudnn, c->x, c->y, c->conv_filter,
                                                                             c->w, max, &n, perf));
        if (ok)
            TO_BWD_CANDIDATES(perf, n, cand);
        free(perf);
    } else {
        cudnnConvolutionBwdDataAlgoPerf_t *perf = calloc((size_t)max, sizeof *perf);
        if (!perf)
            return -1;
        ok = env->algo == CUDA_ALGO_HEURISTIC
                 ? CUDNN_OK(env, cudnnGetConvolutionBackwardDataAlgorithm_v7(env->cudnn, c->w, c->y, c->conv_data, c->x,
                                                                             max, &n, perf))
                 : CUDNN_OK(env, cudnnFindConvolutionBackwardDataAlgorithm(env->cudnn, c->w, c->y, c->conv_data, c->x,
                                                                           max, &n, perf));
        if (ok)
            TO_BWD_CANDIDATES(perf, n, cand);
        free(perf);
    }
    return ok ? n : -1;
}

static const char *filter_algo_name(int a)
{
    switch (a) {
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0: return "BWD_FILTER_ALGO_0";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1: return "BWD_FILTER_ALGO_1";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT: return "BWD_FILTER_FFT";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3: return "BWD_FILTER_ALGO_3";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED: return "BWD_FILTER_WINOGRAD_NONFUSED";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING: return "BWD_FILTER_FFT_TILING";
    default: return "unknown";
    }
}

/* Chooses one half's algorithm: the first candidate of the layer's math whose workspace
 * fits in what is held or can be allocated; its math set on the half's descriptor.
 * Writes "NAME" (with its math where not FMA) to name; false with why when none. */
static bool bwd_choose(cuda_env *env, conv_bwd *c, bool filter, int *algo, char *name, size_t name_len, char *why,
                       size_t why_len)
{
    int max = 0;
    if (!(filter ? CUDNN_OK(env, cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(env->cudnn, &max))
                 : CUDNN_OK(env, cudnnGetConvolutionBackwardDataAlgorithmMaxCount(env->cudnn, &max))))
        return false;
    bwd_candidate *cand = calloc((size_t)(max > 0 ? max : 1), sizeof *cand);
    int n = cand ? bwd_candidates(env, c, filter, cand, max) : -1;
    bool chosen = false;
    for (int i = 0; i < n && !chosen; i++) {
        if (cand[i].status != CUDNN_STATUS_SUCCESS || (!env->tf32 && cand[i].math != CUDNN_FMA_MATH))
            continue;
        if (cand[i].workspace > c->workspace_bytes) {
            void *bigger = NULL;
            if (cudaMalloc(&bigger, cand[i].workspace) != cudaSuccess) {
                (void)cudaGetLastError(); /* out of memory: the next candidate */
                continue;
            }
            if (c->workspace)
                cudaFree(c->workspace);
            c->workspace = bigger, c->workspace_bytes = cand[i].workspace;
        }
        cudnnConvolutionDescriptor_t d = filter ? c->conv_filter : c->conv_data;
        if (!CUDNN_OK(env, cudnnSetConvolutionMathType(d, cand[i].math)))
            break;
        *algo = cand[i].algo;
        snprintf(name, name_len, "%s%s", filter ? filter_algo_name(cand[i].algo) : cuda_bwd_data_algo_name(cand[i].algo),
                 cand[i].math == CUDNN_FMA_MATH ? "" : cand[i].math == CUDNN_TENSOR_OP_MATH ? " (tensor op)" : " (default math)");
        chosen = true;
    }
    if (!chosen && !env->failed)
        snprintf(why, why_len, "no cuDNN backward %s algorithm in this math%s", filter ? "filter" : "data",
                 n > 0 ? " whose workspace fits in device memory" : "");
    free(cand);
    return chosen;
}

static bench_status conv_bwd_setup(void *ctx, const layer *l, const void *w, void **state, char *impl, size_t len,
                                   int64_t *ws)
{
    cuda_env *env = ctx;
    env->tf32 = l->dtype != DTYPE_FP32; /* math beyond FMA: TF32, tensor cores for 16 bits */
    cudnnDataType_t type = cuda_dnn_type(l->dtype);
    const layer_params *p = &l->p;
    conv_bwd *c = calloc(1, sizeof *c);
    if (!c)
        return BENCH_ERR_NOMEM;
    int64_t k = p->out_channels, cg = l->in.d[1] / p->groups;
    c->weights = w;
    c->weight_elems = k * cg * p->kernel[0] * p->kernel[1];
    c->data_algo = c->filter_algo = -1;
    c->parts.data = !l->no_input_grad, c->parts.weights = !l->frozen;
    shape_t bias_shape = {4, {1, k, 1, 1}};
    char data_name[64] = "", filter_name[64] = "";
    if (!cuda_tensor_desc_typed(env, &c->x, &l->in, type, impl, len) ||
        !cuda_tensor_desc_typed(env, &c->y, &l->out, type, impl, len) ||
        !cuda_tensor_desc_typed(env, &c->b, &bias_shape, type, impl, len) ||
        !cuda_conv_filter_desc(env, l, k, cg, type, &c->w) || !cuda_conv_desc(env, l, &c->conv_data) ||
        !cuda_conv_desc(env, l, &c->conv_filter))
        goto fail;
    if (c->parts.data && !bwd_choose(env, c, false, &c->data_algo, data_name, sizeof data_name, impl, len))
        goto fail;
    if (c->parts.weights && !bwd_choose(env, c, true, &c->filter_algo, filter_name, sizeof filter_name, impl, len))
        goto fail;
    snprintf(impl, len, "cuDNN %s%s%s%s%s", data_name, *data_name && *filter_name ? " + " : "", filter_name,
             p->bias && c->parts.weights ? " + BackwardBias" : "", env->algo == CUDA_ALGO_HEURISTIC ? " (heuristic)" : "");
    *ws = (int64_t)c->workspace_bytes;
    *state = c;
    return BENCH_OK;
fail:
    conv_bwd_free(env, c);
    return env->failed ? BENCH_ERR_BACKEND : BENCH_ERR_UNSUPPORTED;
}

static void conv_bwd_run(void *ctx, const layer *l, void *state, const void *const *in, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)w_;
    conv_bwd *c = state;
    const float one = 1.0f, zero = 0.0f;
    size_t es = dtype_size(l->dtype);
    char *dw = (char *)out + cuda_bwd_offset(l, 1) * (int64_t)es;
    parts_mark(env, &c->parts, 0);
    if (c->data_algo >= 0)
        CUDNN_OK(env, cudnnConvolutionBackwardData(env->cudnn, &one, c->w, c->weights, c->y, in[2], c->conv_data,
                                                   (cudnnConvolutionBwdDataAlgo_t)c->data_algo, c->workspace,
                                                   c->workspace_bytes, &zero, c->x, out));
    parts_mark(env, &c->parts, 1);
    if (c->filter_algo >= 0) {
        CUDNN_OK(env, cudnnConvolutionBackwardFilter(env->cudnn, &one, c->x, in[0], c->y, in[2], c->conv_filter,
                                                     (cudnnConvolutionBwdFilterAlgo_t)c->filter_algo, c->workspace,
                                                     c->workspace_bytes, &zero, c->w, dw));
        if (l->p.bias)
            CUDNN_OK(env, cudnnConvolutionBackwardBias(env->cudnn, &one, c->y, in[2], &zero, c->b,
                                                       dw + c->weight_elems * (int64_t)es));
    }
    parts_mark(env, &c->parts, 2);
}

static bool conv_bwd_parts_enable(void *ctx, void *state, bool on)
{
    return parts_enable(ctx, &((conv_bwd *)state)->parts, on);
}

static void conv_bwd_parts_read(void *ctx, void *state, double *seconds)
{
    parts_read(ctx, &((conv_bwd *)state)->parts, seconds);
}

const backend_kernel cuda_conv2d_bwd_kernel = {.setup = conv_bwd_setup, .run = conv_bwd_run, .free = conv_bwd_free,
                                               .parts_enable = conv_bwd_parts_enable,
                                               .parts_read = conv_bwd_parts_read, .tolerance = cuda_gemm_tolerance};

/* ---- add, mul (same shapes) -------------------------------------------------------------- */

static bench_status same_shapes(const layer *l, char *impl, size_t len)
{
    if (shape_equal(&l->ins[0], &l->ins[1]))
        return BENCH_OK;
    snprintf(impl, len, "%s with broadcasting has no cuda backward yet", layer_kind_name(l->kind));
    return BENCH_ERR_UNSUPPORTED;
}

static bench_status add_bwd_setup(void *ctx, const layer *l, const void *w, void **state, char *impl, size_t len,
                                  int64_t *ws)
{
    (void)ctx, (void)w, (void)state, (void)ws;
    bench_status st = same_shapes(l, impl, len);
    if (st == BENCH_OK)
        snprintf(impl, len, "cudaMemcpyAsync of the gradient to each input's");
    return st;
}

static void add_bwd_run(void *ctx, const layer *l, void *state, const void *const *in, const void *w, void *out)
{
    cuda_env *env = ctx;
    (void)state, (void)w;
    size_t bytes = (size_t)shape_numel(&l->out) * dtype_size(l->dtype);
    for (int k = 0; k < 2; k++)
        CUDA_OK(env, cudaMemcpyAsync((char *)out + k * bytes, in[3], bytes, cudaMemcpyDeviceToDevice, env->stream));
}

const backend_kernel cuda_add_bwd_kernel = {.setup = add_bwd_setup, .run = add_bwd_run};

static bench_status mul_bwd_setup(void *ctx, const layer *l, const void *w, void **state, char *impl, size_t len,
                                  int64_t *ws)
{
    cuda_env *env = ctx;
    (void)w, (void)ws;
    bench_status st = same_shapes(l, impl, len);
    if (st != BENCH_OK)
        return st;
    shape_t flat = {4, {shape_numel(&l->out), 1, 1, 1}};
    cuda_simple *s = cuda_simple_create(env, &flat, &flat, &st, impl, len);
    if (!s)
        return st;
    bool ok = CUDNN_OK(env, cudnnCreateOpTensorDescriptor(&s->op)) &&
              CUDNN_OK(env, cudnnSetOpTensorDescriptor(s->op, CUDNN_OP_TENSOR_MUL, CUDNN_DATA_FLOAT, CUDNN_PROPAGATE_NAN));
    return cuda_simple_finish(env, s, ok, state, impl, len, "cudnnOpTensor (two products)");
}

/* d a = d out * b, d b = d out * a */
static void mul_bwd_run(void *ctx, const layer *l, void *state, const void *const *in, const void *w, void *out)
{
    cuda_env *env = ctx;
    (void)w;
    cuda_simple *s = state;
    const float one = 1.0f, zero = 0.0f;
    int64_t n = shape_numel(&l->out);
    for (int k = 0; k < 2; k++)
        CUDNN_OK(env, cudnnOpTensor(env->cudnn, s->op, &one, s->x, in[3], &one, s->x, in[1 - k], &zero, s->y,
                                    (float *)out + k * n));
}

const backend_kernel cuda_mul_bwd_kernel = {.setup = mul_bwd_setup, .run = mul_bwd_run, .free = cuda_simple_free,
                                            .tolerance = cuda_float_tolerance};
