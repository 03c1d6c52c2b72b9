/* Worker processes: variance between processes, measured (as pyperf measures it).
 *
 * Memory placement, the state of the caches and the machine's phase are fixed for the
 * life of a process, so the confidence interval of samples from one process is blind to
 * how much its median differs from the next process's. For each (batch, backend, mode)
 * set, `bench run` starts --processes worker processes, one after the other (never two
 * at once: they would compete for the cores). Each is the bench binary itself, run with
 * a hidden --worker option: it sets the model up, measures it with 1/N of --timeout and
 * of --min-samples, and sends back every row with its kept samples through a pipe. The
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

#include "measure.h"

/* The default of --processes: 3 worker processes per set. */
#define PROCS_DEFAULT 3
/* A worker stopped this long (SIGSTOP, a debugger), or silent and idle this long (no
 * record and no CPU time: waiting on what will not come), is killed with its pid named,
 * and the layer it was on fails: a run never waits forever on one. */
#define PROCS_STOPPED_S 10.0
#define PROCS_SILENT_S 120.0

typedef struct procs_plan {
    int count;            /* worker processes per set; 0: measure in this process */
    char *const *argv;    /* the worker's command line up to its per-set options: the binary,
                             "run", the config and every option that changes what is measured
                             (main.c builds it); NULL-terminated */
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

/* The worker's side, from the hidden option "--worker FD,INDEX,COUNT,WITHMODEL,FLOORW,FLOORC,SKIP" (SKIP: the
 * layers to leave out, '.'-separated, 'm' for the model rows, '-' for none): measures
 * m (at its batch) on b in mode with the worker's share of o, writing where it is and
 * then the result to FD. Returns the exit status. */
int procs_worker(const char *spec, const model *m, const backend *b, const measure_options *o, timing_mode mode);

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
