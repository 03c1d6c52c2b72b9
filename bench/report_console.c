/* Console reporters: the per-layer table (like torch.profiler's key_averages().table()),
 * the tables grouped by input shape and by kind, and the sweep summary. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

char *report_format_time(double s, char *buf, size_t len)
{
    if (!(s > 0))
        snprintf(buf, len, "-");
    else if (s < 1e-6)
        snprintf(buf, len, "%.0f ns", s * 1e9);
    else if (s < 1e-3)
        snprintf(buf, len, "%.2f us", s * 1e6);
    else if (s < 1.0)
        snprintf(buf, len, "%.3f ms", s * 1e3);
    else
        snprintf(buf, len, "%.3f s", s);
    return buf;
}

char *report_format_count(double v, char *buf, size_t len)
{
    const char *suffix[] = {"", "K", "M", "G", "T", "P"};
    int i = 0;
    while (fabs(v) >= 1000.0 && i < 5)
        v /= 1000.0, i++;
    snprintf(buf, len, i ? "%.2f%s" : "%.0f%s", v, suffix[i]);
    return buf;
}

static double gflops(int64_t flops, double seconds) { return seconds > 0 ? (double)flops / seconds * 1e-9 : 0.0; }

/* ---- per-layer table ------------------------------------------------------------------- */

typedef struct console {
    reporter base;
    FILE *out;
    report_options ro;
} console;

static const char *const sort_keys[] = {"index", "name", "kind", "params", "flops", "time", "noise", "cv", "gflops",
                                        "inmodel", NULL};

bool report_sort_valid(const char *sort)
{
    for (int i = 0; sort_keys[i]; i++)
        if (strcmp(sort, sort_keys[i]) == 0)
            return true;
    return false;
}

static const run_result *sort_res;
static const char *sort_by;

static double sort_value(int i)
{
    const layer *l = &sort_res->m->layers[i];
    const layer_result *r = &sort_res->layers[i];
    bool ok = row_timed(r);
    if (!strcmp(sort_by, "params"))
        return (double)l->n_weights;
    if (!strcmp(sort_by, "flops"))
        return (double)l->flops;
    if (!strcmp(sort_by, "time"))
        return ok ? r->st.median : -1;
    if (!strcmp(sort_by, "noise") || !strcmp(sort_by, "cv"))
        return ok ? r->st.noise : -1;
    if (!strcmp(sort_by, "inmodel"))
        return sort_res->inmodel && row_timed(&sort_res->inmodel[i]) ? sort_res->inmodel[i].st.median : -1;
    return ok ? gflops(l->flops, r->st.median) : -1;
}

static int cmp_rows(const void *pa, const void *pb)
{
    int a = *(const int *)pa, b = *(const int *)pb, c = 0;
    if (!strcmp(sort_by, "name"))
        c = strcmp(sort_res->m->layers[a].name, sort_res->m->layers[b].name);
    else if (!strcmp(sort_by, "kind"))
        c = strcmp(layer_kind_name(sort_res->m->layers[a].kind), layer_kind_name(sort_res->m->layers[b].kind));
    else if (strcmp(sort_by, "index") != 0) {
        double x = sort_value(a), y = sort_value(b);
        c = (x < y) - (x > y); /* descending */
    }
    return c ? c : a - b;
}

static int name_width(const model *m)
{
    int w = 4;
    for (int i = 0; i < m->n_layers; i++) {
        int n = (int)strlen(m->layers[i].name);
        w = n > w ? n : w;
    }
    return w > 40 ? 40 : w;
}

static void print_layers(console *c, const run_result *res)
{
    const model *m = res->m;
    FILE *o = c->out;
    int nw = name_width(m), n = m->n_layers;
    int *rows = xmalloc((size_t)n * sizeof *rows);
    for (int i = 0; i < n; i++)
        rows[i] = i;
    sort_res = res, sort_by = c->ro.sort;
    qsort(rows, (size_t)n, sizeof *rows, cmp_rows);
    int shown = c->ro.top > 0 && c->ro.top < n ? c->ro.top : n;
    fprintf(o, "\nPer-layer times (%s timing, sorted by %s%s; Noise: 1.4826 MAD / median; In-model: the layer "
               "inside the chained forward):\n",
            res->mode, c->ro.sort, shown < n ? ", top rows" : "");
    fprintf(o, "%4s  %-*s  %-18s  %-16s  %-16s  %9s  %9s  %-5s  %10s  %6s  %10s  %6s  %8s  %s\n", "#", nw, "Name", "Kind",
            "Input", "Output", "Params", "FLOPs", "Mode", "Median", "Noise", "In-model", "%Total", "GFLOP/s", "Impl");
    for (int k = 0; k < shown; k++) {
        int i = rows[k];
        const layer *l = &m->layers[i];
        const layer_result *r = &res->layers[i];
        const layer_result *im = res->inmodel ? &res->inmodel[i] : NULL;
        char in[48], out[48], pa[16], fl[16], t[24], noise[16], pct[16], gf[16], inm[24] = "-";
        shape_format_compact(&l->in, in, sizeof in);
        shape_format_compact(&l->out, out, sizeof out);
        report_format_count((double)l->n_weights, pa, sizeof pa);
        report_format_count((double)l->flops, fl, sizeof fl);
        if (im && row_timed(im))
            report_format_time(im->st.median, inm, sizeof inm);
        if (row_timed(r)) {
            report_format_time(r->st.median, t, sizeof t);
            snprintf(noise, sizeof noise, "%.1f%%", 100 * r->st.noise);
            snprintf(pct, sizeof pct, "%.1f%%", res->sum_medians > 0 ? 100 * r->st.median / res->sum_medians : 0);
            if (l->flops)
                snprintf(gf, sizeof gf, "%.1f", gflops(l->flops, r->st.median));
            else
                snprintf(gf, sizeof gf, "-");
        } else {
            snprintf(t, sizeof t, "%s", row_status_name(r->status));
            snprintf(noise, sizeof noise, "-"), snprintf(pct, sizeof pct, "-"), snprintf(gf, sizeof gf, "-");
        }
        fprintf(o, "%4d  %-*.*s  %-18s  %-16s  %-16s  %9s  %9s  %-5s  %10s  %6s  %10s  %6s  %8s  %s%s%s\n", i, nw, nw,
                l->name, layer_kind_name(l->kind), in, out, pa, fl, r->mode ? r->mode : "-", t, noise, inm, pct, gf,
                r->impl, r->note[0] ? "  " : "", r->note);
    }
    free(rows);
}

/* ---- grouped tables -------------------------------------------------------------------- */

typedef struct group {
    int first;      /* a layer of the group */
    int count;
    double total;   /* sum of medians */
    int64_t flops;
} group;

static int cmp_group_total(const void *a, const void *b)
{
    double x = ((const group *)a)->total, y = ((const group *)b)->total;
    return (x < y) - (x > y);
}

/* by_kind: one group per kind; else one per (kind, input shapes, parameters). */
static group *make_groups(const run_result *res, bool by_kind, int *n_groups)
{
    const model *m = res->m;
    group *g = xcalloc((size_t)m->n_layers, sizeof *g);
    int n = 0;
    for (int i = 0; i < m->n_layers; i++) {
        if (!row_timed(&res->layers[i]))
            continue;
        const layer *l = &m->layers[i];
        int k = 0;
        while (k < n && !(by_kind ? m->layers[g[k].first].kind == l->kind : layer_same_work(&m->layers[g[k].first], l)))
            k++;
        if (k == n)
            g[n++].first = i;
        g[k].count++;
        g[k].total += res->layers[i].st.median;
        g[k].flops += l->flops;
    }
    qsort(g, (size_t)n, sizeof *g, cmp_group_total);
    *n_groups = n;
    return g;
}

static void print_by_shape(console *c, const run_result *res)
{
    int n;
    group *g = make_groups(res, false, &n);
    int shown = c->ro.top > 0 && c->ro.top < n ? c->ro.top : n;
    fprintf(c->out, "\nGrouped by input shape (same kind, input shape and parameters; by total time):\n");
    fprintf(c->out, "%-18s  %-16s  %-44s  %5s  %10s  %10s  %6s\n", "Kind", "Input", "Parameters", "Count", "Total", "Avg",
            "%Total");
    for (int k = 0; k < shown; k++) {
        const layer *l = &res->m->layers[g[k].first];
        char in[48], par[160], tot[24], avg[24];
        shape_format_compact(&l->in, in, sizeof in);
        if (l->n_inputs > 1) /* more inputs: say how many */
            snprintf(in + strlen(in), sizeof in - strlen(in), " (+%d)", l->n_inputs - 1);
        fprintf(c->out, "%-18s  %-16s  %-44.44s  %5d  %10s  %10s  %5.1f%%\n", layer_kind_name(l->kind), in,
                layer_params_format(l, par, sizeof par), g[k].count, report_format_time(g[k].total, tot, sizeof tot),
                report_format_time(g[k].total / g[k].count, avg, sizeof avg),
                res->sum_medians > 0 ? 100 * g[k].total / res->sum_medians : 0);
    }
    free(g);
}

static void print_by_kind(console *c, const run_result *res)
{
    int n;
    group *g = make_groups(res, true, &n);
    fprintf(c->out, "\nGrouped by kind:\n");
    fprintf(c->out, "%-18s  %5s  %10s  %10s  %6s  %8s\n", "Kind", "Count", "Total", "Avg", "%Total", "GFLOP/s");
    for (int k = 0; k < n; k++) {
        char tot[24], avg[24], gf[16] = "-";
        if (g[k].flops)
            snprintf(gf, sizeof gf, "%.1f", gflops(g[k].flops, g[k].total));
        fprintf(c->out, "%-18s  %5d  %10s  %10s  %5.1f%%  %8s\n", layer_kind_name(res->m->layers[g[k].first].kind),
                g[k].count, report_format_time(g[k].total, tot, sizeof tot),
                report_format_time(g[k].total / g[k].count, avg, sizeof avg),
                res->sum_medians > 0 ? 100 * g[k].total / res->sum_medians : 0, gf);
    }
    free(g);
}

/* A whole-model row of the summary: graph replay, copies. */
static void print_extra(FILE *o, const char *what, const layer_result *r, const run_result *res)
{
    char t[24];
    if (r->status == ROW_NONE)
        return;
    if (!row_timed(r)) {
        fprintf(o, "  %-30s %s\n", what, r->note);
        return;
    }
    fprintf(o, "  %-30s %12s  (noise %.1f%%, %lld samples)", what, report_format_time(r->st.median, t, sizeof t),
            100 * r->st.noise, (long long)r->st.n);
    if (r == &res->graph && row_timed(&res->chained) && res->chained.st.median > 0)
        fprintf(o, "  launch overhead of the stream forward: %.1f%%",
                100 * (res->chained.st.median - r->st.median) / res->chained.st.median);
    fputc('\n', o);
}

/* The in-model view, summed: what the layers take inside the forward against alone,
 * per kind, which is where the gap between the chain and the sum of layers comes from. */
static void print_inmodel(FILE *o, const run_result *res)
{
    const model *m = res->m;
    if (!res->inmodel)
        return;
    double alone_all = 0, inside_all = 0;
    for (int i = 0; i < m->n_layers; i++)
        if (row_timed(&res->layers[i]) && row_timed(&res->inmodel[i]))
            alone_all += res->layers[i].st.median, inside_all += res->inmodel[i].st.median;
    char a[24], b[24];
    fprintf(o, "  sum of in-model medians        %12s  (the layers inside the forward: %+.1f%% against the chained "
               "median)\n",
            report_format_time(inside_all, a, sizeof a),
            row_timed(&res->chained) && res->chained.st.median > 0
                ? 100 * (inside_all - res->chained.st.median) / res->chained.st.median
                : 0.0);
    if (alone_all <= 0)
        return;
    fprintf(o, "\n  Alone vs inside the forward, by kind (where the gap comes from):\n");
    fprintf(o, "  %-18s  %5s  %12s  %12s  %8s  %s\n", "Kind", "Count", "Alone", "In forward", "Diff", "");
    for (int k = 0; k < LAYER_KIND_COUNT; k++) {
        double alone = 0, inside = 0;
        int count = 0;
        for (int i = 0; i < m->n_layers; i++)
            if ((int)m->layers[i].kind == k && row_timed(&res->layers[i]) && row_timed(&res->inmodel[i]))
                alone += res->layers[i].st.median, inside += res->inmodel[i].st.median, count++;
        if (!count)
            continue;
        double diff = alone > 0 ? (inside - alone) / alone : 0;
        /* what most likely makes a kind differ inside the forward (docs/csv.md) */
        bool gpu = strcmp(res->backend, "cpu") != 0;
        const char *why = diff > 0.05 && gpu   ? "slower inside: launch and dependency gaps, a colder L2 (likely)"
                          : diff > 0.05        ? "slower inside: its data had left the caches (likely; compare --mode cold)"
                          : diff < -0.05 && gpu ? "faster inside: inputs still in L2 (likely)"
                          : diff < -0.05       ? "faster inside: warmer caches or threads still awake (likely)"
                                               : "";
        fprintf(o, "  %-18s  %5d  %12s  %12s  %+7.1f%%  %s\n", layer_kind_name((layer_kind)k), count,
                report_format_time(alone, a, sizeof a), report_format_time(inside, b, sizeof b), 100 * diff, why);
    }
}

static void print_summary(console *c, const run_result *res)
{
    FILE *o = c->out;
    const layer_result *ch = &res->chained;
    model_totals t = model_sum(res->m);
    char a[24], b[24], f[16];
    int skipped = 0;
    for (int i = 0; i < res->m->n_layers; i++)
        skipped += res->layers[i].status == ROW_SKIPPED || res->layers[i].status == ROW_FAILED;
    fprintf(o, "\nSummary (%s, %s, batch %lld, %s FLOPs):\n", res->backend, res->mode, (long long)res->m->batch,
            report_format_count((double)t.flops, f, sizeof f));
    fprintf(o, "  sum of layer medians (alone)   %12s%s\n", report_format_time(res->sum_medians, a, sizeof a),
            skipped ? "  (skipped and failed layers not included)" : "");
    if (!res->has_model)
        return;
    if (!row_timed(ch)) {
        fprintf(o, "  chained forward                %s\n", ch->note);
        return;
    }
    fprintf(o, "  chained forward median         %12s  (noise %.1f%%, %lld samples, %.1f GFLOP/s, %.1f items/s)\n",
            report_format_time(ch->st.median, b, sizeof b), 100 * ch->st.noise, (long long)ch->st.n,
            gflops(t.flops, ch->st.median), (double)res->m->batch / ch->st.median);
    if (res->sum_medians > 0)
        fprintf(o, "  gap (chained vs sum of layers) %+11.1f%%\n",
                100 * (ch->st.median - res->sum_medians) / res->sum_medians);
    print_inmodel(o, res);
    print_extra(o, "graph replay of the forward", &res->graph, res);
    print_extra(o, "input copy, host to device", &res->upload, res);
    print_extra(o, "output copy, device to host", &res->download, res);
}

static bench_status console_run(reporter *r, const run_result *res)
{
    console *c = (console *)r;
    model_totals t = model_sum(res->m);
    char p[16], f[16];
    char th[32] = "";
    if (res->threads)
        snprintf(th, sizeof th, ", %d thread%s", res->threads, res->threads == 1 ? "" : "s");
    fprintf(c->out, "\n=== %s on %s (%s timing): batch %lld%s, float32 — %d layers, %s params, %s FLOPs ===\n",
            res->m->name, res->backend, res->mode, (long long)res->m->batch, th, res->m->n_layers,
            report_format_count((double)t.n_weights, p, sizeof p), report_format_count((double)t.flops, f, sizeof f));
    print_layers(c, res);
    print_by_shape(c, res);
    print_by_kind(c, res);
    print_summary(c, res);
    fflush(c->out);
    return BENCH_OK;
}

static bench_status console_finish(reporter *r, bool ok)
{
    (void)ok;
    free(r);
    return BENCH_OK;
}

reporter *report_console_create(FILE *out, const report_options *ro)
{
    console *c = xcalloc(1, sizeof *c);
    c->base.run = console_run;
    c->base.finish = console_finish;
    c->out = out;
    c->ro = *ro;
    return &c->base;
}

/* ---- sweep summary ---------------------------------------------------------------------- */

typedef struct sweep {
    reporter base;
    FILE *out;
    int rows;
} sweep;

static bench_status sweep_run(reporter *r, const run_result *res)
{
    sweep *s = (sweep *)r;
    const layer_result *ch = &res->chained;
    char a[24], b[24];
    if (!res->has_model)
        return BENCH_OK;
    if (s->rows++ == 0)
        fprintf(s->out, "%-8s  %6s  %14s  %7s  %14s  %14s  %8s\n", "Backend", "Batch", "Chained median", "Noise",
                "Items/s", "Sum of layers", "Gap");
    if (!row_timed(ch)) {
        fprintf(s->out, "%-8s  %6lld  %14s  %7s  %14s  %14s  %8s\n", res->backend, (long long)res->m->batch, "not run",
                "-", "-", report_format_time(res->sum_medians, b, sizeof b), "-");
        return BENCH_OK;
    }
    fprintf(s->out, "%-8s  %6lld  %14s  %6.1f%%  %14.1f  %14s  %+7.1f%%\n", res->backend, (long long)res->m->batch,
            report_format_time(ch->st.median, a, sizeof a), 100 * ch->st.noise, (double)res->m->batch / ch->st.median,
            report_format_time(res->sum_medians, b, sizeof b),
            res->sum_medians > 0 ? 100 * (ch->st.median - res->sum_medians) / res->sum_medians : 0.0);
    fflush(s->out);
    return BENCH_OK;
}

reporter *report_sweep_create(FILE *out)
{
    sweep *s = xcalloc(1, sizeof *s);
    s->base.run = sweep_run;
    s->base.finish = console_finish;
    s->out = out;
    return &s->base;
}

/* ---- bench list ------------------------------------------------------------------------- */

void report_list_table(FILE *o, const model *m)
{
    int nw = name_width(m);
    char in[48], out[48], pa[24], fl[24], by[24], s[48];
    fprintf(o, "%s: input %s, batch %lld, float32, %d layers\n\n", m->name, shape_format_compact(&m->input, s, sizeof s),
            (long long)m->batch, m->n_layers);
    fprintf(o, "%4s  %-*s  %-18s  %-16s  %-16s  %12s  %16s  %14s  %s\n", "#", nw, "Name", "Kind", "Input", "Output",
            "Params", "FLOPs", "Bytes", "Parameters");
    for (int i = 0; i < m->n_layers; i++) {
        const layer *l = &m->layers[i];
        char par[160];
        snprintf(pa, sizeof pa, "%lld", (long long)l->n_weights);
        snprintf(fl, sizeof fl, "%lld", (long long)l->flops);
        snprintf(by, sizeof by, "%lld", (long long)l->bytes);
        fprintf(o, "%4d  %-*.*s  %-18s  %-16s  %-16s  %12s  %16s  %14s  %s\n", i, nw, nw, l->name, layer_kind_name(l->kind),
                shape_format_compact(&l->in, in, sizeof in), shape_format_compact(&l->out, out, sizeof out), pa, fl, by,
                layer_params_format(l, par, sizeof par));
    }
    model_totals t = model_sum(m);
    fprintf(o, "\nTotals: %lld params, %lld MACs, %lld FLOPs, %lld bytes moved (layer by layer)\n",
            (long long)t.n_weights, (long long)t.macs, (long long)t.flops, (long long)t.bytes);
    fprintf(o, "Memory a run needs (activations, weights, isolated buffers; workspaces aside): %s\n",
            bench_format_bytes(model_memory_bytes(m), s, sizeof s));
}
