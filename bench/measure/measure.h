/* Measurement policy, in one place.
 *
 * Every layer is set up once (untimed: buffers, weights, algorithm choice), and so is
 * the chained forward. Then they are sampled in rounds, one chunk each per round: a
 * chunk is one Google Benchmark run of about --min-time (the first with --warmup-time
 * of warm-up and Google Benchmark's iteration estimate, the later ones of the same
 * iteration count, whose first sample re-warms the caches and is dropped). A unit stops
 * when the 95% confidence interval of its median is within --max-noise of the median
 * (with at least --min-samples samples), or when it has sampled for --timeout seconds.
 * Interleaving spreads every layer's samples over the whole run, so a slow phase of the
 * machine touches all layers alike instead of one layer entirely.
 *
 * Timing modes, the same names on every backend: warm (one call per sample, caches as
 * the previous sample left them), cold (caches flushed before each sample: the CPU's
 * last-level cache, the GPU's L2), batch (many calls per sample, for layers too short for
 * one call to be timed well; one graph launch on a GPU). auto picks batch for a layer
 * whose single call is shorter than 20 times the timer's floor, warm otherwise. The
 * chained forward also times each layer inside it (the in-model view). */
#ifndef LAYERBENCH_MEASURE_H
#define LAYERBENCH_MEASURE_H

#include <stdbool.h>

#include "backend.h"
#include "model.h"
#include "stats.h"

/* How a set is measured. Its values reach worker processes as bytes (procs.h,
 * measure_set); its pointers are each process's own: a pointer added here is cleared
 * in procs_set_decode, as the others are. */
typedef struct measure_options {
    double warmup_time;     /* seconds of warm-up before a unit's first chunk */
    double min_time;        /* seconds per chunk (one Google Benchmark run) */
    double max_noise;       /* stop when the median's 95% CI is within this fraction of it */
    int min_samples;        /* ... and at least this many samples were kept */
    double timeout;         /* seconds of sampling per layer at most */
    bool dedupe;            /* time identical layers once */
    uint64_t seed;          /* inputs and weights */
    bool progress;          /* say on stderr what is running */
    const volatile int *stop; /* when it becomes non-zero, measuring stops at the next chunk; may be NULL */
    /* Contention: the seconds this process's threads have waited for a CPU so far
     * (sched_probe_read; tests give a fake), read before and after every sample; a
     * sample whose threads waited more than MEASURE_DISTURBED_SHARE of its time is
     * dropped and counted. NULL: not measured (a GPU's events do not see the host's
     * waits: the device is held while the launches are queued). */
    double (*waited)(void *user);
    void *waited_user;
    void (*waited_reset)(void *user); /* optional: before sampling, once setup made its threads */
    const char *label;      /* optional: said before the progress line ("process 2/3") */
    /* Optional: told which layer is set up or sampled next (-1: the whole-model rows),
     * so that a worker process that dies can be said to have died there (procs.h). */
    void (*at)(void *user, int layer);
    void *at_user;
    /* Optional, per layer: true leaves it out (a failed row saying so); skip_model leaves
     * out the whole-model rows. A worker process is told to skip what killed another. */
    const bool *skip;
    bool skip_model;
    /* A decoder's decode step (one new token after a KV cache) times the backend's
     * read stream (backend_timing_i.stream) at the start of rounds, beside the
     * canary, spaced to take at most a tenth of the sampling: its memory limit is its
     * bytes over that stream (run_result.stream). Off with --no-peaks. */
    bool stream_rounds;
} measure_options;

/* A sample is disturbed when its threads waited for a CPU for more than this share of
 * its time: 1%, so that it moves the median by less than the --max-noise default. */
#define MEASURE_DISTURBED_SHARE 0.01
/* A row more than this share of whose samples were disturbed is contended, however many
 * undisturbed ones it kept (a quiet machine disturbs at most a few percent). */
#define MEASURE_CONTENDED_SHARE 0.25

/* The defaults of the command line (bench --help). */
#define MEASURE_DEFAULT_WARMUP 0.02
#define MEASURE_DEFAULT_MIN_TIME 0.01
#define MEASURE_DEFAULT_MAX_NOISE 0.01
#define MEASURE_DEFAULT_MIN_SAMPLES 10
#define MEASURE_DEFAULT_TIMEOUT 2.0

/* Timing modes: the four a layer may be asked to run in (--mode; auto picks warm or batch
 * per layer), then what the whole model's rows and the in-model view are. Named only at
 * the edges: --mode, the CSV's mode column, the tables. */
typedef enum timing_mode {
    MODE_NONE = 0,   /* a row not timed (a view, a skipped or failed layer) */
    MODE_AUTO,
    MODE_WARM,
    MODE_COLD,
    MODE_BATCH,
    MODE_INMODEL,
    MODE_CHAINED,
    MODE_GRAPH,
    MODE_TRANSFER,
    MODE_FLOOR,      /* the timer's floor, empty samples (the progress line's) */
    MODE_COUNT
} timing_mode;
#define MEASURE_MODES "auto, warm, cold or batch"
/* "auto", "warm", ..., "transfer", "floor"; NULL for MODE_NONE. */
const char *measure_mode_name(timing_mode m);
/* One of the four modes --mode takes, by name; MODE_NONE for anything else. */
timing_mode measure_mode_from_name(const char *name);

/* What a result row is. ROW_NONE: not applicable (a backend without graphs has no
 * graph row), so no row is written. */
typedef enum row_status {
    ROW_NONE = 0,
    ROW_OK,          /* timed */
    ROW_DEDUPE,      /* timing reused from the identical layer dedupe_of (--dedupe) */
    ROW_VIEW,        /* a view of its input (flatten, dropout): nothing runs, nothing is timed */
    ROW_SKIPPED,     /* the backend cannot run it; note says why */
    ROW_FAILED,      /* setup or timing failed; note says why; the run went on */
} row_status;

/* "ok", "dedupe", "view", "skipped", "failed" ("" for ROW_NONE). */
const char *measure_row_status_name(row_status s);

/* Why sampling stopped. */
typedef enum stop_reason {
    STOP_NONE = 0,
    STOP_NOISE,      /* the confidence interval reached --max-noise */
    STOP_TIMEOUT,    /* --timeout was reached first */
    STOP_SAMPLES,    /* the most samples a unit keeps (MEASURE_MAX_SAMPLES) */
} stop_reason;
const char *measure_stop_reason_name(stop_reason s); /* "noise", "timeout", "samples", "" */
#define MEASURE_MAX_SAMPLES 1000000

typedef struct layer_result {
    row_status status;
    timing_mode mode;       /* warm, cold, batch; inmodel, chained, graph, transfer for the others */
    int dedupe_of;          /* -1, or the layer index whose timing this row reuses */
    char impl[BACKEND_IMPL_LEN];          /* what the backend chose at setup */
    char kernels[384];      /* the kernels one call runs (backend_layer_kernels) */
    int64_t workspace_bytes;/* workspace setup allocated */
    int launches;           /* launches per timed sample: 1, or N in batch mode */
    char note[224];         /* why a row was skipped, failed or reused; how batch mode launched */
    stats st;               /* seconds per launch */
    int64_t discarded;      /* warm-up, estimation and re-warming samples, not in st */
    stop_reason stop;
    bool near_floor;        /* a sample lasts less than 10 times the timer's floor */
    int64_t disturbed;      /* samples dropped because the threads waited for a CPU (contention) */
    bool contended;         /* too few undisturbed samples, or over a quarter disturbed: other processes
                               slowed it (st keeps the undisturbed ones if it has 3) */
    int processes;          /* worker processes whose samples are pooled in st; 0: measured in this one */
    double process_spread;  /* (max - min) / median of the processes' own medians; 0 with one */
    bool has_error;         /* --error: rel_error holds the row's error */
    double rel_error;       /* relative L2 error of the layer's output against the fp32 reference on the
                               same rounded inputs and weights (what bench check measures) */
    double *kept;           /* the samples behind st, seconds per launch, n_kept of them (st.n);
                               owned by the run_result; NULL in a dedupe row's copy */
    int64_t n_kept;
} layer_result;

/* The row has statistics (timed, or reused from a timed twin). */
static inline bool row_timed(const layer_result *r) { return r->status == ROW_OK || r->status == ROW_DEDUPE; }

/* The timer's floor: the median of an empty sample (nothing between the timer's start
 * and stop, held like a real one), per mode; seconds. */
typedef struct timer_floor {
    double warm, cold;
} timer_floor;

/* Measures b's floor (about 0.1 s). */
bench_status measure_timer_floor(const backend *b, const measure_options *o, timer_floor *f, char *err,
                                 size_t errlen);

/* A part of a layer inside the chained forward (layer_parts(): attention's stages). */
typedef struct part_result {
    int layer;              /* the layer it is a part of */
    int index;              /* its index among the layer's parts */
    layer_part_info info;
    layer_result r;         /* mode "inmodel" */
    double sample;          /* seconds in the kept forward sample (forward_sample) */
} part_result;

/* One model on one backend at one batch size, in one requested timing mode. */
typedef struct run_result {
    const model *m;         /* borrowed: valid while the caller keeps the model at this batch */
    const char *backend;
    timing_mode mode;       /* the mode asked for: auto, warm, cold or batch (rows say which they used) */
    int threads;
    timer_floor floor;
    layer_result *layers;   /* m->n_layers; owned */
    layer_result *inmodel;  /* m->n_layers, each layer inside the chained forward; owned; NULL without it */
    double *forward_sample; /* m->n_layers: one kept forward sample, the one whose layers add up to the
                               median total, per layer seconds (for traces); owned; NULL without it */
    part_result *parts;     /* n_parts, in layer order: the parts of the layers the backend splits
                               inside the forward; owned; NULL without them */
    int n_parts;
    double sum_medians;     /* sum of the layer medians of the rows that ran */
    int failed;             /* rows that failed (layers and whole-model rows) */
    bool has_model;         /* the rows below were measured (once per backend and batch) */
    layer_result chained;   /* the whole forward, layer after layer on real activations */
    layer_result graph;     /* the same forward captured once and replayed (CUDA graphs) */
    layer_result upload;    /* model input, host to device */
    layer_result download;  /* model output, device to host */
    double seconds;         /* wall time the measurement took */
    int64_t forward_device_bytes; /* device memory the chained forward's setup took (free memory before
                                     minus after: activations, weights, workspaces); -1 unknown */
    backend_peaks peaks;    /* the backend's measured ceilings (runner: --no-peaks leaves them 0) */
    /* The canary: a fixed workload (measure_canary) timed at the start of every round. Its
     * median per round, seconds, n_canary of them (owned); across processes, all of
     * theirs. A slower canary means a slower machine, not slower layers. */
    double *canary;
    int n_canary;
    /* With measure_options.stream_rounds: the read stream timed at the start of rounds
     * over the sampling, bytes per second, n_stream of them (owned); across processes,
     * all of theirs. */
    double *stream;
    int n_stream;
    int processes;          /* worker processes pooled in this set (0: measured in this process) */
    int processes_aside;    /* ... and set aside: they ran in a slow phase of the machine (procs.h) */
    double phase_slowdown;  /* how much longer their layers took in all than the pooled ones', a fraction */
    char contention[200];   /* the other processes that used the CPUs while it was measured, when
                               samples were disturbed (sched_others_end); "" otherwise */
} run_result;

/* One timing of the canary: a fixed chain of dependent multiply-adds on the calling
 * thread (about 65k steps, 50-100 us), which follows the core's clock and nothing else
 * the harness changes. Seconds. */
double measure_canary(void);
/* The canary's summary over rounds: its median and its drift, (max - min) / median;
 * zeros when none. */
void measure_canary_summary(const run_result *r, double *median, double *drift);
/* The read stream over the rounds (run_result.stream): its median, min and max, bytes
 * per second; zeros when none was timed. */
void measure_stream_summary(const run_result *r, double *median, double *min, double *max);

/* Marks the whole-model rows (the chained forward, its graph replay and copies) of a
 * result measured without them as not run, with the reason. */
void measure_model_not_run(run_result *res, const backend *b, const char *why);

/* Times every layer of m alone in the given mode; with with_model, also the chained
 * forward (with the in-model view), its graph replay and the input/output copies where
 * the backend has them, all sampled in the same rounds. A layer that cannot be set up or
 * timed (out of device memory, a library error) becomes a ROW_FAILED row and the rest
 * runs: *out always holds every row, and the caller frees it with run_result_free().
 * Returns BENCH_OK, or BENCH_ERR_BACKEND when some row failed (err: the first failure),
 * or BENCH_ERR_INTERRUPTED when o->stop was set (err: where; the rows are incomplete).
 * Progress and nothing else goes to stderr. */
bench_status measure_model(const model *m, const backend *b, const measure_options *o, timing_mode mode,
                           const timer_floor *floor, bool with_model, run_result *out, char *err, size_t errlen);
void run_result_free(run_result *r);

/* The statistics of a row from its samples (seconds per launch, not sorted): st, and a
 * copy of the samples in r->kept. */
void measure_row_stats(layer_result *r, const double *samples, int64_t n);

/* A model's forward set up on a backend, as the chained forward and bench check's
 * forward row run it: every value in backend memory, the input and every layer's weights
 * drawn from one seed (the input first, then each layer's weights in order), every layer
 * set up, then linked by the backend (backend_ops.model_link). Views share the buffer of
 * the value they view, and a buffer is reused once the last reader of its value has run,
 * as a framework's allocator hands a freed block to the next tensor (the smallest free
 * one large enough); the input and the output keep theirs. */
#endif
