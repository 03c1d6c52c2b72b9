/* A model: the flat list of layers a config describes, with shapes for one batch size.
 * Built by cfg_load(); nothing here allocates tensor memory. */
#ifndef LAYERBENCH_MODEL_H
#define LAYERBENCH_MODEL_H

#include "layer.h"
#include "util.h"

/* A training step's optimizer (--optimizer): an update of every parameter tensor that
 * learns, after the backward. */
typedef enum model_optimizer { OPTIMIZER_NONE, OPTIMIZER_SGD, OPTIMIZER_ADAMW, OPTIMIZER_COUNT } model_optimizer;
#define MODEL_OPTIMIZERS "none, sgd or adamw"
/* "none", "sgd", "adamw"; the floats of state it keeps per parameter (AdamW: 2) */
const char *model_optimizer_name(model_optimizer o);
int model_optimizer_state(model_optimizer o);
/* The FLOPs and bytes of o's update of n parameters (fp32) */
void model_optimizer_count(model_optimizer o, int64_t n, int64_t *flops, int64_t *bytes);

typedef struct model {
    char *name;          /* the config's name; owned */
    char *path;          /* the config file; owned */
    int64_t batch;       /* batch size the shapes are resolved for */
    shape_t input;       /* model input, batch in d[0] */
    dtype_t dtype;       /* the model-wide dtype: the config's, or --dtype's */
    layer_pass pass;     /* what its layers' runs compute (--pass): every layer's pass */
    model_optimizer optimizer; /* a train model's update after its backward (--optimizer) */
    layer *layers;       /* n_layers, in execution order; owned */
    int n_layers;
    char *note;          /* what was checked beside the config (a config.json's safetensors
                            headers), one line; owned; NULL where nothing was */
} model;

typedef struct model_totals {
    int64_t n_weights, macs, flops, bytes;
    int64_t dtype_flops[DTYPE_COUNT]; /* flops by the type each layer computes in (layer_compute_dtype;
                                         an optimizer's update: fp32), for each type's own peak */
} model_totals;

/* Frees the model and everything it owns; model_free(NULL) is a no-op. */
void model_free(model *m);

/* Re-resolves every shape for another batch size and recounts. Fails (usage error,
 * message in err) if a tensor would be too large to address. */
bench_status model_set_batch(model *m, int64_t batch, char *err, size_t errlen);

/* The model's parameters and its layers' counts summed; for a train model, the training
 * step's: every layer's forward, and the backward of those that run one in the step
 * (model_grad_flow), without the gradients it does not compute (the first layer's input
 * gradient, a frozen layer's weights') and the optimizer's updates, so that the step's
 * rate counts what ran. */
model_totals model_sum(const model *m);

/* The model-wide dtype: every layer's but those the config pinned to their own (a view,
 * flatten or dropout, keeps its input's); recounts their bytes. */
void model_set_dtype(model *m, dtype_t t);
/* Every layer's pass (layer.pass), recounted. For PASS_TRAIN each layer also learns
 * whether the step wants its inputs' gradients (layer.no_input_grad, model_grad_flow),
 * so that a train row alone computes what the step does; other passes compute all. */
void model_set_pass(model *m, layer_pass p);
/* The dtype value v is stored in: its producer's (0, the input: its first reader's). */
dtype_t model_value_dtype(const model *m, int value);
/* Whether any layer reads a value stored in another dtype than its own (a mixed model:
 * the chained forward converts those inputs). */
bool model_mixed(const model *m);
/* A decoder's token shape: the tokens per sequence of a token-id input read by an
 * embedding, and the KV cache's length of its first rope or attention layer; -1 where
 * the model has none. */
int64_t model_tokens(const model *m);
int64_t model_kv_len(const model *m);
/* A decode step: one new token per sequence after a KV cache (tokens 1, kv_len > 0). */
bool model_decode_step(const model *m);

/* The value a layer's output lives in, following flatten/dropout views back to the
 * buffer that holds the data: 0 = model input, i+1 = output of layer i. */
int model_storage_of(const model *m, int value);
/* Shape of a value (0 = input). */
const shape_t *model_value_shape(const model *m, int value);

/* last[v] for every value v that owns its storage (0 = the input, i+1 = layer i's
 * output): the last layer that reads it, directly or through views; v - 1 when no
 * layer does. last has m->n_layers + 1 entries; views' own entries are left as v - 1. */
void model_last_readers(const model *m, int *last);

/* Bytes a run needs on a backend, in the layers' dtypes, workspaces aside (a kernel's
 * packed copy of its weights is one): the chained forward's activations and weights
 * (model_chained_bytes), and, set up beside them, every isolated layer's own weights
 * (one of each set of identical layers with dedupe, as --dedupe measures them) and the
 * input and output buffers the isolated layers share (model_isolated_bytes);
 * model_memory_bytes is both, without dedupe. */
int64_t model_isolated_bytes(const model *m, bool dedupe);
int64_t model_chained_bytes(const model *m);
int64_t model_memory_bytes(const model *m);

/* The memory of the chained forward, planned from the tensors' lifetimes as a framework
 * frees them (PyTorch's inference: a tensor goes once its last reader ran; views share
 * their input's storage; the model's input lives until its last reader, its output to
 * the end). Workspaces are not counted. */
typedef struct model_memory {
    int64_t weight_bytes;            /* every layer's weights */
    int64_t peak_activation_bytes;   /* the most activation bytes alive at once */
    int peak_layer;                  /* the layer running then; -1 for an empty model */
    int64_t all_activation_bytes;    /* every layer's output at once (what layerbench's chained
                                        forward allocates, for the in-model view), input aside */
} model_memory;
void model_memory_plan(const model *m, model_memory *mm);

/* The memory of a training step, planned the same way over its 2 n + 1 steps (the
 * forward's layers, the loss, the backward's layers in reverse): an activation lives
 * from its layer's forward to its layer's backward (every backward reads its layer's
 * inputs and output, as layerbench's kernels do); an activation's gradient from the
 * backward of its last reader (the loss, for the model's output) to its own layer's
 * (one buffer where several readers add theirs); the weights' gradients from their
 * layer's backward to the end (an optimizer reads them); the optimizer's state
 * (m->optimizer) and the fp32 master weights it updates for 16-bit ones throughout.
 * Workspaces are not counted. */
typedef struct model_train_memory {
    int64_t weight_bytes, weight_grad_bytes;
    int64_t optimizer_bytes;         /* the optimizer's state (AdamW's two moments of each weight that learns) */
    int64_t master_bytes;            /* with an optimizer, the fp32 master weights of the 16-bit ones that learn */
    int64_t kept_bytes;              /* the activations the forward keeps for the backward (at the loss) */
    int64_t peak_bytes;              /* weights, their gradients, activations and their gradients alive at once */
    int peak_step;                   /* when: i < n layer i's forward, n the loss, n + 1 + j the backward of layer n - 1 - j */
} model_train_memory;
void model_train_plan(const model *m, model_train_memory *tm);

/* What a training step's backward does, as autograd decides it: a value requires a
 * gradient where it depends on weights that learn (a layer with weights, not frozen);
 * layer i runs its backward (runs[i]) where its output requires one and the loss reaches
 * it (back from the model's output through readers that run), a view aside; it writes
 * its inputs' gradients (input_grad[i]) where one of its inputs requires one (a layer
 * reading only the model's input, or only frozen layers' outputs, computes none). Both
 * n_layers, the caller's. */
void model_grad_flow(const model *m, bool *runs, bool *input_grad);

/* Refuses a model that would not fit in memory, before anything is allocated: returns
 * BENCH_ERR_USAGE with "needs X, Y available" in err. available < 0 means the host's
 * available memory; where names the memory in the message ("" for the host). */
bench_status model_check_memory(const model *m, int64_t available, const char *where, char *err, size_t errlen);

#endif
