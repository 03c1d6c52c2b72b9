/* flatten, dropout and stochastic_depth: views of their input at inference (torch's
 * eval mode: dropout and torchvision's StochasticDepth are the identity). Nothing
 * runs and nothing is timed; the output is the input buffer. */
#include <string.h>

#include "kind_util.h"

static const layer_param_spec no_params[] = {{NULL, 0, 0, false, 0, NULL}};

static const layer_param_spec dropout_params[] = {
    {"p", LP_FLOAT, P_OFF(p), false, 0, NULL},
    {"inplace", LP_BOOL, P_OFF(inplace), false, 0, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static void dropout_defaults(layer_params *p) { p->p = 0.5; }

static const char *const stochastic_modes[] = {"row", "batch", NULL};

static const layer_param_spec stochastic_params[] = {
    {"p", LP_FLOAT, P_OFF(p), true, 0, NULL},
    {"mode", LP_ENUM, P_OFF(mode), true, 0, stochastic_modes},
    {NULL, 0, 0, false, 0, NULL},
};

static int flatten_infer(layer *l, char *err, size_t len)
{
    (void)err, (void)len;
    /* torch.flatten(x, 1): [N, C, H, W] -> [N, C*H*W] */
    l->out = (shape_t){2, {l->in.d[0], shape_numel(&l->in) / l->in.d[0]}};
    return 0;
}

static int dropout_infer(layer *l, char *err, size_t len)
{
    if (l->p.p > 1.0)
        return kind_fail(err, len, "%s probability p must be between 0 and 1, got %g", layer_kind_name(l->kind), l->p.p);
    l->out = l->in;
    return 0;
}

static void view_count(layer *l)
{
    l->n_weights = l->n_weight_floats = l->macs = l->flops = 0;
    l->bytes = 0; /* a view moves nothing */
}

static void copy_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    (void)w;
    memcpy(out, in, (size_t)shape_numel(&l->in) * sizeof *in);
}

const layer_desc layer_flatten_desc = {
    .name = "flatten", .n_inputs = 1, .aliases_input = true, .params = no_params,
    .infer = flatten_infer, .count = view_count, .reference = copy_reference, .tolerance = 0.0,
};

const layer_desc layer_dropout_desc = {
    .name = "dropout", .n_inputs = 1, .aliases_input = true, .params = dropout_params,
    .defaults = dropout_defaults, .infer = dropout_infer, .count = view_count,
    .reference = copy_reference, .tolerance = 0.0,
};

const layer_desc layer_stochastic_depth_desc = {
    .name = "stochastic_depth", .n_inputs = 1, .aliases_input = true, .params = stochastic_params,
    .infer = dropout_infer, .count = view_count, .reference = copy_reference, .tolerance = 0.0,
};
