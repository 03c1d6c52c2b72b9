/* Memory-bound kinds through cuDNN: batchnorm2d (inference), relu / relu6 / sigmoid,
 * softmax, the residual add, and the views (flatten, dropout: nothing to run). */
#include <stdlib.h>

#include "cuda_env.h"

typedef struct simple_cuda {
    cudnnTensorDescriptor_t x, y, extra;   /* extra: bn's per-channel descriptor */
    cudnnActivationDescriptor_t act;
    cudnnOpTensorDescriptor_t op;
    const float *w;
    double eps;
    int c;                                  /* channels (bn) */
} simple_cuda;

static void simple_free(cuda_env *env, void *state)
{
    (void)env;
    simple_cuda *s = state;
    if (!s)
        return;
    cudnnDestroyTensorDescriptor(s->x), cudnnDestroyTensorDescriptor(s->y), cudnnDestroyTensorDescriptor(s->extra);
    cudnnDestroyActivationDescriptor(s->act);
    cudnnDestroyOpTensorDescriptor(s->op);
    free(s);
}

/* Allocates the state with input and output descriptors; NULL with *st set (and the
 * reason in impl when unsupported) on failure. */
static simple_cuda *simple_new(cuda_env *env, const shape_t *in, const shape_t *out, bench_status *st, char *impl,
                               size_t len)
{
    simple_cuda *s = calloc(1, sizeof *s);
    *st = BENCH_ERR_NOMEM;
    if (!s)
        return NULL;
    if (!cuda_tensor_desc(env, &s->x, in, impl, len) || !cuda_tensor_desc(env, &s->y, out, impl, len)) {
        *st = env->failed ? BENCH_ERR_BACKEND : BENCH_ERR_UNSUPPORTED;
        simple_free(env, s);
        return NULL;
    }
    *st = BENCH_OK;
    return s;
}

static bench_status finish(cuda_env *env, simple_cuda *s, bool ok, void **state, char *impl, size_t len,
                           const char *name)
{
    if (!ok) {
        simple_free(env, s);
        return env->failed ? BENCH_ERR_BACKEND : BENCH_ERR_UNSUPPORTED;
    }
    snprintf(impl, len, "%s", name);
    *state = s;
    return BENCH_OK;
}

/* ---- batchnorm2d ------------------------------------------------------------------------ */

static bench_status bn_setup(cuda_env *env, const layer *l, const float *w, void **state, char *impl, size_t len,
                             int64_t *ws)
{
    bench_status st;
    (void)ws;
    if (l->p.eps < CUDNN_BN_MIN_EPSILON) {
        snprintf(impl, len, "eps below cuDNN's minimum %g", CUDNN_BN_MIN_EPSILON);
        return BENCH_ERR_UNSUPPORTED;
    }
    simple_cuda *s = simple_new(env, &l->in, &l->out, &st, impl, len);
    if (!s)
        return st;
    s->w = w;
    s->eps = l->p.eps;
    s->c = (int)l->in.d[1];
    shape_t per_channel = {4, {1, l->in.d[1], 1, 1}};
    return finish(env, s, cuda_tensor_desc(env, &s->extra, &per_channel, impl, len), state, impl, len,
                  "cudnnBatchNormalizationForwardInference");
}

static void bn_run(cuda_env *env, void *state, const float *in, const float *in2, float *out)
{
    (void)in2;
    simple_cuda *s = state;
    const float one = 1.0f, zero = 0.0f;
    CUDNN_OK(env, cudnnBatchNormalizationForwardInference(env->cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, s->x, in,
                                                          s->y, out, s->extra, s->w, s->w + s->c, s->w + 2 * s->c,
                                                          s->w + 3 * s->c, s->eps));
}

/* ---- activations ------------------------------------------------------------------------ */

static bench_status act_setup(cuda_env *env, const layer *l, const float *w, void **state, char *impl, size_t len,
                              int64_t *ws)
{
    (void)w, (void)ws;
    bench_status st;
    simple_cuda *s = simple_new(env, &l->in, &l->out, &st, impl, len);
    if (!s)
        return st;
    cudnnActivationMode_t mode = l->kind == LAYER_RELU    ? CUDNN_ACTIVATION_RELU
                                 : l->kind == LAYER_RELU6 ? CUDNN_ACTIVATION_CLIPPED_RELU
                                                          : CUDNN_ACTIVATION_SIGMOID;
    bool ok = CUDNN_OK(env, cudnnCreateActivationDescriptor(&s->act)) &&
              CUDNN_OK(env, cudnnSetActivationDescriptor(s->act, mode, CUDNN_PROPAGATE_NAN, 6.0));
    return finish(env, s, ok, state, impl, len, "cudnnActivationForward");
}

static void act_run(cuda_env *env, void *state, const float *in, const float *in2, float *out)
{
    (void)in2;
    simple_cuda *s = state;
    const float one = 1.0f, zero = 0.0f;
    CUDNN_OK(env, cudnnActivationForward(env->cudnn, s->act, &one, s->x, in, &zero, s->y, out));
}

/* ---- softmax: any dim, as [outer, n, inner, 1] in cuDNN's channel mode ------------------- */

static bench_status softmax_setup(cuda_env *env, const layer *l, const float *w, void **state, char *impl,
                                  size_t len, int64_t *ws)
{
    (void)w, (void)ws;
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < l->p.dim; i++)
        outer *= l->in.d[i];
    for (int64_t i = l->p.dim + 1; i < l->in.rank; i++)
        inner *= l->in.d[i];
    shape_t folded = {4, {outer, l->in.d[l->p.dim], inner, 1}};
    bench_status st;
    simple_cuda *s = simple_new(env, &folded, &folded, &st, impl, len);
    if (!s)
        return st;
    return finish(env, s, true, state, impl, len, "cudnnSoftmaxForward");
}

static void softmax_run(cuda_env *env, void *state, const float *in, const float *in2, float *out)
{
    (void)in2;
    simple_cuda *s = state;
    const float one = 1.0f, zero = 0.0f;
    CUDNN_OK(env, cudnnSoftmaxForward(env->cudnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one, s->x, in,
                                      &zero, s->y, out));
}

/* ---- add -------------------------------------------------------------------------------- */

static bench_status add_setup(cuda_env *env, const layer *l, const float *w, void **state, char *impl, size_t len,
                              int64_t *ws)
{
    (void)w, (void)ws;
    bench_status st;
    simple_cuda *s = simple_new(env, &l->in, &l->out, &st, impl, len);
    if (!s)
        return st;
    bool ok = CUDNN_OK(env, cudnnCreateOpTensorDescriptor(&s->op)) &&
              CUDNN_OK(env, cudnnSetOpTensorDescriptor(s->op, CUDNN_OP_TENSOR_ADD, CUDNN_DATA_FLOAT,
                                                       CUDNN_PROPAGATE_NAN));
    return finish(env, s, ok, state, impl, len, "cudnnOpTensor");
}

static void add_run(cuda_env *env, void *state, const float *in, const float *in2, float *out)
{
    simple_cuda *s = state;
    const float one = 1.0f, zero = 0.0f;
    CUDNN_OK(env, cudnnOpTensor(env->cudnn, s->op, &one, s->x, in, &one, s->x, in2, &zero, s->y, out));
}

/* ---- views ------------------------------------------------------------------------------ */

static bench_status view_setup(cuda_env *env, const layer *l, const float *w, void **state, char *impl, size_t len,
                               int64_t *ws)
{
    (void)env, (void)l, (void)w, (void)ws;
    snprintf(impl, len, "view");
    *state = NULL;
    return BENCH_OK;
}

static void view_run(cuda_env *env, void *state, const float *in, const float *in2, float *out)
{
    (void)env, (void)state, (void)in, (void)in2, (void)out;
}

static void view_free(cuda_env *env, void *state) { (void)env, (void)state; }

const cuda_kernel cuda_batchnorm2d_kernel = {.setup = bn_setup, .run = bn_run, .free = simple_free};
const cuda_kernel cuda_activation_kernel = {.setup = act_setup, .run = act_run, .free = simple_free};
const cuda_kernel cuda_softmax_kernel = {.setup = softmax_setup, .run = softmax_run, .free = simple_free};
const cuda_kernel cuda_add_kernel = {.setup = add_setup, .run = add_run, .free = simple_free};
const cuda_kernel cuda_view_kernel = {.setup = view_setup, .run = view_run, .free = view_free};
