#include "cuda_env.h"

#include <limits.h>
#include <string.h>

void cuda_env_fail(cuda_env *env, const char *file, int line, const char *call, const char *what)
{
    if (env->failed)
        return; /* keep the first failure: later ones are usually its consequences */
    const char *base = strrchr(file, '/');
    snprintf(env->error, sizeof env->error, "%s:%d: %s failed: %s", base ? base + 1 : file, line, call, what);
    env->failed = true;
}

const char *cuda_blas_status_string(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "unknown cuBLAS status";
    }
}

bool cuda_tensor_desc(cuda_env *env, cudnnTensorDescriptor_t *desc, const shape_t *s)
{
    int64_t d[4] = {s->d[0], s->d[1], s->rank == 4 ? s->d[2] : 1, s->rank == 4 ? s->d[3] : 1};
    for (int i = 0; i < 4; i++)
        if (d[i] > INT_MAX)
            return false;
    return CUDNN_OK(env, cudnnCreateTensorDescriptor(desc)) &&
           CUDNN_OK(env, cudnnSetTensor4dDescriptor(*desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)d[0], (int)d[1],
                                                    (int)d[2], (int)d[3]));
}
