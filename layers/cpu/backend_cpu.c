/* The CPU backend: host memory, CLOCK_MONOTONIC, OpenBLAS and OpenMP threads. */
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <strings.h>
#include <unistd.h>

#include "backend.h"
#include "host.h"
#include "cpu_env.h"
#include "cpu_kernels.h"

/* The kernel table: (kind, dtype) -> kernel. Adding a kind or a dtype fills its cells
 * here (docs/architecture.md); a cell left empty is an unsupported row. */
/* Where a kind has no kernel in bf16 or fp16, cpu_via_f32_kernel runs its fp32 one on
 * fp32 copies (convert_cpu.c); views and concat move bytes in any dtype; conv2d and
 * linear have bf16 GEMMs of their own (bf16_cpu.c), the element-wise kinds bf16 loops. */
#define CPU_NO_TF32 "tf32 is a math mode of NVIDIA's tensor cores: a CPU has none (run fp32)"
#define CPU_NO_INT8 "the cpu backend has no int8 kernels"
#define CPU_ROW(kind, f32, b16, f16)                                                                           \
    [kind][DTYPE_FP32] = {&f32}, [kind][DTYPE_TF32] = {NULL, CPU_NO_TF32}, [kind][DTYPE_BF16] = {&b16},       \
    [kind][DTYPE_FP16] = {&f16}, [kind][DTYPE_INT8] = {NULL, CPU_NO_INT8}

static const backend_kernel_table cpu_kernels = {
    CPU_ROW(LAYER_CONV2D, cpu_conv2d_kernel, cpu_conv2d_bf16_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_BATCHNORM2D, cpu_batchnorm2d_kernel, cpu_train16_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_RELU, cpu_relu_kernel, cpu_relu_bf16_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_RELU6, cpu_relu6_kernel, cpu_relu6_bf16_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_SIGMOID, cpu_sigmoid_kernel, cpu_sigmoid_bf16_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_MAXPOOL2D, cpu_maxpool2d_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_AVGPOOL2D, cpu_avgpool2d_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_ADAPTIVE_AVGPOOL2D, cpu_adaptive_avgpool2d_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_FLATTEN, cpu_view_kernel, cpu_view_kernel, cpu_view_kernel),
    CPU_ROW(LAYER_LINEAR, cpu_linear_kernel, cpu_linear_bf16_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_DROPOUT, cpu_dropout_kernel, cpu_train16_kernel, cpu_train16_kernel),
    CPU_ROW(LAYER_SOFTMAX, cpu_softmax_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_ADD, cpu_add_kernel, cpu_add_bf16_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_MUL, cpu_mul_kernel, cpu_mul_bf16_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_CONCAT, cpu_concat_kernel, cpu_concat_kernel, cpu_concat_kernel),
    CPU_ROW(LAYER_SILU, cpu_silu_kernel, cpu_silu_bf16_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_HARDSWISH, cpu_hardswish_kernel, cpu_hardswish_bf16_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_HARDSIGMOID, cpu_hardsigmoid_kernel, cpu_hardsigmoid_bf16_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_TANH, cpu_tanh_kernel, cpu_tanh_bf16_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_STOCHASTIC_DEPTH, cpu_view_kernel, cpu_view_kernel, cpu_view_kernel),
    CPU_ROW(LAYER_CONV_TRANSPOSE2D, cpu_conv_transpose2d_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_UPSAMPLE, cpu_upsample_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_LAYERNORM, cpu_layernorm_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_GELU, cpu_gelu_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_MULTIHEAD_ATTENTION, cpu_multihead_attention_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_TRANSPOSE, cpu_transpose_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_CLASS_TOKEN, cpu_class_token_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_POS_EMBEDDING, cpu_pos_embedding_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_SELECT, cpu_select_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_EMBEDDING, cpu_embedding_kernel, cpu_embedding_16_kernel, cpu_embedding_16_kernel),
    CPU_ROW(LAYER_RMSNORM, cpu_rmsnorm_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_ROPE, cpu_rope_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_ATTENTION, cpu_attention_kernel, cpu_attention_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_MOE, cpu_moe_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_MEAN, cpu_mean_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_GROUPNORM, cpu_groupnorm_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_CHANNEL_SHUFFLE, cpu_transpose_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_SLICE, cpu_slice_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_PERMUTE, cpu_transpose_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_LAYER_SCALE, cpu_layer_scale_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_ROLL, cpu_roll_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_PATCH_MERGE, cpu_patch_merge_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_WINDOW_ATTENTION, cpu_window_attention_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_WINDOW_PARTITION, cpu_window_move_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_WINDOW_MERGE, cpu_window_move_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_RESHAPE, cpu_view_kernel, cpu_view_kernel, cpu_view_kernel),
    CPU_ROW(LAYER_MODEL_INPUT, cpu_model_input_kernel, cpu_model_input_kernel, cpu_model_input_kernel),
    CPU_ROW(LAYER_SCALE_SHIFT, cpu_scale_shift_kernel, cpu_scale_shift_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_MATMUL, cpu_matmul_kernel, cpu_via_f32_kernel, cpu_via_f32_kernel),
    CPU_ROW(LAYER_MLA, cpu_mla_kernel, cpu_mla_kernel, cpu_via_f32_kernel),
};

/* The backward pass: fp32 kernels (backward_cpu.c); bf16 and fp16 run them on fp32
 * copies (cpu_bwd_via_f32_kernel, convert_cpu.c) */
#define CPU_BWD_ROW(kind, f32)                                                                                 \
    [kind][DTYPE_FP32] = {&f32}, [kind][DTYPE_TF32] = {NULL, CPU_NO_TF32},                                     \
    [kind][DTYPE_BF16] = {&cpu_bwd_via_f32_kernel}, [kind][DTYPE_FP16] = {&cpu_bwd_via_f32_kernel},           \
    [kind][DTYPE_INT8] = {NULL, CPU_NO_INT8}

/* ... and a kind with 16-bit backward loops of its own */
#define CPU_BWD_ROW16(kind, f32, k16)                                                                          \
    [kind][DTYPE_FP32] = {&f32}, [kind][DTYPE_TF32] = {NULL, CPU_NO_TF32}, [kind][DTYPE_BF16] = {&k16},        \
    [kind][DTYPE_FP16] = {&k16}, [kind][DTYPE_INT8] = {NULL, CPU_NO_INT8}

static const backend_kernel_table cpu_backward = {
    CPU_BWD_ROW16(LAYER_CONV2D, cpu_conv2d_bwd_kernel, cpu_conv2d_bwd_bf16_kernel),
    CPU_BWD_ROW16(LAYER_LINEAR, cpu_linear_bwd_kernel, cpu_linear_bwd_bf16_kernel),
    CPU_BWD_ROW(LAYER_BATCHNORM2D, cpu_batchnorm2d_bwd_kernel),
    CPU_BWD_ROW16(LAYER_RELU, cpu_act_bwd_kernel, cpu_act_bwd16_kernel),
    CPU_BWD_ROW16(LAYER_RELU6, cpu_act_bwd_kernel, cpu_act_bwd16_kernel),
    CPU_BWD_ROW16(LAYER_SIGMOID, cpu_act_bwd_kernel, cpu_act_bwd16_kernel),
    CPU_BWD_ROW16(LAYER_SILU, cpu_act_bwd_kernel, cpu_act_bwd16_kernel),
    CPU_BWD_ROW16(LAYER_TANH, cpu_act_bwd_kernel, cpu_act_bwd16_kernel),
    CPU_BWD_ROW16(LAYER_HARDSWISH, cpu_act_bwd_kernel, cpu_act_bwd16_kernel),
    CPU_BWD_ROW16(LAYER_HARDSIGMOID, cpu_act_bwd_kernel, cpu_act_bwd16_kernel),
    CPU_BWD_ROW16(LAYER_GELU, cpu_act_bwd_kernel, cpu_act_bwd16_kernel),
    CPU_BWD_ROW16(LAYER_ADD, cpu_binary_bwd_kernel, cpu_binary_bwd16_kernel),
    CPU_BWD_ROW16(LAYER_MUL, cpu_binary_bwd_kernel, cpu_binary_bwd16_kernel),
    CPU_BWD_ROW(LAYER_MAXPOOL2D, cpu_pool_bwd_kernel),
    CPU_BWD_ROW(LAYER_AVGPOOL2D, cpu_pool_bwd_kernel),
    CPU_BWD_ROW(LAYER_ADAPTIVE_AVGPOOL2D, cpu_pool_bwd_kernel),
    CPU_BWD_ROW(LAYER_LAYERNORM, cpu_norm_bwd_kernel),
    CPU_BWD_ROW(LAYER_RMSNORM, cpu_norm_bwd_kernel),
    CPU_BWD_ROW(LAYER_SOFTMAX, cpu_softmax_bwd_kernel),
    CPU_BWD_ROW(LAYER_EMBEDDING, cpu_embedding_bwd_kernel),
    CPU_BWD_ROW(LAYER_ROPE, cpu_rope_bwd_kernel),
    CPU_BWD_ROW(LAYER_ATTENTION, cpu_attention_bwd_kernel),
    CPU_BWD_ROW(LAYER_MULTIHEAD_ATTENTION, cpu_multihead_attention_bwd_kernel),
    CPU_BWD_ROW(LAYER_TRANSPOSE, cpu_transpose_bwd_kernel),
    CPU_BWD_ROW(LAYER_CHANNEL_SHUFFLE, cpu_transpose_bwd_kernel),
    CPU_BWD_ROW(LAYER_CLASS_TOKEN, cpu_token_bwd_kernel),
    CPU_BWD_ROW(LAYER_POS_EMBEDDING, cpu_token_bwd_kernel),
    CPU_BWD_ROW(LAYER_SELECT, cpu_token_bwd_kernel),
    CPU_BWD_ROW(LAYER_CONCAT, cpu_spread_bwd_kernel),
    CPU_BWD_ROW(LAYER_MEAN, cpu_spread_bwd_kernel),
    CPU_BWD_ROW(LAYER_SCALE_SHIFT, cpu_spread_bwd_kernel),
    CPU_BWD_ROW(LAYER_DROPOUT, cpu_dropout_bwd_kernel),
    CPU_ROW(LAYER_FLATTEN, cpu_view_kernel, cpu_view_kernel, cpu_view_kernel), /* views: nothing to run */
    CPU_ROW(LAYER_RESHAPE, cpu_view_kernel, cpu_view_kernel, cpu_view_kernel),
};

const backend_kernel *cpu_fp32_kernel(layer_kind kind)
{
    return (unsigned)kind < LAYER_KIND_COUNT ? cpu_kernels[kind][DTYPE_FP32].kernel : NULL;
}

const backend_kernel *cpu_fp32_backward_kernel(layer_kind kind)
{
    return (unsigned)kind < LAYER_KIND_COUNT ? cpu_backward[kind][DTYPE_FP32].kernel : NULL;
}

/* The largest cache of CPU 0 (its last level): from sysfs, which gives the slice the
 * CPU shares (an AMD CCD's L3), else from the C library (which may give a whole
 * socket's); 0 if unknown. */
static size_t last_level_cache_bytes(void)
{
    size_t best = 0;
    for (int i = 0; i < 8; i++) {
        char path[96], buf[64];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (fgets(buf, sizeof buf, f)) {
            char *end;
            unsigned long long v = strtoull(buf, &end, 10);
            size_t bytes = (size_t)v * (*end == 'K' ? 1024 : *end == 'M' ? 1024 * 1024 : 1);
            if (bytes > best)
                best = bytes;
        }
        fclose(f);
    }
    if (!best) {
        long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
        best = (size_t)(l3 > 0 ? l3 : l2 > 0 ? l2 : 0);
    }
    return best;
}

/* The memory probe's arrays, each as STREAM asks: at least four times the last-level
 * cache. Over less, part of the arrays stays in the cache from one pass to the next: on
 * the 2-vCPU Zen 4 VM (a 32 MiB L3), 3 x 21 MiB read 13% to 39% faster than 3 x 128 MiB
 * in eight interleaved rounds, and faster than a decode step's GEMV can stream its
 * weights. Between 32 and 512 MiB each, and the three at most an eighth of the memory. */
static size_t stream_array_bytes(size_t llc)
{
    size_t want = 4 * (llc ? llc : (size_t)32 << 20), lo = (size_t)32 << 20, hi = (size_t)512 << 20;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && (size_t)pages / 24 * (size_t)page < hi)
        hi = (size_t)pages / 24 * (size_t)page;
    want = want < lo ? lo : want;
    return want > hi ? hi : want;
}

/* The address space the cpu backend needs (ulimit -v): measured with ResNet-18 on a
 * 2-core Zen 3 VM, it ran from 400 MiB with one thread and 675 MiB with two (OpenBLAS's
 * buffers and each thread's malloc arena); these leave a margin. */
#define CPU_AS_BASE_MIB 192
#define CPU_AS_THREAD_MIB 320

static const char *env_or_unset(const char *name)
{
    const char *v = getenv(name);
    return v && !strpbrk(v, "\"\\") ? v : "unset";
}

static bench_status cpu_init(const backend_options *opt, void **ctx, char *err, size_t errlen)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = opt->threads > 0 ? opt->threads : (int)(cores > 0 ? cores : 1);
    if (threads > 1024) {
        snprintf(err, errlen, "--threads %d is more than 1024", threads);
        return BENCH_ERR_USAGE;
    }
    /* the settings read from the environment: a value that is none is refused, not
     * ignored (the run would not run what it was asked to) */
    const char *algo = getenv("LAYERBENCH_CPU_CONV_ALGO");
    if (!cpu_conv_algo_env_ok(algo)) {
        snprintf(err, errlen, "LAYERBENCH_CPU_CONV_ALGO='%.40s': expected im2col, gemm-1x1, winograd[:KIB], "
                              "winograd4[:KIB], direct, direct^T, tiles:ROWS, tiles^T:ROWS, chunked:ROWS or batched:N",
                 algo);
        return BENCH_ERR_USAGE;
    }
    const char *attn = getenv("LAYERBENCH_CPU_ATTN_BWD");
    if (!cpu_attn_bwd_env_ok(attn)) {
        snprintf(err, errlen, "LAYERBENCH_CPU_ATTN_BWD='%.40s': expected plain or blocks", attn);
        return BENCH_ERR_USAGE;
    }
    if (cpu_pgemm_env_problem(err, errlen))
        return BENCH_ERR_USAGE;
    /* OpenBLAS maps its buffers per thread and, when it cannot, waits forever: an
     * address-space limit under what they take is refused before the first GEMM */
    struct rlimit rl;
    int64_t need = (CPU_AS_BASE_MIB + CPU_AS_THREAD_MIB * (int64_t)threads) << 20;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (int64_t)rl.rlim_cur < need) {
        snprintf(err, errlen, "the address-space limit (ulimit -v) is %lld MiB, under the %lld MiB the cpu backend "
                              "needs with %d thread%s: OpenBLAS maps its buffers per thread and waits forever when it "
                              "cannot (raise ulimit -v, or give fewer --threads)",
                 (long long)(rl.rlim_cur >> 20), (long long)(need >> 20), threads, threads == 1 ? "" : "s");
        return BENCH_ERR_USAGE;
    }
    cpu_ctx *c = xcalloc(1, sizeof *c);
    c->threads = threads;
    c->search = !opt->algo_heuristic;
    c->choices.forward = !opt->algo_alone;
    /* twice the last-level cache, between 8 MiB and 256 MiB (a VM may report a whole
     * socket's L3 for two cores; the JSON says what was used) */
    size_t llc = last_level_cache_bytes();
    c->llc = llc;
    c->flush_bytes = 2 * (llc ? llc : (size_t)32 << 20);
    if (c->flush_bytes < ((size_t)8 << 20))
        c->flush_bytes = (size_t)8 << 20;
    if (c->flush_bytes > ((size_t)256 << 20))
        c->flush_bytes = (size_t)256 << 20;
    c->flush = malloc(c->flush_bytes);
    if (!c->flush) {
        snprintf(err, errlen, "out of memory for the %zu-byte cache flush buffer", c->flush_bytes);
        free(c);
        return BENCH_ERR_NOMEM;
    }
    memset(c->flush, 1, c->flush_bytes);
    /* 2 = OpenMP: OpenBLAS shares libgomp's threads with our loops (see CMakeLists.txt) */
    if (openblas_get_parallel() != 2)
        bench_diag("bench: warning: OpenBLAS is not its OpenMP build (parallel mode %d); "
                   "its threads and ours will compete for the cores\n", openblas_get_parallel());
    openblas_set_num_threads(threads);
    omp_set_num_threads(threads);
    c->description = xasprintf("{\"threads\": %d, \"openblas_config\": \"%s\", \"openblas_core\": \"%s\", "
                               "\"openblas_threads\": %d, \"openblas_parallel\": %d, \"openmp_max_threads\": %d, "
                               "\"GOMP_SPINCOUNT\": \"%s\", \"OMP_WAIT_POLICY\": \"%s\", \"OPENBLAS_CORETYPE\": \"%s\", "
                               "\"last_level_cache_bytes\": %zu, \"flush_bytes\": %zu, \"loops_isa\": \"%s\", "
                               "\"algo_for\": \"%s\"}",
                               threads, openblas_get_config(), openblas_get_corename(), openblas_get_num_threads(),
                               openblas_get_parallel(), omp_get_max_threads(), env_or_unset("GOMP_SPINCOUNT"),
                               env_or_unset("OMP_WAIT_POLICY"), env_or_unset("OPENBLAS_CORETYPE"), llc, c->flush_bytes,
                               host_isa_level(), opt->algo_alone ? "alone" : "forward");
    *ctx = c;
    return BENCH_OK;
}

/* The best of a few timed runs of fn within budget seconds (at least 3). */
typedef struct probe {
    float *a, *b, *c;
    int64_t n;
} probe;

/* Three arrays of n floats each into p, touched first by the threads that stream them;
 * false (and none) where they cannot all be had. */
static bool probe_arrays(probe *p, int64_t n)
{
    p->a = bench_alloc_floats(n), p->b = bench_alloc_floats(n), p->c = bench_alloc_floats(n);
    if (!p->a || !p->b || !p->c) {
        free(p->a), free(p->b), free(p->c);
        p->a = p->b = p->c = NULL;
        return false;
    }
    float *a = p->a, *b = p->b, *c = p->c;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        a[i] = 0.0f, b[i] = 1.0f, c[i] = 2.0f;
    p->n = n;
    return true;
}

static void run_sgemm(void *arg)
{
    probe *p = arg;
    int n = (int)p->n;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, p->a, n, p->b, n, 0.0f, p->c, n);
}

static void run_triad(void *arg)
{
    probe *p = arg;
    float *restrict a = p->a;
    const float *restrict b = p->b, *restrict c = p->c;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < p->n; i++)
        a[i] = b[i] + 3.0f * c[i];
}

/* The sgemm ceiling (a 1536^3 product on random data, the threads the layers use) and
 * two bandwidth ceilings, STREAM's triad (bytes counted as STREAM does: two arrays read,
 * one written) over three arrays of stream_array_bytes (memory), and over 3 MiB (the
 * caches: what a layer alone in warm or batch mode streams from). About 0.5 s. */
#define CACHE_PROBE_BYTES ((size_t)3 << 20)
/* The bf16 ceiling: our vdpbf16ps GEMM (bf16_cpu.c) as a 1536x1536 -> 1536 linear layer. */
typedef struct bf16_probe {
    void *ctx, *state;
    layer l;
    void *x, *y;
} bf16_probe;

static void run_bf16(void *arg)
{
    bf16_probe *p = arg;
    const void *in[1] = {p->x};
    cpu_linear_bf16_kernel.run(p->ctx, &p->l, p->state, in, NULL, p->y);
}

static void bf16_peak(void *ctx, int64_t n, backend_peaks *pk)
{
    cpu_ctx *c = ctx;
    bf16_probe p = {.ctx = ctx};
    p.l = (layer){.kind = LAYER_LINEAR, .dtype = DTYPE_BF16, .n_inputs = 1, .in = {2, {n, n}}, .out = {2, {n, n}},
                  .p = {.out_features = n}, .n_weight_floats = n * n};
    p.l.ins = &p.l.in;
    uint16_t *w = calloc((size_t)(n * n), 2);
    p.x = calloc((size_t)(n * n), 2), p.y = calloc((size_t)(n * n), 2);
    char impl[BACKEND_IMPL_LEN];
    int64_t ws;
    if (w && p.x && p.y) {
        for (int64_t i = 0; i < n * n; i++) /* 1 + i/64k-ish: finite, never zero */
            w[i] = ((uint16_t *)p.x)[i] = (uint16_t)(0x3f80 + (i & 0x7f));
        bool search = c->search; /* the bf16 kernel itself, not the search's pick (nor a choice kept) */
        c->search = false;
        bench_status st = cpu_linear_bf16_kernel.setup(ctx, &p.l, w, &p.state, impl, sizeof impl, &ws);
        c->search = search;
        if (st == BENCH_OK) {
            pk->dtype_flops_per_s[DTYPE_BF16] = 2.0 * (double)(n * n * n) / bench_best_seconds(run_bf16, &p, 0.1);
            snprintf(pk->dtype_probe[DTYPE_BF16], sizeof pk->dtype_probe[DTYPE_BF16],
                     "vdpbf16ps gemm %lldx%lldx%lld, %d threads, best of runs", (long long)n, (long long)n,
                     (long long)n, c->threads);
            cpu_linear_bf16_kernel.free(ctx, p.state);
        }
    }
    free(w), free(p.x), free(p.y);
}

static bench_status cpu_peaks(void *ctx, backend_peaks *pk)
{
    cpu_ctx *c = ctx;
    memset(pk, 0, sizeof *pk);
    probe p = {0};
    int64_t n = 1536;
    p.a = bench_alloc_floats(n * n), p.b = bench_alloc_floats(n * n), p.c = bench_alloc_floats(n * n);
    if (p.a && p.b && p.c) {
        layer_rng rng;
        layer_rng_seed(&rng, 11);
        layer_fill_uniform(p.a, n * n, -1.0f, 1.0f, &rng);
        layer_fill_uniform(p.b, n * n, -1.0f, 1.0f, &rng);
        p.n = n;
        pk->flops_per_s = 2.0 * (double)(n * n * n) / bench_best_seconds(run_sgemm, &p, 0.1);
        snprintf(pk->compute_probe, sizeof pk->compute_probe, "cblas_sgemm %lldx%lldx%lld, %d threads, best of runs",
                 (long long)n, (long long)n, (long long)n, c->threads);
    }
    free(p.a), free(p.b), free(p.c);
    /* bf16 where the CPU runs it natively; elsewhere bf16 runs on fp32 copies, under
     * fp32's roof */
    if (cpu_has_bf16())
        bf16_peak(ctx, n, pk);
    /* memory: three arrays of stream_array_bytes (touching them costs about 0.15 s on
     * the 2-vCPU VM); where they cannot be had, the cache flush buffer, already touched,
     * as three arrays (and the description says so); cache: 3 MiB */
    size_t want = stream_array_bytes(c->llc);
    for (int level = 0; level < 2; level++) {
        size_t bytes = level ? CACHE_PROBE_BYTES : 3 * want;
        n = (int64_t)(bytes / 3 / sizeof(float));
        bool ok = probe_arrays(&p, n), flush = false;
        if (!level && !ok) {
            bytes = c->flush_bytes, n = (int64_t)(bytes / 3 / sizeof(float)), flush = ok = true;
            p.a = (float *)(void *)c->flush, p.b = p.a + n, p.c = p.b + n, p.n = n;
        }
        if (ok) {
            double bps = 3.0 * (double)n * sizeof(float) / bench_best_seconds(run_triad, &p, level ? 0.02 : 0.1);
            if (level) {
                /* the layers that fit the last-level cache (32 MiB at most: a VM may report a
                 * whole socket's; 32 MiB where unknown) stream from the caches when timed warm */
                size_t llc = c->llc ? c->llc : (size_t)32 << 20;
                pk->cache_bytes_per_s = bps;
                pk->cache_bytes = (int64_t)(llc > ((size_t)32 << 20) ? (size_t)32 << 20 : llc);
            } else {
                pk->bytes_per_s = bps;
                snprintf(pk->bandwidth_probe, sizeof pk->bandwidth_probe,
                         "triad a = b + s*c over 3 x %zu MiB (%s; and 3 MiB for the caches), %d threads, best of runs",
                         bytes / 3 >> 20,
                         flush       ? "the cache flush buffer: no memory for more"
                         : !c->llc   ? "the last-level cache unknown: 4x 32 MiB each"
                         : want >= 4 * c->llc ? "each 4x the last-level cache, as STREAM asks"
                                              : "each as large as allowed, under 4x the last-level cache",
                         c->threads);
            }
        }
        if (!flush)
            free(p.a), free(p.b), free(p.c);
    }
    return pk->flops_per_s > 0 && pk->bytes_per_s > 0 ? BENCH_OK : BENCH_ERR_NOMEM;
}

/* The read stream of one round (backend_timing_i.stream): a sum over three arrays of
 * stream_array_bytes, allocated and touched at the first call (about 0.15 s on the
 * 2-vCPU VM) and kept until the context is freed, read as the decode GEMVs read their
 * weights: each thread's part as READ_STREAMS far-apart sequential streams, prefetched
 * 4 KB ahead into the L2. A decode step reads its weights and cache and writes next to
 * nothing, and a read stream runs faster than the triad (whose written third also costs
 * a read of each line before it is written): the bf16 and fp32 GEMVs read at up to 1.37x
 * the triad's figure. A warm-up pass, then the best of three: 40 ms over 3 x 128 MiB at
 * 40 GB/s. Not
 * where the arrays would take over a quarter of the memory still available (a model
 * near the memory's size): 0 then. */
#define READ_STREAMS 8
#define READ_AHEAD 1024 /* floats: 4 KB */
static volatile float read_sink;

/* READ_STREAMS streams over blocks of READ_BLOCK floats at p: 16 floats a stream each. */
#define READ_BLOCK (16 * READ_STREAMS)
__attribute__((target("avx2"))) static void read_part_avx2(const float *p, int64_t blocks)
{
    int64_t seg = 16 * blocks;
    __m256 acc[READ_STREAMS];
    for (int q = 0; q < READ_STREAMS; q++)
        acc[q] = _mm256_setzero_ps();
    for (int64_t k = 0; k < seg; k += 16)
        for (int q = 0; q < READ_STREAMS; q++) {
            const float *r = p + q * seg + k;
            _mm_prefetch((const char *)(r + READ_AHEAD), _MM_HINT_T1);
            acc[q] = _mm256_add_ps(acc[q], _mm256_add_ps(_mm256_loadu_ps(r), _mm256_loadu_ps(r + 8)));
        }
    __m256 t = acc[0];
    for (int q = 1; q < READ_STREAMS; q++)
        t = _mm256_add_ps(t, acc[q]);
    float v[8];
    _mm256_storeu_ps(v, t);
    read_sink = v[0] + v[7];
}

static void read_part(const float *p, int64_t blocks)
{
    float acc[READ_STREAMS] = {0};
    int64_t seg = 16 * blocks;
    for (int64_t k = 0; k < seg; k++)
        for (int q = 0; q < READ_STREAMS; q++)
            acc[q] += p[q * seg + k];
    read_sink = acc[0] + acc[READ_STREAMS - 1];
}

/* One read of the three arrays of p (a probe) by every thread. */
static void run_read(void *arg)
{
    const probe *p = arg;
    bool avx2 = host_has(HOST_AVX2);
#pragma omp parallel
    {
        int64_t lo, hi;
        cpu_thread_span(p->n / READ_BLOCK, &lo, &hi); /* whole blocks a thread */
        const float *arr[3] = {p->a, p->b, p->c};
        for (int k = 0; k < 3; k++)
            (avx2 ? read_part_avx2 : read_part)(arr[k] + READ_BLOCK * lo, hi - lo);
    }
}

static double cpu_stream(void *ctx)
{
    cpu_ctx *c = ctx;
    if (!c->stream_tried) {
        c->stream_tried = true;
        size_t bytes = stream_array_bytes(c->llc);
        int64_t avail = bench_mem_available();
        probe p;
        if ((avail < 0 || 3 * (int64_t)bytes <= avail / 4) && probe_arrays(&p, (int64_t)(bytes / sizeof(float))))
            c->stream = xmalloc(sizeof p), *c->stream = p;
    }
    if (!c->stream)
        return 0.0;
    /* budget 0: a warm-up pass, then the best of three */
    return 3.0 * (double)(c->stream->n / READ_BLOCK * READ_BLOCK) * sizeof(float) /
           bench_best_seconds(run_read, c->stream, 0.0);
}

static void cpu_free(void *ctx)
{
    cpu_ctx *c = ctx;
    if (c->stream)
        free(c->stream->a), free(c->stream->b), free(c->stream->c);
    free(c->stream);
    free(c->description);
    free(c->marks);
    free(c->flush);
    free(c->scratch);
    free(c->choices.v);
    for (int i = 0; i < c->choices.n_given; i++)
        free(c->choices.given[i].key);
    free(c->choices.given);
    free(c);
}

static void *cpu_alloc(void *ctx, size_t bytes)
{
    (void)ctx;
    return bench_alloc_floats((int64_t)((bytes + sizeof(float) - 1) / sizeof(float)));
}

static void cpu_release(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

static bench_status cpu_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    memcpy(dst, src, bytes);
    return BENCH_OK;
}

static bench_status cpu_sync(void *ctx)
{
    (void)ctx;
    return BENCH_OK;
}

static void cpu_timer_start(void *ctx) { ((cpu_ctx *)ctx)->t0 = bench_now(); }
static double cpu_timer_stop(void *ctx) { return bench_now() - ((cpu_ctx *)ctx)->t0; }

static bench_status cpu_marks_prepare(void *ctx, int n)
{
    cpu_ctx *c = ctx;
    free(c->marks);
    c->marks = xcalloc((size_t)(n > 0 ? n : 1), sizeof *c->marks);
    c->n_marks = n;
    return BENCH_OK;
}

static void cpu_timer_mark(void *ctx, int i) { ((cpu_ctx *)ctx)->marks[i] = bench_now(); }

static void cpu_marks_read(void *ctx, double *seconds, int n)
{
    cpu_ctx *c = ctx;
    for (int i = 0; i < n && i < c->n_marks; i++)
        seconds[i] = c->marks[i] - c->t0;
}

/* --algo-cache: a choice as "path samples candidates" */
static int cpu_choices_get(void *ctx, void (*emit)(void *user, const char *key, const char *value), void *user)
{
    cpu_choices *c = &((cpu_ctx *)ctx)->choices;
    for (int i = 0; i < c->n; i++) {
        layer l = {.kind = c->v[i].kind, .dtype = c->v[i].dtype, .p = c->v[i].p, .in = c->v[i].in};
        char key[512], value[96];
        snprintf(value, sizeof value, "%lld %lld %lld", (long long)c->v[i].algo[0], (long long)c->v[i].algo[1],
                 (long long)c->v[i].algo[2]);
        emit(user, cpu_choice_key(&l, key, sizeof key), value);
    }
    return c->stale;
}

static void cpu_choices_put(void *ctx, const char *key, const char *value)
{
    cpu_choices *c = &((cpu_ctx *)ctx)->choices;
    long long a, b, n;
    char end;
    if (sscanf(value, "%lld %lld %lld %c", &a, &b, &n, &end) != 3)
        return;
    c->given = xrealloc(c->given, (size_t)(c->n_given + 1) * sizeof *c->given);
    c->given[c->n_given++] = (cpu_given){xstrdup(key), {a, b, n}};
}

/* OpenBLAS's kernels against what the CPU can run: OPENBLAS_CORETYPE (or an old
 * OpenBLAS) can make it run AVX2 kernels on an AVX-512 CPU, at about half the GEMM
 * throughput. Said, never overridden. */
static void cpu_warnings(void *ctx, char *buf, size_t len)
{
    (void)ctx;
    const char *core = openblas_get_corename(), *forced = getenv("OPENBLAS_CORETYPE");
    static const char *const avx512_cores[] = {"skylakex", "cooperlake", "sapphirerapids", NULL};
    static const char *const avx2_cores[] = {"haswell", "zen", "excavator", "skylakex", "cooperlake",
                                             "sapphirerapids", NULL};
    bool core512 = false, core2 = false;
    for (int i = 0; core && avx512_cores[i]; i++)
        core512 |= strcasecmp(core, avx512_cores[i]) == 0;
    for (int i = 0; core && avx2_cores[i]; i++)
        core2 |= strcasecmp(core, avx2_cores[i]) == 0;
    const char *has = host_has(HOST_AVX512F) && !core512 ? "AVX-512"
                      : host_has(HOST_AVX2) && !core2    ? "AVX2"
                                                         : NULL;
    buf[0] = 0;
    const char *isa = getenv("LAYERBENCH_CPU_GEMM_ISA");
    if (isa && strcmp(isa, cpu_pgemm_get()->isa) != 0) { /* a variant this CPU cannot run */
        int k = snprintf(buf, len, "cpu: LAYERBENCH_CPU_GEMM_ISA=%.20s asks for instructions this CPU does not have: "
                                   "our GEMMs run their %s variant instead\n", isa, cpu_pgemm_get()->isa);
        buf += k > 0 && (size_t)k < len ? k : 0, len -= k > 0 && (size_t)k < len ? (size_t)k : 0;
    }
    if (has)
        snprintf(buf, len, "cpu: OpenBLAS runs its %s kernels on a CPU that has %s%s%s%s: convolutions and linear "
                           "layers run slower than this CPU can (about half the GEMM throughput for AVX2 kernels on an "
                           "AVX-512 CPU)%s\n",
                 core ? core : "?", has, forced ? " (OPENBLAS_CORETYPE=" : "", forced ? forced : "",
                 forced ? " is set)" : "", forced ? "; unset OPENBLAS_CORETYPE to let OpenBLAS choose" : "");
}

static int cpu_thread_count(void *ctx) { return ((cpu_ctx *)ctx)->threads; }

/* The canary: 32 parallel regions of the thread pool, each thread running a chain of
 * 1024 dependent multiply-adds, about 1 us, in each. It follows what small layers
 * depend on, the cores' speed and how fast the pool's threads start and join, which a
 * VM can slow for minutes while one thread alone runs at full speed. */
static double cpu_canary(void *ctx)
{
    (void)ctx;
    double sink = 0;
    double t0 = bench_now();
    for (int r = 0; r < 32; r++) {
#pragma omp parallel reduction(+ : sink)
        {
            double a = 1.0 + omp_get_thread_num();
            for (int i = 0; i < 1024; i++) {
                a = a * 0.999999 + 1e-6;
                __asm__ volatile("" : "+x"(a));
            }
            sink += a;
        }
    }
    double t = bench_now() - t0;
    __asm__ volatile("" ::"x"(sink));
    return t;
}

static const char *cpu_describe(void *ctx) { return ((cpu_ctx *)ctx)->description; }

const backend_ops backend_cpu_ops = {
    .api = BACKEND_API,
    .name = "cpu",
    .device_memory = false,
    .device = {.init = cpu_init, .free = cpu_free, .alloc = cpu_alloc, .release = cpu_release, .upload = cpu_copy,
               .download = cpu_copy, .convert = cpu_convert, .sync = cpu_sync, .thread_count = cpu_thread_count, .describe = cpu_describe,
               .warnings = cpu_warnings, .peaks = cpu_peaks},
    .timing = {.timer_start = cpu_timer_start, .timer_stop = cpu_timer_stop, .flush_cache = cpu_env_flush_cache,
               .marks_prepare = cpu_marks_prepare, .timer_mark = cpu_timer_mark, .marks_read = cpu_marks_read,
               .canary = cpu_canary, .stream = cpu_stream},
    .layers = {.kernels = &cpu_kernels, .choices_get = cpu_choices_get, .choices_put = cpu_choices_put,
               .backward = &cpu_backward, .optimizer_update = cpu_optimizer_update},
};
