/* The CUDA backend: device memory, one non-blocking stream, CUDA events for timing,
 * cuDNN and cuBLAS for the layers (layers/cuda/), an L2 flush for cold samples, a
 * spinning kernel that holds the stream while a sample is queued (cuda_hold.cu), and
 * CUDA graphs for batch mode and the captured forward. Compiled only when the toolkit
 * and cuDNN are found (CMake option LAYERBENCH_CUDA). */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_env.h"

/* The kernel table: (kind, dtype) -> kernel. Adding a kind or a dtype fills its cells
 * here (docs/architecture.md); a cell left empty is an unsupported row. */
/* tf32 is fp32 storage: every kind's fp32 kernel, the GEMM kinds in tensor-core math.
 * bf16 and fp16: linear and matmul on cuBLAS's Ex GEMMs, conv2d on cuDNN, the decoder,
 * window and norm kinds of llm_cuda.c and vision_cuda.c on our kernels in the layer's
 * dtype, the views (nothing runs), the rest on fp32 copies (convert_cuda.c). */
#define CUDA_NO_INT8 "the cuda backend has no int8 kernels"
/* A kind the cuda backend has no kernel for yet: every cell an unsupported row saying why. */
#define CUDA_NO_MOE "moe has no cuda kernel yet (cpu and onednn run it)"
#define CUDA_NO_MLA "mla has no cuda kernel yet (cpu and onednn run it)"
#define CUDA_NONE(kind, why)                                                                                   \
    [kind][DTYPE_FP32] = {NULL, why}, [kind][DTYPE_TF32] = {NULL, why}, [kind][DTYPE_BF16] = {NULL, why},     \
    [kind][DTYPE_FP16] = {NULL, why}, [kind][DTYPE_INT8] = {NULL, why}
#define CUDA_ROW(kind, f32, half)                                                                              \
    [kind][DTYPE_FP32] = {&f32}, [kind][DTYPE_TF32] = {&f32}, [kind][DTYPE_BF16] = {&half},                    \
    [kind][DTYPE_FP16] = {&half}, [kind][DTYPE_INT8] = {NULL, CUDA_NO_INT8}

static const backend_kernel_table cuda_kernels = {
    CUDA_ROW(LAYER_CONV2D, cuda_conv2d_kernel, cuda_conv2d_kernel),
    CUDA_ROW(LAYER_BATCHNORM2D, cuda_batchnorm2d_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_RELU, cuda_activation_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_RELU6, cuda_activation_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_SIGMOID, cuda_activation_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_MAXPOOL2D, cuda_pool_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_AVGPOOL2D, cuda_pool_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_ADAPTIVE_AVGPOOL2D, cuda_pool_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_FLATTEN, cuda_view_kernel, cuda_view_kernel),
    CUDA_ROW(LAYER_LINEAR, cuda_linear_kernel, cuda_linear_half_kernel),
    CUDA_ROW(LAYER_DROPOUT, cuda_view_kernel, cuda_view_kernel),
    CUDA_ROW(LAYER_SOFTMAX, cuda_softmax_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_ADD, cuda_add_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_MUL, cuda_mul_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_CONCAT, cuda_concat_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_SILU, cuda_activation_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_HARDSWISH, cuda_hard_activation_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_HARDSIGMOID, cuda_hard_activation_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_TANH, cuda_activation_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_STOCHASTIC_DEPTH, cuda_view_kernel, cuda_view_kernel),
    CUDA_ROW(LAYER_CONV_TRANSPOSE2D, cuda_conv_transpose2d_kernel, cuda_conv_transpose2d_kernel),
    CUDA_ROW(LAYER_UPSAMPLE, cuda_upsample_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_LAYERNORM, cuda_layernorm_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_GELU, cuda_gelu_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_MULTIHEAD_ATTENTION, cuda_multihead_attention_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_TRANSPOSE, cuda_transpose_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_CLASS_TOKEN, cuda_class_token_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_POS_EMBEDDING, cuda_pos_embedding_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_SELECT, cuda_select_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_EMBEDDING, cuda_llm_kernel, cuda_llm_kernel),
    CUDA_ROW(LAYER_RMSNORM, cuda_llm_kernel, cuda_llm_kernel),
    CUDA_ROW(LAYER_ROPE, cuda_llm_kernel, cuda_llm_kernel),
    CUDA_ROW(LAYER_ATTENTION, cuda_llm_kernel, cuda_llm_kernel),
    CUDA_NONE(LAYER_MOE, CUDA_NO_MOE),
    CUDA_ROW(LAYER_MEAN, cuda_mean_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_CHANNEL_SHUFFLE, cuda_transpose_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_SLICE, cuda_slice_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_PERMUTE, cuda_transpose_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_LAYER_SCALE, cuda_layer_scale_kernel, cuda_via_f32_kernel),
    CUDA_ROW(LAYER_ROLL, cuda_move_kernel, cuda_move_kernel),
    CUDA_ROW(LAYER_PATCH_MERGE, cuda_move_kernel, cuda_move_kernel),
    CUDA_NONE(LAYER_WINDOW_ATTENTION, "window_attention has no kernel on cuda yet"),
    CUDA_ROW(LAYER_WINDOW_PARTITION, cuda_move_kernel, cuda_move_kernel),
    CUDA_ROW(LAYER_WINDOW_MERGE, cuda_move_kernel, cuda_move_kernel),
    CUDA_ROW(LAYER_RESHAPE, cuda_view_kernel, cuda_view_kernel),
    CUDA_NONE(LAYER_MODEL_INPUT, "model_input has no kernel on cuda yet"),
    CUDA_ROW(LAYER_SCALE_SHIFT, cuda_scale_shift_kernel, cuda_scale_shift_kernel),
    CUDA_ROW(LAYER_MATMUL, cuda_matmul_kernel, cuda_matmul_kernel),
    CUDA_NONE(LAYER_MLA, CUDA_NO_MLA),
    CUDA_ROW(LAYER_GROUPNORM, cuda_groupnorm_kernel, cuda_groupnorm_kernel),
};

const backend_kernel *cuda_fp32_kernel(layer_kind kind)
{
    return (unsigned)kind < LAYER_KIND_COUNT ? cuda_kernels[kind][DTYPE_FP32].kernel : NULL;
}

/* The backward (backend.h; backward_cuda.c says how each runs): conv2d, linear and add on
 * their own dtype; batch norm, the activations cuDNN has, pooling, softmax and mul in
 * fp32, 16-bit on fp32 copies. A kind left out has no cuda backward yet (its rows say
 * so); the views need none. */
#define CUDA_BWD_ROW(kind, f32, half)                                                                          \
    [kind][DTYPE_FP32] = {&f32}, [kind][DTYPE_TF32] = {&f32}, [kind][DTYPE_BF16] = {&half},                    \
    [kind][DTYPE_FP16] = {&half}, [kind][DTYPE_INT8] = {NULL, CUDA_NO_INT8}

static const backend_kernel_table cuda_backward = {
    CUDA_BWD_ROW(LAYER_CONV2D, cuda_conv2d_bwd_kernel, cuda_conv2d_bwd_kernel),
    CUDA_BWD_ROW(LAYER_LINEAR, cuda_linear_bwd_kernel, cuda_linear_bwd_kernel),
    CUDA_BWD_ROW(LAYER_ADD, cuda_add_bwd_kernel, cuda_add_bwd_kernel),
    CUDA_BWD_ROW(LAYER_MUL, cuda_mul_bwd_kernel, cuda_via_f32_kernel),
    CUDA_BWD_ROW(LAYER_BATCHNORM2D, cuda_batchnorm2d_bwd_kernel, cuda_via_f32_kernel),
    CUDA_BWD_ROW(LAYER_RELU, cuda_activation_bwd_kernel, cuda_via_f32_kernel),
    CUDA_BWD_ROW(LAYER_RELU6, cuda_activation_bwd_kernel, cuda_via_f32_kernel),
    CUDA_BWD_ROW(LAYER_SIGMOID, cuda_activation_bwd_kernel, cuda_via_f32_kernel),
    CUDA_BWD_ROW(LAYER_SILU, cuda_activation_bwd_kernel, cuda_via_f32_kernel),
    CUDA_BWD_ROW(LAYER_TANH, cuda_activation_bwd_kernel, cuda_via_f32_kernel),
    CUDA_BWD_ROW(LAYER_MAXPOOL2D, cuda_pool_bwd_kernel, cuda_via_f32_kernel),
    CUDA_BWD_ROW(LAYER_AVGPOOL2D, cuda_pool_bwd_kernel, cuda_via_f32_kernel),
    CUDA_BWD_ROW(LAYER_ADAPTIVE_AVGPOOL2D, cuda_pool_bwd_kernel, cuda_via_f32_kernel),
    CUDA_BWD_ROW(LAYER_SOFTMAX, cuda_softmax_bwd_kernel, cuda_via_f32_kernel),
};

const backend_kernel *cuda_fp32_backward_kernel(layer_kind kind)
{
    return (unsigned)kind < LAYER_KIND_COUNT ? cuda_backward[kind][DTYPE_FP32].kernel : NULL;
}

typedef struct cuda_ctx {
    cuda_env env;
    cudaEvent_t start, stop;
    void *flush;                /* written before each cold sample */
    size_t flush_bytes;
    int flush_value;
    int l2_bytes;
    void *cublas_workspace;     /* fixed, so cuBLAS never allocates during graph capture */
    volatile int *hold_host;    /* host-mapped: [0] release, [1] the hold kernel timed out */
    int *hold_dev;              /* the same two ints as the device sees them */
    bool held;                  /* a hold kernel is queued and not yet released */
    char name[256];
    char uuid[48];              /* GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, as nvidia-smi -L prints it */
    char driver_version[80];    /* NVML's (e.g. 580.65.06), else the CUDA version the driver supports */
    int cc_major, cc_minor, driver, runtime;
    size_t cudnn_version;
    int cublas_version;
    int sm_clock_start;         /* MHz from NVML, -1 if unavailable */
    int sm_clock_max;
    unsigned long long reasons_seen; /* clock event reasons seen after layers ran */
    bool stream_tried;          /* the read probe (cuda_stream): its buffer, kept from the first call */
    void *stream_buf;
    size_t stream_bytes;
    float *stream_sink;
    cudaEvent_t *marks;         /* in-model view: one event per mark */
    int n_marks;
    char *description;
} cuda_ctx;

/* ---- NVML, loaded at run time (it ships with the driver, not the toolkit) ----------- */

typedef int (*nvml_init_fn)(void);
typedef int (*nvml_by_pci_fn)(const char *, void **);
typedef int (*nvml_clock_fn)(void *, int, unsigned *);
typedef int (*nvml_reasons_fn)(void *, unsigned long long *);
typedef int (*nvml_driver_fn)(char *, unsigned);

typedef struct nvml {
    bool tried;
    void *handle;               /* the device's NVML handle, NULL if unavailable */
    nvml_clock_fn clock_info, max_clock;
    nvml_reasons_fn reasons;    /* clocks event (throttle) reasons */
    nvml_driver_fn driver;      /* the driver's version, as nvidia-smi prints it */
} nvml;

static nvml *nvml_for(int device)
{
    static nvml n;
    if (n.tried)
        return &n;
    n.tried = true;
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    nvml_init_fn init = lib ? (nvml_init_fn)dlsym(lib, "nvmlInit_v2") : NULL;
    nvml_by_pci_fn by_pci = lib ? (nvml_by_pci_fn)dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2") : NULL;
    char bus[64];
    if (!init || !by_pci || init() != 0 || cudaDeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess ||
        by_pci(bus, &n.handle) != 0) {
        n.handle = NULL;
        return &n;
    }
    n.clock_info = (nvml_clock_fn)dlsym(lib, "nvmlDeviceGetClockInfo");
    n.driver = (nvml_driver_fn)dlsym(lib, "nvmlSystemGetDriverVersion");
    n.max_clock = (nvml_clock_fn)dlsym(lib, "nvmlDeviceGetMaxClockInfo");
    n.reasons = (nvml_reasons_fn)dlsym(lib, "nvmlDeviceGetCurrentClocksEventReasons");
    if (!n.reasons)
        n.reasons = (nvml_reasons_fn)dlsym(lib, "nvmlDeviceGetCurrentClocksThrottleReasons");
    return &n;
}

/* Current (or, with max, the highest) SM clock in MHz, or -1. */
static int sm_clock_mhz(int device, bool max)
{
    nvml *n = nvml_for(device);
    nvml_clock_fn f = max ? n->max_clock : n->clock_info;
    unsigned mhz;
    if (!n->handle || !f || f(n->handle, 1 /* NVML_CLOCK_SM */, &mhz) != 0)
        return -1;
    return (int)mhz;
}

/* Why the clocks are held back now, as NVML says: a bit mask, or 0 if unknown. */
static unsigned long long clock_event_reasons(int device)
{
    nvml *n = nvml_for(device);
    unsigned long long r = 0;
    if (!n->handle || !n->reasons || n->reasons(n->handle, &r) != 0)
        return 0;
    return r;
}

/* ---- the backend ------------------------------------------------------------------------ */

static void cuda_free(void *ctx);

/* Brings the clocks up from idle before the first layer is timed: SGEMMs on the flush
 * buffer for about WARM_UP_SECONDS (their results are never read). */
#define WARM_UP_SECONDS 0.3
static bool warm_up(cuda_ctx *c)
{
    cuda_env *env = &c->env;
    const int n = 1024; /* three n x n matrices: 12 MiB of the flush buffer's 64 MiB or more */
    float *a = c->flush, *b = a + n * n, *d = b + n * n;
    const float one = 1.0f, zero = 0.0f;
    if (!CUDA_OK(env, cudaMemsetAsync(c->flush, 0x3c, (size_t)3 * n * n * sizeof(float), env->stream)))
        return false;
    double t0 = bench_now();
    while (bench_now() - t0 < WARM_UP_SECONDS) {
        for (int i = 0; i < 10; i++)
            if (!CUBLAS_OK(env, cublasSgemm(env->cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, d, n)))
                return false;
        if (!CUDA_OK(env, cudaStreamSynchronize(env->stream)))
            return false;
    }
    return true;
}

static bench_status cuda_init(const backend_options *opt, void **out, char *err, size_t errlen)
{
    /* LAYERBENCH_CUDNN_ENGINE: a malformed tag is the user's error, device or not */
    const char *forced = getenv("LAYERBENCH_CUDNN_ENGINE");
    cudnn_engine_tag engine = {0};
    char why[256];
    if (forced && *forced && !cudnn_tag_parse(forced, &engine, why, sizeof why)) {
        snprintf(err, errlen, "LAYERBENCH_CUDNN_ENGINE: %s", why);
        return BENCH_ERR_USAGE;
    }
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(err, errlen, "no CUDA device: %s", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return BENCH_ERR_UNSUPPORTED;
    }
    cuda_ctx *c = xcalloc(1, sizeof *c);
    cuda_env *env = &c->env;
    env->device = 0;
    env->algo = opt->algo_heuristic ? CUDA_ALGO_HEURISTIC : CUDA_ALGO_SEARCH;
    env->conv_api = (cuda_conv_api)opt->conv_api;
    env->engine_forced = forced && *forced;
    env->engine = engine;
    struct cudaDeviceProp prop;
    bool ok = CUDA_OK(env, cudaSetDevice(0)) && CUDA_OK(env, cudaGetDeviceProperties(&prop, 0)) &&
              CUDA_OK(env, cudaDriverGetVersion(&c->driver)) && CUDA_OK(env, cudaRuntimeGetVersion(&c->runtime)) &&
              CUDA_OK(env, cudaStreamCreateWithFlags(&env->stream, cudaStreamNonBlocking)) &&
              CUDA_OK(env, cudaEventCreate(&c->start)) && CUDA_OK(env, cudaEventCreate(&c->stop)) &&
              CUDNN_OK(env, cudnnCreate(&env->cudnn)) && CUDNN_OK(env, cudnnSetStream(env->cudnn, env->stream)) &&
              CUBLAS_OK(env, cublasCreate(&env->cublas)) && CUBLAS_OK(env, cublasSetStream(env->cublas, env->stream)) &&
              /* FP32 without TF32 is CUBLAS_DEFAULT_MATH, as PyTorch runs it (PEDANTIC is
               * meant for testing and may be slower) */
              CUBLAS_OK(env, cublasSetMathMode(env->cublas, CUBLAS_DEFAULT_MATH)) &&
              CUBLAS_OK(env, cublasGetVersion(env->cublas, &c->cublas_version));
    if (ok) {
        snprintf(c->name, sizeof c->name, "%s", prop.name);
        const unsigned char *u = (const unsigned char *)prop.uuid.bytes;
        snprintf(c->uuid, sizeof c->uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                 u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
        nvml *nv = nvml_for(0);
        if (!nv->handle || !nv->driver || nv->driver(c->driver_version, sizeof c->driver_version) != 0)
            snprintf(c->driver_version, sizeof c->driver_version, "CUDA %d.%d", c->driver / 1000, c->driver % 1000 / 10);
        c->cc_major = prop.major, c->cc_minor = prop.minor;
        c->l2_bytes = prop.l2CacheSize;
        c->cudnn_version = cudnnGetVersion();
        /* cold samples: write twice the L2 (at least 64 MiB) so nothing of the layer's
         * data is left in it */
        c->flush_bytes = (size_t)2 * (size_t)c->l2_bytes;
        if (c->flush_bytes < ((size_t)64 << 20))
            c->flush_bytes = (size_t)64 << 20;
        size_t ws = (size_t)32 << 20;
        ok = CUDA_OK(env, cudaMalloc(&c->flush, c->flush_bytes)) && CUDA_OK(env, cudaMalloc(&c->cublas_workspace, ws)) &&
             CUBLAS_OK(env, cublasSetWorkspace(env->cublas, c->cublas_workspace, ws)) &&
             CUDA_OK(env, cudaHostAlloc((void **)&c->hold_host, 2 * sizeof(int), cudaHostAllocMapped)) &&
             CUDA_OK(env, cudaHostGetDevicePointer((void **)&c->hold_dev, (void *)c->hold_host, 0));
    }
    if (ok)
        ok = warm_up(c);
    if (!ok) {
        snprintf(err, errlen, "the CUDA backend cannot start: %s", env->error);
        cuda_free(c);
        return BENCH_ERR_BACKEND;
    }
    c->sm_clock_start = sm_clock_mhz(0, false);
    c->sm_clock_max = sm_clock_mhz(0, true);
    *out = c;
    return BENCH_OK;
}

static void cuda_free(void *ctx)
{
    cuda_ctx *c = ctx;
    if (!c)
        return;
    if (c->env.cublas)
        cublasDestroy(c->env.cublas);
    if (c->env.cudnn)
        cudnnDestroy(c->env.cudnn);
    cudaFree(c->flush);
    cudaFree(c->cublas_workspace);
    cudaFree(c->stream_buf);
    cudaFree(c->stream_sink);
    if (c->hold_host)
        cudaFreeHost((void *)c->hold_host);
    for (int i = 0; i < c->n_marks; i++)
        cudaEventDestroy(c->marks[i]);
    free(c->marks);
    free(c->env.conv_choices);
    for (int i = 0; i < c->env.n_given; i++)
        free(c->env.given_keys[i]), free(c->env.given_values[i]);
    free(c->env.given_keys), free(c->env.given_values);
    if (c->start)
        cudaEventDestroy(c->start);
    if (c->stop)
        cudaEventDestroy(c->stop);
    if (c->env.stream)
        cudaStreamDestroy(c->env.stream);
    free(c->description);
    free(c);
}

static void *cuda_alloc(void *ctx, size_t bytes)
{
    void *p = NULL;
    return CUDA_OK(&((cuda_ctx *)ctx)->env, cudaMalloc(&p, bytes)) ? p : NULL;
}

static void cuda_release(void *ctx, void *p)
{
    if (p)
        CUDA_OK(&((cuda_ctx *)ctx)->env, cudaFree(p));
}

/* Copies go on the timed stream, from pageable host memory as torch's .to() does. From
 * pageable memory, an upload returns once the host buffer is staged (the stop event
 * that follows marks the end of its DMA) and a download once the data is in place;
 * neither synchronises the stream here, so a timed copy is not lengthened by a host
 * round-trip. */
static bench_status cuda_copy(cuda_ctx *c, void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
    cuda_env *env = &c->env;
    return CUDA_OK(env, cudaMemcpyAsync(dst, src, bytes, kind, env->stream)) ? BENCH_OK : BENCH_ERR_BACKEND;
}

static bench_status cuda_upload(void *ctx, void *dst, const void *src, size_t bytes)
{
    return cuda_copy(ctx, dst, src, bytes, cudaMemcpyHostToDevice);
}

static bench_status cuda_download(void *ctx, void *dst, const void *src, size_t bytes)
{
    return cuda_copy(ctx, dst, src, bytes, cudaMemcpyDeviceToHost);
}

/* backend_device_i.convert: queued on the stream like a layer. */
static void cuda_convert(void *ctx, void *dst, dtype_t to, const void *src, dtype_t from, int64_t n)
{
    cuda_env *env = &((cuda_ctx *)ctx)->env;
    CUDA_OK(env, cuda_convert_launch(env->stream, dst, (int)to, src, (int)from, n));
}

static bench_status cuda_sync(void *ctx)
{
    cuda_env *env = &((cuda_ctx *)ctx)->env;
    bool ok = CUDA_OK(env, cudaStreamSynchronize(env->stream)) && CUDA_OK(env, cudaGetLastError());
    return ok && !env->failed ? BENCH_OK : BENCH_ERR_BACKEND;
}

static void cuda_timer_start(void *ctx)
{
    cuda_ctx *c = ctx;
    CUDA_OK(&c->env, cudaEventRecord(c->start, c->env.stream));
}

/* How long the hold kernel waits for its release at most. */
#define HOLD_TIMEOUT_NS 2000000000ull

static void cuda_hold(void *ctx)
{
    cuda_ctx *c = ctx;
    c->hold_host[0] = 0;
    c->hold_host[1] = 0;
    __sync_synchronize();
    c->held = CUDA_OK(&c->env, cuda_hold_launch(c->env.stream, c->hold_dev, c->hold_dev + 1, HOLD_TIMEOUT_NS));
}

/* Event time between start and stop on the stream: the device's own clock, never a
 * host clock around a synchronisation. The stop event is queued before the hold is
 * released, so everything timed was queued before the device started on it. */
static double cuda_timer_stop(void *ctx)
{
    cuda_ctx *c = ctx;
    cuda_env *env = &c->env;
    float ms = 0.0f;
    bool ok = CUDA_OK(env, cudaEventRecord(c->stop, env->stream));
    if (c->held) {
        __sync_synchronize();
        c->hold_host[0] = 1;
        c->held = false;
    }
    ok = ok && CUDA_OK(env, cudaEventSynchronize(c->stop)) && CUDA_OK(env, cudaGetLastError()) &&
         CUDA_OK(env, cudaEventElapsedTime(&ms, c->start, c->stop));
    if (ok && c->hold_host[1])
        cuda_env_fail(env, __FILE__, __LINE__, "cuda_hold_launch",
                      "the held stream waited more than 2 s for its launches to be queued");
    return ok && !env->failed ? 1e-3 * (double)ms : -1.0;
}

static bench_status cuda_marks_prepare(void *ctx, int n)
{
    cuda_ctx *c = ctx;
    for (int i = 0; i < c->n_marks; i++)
        cudaEventDestroy(c->marks[i]);
    c->marks = xrealloc(c->marks, (size_t)(n > 0 ? n : 1) * sizeof *c->marks);
    c->n_marks = 0;
    for (int i = 0; i < n; i++) {
        if (!CUDA_OK(&c->env, cudaEventCreate(&c->marks[i])))
            return BENCH_ERR_BACKEND;
        c->n_marks++;
    }
    return BENCH_OK;
}

static void cuda_timer_mark(void *ctx, int i)
{
    cuda_ctx *c = ctx;
    CUDA_OK(&c->env, cudaEventRecord(c->marks[i], c->env.stream));
}

/* After timer_stop (the stop event completed, so every mark has too). */
static void cuda_marks_read(void *ctx, double *seconds, int n)
{
    cuda_ctx *c = ctx;
    for (int i = 0; i < n && i < c->n_marks; i++) {
        float ms = 0.0f;
        seconds[i] = CUDA_OK(&c->env, cudaEventElapsedTime(&ms, c->start, c->marks[i])) ? 1e-3 * (double)ms : 0.0;
    }
}

/* What NVML says about the clocks: moved since the start, or held back by power or
 * temperature. */
static void cuda_warnings(void *ctx, char *buf, size_t len)
{
    cuda_ctx *c = ctx;
    int now = sm_clock_mhz(c->env.device, false);
    unsigned long long r = clock_event_reasons(c->env.device);
    size_t off = 0;
    buf[0] = 0;
    c->reasons_seen |= r;
    if (c->sm_clock_start > 0 && now > 0 && abs(now - c->sm_clock_start) * 10 > c->sm_clock_start)
        off += (size_t)snprintf(buf + off, len - off, "cuda: the SM clock moved from %d MHz at the start to %d MHz "
                                                      "(max %d): figures taken at different clocks\n",
                                c->sm_clock_start, now, c->sm_clock_max);
    /* NVML's bits: 0x4 software power cap, 0x8 hardware slowdown, 0x20 sync boost,
     * 0x40 software thermal, 0x80 hardware thermal, 0x100 hardware power brake */
    static const struct { unsigned long long bit; const char *what; } why[] = {
        {0x4, "the power cap"}, {0x8, "a hardware slowdown"}, {0x40, "software thermal limits"},
        {0x80, "hardware thermal limits"}, {0x100, "the hardware power brake"}};
    for (size_t i = 0; i < sizeof why / sizeof *why && off < len; i++)
        if (c->reasons_seen & why[i].bit)
            off += (size_t)snprintf(buf + off, len - off, "cuda: the GPU's clocks were held back by %s (NVML)\n",
                                    why[i].what);
}

static void cuda_flush_cache(void *ctx)
{
    cuda_ctx *c = ctx;
    c->flush_value = (c->flush_value + 1) & 0xff;
    CUDA_OK(&c->env, cudaMemsetAsync(c->flush, c->flush_value, c->flush_bytes, c->env.stream));
}

/* The kernels' env: the library handles and the stream (cuda_env.h). */
static void *cuda_kernel_env(void *ctx) { return &((cuda_ctx *)ctx)->env; }

static bench_status cuda_graph_begin(void *ctx)
{
    cuda_env *env = &((cuda_ctx *)ctx)->env;
    return CUDA_OK(env, cudaStreamBeginCapture(env->stream, cudaStreamCaptureModeThreadLocal)) ? BENCH_OK
                                                                                                 : BENCH_ERR_BACKEND;
}

static bench_status cuda_graph_end(void *ctx, void **graph)
{
    cuda_env *env = &((cuda_ctx *)ctx)->env;
    cudaGraph_t g = NULL;
    cudaGraphExec_t exec = NULL;
    bool ok = CUDA_OK(env, cudaStreamEndCapture(env->stream, &g)) && !env->failed &&
              CUDA_OK(env, cudaGraphInstantiate(&exec, g, 0));
    if (g)
        cudaGraphDestroy(g);
    *graph = exec;
    return ok ? BENCH_OK : BENCH_ERR_BACKEND;
}

static void cuda_graph_launch(void *ctx, void *graph)
{
    cuda_env *env = &((cuda_ctx *)ctx)->env;
    CUDA_OK(env, cudaGraphLaunch((cudaGraphExec_t)graph, env->stream));
}

static void cuda_graph_free(void *ctx, void *graph)
{
    (void)ctx;
    if (graph)
        cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

static const char *cuda_last_error(void *ctx) { return ((cuda_ctx *)ctx)->env.error; }

static void cuda_clear_error(void *ctx) { cuda_env_clear(&((cuda_ctx *)ctx)->env); }

static int64_t cuda_mem_available(void *ctx)
{
    size_t free_b = 0, total_b = 0;
    return CUDA_OK(&((cuda_ctx *)ctx)->env, cudaMemGetInfo(&free_b, &total_b)) ? (int64_t)free_b : -1;
}

static const char *cuda_describe(void *ctx)
{
    cuda_ctx *c = ctx;
    char engine_tag[CUDNN_ENGINE_TAG_LEN] = "";
    if (c->env.engine_forced)
        cudnn_tag_format(&c->env.engine, engine_tag, sizeof engine_tag);
    free(c->description);
    c->description = xasprintf(
        "{\"device\": \"%s\", \"uuid\": \"%s\", \"driver_version\": \"%s\", \"compute_capability\": \"%d.%d\", \"sm_clock_mhz_start\": %d, "
        "\"sm_clock_mhz_end\": %d, \"sm_clock_mhz_max\": %d, \"driver\": %d, \"cuda_runtime\": %d, \"cudnn\": %zu, \"cublas\": %d, "
        "\"conv_algo\": \"%s\", \"conv_api\": \"%s\", \"cudnn_engine\": \"%s\", \"l2_bytes\": %d, \"flush_bytes\": %zu, "
        "\"host_memory\": \"pageable\", \"stream_hold\": \"spinning kernel\", \"batch_launches\": \"one CUDA graph\", "
        "\"warm_up_s\": %g}",
        c->name, c->uuid, c->driver_version, c->cc_major, c->cc_minor, c->sm_clock_start, sm_clock_mhz(c->env.device, false), c->sm_clock_max, c->driver, c->runtime,
        c->cudnn_version, c->cublas_version,
        c->env.algo == CUDA_ALGO_SEARCH ? "search" : "heuristic",
        c->env.conv_api == CUDA_CONV_API_LEGACY ? "legacy" : c->env.conv_api == CUDA_CONV_API_GRAPH ? "graph" : "both",
        c->env.engine_forced ? engine_tag : "", c->l2_bytes, c->flush_bytes, WARM_UP_SECONDS);
    return c->description;
}

/* The roofline's ceilings on the GPU: cublasSgemm 8192^3 in FP32 and a device-to-device
 * copy of up to 1 GiB (bytes read plus written), each timed with events, the best of 5 after a warm-up; and, for
 * layers whose data the L2 holds, copies of an eighth of the L2. Not held: these
 * launches are long. */
static bench_status cuda_peaks(void *ctx, backend_peaks *pk)
{
    cuda_ctx *c = ctx;
    cuda_env *env = &c->env;
    memset(pk, 0, sizeof *pk);
    size_t free_b = 0, total_b = 0;
    if (!CUDA_OK(env, cudaMemGetInfo(&free_b, &total_b)))
        return BENCH_ERR_BACKEND;
    int n = 8192;
    while (n > 1024 && (size_t)3 * n * n * sizeof(float) > free_b / 2)
        n /= 2;
    size_t copy = (size_t)1 << 30;
    while (copy > ((size_t)64 << 20) && 2 * copy > free_b / 2)
        copy /= 2;
    size_t need = (size_t)3 * n * n * sizeof(float) > 2 * copy ? (size_t)3 * n * n * sizeof(float) : 2 * copy;
    void *buf = NULL;
    bool ok = CUDA_OK(env, cudaMalloc(&buf, need)) && CUDA_OK(env, cudaMemsetAsync(buf, 0x3c, need, env->stream));
    float *a = buf, *b = a + (size_t)n * n, *d = b + (size_t)n * n;
    const float one = 1.0f, zero = 0.0f;
    float best_gemm = 1e30f, best_copy = 1e30f, best_tf32 = 1e30f, ms = 0;
    for (int r = 0; ok && r < 6; r++) { /* r = 0: warm-up */
        ok = CUDA_OK(env, cudaEventRecord(c->start, env->stream)) &&
             CUBLAS_OK(env, cublasSgemm(env->cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, d, n)) &&
             CUDA_OK(env, cudaEventRecord(c->stop, env->stream)) && CUDA_OK(env, cudaEventSynchronize(c->stop)) &&
             CUDA_OK(env, cudaEventElapsedTime(&ms, c->start, c->stop));
        if (ok && r > 0 && ms < best_gemm)
            best_gemm = ms;
        ok = ok && CUDA_OK(env, cudaEventRecord(c->start, env->stream)) &&
             CUDA_OK(env, cudaMemcpyAsync((char *)buf + copy, buf, copy, cudaMemcpyDeviceToDevice, env->stream)) &&
             CUDA_OK(env, cudaEventRecord(c->stop, env->stream)) && CUDA_OK(env, cudaEventSynchronize(c->stop)) &&
             CUDA_OK(env, cudaEventElapsedTime(&ms, c->start, c->stop));
        if (ok && r > 0 && ms < best_copy)
            best_copy = ms;
    }
    /* the tf32 rows' roof: the same product in TF32 tensor-core math */
    ok = ok && CUBLAS_OK(env, cublasSetMathMode(env->cublas, CUBLAS_TF32_TENSOR_OP_MATH));
    for (int r = 0; ok && r < 6; r++) {
        ok = CUDA_OK(env, cudaEventRecord(c->start, env->stream)) &&
             CUBLAS_OK(env, cublasSgemm(env->cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, d, n)) &&
             CUDA_OK(env, cudaEventRecord(c->stop, env->stream)) && CUDA_OK(env, cudaEventSynchronize(c->stop)) &&
             CUDA_OK(env, cudaEventElapsedTime(&ms, c->start, c->stop));
        if (ok && r > 0 && ms < best_tf32)
            best_tf32 = ms;
    }
    ok = ok && CUBLAS_OK(env, cublasSetMathMode(env->cublas, CUBLAS_DEFAULT_MATH));
    /* the caches: a copy of an eighth of the L2, 100 times between two events */
    int l2 = 0;
    cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, env->device);
    size_t small = l2 > 0 ? (size_t)l2 / 8 : 0;
    if (small >= ((size_t)256 << 10) && small <= copy) {
        float best_small = 1e30f;
        for (int r = 0; ok && r < 4; r++) {
            ok = CUDA_OK(env, cudaEventRecord(c->start, env->stream));
            for (int k = 0; ok && k < 100; k++)
                ok = CUDA_OK(env, cudaMemcpyAsync((char *)buf + small, buf, small, cudaMemcpyDeviceToDevice, env->stream));
            ok = ok && CUDA_OK(env, cudaEventRecord(c->stop, env->stream)) && CUDA_OK(env, cudaEventSynchronize(c->stop)) &&
                 CUDA_OK(env, cudaEventElapsedTime(&ms, c->start, c->stop));
            if (ok && r > 0 && ms < best_small)
                best_small = ms;
        }
        if (ok) {
            pk->cache_bytes_per_s = 2.0 * (double)small * 100 / (best_small * 1e-3);
            pk->cache_bytes = l2 / 2;
        }
    }
    if (buf)
        CUDA_OK(env, cudaFree(buf));
    if (!ok)
        return BENCH_ERR_BACKEND;
    pk->flops_per_s = 2.0 * (double)n * n * n / (best_gemm * 1e-3);
    pk->bytes_per_s = 2.0 * (double)copy / (best_copy * 1e-3);
    snprintf(pk->compute_probe, sizeof pk->compute_probe, "cublasSgemm %dx%dx%d, FP32, best of 5", n, n, n);
    pk->dtype_flops_per_s[DTYPE_TF32] = 2.0 * (double)n * n * n / (best_tf32 * 1e-3);
    snprintf(pk->dtype_probe[DTYPE_TF32], sizeof pk->dtype_probe[DTYPE_TF32],
             "cublasSgemm %dx%dx%d, TF32 tensor-core math, best of 5", n, n, n);
    snprintf(pk->bandwidth_probe, sizeof pk->bandwidth_probe,
             "device-to-device copy of %zu MiB, read + written, best of 5 (and %zu KiB, 100 times, for the L2)",
             copy >> 20, small >> 10);
    return BENCH_OK;
}

/* timing.stream: a read-only pass over a buffer of at least 1 GiB and 16 times the L2 (a
 * quarter of the free memory at most; none below 4 times the L2), each thread summing 16
 * bytes a load, as a decode step reads its weights and KV cache; kept from the first
 * call. A warm-up pass, then the best of three, in bytes read per second; 0 where it
 * cannot run. */
static double cuda_stream(void *ctx)
{
    cuda_ctx *c = ctx;
    cuda_env *env = &c->env;
    if (!c->stream_tried) {
        c->stream_tried = true;
        size_t l2 = c->l2_bytes > 0 ? (size_t)c->l2_bytes : ((size_t)64 << 20);
        size_t want = ((size_t)1 << 30) > 16 * l2 ? ((size_t)1 << 30) : 16 * l2;
        int64_t avail = cuda_mem_available(c);
        if (avail >= 0 && want > (size_t)avail / 4)
            want = (size_t)avail / 4 / 4096 * 4096;
        if (avail >= 0 && want >= 4 * l2 && CUDA_OK(env, cudaMalloc(&c->stream_buf, want)) &&
            CUDA_OK(env, cudaMalloc((void **)&c->stream_sink, sizeof(float))) &&
            CUDA_OK(env, cudaMemsetAsync(c->stream_buf, 0, want, env->stream)))
            c->stream_bytes = want;
        else
            cuda_env_clear(env);
    }
    if (!c->stream_bytes)
        return 0.0;
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, env->device);
    float best = 1e30f, ms = 0;
    bool ok = true;
    for (int r = 0; ok && r < 4; r++) {
        ok = CUDA_OK(env, cudaEventRecord(c->start, env->stream)) &&
             CUDA_OK(env, cuda_read_launch(env->stream, c->stream_buf, (int64_t)(c->stream_bytes / 16), c->stream_sink,
                                           sms > 0 ? 8 * sms : 1024)) &&
             CUDA_OK(env, cudaEventRecord(c->stop, env->stream)) && CUDA_OK(env, cudaEventSynchronize(c->stop)) &&
             CUDA_OK(env, cudaEventElapsedTime(&ms, c->start, c->stop));
        if (ok && r > 0 && ms < best)
            best = ms;
    }
    if (!ok) {
        cuda_env_clear(env);
        return 0.0;
    }
    return (double)c->stream_bytes / (best * 1e-3);
}

/* --algo-cache: each convolution's choice under its key (cudnn_conv_key_format), as
 * "graph TAG" or "legacy ALGO MATH" (cudnn_choice_format) */
static int cuda_choices_get(void *ctx, void (*emit)(void *user, const char *key, const char *value), void *user)
{
    cuda_env *env = &((cuda_ctx *)ctx)->env;
    for (int i = 0; i < env->n_conv_choices; i++) {
        const cuda_conv_choice *ch = &env->conv_choices[i];
        char key[512], value[CUDNN_ENGINE_TAG_LEN + 16];
        cudnn_conv_key_format(&ch->key, key, sizeof key);
        cudnn_choice_format(ch->graph, &ch->tag, ch->algo, ch->math, value, sizeof value);
        emit(user, key, value);
    }
    return env->stale;
}

static void cuda_choices_put(void *ctx, const char *key, const char *value)
{
    cuda_env *env = &((cuda_ctx *)ctx)->env;
    env->given_keys = xrealloc(env->given_keys, (size_t)(env->n_given + 1) * sizeof *env->given_keys);
    env->given_values = xrealloc(env->given_values, (size_t)(env->n_given + 1) * sizeof *env->given_values);
    env->given_keys[env->n_given] = xstrdup(key);
    env->given_values[env->n_given++] = xstrdup(value);
}

static bool cuda_layer_kernel_names(void *ctx, void (*call)(void *user), void *user, char *buf, size_t len)
{
    return cuda_kernel_names(&((cuda_ctx *)ctx)->env, call, user, buf, len);
}

const backend_ops backend_cuda_ops = {
    .api = BACKEND_API,
    .name = "cuda",
    .device_memory = true,
    .device = {.init = cuda_init, .free = cuda_free, .alloc = cuda_alloc, .release = cuda_release,
               .convert = cuda_convert,
               .upload = cuda_upload, .download = cuda_download, .sync = cuda_sync,
               .mem_available = cuda_mem_available, .describe = cuda_describe, .warnings = cuda_warnings,
               .peaks = cuda_peaks, .last_error = cuda_last_error, .clear_error = cuda_clear_error},
    .timing = {.timer_start = cuda_timer_start, .timer_stop = cuda_timer_stop, .hold = cuda_hold,
               .flush_cache = cuda_flush_cache, .marks_prepare = cuda_marks_prepare, .timer_mark = cuda_timer_mark,
               .marks_read = cuda_marks_read, .graph_begin = cuda_graph_begin, .graph_end = cuda_graph_end,
               .graph_launch = cuda_graph_launch, .graph_free = cuda_graph_free, .stream = cuda_stream},
    .layers = {.kernels = &cuda_kernels, .kernel_env = cuda_kernel_env, .choices_get = cuda_choices_get,
               .choices_put = cuda_choices_put, .kernel_names = cuda_layer_kernel_names,
               .backward = &cuda_backward},
};
