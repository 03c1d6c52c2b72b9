/* maxpool2d, avgpool2d and adaptive_avgpool2d through cudnnPoolingForward. cuDNN has
 * no dilation, no ceil_mode and no adaptive windows: such layers are reported as
 * unsupported (a skipped row, never a wrong one) unless they reduce to plain pooling,
 * e.g. adaptive pooling whose output divides its input (ResNet's 7x7 -> 1x1). */
#include <stdlib.h>

#include "cuda_env.h"

typedef struct pool_cuda {
    cudnnTensorDescriptor_t x, y;
    cudnnPoolingDescriptor_t pool;
} pool_cuda;

static void pool_free(cuda_env *env, void *state)
{
    (void)env;
    pool_cuda *p = state;
    if (!p)
        return;
    cudnnDestroyTensorDescriptor(p->x), cudnnDestroyTensorDescriptor(p->y);
    cudnnDestroyPoolingDescriptor(p->pool);
    free(p);
}

static bench_status pool_setup(cuda_env *env, const layer *l, const float *w, void **state, char *impl, size_t len,
                               int64_t *ws)
{
    (void)w, (void)ws;
    const layer_params *lp = &l->p;
    int64_t k[2], s[2], pad[2];
    cudnnPoolingMode_t mode;
    if (l->kind == LAYER_ADAPTIVE_AVGPOOL2D) {
        for (int a = 0; a < 2; a++) {
            if (l->in.d[2 + a] % lp->output_size[a]) {
                snprintf(impl, len, "cuDNN has no adaptive pooling with uneven windows");
                return BENCH_ERR_UNSUPPORTED;
            }
            k[a] = s[a] = l->in.d[2 + a] / lp->output_size[a];
            pad[a] = 0;
        }
        mode = CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
    } else {
        if (lp->dilation[0] != 1 || lp->dilation[1] != 1) {
            snprintf(impl, len, "cuDNN pooling has no dilation");
            return BENCH_ERR_UNSUPPORTED;
        }
        for (int a = 0; a < 2; a++)
            k[a] = lp->kernel[a], s[a] = lp->stride[a], pad[a] = lp->padding[a];
        mode = l->kind == LAYER_MAXPOOL2D    ? CUDNN_POOLING_MAX_DETERMINISTIC
               : lp->count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                       : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    }
    pool_cuda *p = calloc(1, sizeof *p);
    if (!p)
        return BENCH_ERR_NOMEM;
    int n, c, h, wd;
    bool ok = cuda_tensor_desc(env, &p->x, &l->in, impl, len) && cuda_tensor_desc(env, &p->y, &l->out, impl, len) &&
              CUDNN_OK(env, cudnnCreatePoolingDescriptor(&p->pool)) &&
              CUDNN_OK(env, cudnnSetPooling2dDescriptor(p->pool, mode, CUDNN_PROPAGATE_NAN, (int)k[0], (int)k[1],
                                                        (int)pad[0], (int)pad[1], (int)s[0], (int)s[1])) &&
              CUDNN_OK(env, cudnnGetPooling2dForwardOutputDim(p->pool, p->x, &n, &c, &h, &wd));
    if (ok && (h != l->out.d[2] || wd != l->out.d[3])) {
        /* ceil_mode windows that cuDNN's floor rule does not produce */
        snprintf(impl, len, "cuDNN pooling gives %dx%d, torch's ceil_mode %lldx%lld", h, wd,
                 (long long)l->out.d[2], (long long)l->out.d[3]);
        pool_free(env, p);
        return BENCH_ERR_UNSUPPORTED;
    }
    if (!ok) {
        pool_free(env, p);
        return env->failed ? BENCH_ERR_BACKEND : BENCH_ERR_UNSUPPORTED;
    }
    snprintf(impl, len, "cudnnPoolingForward");
    *state = p;
    return BENCH_OK;
}

static void pool_run(cuda_env *env, void *state, const float *const *ins, float *out)
{
    const float *in = ins[0];
    pool_cuda *p = state;
    const float one = 1.0f, zero = 0.0f;
    CUDNN_OK(env, cudnnPoolingForward(env->cudnn, p->pool, &one, p->x, in, &zero, p->y, out));
}

const cuda_kernel cuda_pool_kernel = {.setup = pool_setup, .run = pool_run, .free = pool_free};
