/* run and sweep: the outputs they write, the saved algorithm choices, the worker
 * processes (procs.c) and the hidden --worker command each of them runs. */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cfg.h"
#include "choices.h"
#include "log.h"
#include "procs.h"
#include "report.h"
#include "runner.h"
#include "schedstat.h"
#include "signals.h"

static void close_outputs(outputs *o);

/* Opens one more output (what: the option that named it), refusing it when it is the
 * same file as one opened before (however spelt). The output, or NULL (said). */
static bench_output *open_one(outputs *o, const char *path, const char *what, const char *const *inputs)
{
    char err[1200];
    bench_output *out = xcalloc(1, sizeof *out);
    if (bench_output_open(out, path, inputs, err, sizeof err) != BENCH_OK) {
        log_msg("%s: %s", what, err);
        free(out);
        return NULL;
    }
    o->files = xrealloc(o->files, (size_t)(o->n + 1) * sizeof *o->files);
    o->what = xrealloc(o->what, (size_t)(o->n + 1) * sizeof *o->what);
    o->files[o->n] = out, o->what[o->n++] = what;
    for (int i = 0; i < o->n - 1; i++)
        if (bench_output_same(o->files[i], out)) {
            log_msg("%s '%s' is the same file as %s's: every output needs a file of its own", what, path, o->what[i]);
            return NULL;
        }
    return out;
}

/* --trace, --csv and the JSON context beside a CSV file. 0, or 2 (nothing left open). */
static int open_outputs(const cli *c, outputs *o)
{
    const char *inputs[] = {c->model.config, NULL};
    memset(o, 0, sizeof *o);
    bool ok = !c->run.trace || (o->trace = open_one(o, c->run.trace, "--trace", inputs));
    ok = ok && (!c->run.csv || (o->csv = open_one(o, c->run.csv, "--csv", inputs)));
    if (ok && o->csv) {
        o->csv->append = true; /* a stream takes its rows as they come */
        if (o->csv->target) { /* a file: the JSON context beside it */
            char *json = report_json_path(c->run.csv);
            ok = (o->json = open_one(o, json, "the JSON context beside --csv", inputs)) != NULL;
            free(json);
        }
    }
    if (!ok)
        close_outputs(o);
    return ok ? 0 : 2;
}

/* The --stacks files, one per (backend, batch, dtype) that will run. */
static int open_stacks(const cli *c, outputs *o, const backend *bs, int nb, const int64_t *batches, int n_batches,
                       const dtype_t *dtypes, int n_dtypes)
{
    const char *inputs[] = {c->model.config, NULL};
    if (!c->run.stacks)
        return 0;
    o->stacks = xcalloc((size_t)(nb * n_batches * n_dtypes), sizeof *o->stacks);
    for (int b = 0; b < nb; b++)
        for (int k = 0; k < n_batches * n_dtypes; k++) {
            dtype_t dt = dtypes[k % n_dtypes];
            char *path = report_stacks_path(c->run.stacks, bs[b].ops->name, batches[k / n_dtypes],
                                            n_dtypes > 1 ? dtype_name(dt) : NULL, nb == 1, n_batches == 1);
            bench_output *out = open_one(o, path, "--stacks", inputs);
            free(path);
            if (!out)
                return 2;
            o->stacks[o->n_stacks++] = (report_stacks_file){bs[b].ops->name, batches[k / n_dtypes], dt, out};
        }
    return 0;
}

/* Whether any output is stdout: the tables go to stderr then. */
static bool writes_stdout(const outputs *o)
{
    for (int i = 0; i < o->n; i++)
        if (o->files[i]->is_stdout)
            return true;
    return false;
}

/* The streams' documents, written once now that the run has ended (output.h). */
static bool commit_outputs(outputs *o)
{
    char err[1200];
    bool ok = true;
    for (int i = 0; i < o->n; i++)
        if (bench_output_commit(o->files[i], err, sizeof err) != BENCH_OK) {
            log_msg("%s", err);
            ok = false;
        }
    return ok;
}

static void close_outputs(outputs *o)
{
    for (int i = 0; i < o->n; i++) {
        bench_output_close(o->files[i]);
        free(o->files[i]);
    }
    free(o->files), free(o->what), free(o->stacks);
    memset(o, 0, sizeof *o);
}

/* What every worker of the run is given (procs.h): the config, the model's options, the
 * backend's and the measurement's; procs_measure adds each set's own. */
static measure_set worker_base(const cli *c, const char *algo_cache)
{
    measure_set s = {.shape = c->model.shape, .routing = c->model.routing, .load_skew = c->model.load_skew,
                     .optimizer = c->model.optimizer, .threads = c->be.threads,
                     .algo_heuristic = c->be.algo_heuristic, .algo_alone = c->be.algo_alone, .conv_api = c->be.conv_api,
                     .mo = c->mo};
    s.str[SET_CONFIG] = c->model.config;
    s.str[SET_ALGO_CACHE] = algo_cache;
    s.str[SET_FREEZE] = c->model.freeze;
    return s;
}

/* Appends r to the run's list of reporters (*v, *n of them). */
static void add_reporter(reporter ***v, int *n, reporter *r)
{
    *v = xrealloc(*v, (size_t)(*n + 1) * sizeof **v);
    (*v)[(*n)++] = r;
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
 * unused into note (a warning), what the JSON context says of it into ctx. Returns 0; 2 when the file given cannot be read or is no choices file; -1
 * when the default one is such a file (it is not used, and note says so). */
static int load_algo_cache(const cli *c, const backend *bs, int nb, char *note, size_t notelen, report_context *ctx)
{
    choices_report cr;
    char err[1200];
    if (!c->run.algo_cache)
        return 0;
    if (choices_load(c->run.algo_cache, bs, nb, &cr, err, sizeof err) != BENCH_OK) {
        if (c->run.algo_cache_given) {
            log_msg("%s", err);
            return 2;
        }
        snprintf(note, notelen, "%.300s: not used (remove it, or give --algo-cache FILE or none)", err);
        return -1;
    }
    choices_warning(c->run.algo_cache, &cr, note, notelen);
    if (cr.taken)
        log_msg("%d algorithm choice%s from %s (--algo-cache none searches again)", cr.taken,
                cr.taken == 1 ? "" : "s", c->run.algo_cache);
    ctx->algo_cache = c->run.algo_cache;
    ctx->algo_taken = cr.taken, ctx->algo_other_context = cr.foreign, ctx->algo_malformed = cr.malformed;
    return 0;
}

/* Saves the backends' choices into path (--algo-cache), saying what went wrong. */
static void save_algo_cache(const char *path, const backend *bs, int nb)
{
    int stale = 0;
    char err[1200];
    if (choices_save(path, bs, nb, &stale, err, sizeof err) != BENCH_OK)
        log_warning("%s", err);
    else if (stale)
        log_warning("--algo-cache: %d choice%s no longer applied (the candidates changed): searched again", stale,
                    stale == 1 ? "" : "s");
}

/* A worker process (procs.h): `bench --worker 3,I,N`, its set from descriptor 4, its
 * result to the parent's pipe on 3. Nothing of its command line is read but that. */
int cmd_worker(void)
{
    measure_set s;
    char err[1024];
    if (!procs_worker_set(&s, err, sizeof err)) {
        log_msg("%s", err);
        return 2;
    }
    cli c = {.model = {.config = s.str[SET_CONFIG], .shape = s.shape, .routing = s.routing, .load_skew = s.load_skew,
                       .freeze = s.str[SET_FREEZE], .optimizer = s.optimizer, .n_dtypes = 1, .dtypes = {s.dtype},
                       .worker = true},
             .be = {.backend = s.backend, .threads = s.threads, .algo_heuristic = s.algo_heuristic,
                    .algo_alone = s.algo_alone, .conv_api = s.conv_api},
             .run = {.algo_cache = s.str[SET_ALGO_CACHE]}, .mo = s.mo};
    model *m;
    backend bs[BACKEND_MAX];
    char *skipped;
    int rc = cli_load_model(&c.model, s.batch, &m);
    if (rc) {
        free(s.skip);
        return rc;
    }
    model_set_pass(m, s.pass);
    int nb = cli_open_backends(&c.be, bs, &skipped);
    if (nb != 1) {
        model_free(m);
        free(s.skip);
        return nb < 0 ? -nb : 2;
    }
    measure_options mo = s.mo;
    mo.stop = &signals_interrupted;
    sched_probe probe;
    watch_contention(&mo, &probe);
    choices_report cr;
    if (c.run.algo_cache && choices_load(c.run.algo_cache, bs, nb, &cr, err, sizeof err) != BENCH_OK)
        log_warning("%s", err);
    char label[48];
    snprintf(label, sizeof label, s.index <= s.count ? "process %d/%d" : "process %d (one more for %d)", s.index,
             s.count);
    mo.label = label;
    rc = procs_worker(&s, m, &bs[0], &mo);
    if (c.run.algo_cache)
        save_algo_cache(c.run.algo_cache, bs, nb);
    sched_probe_close(&probe);
    cli_close_backends(bs, nb, skipped);
    model_free(m);
    free(s.skip);
    return rc;
}

/* run and sweep: every batch on every backend, reported as it completes (runner.h). */
/* The models of a sweep's token shapes (--tokens and --kv-len lists: every pair, tokens
 * outer), the first being m; *n 1 and no array when the command line gives no lists. */
static int load_shapes(const cli *c, int64_t batch, model *m, model ***out, int *n)
{
    int nt = c->model.n_tokens > 1 ? c->model.n_tokens : 1, nk = c->model.n_kv > 1 ? c->model.n_kv : 1;
    *out = NULL, *n = 1;
    if (nt * nk == 1)
        return 0;
    model **ms = xcalloc((size_t)(nt * nk), sizeof *ms);
    ms[0] = m;
    for (int i = 1; i < nt * nk; i++) {
        cli cc = *c;
        if (c->model.n_tokens > 1)
            cc.model.shape.tokens = c->model.tokens_list[i / nk];
        if (c->model.n_kv > 1)
            cc.model.shape.kv_len = c->model.kv_list[i % nk];
        int rc = cli_load_model(&cc.model, batch, &ms[i]);
        if (rc) {
            for (int k = 1; k < i; k++)
                model_free(ms[k]);
            free(ms);
            return rc;
        }
    }
    *out = ms, *n = nt * nk;
    return 0;
}

/* The isolated layers must fit in the host's memory in every dtype of the run (the
 * chained forward is left out of a set where it does not fit beside them: runner.c). */
static bench_status isolated_fit(model *m, const dtype_t *dtypes, int n_dtypes, bool dedupe, char *err, size_t len)
{
    int64_t avail = bench_mem_available();
    dtype_t keep = m->dtype;
    bench_status st = BENCH_OK;
    for (int d = 0; d < n_dtypes && st == BENCH_OK && avail >= 0; d++) {
        model_set_dtype(m, dtypes[d]);
        int64_t need = model_isolated_bytes(m, dedupe);
        char a[32], b[32];
        if (need > avail) {
            snprintf(err, len, "%s at batch %lld in %s needs %s for its layers' weights and buffers alone, but only %s "
                               "is available%s", m->name, (long long)m->batch, dtype_name(m->dtype),
                     bench_format_bytes(need, a, sizeof a), bench_format_bytes(avail, b, sizeof b),
                     dedupe ? "" : " (--dedupe sets up one of each set of identical layers)");
            st = BENCH_ERR_USAGE;
        }
    }
    model_set_dtype(m, keep);
    return st;
}

static void free_shapes(model **ms, int n)
{
    for (int i = 1; ms && i < n; i++)
        model_free(ms[i]);
    free(ms);
}

/* What a run or sweep holds from its start to its end, freed by job_free. */
typedef struct measure_job {
    model *m, **shapes;  /* the config's model; shapes: one per (tokens, kv_len) of a sweep, or NULL */
    int n_shapes;
    int64_t *batches, largest;
    int n_batches;
    dtype_t dtypes[DTYPE_COUNT]; /* the dtypes asked for, or the config's */
    int n_dtypes;
    outputs out;
    bool out_open;
    char *previous;      /* --resume: the rows of the run continued */
    report_set *done;
    int n_done;
    backend bs[BACKEND_MAX];
    int nb;
    char *skipped;
} measure_job;

static void job_free(measure_job *j)
{
    if (j->nb > 0)
        cli_close_backends(j->bs, j->nb, j->skipped);
    if (j->out_open)
        close_outputs(&j->out);
    free(j->previous), free(j->done), free(j->batches);
    free_shapes(j->shapes, j->n_shapes);
    model_free(j->m);
}

/* A sweep's models, one per (tokens, kv_len) (load_shapes). 0, or an exit code. */
static int job_shapes(measure_job *j, const cli *c, int64_t batch)
{
    int rc = load_shapes(c, batch, j->m, &j->shapes, &j->n_shapes);
    if (rc == 0 && j->n_shapes > 1 && c->run.stacks) {
        log_msg("--stacks writes one file per batch and dtype: run it for one --tokens and --kv-len at a time");
        rc = 2;
    } else if (rc == 0 && c->model.n_passes > 1 && c->run.stacks) {
        log_msg("--stacks writes one file per batch and dtype: run it for one --pass at a time");
        rc = 2;
    } else if (rc == 0 && c->model.n_passes == 1 && c->model.passes[0] != PASS_FORWARD && c->run.stacks) {
        log_msg("note: --stacks with --pass %s folds %s", layer_pass_name(c->model.passes[0]),
                c->model.passes[0] == PASS_TRAIN ? "each layer's forward and backward inside the median training step "
                                                   "(the loss left out)"
                                                 : "each layer's backward median, timed alone");
    }
    return rc;
}

/* The batches (0: the config's) and dtypes, each model's layers checked to fit memory
 * at every batch. 0, or an exit code. */
static int job_batches(measure_job *j, const cli *c, const int64_t *batch_args)
{
    char err[1024];
    j->batches = xmalloc((size_t)j->n_batches * sizeof *j->batches);
    j->n_dtypes = c->model.n_dtypes ? c->model.n_dtypes : 1;
    for (int d = 0; d < j->n_dtypes; d++)
        j->dtypes[d] = c->model.n_dtypes ? c->model.dtypes[d] : j->m->dtype;
    for (int b = 0; b < j->n_batches; b++) {
        j->batches[b] = batch_args[b] > 0 ? batch_args[b] : j->m->batch;
        for (int s = 0; s < j->n_shapes; s++) {
            model *ms = j->shapes ? j->shapes[s] : j->m;
            if (model_set_batch(ms, j->batches[b], err, sizeof err) != BENCH_OK ||
                isolated_fit(ms, j->dtypes, j->n_dtypes, c->mo.dedupe, err, sizeof err) != BENCH_OK) {
                if (j->n_shapes > 1)
                    log_msg("at %lld tokens after %lld cached: %s", (long long)model_tokens(ms),
                            (long long)model_kv_len(ms), err);
                else
                    log_msg("%s", err);
                return 2;
            }
        }
        j->largest = j->batches[b] > j->largest ? j->batches[b] : j->largest;
    }
    return 0;
}

/* The outputs opened, the run to resume read, the backends opened and checked to hold
 * the largest batch, the stacks files opened. 0, or an exit code. */
static int job_open(measure_job *j, const cli *c)
{
    char err[1024];
    int rc = open_outputs(c, &j->out);
    if (rc)
        return rc;
    j->out_open = true;
    if (c->run.resume && (!j->out.csv || !j->out.csv->target)) {
        if (j->out.csv) /* stdout, a FIFO, a device: a stream, nothing to read back */
            log_msg("--resume needs --csv FILE, a regular file holding the results of the run to continue: '%s' is "
                    "a stream", c->run.csv);
        else
            log_msg("--resume needs --csv FILE: the results of the run to continue");
        return 2;
    }
    if (c->run.resume && runner_read_previous(c->run.csv, j->m->name, &j->previous, &j->done, &j->n_done, err, sizeof err) !=
                         BENCH_OK) {
        log_msg("%s", err);
        return 2;
    }
    int nb = cli_open_backends(&c->be, j->bs, &j->skipped);
    if (nb < 0)
        return -nb;
    j->nb = nb;
    bool fits = true;
    for (int s = 0; s < j->n_shapes; s++) {
        model *ms = j->shapes ? j->shapes[s] : j->m;
        model_set_batch(ms, j->largest, err, sizeof err);
        fits = fits && cli_fits_backends(ms, j->bs, j->nb);
    }
    if (!fits || open_stacks(c, &j->out, j->bs, j->nb, j->batches, j->n_batches, j->dtypes, j->n_dtypes) != 0)
        return 2;
    return 0;
}

/* The reporters of a run: the tables (a sweep's summary, or run's console tables), the
 * CSV, the trace and the stacks; the JSON context is added last, by the caller. */
static void job_reporters(measure_job *j, const cli *c, bool sweep, reporter ***reps, int *nr)
{
    /* with --csv - (or a trace or stacks to stdout), that output owns stdout and the
     * tables go to stderr */
    FILE *tables = writes_stdout(&j->out) ? stderr : stdout;
    add_reporter(reps, nr, sweep ? report_sweep_create(tables, c->ro.format) : report_console_create(tables, &c->ro));
    if (j->out.csv)
        add_reporter(reps, nr, report_csv_create(j->out.csv, j->previous));
    if (j->out.trace)
        add_reporter(reps, nr, report_trace_create(j->out.trace));
    if (j->out.n_stacks)
        add_reporter(reps, nr, report_stacks_create(j->out.stacks, j->out.n_stacks));
}

int cmd_measure(int argc, char **argv, const cli *c, const int64_t *batch_args, int n_batches, bool sweep)
{
    measure_job j = {.n_batches = n_batches};
    int rc = cli_load_model(&c->model, batch_args[0], &j.m);
    if (rc)
        return rc;
    if ((rc = job_shapes(&j, c, batch_args[0])) != 0 || (rc = job_batches(&j, c, batch_args)) != 0 ||
        (rc = job_open(&j, c)) != 0) {
        job_free(&j);
        return rc;
    }
    char cache_note[400] = "";
    report_context cache_ctx = {0};
    int cache_rc = load_algo_cache(c, j.bs, j.nb, cache_note, sizeof cache_note, &cache_ctx);
    if (cache_rc > 0) {
        job_free(&j);
        return 2;
    }
    reporter **reps = NULL;
    int nr = 0;
    job_reporters(&j, c, sweep, &reps, &nr);
    measure_options mo = c->mo;
    mo.stop = &signals_interrupted;
    sched_probe probe = {.n = 0};
    /* the workers of a run share one choices file, so that they run the same kernels */
    char cache_tmp[] = "/tmp/layerbench-choices-XXXXXX";
    const char *cache = cache_rc < 0 ? NULL : c->run.algo_cache; /* a broken default is left alone */
    if (!cache && c->run.processes > 0 && !c->be.algo_heuristic) {
        int fd = mkstemp(cache_tmp);
        if (fd >= 0)
            close(fd), cache = cache_tmp;
    }
    measure_set base = worker_base(c, cache);
    if (c->run.processes == 0) /* else the workers watch their own threads */
        watch_contention(&mo, &probe);
    timing_mode modes[4];
    int n_modes = cli_split_modes(c->run.mode, modes);
    runner_plan plan = {
        .modes = modes, .n_modes = n_modes, .batches = j.batches, .n_batches = n_batches, .dtypes = j.dtypes,
        .n_dtypes = j.n_dtypes, .passes = c->model.passes, .n_passes = c->model.n_passes,
        .backends = j.bs, .n_backends = j.nb, .done = j.done, .n_done = j.n_done,
        .reps = reps, .n_reps = nr,
        .ctx = {.argc = argc, .argv = argv, .config = c->model.config, .mo = &c->mo, .modes = c->run.mode, .backends = j.bs,
                .n_backends = j.nb, .skipped = j.skipped, .algo_cache = cache_ctx.algo_cache,
                .algo_taken = cache_ctx.algo_taken, .algo_other_context = cache_ctx.algo_other_context,
                .algo_malformed = cache_ctx.algo_malformed,
                .resumed = j.done, .resumed_sets = j.n_done, /* listed as completed from the start */
                .processes = c->run.processes, .phase_band = c->run.phase_band},
        .sweep_progress = sweep && c->mo.progress,
        .probe_peaks = !c->run.no_peaks,
        .error = c->run.error,
        .procs = {c->run.processes, &base, j.n_shapes > 1, c->run.phase_band},
        .shapes = j.shapes, .n_shapes = j.shapes ? j.n_shapes : 0,
        .note = *cache_note ? cache_note : NULL,
        .stop = &signals_interrupted, /* caught since main() */
    };
    if (j.out.json) /* last: it says how the others' writes went */
        add_reporter(&plan.reps, &plan.n_reps, report_json_create(j.out.json, &plan.ctx));
    rc = runner_execute(j.m, &plan, &mo);
    if (!commit_outputs(&j.out) && (rc == 0 || rc == 1))
        rc = 1;
    if (cache && c->run.processes == 0) /* else the workers saved it */
        save_algo_cache(cache, j.bs, j.nb);
    if (rc == 0 && j.out.json)
        log_msg("wrote %s and its JSON context %s", c->run.csv, j.out.json->path);
    if (cache == cache_tmp)
        unlink(cache_tmp);
    sched_probe_close(&probe);
    free(plan.reps);
    job_free(&j);
    return rc;
}
