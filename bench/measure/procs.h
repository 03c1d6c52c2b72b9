/* Worker processes: variance between processes, measured (as pyperf measures it).
 *
 * Memory placement, the state of the caches and the machine's phase are fixed for the
 * life of a process, so the confidence interval of samples from one process is blind to
 * how much its median differs from the next process's. For each (batch, backend, mode)
 * set, `bench run` starts --processes worker processes, one after the other (never two
 * at once: they would compete for the cores). Each is the bench binary itself, run as
 * `bench --worker 3,I,N` (worker I of N): it reads what to measure, a measure_set, from
 * a pipe on descriptor 4 (no command line is rebuilt and parsed again), sets the model
 * up, measures it with 1/N of --timeout and of --min-samples, and sends back every row
 * with its kept samples through the pipe on descriptor 3. The
 * parent pools the samples of each row: the median of all of them is the headline, the
 * interval covers the spread of the processes' own medians as well as the samples'
 * (procs_pool_interval), and every row says how many processes it pools and how far
 * their medians lay apart.
 *
 * The machine itself has phases: on a VM, one process may run its layers a third slower
 * than the next for its whole life (seen on the 2-vCPU development VM: ResNet-18's
 * Winograd layers at 180 us in some processes and 272 us in others, every layer of a
 * process alike). A worker whose layers took more than 5% longer in all than the
 * fastest worker's (beyond the precision of both sums) ran in a slow phase: it is set aside, and more workers are started
 * (up to twice --processes) until --processes of them ran in the fastest phase seen.
 * The rows say how many were pooled, the JSON how many were set aside and how much
 * slower they ran. When every worker of a set runs in one phase, nothing is set aside;
 * its canary then says how fast the machine was (bench compare uses it).
 *
 * A worker that dies (a crash, a kill, out of memory) said which layer it was on: that
 * layer's row fails with the reason, the next worker leaves it out and the rest goes on.
 * An interrupted run (SIGINT, SIGTERM) stops the worker that runs and keeps what the
 * earlier sets finished (runner.h). */
#ifndef LAYERBENCH_PROCS_H
#define LAYERBENCH_PROCS_H

#include "cfg.h"
#include "measure.h"
#include "strbuf.h"

/* The default of --processes: 3 worker processes per set. */
#define PROCS_DEFAULT 3
/* A worker stopped this long (SIGSTOP, a debugger), or silent and idle this long (no
 * record and no CPU time: waiting on what will not come), is killed with its pid named,
 * and the layer it was on fails: a run never waits forever on one. */
#define PROCS_STOPPED_S 10.0
#define PROCS_SILENT_S 120.0

/* The strings of a measure_set, in the order they travel. */
enum { SET_CONFIG, SET_ALGO_CACHE, SET_FREEZE, SET_STRINGS };

/* What one worker process measures, whole: everything of the command line and of the
 * set that changes a measurement, and the worker's share. It travels through a pipe as
 * its bytes, then its strings and the layers it leaves out, so that a field added here
 * reaches every worker with nobody forwarding it (tests/test_measure.c holds every
 * field to the round trip). */
typedef struct measure_set {
    /* the model */
    int64_t batch;
    dtype_t dtype;
    layer_pass pass;          /* --pass: the layers' forward or backward */
    cfg_shape shape;          /* a decoder's token shape (CFG_SHAPE_KEEP: the config's) */
    int routing;              /* --routing: MOE_* for every moe layer; -1: the config's */
    double load_skew;
    int optimizer;            /* --optimizer: model_optimizer */
    /* the backend */
    char backend[16];
    int threads;
    bool algo_heuristic, algo_alone;
    int conv_api;
    /* the measurement: the mode and the options (their pointers are each process's own:
     * a worker's are set where it starts) */
    timing_mode mode;
    measure_options mo;
    /* the worker's share */
    int index, count;         /* worker index of count (past count: one more, for a slow phase) */
    bool with_model;
    timer_floor floor;
    const char *str[SET_STRINGS]; /* the config's path; the choices file (--algo-cache); --freeze's patterns;
                                     NULL: none */
    int n_skip;               /* layers to leave out (what killed an earlier worker); -1: the model rows */
    int *skip;
} measure_set;

/* The set as bytes into buf (appended) and back: procs_set_decode fills s from
 * [p, p + n) (its strings and skip list interned for the life of the process, the
 * options' pointers NULL); false when the bytes are not a set. */
void procs_set_encode(const measure_set *s, strbuf *buf);
bool procs_set_decode(const char *p, size_t n, measure_set *s);

typedef struct procs_plan {
    int count;            /* worker processes per set; 0: measure in this process */
    const measure_set *base; /* what every set of the run shares (the config, the backend's
                             options, the measurement's); procs_measure fills in the rest */
    bool shapes;          /* the sets differ in their token shape (a sweep over --tokens or
                             --kv-len): each worker is given its set's */
    double phase_band;    /* --phase-band: a worker this much slower in all than the fastest
                             ran in a slow phase (a fraction); below 0: none is set aside */
} procs_plan;

/* Measures one set as measure_model() does, in pp->count worker processes, pooling
 * their samples into *out (run_result_free frees it). Returns what measure_model
 * returns; BENCH_ERR_INTERRUPTED when o->stop was set (the worker is stopped too). */
bench_status procs_measure(const procs_plan *pp, const model *m, const backend *b, const measure_options *o,
                           timing_mode mode, const timer_floor *floor, bool with_model, run_result *out, char *err,
                           size_t errlen);

/* The worker's side: reads its set from descriptor 4, which must be a pipe (a worker's
 * command line run by hand is refused). */
bool procs_worker_set(measure_set *s, char *err, size_t errlen);
/* Measures m (s's model, at its batch) on b in s's mode with the worker's share of o,
 * writing where it is and then the result to descriptor 3. Returns the exit status. */
int procs_worker(const measure_set *s, const model *m, const backend *b, const measure_options *o);

/* The default of --phase-band: a worker whose layers took this much longer in all than
 * the fastest worker's of its set ran in a slow phase of the machine (above). */
#define PROCS_PHASE_BAND 0.05

/* Which of k workers ran in the fastest phase seen, from each one's sum of the medians
 * of the layers all of them timed (sum[w] <= 0: unknown, counted fast) and how precise
 * it is (unc[w]: the intervals' half-widths over the sum): fast[w] true when within
 * band, plus both sums' precision, of the least sum (band below 0: every one is).
 * Returns how many. */
int procs_fast_phase(const double *sum, const double *unc, int k, double band, bool *fast);

/* The pooled interval of a median M from k >= 2 processes whose own medians are med[]:
 * [M - h, M + h] with h = t(0.975, k - 1) s / sqrt(k), s the standard deviation of
 * med[] (the between-process part); for k = 2, h = |med[0] - med[1]| (t with one degree
 * of freedom, 12.7, would make it 9 times their distance); *lo and *hi are widened to
 * hold it. */
void procs_pool_interval(double median, const double *med, int k, double *lo, double *hi);

#endif
