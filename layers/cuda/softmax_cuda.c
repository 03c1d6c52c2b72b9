/* softmax through cuDNN: any dim, as [outer, n, inner, 1] in its channel mode; its
 * backward from the output and its gradient alone (dx = y (dy - sum(y dy))). */
#include "cuda_env.h"

static bench_status softmax_setup(void *ctx, const layer *l, const void *w, void **state, char *impl,
                                  size_t len, int64_t *ws)
{
    cuda_env *env = ctx;
    (void)w, (void)ws;
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < l->p.dim; i++)
        outer *= l->in.d[i];
    for (int64_t i = l->p.dim + 1; i < l->in.rank; i++)
        inner *= l->in.d[i];
    shape_t folded = {4, {outer, l->in.d[l->p.dim], inner, 1}};
    bench_status st;
    cuda_simple *s = cuda_simple_create(env, &folded, &folded, &st, impl, len);
    if (!s)
        return st;
    return cuda_simple_finish(env, s, true, state, impl, len,
                              l->pass == PASS_BACKWARD ? "cudnnSoftmaxBackward" : "cudnnSoftmaxForward");
}

static void softmax_run(void *ctx, const layer *l_, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)l_, (void)w_;
    const float *in = ins[0];
    cuda_simple *s = state;
    const float one = 1.0f, zero = 0.0f;
    CUDNN_OK(env, cudnnSoftmaxForward(env->cudnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one, s->x, in,
                                      &zero, s->y, out));
}

const backend_kernel cuda_softmax_kernel = {.setup = softmax_setup, .run = softmax_run, .free = cuda_simple_free,
                                            .tolerance = cuda_float_tolerance};

/* the backward: y is ins[1], dy ins[2] */
static void softmax_bwd_run(void *ctx, const layer *l_, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)l_, (void)w_;
    cuda_simple *s = state;
    const float one = 1.0f, zero = 0.0f;
    CUDNN_OK(env, cudnnSoftmaxBackward(env->cudnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one, s->y,
                                       ins[1], s->y, ins[2], &zero, s->x, out));
}

const backend_kernel cuda_softmax_bwd_kernel = {.setup = softmax_setup, .run = softmax_bwd_run,
                                                .free = cuda_simple_free, .tolerance = cuda_float_tolerance};
