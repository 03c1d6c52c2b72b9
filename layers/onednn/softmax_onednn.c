/* softmax on the plain layout. */
#include <stdlib.h>
#include <string.h>

#include "onednn.h"

static bool od_softmax(od_ctx *c, od_layer *L, const layer *l, const void *w, char *impl, size_t len)
{
    (void)w;
    dnnl_memory_desc_t md;
    od_plain_shape(&md, &l->in, od_dtype(l->dtype));
    dnnl_softmax_desc_t d;
    return OD_SOFT(c, dnnl_softmax_forward_desc_init(&d, dnnl_forward_inference, &md, (int)l->p.dim)) &&
           od_plain_io(c, L, l, &d, impl, len);
}

OD_SETUP(softmax_setup, od_softmax)
const backend_kernel od_softmax_kernel = OD_KERNEL(softmax_setup);
