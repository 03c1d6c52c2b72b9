/* conv2d and linear in int8, dynamic quantization (dtype.h) on oneDNN's s8 primitives:
 * at setup the weights are quantized per output channel (s8, max |row| / 127) and
 * reordered into the primitive's layout; at each run the fp32 input's max |x| gives its
 * scale s_x, a reorder quantizes it into s8 (the part "quantize src"), and the primitive
 * multiplies s8 x s8 into int32 and writes fp32: acc * s_w[oc] (its output scales, fixed
 * at setup: oneDNN 2.6's convolutions take no runtime ones), times s_x (a binary post-op
 * whose operand is read at each run). oneDNN 2.x adds the bias before the scales: it is
 * passed as bias / (s_x s_w). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onednn.h"

void od_quant_free(od_quant *q)
{
    if (!q)
        return;
    free(q->w_scale), free(q->bias_acc), free(q->w8);
    free(q);
}

/* The scales for an input scaled by sx. */
static void quant_scales(od_quant *q, float sx)
{
    q->sx = sx, q->in_scale = 1.0f / sx;
    for (int64_t o = 0; q->bias && o < q->oc; o++)
        q->bias_acc[o] = q->bias[o] / (sx * q->w_scale[o]);
}

void od_quant_prepare(od_quant *q, const float *in)
{
    float amax = cpu_absmax(in, q->n_in);
    quant_scales(q, amax > 0.0f && isfinite(amax) ? amax / 127.0f : 1.0f);
}

/* The primitive's attributes: output scales per output channel (dimension 1 of the
 * destination), then a multiply by one broadcast element, s_x. */
static bool quant_attr(od_ctx *c, int64_t oc, const float *scales, const dnnl_memory_desc_t *bcast,
                       dnnl_primitive_attr_t *attr)
{
    dnnl_post_ops_t po;
    if (!OD_OK(c, dnnl_primitive_attr_create(attr)))
        return false;
    bool ok = OD_OK(c, dnnl_primitive_attr_set_output_scales(*attr, oc, 1 << 1, scales)) &&
              OD_OK(c, dnnl_post_ops_create(&po));
    if (ok) {
        ok = OD_OK(c, dnnl_post_ops_append_binary(po, dnnl_binary_mul, bcast)) &&
             OD_OK(c, dnnl_primitive_attr_set_post_ops(*attr, po));
        dnnl_post_ops_destroy(po);
    }
    if (!ok)
        dnnl_primitive_attr_destroy(*attr);
    return ok;
}

/* The weights' levels: 127 with VNNI (vpdpbusd sums in 32 bits). Without it, u8 x s8
 * pairs sum into 16 bits (vpmaddubsw) and saturate: where the primitive's weights carry
 * oneDNN's own scale adjustment (its convolutions halve them), 127 still; else (its
 * GEMM-based inner product) 7-bit weights, 63. */
static int quant_levels(od_ctx *c, const void *op_desc, int64_t oc, const dnnl_memory_desc_t *bcast)
{
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if ((isa & dnnl_cpu_isa_avx512_core_vnni & ~dnnl_cpu_isa_avx512_core) ||
        (isa & dnnl_cpu_isa_avx2_vnni & ~dnnl_cpu_isa_avx2))
        return 127;
    float *ones = xmalloc((size_t)oc * sizeof *ones);
    for (int64_t o = 0; o < oc; o++)
        ones[o] = 1.0f;
    int levels = 63;
    dnnl_primitive_attr_t attr;
    dnnl_primitive_desc_t pd;
    if (quant_attr(c, oc, ones, bcast, &attr)) {
        if (dnnl_primitive_desc_create(&pd, op_desc, attr, c->engine, NULL) == dnnl_success) {
            if (od_query(pd, dnnl_query_weights_md)->extra.flags & dnnl_memory_extra_flag_scale_adjust)
                levels = 127;
            dnnl_primitive_desc_destroy(pd);
        }
        dnnl_primitive_attr_destroy(attr);
    }
    free(ones);
    return levels;
}

/* The primitive of op_desc (src s8, weights s8 "any", dst fp32) with its scales, the
 * quantizing reorder of its input from src_f, and the weights w (oc rows of k, then an
 * fp32 bias of oc where has_bias) quantized. */
static bool quant_build(od_ctx *c, od_layer *L, const layer *l, const void *op_desc, const float *w, int64_t oc,
                        int64_t k, bool has_bias, const dnnl_memory_desc_t *src_f, const dnnl_memory_desc_t *dst_f,
                        const dnnl_memory_desc_t *wei_q, const char *const *avoid, char *impl, size_t len)
{
    const float runtime = DNNL_RUNTIME_F32_VAL;
    /* s_x: one element, broadcast over the destination */
    dnnl_memory_desc_t one, bias, bcast;
    int64_t n1 = 1, ones[DNNL_MAX_NDIMS] = {1, 1, 1, 1, 1, 1};
    od_plain(&one, 1, &n1, dnnl_f32);
    od_plain(&bias, 1, &oc, dnnl_f32);
    od_plain(&bcast, dst_f->ndims, ones, dnnl_f32);
    od_quant *q = L->q = xcalloc(1, sizeof *q);
    q->n_in = shape_numel(&l->in), q->oc = oc;
    q->w_scale = xmalloc((size_t)oc * sizeof *q->w_scale);
    q->w8 = xmalloc((size_t)(oc * k));
    q->bias = has_bias ? w + oc * k : NULL;
    q->bias_acc = has_bias ? xmalloc((size_t)oc * sizeof *q->bias_acc) : NULL;
    q->levels = quant_levels(c, op_desc, oc, &bcast);
    dtype_int8_quantize_rows(w, oc, k, q->levels, q->w_scale, q->w8);
    quant_scales(q, 1.0f); /* defined values until the first run */
    dnnl_primitive_attr_t attr;
    dnnl_primitive_desc_t pd;
    if (!quant_attr(c, oc, q->w_scale, &bcast, &attr))
        return false;
    bool ok = od_primitive_avoid(c, L, op_desc, attr, avoid, &pd, impl, len);
    dnnl_primitive_attr_destroy(attr);
    if (!ok)
        return false;
    const dnnl_memory_desc_t *src_q = od_query(pd, dnnl_query_src_md);
    /* the run's fp32 input, its s8 copy in the primitive's layout, and the reorder between
     * (scale 1 / s_x, set at each run); a scale for the whole tensor: mask 0 */
    L->user_in[0] = od_memory(c, L, src_f, DNNL_MEMORY_NONE);
    L->in_mem[0] = od_memory(c, L, src_q, DNNL_MEMORY_ALLOCATE);
    ok = L->user_in[0] && L->in_mem[0] && OD_OK(c, dnnl_primitive_attr_create(&attr));
    if (ok) {
        ok = OD_OK(c, dnnl_primitive_attr_set_output_scales(attr, 1, 0, &runtime)) &&
             (L->reorder_in[0] = od_reorder_attr(c, L, src_f, src_q, attr)) != NULL;
        dnnl_primitive_attr_destroy(attr);
    }
    L->reorder_bytes[0] = (int64_t)(dnnl_memory_desc_get_size(src_f) + dnnl_memory_desc_get_size(src_q));
    q->in_scale_mem = ok ? od_memory(c, L, &one, &q->in_scale) : NULL;
    q->sx_mem = ok ? od_memory(c, L, &bcast, &q->sx) : NULL;
    dnnl_memory_t wm = ok ? od_constant(c, L, q->w8, wei_q, od_query(pd, dnnl_query_weights_md)) : NULL;
    dnnl_memory_t bm = ok && has_bias ? od_memory(c, L, &bias, q->bias_acc) : NULL;
    dnnl_memory_t d = ok ? od_activation(c, L, -1, dst_f, od_query(pd, dnnl_query_dst_md)) : NULL;
    dnnl_primitive_desc_destroy(pd);
    if (!q->in_scale_mem || !q->sx_mem || !wm || !d || (has_bias && !bm))
        return false;
    od_arg(L, DNNL_ARG_SRC, L->in_mem[0]), od_arg(L, DNNL_ARG_WEIGHTS, wm), od_arg(L, DNNL_ARG_DST, d);
    od_arg(L, DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, q->sx_mem);
    if (bm)
        od_arg(L, DNNL_ARG_BIAS, bm);
    od_impl_layout(L, impl, len);
    return true;
}

static bool od_conv_int8(od_ctx *c, od_layer *L, const layer *l, const void *w, char *impl, size_t len)
{
    const layer_params *p = &l->p;
    int64_t g = p->groups, oc = p->out_channels, ic = l->in.d[1];
    dnnl_memory_desc_t src_f, dst_f, wei_q, bias, src_any, dst_any, wei_any;
    od_plain_shape(&src_f, &l->in, dnnl_f32);
    od_plain_shape(&dst_f, &l->out, dnnl_f32);
    int64_t wd[5] = {g, oc / g, ic / g, p->kernel[0], p->kernel[1]};
    if (g == 1)
        od_plain(&wei_q, 4, wd + 1, dnnl_s8);
    else
        od_plain(&wei_q, 5, wd, dnnl_s8);
    od_plain(&bias, 1, &oc, dnnl_f32);
    dnnl_memory_desc_init_by_tag(&src_any, 4, src_f.dims, dnnl_s8, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&dst_any, 4, dst_f.dims, dnnl_f32, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&wei_any, wei_q.ndims, wei_q.dims, dnnl_s8, dnnl_format_tag_any);
    dnnl_dims_t strides = {p->stride[0], p->stride[1]}, dil = {p->dilation[0] - 1, p->dilation[1] - 1},
                pad = {p->padding[0], p->padding[1]};
    dnnl_convolution_desc_t cd;
    if (!OD_SOFT(c, dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct,
                                                             &src_any, &wei_any, p->bias ? &bias : NULL, &dst_any,
                                                             strides, dil, pad, pad)))
        return false;
    /* oneDNN 2.7's AVX2 and SSE4.1 depthwise int8 kernels get the last channels wrong
     * where the count leaves two or more past a whole vector (relative error 0.3 to 0.9
     * with 2-7, 10, 12 or 14 channels; right with 1, 8, 9, 17 or 24, measured on a Zen 3):
     * the next implementation oneDNN offers then (its AVX-512 kernel masks the tail) */
    static const char *const buggy_dw[] = {"jit_uni_int8:avx2", "jit_uni_int8:sse41", NULL};
    bool depthwise = g == ic && g == oc;
    const char *const *avoid = depthwise && oc % 8 ? buggy_dw : NULL;
    return quant_build(c, L, l, &cd, w, oc, (ic / g) * p->kernel[0] * p->kernel[1], p->bias, &src_f, &dst_f, &wei_q,
                       avoid, impl, len);
}

/* over the last dimension, as linear_onednn.c: rows = every other index */
static bool od_linear_int8(od_ctx *c, od_layer *L, const layer *l, const void *w, char *impl, size_t len)
{
    int64_t f = l->in.d[l->in.rank - 1], o = l->p.out_features, rows = shape_numel(&l->in) / f;
    int64_t sd[2] = {rows, f}, dd[2] = {rows, o}, wd[2] = {o, f};
    dnnl_memory_desc_t src_f, src_q, dst_f, wei_q, wei_any, bias;
    od_plain(&src_f, 2, sd, dnnl_f32);
    od_plain(&src_q, 2, sd, dnnl_s8);
    od_plain(&dst_f, 2, dd, dnnl_f32);
    od_plain(&wei_q, 2, wd, dnnl_s8);
    od_plain(&bias, 1, &o, dnnl_f32);
    dnnl_memory_desc_init_by_tag(&wei_any, 2, wei_q.dims, dnnl_s8, dnnl_format_tag_any);
    dnnl_inner_product_desc_t d;
    if (!OD_SOFT(c, dnnl_inner_product_forward_desc_init(&d, dnnl_forward_inference, &src_q, &wei_any,
                                                       l->p.bias ? &bias : NULL, &dst_f)))
        return false;
    return quant_build(c, L, l, &d, w, o, f, l->p.bias, &src_f, &dst_f, &wei_q, NULL, impl, len);
}

OD_SETUP(conv_int8_setup, od_conv_int8)
OD_SETUP(linear_int8_setup, od_linear_int8)
const backend_kernel od_conv_int8_kernel = OD_KERNEL(conv_int8_setup);
const backend_kernel od_linear_int8_kernel = OD_KERNEL(linear_int8_setup);
