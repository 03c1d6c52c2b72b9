/* The transformer kinds oneDNN has a primitive for: layer normalisation. */
#include <stdlib.h>
#include <string.h>

#include "onednn.h"

static bool od_layernorm(od_ctx *c, od_layer *L, const layer *l, const void *w, char *impl, size_t len)
{
    int64_t d = l->in.d[l->in.rank - 1];
    dnnl_memory_desc_t md, vec, vec32;
    od_plain_shape(&md, &l->in, od_dtype(l->dtype));
    od_plain(&vec, 1, &d, od_dtype(l->dtype)); /* as stored; oneDNN takes scale and shift in f32 */
    od_plain(&vec32, 1, &d, dnnl_f32);
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
        dnnl_memory_t m = od_constant(c, L, (const char *)w + k * d * (int64_t)dtype_size(l->dtype), &vec, &vec32);
        if (!m)
            return false;
        od_arg(L, k ? DNNL_ARG_SHIFT : DNNL_ARG_SCALE, m);
    }
    return true;
}

/* ---- the backend ----------------------------------------------------------------------- */

OD_SETUP(layernorm_setup, od_layernorm)
const backend_kernel od_layernorm_kernel = OD_KERNEL(layernorm_setup);
