/* The JSON run context beside the CSV (docs/outputs.md): the machine, the build, the
 * options and each finished set with how it was measured, rewritten at every
 * checkpoint; and the pieces the runner collects for it as the sets finish. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <yaml.h>

#include "gbench_shim.h"
#include "log.h"
#include "report.h"
#include "stats.h"
#include "sysinfo.h"
#include "version.h"

#ifndef LAYERBENCH_BUILD_TYPE
#define LAYERBENCH_BUILD_TYPE "unknown"
#endif

/* A finished (backend, batch) set for the JSON; with its memory where it was measured
 * here (not for sets kept by --resume). */
static void json_completed(strbuf *b, const char *backend, int64_t batch, dtype_t dtype, layer_pass pass, int64_t tokens,
                           int64_t kv_len, int64_t rows, const model *m, int64_t workspace, int64_t device_bytes,
                           const char *measurement)
{
    strbuf_printf(b, "%s{\"backend\": ", b->len ? ", " : "");
    strbuf_json(b, backend);
    strbuf_printf(b, ", \"batch\": %lld, \"dtype\": \"%s\", \"pass\": \"%s\"", (long long)batch, dtype_name(dtype),
                  layer_pass_name(pass));
    if (rows >= 0) /* what the CSV holds of it: --resume and merge check it (results_read.h) */
        strbuf_printf(b, ", \"rows\": %lld", (long long)rows);
    if (tokens >= 0) /* a decoder's token shape */
        strbuf_printf(b, ", \"tokens\": %lld", (long long)tokens);
    if (kv_len >= 0)
        strbuf_printf(b, ", \"kv_len\": %lld", (long long)kv_len);
    if (m && model_mixed(m)) { /* the layers the config keeps in their own dtype */
        strbuf_printf(b, ", \"layers_in_own_dtype\": {");
        bool first = true;
        for (int i = 0; i < m->n_layers; i++)
            if (m->layers[i].dtype != m->dtype) {
                strbuf_printf(b, "%s", first ? "" : ", ");
                strbuf_json(b, m->layers[i].name);
                strbuf_printf(b, ": \"%s\"", dtype_name(m->layers[i].dtype));
                first = false;
            }
        strbuf_printf(b, "}");
    }
    if (measurement && *measurement)
        strbuf_printf(b, ", \"measurement\": [%s]", measurement);
    if (m && m->note) { /* a config.json's safetensors headers, checked against the layers */
        strbuf_printf(b, ", \"weights_checked\": ");
        strbuf_json(b, m->note);
    }
    if (m) {
        model_memory mm;
        model_memory_plan(m, &mm);
        strbuf_printf(b, ", \"memory\": {\"weight_bytes\": %lld, \"peak_activation_bytes\": %lld, \"peak_layer\": ",
                      (long long)mm.weight_bytes, (long long)mm.peak_activation_bytes);
        strbuf_json(b, mm.peak_layer >= 0 ? m->layers[mm.peak_layer].name : "");
        strbuf_printf(b, ", \"largest_workspace_bytes\": %lld, \"predicted_peak_bytes\": %lld, "
                         "\"all_activation_bytes\": %lld",
                      (long long)workspace, (long long)(mm.weight_bytes + mm.peak_activation_bytes + workspace),
                      (long long)mm.all_activation_bytes);
        if (device_bytes >= 0)
            strbuf_printf(b, ", \"forward_device_bytes_measured\": %lld", (long long)device_bytes);
        strbuf_append(b, "}", 1);
    }
    strbuf_append(b, "}", 1);
}

/* The ceilings of one backend, as a JSON member. */
static void json_peaks(strbuf *peaks, const char *backend, const backend_peaks *pk)
{
    strbuf_printf(peaks, "%s\"%s\": {\"flops_per_s\": %.4e, \"bytes_per_s\": %.4e, \"cache_bytes_per_s\": %.4e, "
                         "\"cache_bytes\": %lld, \"compute_probe\": ",
                  peaks->len ? ", " : "", backend, pk->flops_per_s, pk->bytes_per_s, pk->cache_bytes_per_s,
                  (long long)pk->cache_bytes);
    strbuf_json(peaks, pk->compute_probe);
    strbuf_append(peaks, ", \"bandwidth_probe\": ", 21);
    strbuf_json(peaks, pk->bandwidth_probe);
    strbuf_printf(peaks, ", \"dtypes\": {");
    for (int t = 0, first = 1; t < DTYPE_COUNT; t++)
        if (pk->dtype_flops_per_s[t] > 0) {
            strbuf_printf(peaks, "%s\"%s\": {\"flops_per_s\": %.4e, \"compute_probe\": ", first ? "" : ", ",
                          dtype_name((dtype_t)t), pk->dtype_flops_per_s[t]);
            strbuf_json(peaks, pk->dtype_probe[t]);
            strbuf_append(peaks, "}", 1);
            first = 0;
        }
    strbuf_append(peaks, "}}", 2);
}

/* How one mode of a set was measured, as a JSON object: its processes and how far
 * their medians lay apart, its canary and how far it drifted, its contended rows, and a
 * decode step's read stream over its rounds. */
static void json_measurement(strbuf *j, const run_result *r)
{
    double canary, drift, spread[4096];
    int ns = 0, rows = 0, contended = 0;
    measure_canary_summary(r, &canary, &drift);
    const layer_result *whole[2] = {&r->chained, &r->graph};
    for (int i = 0; i < r->m->n_layers + 2; i++) {
        const layer_result *x = i < r->m->n_layers ? &r->layers[i] : whole[i - r->m->n_layers];
        if (x->status != ROW_OK)
            continue;
        rows++, contended += x->contended;
        if (x->processes >= 2 && ns < 4096)
            spread[ns++] = x->process_spread;
    }
    stats sp = stats_compute(spread, ns);
    strbuf_printf(j, "%s{\"mode\": \"%s\", \"processes\": %d, \"process_spread_pct\": {\"median\": %.3f, "
                     "\"max\": %.3f}, \"canary_us\": %.4f, \"canary_drift_pct\": %.3f, \"canary_rounds\": %d, "
                     "\"timed_rows\": %d, \"contended_rows\": %d, \"processes_set_aside\": %d, "
                     "\"set_aside_slower_pct\": %.1f, \"contention\": ",
                  j->len ? ", " : "", measure_mode_name(r->mode), r->processes, 100 * sp.median, 100 * sp.max, 1e6 * canary, 100 * drift,
                  r->n_canary, rows, contended, r->processes_aside, 100 * r->phase_slowdown);
    strbuf_json(j, r->contention);
    double med, lo, hi;
    measure_stream_summary(r, &med, &lo, &hi);
    if (r->n_stream > 0)
        strbuf_printf(j, ", \"stream_bytes_per_s\": {\"median\": %.4e, \"min\": %.4e, \"max\": %.4e, \"rounds\": %d}",
                      med, lo, hi, r->n_stream);
    else
        strbuf_append(j, ", \"stream_bytes_per_s\": null", 28);
    strbuf_append(j, "}", 1);
}

/* The timer's floor of one backend, as a JSON member. */
static void json_floor(strbuf *floors, const char *backend, const timer_floor *f)
{
    strbuf_printf(floors, "%s\"%s\": {\"warm\": %.3e, \"cold\": %.3e}", floors->len ? ", " : "", backend, f->warm,
                  f->cold);
}

char *report_json_path(const char *csv_path)
{
    size_t n = strlen(csv_path);
    if (n > 4 && strcmp(csv_path + n - 4, ".csv") == 0)
        return xasprintf("%.*s.json", (int)(n - 4), csv_path);
    return xasprintf("%s.json", csv_path);
}

/* A string, or null. */
static void json_str_or_null(strbuf *f, const char *s)
{
    if (s)
        strbuf_json(f, s);
    else
        strbuf_printf(f, "null");
}

/* What made the file: the tool, its build, the command and when and where it ran. */
static void json_provenance(strbuf *f, const report_context *ctx)
{
    char host[256], date[64];
    time_t now = time(NULL);
    sysinfo_host_name(host, sizeof host);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    strbuf_printf(f, "{\n  \"tool\": \"layerbench\",\n  \"layerbench_version\": ");
    strbuf_json(f, LAYERBENCH_VERSION);
    strbuf_printf(f, ",\n  \"git_revision\": ");
    strbuf_json(f, layerbench_git_revision());
    strbuf_printf(f, ",\n  \"build_type\": ");
    strbuf_json(f, LAYERBENCH_BUILD_TYPE);
    strbuf_printf(f, ",\n  \"compiler\": ");
    strbuf_json(f, __VERSION__);
    strbuf_printf(f, ",\n  \"command_line\": [");
    for (int i = 0; i < ctx->argc; i++) {
        strbuf_printf(f, "%s", i ? ", " : "");
        strbuf_json(f, ctx->argv[i]);
    }
    strbuf_printf(f, "],\n  \"config\": ");
    strbuf_json(f, ctx->config);
    strbuf_printf(f, ",\n  \"date_utc\": ");
    strbuf_json(f, date);
    strbuf_printf(f, ",\n  \"host\": ");
    strbuf_json(f, host);
    if (getenv("SLURM_JOB_ID")) { /* a task of a Slurm job (bench sweep --slurm): where it ran */
        static const char *const vars[][2] = {{"job_id", "SLURM_JOB_ID"}, {"array_job_id", "SLURM_ARRAY_JOB_ID"},
                                              {"array_task_id", "SLURM_ARRAY_TASK_ID"}, {"node", "SLURMD_NODENAME"},
                                              {"cluster", "SLURM_CLUSTER_NAME"}, {"partition", "SLURM_JOB_PARTITION"}};
        strbuf_printf(f, ",\n  \"slurm\": {");
        for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
            strbuf_printf(f, "%s\"%s\": ", i ? ", " : "", vars[i][0]);
            json_str_or_null(f, getenv(vars[i][1]));
        }
        strbuf_printf(f, "}");
    }
}

/* The machine and the libraries. */
static void json_machine(strbuf *f)
{
    char cpu[256], os[600], isa[160];
    sysinfo_cpu_model(cpu, sizeof cpu);
    strbuf_printf(f, ",\n  \"os\": ");
    strbuf_json(f, sysinfo_os(os, sizeof os));
    strbuf_printf(f, ",\n  \"cpu_model\": ");
    strbuf_json(f, cpu);
    double load[3] = {-1, -1, -1};
    getloadavg(load, 3);
    strbuf_printf(f, ",\n  \"cpu_isa\": ");
    strbuf_json(f, sysinfo_cpu_isa(isa, sizeof isa));
    strbuf_printf(f, ",\n  \"cpu_cores_online\": %ld,\n  \"load_average\": [%.2f, %.2f, %.2f],\n",
                  sysconf(_SC_NPROCESSORS_ONLN), load[0], load[1], load[2]);
    strbuf_printf(f, "  \"libraries\": {\"libyaml\": ");
    strbuf_json(f, yaml_get_version_string());
    strbuf_printf(f, ", \"google_benchmark\": ");
    strbuf_json(f, gbs_version());
    strbuf_printf(f, "},\n");
}

/* The measurement's options and the backends. */
static void json_options(strbuf *f, const report_context *ctx)
{
    strbuf_printf(f, "  \"options\": {\"modes\": ");
    strbuf_json(f, ctx->modes ? ctx->modes : "auto");
    strbuf_printf(f, ", \"warmup_time_s\": %g, \"min_time_s\": %g, \"max_noise\": %g, \"min_samples\": %d, "
                     "\"timeout_s\": %g, \"dedupe\": %s, \"seed\": %llu, \"processes\": %d, \"phase_band_pct\": ",
                  ctx->mo->warmup_time, ctx->mo->min_time, ctx->mo->max_noise, ctx->mo->min_samples, ctx->mo->timeout,
                  ctx->mo->dedupe ? "true" : "false", (unsigned long long)ctx->mo->seed, ctx->processes);
    if (ctx->phase_band < 0)
        strbuf_printf(f, "null");
    else
        strbuf_printf(f, "%g", 100 * ctx->phase_band);
    strbuf_printf(f, ", \"disturbed_share\": %g, \"algo_cache\": ", MEASURE_DISTURBED_SHARE);
    if (ctx->algo_cache) {
        strbuf_append(f, "{\"path\": ", 9);
        strbuf_json(f, ctx->algo_cache);
        strbuf_printf(f, ", \"taken\": %d, \"other_context\": %d, \"malformed\": %d}", ctx->algo_taken,
                      ctx->algo_other_context, ctx->algo_malformed);
    } else {
        strbuf_printf(f, "null");
    }
    strbuf_printf(f, "},\n");
    strbuf_printf(f, "  \"backends\": {");
    for (int i = 0; i < ctx->n_backends; i++) {
        strbuf_printf(f, "%s\n    ", i ? "," : "");
        strbuf_json(f, ctx->backends[i].ops->name);
        strbuf_printf(f, ": %s", ctx->backends[i].ops->device.describe(ctx->backends[i].ctx));
    }
    strbuf_printf(f, "\n  },\n  \"skipped_backends\": ");
    json_str_or_null(f, ctx->skipped);
}

/* How far the run got, what each backend's timer and peaks measured, and the warnings. */
static void json_outcome(strbuf *f, const report_context *ctx, const char *state, const char *completed)
{
    /* complete, running (a checkpoint) or interrupted (where) */
    strbuf_printf(f, ",\n  \"state\": ");
    strbuf_json(f, state);
    strbuf_printf(f, ",\n  \"interrupted\": ");
    json_str_or_null(f, ctx->interrupted);
    strbuf_printf(f, ",\n  \"completed\": [%s],\n  \"resumed_sets\": %d", completed ? completed : "",
                  ctx->resumed_sets);
    strbuf floors = {0}, peaks = {0};
    for (int i = 0; i < ctx->n_backends; i++) {
        const char *name = ctx->backends[i].ops->name;
        if (ctx->floor_known && ctx->floor_known[i])
            json_floor(&floors, name, &ctx->floors[i]);
        if (ctx->peaks_known && ctx->peaks_known[i])
            json_peaks(&peaks, name, &ctx->peaks[i]);
    }
    strbuf_printf(f, ",\n  \"timer_floor_s\": {%s}", floors.data ? floors.data : "");
    strbuf_printf(f, ",\n  \"peaks\": {%s}", peaks.data ? peaks.data : "");
    strbuf_free(&floors), strbuf_free(&peaks);
    strbuf_printf(f, ",\n  \"warnings\": [");
    for (const char *w = ctx->warnings; w && *w;) {
        const char *nl = strchr(w, '\n');
        size_t n = nl ? (size_t)(nl - w) : strlen(w);
        char *line = xasprintf("%.*s", (int)n, w);
        strbuf_printf(f, "%s\n    ", w == ctx->warnings ? "" : ",");
        strbuf_json(f, line);
        free(line);
        w += n + (nl != NULL);
    }
    strbuf_printf(f, "%s]\n}\n", ctx->warnings && *ctx->warnings ? "\n  " : "");
}

/* The whole context, in the state given, with the finished sets' JSON objects. */
static bench_status json_write(bench_output *out, const report_context *ctx, const char *state, const char *completed)
{
    strbuf f = {0};
    json_provenance(&f, ctx);
    json_machine(&f);
    json_options(&f, ctx);
    json_outcome(&f, ctx, state, completed);
    char err[512];
    bench_status st = bench_output_write(out, f.data, f.len, err, sizeof err);
    if (st != BENCH_OK)
        log_msg("%s", err);
    strbuf_free(&f);
    return st;
}

/* ---- the reporter ----------------------------------------------------------------------- */

typedef struct json_reporter {
    reporter base;
    bench_output *out;          /* borrowed */
    const report_context *ctx;  /* borrowed */
    strbuf completed;           /* the finished sets' objects, the resumed ones first */
    /* the set being reported: its first result's backend and batch, its model, the
     * largest workspace of its layers, the forward's device memory, and its modes */
    bool in_set;
    char backend[16];
    int64_t batch;
    dtype_t dtype;
    const model *m;
    int64_t workspace, device_bytes;
    int64_t rows;               /* the CSV rows of the set's results so far */
    strbuf measurement;
} json_reporter;

static bench_status json_run(reporter *rep, const run_result *res)
{
    json_reporter *j = (json_reporter *)rep;
    if (!j->in_set) {
        j->in_set = true;
        snprintf(j->backend, sizeof j->backend, "%s", res->backend);
        j->batch = res->m->batch;
        j->dtype = res->m->dtype;
        j->m = res->m;
        j->workspace = 0, j->device_bytes = -1, j->rows = 0;
    }
    j->rows += report_csv_rows(res);
    json_measurement(&j->measurement, res);
    for (int i = 0; i < res->m->n_layers; i++)
        if (res->layers[i].workspace_bytes > j->workspace)
            j->workspace = res->layers[i].workspace_bytes;
    if (res->has_model)
        j->device_bytes = res->forward_device_bytes;
    return BENCH_OK;
}

static bench_status json_checkpoint(reporter *rep)
{
    json_reporter *j = (json_reporter *)rep;
    if (j->in_set)
        json_completed(&j->completed, j->backend, j->batch, j->dtype, j->m->pass, model_tokens(j->m), model_kv_len(j->m), j->rows, j->m,
                       j->workspace, j->device_bytes,
                       j->measurement.data);
    j->in_set = false;
    strbuf_free(&j->measurement);
    return json_write(j->out, j->ctx, "running", j->completed.data);
}

static bench_status json_finish(reporter *rep, bool ok)
{
    json_reporter *j = (json_reporter *)rep;
    bench_status st = BENCH_OK;
    /* A run that finished no set leaves the file as it was: its CSV was not written
     * either (a CSV write that failed, an interruption before the first set), and the
     * two must describe the same sets (a previous run's CSV beside this run's JSON would
     * not). */
    if (j->completed.len || (ok && !j->ctx->interrupted))
        st = json_write(j->out, j->ctx, j->ctx->interrupted ? "interrupted" : ok ? "complete" : "failed",
                        j->completed.data);
    strbuf_free(&j->completed), strbuf_free(&j->measurement);
    free(j);
    return st;
}

reporter *report_json_create(bench_output *out, const report_context *ctx)
{
    json_reporter *j = xcalloc(1, sizeof *j);
    j->base.run = json_run;
    j->base.checkpoint = json_checkpoint;
    j->base.finish = json_finish;
    j->out = out;
    j->ctx = ctx;
    for (int i = 0; i < ctx->resumed_sets; i++)
        json_completed(&j->completed, ctx->resumed[i].backend, ctx->resumed[i].batch, ctx->resumed[i].dtype,
                       ctx->resumed[i].pass,
                       ctx->resumed[i].tokens, ctx->resumed[i].kv_len, ctx->resumed[i].rows, NULL, 0,
                       -1, NULL);
    return &j->base;
}
