/* The plan of `bench run` and `bench sweep`: every batch size in every dtype and pass on every backend, in each
 * of the backend's timing modes, handed to the reporters as it completes. After each
 * (batch, backend) set the reporters checkpoint (the CSV on disk holds every finished
 * set) and the JSON context says how far the run got. A SIGINT, SIGTERM or SIGHUP stops
 * the run at the next layer; the unfinished set is dropped, the finished ones stay, and
 * the JSON says where the run was interrupted. Sets a previous run finished (--resume)
 * are not measured again. Before a backend's first set its timer floor is measured; the
 * host is checked for what could spoil the figures (sysinfo.h), and each set's results and
 * the backend for what they show: every warning goes to stderr once and into the JSON. */
#ifndef LAYERBENCH_RUNNER_H
#define LAYERBENCH_RUNNER_H

#include "measure.h"
#include "output.h"
#include "procs.h"
#include "report.h"

typedef struct runner_plan {
    const timing_mode *modes;    /* timing modes of the isolated layers (auto, warm, cold, batch) */
    int n_modes;
    const int64_t *batches;      /* batch sizes, in order */
    int n_batches;
    const dtype_t *dtypes;       /* the model-wide dtypes, in order (each batch runs every one) */
    int n_dtypes;
    const layer_pass *passes;    /* the passes, in order (each dtype runs every one); n_passes 0: the
                                  * model's own */
    int n_passes;
    backend *backends;
    int n_backends;
    const report_set *done;      /* sets kept from a previous run (--resume); may be NULL */
    int n_done;
    reporter **reps;             /* console or sweep summary, the CSV, ..., the JSON context last */
    int n_reps;
    report_context ctx;          /* what the reporters read besides the results; the runner sets
                                  * resumed, floors, peaks, warnings and interrupted */
    bool sweep_progress;         /* say on stderr which set is running */
    bool probe_peaks;            /* measure each backend's ceilings for the roofline (not --no-peaks) */
    bool error;                  /* --error: each layer's error against the fp32 reference, untimed */
    procs_plan procs;            /* worker processes per set (--processes); count 0: this process */
    const char *note;            /* a warning from the command line's set-up (--algo-cache), or NULL */
    const volatile int *stop;    /* set by a signal (signals.h): no set starts after it, and the run
                                  * ends as interrupted; may be NULL */
    model **shapes;              /* a sweep's token shapes (--tokens, --kv-len lists), one model each,
                                  * run in turn in place of m's; n_shapes 0: m alone */
    int n_shapes;
} runner_plan;

/* Runs the plan on m, or on each of its shapes (whose batch and dtype it changes). Returns the exit status: 0, 1 when a row
 * failed or a file could not be written, 128 + the signal when interrupted. */
int runner_execute(model *m, runner_plan *p, const measure_options *mo);

/* For --resume: reads the CSV a previous run left at path and the JSON context beside
 * it (results_read.h), checks that it holds model_name, and lists the sets that are
 * whole (the JSON lists them with as many rows as the CSV holds); a set that is not is
 * left out, said, and measured again. *text is the CSV to keep (the header and the
 * whole sets' rows; caller frees), or NULL when there is no file yet. BENCH_ERR_USAGE
 * with err when the files are not a layerbench CSV and JSON context. */
bench_status runner_read_previous(const char *path, const char *model_name, char **text, report_set **sets,
                                  int *n_sets, char *err, size_t errlen);

#endif
