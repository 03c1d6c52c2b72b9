/* The onednn backend: the layers through oneDNN's primitives (Debian's libdnnl), the
 * library PyTorch runs on the CPU, beside our OpenBLAS backend.
 *
 * Layouts. A convolution lets oneDNN choose its layouts (dnnl_format_tag_any) and
 * reorders its weights once at setup; batch norm, eltwise, pooling and binary follow
 * their input's layout; inner product, softmax and layer norm run on the plain one. A
 * layer set up on its own takes plain tensors and reorders them around its primitive
 * inside its run (what bench check runs). Then:
 *  - alone (the isolated rows, od_layer_isolate), its input is reordered once at setup,
 *    into what the convolution wants or, for a layer that follows its input, into the
 *    layout a convolution on that tensor hands on, and its output stays in the
 *    primitive's layout: the rows time the primitive alone, as benchdnn does;
 *  - in the chained forward (od_model_link), values pass between linkable primitives in
 *    oneDNN's layouts, and the reorders left are parts of their layer, timed apart.
 * Kinds oneDNN has no primitive for (concat, upsample, attention, the token kinds, ...)
 * and configurations it cannot express run the cpu backend's kernels, and impl says
 * "cpu kernel: ...", as a framework falls back to its own kernels.
 *
 * Memory, timers, marks, the cache flush and the ceilings are the cpu backend's (this
 * context holds one): oneDNN's CPU engine runs synchronously on the calling thread and
 * libgomp's threads, the same pool as our loops. */
#include <dnnl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model.h"

extern const backend_ops backend_cpu_ops;

typedef struct od_ctx {
    void *cpu;                 /* the cpu backend's context */
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    bool failed;
    char error[512];
    char why[64];              /* why the last layer set up fell back to the cpu kernel */
    char *description;
    /* While od_model_link rebuilds a layer: input k's value as its producer keeps it, in
     * the primitive's layout (NULL: plain, behind the run's pointer); whether the output
     * may stay in the primitive's layout (every reader is linked); whether to describe
     * the primitive on plain layouts anyway (its linked description had no
     * implementation), reordering the linked inputs to plain. */
    dnnl_memory_t link_in[2];
    bool link_out_own, link_plain;
    float *link_out_buf;       /* the output value's buffer, where a kept output goes if it fits */
    size_t link_out_bytes;
} od_ctx;

/* Records the first failure: "file:line: call failed: status". */
static bool od_check(od_ctx *c, dnnl_status_t st, const char *call, const char *file, int line)
{
    if (st == dnnl_success)
        return true;
    if (!c->failed)
        snprintf(c->error, sizeof c->error, "%s:%d: %.200s failed: dnnl status %d", file, line, call, (int)st);
    c->failed = true;
    return false;
}
#define OD_OK(c, call) od_check((c), (call), #call, __FILE__, __LINE__)

/* Describing an operation or finding an implementation for it: where oneDNN has none
 * (dnnl_unimplemented) or refuses these parameters, the layer runs the cpu kernel and
 * impl says why; any other status is a failure. */
static bool od_soft(od_ctx *c, dnnl_status_t st, const char *call, const char *file, int line)
{
    if (st == dnnl_unimplemented || st == dnnl_invalid_arguments) {
        snprintf(c->why, sizeof c->why, "%s", st == dnnl_unimplemented ? "no oneDNN implementation"
                                                                          : "parameters oneDNN refuses");
        return false;
    }
    return od_check(c, st, call, file, line);
}
#define OD_SOFT(c, call) od_soft((c), (call), #call, __FILE__, __LINE__)

/* What one layer makes at most: a convolution has 7 memories (input, output and
 * weights, each plain and reordered, and the bias) and 4 primitives (itself, two
 * reorders per run, the weights' at setup); batch norm 6 memories. */
#define OD_MAX_ARGS 8
#define OD_MAX_MEMS 16
#define OD_MAX_PRIMS 6

/* One layer: its primitive with its arguments, and the reorders around it. */
typedef struct od_layer {
    const layer *l;                        /* what it was set up for, to rebuild it linked */
    const float *w;
    void *cpu_state;                       /* a fallback: the cpu backend's kernel runs it */
    dnnl_primitive_t prim;
    dnnl_exec_arg_t args[OD_MAX_ARGS];
    int n_args;
    int n_inputs;
    dnnl_memory_t user_in[2], user_out;    /* plain views of the run's pointers */
    dnnl_primitive_t reorder_in[2], reorder_out; /* NULL where the primitive takes the plain layout */
    dnnl_memory_t in_mem[2], out_mem;      /* what the primitive reads and writes */
    int64_t reorder_bytes[3];              /* bytes each reorder reads and writes: inputs 0, 1, output */
    bool in_linked[2];                     /* user_in[k] is the producer's memory, not the run's pointer */
    bool isolated;                         /* od_layer_isolate: the input reorders ran once, at setup;
                                              the output stays in out_mem, in the primitive's layout */
    bool timed;                            /* parts_enable: each reorder and the primitive timed apart */
    double part_s[4];                      /* their seconds in the last run, in the order they ran */
    char name[64];                         /* the primitive's implementation, e.g. "brgconv:avx512_core" */
    dnnl_memory_t mems[OD_MAX_MEMS];       /* every memory object made here, destroyed in free */
    int n_mems;
    dnnl_primitive_t prims[OD_MAX_PRIMS];  /* every primitive made here */
    int n_prims;
    int64_t workspace;
} od_layer;

static dnnl_memory_t od_keep(od_layer *L, dnnl_memory_t m)
{
    if (m) {
        BENCH_ASSERT(L->n_mems < OD_MAX_MEMS);
        L->mems[L->n_mems++] = m;
    }
    return m;
}

static void od_arg(od_layer *L, int arg, dnnl_memory_t m)
{
    BENCH_ASSERT(L->n_args < OD_MAX_ARGS);
    L->args[L->n_args++] = (dnnl_exec_arg_t){arg, m};
}

/* A plain md of the shape (row-major, dense), or of its dims as given. */
static void od_plain(dnnl_memory_desc_t *md, int rank, const int64_t *d)
{
    dnnl_dims_t dims, strides;
    int64_t s = 1;
    for (int k = rank - 1; k >= 0; k--)
        dims[k] = d[k], strides[k] = s, s *= d[k];
    dnnl_memory_desc_init_by_strides(md, rank, dims, dnnl_f32, strides);
}

static void od_plain_shape(dnnl_memory_desc_t *md, const shape_t *s) { od_plain(md, s->rank, s->d); }

/* A reorder from one md to the other, run now or at each run. */
static dnnl_primitive_t od_reorder(od_ctx *c, od_layer *L, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to)
{
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t p = NULL;
    if (!OD_OK(c, dnnl_reorder_primitive_desc_create(&pd, from, c->engine, to, c->engine, NULL)))
        return NULL;
    if (OD_OK(c, dnnl_primitive_create(&p, pd)))
        BENCH_ASSERT(L->n_prims < OD_MAX_PRIMS), L->prims[L->n_prims++] = p;
    dnnl_primitive_desc_destroy(pd);
    return p;
}

/* A memory in the plain md at handle (DNNL_MEMORY_NONE: set at each run) and, where the
 * primitive wants another md, one of its own in that md (*mine; its bytes count as
 * workspace), else *mine = NULL. Returns the plain one, NULL on failure. */
/* A memory of L's in md at handle, or, with DNNL_MEMORY_ALLOCATE, in memory of its own
 * (whose bytes count as workspace); NULL on failure. */
static dnnl_memory_t od_memory(od_ctx *c, od_layer *L, const dnnl_memory_desc_t *md, void *handle)
{
    dnnl_memory_t m = NULL;
    if (!OD_OK(c, dnnl_memory_create(&m, md, c->engine, handle)))
        return NULL;
    if (handle == DNNL_MEMORY_ALLOCATE)
        L->workspace += (int64_t)dnnl_memory_desc_get_size(md);
    return od_keep(L, m);
}

static dnnl_memory_t od_pair(od_ctx *c, od_layer *L, const dnnl_memory_desc_t *plain, void *handle,
                             const dnnl_memory_desc_t *want, dnnl_memory_t *mine)
{
    *mine = NULL;
    dnnl_memory_t user = od_memory(c, L, plain, handle);
    if (!user || dnnl_memory_desc_equal(plain, want))
        return user;
    return (*mine = od_memory(c, L, want, DNNL_MEMORY_ALLOCATE)) ? user : NULL;
}

/* A reorder from have to want for input k (k < 0: the output, from want to plain). */
static dnnl_primitive_t od_reorder_act(od_ctx *c, od_layer *L, int k, const dnnl_memory_desc_t *from,
                                       const dnnl_memory_desc_t *to)
{
    L->reorder_bytes[k < 0 ? 2 : k] = (int64_t)(dnnl_memory_desc_get_size(from) + dnnl_memory_desc_get_size(to));
    return od_reorder(c, L, from, to);
}

/* Input k (k < 0: the output) as the primitive wants it. The value itself is a plain view
 * of the run's pointer or, in a linked forward, its producer's memory (an input) or a
 * memory of this layer's own in the primitive's layout that its readers take (the
 * output). Where the primitive wants another md: a memory of its own and a reorder. */
static dnnl_memory_t od_activation(od_ctx *c, od_layer *L, int k, const dnnl_memory_desc_t *plain,
                                   const dnnl_memory_desc_t *want)
{
    dnnl_memory_t mine = NULL, user;
    if (k < 0 && c->link_out_own) { /* in the value's buffer where it fits (no padding) */
        bool fits = c->link_out_buf && dnnl_memory_desc_get_size(want) <= c->link_out_bytes;
        /* user_out stays NULL: the run's pointer is not used */
        return L->out_mem = od_memory(c, L, want, fits ? (void *)c->link_out_buf : DNNL_MEMORY_ALLOCATE);
    }
    if (k >= 0 && c->link_in[k]) {
        const dnnl_memory_desc_t *have;
        user = c->link_in[k];
        L->in_linked[k] = true;
        if (!OD_OK(c, dnnl_memory_get_memory_desc(user, &have)) ||
            (!dnnl_memory_desc_equal(have, want) && !(mine = od_memory(c, L, want, DNNL_MEMORY_ALLOCATE))))
            return NULL;
        plain = have;
    } else if (!(user = od_pair(c, L, plain, DNNL_MEMORY_NONE, want, &mine))) {
        return NULL;
    }
    if (k >= 0) {
        L->user_in[k] = L->in_mem[k] = user;
        if (mine)
            L->in_mem[k] = mine, L->reorder_in[k] = od_reorder_act(c, L, k, plain, want);
    } else {
        L->user_out = L->out_mem = user;
        if (mine)
            L->out_mem = mine, L->reorder_out = od_reorder_act(c, L, k, want, plain);
    }
    return mine ? mine : user;
}

/* Input k's md for a primitive that keeps its input's layout (eltwise, batch norm,
 * pooling, binary): its producer's layout in a linked forward, else plain. */
static void od_src_md(const od_ctx *c, const shape_t *s, int k, dnnl_memory_desc_t *md)
{
    const dnnl_memory_desc_t *have;
    if (c->link_in[k] && !c->link_plain && dnnl_memory_get_memory_desc(c->link_in[k], &have) == dnnl_success)
        *md = *have;
    else
        od_plain_shape(md, s);
}

/* The output's md for such a primitive: "any" (oneDNN follows the input) where an input
 * is linked, else plain. */
static void od_dst_md(const od_ctx *c, const layer *l, dnnl_memory_desc_t *md)
{
    od_plain_shape(md, &l->out);
    if ((c->link_in[0] || c->link_in[1]) && !c->link_plain)
        dnnl_memory_desc_init_by_tag(md, md->ndims, md->dims, dnnl_f32, dnnl_format_tag_any);
}

/* An md's layout, for impl: "nChw16c", "nchw", "nhwc" (4-d), "plain" (other ranks) or "blocked". */
static const char *od_layout(const dnnl_memory_desc_t *md, char *buf, size_t len)
{
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    if (md->format_kind != dnnl_blocked)
        return "blocked";
    if (md->ndims != 4) /* linked [N, S, D] values stay dense */
        return b->inner_nblks == 0 ? "plain" : "blocked";
    if (b->inner_nblks == 1 && b->inner_idxs[0] == 1 && b->strides[0] >= b->strides[1] &&
        b->strides[1] >= b->strides[2] && b->strides[2] >= b->strides[3]) {
        snprintf(buf, len, "nChw%dc", (int)b->inner_blks[0]);
        return buf;
    }
    if (b->inner_nblks == 0)
        return b->strides[1] == 1 ? "nhwc" : b->strides[3] == 1 ? "nchw" : "blocked";
    return "blocked";
}

/* A constant (weights, or an isolated row's input) at w in the plain md, in the md the
 * primitive wants: w itself, or a copy reordered once, now. */
static dnnl_memory_t od_constant(od_ctx *c, od_layer *L, const float *w, const dnnl_memory_desc_t *plain,
                                 const dnnl_memory_desc_t *want)
{
    dnnl_memory_t mine, user = od_pair(c, L, plain, (void *)w, want, &mine);
    if (!user || !mine)
        return user;
    dnnl_primitive_t r = od_reorder(c, L, plain, want);
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, mine}};
    if (!r || !OD_OK(c, dnnl_primitive_execute(r, c->stream, 2, a)) || !OD_OK(c, dnnl_stream_wait(c->stream)))
        return NULL;
    return mine;
}

/* Makes the primitive of op_desc; its implementation name (e.g. "brgconv:avx512_core")
 * into impl. The caller destroys *pd. */
static bool od_primitive(od_ctx *c, od_layer *L, const void *op_desc, dnnl_primitive_desc_t *pd, char *impl,
                         size_t len)
{
    if (!OD_SOFT(c, dnnl_primitive_desc_create(pd, op_desc, NULL, c->engine, NULL)))
        return false;
    const char *name = "?";
    dnnl_primitive_desc_query(*pd, dnnl_query_impl_info_str, 0, &name);
    snprintf(impl, len, "%s", name);
    snprintf(L->name, sizeof L->name, "%s", name);
    if (!OD_OK(c, dnnl_primitive_create(&L->prim, *pd)))
        return false;
    BENCH_ASSERT(L->n_prims < OD_MAX_PRIMS);
    L->prims[L->n_prims++] = L->prim;
    return true;
}

static const dnnl_memory_desc_t *od_query(const_dnnl_primitive_desc_t pd, dnnl_query_t what)
{
    return dnnl_primitive_desc_query_md(pd, what, 0);
}

/* impl for a layer whose primitive runs on its own layout: the implementation, that
 * layout and the reorders around it. */
static void od_impl_layout(const od_layer *L, char *impl, size_t len)
{
    char buf[16];
    const dnnl_memory_desc_t *md = NULL;
    if (L->out_mem)
        dnnl_memory_get_memory_desc(L->out_mem, &md);
    bool in = L->reorder_in[0] || L->reorder_in[1], out = L->reorder_out;
    snprintf(impl, len, "%s %s%s", L->name, md ? od_layout(md, buf, sizeof buf) : "",
             L->isolated && (in || out) ? " (reorders at setup)"
             : in && out               ? " + src/dst reorders"
             : in                      ? " + src reorder"
             : out                     ? " + dst reorder"
                                       : "");
}

/* ---- the kinds ------------------------------------------------------------------------- */

static bool od_conv(od_ctx *c, od_layer *L, const layer *l, const float *w, char *impl, size_t len)
{
    const layer_params *p = &l->p;
    int64_t g = p->groups, oc = p->out_channels, ic = l->in.d[1];
    dnnl_memory_desc_t src, dst, wei, bias, src_any, dst_any, wei_any;
    od_plain_shape(&src, &l->in);
    od_plain_shape(&dst, &l->out);
    int64_t wd[5] = {g, oc / g, ic / g, p->kernel[0], p->kernel[1]};
    if (g == 1)
        od_plain(&wei, 4, wd + 1);
    else
        od_plain(&wei, 5, wd);
    od_plain(&bias, 1, &oc);
    dnnl_memory_desc_init_by_tag(&src_any, 4, src.dims, dnnl_f32, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&dst_any, 4, dst.dims, dnnl_f32, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&wei_any, wei.ndims, wei.dims, dnnl_f32, dnnl_format_tag_any);
    dnnl_dims_t strides = {p->stride[0], p->stride[1]}, dil = {p->dilation[0] - 1, p->dilation[1] - 1},
                pad = {p->padding[0], p->padding[1]};
    dnnl_convolution_desc_t cd;
    if (!OD_SOFT(c, dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct,
                                                             &src_any, &wei_any, p->bias ? &bias : NULL, &dst_any,
                                                             strides, dil, pad, pad)))
        return false;
    dnnl_primitive_desc_t pd;
    if (!od_primitive(c, L, &cd, &pd, impl, len))
        return false;
    dnnl_memory_t s = od_activation(c, L, 0, &src, od_query(pd, dnnl_query_src_md));
    dnnl_memory_t d = od_activation(c, L, -1, &dst, od_query(pd, dnnl_query_dst_md));
    dnnl_memory_t wm = od_constant(c, L, w, &wei, od_query(pd, dnnl_query_weights_md));
    dnnl_memory_t bm = p->bias ? od_constant(c, L, w + oc * (ic / g) * p->kernel[0] * p->kernel[1], &bias, &bias) : NULL;
    dnnl_primitive_desc_destroy(pd);
    if (!s || !d || !wm || (p->bias && !bm))
        return false;
    od_arg(L, DNNL_ARG_SRC, s), od_arg(L, DNNL_ARG_DST, d), od_arg(L, DNNL_ARG_WEIGHTS, wm);
    if (bm)
        od_arg(L, DNNL_ARG_BIAS, bm);
    od_impl_layout(L, impl, len);
    return true;
}

/* A primitive whose input and output are the layer's own tensors, in the mds its
 * description gave (plain, or its producers' layouts in a linked forward). */
static bool od_plain_io(od_ctx *c, od_layer *L, const layer *l, const void *op_desc, char *impl, size_t len)
{
    dnnl_primitive_desc_t pd;
    if (!od_primitive(c, L, op_desc, &pd, impl, len))
        return false;
    bool ok = true;
    for (int k = 0; ok && k < l->n_inputs; k++) {
        dnnl_memory_desc_t in;
        od_plain_shape(&in, &l->ins[k]);
        dnnl_memory_t m = od_activation(c, L, k, &in, dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, k));
        if ((ok = m != NULL))
            od_arg(L, l->n_inputs == 1 ? DNNL_ARG_SRC : DNNL_ARG_MULTIPLE_SRC + k, m);
    }
    dnnl_memory_desc_t out;
    od_plain_shape(&out, &l->out);
    dnnl_memory_t m = ok ? od_activation(c, L, -1, &out, od_query(pd, dnnl_query_dst_md)) : NULL;
    dnnl_primitive_desc_destroy(pd);
    if (!m)
        return false;
    od_arg(L, DNNL_ARG_DST, m);
    if (L->reorder_in[0] || L->reorder_in[1] || L->reorder_out)
        od_impl_layout(L, impl, len);
    return true;
}

static bool od_eltwise(od_ctx *c, od_layer *L, const layer *l, char *impl, size_t len)
{
    dnnl_alg_kind_t alg;
    float alpha = 0, beta = 0;
    switch (l->kind) {
    case LAYER_RELU: alg = dnnl_eltwise_relu; break;
    case LAYER_RELU6: alg = dnnl_eltwise_clip_v2, beta = 6; break;
    case LAYER_SIGMOID: alg = dnnl_eltwise_logistic; break;
    case LAYER_SILU: alg = dnnl_eltwise_swish, alpha = 1; break;
    case LAYER_HARDSWISH: alg = dnnl_eltwise_hardswish; break;
    case LAYER_TANH: alg = dnnl_eltwise_tanh; break;
    case LAYER_GELU: alg = l->p.mode == GELU_TANH ? dnnl_eltwise_gelu_tanh : dnnl_eltwise_gelu_erf; break;
    default: return false;
    }
    dnnl_memory_desc_t md;
    od_src_md(c, &l->in, 0, &md);
    dnnl_eltwise_desc_t d;
    return OD_SOFT(c, dnnl_eltwise_forward_desc_init(&d, dnnl_forward_inference, alg, &md, alpha, beta)) &&
           od_plain_io(c, L, l, &d, impl, len);
}

static bool od_batchnorm(od_ctx *c, od_layer *L, const layer *l, const float *w, char *impl, size_t len)
{
    int64_t ch = l->in.d[1];
    dnnl_memory_desc_t md, vec;
    od_src_md(c, &l->in, 0, &md);
    od_plain(&vec, 1, &ch);
    dnnl_batch_normalization_desc_t d;
    unsigned flags = dnnl_use_global_stats | (l->p.affine ? dnnl_use_scale | dnnl_use_shift : 0);
    if (!OD_SOFT(c, dnnl_batch_normalization_forward_desc_init(&d, dnnl_forward_inference, &md, (float)l->p.eps, flags)) ||
        !od_plain_io(c, L, l, &d, impl, len))
        return false;
    static const int args[4] = {DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE};
    for (int k = l->p.affine ? 0 : 2; k < 4; k++) {
        dnnl_memory_t m = od_constant(c, L, w + k * ch, &vec, &vec);
        if (!m)
            return false;
        od_arg(L, args[k], m);
    }
    return true;
}

static bool od_pool(od_ctx *c, od_layer *L, const layer *l, char *impl, size_t len)
{
    const layer_params *p = &l->p;
    dnnl_dims_t k, s, pl, pr, dil = {0, 0}; /* oneDNN reads DNNL_MAX_NDIMS of each */
    dnnl_alg_kind_t alg;
    for (int a = 0; a < 2; a++) {
        int64_t in = l->in.d[2 + a], out = l->out.d[2 + a];
        if (l->kind == LAYER_ADAPTIVE_AVGPOOL2D) {
            if (in % out) { /* windows of different sizes: no oneDNN pooling */
                snprintf(c->why, sizeof c->why, "adaptive windows of unequal sizes");
                return false;
            }
            k[a] = s[a] = in / out, pl[a] = pr[a] = 0;
            continue;
        }
        k[a] = p->kernel[a], s[a] = p->stride[a] ? p->stride[a] : p->kernel[a], pl[a] = p->padding[a];
        if (l->kind == LAYER_MAXPOOL2D)
            dil[a] = p->dilation[a] - 1;
        /* the right padding that gives torch's output size (ceil_mode adds some) */
        pr[a] = (out - 1) * s[a] + (k[a] - 1) * (dil[a] + 1) + 1 - in - pl[a];
        if (pr[a] < 0)
            pr[a] = 0;
        /* avg with ceil_mode: torch divides the last window by its part inside the
         * padded input, which oneDNN's padding cannot say */
        if (l->kind == LAYER_AVGPOOL2D && pr[a] > pl[a]) {
            snprintf(c->why, sizeof c->why, "ceil_mode's partial window");
            return false;
        }
    }
    if (l->kind == LAYER_MAXPOOL2D)
        alg = dnnl_pooling_max;
    else if (l->kind == LAYER_AVGPOOL2D && p->count_include_pad)
        alg = dnnl_pooling_avg_include_padding;
    else
        alg = dnnl_pooling_avg_exclude_padding;
    dnnl_memory_desc_t src, dst;
    od_src_md(c, &l->in, 0, &src);
    od_dst_md(c, l, &dst);
    dnnl_pooling_v2_desc_t d;
    return OD_SOFT(c, dnnl_pooling_v2_forward_desc_init(&d, dnnl_forward_inference, alg, &src, &dst, s, k, dil, pl, pr)) &&
           od_plain_io(c, L, l, &d, impl, len);
}

/* linear over the last dimension: an inner product over rows = every other index. */
static bool od_linear(od_ctx *c, od_layer *L, const layer *l, const float *w, char *impl, size_t len)
{
    int64_t f = l->in.d[l->in.rank - 1], o = l->p.out_features, rows = shape_numel(&l->in) / f;
    int64_t sd[2] = {rows, f}, dd[2] = {rows, o}, wd[2] = {o, f};
    dnnl_memory_desc_t src, dst, wei, wei_any, bias;
    od_plain(&src, 2, sd);
    od_plain(&dst, 2, dd);
    od_plain(&wei, 2, wd);
    od_plain(&bias, 1, &o);
    dnnl_memory_desc_init_by_tag(&wei_any, 2, wei.dims, dnnl_f32, dnnl_format_tag_any);
    dnnl_inner_product_desc_t d;
    dnnl_primitive_desc_t pd;
    if (!OD_SOFT(c, dnnl_inner_product_forward_desc_init(&d, dnnl_forward_inference, &src, &wei_any,
                                                       l->p.bias ? &bias : NULL, &dst)) ||
        !od_primitive(c, L, &d, &pd, impl, len))
        return false;
    dnnl_memory_t wm = od_constant(c, L, w, &wei, od_query(pd, dnnl_query_weights_md));
    dnnl_memory_t sm = od_activation(c, L, 0, &src, od_query(pd, dnnl_query_src_md));
    dnnl_memory_t dm = od_activation(c, L, -1, &dst, od_query(pd, dnnl_query_dst_md));
    dnnl_memory_t bm = l->p.bias ? od_constant(c, L, w + o * f, &bias, &bias) : NULL;
    dnnl_primitive_desc_destroy(pd);
    if (!wm || !sm || !dm || (l->p.bias && !bm))
        return false;
    od_arg(L, DNNL_ARG_SRC, sm), od_arg(L, DNNL_ARG_WEIGHTS, wm), od_arg(L, DNNL_ARG_DST, dm);
    if (bm)
        od_arg(L, DNNL_ARG_BIAS, bm);
    return true;
}

static bool od_softmax(od_ctx *c, od_layer *L, const layer *l, char *impl, size_t len)
{
    dnnl_memory_desc_t md;
    od_plain_shape(&md, &l->in);
    dnnl_softmax_desc_t d;
    return OD_SOFT(c, dnnl_softmax_forward_desc_init(&d, dnnl_forward_inference, &md, (int)l->p.dim)) &&
           od_plain_io(c, L, l, &d, impl, len);
}

/* add (equal shapes) and mul (the second input may broadcast; the first one that does
 * is swapped into second place, a product being commutative). */
static bool od_binary(od_ctx *c, od_layer *L, const layer *l, char *impl, size_t len)
{
    const shape_t *a = &l->ins[0], *b = &l->ins[1];
    bool swapped = false;
    if (l->kind == LAYER_MUL && !shape_equal(a, &l->out))
        swapped = true, a = &l->ins[1], b = &l->ins[0];
    bool ok = a->rank == l->out.rank && b->rank == l->out.rank && shape_equal(a, &l->out);
    for (int k = 0; ok && k < b->rank; k++)
        ok = b->d[k] == l->out.d[k] || b->d[k] == 1;
    if (!ok) {
        snprintf(c->why, sizeof c->why, "a broadcast oneDNN's binary cannot express");
        return false;
    }
    int k0 = swapped ? 1 : 0, k1 = 1 - k0;
    dnnl_memory_desc_t s0, s1, dst, p0, p1, pdst;
    od_src_md(c, a, k0, &s0);
    od_src_md(c, b, k1, &s1);
    od_dst_md(c, l, &dst);
    od_plain_shape(&p0, a), od_plain_shape(&p1, b), od_plain_shape(&pdst, &l->out);
    dnnl_binary_desc_t d;
    if (!OD_SOFT(c, dnnl_binary_desc_init(&d, l->kind == LAYER_ADD ? dnnl_binary_add : dnnl_binary_mul, &s0, &s1, &dst)))
        return false;
    dnnl_primitive_desc_t pd;
    if (!od_primitive(c, L, &d, &pd, impl, len))
        return false;
    dnnl_memory_t m0 = od_activation(c, L, k0, &p0, dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0));
    dnnl_memory_t m1 = m0 ? od_activation(c, L, k1, &p1, dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 1)) : NULL;
    dnnl_memory_t md = m1 ? od_activation(c, L, -1, &pdst, od_query(pd, dnnl_query_dst_md)) : NULL;
    dnnl_primitive_desc_destroy(pd);
    if (!md)
        return false;
    od_arg(L, DNNL_ARG_SRC_0, m0), od_arg(L, DNNL_ARG_SRC_1, m1), od_arg(L, DNNL_ARG_DST, md);
    if (L->reorder_in[0] || L->reorder_in[1] || L->reorder_out)
        od_impl_layout(L, impl, len);
    return true;
}

static bool od_layernorm(od_ctx *c, od_layer *L, const layer *l, const float *w, char *impl, size_t len)
{
    int64_t d = l->in.d[l->in.rank - 1];
    dnnl_memory_desc_t md, vec;
    od_plain_shape(&md, &l->in);
    od_plain(&vec, 1, &d);
    unsigned flags = l->n_weight_floats >= d ? dnnl_use_scale : 0;
    flags |= l->n_weight_floats >= 2 * d ? dnnl_use_shift : 0;
    dnnl_layer_normalization_desc_t ld;
    if (!OD_SOFT(c, dnnl_layer_normalization_forward_desc_init(&ld, dnnl_forward_inference, &md, NULL, (float)l->p.eps,
                                                             flags)) ||
        !od_plain_io(c, L, l, &ld, impl, len))
        return false;
    for (int k = 0; k < 2; k++) {
        if (!(flags & (k ? dnnl_use_shift : dnnl_use_scale)))
            continue;
        dnnl_memory_t m = od_constant(c, L, w + k * d, &vec, &vec);
        if (!m)
            return false;
        od_arg(L, k ? DNNL_ARG_SHIFT : DNNL_ARG_SCALE, m);
    }
    return true;
}

/* ---- the backend ----------------------------------------------------------------------- */

/* Destroys what L made; keeps what it was set up for. */
static void od_layer_clear(od_layer *L)
{
    for (int k = 0; k < L->n_prims; k++)
        dnnl_primitive_destroy(L->prims[k]);
    for (int k = 0; k < L->n_mems; k++)
        dnnl_memory_destroy(L->mems[k]);
    *L = (od_layer){.l = L->l, .w = L->w, .n_inputs = L->n_inputs};
}

static void od_layer_destroy(od_layer *L)
{
    od_layer_clear(L);
    free(L);
}

/* The kinds with a oneDNN primitive; false (nothing made) where this configuration has
 * none, or a call failed (c->failed then says which). */
static bool od_build(od_ctx *c, od_layer *L, const layer *l, const float *w, char *impl, size_t len)
{
    switch (l->kind) {
    case LAYER_CONV2D: return od_conv(c, L, l, w, impl, len);
    case LAYER_BATCHNORM2D: return od_batchnorm(c, L, l, w, impl, len);
    case LAYER_RELU: case LAYER_RELU6: case LAYER_SIGMOID: case LAYER_SILU: case LAYER_HARDSWISH: case LAYER_TANH:
    case LAYER_GELU:
        return od_eltwise(c, L, l, impl, len);
    case LAYER_MAXPOOL2D: case LAYER_AVGPOOL2D: case LAYER_ADAPTIVE_AVGPOOL2D: return od_pool(c, L, l, impl, len);
    case LAYER_LINEAR: return od_linear(c, L, l, w, impl, len);
    case LAYER_SOFTMAX: return od_softmax(c, L, l, impl, len);
    case LAYER_ADD: case LAYER_MUL: return od_binary(c, L, l, impl, len);
    case LAYER_LAYERNORM: return od_layernorm(c, L, l, w, impl, len);
    default: return false;
    }
}

static bench_status od_layer_setup(void *ctx, const layer *l, const float *w, void **state, char *impl,
                                   size_t impl_len, int64_t *workspace_bytes)
{
    od_ctx *c = ctx;
    od_layer *L = xcalloc(1, sizeof *L);
    *L = (od_layer){.l = l, .w = w, .n_inputs = l->n_inputs};
    *workspace_bytes = 0;
    snprintf(c->why, sizeof c->why, "no oneDNN primitive");
    if (od_build(c, L, l, w, impl, impl_len)) {
        *workspace_bytes = L->workspace;
        *state = L;
        return BENCH_OK;
    }
    /* not a oneDNN primitive: the cpu backend's kernel */
    od_layer_destroy(L);
    if (c->failed)
        return BENCH_ERR_BACKEND;
    L = xcalloc(1, sizeof *L);
    char cpu_impl[96] = "";
    bench_status st = backend_cpu_ops.layer_setup(c->cpu, l, w, &L->cpu_state, cpu_impl, sizeof cpu_impl,
                                                  workspace_bytes);
    if (st != BENCH_OK) {
        free(L);
        snprintf(impl, impl_len, "%s", cpu_impl);
        return st;
    }
    snprintf(impl, impl_len, "cpu kernel: %s (%s)", cpu_impl, c->why);
    *state = L;
    return BENCH_OK;
}

static void od_exec(od_ctx *c, dnnl_primitive_t p, dnnl_memory_t from, dnnl_memory_t to)
{
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    OD_OK(c, dnnl_primitive_execute(p, c->stream, 2, a));
}

/* Seconds since *t; moves *t to now. */
static double od_lap(double *t)
{
    double now = bench_now(), d = now - *t;
    *t = now;
    return d;
}

static void od_layer_run(void *ctx, void *state, const float *const *in, float *out)
{
    od_ctx *c = ctx;
    od_layer *L = state;
    if (L->cpu_state) {
        backend_cpu_ops.layer_run(c->cpu, L->cpu_state, in, out);
        return;
    }
    double t = L->timed ? bench_now() : 0.0;
    int part = 0;
    for (int k = 0; k < L->n_inputs && k < 2; k++) {
        if (!L->in_linked[k])
            dnnl_memory_set_data_handle(L->user_in[k], (void *)in[k]);
        if (L->reorder_in[k] && !L->isolated) {
            od_exec(c, L->reorder_in[k], L->user_in[k], L->in_mem[k]);
            if (L->timed)
                L->part_s[part++] = od_lap(&t);
        }
    }
    if (L->user_out)
        dnnl_memory_set_data_handle(L->user_out, out);
    OD_OK(c, dnnl_primitive_execute(L->prim, c->stream, L->n_args, L->args));
    if (L->timed)
        L->part_s[part++] = od_lap(&t);
    if (L->reorder_out && !L->isolated) {
        od_exec(c, L->reorder_out, L->out_mem, L->user_out);
        if (L->timed)
            L->part_s[part++] = od_lap(&t);
    }
}

/* The layout oneDNN's convolution hands on a tensor of shape s (a 3x3 convolution that
 * keeps its channels, every md "any"): what a primitive that follows its input's layout
 * is given in a network. false where there is none (not 4-d). */
static bool od_conv_layout(od_ctx *c, const shape_t *s, dnnl_memory_desc_t *md)
{
    if (s->rank != 4)
        return false;
    dnnl_memory_desc_t act, wei;
    dnnl_dims_t ad = {s->d[0], s->d[1], s->d[2], s->d[3]}, wd = {s->d[1], s->d[1], 3, 3}, one = {1, 1},
                pad = {1, 1};
    dnnl_memory_desc_init_by_tag(&act, 4, ad, dnnl_f32, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&wei, 4, wd, dnnl_f32, dnnl_format_tag_any);
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t pd;
    if (dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &act, &wei, NULL,
                                           &act, one, pad, pad) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &cd, NULL, c->engine, NULL) != dnnl_success)
        return false;
    *md = *od_query(pd, dnnl_query_dst_md);
    dnnl_primitive_desc_destroy(pd);
    return true;
}

static bool od_linkable(const od_layer *L);

/* A primitive that follows its input's layout, alone on the layout a convolution would
 * hand it: its inputs reordered into that layout once, now, and its output kept in its
 * own memory. false, the layer as it was, where that layout is the plain one or oneDNN
 * has nothing for it. */
static bool od_isolate_linked(od_ctx *c, od_layer *L, const float *const *in)
{
    const layer *l = L->l;
    dnnl_memory_desc_t want[2], plain;
    if (!od_linkable(L) || l->kind == LAYER_CONV2D || !od_conv_layout(c, &l->ins[0], &want[0]))
        return false;
    od_plain_shape(&plain, &l->ins[0]);
    if (dnnl_memory_desc_equal(&want[0], &plain) || (l->n_inputs > 1 && !od_conv_layout(c, &l->ins[1], &want[1])))
        return false;
    od_layer_clear(L);
    bool ok = true;
    for (int k = 0; ok && k < l->n_inputs && k < 2; k++) { /* in[k], converted once */
        od_plain_shape(&plain, &l->ins[k]);
        ok = (c->link_in[k] = od_constant(c, L, in[k], &plain, &want[k])) != NULL;
    }
    char impl[96];
    c->link_out_own = true;
    ok = ok && od_build(c, L, l, L->w, impl, sizeof impl);
    c->link_in[0] = c->link_in[1] = NULL, c->link_out_own = false;
    if (!ok && !c->failed) { /* as it was */
        od_layer_clear(L);
        od_build(c, L, l, L->w, impl, sizeof impl);
    }
    return ok;
}

/* The isolated rows time the primitive on its own layouts: the input reorders run once
 * now, on the inputs the rows will pass, and the output stays in the primitive's. */
static void od_layer_isolate(void *ctx, void *state, const float *const *in, char *impl, size_t len)
{
    od_ctx *c = ctx;
    od_layer *L = state;
    if (L->cpu_state)
        return;
    if (od_isolate_linked(c, L, in)) {
        char buf[16];
        const dnnl_memory_desc_t *md;
        dnnl_memory_get_memory_desc(L->out_mem, &md);
        snprintf(impl, len, "%s %s (input reordered at setup)", L->name, od_layout(md, buf, sizeof buf));
        return;
    }
    if (!(L->reorder_in[0] || L->reorder_in[1] || L->reorder_out))
        return;
    for (int k = 0; k < L->n_inputs && k < 2; k++) {
        dnnl_memory_set_data_handle(L->user_in[k], (void *)in[k]);
        if (L->reorder_in[k])
            od_exec(c, L->reorder_in[k], L->user_in[k], L->in_mem[k]);
    }
    OD_OK(c, dnnl_stream_wait(c->stream));
    L->isolated = true;
    od_impl_layout(L, impl, len);
}

/* A oneDNN primitive with reorders around it runs as parts: each reorder, the primitive. */
static int od_layer_parts(void *ctx, void *state, const layer *l, layer_part_info *parts)
{
    (void)ctx;
    od_layer *L = state;
    static const char *const names[3] = {"reorder src", "reorder src1", "reorder dst"};
    if (L->cpu_state || L->isolated || !(L->reorder_in[0] || L->reorder_in[1] || L->reorder_out))
        return 0;
    int n = 0;
    for (int k = 0; k < 2; k++)
        if (L->reorder_in[k])
            parts[n++] = (layer_part_info){names[k], 0, L->reorder_bytes[k]};
    parts[n++] = (layer_part_info){layer_kind_name(l->kind), l->flops, l->bytes};
    if (L->reorder_out)
        parts[n++] = (layer_part_info){names[2], 0, L->reorder_bytes[2]};
    return n;
}

static void od_layer_free(void *ctx, void *state)
{
    od_ctx *c = ctx;
    od_layer *L = state;
    if (!L)
        return;
    if (L->cpu_state) {
        backend_cpu_ops.layer_free(c->cpu, L->cpu_state);
        free(L);
        return;
    }
    od_layer_destroy(L);
}

/* Primitives that take an input in the layout its producer keeps it in and may keep
 * their output in their own: the kinds with a layout of their own (convolution) or that
 * follow their input's (eltwise, batch norm, pooling, binary). */
static bool od_linkable(const od_layer *L)
{
    if (!L || L->cpu_state || !L->prim)
        return false;
    switch (L->l->kind) {
    case LAYER_CONV2D: case LAYER_BATCHNORM2D: case LAYER_RELU: case LAYER_RELU6: case LAYER_SIGMOID:
    case LAYER_SILU: case LAYER_HARDSWISH: case LAYER_TANH: case LAYER_GELU: case LAYER_MAXPOOL2D:
    case LAYER_AVGPOOL2D: case LAYER_ADAPTIVE_AVGPOOL2D: case LAYER_ADD: case LAYER_MUL:
        return true;
    default:
        return false;
    }
}

/* The chained forward with oneDNN's layouts between its primitives, as a framework that
 * keeps blocked tensors (PyTorch's to_mkldnn, OpenVINO) runs it: a value stays in the
 * layout its producer's primitive chose when every reader is a linkable primitive and it
 * is not the model's output; each reader takes it as it is or reorders it (a part of its
 * own, "reorder src"), and a value that must be plain is reordered by its producer
 * ("reorder dst"). Layers are rebuilt in order, producers before their readers. */
static bench_status od_model_link(void *ctx, const model *m, void *const *states, float *const *values, char *impls,
                                  size_t impl_len)
{
    od_ctx *c = ctx;
    int n = m->n_layers;
    bool *keep = xcalloc((size_t)n + 1, sizeof *keep); /* value v stays in its producer's layout */
    for (int i = 0; i < n; i++)
        keep[i + 1] = od_linkable(states[i]);
    keep[model_storage_of(m, n)] = false;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < m->layers[i].n_inputs && !od_linkable(states[i]); k++)
            keep[m->layers[i].inputs[k]] = false;
    bench_status st = BENCH_OK;
    for (int i = 0; i < n && st == BENCH_OK; i++) {
        od_layer *L = states[i];
        const layer *l = &m->layers[i];
        if (!od_linkable(L))
            continue;
        bool linked = keep[i + 1];
        for (int k = 0; k < 2; k++) {
            int v = k < l->n_inputs ? l->inputs[k] : 0;
            c->link_in[k] = keep[v] ? ((od_layer *)states[v - 1])->out_mem : NULL;
            linked |= c->link_in[k] != NULL;
        }
        if (!linked)
            continue;
        c->link_out_own = keep[i + 1];
        c->link_out_buf = values[i + 1];
        c->link_out_bytes = (size_t)shape_numel(&l->out) * sizeof(float);
        char *impl = impls + (size_t)i * impl_len;
        /* on the producers' layouts; where oneDNN has nothing for them, on plain ones */
        for (int plain = 0; plain < 2; plain++) {
            c->link_plain = plain;
            od_layer_clear(L);
            if (od_build(c, L, l, L->w, impl, impl_len)) {
                od_impl_layout(L, impl, impl_len);
                break;
            }
            if (c->failed || plain) {
                if (!c->failed)
                    snprintf(c->error, sizeof c->error, "layer '%s': %s on its inputs' layouts", l->name, c->why);
                c->failed = true;
                st = BENCH_ERR_BACKEND;
                break;
            }
        }
    }
    c->link_in[0] = c->link_in[1] = NULL;
    c->link_out_own = c->link_plain = false;
    c->link_out_buf = NULL;
    free(keep);
    return st;
}

static bench_status od_init(const backend_options *opt, void **ctx, char *err, size_t errlen)
{
    od_ctx *c = xcalloc(1, sizeof *c);
    bench_status st = backend_cpu_ops.init(opt, &c->cpu, err, errlen);
    if (st != BENCH_OK) {
        free(c);
        return st;
    }
    if (dnnl_engine_create(&c->engine, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&c->stream, c->engine, dnnl_stream_default_flags) != dnnl_success) {
        snprintf(err, errlen, "oneDNN cannot create its CPU engine and stream");
        if (c->engine)
            dnnl_engine_destroy(c->engine);
        backend_cpu_ops.free(c->cpu);
        free(c);
        return BENCH_ERR_BACKEND;
    }
    const dnnl_version_t *v = dnnl_version();
    const char *isa_name;
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: isa_name = "sse41"; break;
    case dnnl_cpu_isa_avx: isa_name = "avx"; break;
    case dnnl_cpu_isa_avx2: isa_name = "avx2"; break;
    case dnnl_cpu_isa_avx2_vnni: isa_name = "avx2_vnni"; break;
    case dnnl_cpu_isa_avx512_core: isa_name = "avx512_core"; break;
    case dnnl_cpu_isa_avx512_core_vnni: isa_name = "avx512_core_vnni"; break;
    case dnnl_cpu_isa_avx512_core_bf16: isa_name = "avx512_core_bf16"; break;
    case dnnl_cpu_isa_avx512_core_amx: isa_name = "avx512_core_amx"; break;
    default: isa_name = "other"; break;
    }
    c->description = xasprintf("{\"onednn\": \"%d.%d.%d\", \"onednn_git\": \"%s\", \"onednn_cpu_runtime\": %s, "
                               "\"onednn_isa\": \"%s\", \"layouts\": \"oneDNN's: isolated rows reorder their "
                               "inputs at setup; the chained forward keeps values in oneDNN's layouts between "
                               "its primitives and times the reorders left as parts\", \"cpu\": %s}",
                               v->major, v->minor, v->patch, v->hash ? v->hash : "",
                               v->cpu_runtime == DNNL_RUNTIME_OMP ? "\"OpenMP\"" : "\"other\"", isa_name,
                               backend_cpu_ops.describe(c->cpu));
    *ctx = c;
    return BENCH_OK;
}

static void od_free(void *ctx)
{
    od_ctx *c = ctx;
    dnnl_stream_destroy(c->stream);
    dnnl_engine_destroy(c->engine);
    backend_cpu_ops.free(c->cpu);
    free(c->description);
    free(c);
}

static bench_status od_sync(void *ctx)
{
    od_ctx *c = ctx;
    OD_OK(c, dnnl_stream_wait(c->stream));
    return c->failed ? BENCH_ERR_BACKEND : BENCH_OK;
}

static double od_timer_stop(void *ctx)
{
    od_ctx *c = ctx;
    double s = backend_cpu_ops.timer_stop(c->cpu);
    return c->failed ? -1.0 : s;
}

/* oneDNN accumulates in float, in its own order (a 112x112 global average sums 12544
 * floats one way, the reference in double): inexact kinds get at least 1e-5, as on
 * cuda; exact ones (relu, max pooling, copies) stay exact. */
static double od_tolerance(void *ctx, const layer *l)
{
    (void)ctx;
    double t = layer_desc_get(l->kind)->tolerance;
    return t == 0.0 ? 0.0 : t > 1e-5 ? t : 1e-5;
}

static const char *od_last_error(void *ctx) { return ((od_ctx *)ctx)->error; }
static void od_clear_error(void *ctx)
{
    od_ctx *c = ctx;
    c->failed = false;
    c->error[0] = 0;
}
static const char *od_describe(void *ctx) { return ((od_ctx *)ctx)->description; }

/* The cpu backend's own, on its context. */
static void *od_alloc(void *ctx, size_t bytes) { return backend_cpu_ops.alloc(((od_ctx *)ctx)->cpu, bytes); }
static void od_release(void *ctx, void *p) { backend_cpu_ops.release(((od_ctx *)ctx)->cpu, p); }
static bench_status od_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    return backend_cpu_ops.upload(((od_ctx *)ctx)->cpu, dst, src, bytes);
}
static void od_timer_start(void *ctx) { backend_cpu_ops.timer_start(((od_ctx *)ctx)->cpu); }
static void od_flush_cache(void *ctx) { backend_cpu_ops.flush_cache(((od_ctx *)ctx)->cpu); }
static void od_warnings(void *ctx, char *buf, size_t len) { backend_cpu_ops.warnings(((od_ctx *)ctx)->cpu, buf, len); }
static bench_status od_marks_prepare(void *ctx, int n) { return backend_cpu_ops.marks_prepare(((od_ctx *)ctx)->cpu, n); }
static void od_timer_mark(void *ctx, int i) { backend_cpu_ops.timer_mark(((od_ctx *)ctx)->cpu, i); }
static void od_marks_read(void *ctx, double *s, int n) { backend_cpu_ops.marks_read(((od_ctx *)ctx)->cpu, s, n); }
static int od_thread_count(void *ctx) { return backend_cpu_ops.thread_count(((od_ctx *)ctx)->cpu); }
static bench_status od_peaks(void *ctx, backend_peaks *p) { return backend_cpu_ops.peaks(((od_ctx *)ctx)->cpu, p); }
static double od_canary(void *ctx) { return backend_cpu_ops.canary(((od_ctx *)ctx)->cpu); }
static bool od_parts_enable(void *ctx, void *state, bool on)
{
    od_layer *L = state;
    if (L->cpu_state)
        return backend_cpu_ops.parts_enable(((od_ctx *)ctx)->cpu, L->cpu_state, on);
    layer_part_info info[LAYER_MAX_PARTS];
    if (od_layer_parts(ctx, state, L->l, info) == 0)
        return false;
    L->timed = on;
    return true;
}
static void od_parts_read(void *ctx, void *state, double *seconds)
{
    od_layer *L = state;
    if (L->cpu_state) {
        backend_cpu_ops.parts_read(((od_ctx *)ctx)->cpu, L->cpu_state, seconds);
        return;
    }
    layer_part_info info[LAYER_MAX_PARTS];
    int n = od_layer_parts(ctx, state, L->l, info);
    memcpy(seconds, L->part_s, (size_t)n * sizeof *seconds);
}

const backend_ops backend_onednn_ops = {
    .name = "onednn",
    .init = od_init,
    .free = od_free,
    .alloc = od_alloc,
    .release = od_release,
    .upload = od_copy,
    .download = od_copy,
    .sync = od_sync,
    .timer_start = od_timer_start,
    .timer_stop = od_timer_stop,
    .flush_cache = od_flush_cache,
    .warnings = od_warnings,
    .marks_prepare = od_marks_prepare,
    .timer_mark = od_timer_mark,
    .marks_read = od_marks_read,
    .parts_enable = od_parts_enable,
    .parts_read = od_parts_read,
    .layer_parts = od_layer_parts,
    .layer_setup = od_layer_setup,
    .layer_isolate = od_layer_isolate,
    .model_link = od_model_link,
    .layer_run = od_layer_run,
    .layer_free = od_layer_free,
    .thread_count = od_thread_count,
    .describe = od_describe,
    .peaks = od_peaks,
    .canary = od_canary,
    .tolerance = od_tolerance,
    .last_error = od_last_error,
    .clear_error = od_clear_error,
    .device_memory = false,
};
