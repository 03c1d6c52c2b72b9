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
} measure_options;

typedef struct layer_result {
    bench_status status;    /* BENCH_OK, BENCH_ERR_UNSUPPORTED (skipped row), or an error */
    int dedupe_of;          /* -1, or the layer index whose timing this row reuses */
    char impl[64];          /* what the backend chose at setup */
    char note[160];
    stats st;               /* seconds */
    int64_t discarded;      /* warm-up and estimation iterations, not in st */
} layer_result;

/* One model on one backend at one batch size. */
typedef struct run_result {
    const model *m;         /* borrowed: valid while the caller keeps the model at this batch */
    const char *backend;
    int threads;
    layer_result *layers;   /* m->n_layers, isolated mode; owned */
    layer_result chained;   /* the whole forward, layer after layer on real activations */
    double sum_medians;     /* sum of the isolated medians of the rows that ran */
} run_result;

/* Times every layer of m in isolation, then the chained forward. Progress and
 * nothing else goes to stderr. On a hard failure returns its status and err. */
bench_status measure_model(const model *m, const backend *b, const measure_options *o, run_result *out,
                           char *err, size_t errlen);
void run_result_free(run_result *r);

/* Random inputs and weights for layer l (host memory; caller frees each with free()).
 * in2 is NULL unless the kind takes two inputs; w is NULL if it has no weights. */
bench_status measure_layer_data(const layer *l, uint64_t seed, float **in, float **in2, float **w);

#endif
