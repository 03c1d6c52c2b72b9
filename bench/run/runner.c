#include "runner.h"

#include "check.h"
#include "fileio.h"
#include "results_read.h"
#include "log.h"
#include "signals.h"
#include "sysinfo.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool is_done(const runner_plan *p, const char *backend, const model *m)
{
    for (int i = 0; i < p->n_done; i++)
        if (p->done[i].batch == m->batch && p->done[i].dtype == m->dtype && p->done[i].pass == m->pass &&
            p->done[i].tokens == model_tokens(m) &&
            p->done[i].kv_len == model_kv_len(m) && strcmp(p->done[i].backend, backend) == 0)
            return true;
    return false;
}

/* Each warning once: to stderr as it comes, and into the list for the JSON. */
static void warn(strbuf *list, const char *line)
{
    size_t n = strcspn(line, "\n");
    if (!n)
        return;
    for (const char *w = list->data; w && *w;) {
        size_t m = strcspn(w, "\n");
        if (m == n && strncmp(w, line, n) == 0)
            return;
        w += m + (w[m] == '\n');
    }
    log_warning("%.*s", (int)n, line);
    strbuf_append(list, line, n);
    strbuf_append(list, "\n", 1);
}

static void warn_lines(strbuf *list, const char *text)
{
    for (const char *w = text; w && *w;) {
        warn(list, w);
        w += strcspn(w, "\n");
        w += *w == '\n';
    }
}

/* --error: each layer's output against the fp32 reference, on the inputs and weights
 * bench check draws, rounded to the layer's dtype; untimed, after the set. A twin
 * (--dedupe) gets its own. */
static void measure_errors(run_result *res, const backend *b, uint64_t seed)
{
    for (int i = 0; i < res->m->n_layers; i++) {
        layer_result *r = &res->layers[i];
        if (!row_timed(r) && r->status != ROW_VIEW)
            continue;
        check_result c = check_layer(&res->m->layers[i], b, seed + (uint64_t)i);
        if (c.status == BENCH_OK || c.status == BENCH_ERR_CHECK) {
            r->has_error = true;
            r->rel_error = c.nonfinite ? INFINITY : c.rel_err;
        }
    }
}

/* What one set's results show: rows with too few samples, and a gap between the
 * chained forward and the sum of its layers that the in-model view explains. */
static void result_warnings(strbuf *list, const run_result *r, const measure_options *mo)
{
    char line[600];
    int few = 0, n = r->m->n_layers;
    for (int i = 0; i < n; i++)
        few += r->layers[i].status == ROW_OK && r->layers[i].st.n < mo->min_samples;
    if (r->has_model) /* the whole-model rows too */
        few += (r->chained.status == ROW_OK && r->chained.st.n < mo->min_samples) +
               (r->graph.status == ROW_OK && r->graph.st.n < mo->min_samples);
    if (few) {
        snprintf(line, sizeof line, "%s batch %lld: %d row%s kept fewer than %d samples before --timeout: their "
                                    "medians are rough (see ci_low_us, ci_high_us)",
                 r->backend, (long long)r->m->batch, few, few == 1 ? "" : "s", mo->min_samples);
        warn(list, line);
    }
    int contended = 0, timed = 0;
    for (int i = 0; i < n + 2; i++) {
        const layer_result *x = i < n ? &r->layers[i] : i == n ? &r->chained : &r->graph;
        timed += x->status == ROW_OK;
        contended += x->status == ROW_OK && x->contended;
    }
    if (contended) {
        snprintf(line, sizeof line, "%s batch %lld: %d of %d timed rows (%.0f%%) were contended: their threads waited for "
                                    "a CPU in over a quarter of their samples, or too many to keep --min-samples "
                                    "clean ones, so their figures are slower than this machine runs them (column "
                                    "contended)%s%s",
                 r->backend, (long long)r->m->batch, contended, timed, 100.0 * contended / (timed ? timed : 1),
                 *r->contention ? "; other processes used the CPUs: " : "", r->contention);
        warn(list, line);
    }
    if (!r->has_model || !row_timed(&r->chained) || r->sum_medians <= 0)
        return;
    double gap = (r->chained.st.median - r->sum_medians) / r->sum_medians;
    if (gap > -0.05 && gap < 0.05)
        return;
    bool train = r->m->pass == PASS_TRAIN;
    int len = snprintf(line, sizeof line, "%s batch %lld: the %s takes %+.1f%% against the sum of its layers alone",
                       r->backend, (long long)r->m->batch, train ? "training step" : "chained forward", 100 * gap);
    if (r->inmodel) {
        /* the kind whose layers differ most between alone and inside the forward */
        double best = 0, alone_k = 0, inside_k = 0;
        int kind = -1;
        for (int k = 0; k < LAYER_KIND_COUNT; k++) {
            double alone = 0, inside = 0;
            for (int i = 0; i < n; i++)
                if ((int)r->m->layers[i].kind == k && row_timed(&r->layers[i]) && row_timed(&r->inmodel[i]))
                    alone += r->layers[i].st.median, inside += r->inmodel[i].st.median;
            if (fabs(inside - alone) > fabs(best))
                best = inside - alone, kind = k, alone_k = alone, inside_k = inside;
        }
        if (kind >= 0 && alone_k > 0)
            snprintf(line + len, sizeof line - (size_t)len, "; most of it in the %s layers, %+.1f%% inside the %s "
                                                               "(in-model view)",
                     layer_kind_name((layer_kind)kind), 100 * (inside_k - alone_k) / alone_k, train ? "step" : "forward");
    }
    warn(list, line);
}

/* Whether the chained forward, or training step, fits in the host's memory beside the
 * isolated layers (a model larger than memory is measured layer by layer: --dedupe sets
 * up one of each set of identical layers); else the reason, for its row. A step as
 * planned (model_train_plan: weights, their gradients, activations and theirs, the
 * optimizer's state and master weights) and a packed copy of the weights, which the
 * kernels keep. Device memory is checked when the backends open (cli_fits_backends). */
static bool chained_fits(const model *m, const measure_options *mo, char *why, size_t len)
{
    bool train = m->pass == PASS_TRAIN;
    model_train_memory tm = {0};
    if (train)
        model_train_plan(m, &tm);
    int64_t avail = bench_mem_available(), iso = model_isolated_bytes(m, mo->dedupe);
    int64_t chain = train ? tm.peak_bytes + tm.weight_bytes : model_chained_bytes(m);
    char a[32], b[32], c[32];
    if (avail < 0 || iso + chain <= avail)
        return true;
    snprintf(why, len, "not run: the %s needs %s (%s) beside the isolated layers' %s, and %s is available",
             train ? "training step" : "chained forward", bench_format_bytes(chain, a, sizeof a),
             train ? "as planned, and a packed copy of the weights" : "weights and activations",
             bench_format_bytes(iso, b, sizeof b), bench_format_bytes(avail, c, sizeof c));
    return false;
}

/* A run as it goes: its warnings, each backend's floor and peaks once measured, and how
 * it has gone so far. */
typedef struct run_state {
    strbuf warnings;
    backend_peaks *peaks;
    timer_floor *floor;
    bool *floor_known, *peaks_known;
    bool failed, io_ok, interrupted, finished_any;
    char where[1200]; /* where it was interrupted */
} run_state;

/* Backend k's timer floor and (unless --no-peaks) peaks, measured once, before its first
 * set. */
static void first_use(runner_plan *p, int k, const measure_options *mo, run_state *rs)
{
    const backend *bk = &p->backends[k];
    char err[1024];
    if (rs->floor_known[k])
        return;
    if (measure_timer_floor(bk, mo, &rs->floor[k], err, sizeof err) != BENCH_OK) {
        char line[1200];
        snprintf(line, sizeof line, "%s: the timer's floor could not be measured: %s", bk->ops->name, err);
        warn(&rs->warnings, line);
    }
    rs->floor_known[k] = true;
    if (!p->probe_peaks || !bk->ops->device.peaks)
        return;
    if (mo->progress)
        log_progress("%s: measuring the machine's peaks (--no-peaks skips it)", bk->ops->name);
    if (bk->ops->device.peaks(bk->ctx, &rs->peaks[k]) == BENCH_OK) {
        rs->peaks_known[k] = true;
    } else {
        char line[700];
        snprintf(line, sizeof line, "%s: the peaks could not be measured (no roofline): %s", bk->ops->name,
                 backend_last_error(bk));
        warn(&rs->warnings, line);
        memset(&rs->peaks[k], 0, sizeof rs->peaks[k]);
    }
    backend_clear_error(bk);
}

/* One (batch, dtype, shape) on backend k: every timing mode asked for, the whole-model
 * rows once, with the first, where they fit in memory; each result to every reporter.
 * dt: how the set is named after its batch. */
static void run_set(runner_plan *p, model *m, int k, const measure_options *mo, const char *dt, run_state *rs)
{
    const backend *bk = &p->backends[k];
    char err[1024], too_big[400];
    bool fits = chained_fits(m, mo, too_big, sizeof too_big);
    if (!fits)
        warn(&rs->warnings, too_big + strlen("not run: "));
    for (int md = 0; !rs->interrupted && md < p->n_modes; md++) {
        run_result res;
        bool whole = md == 0 && fits;
        bench_status st =
            p->procs.count > 0
                ? procs_measure(&p->procs, m, bk, mo, p->modes[md], &rs->floor[k], whole, &res, err, sizeof err)
                : measure_model(m, bk, mo, p->modes[md], &rs->floor[k], whole, &res, err, sizeof err);
        if (md == 0 && !fits && st != BENCH_ERR_INTERRUPTED)
            measure_model_not_run(&res, bk, too_big);
        if (st == BENCH_ERR_INTERRUPTED) {
            rs->interrupted = true;
            snprintf(rs->where, sizeof rs->where, "batch %lld%s on %s (%s timing), %s", (long long)m->batch, dt,
                     bk->ops->name, measure_mode_name(p->modes[md]), err);
        } else {
            if (st != BENCH_OK) {
                log_msg("%d row%s failed; the first: %s", res.failed, res.failed == 1 ? "" : "s", err);
                rs->failed = true;
            }
            result_warnings(&rs->warnings, &res, mo);
            if (p->error)
                measure_errors(&res, bk, mo->seed);
            res.peaks = rs->peaks[k];
            for (int r = 0; r < p->n_reps; r++)
                rs->io_ok &= p->reps[r]->run(p->reps[r], &res) == BENCH_OK;
        }
        run_result_free(&res);
    }
    if (rs->interrupted)
        return;
    if (bk->ops->device.warnings) {
        char bw[2048];
        bk->ops->device.warnings(bk->ctx, bw, sizeof bw);
        warn_lines(&rs->warnings, bw);
    }
    p->ctx.warnings = rs->warnings.data;
    /* in order, and none after one that failed: the JSON context comes last and lists
     * the set only where every file before it holds it */
    for (int r = 0; rs->io_ok && r < p->n_reps; r++)
        if (p->reps[r]->checkpoint)
            rs->io_ok &= p->reps[r]->checkpoint(p->reps[r]) == BENCH_OK;
    rs->finished_any = rs->io_ok;
}

int runner_execute(model *m, runner_plan *p, const measure_options *mo)
{
    run_state rs = {.io_ok = true, .finished_any = p->n_done > 0};
    rs.peaks = xcalloc((size_t)p->n_backends, sizeof *rs.peaks);
    rs.floor = xcalloc((size_t)p->n_backends, sizeof *rs.floor);
    rs.floor_known = xcalloc((size_t)p->n_backends, sizeof *rs.floor_known);
    rs.peaks_known = xcalloc((size_t)p->n_backends, sizeof *rs.peaks_known);
    char err[1024];
    p->ctx.resumed = p->done, p->ctx.resumed_sets = p->n_done;
    p->ctx.floors = rs.floor, p->ctx.floor_known = rs.floor_known;
    p->ctx.peaks = rs.peaks, p->ctx.peaks_known = rs.peaks_known;
    p->ctx.interrupted = NULL;
    sysinfo_check_host(&rs.warnings);
    if (p->note)
        strbuf_printf(&rs.warnings, "%s\n", p->note);
    for (const char *w = rs.warnings.data; w && *w; w += strcspn(w, "\n") + 1)
        log_warning("%.*s", (int)strcspn(w, "\n"), w);
    int n_dtypes = p->n_dtypes > 0 ? p->n_dtypes : 1, n_shapes = p->n_shapes > 0 ? p->n_shapes : 1;
    int n_passes = p->n_passes > 0 ? p->n_passes : 1, per_shape = p->n_batches * n_dtypes * n_passes;
    int total = n_shapes * per_shape * p->n_backends, n = 0;
    for (int s = 0; rs.io_ok && !rs.interrupted && s < n_shapes * per_shape; s++) {
        if (p->n_shapes > 0)
            m = p->shapes[s / per_shape];
        int in_shape = s % per_shape; /* [batch][dtype][pass] */
        int64_t batch = p->batches[in_shape / (n_dtypes * n_passes)];
        model_set_batch(m, batch, err, sizeof err); /* checked for every batch before */
        if (p->n_dtypes > 0)
            model_set_dtype(m, p->dtypes[in_shape / n_passes % n_dtypes]);
        if (p->n_passes > 0)
            model_set_pass(m, p->passes[in_shape % n_passes]);
        char dt[96] = "";
        if (p->n_dtypes > 1)
            snprintf(dt, sizeof dt, " in %s", dtype_name(m->dtype));
        if (m->pass != PASS_FORWARD || n_passes > 1)
            snprintf(dt + strlen(dt), sizeof dt - strlen(dt), ", %s", layer_pass_name(m->pass));
        if (p->n_shapes > 1)
            snprintf(dt + strlen(dt), sizeof dt - strlen(dt), ", %lld tokens after %lld cached", (long long)model_tokens(m),
                     (long long)(model_kv_len(m) > 0 ? model_kv_len(m) : 0));
        for (int k = 0; rs.io_ok && !rs.interrupted && k < p->n_backends; k++) {
            const char *name = p->backends[k].ops->name;
            n++;
            if (p->stop && *p->stop) { /* a signal before the set started (the set-up, the last set's end) */
                rs.interrupted = true;
                snprintf(rs.where, sizeof rs.where, "batch %lld%s on %s, before it started", (long long)batch, dt, name);
            } else if (is_done(p, name, m)) {
                log_msg("batch %lld%s on %s: kept from the previous run (--resume)", (long long)batch, dt, name);
            } else {
                if (p->sweep_progress)
                    log_progress("batch %lld%s (%d/%d) on %s\n", (long long)batch, dt, n, total, name);
                first_use(p, k, mo, &rs);
                run_set(p, m, k, mo, dt, &rs);
            }
        }
    }
    if (!rs.interrupted && p->stop && *p->stop) { /* after the last set: the run did not end as asked */
        rs.interrupted = true;
        snprintf(rs.where, sizeof rs.where, "the run's end, after every set had finished");
    }
    p->ctx.warnings = rs.warnings.data;
    p->ctx.interrupted = rs.interrupted ? rs.where : NULL;
    for (int r = 0; r < p->n_reps; r++)
        rs.io_ok &= p->reps[r]->finish(p->reps[r], rs.io_ok && !rs.interrupted) == BENCH_OK;
    if (rs.interrupted)
        log_raw("\nbench: interrupted during %s; %s\n", rs.where,
                rs.finished_any ? "the finished sets are kept (--resume continues)" : "nothing had finished");
    p->ctx.warnings = NULL, p->ctx.interrupted = NULL;
    p->ctx.floors = NULL, p->ctx.floor_known = NULL, p->ctx.peaks = NULL, p->ctx.peaks_known = NULL;
    strbuf_free(&rs.warnings);
    free(rs.floor), free(rs.floor_known), free(rs.peaks), free(rs.peaks_known);
    if (rs.interrupted)
        return 128 + (p->stop && *p->stop ? *p->stop : SIGINT);
    return rs.failed || !rs.io_ok ? 1 : 0;
}

bench_status runner_read_previous(const char *path, const char *model_name, char **text, report_set **sets,
                                  int *n_sets, char *err, size_t errlen)
{
    *text = NULL;
    *sets = NULL;
    *n_sets = 0;
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT)
        return BENCH_OK; /* nothing to resume: a new run */
    results_file f;
    char why[1400];
    if (results_read_csv(path, &f, why, sizeof why) != BENCH_OK) {
        snprintf(err, errlen, "--resume: %s", why);
        return BENCH_ERR_USAGE;
    }
    char *json = report_json_path(path);
    bench_status st = results_read_json(json, &f, why, sizeof why);
    if (st != BENCH_OK) {
        snprintf(err, errlen, "--resume: %s", why);
        free(json);
        results_free(&f);
        return BENCH_ERR_USAGE;
    }
    if (!f.has_json && f.n_sets)
        log_msg("--resume: %s is not there: nothing says which sets of %s finished, so none is kept", json, path);
    free(json);
    for (int i = 0; i < f.n_sets; i++)
        if (strcmp(f.sets[i].model, model_name) != 0) {
            snprintf(err, errlen, "--resume: '%s' holds model '%s', not '%s'", path, f.sets[i].model, model_name);
            results_free(&f);
            return BENCH_ERR_USAGE;
        }
    /* the whole sets are kept, each with its rows; the rest is measured again */
    strbuf kept = {0};
    char *header = report_csv_header();
    strbuf_append(&kept, header, strlen(header));
    free(header);
    *sets = xcalloc((size_t)(f.n_sets ? f.n_sets : 1), sizeof **sets);
    for (int i = 0; i < f.n_sets; i++) {
        char what[200];
        if (!results_set_whole(&f, i, why, sizeof why)) {
            if (f.has_json)
                log_msg("--resume: %s in %s: %s: measured again", results_set_describe(&f.sets[i].key, what, sizeof what),
                        path, why);
            continue;
        }
        results_set_csv(&f, i, &kept);
        (*sets)[*n_sets] = f.sets[i].key;
        (*sets)[(*n_sets)++].rows = f.sets[i].n_rows;
    }
    results_free(&f);
    *text = kept.data;
    return BENCH_OK;
}
