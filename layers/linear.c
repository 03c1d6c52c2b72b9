/* linear: torch.nn.Linear over the last dimension of any input: [N, F] -> [N, out],
 * [N, S, F] -> [N, S, out] (every row of F features, the tokens of a transformer).
 * Weights: W[out, in] then bias[out]. tied_weights: the weight is another layer's
 * (Hugging Face's tie_word_embeddings: lm_head shares embed_tokens' table), read as
 * ever but not counted again as parameters. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kind_util.h"
#include "util.h"

static const layer_param_spec linear_params[] = {
    {"out_features", LP_INT, P_OFF(out_features), true, 1, NULL},
    {"bias", LP_BOOL, P_OFF(bias), false, 0, NULL},
    {"tied_weights", LP_BOOL, P_OFF(tied_weights), false, 0, NULL},
    {"hf_conv1d", LP_BOOL, P_OFF(hf_conv1d), false, 0, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static void linear_defaults(layer_params *p) { p->bias = true; }

static int linear_infer(layer *l, char *err, size_t len)
{
    (void)err, (void)len;
    l->out = l->in;
    l->out.d[l->in.rank - 1] = l->p.out_features;
    return 0;
}

/* rows: every index but the last; in: the last dimension */
static void linear_count(layer *l)
{
    int64_t in = l->in.d[l->in.rank - 1], o = l->p.out_features, rows = shape_numel(&l->in) / in;
    l->n_weights = l->n_weight_floats = layer_count_add(layer_count_mul(o, in), l->p.bias ? o : 0);
    if (l->p.tied_weights) /* counted where they belong */
        l->n_weights = l->p.bias ? o : 0;
    l->macs = layer_count_mul(layer_count_mul(rows, o), in);
    l->flops = layer_count_add(layer_count_mul(2, l->macs), l->p.bias ? layer_count_mul(rows, o) : 0);
    kind_count_bytes(l);
}

static void linear_init(const layer *l, float *w, layer_rng *rng)
{
    float b = (float)(1.0 / sqrt((double)l->in.d[l->in.rank - 1]));
    layer_fill_uniform(w, l->n_weight_floats, -b, b, rng);
}

static void linear_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    int64_t f = l->in.d[l->in.rank - 1], n = shape_numel(&l->in) / f, o = l->p.out_features;
    const float *bias = l->p.bias ? w + o * f : NULL;
    for (int64_t b = 0; b < n; b++)
        for (int64_t j = 0; j < o; j++) {
            double acc = bias ? bias[j] : 0.0;
            for (int64_t i = 0; i < f; i++)
                acc += (double)in[b * f + i] * w[j * f + i];
            out[b * o + j] = (float)acc;
        }
}

/* d in = d out W; d W = d out^T in; d bias = the sum of d out over the rows. Each row of
 * d in and of d W is summed in a double row, the loops running along the rows of W and
 * of the input (a column-wise walk, 8 KiB strides over Llama's lm_head, made the
 * reference of its backward take minutes). */
/* acc[0, f) += d x[0, f), in double */
static void acc_row(double *acc, double d, const float *x, int64_t f)
{
    for (int64_t i = 0; i < f; i++)
        acc[i] += d * x[i];
}

static void linear_backward(const layer *l, const float *const *ins, const float *w, const float *out,
                            const float *dout, float *const *din, float *dw)
{
    (void)out;
    const float *in = ins[0];
    int64_t f = l->in.d[l->in.rank - 1], n = shape_numel(&l->in) / f, o = l->p.out_features;
    double *acc = xmalloc((size_t)f * sizeof *acc);
    for (int64_t b = 0; b < n; b++) {
        memset(acc, 0, (size_t)f * sizeof *acc);
        for (int64_t j = 0; j < o; j++)
            acc_row(acc, dout[b * o + j], w + j * f, f);
        for (int64_t i = 0; i < f; i++)
            din[0][b * f + i] = (float)acc[i];
    }
    for (int64_t j = 0; j < o; j++) {
        double bias = 0.0;
        memset(acc, 0, (size_t)f * sizeof *acc);
        for (int64_t b = 0; b < n; b++) {
            acc_row(acc, dout[b * o + j], in + b * f, f);
            bias += dout[b * o + j];
        }
        for (int64_t i = 0; i < f; i++)
            dw[j * f + i] = (float)acc[i];
        if (l->p.bias)
            dw[o * f + j] = (float)bias;
    }
    free(acc);
}

/* int8: the weight [out_features, in_features], a scale per output feature; the bias stays fp32 */
static int64_t linear_int8_weights(const layer *l, int64_t *rows)
{
    *rows = l->p.out_features;
    return layer_count_mul(l->p.out_features, l->in.d[l->in.rank - 1]);
}

const layer_desc layer_linear_desc = {
    .name = "linear", .n_inputs = 1, .params = linear_params, .defaults = linear_defaults,
    .infer = linear_infer, .count = linear_count, .init_weights = linear_init,
    .reference = linear_reference, .tolerance = 2e-6, .int8_weights = linear_int8_weights,
    .backward = linear_backward,
};
