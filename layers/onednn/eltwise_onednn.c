/* The kinds that follow their input's layout: eltwise (the activations), batch norm, and
 * binary (add, mul). */
#include <stdlib.h>
#include <string.h>

#include "onednn.h"

bool od_eltwise_alg(const layer *l, bool from_dst, dnnl_alg_kind_t *alg, float *alpha, float *beta)
{
    *alpha = *beta = 0;
    switch (l->kind) {
    case LAYER_RELU: *alg = from_dst ? dnnl_eltwise_relu_use_dst_for_bwd : dnnl_eltwise_relu; break;
    case LAYER_RELU6: *alg = from_dst ? dnnl_eltwise_clip_v2_use_dst_for_bwd : dnnl_eltwise_clip_v2, *beta = 6; break;
    case LAYER_SIGMOID: *alg = from_dst ? dnnl_eltwise_logistic_use_dst_for_bwd : dnnl_eltwise_logistic; break;
    case LAYER_SILU: *alg = dnnl_eltwise_swish, *alpha = 1; break;
    case LAYER_HARDSWISH: *alg = dnnl_eltwise_hardswish; break;
    case LAYER_TANH: *alg = from_dst ? dnnl_eltwise_tanh_use_dst_for_bwd : dnnl_eltwise_tanh; break;
    case LAYER_GELU: *alg = l->p.mode == GELU_TANH ? dnnl_eltwise_gelu_tanh : dnnl_eltwise_gelu_erf; break;
    default: return false;
    }
    return true;
}

static bool od_eltwise(od_ctx *c, od_layer *L, const layer *l, const void *w, char *impl, size_t len)
{
    (void)w;
    dnnl_alg_kind_t alg;
    float alpha, beta;
    if (!od_eltwise_alg(l, false, &alg, &alpha, &beta))
        return false;
    dnnl_memory_desc_t md;
    od_src_md(c, l, &l->in, 0, &md);
    dnnl_eltwise_desc_t d;
    return OD_SOFT(c, dnnl_eltwise_forward_desc_init(&d, dnnl_forward_inference, alg, &md, alpha, beta)) &&
           od_plain_io(c, L, l, &d, impl, len);
}

static bool od_batchnorm(od_ctx *c, od_layer *L, const layer *l, const void *w, char *impl, size_t len)
{
    int64_t ch = l->in.d[1];
    if (l->pass == PASS_TRAIN) { /* the batch's statistics: the cpu kernel's training forward */
        snprintf(c->why, sizeof c->why, "training mode: not wired to oneDNN's yet");
        return false;
    }
    dnnl_memory_desc_t md, vec, vec32;
    od_src_md(c, l, &l->in, 0, &md);
    od_plain(&vec, 1, &ch, od_dtype(l->dtype)); /* as stored; oneDNN takes the statistics in f32 */
    od_plain(&vec32, 1, &ch, dnnl_f32);
    dnnl_batch_normalization_desc_t d;
    unsigned flags = dnnl_use_global_stats | (l->p.affine ? dnnl_use_scale | dnnl_use_shift : 0);
    if (!OD_SOFT(c, dnnl_batch_normalization_forward_desc_init(&d, dnnl_forward_inference, &md, (float)l->p.eps, flags)) ||
        !od_plain_io(c, L, l, &d, impl, len))
        return false;
    static const int args[4] = {DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE};
    for (int k = l->p.affine ? 0 : 2; k < 4; k++) {
        dnnl_memory_t m = od_constant(c, L, (const char *)w + k * ch * (int64_t)dtype_size(l->dtype), &vec, &vec32);
        if (!m)
            return false;
        od_arg(L, args[k], m);
    }
    return true;
}

/* add and mul (the second input may broadcast; the first one that does is swapped into
 * second place, both being commutative). */
static bool od_binary(od_ctx *c, od_layer *L, const layer *l, const void *w, char *impl, size_t len)
{
    (void)w;
    const shape_t *a = &l->ins[0], *b = &l->ins[1];
    bool swapped = false;
    if (!shape_equal(a, &l->out))
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
    dnnl_data_type_t dt = od_dtype(l->dtype);
    od_src_md(c, l, a, k0, &s0);
    od_src_md(c, l, b, k1, &s1);
    od_dst_md(c, l, &dst);
    od_plain_shape(&p0, a, dt), od_plain_shape(&p1, b, dt), od_plain_shape(&pdst, &l->out, dt);
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

OD_SETUP_LINKABLE(eltwise_setup, od_eltwise)
const backend_kernel od_eltwise_kernel = OD_KERNEL(eltwise_setup);

OD_SETUP_LINKABLE(batchnorm_setup, od_batchnorm)
const backend_kernel od_batchnorm_kernel = OD_KERNEL(batchnorm_setup);

OD_SETUP_LINKABLE(binary_setup, od_binary)
const backend_kernel od_binary_kernel = OD_KERNEL(binary_setup);
