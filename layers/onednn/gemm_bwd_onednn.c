/* conv2d's and linear's backward through oneDNN's backward weights and backward data
 * primitives (convolution and inner product: what torch 1.13 runs on the CPU), each in
 * the layouts it chooses: the plain input and output gradient reordered into them at
 * each run, the gradients reordered back to plain, the weights for the data gradient
 * reordered once, at setup, as the forward's. No weights primitive for a frozen layer,
 * no data primitive where no input gradient is wanted. A configuration oneDNN has no
 * primitive for runs the cpu backend's backward kernel. */
#include <stdlib.h>
#include <string.h>

#include "onednn.h"

typedef struct od_conv_bwd {
    od_layer L;                 /* what was made here (memories, primitives), freed together */
    od_layer *fallback;         /* the cpu backend's backward kernel, where oneDNN has none */
    dnnl_primitive_t bwd_w, bwd_d;
    dnnl_memory_t src_u, ddst_u, dsrc_u, dw_u, db_u; /* plain views of the run's pointers */
    dnnl_memory_t src, ddst_w, ddst_d, dsrc, dw, wei; /* what the primitives read and write */
    dnnl_primitive_t r_src, r_ddst_w, r_ddst_d, r_dsrc, r_dw; /* reorders, or NULL where plain */
    int64_t dx_floats, w_floats;
    bool parts;                 /* time the two halves (the in-model view) */
    double part_s[2];           /* backward weights, backward data (the order they run) */
} od_conv_bwd;

/* A plain view of the run's pointer and what the primitive wants (the view itself where
 * it wants plain; else a memory of its own and a reorder, from plain when to_primitive). */
static bool od_bwd_tensor(od_ctx *c, od_layer *L, const dnnl_memory_desc_t *plain, const dnnl_memory_desc_t *want,
                          bool to_primitive, dnnl_memory_t *user, dnnl_memory_t *mine, dnnl_primitive_t *reorder)
{
    dnnl_memory_t own;
    *reorder = NULL;
    if (!(*user = od_pair(c, L, plain, DNNL_MEMORY_NONE, want, &own)))
        return false;
    *mine = own ? own : *user;
    if (own)
        *reorder = to_primitive ? od_reorder(c, L, plain, want) : od_reorder(c, L, want, plain);
    return !own || *reorder;
}

/* The plain tensors of l's backward (in its dtype, the gradients too): src, dst, the
 * weights, the bias; conv2d's as its shapes (grouped weights 5-d), linear's as
 * [rows, F], [rows, O], [O, F] */
static void od_bwd_plain(const layer *l, dnnl_memory_desc_t *src, dnnl_memory_desc_t *dst, dnnl_memory_desc_t *wei,
                         dnnl_memory_desc_t *bias)
{
    const layer_params *p = &l->p;
    dnnl_data_type_t t = od_dtype(l->dtype);
    if (l->kind == LAYER_LINEAR) {
        int64_t f = l->in.d[l->in.rank - 1], o = p->out_features, rows = shape_numel(&l->in) / f;
        int64_t sd[2] = {rows, f}, dd[2] = {rows, o}, wd[2] = {o, f};
        od_plain(src, 2, sd, t), od_plain(dst, 2, dd, t), od_plain(wei, 2, wd, t);
        od_plain(bias, 1, &o, t);
        return;
    }
    int64_t g = p->groups, oc = p->out_channels, ic = l->in.d[1];
    int64_t wd[5] = {g, oc / g, ic / g, p->kernel[0], p->kernel[1]};
    od_plain_shape(src, &l->in, t), od_plain_shape(dst, &l->out, t);
    od_plain(wei, g == 1 ? 4 : 5, g == 1 ? wd + 1 : wd, t);
    od_plain(bias, 1, &oc, t);
}

static void od_any(dnnl_memory_desc_t *any, const dnnl_memory_desc_t *plain)
{
    dnnl_memory_desc_init_by_tag(any, plain->ndims, plain->dims, plain->data_type, dnnl_format_tag_any);
}

/* The primitive descriptions: the forward's (training, the hint), backward weights (not
 * for a frozen layer) and backward data (not where no input gradient is wanted), with
 * oneDNN's layouts for each tensor; false where oneDNN has none (c->why says so). */
static bool od_bwd_pds(od_ctx *c, const layer *l, const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *dst,
                       const dnnl_memory_desc_t *wei, const dnnl_memory_desc_t *bias, dnnl_primitive_desc_t *fpd,
                       dnnl_primitive_desc_t *wpd, dnnl_primitive_desc_t *dpd)
{
    const layer_params *p = &l->p;
    dnnl_memory_desc_t sa, da, wa, ba;
    od_any(&sa, src), od_any(&da, dst), od_any(&wa, wei), od_any(&ba, bias);
    const dnnl_memory_desc_t *bp = p->bias ? &ba : NULL;
    if (l->kind == LAYER_LINEAR) {
        dnnl_inner_product_desc_t fd, bw, bd;
        bool ok = OD_SOFT(c, dnnl_inner_product_forward_desc_init(&fd, dnnl_forward_training, &sa, &wa, bp, &da)) &&
                  OD_SOFT(c, dnnl_primitive_desc_create(fpd, &fd, NULL, c->engine, NULL));
        if (ok && !l->frozen)
            ok = OD_SOFT(c, dnnl_inner_product_backward_weights_desc_init(&bw, &sa, &wa, bp, &da)) &&
                 OD_SOFT(c, dnnl_primitive_desc_create(wpd, &bw, NULL, c->engine, *fpd));
        if (ok && !l->no_input_grad)
            ok = OD_SOFT(c, dnnl_inner_product_backward_data_desc_init(&bd, &sa, &wa, &da)) &&
                 OD_SOFT(c, dnnl_primitive_desc_create(dpd, &bd, NULL, c->engine, *fpd));
        return ok;
    }
    dnnl_dims_t strides = {p->stride[0], p->stride[1]}, dil = {p->dilation[0] - 1, p->dilation[1] - 1},
                pad = {p->padding[0], p->padding[1]};
    dnnl_convolution_desc_t fd, bw, bd;
    bool ok = OD_SOFT(c, dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct,
                                                                    &sa, &wa, bp, &da, strides, dil, pad, pad)) &&
              OD_SOFT(c, dnnl_primitive_desc_create(fpd, &fd, NULL, c->engine, NULL));
    if (ok && !l->frozen)
        ok = OD_SOFT(c, dnnl_dilated_convolution_backward_weights_desc_init(&bw, dnnl_convolution_direct, &sa, &wa, bp,
                                                                            &da, strides, dil, pad, pad)) &&
             OD_SOFT(c, dnnl_primitive_desc_create(wpd, &bw, NULL, c->engine, *fpd));
    if (ok && !l->no_input_grad)
        ok = OD_SOFT(c, dnnl_dilated_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &sa, &wa, &da,
                                                                         strides, dil, pad, pad)) &&
             OD_SOFT(c, dnnl_primitive_desc_create(dpd, &bd, NULL, c->engine, *fpd));
    return ok;
}

/* Whether pd (or NULL) is one of oneDNN's im2col (gemm) convolutions */
static bool od_gemm_impl(dnnl_primitive_desc_t pd)
{
    const char *name = "";
    if (pd)
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name);
    return strstr(name, "gemm") != NULL;
}

/* The two primitives, from the forward's description as their hint; false where oneDNN
 * has none (c->why says so) or a call failed. */
static bool od_conv_bwd_build(od_ctx *c, od_conv_bwd *s, const layer *l, const void *w, char *impl, size_t len)
{
    od_layer *L = &s->L;
    dnnl_memory_desc_t src, dst, wei, bias;
    od_bwd_plain(l, &src, &dst, &wei, &bias);
    dnnl_primitive_desc_t fpd = NULL, dpd = NULL, wpd = NULL;
    const char *dname = "-", *wname = "?";
    bool ok = od_bwd_pds(c, l, &src, &dst, &wei, &bias, &fpd, &wpd, &dpd);
    ok = ok && (wpd || dpd); /* a frozen layer reading the model's input has no backward to run */
    if (ok && l->kind == LAYER_CONV2D && l->dtype != DTYPE_FP32 && (od_gemm_impl(wpd) || od_gemm_impl(dpd))) {
        /* oneDNN 2.6's im2col convolution backward in bf16 (x64:gemm:jit) crashed inside
         * its JIT code on a 5-channel 3x3 convolution (Zen 5): not used */
        snprintf(c->why, sizeof c->why, "oneDNN's bf16 im2col backward is not used");
        ok = false;
    }
    if (ok && wpd && OD_OK(c, dnnl_primitive_create(&s->bwd_w, wpd)))
        BENCH_ASSERT(L->n_prims < OD_MAX_PRIMS), L->prims[L->n_prims++] = s->bwd_w;
    if (ok && dpd && OD_OK(c, dnnl_primitive_create(&s->bwd_d, dpd)))
        BENCH_ASSERT(L->n_prims < OD_MAX_PRIMS), L->prims[L->n_prims++] = s->bwd_d;
    ok = ok && (!wpd || s->bwd_w) && (!dpd || s->bwd_d);
    if (ok && wpd)
        ok = od_bwd_tensor(c, L, &src, od_query(wpd, dnnl_query_src_md), true, &s->src_u, &s->src, &s->r_src) &&
             od_bwd_tensor(c, L, &dst, od_query(wpd, dnnl_query_diff_dst_md), true, &s->ddst_u, &s->ddst_w,
                           &s->r_ddst_w) &&
             od_bwd_tensor(c, L, &wei, od_query(wpd, dnnl_query_diff_weights_md), false, &s->dw_u, &s->dw, &s->r_dw);
    if (ok && wpd && l->p.bias) { /* a vector: plain either way */
        dnnl_memory_t own;
        ok = (s->db_u = od_pair(c, L, &bias, DNNL_MEMORY_NONE, dnnl_primitive_desc_query_md(wpd, dnnl_query_diff_weights_md, 1),
                                &own)) && !own;
    }
    if (ok && dpd) {
        ok = od_bwd_tensor(c, L, &src, od_query(dpd, dnnl_query_diff_src_md), false, &s->dsrc_u, &s->dsrc, &s->r_dsrc) &&
             (s->wei = od_constant(c, L, w, &wei, od_query(dpd, dnnl_query_weights_md)));
        if (ok && wpd &&
            dnnl_memory_desc_equal(od_query(dpd, dnnl_query_diff_dst_md), od_query(wpd, dnnl_query_diff_dst_md)))
            s->ddst_d = s->ddst_w; /* the same layout: one reorder serves both */
        else
            ok = ok && od_bwd_tensor(c, L, &dst, od_query(dpd, dnnl_query_diff_dst_md), true, &s->ddst_u, &s->ddst_d,
                                     &s->r_ddst_d);
    }
    if (ok) {
        if (wpd)
            dnnl_primitive_desc_query(wpd, dnnl_query_impl_info_str, 0, &wname);
        if (dpd)
            dnnl_primitive_desc_query(dpd, dnnl_query_impl_info_str, 0, &dname);
        char a[16];
        snprintf(impl, len, "weights %s, data %s (%s; plain tensors reordered %s)", wpd ? wname : "none (frozen)",
                 dpd ? dname : "none", od_layout(od_query(wpd ? wpd : dpd, wpd ? dnnl_query_src_md : dnnl_query_diff_src_md), a, sizeof a),
                 s->r_src || s->r_ddst_w || s->r_ddst_d || s->r_dsrc ? "in and out" : "not at all");
    }
    if (fpd)
        dnnl_primitive_desc_destroy(fpd);
    if (dpd)
        dnnl_primitive_desc_destroy(dpd);
    if (wpd)
        dnnl_primitive_desc_destroy(wpd);
    return ok;
}

static bench_status od_conv_bwd_setup(void *env, const layer *l, const void *w, void **state, char *impl, size_t len,
                                      int64_t *workspace_bytes)
{
    od_ctx *c = env;
    od_conv_bwd *s = xcalloc(1, sizeof *s);
    s->L = (od_layer){.l = l, .w = w, .n_inputs = l->n_inputs};
    s->dx_floats = shape_numel(&l->in);
    s->w_floats = l->n_weight_floats - (l->p.bias ? l->out.d[l->kind == LAYER_LINEAR ? l->out.rank - 1 : 1] : 0);
    snprintf(c->why, sizeof c->why, "no oneDNN primitive");
    bool built = od_conv_bwd_build(c, s, l, w, impl, len);
    bench_status st = od_built_or_cpu(c, &s->L, &s->fallback, built, workspace_bytes, impl, len);
    if (st != BENCH_OK)
        free(s);
    else
        *state = s;
    return st;
}

static void od_exec2(od_ctx *c, dnnl_primitive_t r, dnnl_memory_t from, dnnl_memory_t to)
{
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    OD_OK(c, dnnl_primitive_execute(r, c->stream, 2, a));
}

/* in: x, y, dy (the output is not read); out: dx, then dW and db (in l's dtype) */
static void od_conv_bwd_run(void *env, const layer *l, void *state, const void *const *in, const void *w, void *out)
{
    od_ctx *c = env;
    od_conv_bwd *s = state;
    if (s->fallback) {
        od_layer_run(env, l, s->fallback, in, w, out);
        return;
    }
    size_t es = dtype_size(l->dtype);
    char *dx = out, *dw = dx + s->dx_floats * (int64_t)es;
    double t0 = s->parts ? bench_now() : 0;
    dnnl_memory_set_data_handle(s->ddst_u, (void *)in[l->n_inputs + 1]);
    if (s->bwd_w) {
        dnnl_memory_set_data_handle(s->src_u, (void *)in[0]);
        dnnl_memory_set_data_handle(s->dw_u, dw);
        if (s->db_u)
            dnnl_memory_set_data_handle(s->db_u, dw + s->w_floats * (int64_t)es);
        if (s->r_src)
            od_exec2(c, s->r_src, s->src_u, s->src);
        if (s->r_ddst_w)
            od_exec2(c, s->r_ddst_w, s->ddst_u, s->ddst_w);
        dnnl_exec_arg_t wa[4] = {{DNNL_ARG_SRC, s->src}, {DNNL_ARG_DIFF_DST, s->ddst_w}, {DNNL_ARG_DIFF_WEIGHTS, s->dw},
                                 {DNNL_ARG_DIFF_BIAS, s->db_u}};
        OD_OK(c, dnnl_primitive_execute(s->bwd_w, c->stream, s->db_u ? 4 : 3, wa));
        if (s->r_dw)
            od_exec2(c, s->r_dw, s->dw, s->dw_u);
    }
    double t1 = s->parts ? bench_now() : 0;
    if (s->bwd_d) {
        dnnl_memory_set_data_handle(s->dsrc_u, dx);
        if (s->r_ddst_d)
            od_exec2(c, s->r_ddst_d, s->ddst_u, s->ddst_d);
        dnnl_exec_arg_t da[3] = {{DNNL_ARG_DIFF_DST, s->ddst_d}, {DNNL_ARG_WEIGHTS, s->wei}, {DNNL_ARG_DIFF_SRC, s->dsrc}};
        OD_OK(c, dnnl_primitive_execute(s->bwd_d, c->stream, 3, da));
        if (s->r_dsrc)
            od_exec2(c, s->r_dsrc, s->dsrc, s->dsrc_u);
    }
    if (s->parts)
        s->part_s[0] = t1 - t0, s->part_s[1] = bench_now() - t1;
}

/* The two halves, each with its reorders, timed apart where both run; the cpu kernel's
 * where it runs (its order: data first) */
static bool od_conv_bwd_parts_enable(void *env, void *state, bool on)
{
    od_conv_bwd *s = state;
    if (s->fallback)
        return od_parts_enable(env, s->fallback, on);
    s->parts = on && s->bwd_w && s->bwd_d;
    return s->bwd_w && s->bwd_d;
}

static void od_conv_bwd_parts_read(void *env, void *state, double *seconds)
{
    if (((od_conv_bwd *)state)->fallback) {
        od_parts_read(env, ((od_conv_bwd *)state)->fallback, seconds);
        return;
    }
    memcpy(seconds, ((od_conv_bwd *)state)->part_s, sizeof ((od_conv_bwd *)state)->part_s);
}

static int od_conv_bwd_parts(void *env, void *state, const layer *l, layer_part_info *parts)
{
    od_conv_bwd *s = state;
    return s->fallback ? od_layer_parts(env, s->fallback, l, parts) : layer_backward_parts(l, true, parts);
}

static void od_conv_bwd_free(void *env, void *state)
{
    od_conv_bwd *s = state;
    if (!s)
        return;
    if (s->fallback)
        od_layer_free(env, s->fallback);
    od_layer_clear(&s->L);
    free(s);
}

const backend_kernel od_gemm_bwd_kernel = {.setup = od_conv_bwd_setup, .run = od_conv_bwd_run, .free = od_conv_bwd_free,
                                           .parts_enable = od_conv_bwd_parts_enable,
                                           .parts_read = od_conv_bwd_parts_read, .parts = od_conv_bwd_parts};
