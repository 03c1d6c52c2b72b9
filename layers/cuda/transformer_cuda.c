/* Transformer kinds on the GPU: multihead_attention through cuBLAS (the packed q/k/v
 * projection and the out projection as one SGEMM each over all tokens, the scores and
 * their product with V as batched SGEMMs over every (sample, head), whose pointers are
 * set up once) and cuDNN's softmax; layernorm, gelu, transpose and pos_embedding through
 * our kernels (cuda_kernels.cu), class_token too; select as a strided device copy. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include "cuda_env.h"

/* ---- multihead_attention -------------------------------------------------------------------- */

typedef struct mha_cuda {
    int n, s, e, h, dh;
    const float *in_w, *in_b, *out_w, *out_b;
    float *qkv, *scores, *heads;          /* workspace: [N S, 3E], [N H, S, S], [N S, E] */
    const float **ptrs;                   /* device: 6 arrays of N H pointers (see setup) */
    cudnnTensorDescriptor_t qkv_rows, qkv_bias, out_rows, out_bias, sm;
    bool parts;                           /* record ev around the parts (in-model view) */
    cudaEvent_t ev[6];                    /* before in_proj, after it, qk, softmax, av, out_proj */
    bool tf32;                 /* tensor-core math for the GEMMs (dtype tf32) */
} mha_cuda;

/* Records the event before (i = 0) or after part i - 1 when the parts are timed. */
static void mha_event(cuda_env *env, mha_cuda *m, int i)
{
    if (m->parts)
        CUDA_OK(env, cudaEventRecord(m->ev[i], env->stream));
}

static void mha_free(void *ctx, void *state)
{
    cuda_env *env = ctx;
    mha_cuda *m = state;
    if (!m)
        return;
    CUDA_OK(env, cudaFree(m->qkv));
    CUDA_OK(env, cudaFree((void *)m->ptrs));
    cudnnDestroyTensorDescriptor(m->qkv_rows), cudnnDestroyTensorDescriptor(m->qkv_bias);
    cudnnDestroyTensorDescriptor(m->out_rows), cudnnDestroyTensorDescriptor(m->out_bias);
    cudnnDestroyTensorDescriptor(m->sm);
    for (int i = 0; i < 6; i++)
        if (m->ev[i])
            cudaEventDestroy(m->ev[i]);
    free(m);
}

static bench_status mha_setup(void *ctx, const layer *l, const void *w, void **state, char *impl, size_t len,
                              int64_t *ws)
{
    cuda_env *env = ctx;
    int64_t n = l->in.d[0], s = l->in.d[1], e = l->p.embed_dim, h = l->p.num_heads;
    if (n * h * s * s > INT_MAX || n * s * 3 * e > INT_MAX) {
        snprintf(impl, len, "attention scores beyond cuBLAS's and cuDNN's int");
        return BENCH_ERR_UNSUPPORTED;
    }
    mha_cuda *m = calloc(1, sizeof *m);
    if (!m)
        return BENCH_ERR_NOMEM;
    m->n = (int)n, m->s = (int)s, m->e = (int)e, m->h = (int)h, m->dh = (int)(e / h);
    layer_mha_weights(l, w, &m->in_w, &m->in_b, &m->out_w, &m->out_b);
    size_t floats = (size_t)(n * s * 3 * e + n * h * s * s + n * s * e);
    int batch = m->n * m->h;
    const float **host = malloc((size_t)6 * (size_t)batch * sizeof *host);
    bool ok = host && CUDA_OK(env, cudaMalloc((void **)&m->qkv, floats * sizeof(float))) &&
              CUDA_OK(env, cudaMalloc((void **)&m->ptrs, (size_t)6 * (size_t)batch * sizeof *m->ptrs));
    if (ok) {
        m->scores = m->qkv + n * s * 3 * e;
        m->heads = m->scores + n * h * s * s;
        /* per (sample b, head j): Q, K, V inside the packed projection (row stride 3E),
         * the scores, and the head's columns of the output */
        for (int b = 0; b < m->n; b++)
            for (int j = 0; j < m->h; j++) {
                int t = b * m->h + j;
                const float *q = m->qkv + (int64_t)b * s * 3 * e + (int64_t)j * m->dh;
                host[t] = q;                                                   /* Q */
                host[batch + t] = q + e;                                       /* K */
                host[2 * batch + t] = q + 2 * e;                               /* V */
                host[3 * batch + t] = m->scores + (int64_t)t * s * s;          /* scores */
                host[4 * batch + t] = m->heads + (int64_t)b * s * e + (int64_t)j * m->dh; /* out */
                host[5 * batch + t] = NULL;
            }
        ok = CUDA_OK(env, cudaMemcpy((void *)m->ptrs, host, (size_t)6 * (size_t)batch * sizeof *host,
                                     cudaMemcpyHostToDevice));
    }
    free(host);
    shape_t qkv_rows = {2, {n * s, 3 * e}}, qkv_bias = {2, {1, 3 * e}}, out_rows = {2, {n * s, e}},
            out_bias = {2, {1, e}}, sm = {4, {n * h * s, s, 1, 1}};
    ok = ok && cuda_tensor_desc(env, &m->sm, &sm, impl, len) &&
         (!m->in_b || (cuda_tensor_desc(env, &m->qkv_rows, &qkv_rows, impl, len) &&
                       cuda_tensor_desc(env, &m->qkv_bias, &qkv_bias, impl, len) &&
                       cuda_tensor_desc(env, &m->out_rows, &out_rows, impl, len) &&
                       cuda_tensor_desc(env, &m->out_bias, &out_bias, impl, len)));
    if (!ok) {
        mha_free(env, m);
        return env->failed ? BENCH_ERR_BACKEND : BENCH_ERR_UNSUPPORTED;
    }
    *ws = (int64_t)(floats * sizeof(float));
    m->tf32 = l->dtype == DTYPE_TF32;
    snprintf(impl, len, "cublasSgemm + batched per head + cudnnSoftmaxForward%s", m->tf32 ? " (TF32)" : "");
    *state = m;
    return BENCH_OK;
}

static void mha_run(void *ctx, const layer *l_, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)l_, (void)w_;
    mha_cuda *m = state;
    const float one = 1.0f, zero = 0.0f, scale = (float)(1.0 / sqrt((double)m->dh));
    int ns = m->n * m->s, e = m->e, s = m->s, batch = m->n * m->h;
    const float **p = m->ptrs;
    CUBLAS_OK(env, cublasSetMathMode(env->cublas, m->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    mha_event(env, m, 0);
    /* row-major Y[rows, o] = X[rows, f] W[o, f]^T, read column-major (as linear_cuda.c) */
    CUBLAS_OK(env, cublasSgemm(env->cublas, CUBLAS_OP_T, CUBLAS_OP_N, 3 * e, ns, e, &one, m->in_w, e, ins[0], e, &zero,
                               m->qkv, 3 * e));
    if (m->in_b)
        CUDNN_OK(env, cudnnAddTensor(env->cudnn, &one, m->qkv_bias, m->in_b, &one, m->qkv_rows, m->qkv));
    mha_event(env, m, 1);
    /* scores (row-major S x S) = Q K^T: column-major, scores^T = K^T(op T) Q^T */
    CUBLAS_OK(env, cublasSgemmBatched(env->cublas, CUBLAS_OP_T, CUBLAS_OP_N, s, s, m->dh, &scale,
                                      (const float *const *)p + batch, 3 * e, (const float *const *)p, 3 * e, &zero,
                                      (float *const *)p + 3 * batch, s, batch));
    mha_event(env, m, 2);
    CUDNN_OK(env, cudnnSoftmaxForward(env->cudnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one, m->sm,
                                      m->scores, &zero, m->sm, m->scores));
    mha_event(env, m, 3);
    /* head (row-major S x dh, row stride E) = P V: column-major, head^T = V^T P^T */
    CUBLAS_OK(env, cublasSgemmBatched(env->cublas, CUBLAS_OP_N, CUBLAS_OP_N, m->dh, s, s, &one,
                                      (const float *const *)p + 2 * batch, 3 * e, (const float *const *)p + 3 * batch, s,
                                      &zero, (float *const *)p + 4 * batch, e, batch));
    mha_event(env, m, 4);
    CUBLAS_OK(env, cublasSgemm(env->cublas, CUBLAS_OP_T, CUBLAS_OP_N, e, ns, e, &one, m->out_w, e, m->heads, e, &zero,
                               out, e));
    if (m->out_b)
        CUDNN_OK(env, cudnnAddTensor(env->cudnn, &one, m->out_bias, m->out_b, &one, m->out_rows, out));
    mha_event(env, m, 5);
}

static bool mha_parts_enable(void *ctx, void *state, bool on)
{
    cuda_env *env = ctx;
    mha_cuda *m = state;
    for (int i = 0; on && i < 6; i++)
        if (!m->ev[i] && !CUDA_OK(env, cudaEventCreate(&m->ev[i])))
            return false;
    m->parts = on;
    return true;
}

/* After timer_stop: the stream passed the last event. */
static void mha_parts_read(void *ctx, void *state, double *seconds)
{
    cuda_env *env = ctx;
    mha_cuda *m = state;
    for (int i = 0; i < 5; i++) {
        float ms = 0;
        seconds[i] = CUDA_OK(env, cudaEventElapsedTime(&ms, m->ev[i], m->ev[i + 1])) ? 1e-3 * (double)ms : 0.0;
    }
}

const backend_kernel cuda_multihead_attention_kernel = {.setup = mha_setup, .run = mha_run, .free = mha_free,
                                                    .parts_enable = mha_parts_enable, .parts_read = mha_parts_read,
                                                    .tolerance = cuda_float_tolerance};

/* ---- kinds of our own kernels, and copies --------------------------------------------------- */

typedef struct plain_cuda {
    const layer *l;
    const float *w;
} plain_cuda;

static void plain_free(void *ctx, void *state)
{
    (void)ctx;
    free(state);
}

static bench_status plain_setup(void *ctx, const layer *l, const void *w, void **state, char *impl, size_t len,
                                int64_t *ws)
{
    cuda_env *env = ctx;
    (void)env, (void)ws;
    plain_cuda *p = calloc(1, sizeof *p);
    if (!p)
        return BENCH_ERR_NOMEM;
    p->l = l, p->w = w;
    snprintf(impl, len, "%s",
             l->kind == LAYER_SELECT || l->kind == LAYER_SLICE ? "cudaMemcpy2DAsync" : "kernel (layerbench)");
    *state = p;
    return BENCH_OK;
}

static void layernorm_run(void *ctx, const layer *l_, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)l_, (void)w_;
    plain_cuda *p = state;
    const layer *l = p->l;
    int64_t d = l->p.normalized_shape;
    const float *gamma = l->p.affine ? p->w : NULL, *beta = l->n_weight_floats > d ? p->w + d : NULL;
    CUDA_OK(env, cuda_layernorm_launch(env->stream, ins[0], out, shape_numel(&l->in) / d, d, gamma, beta,
                                       (float)l->p.eps));
}

static void gelu_run(void *ctx, const layer *l_, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)l_, (void)w_;
    plain_cuda *p = state;
    CUDA_OK(env, cuda_gelu_launch(env->stream, ins[0], out, shape_numel(&p->l->in), p->l->p.mode == GELU_TANH));
}

static void transpose_run(void *ctx, const layer *l_, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)l_, (void)w_;
    plain_cuda *p = state;
    int64_t outer, a, mid, b, inner;
    layer_transpose_dims(p->l, &outer, &a, &mid, &b, &inner);
    CUDA_OK(env, cuda_transpose_launch(env->stream, ins[0], out, outer, a, mid, b, inner));
}

static void pos_embedding_run(void *ctx, const layer *l_, void *state, const void *const *ins, const void *w_,
                              void *out)
{
    cuda_env *env = ctx;
    (void)l_, (void)w_;
    plain_cuda *p = state;
    const layer *l = p->l;
    const float *w = p->w + l->p.kv_len * l->in.d[2]; /* rows kv_len to kv_len + S - 1 */
    CUDA_OK(env, cuda_add_periodic_launch(env->stream, ins[0], w, out, shape_numel(&l->in), l->in.d[1] * l->in.d[2]));
}

static void class_token_run(void *ctx, const layer *l_, void *state, const void *const *ins, const void *w_,
                            void *out)
{
    cuda_env *env = ctx;
    (void)l_, (void)w_;
    plain_cuda *p = state;
    const layer *l = p->l;
    CUDA_OK(env, cuda_class_token_launch(env->stream, ins[0], p->w, out, l->in.d[0], l->in.d[1], l->in.d[2]));
}

static void select_run(void *ctx, const layer *l_, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)l_, (void)w_;
    plain_cuda *p = state;
    const layer *l = p->l;
    int64_t outer, size, inner;
    layer_select_dims(l, &outer, &size, &inner);
    size_t w = (size_t)inner * sizeof(float);
    CUDA_OK(env, cudaMemcpy2DAsync(out, w, (const float *)ins[0] + l->p.index * inner, (size_t)size * w, w, (size_t)outer,
                                   cudaMemcpyDeviceToDevice, env->stream));
}

static void slice_run(void *ctx, const layer *l_, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)l_, (void)w_;
    plain_cuda *p = state;
    const layer *l = p->l;
    int64_t outer, size, inner;
    layer_slice_dims(l, &outer, &size, &inner);
    size_t row = (size_t)inner * sizeof(float), w = (size_t)(l->p.slice_end - l->p.slice_start) * row;
    CUDA_OK(env, cudaMemcpy2DAsync(out, w, (const float *)ins[0] + l->p.slice_start * inner, (size_t)size * row, w,
                                   (size_t)outer, cudaMemcpyDeviceToDevice, env->stream));
}

const backend_kernel cuda_layernorm_kernel = {.setup = plain_setup, .run = layernorm_run, .free = plain_free,
                                              .tolerance = cuda_float_tolerance};
const backend_kernel cuda_gelu_kernel = {.setup = plain_setup, .run = gelu_run, .free = plain_free,
                                         .tolerance = cuda_float_tolerance};
const backend_kernel cuda_transpose_kernel = {.setup = plain_setup, .run = transpose_run, .free = plain_free,
                                              .tolerance = cuda_float_tolerance};
const backend_kernel cuda_pos_embedding_kernel = {.setup = plain_setup, .run = pos_embedding_run, .free = plain_free,
                                                  .tolerance = cuda_float_tolerance};
const backend_kernel cuda_class_token_kernel = {.setup = plain_setup, .run = class_token_run, .free = plain_free,
                                                .tolerance = cuda_float_tolerance};
const backend_kernel cuda_slice_kernel = {.setup = plain_setup, .run = slice_run, .free = plain_free,
                                          .tolerance = cuda_float_tolerance};
const backend_kernel cuda_select_kernel = {.setup = plain_setup, .run = select_run, .free = plain_free,
                                           .tolerance = cuda_float_tolerance};
