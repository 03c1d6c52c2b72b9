/* The backward of the kinds whose oneDNN primitive follows its input (batch norm, the
 * activations, pooling) and of softmax and layer norm, on oneDNN's backward primitives
 * over the plain tensors, each described with its forward's training description as its
 * hint (what torch 1.13 runs on the CPU). Batch and layer norm need the batch's mean and
 * variance, and max pooling its window's argmax (oneDNN's workspace), which torch keeps
 * from the forward; a backward here reads only the forward's input and output, so it
 * runs oneDNN's training forward again first, into memory of its own, and its impl says
 * so. A configuration oneDNN has no primitive for, or only its reference loop, runs the
 * cpu backend's backward kernel. */
#include <stdlib.h>
#include <string.h>

#include "onednn.h"

#define OD_BWD_ARGS 10

typedef struct od_plain_bwd {
    od_layer L;                 /* what was made here (memories, primitives), freed together */
    od_layer *fallback;         /* the cpu backend's backward kernel, where oneDNN has none */
    dnnl_primitive_t fwd, bwd;  /* the training forward again (or NULL), the backward */
    dnnl_exec_arg_t fa[OD_BWD_ARGS], ba[OD_BWD_ARGS];
    int n_fa, n_ba;
    dnnl_memory_t src, dst, ddst, dsrc;  /* plain views of the run's pointers (NULL: not read) */
    dnnl_memory_t dscale, dshift;        /* the weights' gradients (f32, its own), or NULL */
    int64_t dx, n_w, n_vec;     /* the input's elements; the weights' gradient's; scale's and shift's */
} od_plain_bwd;

static void arg(dnnl_exec_arg_t *a, int *n, int which, dnnl_memory_t m)
{
    BENCH_ASSERT(*n < OD_BWD_ARGS);
    a[(*n)++] = (dnnl_exec_arg_t){which, m};
}

/* The description of desc (hint: the forward's, or NULL) and, with prim, its primitive;
 * its name into name. false where oneDNN has none, or only its reference loop (c->why
 * says so). */
static bool make(od_ctx *c, od_layer *L, const void *desc, const_dnnl_primitive_desc_t hint, dnnl_primitive_desc_t *pd,
                 dnnl_primitive_t *prim, const char **name)
{
    if (!OD_SOFT(c, dnnl_primitive_desc_create(pd, desc, NULL, c->engine, hint)))
        return false;
    dnnl_primitive_desc_query(*pd, dnnl_query_impl_info_str, 0, name);
    if (!strncmp(*name, "ref", 3)) {
        snprintf(c->why, sizeof c->why, "oneDNN has only its reference loop (%s)", *name);
        return false;
    }
    if (!prim)
        return true;
    if (!OD_OK(c, dnnl_primitive_create(prim, *pd)))
        return false;
    BENCH_ASSERT(L->n_prims < OD_MAX_PRIMS);
    L->prims[L->n_prims++] = *prim;
    return true;
}

/* The forward's training description of l on md (plain, l's dtype): written into the
 * union the caller gives; false where oneDNN has no such operation. */
typedef union od_fwd_desc {
    dnnl_eltwise_desc_t e;
    dnnl_softmax_desc_t s;
    dnnl_pooling_v2_desc_t p;
    dnnl_batch_normalization_desc_t b;
    dnnl_layer_normalization_desc_t n;
} od_fwd_desc;

static bool describe(od_ctx *c, const layer *l, const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *dst,
                     unsigned flags, od_fwd_desc *fd, od_fwd_desc *bd)
{
    dnnl_alg_kind_t alg;
    float alpha, beta;
    dnnl_dims_t k, s, dil, pl, pr;
    float eps = (float)l->p.eps;
    switch (l->kind) {
    case LAYER_BATCHNORM2D:
        return OD_SOFT(c, dnnl_batch_normalization_forward_desc_init(&fd->b, dnnl_forward_training, src, eps, flags)) &&
               OD_SOFT(c, dnnl_batch_normalization_backward_desc_init(&bd->b, flags ? dnnl_backward : dnnl_backward_data,
                                                                      src, src, eps, flags));
    case LAYER_LAYERNORM:
        return OD_SOFT(c, dnnl_layer_normalization_forward_desc_init(&fd->n, dnnl_forward_training, src, NULL, eps, flags)) &&
               OD_SOFT(c, dnnl_layer_normalization_backward_desc_init(&bd->n, flags ? dnnl_backward : dnnl_backward_data,
                                                                      src, src, NULL, eps, flags));
    case LAYER_SOFTMAX:
        return OD_SOFT(c, dnnl_softmax_forward_desc_init(&fd->s, dnnl_forward_training, src, (int)l->p.dim)) &&
               OD_SOFT(c, dnnl_softmax_backward_desc_init(&bd->s, src, src, (int)l->p.dim));
    case LAYER_MAXPOOL2D:
    case LAYER_AVGPOOL2D:
    case LAYER_ADAPTIVE_AVGPOOL2D:
        return od_pool_params(c, l, &alg, k, s, dil, pl, pr) &&
               OD_SOFT(c, dnnl_pooling_v2_forward_desc_init(&fd->p, dnnl_forward_training, alg, src, dst, s, k, dil, pl, pr)) &&
               OD_SOFT(c, dnnl_pooling_v2_backward_desc_init(&bd->p, alg, src, dst, s, k, dil, pl, pr));
    default:
        if (!od_eltwise_alg(l, true, &alg, &alpha, &beta))
            return false;
        return OD_SOFT(c, dnnl_eltwise_forward_desc_init(&fd->e, dnnl_forward_training, alg, src, alpha, beta)) &&
               OD_SOFT(c, dnnl_eltwise_backward_desc_init(&bd->e, alg, src, src, alpha, beta));
    }
}

/* Whether the backward of l reads the forward's output (the eltwise algorithms that take
 * it, softmax) rather than its input. */
static bool from_dst(const layer *l)
{
    dnnl_alg_kind_t alg;
    float alpha, beta;
    return l->kind == LAYER_SOFTMAX ||
           (od_eltwise_alg(l, true, &alg, &alpha, &beta) &&
            (alg == dnnl_eltwise_relu_use_dst_for_bwd || alg == dnnl_eltwise_clip_v2_use_dst_for_bwd ||
             alg == dnnl_eltwise_logistic_use_dst_for_bwd || alg == dnnl_eltwise_tanh_use_dst_for_bwd));
}

static bool build(od_ctx *c, od_plain_bwd *s, const layer *l, const void *w, char *impl, size_t len)
{
    od_layer *L = &s->L;
    dnnl_data_type_t t = od_dtype(l->dtype);
    bool norm = l->kind == LAYER_BATCHNORM2D || l->kind == LAYER_LAYERNORM;
    bool maxpool = l->kind == LAYER_MAXPOOL2D, pool = maxpool || l->kind == LAYER_AVGPOOL2D ||
                                                      l->kind == LAYER_ADAPTIVE_AVGPOOL2D;
    int64_t vec = l->kind == LAYER_BATCHNORM2D ? l->in.d[1] : l->in.d[l->in.rank - 1];
    unsigned flags = 0;
    if (l->kind == LAYER_BATCHNORM2D && l->p.affine)
        flags = dnnl_use_scale | dnnl_use_shift;
    if (l->kind == LAYER_LAYERNORM)
        flags = (l->n_weight_floats >= vec ? dnnl_use_scale : 0) | (l->n_weight_floats >= 2 * vec ? dnnl_use_shift : 0);
    dnnl_memory_desc_t src, dst, v32, vt;
    od_plain_shape(&src, &l->in, t), od_plain_shape(&dst, &l->out, t);
    od_plain(&v32, 1, &vec, dnnl_f32), od_plain(&vt, 1, &vec, t);
    od_fwd_desc fd, bd;
    if (!describe(c, l, &src, &dst, flags, &fd, &bd))
        return false;
    dnnl_primitive_desc_t fpd = NULL, bpd = NULL;
    const char *fname = "", *bname = "";
    bool ok = make(c, L, &fd, NULL, &fpd, norm || maxpool ? &s->fwd : NULL, &fname) &&
              make(c, L, &bd, fpd, &bpd, &s->bwd, &bname);
    if (ok && l->kind == LAYER_BATCHNORM2D && !strncmp(bname, "ncsp", 4)) {
        /* on plain NCHW, oneDNN 2.6 has its ncsp batch norm only: in ResNet-18's step at
         * batch 8, its backward (with the forward again) took 36 ms against the cpu
         * kernel's 6.7 in fp32, and 135 ms in bf16 against about 15 on fp32 copies
         * (results/cpu-2core-zen5/training/odbwd_summary_bnprim.txt) */
        snprintf(c->why, sizeof c->why, "oneDNN's is its ncsp loop, 5x slower");
        ok = false;
    }
    /* in fp32, where the cpu kernel needs no copies: BERT-base's step (128 tokens) took
     * 2.4 ms in oneDNN's gelu backward against the cpu kernel's 1.1, and 2.4 to 2.6 in
     * its layer norm backward (with the forward again) against 1.6 (odbwd_summary.txt);
     * in bf16 the cpu kernel would run on fp32 copies, whose conversions cost more than
     * such a backward itself */
    if (ok && l->dtype == DTYPE_FP32 && (l->kind == LAYER_GELU || l->kind == LAYER_LAYERNORM)) {
        snprintf(c->why, sizeof c->why, "fp32: oneDNN's took %s the cpu kernel's time",
                 l->kind == LAYER_GELU ? "2.2x" : "1.5x");
        ok = false;
    }
    /* the views of the run's pointers, each where its primitive reads it */
    ok = ok && (s->ddst = od_memory(c, L, pool ? &dst : &src, DNNL_MEMORY_NONE)) &&
         (s->dsrc = od_memory(c, L, &src, DNNL_MEMORY_NONE));
    if (ok && from_dst(l))
        ok = (s->dst = od_memory(c, L, &dst, DNNL_MEMORY_NONE)) != NULL;
    else if (ok && (!pool || maxpool)) /* max pooling's: for its forward again (the argmax) */
        ok = (s->src = od_memory(c, L, &src, DNNL_MEMORY_NONE)) != NULL;
    if (ok && s->fwd) { /* what the forward keeps, made again at each run */
        dnnl_memory_t y = od_memory(c, L, &dst, DNNL_MEMORY_ALLOCATE);
        ok = y != NULL;
        arg(s->fa, &s->n_fa, DNNL_ARG_SRC, s->src), arg(s->fa, &s->n_fa, DNNL_ARG_DST, y);
        if (ok && maxpool) {
            dnnl_memory_t ws = od_memory(c, L, od_query(fpd, dnnl_query_workspace_md), DNNL_MEMORY_ALLOCATE);
            ok = ws != NULL;
            arg(s->fa, &s->n_fa, DNNL_ARG_WORKSPACE, ws), arg(s->ba, &s->n_ba, DNNL_ARG_WORKSPACE, ws);
        }
        for (int k = 1; ok && norm && k <= 2; k++) { /* the mean, the variance */
            dnnl_memory_t m = od_memory(c, L, dnnl_primitive_desc_query_md(fpd, dnnl_query_dst_md, k), DNNL_MEMORY_ALLOCATE);
            ok = m != NULL;
            arg(s->fa, &s->n_fa, k == 1 ? DNNL_ARG_MEAN : DNNL_ARG_VARIANCE, m);
            arg(s->ba, &s->n_ba, k == 1 ? DNNL_ARG_MEAN : DNNL_ARG_VARIANCE, m);
        }
        for (int k = 0; ok && k < 2; k++) { /* scale and shift, f32, converted once (the backward takes both) */
            if (!(flags & (k ? dnnl_use_shift : dnnl_use_scale)))
                continue;
            dnnl_memory_t m = od_constant(c, L, (const char *)w + k * vec * (int64_t)dtype_size(l->dtype), &vt, &v32);
            dnnl_memory_t d = m ? od_memory(c, L, &v32, DNNL_MEMORY_ALLOCATE) : NULL;
            ok = d != NULL;
            arg(s->fa, &s->n_fa, k ? DNNL_ARG_SHIFT : DNNL_ARG_SCALE, m);
            arg(s->ba, &s->n_ba, k ? DNNL_ARG_SHIFT : DNNL_ARG_SCALE, m);
            arg(s->ba, &s->n_ba, k ? DNNL_ARG_DIFF_SHIFT : DNNL_ARG_DIFF_SCALE, d);
            *(k ? &s->dshift : &s->dscale) = d;
        }
    }
    if (ok) {
        if (s->src && !maxpool)
            arg(s->ba, &s->n_ba, DNNL_ARG_SRC, s->src);
        if (s->dst)
            arg(s->ba, &s->n_ba, DNNL_ARG_DST, s->dst);
        arg(s->ba, &s->n_ba, DNNL_ARG_DIFF_DST, s->ddst), arg(s->ba, &s->n_ba, DNNL_ARG_DIFF_SRC, s->dsrc);
        s->n_vec = vec;
        snprintf(impl, len, "%s%s", bname, !s->fwd ? "" : maxpool ? " (after its forward again: argmax)"
                                                                  : " (after its forward again: statistics)");
        if (s->fwd && strcmp(fname, bname))
            snprintf(impl + strlen(impl) - 1, len - strlen(impl) + 1, ": %s)", fname);
    }
    if (fpd)
        dnnl_primitive_desc_destroy(fpd);
    if (bpd)
        dnnl_primitive_desc_destroy(bpd);
    return ok;
}

static bench_status od_plain_bwd_setup(void *env, const layer *l, const void *w, void **state, char *impl, size_t len,
                                       int64_t *workspace_bytes)
{
    od_ctx *c = env;
    od_plain_bwd *s = xcalloc(1, sizeof *s);
    s->L = (od_layer){.l = l, .w = w, .n_inputs = l->n_inputs};
    s->dx = shape_numel(&l->in);
    s->n_w = l->n_weight_floats;
    snprintf(c->why, sizeof c->why, "no oneDNN primitive");
    bool built = l->n_inputs == 1 && build(c, s, l, w, impl, len);
    bench_status st = od_built_or_cpu(c, &s->L, &s->fallback, built, workspace_bytes, impl, len);
    if (st != BENCH_OK)
        free(s);
    else
        *state = s;
    return st;
}

/* in: x, y, dy; out: dx, then the weights' gradient (scale's, shift's; zeros for batch
 * norm's running statistics), in l's dtype */
static void od_plain_bwd_run(void *env, const layer *l, void *state, const void *const *in, const void *w, void *out)
{
    od_ctx *c = env;
    od_plain_bwd *s = state;
    if (s->fallback) {
        od_layer_run(env, l, s->fallback, in, w, out);
        return;
    }
    if (s->src)
        dnnl_memory_set_data_handle(s->src, (void *)in[0]);
    if (s->dst)
        dnnl_memory_set_data_handle(s->dst, (void *)in[1]);
    dnnl_memory_set_data_handle(s->ddst, (void *)in[2]);
    dnnl_memory_set_data_handle(s->dsrc, out);
    if (s->fwd)
        OD_OK(c, dnnl_primitive_execute(s->fwd, c->stream, s->n_fa, s->fa));
    OD_OK(c, dnnl_primitive_execute(s->bwd, c->stream, s->n_ba, s->ba));
    if (!s->n_w || l->frozen)
        return;
    size_t es = dtype_size(l->dtype);
    char *dw = (char *)out + s->dx * (int64_t)es;
    memset(dw, 0, (size_t)s->n_w * es);
    for (int k = 0; k < 2; k++) {
        dnnl_memory_t m = k ? s->dshift : s->dscale;
        void *from = NULL;
        if (m && dnnl_memory_get_data_handle(m, &from) == dnnl_success)
            backend_cpu_ops.device.convert(c->cpu, dw + k * s->n_vec * (int64_t)es, l->dtype, from, DTYPE_FP32, s->n_vec);
    }
}

static bool od_plain_bwd_parts_enable(void *env, void *state, bool on)
{
    od_plain_bwd *s = state;
    return s->fallback && od_parts_enable(env, s->fallback, on);
}

static void od_plain_bwd_parts_read(void *env, void *state, double *seconds)
{
    od_plain_bwd *s = state;
    if (s->fallback)
        od_parts_read(env, s->fallback, seconds);
}

static int od_plain_bwd_parts(void *env, void *state, const layer *l, layer_part_info *parts)
{
    od_plain_bwd *s = state;
    return s->fallback ? od_layer_parts(env, s->fallback, l, parts) : 0;
}

static void od_plain_bwd_free(void *env, void *state)
{
    od_plain_bwd *s = state;
    if (!s)
        return;
    if (s->fallback)
        od_layer_free(env, s->fallback);
    od_layer_clear(&s->L);
    free(s);
}

const backend_kernel od_plain_bwd_kernel = {.setup = od_plain_bwd_setup, .run = od_plain_bwd_run,
                                            .free = od_plain_bwd_free, .parts_enable = od_plain_bwd_parts_enable,
                                            .parts_read = od_plain_bwd_parts_read, .parts = od_plain_bwd_parts,
                                            .tolerance = od_tolerance};
