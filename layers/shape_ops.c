/* flatten, dropout and stochastic_depth: views of their input at inference (torch's
 * eval mode: dropout and torchvision's StochasticDepth are the identity). Nothing
 * runs and nothing is timed; the output is the input buffer. */
#include <string.h>

#include "kind_util.h"

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

static const layer_param_spec flatten_params[] = {
    {"start_dim", LP_INT, P_OFF(start_dim), false, INT64_MIN, NULL},
    {"end_dim", LP_INT, P_OFF(end_dim), false, INT64_MIN, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static void flatten_defaults(layer_params *p)
{
    p->start_dim = 1;
    p->end_dim = -1;
}

/* nn.Flatten(start_dim, end_dim): dims start..end merged into one ([N, C, H, W] with
 * start_dim 2 gives [N, C, H*W]); never the batch (dim 0). A view. */
static int flatten_infer(layer *l, char *err, size_t len)
{
    int64_t r = l->in.rank, a = l->p.start_dim, b = l->p.end_dim;
    a += a < 0 ? r : 0;
    b += b < 0 ? r : 0;
    if (a < 1 || a >= r || b < a || b >= r)
        return kind_fail(err, len, "start_dim %lld and end_dim %lld must name dims 1 to %lld of a rank-%lld input, "
                                   "start before end (dim 0 is the batch)",
                         (long long)l->p.start_dim, (long long)l->p.end_dim, (long long)(r - 1), (long long)r);
    shape_t o = {0, {0}};
    for (int64_t i = 0; i < a; i++)
        o.d[o.rank++] = l->in.d[i];
    int64_t merged = 1;
    for (int64_t i = a; i <= b; i++)
        merged *= l->in.d[i];
    o.d[o.rank++] = merged;
    for (int64_t i = b + 1; i < r; i++)
        o.d[o.rank++] = l->in.d[i];
    l->out = o;
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
    .name = "flatten", .n_inputs = 1, .aliases_input = true, .params = flatten_params, .defaults = flatten_defaults,
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
