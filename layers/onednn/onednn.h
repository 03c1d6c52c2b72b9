/* The onednn backend (this folder): the layers through oneDNN's primitives (Debian's
 * libdnnl), the library PyTorch runs on the CPU, beside our OpenBLAS backend.
 *
 * Layouts. A convolution lets oneDNN choose its layouts (dnnl_format_tag_any) and
 * reorders its weights once at setup; batch norm, eltwise, pooling and binary follow
 * their input's layout; inner product, softmax and layer norm run on the plain one. A
 * layer set up on its own takes plain tensors and reorders them around its primitive
 * inside its run (what bench check runs). Then:
 *  - alone (the isolated rows, od_layer_isolate), its input is reordered once at setup,
 *    into what the convolution wants or, for a layer that follows its input, into the
 *    layout a convolution on that tensor hands on, and its output stays in the
 *    primitive's layout: the rows time the primitive alone, as benchdnn does;
 *  - in the chained forward (od_model_link), values pass between linkable primitives in
 *    oneDNN's layouts, and the reorders left are parts of their layer, timed apart.
 * Kinds oneDNN has no primitive for (concat, upsample, attention, the token kinds, ...)
 * and configurations it cannot express run the cpu backend's kernels, and impl says
 * "cpu kernel: ...", as a framework falls back to its own kernels.
 *
 * Memory, timers, marks, the cache flush and the ceilings are the cpu backend's (this
 * context holds one): oneDNN's CPU engine runs synchronously on the calling thread and
 * libgomp's threads, the same pool as our loops. */
#ifndef LAYERBENCH_ONEDNN_H
#define LAYERBENCH_ONEDNN_H

#include <dnnl.h>

#include "backend.h"

/* The cpu backend, for memory, timers and the kinds oneDNN has no primitive for; and its
 * max |x| loop (cpu_kernels.h), for int8's input scale. */
extern const backend_ops backend_cpu_ops;
float cpu_absmax(const float *x, int64_t n);

typedef struct od_ctx {
    void *cpu;                 /* the cpu backend's context */
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    bool failed;
    char error[512];
    char why[64];              /* why the last layer set up fell back to the cpu kernel */
    char *description;
    /* While od_model_link rebuilds a layer: input k's value as its producer keeps it, in
     * the primitive's layout (NULL: plain, behind the run's pointer); whether the output
     * may stay in the primitive's layout (every reader is linked); whether to describe
     * the primitive on plain layouts anyway (its linked description had no
     * implementation), reordering the linked inputs to plain. */
    dnnl_memory_t link_in[2];
    bool link_out_own, link_plain;
    void *link_out_buf;       /* the output value's buffer, where a kept output goes if it fits */
    size_t link_out_bytes;
} od_ctx;

/* Records the first failure: "file:line: call failed: status". */
bool od_check(od_ctx *c, dnnl_status_t st, const char *call, const char *file, int line);
#define OD_OK(c, call) od_check((c), (call), #call, __FILE__, __LINE__)

/* Describing an operation or finding an implementation for it: where oneDNN has none
 * (dnnl_unimplemented) or refuses these parameters, the layer runs the cpu kernel and
 * impl says why; any other status is a failure. */
bool od_soft(od_ctx *c, dnnl_status_t st, const char *call, const char *file, int line);
#define OD_SOFT(c, call) od_soft((c), (call), #call, __FILE__, __LINE__)

/* What one layer makes at most: a convolution has 7 memories (input, output and
 * weights, each plain and reordered, and the bias) and 4 primitives (itself, two
 * reorders per run, the weights' at setup); batch norm 6 memories. */
#define OD_MAX_ARGS 8
#define OD_MAX_MEMS 16
#define OD_MAX_PRIMS 10 /* a convolution's backward: its two, five reorders, the weights' */

typedef struct od_layer od_layer;

/* int8, dynamic quantization (dtype.h), of a convolution or an inner product: input 0
 * arrives in fp32 and is quantized per tensor at each run (reorder_in[0], with a runtime
 * scale); the weights are s8 with a scale per output channel; the primitive writes fp32
 * (int8_onednn.c). */
typedef struct od_quant {
    int64_t n_in, oc;
    float *w_scale;           /* [oc], max |w row| / 127: the primitive's output scales */
    const float *bias;        /* [oc] as given (fp32), or NULL */
    float *bias_acc;          /* [oc] the bias in the accumulator's units: bias / (s_x w_scale) */
    float sx, in_scale;       /* this run's input scale s_x = max |x| / 127, and 1 / s_x */
    int8_t *w8;               /* the weights quantized, plain (the primitive's own copy may differ) */
    int levels;               /* the weights' levels either side of 0: 127, or 63 without VNNI */
    dnnl_memory_t in_scale_mem, sx_mem;
} od_quant;

/* A kind family's builder (conv_onednn.c, eltwise_onednn.c, ...): makes l's primitive and
 * the memories and reorders around it into L, and its implementation into impl; false
 * (nothing made) where this configuration has none (c->why says why), or a call failed
 * (c->failed then says which). */
typedef bool od_build_fn(od_ctx *c, od_layer *L, const layer *l, const void *w, char *impl, size_t len);

/* One layer: its primitive with its arguments, and the reorders around it. */
typedef struct od_layer {
    const layer *l;                        /* what it was set up for, to rebuild it linked */
    const void *w;
    od_build_fn *build;                    /* its family's builder, to build it again (isolated, linked) */
    bool linkable;                         /* its family takes its inputs in their producers' layouts and
                                              may keep its output in its own (od_linkable) */
    backend_layer *cpu;                    /* a fallback: the cpu backend's kernel runs it */
    dnnl_primitive_t prim;
    dnnl_exec_arg_t args[OD_MAX_ARGS];
    int n_args;
    int n_inputs;
    dnnl_memory_t user_in[2], user_out;    /* plain views of the run's pointers */
    dnnl_primitive_t reorder_in[2], reorder_out; /* NULL where the primitive takes the plain layout */
    dnnl_memory_t in_mem[2], out_mem;      /* what the primitive reads and writes */
    int64_t reorder_bytes[3];              /* bytes each reorder reads and writes: inputs 0, 1, output */
    bool in_linked[2];                     /* user_in[k] is the producer's memory, not the run's pointer */
    bool isolated;                         /* od_layer_isolate: the input reorders ran once, at setup;
                                              the output stays in out_mem, in the primitive's layout */
    bool timed;                            /* parts_enable: each reorder and the primitive timed apart */
    double part_s[4];                      /* their seconds in the last run, in the order they ran */
    char name[64];                         /* the primitive's implementation, e.g. "brgconv:avx512_core" */
    dnnl_memory_t mems[OD_MAX_MEMS];       /* every memory object made here, destroyed in free */
    int n_mems;
    dnnl_primitive_t prims[OD_MAX_PRIMS];  /* every primitive made here */
    int n_prims;
    int64_t workspace;
    od_quant *q;                           /* int8: the scales (NULL otherwise) */
} od_layer;

/* Memories, mds, reorders and primitives (memory_onednn.c). */
dnnl_memory_t od_keep(od_layer *L, dnnl_memory_t m);
void od_arg(od_layer *L, int arg, dnnl_memory_t m);
/* oneDNN's data type for a dtype (tf32 is f32: a math mode, not a storage type). */
dnnl_data_type_t od_dtype(dtype_t t);
/* A plain md of the shape (row-major, dense), or of its dims as given, of data type dt. */
void od_plain(dnnl_memory_desc_t *md, int rank, const int64_t *d, dnnl_data_type_t dt);
void od_plain_shape(dnnl_memory_desc_t *md, const shape_t *s, dnnl_data_type_t dt);
/* A reorder from one md to the other, run now or at each run. */
dnnl_primitive_t od_reorder(od_ctx *c, od_layer *L, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to);
/* ... with attributes (int8's runtime scale). */
dnnl_primitive_t od_reorder_attr(od_ctx *c, od_layer *L, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                                 const_dnnl_primitive_attr_t attr);
/* A memory in the plain md at handle (DNNL_MEMORY_NONE: set at each run) and, where the
 * primitive wants another md, one of its own in that md (*mine; its bytes count as
 * workspace), else *mine = NULL. Returns the plain one, NULL on failure. */
/* A memory of L's in md at handle, or, with DNNL_MEMORY_ALLOCATE, in memory of its own
 * (whose bytes count as workspace); NULL on failure. */
dnnl_memory_t od_memory(od_ctx *c, od_layer *L, const dnnl_memory_desc_t *md, void *handle);
dnnl_memory_t od_pair(od_ctx *c, od_layer *L, const dnnl_memory_desc_t *plain, void *handle,
                             const dnnl_memory_desc_t *want, dnnl_memory_t *mine);
/* A reorder from have to want for input k (k < 0: the output, from want to plain). */
dnnl_primitive_t od_reorder_act(od_ctx *c, od_layer *L, int k, const dnnl_memory_desc_t *from,
                                       const dnnl_memory_desc_t *to);
/* Input k (k < 0: the output) as the primitive wants it. The value itself is a plain view
 * of the run's pointer or, in a linked forward, its producer's memory (an input) or a
 * memory of this layer's own in the primitive's layout that its readers take (the
 * output). Where the primitive wants another md: a memory of its own and a reorder. */
dnnl_memory_t od_activation(od_ctx *c, od_layer *L, int k, const dnnl_memory_desc_t *plain,
                                   const dnnl_memory_desc_t *want);
/* Input k's md for a primitive that keeps its input's layout (eltwise, batch norm,
 * pooling, binary): its producer's layout in a linked forward, else plain. */
void od_src_md(const od_ctx *c, const layer *l, const shape_t *s, int k, dnnl_memory_desc_t *md);
/* The output's md for such a primitive: "any" (oneDNN follows the input) where an input
 * is linked, else plain. */
void od_dst_md(const od_ctx *c, const layer *l, dnnl_memory_desc_t *md);
/* An md's layout, for impl: "nChw16c", "nchw", "nhwc" (4-d), "plain" (other ranks) or "blocked". */
const char *od_layout(const dnnl_memory_desc_t *md, char *buf, size_t len);
/* A constant (weights, or an isolated row's input) at w in the plain md, in the md the
 * primitive wants: w itself, or a copy reordered once, now. */
dnnl_memory_t od_constant(od_ctx *c, od_layer *L, const void *w, const dnnl_memory_desc_t *plain,
                                 const dnnl_memory_desc_t *want);
/* Makes the primitive of op_desc; its implementation name (e.g. "brgconv:avx512_core")
 * into impl. The caller destroys *pd. */
bool od_primitive(od_ctx *c, od_layer *L, const void *op_desc, dnnl_primitive_desc_t *pd, char *impl,
                         size_t len);
/* ... with attributes (NULL: none). */
bool od_primitive_attr(od_ctx *c, od_layer *L, const void *op_desc, const_dnnl_primitive_attr_t attr,
                       dnnl_primitive_desc_t *pd, char *impl, size_t len);
/* ... skipping the implementations whose names begin with one of avoid's prefixes
 * (NULL-terminated; NULL: none) for the next one oneDNN offers: ones known to compute a
 * layer wrongly. */
bool od_primitive_avoid(od_ctx *c, od_layer *L, const void *op_desc, const_dnnl_primitive_attr_t attr,
                        const char *const *avoid, dnnl_primitive_desc_t *pd, char *impl, size_t len);
const dnnl_memory_desc_t *od_query(const_dnnl_primitive_desc_t pd, dnnl_query_t what);
/* impl for a layer whose primitive runs on its own layout: the implementation, that
 * layout and the reorders around it. */
void od_impl_layout(const od_layer *L, char *impl, size_t len);
/* A primitive whose input and output are the layer's own tensors, in the mds its
 * description gave (plain, or its producers' layouts in a linked forward). */
bool od_plain_io(od_ctx *c, od_layer *L, const layer *l, const void *op_desc, char *impl, size_t len);

/* A layer as oneDNN runs it (layer_onednn.c). od_setup builds l with its family's builder
 * or, where oneDNN has nothing for this configuration, sets up the cpu backend's kernel
 * (impl then says "cpu kernel: ..." and why); the rest are every family's kernel slots
 * (OD_KERNEL). */
bench_status od_setup(od_ctx *c, od_build_fn *build, bool linkable, const layer *l, const void *w, void **state,
                      char *impl, size_t impl_len, int64_t *workspace_bytes);
/* ... the cpu backend's kernel, impl saying why (c->why, as the caller left it) */
bench_status od_setup_cpu(od_ctx *c, const layer *l, const void *w, void **state, char *impl, size_t impl_len,
                          int64_t *workspace_bytes);
/* A backward kernel's setup after its builder (built: it made L's primitives): L's
 * workspace; else L cleared and, unless a call failed, the cpu backend's kernel for L's
 * layer into *fallback (impl says why). */
bench_status od_built_or_cpu(od_ctx *c, od_layer *L, od_layer **fallback, bool built, int64_t *workspace_bytes,
                             char *impl, size_t impl_len);
/* Whether L passes values in oneDNN's layouts in a linked forward: a primitive of a
 * linkable family (OD_SETUP_LINKABLE: a layout of its own, convolution, or its input's,
 * eltwise, batch norm, pooling, binary), not int8 (it quantizes a plain fp32 input). */
bool od_linkable(const od_layer *L);
void od_layer_clear(od_layer *L);
void od_layer_run(void *env, const layer *l, void *state, const void *const *in, const void *w, void *out);
void od_layer_free(void *env, void *state);
void od_layer_isolate(void *env, void *state, const void *const *in, char *impl, size_t len);
int od_layer_parts(void *env, void *state, const layer *l, layer_part_info *parts);
bool od_parts_enable(void *env, void *state, bool on);
void od_parts_read(void *env, void *state, double *seconds);
double od_tolerance(void *env, const layer *l);

/* A family's setup, name: od_setup with its builder; _LINKABLE: a family whose layers
 * pass values in oneDNN's layouts in a linked forward (od_linkable). */
#define OD_SETUP_AS(name, build, linkable)                                                                     \
    static bench_status name(void *env, const layer *l, const void *w, void **state, char *impl, size_t len,  \
                             int64_t *workspace_bytes)                                                         \
    {                                                                                                          \
        return od_setup(env, (build), (linkable), l, w, state, impl, len, workspace_bytes);                    \
    }
#define OD_SETUP(name, build) OD_SETUP_AS(name, build, false)
#define OD_SETUP_LINKABLE(name, build) OD_SETUP_AS(name, build, true)
/* The kernel of a family whose setup is setup_fn. */
#define OD_KERNEL(setup_fn)                                                                                    \
    {                                                                                                          \
        .setup = (setup_fn), .run = od_layer_run, .free = od_layer_free, .parts_enable = od_parts_enable,      \
        .parts_read = od_parts_read, .parts = od_layer_parts, .isolate = od_layer_isolate,                     \
        .tolerance = od_tolerance                                                                              \
    }

/* The families' kernels, and the fallback onto the cpu backend's kernels (the kinds
 * oneDNN has no primitive for). */
extern const backend_kernel od_conv_kernel, od_eltwise_kernel, od_batchnorm_kernel, od_binary_kernel, od_pool_kernel,
    od_linear_kernel, od_softmax_kernel, od_layernorm_kernel, od_cpu_kernel;
/* conv2d and linear in int8 (int8_onednn.c), and what they do around their primitive:
 * the scales of this run's input, before the quantizing reorder; their memories. */
extern const backend_kernel od_conv_int8_kernel, od_linear_int8_kernel;
/* conv2d's and linear's backward on oneDNN's backward weights and data primitives (gemm_bwd_onednn.c) */
extern const backend_kernel od_gemm_bwd_kernel;
/* The backward of batch norm, layer norm, the activations, pooling and softmax on oneDNN's
 * backward primitives (bwd_onednn.c) */
extern const backend_kernel od_plain_bwd_kernel;
/* An activation's oneDNN algorithm and its alpha and beta (false: none); from_dst: the
 * variant whose backward reads the output (relu, relu6, sigmoid, tanh) */
bool od_eltwise_alg(const layer *l, bool from_dst, dnnl_alg_kind_t *alg, float *alpha, float *beta);
/* A pooling layer's oneDNN algorithm, window, strides, dilation and padding; false (c->why
 * says why) where oneDNN's pooling cannot express it */
bool od_pool_params(od_ctx *c, const layer *l, dnnl_alg_kind_t *alg, dnnl_dim_t *k, dnnl_dim_t *s, dnnl_dim_t *dil,
                    dnnl_dim_t *pl, dnnl_dim_t *pr);
void od_quant_prepare(od_quant *q, const float *in);
void od_quant_free(od_quant *q);

/* The chained forward in oneDNN's layouts (link_onednn.c): backend_layers_i.model_link. */
bench_status od_model_link(void *ctx, const model *m, void *const *states, void *const *values, char *impls,
                           size_t impl_len);

#endif
