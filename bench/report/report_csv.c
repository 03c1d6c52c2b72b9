/* The tidy CSV (the JSON context beside it is report_json.c). The CSV schema is defined here and only here
 * (CSV_COLUMNS); docs/csv.md documents it and a test keeps the two in step. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "log.h"

/* X(name, in_list, doc): in_list marks the columns `bench list --csv` writes too. */
#define CSV_COLUMNS(X)                                                                                           \
    X(model, 1, "model name from the config")                                                                  \
    X(backend, 0, "backend that ran the row: cpu, onednn or cuda")                                                     \
    X(mode, 0, "how the row was timed: warm (one call per sample, caches as the previous sample left them), cold (caches flushed before each sample), batch (many calls per sample, times per call), inmodel (the layer inside the chained forward, or a train set's step), chained (the whole forward, or a train set's training step), graph (cuda: the forward as one graph launch), transfer (model input/output copies)") \
    X(batch, 1, "batch size")                                                                                   \
    X(dtype, 1, "the run's dtype, an axis like batch (--dtype, else the config's dtype:): fp32, tf32, bf16, fp16 or int8; bench compare matches rows of the same dtype") \
    X(pass, 1, "forward; backward: the layer's gradients with respect to its inputs and its weights; or train: its forward in training mode then its backward, and the chained row the whole training step (--pass, an axis like dtype, docs/training.md); bench compare, --resume and merge match rows of the same pass") \
    X(tokens, 1, "a decoder's tokens per sequence (--tokens, --phase; the config's input [T]); empty for a model without token ids; bench compare and --resume match rows of the same tokens") \
    X(kv_len, 1, "a decoder's tokens already in the KV cache (--kv-len, --phase); empty for a model without attention; part of compare's and --resume's key like tokens") \
    X(layer_dtype, 1, "the dtype the row's layer stores its tensors in and runs in: dtype, or the layer's own where the config gives it one (a mixed model), or fp32 for a kind that does not quantize in an int8 model; bytes count its element size") \
    X(threads, 0, "CPU threads used by OpenBLAS and the OpenMP loops")                                         \
    X(layer_index, 1, "position in execution order, from 0; -1 for the model row")                              \
    X(layer_name, 1, "qualified name as in PyTorch's module paths (layer1.0.conv1); the model name for the model row") \
    X(kind, 1, "layer kind (conv2d, batchnorm2d, ...); model for the whole forward; copy for transfers")      \
    X(part, 0, "in-model rows of a layer's parts (multihead_attention: in_proj, qk, softmax, av, out_proj, docs/outputs.md; in a train set every layer's forward and backward inside the step, a conv2d's or linear's backward as backward data and backward weights, and with --optimizer each update): the part, with layer_name the layer's name plus .part and macs, flops and bytes the part's; empty for every other row") \
    X(input_shape, 1, "input shape NxCxHxW or NxF; an add lists its first input")                              \
    X(output_shape, 1, "output shape")                                                                          \
    X(params, 1, "learnable parameters, as torch counts them")                                                  \
    X(macs, 1, "multiply-accumulates (conv2d, linear)")                                                          \
    X(flops, 1, "floating-point operations, see docs/flops.md")                                                 \
    X(bytes, 1, "bytes read and written if every tensor moves once (inputs, weights, output)")                   \
    X(intensity, 1, "arithmetic intensity, flops / bytes (FLOP per byte): where the row sits on the roofline's x axis") \
    X(weight_bytes, 1, "bytes of the layer's weights (the model row: all weights)")                           \
    X(input_bytes, 1, "bytes of the layer's inputs (the model row: the model's input)")                       \
    X(output_bytes, 1, "bytes of the layer's output; 0 for a view (the model row: the model's output)")       \
    X(parameters, 1, "the layer's non-default parameters, e.g. kernel_size=3x3 padding=1x1")                    \
    X(inputs, 1, "layer_index of the layers whose outputs this layer reads, space-separated; -1 is the model input") \
    X(rel_error, 0, "with --error, the isolated rows: the relative L2 error of the layer's output against the fp32 reference run on the same inputs and weights rounded to layer_dtype (bench check's measure; inf where an output is not finite); empty otherwise") \
    X(impl, 0, "implementation the backend chose at setup (im2col+sgemm, gemm-1x1, the cuDNN algorithm, ...)") \
    X(kernels, 0, "the kernels one call of the layer runs, in launch order, separated by '; ': on cuda each kernel's name (as the CUDA driver gives it, mangled) with its grid and block, read from a CUDA graph capture of one untimed call; on cpu and onednn the kernel impl names (impl without the search's remarks); empty where they could not be told") \
    X(workspace_bytes, 0, "workspace the layer's setup allocated (im2col buffer, cuDNN workspace)")            \
    X(status, 0, "ok; dedupe (timing reused from dedupe_of); view (flatten, dropout: nothing runs, not timed); skipped (the backend cannot run it); failed (setup or timing failed; the run went on). note says why")                                                                                        \
    X(dedupe_of, 0, "with --dedupe, the layer_index whose timing this row reuses; -1 otherwise")               \
    X(samples, 0, "timed samples behind the statistics (warm-up, estimation and re-warming samples excluded)")  \
    X(discarded, 0, "samples run but not kept: warm-up, Google Benchmark's estimation, the first of each chunk")  \
    X(launches, 0, "launches per timed sample: 1, or N in batch mode (times are per launch)")                  \
    X(median_us, 0, "median time per launch, microseconds: the headline figure")                               \
    X(ci_low_us, 0, "95% confidence interval of the median, lower end (order statistics, distribution-free)")  \
    X(ci_high_us, 0, "... upper end; sampling stops once (ci_high - ci_low) / 2 is within --max-noise of the median") \
    X(mean_us, 0, "mean, microseconds")                                                                         \
    X(min_us, 0, "fastest sample, microseconds")                                                                \
    X(max_us, 0, "slowest sample, microseconds")                                                                \
    X(p90_us, 0, "90th percentile, microseconds")                                                               \
    X(p99_us, 0, "99th percentile, microseconds")                                                               \
    X(stddev_us, 0, "sample standard deviation, microseconds")                                                  \
    X(cv_pct, 0, "coefficient of variation, stddev / mean, percent (not robust: one preempted sample inflates it)") \
    X(mad_us, 0, "median absolute deviation from the median, microseconds")                                    \
    X(noise_pct, 0, "the noise figure: 1.4826 MAD / median, percent (equals the CV for normal samples; robust to outliers)") \
    X(outliers, 0, "samples outside Tukey's fences (below Q1 - 1.5 IQR or above Q3 + 1.5 IQR); counted, still in the statistics") \
    X(stop, 0, "why sampling stopped: noise (the interval reached --max-noise), timeout (--timeout first), samples (the cap)") \
    X(processes, 0, "worker processes whose samples are pooled in the row (--processes); 0: measured in the bench process itself") \
    X(process_spread_pct, 0, "(max - min) / median of the worker processes' own medians, percent: how far one process's figure lies from the next's (ci_low_us and ci_high_us cover it); empty with fewer than 2") \
    X(disturbed, 0, "samples dropped because the benchmark's threads waited for a CPU for more than 1% of the sample (Linux's schedstat run_delay): another process had the core") \
    X(contended, 0, "true when too few undisturbed samples were had (fewer than --min-samples) or more than a quarter of the samples were disturbed: other processes shared its cores and slowed it; the note says how many were disturbed") \
    X(canary_us, 0, "the canary, a fixed workload timed at the start of every round (on the CPU backends, 32 joins of the thread pool with a multiply-add chain on every thread): its median over the set's rounds, microseconds; a slower canary in one run than another means a slower machine (bench compare uses it)") \
    X(floor_us, 0, "the timer's floor for this mode: the median of an empty sample, microseconds")            \
    X(near_floor, 0, "true when a sample (launches x median) is shorter than 10 times floor_us: read with care") \
    X(gflops_per_s, 0, "flops / median, 1e9 per second")                                                       \
    X(gbytes_per_s, 0, "bytes / median, 1e9 per second")                                                       \
    X(peak_gflops_per_s, 0, "the backend's compute ceiling for the row's layer_dtype, measured at the start of the run (a large SGEMM; a bf16 GEMM for bf16 rows, TF32 on cuda where measured, else the SGEMM's), 1e9 FLOP per second; empty with --no-peaks") \
    X(peak_gbytes_per_s, 0, "the backend's bandwidth ceiling measured at the start of the run (STREAM triad on the CPU, a device copy on a GPU), 1e9 bytes per second") \
    X(peak_cache_gbytes_per_s, 0, "the same stream over a working set the caches hold (3 MiB on the CPU, an eighth of the L2 on a GPU), 1e9 bytes per second") \
    X(stream_gbytes_per_s, 0, "a decode step only (a decoder's one new token after a KV cache): a read-only stream from memory (on the CPU a sum over three arrays of the size peak_gbytes_per_s's triad uses, eight sequential streams a thread as the decode GEMVs read; on a GPU a pass of 16-byte loads over a buffer of at least 1 GiB and 16 times the L2) timed at the start of rounds over the set's sampling (best of three passes; at most a tenth of the time), its median over them, 1e9 bytes per second; the console's memory limit per token is the step's weights and KV cache over it: a step reads and writes next to nothing, and its limit is taken over the same minutes as its samples; empty otherwise") \
    X(bound, 0, "what limits the row on the roofline: memory when its intensity is below the balance (peak_gflops / peak_gbytes) or it has no FLOPs; cache instead when it was timed warm (not cold) and its bytes fit the last-level cache (the JSON's peaks.cache_bytes), against the cache stream; else compute") \
    X(roof_pct, 0, "achieved rate as a percent of the roof at its intensity: gbytes_per_s against the memory or cache stream when memory- or cache-bound, gflops_per_s / peak_gflops_per_s when compute-bound") \
    X(peak_bytes, 0, "memory the row needs at its peak: a layer alone, its weights, inputs, output and workspace; the model rows, all weights, the most activations alive at once in a forward that frees each tensor after its last reader, and the largest workspace") \
    X(items_per_s, 0, "batch / median: images per second, model rows only")                                    \
    X(note, 0, "why a row was skipped, failed or reused; how batch mode launched")

enum {
#define X(name, in_list, doc) COL_##name,
    CSV_COLUMNS(X)
#undef X
        COL_COUNT
};

static const report_column columns[] = {
#define X(name, in_list, doc) {#name, doc},
    CSV_COLUMNS(X)
#undef X
};
static const bool column_in_list[] = {
#define X(name, in_list, doc) in_list,
    CSV_COLUMNS(X)
#undef X
};

const report_column *report_csv_columns(int *n)
{
    *n = COL_COUNT;
    return columns;
}

typedef char row_t[COL_COUNT][512];

/* A cell that a spreadsheet would run as a formula (it starts with = + - @, a tab or a
 * carriage return, and is not a number) is written with a leading apostrophe, as OWASP
 * advises. Names cannot start that way (cfg.c); notes from libraries could. */
static bool formula_like(const char *s)
{
    if (!strchr("=+-@\t\r", s[0]) || !s[0] || strcmp(s, "-") == 0)
        return false;
    char *end;
    strtod(s, &end);
    return *end != 0;
}

void report_csv_field(strbuf *b, const char *s)
{
    bool apostrophe = formula_like(s);
    if (!strpbrk(s, ",\"\n\r")) {
        strbuf_printf(b, "%s%s", apostrophe ? "'" : "", s);
        return;
    }
    strbuf_append(b, "\"", 1);
    if (apostrophe)
        strbuf_append(b, "'", 1);
    for (; *s; s++) {
        if (*s == '"')
            strbuf_append(b, "\"", 1);
        strbuf_append(b, s, 1);
    }
    strbuf_append(b, "\"", 1);
}

static void csv_write(strbuf *b, row_t row, bool list_only)
{
    bool first = true;
    for (int c = 0; c < COL_COUNT; c++) {
        if (list_only && !column_in_list[c])
            continue;
        if (!first)
            strbuf_append(b, ",", 1);
        report_csv_field(b, row[c]);
        first = false;
    }
    strbuf_append(b, "\n", 1);
}

static void csv_header(strbuf *b, bool list_only)
{
    row_t *row = xcalloc(1, sizeof *row);
    for (int c = 0; c < COL_COUNT; c++)
        snprintf((*row)[c], sizeof (*row)[c], "%s", columns[c].name);
    csv_write(b, *row, list_only);
    free(row);
}

char *report_csv_header(void)
{
    strbuf b = {0};
    csv_header(&b, false);
    return b.data;
}

#define SET(col, ...) snprintf(row[COL_##col], sizeof row[COL_##col], __VA_ARGS__)

/* tokens and kv_len, empty where the model has none */
static void fill_shape(row_t row, const model *m)
{
    if (model_tokens(m) >= 0)
        SET(tokens, "%lld", (long long)model_tokens(m));
    if (model_kv_len(m) >= 0)
        SET(kv_len, "%lld", (long long)model_kv_len(m));
}

/* Columns that describe the layer, shared by `run` and `list`. */
static void fill_layer(row_t row, const model *m, int i)
{
    const layer *l = &m->layers[i];
    SET(model, "%s", m->name);
    SET(batch, "%lld", (long long)m->batch);
    SET(dtype, "%s", dtype_name(m->dtype));
    SET(pass, "%s", layer_pass_name(m->pass));
    fill_shape(row, m);
    SET(layer_dtype, "%s", dtype_name(layer_compute_dtype(l)));
    SET(layer_index, "%d", i);
    SET(layer_name, "%s", l->name);
    SET(kind, "%s", layer_kind_name(l->kind));
    shape_format_compact(&l->in, row[COL_input_shape], sizeof row[COL_input_shape]);
    shape_format_compact(&l->out, row[COL_output_shape], sizeof row[COL_output_shape]);
    SET(params, "%lld", (long long)l->n_weights);
    SET(macs, "%lld", (long long)l->macs);
    SET(flops, "%lld", (long long)l->flops);
    SET(bytes, "%lld", (long long)l->bytes);
    if (l->bytes > 0)
        SET(intensity, "%.4f", (double)l->flops / (double)l->bytes);
    int64_t in_bytes = 0, size = (int64_t)dtype_size(l->dtype);
    for (int k = 0; k < l->n_inputs; k++)
        in_bytes += size * shape_numel(&l->ins[k]);
    SET(weight_bytes, "%lld", (long long)layer_weight_bytes(l));
    SET(input_bytes, "%lld", (long long)in_bytes);
    SET(output_bytes, "%lld", (long long)(layer_is_view(l) ? 0 : size * shape_numel(&l->out)));
    layer_params_format(l, row[COL_parameters], sizeof row[COL_parameters]);
    /* value ids: 0 is the model input, v > 0 the output of layer v - 1 */
    size_t off = 0;
    for (int k = 0; k < l->n_inputs && off < sizeof row[COL_inputs]; k++)
        off += (size_t)snprintf(row[COL_inputs] + off, sizeof row[COL_inputs] - off, "%s%d", k ? " " : "",
                                l->inputs[k] - 1);
}

static void fill_stats(row_t row, const run_result *res, const layer_result *r, int64_t flops, int64_t bytes,
                       dtype_t dtype)
{
    if (r->mode)
        SET(mode, "%s", measure_mode_name(r->mode));
    SET(floor_us, "%.4f", 1e6 * (r->mode == MODE_COLD ? res->floor.cold : res->floor.warm));
    SET(impl, "%s", r->impl);
    SET(kernels, "%s", r->kernels);
    SET(note, "%s", r->note);
    SET(dedupe_of, "%d", r->dedupe_of);
    SET(workspace_bytes, "%lld", (long long)r->workspace_bytes);
    SET(status, "%s", measure_row_status_name(r->status));
    if (r->has_error)
        SET(rel_error, "%.3e", r->rel_error);
    if (!row_timed(r))
        return;
    const stats *s = &r->st;
    SET(samples, "%lld", (long long)s->n);
    SET(discarded, "%lld", (long long)r->discarded);
    SET(launches, "%d", r->launches);
    SET(median_us, "%.4f", s->median * 1e6);
    SET(ci_low_us, "%.4f", s->ci_low * 1e6);
    SET(ci_high_us, "%.4f", s->ci_high * 1e6);
    SET(mean_us, "%.4f", s->mean * 1e6);
    SET(min_us, "%.4f", s->min * 1e6);
    SET(max_us, "%.4f", s->max * 1e6);
    SET(p90_us, "%.4f", s->p90 * 1e6);
    SET(p99_us, "%.4f", s->p99 * 1e6);
    SET(stddev_us, "%.4f", s->stddev * 1e6);
    SET(cv_pct, "%.3f", s->cv * 100);
    SET(mad_us, "%.4f", s->mad * 1e6);
    SET(noise_pct, "%.3f", s->noise * 100);
    SET(outliers, "%lld", (long long)s->outliers);
    SET(stop, "%s", measure_stop_reason_name(r->stop));
    SET(processes, "%d", r->processes);
    if (r->processes >= 2)
        SET(process_spread_pct, "%.3f", 100 * r->process_spread);
    SET(disturbed, "%lld", (long long)r->disturbed);
    SET(contended, "%s", r->contended ? "true" : "false");
    SET(near_floor, "%s", r->near_floor ? "true" : "false");
    if (s->median > 0) {
        SET(gflops_per_s, "%.3f", (double)flops / s->median * 1e-9);
        SET(gbytes_per_s, "%.3f", (double)bytes / s->median * 1e-9);
    }
    double pct;
    const char *bound;
    if (r->mode && r->mode != MODE_TRANSFER &&
        report_roofline(flops, bytes, s->median, r->mode == MODE_COLD, &res->peaks, dtype, &pct, &bound)) {
        SET(bound, "%s", bound);
        SET(roof_pct, "%.2f", pct);
    }
}

/* The ceilings, on every row of a backend that measured them: the compute one of the
 * row's dtype. */
static void fill_peaks(row_t row, const run_result *res, dtype_t dtype)
{
    if (res->peaks.flops_per_s > 0 && res->peaks.bytes_per_s > 0) {
        SET(peak_gflops_per_s, "%.3f", backend_peak_flops(&res->peaks, dtype) * 1e-9);
        SET(peak_gbytes_per_s, "%.3f", res->peaks.bytes_per_s * 1e-9);
        if (res->peaks.cache_bytes_per_s > 0)
            SET(peak_cache_gbytes_per_s, "%.3f", res->peaks.cache_bytes_per_s * 1e-9);
    }
}

typedef struct csv_reporter {
    reporter base;
    bench_output *out;  /* borrowed */
    double canary;      /* the set's canary median (canary_us), seconds; 0 unknown */
    double stream;      /* the set's read stream median (stream_gbytes_per_s), bytes/s; 0 none */
    strbuf buf;         /* the whole file: header, rows kept from --resume, rows so far */
    size_t committed;   /* bytes of buf on disk: complete (batch, backend) sets only */
} csv_reporter;

/* The whole forward as a row of its own: kind "model", mode "chained" or "graph". */
static void fill_model(row_t row, const run_result *res, const layer_result *r, const char *mode)
{
    const model *m = res->m;
    model_totals t = model_sum(m);
    SET(model, "%s", m->name);
    SET(batch, "%lld", (long long)m->batch);
    SET(dtype, "%s", dtype_name(m->dtype));
    SET(pass, "%s", layer_pass_name(m->pass));
    fill_shape(row, m);
    SET(layer_dtype, "%s", model_mixed(m) ? "mixed" : dtype_name(m->dtype));
    SET(mode, "%s", mode);
    SET(layer_index, "-1");
    SET(layer_name, "%s", m->name);
    SET(kind, "model");
    shape_format_compact(&m->input, row[COL_input_shape], sizeof row[COL_input_shape]);
    shape_format_compact(&m->layers[m->n_layers - 1].out, row[COL_output_shape], sizeof row[COL_output_shape]);
    SET(params, "%lld", (long long)t.n_weights);
    SET(macs, "%lld", (long long)t.macs);
    SET(flops, "%lld", (long long)t.flops);
    SET(bytes, "%lld", (long long)t.bytes);
    SET(parameters, "-");
    SET(inputs, "-1");
    if (t.bytes > 0)
        SET(intensity, "%.4f", (double)t.flops / (double)t.bytes);
    model_memory mm;
    model_memory_plan(m, &mm);
    int64_t ws = 0;
    for (int i = 0; i < m->n_layers; i++)
        ws = res->layers[i].workspace_bytes > ws ? res->layers[i].workspace_bytes : ws;
    SET(weight_bytes, "%lld", (long long)mm.weight_bytes);
    SET(input_bytes, "%lld", (long long)(dtype_size(model_value_dtype(m, 0)) * shape_numel(&m->input)));
    SET(output_bytes, "%lld", (long long)(dtype_size(model_value_dtype(m, m->n_layers)) *
                                          shape_numel(&m->layers[m->n_layers - 1].out)));
    fill_stats(row, res, r, t.flops, t.bytes, m->dtype);
    SET(peak_bytes, "%lld", (long long)(mm.weight_bytes + mm.peak_activation_bytes + ws));
    if (row_timed(r))
        SET(items_per_s, "%.3f", (double)m->batch / r->st.median);
}

/* A copy of the model's input (upload) or output (download): kind "copy", mode "transfer". */
static void fill_copy(row_t row, const run_result *res, const layer_result *r, bool upload)
{
    const model *m = res->m;
    const shape_t *s = upload ? &m->input : &m->layers[m->n_layers - 1].out;
    SET(model, "%s", m->name);
    SET(batch, "%lld", (long long)m->batch);
    dtype_t t = model_value_dtype(m, upload ? 0 : m->n_layers);
    int64_t bytes = (int64_t)dtype_size(t) * shape_numel(s);
    SET(dtype, "%s", dtype_name(m->dtype));
    SET(pass, "%s", layer_pass_name(m->pass));
    fill_shape(row, m);
    SET(layer_dtype, "%s", dtype_name(t));
    SET(mode, "transfer");
    SET(layer_index, "-1");
    SET(layer_name, "%s", upload ? "input_host_to_device" : "output_device_to_host");
    SET(kind, "copy");
    shape_format_compact(s, row[COL_input_shape], sizeof row[COL_input_shape]);
    shape_format_compact(s, row[COL_output_shape], sizeof row[COL_output_shape]);
    SET(params, "0");
    SET(macs, "0");
    SET(flops, "0");
    SET(bytes, "%lld", (long long)bytes);
    SET(parameters, "-");
    fill_stats(row, res, r, 0, bytes, t);
}

/* A part of layer p->layer inside the forward: the layer's description with the part's
 * name and counts. */
static void fill_part(row_t row, const run_result *res, const part_result *p)
{
    const layer *l = &res->m->layers[p->layer];
    fill_layer(row, res->m, p->layer);
    SET(layer_name, "%s.%s", l->name, p->info.name);
    SET(part, "%s", p->info.name);
    SET(params, "0");
    SET(macs, "%lld", (long long)(p->info.flops / 2));
    SET(flops, "%lld", (long long)p->info.flops);
    SET(bytes, "%lld", (long long)p->info.bytes);
    SET(intensity, "%.4f", p->info.bytes > 0 ? (double)p->info.flops / (double)p->info.bytes : 0.0);
    fill_stats(row, res, &p->r, p->info.flops, p->info.bytes, l->dtype);
}

/* A row with statistics (fill_stats wrote its median). */
static bool row_timed_text(row_t row) { return row[COL_median_us][0] != 0; }

static void csv_emit(csv_reporter *c, row_t row, const run_result *res)
{
    SET(backend, "%s", res->backend);
    SET(threads, "%d", res->threads);
    if (c->canary > 0 && row_timed_text(row))
        SET(canary_us, "%.4f", 1e6 * c->canary);
    if (c->stream > 0 && row_timed_text(row))
        SET(stream_gbytes_per_s, "%.3f", c->stream * 1e-9);
    int t = dtype_from_name(row[COL_layer_dtype]); /* "mixed" for a mixed model's rows: the model-wide one */
    fill_peaks(row, res, t >= 0 ? (dtype_t)t : res->m->dtype);
    csv_write(&c->buf, row, false);
}

/* The rows of one result, appended to c's buffer; with c NULL only counted (the JSON's
 * row count of a set, report_csv_rows: the same loop, so the two cannot disagree).
 * Returns how many. */
static int64_t csv_rows(csv_reporter *c, const run_result *res)
{
    const model *m = res->m;
    csv_reporter counter = {0};
    int64_t emitted = 0;
    if (!c)
        c = &counter;
    double drift;
    measure_canary_summary(res, &c->canary, &drift);
    double lo, hi;
    measure_stream_summary(res, &c->stream, &lo, &hi);
    row_t *r = xmalloc(sizeof *r);
    char(*row)[512] = *r;
    /* the layers alone, then inside the forward (each followed by its parts), then (once
     * per backend and batch) the chained forward, and the graph replay and copies where
     * the backend has them */
#define EMIT() (c != &counter ? csv_emit(c, row, res) : (void)0, emitted++)
    int n = m->n_layers;
    for (int i = 0; i < 2 * n + 4; i++) {
        memset(r, 0, sizeof *r);
        if (i < n) {
            fill_layer(row, m, i);
            SET(mode, "%s", measure_mode_name(res->mode));
            fill_stats(row, res, &res->layers[i], m->layers[i].flops, m->layers[i].bytes, m->layers[i].dtype);
            SET(peak_bytes, "%lld",
                (long long)(atoll(row[COL_weight_bytes]) + atoll(row[COL_input_bytes]) + atoll(row[COL_output_bytes]) +
                            res->layers[i].workspace_bytes));
        } else if (!res->has_model) {
            break;
        } else if (i < 2 * n) {
            if (!res->inmodel || res->inmodel[i - n].status == ROW_NONE)
                continue;
            fill_layer(row, m, i - n);
            fill_stats(row, res, &res->inmodel[i - n], m->layers[i - n].flops, m->layers[i - n].bytes,
                       m->layers[i - n].dtype);
            EMIT();
            for (int j = 0; j < res->n_parts; j++)
                if (res->parts[j].layer == i - n) {
                    memset(r, 0, sizeof *r);
                    fill_part(row, res, &res->parts[j]);
                    EMIT();
                }
            continue;
        } else if (i == 2 * n) {
            fill_model(row, res, &res->chained, "chained");
        } else if (i == 2 * n + 1 && res->graph.status != ROW_NONE) {
            fill_model(row, res, &res->graph, "graph");
        } else if (i >= 2 * n + 2 && (i == 2 * n + 2 ? res->upload : res->download).status != ROW_NONE) {
            fill_copy(row, res, i == 2 * n + 2 ? &res->upload : &res->download, i == 2 * n + 2);
        } else {
            continue;
        }
        EMIT();
    }
    free(r);
    strbuf_free(&counter.buf);
    return emitted;
#undef EMIT
}

static bench_status csv_run(reporter *rep, const run_result *res)
{
    csv_rows((csv_reporter *)rep, res);
    return BENCH_OK;
}

int64_t report_csv_rows(const run_result *res) { return csv_rows(NULL, res); }

static bench_status csv_commit(csv_reporter *c)
{
    char err[512];
    if (bench_output_write(c->out, c->buf.data, c->buf.len, err, sizeof err) != BENCH_OK) {
        log_msg("%s", err);
        return BENCH_ERR_IO;
    }
    c->committed = c->buf.len;
    return BENCH_OK;
}

static bench_status csv_checkpoint(reporter *rep)
{
    return csv_commit((csv_reporter *)rep);
}

static bench_status csv_finish(reporter *rep, bool ok)
{
    csv_reporter *c = (csv_reporter *)rep;
    /* not ok: the rows of an unfinished set are dropped; the checkpoints stay */
    bench_status st = ok ? csv_commit(c) : BENCH_OK;
    strbuf_free(&c->buf);
    free(c);
    return st;
}

reporter *report_csv_create(bench_output *out, const char *resumed)
{
    csv_reporter *c = xcalloc(1, sizeof *c);
    c->base.run = csv_run;
    c->base.checkpoint = csv_checkpoint;
    c->base.finish = csv_finish;
    c->out = out;
    if (resumed) {
        strbuf_append(&c->buf, resumed, strlen(resumed));
        c->committed = c->buf.len;
    } else {
        csv_header(&c->buf, false);
    }
    return &c->base;
}

bench_status report_list_csv(bench_output *out, const model *m)
{
    strbuf b = {0};
    char err[512];
    csv_header(&b, true);
    row_t *row = xmalloc(sizeof *row);
    for (int i = 0; i < m->n_layers; i++) {
        memset(row, 0, sizeof *row);
        fill_layer(*row, m, i);
        csv_write(&b, *row, true);
    }
    free(row);
    bench_status st = bench_output_write(out, b.data, b.len, err, sizeof err);
    if (st != BENCH_OK)
        log_msg("%s", err);
    strbuf_free(&b);
    return st;
}
