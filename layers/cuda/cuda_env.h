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

#include "layer.h"
#include "util.h"

typedef enum cuda_algo_mode {
    CUDA_ALGO_SEARCH,     /* cudnnFind...: time the candidates once, like cudnn.benchmark = True */
    CUDA_ALGO_HEURISTIC,  /* cudnnGet..._v7: cuDNN's first choice, nothing timed */
} cuda_algo_mode;

typedef struct cuda_env {
    int device;
    cudaStream_t stream;
    cudnnHandle_t cudnn;
    cublasHandle_t cublas;
    bool tf32;                 /* allow TF32 in convolutions and GEMMs */
    cuda_algo_mode algo;
    bool failed;               /* a checked call failed; error says which */
    char error[512];
} cuda_env;

/* Records the first failure: "file:line: call: library error string". */
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

static inline bool cuda_check_dnn(cuda_env *env, cudnnStatus_t s, const char *file, int line, const char *call)
{
    if (s == CUDNN_STATUS_SUCCESS)
        return true;
    cuda_env_fail(env, file, line, call, cudnnGetErrorString(s));
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

/* A cuDNN NCHW float descriptor for a rank-2 ([N, F] as [N, F, 1, 1]) or rank-4 shape;
 * false (unsupported) if a dimension does not fit an int. */
bool cuda_tensor_desc(cuda_env *env, cudnnTensorDescriptor_t *desc, const shape_t *s);

/* The per-kind implementation table entry, as on the CPU (layers/cpu/cpu_kernels.h). */
typedef struct cuda_kernel {
    /* Untimed: descriptors, algorithm choice, workspace. BENCH_ERR_UNSUPPORTED when
     * cuDNN/cuBLAS cannot do this configuration (e.g. adaptive pooling with uneven
     * windows); the reason goes into impl. */
    bench_status (*setup)(cuda_env *env, const layer *l, const float *w, void **state, char *impl, size_t impl_len,
                          int64_t *workspace_bytes);
    /* Enqueues the layer on env->stream: no allocation, no synchronisation. */
    void (*run)(cuda_env *env, void *state, const float *in, const float *in2, float *out);
    void (*free)(cuda_env *env, void *state);
} cuda_kernel;

extern const cuda_kernel cuda_conv2d_kernel, cuda_batchnorm2d_kernel, cuda_activation_kernel, cuda_pool_kernel,
    cuda_view_kernel, cuda_linear_kernel, cuda_softmax_kernel, cuda_add_kernel;

#endif
