/* The backend contract: what a backend (layers/<name>/) gives the harness, in three small
 * interfaces, as ggml's ggml-backend-impl.h splits its own:
 *   - device: its context, memory, copies, synchronisation and what it says about the
 *     machine;
 *   - timing: the timer, the stream hold, graphs, the in-model marks, the cold mode's
 *     cache flush and the canary;
 *   - layers: the kernel table keyed by (kind, dtype), and the optional link of a whole
 *     forward and saved algorithm choices.
 * Optional slots are marked; the wrappers below check them for NULL, so that a backend
 * says what it supports and the harness never guesses. The registry that opens backends
 * by name is the harness's (bench/measure/backend_registry.h). */
#ifndef LAYERBENCH_BACKEND_H
#define LAYERBENCH_BACKEND_H

#include "layer.h"
#include "model.h"
#include "util.h"

typedef struct backend_options {
    int threads;            /* CPU threads; 0 = every core */
    bool algo_heuristic;    /* CUDA: take cuDNN's heuristic choice instead of timing the candidates */
    bool algo_alone;        /* cpu (--algo-for alone): the searches time each candidate warm, alone; by
                               default in the conditions a forward leaves it (weights out of the caches) */
    int conv_api;           /* CUDA: convolution candidates from cuDNN's APIs: 0 both, 1 legacy, 2 graph */
} backend_options;

/* The machine's ceilings for the roofline (backend_device_i.peaks). */
typedef struct backend_peaks {
    double flops_per_s;       /* 0: unknown */
    double bytes_per_s;       /* from memory (DRAM, HBM), working sets far beyond the caches */
    double cache_bytes_per_s; /* the same stream over a working set the caches hold; 0: unknown */
    int64_t cache_bytes;      /* up to this many bytes, a layer run warm streams from the caches */
    char compute_probe[160];  /* e.g. "cblas_sgemm 1536x1536x1536, 2 threads, best of runs" */
    char bandwidth_probe[160];
    /* The compute ceiling of the dtypes the backend measures apart (a bf16 GEMM beside
     * the sgemm; TF32 on tensor cores), with their probes; 0 where not measured, and
     * then flops_per_s stands (backend_peak_flops). */
    double dtype_flops_per_s[DTYPE_COUNT];
    char dtype_probe[DTYPE_COUNT][120];
} backend_peaks;

/* The compute ceiling for rows of dtype t: its own where measured, else the fp32 one. */
static inline double backend_peak_flops(const backend_peaks *p, dtype_t t)
{
    return (unsigned)t < DTYPE_COUNT && p->dtype_flops_per_s[t] > 0 ? p->dtype_flops_per_s[t] : p->flops_per_s;
}

/* Device and memory. */
typedef struct backend_device_i {
    /* Creates the backend's context. On failure err says why in one line
     * (e.g. "no CUDA device"). */
    bench_status (*init)(const backend_options *opt, void **ctx, char *err, size_t errlen);
    void (*free)(void *ctx);
    /* Memory the backend's layers read and write; NULL on failure (e.g. out of device
     * memory: the caller reports it for that layer and goes on). release(NULL) is a no-op. */
    void *(*alloc)(void *ctx, size_t bytes);
    void (*release)(void *ctx, void *ptr);
    /* Copies ordered with the work queued before them. The host buffer may be reused as
     * soon as the call returns; a download's data is in place when it returns. A failure
     * may surface only at the next sync or timer_stop. */
    bench_status (*upload)(void *ctx, void *dst, const void *src, size_t bytes);
    bench_status (*download)(void *ctx, void *dst, const void *src, size_t bytes);
    /* Optional: queues the conversion of n elements at src, of dtype from, into dst as
     * dtype to (round to nearest even), ordered like a layer; both convertible types
     * (dtype_convertible). Without it, a mixed model's chained forward cannot run. */
    void (*convert)(void *ctx, void *dst, dtype_t to, const void *src, dtype_t from, int64_t n);
    /* Waits for all work queued so far; BENCH_ERR_BACKEND if any of it failed. */
    bench_status (*sync)(void *ctx);
    /* Optional: bytes of its own memory the backend can still allocate (free device
     * memory); absent for backends that use host memory. */
    int64_t (*mem_available)(void *ctx);
    /* Threads in use (CPU); optional. */
    int (*thread_count)(void *ctx);
    /* A JSON object describing the device and libraries, owned by ctx (valid until the
     * next call). */
    const char *(*describe)(void *ctx);
    /* Optional: what the backend noticed about the machine while it ran (clocks that
     * moved, throttling), one warning per line into buf; "" when there is nothing. */
    void (*warnings)(void *ctx, char *buf, size_t len);
    /* Optional: the roofline's ceilings, measured on this machine as the backend runs
     * (its threads): FP32 FLOP/s of a large matrix product (and the dtypes it runs
     * faster, in dtype_flops_per_s), and bytes/s of
     * a stream (reads plus writes) over memory larger than the caches and over a few MiB
     * the caches hold, each the best of a few runs (about 0.3 s together). */
    bench_status (*peaks)(void *ctx, backend_peaks *p);
    /* Optional: why the last call failed (timer_stop < 0, sync failed), or "". */
    const char *(*last_error)(void *ctx);
    /* Optional: forgets the last failure once the caller has dealt with it, so that one
     * failed layer does not fail the next. Called before each layer is set up. */
    void (*clear_error)(void *ctx);
} backend_device_i;

/* Timing, hold and graph. */
typedef struct backend_timing_i {
    /* A timer around queued work: start, then stop returns the seconds between them
     * once the work between them has completed; a negative value is an error (the
     * reason is in last_error). */
    void (*timer_start)(void *ctx);
    double (*timer_stop)(void *ctx);
    /* Optional: makes the device wait, before the work queued next, until the next
     * timer_stop, so that the host's cost of queuing launches is not timed (a GPU stream
     * held by a spinning kernel, as NVBench's blocking kernel does). Never called while
     * a graph is being captured; at most a few hundred launches are queued while held. */
    void (*hold)(void *ctx);
    /* Optional: evicts caches before a cold sample (the CPU's last-level cache, the GPU's
     * L2); without it the backend has no cold mode. */
    void (*flush_cache)(void *ctx);
    /* Optional: the in-model view. marks_prepare readies n marks (untimed; BENCH_OK or a
     * failure); timer_mark(ctx, i) records mark i inside the current sample (no
     * allocation, no synchronisation); after timer_stop, marks_read writes the seconds
     * from the sample's start to each of the n marks. */
    bench_status (*marks_prepare)(void *ctx, int n);
    void (*timer_mark)(void *ctx, int i);
    void (*marks_read)(void *ctx, double *seconds, int n);
    /* Optional: capture the work queued between graph_begin and graph_end into a graph
     * that graph_launch replays (CUDA graphs). */
    bench_status (*graph_begin)(void *ctx);
    bench_status (*graph_end)(void *ctx, void **graph);
    void (*graph_launch)(void *ctx, void *graph);
    void (*graph_free)(void *ctx, void *graph);
    /* Optional: one timing of the backend's canary, seconds: a fixed workload that uses
     * the backend the way layers do (the CPU: every thread of its pool, joined again and
     * again), so that a slower machine shows in it. Without it the harness times a
     * single-thread chain (measure_canary). */
    double (*canary)(void *ctx);
    /* Optional: one short measurement of a read-only stream from memory, bytes per
     * second (the CPU: a sum over arrays as large as peaks' bandwidth probe uses, kept
     * from the first call on, best of three passes); 0 where it cannot run. Timed at the
     * start of rounds of a decode step (measure_options.stream_rounds), which reads its
     * weights and cache and writes next to nothing, so that the step's memory limit is
     * taken at a read's speed over the same minutes as its samples. */
    double (*stream)(void *ctx);
} backend_timing_i;

/* The room for a layer's impl (what a kernel chose, and why): a search's choice with
 * what it was timed for runs past 96 characters ("winograd F4x4/3x3 whole batch with
 * GEMMs over threads (fastest of 15 in the forward's conditions)"). */
#define BACKEND_IMPL_LEN 160

/* How a backend runs one (kind, dtype): an entry of its kernel table. env is what the
 * backend's kernel_env gives (its context by default). Every kernel of every backend
 * has these signatures, so one dispatcher (backend_layer_setup and the rest below)
 * serves them all. */
typedef struct backend_kernel {
    /* Optional, untimed: descriptors, algorithm choice, workspace for a layer whose
     * weights w already live in backend memory. Sets *state (freed by free), writes the
     * implementation chosen into impl (or, when unsupported, why) and the workspace it
     * allocated into *workspace_bytes. BENCH_ERR_UNSUPPORTED when the backend cannot run
     * this configuration of the kind. Without setup, the layer runs with a NULL state
     * and impl is the entry's impl. */
    bench_status (*setup)(void *env, const layer *l, const void *w, void **state, char *impl, size_t impl_len,
                          int64_t *workspace_bytes);
    const char *impl;
    /* The timed part: queues the layer on in[0..l->n_inputs); no allocation, printing or
     * synchronisation. For kinds that alias their input, out == in[0]. */
    void (*run)(void *env, const layer *l, void *state, const void *const *in, const void *w, void *out);
    void (*free)(void *env, void *state); /* optional */
    /* Optional (kinds with layer_parts()): turns the per-part timing of the layer's later
     * runs on or off (untimed; never on while a graph is captured); false when this
     * kernel does not split the layer. parts_read writes the last run's seconds per part
     * once timer_stop returned, in the order of the parts. */
    bool (*parts_enable)(void *env, void *state, bool on);
    void (*parts_read)(void *env, void *state, double *seconds);
    /* Optional: the parts this kernel runs the layer as, where they are its own rather
     * than the kind's (oneDNN's reorders around a primitive): writes them into
     * parts[LAYER_MAX_PARTS] in the order they run and returns how many; 0: the kind's
     * own (layer_parts()). parts_enable and parts_read then time these. */
    int (*parts)(void *env, void *state, const layer *l, layer_part_info *parts);
    /* Optional: the isolated rows (warm, cold, batch) will run this state on the inputs
     * in[] from now on. The kernel may convert them once, here and untimed, into the
     * layout its primitive prefers, and keep the output in that layout in its own memory
     * (out is then not written), so that the rows time the primitive alone, as benchdnn
     * does; the conversions show as rows of their own in the chained forward (model_link).
     * Writes the layer's impl as it now runs into impl; leaves it alone when nothing
     * changed. Never called on a state that bench check or the chained forward runs. */
    void (*isolate)(void *env, void *state, const void *const *in, char *impl, size_t impl_len);
    /* Optional: relative error accepted against the reference for l with this kernel
     * (default: the kind's own tolerance), its dtype's rounding aside: backend_tolerance
     * adds dtype_tolerance. */
    double (*tolerance)(void *env, const layer *l);
} backend_kernel;

/* One (kind, dtype) cell of a kernel table: the kernel, or NULL and why the backend
 * cannot run it (the row's impl then says so). */
typedef struct backend_kernel_entry {
    const backend_kernel *kernel;
    const char *unsupported;
} backend_kernel_entry;

/* A backend's kernel table: [LAYER_KIND_COUNT][DTYPE_COUNT] entries. */
typedef backend_kernel_entry backend_kernel_table[LAYER_KIND_COUNT][DTYPE_COUNT];

/* The layers: the kernel table and what applies to a whole forward. */
/* An optimizer's update: which, its hyperparameters (torch's defaults but lr), the step t. */
typedef struct backend_optimizer_args {
    model_optimizer kind;
    float lr, beta1, beta2, eps, weight_decay;
    int64_t t;
} backend_optimizer_args;

typedef struct backend_layers_i {
    const backend_kernel_table *kernels;
    /* Optional: the env the kernels get (the CUDA backend's library handles and
     * stream); without it, the context itself. */
    void *(*kernel_env)(void *ctx);
    /* Optional: called once every layer of a chained forward is set up (states[i]: the
     * state layer i's kernel set up), before the forward first runs: lets values pass
     * between the backend's layers in the layouts it prefers (oneDNN's blocked ones)
     * rather than plain. Whatever is read through the kernels' pointers stays plain in
     * them: the model's input and output, and every value a view or a layer the backend
     * does not link reads. values[v] is value v's buffer (shape_numel elements of its dtype at least,
     * shared with values whose lifetimes do not overlap v's), which a linked value may
     * hold in its own layout where it fits. Rewrites the impl of each layer it changed
     * (layer i's at impl + i * impl_len). Untimed; BENCH_OK or a failure (last_error says
     * why), after which the forward is not run. */
    bench_status (*model_link)(void *ctx, const model *m, void *const *states, void *const *values, char *impl,
                               size_t impl_len);
    /* Optional, the algorithm choices of --algo search (--algo-cache, choices.h): every
     * choice setup made or took so far, as (layer key, value) text pairs without tabs or
     * line breaks; how many given ones it found stale (their candidate no longer
     * applies) and searched again. */
    int (*choices_get)(void *ctx, void (*emit)(void *user, const char *key, const char *value), void *user);
    /* ... and a choice to take instead of searching, given before any setup. */
    void (*choices_put)(void *ctx, const char *key, const char *value);
    /* Optional: the kernels that call(user), one untimed call of a layer, launches, by
     * name and in launch order, written "name grid GxGxG block BxBxB; name ..." into buf
     * (cuda: the call captured as a CUDA graph and its kernel nodes read). False when
     * they cannot be told (the column is then empty); the call may then not have run. Without
     * it, a row's kernels are its impl's kernel (backend_layer_kernels). */
    bool (*kernel_names)(void *ctx, void (*call)(void *user), void *user, char *buf, size_t len);
    /* Optional: the backward kernels (layers whose pass is PASS_BACKWARD), a table like
     * kernels. Their run reads in[0..n_inputs) the forward's inputs, in[n_inputs] its
     * output and in[n_inputs + 1] the output's gradient, and writes into out the inputs'
     * gradients one after another, then the weights' (layer_backward_floats elements),
     * what layer_desc.backward computes. Without it, no backward runs on the backend. */
    const backend_kernel_table *backward;
    /* Optional: an optimizer's update of a training step (--optimizer), queued like a
     * layer's run: n fp32 parameters w (backend memory) from their gradient g, with its
     * state m and v (AdamW's first and second moments, NULL for SGD): torch's
     * single-tensor SGD without momentum (w -= lr g) and AdamW (w *= 1 - lr wd; m = b1 m
     * + (1 - b1) g; v = b2 v + (1 - b2) g^2; w -= lr (m / (1 - b1^t)) / (sqrt(v / (1 -
     * b2^t)) + eps)). Without it, a step with an optimizer is not run on the backend. */
    void (*optimizer_update)(void *ctx, const backend_optimizer_args *a, float *w, const float *g, float *m, float *v,
                             int64_t n);
} backend_layers_i;

/* The version of this contract (backend_ops, its interfaces, the kernel table). A
 * module's table carries the version it was built against, and the registry refuses
 * one of another: a liblayerbench_<name>.so left by another build would otherwise be
 * called through a layout it does not have. Raised with every change to them. */
#define BACKEND_API 3

typedef struct backend_ops {
    int api;                /* BACKEND_API as the backend was built: first, where every version has it */
    const char *name;
    /* The backend has its own memory: the model's input upload and output download
     * are timed and reported apart from the layers. */
    bool device_memory;
    backend_device_i device;
    backend_timing_i timing;
    backend_layers_i layers;
} backend_ops;

typedef struct backend {
    const backend_ops *ops;
    void *ctx;
} backend;

/* Opens a backend; on failure err holds a one-line reason. backend_close() frees it. */
bench_status backend_open(const backend_ops *ops, const backend_options *opt, backend *b, char *err,
                          size_t errlen);
void backend_close(backend *b);
int backend_threads(const backend *b);

/* The backend's last error, or "". */
const char *backend_last_error(const backend *b);
/* Forgets it (see clear_error). */
void backend_clear_error(const backend *b);

/* Bytes the backend can still allocate, or -1 where it uses host memory. */
int64_t backend_mem_available(const backend *b);

/* Allocates n floats on the backend and uploads host data into them (host may be NULL). */
float *backend_alloc_floats(const backend *b, int64_t n, const float *host);
/* Allocates n elements of t on the backend and uploads host's n floats into them,
 * converted to t (host may be NULL); NULL when out of memory or t has no host conversion
 * (int8). */
void *backend_alloc_values(const backend *b, dtype_t t, int64_t n, const float *host);
/* Downloads n elements of t from the backend into host as floats. */
bench_status backend_download_values(const backend *b, dtype_t t, float *host, const void *src, int64_t n);

/* A layer set up on a backend by its kernel table's entry for (l->kind, l->dtype). */
typedef struct backend_layer {
    const backend_kernel *kernel;
    const layer *l;
    const void *w;
    void *env;
    void *state;    /* the kernel's own */
} backend_layer;

/* The entry for l on b (its backward kernel for a backward pass; for a train pass, its
 * forward kernel where the backward has one too: that kernel, given a layer whose pass
 * is PASS_TRAIN, computes the forward in training mode); its kernel is NULL when b
 * cannot run l. */
backend_kernel_entry backend_kernel_of(const backend *b, const layer *l);
/* Untimed setup of l, whose weights w live in b's memory (see backend_kernel.setup):
 * *out is freed by backend_layer_free(). BENCH_ERR_UNSUPPORTED, with the reason in impl,
 * when the table has no kernel or the kernel refuses the layer. */
bench_status backend_layer_setup(const backend *b, const layer *l, const void *w, backend_layer **out, char *impl,
                                 size_t impl_len, int64_t *workspace_bytes);
/* Queues the layer (backend_kernel.run). */
void backend_layer_run(const backend_layer *bl, const void *const *in, void *out);
/* backend_layer_free(b, NULL) is a no-op. */
void backend_layer_free(const backend *b, backend_layer *bl);
/* The kernel's optional slots; without them: false, nothing, 0, nothing, and the kind's
 * own tolerance. */
bool backend_layer_parts_enable(const backend_layer *bl, bool on);
void backend_layer_parts_read(const backend_layer *bl, double *seconds);
int backend_layer_parts(const backend_layer *bl, layer_part_info *parts);
void backend_layer_isolate(const backend_layer *bl, const void *const *in, char *impl, size_t impl_len);
/* The kernels one call of the layer runs (on in and out), for the `kernels` column:
 * the backend's kernel_names where it has it (untimed: cuda captures the call, never
 * runs it, and clears what could not be captured),
 * else the kernel impl names: impl up to its first " (", " [" or ", " (the search's
 * and the fallback's remarks). */
void backend_layer_kernels(const backend *b, const backend_layer *bl, const char *impl, const void *const *in,
                           void *out, char *buf, size_t len);
/* Relative error accepted for l on b: the kernel's (or the kind's) plus its dtype's
 * (dtype_tolerance). */
double backend_tolerance(const backend *b, const layer *l);
/* The backend's model_link on these layers (BENCH_OK when it has none). */
bench_status backend_model_link(const backend *b, const model *m, backend_layer *const *layers, void *const *values,
                                char *impl, size_t impl_len);

#endif
