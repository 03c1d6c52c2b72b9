/* The kinds Swin, MaxViT, UNet and DiT added (layers/window.c, transformer.c, merge.c and
 * activation.c say what each computes), on the GPU:
 * - roll, patch_merge, window_partition and window_merge: copies in the layer's own dtype,
 *   a thread per output element, its source from index_cuda_math.h with the parameters
 *   cuda_move_plan (cuda_plan.c) gives (both tested on the host);
 * - groupnorm: a block per (sample, group), fp32 sums, in the layer's dtype;
 * - scale_shift: element-wise in the layer's dtype;
 * - matmul: cuBLAS's strided batched GEMM, cublasSgemmStridedBatched in fp32 (TF32 math
 *   for tf32), cublasGemmStridedBatchedEx on bf16 and fp16 with fp32 sums.
 * window_attention has no cuda kernel. Written and compiled; not run on a GPU yet. */
#include <limits.h>
#include <stdlib.h>

#include "cuda_env.h"
#include "cuda_plan.h"

typedef struct vision_cuda {
    const layer *l;
    const void *w;
    lb_move move;
    int batch, m, k, n;  /* matmul */
} vision_cuda;

static void vision_free(void *ctx, void *state)
{
    (void)ctx;
    free(state);
}

static bench_status vision_setup(void *ctx, const layer *l, const void *w, void **state, char *impl, size_t len,
                                 int64_t *ws)
{
    (void)ctx;
    *ws = 0;
    vision_cuda *s = calloc(1, sizeof *s);
    if (!s)
        return BENCH_ERR_NOMEM;
    s->l = l, s->w = w;
    if (l->kind == LAYER_MATMUL) {
        int64_t batch, mm, k, n;
        layer_matmul_dims(l, &batch, &mm, &k, &n);
        if (batch > INT_MAX || mm > INT_MAX || k > INT_MAX || n > INT_MAX) {
            free(s);
            snprintf(impl, len, "dimensions beyond cuBLAS's int");
            return BENCH_ERR_UNSUPPORTED;
        }
        s->batch = (int)batch, s->m = (int)mm, s->k = (int)k, s->n = (int)n;
    } else if (l->kind != LAYER_GROUPNORM && l->kind != LAYER_SCALE_SHIFT && !cuda_move_plan(l, &s->move, impl, len)) {
        free(s);
        return BENCH_ERR_UNSUPPORTED;
    }
    if (l->kind == LAYER_MATMUL)
        snprintf(impl, len, "%s, %s", l->dtype == DTYPE_FP32 || l->dtype == DTYPE_TF32 ? "cublasSgemmStridedBatched"
                                                                                         : "cublasGemmStridedBatchedEx",
                 l->dtype == DTYPE_TF32 ? "TF32" : l->dtype == DTYPE_FP32 ? "FP32" : "fp32 compute");
    else
        snprintf(impl, len, "%s kernel (layerbench), %s", layer_kind_name(l->kind), dtype_name(l->dtype));
    *state = s;
    return BENCH_OK;
}

static void move_run(void *ctx, const layer *l_, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)l_, (void)w_;
    vision_cuda *s = state;
    CUDA_OK(env, cuda_move_launch(env->stream, ins[0], out, (int)s->l->dtype, &s->move, shape_numel(&s->l->out)));
}

static void groupnorm_run(void *ctx, const layer *l_, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)l_, (void)w_;
    vision_cuda *s = state;
    const layer *l = s->l;
    int64_t c = l->p.num_channels, g = l->p.num_groups, spatial = shape_numel(&l->in) / (l->in.d[0] * c);
    CUDA_OK(env, cuda_groupnorm_launch(env->stream, ins[0], s->w, out, (int)l->dtype, l->in.d[0], g, c / g, spatial,
                                       (float)l->p.eps, l->p.affine));
}

static void scale_shift_run(void *ctx, const layer *l_, void *state, const void *const *ins, const void *w_,
                            void *out)
{
    cuda_env *env = ctx;
    (void)l_, (void)w_;
    vision_cuda *s = state;
    const layer *l = s->l;
    CUDA_OK(env, cuda_scale_shift_launch(env->stream, ins[0], out, (int)l->dtype, (float)l->p.attn_scale,
                                         (float)l->p.shift, shape_numel(&l->in)));
}

/* Row-major C[M, N] = A[M, K] B[K, N] per batch is, read column-major, C^T = B^T A^T */
static void matmul_run(void *ctx, const layer *l_, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)l_, (void)w_;
    vision_cuda *s = state;
    const layer *l = s->l;
    const float one = 1.0f, zero = 0.0f;
    long long sa = (long long)s->m * s->k, sb = (long long)s->k * s->n, sc = (long long)s->m * s->n;
    if (l->dtype == DTYPE_FP32 || l->dtype == DTYPE_TF32) {
        CUBLAS_OK(env, cublasSetMathMode(env->cublas,
                                         l->dtype == DTYPE_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
        CUBLAS_OK(env, cublasSgemmStridedBatched(env->cublas, CUBLAS_OP_N, CUBLAS_OP_N, s->n, s->m, s->k, &one, ins[1],
                                                 s->n, sb, ins[0], s->k, sa, &zero, out, s->n, sc, s->batch));
        return;
    }
    cudaDataType_t t = l->dtype == DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    CUBLAS_OK(env, cublasGemmStridedBatchedEx(env->cublas, CUBLAS_OP_N, CUBLAS_OP_N, s->n, s->m, s->k, &one, ins[1], t,
                                              s->n, sb, ins[0], t, s->k, sa, &zero, out, t, s->n, sc, s->batch,
                                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

const backend_kernel cuda_move_kernel = {.setup = vision_setup, .run = move_run, .free = vision_free};
const backend_kernel cuda_groupnorm_kernel = {.setup = vision_setup, .run = groupnorm_run, .free = vision_free,
                                              .tolerance = cuda_float_tolerance};
const backend_kernel cuda_scale_shift_kernel = {.setup = vision_setup, .run = scale_shift_run, .free = vision_free,
                                                .tolerance = cuda_float_tolerance};
const backend_kernel cuda_matmul_kernel = {.setup = vision_setup, .run = matmul_run, .free = vision_free,
                                           .tolerance = cuda_gemm_tolerance};
