/* The bench command line: run, sweep, list, check. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_registry.h"
#include "cfg.h"
#include "check.h"
#include "choices.h"
#include "compare.h"
#include "measure.h"
#include "report.h"
#include "procs.h"
#include "runner.h"
#include "schedstat.h"
#include "version.h"

static const char usage_text[] =
    "usage: bench <command> CONFIG [options]\n"
    "       bench compare BASE.csv NEW.csv [--threshold PCT] [--format md] [--inmodel]\n"
    "\n"
    "Layer-by-layer microbenchmarks of a model described in YAML (docs/config.md).\n"
    "\n"
    "commands:\n"
    "  run CONFIG      time every layer alone, then the chained forward; print the per-layer\n"
    "                  table, tables grouped by input shape and by kind, and a summary\n"
    "  sweep CONFIG    run at several batch sizes (--batch 1,2,4,...) and write one CSV\n"
    "  list CONFIG     layers, shapes, parameters, FLOPs and bytes, without timing\n"
    "  check CONFIG    compare every layer on every backend with the plain-C reference, then\n"
    "                  the chained forward's output with the reference forward's\n"
    "  compare BASE.csv NEW.csv\n"
    "                  per row: both medians, the change and a verdict, SLOWER, FASTER or SAME,\n"
    "                  that takes both rows' confidence intervals into account; exit 1 when\n"
    "                  any row is SLOWER\n"
    "  schema          print the CSV columns and what they hold\n"
    "  help            this text\n"
    "\n"
    "options:\n"
    "  --backend B       cpu (OpenBLAS and our loops), onednn (oneDNN's primitives), cuda\n"
    "                    (cuDNN, cuBLAS), or all of those built here (default cpu)\n"
    "  --tf32            cuda: allow TF32 in convolutions and linear layers (default strict FP32)\n"
    "  --algo A          search (time the candidate algorithms of each convolution at setup\n"
    "                    and keep the fastest: cuDNN's on cuda; on the cpu the GEMM layouts,\n"
    "                    per-thread chunks, Winograd and our register-tiled kernels; the\n"
    "                    default) or heuristic (a rule, no timing). onednn: oneDNN chooses\n"
    "                    its own\n"
    "  --batch N         batch size (default: the config's); sweep: a list, default 1,2,4,8,16,32\n"
    "  --threads N       CPU threads for OpenBLAS, oneDNN and the OpenMP loops (default: all\n"
    "                    cores)\n"
    "  --mode M[,M...]   timing modes of the isolated layers: warm (one call per sample), cold\n"
    "                    (caches flushed before each sample), batch (many calls per sample),\n"
    "                    auto (batch for a call under 20x the timer's floor, else warm;\n"
    "                    the default). Each row says which mode it used\n"
    "  --max-noise PCT   sample a layer until the 95% confidence interval of its median is\n"
    "                    within PCT percent of it (default 1)\n"
    "  --min-samples N   ... with at least N samples (default 10)\n"
    "  --timeout S       ... or until it has been sampled for S seconds (default 2), but\n"
    "                    not before it has 3 samples (or --min-samples, if fewer)\n"
    "  --warmup-time S   seconds of warm-up before a layer's first samples (default 0.02)\n"
    "  --min-time S      seconds per chunk: layers are sampled in rounds, one chunk (one Google\n"
    "                    Benchmark run) each per round (default 0.01)\n"
    "  --processes N     run, sweep: measure each (batch, backend, mode) in N worker processes,\n"
    "                    one after the other, and pool their samples, so that the interval\n"
    "                    covers how much one process's figures differ from the next's; each\n"
    "                    takes 1/N of --timeout and --min-samples; a worker whose layers ran\n"
    "                    over 5% slower in all than the fastest ran in a slow phase of the\n"
    "                    machine and is set aside for another (up to 2N) (default 3; 0: all\n"
    "                    in this process)\n"
    "  --algo-cache FILE run, sweep: where the algorithm choices of --algo search are kept and\n"
    "                    reused by later runs, so that they run the same kernels (made once\n"
    "                    per machine, libraries, threads and layer; a choice made elsewhere\n"
    "                    is not used, and said); default $XDG_CACHE_HOME or ~/.cache, then\n"
    "                    layerbench/choices.tsv; none: search in every run\n"
    "  --dedupe          time layers of identical kind, shape and parameters once\n"
    "  --seed N          seed of the random inputs and weights (default 1)\n"
    "  --csv FILE        write the tidy CSV (docs/csv.md) to FILE, '-' for stdout; a JSON run\n"
    "                    context with the same stem goes beside it. The file is replaced\n"
    "                    atomically after every finished (batch, backend): an interrupted run\n"
    "                    keeps what it finished\n"
    "  --trace FILE      run, sweep: a Chrome / Perfetto trace (JSON) of one real forward per\n"
    "                    backend and batch and of the layers alone, nested in their blocks\n"
    "                    (open it in ui.perfetto.dev or chrome://tracing; docs/outputs.md)\n"
    "  --stacks FILE     run, sweep: the same forward as folded stacks for flame graphs\n"
    "                    (flamegraph.pl, speedscope), in nanoseconds; with several backends\n"
    "                    or batches, one file each: FILE's stem + .BACKEND[.batchN]\n"
    "  --threshold PCT   compare: how much slower (or faster) beyond both confidence intervals\n"
    "                    counts (default 5)\n"
    "  --format F        run, sweep, list, compare: the tables as text (default) or md\n"
    "                    (markdown, for pull requests and READMEs)\n"
    "  --group-by G[,G]  run: the grouped tables, any of shape, kind and block (the module\n"
    "                    hierarchy, total and self time per block), or none (default all)\n"
    "  --inmodel         compare: the in-model rows too (left out by default: they vary more\n"
    "                    between runs than their own noise says)\n"
    "  --resume          run, sweep: continue the run whose --csv FILE is given, measuring only\n"
    "                    the (batch, backend) sets it does not hold yet\n"
    "  --sort COLUMN     per-layer table order: index (default), name, kind, params, flops,\n"
    "                    time, noise, inmodel, gflops\n"
    "  --top N           rows in the per-layer and by-shape tables (default all)\n"
    "  --no-peaks        run, sweep: skip measuring the machine's ceilings (a large matrix\n"
    "                    product and a memory stream, about 0.3 s per backend), and with\n"
    "                    them the roofline columns\n"
    "  --no-forward      check: skip the chained forward's check (it costs one more reference\n"
    "                    forward, as long as checking every layer once)\n"
    "  --no-progress     do not show the running layer on stderr\n"
    "  -h, --help        this text\n"
    "  --version         version and git revision\n"
    "\n"
    "exit status: 0 ok; 1 failure (a check failed, a row failed, a file could not be written);\n"
    "2 usage or config error, or a backend asked for that this machine or binary does not have;\n"
    "128+N interrupted by signal N (what had finished is kept)\n";

typedef struct cli {
    const char *command;
    const char *config;
    const char *backend;
    const char *batch_arg;
    const char *csv;
    const char *trace;       /* --trace FILE */
    const char *stacks;      /* --stacks FILE */
    int threads;
    int top;
    const char *sort;
    bool no_progress;
    bool tf32;
    bool algo_heuristic;
    bool resume;
    bool no_peaks;           /* --no-peaks */
    bool no_forward;         /* check --no-forward */
    const char *mode;        /* --mode as given */
    const char *compare_new; /* compare: NEW.csv (config holds BASE.csv) */
    double threshold;        /* compare: fraction */
    table_format format;     /* --format: text or md (markdown tables) */
    unsigned groups;         /* --group-by: REPORT_GROUP_* bits, 0 for the default */
    bool inmodel;            /* compare --inmodel */
    int processes;           /* --processes */
    const char *worker;      /* the hidden --worker SPEC: this process is a worker (procs.h) */
    const char *algo_cache;  /* --algo-cache FILE, or the default (default_cache); NULL: none */
    bool algo_cache_given;   /* ... given on the command line */
    char default_cache[1024];
    measure_options mo;
} cli;

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "bench: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'bench --help'.\n");
    return 2;
}

static bool parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static bool parse_seconds(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !(v >= 0) || v > 3600)
        return false;
    *out = v;
    return true;
}

/* "1,2,4" -> batches; false on anything else. */
static bool parse_batches(const char *s, int64_t **out, int *n)
{
    if (!*s || s[0] == ',' || strstr(s, ",,"))
        return *out = NULL, false;
    char *copy = xstrdup(s), *save = NULL;
    int cap = 8;
    *out = xmalloc((size_t)cap * sizeof **out);
    *n = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long v;
        if (!parse_long(tok, 1, INT32_MAX, &v)) {
            free(copy);
            return false;
        }
        if (*n == cap)
            *out = xrealloc(*out, (size_t)(cap *= 2) * sizeof **out);
        (*out)[(*n)++] = v;
    }
    free(copy);
    return *n > 0 && s[strlen(s) - 1] != ',';
}

enum { OPT_BACKEND = 256, OPT_BATCH, OPT_THREADS, OPT_WARMUP, OPT_MINTIME, OPT_MODE, OPT_NOISE, OPT_MINSAMPLES,
       OPT_TIMEOUT, OPT_THRESHOLD, OPT_FORMAT, OPT_GROUP_BY, OPT_INMODEL, OPT_DEDUPE, OPT_SEED,
       OPT_CSV, OPT_TRACE, OPT_STACKS, OPT_SORT, OPT_TOP, OPT_NOPROGRESS, OPT_VERSION, OPT_TF32, OPT_ALGO, OPT_RESUME, OPT_NO_PEAKS,
       OPT_NO_FORWARD, OPT_PROCESSES, OPT_WORKER, OPT_ALGO_CACHE };

static const struct option long_opts[] = {
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"batch", required_argument, NULL, OPT_BATCH},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"warmup-time", required_argument, NULL, OPT_WARMUP},
    {"min-time", required_argument, NULL, OPT_MINTIME},
    {"mode", required_argument, NULL, OPT_MODE},
    {"max-noise", required_argument, NULL, OPT_NOISE},
    {"min-samples", required_argument, NULL, OPT_MINSAMPLES},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"threshold", required_argument, NULL, OPT_THRESHOLD},
    {"format", required_argument, NULL, OPT_FORMAT},
    {"group-by", required_argument, NULL, OPT_GROUP_BY},
    {"inmodel", no_argument, NULL, OPT_INMODEL},
    {"dedupe", no_argument, NULL, OPT_DEDUPE},
    {"seed", required_argument, NULL, OPT_SEED},
    {"csv", required_argument, NULL, OPT_CSV},
    {"trace", required_argument, NULL, OPT_TRACE},
    {"stacks", required_argument, NULL, OPT_STACKS},
    {"no-peaks", no_argument, NULL, OPT_NO_PEAKS},
    {"sort", required_argument, NULL, OPT_SORT},
    {"top", required_argument, NULL, OPT_TOP},
    {"no-progress", no_argument, NULL, OPT_NOPROGRESS},
    {"no-forward", no_argument, NULL, OPT_NO_FORWARD},
    {"tf32", no_argument, NULL, OPT_TF32},
    {"algo", required_argument, NULL, OPT_ALGO},
    {"resume", no_argument, NULL, OPT_RESUME},
    {"processes", required_argument, NULL, OPT_PROCESSES},
    {"worker", required_argument, NULL, OPT_WORKER},
    {"algo-cache", required_argument, NULL, OPT_ALGO_CACHE},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

/* "warm,batch" -> modes (at most 4, each valid and once; modes may be NULL to only
 * check); the count, or 0 when the list is not valid. The strings point into *copy,
 * which the caller frees (NULL when modes is NULL). */
static int split_modes(const char *arg, const char **modes, char **copy_out)
{
    char *copy = xstrdup(arg), *save = NULL;
    const char *seen[4];
    int n = 0;
    bool ok = *arg && arg[strlen(arg) - 1] != ',' && !strstr(arg, ",,");
    for (char *tok = strtok_r(copy, ",", &save); ok && tok; tok = strtok_r(NULL, ",", &save)) {
        for (int i = 0; i < n; i++)
            ok &= strcmp(seen[i], tok) != 0;
        ok &= measure_mode_valid(tok) && n < 4;
        if (ok)
            seen[n++] = tok;
    }
    if (!ok || !modes) {
        free(copy);
        return ok ? n : 0;
    }
    for (int i = 0; i < n; i++)
        modes[i] = seen[i];
    *copy_out = copy;
    return n;
}

/* Returns -1 to go on, or an exit code. */
static int parse_cli(int argc, char **argv, cli *c)
{
    *c = (cli){.backend = "cpu", .sort = "index", .processes = PROCS_DEFAULT,
               .mode = "auto", .threshold = COMPARE_DEFAULT_THRESHOLD,
               .mo = {.warmup_time = MEASURE_DEFAULT_WARMUP, .min_time = MEASURE_DEFAULT_MIN_TIME,
                      .max_noise = MEASURE_DEFAULT_MAX_NOISE, .min_samples = MEASURE_DEFAULT_MIN_SAMPLES,
                      .timeout = MEASURE_DEFAULT_TIMEOUT, .seed = 1}};
    opterr = 0;
    int opt;
    long v;
    while ((opt = getopt_long(argc, argv, ":h", long_opts, NULL)) != -1) {
        switch (opt) {
        case 'h': fputs(usage_text, stdout); return 0;
        case OPT_VERSION: printf("bench (layerbench) %s, git %s\n", LAYERBENCH_VERSION, layerbench_git_revision()); return 0;
        case OPT_BACKEND: c->backend = optarg; break;
        case OPT_BATCH: c->batch_arg = optarg; break;
        case OPT_THREADS:
            if (!parse_long(optarg, 1, 1024, &v))
                return usage_error("--threads expects an integer from 1 to 1024, got '%s'", optarg);
            c->threads = (int)v;
            break;
        case OPT_WARMUP:
            if (!parse_seconds(optarg, &c->mo.warmup_time))
                return usage_error("--warmup-time expects seconds from 0 to 3600, got '%s'", optarg);
            break;
        case OPT_MINTIME:
            if (!parse_seconds(optarg, &c->mo.min_time) || c->mo.min_time <= 0)
                return usage_error("--min-time expects seconds above 0 and at most 3600, got '%s'", optarg);
            break;
        case OPT_MODE: c->mode = optarg; break;
        case OPT_NOISE: {
            double pct;
            if (!parse_seconds(optarg, &pct) || pct <= 0 || pct > 100)
                return usage_error("--max-noise expects a percentage above 0 and at most 100, got '%s'", optarg);
            c->mo.max_noise = pct / 100;
            break;
        }
        case OPT_MINSAMPLES:
            if (!parse_long(optarg, 1, 1000000, &v))
                return usage_error("--min-samples expects an integer from 1 to 1000000, got '%s'", optarg);
            c->mo.min_samples = (int)v;
            break;
        case OPT_THRESHOLD: {
            double pct;
            if (!parse_seconds(optarg, &pct) || pct > 1000)
                return usage_error("--threshold expects a percentage from 0 to 1000, got '%s'", optarg);
            c->threshold = pct / 100;
            break;
        }
        case OPT_INMODEL: c->inmodel = true; break;
        case OPT_FORMAT:
            if (!table_format_parse(optarg, &c->format))
                return usage_error("--format expects text or md, got '%s'", optarg);
            break;
        case OPT_GROUP_BY:
            if (!report_groups_parse(optarg, &c->groups))
                return usage_error("--group-by expects a comma-separated list of shape, kind and block (or none), "
                                   "got '%s'", optarg);
            break;
        case OPT_TIMEOUT:
            if (!parse_seconds(optarg, &c->mo.timeout) || c->mo.timeout <= 0)
                return usage_error("--timeout expects seconds above 0 and at most 3600, got '%s'", optarg);
            break;
        case OPT_DEDUPE: c->mo.dedupe = true; break;
        case OPT_SEED:
            if (!parse_long(optarg, 0, LONG_MAX, &v))
                return usage_error("--seed expects a non-negative integer, got '%s'", optarg);
            c->mo.seed = (uint64_t)v;
            break;
        case OPT_CSV: c->csv = optarg; break;
        case OPT_TRACE: c->trace = optarg; break;
        case OPT_STACKS: c->stacks = optarg; break;
        case OPT_SORT:
            if (!report_sort_valid(optarg))
                return usage_error("--sort expects index, name, kind, params, flops, time, noise, inmodel or gflops, "
                                   "got '%s'", optarg);
            c->sort = optarg;
            break;
        case OPT_TOP:
            if (!parse_long(optarg, 1, INT32_MAX, &v))
                return usage_error("--top expects a positive integer, got '%s'", optarg);
            c->top = (int)v;
            break;
        case OPT_NOPROGRESS: c->no_progress = true; break;
        case OPT_TF32: c->tf32 = true; break;
        case OPT_RESUME: c->resume = true; break;
        case OPT_PROCESSES:
            if (!parse_long(optarg, 0, 64, &v))
                return usage_error("--processes expects an integer from 0 to 64, got '%s'", optarg);
            c->processes = (int)v;
            break;
        case OPT_WORKER: c->worker = optarg; break;
        case OPT_ALGO_CACHE:
            if (!*optarg)
                return usage_error("%s", "--algo-cache expects a file");
            c->algo_cache = strcmp(optarg, "none") == 0 ? NULL : optarg;
            c->algo_cache_given = true;
            break;
        case OPT_NO_PEAKS: c->no_peaks = true; break;
        case OPT_NO_FORWARD: c->no_forward = true; break;
        case OPT_ALGO:
            if (strcmp(optarg, "search") && strcmp(optarg, "heuristic"))
                return usage_error("--algo expects search or heuristic, got '%s'", optarg);
            c->algo_heuristic = strcmp(optarg, "heuristic") == 0;
            break;
        case ':': return usage_error("option '%s' needs a value", argv[optind - 1]);
        default: return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return usage_error("%s", "missing command (run, sweep, list, check, compare, schema)");
    c->command = argv[optind++];
    if (strcmp(c->command, "help") == 0) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (strcmp(c->command, "compare") == 0) {
        if (argc - optind < 2)
            return usage_error("%s", "compare needs two results CSVs: BASE.csv NEW.csv");
        c->config = argv[optind++];
        c->compare_new = argv[optind++];
    } else if (strcmp(c->command, "schema") != 0) {
        if (optind >= argc)
            return usage_error("%s needs a CONFIG file", c->command);
        c->config = argv[optind++];
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (!split_modes(c->mode, NULL, NULL))
        return usage_error("--mode expects " MEASURE_MODES " (or a comma-separated list of them), got '%s'", c->mode);
    bool known = strcmp(c->backend, "all") == 0;
    for (const char *const *n = backend_names(); *n; n++)
        known = known || strcmp(c->backend, *n) == 0;
    if (!known) {
        char list[256] = "";
        for (const char *const *n = backend_names(); *n; n++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s, ", *n);
        snprintf(list + strlen(list), sizeof list - strlen(list), "or all, got '%s'", c->backend);
        return usage_error("--backend expects %s", list);
    }
    c->mo.progress = !c->no_progress && isatty(STDERR_FILENO);
    /* the choices are kept by default, as autotuners keep theirs: $XDG_CACHE_HOME or
     * ~/.cache, layerbench/choices.tsv */
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (!c->algo_cache_given && !c->algo_heuristic && ((xdg && *xdg) || (home && *home))) {
        snprintf(c->default_cache, sizeof c->default_cache, "%s%s/layerbench/choices.tsv", xdg && *xdg ? xdg : home,
                 xdg && *xdg ? "" : "/.cache");
        c->algo_cache = c->default_cache;
    }
    return -1;
}

/* Opens the backends --backend asks for. Returns the count (>= 1) or -exit code.
 * With 'all', a backend that cannot start is skipped with its reason in *skipped. */
static int open_backends(const cli *c, backend *bs, char **skipped)
{
    backend_options bo = {.threads = c->threads, .tf32 = c->tf32, .algo_heuristic = c->algo_heuristic};
    const char *const *names = backend_names();
    int n = 0;
    *skipped = NULL;
    for (int i = 0; names[i]; i++) {
        if (strcmp(c->backend, "all") != 0 && strcmp(c->backend, names[i]) != 0)
            continue;
        const backend_ops *ops = backend_find(names[i]);
        char err[512];
        bench_status st;
        if (!ops) {
            snprintf(err, sizeof err, "%s", backend_find_error());
            st = BENCH_ERR_UNSUPPORTED;
        } else {
            st = backend_open(ops, &bo, &bs[n], err, sizeof err);
        }
        if (st == BENCH_OK) {
            n++;
            continue;
        }
        if (strcmp(c->backend, "all") != 0 || st == BENCH_ERR_USAGE) {
            fprintf(stderr, "bench: %s\n", err);
            for (int k = 0; k < n; k++)
                backend_close(&bs[k]);
            return -(st == BENCH_ERR_USAGE ? 2 : st == BENCH_ERR_UNSUPPORTED ? 2 : 1);
        }
        fprintf(stderr, "bench: %s backend skipped: %s\n", names[i], err);
        char *prev = *skipped;
        *skipped = prev ? xasprintf("%s; %s: %s", prev, names[i], err) : xasprintf("%s: %s", names[i], err);
        free(prev);
    }
    return n;
}

static void close_backends(backend *bs, int nb, char *skipped)
{
    for (int k = 0; k < nb; k++)
        backend_close(&bs[k]);
    free(skipped);
}

/* Device memory, checked once the backends are open (host memory is checked before). */
static bool fits_backends(const model *m, const backend *bs, int nb)
{
    char err[512];
    for (int k = 0; k < nb; k++) {
        int64_t avail = backend_mem_available(&bs[k]);
        if (avail >= 0 && model_check_memory(m, avail, bs[k].ops->name, err, sizeof err) != BENCH_OK) {
            fprintf(stderr, "bench: %s\n", err);
            return false;
        }
    }
    return true;
}

static int load(const cli *c, int64_t batch, model **m)
{
    char err[1024];
    bench_status st = cfg_load(c->config, batch, m, err, sizeof err);
    if (st != BENCH_OK) {
        /* "file:line:col: ..." about the config, or "bench: --batch ..." about the command line */
        fprintf(stderr, "%s%s\n", strncmp(err, c->config, strlen(c->config)) == 0 ? "" : "bench: ", err);
        return bench_exit_code(st);
    }
    return 0;
}

static int cmd_list(const cli *c, int64_t batch)
{
    model *m;
    int rc = load(c, batch, &m);
    if (rc)
        return rc;
    if (c->csv) {
        const char *inputs[] = {c->config, NULL};
        char err[1200];
        bench_output out;
        if (bench_output_open(&out, c->csv, inputs, err, sizeof err) != BENCH_OK) {
            fprintf(stderr, "bench: --csv: %s\n", err);
            rc = 2;
        } else {
            rc = bench_exit_code(report_list_csv(&out, m));
            bench_output_close(&out);
        }
    } else {
        report_list_table(stdout, m, c->format);
    }
    model_free(m);
    return rc;
}

static int cmd_check(const cli *c, int64_t batch)
{
    model *m;
    backend bs[BACKEND_MAX];
    char *skipped;
    char err[512];
    int rc = load(c, batch, &m);
    if (rc)
        return rc;
    if (model_check_memory(m, -1, "", err, sizeof err) != BENCH_OK) {
        fprintf(stderr, "bench: %s\n", err);
        model_free(m);
        return 2;
    }
    int nb = open_backends(c, bs, &skipped);
    if (nb < 0) {
        model_free(m);
        return -nb;
    }
    if (!fits_backends(m, bs, nb)) {
        close_backends(bs, nb, skipped);
        model_free(m);
        return 2;
    }
    printf("%s: batch %lld, seed %llu\n\n", m->name, (long long)m->batch, (unsigned long long)c->mo.seed);
    bench_status st = check_model(m, bs, nb, c->mo.seed, !c->no_forward, stdout);
    close_backends(bs, nb, skipped);
    model_free(m);
    return bench_exit_code(st);
}

/* The --csv file and the JSON beside it, checked before anything is measured. */
typedef struct outputs {
    bench_output csv, json, trace;
    bool has_csv, has_json, has_trace;
    report_stacks_file *stacks;   /* one per (backend, batch), opened once the backends are known */
    int n_stacks;
} outputs;

/* Two results files that would be the same file. */
static bool same_output(const char *a, const char *b) { return a && b && strcmp(a, b) == 0 && strcmp(a, "-") != 0; }

static int open_outputs(const cli *c, outputs *o)
{
    const char *inputs[] = {c->config, NULL};
    char err[1200];
    memset(o, 0, sizeof *o);
    char *json_path = c->csv ? report_json_path(c->csv) : NULL;
    bool clash = same_output(c->trace, c->csv) || same_output(c->trace, json_path) || same_output(c->stacks, c->csv) ||
                 same_output(c->stacks, json_path) || same_output(c->stacks, c->trace);
    free(json_path);
    if (clash) {
        fprintf(stderr, "bench: --csv (and its JSON), --trace and --stacks must name different files\n");
        return 2;
    }
    if (c->trace) {
        if (bench_output_open(&o->trace, c->trace, inputs, err, sizeof err) != BENCH_OK) {
            fprintf(stderr, "bench: --trace: %s\n", err);
            return 2;
        }
        o->has_trace = true;
    }
    if (!c->csv)
        return 0;
    if (bench_output_open(&o->csv, c->csv, inputs, err, sizeof err) != BENCH_OK) {
        fprintf(stderr, "bench: --csv: %s\n", err);
        if (o->has_trace)
            bench_output_close(&o->trace);
        o->has_trace = false;
        return 2;
    }
    o->has_csv = true;
    if (!o->csv.target) /* stdout, a device or a FIFO: no JSON beside it */
        return 0;
    char *json = report_json_path(c->csv);
    bench_status st = bench_output_open(&o->json, json, inputs, err, sizeof err);
    free(json);
    if (st != BENCH_OK) {
        fprintf(stderr, "bench: the JSON context beside --csv: %s\n", err);
        bench_output_close(&o->csv);
        if (o->has_trace)
            bench_output_close(&o->trace);
        o->has_csv = o->has_trace = false;
        return 2;
    }
    o->has_json = true;
    return 0;
}

/* The --stacks files, one per (backend, batch) that will run. */
static int open_stacks(const cli *c, outputs *o, const backend *bs, int nb, const int64_t *batches, int n_batches)
{
    const char *inputs[] = {c->config, NULL};
    char err[1200];
    if (!c->stacks)
        return 0;
    o->stacks = xcalloc((size_t)(nb * n_batches), sizeof *o->stacks);
    for (int b = 0; b < nb; b++)
        for (int k = 0; k < n_batches; k++) {
            char *path = report_stacks_path(c->stacks, bs[b].ops->name, batches[k], nb == 1, n_batches == 1);
            bench_output *out = xcalloc(1, sizeof *out);
            bench_status st = bench_output_open(out, path, inputs, err, sizeof err);
            free(path);
            if (st != BENCH_OK) {
                fprintf(stderr, "bench: --stacks: %s\n", err);
                free(out);
                return 2;
            }
            o->stacks[o->n_stacks++] = (report_stacks_file){bs[b].ops->name, batches[k], out};
        }
    return 0;
}

static void close_outputs(outputs *o)
{
    if (o->has_csv)
        bench_output_close(&o->csv);
    if (o->has_json)
        bench_output_close(&o->json);
    if (o->has_trace)
        bench_output_close(&o->trace);
    for (int i = 0; i < o->n_stacks; i++) {
        bench_output_close(o->stacks[i].out);
        free(o->stacks[i].out);
    }
    free(o->stacks);
    o->stacks = NULL, o->n_stacks = 0;
}

/* The worker processes' command line (procs.h): this binary, run, the config and every
 * option that changes what is measured; procs adds the set's own. Caller frees the
 * array and its strings. */
static char **worker_argv(const cli *c, const char *algo_cache)
{
    char **a = xcalloc(40, sizeof *a);
    int n = 0;
    a[n++] = xstrdup("bench");
    a[n++] = xstrdup("run");
    a[n++] = xstrdup(c->config);
    if (c->threads)
        a[n++] = xstrdup("--threads"), a[n++] = xasprintf("%d", c->threads);
    if (c->tf32)
        a[n++] = xstrdup("--tf32");
    a[n++] = xstrdup("--algo"), a[n++] = xstrdup(c->algo_heuristic ? "heuristic" : "search");
    a[n++] = xstrdup("--seed"), a[n++] = xasprintf("%llu", (unsigned long long)c->mo.seed);
    a[n++] = xstrdup("--warmup-time"), a[n++] = xasprintf("%.17g", c->mo.warmup_time);
    a[n++] = xstrdup("--min-time"), a[n++] = xasprintf("%.17g", c->mo.min_time);
    a[n++] = xstrdup("--max-noise"), a[n++] = xasprintf("%.17g", 100 * c->mo.max_noise);
    a[n++] = xstrdup("--min-samples"), a[n++] = xasprintf("%d", c->mo.min_samples);
    a[n++] = xstrdup("--timeout"), a[n++] = xasprintf("%.17g", c->mo.timeout);
    if (c->mo.dedupe)
        a[n++] = xstrdup("--dedupe");
    if (c->no_progress)
        a[n++] = xstrdup("--no-progress");
    if (algo_cache)
        a[n++] = xstrdup("--algo-cache"), a[n++] = xstrdup(algo_cache);
    return a;
}

static void free_argv(char **a)
{
    for (int i = 0; a && a[i]; i++)
        free(a[i]);
    free(a);
}

static void probe_reset(void *p)
{
    sched_probe_close(p);
    sched_probe_open(p);
}

/* Contention (measure.h): this process's threads' waits for a CPU, read around every
 * sample. */
static void watch_contention(measure_options *mo, sched_probe *probe)
{
    probe->n = 0;
    if (!sched_probe_open(probe))
        return; /* no schedstat: every sample counts as undisturbed */
    mo->waited = sched_probe_read, mo->waited_user = probe, mo->waited_reset = probe_reset;
}

/* --algo-cache: its choices to the backends before anything is set up; what was left
 * unused into note (a warning), the JSON context's "algo_cache" into *json (caller
 * frees). Returns 0; 2 when the file given cannot be read or is no choices file; -1
 * when the default one is such a file (it is not used, and note says so). */
static int load_algo_cache(const cli *c, const backend *bs, int nb, char *note, size_t notelen, char **json)
{
    choices_report cr;
    char err[1200];
    if (!c->algo_cache)
        return 0;
    if (choices_load(c->algo_cache, bs, nb, &cr, err, sizeof err) != BENCH_OK) {
        if (c->algo_cache_given) {
            fprintf(stderr, "bench: %s\n", err);
            return 2;
        }
        snprintf(note, notelen, "%.300s: not used (remove it, or give --algo-cache FILE or none)", err);
        return -1;
    }
    choices_warning(c->algo_cache, &cr, note, notelen);
    if (cr.taken)
        fprintf(stderr, "bench: %d algorithm choice%s from %s (--algo-cache none searches again)\n", cr.taken,
                cr.taken == 1 ? "" : "s", c->algo_cache);
    strbuf j = {0};
    strbuf_append(&j, "{\"path\": ", 9);
    strbuf_json(&j, c->algo_cache);
    strbuf_printf(&j, ", \"taken\": %d, \"other_context\": %d, \"malformed\": %d}", cr.taken, cr.foreign,
                  cr.malformed);
    *json = j.data;
    return 0;
}

/* Saves the backends' choices into path (--algo-cache), saying what went wrong. */
static void save_algo_cache(const char *path, const backend *bs, int nb)
{
    int stale = 0;
    char err[1200];
    if (choices_save(path, bs, nb, &stale, err, sizeof err) != BENCH_OK)
        fprintf(stderr, "bench: warning: %s\n", err);
    else if (stale)
        fprintf(stderr, "bench: warning: --algo-cache: %d choice%s no longer applied (the candidates changed): "
                        "searched again\n", stale, stale == 1 ? "" : "s");
}

/* A worker process (procs.h): one set, its result to the parent's pipe. */
static int cmd_worker(const cli *c, int64_t batch)
{
    model *m;
    backend bs[BACKEND_MAX];
    char *skipped;
    int rc = load(c, batch, &m);
    if (rc)
        return rc;
    int nb = open_backends(c, bs, &skipped);
    if (nb != 1) {
        model_free(m);
        return nb < 0 ? -nb : 2;
    }
    measure_options mo = c->mo;
    mo.stop = &bench_interrupted;
    sched_probe probe;
    watch_contention(&mo, &probe);
    choices_report cr;
    char err[1024];
    if (c->algo_cache && choices_load(c->algo_cache, bs, nb, &cr, err, sizeof err) != BENCH_OK)
        fprintf(stderr, "bench: warning: %s\n", err);
    int index = 0, count = 0;
    sscanf(c->worker, "%*d,%d,%d", &index, &count);
    char label[48];
    snprintf(label, sizeof label, index <= count ? "process %d/%d" : "process %d (one more for %d)", index, count);
    mo.label = label;
    bench_catch_signals();
    rc = procs_worker(c->worker, m, &bs[0], &mo, c->mode);
    if (c->algo_cache)
        save_algo_cache(c->algo_cache, bs, nb);
    sched_probe_close(&probe);
    close_backends(bs, nb, skipped);
    model_free(m);
    return rc;
}

/* run and sweep: every batch on every backend, reported as it completes (runner.h). */
static int cmd_measure(int argc, char **argv, const cli *c, const int64_t *batch_args, int n_batches, bool sweep)
{
    model *m;
    backend bs[BACKEND_MAX];
    char *skipped, err[1024];
    int rc = load(c, batch_args[0], &m);
    if (rc)
        return rc;
    int64_t *batches = xmalloc((size_t)n_batches * sizeof *batches), largest = 0;
    for (int b = 0; b < n_batches; b++) {
        batches[b] = batch_args[b] > 0 ? batch_args[b] : m->batch; /* 0: the config's batch */
        if (model_set_batch(m, batches[b], err, sizeof err) != BENCH_OK ||
            model_check_memory(m, -1, "", err, sizeof err) != BENCH_OK) {
            fprintf(stderr, "bench: %s\n", err);
            free(batches);
            model_free(m);
            return 2;
        }
        largest = batches[b] > largest ? batches[b] : largest;
    }
    outputs out;
    char *previous = NULL;
    runner_set *done = NULL;
    int n_done = 0;
    if ((rc = open_outputs(c, &out)) != 0) {
        free(batches);
        model_free(m);
        return rc;
    }
    if (c->resume && (!out.has_csv || !out.csv.target)) {
        fprintf(stderr, "bench: --resume needs --csv FILE: the results of the run to continue\n");
        rc = 2;
    } else if (c->resume &&
               runner_read_previous(c->csv, m->name, &previous, &done, &n_done, err, sizeof err) != BENCH_OK) {
        fprintf(stderr, "bench: %s\n", err);
        rc = 2;
    }
    int nb = rc ? 0 : open_backends(c, bs, &skipped);
    if (rc || nb < 0) {
        close_outputs(&out);
        free(previous), free(done), free(batches);
        model_free(m);
        return rc ? rc : -nb;
    }
    model_set_batch(m, largest, err, sizeof err);
    char cache_note[400] = "", *cache_json = NULL;
    int cache_rc = 0;
    if (!fits_backends(m, bs, nb) || open_stacks(c, &out, bs, nb, batches, n_batches) != 0 ||
        (cache_rc = load_algo_cache(c, bs, nb, cache_note, sizeof cache_note, &cache_json)) > 0) {
        close_backends(bs, nb, skipped);
        close_outputs(&out);
        free(previous), free(done), free(batches);
        model_free(m);
        return 2;
    }
    report_options ro = {c->sort, c->top, c->format, c->groups};
    reporter *reps[4];
    int nr = 0;
    /* with --csv -, the CSV owns stdout and the tables go to stderr */
    FILE *tables = out.has_csv && out.csv.is_stdout ? stderr : stdout;
    reps[nr++] = sweep ? report_sweep_create(tables, c->format) : report_console_create(tables, &ro);
    if (out.has_csv)
        reps[nr++] = report_csv_create(&out.csv, previous);
    if (out.has_trace)
        reps[nr++] = report_trace_create(&out.trace);
    if (out.n_stacks)
        reps[nr++] = report_stacks_create(out.stacks, out.n_stacks);
    measure_options mo = c->mo;
    mo.stop = &bench_interrupted;
    sched_probe probe = {.n = 0};
    /* the workers of a run share one choices file, so that they run the same kernels */
    char cache_tmp[] = "/tmp/layerbench-choices-XXXXXX";
    const char *cache = cache_rc < 0 ? NULL : c->algo_cache; /* a broken default is left alone */
    if (!cache && c->processes > 0 && !c->algo_heuristic) {
        int fd = mkstemp(cache_tmp);
        if (fd >= 0)
            close(fd), cache = cache_tmp;
    }
    char **wargv = c->processes > 0 ? worker_argv(c, cache) : NULL;
    if (!wargv) /* else the workers watch their own threads */
        watch_contention(&mo, &probe);
    const char *modes[4];
    char *modes_text = NULL;
    int n_modes = split_modes(c->mode, modes, &modes_text);
    runner_plan plan = {
        .modes = modes, .n_modes = n_modes,
        .batches = batches, .n_batches = n_batches, .backends = bs, .n_backends = nb, .done = done, .n_done = n_done,
        .reps = reps, .n_reps = nr, .json = out.has_json ? &out.json : NULL,
        .ctx = {.argc = argc, .argv = argv, .config = c->config, .mo = &c->mo, .modes = c->mode, .backends = bs,
                .n_backends = nb, .skipped = skipped},
        .sweep_progress = sweep && c->mo.progress,
        .probe_peaks = !c->no_peaks,
        .procs = {c->processes, wargv},
        .note = *cache_note ? cache_note : NULL,
    };
    plan.ctx.algo_cache = cache_json;
    plan.ctx.processes = c->processes;
    bench_catch_signals();
    rc = runner_execute(m, &plan, &mo);
    if (cache && c->processes == 0) /* else the workers saved it */
        save_algo_cache(cache, bs, nb);
    if (rc == 0 && out.has_json)
        fprintf(stderr, "bench: wrote %s and its JSON context %s\n", c->csv, out.json.path);
    if (cache == cache_tmp)
        unlink(cache_tmp);
    free(cache_json);
    close_backends(bs, nb, skipped);
    close_outputs(&out);
    sched_probe_close(&probe);
    free_argv(wargv);
    free(previous), free(done), free(batches), free(modes_text);
    model_free(m);
    return rc;
}

static int cmd_compare(const cli *c)
{
    csv_table base, new_;
    char err[1024];
    if (csv_read_file(c->config, &base, err, sizeof err) != BENCH_OK) {
        fprintf(stderr, "bench: %s\n", err);
        return 2;
    }
    if (csv_read_file(c->compare_new, &new_, err, sizeof err) != BENCH_OK) {
        fprintf(stderr, "bench: %s\n", err);
        csv_table_free(&base);
        return 2;
    }
    compare_options o = {c->threshold, c->format == TABLE_MD, c->inmodel};
    int rc = compare_tables(c->config, &base, c->compare_new, &new_, &o, stdout);
    csv_table_free(&base);
    csv_table_free(&new_);
    return rc;
}

static int cmd_schema(void)
{
    int n;
    const report_column *cols = report_csv_columns(&n);
    for (int i = 0; i < n; i++)
        printf("%-14s  %s\n", cols[i].name, cols[i].doc);
    return 0;
}

/* libgomp spins for GOMP_SPINCOUNT (300000 by default) before a worker sleeps. On the
 * 2-core machine we measure on, that default made convolutions run 2x slower for
 * seconds at a time, in and out of phase, while 10000 was stable and fastest (the
 * measurements are in results/README.md). libgomp reads the setting when it loads, so
 * it must be in the environment before the process starts: for the commands that time
 * (run, sweep), set it and exec ourselves once. A user's own OMP_WAIT_POLICY or
 * GOMP_SPINCOUNT is left alone, and so is a process under valgrind (whose
 * /proc/self/exe is valgrind itself): set GOMP_SPINCOUNT=10000 yourself there. */
static void set_openmp_spin(char **argv)
{
    const char *preload = getenv("LD_PRELOAD");
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || (preload && strstr(preload, "vgpreload")))
        return;
    setenv("GOMP_SPINCOUNT", "10000", 1);
    execv("/proc/self/exe", argv); /* returns only on failure: go on with the default */
}

/* Output that could not be written (a full disk, a closed pipe) is a failure. */
static int finish_stdout(int rc)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "bench: writing to standard output failed: %s\n", strerror(errno));
        return rc ? rc : 1;
    }
    return rc;
}

static int run_command(int argc, char **argv);

int main(int argc, char **argv) { return finish_stdout(run_command(argc, argv)); }

static int run_command(int argc, char **argv)
{
    cli c;
    int rc = parse_cli(argc, argv, &c);
    if (rc >= 0)
        return rc;
    if (strcmp(c.command, "run") == 0 || strcmp(c.command, "sweep") == 0)
        set_openmp_spin(argv);
    if (strcmp(c.command, "schema") == 0)
        return cmd_schema();
    if (strcmp(c.command, "compare") == 0)
        return cmd_compare(&c);
    bool sweep = strcmp(c.command, "sweep") == 0;
    if (!sweep && strcmp(c.command, "run") && strcmp(c.command, "list") && strcmp(c.command, "check"))
        return usage_error("unknown command '%s' (expected run, sweep, list, check, compare or schema)", c.command);
    int64_t *batches = NULL, one = 0;
    int n_batches = 1;
    if (sweep) {
        if (!parse_batches(c.batch_arg ? c.batch_arg : "1,2,4,8,16,32", &batches, &n_batches)) {
            free(batches);
            return usage_error("--batch expects a comma-separated list of positive integers, got '%s'", c.batch_arg);
        }
    } else if (c.batch_arg) {
        long v;
        if (!parse_long(c.batch_arg, 1, INT32_MAX, &v))
            return usage_error("--batch expects a positive integer, got '%s'", c.batch_arg);
        one = v;
    }
    if (c.worker && strcmp(c.command, "run") == 0)
        rc = cmd_worker(&c, one);
    else if (!strcmp(c.command, "list"))
        rc = cmd_list(&c, one);
    else if (!strcmp(c.command, "check"))
        rc = cmd_check(&c, one);
    else if (sweep)
        rc = cmd_measure(argc, argv, &c, batches, n_batches, true);
    else
        rc = cmd_measure(argc, argv, &c, &one, 1, false);
    free(batches);
    return rc;
}
