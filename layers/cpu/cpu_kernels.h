/* CPU implementations of the layer kinds: OpenBLAS for convolution and linear,
 * OpenMP loops for the rest. One file per kind family; the table is in backend_cpu.c. */
#ifndef LAYERBENCH_CPU_KERNELS_H
#define LAYERBENCH_CPU_KERNELS_H

#include "backend.h"

/* What a kernel's search chose for a layer (a kernel's own numbers in algo), kept for
 * the backend's life: a layer set up again (the chained forward after its isolated row)
 * or an identical one runs the same algorithm without searching again, as the cuda
 * backend does with cuDNN's choices. */
typedef struct cpu_choice {
    layer_kind kind;
    dtype_t dtype;
    layer_params p;
    shape_t in;
    int64_t algo[3];
    bool given;         /* from --algo-cache, not searched here: the kernel checks it still applies */
} cpu_choice;

/* A choice given as text (--algo-cache), taken when a layer with its key is set up. */
typedef struct cpu_given {
    char *key;
    int64_t algo[3];
} cpu_given;

typedef struct cpu_choices {
    cpu_choice *v;
    int n;
    cpu_given *given;
    int n_given;
    int stale;          /* given choices the kernels found no longer apply */
    bool forward;       /* --algo-for forward (the default): candidates timed in the forward's
                           conditions (cpu_forward_conditions); false: warm, each alone */
} cpu_choices;

/* A range of memory a candidate keeps between calls (its weights, in the form it reads
 * them). */
typedef struct cpu_span {
    const void *p;
    int64_t bytes;
} cpu_span;

/* Sets the caches as a forward leaves them for a layer whose weights are read once per
 * forward (--algo-for forward): the n spans (the weights as the candidate holds them,
 * and the output, whose lines the layer does not own yet) out of every cache level, then
 * the input read once, as the layer before it left it. Before each timed run of a
 * search. */
void cpu_forward_conditions(const cpu_span *cold, int n, const void *in, int64_t in_bytes);
/* The same where a candidate's weights are not known apart: every cache emptied (the
 * backend's cold flush), then the input read. */
void cpu_forward_conditions_all(void *env, const void *in, int64_t in_bytes);

/* A search's timing in rounds (conv2d's finalists, linear's two ways): each of n
 * candidates run once in turn (prepare, where not NULL, sets the forward's conditions
 * first, untimed), best[k] keeping candidate k's best, in rounds until the fastest is
 * clearly ahead of the next (CPU_SEARCH_CLEAR) or tied with it (CPU_SEARCH_TIE): at least
 * 5 rounds, at most 30 or budget_s seconds of runs. Interleaved, a slow phase of the
 * machine, seconds long on a VM, weighs on every candidate alike. Returns the fastest;
 * a caller breaks a tie its own way. */
#define CPU_SEARCH_TIE 0.02
#define CPU_SEARCH_CLEAR 0.06
int cpu_search_rounds(int n, double budget_s, void (*prepare)(void *user, int k), void (*run)(void *user, int k),
                      void *user, double *best);

/* The choice for a layer like l: one made before, or a given one; NULL when none. */
const cpu_choice *cpu_choice_find(cpu_choices *c, const layer *l);
/* Keeps (or replaces) the choice for layers like l. */
void cpu_choice_add(cpu_choices *c, const layer *l, const int64_t algo[3]);
/* The text key of a layer's choice: kind, input shape and non-default parameters (and
 * the dtype, other than fp32). */
char *cpu_choice_key(const layer *l, char *buf, size_t len);

/* Whether LAYERBENCH_CPU_ATTN_BWD's value e (attention's backward way: plain or blocks;
 * NULL or empty: chosen) is one (cpu_env.c). */
bool cpu_attn_bwd_env_ok(const char *e);

/* The choices the kernels keep under --algo search (the default), from the env a kernel
 * gets (backend_kernel.setup); NULL under --algo heuristic: the rule, no timing. */
cpu_choices *cpu_env_choices(void *env);


/* The kernels of the table in backend_cpu.c, one file per kind family (the vision
 * kinds' first, then the rest). */
extern const backend_kernel cpu_mean_kernel, cpu_groupnorm_kernel, cpu_slice_kernel, cpu_layer_scale_kernel;
extern const backend_kernel cpu_roll_kernel, cpu_patch_merge_kernel, cpu_window_attention_kernel, cpu_window_move_kernel,
    cpu_model_input_kernel, cpu_scale_shift_kernel, cpu_matmul_kernel;
extern const backend_kernel cpu_conv2d_kernel, cpu_batchnorm2d_kernel, cpu_relu_kernel, cpu_relu6_kernel,
    cpu_sigmoid_kernel, cpu_maxpool2d_kernel, cpu_avgpool2d_kernel, cpu_adaptive_avgpool2d_kernel,
    cpu_view_kernel, cpu_linear_kernel, cpu_softmax_kernel, cpu_add_kernel, cpu_mul_kernel, cpu_concat_kernel,
    cpu_silu_kernel, cpu_hardswish_kernel, cpu_hardsigmoid_kernel, cpu_tanh_kernel, cpu_conv_transpose2d_kernel,
    cpu_upsample_kernel, cpu_layernorm_kernel, cpu_gelu_kernel, cpu_multihead_attention_kernel, cpu_transpose_kernel,
    cpu_class_token_kernel, cpu_pos_embedding_kernel, cpu_select_kernel, cpu_embedding_kernel, cpu_rmsnorm_kernel,
    cpu_rope_kernel, cpu_attention_kernel, cpu_moe_kernel, cpu_embedding_16_kernel, cpu_mla_kernel;

/* bf16 and fp16 through fp32 copies of the tensors around the kind's fp32 kernel
 * (convert_cpu.c), where the kind has no kernel in the type; and that fp32 kernel. */
extern const backend_kernel cpu_via_f32_kernel;
/* ... and the backward's: the kind's fp32 backward kernel on fp32 copies (convert_cpu.c);
 * a kind whose 16-bit forward is inference only (batch norm, dropout) in training mode. */
extern const backend_kernel cpu_bwd_via_f32_kernel, cpu_train16_kernel;
/* The activations' and add's and mul's backward reading and writing bf16 or fp16,
 * computing in fp32 by chunks a thread's caches hold (backward_cpu.c) */
extern const backend_kernel cpu_act_bwd16_kernel, cpu_binary_bwd16_kernel;
/* n elements of src (dtype from) into dst (dtype to), on the calling thread: bf16 and
 * fp32 in vectorised loops, the other pairs through dtype_convert (convert_cpu.c) */
void cpu_convert_span(void *dst, dtype_t to, const void *src, dtype_t from, int64_t n);
const backend_kernel *cpu_fp32_backward_kernel(layer_kind kind);
/* The backward kernels (backward_cpu.c; rope's in llm_cpu.c), fp32 */
/* The training step's optimizer update (backend_layers_i.optimizer_update; backward_cpu.c). */
void cpu_optimizer_update(void *ctx, const backend_optimizer_args *a, float *w, const float *g, float *m, float *v,
                          int64_t n);
extern const backend_kernel cpu_conv2d_bwd_kernel, cpu_linear_bwd_kernel, cpu_batchnorm2d_bwd_kernel, cpu_act_bwd_kernel,
    cpu_binary_bwd_kernel, cpu_pool_bwd_kernel, cpu_norm_bwd_kernel, cpu_softmax_bwd_kernel, cpu_embedding_bwd_kernel,
    cpu_rope_bwd_kernel, cpu_attention_bwd_kernel, cpu_multihead_attention_bwd_kernel, cpu_transpose_bwd_kernel,
    cpu_token_bwd_kernel, cpu_spread_bwd_kernel, cpu_dropout_bwd_kernel;
/* dropout: a view, but in training (layer_is_view false) its mask applied */
extern const backend_kernel cpu_dropout_kernel;
/* batch norm's forward in training mode (backward_cpu.c), for a layer of PASS_TRAIN */
void cpu_bn_train_forward(const layer *l, const float *x, const float *w, float *out);
/* conv2d and linear in bf16 on vdpbf16ps (bf16_cpu.c), on fp32 copies where the CPU
 * lacks AVX512_BF16 or LAYERBENCH_CPU_NO_BF16 is set; and whether it has it. */
extern const backend_kernel cpu_conv2d_bf16_kernel, cpu_linear_bf16_kernel;
/* linear's and conv2d's backward in bf16 on the same GEMM tiles (bf16_cpu.c), on fp32
 * copies where they cannot */
extern const backend_kernel cpu_linear_bwd_bf16_kernel, cpu_conv2d_bwd_bf16_kernel;
/* conv2d's columns (backward_cpu.c): output columns [*x0, *x1) of a row whose tap j
 * (along the width) reads inside the input; and im2col of a group's input x [cg, H, W]
 * into col [cg kh kw, OH OW], or back (col2im: col's values added into x) */
void cpu_tap_span(const layer *l, int64_t j, int64_t *x0, int64_t *x1);
void cpu_col_move(const layer *l, float *x, float *col, int64_t cg, bool back);
/* The element-wise kinds reading and writing bf16, computing in fp32 (elementwise_cpu.c). */
extern const backend_kernel cpu_batchnorm2d_bf16_kernel, cpu_relu_bf16_kernel, cpu_relu6_bf16_kernel, cpu_sigmoid_bf16_kernel, cpu_silu_bf16_kernel,
    cpu_hardsigmoid_bf16_kernel, cpu_hardswish_bf16_kernel, cpu_tanh_bf16_kernel, cpu_add_bf16_kernel,
    cpu_mul_bf16_kernel;
bool cpu_has_bf16(void);
const backend_kernel *cpu_fp32_kernel(layer_kind kind);
/* max |x[i]| over n floats (NaN skipped), on the thread pool: int8's input scale. */
float cpu_absmax(const float *x, int64_t n);
/* backend_device_i.convert, on the thread pool. */
void cpu_convert(void *ctx, void *dst, dtype_t to, const void *src, dtype_t from, int64_t n);

/* ISA dispatch. The loops of the memory-bound kinds are compiled three times, for
 * x86-64-v4 (AVX-512), x86-64-v3 (AVX2 + FMA) and the x86-64 baseline (SSE2), and the
 * dynamic loader picks the best the CPU runs (target_clones: an ifunc resolved once).
 * Functions holding an OpenMP region are not cloned (the region's outlined body would
 * keep the baseline ISA): the region calls a cloned function per thread's chunk.
 * LAYERBENCH_NO_ISA_CLONES builds the baseline only. */
#if defined(__x86_64__) && !defined(LAYERBENCH_NO_ISA_CLONES) && \
    ((defined(__clang__) && __clang_major__ >= 14) || (!defined(__clang__) && __GNUC__ >= 12))
#define CPU_ISA_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CPU_ISA_CLONES
#endif


/* This thread's share [*lo, *hi) of n elements split evenly over the threads of the
 * enclosing parallel region, each share a multiple of 64 floats (a cache line
 * times 16) except the last. */
void cpu_thread_span(int64_t n, int64_t *lo, int64_t *hi);

/* Shared loops (calling clones per ISA; a cloned function itself stays static, since
 * clang does not export it under its own name): y = a + b over n floats; the softmax
 * of one contiguous row of n floats (x == y allowed). */
void cpu_add_span(const float *a, const float *b, float *y, int64_t n);
void cpu_softmax_row(const float *x, float *y, int64_t n);
/* y[rows, o] = x[rows, f] W[o, f]^T + b (b may be NULL), on cblas_sgemm. */
void cpu_project(const float *x, const float *wt, const float *b, float *y, int64_t rows, int64_t f, int64_t o);

/* Winograd F(m x m, 3x3), m = 2 or 4, for conv2d (winograd_cpu.c): whether it applies
 * to l (3x3, stride 1, no dilation, one group); with chunks of about chunk_bytes of
 * transformed tiles per thread, the tiles per chunk and the workspace it takes; its
 * setup (weights transformed; NULL when out of memory; freed by cpu_winograd_free) and
 * its run. */
typedef struct cpu_winograd cpu_winograd;
bool cpu_winograd_applies(const layer *l);
int64_t cpu_winograd_tiles(const layer *l, int m, int64_t chunk_bytes);
int64_t cpu_winograd_bytes(const layer *l, int m, int64_t chunk_bytes);
cpu_winograd *cpu_winograd_create(const layer *l, const float *w, int m, int64_t chunk_bytes);
void cpu_winograd_run(const layer *l, cpu_winograd *wg, const float *in, const float *bias, float *out);
void cpu_winograd_free(cpu_winograd *wg);
/* Its transformed weights, which it reads on every call. */
cpu_span cpu_winograd_weights(const cpu_winograd *wg);
/* The register-tiled kernel of the tiled convolutions (pgemm_cpu.c): for r < mr (at
 * most the variant's mr) and j < nr (at most its nr),
 *   c[r*ldc + j] = (accumulate ? c[r*ldc + j] : rbias[r] + cbias[j])
 *                  + sum over t < ntap, k < kc of A_t[k*lda + r*sa] * B_t[k*ldb + j]
 * where A_t = a + atap[t] and B_t = b + btap[t] (NULL offsets: the taps follow each
 * other, t*kc*lda and t*kc*ldb), sa is 1 or 2, rbias and cbias may be NULL, and every b
 * row's full nr columns of the variant are readable. */
typedef struct cpu_pgemm_args {
    int64_t ntap, kc;
    const int64_t *atap, *btap;
    const float *a;
    int64_t lda, sa;
    const float *b;
    int64_t ldb;
    float *c;
    int64_t ldc;
    const float *rbias, *cbias;
    bool accumulate;
} cpu_pgemm_args;
typedef void cpu_pgemm_fn(int mr, int nr, const cpu_pgemm_args *x);
typedef struct cpu_pgemm {
    const char *isa; /* "avx512", "avx2", "generic" */
    int mr, nr;      /* the largest tile */
    cpu_pgemm_fn *kernel;
} cpu_pgemm;
/* The best variant this CPU runs, or the one LAYERBENCH_CPU_GEMM_ISA names if it runs. */
const cpu_pgemm *cpu_pgemm_get(void);
/* LAYERBENCH_CPU_GEMM_ISA's value when it names no variant (the message, in buf), else
 * NULL (unset, or a variant: one this CPU cannot run falls back, and cpu_warnings says). */
const char *cpu_pgemm_env_problem(char *buf, size_t len);
/* Whether LAYERBENCH_CPU_CONV_ALGO's value (NULL: unset) is one conv_forced reads. */
bool cpu_conv_algo_env_ok(const char *value);

/* The relative error accepted against the reference for a convolution Winograd may run:
 * `bench check configs/resnet18.yaml` measured 1.6e-6 to 3.0e-6 on its 3x3 stride-1
 * layers forced through F(4x4) (3.0e-6 with 1024 input channels too), 2.6e-7 to 4.9e-7
 * through F(2x2), 2.8e-7 to 3.0e-7 through im2col. */
#define CPU_WINOGRAD_TOLERANCE 1e-5

/* Element-wise loops below this many elements stay on one thread: a parallel
 * region costs a few microseconds, more than the work. */
#define CPU_PARALLEL_MIN 16384

/* Runs the statement (the last arguments: a loop or a block, commas allowed) under
 * `#pragma <pragma>` where cond holds, else plainly on the calling thread. Not an `if`
 * clause: libgomp still enters its runtime for a region that clause serialises, which
 * cost 1.3-1.5 us per region on the development VM (a 784-float relu measured 1.27 us
 * with it, 0.02 us without). Pragmas inside the statement are written _Pragma("...");
 * an orphaned `omp for` in the plain branch runs all its iterations, as OpenMP says. */
#define CPU_OMP_IF(cond, pragma, ...) \
    do {                              \
        if (cond) {                   \
            _Pragma(pragma) __VA_ARGS__ \
        } else {                      \
            __VA_ARGS__               \
        }                             \
    } while (0)

#endif
