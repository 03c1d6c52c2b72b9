/* What the CUDA layer implementations share with the cuda backend: the stream, the
 * cuDNN and cuBLAS handles, the math mode, and the error record every checked call
 * writes to. Compiled only when the CUDA toolkit and cuDNN are found. */
#ifndef LAYERBENCH_CUDA_ENV_H
#define LAYERBENCH_CUDA_ENV_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <stdbool.h>
#include <stdio.h>

#include "backend.h"
#include "cudnn_engine.h"

typedef enum cuda_algo_mode {
    CUDA_ALGO_SEARCH,     /* cudnnFind...: time the candidates once, like cudnn.benchmark = True */
    CUDA_ALGO_HEURISTIC,  /* cudnnGet..._v7: cuDNN's first choice, nothing timed */
} cuda_algo_mode;

/* Which of cuDNN's APIs give a convolution its candidates (--conv-api): the legacy
 * API's algorithms (cudnnFind/cudnnGet...), the graph API's engines (conv_graph_cuda.h),
 * or both, timed side by side. */
typedef enum cuda_conv_api { CUDA_CONV_API_BOTH, CUDA_CONV_API_LEGACY, CUDA_CONV_API_GRAPH } cuda_conv_api;

/* A convolution's choice, made once per key (shape, parameters, dtype, layout and the
 * weights' alignment: cudnn_conv_key) for the whole process (as cudnn.benchmark
 * does), so isolated rows, the chained forward, its graph and `bench check` run the same
 * kernel; saved with --algo-cache (cuda_choices_get). */
typedef struct cuda_conv_choice {
    cudnn_conv_key key;
    bool graph;                /* a graph-API engine (tag), else a legacy algorithm */
    cudnn_engine_tag tag;
    int algo;                  /* legacy: cudnnConvolutionFwdAlgo_t or BwdDataAlgo_t */
    int math;                  /* legacy: cudnnMathType_t of the chosen result */
} cuda_conv_choice;

typedef struct cuda_env {
    int device;
    cudaStream_t stream;
    cudnnHandle_t cudnn;
    cublasHandle_t cublas;
    bool tf32;                 /* the convolution being set up may use math beyond FMA (its
                                  dtype is tf32, bf16 or fp16): its setup sets it from the
                                  layer, for the search's helpers */
    cuda_algo_mode algo;
    cuda_conv_api conv_api;
    bool engine_forced;        /* LAYERBENCH_CUDNN_ENGINE: every convolution runs this engine */
    cudnn_engine_tag engine;
    bool failed;               /* a checked call failed since the last cuda_env_clear; error says which */
    char error[512];
    cuda_conv_choice *conv_choices; /* owned; n_conv_choices entries */
    int n_conv_choices;
    char **given_keys, **given_values; /* --algo-cache: choices to take, as text; n_given */
    int n_given;
    int stale;                 /* given choices that no longer applied: searched again */
} cuda_env;

/* Forgets the last failure (and the runtime's last, non-sticky error), so one failed
 * layer does not fail the next: called before each layer's setup. A sticky error (a
 * corrupted context) shows up again at the next call. */
void cuda_env_clear(cuda_env *env);

/* The key of layer l's convolution with its weights at align_w bytes (NCHW: the
 * layout of every tensor this backend holds). */
void cuda_conv_key(const layer *l, int align_w, cudnn_conv_key *k);
/* The choice made or given (--algo-cache) for a key, or NULL. */
const cuda_conv_choice *cuda_conv_choice_find(cuda_env *env, const cudnn_conv_key *k);
void cuda_conv_choice_add(cuda_env *env, const cuda_conv_choice *c);
/* A choice found not to apply any more: forgotten, counted stale, searched again. */
void cuda_conv_choice_stale(cuda_env *env, const cudnn_conv_key *k);

/* Records the first failure: "file:line: call failed: library error string", with
 * cuDNN's own last message where it has one. */
void cuda_env_fail(cuda_env *env, const char *file, int line, const char *call, const char *what);

/* Every CUDA, cuDNN and cuBLAS call goes through one of these. They evaluate to true
 * when the call succeeded; on failure the call, file, line and error string are kept. */
#define CUDA_OK(env, call)                                                                       \
    cuda_check_rt((env), (call), __FILE__, __LINE__, #call)
#define CUDNN_OK(env, call)                                                                      \
    cuda_check_dnn((env), (call), __FILE__, __LINE__, #call)
#define CUBLAS_OK(env, call)                                                                     \
    cuda_check_blas((env), (call), __FILE__, __LINE__, #call)

static inline bool cuda_check_rt(cuda_env *env, cudaError_t e, const char *file, int line, const char *call)
{
    if (e == cudaSuccess)
        return true;
    cuda_env_fail(env, file, line, call, cudaGetErrorString(e));
    return false;
}

void cuda_env_fail_dnn(cuda_env *env, const char *file, int line, const char *call, cudnnStatus_t s);

static inline bool cuda_check_dnn(cuda_env *env, cudnnStatus_t s, const char *file, int line, const char *call)
{
    if (s == CUDNN_STATUS_SUCCESS)
        return true;
    cuda_env_fail_dnn(env, file, line, call, s);
    return false;
}

const char *cuda_blas_status_string(cublasStatus_t s);

static inline bool cuda_check_blas(cuda_env *env, cublasStatus_t s, const char *file, int line, const char *call)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return true;
    cuda_env_fail(env, file, line, call, cuda_blas_status_string(s));
    return false;
}

/* A cuDNN NCHW float descriptor for a rank-2 ([N, F] as [N, F, 1, 1]), rank-3 ([N, S, D]
 * as [N, S, D, 1]) or rank-4 shape.
 * False if a library call failed (env->failed) or if cuDNN cannot describe the tensor
 * (more than INT_MAX elements): then why (may be NULL) says so. */
bool cuda_tensor_desc(cuda_env *env, cudnnTensorDescriptor_t *desc, const shape_t *s, char *why, size_t why_len);
/* ... of elements of cuDNN data type t */
bool cuda_tensor_desc_typed(cuda_env *env, cudnnTensorDescriptor_t *desc, const shape_t *s, cudnnDataType_t t,
                            char *why, size_t why_len);
/* cuDNN's data type of a dtype: float for fp32 and tf32, BFLOAT16, HALF. */
cudnnDataType_t cuda_dnn_type(dtype_t t);

/* A convolution's descriptors (conv2d_cuda.c), as cuDNN's forward convolution sees l:
 * the filter of k output channels of cg inputs each, NCHW, of type type; and the
 * convolution (padding, stride, dilation, groups; float compute; FMA math unless
 * env->tf32). False if a call failed (env->failed says which). */
bool cuda_conv_filter_desc(cuda_env *env, const layer *l, int64_t k, int64_t cg, cudnnDataType_t type,
                           cudnnFilterDescriptor_t *w);
bool cuda_conv_desc(cuda_env *env, const layer *l, cudnnConvolutionDescriptor_t *conv);
/* The name of a cudnnConvolutionBwdDataAlgo_t ("BWD_DATA_ALGO_1"). */
const char *cuda_bwd_data_algo_name(int a);

/* The kernels call(user) launches, named from a CUDA graph capture of it
 * (kernels_cuda.c, the backend's kernel_names); false when they cannot be told. */
bool cuda_kernel_names(cuda_env *env, void (*call)(void *user), void *user, char *buf, size_t len);

/* Kernels of our own (cuda_kernels.cu), for kinds cuDNN has no operation for; each
 * returns the launch's error. */
/* ReLU (NaN propagated, as torch) and a same-shape add, float4 where aligned; the bias
 * written into each of rows rows of cols floats (linear's, before a GEMM with beta 1). */
cudaError_t cuda_relu_launch(cudaStream_t s, const float *in, float *out, int64_t n);
cudaError_t cuda_add_launch(cudaStream_t s, const float *a, const float *b, float *out, int64_t n);
cudaError_t cuda_fill_rows_launch(cudaStream_t s, float *y, const float *bias, int64_t rows, int64_t cols);
cudaError_t cuda_hard_activation_launch(cudaStream_t s, int swish, const float *in, float *out, int64_t n);
cudaError_t cuda_upsample_launch(cudaStream_t s, const float *in, float *out, int64_t planes, int64_t h, int64_t w,
                                 int64_t oh, int64_t ow, const int64_t *y0, const int64_t *y1, const int64_t *x0,
                                 const int64_t *x1, const float *ly, const float *lx, int bilinear);
/* Pooling over windows described per axis (layers/cuda/pool_cuda.c): first valid input
 * index f, valid taps n (stepping by the dilation), divisor share d (average only). */
cudaError_t cuda_pool_launch(cudaStream_t s, const float *in, float *out, int64_t planes, int64_t h, int64_t w,
                             int64_t oh, int64_t ow, const int64_t *fy, const int64_t *ny, const float *dy,
                             const int64_t *fx, const int64_t *nx, const float *dx, int64_t dil_y, int64_t dil_x,
                             int is_max);

/* Transformer kinds (layers/cuda/transformer_cuda.c): layernorm over rows of d (gamma
 * and beta may be NULL), gelu (exact or tanh), transpose of [outer, a, mid, b, inner]
 * into [outer, b, mid, a, inner], and out = in + w with w repeated every period. */
cudaError_t cuda_layernorm_launch(cudaStream_t s, const float *in, float *out, int64_t rows, int64_t d,
                                  const float *gamma, const float *beta, float eps);
cudaError_t cuda_gelu_launch(cudaStream_t s, const float *in, float *out, int64_t n, int tanh_approx);
cudaError_t cuda_transpose_launch(cudaStream_t s, const float *in, float *out, int64_t outer, int64_t a, int64_t mid,
                                  int64_t b, int64_t inner);
cudaError_t cuda_add_periodic_launch(cudaStream_t s, const float *in, const float *w, float *out, int64_t n,
                                     int64_t period);
cudaError_t cuda_class_token_launch(cudaStream_t st, const float *in, const float *token, float *out, int64_t n,
                                    int64_t s, int64_t d);

/* The decoder kinds (llm_cuda.c, kernels in cuda_kernels.cu) on tensors of dtype t (the
 * dtype_t value): embedding's rows gathered for n token ids; rmsnorm over rows of d with
 * weight w + offset; rope of [rows = n * tokens, heads * d] with cs the (cos, sin) of each
 * (token, pair); attention (llm_cuda_math.h's lb_attn; cache: the KV cache, sinks: the
 * heads' sinks or NULL; part: splits x queries x (d + 2) floats when splits > 1). */
cudaError_t cuda_embedding_launch(cudaStream_t s, const void *ids, const void *table, void *out, int t, int64_t n,
                                  int64_t d, int64_t vocab);
cudaError_t cuda_rmsnorm_launch(cudaStream_t s, const void *in, const void *w, void *out, int t, int64_t rows,
                                int64_t d, float eps, float offset);
cudaError_t cuda_rope_launch(cudaStream_t s, const void *in, void *out, int t, const float *cs, int64_t rows,
                             int64_t tokens, int64_t heads, int64_t d, int interleaved);
struct lb_attn;
cudaError_t cuda_attention_launch(cudaStream_t s, const void *q, const void *k, const void *v, const void *cache,
                                  const void *sinks, void *out, float *part, int t, const struct lb_attn *a,
                                  int splits, int warps);

/* The kinds of Swin, MaxViT, UNet and DiT (vision_cuda.c, kernels in cuda_kernels.cu):
 * the moves (index_cuda_math.h's lb_move) over n output elements of dtype t; add (mul 0)
 * or mul (1) of two fp32 inputs broadcast to dout; groupnorm of [n, groups x cg,
 * spatial] with gamma and beta after each other in w (affine); scale x + shift. */
struct lb_move;
struct lb_dims;
cudaError_t cuda_move_launch(cudaStream_t s, const void *in, void *out, int t, const struct lb_move *m, int64_t n);
cudaError_t cuda_broadcast_launch(cudaStream_t s, const float *a, const float *b, float *out, int mul,
                                  const struct lb_dims *da, const struct lb_dims *db, const struct lb_dims *dout);
cudaError_t cuda_groupnorm_launch(cudaStream_t s, const void *in, const void *w, void *out, int t, int64_t n,
                                  int64_t groups, int64_t cg, int64_t spatial, float eps, int affine);
cudaError_t cuda_scale_shift_launch(cudaStream_t s, const void *in, void *out, int t, float scale, float shift,
                                    int64_t n);

/* dtypes (cuda_kernels.cu): n elements converted from one type to another (the dtype_t
 * values: fp32 or tf32, bf16, fp16), and an fp32 bias added to each of rows rows of cols
 * elements of type t, rounded back. */
cudaError_t cuda_convert_launch(cudaStream_t s, void *dst, int to, const void *src, int from, int64_t n);
cudaError_t cuda_bias_rows_launch(cudaStream_t s, void *y, int t, const float *bias, int64_t rows, int64_t cols);
/* ... and per channel of an NCHW tensor of type t ([n][c][hw]) */
cudaError_t cuda_bias_channels_launch(cudaStream_t s, void *y, int t, const float *bias, int64_t n, int64_t c,
                                      int64_t hw);

/* timing.stream's read (cuda_kernels.cu): n16 16-byte vectors of buf summed by blocks
 * blocks of 256 threads, the sum written to *sink only when it is NaN (never, for the
 * zeros the buffer holds: the loads cannot be left out) */
cudaError_t cuda_read_launch(cudaStream_t s, const void *buf, int64_t n16, float *sink, int blocks);

/* Holding the stream (backend hold): a one-thread kernel spins until the host writes
 * *release (host-mapped memory), or until timeout_ns have passed, then sets
 * *timed_out. Defined in cuda_hold.cu; returns the launch's error. */
cudaError_t cuda_hold_launch(cudaStream_t stream, const volatile int *release, volatile int *timed_out,
                             unsigned long long timeout_ns);

/* The state of a kind cuDNN runs in one call (elementwise_cuda.c, softmax_cuda.c): its
 * descriptors and what the call reads. cuda_simple_create allocates it with input and output
 * descriptors (NULL with *st set, and the reason in impl when unsupported);
 * cuda_simple_finish hands it on as *state with impl = name when ok, else frees it and
 * returns the failure; cuda_simple_free(ctx, NULL) is a no-op. */
typedef struct cuda_simple {
    cudnnTensorDescriptor_t x, y, extra;   /* extra: bn's per-channel descriptor */
    cudnnActivationDescriptor_t act;
    cudnnOpTensorDescriptor_t op;
    const float *w;
    double eps;
    int c;                                  /* channels (bn) */
} cuda_simple;
cuda_simple *cuda_simple_create(cuda_env *env, const shape_t *in, const shape_t *out, bench_status *st, char *impl,
                             size_t len);
bench_status cuda_simple_finish(cuda_env *env, cuda_simple *s, bool ok, void **state, char *impl, size_t len,
                                const char *name);
void cuda_simple_free(void *ctx, void *state);

/* Relative errors accepted against the reference. FP32 on the GPU: cuDNN's FFT and
 * Winograd algorithms round differently from a direct sum, so convolutions (and linear
 * layers) get 1e-4; TF32 keeps 10 bits of mantissa: 5e-3. Exact kinds (relu, max
 * pooling, add, views) stay exact; the rest get 1e-5. */
double cuda_gemm_tolerance(void *env, const layer *l);
double cuda_float_tolerance(void *env, const layer *l);

/* bf16 and fp16 (convert_cuda.c): linear through cublasGemmEx (16-bit tensors, fp32
 * sums); every other kind on fp32 copies around its fp32 kernel, converted on the
 * device in the timed run, impl saying so; the fp32 kernel of a kind. */
extern const backend_kernel cuda_linear_half_kernel, cuda_via_f32_kernel;
const backend_kernel *cuda_fp32_kernel(layer_kind kind);
/* ... and the fp32 kernel of a kind's backward (NULL where it has none) */
const backend_kernel *cuda_fp32_backward_kernel(layer_kind kind);

/* The kernels of the table in backend_cuda.c, one file per kind family. */
extern const backend_kernel cuda_conv2d_kernel, cuda_batchnorm2d_kernel, cuda_activation_kernel, cuda_pool_kernel,
    cuda_view_kernel, cuda_linear_kernel, cuda_softmax_kernel, cuda_add_kernel, cuda_mul_kernel, cuda_concat_kernel,
    cuda_hard_activation_kernel, cuda_conv_transpose2d_kernel, cuda_upsample_kernel, cuda_layernorm_kernel,
    cuda_gelu_kernel, cuda_multihead_attention_kernel, cuda_transpose_kernel, cuda_class_token_kernel,
    cuda_pos_embedding_kernel, cuda_select_kernel;
extern const backend_kernel cuda_mean_kernel, cuda_slice_kernel, cuda_layer_scale_kernel;
/* embedding, rmsnorm, rope and attention (llm_cuda.c), on every dtype; roll, patch_merge,
 * window_partition, window_merge, groupnorm, scale_shift and matmul (vision_cuda.c) */
extern const backend_kernel cuda_llm_kernel, cuda_move_kernel, cuda_groupnorm_kernel, cuda_scale_shift_kernel,
    cuda_matmul_kernel;
/* The backward kernels (backend.h): conv2d and linear (backward_cuda.c, on their dtype),
 * add, mul, batch norm, the activations cuDNN has, pooling and softmax. */
extern const backend_kernel cuda_conv2d_bwd_kernel, cuda_linear_bwd_kernel, cuda_add_bwd_kernel, cuda_mul_bwd_kernel,
    cuda_batchnorm2d_bwd_kernel, cuda_activation_bwd_kernel, cuda_pool_bwd_kernel, cuda_softmax_bwd_kernel;

#endif
