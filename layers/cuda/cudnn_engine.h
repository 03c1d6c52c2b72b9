/* The bookkeeping of cuDNN's graph-API engines (conv_graph_cuda.c), as plain C with no
 * CUDA or cuDNN header, so that it builds and is unit-tested on any machine
 * (tests/test_cudnn_engine.c):
 *   - an engine's tag: its global index and its knob choices, written as
 *     `eng28_k2=3_k17=4` (knobs sorted by type), as PyTorch's and cudnn-frontend's logs
 *     name a plan; parsed back for LAYERBENCH_CUDNN_ENGINE;
 *   - its notes (numerical and behaviour, cuDNN's enum values as bit numbers) in words,
 *     and which the math mode refuses: every math drops DOWN_CONVERT_INPUTS (PyTorch's
 *     filter does too), strict FP32 also TENSOR_CORE (TF32 products), and fp16/bf16
 *     (sums in float) REDUCED_PRECISION_REDUCTION;
 *   - the removal of duplicate engine configs (the heuristic modes return the same
 *     configs again), by tag, the first kept;
 *   - the key a convolution's choice is cached and saved under: kind, dtype, layout,
 *     shape, parameters and the byte alignment of each tensor's address, since cuDNN's
 *     engines are chosen and built for an alignment.
 * Bits of cudnnBackendNumericalNote_t and cudnnBackendBehaviorNote_t: conv_graph_cuda.c
 * checks at compile time that these numbers are cuDNN's. */
#ifndef LAYERBENCH_CUDNN_ENGINE_H
#define LAYERBENCH_CUDNN_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "layer.h"

enum {
    CUDNN_ENGINE_NOTE_TENSOR_CORE = 1u << 0,
    CUDNN_ENGINE_NOTE_DOWN_CONVERT_INPUTS = 1u << 1,
    CUDNN_ENGINE_NOTE_REDUCED_PRECISION_REDUCTION = 1u << 2,
    CUDNN_ENGINE_NOTE_FFT = 1u << 3,
    CUDNN_ENGINE_NOTE_NONDETERMINISTIC = 1u << 4,
    CUDNN_ENGINE_NOTE_WINOGRAD = 1u << 5,
    CUDNN_ENGINE_NOTE_WINOGRAD_TILE_4x4 = 1u << 6,
    CUDNN_ENGINE_NOTE_WINOGRAD_TILE_6x6 = 1u << 7,
    CUDNN_ENGINE_NOTE_WINOGRAD_TILE_13x13 = 1u << 8,
    CUDNN_ENGINE_NOTE_STRICT_NAN_PROP = 1u << 9,
};
enum {
    CUDNN_ENGINE_BEHAVIOR_RUNTIME_COMPILATION = 1u << 0,
    CUDNN_ENGINE_BEHAVIOR_FILTER_INT8x32_REORDER = 1u << 1,
    CUDNN_ENGINE_BEHAVIOR_BIAS_INT8x32_REORDER = 1u << 2,
    CUDNN_ENGINE_BEHAVIOR_CUDA_GRAPH_NATIVE_API = 1u << 3,
    CUDNN_ENGINE_BEHAVIOR_CUBLASLT_DEPENDENCY = 1u << 4,
};

#define CUDNN_ENGINE_MAX_KNOBS 48
#define CUDNN_ENGINE_TAG_LEN 512

typedef struct cudnn_knob {
    int type;      /* cudnnBackendKnobType_t */
    int64_t value;
} cudnn_knob;

typedef struct cudnn_engine_tag {
    int64_t engine;  /* CUDNN_ATTR_ENGINE_GLOBAL_INDEX */
    int n_knobs;
    cudnn_knob knobs[CUDNN_ENGINE_MAX_KNOBS]; /* sorted by type (cudnn_tag_normalize) */
} cudnn_engine_tag;

/* Sorts the knobs by type; false when two have the same type (not a tag). */
bool cudnn_tag_normalize(cudnn_engine_tag *t);
/* `eng28_k2=3_k17=4` (knobs in type order; `eng5` without knobs) into buf; the length it
 * needs, as snprintf. */
int cudnn_tag_format(const cudnn_engine_tag *t, char *buf, size_t len);
/* The tag a string names (what LAYERBENCH_CUDNN_ENGINE holds); false with why on a
 * malformed one, e.g. "eng28_k2" or "eng-1". */
bool cudnn_tag_parse(const char *s, cudnn_engine_tag *t, char *why, size_t why_len);
bool cudnn_tag_equal(const cudnn_engine_tag *a, const cudnn_engine_tag *b);

/* The notes that say something about the numbers or the cost, space-separated
 * ("WINOGRAD_TILE_4x4 TENSOR_CORE RUNTIME_COMPILATION"), "" when none. */
void cudnn_notes_format(unsigned numerical, unsigned behavior, char *buf, size_t len);

typedef enum cudnn_math {
    CUDNN_MATH_FP32,   /* strict FP32 (dtype fp32): products and sums in float */
    CUDNN_MATH_TF32,   /* dtype tf32: TF32 products on tensor cores allowed */
    CUDNN_MATH_HALF,   /* fp16 and bf16 tensors, sums in float */
} cudnn_math;

/* Why the math mode refuses an engine with these numerical notes, or NULL. */
const char *cudnn_engine_refuses(unsigned numerical, cudnn_math math);

/* Keeps the first of each tag among n (in place, order kept); returns how many are
 * left. keep, when not NULL, gets each kept entry's index before the removal. */
int cudnn_tags_dedupe(cudnn_engine_tag *tags, int n, int *keep);

/* The largest power of two, at most 256, that divides an address (cuDNN's
 * CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT); 256 for NULL. */
int cudnn_alignment(uintptr_t address);

typedef enum cudnn_layout { CUDNN_LAYOUT_NCHW, CUDNN_LAYOUT_NHWC } cudnn_layout;

/* What a convolution's choice depends on. */
typedef struct cudnn_conv_key {
    layer_kind kind;     /* conv2d (forward) or conv_transpose2d (backward data) */
    dtype_t dtype;
    cudnn_layout layout;
    shape_t in;
    layer_params p;
    int align_x, align_w, align_y; /* bytes (cudnn_alignment) */
} cudnn_conv_key;

bool cudnn_conv_key_equal(const cudnn_conv_key *a, const cudnn_conv_key *b);
/* The key as one line of text without tabs (the saved choices' layer key), e.g.
 * `conv2d bf16 nhwc 1x64x56x56 oc64 k3x3 s1x1 p1x1 d1x1 g1 bias align 256,256,256`. */
int cudnn_conv_key_format(const cudnn_conv_key *k, char *buf, size_t len);

/* A saved choice's value (--algo-cache): "graph eng28_k2=3_k17=4", or "legacy ALGO MATH"
 * (the legacy API's algorithm and math type as numbers). */
int cudnn_choice_format(bool graph, const cudnn_engine_tag *tag, int algo, int math, char *buf, size_t len);
/* ... read back; false for anything else. */
bool cudnn_choice_parse(const char *value, bool *graph, cudnn_engine_tag *tag, int *algo, int *math);

#endif
