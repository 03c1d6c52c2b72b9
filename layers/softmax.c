/* softmax: torch.nn.Softmax(dim). dim defaults to 1, which is what torch picks
 * implicitly for 2-D and 4-D inputs. FLOPs: 5 per element (max, subtract, exp, sum, divide). */
#include <math.h>

#include "kind_util.h"

static const layer_param_spec softmax_params[] = {
    {"dim", LP_INT, P_OFF(dim), false, INT64_MIN, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static void softmax_defaults(layer_params *p) { p->dim = 1; }

static int softmax_infer(layer *l, char *err, size_t len)
{
    int64_t r = l->in.rank;
    if (l->p.dim < -r || l->p.dim >= r)
        return kind_fail(err, len, "dim %lld is out of range for a rank-%lld input (expected %lld..%lld)",
                         (long long)l->p.dim, (long long)r, (long long)-r, (long long)(r - 1));
    if (l->p.dim < 0)
        l->p.dim += r;
    l->out = l->in;
    return 0;
}

static void softmax_count(layer *l)
{
    l->n_weights = l->n_weight_floats = l->macs = 0;
    l->flops = layer_count_mul(5, shape_numel(&l->out));
    kind_count_bytes(l);
}

void layer_softmax_dims(const layer *l, int64_t *outer, int64_t *n, int64_t *inner)
{
    *outer = 1, *n = l->in.d[l->p.dim], *inner = 1;
    for (int64_t i = 0; i < l->p.dim; i++)
        *outer *= l->in.d[i];
    for (int64_t i = l->p.dim + 1; i < l->in.rank; i++)
        *inner *= l->in.d[i];
}

static void softmax_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    (void)w;
    int64_t outer, n, inner;
    layer_softmax_dims(l, &outer, &n, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < inner; k++) {
            const float *x = in + o * n * inner + k;
            double m = -INFINITY, s = 0.0;
            for (int64_t i = 0; i < n; i++)
                m = fmax(m, x[i * inner]);
            for (int64_t i = 0; i < n; i++)
                s += exp(x[i * inner] - m);
            for (int64_t i = 0; i < n; i++)
                out[o * n * inner + k + i * inner] = (float)(exp(x[i * inner] - m) / s);
        }
}

/* From the output it saved, as torch's _softmax_backward_data: d x_i = y_i (d y_i - sum_j
 * d y_j y_j) along dim */
static void softmax_backward(const layer *l, const float *const *ins, const float *w, const float *out,
                             const float *dout, float *const *din, float *dw)
{
    (void)ins, (void)w, (void)dw;
    int64_t outer, n, inner;
    layer_softmax_dims(l, &outer, &n, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < inner; k++) {
            int64_t at = o * n * inner + k;
            double dot = 0.0;
            for (int64_t i = 0; i < n; i++)
                dot += (double)dout[at + i * inner] * out[at + i * inner];
            for (int64_t i = 0; i < n; i++)
                din[0][at + i * inner] = (float)(out[at + i * inner] * (dout[at + i * inner] - dot));
        }
}

const layer_desc layer_softmax_desc = {
    .name = "softmax", .n_inputs = 1, .params = softmax_params, .defaults = softmax_defaults,
    .infer = softmax_infer, .count = softmax_count, .reference = softmax_reference,
    .tolerance = 1e-6, .backward = softmax_backward,
};
