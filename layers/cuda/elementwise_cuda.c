/* Memory-bound kinds: through cuDNN batchnorm2d (inference), relu / relu6 / sigmoid /
 * silu (cuDNN's swish) / tanh, mul (cudnnOpTensor, broadcasting one 4-d input); add of
 * equal shapes on our float4 kernel, add and mul with any other broadcasting on our
 * broadcasting kernel (index_cuda_math.h); hardswish and hardsigmoid through our own
 * kernel (cuda_kernels.cu); concat as one strided device copy per input; and the views
 * (flatten, dropout, stochastic_depth: nothing to run). */
#include <stdlib.h>

#include "cuda_env.h"
#include "cuda_plan.h"

/* ---- batchnorm2d ------------------------------------------------------------------------ */

/* The descriptors of batch norm over l: x, y and the per-channel one (extra). */
static bench_status bn_create(cuda_env *env, const layer *l, const void *w, void **state, char *impl, size_t len,
                              const char *name)
{
    bench_status st;
    if (l->p.eps < CUDNN_BN_MIN_EPSILON) {
        snprintf(impl, len, "eps below cuDNN's minimum %g", CUDNN_BN_MIN_EPSILON);
        return BENCH_ERR_UNSUPPORTED;
    }
    cuda_simple *s = cuda_simple_create(env, &l->in, &l->out, &st, impl, len);
    if (!s)
        return st;
    s->w = w;
    s->eps = l->p.eps;
    s->c = (int)l->in.d[1];
    shape_t per_channel = {4, {1, l->in.d[1], 1, 1}};
    return cuda_simple_finish(env, s, cuda_tensor_desc(env, &s->extra, &per_channel, impl, len), state, impl, len,
                              name);
}

static bench_status bn_setup(void *ctx, const layer *l, const void *w, void **state, char *impl, size_t len,
                             int64_t *ws)
{
    (void)ws;
    return bn_create(ctx, l, w, state, impl, len,
                     l->pass == PASS_TRAIN ? "cudnnBatchNormalizationForwardTraining"
                                           : "cudnnBatchNormalizationForwardInference");
}

/* Inference: by the running statistics. Training (a layer of PASS_TRAIN): by the batch's,
 * the running ones updated as torch does ((1 - momentum) r + momentum s, the variance
 * unbiased, which cuDNN's exponentialAverageFactor is), in the weights the layer was
 * given (allocated writable; the kernel table's const is the forward's promise). */
static void bn_run(void *ctx, const layer *l, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)w_;
    const float *in = ins[0];
    cuda_simple *s = state;
    const float one = 1.0f, zero = 0.0f;
    float *w = (float *)s->w;
    if (l->pass == PASS_TRAIN)
        CUDNN_OK(env, cudnnBatchNormalizationForwardTraining(env->cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, s->x, in,
                                                             s->y, out, s->extra, w, w + s->c, l->p.momentum,
                                                             w + 2 * s->c, w + 3 * s->c, s->eps, NULL, NULL));
    else
        CUDNN_OK(env, cudnnBatchNormalizationForwardInference(env->cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, s->x,
                                                              in, s->y, out, s->extra, w, w + s->c, w + 2 * s->c,
                                                              w + 3 * s->c, s->eps));
}

/* The backward of the training forward: the batch's statistics computed again from x
 * (no saved ones are passed), gamma's and beta's gradients after the input's, zeros for
 * the running statistics (they learn nothing), and for gamma and beta too without
 * affine (the reference's). */
static bench_status bn_bwd_setup(void *ctx, const layer *l, const void *w, void **state, char *impl, size_t len,
                                 int64_t *ws)
{
    (void)ws;
    return bn_create(ctx, l, w, state, impl, len, "cudnnBatchNormalizationBackward");
}

static void bn_bwd_run(void *ctx, const layer *l, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)w_;
    cuda_simple *s = state;
    const float one = 1.0f, zero = 0.0f;
    float *dw = (float *)out + shape_numel(&l->in);
    CUDNN_OK(env, cudnnBatchNormalizationBackward(env->cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, s->x,
                                                  ins[0], s->y, ins[2], s->x, out, s->extra, s->w, dw, dw + s->c, s->eps,
                                                  NULL, NULL));
    size_t c_bytes = (size_t)s->c * sizeof(float);
    CUDA_OK(env, cudaMemsetAsync(l->p.affine ? dw + 2 * s->c : dw, 0, (l->p.affine ? 2 : 4) * c_bytes, env->stream));
}

const backend_kernel cuda_batchnorm2d_bwd_kernel = {.setup = bn_bwd_setup, .run = bn_bwd_run,
                                                    .free = cuda_simple_free, .tolerance = cuda_float_tolerance};

/* ---- activations ------------------------------------------------------------------------ */

/* relu, relu6 (clipped at 6), silu (swish, beta 1), tanh or sigmoid on cuDNN's
 * activation descriptor */
static bool act_desc(cuda_env *env, const layer *l, cuda_simple *s)
{
    cudnnActivationMode_t mode = l->kind == LAYER_RELU    ? CUDNN_ACTIVATION_RELU
                                 : l->kind == LAYER_RELU6 ? CUDNN_ACTIVATION_CLIPPED_RELU
                                 : l->kind == LAYER_SILU  ? CUDNN_ACTIVATION_SWISH
                                 : l->kind == LAYER_TANH  ? CUDNN_ACTIVATION_TANH
                                                          : CUDNN_ACTIVATION_SIGMOID;
    return CUDNN_OK(env, cudnnCreateActivationDescriptor(&s->act)) &&
           CUDNN_OK(env, cudnnSetActivationDescriptor(s->act, mode, CUDNN_PROPAGATE_NAN, 6.0)) &&
           (mode != CUDNN_ACTIVATION_SWISH || CUDNN_OK(env, cudnnSetActivationDescriptorSwishBeta(s->act, 1.0)));
}

/* The forward, or the backward (a layer of PASS_BACKWARD) from x (ins[0]), y (ins[1]) and
 * dy (ins[2]) */
static bench_status act_setup(void *ctx, const layer *l, const void *w, void **state, char *impl, size_t len,
                              int64_t *ws)
{
    cuda_env *env = ctx;
    (void)w, (void)ws;
    bench_status st;
    cuda_simple *s = cuda_simple_create(env, &l->in, &l->out, &st, impl, len);
    if (!s)
        return st;
    if (l->pass == PASS_BACKWARD)
        return cuda_simple_finish(env, s, act_desc(env, l, s), state, impl, len, "cudnnActivationBackward");
    if (l->kind == LAYER_RELU) /* our float4 kernel (cuda_kernels.cu says why) */
        return cuda_simple_finish(env, s, true, state, impl, len, "relu: our float4 kernel");
    return cuda_simple_finish(env, s, act_desc(env, l, s), state, impl, len, "cudnnActivationForward");
}

static void act_run(void *ctx, const layer *l, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)w_;
    const float *in = ins[0];
    cuda_simple *s = state;
    const float one = 1.0f, zero = 0.0f;
    if (!s->act)
        CUDA_OK(env, cuda_relu_launch(env->stream, in, out, shape_numel(&l->out)));
    else
        CUDNN_OK(env, cudnnActivationForward(env->cudnn, s->act, &one, s->x, in, &zero, s->y, out));
}

static void act_bwd_run(void *ctx, const layer *l, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)l, (void)w_;
    cuda_simple *s = state;
    const float one = 1.0f, zero = 0.0f;
    CUDNN_OK(env, cudnnActivationBackward(env->cudnn, s->act, &one, s->y, ins[1], s->y, ins[2], s->x, ins[0], &zero,
                                          s->x, out));
}

const backend_kernel cuda_activation_bwd_kernel = {.setup = act_setup, .run = act_bwd_run,
                                                   .free = cuda_simple_free, .tolerance = cuda_float_tolerance};

/* ---- add: our float4 kernel; with broadcasting, our broadcasting kernel (mul's too) ------ */

/* add's or mul's broadcasting: the three shapes as the kernel takes them (index_cuda_math.h) */
typedef struct broadcast_cuda {
    lb_dims a, b, out;
} broadcast_cuda;

static broadcast_cuda *broadcast_plan(const layer *l, char *impl, size_t len, bench_status *st)
{
    *st = BENCH_ERR_UNSUPPORTED;
    if (l->out.rank > LB_MAX_RANK) {
        snprintf(impl, len, "rank above the broadcasting kernel's %d", LB_MAX_RANK);
        return NULL;
    }
    broadcast_cuda *b = calloc(1, sizeof *b);
    *st = BENCH_ERR_NOMEM;
    if (!b)
        return NULL;
    b->a = cuda_lb_dims(&l->ins[0]), b->b = cuda_lb_dims(&l->ins[1]), b->out = cuda_lb_dims(&l->out);
    snprintf(impl, len, "%s: our broadcasting kernel", layer_kind_name(l->kind));
    *st = BENCH_OK;
    return b;
}

static bench_status add_setup(void *ctx, const layer *l, const void *w, void **state, char *impl, size_t len,
                              int64_t *ws)
{
    (void)ctx, (void)w, (void)ws;
    *state = NULL;
    if (!shape_equal(&l->ins[0], &l->ins[1])) {
        bench_status st;
        *state = broadcast_plan(l, impl, len, &st);
        return st;
    }
    /* our float4 kernel (cuda_kernels.cu says why) */
    snprintf(impl, len, "add: our float4 kernel");
    return BENCH_OK;
}

static void add_run(void *ctx, const layer *l, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)w_;
    broadcast_cuda *b = state;
    if (b)
        CUDA_OK(env, cuda_broadcast_launch(env->stream, ins[0], ins[1], out, 0, &b->a, &b->b, &b->out));
    else
        CUDA_OK(env, cuda_add_launch(env->stream, ins[0], ins[1], out, shape_numel(&l->out)));
}

/* ---- hardswish, hardsigmoid: our kernel ------------------------------------------------- */

typedef struct hard_cuda {
    int swish;
    int64_t n;
} hard_cuda;

static bench_status hard_setup(void *ctx, const layer *l, const void *w, void **state, char *impl, size_t len,
                               int64_t *ws)
{
    cuda_env *env = ctx;
    (void)env, (void)w, (void)ws;
    hard_cuda *h = calloc(1, sizeof *h);
    if (!h)
        return BENCH_ERR_NOMEM;
    h->swish = l->kind == LAYER_HARDSWISH;
    h->n = shape_numel(&l->out);
    snprintf(impl, len, "kernel (layerbench)");
    *state = h;
    return BENCH_OK;
}

static void hard_run(void *ctx, const layer *l_, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)l_, (void)w_;
    hard_cuda *h = state;
    CUDA_OK(env, cuda_hard_activation_launch(env->stream, h->swish, ins[0], out, h->n));
}

static void plain_free(void *ctx, void *state)
{
    (void)ctx;
    free(state);
}

/* ---- layer_scale: cudnnOpTensor, gamma [1, size, 1, 1] broadcast over [outer, size, inner, 1] -- */

static bench_status layer_scale_setup(void *ctx, const layer *l, const void *w, void **state, char *impl, size_t len,
                                      int64_t *ws)
{
    cuda_env *env = ctx;
    (void)ws;
    int64_t outer, size, inner;
    layer_slice_dims(l, &outer, &size, &inner);
    shape_t x = {4, {outer, size, inner, 1}}, g = {4, {1, size, 1, 1}};
    bench_status st;
    cuda_simple *s = cuda_simple_create(env, &x, &x, &st, impl, len);
    if (!s)
        return st;
    s->w = w;
    bool ok = cuda_tensor_desc(env, &s->extra, &g, impl, len) && CUDNN_OK(env, cudnnCreateOpTensorDescriptor(&s->op)) &&
              CUDNN_OK(env, cudnnSetOpTensorDescriptor(s->op, CUDNN_OP_TENSOR_MUL, CUDNN_DATA_FLOAT, CUDNN_PROPAGATE_NAN));
    return cuda_simple_finish(env, s, ok, state, impl, len, "cudnnOpTensor");
}

static void layer_scale_run(void *ctx, const layer *l, void *state, const void *const *ins, const void *w, void *out)
{
    cuda_env *env = ctx;
    cuda_simple *s = state;
    (void)l, (void)w;
    const float one = 1.0f, zero = 0.0f;
    CUDNN_OK(env, cudnnOpTensor(env->cudnn, s->op, &one, s->x, ins[0], &one, s->extra, s->w, &zero, s->y, out));
}

const backend_kernel cuda_layer_scale_kernel = {.setup = layer_scale_setup, .run = layer_scale_run,
                                                .free = cuda_simple_free, .tolerance = cuda_float_tolerance};

/* ---- mul: cudnnOpTensor, which broadcasts its second operand ------------------------------ */

typedef struct mul_cuda {
    cuda_simple *s;   /* x: the full operand (and output), extra: the broadcast one */
    int full;         /* which input is the full one */
    broadcast_cuda *b; /* else: our broadcasting kernel */
} mul_cuda;

static bench_status mul_setup(void *ctx, const layer *l, const void *w, void **state, char *impl, size_t len,
                              int64_t *ws)
{
    cuda_env *env = ctx;
    (void)w, (void)ws;
    int full = shape_equal(&l->ins[0], &l->out) ? 0 : shape_equal(&l->ins[1], &l->out) ? 1 : -1;
    bench_status st;
    if (full < 0 || l->out.rank != 4) { /* cuDNN's OpTensor broadcasts one 4-d input only */
        mul_cuda *m = calloc(1, sizeof *m);
        if (!m)
            return BENCH_ERR_NOMEM;
        m->b = broadcast_plan(l, impl, len, &st);
        if (!m->b) {
            free(m);
            return st;
        }
        *state = m;
        return BENCH_OK;
    }
    cuda_simple *s = cuda_simple_create(env, &l->out, &l->out, &st, impl, len);
    if (!s)
        return st;
    mul_cuda *m = calloc(1, sizeof *m);
    if (!m) {
        cuda_simple_free(env, s);
        return BENCH_ERR_NOMEM;
    }
    m->s = s;
    m->full = full;
    bool ok = cuda_tensor_desc(env, &s->extra, &l->ins[1 - full], impl, len) &&
              CUDNN_OK(env, cudnnCreateOpTensorDescriptor(&s->op)) &&
              CUDNN_OK(env, cudnnSetOpTensorDescriptor(s->op, CUDNN_OP_TENSOR_MUL, CUDNN_DATA_FLOAT,
                                                       CUDNN_PROPAGATE_NAN));
    if (!ok) {
        cuda_simple_free(env, s);
        free(m);
        return env->failed ? BENCH_ERR_BACKEND : BENCH_ERR_UNSUPPORTED;
    }
    snprintf(impl, len, "cudnnOpTensor");
    *state = m;
    return BENCH_OK;
}

static void mul_run(void *ctx, const layer *l_, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)l_, (void)w_;
    mul_cuda *m = state;
    const float one = 1.0f, zero = 0.0f;
    if (m->b) {
        CUDA_OK(env, cuda_broadcast_launch(env->stream, ins[0], ins[1], out, 1, &m->b->a, &m->b->b, &m->b->out));
        return;
    }
    CUDNN_OK(env, cudnnOpTensor(env->cudnn, m->s->op, &one, m->s->x, ins[m->full], &one, m->s->extra, ins[1 - m->full],
                                &zero, m->s->y, out));
}

static void mul_free(void *ctx, void *state)
{
    cuda_env *env = ctx;
    mul_cuda *m = state;
    if (m)
        cuda_simple_free(env, m->s), free(m->b);
    free(m);
}

/* ---- concat: one strided device-to-device copy per input --------------------------------- */

typedef struct concat_cuda {
    int n;
    size_t outer, out_row, at[LAYER_MAX_INPUTS], row[LAYER_MAX_INPUTS]; /* bytes */
} concat_cuda;

static bench_status concat_setup(void *ctx, const layer *l, const void *w, void **state, char *impl,
                                 size_t len, int64_t *ws)
{
    cuda_env *env = ctx;
    (void)env, (void)w, (void)ws;
    concat_cuda *c = calloc(1, sizeof *c);
    if (!c)
        return BENCH_ERR_NOMEM;
    int64_t outer = 1, inner = 1, dim = l->p.dim;
    for (int64_t i = 0; i < dim; i++)
        outer *= l->out.d[i];
    for (int64_t i = dim + 1; i < l->out.rank; i++)
        inner *= l->out.d[i];
    c->n = l->n_inputs;
    c->outer = (size_t)outer;
    c->out_row = (size_t)(l->out.d[dim] * inner) * sizeof(float);
    size_t at = 0;
    for (int k = 0; k < l->n_inputs; k++) {
        c->at[k] = at;
        c->row[k] = (size_t)(l->ins[k].d[dim] * inner) * sizeof(float);
        at += c->row[k];
    }
    snprintf(impl, len, "cudaMemcpy2DAsync x%d", c->n);
    *state = c;
    return BENCH_OK;
}

static void concat_run(void *ctx, const layer *l_, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)l_, (void)w_;
    concat_cuda *c = state;
    for (int k = 0; k < c->n; k++)
        CUDA_OK(env, cudaMemcpy2DAsync((char *)out + c->at[k], c->out_row, ins[k], c->row[k], c->row[k], c->outer,
                                       cudaMemcpyDeviceToDevice, env->stream));
}

/* ---- views ------------------------------------------------------------------------------ */

static bench_status view_setup(void *ctx, const layer *l, const void *w, void **state, char *impl, size_t len,
                               int64_t *ws)
{
    cuda_env *env = ctx;
    (void)env, (void)l, (void)w, (void)ws;
    snprintf(impl, len, "view");
    *state = NULL;
    return BENCH_OK;
}

static void view_run(void *ctx, const layer *l_, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)l_, (void)w_;
    const float *in = ins[0];
    (void)env, (void)state, (void)in, (void)out;
}

static void view_free(void *ctx, void *state) { (void)ctx, (void)state; }

const backend_kernel cuda_batchnorm2d_kernel = {.setup = bn_setup, .run = bn_run, .free = cuda_simple_free,
                                                .tolerance = cuda_float_tolerance};
const backend_kernel cuda_activation_kernel = {.setup = act_setup, .run = act_run, .free = cuda_simple_free,
                                               .tolerance = cuda_float_tolerance};
const backend_kernel cuda_add_kernel = {.setup = add_setup, .run = add_run, .free = plain_free,
                                        .tolerance = cuda_float_tolerance};
const backend_kernel cuda_view_kernel = {.setup = view_setup, .run = view_run, .free = view_free,
                                         .tolerance = cuda_float_tolerance};
const backend_kernel cuda_hard_activation_kernel = {.setup = hard_setup, .run = hard_run, .free = plain_free,
                                                    .tolerance = cuda_float_tolerance};
const backend_kernel cuda_mul_kernel = {.setup = mul_setup, .run = mul_run, .free = mul_free,
                                        .tolerance = cuda_float_tolerance};
const backend_kernel cuda_concat_kernel = {.setup = concat_setup, .run = concat_run, .free = plain_free,
                                           .tolerance = cuda_float_tolerance};
