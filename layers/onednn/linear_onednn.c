/* linear through oneDNN's inner product, on the plain layout. */
#include <stdlib.h>
#include <string.h>

#include "onednn.h"

/* linear over the last dimension: an inner product over rows = every other index. */
static bool od_linear(od_ctx *c, od_layer *L, const layer *l, const void *w, char *impl, size_t len)
{
    int64_t f = l->in.d[l->in.rank - 1], o = l->p.out_features, rows = shape_numel(&l->in) / f;
    int64_t sd[2] = {rows, f}, dd[2] = {rows, o}, wd[2] = {o, f};
    dnnl_memory_desc_t src, dst, wei, wei_any, bias;
    dnnl_data_type_t dt = od_dtype(l->dtype);
    od_plain(&src, 2, sd, dt);
    od_plain(&dst, 2, dd, dt);
    od_plain(&wei, 2, wd, dt);
    od_plain(&bias, 1, &o, dt);
    dnnl_memory_desc_init_by_tag(&wei_any, 2, wei.dims, dt, dnnl_format_tag_any);
    dnnl_inner_product_desc_t d;
    dnnl_primitive_desc_t pd;
    if (!OD_SOFT(c, dnnl_inner_product_forward_desc_init(&d, dnnl_forward_inference, &src, &wei_any,
                                                       l->p.bias ? &bias : NULL, &dst)) ||
        !od_primitive(c, L, &d, &pd, impl, len))
        return false;
    dnnl_memory_t wm = od_constant(c, L, w, &wei, od_query(pd, dnnl_query_weights_md));
    dnnl_memory_t sm = od_activation(c, L, 0, &src, od_query(pd, dnnl_query_src_md));
    dnnl_memory_t dm = od_activation(c, L, -1, &dst, od_query(pd, dnnl_query_dst_md));
    dnnl_memory_t bm = l->p.bias ? od_constant(c, L, (const char *)w + o * f * (int64_t)dtype_size(l->dtype), &bias, &bias)
                                 : NULL;
    dnnl_primitive_desc_destroy(pd);
    if (!wm || !sm || !dm || (l->p.bias && !bm))
        return false;
    od_arg(L, DNNL_ARG_SRC, sm), od_arg(L, DNNL_ARG_WEIGHTS, wm), od_arg(L, DNNL_ARG_DST, dm);
    if (bm)
        od_arg(L, DNNL_ARG_BIAS, bm);
    return true;
}

OD_SETUP(linear_setup, od_linear)
const backend_kernel od_linear_kernel = OD_KERNEL(linear_setup);
