/* The kinds of the Swin Transformer (torchvision's swin_transformer.py), on channels-last
 * [N, H, W, C] tensors:
 *
 * roll: torch.roll(x, shifts, dims), every dim but the batch: out[j] = in[(j - shift) mod
 * size] along each dim given (a copy).
 *
 * patch_merge: Swin's _patch_merging_pad: [N, H, W, C] padded with zeros to even H and
 * W, then the 2 x 2 neighbours side by side in channels, x[0::2, 0::2], x[1::2, 0::2],
 * x[0::2, 1::2], x[1::2, 1::2]: [N, ceil(H/2), ceil(W/2), 4C] (a copy; PatchMerging's
 * norm and reduction are layers of their own).
 *
 * window_attention: ShiftedWindowAttention (with cosine: true, ShiftedWindowAttentionV2),
 * torchvision's shifted_window_attention as one layer, as nn.MultiheadAttention is one:
 * the map padded with zeros to whole windows, rolled by -shift, cut into windows of
 * window_size; per window the qkv linear, per head softmax(scale q k^T + bias + mask) v,
 * the proj linear; then the windows put back, rolled by +shift and the padding dropped.
 * The bias of positions i, j is the learned table's row for their offset (relative
 * position bias); with cosine (V2) the table is an MLP of log-spaced offsets, 16
 * sigmoid(MLP), the scores are cosines of q and k times exp(min(logit_scale, log 100)),
 * and the k part of the qkv bias is not applied. The mask (shifted windows only) adds
 * -100 between tokens from different regions of the rolled map, as torch does.
 *
 * Weights, in this order: qkv.weight [3C, C], qkv.bias [3C] (bias), proj.weight [C, C],
 * proj.bias [C] (proj_bias), then relative_position_bias_table [(2 w0 - 1)(2 w1 - 1),
 * heads], or with cosine logit_scale [heads], cpb_mlp.0.weight [512, 2], cpb_mlp.0.bias
 * [512] and cpb_mlp.2.weight [heads, 512]. With partitioned: true the input is windows
 * already, [N, G, w0 w1, C], as MaxViT's RelativePositionalMultiHeadAttention takes them
 * (its scale is 1 / sqrt(C): scale gives it).
 *
 * window_partition and window_merge: MaxViT's WindowPartition, [N, C, H, W] to windows
 * [N, (H / w0)(W / w1), w0 w1, C], and WindowDepartition back, with partitions [H / w0,
 * W / w1] (copies). FLOPs: docs/flops.md. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kind_util.h"
#include "util.h"

/* ---- roll --------------------------------------------------------------------------------- */

static const layer_param_spec roll_params[] = {
    {"shifts", LP_DIMS, P_OFF(roll_shifts), true, INT64_MIN, NULL},
    {"dims", LP_DIMS, P_OFF(roll_dims), true, INT64_MIN, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

/* Dims made positive and shifts made [0, size): both idempotent, as every batch size
 * infers the same parameters again. */
static int roll_infer(layer *l, char *err, size_t len)
{
    int64_t *s = l->p.roll_shifts, *d = l->p.roll_dims, r = l->in.rank;
    if (s[0] != d[0])
        return kind_fail(err, len, "shifts has %lld values and dims %lld: give one shift per dim (torch.roll "
                                   "without dims rolls the flattened tensor, which layerbench does not)",
                         (long long)s[0], (long long)d[0]);
    bool seen[SHAPE_MAX_RANK] = {false};
    for (int64_t k = 0; k < d[0]; k++) {
        int64_t dim = d[1 + k] + (d[1 + k] < 0 ? r : 0);
        if (dim < 1 || dim >= r)
            return kind_fail(err, len, "dims: %lld is not a dim of a rank-%lld input other than the batch (1 to "
                                       "%lld, or negative from the end)",
                             (long long)d[1 + k], (long long)r, (long long)(r - 1));
        if (seen[dim])
            return kind_fail(err, len, "dims: dim %lld is given twice", (long long)dim);
        seen[dim] = true;
        int64_t n = l->in.d[dim];
        d[1 + k] = dim;
        s[1 + k] = ((s[1 + k] % n) + n) % n;
    }
    l->out = l->in;
    return 0;
}

static void move_count(layer *l)
{
    l->n_weights = l->n_weight_floats = l->macs = l->flops = 0;
    kind_count_bytes(l);
}

/* The shift along dim (0 where it does not roll). */
static int64_t roll_shift(const layer *l, int64_t dim)
{
    for (int64_t k = 0; k < l->p.roll_dims[0]; k++)
        if (l->p.roll_dims[1 + k] == dim)
            return l->p.roll_shifts[1 + k];
    return 0;
}

static void roll_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    (void)w;
    const shape_t *s = &l->in;
    int64_t n = shape_numel(s);
    for (int64_t o = 0; o < n; o++) {
        int64_t rest = o, src = 0, stride = 1;
        for (int64_t k = s->rank - 1; k >= 0; k--) {
            int64_t c = rest % s->d[k];
            rest /= s->d[k];
            src += ((c - roll_shift(l, k) + s->d[k]) % s->d[k]) * stride;
            stride *= s->d[k];
        }
        out[o] = ins[0][src];
    }
}

const layer_desc layer_roll_desc = {
    .name = "roll", .n_inputs = 1, .params = roll_params, .infer = roll_infer, .count = move_count,
    .reference = roll_reference, .tolerance = 0.0,
};

/* ---- patch_merge -------------------------------------------------------------------------- */

static const layer_param_spec none[] = {{NULL, 0, 0, false, 0, NULL}};

static int need_nhwc(const layer *l, char *err, size_t len)
{
    char s[96];
    if (l->in.rank != 4)
        return kind_fail(err, len, "%s expects a channels-last map [N, H, W, C], got %s", layer_kind_name(l->kind),
                         shape_format(&l->in, s, sizeof s));
    return 0;
}

static int patch_merge_infer(layer *l, char *err, size_t len)
{
    if (need_nhwc(l, err, len))
        return -1;
    l->out = l->in;
    l->out.d[1] = (l->in.d[1] + 1) / 2, l->out.d[2] = (l->in.d[2] + 1) / 2, l->out.d[3] = 4 * l->in.d[3];
    return 0;
}

static void patch_merge_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    (void)w;
    int64_t n = l->in.d[0], h = l->in.d[1], wd = l->in.d[2], c = l->in.d[3], ho = l->out.d[1], wo = l->out.d[2];
    static const int dy[4] = {0, 1, 0, 1}, dx[4] = {0, 0, 1, 1};
    for (int64_t b = 0; b < n; b++)
        for (int64_t i = 0; i < ho; i++)
            for (int64_t j = 0; j < wo; j++)
                for (int q = 0; q < 4; q++) {
                    int64_t y = 2 * i + dy[q], x = 2 * j + dx[q];
                    float *dst = out + ((b * ho + i) * wo + j) * 4 * c + q * c;
                    for (int64_t k = 0; k < c; k++)
                        dst[k] = y < h && x < wd ? ins[0][((b * h + y) * wd + x) * c + k] : 0.0f;
                }
}

const layer_desc layer_patch_merge_desc = {
    .name = "patch_merge", .n_inputs = 1, .params = none, .infer = patch_merge_infer, .count = move_count,
    .reference = patch_merge_reference, .tolerance = 0.0,
};

/* ---- window_attention --------------------------------------------------------------------- */

static const layer_param_spec window_params[] = {
    {"num_heads", LP_INT, P_OFF(num_heads), true, 1, NULL},
    {"window_size", LP_PAIR, P_OFF(window_size), true, 1, NULL},
    {"shift_size", LP_PAIR, P_OFF(shift_size), false, 0, NULL},
    {"qkv_bias", LP_BOOL, P_OFF(bias), false, 0, NULL},
    {"proj_bias", LP_BOOL, P_OFF(proj_bias), false, 0, NULL},
    {"cosine", LP_BOOL, P_OFF(cosine), false, 0, NULL},
    {"partitioned", LP_BOOL, P_OFF(partitioned), false, 0, NULL},
    {"scale", LP_FLOAT, P_OFF(attn_scale), false, 0, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static void window_defaults(layer_params *p)
{
    p->bias = true;
    p->proj_bias = true;
}

static int window_infer(layer *l, char *err, size_t len)
{
    if (need_nhwc(l, err, len))
        return -1;
    int64_t c = l->in.d[3];
    if (c % l->p.num_heads)
        return kind_fail(err, len, "num_heads %lld must divide the %lld channels (each head takes C / num_heads)",
                         (long long)l->p.num_heads, (long long)c);
    if (l->p.cosine && (l->p.window_size[0] < 2 || l->p.window_size[1] < 2))
        return kind_fail(err, len, "cosine: true needs a window of at least 2 x 2 (Swin V2's coordinates divide by "
                                   "window_size - 1), got %lld x %lld",
                         (long long)l->p.window_size[0], (long long)l->p.window_size[1]);
    if (l->p.partitioned && (l->in.d[2] != l->p.window_size[0] * l->p.window_size[1] || l->p.shift_size[0] ||
                             l->p.shift_size[1]))
        return kind_fail(err, len, "partitioned: true takes windows [N, G, %lld, C] of the %lld x %lld window, "
                                   "unshifted; got %lld tokens per window%s",
                         (long long)(l->p.window_size[0] * l->p.window_size[1]), (long long)l->p.window_size[0],
                         (long long)l->p.window_size[1], (long long)l->in.d[2],
                         l->p.shift_size[0] || l->p.shift_size[1] ? " and a shift" : "");
    if (l->p.cosine && l->p.attn_scale > 0)
        return kind_fail(err, len, "scale does not apply with cosine: true (the logit scale is learned)");
    l->out = l->in;
    return 0;
}

double layer_window_scale(const layer *l)
{
    return l->p.attn_scale > 0 ? l->p.attn_scale : 1.0 / sqrt((double)(l->in.d[3] / l->p.num_heads));
}

static int64_t table_rows(const layer *l)
{
    return (2 * l->p.window_size[0] - 1) * (2 * l->p.window_size[1] - 1);
}

layer_window_w layer_window_weights(const layer *l, const float *w)
{
    int64_t c = l->in.d[3], h = l->p.num_heads;
    layer_window_w r = {0};
    r.qkv_w = w, w += 3 * c * c;
    if (l->p.bias)
        r.qkv_b = w, w += 3 * c;
    r.proj_w = w, w += c * c;
    if (l->p.proj_bias)
        r.proj_b = w, w += c;
    r.table = w;
    if (l->p.cosine) {
        r.logit_scale = w, w += h;
        r.cpb_w1 = w, w += 2 * LAYER_WINDOW_CPB_HIDDEN;
        r.cpb_b1 = w, w += LAYER_WINDOW_CPB_HIDDEN;
        r.cpb_w2 = w;
    }
    return r;
}

void layer_window_geometry(const layer *l, int64_t *ph, int64_t *pw, int64_t *sh, int64_t *sw)
{
    if (l->p.partitioned) { /* [N, G, P, C]: G P tokens in window order, nothing to pad or shift */
        *ph = l->in.d[1], *pw = l->in.d[2], *sh = *sw = 0;
        return;
    }
    int64_t w0 = l->p.window_size[0], w1 = l->p.window_size[1];
    *ph = (l->in.d[1] + w0 - 1) / w0 * w0, *pw = (l->in.d[2] + w1 - 1) / w1 * w1;
    *sh = w0 >= *ph ? 0 : l->p.shift_size[0], *sw = w1 >= *pw ? 0 : l->p.shift_size[1];
}

/* Token t's place (r, c) in the padded, rolled map. */
static void window_place(const layer *l, int64_t t, int64_t *r, int64_t *c)
{
    int64_t ph, pw, sh, sw, w0 = l->p.window_size[0], w1 = l->p.window_size[1];
    layer_window_geometry(l, &ph, &pw, &sh, &sw);
    int64_t win = t / (w0 * w1), k = t % (w0 * w1), across = pw / w1;
    *r = (win / across) * w0 + k / w1, *c = (win % across) * w1 + k % w1;
}

int64_t layer_window_pixel(const layer *l, int64_t t)
{
    if (l->p.partitioned)
        return t;
    int64_t ph, pw, sh, sw, r, c;
    layer_window_geometry(l, &ph, &pw, &sh, &sw);
    window_place(l, t, &r, &c);
    int64_t y = (r + sh) % ph, x = (c + sw) % pw;
    return y < l->in.d[1] && x < l->in.d[2] ? y * l->in.d[2] + x : -1;
}

/* Python's index i of a dim of n (negative from the end), clamped as slices clamp. */
static int64_t py_index(int64_t i, int64_t n)
{
    return i < 0 ? (i + n < 0 ? 0 : i + n) : (i > n ? n : i);
}

/* The last of torch's slices [0, -w), [-w, -s), [-s, None) along one axis that holds pos
 * (a later slice's label overwrites an earlier one's; with s = 0 the last is everything). */
static int64_t region(int64_t pos, int64_t n, int64_t w, int64_t s)
{
    int64_t lo[3] = {0, py_index(-w, n), py_index(-s, n)}, hi[3] = {py_index(-w, n), py_index(-s, n), n};
    int64_t r = 0;
    for (int k = 0; k < 3; k++)
        if (pos >= lo[k] && pos < hi[k])
            r = k;
    return r;
}

int64_t layer_window_label(const layer *l, int64_t t)
{
    int64_t ph, pw, sh, sw, r, c;
    layer_window_geometry(l, &ph, &pw, &sh, &sw);
    window_place(l, t, &r, &c);
    return region(r, ph, l->p.window_size[0], sh) * 3 + region(c, pw, l->p.window_size[1], sw);
}

int64_t layer_window_rel_index(const layer *l, int64_t i, int64_t j)
{
    int64_t w0 = l->p.window_size[0], w1 = l->p.window_size[1];
    return (i / w1 - j / w1 + w0 - 1) * (2 * w1 - 1) + (i % w1 - j % w1 + w1 - 1);
}

void layer_window_cpb_coords(const layer *l, int64_t u, float xy[2])
{
    int64_t w[2] = {l->p.window_size[0], l->p.window_size[1]};
    int64_t off[2] = {u / (2 * w[1] - 1) - (w[0] - 1), u % (2 * w[1] - 1) - (w[1] - 1)};
    for (int k = 0; k < 2; k++) {
        float v = (float)off[k] / (float)(w[k] - 1) * 8.0f;
        xy[k] = (v > 0 ? 1.0f : v < 0 ? -1.0f : 0.0f) * log2f(fabsf(v) + 1.0f) / 3.0f;
    }
}

static int64_t window_tokens(const layer *l)
{
    int64_t ph, pw, sh, sw;
    layer_window_geometry(l, &ph, &pw, &sh, &sw);
    return layer_count_mul(l->in.d[0], layer_count_mul(ph, pw));
}

static void window_count(layer *l)
{
    int64_t c = l->in.d[3], h = l->p.num_heads, nw = l->p.window_size[0] * l->p.window_size[1];
    int64_t ph, pw, sh, sw, t = window_tokens(l), rows = table_rows(l), hid = LAYER_WINDOW_CPB_HIDDEN;
    layer_window_geometry(l, &ph, &pw, &sh, &sw);
    int64_t w = 4 * c * c + (l->p.bias ? 3 * c : 0) + (l->p.proj_bias ? c : 0);
    w += l->p.cosine ? h + 3 * hid + h * hid : rows * h;
    l->n_weights = l->n_weight_floats = w;
    int64_t tc = layer_count_mul(t, c), scores = layer_count_mul(layer_count_mul(t, nw), h);
    /* qkv and proj 4 C^2 per token, q k^T and p v C Nw per token each */
    int64_t macs = layer_count_add(layer_count_mul(tc, 4 * c), layer_count_mul(2, layer_count_mul(tc, nw)));
    if (l->p.cosine)
        macs = layer_count_add(macs, rows * hid * (2 + h));
    l->macs = macs;
    /* per score: the scale (logit scale), the bias, softmax's 5, and the mask's add when
     * shifted; the linears' bias adds; cosine: q and k normalized (3 per element each),
     * the MLP's bias and ReLU, and 16 sigmoid per bias (2) */
    int64_t flops = layer_count_add(layer_count_mul(2, macs), layer_count_mul(sh || sw ? 8 : 7, scores));
    flops = layer_count_add(flops, layer_count_mul(tc, (l->p.bias ? 3 : 0) + (l->p.proj_bias ? 1 : 0)));
    if (l->p.cosine)
        flops = layer_count_add(flops, layer_count_add(layer_count_mul(6, tc), 2 * rows * hid + 2 * h * nw * nw));
    l->flops = flops;
    kind_count_bytes(l);
}

static void window_init(const layer *l, float *w, layer_rng *rng)
{
    int64_t c = l->in.d[3], h = l->p.num_heads;
    float a = (float)(1.0 / sqrt((double)c)), b = (float)(1.0 / sqrt((double)LAYER_WINDOW_CPB_HIDDEN));
    layer_window_w r = layer_window_weights(l, w);
    layer_fill_uniform((float *)r.qkv_w, r.table - r.qkv_w, -a, a, rng);
    if (!l->p.cosine) { /* larger than torch's std 0.02, so that a wrong index shows */
        layer_fill_uniform((float *)r.table, table_rows(l) * h, -1.0f, 1.0f, rng);
        return;
    }
    /* around torch's log(10), past the clamp at log(100) for some heads */
    layer_fill_uniform((float *)r.logit_scale, h, 1.5f, 5.0f, rng);
    layer_fill_uniform((float *)r.cpb_w1, 3 * LAYER_WINDOW_CPB_HIDDEN, -0.7f, 0.7f, rng);
    layer_fill_uniform((float *)r.cpb_w2, h * LAYER_WINDOW_CPB_HIDDEN, -b, b, rng);
}

/* The bias of every head and in-window pair [heads, Nw, Nw], in double. */
static double *reference_bias(const layer *l, const layer_window_w *r)
{
    int64_t h = l->p.num_heads, nw = l->p.window_size[0] * l->p.window_size[1], rows = table_rows(l);
    int64_t hid = LAYER_WINDOW_CPB_HIDDEN;
    double *table = xmalloc((size_t)(rows * h) * sizeof *table), *bias = xmalloc((size_t)(h * nw * nw) * sizeof *bias);
    for (int64_t u = 0; u < rows; u++) {
        if (!l->p.cosine) {
            for (int64_t k = 0; k < h; k++)
                table[u * h + k] = r->table[u * h + k];
            continue;
        }
        float xy[2];
        layer_window_cpb_coords(l, u, xy);
        for (int64_t k = 0; k < h; k++)
            table[u * h + k] = 0;
        for (int64_t j = 0; j < hid; j++) {
            double z = r->cpb_b1[j] + (double)r->cpb_w1[2 * j] * xy[0] + (double)r->cpb_w1[2 * j + 1] * xy[1];
            if (z > 0)
                for (int64_t k = 0; k < h; k++)
                    table[u * h + k] += z * r->cpb_w2[k * hid + j];
        }
    }
    for (int64_t k = 0; k < h; k++)
        for (int64_t i = 0; i < nw; i++)
            for (int64_t j = 0; j < nw; j++) {
                double v = table[layer_window_rel_index(l, i, j) * h + k];
                bias[(k * nw + i) * nw + j] = l->p.cosine ? 16.0 / (1.0 + exp(-v)) : v;
            }
    free(table);
    return bias;
}

/* One sample at a time: its tokens gathered in window order, the qkv projection, every
 * window's heads, the proj projection, scattered back; in double. */
static void window_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    layer_window_w r = layer_window_weights(l, w);
    int64_t n = l->in.d[0], hw = l->in.d[1] * l->in.d[2], c = l->in.d[3], h = l->p.num_heads, dh = c / h;
    int64_t nw = l->p.window_size[0] * l->p.window_size[1], ph, pw, sh, sw;
    layer_window_geometry(l, &ph, &pw, &sh, &sw);
    int64_t p = ph * pw;
    bool masked = sh || sw;
    double *bias = reference_bias(l, &r), *qkv = xmalloc((size_t)(p * 3 * c) * sizeof *qkv);
    double *o = xmalloc((size_t)(p * c) * sizeof *o), *s = xmalloc((size_t)nw * sizeof *s);
    for (int64_t b = 0; b < n; b++) {
        for (int64_t t = 0; t < p; t++) {
            int64_t px = layer_window_pixel(l, t);
            const float *x = px < 0 ? NULL : ins[0] + (b * hw + px) * c;
            for (int64_t j = 0; j < 3 * c; j++) {
                bool kbias = j >= c && j < 2 * c;
                double acc = r.qkv_b && !(l->p.cosine && kbias) ? r.qkv_b[j] : 0.0;
                for (int64_t i = 0; x && i < c; i++)
                    acc += (double)x[i] * r.qkv_w[j * c + i];
                qkv[t * 3 * c + j] = acc;
            }
        }
        for (int64_t win = 0; win < p / nw; win++)
            for (int64_t k = 0; k < h; k++) {
                double ls = l->p.cosine ? exp(fmin(r.logit_scale[k], log(100.0))) : 0;
                for (int64_t i = 0; i < nw; i++) {
                    int64_t ti = win * nw + i;
                    const double *q = qkv + ti * 3 * c + k * dh;
                    double m = -INFINITY, sum = 0, qn = 0;
                    for (int64_t d = 0; d < dh; d++)
                        qn += q[d] * q[d];
                    for (int64_t j = 0; j < nw; j++) {
                        int64_t tj = win * nw + j;
                        const double *kk = qkv + tj * 3 * c + c + k * dh;
                        double dot = 0, kn = 0;
                        for (int64_t d = 0; d < dh; d++)
                            dot += q[d] * kk[d], kn += kk[d] * kk[d];
                        /* F.normalize: x / max(|x|, 1e-12) */
                        s[j] = l->p.cosine ? dot / fmax(sqrt(qn), 1e-12) / fmax(sqrt(kn), 1e-12) * ls
                                           : dot * layer_window_scale(l);
                        s[j] += bias[(k * nw + i) * nw + j];
                        if (masked && layer_window_label(l, ti) != layer_window_label(l, tj))
                            s[j] -= 100.0;
                        m = s[j] > m ? s[j] : m;
                    }
                    for (int64_t j = 0; j < nw; j++)
                        sum += s[j] = exp(s[j] - m);
                    for (int64_t d = 0; d < dh; d++) {
                        double acc = 0;
                        for (int64_t j = 0; j < nw; j++)
                            acc += s[j] * qkv[(win * nw + j) * 3 * c + 2 * c + k * dh + d];
                        o[ti * c + k * dh + d] = acc / sum;
                    }
                }
            }
        for (int64_t t = 0; t < p; t++) {
            int64_t px = layer_window_pixel(l, t);
            if (px < 0)
                continue;
            for (int64_t j = 0; j < c; j++) {
                double acc = r.proj_b ? r.proj_b[j] : 0.0;
                for (int64_t i = 0; i < c; i++)
                    acc += o[t * c + i] * r.proj_w[j * c + i];
                out[(b * hw + px) * c + j] = (float)acc;
            }
        }
    }
    free(bias), free(qkv), free(o), free(s);
}

const layer_desc layer_window_attention_desc = {
    .name = "window_attention", .n_inputs = 1, .params = window_params, .defaults = window_defaults,
    .infer = window_infer, .count = window_count, .init_weights = window_init, .reference = window_reference,
    .tolerance = 1e-5,
};

/* ---- window_partition and window_merge ---------------------------------------------------- */

static const layer_param_spec partition_params[] = {
    {"window_size", LP_PAIR, P_OFF(window_size), true, 1, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static const layer_param_spec merge_params[] = {
    {"window_size", LP_PAIR, P_OFF(window_size), true, 1, NULL},
    {"partitions", LP_PAIR, P_OFF(partitions), true, 1, NULL},
    {NULL, 0, 0, false, 0, NULL},
};

static int partition_infer(layer *l, char *err, size_t len)
{
    char s[96];
    int64_t w0 = l->p.window_size[0], w1 = l->p.window_size[1];
    if (l->in.rank != 4 || l->in.d[2] % w0 || l->in.d[3] % w1)
        return kind_fail(err, len, "window_partition expects [N, C, H, W] with H a multiple of %lld and W of %lld, "
                                   "got %s",
                         (long long)w0, (long long)w1, shape_format(&l->in, s, sizeof s));
    l->out = (shape_t){4, {l->in.d[0], (l->in.d[2] / w0) * (l->in.d[3] / w1), w0 * w1, l->in.d[1]}};
    return 0;
}

static int merge_infer(layer *l, char *err, size_t len)
{
    char s[96];
    int64_t w0 = l->p.window_size[0], w1 = l->p.window_size[1], hp = l->p.partitions[0], wp = l->p.partitions[1];
    if (l->in.rank != 4 || l->in.d[1] != hp * wp || l->in.d[2] != w0 * w1)
        return kind_fail(err, len, "window_merge of %lld x %lld windows of %lld x %lld expects [N, %lld, %lld, C], "
                                   "got %s",
                         (long long)hp, (long long)wp, (long long)w0, (long long)w1, (long long)(hp * wp),
                         (long long)(w0 * w1), shape_format(&l->in, s, sizeof s));
    l->out = (shape_t){4, {l->in.d[0], l->in.d[3], hp * w0, wp * w1}};
    return 0;
}

/* Pixel (c, y, x) of sample b in [N, C, H, W], and the same element in [N, G, P, C]. */
static void window_pair(const layer *l, const shape_t *map, int64_t b, int64_t c, int64_t y, int64_t x,
                        int64_t *in_map, int64_t *in_windows)
{
    int64_t w0 = l->p.window_size[0], w1 = l->p.window_size[1], across = map->d[3] / w1, ch = map->d[1];
    int64_t g = (y / w0) * across + x / w1, k = (y % w0) * w1 + x % w1;
    *in_map = ((b * ch + c) * map->d[2] + y) * map->d[3] + x;
    *in_windows = ((b * (map->d[2] / w0) * across + g) * w0 * w1 + k) * ch + c;
}

int64_t layer_window_source(const layer *l, int64_t o)
{
    bool merge = l->kind == LAYER_WINDOW_MERGE;
    const shape_t *map = merge ? &l->out : &l->in;
    int64_t m, w, b, c, y, x;
    if (merge) { /* o is in the map */
        x = o % map->d[3], y = (o / map->d[3]) % map->d[2], c = (o / (map->d[3] * map->d[2])) % map->d[1];
        b = o / (map->d[3] * map->d[2] * map->d[1]);
        window_pair(l, map, b, c, y, x, &m, &w);
        return w;
    }
    /* o is in the windows [N, G, P, C] */
    int64_t w0 = l->p.window_size[0], w1 = l->p.window_size[1], ch = map->d[1], across = map->d[3] / w1;
    int64_t p = w0 * w1, g_all = l->out.d[1];
    c = o % ch;
    int64_t k = (o / ch) % p, g = (o / (ch * p)) % g_all;
    b = o / (ch * p * g_all);
    y = (g / across) * w0 + k / w1, x = (g % across) * w1 + k % w1;
    window_pair(l, map, b, c, y, x, &m, &w);
    return m;
}

static void window_move_reference(const layer *l, const float *const *ins, const float *w, float *out)
{
    (void)w;
    int64_t n = shape_numel(&l->out);
    for (int64_t o = 0; o < n; o++)
        out[o] = ins[0][layer_window_source(l, o)];
}

const layer_desc layer_window_partition_desc = {
    .name = "window_partition", .n_inputs = 1, .params = partition_params, .infer = partition_infer,
    .count = move_count, .reference = window_move_reference, .tolerance = 0.0,
};

const layer_desc layer_window_merge_desc = {
    .name = "window_merge", .n_inputs = 1, .params = merge_params, .infer = merge_infer, .count = move_count,
    .reference = window_move_reference, .tolerance = 0.0,
};
