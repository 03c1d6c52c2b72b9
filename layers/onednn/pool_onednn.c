/* Pooling: max, average and adaptive average (as an average with computed windows). */
#include <stdlib.h>
#include <string.h>

#include "onednn.h"

bool od_pool_params(od_ctx *c, const layer *l, dnnl_alg_kind_t *alg, dnnl_dim_t *k, dnnl_dim_t *s, dnnl_dim_t *dil,
                    dnnl_dim_t *pl, dnnl_dim_t *pr)
{
    const layer_params *p = &l->p;
    dil[0] = dil[1] = 0;
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
        *alg = dnnl_pooling_max;
    else if (l->kind == LAYER_AVGPOOL2D && p->count_include_pad)
        *alg = dnnl_pooling_avg_include_padding;
    else
        *alg = dnnl_pooling_avg_exclude_padding;
    return true;
}

static bool od_pool(od_ctx *c, od_layer *L, const layer *l, const void *w, char *impl, size_t len)
{
    (void)w;
    dnnl_dims_t k, s, pl, pr, dil; /* oneDNN reads DNNL_MAX_NDIMS of each */
    dnnl_alg_kind_t alg;
    if (!od_pool_params(c, l, &alg, k, s, dil, pl, pr))
        return false;
    dnnl_memory_desc_t src, dst;
    od_src_md(c, l, &l->in, 0, &src);
    od_dst_md(c, l, &dst);
    dnnl_pooling_v2_desc_t d;
    return OD_SOFT(c, dnnl_pooling_v2_forward_desc_init(&d, dnnl_forward_inference, alg, &src, &dst, s, k, dil, pl, pr)) &&
           od_plain_io(c, L, l, &d, impl, len);
}

OD_SETUP_LINKABLE(pool_setup, od_pool)
const backend_kernel od_pool_kernel = OD_KERNEL(pool_setup);
