/* The chained forward in oneDNN's layouts: the link that rebuilds the layers that pass
 * values in them (od_linkable, layer_onednn.c) on their producers' layouts
 * (backend_layers_i.model_link). */
#include <stdlib.h>
#include <string.h>

#include "onednn.h"

/* The chained forward with oneDNN's layouts between its primitives, as a framework that
 * keeps blocked tensors (PyTorch's to_mkldnn, OpenVINO) runs it: a value stays in the
 * layout its producer's primitive chose when every reader is a linkable primitive and it
 * is not the model's output; each reader takes it as it is or reorders it (a part of its
 * own, "reorder src"), and a value that must be plain is reordered by its producer
 * ("reorder dst"). Layers are rebuilt in order, producers before their readers. */
bench_status od_model_link(void *ctx, const model *m, void *const *states, void *const *values, char *impls,
                                  size_t impl_len)
{
    od_ctx *c = ctx;
    int n = m->n_layers;
    bool *keep = xcalloc((size_t)n + 1, sizeof *keep); /* value v stays in its producer's layout */
    for (int i = 0; i < n; i++)
        keep[i + 1] = od_linkable(states[i]);
    keep[model_storage_of(m, n)] = false;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < m->layers[i].n_inputs; k++) /* a cast between dtypes reads the plain value */
            if (!od_linkable(states[i]) || model_value_dtype(m, m->layers[i].inputs[k]) != m->layers[i].dtype)
                keep[m->layers[i].inputs[k]] = false;
    bench_status st = BENCH_OK;
    for (int i = 0; i < n && st == BENCH_OK; i++) {
        od_layer *L = states[i];
        const layer *l = &m->layers[i];
        if (!od_linkable(L))
            continue;
        bool linked = keep[i + 1];
        for (int k = 0; k < 2; k++) {
            int v = k < l->n_inputs ? l->inputs[k] : 0;
            c->link_in[k] = keep[v] ? ((od_layer *)states[v - 1])->out_mem : NULL;
            linked |= c->link_in[k] != NULL;
        }
        if (!linked)
            continue;
        c->link_out_own = keep[i + 1];
        c->link_out_buf = values[i + 1];
        c->link_out_bytes = (size_t)shape_numel(&l->out) * dtype_size(l->dtype);
        char *impl = impls + (size_t)i * impl_len;
        /* on the producers' layouts; where oneDNN has nothing for them, on plain ones */
        for (int plain = 0; plain < 2; plain++) {
            c->link_plain = plain;
            od_layer_clear(L);
            if (L->build(c, L, l, L->w, impl, impl_len)) {
                od_impl_layout(L, impl, impl_len);
                break;
            }
            if (c->failed || plain) {
                if (!c->failed)
                    snprintf(c->error, sizeof c->error, "layer '%s': %s on its inputs' layouts", l->name, c->why);
                c->failed = true;
                st = BENCH_ERR_BACKEND;
                break;
            }
        }
    }
    c->link_in[0] = c->link_in[1] = NULL;
    c->link_out_own = c->link_plain = false;
    c->link_out_buf = NULL;
    free(keep);
    return st;
}
