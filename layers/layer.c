/* The table of layer kinds and the helpers every kind shares. */
#include "layer.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

extern const layer_desc layer_mean_desc, layer_groupnorm_desc, layer_channel_shuffle_desc, layer_slice_desc,
    layer_permute_desc, layer_layer_scale_desc, layer_roll_desc, layer_patch_merge_desc, layer_window_attention_desc,
    layer_window_partition_desc, layer_window_merge_desc, layer_reshape_desc, layer_model_input_desc,
    layer_scale_shift_desc, layer_matmul_desc;
extern const layer_desc layer_conv2d_desc, layer_batchnorm2d_desc, layer_relu_desc,
    layer_relu6_desc, layer_sigmoid_desc, layer_maxpool2d_desc, layer_avgpool2d_desc,
    layer_adaptive_avgpool2d_desc, layer_flatten_desc, layer_linear_desc,
    layer_dropout_desc, layer_softmax_desc, layer_add_desc, layer_mul_desc, layer_concat_desc, layer_silu_desc,
    layer_hardswish_desc, layer_hardsigmoid_desc, layer_tanh_desc, layer_stochastic_depth_desc,
    layer_conv_transpose2d_desc, layer_upsample_desc, layer_layernorm_desc, layer_gelu_desc,
    layer_multihead_attention_desc, layer_transpose_desc, layer_class_token_desc, layer_pos_embedding_desc,
    layer_select_desc, layer_embedding_desc, layer_rmsnorm_desc, layer_rope_desc, layer_attention_desc,
    layer_moe_desc, layer_mla_desc;

static const layer_desc *const kinds[LAYER_KIND_COUNT] = {
    [LAYER_CONV2D] = &layer_conv2d_desc,
    [LAYER_BATCHNORM2D] = &layer_batchnorm2d_desc,
    [LAYER_RELU] = &layer_relu_desc,
    [LAYER_RELU6] = &layer_relu6_desc,
    [LAYER_SIGMOID] = &layer_sigmoid_desc,
    [LAYER_MAXPOOL2D] = &layer_maxpool2d_desc,
    [LAYER_AVGPOOL2D] = &layer_avgpool2d_desc,
    [LAYER_ADAPTIVE_AVGPOOL2D] = &layer_adaptive_avgpool2d_desc,
    [LAYER_FLATTEN] = &layer_flatten_desc,
    [LAYER_LINEAR] = &layer_linear_desc,
    [LAYER_DROPOUT] = &layer_dropout_desc,
    [LAYER_SOFTMAX] = &layer_softmax_desc,
    [LAYER_ADD] = &layer_add_desc,
    [LAYER_MUL] = &layer_mul_desc,
    [LAYER_CONCAT] = &layer_concat_desc,
    [LAYER_SILU] = &layer_silu_desc,
    [LAYER_HARDSWISH] = &layer_hardswish_desc,
    [LAYER_HARDSIGMOID] = &layer_hardsigmoid_desc,
    [LAYER_TANH] = &layer_tanh_desc,
    [LAYER_STOCHASTIC_DEPTH] = &layer_stochastic_depth_desc,
    [LAYER_CONV_TRANSPOSE2D] = &layer_conv_transpose2d_desc,
    [LAYER_UPSAMPLE] = &layer_upsample_desc,
    [LAYER_LAYERNORM] = &layer_layernorm_desc,
    [LAYER_GELU] = &layer_gelu_desc,
    [LAYER_MULTIHEAD_ATTENTION] = &layer_multihead_attention_desc,
    [LAYER_TRANSPOSE] = &layer_transpose_desc,
    [LAYER_CLASS_TOKEN] = &layer_class_token_desc,
    [LAYER_POS_EMBEDDING] = &layer_pos_embedding_desc,
    [LAYER_SELECT] = &layer_select_desc,
    [LAYER_EMBEDDING] = &layer_embedding_desc,
    [LAYER_RMSNORM] = &layer_rmsnorm_desc,
    [LAYER_ROPE] = &layer_rope_desc,
    [LAYER_ATTENTION] = &layer_attention_desc,
    [LAYER_MOE] = &layer_moe_desc,
    [LAYER_MEAN] = &layer_mean_desc,
    [LAYER_GROUPNORM] = &layer_groupnorm_desc,
    [LAYER_CHANNEL_SHUFFLE] = &layer_channel_shuffle_desc,
    [LAYER_SLICE] = &layer_slice_desc,
    [LAYER_PERMUTE] = &layer_permute_desc,
    [LAYER_LAYER_SCALE] = &layer_layer_scale_desc,
    [LAYER_ROLL] = &layer_roll_desc,
    [LAYER_PATCH_MERGE] = &layer_patch_merge_desc,
    [LAYER_WINDOW_ATTENTION] = &layer_window_attention_desc,
    [LAYER_WINDOW_PARTITION] = &layer_window_partition_desc,
    [LAYER_WINDOW_MERGE] = &layer_window_merge_desc,
    [LAYER_RESHAPE] = &layer_reshape_desc,
    [LAYER_MODEL_INPUT] = &layer_model_input_desc,
    [LAYER_SCALE_SHIFT] = &layer_scale_shift_desc,
    [LAYER_MATMUL] = &layer_matmul_desc,
    [LAYER_MLA] = &layer_mla_desc,
};

const layer_desc *layer_desc_get(layer_kind kind)
{
    return (kind >= 0 && kind < LAYER_KIND_COUNT) ? kinds[kind] : NULL;
}

void layer_train_reference(const layer *l, const float *const *in, const float *w, float *out)
{
    const layer_desc *d = layer_desc_get(l->kind);
    (d->train_reference ? d->train_reference : d->reference)(l, in, w, out);
}

bool layer_is_view(const layer *l)
{
    return layer_desc_get(l->kind)->aliases_input && !(l->kind == LAYER_DROPOUT && l->pass != PASS_FORWARD && l->p.p > 0);
}

void layer_dropout_params(const layer *l, uint32_t *seed, uint32_t *threshold, float *keep_scale)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *c = l->name ? l->name : ""; *c; c++)
        h = (h ^ (unsigned char)*c) * 16777619u;
    double p = l->p.p < 1.0 ? l->p.p : 1.0;
    *seed = h;
    *threshold = p >= 1.0 ? UINT32_MAX : (uint32_t)(p * 4294967296.0);
    *keep_scale = p >= 1.0 ? 0.0f : (float)(1.0 / (1.0 - p));
}

bool layer_learns(const layer *l) { return l->n_weights > 0 && !l->frozen; }
bool layer_master_weights(const layer *l) { return dtype_storage(l->dtype) != DTYPE_FP32; }

bool layer_has_backward(const layer *l)
{
    return layer_desc_get(l->kind)->backward != NULL;
}

static const char *const pass_names[PASS_COUNT] = {"forward", "backward", "train"};

const char *layer_pass_name(layer_pass p)
{
    return (unsigned)p < PASS_COUNT ? pass_names[p] : "?";
}

int layer_pass_from_name(const char *name)
{
    for (int p = 0; p < PASS_COUNT; p++)
        if (strcmp(name, pass_names[p]) == 0)
            return p;
    return -1;
}

int64_t layer_backward_in_floats(const layer *l)
{
    int64_t n = layer_count_mul(2, shape_numel(&l->out));
    for (int k = 0; k < l->n_inputs; k++)
        n = layer_count_add(n, shape_numel(&l->ins[k]));
    return n;
}

int64_t layer_backward_floats(const layer *l)
{
    int64_t n = l->n_weight_floats;
    for (int k = 0; k < l->n_inputs; k++)
        n = layer_count_add(n, shape_numel(&l->ins[k]));
    return n;
}

/* A backward run's FLOPs and bytes (docs/flops.md): the products of the inputs' gradient
 * and of the weights' each as many as the forward's (2 x its multiply-accumulates each),
 * the rest of its work as the forward's again; it reads its inputs, output, the output's
 * gradient and the weights once, and writes the gradients once. */
/* Whether l's backward splits into data and weights halves of macs MACs each (conv2d,
 * linear: every multiply is by a weight). */
static bool gemm_backward(const layer *l) { return l->kind == LAYER_CONV2D || l->kind == LAYER_LINEAR; }

bool layer_backward_idle(const layer *l) { return l->no_input_grad && (l->n_weights == 0 || l->frozen); }

static void backward_count(layer *l)
{
    if (l->flops < 0 || l->macs < 0)
        return; /* out of range already: layer_count refuses it */
    if (layer_backward_idle(l)) {
        l->macs = l->flops = l->bytes = 0;
        return;
    }
    int64_t rest = l->flops - 2 * l->macs; /* both at most LAYER_MAX_COUNT */
    /* conv2d and linear without the input's gradient or the weights': that half's MACs go
     * (a frozen layer's bias sums too) */
    int halves = gemm_backward(l) ? 2 - l->no_input_grad - l->frozen : 2;
    if (gemm_backward(l) && l->frozen)
        rest = 0;
    l->flops = layer_count_add(layer_count_mul(2 * halves, l->macs), rest < 0 ? 0 : rest);
    l->macs = layer_count_mul(halves, l->macs);
    l->bytes = layer_count_mul(4, layer_count_add(layer_count_add(layer_backward_in_floats(l), l->n_weight_floats),
                                                  layer_backward_floats(l)));
}

int layer_backward_parts(const layer *l, bool weights_first, layer_part_info *parts)
{
    if (!gemm_backward(l) || (l->no_input_grad && l->frozen))
        return 0;
    layer f = *l;
    f.pass = PASS_FORWARD;
    layer_count(&f);
    int64_t es = (int64_t)dtype_size(l->dtype), x = shape_numel(&l->in), y = shape_numel(&l->out);
    int64_t w = l->n_weight_floats, mm = layer_count_mul(2, f.macs);
    layer_part_info data = {"backward data", mm, layer_count_mul(es, layer_count_add(layer_count_add(y, w), x))};
    layer_part_info weights = {"backward weights", layer_count_add(mm, f.flops - mm < 0 ? 0 : f.flops - mm),
                               layer_count_mul(es, layer_count_add(layer_count_add(x, y), w))};
    if (l->no_input_grad || l->frozen) { /* one half only */
        parts[0] = l->frozen ? data : weights;
        return 1;
    }
    parts[0] = weights_first ? weights : data;
    parts[1] = weights_first ? data : weights;
    return 2;
}

layer layer_as_backward(const layer *l)
{
    layer b = *l;
    b.pass = PASS_BACKWARD;
    layer_count(&b);
    return b;
}

bool layer_kind_has_kv_len(layer_kind kind)
{
    return kind == LAYER_ROPE || kind == LAYER_ATTENTION || kind == LAYER_MLA;
}

const char *layer_kind_name(layer_kind kind)
{
    const layer_desc *d = layer_desc_get(kind);
    return d ? d->name : "?";
}

int layer_kind_from_name(const char *name)
{
    for (int k = 0; k < LAYER_KIND_COUNT; k++)
        if (strcmp(kinds[k]->name, name) == 0)
            return k;
    return -1;
}

const char *layer_kind_list(void)
{
    static char buf[1024];
    if (!buf[0]) {
        size_t off = 0;
        for (int k = 0; k < LAYER_KIND_COUNT; k++) {
            off += (size_t)snprintf(buf + off, sizeof buf - off, "%s%s", off ? ", " : "",
                                    kinds[k]->name);
        }
    }
    return buf;
}

int64_t shape_numel(const shape_t *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= s->d[i];
    return n;
}

int64_t shape_numel_checked(const shape_t *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        if (s->d[i] < 0 || __builtin_mul_overflow(n, s->d[i], &n) || n > LAYER_MAX_NUMEL)
            return -1;
    return n;
}

int64_t layer_count_mul(int64_t a, int64_t b)
{
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) || r > LAYER_MAX_COUNT)
        return -1;
    return r;
}

int64_t layer_count_add(int64_t a, int64_t b)
{
    if (a < 0 || b < 0 || a + b > LAYER_MAX_COUNT) /* both <= 2^62: no overflow */
        return -1;
    return a + b;
}

dtype_t layer_compute_dtype(const layer *l)
{
    return l->dtype == DTYPE_INT8 && !layer_desc_get(l->kind)->int8_weights ? DTYPE_FP32 : l->dtype;
}

/* The weights l holds in int8 (0 where none), as rows of *cols. */
static int64_t int8_weights(const layer *l, int64_t *rows, int64_t *cols)
{
    const layer_desc *d = layer_desc_get(l->kind);
    int64_t n = l->dtype == DTYPE_INT8 && d->int8_weights ? d->int8_weights(l, rows) : 0;
    *cols = n > 0 && *rows > 0 ? n / *rows : 0;
    return *cols > 0 ? n : 0;
}

int64_t layer_weight_bytes(const layer *l)
{
    int64_t rows, cols, q = int8_weights(l, &rows, &cols);
    return (int64_t)dtype_size(l->dtype) * l->n_weight_floats - 3 * q;
}

void layer_round_weights(const layer *l, float *w)
{
    int64_t rows, cols;
    if (int8_weights(l, &rows, &cols))
        dtype_int8_round_rows(w, rows, cols);
    else
        dtype_round(l->dtype, w, l->n_weight_floats);
}

int layer_count(layer *l)
{
    layer_desc_get(l->kind)->count(l);
    if (l->pass == PASS_BACKWARD) {
        backward_count(l);
    } else if (l->pass == PASS_TRAIN) { /* the forward's counts, then the backward's added */
        layer b = *l;
        backward_count(&b);
        l->macs = layer_count_add(l->macs, b.macs);
        l->flops = layer_count_add(l->flops, b.flops);
        l->bytes = layer_count_add(l->bytes, b.bytes);
    }
    /* the kinds count 4-byte elements; a layer stores its dtype's (all its tensors), and
     * an int8 one its quantized weights in 1 byte */
    int64_t rows, cols, q = int8_weights(l, &rows, &cols);
    if (l->bytes > 0)
        l->bytes = l->bytes / 4 * (int64_t)dtype_size(l->dtype) - 3 * q;
    bool ok = l->n_weights >= 0 && l->n_weight_floats >= 0 && l->n_weight_floats <= LAYER_MAX_NUMEL &&
              l->macs >= 0 && l->flops >= 0 && l->bytes >= 0;
    return ok ? 0 : -1;
}

int layer_parts(const layer *l, layer_part_info *parts)
{
    const layer_desc *d = layer_desc_get(l->kind);
    int n = d->parts ? d->parts(l, parts) : 0;
    for (int i = 0; i < n; i++)
        parts[i].bytes = parts[i].bytes / 4 * (int64_t)dtype_size(l->dtype);
    return n;
}

char *shape_format(const shape_t *s, char *buf, size_t len)
{
    size_t off = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < s->rank && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%lld", i ? ", " : "", (long long)s->d[i]);
    if (off < len)
        snprintf(buf + off, len - off, "]");
    return buf;
}

char *shape_format_compact(const shape_t *s, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = 0;
    for (int i = 0; i < s->rank && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%lld", i ? "x" : "", (long long)s->d[i]);
    return buf;
}

bool shape_equal(const shape_t *a, const shape_t *b)
{
    if (a->rank != b->rank)
        return false;
    for (int i = 0; i < a->rank; i++)
        if (a->d[i] != b->d[i])
            return false;
    return true;
}

void layer_rng_seed(layer_rng *rng, uint64_t seed)
{
    rng->state = seed ^ 0x9E3779B97F4A7C15ull;
}

static uint64_t splitmix64(layer_rng *rng)
{
    uint64_t z = (rng->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float layer_rng_uniform(layer_rng *rng, float lo, float hi)
{
    double u = (double)(splitmix64(rng) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(lo + (hi - lo) * u);
}

void layer_fill_uniform(float *x, int64_t n, float lo, float hi, layer_rng *rng)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = layer_rng_uniform(rng, lo, hi);
}

int64_t layer_out_dim(int64_t in, int64_t kernel, int64_t stride, int64_t pad,
                      int64_t dilation, bool ceil_mode)
{
    /* torch's pooling_output_shape; convolution never uses ceil_mode. */
    int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1;
    if (span < 0)
        return -1;
    int64_t out = (span + (ceil_mode ? stride - 1 : 0)) / stride + 1;
    if (ceil_mode && (out - 1) * stride >= in + pad)
        out--;
    return out;
}

bool layer_same_work(const layer *a, const layer *b)
{
    if (a->kind != b->kind || a->dtype != b->dtype || a->n_inputs != b->n_inputs || memcmp(&a->p, &b->p, sizeof a->p) != 0)
        return false;
    for (int k = 0; k < a->n_inputs; k++)
        if (!shape_equal(&a->ins[k], &b->ins[k]))
            return false;
    return true;
}

char *layer_params_format(const layer *l, char *buf, size_t len)
{
    const layer_desc *d = layer_desc_get(l->kind);
    layer_params def;
    memset(&def, 0, sizeof def);
    if (d->defaults)
        d->defaults(&def);
    size_t off = 0;
    buf[0] = 0;
    for (const layer_param_spec *s = d->params; s->key && off < len; s++) {
        const char *v = (const char *)&l->p + s->offset, *dv = (const char *)&def + s->offset;
        size_t size = s->type == LP_INT || s->type == LP_ENUM ? sizeof(int64_t)
                      : s->type == LP_PAIR                 ? 2 * sizeof(int64_t)
                      : s->type == LP_FPAIR                ? 2 * sizeof(double)
                      : s->type == LP_BOOL                 ? sizeof(bool)
                      : s->type == LP_DIMS                 ? (1 + SHAPE_MAX_RANK) * sizeof(int64_t)
                      : s->type == LP_FLOATS               ? sizeof(layer_floats)
                                                           : sizeof(double);
        if (!s->required && memcmp(v, dv, size) == 0)
            continue;
        const char *sep = off ? " " : "";
        if (s->type == LP_INT)
            off += (size_t)snprintf(buf + off, len - off, "%s%s=%lld", sep, s->key, (long long)*(const int64_t *)v);
        else if (s->type == LP_PAIR)
            off += (size_t)snprintf(buf + off, len - off, "%s%s=%lldx%lld", sep, s->key,
                                    (long long)((const int64_t *)v)[0], (long long)((const int64_t *)v)[1]);
        else if (s->type == LP_BOOL)
            off += (size_t)snprintf(buf + off, len - off, "%s%s=%s", sep, s->key, *(const bool *)v ? "true" : "false");
        else if (s->type == LP_DIMS) {
            const int64_t *d = (const int64_t *)v;
            off += (size_t)snprintf(buf + off, len - off, "%s%s=", sep, s->key);
            for (int64_t k = 0; k < d[0] && off < len; k++)
                off += (size_t)snprintf(buf + off, len - off, "%s%lld", k ? "x" : "", (long long)d[1 + k]);
        }
        else if (s->type == LP_FLOATS) { /* the count and a hash of the values: a list of 48 would fill the column */
            const layer_floats *f = (const layer_floats *)v;
            uint32_t h = 2166136261u; /* FNV-1a over the values' bytes */
            for (size_t k = 0; k < (size_t)f->n * sizeof *f->v; k++)
                h = (h ^ ((const unsigned char *)f->v)[k]) * 16777619u;
            off += (size_t)snprintf(buf + off, len - off, "%s%s=%lld@%08x", sep, s->key, (long long)f->n, h);
        }
        else if (s->type == LP_ENUM)
            off += (size_t)snprintf(buf + off, len - off, "%s%s=%s", sep, s->key, s->choices[*(const int64_t *)v]);
        else if (s->type == LP_FPAIR)
            off += (size_t)snprintf(buf + off, len - off, "%s%s=%gx%g", sep, s->key, ((const double *)v)[0],
                                    ((const double *)v)[1]);
        else
            off += (size_t)snprintf(buf + off, len - off, "%s%s=%g", sep, s->key, *(const double *)v);
    }
    if (!buf[0])
        snprintf(buf, len, "-");
    return buf;
}
