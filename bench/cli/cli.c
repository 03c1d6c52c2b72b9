/* The command line's flags: --help's text, and the parser that types every option into a
 * cli (usage errors exit 2 and say what was expected). */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compare.h"
#include "log.h"
#include "procs.h"
#include "report.h"
#include "version.h"

/* The commands and what they do, in --help's order. */
typedef struct command_info {
    const char *name, *args, *about;
} command_info;

static const command_info commands[] = {
    {"run", "CONFIG",
     "time every layer alone, then the chained forward; print the per-layer table, tables grouped by input shape and "
     "by kind, and a summary"},
    {"sweep", "CONFIG",
     "run at several batch sizes (--batch 1,2,4,...) and write one CSV; with --slurm, one Slurm array task per "
     "shard (docs/slurm.md)"},
    {"merge", "DIR",
     "the parts a --slurm sweep wrote into DIR as one CSV and JSON (-o FILE, default DIR/sweep.csv, never a file of "
     "the sweep); each part must hold its own shard's set, whole; lists the shards missing or failed, exit 1 if any"},
    {"list", "CONFIG", "layers, shapes, parameters, FLOPs and bytes, without timing"},
    {"check", "CONFIG",
     "compare every layer on every backend with the plain-C reference, then the chained forward's output with the "
     "reference forward's; a model larger than memory layer by layer (each alone, then freed), its forward not "
     "checked"},
    {"compare", "BASE.csv NEW.csv",
     "per row: both medians, the change and a verdict, SLOWER, FASTER or SAME, that takes both rows' confidence "
     "intervals into account; exit 1 when any row is SLOWER"},
    {"schema", "", "print the CSV columns and what they hold"},
    {"help", "[COMMAND]", "this text, or one command's options (as bench COMMAND --help)"},
};
enum { N_COMMANDS = (int)(sizeof commands / sizeof commands[0]) };

/* Each command a bit, in the order of commands[]: the commands an option goes with. */
enum {
    C_RUN = 1 << 0, C_SWEEP = 1 << 1, C_MERGE = 1 << 2, C_LIST = 1 << 3, C_CHECK = 1 << 4, C_COMPARE = 1 << 5,
    C_SCHEMA = 1 << 6, C_HELP = 1 << 7,
    C_MEASURE = C_RUN | C_SWEEP, C_BACKENDS = C_MEASURE | C_CHECK, C_MODEL = C_BACKENDS | C_LIST,
    C_ANY = (1 << N_COMMANDS) - 1,
};

static const char exit_text[] =
    "exit status: 0 ok; 1 failure (a check failed, a row failed, a file could not be written);\n"
    "2 usage or config error, or a backend asked for that this machine or binary does not have;\n"
    "128+N interrupted by signal N (what had finished is kept)\n";


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

/* "fp32,bf16" -> the values lookup gives each name, each once, at most max; false on
 * anything else (an empty item, a name lookup refuses with -1, a repeat). */
static bool parse_names(const char *s, int (*lookup)(const char *), int max, int *out, int *n)
{
    *n = 0;
    if (!*s || s[0] == ',' || strstr(s, ",,") || s[strlen(s) - 1] == ',')
        return false;
    char *copy = xstrdup(s), *save = NULL;
    bool ok = true;
    for (char *tok = strtok_r(copy, ",", &save); ok && tok; tok = strtok_r(NULL, ",", &save)) {
        int t = lookup(tok);
        for (int i = 0; t >= 0 && i < *n; i++)
            t = out[i] == t ? -1 : t;
        if ((ok = t >= 0 && *n < max))
            out[(*n)++] = t;
    }
    free(copy);
    return ok && *n > 0;
}

static bool cli_parse_dtypes(const char *s, dtype_t *out, int *n)
{
    int v[DTYPE_COUNT];
    bool ok = parse_names(s, dtype_from_name, DTYPE_COUNT, v, n);
    for (int i = 0; ok && i < *n; i++)
        out[i] = (dtype_t)v[i];
    return ok;
}

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

/* How an option's value is read into the field it fills. */
typedef enum {
    O_FLAG,    /* no value: the bool becomes true */
    O_STRING,  /* const char *, as given (O_NONEMPTY: not "") */
    O_INT,     /* int from lo to hi */
    O_SEED,    /* uint64_t from 0 */
    O_SECONDS, /* double from lo (above it, with O_ABOVE) to hi */
    O_PERCENT, /* a percentage from lo (above it, with O_ABOVE) to hi, kept as a fraction */
    O_CHOICE,  /* int: the index of the value in choices */
    O_CUSTOM,  /* set() reads it; expects says what it takes */
} option_type;

enum {
    O_NONEMPTY = 1 << 0, /* O_STRING: "" refused */
    O_ABOVE = 1 << 1,    /* O_SECONDS, O_PERCENT: lo itself refused */
    O_SWEEP_OWN = 1 << 2, /* read by a --slurm sweep itself, or an axis its shards split: not repeated in shards */
    O_ONCE = 1 << 3,     /* given twice is an error (a list is given once) */
};

typedef struct cli_option {
    const char *name;   /* --name */
    const char *value;  /* the value's name in --help; NULL: a flag */
    option_type type;
    size_t field;       /* offsetof(cli, the field it fills) */
    double lo, hi;      /* O_INT, O_SECONDS, O_PERCENT: the range */
    const char *const *choices; /* O_CHOICE: NULL-terminated */
    bool (*set)(cli *c, const char *arg); /* O_CUSTOM */
    const char *expects; /* O_CUSTOM, O_STRING: what the error says it takes */
    const char *(*expects_now)(void); /* ... where it is made at run time */
    unsigned commands;  /* C_*: the commands it goes with */
    unsigned flags;     /* O_NONEMPTY, O_ABOVE, O_SWEEP_OWN, O_ONCE */
    char letter;        /* -letter too; 0: none */
    const char *help;
} cli_option;

static bool set_dtype(cli *c, const char *arg) { return cli_parse_dtypes(arg, c->model.dtypes, &c->model.n_dtypes); }

/* "forward,train" -> passes, each once */
static bool set_pass(cli *c, const char *arg)
{
    int v[PASS_COUNT];
    bool ok = parse_names(arg, layer_pass_from_name, PASS_COUNT, v, &c->model.n_passes);
    for (int i = 0; ok && i < c->model.n_passes; i++)
        c->model.passes[i] = (layer_pass)v[i];
    return ok;
}

static const char *dtype_expects(void)
{
    static char what[256];
    snprintf(what, sizeof what, "one of %s (or a comma-separated list of them, each once)", dtype_list());
    return what;
}
static bool set_format(cli *c, const char *arg) { return table_format_parse(arg, &c->ro.format); }
static bool set_groups(cli *c, const char *arg) { return report_groups_parse(arg, &c->ro.groups); }
static bool set_sort(cli *c, const char *arg) { return report_sort_valid(arg) && (c->ro.sort = arg); }
static bool set_mode(cli *c, const char *arg) { return cli_split_modes(arg, NULL) > 0 && (c->run.mode = arg); }

static bool set_tokens(cli *c, const char *arg)
{
    return parse_list(arg, 1, c->model.tokens_list, &c->model.n_tokens) && ((c->model.shape.tokens = c->model.tokens_list[0]), true);
}

static bool set_kv_len(cli *c, const char *arg)
{
    return parse_list(arg, 0, c->model.kv_list, &c->model.n_kv) && ((c->model.shape.kv_len = c->model.kv_list[0]), true);
}

static bool set_phase_band(cli *c, const char *arg)
{
    double pct;
    if (strcmp(arg, "off") == 0)
        return c->run.phase_band = -1, true;
    if (!parse_seconds(arg, &pct) || pct > 1000)
        return false;
    c->run.phase_band = pct / 100;
    return true;
}

static bool set_algo_cache(cli *c, const char *arg)
{
    c->run.algo_cache = strcmp(arg, "none") == 0 ? NULL : arg;
    c->run.algo_cache_given = true;
    return *arg != 0;
}

static bool set_time_limit(cli *c, const char *arg)
{
    c->slurm.time_limit = arg;
    return *arg && strspn(arg, "0123456789:-") == strlen(arg);
}

static bool set_routing(cli *c, const char *arg)
{
    char *end;
    c->model.load_skew = 0;
    if (strcmp(arg, "uniform") == 0 || strcmp(arg, "router") == 0) {
        c->model.routing = strcmp(arg, "router") == 0 ? MOE_ROUTER : MOE_UNIFORM;
        return true;
    }
    c->model.routing = MOE_UNIFORM;
    return strncmp(arg, "skew:", 5) == 0 && arg[5] && (c->model.load_skew = strtod(arg + 5, &end), *end == 0) &&
           c->model.load_skew >= 0 && c->model.load_skew <= 100;
}

static const char *const algo_names[] = {"search", "heuristic", NULL};
static const char *const algo_for_names[] = {"forward", "alone", NULL};
static const char *const phase_names[] = {"prefill", "decode", NULL};
static const char *const optimizer_names[] = {"none", "sgd", "adamw", NULL}; /* model_optimizer's order */
static const char *const conv_api_names[] = {"both", "legacy", "graph", NULL};

#define F(field) offsetof(cli, field)
#define MO(field) (offsetof(cli, mo) + offsetof(measure_options, field))

/* Every option, in --help's order. */
static const cli_option options[] = {
    {"backend", "B", O_STRING, F(be.backend), .commands = C_BACKENDS, .flags = O_SWEEP_OWN,
     .help = "cpu (OpenBLAS and our loops), onednn (oneDNN's primitives), cuda (cuDNN, cuBLAS), or all of those "
             "built here (default cpu); sweep --slurm: a list"},
    {"dtype", "T[,T...]", O_CUSTOM, F(model.dtypes), .set = set_dtype, .expects_now = dtype_expects, .commands = C_MODEL,
     .flags = O_SWEEP_OWN | O_ONCE,
     .help = "the model's dtype, fp32, tf32, bf16, fp16 or int8 (default: the config's dtype:, else fp32); run, "
             "sweep and check take a list and do each. Layers the config gives a dtype of their own keep it. A dtype "
             "a backend cannot run is a skipped row that says why. int8 is dynamic quantization of conv2d and linear "
             "(onednn), the rest in fp32 (docs/precision.md)"},
    {"pass", "P[,P...]", O_CUSTOM, F(model.passes), .set = set_pass, .commands = C_BACKENDS, .flags = O_SWEEP_OWN | O_ONCE,
     .expects = "forward, backward or train (or a comma-separated list of them, each once)",
     .help = "what each layer's row times: forward (default); backward: the gradients of its inputs and of its "
             "weights from its output's gradient, each layer alone; or train: its forward in training mode (batch "
             "norm on the batch's statistics, dropout's mask) then its backward, each layer alone, and the whole "
             "training step chained (the forward, a loss, the backward in reverse, gradients summed where a value "
             "has several readers) with each layer's forward and backward inside it (fp32, bf16, fp16; a kind or "
             "backend without a backward kernel is a skipped row that says why); check: each layer's gradients against the "
             "reference backward, and for train the whole step's. A list does each, like --dtype (docs/training.md)"},
    {"optimizer", "O", O_CHOICE, F(model.optimizer), .choices = optimizer_names, .commands = C_BACKENDS,
     .help = "with --pass train: after the backward, one update of every parameter tensor that learns, as torch's "
             "single-tensor optimizers do: sgd (w -= lr g) or adamw (its two moments kept per weight; torch's "
             "defaults), each layer's update a part of its in-model row (update), its state in the step's memory; "
             "16-bit weights are updated through fp32 master weights. "
             "Timed with a learning rate of 0 (the same reads, writes and arithmetic, the weights unchanged); bench "
             "check runs one step at 1e-3 and compares the update (default none; docs/training.md)"},
    {"error", NULL, O_FLAG, F(run.error), .commands = C_MEASURE,
     .help = "each layer's error too (column rel_error): its output's relative L2 error against the fp32 reference "
             "on the same inputs and weights, rounded to its dtype, as bench check measures it (untimed, after each "
             "set); with several dtypes, a table of time and error per layer side by side"},
    {"tokens", "T[,T...]", O_CUSTOM, F(model.tokens_list), .set = set_tokens, .commands = C_MODEL, .flags = O_SWEEP_OWN,
     .expects = "a positive integer (a comma-separated list of them in sweep, at most 64)",
     .help = "a decoder's tokens per sequence: replaces a token-id input [T] (a config.json's default: 128)"},
    {"kv-len", "S[,S...]", O_CUSTOM, F(model.kv_list), .set = set_kv_len, .commands = C_MODEL, .flags = O_SWEEP_OWN,
     .expects = "an integer from 0 (a comma-separated list of them in sweep, at most 64)",
     .help = "tokens already in the KV cache: kv_len of every rope, attention and mla layer (default: the config's, "
             "0 for a config.json). sweep takes lists of both and runs every (tokens, kv_len) pair, each at every "
             "batch and dtype"},
    {"routing", "R", O_CUSTOM, F(model.routing), .set = set_routing, .commands = C_MODEL,
     .expects = "uniform, router or skew:S (S from 0 to 100)",
     .help = "every moe layer's token-to-expert routing: uniform (each expert the same number of tokens), skew:S "
             "(expert e a share proportional to 1/(e+1)^S) or router (each token's top_k logits) (default: the "
             "config's; uniform for a config.json)"},
    {"freeze", "PATTERN[,...]", O_STRING, F(model.freeze), .commands = C_MODEL,
     .help = "freeze the layers with weights whose names match a shell pattern ('*' matches dots too: 'layer1.*', "
             "'model.layers.[0-9].*'), as requires_grad: false in the config does: their weights learn nothing, so "
             "a backward or train row computes no weights' gradient for them (conv2d and linear skip that half), and "
             "a training step runs no backward where nothing before it learns (docs/training.md). A pattern that "
             "matches no layer with weights is an error"},
    {"phase", "P", O_CHOICE, F(model.phase), .choices = phase_names, .commands = C_MODEL,
     .help = "prefill (the tokens, no cache unless --kv-len) or decode (one token after --kv-len cached ones, "
             "default 1024)"},
    {"tf32", NULL, O_FLAG, F(model.tf32), .commands = C_MODEL, .flags = O_SWEEP_OWN,
     .help = "the same as --dtype tf32 (cuda: TF32 tensor-core math in convolutions and GEMMs), kept for older "
             "scripts"},
    {"algo", "A", O_CHOICE, F(be.algo_heuristic), .choices = algo_names, .commands = C_BACKENDS,
     .help = "search (time the candidate algorithms of each convolution at setup and keep the fastest: cuDNN's on "
             "cuda; on the cpu the GEMM layouts, per-thread chunks, Winograd and our register-tiled kernels, and for "
             "linear layers of two rows and more sgemm or our blocked GEMM; the default) or heuristic (a rule, no "
             "timing). onednn: oneDNN chooses its own"},
    {"algo-for", "O", O_CHOICE, F(be.algo_alone), .choices = algo_for_names, .commands = C_BACKENDS,
     .help = "cpu: what --algo search times each candidate in: forward (the conditions the forward leaves a layer "
             "in, its weights, packed or transformed, and its output out of the caches, its input just read: the "
             "default) or alone (warm, the candidate run again and again). The choice's impl says which; "
             "--algo-cache keeps the two apart"},
    {"conv-api", "A", O_CHOICE, F(be.conv_api), .choices = conv_api_names, .commands = C_BACKENDS,
     .help = "cuda: where a convolution's candidates come from: both (the default), legacy (cuDNN's "
             "cudnnFind/cudnnGet algorithms) or graph (the graph API's engines, named by tag, e.g. eng28_k2=3_k17=4; "
             "LAYERBENCH_CUDNN_ENGINE=TAG runs one engine for every convolution)"},
    {"batch", "N", O_STRING, F(model.batch_arg), .commands = C_MODEL, .flags = O_SWEEP_OWN,
     .help = "batch size (default: the config's); sweep: a list, default 1,2,4,8,16,32"},
    {"threads", "N", O_INT, F(be.threads), 1, 1024, .commands = C_BACKENDS,
     .help = "CPU threads for OpenBLAS, oneDNN and the OpenMP loops (default: all cores)"},
    {"mode", "M[,M...]", O_CUSTOM, F(run.mode), .set = set_mode, .commands = C_MEASURE,
     .expects = MEASURE_MODES " (or a comma-separated list of them)",
     .help = "timing modes of the isolated layers: warm (one call per sample), cold (caches flushed before each "
             "sample), batch (many calls per sample), auto (batch for a call under 20x the timer's floor, else warm; "
             "the default). Each row says which mode it used"},
    {"max-noise", "PCT", O_PERCENT, MO(max_noise), 0, 100, .commands = C_MEASURE, .flags = O_ABOVE,
     .help = "sample a layer until the 95% confidence interval of its median is within PCT percent of it "
             "(default 1)"},
    {"min-samples", "N", O_INT, MO(min_samples), 1, 1000000, .commands = C_MEASURE,
     .help = "... with at least N samples (default 10)"},
    {"timeout", "S", O_SECONDS, MO(timeout), 0, 3600, .commands = C_BACKENDS, .flags = O_ABOVE,
     .help = "... or until it has been sampled for S seconds (default 2), but not before it has 3 samples (or "
             "--min-samples, if fewer); check: a layer (or the forward) whose plain-C reference would take over S "
             "seconds by its FLOPs is not checked, and says so (default: none)"},
    {"warmup-time", "S", O_SECONDS, MO(warmup_time), 0, 3600, .commands = C_MEASURE,
     .help = "seconds of warm-up before a layer's first samples (default 0.02)"},
    {"min-time", "S", O_SECONDS, MO(min_time), 0, 3600, .commands = C_MEASURE, .flags = O_ABOVE,
     .help = "seconds per chunk: layers are sampled in rounds, one chunk (one Google Benchmark run) each per round "
             "(default 0.01)"},
    {"processes", "N", O_INT, F(run.processes), 0, 64, .commands = C_MEASURE,
     .help = "measure each (batch, backend, mode) in N worker processes, one after the other, and pool their "
             "samples, so that the interval covers how much one process's figures differ from the next's; each takes "
             "1/N of --timeout and --min-samples; a worker whose layers ran over --phase-band slower in all than the "
             "fastest ran in a slow phase of the machine and is set aside for another (up to 2N) (default 3; 0: all "
             "in this process)"},
    {"phase-band", "PCT", O_CUSTOM, F(run.phase_band), .set = set_phase_band, .commands = C_MEASURE,
     .expects = "a percentage from 0 to 1000, or off",
     .help = "how much slower in all than the fastest worker (beyond both sums' precision) a worker may run before "
             "it is set aside (default 5; off: none is set aside, every worker is pooled)"},
    {"algo-cache", "FILE", O_CUSTOM, F(run.algo_cache), .set = set_algo_cache, .commands = C_MEASURE,
     .expects = "a file, or none",
     .help = "where the algorithm choices of --algo search are kept and reused by later runs, so that they run the "
             "same kernels (made once per machine, libraries, threads and layer; a choice made elsewhere is not "
             "used, and said); default $XDG_CACHE_HOME or ~/.cache, then layerbench/choices.tsv; none: search in "
             "every run"},
    {"dedupe", NULL, O_FLAG, MO(dedupe), .commands = C_BACKENDS,
     .help = "time layers of identical kind, shape and parameters once (check: check them once; the others take "
             "that verdict)"},
    {"seed", "N", O_SEED, MO(seed), .commands = C_BACKENDS,
     .help = "seed of the random inputs and weights (default 1)"},
    {"csv", "FILE", O_STRING, F(run.csv), .commands = C_MEASURE | C_LIST, .flags = O_SWEEP_OWN,
     .help = "write the tidy CSV (docs/csv.md) to FILE, '-' for stdout; a JSON run context with the same stem goes "
             "beside it. The file is replaced atomically after every finished (batch, backend): an interrupted run "
             "keeps what it finished. Two outputs may not be one file"},
    {"trace", "FILE", O_STRING, F(run.trace), .commands = C_MEASURE,
     .help = "a Chrome / Perfetto trace (JSON) of one real forward per backend and batch and of the layers alone, "
             "nested in their blocks (open it in ui.perfetto.dev or chrome://tracing; docs/outputs.md)"},
    {"stacks", "FILE", O_STRING, F(run.stacks), .commands = C_MEASURE,
     .help = "the same forward as folded stacks for flame graphs (flamegraph.pl, speedscope), in nanoseconds; with "
             "several backends or batches, one file each: FILE's stem + .BACKEND[.batchN]"},
    {"threshold", "PCT", O_PERCENT, F(cmp.threshold), 0, 1000, .commands = C_COMPARE,
     .help = "how much slower (or faster) beyond both confidence intervals counts (default 5)"},
    {"format", "F", O_CUSTOM, F(ro.format), .set = set_format, .commands = C_MEASURE | C_LIST | C_COMPARE,
     .expects = "text or md", .help = "the tables as text (default) or md (markdown, for pull requests and READMEs)"},
    {"group-by", "G[,G]", O_CUSTOM, F(ro.groups), .set = set_groups, .commands = C_MEASURE,
     .expects = "a comma-separated list of shape, kind and block (or none)",
     .help = "the grouped tables, any of shape, kind and block (the module hierarchy, total and self time per "
             "block), or none (default all)"},
    {"inmodel", NULL, O_FLAG, F(cmp.inmodel), .commands = C_COMPARE,
     .help = "the in-model rows too (left out by default: they vary more between runs than their own noise says)"},
    {"resume", NULL, O_FLAG, F(run.resume), .commands = C_MEASURE, .flags = O_SWEEP_OWN,
     .help = "continue the run whose --csv FILE is given, measuring only the (batch, backend) sets it does not hold "
             "whole yet (its JSON context lists each finished set with its row count: a set cut short is measured "
             "again); sweep --slurm: submit again only the shards without a finished part"},
    {"sort", "COLUMN", O_CUSTOM, F(ro.sort), .set = set_sort, .commands = C_MEASURE,
     .expects = "index, name, kind, params, flops, time, noise, inmodel or gflops",
     .help = "per-layer table order: index (default), name, kind, params, flops, time, noise, inmodel, gflops"},
    {"top", "N", O_INT, F(ro.top), 1, INT32_MAX, .commands = C_MEASURE,
     .help = "rows in the per-layer and by-shape tables (default all)"},
    {"no-peaks", NULL, O_FLAG, F(run.no_peaks), .commands = C_MEASURE,
     .help = "skip measuring the machine's ceilings (a large matrix product and a memory stream, about 0.3 s per "
             "backend; a decode step's read stream every few rounds), and with them the roofline columns and a "
             "decode step's memory limit"},
    {"emit-yaml", NULL, O_FLAG, F(emit_yaml), .commands = C_LIST,
     .help = "print the config the model was built from, as YAML: for a config.json the one its family's "
             "description expands to (its shape options applied), to read, edit and run as any config"},
    {"no-forward", NULL, O_FLAG, F(no_forward), .commands = C_CHECK,
     .help = "skip the chained forward's check (it costs one more reference forward, as long as checking every "
             "layer once)"},
    {"no-progress", NULL, O_FLAG, F(run.no_progress), .commands = C_BACKENDS, .flags = O_SWEEP_OWN,
     .help = "do not show the running layer on stderr"},
    {"slurm", "DIR", O_STRING, F(slurm.dir), .commands = C_SWEEP, .flags = O_NONEMPTY | O_SWEEP_OWN,
     .expects = "a folder for the sweep's parts",
     .help = "shard the sweep (config x batch x backend x dtype x tokens x kv_len; --backend may be a list here) "
             "onto a Slurm job array and submit it with sbatch, then a merge job that runs after it; every task "
             "writes DIR/part-ARRAY_TASK.csv and its JSON (docs/slurm.md). DIR must be new or empty, unless "
             "--resume: then only the shards without a finished part are submitted again"},
    {"dry-run", NULL, O_FLAG, F(slurm.dry_run), .commands = C_SWEEP, .flags = O_SWEEP_OWN,
     .help = "--slurm: print the scripts, the sbatch commands and the shard list; submit nothing, write nothing"},
    {"sbatch-args", "A", O_STRING, F(slurm.sbatch_args), .commands = C_SWEEP, .flags = O_SWEEP_OWN,
     .help = "--slurm: sbatch options the site needs, split at spaces ('--partition=gpu --account=perf --qos=high "
             "--constraint=zen4')"},
    {"time-limit", "T", O_CUSTOM, F(slurm.time_limit), .set = set_time_limit, .commands = C_SWEEP, .flags = O_SWEEP_OWN,
     .expects = "Slurm's time format (MINUTES, H:MM:SS or D-HH:MM:SS)",
     .help = "--slurm: each shard's --time, Slurm's format (default 1:00:00)"},
    {"max-running", "K", O_INT, F(slurm.max_running), 1, 1000000, .commands = C_SWEEP, .flags = O_SWEEP_OWN,
     .help = "--slurm: at most K tasks of an array at once (--array=...%K)"},
    {"shared", NULL, O_FLAG, F(slurm.shared), .commands = C_SWEEP, .flags = O_SWEEP_OWN,
     .help = "--slurm: do not ask for whole nodes (--exclusive is the default: timings beside other jobs are not "
             "worth keeping); needs --threads"},
    {"output", "FILE", O_STRING, F(merge.out), .letter = 'o', .commands = C_MERGE, .flags = O_SWEEP_OWN,
     .help = "the merged CSV, its JSON beside it (default DIR/sweep.csv)"},
    {"help", NULL, O_FLAG, F(help), .letter = 'h', .commands = C_ANY, .help = "this text (bench COMMAND --help: one command's)"},
    {"version", NULL, O_FLAG, F(version), .commands = C_ANY, .help = "version and git revision"},
};
enum { N_OPTIONS = (int)(sizeof options / sizeof options[0]) };

/* getopt_long's view of the table: option i returns 256 + i. */
static const struct option *long_options(void)
{
    static struct option opts[N_OPTIONS + 1];
    for (int k = 0; k < N_OPTIONS; k++)
        opts[k] = (struct option){options[k].name, options[k].value ? required_argument : no_argument, NULL, 256 + k};
    return opts;
}

/* The command named by an argument, -1 if none. */
static int command_index(const char *name)
{
    for (int i = 0; name && i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return i;
    return -1;
}

/* "run, sweep and check": the commands of the bits. */
static void command_names(unsigned bits, char *out, size_t len)
{
    int n = 0, total = __builtin_popcount(bits);
    out[0] = 0;
    for (int i = 0; i < N_COMMANDS; i++)
        if (bits & (1u << i)) {
            n++;
            snprintf(out + strlen(out), len - strlen(out), "%s%s", n == 1 ? "" : n == total ? " and " : ", ",
                     commands[i].name);
        }
}

/* What an option's value must be, for its error. */
static void expects_text(const cli_option *o, char *out, size_t len)
{
    bool above = o->flags & O_ABOVE;
    switch (o->type) {
    case O_INT:
        if (o->hi >= INT32_MAX)
            snprintf(out, len, "a %s integer", o->lo > 0 ? "positive" : "non-negative");
        else
            snprintf(out, len, "an integer from %.0f to %.0f", o->lo, o->hi);
        break;
    case O_SEED: snprintf(out, len, "a non-negative integer"); break;
    case O_SECONDS:
    case O_PERCENT:
        snprintf(out, len, "%s %s %g %s %g", o->type == O_SECONDS ? "seconds" : "a percentage", above ? "above" : "from",
                 o->lo, above ? "and at most" : "to", o->hi);
        break;
    case O_CHOICE:
        out[0] = 0;
        for (int i = 0; o->choices[i]; i++)
            snprintf(out + strlen(out), len - strlen(out), "%s%s", i == 0 ? "" : o->choices[i + 1] ? ", " : " or ",
                     o->choices[i]);
        break;
    default: snprintf(out, len, "%s", o->expects_now ? o->expects_now() : o->expects ? o->expects : "a value");
    }
}

/* Reads arg into the field the option fills; false when it is not what the option takes. */
static bool set_option(cli *c, const cli_option *o, const char *arg)
{
    void *f = (char *)c + o->field;
    long v;
    char *end;
    switch (o->type) {
    case O_FLAG: *(bool *)f = true; return true;
    case O_STRING: *(const char **)f = arg; return *arg || !(o->flags & O_NONEMPTY);
    case O_INT: return cli_parse_long(arg, (long)o->lo, (long)o->hi, &v) && ((*(int *)f = (int)v), true);
    case O_SEED: return cli_parse_long(arg, 0, LONG_MAX, &v) && ((*(uint64_t *)f = (uint64_t)v), true);
    case O_SECONDS:
    case O_PERCENT: {
        errno = 0;
        double d = strtod(arg, &end);
        if (!*arg || *end || errno || !(d >= o->lo && d <= o->hi) || ((o->flags & O_ABOVE) && d == o->lo))
            return false;
        *(double *)f = o->type == O_PERCENT ? d / 100 : d;
        return true;
    }
    case O_CHOICE:
        for (int i = 0; o->choices[i]; i++)
            if (strcmp(arg, o->choices[i]) == 0)
                return *(int *)f = i, true;
        return false;
    case O_CUSTOM: return o->set(c, arg);
    }
    return false;
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
    for (int i = 0; i < N_OPTIONS; i++)
        if (strncmp(options[i].name, arg + 2, len) == 0)
            n++, snprintf(list + strlen(list), sizeof list - strlen(list), "%s--%s", n > 1 ? ", " : "", options[i].name);
    if (n < 2)
        return cli_usage_error("unknown option '%s'", arg);
    char msg[700];
    snprintf(msg, sizeof msg, "option '%%s' is ambiguous: it could be %s; give more of it", list);
    return cli_usage_error(msg, arg);
}

/* The option a command-line argument names, as getopt_long finds it (exact, else a unique
 * prefix; -x by its letter); NULL if none. *inline_value: the argument holds its value. */
static const cli_option *option_named(const char *a, bool *inline_value)
{
    const cli_option *o = NULL;
    *inline_value = false;
    if (a[0] == '-' && a[1] && a[1] != '-') {
        for (int i = 0; i < N_OPTIONS; i++)
            o = options[i].letter == a[1] ? &options[i] : o;
        *inline_value = o && a[2];
        return o;
    }
    size_t len = strcspn(a + 2, "=");
    for (int i = 0; i < N_OPTIONS; i++) {
        if (strncmp(options[i].name, a + 2, len) != 0)
            continue;
        if (strlen(options[i].name) == len) {
            o = &options[i];
            break;
        }
        o = o ? o : &options[i];
    }
    *inline_value = o && a[2 + len] == '=';
    return o;
}

/* The command of a command line (its first argument that is not an option or an
 * option's value), for --help; NULL if none. */
static const char *command_of(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        bool inline_value;
        if (strcmp(argv[i], "--") == 0)
            return i + 1 < argc ? argv[i + 1] : NULL;
        if (argv[i][0] != '-' || !argv[i][1])
            return argv[i];
        const cli_option *o = option_named(argv[i], &inline_value);
        i += o && o->value && !inline_value;
    }
    return NULL;
}

char **cli_shard_options(int argc, char **argv)
{
    char **out = xcalloc((size_t)argc + 1, sizeof *out);
    int n = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool inline_value;
        if (strcmp(a, "--") == 0)
            break; /* what follows is configs */
        if (strncmp(a, "--", 2) != 0)
            continue; /* the command and the configs (-o is merge's) */
        const cli_option *o = option_named(a, &inline_value);
        if (!o)
            continue;
        bool takes = o->value && !inline_value;
        if (!(o->flags & O_SWEEP_OWN)) {
            out[n++] = xstrdup(a);
            if (takes && i + 1 < argc)
                out[n++] = xstrdup(argv[i + 1]);
        }
        i += takes;
    }
    return out;
}

/* --help's width, and the column an option's text starts at. */
#define HELP_WIDTH 94
#define HELP_INDENT 20

/* text from column col on, wrapped at spaces into HELP_WIDTH, the lines after the first
 * indented by indent. */
static void print_wrapped(FILE *f, const char *text, int col, int indent)
{
    while (*text) {
        int room = HELP_WIDTH - col, n = (int)strlen(text);
        if (n > room) { /* the last space that fits, else the first one after */
            n = room;
            while (n > 0 && text[n] != ' ')
                n--;
            if (n == 0)
                n = (int)strcspn(text, " ");
        }
        fprintf(f, "%.*s\n", n, text);
        text += n;
        while (*text == ' ')
            text++;
        if (*text)
            fprintf(f, "%*s", indent, "");
        col = indent;
    }
}

/* One option's lines: "  --name VALUE", then its help, led by its commands when several
 * commands are listed (all_commands). */
static void print_option(FILE *f, const cli_option *o, bool all_commands)
{
    char head[64], text[1600] = "";
    int n = o->letter ? snprintf(head, sizeof head, "  -%c, --%s%s%s", o->letter, o->name, o->value ? " " : "",
                                 o->value ? o->value : "")
                      : snprintf(head, sizeof head, "  --%s%s%s", o->name, o->value ? " " : "", o->value ? o->value : "");
    if (all_commands && o->commands != C_ANY) {
        command_names(o->commands, text, sizeof text);
        snprintf(text + strlen(text), sizeof text - strlen(text), ": ");
    }
    snprintf(text + strlen(text), sizeof text - strlen(text), "%s", o->help);
    if (n > HELP_INDENT - 1)
        fprintf(f, "%s\n%*s", head, HELP_INDENT, "");
    else
        fprintf(f, "%-*s", HELP_INDENT, head);
    print_wrapped(f, text, HELP_INDENT, HELP_INDENT);
}

/* bench --help: every command and option; bench COMMAND --help: that command's. */
static void print_help(FILE *f, int command)
{
    if (command < 0) {
        fputs("usage: bench <command> CONFIG [options]\n"
              "       bench compare BASE.csv NEW.csv [--threshold PCT] [--format md] [--inmodel]\n"
              "       bench COMMAND --help: one command's options\n\n"
              "Layer-by-layer microbenchmarks of a model described in YAML (docs/config.md).\n\ncommands:\n", f);
        for (int i = 0; i < N_COMMANDS; i++) {
            char head[64];
            int n = snprintf(head, sizeof head, "  %s %s", commands[i].name, commands[i].args);
            if (n > HELP_INDENT - 1)
                fprintf(f, "%s\n%*s", head, HELP_INDENT, "");
            else
                fprintf(f, "%-*s", HELP_INDENT, head);
            print_wrapped(f, commands[i].about, HELP_INDENT, HELP_INDENT);
        }
    } else {
        fprintf(f, "usage: bench %s %s%s[options]\n\n", commands[command].name, commands[command].args,
                *commands[command].args ? " " : "");
        print_wrapped(f, commands[command].about, 0, 0);
    }
    fputs("\noptions:\n", f);
    for (int i = 0; i < N_OPTIONS; i++)
        if (command < 0 || (options[i].commands & (1u << command)))
            print_option(f, &options[i], command < 0);
    fprintf(f, "\n%s", exit_text);
}

/* The command and its arguments after the options: CONFIG (several for sweep --slurm),
 * BASE.csv NEW.csv, DIR. Returns -1 to go on, or an exit code. */
static int take_arguments(int argc, char **argv, int at, cli *c)
{
    if (at >= argc)
        return cli_usage_error("%s", "missing command (run, sweep, merge, list, check, compare, schema)");
    c->command = argv[at++];
    int cmd = command_index(c->command);
    if (cmd < 0)
        return cli_usage_error("unknown command '%s' (expected run, sweep, merge, list, check, compare or schema)",
                               c->command);
    if ((1u << cmd) == C_HELP) { /* bench help [COMMAND] */
        print_help(stdout, at < argc ? command_index(argv[at]) : -1);
        return 0;
    }
    if ((1u << cmd) == C_COMPARE) {
        if (argc - at < 2)
            return cli_usage_error("%s", "compare needs two results CSVs: BASE.csv NEW.csv");
        c->cmp.base = argv[at++];
        c->cmp.new_csv = argv[at++];
    } else if ((1u << cmd) == C_MERGE) {
        if (at >= argc)
            return cli_usage_error("%s", "merge needs the folder of a bench sweep --slurm");
        c->merge.dir = argv[at++];
    } else if ((1u << cmd) != C_SCHEMA) {
        if (at >= argc)
            return cli_usage_error("%s needs a CONFIG file", c->command);
        c->model.config = c->slurm.configs[c->slurm.n_configs++] = argv[at++];
    }
    bool sweep = (1u << cmd) == C_SWEEP;
    /* sweep --slurm: several configs, each a shard axis */
    while (c->slurm.dir && sweep && at < argc && c->slurm.n_configs < CLI_MAX_CONFIGS)
        c->slurm.configs[c->slurm.n_configs++] = argv[at++];
    if (at < argc && c->slurm.n_configs == CLI_MAX_CONFIGS)
        return cli_usage_error("sweep --slurm takes at most 256 configs, got more: '%s' is one too many", argv[at]);
    if (at < argc && sweep && !c->slurm.dir)
        return cli_usage_error("sweep takes one CONFIG (several with --slurm, one shard each), got '%s' too", argv[at]);
    if (at < argc)
        return cli_usage_error("unexpected argument '%s'", argv[at]);
    return -1;
}

/* Every option given goes with the command (the table's commands), and the options that
 * go together are given together. Returns -1 to go on, or an exit code. */
static int check_together(const cli *c, const bool *given)
{
    unsigned bit = 1u << command_index(c->command);
    for (int i = 0; i < N_OPTIONS; i++)
        if (given[i] && !(options[i].commands & bit)) {
            char names[128], flag[48] = "", msg[300];
            command_names(options[i].commands, names, sizeof names);
            if (options[i].letter)
                snprintf(flag, sizeof flag, "-%c/", options[i].letter);
            snprintf(msg, sizeof msg, "%s--%s goes with bench %s, not %%s", flag, options[i].name, names);
            return cli_usage_error(msg, c->command);
        }
    if ((c->slurm.dry_run || c->slurm.sbatch_args || c->slurm.time_limit || c->slurm.max_running || c->slurm.shared) && !c->slurm.dir)
        return cli_usage_error("%s", "--dry-run, --sbatch-args, --time-limit, --max-running and --shared go with "
                                     "--slurm DIR");
    if (c->slurm.dir && (c->run.csv || c->run.trace || c->run.stacks))
        return cli_usage_error("%s", "--slurm writes its parts into DIR (bench merge DIR -o FILE joins them): drop "
                                     "--csv, --trace and --stacks");
    if (c->slurm.shared && !c->be.threads)
        return cli_usage_error("%s", "--shared needs --threads N: the cores each shard asks for and uses");
    if (c->model.tf32 && c->model.n_dtypes)
        return cli_usage_error("%s", "--tf32 and --dtype both given: --tf32 is --dtype tf32, list it there");
    bool sweep = bit == C_SWEEP;
    if (!sweep && (c->model.n_tokens > 1 || c->model.n_kv > 1))
        return cli_usage_error("%s takes one --tokens and one --kv-len (bench sweep takes lists)", c->command);
    for (int i = 0; i < c->model.n_tokens; i++)
        for (int j = 0; j < i; j++)
            if (c->model.tokens_list[i] == c->model.tokens_list[j])
                return cli_usage_error("--tokens lists %s twice", "a value");
    for (int i = 0; i < c->model.n_kv; i++)
        for (int j = 0; j < i; j++)
            if (c->model.kv_list[i] == c->model.kv_list[j])
                return cli_usage_error("--kv-len lists %s twice", "a value");
    if (c->model.n_dtypes > 1 && bit == C_LIST)
        return cli_usage_error("list takes one --dtype, got '%s'", "a list");
    return -1;
}

/* --batch: sweep's list (default 1,2,4,8,16,32, each once), any other command's one
 * (0: the config's). Returns -1 to go on, or an exit code. */
static int take_batches(cli *c)
{
    cli_model *m = &c->model;
    long v = 0;
    if (strcmp(c->command, "sweep") == 0) {
        if (cli_parse_batches(m->batch_arg ? m->batch_arg : "1,2,4,8,16,32", &m->batches, &m->n_batches))
            return -1;
        free(m->batches), m->batches = NULL, m->n_batches = 0;
        return cli_usage_error("--batch expects a comma-separated list of positive integers, each once, got '%s'",
                               m->batch_arg);
    }
    if (m->batch_arg && !cli_parse_long(m->batch_arg, 1, INT32_MAX, &v))
        return cli_usage_error("--batch expects a positive integer, got '%s'", m->batch_arg);
    m->batches = xmalloc(sizeof *m->batches);
    m->batches[0] = v, m->n_batches = 1;
    return -1;
}

void cli_free(cli *c)
{
    free(c->model.batches);
    c->model.batches = NULL, c->model.n_batches = 0;
}

/* What the options imply: --tf32's dtype, --phase's shape, the batches, the backends
 * known, the default algorithm cache. Returns -1 to go on, or an exit code. */
static int finish(cli *c)
{
    if (c->model.tf32) {
        c->model.dtypes[c->model.n_dtypes++] = DTYPE_TF32;
        log_msg("note: --tf32 is --dtype tf32 now (the dtype column of the results says tf32)");
    }
    /* decode: one new token after the cache (1024 tokens unless --kv-len says); prefill:
     * the tokens (the config's, or --tokens), no cache unless --kv-len gives one */
    if (c->model.phase == 1) {
        for (int i = 0; i < c->model.n_tokens; i++)
            c->model.shape.tokens = c->model.tokens_list[i] > c->model.shape.tokens ? c->model.tokens_list[i] : c->model.shape.tokens;
        if (c->model.shape.tokens > 1)
            return cli_usage_error("--phase decode runs one token per sequence: drop --tokens, or use --phase "
                                   "prefill%s", "");
        c->model.shape.tokens = 1;
        if (c->model.shape.kv_len < 0)
            c->model.shape.kv_len = CLI_DEFAULT_KV_LEN;
    } else if (c->model.phase == 0 && c->model.shape.kv_len < 0) {
        c->model.shape.kv_len = 0;
    }
    int rc = (1u << command_index(c->command)) & C_MODEL ? take_batches(c) : -1;
    if (rc >= 0)
        return rc;
    const char *listed[BACKEND_MAX];
    bool known = c->slurm.dir ? cli_backend_list(c->be.backend, listed) > 0 : strcmp(c->be.backend, "all") == 0;
    for (const char *const *n = backend_names(); *n; n++)
        known = known || strcmp(c->be.backend, *n) == 0;
    if (!known) {
        char list[256] = "";
        for (const char *const *n = backend_names(); *n; n++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s, ", *n);
        snprintf(list + strlen(list), sizeof list - strlen(list), "or all, got '%s'", c->be.backend);
        return cli_usage_error("--backend expects %s", list);
    }
    c->cmp.format = c->ro.format;
    c->mo.stream_rounds = !c->run.no_peaks;
    c->mo.progress = !c->run.no_progress && isatty(STDERR_FILENO);
    /* the choices are kept by default, as autotuners keep theirs: $XDG_CACHE_HOME or
     * ~/.cache, layerbench/choices.tsv */
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (!c->run.algo_cache_given && !c->be.algo_heuristic && ((xdg && *xdg) || (home && *home))) {
        snprintf(c->run.default_cache, sizeof c->run.default_cache, "%s%s/layerbench/choices.tsv", xdg && *xdg ? xdg : home,
                 xdg && *xdg ? "" : "/.cache");
        c->run.algo_cache = c->run.default_cache;
    }
    return -1;
}

int cli_parse(int argc, char **argv, cli *c)
{
    *c = (cli){.model = {.shape = CFG_SHAPE_KEEP, .phase = -1, .routing = -1}, .be = {.backend = "cpu"},
               .run = {.mode = "auto", .processes = PROCS_DEFAULT, .phase_band = PROCS_PHASE_BAND},
               .ro = {.sort = "index"}, .cmp = {.threshold = COMPARE_DEFAULT_THRESHOLD},
               .mo = {.warmup_time = MEASURE_DEFAULT_WARMUP, .min_time = MEASURE_DEFAULT_MIN_TIME,
                      .max_noise = MEASURE_DEFAULT_MAX_NOISE, .min_samples = MEASURE_DEFAULT_MIN_SAMPLES,
                      .timeout = MEASURE_DEFAULT_TIMEOUT, .seed = 1}};
    bool given[N_OPTIONS] = {false};
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, ":ho:", long_options(), NULL)) != -1) {
        int i = opt - 256;
        for (int k = 0; opt < 256 && k < N_OPTIONS; k++)
            i = options[k].letter == opt ? k : i;
        if (opt == ':')
            return cli_usage_error("option '%s' needs a value", argv[optind - 1]);
        if (i < 0 || i >= N_OPTIONS)
            return unknown_option(argv[optind - 1]);
        const cli_option *o = &options[i];
        if (given[i] && (o->flags & O_ONCE))
            return cli_usage_error("--%s given twice: give one comma-separated list", o->name);
        given[i] = true;
        if (!set_option(c, o, optarg)) {
            char what[300], msg[400];
            expects_text(o, what, sizeof what);
            snprintf(msg, sizeof msg, "--%s expects %s%s", o->name, what, *optarg ? ", got '%s'" : "");
            return cli_usage_error(msg, optarg);
        }
        if (c->help) {
            print_help(stdout, command_index(command_of(argc, argv)));
            return 0;
        }
        if (c->version) {
            printf("bench (layerbench) %s, git %s\n", LAYERBENCH_VERSION, layerbench_git_revision());
            return 0;
        }
    }
    for (int i = 0; i < N_OPTIONS; i++) /* check: --timeout bounds the reference only when given */
        c->timeout_given |= given[i] && options[i].field == MO(timeout);
    int rc = take_arguments(argc, argv, optind, c);
    if (rc < 0)
        rc = check_together(c, given);
    return rc < 0 ? finish(c) : rc;
}
