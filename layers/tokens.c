/* Kinds that move data around: channel_shuffle (ShuffleNet's view, transpose(1, 2) and
 * view back; nn.ChannelShuffle), a transpose of [N, groups, C / groups, spatial]; slice
 * (x[:, a:b], x.chunk, x.split, torch.narrow: a copy of one range of a dim); and, for
 * vision transformers: transpose (torch.transpose,
 * also what permute(0, 2, 1) does to [N, C, L]), class_token (a learned token put in
 * front of the sequence: torchvision's VisionTransformer.class_token, expanded and
 * concatenated), pos_embedding (a learned [1, S, D] added to every sample, or rows
 * kv_len to kv_len + S - 1 of a [num_positions, D] table: GPT-2's wpe; its
 * Encoder.pos_embedding) and select (x[:, i], which drops that dim). torch's transpose
 * and x[:, 0] are views that the next operation reads strided; layerbench copies, and
 * times the copy. */
#include <string.h>

#include "kind_util.h"

/* ---- transpose -------------------------------------------------------------------------- */

static const layer_param_spec transpose_params[] = {
    {"dim0", LP_INT, P_OFF(dim0), true, INT64_MIN, NULL},
    {"dim1", LP_INT, P_OFF(dim1), true, INT64_MIN, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static int transpose_infer(layer *l, char *err, size_t len)
{
    int64_t r = l->in.rank, a = l->p.dim0, b = l->p.dim1;
    a += a < 0 ? r : 0;
    b += b < 0 ? r : 0;
    if (a < 1 || a >= r || b < 1 || b >= r || a == b)
        return kind_fail(err, len, "dim0 %lld and dim1 %lld must be two different dims from 1 to %lld of a rank-%lld "
                                   "input (dim 0 is the batch)",
                         (long long)l->p.dim0, (long long)l->p.dim1, (long long)(r - 1), (long long)r);
    l->p.dim0 = a < b ? a : b, l->p.dim1 = a < b ? b : a;
    l->out = l->in;
    l->out.d[a] = l->in.d[b];
    l->out.d[b] = l->in.d[a];
    return 0;
}

static void zero_flops_count(layer *l)
{
    l->macs = l->flops = 0;
    kind_count_bytes(l);
}

static void no_weights_count(layer *l)
{
    l->n_weights = l->n_weight_floats = 0;
    zero_flops_count(l);
}

/* A permutation as runs of input dims: [prefix, A, mid, B, suffix] whose output is
 * [prefix, B, mid, A, suffix] (run[k]: how many dims each holds). False when the
 * permutation is not of that form (every one of 4 dims with the batch first is). */
static bool permute_runs(const int64_t *perm, int64_t run[5])
{
    int64_t r = perm[0];
    const int64_t *p = perm + 1;
    int64_t i = 0, j = r - 1;
    while (i < r && p[i] == i)
        i++;
    if (i == r) { /* the identity: a plain copy */
        run[0] = r, run[1] = run[2] = run[3] = run[4] = 0;
        return true;
    }
    while (p[j] == j)
        j--;
    int64_t nb = j - p[i] + 1, k = i; /* B = input dims p[i]..j, first in the output */
    while (k <= j && p[k] != i)
        k++;
    int64_t na = j - k + 1; /* A = input dims i.., last in the output */
    if (nb < 1 || na < 1 || na + nb > j - i + 1)
        return false;
    for (int64_t t = 0; t < nb; t++)
        if (p[i + t] != p[i] + t)
            return false;
    for (int64_t t = 0; t < na; t++)
        if (p[k + t] != i + t)
            return false;
    for (int64_t t = i + nb; t < k; t++) /* mid: what lies between A and B, in order */
        if (p[t] != i + na + (t - i - nb))
            return false;
    run[0] = i, run[1] = na, run[2] = j - i + 1 - na - nb, run[3] = nb, run[4] = r - 1 - j;
    return true;
}

/* The input as [outer, A, mid, B, inner] with A and B the swapped dims. */
void layer_transpose_dims(const layer *l, int64_t *outer, int64_t *a, int64_t *mid, int64_t *b, int64_t *inner)
{
    if (l->kind == LAYER_PERMUTE) {
        int64_t run[5];
        permute_runs(l->p.perm, run);
        int64_t *part[5] = {outer, a, mid, b, inner};
        for (int k = 0, dim = 0; k < 5; k++) {
            *part[k] = 1;
            for (int64_t i = 0; i < run[k]; i++)
                *part[k] *= l->in.d[dim++];
        }
        return;
    }
    if (l->kind == LAYER_CHANNEL_SHUFFLE) { /* [N, g, C/g, spatial] -> [N, C/g, g, spatial] */
        *outer = l->in.d[0], *a = l->p.groups, *mid = 1, *b = l->in.d[1] / l->p.groups;
        *inner = shape_numel(&l->in) / (l->in.d[0] * l->in.d[1]);
        return;
    }
    int64_t d0 = l->p.dim0, d1 = l->p.dim1;
    *outer = *mid = *inner = 1;
    for (int64_t i = 0; i < d0; i++)
        *outer *= l->in.d[i];
    for (int64_t i = d0 + 1; i < d1; i++)
        *mid *= l->in.d[i];
    for (int64_t i = d1 + 1; i < l->in.rank; i++)
        *inner *= l->in.d[i];
    *a = l->in.d[d0], *b = l->in.d[d1];
}

/* x [outer, a, mid, b, inner] into y [outer, b, mid, a, inner]; back: y into x (the
 * backward's direction) */
static void transpose_move(const layer *l, const float *src, float *dst, bool back)
{
    int64_t outer, a, mid, b, inner;
    layer_transpose_dims(l, &outer, &a, &mid, &b, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < a; i++)
            for (int64_t m = 0; m < mid; m++)
                for (int64_t j = 0; j < b; j++) {
                    int64_t x = (((o * a + i) * mid + m) * b + j) * inner, y = (((o * b + j) * mid + m) * a + i) * inner;
                    memcpy(dst + (back ? x : y), src + (back ? y : x), (size_t)inner * sizeof *dst);
                }
}

static void transpose_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    (void)w;
    transpose_move(l, ins[0], out, false);
}

/* Each output element's gradient back to the input element it came from */
static void transpose_backward(const layer *l, const float *const *ins, const float *w, const float *out,
                               const float *dout, float *const *din, float *dw)
{
    (void)ins, (void)w, (void)out, (void)dw;
    transpose_move(l, dout, din[0], true);
}

const layer_desc layer_transpose_desc = {
    .name = "transpose", .n_inputs = 1, .params = transpose_params, .infer = transpose_infer,
    .count = no_weights_count, .reference = transpose_reference, .tolerance = 0.0, .backward = transpose_backward,
};

/* ---- channel_shuffle ------------------------------------------------------------------------ */

static const layer_param_spec shuffle_params[] = {
    {"groups", LP_INT, P_OFF(groups), true, 1, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static int shuffle_infer(layer *l, char *err, size_t len)
{
    if (l->in.rank < 3)
        return kind_fail(err, len, "channel_shuffle expects [N, C, ...], got a rank-%d input", (int)l->in.rank);
    if (l->in.d[1] % l->p.groups)
        return kind_fail(err, len, "groups %lld must divide the input's %lld channels", (long long)l->p.groups,
                         (long long)l->in.d[1]);
    l->out = l->in;
    return 0;
}

const layer_desc layer_channel_shuffle_desc = {
    .name = "channel_shuffle", .n_inputs = 1, .params = shuffle_params, .infer = shuffle_infer,
    .count = no_weights_count, .reference = transpose_reference, .tolerance = 0.0, .backward = transpose_backward,
};

/* ---- permute -------------------------------------------------------------------------------- */

/* Element by element from the definition (out[o0, o1, ...] = in[i] with i[perm[k]] =
 * o[k]), not through the runs the kernels use. */
static void permute_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    (void)w;
    int64_t r = l->in.rank, n = shape_numel(&l->out), stride[SHAPE_MAX_RANK], o[SHAPE_MAX_RANK] = {0};
    stride[r - 1] = 1;
    for (int64_t k = r - 2; k >= 0; k--)
        stride[k] = stride[k + 1] * l->in.d[k + 1];
    for (int64_t e = 0; e < n; e++) {
        int64_t src = 0;
        for (int64_t k = 0; k < r; k++)
            src += o[k] * stride[l->p.perm[1 + k]];
        out[e] = ins[0][src];
        for (int64_t k = r - 1; k >= 0 && ++o[k] == l->out.d[k]; k--)
            o[k] = 0;
    }
}

static const layer_param_spec permute_params[] = {
    {"dims", LP_DIMS, P_OFF(perm), true, INT64_MIN, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static int permute_infer(layer *l, char *err, size_t len)
{
    int64_t r = l->in.rank, *p = l->p.perm + 1, run[5];
    bool seen[SHAPE_MAX_RANK] = {false}, ok = l->p.perm[0] == r;
    for (int64_t k = 0; ok && k < r; k++) {
        p[k] += p[k] < 0 ? r : 0;
        ok = p[k] >= 0 && p[k] < r && !seen[p[k]];
        if (ok)
            seen[p[k]] = true;
    }
    if (!ok)
        return kind_fail(err, len, "dims must list each of the input's %lld dims once (negative from the end)",
                         (long long)r);
    if (p[0] != 0)
        return kind_fail(err, len, "dims must keep the batch first (dims[0] = 0), got %lld", (long long)p[0]);
    if (!permute_runs(l->p.perm, run))
        return kind_fail(err, len, "%s", "dims must swap two runs of dims (layerbench runs permute as one transpose)");
    l->out.rank = r;
    for (int64_t k = 0; k < r; k++)
        l->out.d[k] = l->in.d[p[k]];
    return 0;
}

const layer_desc layer_permute_desc = {
    .name = "permute", .n_inputs = 1, .params = permute_params, .infer = permute_infer,
    .count = no_weights_count, .reference = permute_reference, .tolerance = 0.0,
};

/* ---- layer_scale: x * gamma, gamma one learned value per index of dim ------------------------ */

static const layer_param_spec layer_scale_params[] = {
    {"dim", LP_INT, P_OFF(dim), false, INT64_MIN, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static void layer_scale_defaults(layer_params *p) { p->dim = 1; }

static int layer_scale_infer(layer *l, char *err, size_t len)
{
    int64_t r = l->in.rank, dim = l->p.dim + (l->p.dim < 0 ? r : 0);
    if (dim < 1 || dim >= r)
        return kind_fail(err, len, "dim %lld must be from 1 to %lld of a rank-%lld input (dim 0 is the batch)",
                         (long long)l->p.dim, (long long)(r - 1), (long long)r);
    l->p.dim = dim;
    l->out = l->in;
    return 0;
}

/* one multiply per element; gamma [size of dim] */
static void layer_scale_count(layer *l)
{
    l->n_weights = l->n_weight_floats = l->in.d[l->p.dim];
    l->macs = 0;
    l->flops = shape_numel(&l->out);
    kind_count_bytes(l);
}

static void layer_scale_init(const layer *l, float *w, layer_rng *rng)
{
    layer_fill_uniform(w, l->n_weight_floats, 0.5f, 1.5f, rng);
}

static void layer_scale_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    int64_t outer, size, inner;
    layer_slice_dims(l, &outer, &size, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t s = 0; s < size; s++)
            for (int64_t i = 0; i < inner; i++)
                out[(o * size + s) * inner + i] = (float)((double)ins[0][(o * size + s) * inner + i] * w[s]);
}

const layer_desc layer_layer_scale_desc = {
    .name = "layer_scale", .n_inputs = 1, .params = layer_scale_params, .defaults = layer_scale_defaults,
    .infer = layer_scale_infer, .count = layer_scale_count, .init_weights = layer_scale_init,
    .reference = layer_scale_reference, .tolerance = 1e-7,
};

/* ---- slice ---------------------------------------------------------------------------------- */

static const layer_param_spec slice_params[] = {
    {"dim", LP_INT, P_OFF(dim), false, INT64_MIN, NULL},
    {"start", LP_INT, P_OFF(slice_start), false, INT64_MIN, NULL},
    {"end", LP_INT, P_OFF(slice_end), false, INT64_MIN, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

/* end: to the end of the dim unless given */
static void slice_defaults(layer_params *p)
{
    p->dim = 1;
    p->slice_end = INT64_MAX;
}

static int slice_infer(layer *l, char *err, size_t len)
{
    int64_t r = l->in.rank, dim = l->p.dim + (l->p.dim < 0 ? r : 0);
    if (dim < 1 || dim >= r)
        return kind_fail(err, len, "dim %lld must be from 1 to %lld of a rank-%lld input (dim 0 is the batch)",
                         (long long)l->p.dim, (long long)(r - 1), (long long)r);
    /* as Python's x[:, start:end]: negative from the end, end past the size is the size */
    int64_t size = l->in.d[dim], start = l->p.slice_start, end = l->p.slice_end;
    start += start < 0 ? size : 0;
    end = end > size ? size : end < 0 ? end + size : end;
    if (start < 0 || start >= end) {
        char e[32] = "";
        if (l->p.slice_end != INT64_MAX)
            snprintf(e, sizeof e, "%lld", (long long)l->p.slice_end);
        return kind_fail(err, len, "slice [%lld:%s] of dim %lld (size %lld) is empty", (long long)l->p.slice_start, e,
                         (long long)dim, (long long)size);
    }
    l->p.dim = dim, l->p.slice_start = start, l->p.slice_end = end;
    l->out = l->in;
    l->out.d[dim] = end - l->p.slice_start;
    return 0;
}

/* The input as [outer, size, inner] around dim; the output is its [start, end) of size. */
void layer_slice_dims(const layer *l, int64_t *outer, int64_t *size, int64_t *inner)
{
    *outer = 1, *size = l->in.d[l->p.dim], *inner = 1;
    for (int64_t k = 0; k < l->p.dim; k++)
        *outer *= l->in.d[k];
    for (int64_t k = l->p.dim + 1; k < l->in.rank; k++)
        *inner *= l->in.d[k];
}

static void slice_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    (void)w;
    int64_t outer, size, inner, n = (l->p.slice_end - l->p.slice_start);
    layer_slice_dims(l, &outer, &size, &inner);
    for (int64_t o = 0; o < outer; o++)
        memcpy(out + o * n * inner, ins[0] + (o * size + l->p.slice_start) * inner, (size_t)(n * inner) * sizeof *out);
}

/* bytes: the range it reads and the copy it writes */
static void slice_count(layer *l)
{
    l->n_weights = l->n_weight_floats = l->macs = l->flops = 0;
    l->bytes = layer_count_mul(8, shape_numel(&l->out));
}

const layer_desc layer_slice_desc = {
    .name = "slice", .n_inputs = 1, .params = slice_params, .defaults = slice_defaults, .infer = slice_infer,
    .count = slice_count, .reference = slice_reference, .tolerance = 0.0,
};

/* ---- class_token -------------------------------------------------------------------------- */

static const layer_param_spec none[] = {{NULL, 0, 0, false, 0, NULL}};

static int need_tokens(const layer *l, char *err, size_t len)
{
    char s[96];
    if (l->in.rank != 3)
        return kind_fail(err, len, "%s expects tokens [N, S, D], got %s", layer_kind_name(l->kind),
                         shape_format(&l->in, s, sizeof s));
    return 0;
}

static int class_token_infer(layer *l, char *err, size_t len)
{
    if (need_tokens(l, err, len))
        return -1;
    l->out = l->in;
    l->out.d[1] += 1;
    return 0;
}

static void class_token_count(layer *l)
{
    l->n_weights = l->n_weight_floats = l->in.d[2];
    zero_flops_count(l);
}

static void token_init(const layer *l, float *w, layer_rng *rng)
{
    layer_fill_uniform(w, l->n_weight_floats, -0.5f, 0.5f, rng);
}

static void class_token_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    int64_t n = l->in.d[0], s = l->in.d[1], d = l->in.d[2];
    for (int64_t b = 0; b < n; b++) {
        memcpy(out + b * (s + 1) * d, w, (size_t)d * sizeof *w);
        memcpy(out + b * (s + 1) * d + d, in + b * s * d, (size_t)(s * d) * sizeof *in);
    }
}

/* The tokens' gradients are d out's after the first; the class token's, the first's summed
 * over the batch */
static void class_token_backward(const layer *l, const float *const *ins, const float *w, const float *out,
                                 const float *dout, float *const *din, float *dw)
{
    (void)ins, (void)w, (void)out;
    int64_t n = l->in.d[0], s = l->in.d[1], d = l->in.d[2];
    for (int64_t i = 0; i < d; i++) {
        double sum = 0;
        for (int64_t b = 0; b < n; b++)
            sum += dout[b * (s + 1) * d + i];
        dw[i] = (float)sum;
    }
    for (int64_t b = 0; b < n; b++)
        memcpy(din[0] + b * s * d, dout + b * (s + 1) * d + d, (size_t)(s * d) * sizeof *dout);
}

const layer_desc layer_class_token_desc = {
    .name = "class_token", .n_inputs = 1, .params = none, .infer = class_token_infer, .backward = class_token_backward,
    .count = class_token_count, .init_weights = token_init, .reference = class_token_reference, .tolerance = 0.0,
};

/* ---- pos_embedding ------------------------------------------------------------------------- */

static const layer_param_spec pos_embedding_params[] = {
    {"num_positions", LP_INT, P_OFF(num_positions), false, 0, NULL},
    {"kv_len", LP_INT, P_OFF(kv_len), false, 0, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static int pos_embedding_infer(layer *l, char *err, size_t len)
{
    if (need_tokens(l, err, len))
        return -1;
    layer_params *p = &l->p;
    int64_t s = l->in.d[1];
    if (p->num_positions == 0 && p->kv_len == 0)
        p->num_positions = s;
    if (p->num_positions < s || p->kv_len > p->num_positions - s)
        return kind_fail(err, len, "tokens %lld to %lld read rows past the table's num_positions %lld",
                         (long long)p->kv_len, (long long)(p->kv_len + s - 1), (long long)p->num_positions);
    l->out = l->in;
    return 0;
}

static void pos_embedding_count(layer *l)
{
    l->n_weights = l->n_weight_floats = layer_count_mul(l->p.num_positions, l->in.d[2]);
    l->macs = 0;
    l->flops = shape_numel(&l->out); /* one add per element */
    /* the input, the output, and the table's rows the tokens read (all of it, unless a
     * table of positions is longer than the tokens) */
    int64_t rows = layer_count_mul(l->in.d[1], l->in.d[2]);
    l->bytes = layer_count_mul(4, layer_count_add(layer_count_mul(2, shape_numel(&l->out)), rows));
}

static void pos_embedding_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    int64_t n = l->in.d[0], sd = l->in.d[1] * l->in.d[2];
    w += l->p.kv_len * l->in.d[2]; /* the rows of positions kv_len to kv_len + S - 1 */
    for (int64_t b = 0; b < n; b++)
        for (int64_t i = 0; i < sd; i++)
            out[b * sd + i] = in[b * sd + i] + w[i];
}

/* The input's gradient is d out; the rows the tokens read get d out summed over the
 * batch, the others none */
static void pos_embedding_backward(const layer *l, const float *const *ins, const float *w, const float *out,
                                   const float *dout, float *const *din, float *dw)
{
    (void)ins, (void)w, (void)out;
    int64_t n = l->in.d[0], sd = l->in.d[1] * l->in.d[2], at = l->p.kv_len * l->in.d[2];
    memcpy(din[0], dout, (size_t)(n * sd) * sizeof *dout);
    memset(dw, 0, (size_t)l->n_weight_floats * sizeof *dw);
    for (int64_t i = 0; i < sd; i++) {
        double sum = 0;
        for (int64_t b = 0; b < n; b++)
            sum += dout[b * sd + i];
        dw[at + i] = (float)sum;
    }
}

const layer_desc layer_pos_embedding_desc = {
    .name = "pos_embedding", .n_inputs = 1, .params = pos_embedding_params, .infer = pos_embedding_infer,
    .backward = pos_embedding_backward,
    .count = pos_embedding_count, .init_weights = token_init, .reference = pos_embedding_reference,
    .tolerance = 0.0,
};

/* ---- select ------------------------------------------------------------------------------- */

static const layer_param_spec select_params[] = {
    {"dim", LP_INT, P_OFF(dim), false, INT64_MIN, NULL},
    {"index", LP_INT, P_OFF(index), false, INT64_MIN, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static void select_defaults(layer_params *p) { p->dim = 1; }

static int select_infer(layer *l, char *err, size_t len)
{
    int64_t r = l->in.rank, dim = l->p.dim + (l->p.dim < 0 ? r : 0);
    if (r < 3 || dim < 1 || dim >= r)
        return kind_fail(err, len, "select needs an input of rank 3 or 4 and dim from 1 to %lld (dim 0 is the "
                                   "batch), got dim %lld of a rank-%lld input",
                         (long long)(r - 1), (long long)l->p.dim, (long long)r);
    int64_t size = l->in.d[dim], i = l->p.index + (l->p.index < 0 ? size : 0);
    if (i < 0 || i >= size)
        return kind_fail(err, len, "index %lld is out of range for dim %lld of size %lld", (long long)l->p.index,
                         (long long)dim, (long long)size);
    l->p.dim = dim, l->p.index = i;
    shape_t o = {0, {0}};
    for (int64_t k = 0; k < r; k++)
        if (k != dim)
            o.d[o.rank++] = l->in.d[k];
    l->out = o;
    return 0;
}

void layer_select_dims(const layer *l, int64_t *outer, int64_t *size, int64_t *inner)
{
    *outer = 1, *size = l->in.d[l->p.dim], *inner = 1;
    for (int64_t k = 0; k < l->p.dim; k++)
        *outer *= l->in.d[k];
    for (int64_t k = l->p.dim + 1; k < l->in.rank; k++)
        *inner *= l->in.d[k];
}

static void select_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    const float *in = ins[0];
    (void)w;
    int64_t outer, size, inner;
    layer_select_dims(l, &outer, &size, &inner);
    for (int64_t o = 0; o < outer; o++)
        memcpy(out + o * inner, in + (o * size + l->p.index) * inner, (size_t)inner * sizeof *in);
}

/* bytes: what it reads (one slice) and writes */
static void select_count(layer *l)
{
    l->n_weights = l->n_weight_floats = l->macs = l->flops = 0;
    l->bytes = layer_count_mul(8, shape_numel(&l->out));
}

/* The selected slice gets d out, the rest of the input none */
static void select_backward(const layer *l, const float *const *ins, const float *w, const float *out,
                            const float *dout, float *const *din, float *dw)
{
    (void)ins, (void)w, (void)out, (void)dw;
    int64_t outer, size, inner;
    layer_select_dims(l, &outer, &size, &inner);
    memset(din[0], 0, (size_t)shape_numel(&l->in) * sizeof *din[0]);
    for (int64_t o = 0; o < outer; o++)
        memcpy(din[0] + (o * size + l->p.index) * inner, dout + o * inner, (size_t)inner * sizeof *dout);
}

const layer_desc layer_select_desc = {
    .name = "select", .n_inputs = 1, .params = select_params, .defaults = select_defaults, .infer = select_infer,
    .count = select_count, .reference = select_reference, .tolerance = 0.0, .backward = select_backward,
};
