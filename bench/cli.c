/* The command line's flags: --help's text, and the parser that types every option into a
 * cli (usage errors exit 2 and say what was expected). */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compare.h"
#include "log.h"
#include "procs.h"
#include "report.h"
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
    "  sweep CONFIG    run at several batch sizes (--batch 1,2,4,...) and write one CSV; with\n"
    "                  --slurm, one Slurm array task per shard (docs/slurm.md)\n"
    "  merge DIR       the parts a --slurm sweep wrote into DIR as one CSV and JSON (-o FILE,\n"
    "                  default DIR/sweep.csv, never a file of the sweep); each part must hold\n"
    "                  its own shard's set, whole; lists the shards missing or failed, exit 1\n"
    "                  if any\n"
    "  list CONFIG     layers, shapes, parameters, FLOPs and bytes, without timing\n"
    "  check CONFIG    compare every layer on every backend with the plain-C reference, then\n"
    "                  the chained forward's output with the reference forward's; a model\n"
    "                  larger than memory layer by layer (each alone, then freed), its\n"
    "                  forward not checked\n"
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
    "  --dtype T[,T...]  run, sweep, check, list: the model's dtype, fp32, tf32, bf16, fp16 or\n"
    "                    int8 (default: the config's dtype:, else fp32); run, sweep and check\n"
    "                    take a list and do each. Layers the config gives a dtype of their\n"
    "                    own keep it. A dtype a backend cannot run is a skipped row that\n"
    "                    says why. int8 is dynamic quantization of conv2d and linear (onednn),\n"
    "                    the rest in fp32 (docs/precision.md)\n"
    "  --error           run, sweep: each layer's error too (column rel_error): its output's\n"
    "                    relative L2 error against the fp32 reference on the same inputs\n"
    "                    and weights, rounded to its dtype, as bench check measures it\n"
    "                    (untimed, after each set); with several dtypes, a table of time\n"
    "                    and error per layer side by side\n"
    "  --tokens T[,T...] a decoder's tokens per sequence: replaces a token-id input [T]\n"
    "                    (a config.json's default: 128)\n"
    "  --kv-len S[,S...] tokens already in the KV cache: kv_len of every rope, attention and\n"
    "                    mla layer (default: the config's, 0 for a config.json). sweep takes\n"
    "                    lists of both and runs every (tokens, kv_len) pair, each at every\n"
    "                    batch and dtype\n"
    "  --routing R       every moe layer's token-to-expert routing: uniform (each expert the\n"
    "                    same number of tokens), skew:S (expert e a share proportional to\n"
    "                    1/(e+1)^S) or router (each token's top_k logits) (default: the\n"
    "                    config's; uniform for a config.json)\n"
    "  --phase P         prefill (the tokens, no cache unless --kv-len) or decode (one token\n"
    "                    after --kv-len cached ones, default 1024)\n"
    "  --tf32            the same as --dtype tf32 (cuda: TF32 tensor-core math in\n"
    "                    convolutions and GEMMs), kept for older scripts\n"
    "  --algo A          search (time the candidate algorithms of each convolution at setup\n"
    "                    and keep the fastest: cuDNN's on cuda; on the cpu the GEMM layouts,\n"
    "                    per-thread chunks, Winograd and our register-tiled kernels, and for\n"
    "                    linear layers of two rows and more sgemm or our blocked GEMM; the\n"
    "                    default) or heuristic (a rule, no timing). onednn: oneDNN chooses\n"
    "                    its own\n"
    "  --algo-for O      cpu: what --algo search times each candidate in: forward (the\n"
    "                    conditions the forward leaves a layer in, its weights, packed or\n"
    "                    transformed, and its output out of the caches, its input just read:\n"
    "                    the default) or alone (warm, the candidate run again and again).\n"
    "                    The choice's impl says which; --algo-cache keeps the two apart\n"
    "  --conv-api A      cuda: where a convolution's candidates come from: both (the\n"
    "                    default), legacy (cuDNN's cudnnFind/cudnnGet algorithms) or graph\n"
    "                    (the graph API's engines, named by tag, e.g. eng28_k2=3_k17=4;\n"
    "                    LAYERBENCH_CUDNN_ENGINE=TAG runs one engine for every convolution)\n"
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
    "                    not before it has 3 samples (or --min-samples, if fewer); check:\n"
    "                    a layer (or the forward) whose plain-C reference would take over\n"
    "                    S seconds by its FLOPs is not checked, and says so (default: none)\n"
    "  --warmup-time S   seconds of warm-up before a layer's first samples (default 0.02)\n"
    "  --min-time S      seconds per chunk: layers are sampled in rounds, one chunk (one Google\n"
    "                    Benchmark run) each per round (default 0.01)\n"
    "  --processes N     run, sweep: measure each (batch, backend, mode) in N worker processes,\n"
    "                    one after the other, and pool their samples, so that the interval\n"
    "                    covers how much one process's figures differ from the next's; each\n"
    "                    takes 1/N of --timeout and --min-samples; a worker whose layers ran\n"
    "                    over --phase-band slower in all than the fastest ran in a slow phase\n"
    "                    of the machine and is set aside for another (up to 2N) (default 3;\n"
    "                    0: all in this process)\n"
    "  --phase-band PCT  run, sweep: how much slower in all than the fastest worker (beyond\n"
    "                    both sums' precision) a worker may run before it is set aside\n"
    "                    (default 5; off: none is set aside, every worker is pooled)\n"
    "  --algo-cache FILE run, sweep: where the algorithm choices of --algo search are kept and\n"
    "                    reused by later runs, so that they run the same kernels (made once\n"
    "                    per machine, libraries, threads and layer; a choice made elsewhere\n"
    "                    is not used, and said); default $XDG_CACHE_HOME or ~/.cache, then\n"
    "                    layerbench/choices.tsv; none: search in every run\n"
    "  --dedupe          time layers of identical kind, shape and parameters once (check:\n"
    "                    check them once; the others take that verdict)\n"
    "  --seed N          seed of the random inputs and weights (default 1)\n"
    "  --csv FILE        write the tidy CSV (docs/csv.md) to FILE, '-' for stdout; a JSON run\n"
    "                    context with the same stem goes beside it. The file is replaced\n"
    "                    atomically after every finished (batch, backend): an interrupted run\n"
    "                    keeps what it finished. Two outputs may not be one file\n"
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
    "                    the (batch, backend) sets it does not hold whole yet (its JSON context\n"
    "                    lists each finished set with its row count: a set cut short is\n"
    "                    measured again)\n"
    "  --sort COLUMN     per-layer table order: index (default), name, kind, params, flops,\n"
    "                    time, noise, inmodel, gflops\n"
    "  --top N           rows in the per-layer and by-shape tables (default all)\n"
    "  --no-peaks        run, sweep: skip measuring the machine's ceilings (a large matrix\n"
    "                    product and a memory stream, about 0.3 s per backend; a decode\n"
    "                    step's read stream every few rounds), and with them the roofline\n"
    "                    columns and a decode step's memory limit\n"
    "  --emit-yaml       list: print the config the model was built from, as YAML: for a\n"
    "                    config.json the one its family's description expands to (its shape\n"
    "                    options applied), to read, edit and run as any config\n"
    "  --no-forward      check: skip the chained forward's check (it costs one more reference\n"
    "                    forward, as long as checking every layer once)\n"
    "  --no-progress     do not show the running layer on stderr\n"
    "  --slurm DIR       sweep: shard the sweep (config x batch x backend x dtype x tokens x\n"
    "                    kv_len; --backend may be a list here) onto a Slurm job array and\n"
    "                    submit it with sbatch, then a merge job that runs after it; every\n"
    "                    task writes DIR/part-ARRAY_TASK.csv and its JSON (docs/slurm.md).\n"
    "                    DIR must be new or empty, unless --resume: then only the shards\n"
    "                    without a finished part are submitted again\n"
    "  --dry-run         sweep --slurm: print the scripts, the sbatch commands and the shard\n"
    "                    list; submit nothing, write nothing\n"
    "  --sbatch-args A   sweep --slurm: sbatch options the site needs, split at spaces\n"
    "                    ('--partition=gpu --account=perf --qos=high --constraint=zen4')\n"
    "  --time-limit T    sweep --slurm: each shard's --time, Slurm's format (default 1:00:00)\n"
    "  --max-running K   sweep --slurm: at most K tasks of an array at once (--array=...%K)\n"
    "  --shared          sweep --slurm: do not ask for whole nodes (--exclusive is the default:\n"
    "                    timings beside other jobs are not worth keeping); needs --threads\n"
    "  -o FILE           merge: the merged CSV, its JSON beside it (default DIR/sweep.csv)\n"
    "  -h, --help        this text\n"
    "  --version         version and git revision\n"
    "\n"
    "exit status: 0 ok; 1 failure (a check failed, a row failed, a file could not be written);\n"
    "2 usage or config error, or a backend asked for that this machine or binary does not have;\n"
    "128+N interrupted by signal N (what had finished is kept)\n";

const char *const cli_conv_api_names[3] = {"both", "legacy", "graph"};

int cli_usage_error(const char *fmt, const char *arg)
{
    char what[1024];
    snprintf(what, sizeof what, fmt, arg);
    log_msg("%s\nTry 'bench --help'.", what);
    return 2;
}

bool cli_parse_long(const char *s, long lo, long hi, long *out)
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
/* "a,b,c" of integers from lo to 2^30, at most CLI_MAX_SHAPES of them, into out. */
static bool parse_list(const char *s, long lo, int64_t *out, int *n)
{
    *n = 0;
    if (!*s || s[0] == ',' || s[strlen(s) - 1] == ',' || strstr(s, ",,"))
        return false;
    char *copy = xstrdup(s), *save = NULL;
    bool ok = true;
    for (char *tok = strtok_r(copy, ",", &save); ok && tok; tok = strtok_r(NULL, ",", &save)) {
        long v;
        ok = *n < CLI_MAX_SHAPES && cli_parse_long(tok, lo, (long)1 << 30, &v);
        if (ok)
            out[(*n)++] = v;
    }
    free(copy);
    return ok && *n > 0;
}

bool cli_parse_batches(const char *s, int64_t **out, int *n)
{
    if (!*s || s[0] == ',' || strstr(s, ",,"))
        return *out = NULL, false;
    char *copy = xstrdup(s), *save = NULL;
    int cap = 8;
    *out = xmalloc((size_t)cap * sizeof **out);
    *n = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long v;
        if (!cli_parse_long(tok, 1, INT32_MAX, &v)) {
            free(copy);
            return false;
        }
        for (int k = 0; k < *n; k++) /* a batch twice would be measured and written twice */
            if ((*out)[k] == v) {
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

/* "fp32,bf16" -> dtypes, each once; false on anything else. */
bool cli_parse_dtypes(const char *s, dtype_t *out, int *n)
{
    *n = 0;
    if (!*s || s[0] == ',' || strstr(s, ",,") || s[strlen(s) - 1] == ',')
        return false;
    char *copy = xstrdup(s), *save = NULL;
    bool ok = true;
    for (char *tok = strtok_r(copy, ",", &save); ok && tok; tok = strtok_r(NULL, ",", &save)) {
        int t = dtype_from_name(tok);
        for (int i = 0; t >= 0 && i < *n; i++)
            t = out[i] == (dtype_t)t ? -1 : t;
        if ((ok = t >= 0 && *n < DTYPE_COUNT))
            out[(*n)++] = (dtype_t)t;
    }
    free(copy);
    return ok && *n > 0;
}

enum { OPT_BACKEND = 256, OPT_BATCH, OPT_THREADS, OPT_WARMUP, OPT_MINTIME, OPT_MODE, OPT_NOISE, OPT_MINSAMPLES,
       OPT_TIMEOUT, OPT_THRESHOLD, OPT_FORMAT, OPT_GROUP_BY, OPT_INMODEL, OPT_DEDUPE, OPT_SEED,
       OPT_CSV, OPT_TRACE, OPT_STACKS, OPT_SORT, OPT_TOP, OPT_NOPROGRESS, OPT_VERSION, OPT_TF32, OPT_ALGO, OPT_ALGO_FOR, OPT_CONV_API, OPT_RESUME, OPT_NO_PEAKS,
       OPT_NO_FORWARD, OPT_PROCESSES, OPT_PHASE_BAND, OPT_ALGO_CACHE, OPT_DTYPE, OPT_ERROR,
       OPT_TOKENS, OPT_KV_LEN, OPT_PHASE, OPT_SLURM, OPT_DRY_RUN, OPT_SBATCH_ARGS, OPT_TIME_LIMIT,
       OPT_MAX_RUNNING, OPT_SHARED, OPT_ROUTING, OPT_EMIT_YAML };

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
    {"dtype", required_argument, NULL, OPT_DTYPE},
    {"error", no_argument, NULL, OPT_ERROR},
    {"tokens", required_argument, NULL, OPT_TOKENS},
    {"kv-len", required_argument, NULL, OPT_KV_LEN},
    {"phase", required_argument, NULL, OPT_PHASE},
    {"algo", required_argument, NULL, OPT_ALGO},
    {"algo-for", required_argument, NULL, OPT_ALGO_FOR},
    {"conv-api", required_argument, NULL, OPT_CONV_API},
    {"resume", no_argument, NULL, OPT_RESUME},
    {"processes", required_argument, NULL, OPT_PROCESSES},
    {"phase-band", required_argument, NULL, OPT_PHASE_BAND},
    {"algo-cache", required_argument, NULL, OPT_ALGO_CACHE},
    {"slurm", required_argument, NULL, OPT_SLURM},
    {"dry-run", no_argument, NULL, OPT_DRY_RUN},
    {"sbatch-args", required_argument, NULL, OPT_SBATCH_ARGS},
    {"time-limit", required_argument, NULL, OPT_TIME_LIMIT},
    {"max-running", required_argument, NULL, OPT_MAX_RUNNING},
    {"shared", no_argument, NULL, OPT_SHARED},
    {"routing", required_argument, NULL, OPT_ROUTING},
    {"emit-yaml", no_argument, NULL, OPT_EMIT_YAML},
    {"output", required_argument, NULL, 'o'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

/* "warm,batch" -> modes (at most 4, each valid and once; modes may be NULL to only
 * check); the count, or 0 when the list is not valid. */
int cli_split_modes(const char *arg, timing_mode *modes)
{
    char *copy = xstrdup(arg), *save = NULL;
    timing_mode seen[4];
    int n = 0;
    bool ok = *arg && arg[strlen(arg) - 1] != ',' && !strstr(arg, ",,");
    for (char *tok = strtok_r(copy, ",", &save); ok && tok; tok = strtok_r(NULL, ",", &save)) {
        timing_mode m = measure_mode_from_name(tok);
        for (int i = 0; i < n; i++)
            ok &= seen[i] != m;
        ok &= m != MODE_NONE && n < 4;
        if (ok)
            seen[n++] = m;
    }
    free(copy);
    for (int i = 0; ok && modes && i < n; i++)
        modes[i] = seen[i];
    return ok ? n : 0;
}

/* "cpu,onednn" or "all" -> the backends' names (static strings), each once and known;
 * the count, 0 when the list is not valid. */
int cli_backend_list(const char *arg, const char **out)
{
    const char *const *names = backend_names();
    int n = 0;
    if (strcmp(arg, "all") == 0) {
        for (; names[n] && n < BACKEND_MAX; n++)
            out[n] = names[n];
        return n;
    }
    if (!*arg || arg[0] == ',' || arg[strlen(arg) - 1] == ',' || strstr(arg, ",,"))
        return 0;
    char *copy = xstrdup(arg), *save = NULL;
    bool ok = true;
    for (char *tok = strtok_r(copy, ",", &save); ok && tok; tok = strtok_r(NULL, ",", &save)) {
        const char *found = NULL;
        for (int i = 0; names[i]; i++)
            found = strcmp(names[i], tok) == 0 ? names[i] : found;
        for (int i = 0; found && i < n; i++)
            found = out[i] == found ? NULL : found;
        if ((ok = found && n < BACKEND_MAX))
            out[n++] = found;
    }
    free(copy);
    return ok ? n : 0;
}

/* The options of this command line that every shard of a --slurm sweep repeats: all but
 * the configs, the axes the shards split (--batch, --backend, --dtype, --tf32, --tokens,
 * --kv-len) and what only the sweep itself reads (--slurm and its options, --csv,
 * --resume, --no-progress). NULL-terminated; caller frees the array and its strings. */
char **cli_shard_options(int argc, char **argv)
{
    static const char *const drop[] = {"batch", "backend", "dtype", "tf32", "tokens", "kv-len", "slurm", "dry-run",
                                       "sbatch-args", "time-limit", "max-running", "shared", "csv", "resume",
                                       "no-progress", "output", NULL};
    char **out = xcalloc((size_t)argc + 1, sizeof *out);
    int n = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0)
            break; /* what follows is configs */
        if (strncmp(a, "--", 2) != 0)
            continue; /* the command and the configs (-o is merge's) */
        size_t len = strcspn(a + 2, "=");
        const struct option *o = NULL;
        for (const struct option *p = long_opts; p->name; p++) { /* as getopt_long: exact, else a prefix */
            if (strncmp(p->name, a + 2, len) != 0)
                continue;
            if (strlen(p->name) == len) {
                o = p;
                break;
            }
            o = o ? o : p;
        }
        if (!o)
            continue;
        bool takes = o->has_arg == required_argument && !a[2 + len];
        bool dropped = false;
        for (int k = 0; drop[k]; k++)
            dropped = dropped || strcmp(drop[k], o->name) == 0;
        if (!dropped) {
            out[n++] = xstrdup(a);
            if (takes && i + 1 < argc)
                out[n++] = xstrdup(argv[i + 1]);
        }
        i += takes;
    }
    return out;
}

/* An option getopt did not take: one that no long option begins with, or the beginning
 * of several (getopt_long takes a unique prefix, so "--t" could be any of them). */
static int unknown_option(const char *arg)
{
    if (strncmp(arg, "--", 2) != 0 || !arg[2])
        return cli_usage_error("unknown option '%s'", arg);
    size_t len = strcspn(arg + 2, "=");
    char list[512] = "";
    int n = 0;
    for (const struct option *p = long_opts; p->name; p++)
        if (strncmp(p->name, arg + 2, len) == 0)
            n++, snprintf(list + strlen(list), sizeof list - strlen(list), "%s--%s", n > 1 ? ", " : "", p->name);
    if (n < 2)
        return cli_usage_error("unknown option '%s'", arg);
    char msg[700];
    snprintf(msg, sizeof msg, "option '%%s' is ambiguous: it could be %s; give more of it", list);
    return cli_usage_error(msg, arg);
}

/* Returns -1 to go on, or an exit code. */
int cli_parse(int argc, char **argv, cli *c)
{
    *c = (cli){.backend = "cpu", .sort = "index", .processes = PROCS_DEFAULT, .phase_band = PROCS_PHASE_BAND, .routing = -1,
               .mode = "auto", .threshold = COMPARE_DEFAULT_THRESHOLD, .shape = CFG_SHAPE_KEEP,
               .mo = {.warmup_time = MEASURE_DEFAULT_WARMUP, .min_time = MEASURE_DEFAULT_MIN_TIME,
                      .max_noise = MEASURE_DEFAULT_MAX_NOISE, .min_samples = MEASURE_DEFAULT_MIN_SAMPLES,
                      .timeout = MEASURE_DEFAULT_TIMEOUT, .seed = 1, .stream_rounds = true}};
    opterr = 0;
    int opt;
    long v;
    bool tf32 = false;
    const char *phase = NULL;
    while ((opt = getopt_long(argc, argv, ":ho:", long_opts, NULL)) != -1) {
        switch (opt) {
        case 'h': fputs(usage_text, stdout); return 0;
        case OPT_VERSION: printf("bench (layerbench) %s, git %s\n", LAYERBENCH_VERSION, layerbench_git_revision()); return 0;
        case OPT_BACKEND: c->backend = optarg; break;
        case OPT_BATCH: c->batch_arg = optarg; break;
        case OPT_THREADS:
            if (!cli_parse_long(optarg, 1, 1024, &v))
                return cli_usage_error("--threads expects an integer from 1 to 1024, got '%s'", optarg);
            c->threads = (int)v;
            break;
        case OPT_WARMUP:
            if (!parse_seconds(optarg, &c->mo.warmup_time))
                return cli_usage_error("--warmup-time expects seconds from 0 to 3600, got '%s'", optarg);
            break;
        case OPT_MINTIME:
            if (!parse_seconds(optarg, &c->mo.min_time) || c->mo.min_time <= 0)
                return cli_usage_error("--min-time expects seconds above 0 and at most 3600, got '%s'", optarg);
            break;
        case OPT_MODE: c->mode = optarg; break;
        case OPT_NOISE: {
            double pct;
            if (!parse_seconds(optarg, &pct) || pct <= 0 || pct > 100)
                return cli_usage_error("--max-noise expects a percentage above 0 and at most 100, got '%s'", optarg);
            c->mo.max_noise = pct / 100;
            break;
        }
        case OPT_MINSAMPLES:
            if (!cli_parse_long(optarg, 1, 1000000, &v))
                return cli_usage_error("--min-samples expects an integer from 1 to 1000000, got '%s'", optarg);
            c->mo.min_samples = (int)v;
            break;
        case OPT_THRESHOLD: {
            double pct;
            if (!parse_seconds(optarg, &pct) || pct > 1000)
                return cli_usage_error("--threshold expects a percentage from 0 to 1000, got '%s'", optarg);
            c->threshold = pct / 100;
            break;
        }
        case OPT_INMODEL: c->inmodel = true; break;
        case OPT_FORMAT:
            if (!table_format_parse(optarg, &c->format))
                return cli_usage_error("--format expects text or md, got '%s'", optarg);
            break;
        case OPT_GROUP_BY:
            if (!report_groups_parse(optarg, &c->groups))
                return cli_usage_error("--group-by expects a comma-separated list of shape, kind and block (or none), "
                                   "got '%s'", optarg);
            break;
        case OPT_TIMEOUT:
            if (!parse_seconds(optarg, &c->mo.timeout) || c->mo.timeout <= 0)
                return cli_usage_error("--timeout expects seconds above 0 and at most 3600, got '%s'", optarg);
            c->timeout_given = true;
            break;
        case OPT_DEDUPE: c->mo.dedupe = true; break;
        case OPT_SEED:
            if (!cli_parse_long(optarg, 0, LONG_MAX, &v))
                return cli_usage_error("--seed expects a non-negative integer, got '%s'", optarg);
            c->mo.seed = (uint64_t)v;
            break;
        case OPT_CSV: c->csv = optarg; break;
        case OPT_TRACE: c->trace = optarg; break;
        case OPT_STACKS: c->stacks = optarg; break;
        case OPT_SORT:
            if (!report_sort_valid(optarg))
                return cli_usage_error("--sort expects index, name, kind, params, flops, time, noise, inmodel or gflops, "
                                   "got '%s'", optarg);
            c->sort = optarg;
            break;
        case OPT_TOP:
            if (!cli_parse_long(optarg, 1, INT32_MAX, &v))
                return cli_usage_error("--top expects a positive integer, got '%s'", optarg);
            c->top = (int)v;
            break;
        case OPT_NOPROGRESS: c->no_progress = true; break;
        case OPT_TF32: tf32 = true; break;
        case OPT_DTYPE:
            if (c->n_dtypes)
                return cli_usage_error("%s", "--dtype given twice: give one list, e.g. --dtype fp32,bf16");
            if (!cli_parse_dtypes(optarg, c->dtypes, &c->n_dtypes)) {
                char what[512];
                snprintf(what, sizeof what, "--dtype expects one of %s (or a comma-separated list of them, each once), "
                                            "got '%%s'", dtype_list());
                return cli_usage_error(what, optarg);
            }
            break;
        case OPT_RESUME: c->resume = true; break;
        case OPT_PROCESSES:
            if (!cli_parse_long(optarg, 0, 64, &v))
                return cli_usage_error("--processes expects an integer from 0 to 64, got '%s'", optarg);
            c->processes = (int)v;
            break;
        case OPT_PHASE_BAND: {
            double pct;
            if (strcmp(optarg, "off") == 0)
                c->phase_band = -1;
            else if (parse_seconds(optarg, &pct) && pct <= 1000)
                c->phase_band = pct / 100;
            else
                return cli_usage_error("--phase-band expects a percentage from 0 to 1000, or off, got '%s'", optarg);
            break;
        }
        case OPT_ALGO_CACHE:
            if (!*optarg)
                return cli_usage_error("%s", "--algo-cache expects a file");
            c->algo_cache = strcmp(optarg, "none") == 0 ? NULL : optarg;
            c->algo_cache_given = true;
            break;
        case OPT_NO_PEAKS: c->no_peaks = true, c->mo.stream_rounds = false; break;
        case OPT_SLURM:
            if (!*optarg)
                return cli_usage_error("%s", "--slurm expects a folder for the sweep's parts");
            c->slurm_dir = optarg;
            break;
        case OPT_DRY_RUN: c->dry_run = true; break;
        case OPT_SBATCH_ARGS: c->sbatch_args = optarg; break;
        case OPT_TIME_LIMIT:
            if (!*optarg || strspn(optarg, "0123456789:-") != strlen(optarg))
                return cli_usage_error("--time-limit expects Slurm's time format (MINUTES, H:MM:SS or D-HH:MM:SS), "
                                       "got '%s'", optarg);
            c->time_limit = optarg;
            break;
        case OPT_MAX_RUNNING:
            if (!cli_parse_long(optarg, 1, 1000000, &v))
                return cli_usage_error("--max-running expects a positive integer, got '%s'", optarg);
            c->max_running = (int)v;
            break;
        case OPT_SHARED: c->shared = true; break;
        case OPT_ROUTING: {
            char *end;
            if (strcmp(optarg, "uniform") == 0 || strcmp(optarg, "router") == 0) {
                c->routing = strcmp(optarg, "router") == 0 ? MOE_ROUTER : MOE_UNIFORM;
                c->load_skew = 0;
            } else if (strncmp(optarg, "skew:", 5) == 0 && (c->load_skew = strtod(optarg + 5, &end), *end == 0) &&
                       optarg[5] && c->load_skew >= 0 && c->load_skew <= 100) {
                c->routing = MOE_UNIFORM;
            } else {
                return cli_usage_error("--routing expects uniform, router or skew:S (S from 0 to 100), got '%s'",
                                       optarg);
            }
            break;
        }
        case 'o': c->merge_out = optarg; break;
        case OPT_NO_FORWARD: c->no_forward = true; break;
        case OPT_EMIT_YAML: c->emit_yaml = true; break;
        case OPT_ERROR: c->error = true; break;
        case OPT_TOKENS:
            if (!parse_list(optarg, 1, c->tokens_list, &c->n_tokens))
                return cli_usage_error("--tokens expects a positive integer (a comma-separated list of them in "
                                       "sweep, at most 64), got '%s'", optarg);
            c->shape.tokens = c->tokens_list[0];
            break;
        case OPT_KV_LEN:
            if (!parse_list(optarg, 0, c->kv_list, &c->n_kv))
                return cli_usage_error("--kv-len expects an integer from 0 (a comma-separated list of them in sweep, "
                                       "at most 64), got '%s'", optarg);
            c->shape.kv_len = c->kv_list[0];
            break;
        case OPT_PHASE:
            if (strcmp(optarg, "prefill") && strcmp(optarg, "decode"))
                return cli_usage_error("--phase expects prefill or decode, got '%s'", optarg);
            phase = optarg;
            break;
        case OPT_ALGO:
            if (strcmp(optarg, "search") && strcmp(optarg, "heuristic"))
                return cli_usage_error("--algo expects search or heuristic, got '%s'", optarg);
            c->algo_heuristic = strcmp(optarg, "heuristic") == 0;
            break;
        case OPT_ALGO_FOR:
            if (strcmp(optarg, "forward") && strcmp(optarg, "alone"))
                return cli_usage_error("--algo-for expects forward or alone, got '%s'", optarg);
            c->algo_alone = strcmp(optarg, "alone") == 0;
            break;
        case OPT_CONV_API:
            c->conv_api = -1;
            for (int i = 0; i < 3; i++)
                if (strcmp(optarg, cli_conv_api_names[i]) == 0)
                    c->conv_api = i;
            if (c->conv_api < 0)
                return cli_usage_error("--conv-api expects both, legacy or graph, got '%s'", optarg);
            break;
        case ':': return cli_usage_error("option '%s' needs a value", argv[optind - 1]);
        default: return unknown_option(argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return cli_usage_error("%s", "missing command (run, sweep, merge, list, check, compare, schema)");
    c->command = argv[optind++];
    if (strcmp(c->command, "help") == 0) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (strcmp(c->command, "compare") == 0) {
        if (argc - optind < 2)
            return cli_usage_error("%s", "compare needs two results CSVs: BASE.csv NEW.csv");
        c->config = argv[optind++];
        c->compare_new = argv[optind++];
    } else if (strcmp(c->command, "merge") == 0) {
        if (optind >= argc)
            return cli_usage_error("%s", "merge needs the folder of a bench sweep --slurm");
        c->config = argv[optind++];
    } else if (strcmp(c->command, "schema") != 0) {
        if (optind >= argc)
            return cli_usage_error("%s needs a CONFIG file", c->command);
        c->config = argv[optind++];
    }
    c->configs[c->n_configs++] = c->config;
    /* sweep --slurm: several configs, each a shard axis */
    while (c->slurm_dir && strcmp(c->command, "sweep") == 0 && optind < argc && c->n_configs < CLI_MAX_CONFIGS)
        c->configs[c->n_configs++] = argv[optind++];
    if (optind < argc && c->n_configs == CLI_MAX_CONFIGS)
        return cli_usage_error("sweep --slurm takes at most 256 configs, got more: '%s' is one too many", argv[optind]);
    if (optind < argc && strcmp(c->command, "sweep") == 0 && !c->slurm_dir)
        return cli_usage_error("sweep takes one CONFIG (several with --slurm, one shard each), got '%s' too", argv[optind]);
    if (optind < argc)
        return cli_usage_error("unexpected argument '%s'", argv[optind]);
    bool slurm_only = c->dry_run || c->sbatch_args || c->time_limit || c->max_running || c->shared;
    if ((c->slurm_dir || slurm_only) && strcmp(c->command, "sweep") != 0)
        return cli_usage_error("%s: --slurm, --dry-run, --sbatch-args, --time-limit, --max-running and --shared go with "
                               "bench sweep", c->command);
    if (slurm_only && !c->slurm_dir)
        return cli_usage_error("%s", "--dry-run, --sbatch-args, --time-limit, --max-running and --shared go with "
                                     "--slurm DIR");
    if (c->emit_yaml && strcmp(c->command, "list") != 0)
        return cli_usage_error("--emit-yaml goes with bench list, not %s", c->command);
    if (c->merge_out && strcmp(c->command, "merge") != 0)
        return cli_usage_error("-o FILE goes with bench merge (run and sweep write --csv FILE), not %s", c->command);
    if (c->slurm_dir && (c->csv || c->trace || c->stacks))
        return cli_usage_error("%s", "--slurm writes its parts into DIR (bench merge DIR -o FILE joins them): drop "
                                     "--csv, --trace and --stacks");
    if (c->shared && !c->threads)
        return cli_usage_error("%s", "--shared needs --threads N: the cores each shard asks for and uses");
    if (tf32 && c->n_dtypes)
        return cli_usage_error("%s", "--tf32 and --dtype both given: --tf32 is --dtype tf32, list it there");
    if (tf32) {
        c->dtypes[c->n_dtypes++] = DTYPE_TF32;
        if (!c->worker)
            log_msg("note: --tf32 is --dtype tf32 now (the dtype column of the results says tf32)");
    }
    bool sweep = strcmp(c->command, "sweep") == 0;
    if (!sweep && (c->n_tokens > 1 || c->n_kv > 1))
        return cli_usage_error("%s takes one --tokens and one --kv-len (bench sweep takes lists)", c->command);
    for (int i = 0; i < c->n_tokens; i++)
        for (int j = 0; j < i; j++)
            if (c->tokens_list[i] == c->tokens_list[j])
                return cli_usage_error("--tokens lists %s twice", "a value");
    for (int i = 0; i < c->n_kv; i++)
        for (int j = 0; j < i; j++)
            if (c->kv_list[i] == c->kv_list[j])
                return cli_usage_error("--kv-len lists %s twice", "a value");
    /* decode: one new token after the cache (1024 tokens unless --kv-len says); prefill:
     * the tokens (the config's, or --tokens), no cache unless --kv-len gives one */
    if (phase && strcmp(phase, "decode") == 0) {
        for (int i = 0; i < c->n_tokens; i++)
            c->shape.tokens = c->tokens_list[i] > c->shape.tokens ? c->tokens_list[i] : c->shape.tokens;
        if (c->shape.tokens > 1)
            return cli_usage_error("--phase decode runs one token per sequence: drop --tokens, or use --phase "
                                   "prefill%s", "");
        c->shape.tokens = 1;
        if (c->shape.kv_len < 0)
            c->shape.kv_len = CLI_DEFAULT_KV_LEN;
    } else if (phase && c->shape.kv_len < 0) {
        c->shape.kv_len = 0;
    }
    if (c->n_dtypes > 1 && strcmp(c->command, "list") == 0)
        return cli_usage_error("list takes one --dtype, got '%s'", "a list");
    if (!cli_split_modes(c->mode, NULL))
        return cli_usage_error("--mode expects " MEASURE_MODES " (or a comma-separated list of them), got '%s'", c->mode);
    const char *listed[BACKEND_MAX];
    bool known = c->slurm_dir ? cli_backend_list(c->backend, listed) > 0 : strcmp(c->backend, "all") == 0;
    for (const char *const *n = backend_names(); *n; n++)
        known = known || strcmp(c->backend, *n) == 0;
    if (!known) {
        char list[256] = "";
        for (const char *const *n = backend_names(); *n; n++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s, ", *n);
        snprintf(list + strlen(list), sizeof list - strlen(list), "or all, got '%s'", c->backend);
        return cli_usage_error("--backend expects %s", list);
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
