#include "kind_util.h"

#include <stdlib.h>

int kind_need_nchw(const layer *l, char *err, size_t errlen)
{
    if (l->in.rank == 4)
        return 0;
    char s[96];
    return kind_fail(err, errlen, "%s expects a [N, C, H, W] input, got %s",
                     layer_kind_name(l->kind), shape_format(&l->in, s, sizeof s));
}

void kind_count_bytes(layer *l)
{
    int64_t n = layer_count_add(shape_numel(&l->out), l->n_weight_floats);
    for (int k = 0; k < l->n_inputs; k++)
        n = layer_count_add(n, shape_numel(&l->ins[k]));
    l->bytes = layer_count_mul(4, n);
}

void kind_store_grad(float *dst, double *g, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = (float)g[i];
    free(g);
}
