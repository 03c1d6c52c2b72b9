/* What the measurement's files share, private to them (measure.c, measure_sampling.c,
 * measure_isolated.c, measure_chained.c): a unit, what is sampled in rounds, and the
 * pieces of rows. */
#ifndef LAYERBENCH_MEASURE_INTERNAL_H
#define LAYERBENCH_MEASURE_INTERNAL_H

#include <stdarg.h>
#include "forward.h"
#include "gbench_shim.h"
#include "measure.h"

/* A growing array of doubles. */
typedef struct dvec {
    double *v;
    int64_t n, cap;
} dvec;

/* A row whose sample is shorter than this many floors is marked near_floor. */
#define NEAR_FLOOR_FACTOR 10.0

typedef struct unit unit;

struct unit {
    const backend *b;
    layer_result *r;        /* the row its statistics go to */
    int layer;              /* the layer it times, -1 for the whole-model rows and the floor */
    const char *name;
    gbs_iteration_fn fn;
    void *user;
    int launches;           /* per sample */
    double floor;           /* the timer's floor for its mode (near_floor) */
    double spent;           /* seconds its chunks cost so far (Google Benchmark's count) */
    int64_t chunk_iterations; /* iterations of every chunk after the first */
    dvec samples;           /* whole-sample seconds, kept, disturbed or not */
    dvec clean;             /* ... of them, those not disturbed */
    dvec waits;             /* per call of the chunk being run: seconds waited for a CPU */
    bool done;
    /* optional: called with the calls [first, first + n) that Google Benchmark kept
     * from the chunk just run, and which of them were measure_disturbed (the chained forward
     * collects its in-model marks) */
    void (*kept)(unit *u, int64_t first, int64_t n, const bool *dist);
};

/* --timeout stops a unit once it has this many samples (or --min-samples, if fewer),
 * and not before: fewer give neither a median worth the name nor a noise figure. */
#define TIMEOUT_MIN_SAMPLES 3

/* ---- isolated layers ---------------------------------------------------------------------- */

/* Buffers every isolated layer shares: each runs alone, so one input area (random,
 * never zeros) holding all of a layer's inputs side by side, and one output of the
 * largest size, serve them all. */
typedef struct timed_layer {
    const backend *b;
    backend_layer *state;
    const void **in;    /* the layer's inputs */
    void *out;
    int launches;   /* per sample */
    bool cold;      /* flush caches before each sample */
    bool hold;      /* hold the device while the launches are queued */
    void *graph;    /* batch mode: the launches captured as one graph, or NULL */
    /* a train row: the backward run after the forward (state the forward in training
     * mode, writing its output where the backward reads it), or NULL */
    backend_layer *bwd;
    void *bwd_out;
} timed_layer;

/* One launch of t: its layer, and its backward after it in a train row. */
void timed_layer_run(const timed_layer *t);

/* The input area once per dtype the model's layers use (each holds that type's values),
 * and one output area of the largest output in any type. */
typedef struct scratch {
    void *in[DTYPE_COUNT], *out;
} scratch;

typedef struct layer_unit {
    timed_layer t;
    const void **in;  /* into the scratch input: n_inputs pointers (and the output's and its
                         gradient's for a backward or train row); owned */
    void *w;          /* weights in backend memory, in the layer's dtype */
    layer fwd, bwd;   /* a train row: the layer as its forward and its backward kernels see it */
} layer_unit;

/* ---- the chained forward, with the in-model view ----------------------------------------- */

/* The whole-model units (the chained forward, its graph replay, the copies), set up
 * together; their types are measure_chained.c's own. */
typedef struct model_units model_units;

void measure_row_fail(layer_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void measure_note_append(layer_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void dvec_push(dvec *d, double x);

/* ---- one timed sample -------------------------------------------------------------------- */

/* Starts a sample: the device is held (where the backend can) so that queuing the
 * launches is not timed, the caches are flushed for a cold sample, then the timer
 * starts. timer_stop releases the hold. */
void measure_begin_sample(const backend *b, bool hold, bool cold);

/* A sample whose threads waited for a CPU for more than MEASURE_DISTURBED_SHARE of it. */
bool measure_disturbed(double waited, double sample);

/* Whether a unit's statistics are of its clean samples alone: when it has at least
 * TIMEOUT_MIN_SAMPLES of them. The row is contended when samples were disturbed and
 * fewer than min_samples (or than all it took) stayed clean, or more than
 * MEASURE_CONTENDED_SHARE of them were disturbed: a process that shares the cores that
 * often also evicts the caches between samples, which the waits do not show (with a
 * busy loop on one of two cores, ResNet-18's convolutions with 41% and 76% of their
 * samples disturbed ran 12% and 16% slower in their undisturbed ones). */
bool unit_use_clean(const unit *u);

/* Statistics per launch from the kept samples. */
void unit_finish(unit *u, const measure_options *o);

void unit_free(unit *u);

void measure_progress(const measure_options *o, const backend *b, timing_mode mode, int round, int left, int n,
                     const char *what);

/* Samples every unit in rounds until each has stopped; with canary, times the canary
 * at the start of every round (its per-round medians appended to *canary), and with
 * stream, the backend's read stream where it has one, at the start of rounds at least
 * 0.9 of the time apart (bytes/s appended). */
bench_status measure_sample_units(unit *units, int n, const measure_options *o, const backend *b, timing_mode mode,
                                 dvec *canary, dvec *stream, char *err, size_t errlen);

bench_status isolated_scratch_alloc(const model *m, const backend *b, uint64_t seed, scratch *s);
void isolated_scratch_free(const backend *b, scratch *s);

/* Untimed setup of one isolated layer in its mode: weights, the backend's setup, and
 * for batch mode the launch count (and graph). Fills r on failure. */
void isolated_setup(const layer *l, int index, const backend *b, timing_mode mode, const timer_floor *floor,
                        const scratch *s, uint64_t seed, layer_unit *lu, layer_result *r, unit *u);

void isolated_free(const backend *b, layer_unit *lu);

/* Identical kind, shapes and parameters: the same work. */
int isolated_find_twin(const model *m, int i);

/* Marks the whole-model rows that apply as not run, with why. */
void chained_rows_not_run(run_result *res, const backend *b, row_status st, const char *why);

/* Sets up the chained forward (and its graph and copies); appends their units. The
 * units' owner, for chained_finish_inmodel and chained_free. */
model_units *chained_setup(const model *m, const backend *b, const measure_options *o, const timer_floor *floor,
                           run_result *res, unit *units, int *n_units);

/* Frees mu (NULL: nothing). */
void chained_free(const model *m, const backend *b, model_units *mu);

/* The in-model rows: each layer's time inside the forward, from the chain's marks. */
void chained_finish_inmodel(const model *m, model_units *mu, run_result *res);

#endif
