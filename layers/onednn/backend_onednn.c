/* The onednn backend's context and its kernel table (the layers are in layer_onednn.c and
 * one file per kind family; onednn.h says how layouts are handled). */
#include <stdlib.h>
#include <string.h>

#include "onednn.h"

static bench_status od_init(const backend_options *opt, void **ctx, char *err, size_t errlen)
{
    od_ctx *c = xcalloc(1, sizeof *c);
    bench_status st = backend_cpu_ops.device.init(opt, &c->cpu, err, errlen);
    if (st != BENCH_OK) {
        free(c);
        return st;
    }
    if (dnnl_engine_create(&c->engine, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&c->stream, c->engine, dnnl_stream_default_flags) != dnnl_success) {
        snprintf(err, errlen, "oneDNN cannot create its CPU engine and stream");
        if (c->engine)
            dnnl_engine_destroy(c->engine);
        backend_cpu_ops.device.free(c->cpu);
        free(c);
        return BENCH_ERR_BACKEND;
    }
    const dnnl_version_t *v = dnnl_version();
    const char *isa_name;
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: isa_name = "sse41"; break;
    case dnnl_cpu_isa_avx: isa_name = "avx"; break;
    case dnnl_cpu_isa_avx2: isa_name = "avx2"; break;
    case dnnl_cpu_isa_avx2_vnni: isa_name = "avx2_vnni"; break;
    case dnnl_cpu_isa_avx512_core: isa_name = "avx512_core"; break;
    case dnnl_cpu_isa_avx512_core_vnni: isa_name = "avx512_core_vnni"; break;
    case dnnl_cpu_isa_avx512_core_bf16: isa_name = "avx512_core_bf16"; break;
    case dnnl_cpu_isa_avx512_core_amx: isa_name = "avx512_core_amx"; break;
    default: isa_name = "other"; break;
    }
    c->description = xasprintf("{\"onednn\": \"%d.%d.%d\", \"onednn_git\": \"%s\", \"onednn_cpu_runtime\": %s, "
                               "\"onednn_isa\": \"%s\", \"layouts\": \"oneDNN's: isolated rows reorder their "
                               "inputs at setup; the chained forward keeps values in oneDNN's layouts between "
                               "its primitives and times the reorders left as parts\", \"cpu\": %s}",
                               v->major, v->minor, v->patch, v->hash ? v->hash : "",
                               v->cpu_runtime == DNNL_RUNTIME_OMP ? "\"OpenMP\"" : "\"other\"", isa_name,
                               backend_cpu_ops.device.describe(c->cpu));
    *ctx = c;
    return BENCH_OK;
}

static void od_free(void *ctx)
{
    od_ctx *c = ctx;
    dnnl_stream_destroy(c->stream);
    dnnl_engine_destroy(c->engine);
    backend_cpu_ops.device.free(c->cpu);
    free(c->description);
    free(c);
}

static bench_status od_sync(void *ctx)
{
    od_ctx *c = ctx;
    OD_OK(c, dnnl_stream_wait(c->stream));
    return c->failed ? BENCH_ERR_BACKEND : BENCH_OK;
}

static double od_timer_stop(void *ctx)
{
    od_ctx *c = ctx;
    double s = backend_cpu_ops.timing.timer_stop(c->cpu);
    return c->failed ? -1.0 : s;
}

static const char *od_last_error(void *ctx) { return ((od_ctx *)ctx)->error; }
static void od_clear_error(void *ctx)
{
    od_ctx *c = ctx;
    c->failed = false;
    c->error[0] = 0;
}
static const char *od_describe(void *ctx) { return ((od_ctx *)ctx)->description; }
/* The cpu backend's own, on its context. */
static void *od_alloc(void *ctx, size_t bytes) { return backend_cpu_ops.device.alloc(((od_ctx *)ctx)->cpu, bytes); }
static void od_release(void *ctx, void *p) { backend_cpu_ops.device.release(((od_ctx *)ctx)->cpu, p); }
static bench_status od_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    return backend_cpu_ops.device.upload(((od_ctx *)ctx)->cpu, dst, src, bytes);
}
static void od_convert(void *ctx, void *dst, dtype_t to, const void *src, dtype_t from, int64_t n)
{
    backend_cpu_ops.device.convert(((od_ctx *)ctx)->cpu, dst, to, src, from, n);
}
static void od_timer_start(void *ctx) { backend_cpu_ops.timing.timer_start(((od_ctx *)ctx)->cpu); }
static void od_flush_cache(void *ctx) { backend_cpu_ops.timing.flush_cache(((od_ctx *)ctx)->cpu); }
static void od_warnings(void *ctx, char *buf, size_t len) { backend_cpu_ops.device.warnings(((od_ctx *)ctx)->cpu, buf, len); }
static bench_status od_marks_prepare(void *ctx, int n) { return backend_cpu_ops.timing.marks_prepare(((od_ctx *)ctx)->cpu, n); }
static void od_timer_mark(void *ctx, int i) { backend_cpu_ops.timing.timer_mark(((od_ctx *)ctx)->cpu, i); }
static void od_marks_read(void *ctx, double *s, int n) { backend_cpu_ops.timing.marks_read(((od_ctx *)ctx)->cpu, s, n); }
static int od_thread_count(void *ctx) { return backend_cpu_ops.device.thread_count(((od_ctx *)ctx)->cpu); }
/* int8's ceiling: oneDNN's u8 x s8 -> s32 GEMM (VNNI where the CPU has it), the
 * products counted as FLOPs are (2 per multiply-add), as int8 rows count theirs. */
typedef struct int8_probe {
    uint8_t *a;
    int8_t *b;
    int32_t *c;
    int64_t n;
    dnnl_status_t st;
} int8_probe;

static void run_gemm_u8s8s32(void *arg)
{
    int8_probe *p = arg;
    int32_t co = 0;
    dnnl_dim_t n = p->n;
    p->st = dnnl_gemm_u8s8s32('N', 'N', 'F', n, n, n, 1.0f, p->a, n, 0, p->b, n, 0, 0.0f, p->c, n, &co);
}

static bench_status od_peaks(void *ctx, backend_peaks *pk)
{
    od_ctx *c = ctx;
    bench_status st = backend_cpu_ops.device.peaks(c->cpu, pk);
    if (st != BENCH_OK)
        return st;
    int8_probe p = {.n = 1536};
    size_t nn = (size_t)(p.n * p.n);
    p.a = malloc(nn), p.b = malloc(nn), p.c = malloc(nn * sizeof *p.c);
    if (p.a && p.b && p.c) {
        for (size_t i = 0; i < nn; i++) /* small values: no overflow, never all zero */
            p.a[i] = (uint8_t)(i % 7 + 1), p.b[i] = (int8_t)(i % 5) - 2;
        double s = bench_best_seconds(run_gemm_u8s8s32, &p, 0.1);
        if (p.st == dnnl_success) {
            pk->dtype_flops_per_s[DTYPE_INT8] = 2.0 * (double)p.n * (double)p.n * (double)p.n / s;
            snprintf(pk->dtype_probe[DTYPE_INT8], sizeof pk->dtype_probe[DTYPE_INT8],
                     "dnnl_gemm_u8s8s32 %lldx%lldx%lld, %d threads, best of runs", (long long)p.n, (long long)p.n,
                     (long long)p.n, od_thread_count(ctx));
        }
    }
    free(p.a), free(p.b), free(p.c);
    return BENCH_OK;
}
static double od_canary(void *ctx) { return backend_cpu_ops.timing.canary(((od_ctx *)ctx)->cpu); }
static double od_stream(void *ctx) { return backend_cpu_ops.timing.stream(((od_ctx *)ctx)->cpu); }

/* The kernel table: the kinds oneDNN has a primitive for run it (or, in configurations it
 * cannot express, fall back onto the cpu backend's kernel inside their setup); the others
 * run the cpu backend's kernel. */
/* bf16 and fp16 take the same kernels: a primitive in that data type where oneDNN has an
 * implementation on this CPU (bf16 needs AVX512_BF16, or AVX-512 with conversions; fp16
 * none in oneDNN 2.6), else, as for the kinds it has no primitive for, the cpu backend's
 * kernel, and impl says why. */
#define OD_NO_TF32 "tf32 is a math mode of NVIDIA's tensor cores: a CPU has none (run fp32)"
/* int8 (dtype.h): the quantizing kinds on s8 primitives; the others run in fp32 (their
 * fp32 entry, layer_compute_dtype), so their int8 cells stay empty. */
#define OD_ROW(kind, k)                                                                                        \
    [kind][DTYPE_FP32] = {&k}, [kind][DTYPE_TF32] = {NULL, OD_NO_TF32}, [kind][DTYPE_BF16] = {&k},            \
    [kind][DTYPE_FP16] = {&k}

static const backend_kernel_table od_kernels = {
    OD_ROW(LAYER_CONV2D, od_conv_kernel),
    [LAYER_CONV2D][DTYPE_INT8] = {&od_conv_int8_kernel},
    [LAYER_LINEAR][DTYPE_INT8] = {&od_linear_int8_kernel},
    OD_ROW(LAYER_BATCHNORM2D, od_batchnorm_kernel),
    OD_ROW(LAYER_RELU, od_eltwise_kernel),
    OD_ROW(LAYER_RELU6, od_eltwise_kernel),
    OD_ROW(LAYER_SIGMOID, od_eltwise_kernel),
    OD_ROW(LAYER_SILU, od_eltwise_kernel),
    OD_ROW(LAYER_HARDSWISH, od_eltwise_kernel),
    OD_ROW(LAYER_TANH, od_eltwise_kernel),
    OD_ROW(LAYER_GELU, od_eltwise_kernel),
    OD_ROW(LAYER_MAXPOOL2D, od_pool_kernel),
    OD_ROW(LAYER_AVGPOOL2D, od_pool_kernel),
    OD_ROW(LAYER_ADAPTIVE_AVGPOOL2D, od_pool_kernel),
    OD_ROW(LAYER_LINEAR, od_linear_kernel),
    OD_ROW(LAYER_SOFTMAX, od_softmax_kernel),
    OD_ROW(LAYER_ADD, od_binary_kernel),
    OD_ROW(LAYER_MUL, od_binary_kernel),
    OD_ROW(LAYER_LAYERNORM, od_layernorm_kernel),
    OD_ROW(LAYER_FLATTEN, od_cpu_kernel),
    OD_ROW(LAYER_DROPOUT, od_cpu_kernel),
    OD_ROW(LAYER_CONCAT, od_cpu_kernel),
    OD_ROW(LAYER_HARDSIGMOID, od_cpu_kernel),
    OD_ROW(LAYER_STOCHASTIC_DEPTH, od_cpu_kernel),
    OD_ROW(LAYER_CONV_TRANSPOSE2D, od_cpu_kernel),
    OD_ROW(LAYER_UPSAMPLE, od_cpu_kernel),
    OD_ROW(LAYER_MULTIHEAD_ATTENTION, od_cpu_kernel),
    OD_ROW(LAYER_TRANSPOSE, od_cpu_kernel),
    OD_ROW(LAYER_CLASS_TOKEN, od_cpu_kernel),
    OD_ROW(LAYER_POS_EMBEDDING, od_cpu_kernel),
    OD_ROW(LAYER_SELECT, od_cpu_kernel),
    OD_ROW(LAYER_EMBEDDING, od_cpu_kernel),
    OD_ROW(LAYER_RMSNORM, od_cpu_kernel),
    OD_ROW(LAYER_ROPE, od_cpu_kernel),
    OD_ROW(LAYER_ATTENTION, od_cpu_kernel),
    OD_ROW(LAYER_MOE, od_cpu_kernel),
    OD_ROW(LAYER_MEAN, od_cpu_kernel),
    OD_ROW(LAYER_GROUPNORM, od_cpu_kernel), /* oneDNN 2.6 has no group normalization (3.3 does) */
    OD_ROW(LAYER_CHANNEL_SHUFFLE, od_cpu_kernel),
    OD_ROW(LAYER_SLICE, od_cpu_kernel),
    OD_ROW(LAYER_PERMUTE, od_cpu_kernel),
    OD_ROW(LAYER_LAYER_SCALE, od_cpu_kernel),
    OD_ROW(LAYER_ROLL, od_cpu_kernel),
    OD_ROW(LAYER_PATCH_MERGE, od_cpu_kernel),
    OD_ROW(LAYER_WINDOW_ATTENTION, od_cpu_kernel), /* oneDNN 2.6 has no attention primitive */
    OD_ROW(LAYER_WINDOW_PARTITION, od_cpu_kernel),
    OD_ROW(LAYER_WINDOW_MERGE, od_cpu_kernel),
    OD_ROW(LAYER_RESHAPE, od_cpu_kernel),
    OD_ROW(LAYER_MODEL_INPUT, od_cpu_kernel),
    OD_ROW(LAYER_SCALE_SHIFT, od_cpu_kernel), /* oneDNN's eltwise linear would do: not wired yet */
    OD_ROW(LAYER_MATMUL, od_cpu_kernel),      /* oneDNN's matmul primitive would do: not wired yet */
    OD_ROW(LAYER_MLA, od_cpu_kernel),
};

/* The backward (backend.h): conv2d and linear, batch and layer norm, the activations,
 * pooling and softmax on oneDNN's backward primitives (bf16 too, where this oneDNN has
 * them for the CPU), the other kinds on the cpu backend's backward kernels (impl "cpu
 * kernel: ...", 16-bit on fp32 copies). */
#define OD_BWD_ROW(kind, k)                                                                                    \
    [kind][DTYPE_FP32] = {&k}, [kind][DTYPE_TF32] = {NULL, OD_NO_TF32}, [kind][DTYPE_BF16] = {&k},             \
    [kind][DTYPE_FP16] = {&k}

/* The optimizer's update: the cpu backend's loop (oneDNN has no optimizer primitive) */
static void od_optimizer_update(void *ctx, const backend_optimizer_args *a, float *w, const float *g, float *m, float *v,
                                int64_t n)
{
    backend_cpu_ops.layers.optimizer_update(((od_ctx *)ctx)->cpu, a, w, g, m, v, n);
}

static const backend_kernel_table od_backward = {
    OD_BWD_ROW(LAYER_CONV2D, od_gemm_bwd_kernel),
    OD_BWD_ROW(LAYER_LINEAR, od_gemm_bwd_kernel),
    OD_BWD_ROW(LAYER_BATCHNORM2D, od_plain_bwd_kernel),
    OD_BWD_ROW(LAYER_RELU, od_plain_bwd_kernel),
    OD_BWD_ROW(LAYER_RELU6, od_plain_bwd_kernel),
    OD_BWD_ROW(LAYER_SIGMOID, od_plain_bwd_kernel),
    OD_BWD_ROW(LAYER_SILU, od_plain_bwd_kernel),
    OD_BWD_ROW(LAYER_TANH, od_plain_bwd_kernel),
    OD_BWD_ROW(LAYER_HARDSWISH, od_plain_bwd_kernel),
    OD_BWD_ROW(LAYER_HARDSIGMOID, od_cpu_kernel),
    OD_BWD_ROW(LAYER_GELU, od_plain_bwd_kernel),
    OD_BWD_ROW(LAYER_ADD, od_cpu_kernel),
    OD_BWD_ROW(LAYER_MUL, od_cpu_kernel),
    OD_BWD_ROW(LAYER_MAXPOOL2D, od_plain_bwd_kernel),
    OD_BWD_ROW(LAYER_AVGPOOL2D, od_plain_bwd_kernel),
    OD_BWD_ROW(LAYER_ADAPTIVE_AVGPOOL2D, od_plain_bwd_kernel),
    OD_BWD_ROW(LAYER_LAYERNORM, od_plain_bwd_kernel),
    OD_BWD_ROW(LAYER_RMSNORM, od_cpu_kernel),
    OD_BWD_ROW(LAYER_SOFTMAX, od_plain_bwd_kernel),
    OD_BWD_ROW(LAYER_EMBEDDING, od_cpu_kernel),
    OD_BWD_ROW(LAYER_ROPE, od_cpu_kernel),
    OD_BWD_ROW(LAYER_ATTENTION, od_cpu_kernel),
    OD_BWD_ROW(LAYER_MULTIHEAD_ATTENTION, od_cpu_kernel),
    OD_BWD_ROW(LAYER_TRANSPOSE, od_cpu_kernel),
    OD_BWD_ROW(LAYER_CHANNEL_SHUFFLE, od_cpu_kernel),
    OD_BWD_ROW(LAYER_CLASS_TOKEN, od_cpu_kernel),
    OD_BWD_ROW(LAYER_POS_EMBEDDING, od_cpu_kernel),
    OD_BWD_ROW(LAYER_SELECT, od_cpu_kernel),
    OD_BWD_ROW(LAYER_CONCAT, od_cpu_kernel),
    OD_BWD_ROW(LAYER_MEAN, od_cpu_kernel),
    OD_BWD_ROW(LAYER_SCALE_SHIFT, od_cpu_kernel),
    OD_BWD_ROW(LAYER_DROPOUT, od_cpu_kernel),
    OD_BWD_ROW(LAYER_FLATTEN, od_cpu_kernel),
    OD_BWD_ROW(LAYER_RESHAPE, od_cpu_kernel),
};

const backend_ops backend_onednn_ops = {
    .api = BACKEND_API,
    .name = "onednn",
    .device_memory = false,
    .device = {.init = od_init, .free = od_free, .alloc = od_alloc, .release = od_release, .upload = od_copy,
               .download = od_copy, .convert = od_convert, .sync = od_sync, .thread_count = od_thread_count, .describe = od_describe,
               .warnings = od_warnings, .peaks = od_peaks, .last_error = od_last_error,
               .clear_error = od_clear_error},
    .timing = {.timer_start = od_timer_start, .timer_stop = od_timer_stop, .flush_cache = od_flush_cache,
               .marks_prepare = od_marks_prepare, .timer_mark = od_timer_mark, .marks_read = od_marks_read,
               .canary = od_canary, .stream = od_stream},
    .layers = {.kernels = &od_kernels, .model_link = od_model_link, .backward = &od_backward,
               .optimizer_update = od_optimizer_update},
};
