/* The bench command line's own pieces: the parsed command line (cli.c) and the commands
 * (commands.c: list, check, compare, schema; cmd_measure.c: run, sweep and the worker
 * processes), which main.c dispatches to. */
#ifndef LAYERBENCH_CLI_H
#define LAYERBENCH_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "backend_registry.h"
#include "cfg.h"
#include "measure.h"
#include "model.h"
#include "output.h"
#include "report.h"

/* --phase decode's cached tokens where --kv-len is not given. */
#define CLI_DEFAULT_KV_LEN 1024
/* The most values a sweep's --tokens or --kv-len list may hold. */
#define CLI_MAX_SHAPES 64
/* The most configs one sweep --slurm takes. */
#define CLI_MAX_CONFIGS 256

/* What chooses the model: list, check, run and sweep (cli_load_model). */
typedef struct cli_model {
    const char *config;      /* the CONFIG */
    const char *batch_arg;   /* --batch as given */
    int64_t *batches;        /* ... read: sweep's list (default 1,2,4,8,16,32), else one (0: the config's);
                                owned, freed by cli_free */
    int n_batches;
    dtype_t dtypes[DTYPE_COUNT]; /* --dtype, in order; n_dtypes 0: the config's */
    int n_dtypes;
    layer_pass passes[PASS_COUNT]; /* --pass, in order; n_passes 0: forward */
    int n_passes;
    bool tf32;               /* --tf32: --dtype tf32 */
    cfg_shape shape;         /* --tokens, --kv-len, --phase: a decoder's token shape (the lists' first) */
    int64_t tokens_list[CLI_MAX_SHAPES]; /* sweep: --tokens T1,T2,...; n_tokens 0: not given */
    int64_t kv_list[CLI_MAX_SHAPES];     /* sweep: --kv-len S1,S2,...; n_kv 0: not given */
    int n_tokens, n_kv;
    int phase;               /* --phase: 0 prefill, 1 decode; -1 not given */
    int routing;             /* --routing: MOE_* for every moe layer; -1: the config's */
    bool worker;             /* a worker process (cmd_worker, procs.h): its parent says the model's notes */
    double load_skew;        /* --routing skew:S */
    const char *freeze;      /* --freeze PATTERN[,PATTERN...]: the layers whose weights learn nothing; NULL: none */
    int optimizer;           /* --optimizer: model_optimizer (0: none) */
} cli_model;

/* What opens the backends: check, run and sweep (cli_open_backends, backend_options). */
typedef struct cli_backends {
    const char *backend;     /* --backend: a name, or all (sweep --slurm: a list) */
    int threads;             /* --threads; 0: all cores */
    int algo_heuristic;      /* --algo heuristic (its index in the names: 0 search, 1 heuristic) */
    int algo_alone;          /* --algo-for alone (0 forward, 1 alone) */
    int conv_api;            /* --conv-api: 0 both, 1 legacy, 2 graph */
} cli_backends;

/* run and sweep's own: how they time, what they write. */
typedef struct cli_run {
    const char *mode;        /* --mode as given */
    int processes;           /* --processes */
    double phase_band;       /* --phase-band as a fraction; below 0: off */
    const char *algo_cache;  /* --algo-cache FILE, or the default (default_cache); NULL: none */
    bool algo_cache_given;   /* ... given on the command line */
    char default_cache[1024];
    const char *csv;         /* --csv FILE (list's too) */
    const char *trace;       /* --trace FILE */
    const char *stacks;      /* --stacks FILE */
    bool resume;             /* --resume */
    bool no_peaks;           /* --no-peaks */
    bool error;              /* --error */
    bool no_progress;        /* --no-progress */
} cli_run;

/* sweep --slurm's own. */
typedef struct cli_slurm {
    const char *dir;         /* --slurm DIR; NULL: a local sweep */
    const char *configs[CLI_MAX_CONFIGS]; /* every CONFIG given */
    int n_configs;
    bool dry_run;            /* --dry-run */
    const char *sbatch_args; /* --sbatch-args, as given */
    const char *time_limit;  /* --time-limit; NULL: the default */
    int max_running;         /* --max-running; 0: no limit */
    bool shared;             /* --shared: no --exclusive */
} cli_slurm;

/* bench compare's own. */
typedef struct cli_compare {
    const char *base, *new_csv; /* BASE.csv NEW.csv */
    double threshold;        /* --threshold, a fraction */
    bool inmodel;            /* --inmodel */
    table_format format;     /* --format */
} cli_compare;

/* bench merge's own. */
typedef struct cli_merge {
    const char *dir;         /* DIR */
    const char *out;         /* -o FILE; NULL: DIR/sweep.csv */
} cli_merge;

/* The command line, typed: the command, and each group of options in the struct of the
 * commands that read it (the options table of cli.c says which field each fills). */
typedef struct cli {
    const char *command;
    bool help, version;      /* --help, --version: said, and nothing else done */
    cli_model model;
    cli_backends be;
    measure_options mo;      /* the measurement's (check: seed, dedupe, timeout) */
    cli_run run;
    report_options ro;       /* the tables: --sort, --top, --format, --group-by */
    cli_slurm slurm;
    cli_compare cmp;
    cli_merge merge;
    bool no_forward;         /* check --no-forward */
    bool timeout_given;      /* --timeout on the command line (check: the reference's bound) */
    bool emit_yaml;          /* list --emit-yaml: the config built, as YAML */
} cli;

/* The files a run writes, opened and checked against each other before anything is
 * measured: a list, each with the option that named it (cmd_measure.c); the named ones
 * for their reporters, NULL where not asked for. */
typedef struct outputs {
    bench_output **files;  /* every file opened, in order (owned) */
    const char **what;     /* ... the option that named it, for messages */
    int n;
    bench_output *csv, *json, *trace;
    report_stacks_file *stacks;   /* one per (backend, batch), opened once the backends are known */
    int n_stacks;
} outputs;

int cli_usage_error(const char *fmt, const char *arg);

bool cli_parse_long(const char *s, long lo, long hi, long *out);

/* "1,2,4" -> batches; false on anything else. */
bool cli_parse_batches(const char *s, int64_t **out, int *n);


/* "warm,batch" -> modes (at most 4, each valid and once; modes may be NULL to only
 * check); the count, or 0 when the list is not valid. */
int cli_split_modes(const char *arg, timing_mode *modes);

/* "cpu,onednn" or "all" -> the backends' names (static strings), each once and known;
 * the count, 0 when the list is not valid. out holds BACKEND_MAX. */
int cli_backend_list(const char *arg, const char **out);

/* The options of this command line that every shard of a --slurm sweep repeats: all but
 * the configs, the axes the shards split (--batch, --backend, --dtype, --tf32, --tokens,
 * --kv-len) and what only the sweep itself reads (--slurm and its options, --csv,
 * --resume, --no-progress). NULL-terminated; caller frees the array and its strings. */
char **cli_shard_options(int argc, char **argv);

/* Returns -1 to go on (then cli_free c), or an exit code. */
int cli_parse(int argc, char **argv, cli *c);
void cli_free(cli *c);

/* Opens the backends --backend asks for. Returns the count (>= 1) or -exit code.
 * With 'all', a backend that cannot start is skipped with its reason in *skipped. */
int cli_open_backends(const cli_backends *c, backend *bs, char **skipped);

void cli_close_backends(backend *bs, int nb, char *skipped);

/* Device memory, checked once the backends are open (host memory is checked before). */
bool cli_fits_backends(const model *m, const backend *bs, int nb);

int cli_load_model(const cli_model *c, int64_t batch, model **m);

int cmd_list(const cli *c, int64_t batch);

int cmd_check(const cli *c, int64_t batch);

/* A worker process (procs.h): one set, its result to the parent's pipe. */
int cmd_worker(void);

/* run and sweep: every batch on every backend, reported as it completes (runner.h). */
int cmd_measure(int argc, char **argv, const cli *c, const int64_t *batch_args, int n_batches, bool sweep);

int cmd_compare(const cli_compare *c);

/* sweep --slurm (slurm.c): the shards onto job arrays, submitted (or printed). */
int cmd_slurm_sweep(int argc, char **argv, const cli *c, const int64_t *batches, int n_batches);

/* merge DIR (slurm.c): the parts of a sweep --slurm as one CSV and JSON. */
int cmd_merge(const cli_merge *c);

int cmd_schema(void);

#endif
