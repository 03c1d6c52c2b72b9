/* Measurement policy, in one place: for each layer, untimed setup, then Google
 * Benchmark's warm-up, iteration estimate and repetitions (see gbench_shim.h), with
 * statistics over the timed samples only; then the chained forward of the whole model. */
#ifndef LAYERBENCH_MEASURE_H
#define LAYERBENCH_MEASURE_H

#include <stdbool.h>

#include "backend.h"
#include "model.h"
#include "stats.h"

typedef struct measure_options {
    double warmup_time;     /* seconds of warm-up per layer */
    double min_time;        /* seconds per repetition */
    int repetitions;
    bool dedupe;            /* time identical layers once */
    uint64_t seed;          /* inputs and weights */
    bool progress;          /* say on stderr which layer is running */
    const volatile int *stop; /* when it becomes non-zero, measuring stops at the next layer; may be NULL */
} measure_options;

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
const char *row_status_name(row_status s);

typedef struct layer_result {
    row_status status;
    int dedupe_of;          /* -1, or the layer index whose timing this row reuses */
    char impl[96];          /* what the backend chose at setup */
    int64_t workspace_bytes;/* workspace setup allocated */
    int launches;           /* launches per timed sample: 1, or N in batch mode */
    char note[224];         /* why a row was skipped, failed or reused; how batch mode launched */
    stats st;               /* seconds per launch */
    int64_t discarded;      /* warm-up and estimation iterations, not in st */
} layer_result;

/* The row has statistics (timed, or reused from a timed twin). */
static inline bool row_timed(const layer_result *r) { return r->status == ROW_OK || r->status == ROW_DEDUPE; }

/* One model on one backend at one batch size, in one timing mode. */
typedef struct run_result {
    const model *m;         /* borrowed: valid while the caller keeps the model at this batch */
    const char *backend;
    const char *mode;       /* the isolated layers' timing mode: isolated, cold or batch */
    int threads;
    layer_result *layers;   /* m->n_layers; owned */
    double sum_medians;     /* sum of the layer medians of the rows that ran */
    int failed;             /* rows that failed (layers and whole-model rows) */
    bool has_model;         /* the rows below were measured (once per backend and batch) */
    bool backend_has_graphs;/* the graph row applies */
    bool backend_has_copies;/* the copy rows apply (the backend has its own memory) */
    layer_result chained;   /* the whole forward, layer after layer on real activations */
    layer_result graph;     /* the same forward captured once and replayed (CUDA graphs) */
    layer_result upload;    /* model input, host to device */
    layer_result download;  /* model output, device to host */
} run_result;

/* Times every layer of m alone in the given mode (one of b's modes); with
 * with_model, then the chained forward, its graph replay and the input/output
 * copies where the backend has them. A layer that cannot be set up or timed (out of
 * device memory, a library error) becomes a ROW_FAILED row and the next one runs:
 * *out always holds every row, and the caller frees it with run_result_free().
 * Returns BENCH_OK, or BENCH_ERR_BACKEND when some row failed (err: the first
 * failure), or BENCH_ERR_INTERRUPTED when o->stop was set (err: where; the rows are
 * incomplete). Progress and nothing else goes to stderr. */
bench_status measure_model(const model *m, const backend *b, const measure_options *o, const char *mode,
                           bool with_model, run_result *out, char *err, size_t errlen);
void run_result_free(run_result *r);

/* Random inputs and weights for layer l (host memory; caller frees each with free()).
 * in2 is NULL unless the kind takes two inputs; w is NULL if it has no weights. */
bench_status measure_layer_data(const layer *l, uint64_t seed, float **in, float **in2, float **w);

#endif
