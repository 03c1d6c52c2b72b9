/* maxpool2d, avgpool2d and adaptive_avgpool2d (mean: cudnnReduceTensor, at the end): through cudnnPoolingForward where cuDNN
 * can describe the windows, else through our kernel (cuda_kernels.cu). cuDNN has no
 * dilation, no ceil_mode windows past its floor rule and no adaptive windows; adaptive
 * pooling whose output divides its input (ResNet's 7x7 -> 1x1) is plain pooling. Our
 * kernel takes the windows per axis, worked out on the host at setup as the plain-C
 * reference does (layers/pool.c), and uploaded once. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_env.h"

typedef struct pool_cuda {
    cudnnTensorDescriptor_t x, y;          /* cuDNN's path */
    cudnnPoolingDescriptor_t pool;
    void *tables;                          /* our kernel: fy, ny [oh], fx, nx [ow], dy [oh], dx [ow] */
    int64_t planes, h, w, oh, ow, dil[2];
    int is_max;
} pool_cuda;

static void pool_free(void *ctx, void *state)
{
    cuda_env *env = ctx;
    pool_cuda *p = state;
    if (!p)
        return;
    if (p->x)
        cudnnDestroyTensorDescriptor(p->x);
    if (p->y)
        cudnnDestroyTensorDescriptor(p->y);
    if (p->pool)
        cudnnDestroyPoolingDescriptor(p->pool);
    if (p->tables)
        CUDA_OK(env, cudaFree(p->tables));
    free(p);
}

/* Output o's window along one axis: its first valid input index, its valid taps and
 * the axis's share of the average's divisor, as layers/pool.c computes them. */
static void pool_axis(const layer *l, int a, int64_t o, int64_t *first, int64_t *taps, float *div)
{
    const layer_params *lp = &l->p;
    int64_t in = l->in.d[2 + a];
    if (l->kind == LAYER_ADAPTIVE_AVGPOOL2D) {
        int64_t out = l->out.d[2 + a];
        int64_t lo = (int64_t)floor((double)o * in / out), hi = (int64_t)ceil((double)(o + 1) * in / out);
        *first = lo, *taps = hi - lo, *div = (float)(hi - lo);
        return;
    }
    int64_t k = lp->kernel[a], d = lp->dilation[a], start = o * lp->stride[a] - lp->padding[a];
    int64_t i0 = 0, i1 = k, padded = 0;
    while (i0 < k && start + i0 * d < 0)
        i0++;
    while (i1 > i0 && start + (i1 - 1) * d >= in)
        i1--;
    for (int64_t i = 0; i < k; i++)           /* torch's divisor: the window clipped to the padded input */
        padded += start + i * d < in + lp->padding[a];
    *first = i0 < i1 ? start + i0 * d : 0;
    *taps = i1 - i0;
    *div = (float)(l->kind == LAYER_AVGPOOL2D && lp->count_include_pad ? padded : i1 - i0);
}

static bench_status pool_setup_kernel(cuda_env *env, const layer *l, pool_cuda *p, char *impl, size_t len,
                                      int64_t *ws, const char *why)
{
    p->planes = l->in.d[0] * l->in.d[1], p->h = l->in.d[2], p->w = l->in.d[3];
    p->oh = l->out.d[2], p->ow = l->out.d[3];
    p->is_max = l->kind == LAYER_MAXPOOL2D;
    p->dil[0] = p->is_max ? l->p.dilation[0] : 1, p->dil[1] = p->is_max ? l->p.dilation[1] : 1;
    size_t n = (size_t)(p->oh + p->ow), bytes = n * (2 * sizeof(int64_t) + sizeof(float));
    int64_t *host = malloc(bytes);
    if (!host)
        return BENCH_ERR_NOMEM;
    int64_t *fy = host, *ny = fy + p->oh, *fx = ny + p->oh, *nx = fx + p->ow;
    float *dy = (float *)(nx + p->ow), *dx = dy + p->oh;
    for (int64_t o = 0; o < p->oh; o++)
        pool_axis(l, 0, o, &fy[o], &ny[o], &dy[o]);
    for (int64_t o = 0; o < p->ow; o++)
        pool_axis(l, 1, o, &fx[o], &nx[o], &dx[o]);
    bool ok = CUDA_OK(env, cudaMalloc(&p->tables, bytes)) &&
              CUDA_OK(env, cudaMemcpy(p->tables, host, bytes, cudaMemcpyHostToDevice));
    free(host);
    if (!ok)
        return BENCH_ERR_BACKEND;
    *ws = (int64_t)bytes;
    snprintf(impl, len, "kernel (layerbench): %s", why);
    return BENCH_OK;
}

static bench_status pool_setup(void *ctx, const layer *l, const void *w, void **state, char *impl, size_t len,
                               int64_t *ws)
{
    cuda_env *env = ctx;
    (void)w;
    const layer_params *lp = &l->p;
    int64_t k[2], s[2], pad[2];
    cudnnPoolingMode_t mode;
    const char *why = NULL;
    if (l->kind == LAYER_ADAPTIVE_AVGPOOL2D) {
        for (int a = 0; a < 2; a++) {
            if (l->in.d[2 + a] % lp->output_size[a])
                why = "uneven adaptive windows";
            k[a] = s[a] = l->in.d[2 + a] / lp->output_size[a];
            pad[a] = 0;
        }
        mode = CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
    } else {
        if (lp->dilation[0] != 1 || lp->dilation[1] != 1)
            why = "dilation";
        for (int a = 0; a < 2; a++)
            k[a] = lp->kernel[a], s[a] = lp->stride[a], pad[a] = lp->padding[a];
        mode = l->kind == LAYER_MAXPOOL2D    ? CUDNN_POOLING_MAX_DETERMINISTIC
               : lp->count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                       : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    }
    pool_cuda *p = calloc(1, sizeof *p);
    if (!p)
        return BENCH_ERR_NOMEM;
    bench_status st = BENCH_OK;
    if (!why) {
        int n, c, h, wd;
        char reason[160] = "";
        bool ok = cuda_tensor_desc(env, &p->x, &l->in, reason, sizeof reason) &&
                  cuda_tensor_desc(env, &p->y, &l->out, reason, sizeof reason) &&
                  CUDNN_OK(env, cudnnCreatePoolingDescriptor(&p->pool)) &&
                  CUDNN_OK(env, cudnnSetPooling2dDescriptor(p->pool, mode, CUDNN_PROPAGATE_NAN, (int)k[0], (int)k[1],
                                                            (int)pad[0], (int)pad[1], (int)s[0], (int)s[1])) &&
                  CUDNN_OK(env, cudnnGetPooling2dForwardOutputDim(p->pool, p->x, &n, &c, &h, &wd));
        if (env->failed)
            st = BENCH_ERR_BACKEND;
        else if (!ok)
            why = "a tensor cuDNN cannot describe";
        else if (h != l->out.d[2] || wd != l->out.d[3])
            why = "ceil_mode windows";       /* cuDNN's floor rule gives fewer outputs */
        else
            snprintf(impl, len, "cudnnPoolingForward");
    }
    if (st == BENCH_OK && why)
        st = pool_setup_kernel(env, l, p, impl, len, ws, why);
    if (st != BENCH_OK) {
        pool_free(env, p);
        return st;
    }
    *state = p;
    return BENCH_OK;
}

static void pool_run(void *ctx, const layer *l_, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)l_, (void)w_;
    pool_cuda *p = state;
    if (p->tables) {
        int64_t *fy = p->tables, *ny = fy + p->oh, *fx = ny + p->oh, *nx = fx + p->ow;
        float *dy = (float *)(nx + p->ow), *dx = dy + p->oh;
        CUDA_OK(env, cuda_pool_launch(env->stream, ins[0], out, p->planes, p->h, p->w, p->oh, p->ow, fy, ny, dy, fx,
                                      nx, dx, p->dil[0], p->dil[1], p->is_max));
        return;
    }
    const float one = 1.0f, zero = 0.0f;
    CUDNN_OK(env, cudnnPoolingForward(env->cudnn, p->pool, &one, p->x, ins[0], &zero, p->y, out));
}

const backend_kernel cuda_pool_kernel = {.setup = pool_setup, .run = pool_run, .free = pool_free,
                                         .tolerance = cuda_float_tolerance};

/* The backward, where cuDNN describes the windows (cudnnPoolingBackward, from x, y and
 * dy; max pooling's gradient to the window's maximum); where only our forward kernel
 * does (dilation, ceil_mode, uneven adaptive windows), refused with the reason. */
static bench_status pool_bwd_setup(void *ctx, const layer *l, const void *w, void **state, char *impl, size_t len,
                                   int64_t *ws)
{
    cuda_env *env = ctx;
    bench_status st = pool_setup(ctx, l, w, state, impl, len, ws);
    if (st != BENCH_OK)
        return st;
    pool_cuda *p = *state;
    if (p->tables) {
        char why[BACKEND_IMPL_LEN];
        const char *colon = strstr(impl, ": ");
        snprintf(why, sizeof why, "%s", colon ? colon + 2 : impl);
        snprintf(impl, len, "no cuda backward for windows cuDNN cannot describe (%s)", why);
        pool_free(env, p);
        *state = NULL, *ws = 0;
        return BENCH_ERR_UNSUPPORTED;
    }
    snprintf(impl, len, "cudnnPoolingBackward");
    return BENCH_OK;
}

static void pool_bwd_run(void *ctx, const layer *l_, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)l_, (void)w_;
    pool_cuda *p = state;
    const float one = 1.0f, zero = 0.0f;
    CUDNN_OK(env, cudnnPoolingBackward(env->cudnn, p->pool, &one, p->y, ins[1], p->y, ins[2], p->x, ins[0], &zero,
                                       p->x, out));
}

const backend_kernel cuda_pool_bwd_kernel = {.setup = pool_bwd_setup, .run = pool_bwd_run, .free = pool_free,
                                             .tolerance = cuda_float_tolerance};

/* ---- mean: cudnnReduceTensor's average, the input seen as [outer, size, inner, 1] ------- */

typedef struct mean_cuda {
    cudnnTensorDescriptor_t x, y;
    cudnnReduceTensorDescriptor_t reduce;
    void *workspace;
    size_t workspace_bytes;
} mean_cuda;

static void mean_free(void *ctx, void *state)
{
    cuda_env *env = ctx;
    mean_cuda *m = state;
    if (!m)
        return;
    if (m->x)
        cudnnDestroyTensorDescriptor(m->x);
    if (m->y)
        cudnnDestroyTensorDescriptor(m->y);
    if (m->reduce)
        cudnnDestroyReduceTensorDescriptor(m->reduce);
    if (m->workspace)
        CUDA_OK(env, cudaFree(m->workspace));
    free(m);
}

static bench_status mean_setup(void *ctx, const layer *l, const void *w, void **state, char *impl, size_t len,
                               int64_t *ws)
{
    cuda_env *env = ctx;
    (void)w;
    int64_t outer, size, inner;
    layer_mean_dims(l, &outer, &size, &inner);
    shape_t x = {4, {outer, size, inner, 1}}, y = {4, {outer, 1, inner, 1}};
    mean_cuda *m = calloc(1, sizeof *m);
    if (!m)
        return BENCH_ERR_NOMEM;
    bool ok = cuda_tensor_desc(env, &m->x, &x, impl, len) && cuda_tensor_desc(env, &m->y, &y, impl, len);
    if (!ok) {
        mean_free(env, m);
        return env->failed ? BENCH_ERR_BACKEND : BENCH_ERR_UNSUPPORTED;
    }
    ok = CUDNN_OK(env, cudnnCreateReduceTensorDescriptor(&m->reduce)) &&
         CUDNN_OK(env, cudnnSetReduceTensorDescriptor(m->reduce, CUDNN_REDUCE_TENSOR_AVG, CUDNN_DATA_FLOAT,
                                                      CUDNN_PROPAGATE_NAN, CUDNN_REDUCE_TENSOR_NO_INDICES,
                                                      CUDNN_32BIT_INDICES)) &&
         CUDNN_OK(env, cudnnGetReductionWorkspaceSize(env->cudnn, m->reduce, m->x, m->y, &m->workspace_bytes)) &&
         (!m->workspace_bytes || CUDA_OK(env, cudaMalloc(&m->workspace, m->workspace_bytes)));
    if (!ok) {
        mean_free(env, m);
        return BENCH_ERR_BACKEND;
    }
    snprintf(impl, len, "cudnnReduceTensor (average)");
    *ws = (int64_t)m->workspace_bytes;
    *state = m;
    return BENCH_OK;
}

static void mean_run(void *ctx, const layer *l, void *state, const void *const *ins, const void *w, void *out)
{
    cuda_env *env = ctx;
    mean_cuda *m = state;
    (void)l, (void)w;
    const float one = 1.0f, zero = 0.0f;
    CUDNN_OK(env, cudnnReduceTensor(env->cudnn, m->reduce, NULL, 0, m->workspace, m->workspace_bytes, &one, m->x,
                                    ins[0], &zero, m->y, out));
}

const backend_kernel cuda_mean_kernel = {.setup = mean_setup, .run = mean_run, .free = mean_free,
                                         .tolerance = cuda_float_tolerance};
