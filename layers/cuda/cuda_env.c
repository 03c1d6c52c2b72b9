#include "cuda_env.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

void cuda_env_fail(cuda_env *env, const char *file, int line, const char *call, const char *what)
{
    if (env->failed)
        return; /* keep the first failure: later ones are usually its consequences */
    const char *base = strrchr(file, '/');
    snprintf(env->error, sizeof env->error, "%s:%d: %s failed: %s", base ? base + 1 : file, line, call, what);
    env->failed = true;
}

void cuda_env_fail_dnn(cuda_env *env, const char *file, int line, const char *call, cudnnStatus_t s)
{
    char last[256] = "", what[384];
    cudnnGetLastErrorString(last, sizeof last);
    snprintf(what, sizeof what, "%s%s%s", cudnnGetErrorString(s), *last ? " (" : "", last);
    if (*last)
        snprintf(what + strlen(what), sizeof what - strlen(what), ")");
    cuda_env_fail(env, file, line, call, what);
}

void cuda_env_clear(cuda_env *env)
{
    env->failed = false;
    env->error[0] = 0;
    (void)cudaGetLastError();
}

void cuda_conv_key(const layer *l, int align_w, cudnn_conv_key *k)
{
    memset(k, 0, sizeof *k);
    k->kind = l->kind;
    k->dtype = l->dtype;
    k->layout = CUDNN_LAYOUT_NCHW;
    k->in = l->in;
    k->p = l->p;
    /* the input and output are taken as 16-byte aligned (conv2d_cuda.c checks them at
     * each run); the weights' alignment is their address's */
    k->align_x = k->align_y = 16;
    k->align_w = align_w;
}

/* Given choice i taken into the made ones (NULL when its value is no choice). */
static const cuda_conv_choice *take_given(cuda_env *env, int i, const cudnn_conv_key *k)
{
    cuda_conv_choice c = {.key = *k};
    bool ok = cudnn_choice_parse(env->given_values[i], &c.graph, &c.tag, &c.algo, &c.math);
    free(env->given_keys[i]), free(env->given_values[i]);
    env->given_keys[i] = env->given_keys[env->n_given - 1];
    env->given_values[i] = env->given_values[env->n_given - 1];
    env->n_given--;
    if (!ok)
        return NULL;
    cuda_conv_choice_add(env, &c);
    return &env->conv_choices[env->n_conv_choices - 1];
}

const cuda_conv_choice *cuda_conv_choice_find(cuda_env *env, const cudnn_conv_key *k)
{
    for (int i = 0; i < env->n_conv_choices; i++)
        if (cudnn_conv_key_equal(&env->conv_choices[i].key, k))
            return &env->conv_choices[i];
    char key[512];
    cudnn_conv_key_format(k, key, sizeof key);
    for (int i = 0; i < env->n_given; i++)
        if (strcmp(env->given_keys[i], key) == 0)
            return take_given(env, i, k);
    return NULL;
}

void cuda_conv_choice_add(cuda_env *env, const cuda_conv_choice *c)
{
    env->conv_choices = xrealloc(env->conv_choices, (size_t)(env->n_conv_choices + 1) * sizeof *env->conv_choices);
    env->conv_choices[env->n_conv_choices++] = *c;
}

void cuda_conv_choice_stale(cuda_env *env, const cudnn_conv_key *k)
{
    for (int i = 0; i < env->n_conv_choices; i++)
        if (cudnn_conv_key_equal(&env->conv_choices[i].key, k)) {
            env->conv_choices[i] = env->conv_choices[--env->n_conv_choices];
            env->stale++;
            return;
        }
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

cudnnDataType_t cuda_dnn_type(dtype_t t)
{
    return t == DTYPE_BF16 ? CUDNN_DATA_BFLOAT16 : t == DTYPE_FP16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

bool cuda_tensor_desc(cuda_env *env, cudnnTensorDescriptor_t *desc, const shape_t *s, char *why, size_t why_len)
{
    return cuda_tensor_desc_typed(env, desc, s, CUDNN_DATA_FLOAT, why, why_len);
}

bool cuda_tensor_desc_typed(cuda_env *env, cudnnTensorDescriptor_t *desc, const shape_t *s, cudnnDataType_t t,
                            char *why, size_t why_len)
{
    int64_t d[4] = {s->d[0], s->d[1], s->rank >= 3 ? s->d[2] : 1, s->rank == 4 ? s->d[3] : 1};
    /* cuDNN's descriptors hold int dimensions and strides: the element count must fit */
    if (shape_numel(s) > INT_MAX) {
        if (why)
            snprintf(why, why_len, "cuDNN cannot describe a tensor of more than %d elements", INT_MAX);
        return false;
    }
    return CUDNN_OK(env, cudnnCreateTensorDescriptor(desc)) &&
           CUDNN_OK(env, cudnnSetTensor4dDescriptor(*desc, CUDNN_TENSOR_NCHW, t, (int)d[0], (int)d[1],
                                                    (int)d[2], (int)d[3]));
}

/* ---- the state of the kinds cuDNN runs in one call (elementwise_cuda.c, softmax_cuda.c) ---- */

void cuda_simple_free(void *ctx, void *state)
{
    (void)ctx;
    cuda_simple *s = state;
    if (!s)
        return;
    cudnnDestroyTensorDescriptor(s->x), cudnnDestroyTensorDescriptor(s->y), cudnnDestroyTensorDescriptor(s->extra);
    cudnnDestroyActivationDescriptor(s->act);
    cudnnDestroyOpTensorDescriptor(s->op);
    free(s);
}

/* Allocates the state with input and output descriptors; NULL with *st set (and the
 * reason in impl when unsupported) on failure. */
cuda_simple *cuda_simple_create(cuda_env *env, const shape_t *in, const shape_t *out, bench_status *st, char *impl,
                               size_t len)
{
    cuda_simple *s = calloc(1, sizeof *s);
    *st = BENCH_ERR_NOMEM;
    if (!s)
        return NULL;
    if (!cuda_tensor_desc(env, &s->x, in, impl, len) || !cuda_tensor_desc(env, &s->y, out, impl, len)) {
        *st = env->failed ? BENCH_ERR_BACKEND : BENCH_ERR_UNSUPPORTED;
        cuda_simple_free(env, s);
        return NULL;
    }
    *st = BENCH_OK;
    return s;
}

bench_status cuda_simple_finish(cuda_env *env, cuda_simple *s, bool ok, void **state, char *impl, size_t len,
                           const char *name)
{
    if (!ok) {
        cuda_simple_free(env, s);
        return env->failed ? BENCH_ERR_BACKEND : BENCH_ERR_UNSUPPORTED;
    }
    snprintf(impl, len, "%s", name);
    *state = s;
    return BENCH_OK;
}

/* ---- tolerances ------------------------------------------------------------------------- */

double cuda_gemm_tolerance(void *env, const layer *l)
{
    (void)env, (void)l;
    return 1e-4; /* tf32's own rounding comes on top: dtype_tolerance */
}

double cuda_float_tolerance(void *env, const layer *l)
{
    (void)env;
    double t = layer_desc_get(l->kind)->tolerance;
    return t == 0.0 ? 0.0 : t > 1e-5 ? t : 1e-5;
}
