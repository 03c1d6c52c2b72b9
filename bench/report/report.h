/* Reporters: a small interface fed with results, so the console tables, the CSV and
 * the JSON context are all written from the same run_result in one pass. Reporters
 * never time anything. */
#ifndef LAYERBENCH_REPORT_H
#define LAYERBENCH_REPORT_H

#include <stdio.h>

#include "blocks.h"
#include "measure.h"
#include "output.h"
#include "table.h"

/* Grouped tables (--group-by): bits. */
#define REPORT_GROUP_SHAPE 1u
#define REPORT_GROUP_KIND 2u
#define REPORT_GROUP_BLOCK 4u
#define REPORT_GROUP_SET 8u  /* given on the command line (else the default) */
#define REPORT_GROUP_DEFAULT (REPORT_GROUP_SHAPE | REPORT_GROUP_KIND | REPORT_GROUP_BLOCK)

typedef struct report_options {
    const char *sort;   /* per-layer table order: index, name, kind, params, flops, time, cv, gflops */
    int top;            /* rows of the per-layer and by-shape tables; 0 = all */
    table_format format;
    unsigned groups;    /* REPORT_GROUP_* bits; 0: the default */
} report_options;

/* "shape,kind,block" (any of them, or "none") into REPORT_GROUP_* bits; false for an
 * unknown name. */
bool report_groups_parse(const char *list, unsigned *groups);

/* Per block (blocks.h) of res's model: the medians of every layer inside it (total),
 * of the layers directly in it (self), and of the layers inside the forward (inmodel;
 * 0 without an in-model view). Arrays of mb->n_blocks. */
void report_block_times(const run_result *res, const model_blocks *mb, double *total, double *self, double *inmodel);

typedef struct reporter reporter;
struct reporter {
    /* One model on one backend at one batch size, in one timing mode. */
    bench_status (*run)(reporter *r, const run_result *res);
    /* Optional: every mode of one backend at one batch size has been reported; what was
     * reported so far is complete and must survive an interruption. */
    bench_status (*checkpoint)(reporter *r);
    /* ok: everything was reported, write it all; !ok (interrupted, failed): keep only
     * what the checkpoints wrote. Frees r. */
    bench_status (*finish)(reporter *r, bool ok);
};

/* Per-layer table, grouped tables and the isolated/chained summary, to out. */
reporter *report_console_create(FILE *out, const report_options *ro);
/* Sweep summary: one line per batch (chained median, items/s, sum of layers). */
reporter *report_sweep_create(FILE *out, table_format format);
/* The tidy CSV (schema: report_csv_columns()) into out (borrowed; see output.h: each
 * checkpoint replaces the whole file). resumed: the text of a previous run's CSV whose
 * rows are kept (--resume), or NULL for a new file. */
reporter *report_csv_create(bench_output *out, const char *resumed);
/* The CSV header line (with its newline); caller frees. */
char *report_csv_header(void);
/* How many CSV rows the CSV reporter writes for res (the JSON context lists each set's
 * count, so that a CSV read back can be checked to be whole: results_read.h). */
int64_t report_csv_rows(const run_result *res);
/* s as one CSV cell appended to b: quoted where it must be, a leading apostrophe where a
 * spreadsheet would take it for a formula. */
void report_csv_field(strbuf *b, const char *s);

/* Where a row of dtype dtype sits under the roofline of pk (its compute roof the
 * dtype's, backend_peak_flops): bound "compute", "memory" or "cache" (a layer timed
 * warm whose bytes the caches hold: judged against the cache stream), by its intensity
 * (flops / bytes) against the machine's balance, and its achieved rate as a percent of
 * that roof. False when unknown: no peaks, no bytes, not timed. */
bool report_roofline(int64_t flops, int64_t bytes, double seconds, bool cold, const backend_peaks *pk, dtype_t dtype,
                     double *pct, const char **bound);

/* Checks a --sort column name. */
bool report_sort_valid(const char *sort);

/* The CSV columns and what each holds, for docs and `bench schema`. */
typedef struct report_column {
    const char *name;
    const char *doc;
} report_column;
const report_column *report_csv_columns(int *n);

/* The Chrome / Perfetto trace-event JSON (--trace) into out (borrowed): per backend a
 * process, per batch a thread with one real forward and one per timing mode with the
 * isolated medians end to end, layers nested in their blocks. Rewritten whole at every
 * checkpoint and at the end. docs/outputs.md. */
reporter *report_trace_create(bench_output *out);

/* Folded stacks for flame graphs (--stacks): one file per (backend, batch). */
typedef struct report_stacks_file {
    const char *backend;
    int64_t batch;
    dtype_t dtype;
    bench_output *out;   /* borrowed */
} report_stacks_file;
reporter *report_stacks_create(report_stacks_file *files, int n);
/* The stacks file of one (backend, batch, dtype): path itself when the run has one of
 * each, else "<stem>[.<backend>][.batch<N>][.<dtype>]<ext>" ("r.folded" ->
 * "r.cuda.batch8.folded"), naming what varies; dtype NULL when it does not; caller frees. */
char *report_stacks_path(const char *path, const char *backend, int64_t batch, const char *dtype, bool one_backend,
                         bool one_batch);

/* The JSON run context written beside a CSV. */
/* A (backend, batch, dtype) set of results. */
typedef struct report_set {
    char backend[16];
    int64_t batch;
    dtype_t dtype;
    layer_pass pass;         /* forward or backward (--pass) */
    int64_t tokens, kv_len;  /* a decoder's token shape (model_tokens, model_kv_len); -1: none */
    int64_t rows;            /* the CSV rows the set wrote (report_csv_rows), -1: not known */
} report_set;

/* What the JSON run context says besides the results, typed; the runner keeps the
 * fields it owns current (floors, peaks, warnings, interrupted) as the run goes. */
typedef struct report_context {
    int argc;
    char **argv;
    const char *config;
    const measure_options *mo;
    const char *modes;         /* --mode as given */
    const backend *backends;   /* the backends that ran */
    int n_backends;
    const char *skipped;       /* backends asked for but not run, with why; or NULL */
    const report_set *resumed; /* sets kept from a previous run's CSV (--resume) */
    int resumed_sets;
    const timer_floor *floors; /* per backend (backends[i]): its timer's floor, where floor_known[i] */
    const bool *floor_known;
    const backend_peaks *peaks;/* per backend: its measured ceilings, where peaks_known[i] */
    const bool *peaks_known;
    const char *warnings;      /* one warning per line, or NULL */
    const char *interrupted;   /* where the run was interrupted, or NULL */
    const char *algo_cache;    /* --algo-cache's path, or NULL when none was used; then: */
    int algo_taken, algo_other_context, algo_malformed; /* choices taken, made elsewhere, unreadable */
    int processes;             /* --processes */
    double phase_band;         /* --phase-band as a fraction; below 0: off */
} report_context;

/* "results/x.csv" -> "results/x.json"; caller frees. */
char *report_json_path(const char *csv_path);
/* The JSON run context beside the CSV (docs/outputs.md) into out (borrowed), from ctx
 * (borrowed, read at each write) and the results: each checkpoint adds the finished set
 * (its memory, and how each mode was measured) and rewrites the file with state
 * "running"; finish writes "complete", "failed" or, where ctx says so, "interrupted"
 * (no file when nothing had finished). */
reporter *report_json_create(bench_output *out, const report_context *ctx);

/* `bench list`: the analysis table (and CSV) of a model, without timing. */
void report_list_table(FILE *out, const model *m, table_format format);
bench_status report_list_csv(bench_output *out, const model *m);

/* Time in auto units: "812 ns", "12.3 us", "4.56 ms", "1.23 s". */
char *report_format_time(double seconds, char *buf, size_t len);
/* Counts with K/M/G suffixes: "11.69M". */
char *report_format_count(double v, char *buf, size_t len);

#endif
