/* conv2d through oneDNN's convolution, which chooses its own layouts (dnnl_format_tag_any);
 * the weights are reordered once, at setup. */
#include <stdlib.h>
#include <string.h>

#include "onednn.h"

static bool od_conv(od_ctx *c, od_layer *L, const layer *l, const void *w, char *impl, size_t len)
{
    const layer_params *p = &l->p;
    int64_t g = p->groups, oc = p->out_channels, ic = l->in.d[1];
    dnnl_data_type_t dt = od_dtype(l->dtype);
    dnnl_memory_desc_t src, dst, wei, bias, src_any, dst_any, wei_any;
    od_plain_shape(&src, &l->in, dt);
    od_plain_shape(&dst, &l->out, dt);
    int64_t wd[5] = {g, oc / g, ic / g, p->kernel[0], p->kernel[1]};
    if (g == 1)
        od_plain(&wei, 4, wd + 1, dt);
    else
        od_plain(&wei, 5, wd, dt);
    od_plain(&bias, 1, &oc, dt);
    dnnl_memory_desc_init_by_tag(&src_any, 4, src.dims, dt, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&dst_any, 4, dst.dims, dt, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&wei_any, wei.ndims, wei.dims, dt, dnnl_format_tag_any);
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
    size_t wbytes = (size_t)(oc * (ic / g) * p->kernel[0] * p->kernel[1]) * dtype_size(l->dtype);
    dnnl_memory_t bm = p->bias ? od_constant(c, L, (const char *)w + wbytes, &bias, &bias) : NULL;
    dnnl_primitive_desc_destroy(pd);
    if (!s || !d || !wm || (p->bias && !bm))
        return false;
    od_arg(L, DNNL_ARG_SRC, s), od_arg(L, DNNL_ARG_DST, d), od_arg(L, DNNL_ARG_WEIGHTS, wm);
    if (bm)
        od_arg(L, DNNL_ARG_BIAS, bm);
    od_impl_layout(L, impl, len);
    return true;
}

OD_SETUP_LINKABLE(conv_setup, od_conv)
const backend_kernel od_conv_kernel = OD_KERNEL(conv_setup);
