/* add: the element-wise sum that closes a residual block (body + shortcut).
 * Configs never name it; residual blocks create it. FLOPs: 1 per element. */
#include "kind_util.h"

static const layer_param_spec no_params[] = {{NULL, 0, 0, false, 0}};

static int add_infer(layer *l, char *err, size_t len)
{
    char a[96], b[96];
    if (!shape_equal(&l->in, &l->in2))
        return kind_fail(err, len, "the residual body gives %s but the shortcut gives %s",
                         shape_format(&l->in, a, sizeof a), shape_format(&l->in2, b, sizeof b));
    l->out = l->in;
    return 0;
}

static void add_count(layer *l)
{
    l->n_weights = l->n_weight_floats = l->macs = 0;
    l->flops = shape_numel(&l->out);
    kind_count_bytes(l);
}

static void add_reference(const layer *l, const float *in, const float *in2, const float *w, float *out)
{
    (void)w;
    for (int64_t i = 0, n = shape_numel(&l->out); i < n; i++)
        out[i] = (float)((double)in[i] + in2[i]);
}

const layer_desc layer_add_desc = {
    .name = "add", .n_inputs = 2, .params = no_params, .infer = add_infer,
    .count = add_count, .reference = add_reference, .tolerance = 0.0,
};
