/* The Chrome / Perfetto trace (--trace), a timeline of a run for people's tools (the
 * folded stacks for flame graphs are report_stacks.c). It comes from results already
 * measured: one real forward (the kept sample whose layers add up to the median total, from the
 * in-model view: marks between layers on the CPU, CUDA events on a GPU) and, beside it
 * in the trace, each timing mode's isolated medians laid end to end. Layers nest in the
 * blocks their names give (blocks.h). Times are integer nanoseconds inside, so spans
 * nest exactly and the stacks add up to the trace's forward. Docs: docs/outputs.md. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "log.h"
#include "version.h"

typedef struct span {
    int64_t ts, dur;  /* ns from the timeline's start */
    int depth;        /* 0 the model, then blocks, layers deepest */
    int layer;        /* -1 for a block */
    int block;        /* the block, or the layer's own block */
} span;

static int cmp_span(const void *pa, const void *pb)
{
    const span *a = pa, *b = pb;
    if (a->ts != b->ts)
        return a->ts < b->ts ? -1 : 1;
    if (a->dur != b->dur)
        return a->dur > b->dur ? -1 : 1;
    return a->depth - b->depth;
}

static bool in_block(const model_blocks *mb, int layer, int b)
{
    for (int k = mb->layer_block[layer]; k >= 0; k = mb->blocks[k].parent)
        if (k == b)
            return true;
    return false;
}

/* Spans of the layers with dur[i] >= 0, laid end to end in execution order, and of
 * the blocks around them: one span per run of consecutive layers of a block, from its
 * first included layer's start to its last one's end. Sorted so parents come first. */
static span *timeline(const model *m, const model_blocks *mb, const int64_t *dur, int *n_spans)
{
    int nl = m->n_layers, n = 0, cap = nl + mb->n_blocks + 8;
    span *s = xmalloc((size_t)cap * sizeof *s);
    int64_t *start = xmalloc((size_t)(nl ? nl : 1) * sizeof *start), t = 0;
    for (int i = 0; i < nl; i++) {
        start[i] = t;
        if (dur[i] >= 0) {
            s[n++] = (span){t, dur[i], mb->blocks[mb->layer_block[i]].depth + 1, i, mb->layer_block[i]};
            t += dur[i];
        }
    }
    for (int b = 0; b < mb->n_blocks; b++) {
        const block_info *bi = &mb->blocks[b];
        int first = -1, last = -1; /* included layers of the open run */
        for (int j = bi->first; j <= bi->last + 1; j++) {
            bool member = j <= bi->last && in_block(mb, j, b);
            if (member && dur[j] >= 0) {
                first = first < 0 ? j : first;
                last = j;
            }
            if (!member || j > bi->last) {
                if (first >= 0) {
                    if (n == cap)
                        s = xrealloc(s, (size_t)(cap *= 2) * sizeof *s);
                    s[n++] = (span){start[first], start[last] + dur[last] - start[first], bi->depth, -1, b};
                }
                first = last = -1;
            }
        }
    }
    free(start);
    qsort(s, (size_t)n, sizeof *s, cmp_span);
    *n_spans = n;
    return s;
}

static int64_t to_ns(double seconds) { return (int64_t)llround(seconds * 1e9); }

/* ---- the trace -------------------------------------------------------------------------- */

typedef struct trace_thread {
    char *process;   /* backend */
    char *label;
    int pid, tid;
} trace_thread;

typedef struct trace {
    reporter base;
    bench_output *out;
    strbuf events;       /* the events so far, comma-separated */
    trace_thread *threads;
    int n_threads;
    int n_pids;
} trace;

static void add_event(trace *t, const char *fmt_head, ...) __attribute__((format(printf, 2, 3)));
static void add_event(trace *t, const char *fmt_head, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt_head);
    vsnprintf(buf, sizeof buf, fmt_head, ap);
    va_end(ap);
    if (t->events.len)
        strbuf_append(&t->events, ",\n", 2);
    strbuf_append(&t->events, buf, strlen(buf));
}

/* The (pid, tid) of a backend's thread with this label, with its metadata events the
 * first time. */
static void thread_of(trace *t, const char *backend, const char *label, int *pid, int *tid)
{
    int p = 0, next_tid = 1;
    for (int i = 0; i < t->n_threads; i++)
        if (strcmp(t->threads[i].process, backend) == 0) {
            p = t->threads[i].pid;
            next_tid = t->threads[i].tid + 1;
            if (strcmp(t->threads[i].label, label) == 0) {
                *pid = p, *tid = t->threads[i].tid;
                return;
            }
        }
    if (!p) {
        p = ++t->n_pids;
        add_event(t, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": {\"name\": ", p);
        strbuf_json(&t->events, backend);
        strbuf_append(&t->events, "}}", 2);
        add_event(t, "{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": "
                     "{\"sort_index\": %d}}",
                  p, p);
    }
    t->threads = xrealloc(t->threads, (size_t)(t->n_threads + 1) * sizeof *t->threads);
    t->threads[t->n_threads++] = (trace_thread){xstrdup(backend), xstrdup(label), p, next_tid};
    add_event(t, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": ", p,
              next_tid);
    strbuf_json(&t->events, label);
    strbuf_append(&t->events, "}}", 2);
    add_event(t, "{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": "
                 "{\"sort_index\": %d}}",
              p, next_tid, next_tid);
    *pid = p, *tid = next_tid;
}

static void us_field(strbuf *b, const char *key, int64_t ns)
{
    strbuf_printf(b, "\"%s\": %lld.%03lld", key, (long long)(ns / 1000), (long long)(ns % 1000));
}

/* The parts of layer x->layer in the forward sample (attention's stages), laid end to end
 * from the layer's start inside its span: complete events of category "part". */
static void emit_parts(strbuf *b, const run_result *res, const span *x, int pid, int tid)
{
    int64_t ts = x->ts, end = x->ts + x->dur;
    for (int j = 0; j < res->n_parts; j++) {
        const part_result *p = &res->parts[j];
        if (p->layer != x->layer || !row_timed(&p->r))
            continue;
        int64_t dur = to_ns(p->sample);
        dur = ts + dur > end ? end - ts : dur;
        strbuf_append(b, ",\n{\"name\": ", 11);
        strbuf_json(b, p->info.name);
        strbuf_printf(b, ", \"cat\": \"part\", \"ph\": \"X\", ");
        us_field(b, "ts", ts);
        strbuf_append(b, ", ", 2);
        us_field(b, "dur", dur);
        strbuf_printf(b, ", \"pid\": %d, \"tid\": %d, \"args\": {\"layer\": ", pid, tid);
        strbuf_json(b, res->m->layers[p->layer].name);
        strbuf_printf(b, ", \"part\": \"%s\", \"flops\": %lld, \"bytes\": %lld, \"in_model_median_us\": %.4f",
                      p->info.name, (long long)p->info.flops, (long long)p->info.bytes, p->r.st.median * 1e6);
        if (dur > 0 && p->info.flops)
            strbuf_printf(b, ", \"gflops_per_s\": %.2f", (double)p->info.flops / (double)dur);
        strbuf_append(b, "}}", 2);
        ts += dur;
    }
}

/* One timeline as complete ("X") events: the model, its blocks, its layers, and in a
 * forward the parts of the layers split inside it. */
static void emit_timeline(trace *t, const run_result *res, const model_blocks *mb, const int64_t *dur, int pid,
                          int tid, const char *what, bool forward)
{
    const model *m = res->m;
    int n;
    span *s = timeline(m, mb, dur, &n);
    strbuf *b = &t->events;
    for (int k = 0; k < n; k++) {
        const span *x = &s[k];
        const char *name = x->layer >= 0 ? block_leaf_name(m->layers[x->layer].name) : mb->blocks[x->block].name;
        if (b->len)
            strbuf_append(b, ",\n", 2);
        strbuf_append(b, "{\"name\": ", 9);
        strbuf_json(b, name);
        strbuf_printf(b, ", \"cat\": \"%s\", \"ph\": \"X\", ",
                      x->layer >= 0 ? layer_kind_name(m->layers[x->layer].kind) : x->depth ? "block" : "model");
        us_field(b, "ts", x->ts);
        strbuf_append(b, ", ", 2);
        us_field(b, "dur", x->dur);
        strbuf_printf(b, ", \"pid\": %d, \"tid\": %d, \"args\": {", pid, tid);
        if (x->layer >= 0) {
            const layer *l = &m->layers[x->layer];
            const layer_result *r = &res->layers[x->layer];
            char in[64], out[64];
            strbuf_append(b, "\"layer\": ", 9);
            strbuf_json(b, l->name);
            strbuf_printf(b, ", \"index\": %d, \"kind\": \"%s\", \"input\": \"%s\", \"output\": \"%s\", \"params\": %lld, "
                             "\"flops\": %lld, \"bytes\": %lld, \"alone_mode\": \"%s\", \"impl\": ",
                          x->layer, layer_kind_name(l->kind), shape_format_compact(&l->in, in, sizeof in),
                          shape_format_compact(&l->out, out, sizeof out), (long long)l->n_weights, (long long)l->flops,
                          (long long)l->bytes, r->mode ? measure_mode_name(r->mode) : "");
            strbuf_json(b, r->impl);
            if (row_timed(r))
                strbuf_printf(b, ", \"alone_median_us\": %.4f", r->st.median * 1e6);
            if (res->inmodel && row_timed(&res->inmodel[x->layer]))
                strbuf_printf(b, ", \"in_model_median_us\": %.4f", res->inmodel[x->layer].st.median * 1e6);
            if (x->dur > 0 && l->flops)
                strbuf_printf(b, ", \"gflops_per_s\": %.2f", (double)l->flops / (double)x->dur);
        } else {
            strbuf_printf(b, "\"block\": ");
            strbuf_json(b, mb->blocks[x->block].name);
            strbuf_printf(b, ", \"layers\": %d, \"timeline\": \"%s\", \"backend\": \"%s\", \"batch\": %lld",
                          mb->blocks[x->block].n_layers, what, res->backend, (long long)m->batch);
            if (x->depth == 0 && row_timed(&res->chained))
                strbuf_printf(b, ", \"chained_median_us\": %.4f", res->chained.st.median * 1e6);
        }
        strbuf_append(b, "}}", 2);
        if (forward && x->layer >= 0)
            emit_parts(b, res, x, pid, tid);
    }
    free(s);
}

/* One complete event of a training step's timeline: layer i's pass ("forward",
 * "backward" or "update"). */
static void emit_step_span(trace *t, const run_result *res, int i, const char *pass, int64_t ts, int64_t dur, int pid,
                           int tid)
{
    const layer *l = &res->m->layers[i];
    strbuf *b = &t->events;
    char name[200];
    snprintf(name, sizeof name, "%s%s%s%s", block_leaf_name(l->name), strcmp(pass, "forward") ? " (" : "",
             strcmp(pass, "forward") ? pass : "", strcmp(pass, "forward") ? ")" : "");
    strbuf_append(b, ",\n{\"name\": ", 11);
    strbuf_json(b, name);
    strbuf_printf(b, ", \"cat\": \"%s\", \"ph\": \"X\", ", layer_kind_name(l->kind));
    us_field(b, "ts", ts);
    strbuf_append(b, ", ", 2);
    us_field(b, "dur", dur);
    strbuf_printf(b, ", \"pid\": %d, \"tid\": %d, \"args\": {\"layer\": ", pid, tid);
    strbuf_json(b, l->name);
    strbuf_printf(b, ", \"index\": %d, \"pass\": \"%s\"}}", i, pass);
}

/* A training step's kept sample in the order it ran: each layer's forward (its part
 * "forward"), then each layer's backward (the rest of its time in the step: its part
 * "backward", or its halves "backward data" and "backward weights") in reverse, then each
 * optimizer update (part "update") in order, inside one span
 * of the step; the loss between them is left out (the chained row's note has it). */
static void emit_step(trace *t, const run_result *res, int pid, int tid)
{
    const model *m = res->m;
    int n = m->n_layers;
    int64_t *f = xmalloc((size_t)(n ? n : 1) * 3 * sizeof *f), *g = f + n, *u = g + n, total = 0;
    for (int i = 0; i < 3 * n; i++)
        f[i] = -1;
    for (int j = 0; j < res->n_parts; j++) /* an optimizer's update */
        if (row_timed(&res->parts[j].r) && !strcmp(res->parts[j].info.name, "update"))
            u[res->parts[j].layer] = to_ns(res->parts[j].sample), total += u[res->parts[j].layer];
    for (int j = 0; j < res->n_parts; j++) { /* the backward: the rest of the layer's time in the step */
        const part_result *p = &res->parts[j];
        int i = p->layer;
        if (row_timed(&p->r) && p->index == 0) {
            f[i] = to_ns(p->sample), g[i] = to_ns(res->forward_sample[i]) - f[i] - (u[i] > 0 ? u[i] : 0);
            g[i] = g[i] < 0 ? 0 : g[i];
            total += f[i] + g[i];
        }
    }
    strbuf *b = &t->events;
    if (b->len)
        strbuf_append(b, ",\n", 2);
    strbuf_append(b, "{\"name\": ", 9);
    strbuf_json(b, m->name);
    strbuf_printf(b, ", \"cat\": \"model\", \"ph\": \"X\", ");
    us_field(b, "ts", 0);
    strbuf_append(b, ", ", 2);
    us_field(b, "dur", total);
    strbuf_printf(b, ", \"pid\": %d, \"tid\": %d, \"args\": {\"timeline\": \"one training step, the sample whose "
                     "layers add up to the median total: the forward, then the backward in reverse, then any optimizer updates "
                     "(the loss left out)\", "
                     "\"backend\": \"%s\", \"batch\": %lld, \"chained_median_us\": %.4f}}",
                  pid, tid, res->backend, (long long)m->batch, res->chained.st.median * 1e6);
    int64_t ts = 0;
    for (int i = 0; i < n; i++)
        if (f[i] >= 0)
            emit_step_span(t, res, i, "forward", ts, f[i], pid, tid), ts += f[i];
    for (int i = n - 1; i >= 0; i--)
        if (g[i] >= 0)
            emit_step_span(t, res, i, "backward", ts, g[i], pid, tid), ts += g[i];
    for (int i = 0; i < n; i++)
        if (u[i] >= 0)
            emit_step_span(t, res, i, "update", ts, u[i], pid, tid), ts += u[i];
    free(f);
}

static bench_status trace_run(reporter *r, const run_result *res)
{
    trace *t = (trace *)r;
    const model *m = res->m;
    model_blocks mb;
    model_blocks_build(m, &mb);
    int64_t *dur = xmalloc((size_t)(m->n_layers ? m->n_layers : 1) * sizeof *dur);
    char label[160];
    int pid, tid;
    if (res->forward_sample && m->pass == PASS_TRAIN) {
        snprintf(label, sizeof label, "batch %lld: training step (the median sample)", (long long)m->batch);
        thread_of(t, res->backend, label, &pid, &tid);
        emit_step(t, res, pid, tid);
    } else if (res->forward_sample) {
        snprintf(label, sizeof label, "batch %lld: forward (the median sample)", (long long)m->batch);
        thread_of(t, res->backend, label, &pid, &tid);
        for (int i = 0; i < m->n_layers; i++)
            dur[i] = res->layers[i].status == ROW_VIEW ? -1 : to_ns(res->forward_sample[i]);
        emit_timeline(t, res, &mb, dur, pid, tid, "one forward, the sample whose layers add up to the median total",
                      true);
    }
    snprintf(label, sizeof label, "batch %lld: layers alone, %s timing (medians end to end)", (long long)m->batch,
             measure_mode_name(res->mode));
    thread_of(t, res->backend, label, &pid, &tid);
    for (int i = 0; i < m->n_layers; i++)
        dur[i] = row_timed(&res->layers[i]) ? to_ns(res->layers[i].st.median) : -1;
    emit_timeline(t, res, &mb, dur, pid, tid, "every layer alone: its median, laid end to end", false);
    free(dur);
    model_blocks_free(&mb);
    return BENCH_OK;
}

static bench_status trace_write(trace *t)
{
    strbuf f = {0};
    char err[600];
    strbuf_printf(&f, "{\"displayTimeUnit\": \"ns\",\n\"otherData\": {\"tool\": \"layerbench\", \"version\": ");
    strbuf_json(&f, LAYERBENCH_VERSION);
    strbuf_printf(&f, ", \"git\": ");
    strbuf_json(&f, layerbench_git_revision());
    strbuf_printf(&f, "},\n\"traceEvents\": [\n");
    if (t->events.len)
        strbuf_append(&f, t->events.data, t->events.len);
    strbuf_printf(&f, "\n]}\n");
    bench_status st = bench_output_write(t->out, f.data, f.len, err, sizeof err);
    if (st != BENCH_OK)
        log_msg("--trace: %s", err);
    strbuf_free(&f);
    return st;
}

static bench_status trace_checkpoint(reporter *r) { return trace_write((trace *)r); }

static bench_status trace_finish(reporter *r, bool ok)
{
    trace *t = (trace *)r;
    bench_status st = ok ? trace_write(t) : BENCH_OK; /* not ok: the checkpoints stay */
    strbuf_free(&t->events);
    for (int i = 0; i < t->n_threads; i++)
        free(t->threads[i].process), free(t->threads[i].label);
    free(t->threads);
    free(t);
    return st;
}

reporter *report_trace_create(bench_output *out)
{
    trace *t = xcalloc(1, sizeof *t);
    t->base.run = trace_run;
    t->base.checkpoint = trace_checkpoint;
    t->base.finish = trace_finish;
    t->out = out;
    return &t->base;
}
