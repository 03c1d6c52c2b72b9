/* The decoder kinds on the GPU (layers/llm.c says what each computes), on kernels of our
 * own in cuda_kernels.cu that read and write the layer's own dtype (fp32, tf32's fp32
 * storage, bf16, fp16) and sum in fp32:
 * - embedding: a block per token id copies its row;
 * - rmsnorm: a block per row;
 * - rope: a thread per pair of a head's dimensions, the cosines and sines worked out once
 *   at setup by the reference's own functions (layer_rope_inv_freq, layer_rope_angle);
 * - attention: causal, grouped-query, sliding windows, the KV cache (the layer's weights,
 *   in its dtype), softcap and sinks; a warp per share of a query's keys with an online
 *   softmax, and where the queries are too few to fill the GPU (a decode step), the keys
 *   split over blocks too and merged after (flash-decoding). llm_cuda_math.h holds the
 *   arithmetic, which tests/test_cuda_plan.c runs on the host against the reference.
 * There is no cuDNN fused attention here yet; the impl names our kernel. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include "cuda_env.h"
#include "llm_cuda_math.h"

typedef struct llm_cuda {
    const layer *l;
    const void *w;
    float *cs;             /* rope: [tokens, head_dim / 2, 2] cosines and sines, device */
    float *part;           /* attention with splits > 1: each split's (accumulator, max, sum) */
    const void *sinks;     /* attention: the heads' sinks in the weights, or NULL */
    lb_attn a;
    int splits, warps;
} llm_cuda;

static void llm_free(void *ctx, void *state)
{
    cuda_env *env = ctx;
    llm_cuda *s = state;
    if (!s)
        return;
    if (s->cs)
        CUDA_OK(env, cudaFree(s->cs));
    if (s->part)
        CUDA_OK(env, cudaFree(s->part));
    free(s);
}

/* rope's table: (cos, sin) of every (token, pair), times the attention factor */
static bool rope_table(cuda_env *env, llm_cuda *s, int64_t *ws)
{
    const layer *l = s->l;
    int64_t tokens = l->in.d[1], half = l->p.head_dim / 2;
    float *inv = malloc((size_t)half * sizeof *inv), *host = malloc((size_t)(tokens * half * 2) * sizeof *host);
    bool ok = inv && host;
    if (ok) {
        layer_rope_inv_freq(l, inv);
        double scale = layer_rope_attention_factor(l);
        for (int64_t t = 0; t < tokens; t++)
            for (int64_t i = 0; i < half; i++) {
                double a = layer_rope_angle(l, inv, t, i);
                host[(t * half + i) * 2] = (float)(cos(a) * scale);
                host[(t * half + i) * 2 + 1] = (float)(sin(a) * scale);
            }
        size_t bytes = (size_t)(tokens * half * 2) * sizeof(float);
        ok = CUDA_OK(env, cudaMalloc((void **)&s->cs, bytes)) &&
             CUDA_OK(env, cudaMemcpy(s->cs, host, bytes, cudaMemcpyHostToDevice));
        *ws = (int64_t)bytes;
    }
    free(inv), free(host);
    return ok;
}

static bench_status attention_plan(cuda_env *env, llm_cuda *s, char *impl, size_t len, int64_t *ws)
{
    const layer *l = s->l;
    const layer_params *p = &l->p;
    lb_attn *a = &s->a;
    a->n = l->in.d[0], a->t = l->in.d[1], a->tk = l->ins[1].d[1];
    a->h = p->num_heads, a->hkv = p->num_kv_heads, a->d = p->head_dim;
    a->s = p->kv_len, a->c = layer_attention_cached(l), a->window = p->sliding_window, a->causal = p->causal;
    a->scale = (float)(p->attn_scale > 0 ? p->attn_scale : 1.0 / sqrt((double)p->head_dim));
    a->softcap = (float)p->softcap;
    if (a->d > 32 * LB_ATTN_LANE_DIMS) {
        snprintf(impl, len, "head_dim %lld above the attention kernel's %d", (long long)a->d, 32 * LB_ATTN_LANE_DIMS);
        return BENCH_ERR_UNSUPPORTED;
    }
    if (a->n * a->t * a->h > INT_MAX) {
        snprintf(impl, len, "more queries (batch x tokens x heads) than a grid holds");
        return BENCH_ERR_UNSUPPORTED;
    }
    int sms = 0;
    if (!CUDA_OK(env, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, env->device)))
        return BENCH_ERR_BACKEND;
    lb_attn_grid(a, sms, &s->splits, &s->warps);
    s->sinks = p->sinks ? (const char *)s->w + (size_t)layer_attention_cache_floats(l) * dtype_size(l->dtype) : NULL;
    if (s->splits > 1) {
        size_t bytes = (size_t)(a->n * a->t * a->h) * (size_t)s->splits * (size_t)(a->d + 2) * sizeof(float);
        if (!CUDA_OK(env, cudaMalloc((void **)&s->part, bytes)))
            return BENCH_ERR_BACKEND;
        *ws = (int64_t)bytes;
    }
    int at = snprintf(impl, len, "attention kernel (layerbench), %s: a query's keys over %d warp%s",
                      dtype_name(l->dtype), s->warps, s->warps > 1 ? "s" : "");
    if (s->splits > 1 && at > 0 && (size_t)at < len)
        snprintf(impl + at, len - (size_t)at, " x %d blocks, merged after (flash-decoding)", s->splits);
    return BENCH_OK;
}

static bench_status llm_setup(void *ctx, const layer *l, const void *w, void **state, char *impl, size_t len,
                              int64_t *ws)
{
    cuda_env *env = ctx;
    *ws = 0;
    llm_cuda *s = calloc(1, sizeof *s);
    if (!s)
        return BENCH_ERR_NOMEM;
    s->l = l, s->w = w;
    bench_status st = BENCH_OK;
    if (l->kind == LAYER_ROPE)
        st = rope_table(env, s, ws) ? BENCH_OK : BENCH_ERR_BACKEND;
    else if (l->kind == LAYER_ATTENTION)
        st = attention_plan(env, s, impl, len, ws);
    if (st != BENCH_OK) {
        llm_free(env, s);
        return st;
    }
    if (l->kind != LAYER_ATTENTION)
        snprintf(impl, len, "%s kernel (layerbench), %s", layer_kind_name(l->kind), dtype_name(l->dtype));
    *state = s;
    return BENCH_OK;
}

static void llm_run(void *ctx, const layer *l_, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)l_, (void)w_;
    llm_cuda *s = state;
    const layer *l = s->l;
    int t = (int)l->dtype;
    switch (l->kind) {
    case LAYER_EMBEDDING:
        CUDA_OK(env, cuda_embedding_launch(env->stream, ins[0], s->w, out, t, shape_numel(&l->in), l->p.embedding_dim,
                                           l->p.num_embeddings));
        break;
    case LAYER_RMSNORM: {
        int64_t d = l->p.normalized_shape;
        CUDA_OK(env, cuda_rmsnorm_launch(env->stream, ins[0], s->w, out, t, shape_numel(&l->in) / d, d,
                                         (float)l->p.eps, (float)l->p.weight_offset));
        break;
    }
    case LAYER_ROPE:
        CUDA_OK(env, cuda_rope_launch(env->stream, ins[0], out, t, s->cs, l->in.d[0] * l->in.d[1], l->in.d[1],
                                      l->p.num_heads, l->p.head_dim, l->p.interleaved));
        break;
    case LAYER_ATTENTION:
        CUDA_OK(env, cuda_attention_launch(env->stream, ins[0], ins[1], ins[2], s->w, s->sinks, out, s->part, t, &s->a,
                                           s->splits, s->warps));
        break;
    default:
        break;
    }
}

const backend_kernel cuda_llm_kernel = {.setup = llm_setup, .run = llm_run, .free = llm_free,
                                        .tolerance = cuda_float_tolerance};
