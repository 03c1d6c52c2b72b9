/* The CPU backend: host memory, CLOCK_MONOTONIC, OpenBLAS and OpenMP threads. */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "cpu_kernels.h"

static const cpu_kernel *const cpu_kernels[LAYER_KIND_COUNT] = {
    [LAYER_CONV2D] = &cpu_conv2d_kernel,
    [LAYER_BATCHNORM2D] = &cpu_batchnorm2d_kernel,
    [LAYER_RELU] = &cpu_relu_kernel,
    [LAYER_RELU6] = &cpu_relu6_kernel,
    [LAYER_SIGMOID] = &cpu_sigmoid_kernel,
    [LAYER_MAXPOOL2D] = &cpu_maxpool2d_kernel,
    [LAYER_AVGPOOL2D] = &cpu_avgpool2d_kernel,
    [LAYER_ADAPTIVE_AVGPOOL2D] = &cpu_adaptive_avgpool2d_kernel,
    [LAYER_FLATTEN] = &cpu_view_kernel,
    [LAYER_LINEAR] = &cpu_linear_kernel,
    [LAYER_DROPOUT] = &cpu_view_kernel,
    [LAYER_SOFTMAX] = &cpu_softmax_kernel,
    [LAYER_ADD] = &cpu_add_kernel,
};

typedef struct cpu_ctx {
    int threads;
    double t0;
    char *description;
} cpu_ctx;

typedef struct cpu_layer {
    const layer *l;
    const cpu_kernel *k;
    const float *w;
    void *kstate;
} cpu_layer;

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
    cpu_ctx *c = xcalloc(1, sizeof *c);
    c->threads = threads;
    /* 2 = OpenMP: OpenBLAS shares libgomp's threads with our loops (see CMakeLists.txt) */
    if (openblas_get_parallel() != 2)
        fprintf(stderr, "bench: warning: OpenBLAS is not its OpenMP build (parallel mode %d); "
                        "its threads and ours will compete for the cores\n", openblas_get_parallel());
    openblas_set_num_threads(threads);
    omp_set_num_threads(threads);
    c->description = xasprintf("{\"threads\": %d, \"openblas_config\": \"%s\", \"openblas_threads\": %d, "
                               "\"openblas_parallel\": %d, \"openmp_max_threads\": %d, \"GOMP_SPINCOUNT\": \"%s\", "
                               "\"OMP_WAIT_POLICY\": \"%s\"}",
                               threads, openblas_get_config(), openblas_get_num_threads(), openblas_get_parallel(),
                               omp_get_max_threads(), env_or_unset("GOMP_SPINCOUNT"), env_or_unset("OMP_WAIT_POLICY"));
    *ctx = c;
    return BENCH_OK;
}

static void cpu_free(void *ctx)
{
    cpu_ctx *c = ctx;
    free(c->description);
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

static bench_status cpu_layer_setup(void *ctx, const layer *l, const float *w, void **state, char *impl,
                                    size_t impl_len, int64_t *workspace_bytes)
{
    (void)ctx;
    *workspace_bytes = 0;
    const cpu_kernel *k = cpu_kernels[l->kind];
    if (!k)
        return BENCH_ERR_UNSUPPORTED;
    cpu_layer *cl = xcalloc(1, sizeof *cl);
    *cl = (cpu_layer){.l = l, .k = k, .w = w};
    if (k->setup) {
        bench_status st = k->setup(l, &cl->kstate, impl, impl_len, workspace_bytes);
        if (st != BENCH_OK) {
            free(cl);
            return st;
        }
    } else {
        snprintf(impl, impl_len, "%s", k->impl);
    }
    *state = cl;
    return BENCH_OK;
}

static void cpu_layer_run(void *ctx, void *state, const float *in, const float *in2, float *out)
{
    (void)ctx;
    cpu_layer *cl = state;
    cl->k->run(cl->l, cl->kstate, in, in2, cl->w, out);
}

static void cpu_layer_free(void *ctx, void *state)
{
    (void)ctx;
    cpu_layer *cl = state;
    if (!cl)
        return;
    if (cl->k->free)
        cl->k->free(cl->kstate);
    free(cl);
}

static const char *const cpu_modes[] = {"isolated", NULL};

static int cpu_thread_count(void *ctx) { return ((cpu_ctx *)ctx)->threads; }
static const char *cpu_describe(void *ctx) { return ((cpu_ctx *)ctx)->description; }

const backend_ops backend_cpu_ops = {
    .name = "cpu",
    .init = cpu_init,
    .free = cpu_free,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_copy,
    .download = cpu_copy,
    .sync = cpu_sync,
    .timer_start = cpu_timer_start,
    .timer_stop = cpu_timer_stop,
    .flush_cache = NULL, /* optional: CPU samples run warm, as the layer would in a model */
    .layer_setup = cpu_layer_setup,
    .layer_run = cpu_layer_run,
    .layer_free = cpu_layer_free,
    .thread_count = cpu_thread_count,
    .describe = cpu_describe,
    .modes = cpu_modes,
    .device_memory = false,
};
