/* linear: torch.nn.Linear on a flattened [N, F] input. Weights: W[out, in] then bias[out]. */
#include <math.h>

#include "kind_util.h"

static const layer_param_spec linear_params[] = {
    {"out_features", LP_INT, P_OFF(out_features), true, 1, NULL},
    {"bias", LP_BOOL, P_OFF(bias), false, 0, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static void linear_defaults(layer_params *p) { p->bias = true; }

static int linear_infer(layer *l, char *err, size_t len)
{
    char s[96];
    if (l->in.rank != 2)
        return kind_fail(err, len, "linear expects a flattened [N, F] input, got %s (add a flatten layer before it)",
                         shape_format(&l->in, s, sizeof s));
    l->out = (shape_t){2, {l->in.d[0], l->p.out_features}};
    return 0;
}

static void linear_count(layer *l)
{
    int64_t in = l->in.d[1], o = l->p.out_features;
    l->n_weights = l->n_weight_floats = count_add(count_mul(o, in), l->p.bias ? o : 0);
    l->macs = count_mul(count_mul(l->in.d[0], o), in);
    l->flops = count_add(count_mul(2, l->macs), l->p.bias ? count_mul(l->in.d[0], o) : 0);
    kind_count_bytes(l);
}

static void linear_init(const layer *l, float *w, layer_rng *rng)
{
    float b = (float)(1.0 / sqrt((double)l->in.d[1]));
    layer_fill_uniform(w, l->n_weight_floats, -b, b, rng);
}

static void linear_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    int64_t n = l->in.d[0], f = l->in.d[1], o = l->p.out_features;
    const float *bias = l->p.bias ? w + o * f : NULL;
    for (int64_t b = 0; b < n; b++)
        for (int64_t j = 0; j < o; j++) {
            double acc = bias ? bias[j] : 0.0;
            for (int64_t i = 0; i < f; i++)
                acc += (double)in[b * f + i] * w[j * f + i];
            out[b * o + j] = (float)acc;
        }
}

const layer_desc layer_linear_desc = {
    .name = "linear", .n_inputs = 1, .params = linear_params, .defaults = linear_defaults,
    .infer = linear_infer, .count = linear_count, .init_weights = linear_init,
    .reference = linear_reference, .tolerance = 2e-6,
};
