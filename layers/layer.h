/* Layer kinds: what each kind is, described once.
 *
 * A kind knows its parameters (named as in torch.nn), how to infer and check its
 * output shape, its parameter count, FLOPs and bytes, how to initialise its weights
 * and a plain-C reference used only by tests and `bench check`. Backends only know
 * how to run it (layers/cpu/, layers/cuda/).
 *
 * Tensors hold the layer's dtype (dtype.h), NCHW for rank 4,
 * [N, S, D] (tokens) for rank 3 and [N, F] for rank 2. Shapes always carry the batch
 * in d[0].
 */
#ifndef LAYERBENCH_LAYER_H
#define LAYERBENCH_LAYER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtype.h"

#define SHAPE_MAX_RANK 4

typedef struct shape {
    int rank;                    /* 2 ([N, F]), 3 ([N, S, D]) or 4 ([N, C, H, W]) */
    int64_t d[SHAPE_MAX_RANK];
} shape_t;

/* Largest element count of one tensor (weights included): 2^40 floats, 4 TiB. */
#define LAYER_MAX_NUMEL ((int64_t)1 << 40)
/* Largest parameter, MAC, FLOP or byte count of one layer: 2^62. */
#define LAYER_MAX_COUNT ((int64_t)1 << 62)

/* Number of elements. Every shape of a model was checked with shape_numel_checked()
 * when it was built, so this cannot overflow. */
int64_t shape_numel(const shape_t *s);
/* Number of elements, or -1 if it overflows or exceeds LAYER_MAX_NUMEL. */
int64_t shape_numel_checked(const shape_t *s);
/* a * b and a + b for counts: -1 when an operand is -1 (already out of range), or the
 * result is beyond LAYER_MAX_COUNT. */
int64_t layer_count_mul(int64_t a, int64_t b);
int64_t layer_count_add(int64_t a, int64_t b);
/* Writes "[1, 64, 56, 56]" into buf; returns buf. */
char *shape_format(const shape_t *s, char *buf, size_t len);
/* Writes the compact form "1x64x56x56" (no separators that need CSV quoting); returns buf. */
char *shape_format_compact(const shape_t *s, char *buf, size_t len);
bool shape_equal(const shape_t *a, const shape_t *b);

typedef enum layer_kind {
    LAYER_CONV2D,
    LAYER_BATCHNORM2D,
    LAYER_RELU,
    LAYER_RELU6,
    LAYER_SIGMOID,
    LAYER_MAXPOOL2D,
    LAYER_AVGPOOL2D,
    LAYER_ADAPTIVE_AVGPOOL2D,
    LAYER_FLATTEN,
    LAYER_LINEAR,
    LAYER_DROPOUT,
    LAYER_SOFTMAX,
    LAYER_ADD,
    LAYER_MUL,
    LAYER_CONCAT,
    LAYER_SILU,
    LAYER_HARDSWISH,
    LAYER_HARDSIGMOID,
    LAYER_TANH,
    LAYER_STOCHASTIC_DEPTH,
    LAYER_CONV_TRANSPOSE2D,
    LAYER_UPSAMPLE,
    LAYER_LAYERNORM,
    LAYER_GELU,
    LAYER_MULTIHEAD_ATTENTION,
    LAYER_TRANSPOSE,
    LAYER_CLASS_TOKEN,
    LAYER_POS_EMBEDDING,
    LAYER_SELECT,
    LAYER_EMBEDDING,
    LAYER_RMSNORM,
    LAYER_ROPE,
    LAYER_ATTENTION,
    LAYER_MOE,
    LAYER_MEAN,
    LAYER_GROUPNORM,
    LAYER_CHANNEL_SHUFFLE,
    LAYER_SLICE,
    LAYER_PERMUTE,
    LAYER_LAYER_SCALE,
    LAYER_ROLL,
    LAYER_PATCH_MERGE,
    LAYER_WINDOW_ATTENTION,
    LAYER_WINDOW_PARTITION,
    LAYER_WINDOW_MERGE,
    LAYER_RESHAPE,
    LAYER_MODEL_INPUT,
    LAYER_SCALE_SHIFT,
    LAYER_MATMUL,
    LAYER_MLA,
    LAYER_KIND_COUNT
} layer_kind;

/* upsample's mode, stochastic_depth's mode, gelu's approximate */
enum { UPSAMPLE_NEAREST, UPSAMPLE_BILINEAR };
enum { STOCHASTIC_ROW, STOCHASTIC_BATCH };
enum { GELU_NONE, GELU_TANH };
/* rope's rope_type, as Hugging Face's rope_scaling names them */
enum { ROPE_DEFAULT, ROPE_LINEAR, ROPE_LLAMA3, ROPE_YARN, ROPE_LONGROPE };
/* moe's routing */
enum { MOE_UNIFORM, MOE_ROUTER };
/* moe's scoring: the router's scores, softmax over the experts or each one's sigmoid */
enum { MOE_SOFTMAX, MOE_SIGMOID };
/* moe's expert_names: Mixtral's experts.E.{w1,w2,w3}, Qwen's (and most since) experts.E.{gate,up,down}_proj,
 * or gpt-oss's fused experts.{gate_up_proj [E, H, 2F] (gate and up interleaved), down_proj [E, F, H]} */
enum { MOE_NAMES_W123, MOE_NAMES_PROJ, MOE_NAMES_FUSED };
/* moe's activation: SwiGLU silu(g) * u, or gpt-oss's clamped one: g = min(g, limit), u =
 * clamp(u, -limit, limit), g * sigmoid(alpha * g) * (u + 1) */
enum { MOE_ACT_SILU, MOE_ACT_CLAMPED_SWIGLU };

/* A parameter that is a list of numbers (LP_FLOATS): longrope's per-frequency factors. */
#define LAYER_MAX_FLOATS 256
typedef struct layer_floats {
    int64_t n;
    float v[LAYER_MAX_FLOATS];
} layer_floats;

/* Union of every kind's parameters; each kind reads only its own fields. */
typedef struct layer_params {
    int64_t out_channels;        /* conv2d */
    int64_t kernel[2];           /* conv2d, pools */
    int64_t stride[2];           /* conv2d, pools; 0 = "same as kernel" for pools */
    int64_t padding[2];
    int64_t dilation[2];
    int64_t groups;
    bool bias;                   /* conv2d, linear, layernorm, multihead_attention */
    int64_t out_features;        /* linear */
    double eps;                  /* batchnorm2d */
    double momentum;             /* batchnorm2d: accepted, unused at inference */
    bool affine;                 /* batchnorm2d; layernorm's elementwise_affine */
    int64_t output_size[2];      /* adaptive_avgpool2d */
    bool ceil_mode;              /* pools */
    bool count_include_pad;      /* avgpool2d */
    double p;                    /* dropout, stochastic_depth, multihead_attention: identity at inference */
    bool inplace;                /* activations, dropout: accepted, see docs */
    int64_t dim;                 /* softmax, concat, select */
    int64_t output_padding[2];   /* conv_transpose2d */
    double scale_factor[2];      /* upsample; 0 when size is given instead */
    int64_t mode;                /* upsample: UPSAMPLE_*; stochastic_depth: STOCHASTIC_*; gelu: GELU_* */
    bool align_corners;          /* upsample (bilinear) */
    int64_t normalized_shape;    /* layernorm: the last dimension */
    int64_t embed_dim, num_heads;/* multihead_attention */
    bool batch_first;            /* multihead_attention: accepted when true */
    int64_t start_dim, end_dim;  /* flatten */
    int64_t dim0, dim1;          /* transpose */
    int64_t index;               /* select */
    int64_t num_embeddings, embedding_dim; /* embedding */
    int64_t head_dim;            /* rope, attention (num_heads: theirs too) */
    int64_t num_kv_heads;        /* attention: key/value heads (grouped-query) */
    int64_t kv_len;              /* rope, attention: tokens already in the KV cache */
    bool causal;                 /* attention */
    int64_t sliding_window;      /* attention: keys within this many positions; 0 = all */
    double rope_theta;           /* rope */
    int64_t rope_type;           /* rope: ROPE_* */
    double rope_factor, low_freq_factor, high_freq_factor; /* rope: linear, llama3 */
    int64_t original_max_pos;    /* rope: llama3's, yarn's and longrope's original_max_position_embeddings */
    double beta_fast, beta_slow; /* rope: yarn's ramp between the extrapolated and interpolated frequencies */
    double mscale, mscale_all_dim; /* rope: yarn's attention factor, as DeepSeek gives it (0: not given) */
    double attention_factor;     /* rope: yarn's and longrope's cos/sin scale (0: inferred from factor) */
    bool truncate;               /* rope: yarn's correction range rounded to whole dims */
    bool interleaved;            /* rope: turns the pairs (x[2i], x[2i + 1]), as Meta's reference Llama
                                    (view_as_complex) and GPT-J do, not rotate-half's (x[i], x[i + d/2]) */
    layer_floats short_factor, long_factor; /* rope: longrope's per-frequency factors, within and past
                                                original_max_position_embeddings */
    bool tied_weights;           /* linear: its weight is another layer's (not counted as parameters) */
    bool hf_conv1d;              /* linear: Hugging Face's Conv1D (GPT-2): the same x W^T + b, the weight
                                    stored [in_features, out_features] in a checkpoint */
    int64_t num_positions;       /* pos_embedding: the table's rows (0: the tokens); token t reads row
                                    kv_len + t (GPT-2's wpe) */
    int64_t num_experts, top_k;  /* moe: experts, and those each token goes to */
    int64_t ffn_dim;             /* moe: each expert's hidden units (intermediate_size) */
    int64_t routing;             /* moe: MOE_* */
    int64_t expert_names;        /* moe: MOE_NAMES_*, how a checkpoint names each expert's weights */
    bool normalize;              /* moe: the top_k probabilities renormalised to sum 1 (Qwen's norm_topk_prob) */
    int64_t moe_act;             /* moe: MOE_ACT_*, each expert's gated activation */
    double swiglu_limit, swiglu_alpha; /* moe: gpt-oss's clamp of gate and up, and its sigmoid's slope */
    bool sinks;                  /* attention: a learned logit per head in every softmax's denominator
                                    (gpt-oss's attention sinks) */
    int64_t mean_dims[2];        /* mean: the dims averaged, one (both the same) or two next to each other */
    bool keepdim;                /* mean: they stay, as size 1 */
    int64_t num_groups;          /* groupnorm: groups of channels, each normalized as one */
    int64_t num_channels;        /* groupnorm: torch's argument, checked against the input's; 0 = the input's */
    int64_t slice_start, slice_end; /* slice: x[..., start:end, ...] along dim, as Python slices */
    int64_t perm[1 + SHAPE_MAX_RANK]; /* permute: the count, then the dims (LP_DIMS); reshape, model_input:
                                         the per-sample shape */
    double load_skew;            /* moe: Zipf exponent of the uniform routing's spread; 0 = even */
    double weight_offset;        /* rmsnorm: the scale is weight + this (Gemma's RMSNorm: 1) */
    double softcap;              /* attention: Gemma 2's cap softcap * tanh(score / softcap) (0: none) */
    int64_t roll_shifts[1 + SHAPE_MAX_RANK]; /* roll: the count, then the shifts (LP_DIMS) */
    int64_t roll_dims[1 + SHAPE_MAX_RANK];   /* roll: the count, then the dims they roll */
    int64_t window_size[2], shift_size[2];   /* window_attention: the window, and the cyclic shift */
    bool proj_bias;              /* window_attention: the out projection's bias (bias: the qkv one's) */
    bool cosine;                 /* window_attention: Swin V2's cosine attention, logit scale and position MLP */
    bool partitioned;            /* window_attention: the input is windows already, [N, G, w0 w1, C] (MaxViT) */
    double attn_scale;           /* window_attention, attention: the scores' scale; 0 = 1 / sqrt(head dim);
                                    scale_shift: the scale */
    double shift;                /* scale_shift */
    int64_t partitions[2];       /* window_merge: windows down and across */
    int64_t kv_lora_rank;        /* mla: the latent each token's keys and values come from */
    int64_t qk_nope_head_dim;    /* mla: the query's and key's dims per head without rope (head_dim: with) */
    int64_t v_head_dim;          /* mla: the value's dims per head */
    double routed_scale;         /* moe: the gates' factor (DeepSeek's routed_scaling_factor) */
    int64_t n_group, topk_group; /* moe: the router picks among the experts of its topk_group best groups
                                    of n_group (DeepSeek-V2's group_limited_greedy, V3's noaux_tc) */
    int64_t moe_scoring;         /* moe: MOE_SOFTMAX or MOE_SIGMOID (DeepSeek-V3's), the router's scores */
    bool score_bias;             /* moe: a bias per expert added to the scores for the choice only
                                    (DeepSeek-V3's e_score_correction_bias), after the experts' weights */
} layer_params;

/* Most inputs a layer takes (a concat of DenseNet-201's 48-layer block takes 49). */
#define LAYER_MAX_INPUTS 64

/* One layer of a model, with its shapes resolved for one batch size. */
/* What a run of a layer computes (--pass): its forward, or its backward: from the
 * forward's inputs, its output and the output's gradient, the gradients of its inputs
 * ("backward data", benchdnn's BWD_D) and of its weights ("backward weights", BWD_W), as
 * layer_desc.backward writes them (layer_backward_floats); or both as a training step
 * runs them (PASS_TRAIN): the forward in training mode (a forward kernel given a layer
 * of this pass computes it: batch norm by the batch's statistics), then the backward.
 * A train layer's counts are its forward's and its backward's together. */
typedef enum layer_pass { PASS_FORWARD, PASS_BACKWARD, PASS_TRAIN, PASS_COUNT } layer_pass;
#define LAYER_PASSES "forward, backward or train"
/* "forward", "backward", "train"; and back from a name (-1: none) */
const char *layer_pass_name(layer_pass p);
int layer_pass_from_name(const char *name);

typedef struct layer {
    char *name;                  /* qualified name, e.g. "layer2.0.downsample.0"; owned */
    layer_kind kind;
    dtype_t dtype;               /* of its inputs, weights and output (DTYPE_FP32: 0) */
    bool dtype_pinned;           /* the config gave this layer its own dtype: --dtype leaves it */
    layer_pass pass;             /* what a run computes; the counts below are its own (layer_count) */
    bool no_input_grad;          /* a backward run need not write its inputs' gradients: in a train
                                    model, a layer none of whose inputs depends on weights that learn
                                    (the first; any before the first unfrozen one), for which torch
                                    computes none (model_set_pass; the kernels of conv2d and linear
                                    skip them, and leave that part of their output unwritten) */
    bool frozen;                 /* its weights learn nothing (requires_grad: false, --freeze): a
                                    backward run need not write their gradient (conv2d and linear
                                    skip it; the other kinds' kernels write it, and nothing reads it);
                                    only where n_weights > 0 */
    layer_params p;
    int n_inputs;                /* 1; 2 for add and mul; 1 or more for concat */
    int *inputs;                 /* n_inputs value ids: 0 = model input, i+1 = output of layer i; owned */
    shape_t *ins;                /* the shapes of the inputs; owned */
    shape_t in;                  /* ins[0], kept by name for the kinds of one input */
    shape_t out;
    /* Derived by the kind's count(); per whole batch. */
    int64_t n_weights;           /* learnable parameters (what torch counts) */
    int64_t n_weight_floats;     /* floats the backends keep (bn: gamma, beta, mean, var) */
    int64_t macs;                /* multiply-accumulates (conv2d, linear) */
    int64_t flops;               /* see docs/flops.md */
    int64_t bytes;               /* inputs read once + weights read once + output written once,
                                    in the dtype's element size */
} layer;

typedef enum layer_param_type {
    LP_INT,                      /* integer >= min */
    LP_PAIR,                     /* integer or [h, w], each >= min */
    LP_BOOL,
    LP_FLOAT,                    /* number >= 0; any finite number with min INT64_MIN */
    LP_FPAIR,                    /* number or [h, w], each > 0 (double[2]) */
    LP_ENUM,                     /* one of choices, stored as its index (int64_t) */
    LP_DIMS,                     /* [d0, d1, ...]: up to SHAPE_MAX_RANK integers, stored as int64_t[1 +
                                    SHAPE_MAX_RANK], the count first */
    LP_FLOATS,                   /* [x0, x1, ...]: 1 to LAYER_MAX_FLOATS numbers above 0 (layer_floats) */
} layer_param_type;

typedef struct layer_param_spec {
    const char *key;
    layer_param_type type;
    size_t offset;               /* offsetof(layer_params, field) */
    bool required;
    int64_t min;                 /* LP_INT, LP_PAIR */
    const char *const *choices;  /* LP_ENUM: the names, NULL-terminated */
} layer_param_spec;

typedef struct layer_rng {
    uint64_t state;
} layer_rng;

/* A stage of a layer's work that the in-model view shows on its own (multihead_attention:
 * its in-projection, QK^T, softmax, AV and out-projection), with its share of the
 * layer's FLOPs and bytes (the parts' FLOPs add up to the layer's; their bytes count the
 * intermediate tensors each stage reads and writes). */
#define LAYER_MAX_PARTS 8
typedef struct layer_part_info {
    const char *name;            /* static, e.g. "qk" */
    int64_t flops, bytes;
} layer_part_info;

/* A layer kind, described once. All functions are pure; all but the reference never
 * allocate (multihead_attention's reference takes scratch rows with xmalloc: it runs
 * only in tests and `bench check`, never while timing). */
typedef struct layer_desc {
    const char *name;                       /* as written in configs */
    int n_inputs;                           /* 1, 2 (add, mul), or -1: one or more (concat) */
    bool aliases_input;                     /* output is the input buffer (flatten, dropout) */
    const layer_param_spec *params;         /* terminated by {NULL}; may be empty */
    void (*defaults)(layer_params *p);      /* optional */
    /* Checks the parameters against l->in (and l->ins) and sets l->out.
     * Returns 0, or -1 with a message in err ("what is wrong and what was expected"). */
    int (*infer)(layer *l, char *err, size_t errlen);
    /* Sets n_weights, n_weight_floats, macs, flops and bytes from the shapes, with
     * layer_count_mul/layer_count_add: a count out of range is -1 (see layer_count). Its cost does
     * not depend on the sizes (closed forms, no loops over dimensions). */
    void (*count)(layer *l);
    /* Fills the l->n_weight_floats weights with plausible random values; optional. */
    void (*init_weights)(const layer *l, float *w, layer_rng *rng);
    /* Plain-C reference: out = f(in[0], ..., in[n_inputs - 1], w). Accumulates in double. */
    void (*reference)(const layer *l, const float *const *in, const float *w, float *out);
    double tolerance;                       /* relative L2 error accepted against the reference (FP32) */
    /* Optional: the forward in training mode where it differs from reference (batchnorm2d:
     * normalised by the batch's own statistics, not the running ones). */
    void (*train_reference)(const layer *l, const float *const *in, const float *w, float *out);
    /* Optional: the plain-C backward of the training forward, as autograd computes it.
     * From the forward's inputs in[], weights w, output out (what it saved) and the
     * gradient dout of a loss with respect to out, writes the gradient with respect to
     * each input into din[k] (l->ins[k]'s shape; zeros for an input that has none:
     * embedding's token ids) and, where n_weight_floats > 0, with respect to the
     * weights into dw (n_weight_floats; zeros at those kept but not learnt: batch
     * norm's running statistics). Accumulates in double; may allocate (tests and bench
     * check only). tests/test_layers.c checks it against finite differences of
     * train_reference (or reference), tests/grad_torch_check.py against torch.autograd. */
    void (*backward)(const layer *l, const float *const *in, const float *w, const float *out,
                     const float *dout, float *const *din, float *dw);
    /* Optional: the stages of the layer's work, in the order they run (see
     * layer_part_info); returns how many (at most LAYER_MAX_PARTS). */
    int (*parts)(const layer *l, layer_part_info *parts);
    /* Optional: the kind quantizes in int8 (dtype.h): how many of its weights, at their
     * front, it holds in int8, as *rows rows (output channels) with a scale each. Kinds
     * without it run in fp32 in an int8 model. */
    int64_t (*int8_weights)(const layer *l, int64_t *rows);
} layer_desc;

/* The type l computes in: its dtype, except in an int8 model a kind that does not
 * quantize (no int8_weights), which runs in fp32. */
dtype_t layer_compute_dtype(const layer *l);
/* Bytes of l's weights as its kernels hold them: int8 ones count 1 byte. */
int64_t layer_weight_bytes(const layer *l);
/* n_weight_floats weights w rounded to what l holds (dtype_round; int8's per output
 * channel), in place. */
void layer_round_weights(const layer *l, float *w);

/* The descriptor of a kind; never NULL for a valid kind. */
const layer_desc *layer_desc_get(layer_kind kind);
/* Looks a kind up by its config name; returns -1 if unknown. */
int layer_kind_from_name(const char *name);
/* "conv2d, batchnorm2d, ..." for error messages (kinds a config may name). */
const char *layer_kind_list(void);
const char *layer_kind_name(layer_kind kind);
/* A backward run's buffers: it reads the forward's inputs, its output and the output's
 * gradient (layer_backward_in_floats in all), and writes the inputs' gradients one after
 * another, then the weights' (layer_backward_floats in all). */
int64_t layer_backward_in_floats(const layer *l);
int64_t layer_backward_floats(const layer *l);
/* The forward in training mode: the kind's train_reference, else its reference. */
void layer_train_reference(const layer *l, const float *const *in, const float *w, float *out);
/* l as its backward runs it: a shallow copy (sharing name, inputs and shapes) with
 * pass PASS_BACKWARD and its counts. */
layer layer_as_backward(const layer *l);
/* Whether l is a view of its input (its kind aliases_input): nothing runs, its output is
 * its input's buffer; but dropout (p > 0) outside the forward pass, where training draws
 * its mask (layer_dropout_scale). */
bool layer_is_view(const layer *l);
/* Training dropout's factor for element i of l's output: 0 (dropped, with probability
 * p) or 1 / (1 - p). The mask is a counter-based hash of the element's index and the
 * layer's name, so that the backward computes the same mask again rather than reading a
 * stored one (as FlashAttention's dropout does; torch keeps a byte per element). */
static inline float layer_dropout_scale(uint32_t seed, uint32_t threshold, float keep_scale, int64_t i)
{
    uint32_t h = seed ^ (uint32_t)i ^ (uint32_t)((uint64_t)i >> 32) * 0x9e3779b9u;
    h ^= h >> 16, h *= 0x85ebca6bu, h ^= h >> 13, h *= 0xc2b2ae35u, h ^= h >> 16;
    return h >= threshold ? keep_scale : 0.0f;
}
/* Its arguments for l: the seed from the layer's name, the threshold p 2^32, 1 / (1 - p). */
void layer_dropout_params(const layer *l, uint32_t *seed, uint32_t *threshold, float *keep_scale);
/* The backward of a conv2d or linear as its two halves, benchdnn's BWD_D and BWD_W:
 * "backward data", the input's gradient (macs MACs; reads the output's gradient and the
 * weights, writes the input's), and "backward weights", the weights' (macs MACs and the
 * bias's sums; reads the input and the output's gradient, writes the weights'), those l
 * computes (no_input_grad, frozen) in the order a kernel runs them (weights_first) into
 * parts; returns how many: 2, 1 where it computes one half only, 0 for another kind. */
int layer_backward_parts(const layer *l, bool weights_first, layer_part_info *parts);
/* Whether l's backward computes nothing: no input gradient is wanted (no_input_grad) and
 * it has no weights that learn (none, or frozen): a layer before anything learns. */
bool layer_backward_idle(const layer *l);
/* Whether l's weights learn in a training step: it has weights and is not frozen
 * (requires_grad: false, --freeze). */
bool layer_learns(const layer *l);
/* Whether an optimizer updates l's weights through fp32 master weights, the weights the
 * kernels read rounded from them: they are 16-bit. */
bool layer_master_weights(const layer *l);
/* Whether the kind has a backward reference (layer_desc.backward). */
bool layer_has_backward(const layer *l);
/* Whether the kind has a kv_len (tokens already in the KV cache): rope, attention, mla. */
bool layer_kind_has_kv_len(layer_kind kind);

/* Deterministic random numbers for inputs and weights (splitmix64). */
void layer_rng_seed(layer_rng *rng, uint64_t seed);
float layer_rng_uniform(layer_rng *rng, float lo, float hi);
/* Fills n floats uniformly in [lo, hi]. */
void layer_fill_uniform(float *x, int64_t n, float lo, float hi, layer_rng *rng);

/* Shared by pooling and convolution: output size along one axis, or -1 if
 * the window does not fit. ceil_mode follows torch (the last window must start
 * inside the input or left padding). */
int64_t layer_out_dim(int64_t in, int64_t kernel, int64_t stride, int64_t pad,
                      int64_t dilation, bool ceil_mode);



/* Sum of adaptive pooling's window sizes along one axis (in -> out), in closed form. */
int64_t layer_adaptive_window_sum(int64_t in, int64_t out);

/* upsample's source coordinates, as torch computes them (layers/upsample.c), shared by
 * the reference and the backends: the scale along axis (0 height, 1 width), the nearest
 * source index, and the two bilinear sources with the weight of the second. */
double layer_upsample_scale(const layer *l, int axis);
int64_t layer_upsample_nearest(const layer *l, int axis, int64_t dst);
void layer_upsample_linear(const layer *l, int axis, int64_t dst, int64_t *i0, int64_t *i1, double *w1);

/* The decoder kinds' shared rules (layers/llm.c), for the reference and the backends
 * alike: embedding's token id for an input value; rope's inverse frequencies (head_dim
 * / 2 floats, fp32 as Hugging Face computes them), the angle of pair i of token t and
 * the factor its cosines and sines are scaled by (yarn's and longrope's, else 1);
 * attention's (query, key) pairs per (sample, head), a dot product's score, whether
 * query t sees key j (a position in cache then tokens), and the key or value vector j of
 * kv head g of sample b (value 0: keys, 1: values; from the cache in w for j < kv_len). */
int64_t layer_token_id(const layer *l, float x);
void layer_rope_inv_freq(const layer *l, float *inv_freq);
float layer_rope_angle(const layer *l, const float *inv_freq, int64_t t, int64_t i);
double layer_rope_attention_factor(const layer *l);
int64_t layer_attention_pairs(const layer *l);
/* attention's cached positions held and read: the last C = kv_len of them, or with a
 * sliding window W only the W - 1 any query still sees (a sliding layer's cache); its
 * weights are the cache's keys, then its values (layer_attention_cache_floats in all),
 * then with sinks a logit per head (layer_attention_sinks) */
int64_t layer_attention_cached(const layer *l);
int64_t layer_attention_cache_floats(const layer *l);
const float *layer_attention_sinks(const layer *l, const float *w);
/* attention's score of q . k: scaled (scale, or 1/sqrt(head_dim)), then capped (softcap) */
float layer_attention_score(const layer *l, double dot);
bool layer_attention_sees(const layer *l, int64_t t, int64_t j);
const float *layer_attention_kv(const layer *l, const float *const *ins, const float *w, int value, int64_t b,
                                int64_t g, int64_t j);

/* mla's layout (layers/mla.c): its parameters (kv_a_layernorm's weight [kv_lora_rank],
 * then kv_b_proj's [num_heads * (qk_nope_head_dim + v_head_dim), kv_lora_rank]), then
 * its cache [N, kv_len, kv_lora_rank + head_dim] (each cached token's normalised latent,
 * then its key's rope part, turned); the scores' scale; and rope turning the interleaved
 * pairs (x[2i], x[2i + 1]) of x [head_dim] at position pos, as DeepSeek's rope does
 * (inv: layer_rope_inv_freq's, scaled by layer_rope_attention_factor) */
int64_t layer_mla_param_floats(const layer *l);
double layer_mla_scale(const layer *l);

/* moe's shared rules (layers/moe.c): its rows (tokens); the tokens each expert gets
 * under the uniform routing (count[num_experts], closed form); the experts of every row
 * (experts[rows * top_k], row-major; count[num_experts] gets the tokens per expert; the
 * logits are read for routing: router only); and a row's gate probabilities (gate[top_k],
 * from its logits, at its experts pick[top_k]). */
int64_t layer_moe_rows(const layer *l);
void layer_moe_counts(const layer *l, int64_t *count);
void layer_moe_route(const layer *l, const float *logits, const float *score_bias, int64_t *experts, int64_t *count);
void layer_moe_gates(const layer *l, const float *logits, const int64_t *pick, double *gate);
/* moe's twin of the experts that run: a moe of only the experts the routing gives tokens
 * (the first min(num_experts, rows * top_k): the uniform assignment's), without groups,
 * for a check of a layer too large to hold whole (bench check); ins[2] holds its input
 * shapes. Returns how many experts it has, or 0 where every expert runs. */
int64_t layer_moe_twin(const layer *l, layer *twin, shape_t *ins);
/* moe's score_bias in its weights w (after the experts'), or NULL without one */
const float *layer_moe_score_bias(const layer *l, const float *w);
/* moe's per expert weights: w1 [F, H], w2 [H, F], w3 [F, H], with bias then b1 [F], b2
 * [H], b3 [F]; and its activation of gate g and up u (MOE_ACT_*) */
int64_t layer_moe_expert_floats(const layer *l);
double layer_moe_act(const layer *l, double g, double u);

/* multihead_attention's weight blocks in torch's order (layers/transformer.c): the
 * packed q, k, v projection [3E, E] and its bias [3E], the out projection [E, E] and its
 * bias [E]; the biases are NULL without bias. */
void layer_mha_weights(const layer *l, const float *w, const float **in_w, const float **in_b, const float **out_w,
                       const float **out_b);

/* transpose's input seen as [outer, a, mid, b, inner], a and b the dims it swaps;
 * channel_shuffle's as [N, groups, 1, C / groups, spatial]; permute's with a and b the
 * two runs of dims it swaps (every permutation it takes is one). */
void layer_transpose_dims(const layer *l, int64_t *outer, int64_t *a, int64_t *mid, int64_t *b, int64_t *inner);

/* select's input seen as [outer, size, inner], size the dim it indexes: the output is
 * in[o][index][i] for every (o, i). */
void layer_select_dims(const layer *l, int64_t *outer, int64_t *size, int64_t *inner);
/* softmax's: the elements before its dim, along it, and after it */
void layer_softmax_dims(const layer *l, int64_t *outer, int64_t *n, int64_t *inner);
/* slice's input seen as [outer, size, inner], size the dim it takes [start, end) of;
 * layer_scale's with size the dim its gamma runs along. */
void layer_slice_dims(const layer *l, int64_t *outer, int64_t *size, int64_t *inner);
/* mean: the elements before the dims averaged, the elements averaged into each output,
 * and the elements after them (the input is [outer, size, inner]). */
void layer_mean_dims(const layer *l, int64_t *outer, int64_t *size, int64_t *inner);

/* window_attention's shared rules (layers/window.c), for the reference and the backends:
 * its weight blocks (the biases NULL without them; table: the position bias table
 * [(2 w0 - 1)(2 w1 - 1), heads], or with cosine the logit scale [heads] then the
 * position MLP's [hidden, 2] weight, [hidden] bias and [heads, hidden] weight); the
 * padded feature map and the shift that applies (torch drops a shift along a dim the
 * window covers); and, for token t of a sample in window order (window by window, row
 * by row inside), the input pixel it reads (y * W + x; -1 for padding), its mask label
 * (tokens of one window with different labels do not attend: -100 is added), and the
 * index of the bias between in-window positions i and j. */
#define LAYER_WINDOW_CPB_HIDDEN 512
typedef struct layer_window_w {
    const float *qkv_w, *qkv_b, *proj_w, *proj_b, *table;
    const float *logit_scale, *cpb_w1, *cpb_b1, *cpb_w2;
} layer_window_w;
layer_window_w layer_window_weights(const layer *l, const float *w);
void layer_window_geometry(const layer *l, int64_t *ph, int64_t *pw, int64_t *sh, int64_t *sw);
int64_t layer_window_pixel(const layer *l, int64_t t);
int64_t layer_window_label(const layer *l, int64_t t);
int64_t layer_window_rel_index(const layer *l, int64_t i, int64_t j);
/* cosine: the position MLP's input for table row u (Swin V2's log-spaced coordinates) */
void layer_window_cpb_coords(const layer *l, int64_t u, float xy[2]);
/* the scale of q k^T (without cosine) */
double layer_window_scale(const layer *l);
/* window_partition and window_merge: element o of the output is element
 * layer_window_source(l, o) of the input (both [N, C, H, W] <-> [N, G, w0 w1, C]). */
int64_t layer_window_source(const layer *l, int64_t o);

/* matmul's shapes (layers/merge.c): the count of the leading dims' indices, and M, K, N
 * ([..., M, K] x [..., K, N]). */
void layer_matmul_dims(const layer *l, int64_t *batch, int64_t *m, int64_t *k, int64_t *n);

/* mul's broadcasting: the index, in an input of shape s, of output element o. */
int64_t layer_broadcast_index(const shape_t *s, const shape_t *out, int64_t o);

/* Runs the kind's count(); -1 when a count is out of range (more than LAYER_MAX_COUNT,
 * or weights beyond LAYER_MAX_NUMEL floats), else 0. */
int layer_count(layer *l);

/* The layer's parts (layer_desc.parts) into parts[LAYER_MAX_PARTS]; 0 for kinds without. */
int layer_parts(const layer *l, layer_part_info *parts);

/* Same kind, dtype, input shapes and parameters: the same work (used by --dedupe and the
 * grouped tables). */
bool layer_same_work(const layer *a, const layer *b);

/* The parameters that differ from torch's defaults plus the required ones, as
 * "out_channels=64 kernel_size=3x3 padding=1x1 bias=false"; "-" when none. */
char *layer_params_format(const layer *l, char *buf, size_t len);
#endif
