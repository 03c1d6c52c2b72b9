/* oneDNN memories, memory descriptors, reorders and primitives, as every kind family
 * makes them for its layer (onednn.h). */
#include <stdlib.h>
#include <string.h>

#include "onednn.h"

/* Records the first failure: "file:line: call failed: status". */
bool od_check(od_ctx *c, dnnl_status_t st, const char *call, const char *file, int line)
{
    if (st == dnnl_success)
        return true;
    if (!c->failed)
        snprintf(c->error, sizeof c->error, "%s:%d: %.200s failed: dnnl status %d", file, line, call, (int)st);
    c->failed = true;
    return false;
}

/* Describing an operation or finding an implementation for it: where oneDNN has none
 * (dnnl_unimplemented) or refuses these parameters, the layer runs the cpu kernel and
 * impl says why; any other status is a failure. */
bool od_soft(od_ctx *c, dnnl_status_t st, const char *call, const char *file, int line)
{
    if (st == dnnl_unimplemented || st == dnnl_invalid_arguments) {
        snprintf(c->why, sizeof c->why, "%s", st == dnnl_unimplemented ? "no oneDNN implementation"
                                                                          : "parameters oneDNN refuses");
        return false;
    }
    return od_check(c, st, call, file, line);
}

dnnl_memory_t od_keep(od_layer *L, dnnl_memory_t m)
{
    if (m) {
        BENCH_ASSERT(L->n_mems < OD_MAX_MEMS);
        L->mems[L->n_mems++] = m;
    }
    return m;
}

void od_arg(od_layer *L, int arg, dnnl_memory_t m)
{
    BENCH_ASSERT(L->n_args < OD_MAX_ARGS);
    L->args[L->n_args++] = (dnnl_exec_arg_t){arg, m};
}

/* A plain md of the shape (row-major, dense), or of its dims as given. */
dnnl_data_type_t od_dtype(dtype_t t)
{
    switch (t) {
    case DTYPE_BF16: return dnnl_bf16;
    case DTYPE_FP16: return dnnl_f16;
    /* int8's activations are fp32 (dtype.h); its kernels name s8 themselves */
    default: return dnnl_f32;
    }
}

void od_plain(dnnl_memory_desc_t *md, int rank, const int64_t *d, dnnl_data_type_t dt)
{
    dnnl_dims_t dims, strides;
    int64_t s = 1;
    for (int k = rank - 1; k >= 0; k--)
        dims[k] = d[k], strides[k] = s, s *= d[k];
    dnnl_memory_desc_init_by_strides(md, rank, dims, dt, strides);
}

void od_plain_shape(dnnl_memory_desc_t *md, const shape_t *s, dnnl_data_type_t dt) { od_plain(md, s->rank, s->d, dt); }

/* A reorder from one md to the other, run now or at each run. */
dnnl_primitive_t od_reorder(od_ctx *c, od_layer *L, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to)
{
    return od_reorder_attr(c, L, from, to, NULL);
}

dnnl_primitive_t od_reorder_attr(od_ctx *c, od_layer *L, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                                 const_dnnl_primitive_attr_t attr)
{
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t p = NULL;
    if (!OD_OK(c, dnnl_reorder_primitive_desc_create(&pd, from, c->engine, to, c->engine, attr)))
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
dnnl_memory_t od_memory(od_ctx *c, od_layer *L, const dnnl_memory_desc_t *md, void *handle)
{
    dnnl_memory_t m = NULL;
    if (!OD_OK(c, dnnl_memory_create(&m, md, c->engine, handle)))
        return NULL;
    if (handle == DNNL_MEMORY_ALLOCATE)
        L->workspace += (int64_t)dnnl_memory_desc_get_size(md);
    return od_keep(L, m);
}

dnnl_memory_t od_pair(od_ctx *c, od_layer *L, const dnnl_memory_desc_t *plain, void *handle,
                             const dnnl_memory_desc_t *want, dnnl_memory_t *mine)
{
    *mine = NULL;
    dnnl_memory_t user = od_memory(c, L, plain, handle);
    if (!user || dnnl_memory_desc_equal(plain, want))
        return user;
    return (*mine = od_memory(c, L, want, DNNL_MEMORY_ALLOCATE)) ? user : NULL;
}

/* A reorder from have to want for input k (k < 0: the output, from want to plain). */
dnnl_primitive_t od_reorder_act(od_ctx *c, od_layer *L, int k, const dnnl_memory_desc_t *from,
                                       const dnnl_memory_desc_t *to)
{
    L->reorder_bytes[k < 0 ? 2 : k] = (int64_t)(dnnl_memory_desc_get_size(from) + dnnl_memory_desc_get_size(to));
    return od_reorder(c, L, from, to);
}

/* Input k (k < 0: the output) as the primitive wants it. The value itself is a plain view
 * of the run's pointer or, in a linked forward, its producer's memory (an input) or a
 * memory of this layer's own in the primitive's layout that its readers take (the
 * output). Where the primitive wants another md: a memory of its own and a reorder. */
dnnl_memory_t od_activation(od_ctx *c, od_layer *L, int k, const dnnl_memory_desc_t *plain,
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
void od_src_md(const od_ctx *c, const layer *l, const shape_t *s, int k, dnnl_memory_desc_t *md)
{
    const dnnl_memory_desc_t *have;
    if (c->link_in[k] && !c->link_plain && dnnl_memory_get_memory_desc(c->link_in[k], &have) == dnnl_success)
        *md = *have;
    else
        od_plain_shape(md, s, od_dtype(l->dtype));
}

/* The output's md for such a primitive: "any" (oneDNN follows the input) where an input
 * is linked, else plain. */
void od_dst_md(const od_ctx *c, const layer *l, dnnl_memory_desc_t *md)
{
    od_plain_shape(md, &l->out, od_dtype(l->dtype));
    if ((c->link_in[0] || c->link_in[1]) && !c->link_plain)
        dnnl_memory_desc_init_by_tag(md, md->ndims, md->dims, od_dtype(l->dtype), dnnl_format_tag_any);
}

/* An md's layout, for impl: "nChw16c", "nchw", "nhwc" (4-d), "plain" (other ranks) or "blocked". */
const char *od_layout(const dnnl_memory_desc_t *md, char *buf, size_t len)
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
dnnl_memory_t od_constant(od_ctx *c, od_layer *L, const void *w, const dnnl_memory_desc_t *plain,
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
bool od_primitive(od_ctx *c, od_layer *L, const void *op_desc, dnnl_primitive_desc_t *pd, char *impl,
                         size_t len)
{
    return od_primitive_attr(c, L, op_desc, NULL, pd, impl, len);
}

bool od_primitive_attr(od_ctx *c, od_layer *L, const void *op_desc, const_dnnl_primitive_attr_t attr,
                       dnnl_primitive_desc_t *pd, char *impl, size_t len)
{
    return od_primitive_avoid(c, L, op_desc, attr, NULL, pd, impl, len);
}

/* Whether name begins with one of the prefixes in avoid (NULL-terminated). */
static bool avoided(const char *name, const char *const *avoid)
{
    for (int i = 0; avoid && avoid[i]; i++)
        if (strncmp(name, avoid[i], strlen(avoid[i])) == 0)
            return true;
    return false;
}

bool od_primitive_avoid(od_ctx *c, od_layer *L, const void *op_desc, const_dnnl_primitive_attr_t attr,
                        const char *const *avoid, dnnl_primitive_desc_t *pd, char *impl, size_t len)
{
    const char *name = "?";
    if (!avoid) {
        if (!OD_SOFT(c, dnnl_primitive_desc_create(pd, op_desc, attr, c->engine, NULL)))
            return false;
        dnnl_primitive_desc_query(*pd, dnnl_query_impl_info_str, 0, &name);
    } else { /* the implementations in oneDNN's order of preference, but the one known to be wrong */
        dnnl_primitive_desc_iterator_t it;
        if (!OD_SOFT(c, dnnl_primitive_desc_iterator_create(&it, op_desc, attr, c->engine, NULL)))
            return false;
        *pd = NULL;
        do {
            dnnl_primitive_desc_t cand = dnnl_primitive_desc_iterator_fetch(it);
            if (!cand)
                break;
            dnnl_primitive_desc_query(cand, dnnl_query_impl_info_str, 0, &name);
            if (!avoided(name, avoid))
                *pd = cand;
            else
                dnnl_primitive_desc_destroy(cand);
        } while (!*pd && dnnl_primitive_desc_iterator_next(it) == dnnl_success);
        dnnl_primitive_desc_iterator_destroy(it);
        if (!*pd) {
            snprintf(c->why, sizeof c->why, "oneDNN offers only %s, which computes this layer wrongly", name);
            return false;
        }
    }
    snprintf(impl, len, "%s", name);
    snprintf(L->name, sizeof L->name, "%s", name);
    if (!OD_OK(c, dnnl_primitive_create(&L->prim, *pd)))
        return false;
    BENCH_ASSERT(L->n_prims < OD_MAX_PRIMS);
    L->prims[L->n_prims++] = L->prim;
    return true;
}

const dnnl_memory_desc_t *od_query(const_dnnl_primitive_desc_t pd, dnnl_query_t what)
{
    return dnnl_primitive_desc_query_md(pd, what, 0);
}

/* impl for a layer whose primitive runs on its own layout: the implementation, that
 * layout and the reorders around it. */
void od_impl_layout(const od_layer *L, char *impl, size_t len)
{
    char buf[16];
    const dnnl_memory_desc_t *md = NULL;
    if (L->out_mem)
        dnnl_memory_get_memory_desc(L->out_mem, &md);
    bool in = L->reorder_in[0] || L->reorder_in[1], out = L->reorder_out;
    if (L->q) { /* int8: the input's quantizing reorder runs at each call, isolated too */
        snprintf(impl, len, "%s %s int8 s8s8s32%s (input quantized per call)%s", L->name,
                 md ? od_layout(md, buf, sizeof buf) : "", L->q->levels < 127 ? " (7-bit weights: no VNNI)" : "",
                 out && !L->isolated ? " + dst reorder" : "");
        return;
    }
    snprintf(impl, len, "%s %s%s", L->name, md ? od_layout(md, buf, sizeof buf) : "",
             L->isolated && (in || out) ? " (reorders at setup)"
             : in && out               ? " + src/dst reorders"
             : in                      ? " + src reorder"
             : out                     ? " + dst reorder"
                                       : "");
}

/* ---- the kinds ------------------------------------------------------------------------- */

/* A primitive whose input and output are the layer's own tensors, in the mds its
 * description gave (plain, or its producers' layouts in a linked forward). */
bool od_plain_io(od_ctx *c, od_layer *L, const layer *l, const void *op_desc, char *impl, size_t len)
{
    dnnl_primitive_desc_t pd;
    if (!od_primitive(c, L, op_desc, &pd, impl, len))
        return false;
    bool ok = true;
    for (int k = 0; ok && k < l->n_inputs; k++) {
        dnnl_memory_desc_t in;
        od_plain_shape(&in, &l->ins[k], od_dtype(l->dtype));
        dnnl_memory_t m = od_activation(c, L, k, &in, dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, k));
        if ((ok = m != NULL))
            od_arg(L, l->n_inputs == 1 ? DNNL_ARG_SRC : DNNL_ARG_MULTIPLE_SRC + k, m);
    }
    dnnl_memory_desc_t out;
    od_plain_shape(&out, &l->out, od_dtype(l->dtype));
    dnnl_memory_t m = ok ? od_activation(c, L, -1, &out, od_query(pd, dnnl_query_dst_md)) : NULL;
    dnnl_primitive_desc_destroy(pd);
    if (!m)
        return false;
    od_arg(L, DNNL_ARG_DST, m);
    if (L->reorder_in[0] || L->reorder_in[1] || L->reorder_out)
        od_impl_layout(L, impl, len);
    return true;
}
