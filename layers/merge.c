/* The kinds that merge several inputs: add (a residual's sum; with numpy broadcasting, a
 * UNet ResBlock's timestep embedding [N, C, 1, 1] added to its [N, C, H, W] map), mul (an
 * element-wise product, broadcasting as add: squeeze-and-excitation's [N, C, 1, 1]
 * scale times its [N, C, H, W] input) and concat (torch.cat along dim). Residual and
 * branch structures create them; configs may also write them with explicit inputs.
 * FLOPs: 1 per output element for add and mul, none for concat (it only moves data).
 *
 * matmul: torch.matmul / torch.bmm of two activations, [..., M, K] x [..., K, N] to
 * [..., M, N] for every index of the leading dims (the same in both): attention written
 * out by hand (a VAE's spatial self-attention, q k^T and its product with v). 2 FLOPs per
 * multiply-accumulate. */
#include <stdlib.h>
#include <string.h>

#include "kind_util.h"
#include "util.h"

static const layer_param_spec no_params[] = {{NULL, 0, 0, false, 0, NULL}};

static const layer_param_spec concat_params[] = {
    {"dim", LP_INT, P_OFF(dim), false, INT64_MIN, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static void concat_defaults(layer_params *p) { p->dim = 1; }

/* ---- add ------------------------------------------------------------------------------------ */

static void merge_count(layer *l)
{
    l->n_weights = l->n_weight_floats = l->macs = 0;
    l->flops = l->kind == LAYER_CONCAT ? 0 : shape_numel(&l->out);
    kind_count_bytes(l);
}


/* ---- add and mul ------------------------------------------------------------------------------ */

/* numpy broadcasting of two inputs of one rank (a dim of 1 against any) */
static int broadcast_infer(layer *l, char *err, size_t len)
{
    const shape_t *a = &l->ins[0], *b = &l->ins[1];
    const char *kind = layer_kind_name(l->kind);
    char x[96], y[96];
    if (a->rank != b->rank)
        return kind_fail(err, len, "%s needs inputs of one rank, got %s and %s", kind, shape_format(a, x, sizeof x),
                         shape_format(b, y, sizeof y));
    l->out = *a;
    for (int i = 0; i < a->rank; i++) {
        if (a->d[i] != b->d[i] && a->d[i] != 1 && b->d[i] != 1)
            return kind_fail(err, len, "%s cannot broadcast %s with %s: dimension %d is %lld against %lld", kind,
                             shape_format(a, x, sizeof x), shape_format(b, y, sizeof y), i, (long long)a->d[i],
                             (long long)b->d[i]);
        l->out.d[i] = a->d[i] > b->d[i] ? a->d[i] : b->d[i];
    }
    return 0;
}

int64_t layer_broadcast_index(const shape_t *s, const shape_t *out, int64_t o)
{
    int64_t idx = 0, stride = 1;
    for (int i = out->rank - 1; i >= 0; i--) {
        int64_t coord = o % out->d[i];
        o /= out->d[i];
        if (s->d[i] != 1)
            idx += coord * stride;
        stride *= s->d[i];
    }
    return idx;
}

static void binary_reference(const layer *l, const float *const *in, const float *w, float *out)
{
    (void)w;
    for (int64_t i = 0, n = shape_numel(&l->out); i < n; i++) {
        double a = in[0][layer_broadcast_index(&l->ins[0], &l->out, i)];
        double b = in[1][layer_broadcast_index(&l->ins[1], &l->out, i)];
        out[i] = (float)(l->kind == LAYER_ADD ? a + b : a * b);
    }
}

/* Each input's gradient: d out (add) or d out times the other input (mul), summed over
 * the dimensions it was broadcast along */
static void binary_backward(const layer *l, const float *const *in, const float *w, const float *out,
                            const float *dout, float *const *din, float *dw)
{
    (void)w, (void)out, (void)dw;
    for (int k = 0; k < 2; k++) {
        int64_t nk = shape_numel(&l->ins[k]);
        double *g = xcalloc((size_t)nk, sizeof *g);
        for (int64_t i = 0, n = shape_numel(&l->out); i < n; i++) {
            double other = l->kind == LAYER_ADD ? 1.0 : in[1 - k][layer_broadcast_index(&l->ins[1 - k], &l->out, i)];
            g[layer_broadcast_index(&l->ins[k], &l->out, i)] += dout[i] * other;
        }
        kind_store_grad(din[k], g, nk);
    }
}

/* ---- matmul ---------------------------------------------------------------------------------- */

static int matmul_infer(layer *l, char *err, size_t len)
{
    const shape_t *a = &l->ins[0], *b = &l->ins[1];
    char x[96], y[96];
    bool ok = a->rank == b->rank && a->rank >= 3 && a->d[a->rank - 1] == b->d[b->rank - 2];
    for (int i = 0; ok && i < a->rank - 2; i++)
        ok = a->d[i] == b->d[i];
    if (!ok)
        return kind_fail(err, len, "matmul needs [..., M, K] and [..., K, N] of one rank (3 or 4) and the same leading "
                                   "dims, got %s and %s",
                         shape_format(a, x, sizeof x), shape_format(b, y, sizeof y));
    l->out = *a;
    l->out.d[a->rank - 1] = b->d[b->rank - 1];
    return 0;
}

/* The leading dims' count, and M, K, N. */
void layer_matmul_dims(const layer *l, int64_t *batch, int64_t *m, int64_t *k, int64_t *n)
{
    const shape_t *a = &l->ins[0];
    *batch = 1;
    for (int i = 0; i < a->rank - 2; i++)
        *batch *= a->d[i];
    *m = a->d[a->rank - 2], *k = a->d[a->rank - 1], *n = l->ins[1].d[a->rank - 1];
}

static void matmul_count(layer *l)
{
    int64_t batch, m, k, n;
    layer_matmul_dims(l, &batch, &m, &k, &n);
    l->n_weights = l->n_weight_floats = 0;
    l->macs = layer_count_mul(layer_count_mul(batch, m), layer_count_mul(k, n));
    l->flops = layer_count_mul(2, l->macs);
    kind_count_bytes(l);
}

static void matmul_reference(const layer *l, const float *const *in, const float *w, float *out)
{
    (void)w;
    int64_t batch, m, k, n;
    layer_matmul_dims(l, &batch, &m, &k, &n);
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double acc = 0;
                for (int64_t t = 0; t < k; t++)
                    acc += (double)in[0][(b * m + i) * k + t] * in[1][(b * k + t) * n + j];
                out[(b * m + i) * n + j] = (float)acc;
            }
}

/* ---- concat ----------------------------------------------------------------------------------- */

static int concat_infer(layer *l, char *err, size_t len)
{
    int64_t r = l->ins[0].rank;
    char a[96], b[96];
    if (l->p.dim < -r || l->p.dim >= r)
        return kind_fail(err, len, "dim %lld is out of range for rank-%lld inputs", (long long)l->p.dim, (long long)r);
    if (l->p.dim < 0)
        l->p.dim += r;
    if (l->p.dim == 0)
        return kind_fail(err, len, "concat along dim 0 (the batch) is not supported");
    l->out = l->ins[0];
    l->out.d[l->p.dim] = 0;
    for (int k = 0; k < l->n_inputs; k++) {
        const shape_t *s = &l->ins[k];
        bool ok = s->rank == r;
        for (int i = 0; ok && i < r; i++)
            ok = i == l->p.dim || s->d[i] == l->ins[0].d[i];
        if (!ok)
            return kind_fail(err, len, "input %d of concat is %s, which does not match %s outside dim %lld", k + 1,
                             shape_format(s, a, sizeof a), shape_format(&l->ins[0], b, sizeof b), (long long)l->p.dim);
        l->out.d[l->p.dim] += s->d[l->p.dim];
    }
    return 0;
}

/* The output seen as [outer, its dim, inner] */
static void concat_dims(const layer *l, int64_t *outer, int64_t *inner)
{
    *outer = *inner = 1;
    for (int64_t i = 0; i < l->p.dim; i++)
        *outer *= l->out.d[i];
    for (int64_t i = l->p.dim + 1; i < l->out.rank; i++)
        *inner *= l->out.d[i];
}

/* The inputs' slices side by side into the output; back: the output's slices into the
 * inputs' (the backward's direction) */
static void concat_move(const layer *l, float *const *parts, float *whole, bool back)
{
    int64_t outer, inner, dim = l->p.dim, at = 0;
    concat_dims(l, &outer, &inner);
    for (int k = 0; k < l->n_inputs; k++) {
        int64_t span = l->ins[k].d[dim] * inner;
        for (int64_t o = 0; o < outer; o++) {
            float *x = parts[k] + o * span, *y = whole + o * l->out.d[dim] * inner + at;
            memcpy(back ? x : y, back ? y : x, (size_t)span * sizeof(float));
        }
        at += span;
    }
}

static void concat_reference(const layer *l, const float *const *in, const float *w, float *out)
{
    (void)w;
    concat_move(l, (float *const *)in, out, false); /* read only in this direction */
}

/* Each input's slice of d out */
static void concat_backward(const layer *l, const float *const *in, const float *w, const float *out,
                            const float *dout, float *const *din, float *dw)
{
    (void)in, (void)w, (void)out, (void)dw;
    concat_move(l, din, (float *)dout, true); /* read only in this direction */
}

const layer_desc layer_add_desc = {
    .name = "add", .n_inputs = 2, .params = no_params, .infer = broadcast_infer,
    .count = merge_count, .reference = binary_reference, .tolerance = 0.0, .backward = binary_backward,
};

const layer_desc layer_mul_desc = {
    .name = "mul", .n_inputs = 2, .params = no_params, .infer = broadcast_infer,
    .count = merge_count, .reference = binary_reference, .tolerance = 0.0, .backward = binary_backward,
};

const layer_desc layer_matmul_desc = {
    .name = "matmul", .n_inputs = 2, .params = no_params, .infer = matmul_infer, .count = matmul_count,
    .reference = matmul_reference, .tolerance = 2e-6,
};

const layer_desc layer_concat_desc = {
    .name = "concat", .n_inputs = -1, .params = concat_params, .defaults = concat_defaults,
    .infer = concat_infer, .count = merge_count, .reference = concat_reference, .tolerance = 0.0,
    .backward = concat_backward,
};
