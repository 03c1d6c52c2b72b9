/* Console reporters: the per-layer table (like torch.profiler's key_averages().table()),
 * the tables grouped by input shape and by kind, and the sweep summary. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "backend_registry.h"
#include "blocks.h"
#include "report.h"
#include "host.h"

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

/* A set's per-layer figures, kept for the table across dtypes and passes (print_dtypes). */
typedef struct kept_set {
    char backend[16];
    timing_mode mode;
    int64_t batch;
    dtype_t dtype;
    layer_pass pass;
    const model *m;           /* borrowed: the run's model, whose names and kinds do not change */
    double *median, *error;   /* per layer; < 0: none */
    double alone, inmodel;    /* sums of the layers timed both alone and inside the forward (0: no in-model view) */
    double chained;           /* the chained forward's median; 0: not run */
} kept_set;

typedef struct console {
    reporter base;
    FILE *out;
    report_options ro;
    kept_set *sets;
    int n_sets;
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

bool report_groups_parse(const char *list, unsigned *groups)
{
    *groups = REPORT_GROUP_SET;
    char *copy = xstrdup(list), *save = NULL;
    bool ok = *list != 0;
    for (char *t = strtok_r(copy, ",", &save); t && ok; t = strtok_r(NULL, ",", &save)) {
        if (strcmp(t, "shape") == 0)
            *groups |= REPORT_GROUP_SHAPE;
        else if (strcmp(t, "kind") == 0)
            *groups |= REPORT_GROUP_KIND;
        else if (strcmp(t, "block") == 0)
            *groups |= REPORT_GROUP_BLOCK;
        else if (strcmp(t, "none") != 0)
            ok = false;
    }
    free(copy);
    return ok;
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

/* The noise figure of a row: "-" under 3 samples, where a MAD says nothing. */
static char *format_noise(const stats *st, char *buf, size_t len)
{
    if (st->n < 3)
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%.1f%%", 100 * st->noise);
    return buf;
}

static double pct(double part, double whole) { return whole > 0 ? 100 * part / whole : 0.0; }

static int contended_rows(const run_result *res)
{
    int n = 0;
    for (int i = 0; i < res->m->n_layers; i++)
        n += row_timed(&res->layers[i]) && res->layers[i].contended;
    return n;
}

static void print_layers(console *c, const run_result *res)
{
    const model *m = res->m;
    int n = m->n_layers;
    int *rows = xmalloc((size_t)n * sizeof *rows);
    for (int i = 0; i < n; i++)
        rows[i] = i;
    sort_res = res, sort_by = c->ro.sort;
    qsort(rows, (size_t)n, sizeof *rows, cmp_rows);
    int shown = c->ro.top > 0 && c->ro.top < n ? c->ro.top : n;
    char title[400];
    snprintf(title, sizeof title, "Per-layer times (%s timing, sorted by %s%s; Noise: 1.4826 MAD / median; In-model: the "
                                  "layer inside the chained forward; Roofline: percent of the roof at the layer's "
                                  "intensity, memory- or FLOP-bound%s)%s",
             measure_mode_name(res->mode), c->ro.sort, shown < n ? ", top rows" : "",
             contended_rows(res) ? "; Mode*: contended, other processes shared its cores" : "",
             c->ro.format == TABLE_MD ? "" : ":");
    table_heading(c->out, c->ro.format, 3, title);
    bool errors = false;
    for (int i = 0; i < n; i++)
        errors |= res->layers[i].has_error;
    table *t = table_create(errors ? 16 : 15, errors ? "rllllrrlrrrrrrrl" : "rllllrrlrrrrrrl");
    const char *heads[] = {"#", "Name", "Kind", "Input", "Output", "Params", "FLOPs", "Mode", "Median", "Noise",
                           "In-model", "%Total", "GFLOP/s", "Roofline", errors ? "Error" : "Impl", "Impl"};
    for (int k = 0; k < (errors ? 16 : 15); k++)
        table_header(t, k, heads[k], k == 1 ? 40 : 0);
    for (int k = 0; k < shown; k++) {
        int i = rows[k];
        const layer *l = &m->layers[i];
        const layer_result *r = &res->layers[i];
        const layer_result *im = res->inmodel ? &res->inmodel[i] : NULL;
        char in[48], out[48], pa[16], fl[16], tm[24], noise[16], inm[24] = "-";
        if (im && row_timed(im))
            report_format_time(im->st.median, inm, sizeof inm);
        table_cell(t, "%d", i);
        table_cell(t, "%s", l->name);
        table_cell(t, "%s", layer_kind_name(l->kind));
        table_cell(t, "%s", shape_format_compact(&l->in, in, sizeof in));
        table_cell(t, "%s", shape_format_compact(&l->out, out, sizeof out));
        table_cell(t, "%s", report_format_count((double)l->n_weights, pa, sizeof pa));
        table_cell(t, "%s", report_format_count((double)l->flops, fl, sizeof fl));
        table_cell(t, "%s%s", r->mode ? measure_mode_name(r->mode) : "-", row_timed(r) && r->contended ? "*" : "");
        if (row_timed(r)) {
            table_cell(t, "%s", report_format_time(r->st.median, tm, sizeof tm));
            table_cell(t, "%s", format_noise(&r->st, noise, sizeof noise));
            table_cell(t, "%s", inm);
            table_cell(t, "%.1f%%", pct(r->st.median, res->sum_medians));
            if (l->flops)
                table_cell(t, "%.1f", gflops(l->flops, r->st.median));
            else
                table_cell(t, "-");
            double roof;
            const char *bound;
            if (report_roofline(l->flops, l->bytes, r->st.median, r->mode == MODE_COLD, &res->peaks,
                                layer_compute_dtype(l), &roof, &bound))
                table_cell(t, "%.0f%% %s", roof, bound[0] == 'm' ? "mem" : bound[0] == 'c' && bound[1] == 'a' ? "cache" : "fp");
            else
                table_cell(t, "-");
        } else {
            table_cell(t, "%s", measure_row_status_name(r->status));
            table_cell(t, "-"), table_cell(t, "%s", inm), table_cell(t, "-"), table_cell(t, "-"), table_cell(t, "-");
        }
        if (errors && r->has_error)
            table_cell(t, "%.1e", r->rel_error);
        else if (errors)
            table_cell(t, "-");
        table_cell(t, "%s%s%s", r->impl, r->note[0] && r->impl[0] ? "  " : "", r->note);
        table_end_row(t);
    }
    table_print(t, c->out, c->ro.format, "");
    table_free(t);
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
    table_heading(c->out, c->ro.format, 3,
                  c->ro.format == TABLE_MD ? "Grouped by input shape (same kind, input shape and parameters; by total time)"
                                           : "Grouped by input shape (same kind, input shape and parameters; by total "
                                             "time):");
    table *t = table_create(7, "lllrrrr");
    const char *heads[] = {"Kind", "Input", "Parameters", "Count", "Total", "Avg", "%Total"};
    for (int k = 0; k < 7; k++)
        table_header(t, k, heads[k], k == 2 ? 44 : 0);
    for (int k = 0; k < shown; k++) {
        const layer *l = &res->m->layers[g[k].first];
        char in[48], par[160], tot[24], avg[24];
        shape_format_compact(&l->in, in, sizeof in);
        if (l->n_inputs > 1) /* more inputs: say how many */
            snprintf(in + strlen(in), sizeof in - strlen(in), " (+%d)", l->n_inputs - 1);
        table_cell(t, "%s", layer_kind_name(l->kind));
        table_cell(t, "%s", in);
        table_cell(t, "%s", layer_params_format(l, par, sizeof par));
        table_cell(t, "%d", g[k].count);
        table_cell(t, "%s", report_format_time(g[k].total, tot, sizeof tot));
        table_cell(t, "%s", report_format_time(g[k].total / g[k].count, avg, sizeof avg));
        table_cell(t, "%.1f%%", pct(g[k].total, res->sum_medians));
        table_end_row(t);
    }
    table_print(t, c->out, c->ro.format, "");
    table_free(t);
    free(g);
}

static void print_by_kind(console *c, const run_result *res)
{
    int n;
    group *g = make_groups(res, true, &n);
    table_heading(c->out, c->ro.format, 3, c->ro.format == TABLE_MD ? "Grouped by kind" : "Grouped by kind:");
    table *t = table_create(6, "lrrrrr");
    const char *heads[] = {"Kind", "Count", "Total", "Avg", "%Total", "GFLOP/s"};
    for (int k = 0; k < 6; k++)
        table_header(t, k, heads[k], 0);
    for (int k = 0; k < n; k++) {
        char tot[24], avg[24];
        table_cell(t, "%s", layer_kind_name(res->m->layers[g[k].first].kind));
        table_cell(t, "%d", g[k].count);
        table_cell(t, "%s", report_format_time(g[k].total, tot, sizeof tot));
        table_cell(t, "%s", report_format_time(g[k].total / g[k].count, avg, sizeof avg));
        table_cell(t, "%.1f%%", pct(g[k].total, res->sum_medians));
        if (g[k].flops)
            table_cell(t, "%.1f", gflops(g[k].flops, g[k].total));
        else
            table_cell(t, "-");
        table_end_row(t);
    }
    table_print(t, c->out, c->ro.format, "");
    table_free(t);
    free(g);
}

void report_block_times(const run_result *res, const model_blocks *mb, double *total, double *self, double *inmodel)
{
    const model *m = res->m;
    for (int b = 0; b < mb->n_blocks; b++)
        total[b] = self[b] = inmodel[b] = 0;
    for (int i = 0; i < m->n_layers; i++) {
        double t = row_timed(&res->layers[i]) ? res->layers[i].st.median : 0;
        double im = res->inmodel && row_timed(&res->inmodel[i]) ? res->inmodel[i].st.median : 0;
        self[mb->layer_block[i]] += t;
        for (int b = mb->layer_block[i]; b >= 0; b = mb->blocks[b].parent)
            total[b] += t, inmodel[b] += im;
    }
}

/* The module hierarchy, like torch.profiler's total and self time per module: a block's
 * total is every layer inside it, its self time the layers directly in it. */
static void print_by_block(console *c, const run_result *res)
{
    model_blocks mb;
    model_blocks_build(res->m, &mb);
    double *total = xmalloc(3 * (size_t)mb.n_blocks * sizeof *total), *self = total + mb.n_blocks,
           *inm = self + mb.n_blocks;
    report_block_times(res, &mb, total, self, inm);
    bool md = c->ro.format == TABLE_MD, fwd = res->has_model && row_timed(&res->chained) && res->inmodel;
    table_heading(c->out, c->ro.format, 3,
                  md ? "By block (the module hierarchy: total is every layer inside a block, self the layers directly "
                       "in it; alone, then inside the forward)"
                     : "By block (the module hierarchy: total is every layer inside a block, self the layers directly "
                       "in it; alone, then inside the forward):");
    table *t = table_create(7, "lrrrrrr");
    const char *heads[] = {"Block", "Layers", "Total", "Self", "%Total", "In-model", "%Forward"};
    for (int k = 0; k < 7; k++)
        table_header(t, k, heads[k], 0);
    for (int b = 0; b < mb.n_blocks; b++) {
        const block_info *bi = &mb.blocks[b];
        char tot[24], sf[24], im[24] = "-";
        if (md)
            table_cell(t, "%s", bi->name);
        else
            table_cell(t, "%*s%s", 2 * bi->depth, "", bi->name);
        table_cell(t, "%d", bi->n_layers);
        table_cell(t, "%s", report_format_time(total[b], tot, sizeof tot));
        table_cell(t, "%s", self[b] > 0 ? report_format_time(self[b], sf, sizeof sf) : "-");
        table_cell(t, "%.1f%%", pct(total[b], res->sum_medians));
        if (fwd) {
            table_cell(t, "%s", report_format_time(inm[b], im, sizeof im));
            table_cell(t, "%.1f%%", pct(inm[b], res->chained.st.median));
        } else {
            table_cell(t, "-"), table_cell(t, "-");
        }
        table_end_row(t);
    }
    table_print(t, c->out, c->ro.format, "");
    table_free(t);
    free(total);
    model_blocks_free(&mb);
}

/* One line of the summary: "  label   value  (details)" as text, a bullet in markdown. */
static void summary_line(console *c, const char *label, const char *value, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void summary_line(console *c, const char *label, const char *value, const char *fmt, ...)
{
    char more[600] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(more, sizeof more, fmt, ap);
        va_end(ap);
    }
    if (c->ro.format == TABLE_MD)
        fprintf(c->out, "- %s: **%s**%s%s\n", label, value, *more ? " " : "", more);
    else
        fprintf(c->out, "  %-30s %12s%s%s\n", label, value, *more ? "  " : "", more);
}

/* A whole-model row of the summary: graph replay, copies. */
static void print_extra(console *c, const char *what, const layer_result *r, const run_result *res)
{
    char t[24], noise[16];
    if (r->status == ROW_NONE)
        return;
    if (!row_timed(r)) {
        summary_line(c, what, "not run", "%s", r->note);
        return;
    }
    char launch[96] = "";
    if (r == &res->graph && row_timed(&res->chained) && res->chained.st.median > 0)
        snprintf(launch, sizeof launch, "  launch overhead of the stream forward: %.1f%%",
                 100 * (res->chained.st.median - r->st.median) / res->chained.st.median);
    summary_line(c, what, report_format_time(r->st.median, t, sizeof t), "(noise %s, %lld samples)%s",
                 format_noise(&r->st, noise, sizeof noise), (long long)r->st.n, launch);
}

/* The parts of the layers the backend split inside the forward (attention's stages),
 * summed per kind and part over the layers: where a block's time goes. */
static void print_parts(console *c, const run_result *res)
{
    if (!res->n_parts)
        return;
    if (c->ro.format == TABLE_MD)
        table_heading(c->out, c->ro.format, 4, "Inside the layers, by part (summed over the layers of a kind)");
    else
        fprintf(c->out, "\n  Inside the layers, by part (summed over the layers of a kind):\n");
    table *t = table_create(6, "llrrrr");
    const char *heads[] = {"Kind", "Part", "Count", res->m->pass == PASS_TRAIN ? "In step" : "In forward", "%Layer", "GFLOP/s"};
    for (int k = 0; k < 6; k++)
        table_header(t, k, heads[k], 0);
    /* one row per (kind, part), at the part's first appearance, summed over the layers */
    for (int j = 0; j < res->n_parts; j++) {
        const part_result *p = &res->parts[j];
        layer_kind kind = res->m->layers[p->layer].kind;
        bool seen = false;
        for (int q = 0; q < j && !seen; q++)
            seen = res->m->layers[res->parts[q].layer].kind == kind && !strcmp(res->parts[q].info.name, p->info.name);
        double inside = 0, whole = 0;
        int64_t flops = 0;
        int count = 0;
        for (int q = j; q < res->n_parts && !seen; q++) {
            const part_result *x = &res->parts[q];
            if (res->m->layers[x->layer].kind == kind && !strcmp(x->info.name, p->info.name) && row_timed(&x->r))
                inside += x->r.st.median, flops += x->info.flops, count++, whole += res->inmodel[x->layer].st.median;
        }
        if (!count)
            continue;
        char a[24];
        table_cell(t, "%s", layer_kind_name(kind));
        table_cell(t, "%s", p->info.name);
        table_cell(t, "%d", count);
        table_cell(t, "%s", report_format_time(inside, a, sizeof a));
        table_cell(t, "%.1f%%", pct(inside, whole));
        if (flops)
            table_cell(t, "%.1f", gflops(flops, inside));
        else
            table_cell(t, "-");
        table_end_row(t);
    }
    table_print(t, c->out, c->ro.format, "  ");
    table_free(t);
}

/* The in-model view, summed: what the layers take inside the forward against alone,
 * per kind, which is where the gap between the chain and the sum of layers comes from. */
static void print_inmodel(console *c, const run_result *res)
{
    const model *m = res->m;
    if (!res->inmodel)
        return;
    double alone_all = 0, inside_all = 0;
    for (int i = 0; i < m->n_layers; i++)
        if (row_timed(&res->layers[i]) && row_timed(&res->inmodel[i]))
            alone_all += res->layers[i].st.median, inside_all += res->inmodel[i].st.median;
    char a[24], b[24];
    summary_line(c, "sum of in-model medians", report_format_time(inside_all, a, sizeof a),
                 "(the layers inside the %s: %+.1f%% against the chained median)",
                 m->pass == PASS_TRAIN ? "step, forward and backward" : "forward",
                 row_timed(&res->chained) && res->chained.st.median > 0
                     ? 100 * (inside_all - res->chained.st.median) / res->chained.st.median
                     : 0.0);
    if (alone_all <= 0)
        return;
    if (c->ro.format == TABLE_MD)
        table_heading(c->out, c->ro.format, 4,
                      m->pass == PASS_TRAIN ? "Alone vs inside the training step, by kind (where the gap comes from)"
                                            : "Alone vs inside the forward, by kind (where the gap comes from)");
    else
        fprintf(c->out, "\n  Alone vs inside the %s, by kind (where the gap comes from):\n",
                m->pass == PASS_TRAIN ? "training step" : "forward");
    table *t = table_create(6, "lrrrrl");
    const char *heads[] = {"Kind", "Count", "Alone", m->pass == PASS_TRAIN ? "In step" : "In forward", "Diff", "Likely cause"};
    for (int k = 0; k < 6; k++)
        table_header(t, k, heads[k], 0);
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
        bool gpu = backend_is_gpu(res->backend);
        const char *why = diff > 0.05 && gpu   ? "slower inside: launch and dependency gaps, a colder L2 (likely)"
                          : diff > 0.05        ? "slower inside: its data had left the caches (likely; compare --mode cold)"
                          : diff < -0.05 && gpu ? "faster inside: inputs still in L2 (likely)"
                          : diff < -0.05       ? "faster inside: warmer caches or threads still awake (likely)"
                                               : "";
        table_cell(t, "%s", layer_kind_name((layer_kind)k));
        table_cell(t, "%d", count);
        table_cell(t, "%s", report_format_time(alone, a, sizeof a));
        table_cell(t, "%s", report_format_time(inside, b, sizeof b));
        table_cell(t, "%+.1f%%", 100 * diff);
        table_cell(t, "%s", why);
        table_end_row(t);
    }
    table_print(t, c->out, c->ro.format, "  ");
    table_free(t);
    print_parts(c, res);
}

/* The training step's memory, planned (model_train_plan). */
static void print_train_memory(console *c, const model *m, int64_t ws)
{
    model_train_memory tm;
    model_train_plan(m, &tm);
    char v[32], a[32], b[32], d[32], e[32], o[32], opt[80], when[300];
    int n = m->n_layers;
    if (m->optimizer == OPTIMIZER_NONE)
        snprintf(opt, sizeof opt, "no optimizer state");
    else if (!tm.optimizer_bytes)
        snprintf(opt, sizeof opt, "%s keeps no state", model_optimizer_name(m->optimizer));
    else
        snprintf(opt, sizeof opt, "%s's state %s", model_optimizer_name(m->optimizer),
                 bench_format_bytes(tm.optimizer_bytes, o, sizeof o));
    if (tm.master_bytes) {
        size_t at = strlen(opt);
        snprintf(opt + at, sizeof opt - at, ", fp32 master weights %s", bench_format_bytes(tm.master_bytes, o, sizeof o));
    }
    if (tm.peak_step < n)
        snprintf(when, sizeof when, "the forward of %s", tm.peak_step >= 0 ? m->layers[tm.peak_step].name : "-");
    else if (tm.peak_step == n)
        snprintf(when, sizeof when, "the loss");
    else
        snprintf(when, sizeof when, "the backward of %s", m->layers[2 * n - tm.peak_step].name);
    summary_line(c, "memory of the training step", bench_format_bytes(tm.peak_bytes + ws, v, sizeof v),
                 "(at most, during %s: weights %s, their gradients %s, activations kept for the backward %s at the "
                 "loss, and the activations' gradients; + the largest workspace %s; if each tensor is freed after "
                 "its last use; %s)",
                 when, bench_format_bytes(tm.weight_bytes, a, sizeof a), bench_format_bytes(tm.weight_grad_bytes, b, sizeof b),
                 bench_format_bytes(tm.kept_bytes, d, sizeof d), bench_format_bytes(ws, e, sizeof e), opt);
}

/* The roofline's ceilings and the forward's memory. */
static void print_machine(console *c, const run_result *res)
{
    const backend_peaks *pk = &res->peaks;
    char v[64], a[32], b[32], d[32], e[32];
    if (pk->flops_per_s > 0 && pk->bytes_per_s > 0) {
        snprintf(v, sizeof v, "%.1f GFLOP/s, %.1f GB/s", pk->flops_per_s * 1e-9, pk->bytes_per_s * 1e-9);
        char cache[96] = "";
        if (pk->cache_bytes_per_s > 0)
            snprintf(cache, sizeof cache, "; from the caches %.1f GB/s, for layers of up to %s run warm",
                     pk->cache_bytes_per_s * 1e-9, bench_format_bytes(pk->cache_bytes, a, sizeof a));
        summary_line(c, "peaks (measured)", v, "(memory balance %.1f FLOP/byte%s: %s; %s)",
                     pk->flops_per_s / pk->bytes_per_s, cache, pk->compute_probe, pk->bandwidth_probe);
        for (int t = 0; t < DTYPE_COUNT; t++)
            if (pk->dtype_flops_per_s[t] > 0) {
                char what[40];
                snprintf(what, sizeof what, "%s peak (measured)", dtype_name((dtype_t)t));
                snprintf(v, sizeof v, "%.1f GFLOP/s", pk->dtype_flops_per_s[t] * 1e-9);
                summary_line(c, what, v, "(%s; the roof of the %s rows)", pk->dtype_probe[t], dtype_name((dtype_t)t));
            }
    }
    model_memory mm;
    model_memory_plan(res->m, &mm);
    int64_t ws = 0;
    for (int i = 0; i < res->m->n_layers; i++)
        ws = res->layers[i].workspace_bytes > ws ? res->layers[i].workspace_bytes : ws;
    if (res->m->pass == PASS_TRAIN) {
        print_train_memory(c, res->m, ws);
        return;
    }
    summary_line(c, "memory of the forward", bench_format_bytes(mm.weight_bytes + mm.peak_activation_bytes + ws, v, sizeof v),
                 "(weights %s + activations at most %s, while %s runs, + the largest workspace %s, if each tensor is "
                 "freed after its last reader)",
                 bench_format_bytes(mm.weight_bytes, a, sizeof a), bench_format_bytes(mm.peak_activation_bytes, b, sizeof b),
                 mm.peak_layer >= 0 ? res->m->layers[mm.peak_layer].name : "-", bench_format_bytes(ws, d, sizeof d));
    if (res->forward_device_bytes >= 0)
        summary_line(c, "device memory of the forward", bench_format_bytes(res->forward_device_bytes, v, sizeof v),
                     "(measured: free memory before minus after its setup; its activation buffers, each reused once "
                     "its value's last reader has run (%s if none were), and every layer's own workspace)",
                     bench_format_bytes(mm.all_activation_bytes, e, sizeof e));
}

/* How the set was measured: its worker processes, its canary, its contended rows. */
static void print_measurement(console *c, const run_result *res)
{
    char v[48], t[24];
    double canary, drift;
    measure_canary_summary(res, &canary, &drift);
    if (res->processes || res->processes_aside) {
        snprintf(v, sizeof v, "%d pooled", res->processes);
        if (res->processes_aside)
            summary_line(c, "worker processes", v, "(%d set aside: their layers took %.0f%% longer in all, a slow phase "
                                                   "of the machine)", res->processes_aside, 100 * res->phase_slowdown);
        else
            summary_line(c, "worker processes", v, NULL);
    }
    if (canary > 0)
        summary_line(c, "canary", report_format_time(canary, t, sizeof t), "(a fixed workload, every round; drift %.1f%%)",
                     100 * drift);
    int rows = 0, contended = 0;
    for (int i = 0; i < res->m->n_layers; i++)
        if (res->layers[i].status == ROW_OK)
            rows++, contended += res->layers[i].contended;
    if (contended) {
        snprintf(v, sizeof v, "%d of %d (%.0f%%)", contended, rows, 100.0 * contended / rows);
        summary_line(c, "contended rows", v, "(other processes shared their cores%s%s)", *res->contention ? ": " : "",
                     res->contention);
    }
}

static void print_decoder(console *c, const run_result *res);

/* The step's seconds at the measured peak: each type's FLOPs at that type's own ceiling
 * (backend_peak_flops: a bf16 GEMM's where measured, else the fp32 one), so that a bf16
 * step is not held against the sgemm's peak; which names the ceiling ("bf16 peak",
 * "fp16's peak (fp32's)", "peaks" for several types). 0 where one is unknown. */
static double step_peak_seconds(const model_totals *t, const backend_peaks *pk, char *which, size_t len)
{
    double s = 0;
    int types = 0;
    dtype_t one = DTYPE_FP32;
    for (int d = 0; d < DTYPE_COUNT; d++) {
        if (t->dtype_flops[d] <= 0)
            continue;
        double peak = backend_peak_flops(pk, (dtype_t)d);
        if (peak <= 0)
            return 0;
        s += (double)t->dtype_flops[d] / peak;
        types++, one = (dtype_t)d;
    }
    if (types > 1)
        snprintf(which, len, "peaks (each type's)");
    else if (one != DTYPE_FP32 && pk->dtype_flops_per_s[one] <= 0)
        snprintf(which, len, "peak (fp32's: %s's not measured)", dtype_name(one));
    else
        snprintf(which, len, "%s peak", dtype_name(one));
    return s;
}

static void print_summary(console *c, const run_result *res)
{
    const layer_result *ch = &res->chained;
    model_totals t = model_sum(res->m);
    char a[24], b[24], f[16], title[160], noise[16];
    int skipped = 0;
    for (int i = 0; i < res->m->n_layers; i++)
        skipped += res->layers[i].status == ROW_SKIPPED || res->layers[i].status == ROW_FAILED;
    snprintf(title, sizeof title, "Summary (%s, %s, batch %lld, %s FLOPs)%s", res->backend, measure_mode_name(res->mode),
             (long long)res->m->batch, report_format_count((double)t.flops, f, sizeof f),
             c->ro.format == TABLE_MD ? "" : ":");
    table_heading(c->out, c->ro.format, 3, title);
    if (c->ro.format == TABLE_MD)
        fputc('\n', c->out);
    summary_line(c, "sum of layer medians (alone)", report_format_time(res->sum_medians, a, sizeof a), "%s",
                 skipped ? "(skipped and failed layers not included)" : "");
    print_measurement(c, res);
    if (!res->has_model)
        return;
    print_machine(c, res);
    bool train = res->m->pass == PASS_TRAIN;
    if (!row_timed(ch)) {
        summary_line(c, train ? "training step" : "chained forward", "not run", "%s", ch->note);
        return;
    }
    if (train) { /* its rate against the measured peak (model FLOPs utilisation), and tokens for a decoder */
        char extra[128] = "";
        int64_t tokens = model_tokens(res->m);
        char which[48];
        double ideal = step_peak_seconds(&t, &res->peaks, which, sizeof which);
        if (ideal > 0)
            snprintf(extra, sizeof extra, " = %.0f%% of the measured %s", 100 * ideal / ch->st.median, which);
        if (tokens > 0)
            snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ", %.0f tokens/s",
                     (double)(res->m->batch * tokens) / ch->st.median);
        summary_line(c, "training step median", report_format_time(ch->st.median, b, sizeof b),
                     "(noise %s, %lld samples, %.1f GFLOP/s%s, %.1f samples/s; %s%s%s)",
                     format_noise(&ch->st, noise, sizeof noise), (long long)ch->st.n, gflops(t.flops, ch->st.median),
                     extra, (double)res->m->batch / ch->st.median, ch->impl, *ch->note ? "; " : "", ch->note);
    } else {
        summary_line(c, "chained forward median", report_format_time(ch->st.median, b, sizeof b),
                     "(noise %s, %lld samples, %.1f GFLOP/s, %.1f items/s)", format_noise(&ch->st, noise, sizeof noise),
                     (long long)ch->st.n, gflops(t.flops, ch->st.median), (double)res->m->batch / ch->st.median);
    }
    if (res->sum_medians > 0) {
        char gap[24];
        snprintf(gap, sizeof gap, "%+.1f%%", 100 * (ch->st.median - res->sum_medians) / res->sum_medians);
        summary_line(c, "gap (chained vs sum of layers)", gap, NULL);
    }
    if (!train) /* a training step has no first token, no decode: its tokens/s is above */
        print_decoder(c, res);
    print_inmodel(c, res);
    print_extra(c, "graph replay of the forward", &res->graph, res);
    print_extra(c, "input copy, host to device", &res->upload, res);
    print_extra(c, "output copy, device to host", &res->download, res);
}

/* Bytes a layer reads besides its activations: weights (an embedding's gathered rows, the
 * experts a moe runs) and an attention layer's KV cache. */
static int64_t state_bytes(const layer *l)
{
    int64_t act = shape_numel(&l->out);
    for (int k = 0; k < l->n_inputs; k++)
        act += shape_numel(&l->ins[k]);
    int64_t b = l->bytes - (int64_t)dtype_size(l->dtype) * act;
    return b > 0 ? b : 0;
}

/* A decoder's figures (a model with token ids): prefill's time to first token and
 * tokens/s, or decode's time per output token and tokens/s over the batch; for decode,
 * the physical limit (the weights and KV cache read once at the read stream measured in
 * the set's own rounds, else at the triad at the start) and the linear layers' share of
 * that stream. */
static void print_decoder(console *c, const run_result *res)
{
    const model *m = res->m;
    int64_t t_len = model_tokens(m), s = model_kv_len(m), n = m->batch;
    double med = res->chained.st.median;
    char a[24], b[24];
    if (t_len <= 0 || !(med > 0))
        return;
    s = s > 0 ? s : 0;
    bool decode = model_decode_step(m);
    if (decode)
        summary_line(c, "time per output token", report_format_time(med, a, sizeof a),
                     "(decode after %lld cached: %.1f tokens/s over the batch of %lld)", (long long)s, (double)n / med,
                     (long long)n);
    else
        summary_line(c, "time to first token", report_format_time(med, a, sizeof a),
                     "(prefill of %lld tokens%s: %.0f tokens/s over the batch of %lld)", (long long)t_len,
                     s ? " after a cache" : "", (double)(n * t_len) / med, (long long)n);
    double bw = res->peaks.bytes_per_s, lo, hi, round_bw;
    measure_stream_summary(res, &round_bw, &lo, &hi);
    if (!decode || !(bw > 0))
        return;
    if (round_bw > 0) {
        char v[24];
        snprintf(v, sizeof v, "%.1f GB/s", round_bw * 1e-9);
        summary_line(c, "read stream, every round", v,
                     "(a read-only stream at the start of %d rounds, their median: %.1f to %.1f; the peaks' triad "
                     "at the start of the run %.1f)", res->n_stream, lo * 1e-9, hi * 1e-9, bw * 1e-9);
        bw = round_bw;
    }
    int64_t state = 0, lin_bytes = 0;
    double lin_time = 0;
    /* the linear layers inside the forward, where their weights stream from memory as in
     * a real decode step (alone and warm, part of them stays in the caches) */
    const layer_result *lr = res->inmodel ? res->inmodel : res->layers;
    for (int i = 0; i < m->n_layers; i++) {
        const layer *l = &m->layers[i];
        state += state_bytes(l);
        if (l->kind == LAYER_LINEAR && row_timed(&lr[i]))
            lin_bytes += l->bytes, lin_time += lr[i].st.median;
    }
    double limit = (double)state / bw;
    summary_line(c, "memory limit per token", report_format_time(limit, b, sizeof b),
                 "(weights and KV cache read once: %s at the measured %.1f GB/s%s; the forward takes %.2fx%s)",
                 bench_format_bytes(state, a, sizeof a), bw * 1e-9, round_bw > 0 ? ", the read stream's median" : "",
                 med / limit,
                 state <= res->peaks.cache_bytes ? "; they fit in the caches, which are faster"
                 : med >= limit ? ""
                 : round_bw > 0 ? "; under 1x: the forward read faster than the read stream between its rounds "
                                  "(the memory's speed moved within the run)"
                                : "; under 1x: the memory ran faster during the forward than in the probe at the "
                                  "start, so its speed moved during the run (run again to compare)");
    if (lin_time > 0) {
        char v[24];
        snprintf(v, sizeof v, "%.0f%%", 100 * (double)lin_bytes / lin_time / bw);
        summary_line(c, "linear layers, of the stream", v, "(%.1f GB/s %s: their bytes over their medians)",
                     (double)lin_bytes / lin_time * 1e-9, res->inmodel ? "inside the forward" : "alone");
    }
}

static void keep_set(console *c, const run_result *res);

static bench_status console_run(reporter *r, const run_result *res)
{
    console *c = (console *)r;
    model_totals t = model_sum(res->m);
    char p[16], f[16];
    char th[64] = "";
    if (res->threads)
        snprintf(th, sizeof th, ", %d thread%s", res->threads, res->threads == 1 ? "" : "s");
    if (res->processes)
        snprintf(th + strlen(th), sizeof th - strlen(th), ", %d process%s", res->processes,
                 res->processes == 1 ? "" : "es");
    char dt[64];
    snprintf(dt, sizeof dt, "%s%s%s%s", dtype_name(res->m->dtype), model_mixed(res->m) ? " (mixed)" : "",
             res->m->pass != PASS_FORWARD ? ", " : "", res->m->pass != PASS_FORWARD ? layer_pass_name(res->m->pass) : "");
    if (c->ro.format == TABLE_MD)
        fprintf(c->out, "\n## %s on %s (%s timing)\n\nBatch %lld%s, %s: %d layers, %s params, %s FLOPs.\n",
                res->m->name, res->backend, measure_mode_name(res->mode), (long long)res->m->batch, th, dt, res->m->n_layers,
                report_format_count((double)t.n_weights, p, sizeof p), report_format_count((double)t.flops, f, sizeof f));
    else
        fprintf(c->out, "\n=== %s on %s (%s timing): batch %lld%s, %s — %d layers, %s params, %s FLOPs ===\n",
                res->m->name, res->backend, measure_mode_name(res->mode), (long long)res->m->batch, th, dt, res->m->n_layers,
                report_format_count((double)t.n_weights, p, sizeof p), report_format_count((double)t.flops, f, sizeof f));
    print_layers(c, res);
    keep_set(c, res);
    unsigned g = c->ro.groups & REPORT_GROUP_SET ? c->ro.groups : REPORT_GROUP_DEFAULT;
    if (g & REPORT_GROUP_SHAPE)
        print_by_shape(c, res);
    if (g & REPORT_GROUP_KIND)
        print_by_kind(c, res);
    if (g & REPORT_GROUP_BLOCK)
        print_by_block(c, res);
    print_summary(c, res);
    fflush(c->out);
    return BENCH_OK;
}

/* Keeps res's medians and errors for print_dtypes. */
static void keep_set(console *c, const run_result *res)
{
    int n = res->m->n_layers;
    c->sets = xrealloc(c->sets, (size_t)(c->n_sets + 1) * sizeof *c->sets);
    kept_set *k = &c->sets[c->n_sets++];
    snprintf(k->backend, sizeof k->backend, "%s", res->backend);
    k->mode = res->mode, k->batch = res->m->batch, k->dtype = res->m->dtype, k->pass = res->m->pass, k->m = res->m;
    k->median = xmalloc((size_t)(n ? n : 1) * sizeof *k->median);
    k->error = xmalloc((size_t)(n ? n : 1) * sizeof *k->error);
    k->alone = k->inmodel = 0;
    for (int i = 0; i < n; i++) {
        const layer_result *r = &res->layers[i];
        k->median[i] = row_timed(r) ? r->st.median : -1;
        k->error[i] = r->has_error ? r->rel_error : -1;
        if (res->inmodel && row_timed(r) && row_timed(&res->inmodel[i]))
            k->alone += r->st.median, k->inmodel += res->inmodel[i].st.median;
    }
    k->chained = res->has_model && row_timed(&res->chained) ? res->chained.st.median : 0;
}

/* --backend all: per (batch, dtype, mode) that ran on several backends, each one's sum
 * alone, sum inside the forward and chained forward; and, where the backend faster alone
 * is the slower in the forward, a line saying so: the figure a user reads first would
 * rank them the wrong way round. */
static void print_backends(console *c)
{
    bool *done = xcalloc((size_t)(c->n_sets ? c->n_sets : 1), sizeof *done);
    for (int s = 0; s < c->n_sets; s++) {
        int members[8], nm = 0;
        for (int u = s; u < c->n_sets && nm < 8; u++)
            if (!done[u] && c->sets[u].batch == c->sets[s].batch && c->sets[u].dtype == c->sets[s].dtype &&
                c->sets[u].pass == c->sets[s].pass &&
                c->sets[u].mode == c->sets[s].mode && c->sets[u].chained > 0 && c->sets[u].inmodel > 0)
                members[nm++] = u, done[u] = true;
        if (nm < 2)
            continue;
        const kept_set *first = &c->sets[members[0]];
        char title[200];
        snprintf(title, sizeof title, "By backend: batch %lld, %s, %s timing (the layers timed both ways)%s",
                 (long long)first->batch, dtype_name(first->dtype), measure_mode_name(first->mode), c->ro.format == TABLE_MD ? "" : ":");
        table_heading(c->out, c->ro.format, 3, title);
        table *t = table_create(4, "lrrr");
        table_header(t, 0, "Backend", 0), table_header(t, 1, "Sum alone", 0);
        table_header(t, 2, "Sum inside the forward", 0), table_header(t, 3, "Chained forward", 0);
        char a[24], b[24], d[24];
        for (int m = 0; m < nm; m++) {
            const kept_set *k = &c->sets[members[m]];
            table_cell(t, "%s", k->backend);
            table_cell(t, "%s", report_format_time(k->alone, a, sizeof a));
            table_cell(t, "%s", report_format_time(k->inmodel, b, sizeof b));
            table_cell(t, "%s", report_format_time(k->chained, d, sizeof d));
            table_end_row(t);
        }
        table_print(t, c->out, c->ro.format, "");
        table_free(t);
        for (int x = 0; x < nm; x++)
            for (int y = 0; y < nm; y++) {
                const kept_set *p = &c->sets[members[x]], *q = &c->sets[members[y]];
                if (x == y || !(p->alone < q->alone) || !(p->chained > q->chained))
                    continue;
                char pa[24], qa[24], pc[24], qc[24];
                fprintf(c->out, "%s%s is faster than %s alone (%s against %s) but slower in the forward (chained %s "
                        "against %s; inside it %+.1f%%): the forward's figures are what the model costs\n",
                        c->ro.format == TABLE_MD ? "\n" : "  ", p->backend, q->backend,
                        report_format_time(p->alone, pa, sizeof pa), report_format_time(q->alone, qa, sizeof qa),
                        report_format_time(p->chained, pc, sizeof pc), report_format_time(q->chained, qc, sizeof qc),
                        100 * (p->inmodel - q->inmodel) / q->inmodel);
            }
    }
    free(done);
}

/* On a CPU with AMX, what a cpu bf16 run leaves out: the cpu backend's bf16 GEMMs are
 * AVX512_BF16's (vdpbf16ps), oneDNN's run on AMX's tiles; with onednn's figure where it
 * ran beside it (the same batch, dtype and timing). A fact about these two backends'
 * kernels, so it names them. */
static void print_amx(console *c)
{
    if (!host_has(HOST_AMX_BF16))
        return;
    for (int s = 0; s < c->n_sets; s++) {
        const kept_set *k = &c->sets[s], *od = NULL;
        if (strcmp(k->backend, "cpu") != 0 || k->dtype != DTYPE_BF16)
            continue;
        for (int u = 0; u < c->n_sets && !od; u++)
            if (!strcmp(c->sets[u].backend, "onednn") && c->sets[u].dtype == k->dtype && c->sets[u].pass == k->pass &&
                c->sets[u].batch == k->batch && c->sets[u].mode == k->mode && c->sets[u].chained > 0)
                od = &c->sets[u];
        char a[24], b[24];
        fprintf(c->out, "\nbf16 at batch %lld: this CPU has AMX; the cpu backend's bf16 runs on AVX512_BF16 "
                        "(vdpbf16ps), not on AMX",
                (long long)k->batch);
        if (od && k->chained > 0)
            fprintf(c->out, ": onednn runs bf16 on AMX, its chained forward %s against cpu's %s\n",
                    report_format_time(od->chained, a, sizeof a), report_format_time(k->chained, b, sizeof b));
        else
            fprintf(c->out, "; onednn runs bf16 on AMX (--backend onednn times it)\n");
    }
}

/* A set's name in the table across sets: its dtype, and its pass but the forward */
static const char *set_label(const kept_set *k, char *buf, size_t len)
{
    snprintf(buf, len, "%s%s%s", dtype_name(k->dtype), k->pass != PASS_FORWARD ? " " : "",
             k->pass != PASS_FORWARD ? layer_pass_name(k->pass) : "");
    return buf;
}

/* Every layer's time and error in each dtype and pass side by side, per (backend, batch,
 * mode) that ran in more than one, with each set's speed against the first's (a layer's
 * backward beside its forward: 0.5 where the backward takes twice as long). */
static void print_dtypes(console *c)
{
    bool *done = xcalloc((size_t)(c->n_sets ? c->n_sets : 1), sizeof *done);
    for (int s = 0; s < c->n_sets; s++) {
        int members[DTYPE_COUNT * PASS_COUNT], nm = 0;
        bool passes = false;
        for (int u = s; u < c->n_sets && nm < DTYPE_COUNT * PASS_COUNT; u++)
            if (!done[u] && c->sets[u].batch == c->sets[s].batch && !strcmp(c->sets[u].backend, c->sets[s].backend) &&
                c->sets[u].mode == c->sets[s].mode)
                members[nm++] = u, done[u] = true, passes |= c->sets[u].pass != c->sets[s].pass;
        if (nm < 2)
            continue;
        const kept_set *first = &c->sets[members[0]];
        char title[300], *heads[3 + 3 * DTYPE_COUNT * PASS_COUNT], align[4 + 3 * DTYPE_COUNT * PASS_COUNT] = "rll", lb[32];
        snprintf(title, sizeof title, "By dtype%s: %s, batch %lld, %s timing (xN: speed against %s; Error: relative L2 "
                                      "error against the fp32 reference, --error)%s",
                 passes ? " and pass" : "", first->backend, (long long)first->batch, measure_mode_name(first->mode),
                 set_label(first, lb, sizeof lb), c->ro.format == TABLE_MD ? "" : ":");
        table_heading(c->out, c->ro.format, 3, title);
        int nh = 0;
        heads[nh++] = xstrdup("#"), heads[nh++] = xstrdup("Name"), heads[nh++] = xstrdup("Kind");
        for (int d = 0; d < nm; d++) {
            const char *dn = set_label(&c->sets[members[d]], lb, sizeof lb);
            heads[nh++] = xasprintf("%s", dn), strcat(align, "r");
            if (d)
                heads[nh++] = xasprintf("x%s", dn), strcat(align, "r");
            heads[nh++] = xasprintf("Error %s", dn), strcat(align, "r");
        }
        table *t = table_create(nh, align);
        for (int k = 0; k < nh; k++)
            table_header(t, k, heads[k], k == 1 ? 40 : 0), free(heads[k]);
        for (int i = 0; i < first->m->n_layers; i++) {
            const layer *l = &first->m->layers[i];
            if (layer_is_view(l))
                continue;
            char tm[24];
            table_cell(t, "%d", i);
            table_cell(t, "%s", l->name);
            table_cell(t, "%s", layer_kind_name(l->kind));
            for (int d = 0; d < nm; d++) {
                const kept_set *k = &c->sets[members[d]];
                table_cell(t, "%s", k->median[i] > 0 ? report_format_time(k->median[i], tm, sizeof tm) : "-");
                if (d && k->median[i] > 0 && first->median[i] > 0)
                    table_cell(t, "%.2f", first->median[i] / k->median[i]);
                else if (d)
                    table_cell(t, "-");
                if (k->error[i] >= 0)
                    table_cell(t, "%.1e", k->error[i]);
                else
                    table_cell(t, "-");
            }
            table_end_row(t);
        }
        table_print(t, c->out, c->ro.format, "");
        table_free(t);
    }
    free(done);
}

static bench_status console_finish(reporter *r, bool ok)
{
    (void)ok;
    console *c = (console *)r;
    print_backends(c);
    print_amx(c);
    print_dtypes(c);
    for (int s = 0; s < c->n_sets; s++)
        free(c->sets[s].median), free(c->sets[s].error);
    free(c->sets);
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
    table_format format;
    int rows;
    bool decoder;       /* a model with token ids: its token shape and tokens/s */
} sweep;

/* The sweep's table is printed a row at a time, as each batch finishes; a decoder's
 * rows have its tokens and cached tokens after the dtype, and tokens/s for items/s. */
static void sweep_row(const sweep *s, const char *const *cells)
{
    static const int plain[] = {-8, 6, -6, 14, 7, 14, 14, 8}, dec[] = {-8, 6, -6, 7, 7, 14, 7, 14, 14, 8};
    const int *w = s->decoder ? dec : plain;
    for (int k = 0; k < (s->decoder ? 10 : 8); k++) {
        if (s->format == TABLE_MD)
            fprintf(s->out, "%s %s", k ? "" : "|", cells[k]), fputs(" |", s->out);
        else
            fprintf(s->out, "%s%*s", k ? "  " : "", w[k], cells[k]);
    }
    fputc('\n', s->out);
}

static bench_status sweep_run(reporter *r, const run_result *res)
{
    sweep *s = (sweep *)r;
    const layer_result *ch = &res->chained;
    char batch[24], med[24] = "not run", noise[16] = "-", items[32] = "-", sum[24], gap[16] = "-", tok[24], kv[24];
    if (!res->has_model)
        return BENCH_OK;
    int64_t t_len = model_tokens(res->m), cached = model_kv_len(res->m);
    if (s->rows++ == 0) {
        s->decoder = t_len > 0;
        const char *plain[] = {"Backend", "Batch", "Dtype", "Chained median", "Noise", "Items/s", "Sum of layers", "Gap"};
        const char *dec[] = {"Backend", "Batch", "Dtype",    "Tokens",        "KV len", "Chained median",
                             "Noise",   "Tokens/s", "Sum of layers", "Gap"};
        if (s->format == TABLE_MD)
            fputc('\n', s->out);
        sweep_row(s, s->decoder ? dec : plain);
        if (s->format == TABLE_MD)
            fputs(s->decoder ? "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
                             : "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n",
                  s->out);
    }
    snprintf(batch, sizeof batch, "%lld", (long long)res->m->batch);
    snprintf(tok, sizeof tok, "%lld", (long long)t_len);
    snprintf(kv, sizeof kv, "%lld", (long long)(cached > 0 ? cached : 0));
    report_format_time(res->sum_medians, sum, sizeof sum);
    if (row_timed(ch)) {
        report_format_time(ch->st.median, med, sizeof med);
        format_noise(&ch->st, noise, sizeof noise);
        snprintf(items, sizeof items, "%.1f", (double)res->m->batch * (s->decoder && t_len > 0 ? t_len : 1) / ch->st.median);
        if (res->sum_medians > 0)
            snprintf(gap, sizeof gap, "%+.1f%%", 100 * (ch->st.median - res->sum_medians) / res->sum_medians);
    }
    char dt[32]; /* a backward or train set says so beside its dtype */
    snprintf(dt, sizeof dt, "%s%s%s", dtype_name(res->m->dtype), res->m->pass != PASS_FORWARD ? " " : "",
             res->m->pass != PASS_FORWARD ? layer_pass_name(res->m->pass) : "");
    const char *cells[] = {res->backend, batch, dt, med, noise, items, sum, gap};
    const char *dcells[] = {res->backend, batch, dt, tok, kv, med, noise, items, sum, gap};
    sweep_row(s, s->decoder ? dcells : cells);
    fflush(s->out);
    return BENCH_OK;
}

static bench_status sweep_finish(reporter *r, bool ok)
{
    (void)ok;
    free(r);
    return BENCH_OK;
}

reporter *report_sweep_create(FILE *out, table_format format)
{
    sweep *s = xcalloc(1, sizeof *s);
    s->base.run = sweep_run;
    s->base.finish = sweep_finish;
    s->out = out;
    s->format = format;
    return &s->base;
}

/* ---- bench list ------------------------------------------------------------------------- */

void report_list_table(FILE *o, const model *m, table_format f)
{
    char in[48], out[48], s[48], par[160];
    bool md = f == TABLE_MD;
    if (md)
        fprintf(o, "## %s\n\nInput %s, batch %lld, %s%s, %d layers.\n", m->name,
                shape_format_compact(&m->input, s, sizeof s), (long long)m->batch, dtype_name(m->dtype),
                model_mixed(m) ? " (mixed)" : "", m->n_layers);
    else
        fprintf(o, "%s: input %s, batch %lld, %s%s, %d layers\n\n", m->name,
                shape_format_compact(&m->input, s, sizeof s), (long long)m->batch, dtype_name(m->dtype),
                model_mixed(m) ? " (mixed)" : "", m->n_layers);
    table *t = table_create(9, "rllllrrrl");
    const char *heads[] = {"#", "Name", "Kind", "Input", "Output", "Params", "FLOPs", "Bytes", "Parameters"};
    for (int k = 0; k < 9; k++)
        table_header(t, k, heads[k], k == 1 ? 40 : 0);
    for (int i = 0; i < m->n_layers; i++) {
        const layer *l = &m->layers[i];
        table_cell(t, "%d", i);
        table_cell(t, "%s", l->name);
        table_cell(t, "%s", layer_kind_name(l->kind));
        table_cell(t, "%s", shape_format_compact(&l->in, in, sizeof in));
        table_cell(t, "%s", shape_format_compact(&l->out, out, sizeof out));
        table_cell(t, "%lld", (long long)l->n_weights);
        table_cell(t, "%lld", (long long)l->flops);
        table_cell(t, "%lld", (long long)l->bytes);
        table_cell(t, "%s", layer_params_format(l, par, sizeof par));
        table_end_row(t);
    }
    table_print(t, o, f, "");
    table_free(t);
    model_totals tot = model_sum(m);
    fprintf(o, "\n%sTotals: %lld params, %lld MACs, %lld FLOPs, %lld bytes moved (layer by layer)\n", md ? "- " : "",
            (long long)tot.n_weights, (long long)tot.macs, (long long)tot.flops, (long long)tot.bytes);
    fprintf(o, "%sMemory a run needs (activations, weights, isolated buffers; workspaces aside): %s\n", md ? "- " : "",
            bench_format_bytes(model_memory_bytes(m), s, sizeof s));
}
