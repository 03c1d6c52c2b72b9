#include "compare.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "report.h"

compare_verdict compare_verdict_band(double base, double base_lo, double base_hi, double base_noise, double new_,
                                     double new_lo, double new_hi, double new_noise, double slower, double faster)
{
    /* a change within the rows' own noise is not reported, as NVBench's compare does */
    double noise = base_noise > new_noise ? base_noise : new_noise;
    if (noise > slower)
        slower = noise;
    if (noise > faster)
        faster = noise;
    if (!(base_lo > 0) || !(base_hi > 0))
        base_lo = base_hi = base;
    if (!(new_lo > 0) || !(new_hi > 0))
        new_lo = new_hi = new_;
    if (new_lo / base_hi > 1.0 + slower)
        return VERDICT_SLOWER;
    if (new_hi / base_lo < 1.0 / (1.0 + faster))
        return VERDICT_FASTER;
    return VERDICT_SAME;
}

compare_verdict compare_verdict_of(double base, double base_lo, double base_hi, double base_noise, double new_,
                                   double new_lo, double new_hi, double new_noise, double threshold)
{
    return compare_verdict_band(base, base_lo, base_hi, base_noise, new_, new_lo, new_hi, new_noise, threshold,
                                threshold);
}

/* One row of a results CSV, as compare sees it. */
typedef struct crow {
    const char *model, *backend, *mode, *batch, *dtype, *layer, *kind, *status, *impl, *index, *part, *threads;
    const char *tokens, *kv_len; /* a decoder's shape; "" for other models (and files from before) */
    const char *pass;   /* forward or backward */
    int occurrence;     /* how many rows with the same key came before it */
    int64_t line;       /* where it starts in its file */
    bool timed;
    bool invalid;       /* timed, but its median is no time (0, negative, NaN, inf, out of range) */
    bool contended;     /* other processes shared its cores (csv column contended) */
    double med, lo, hi; /* microseconds */
    double noise;       /* the noise figure, a fraction; 0 if unknown */
    double spread;      /* how far its worker processes' medians lay apart, a fraction; 0 if unknown */
    double canary;      /* the canary of its run, microseconds; 0 if unknown */
    int match;          /* index of the matched row in the other file, or -1 */
} crow;

/* The largest figure read as a time: 10^12 us, eleven days a layer. A larger one is
 * no measurement (a damaged or hand-edited file) and would print as 23 digits. */
#define COMPARE_MAX_US 1e12

/* A figure as a finite, positive double up to COMPARE_MAX_US; false for anything else
 * ("0", "-3", "nan", "inf", "1e300", "12abc", ""). */
static bool positive_figure(const char *s, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return *s && !*end && errno == 0 && isfinite(*v) && *v > 0 && *v <= COMPARE_MAX_US;
}

static bool is_alone_mode(const char *m) { return !strcmp(m, "warm") || !strcmp(m, "batch"); }

/* The same row of a model: model, backend, batch, dtype, pass, token shape and layer; the same mode, or
 * (with alone) warm against batch. */
static bool same_place(const crow *a, const crow *b, bool alone)
{
    bool mode = !strcmp(a->mode, b->mode) || (alone && is_alone_mode(a->mode) && is_alone_mode(b->mode));
    return mode && !strcmp(a->model, b->model) && !strcmp(a->backend, b->backend) && !strcmp(a->batch, b->batch) &&
           !strcmp(a->dtype, b->dtype) && !strcmp(a->pass, b->pass) && !strcmp(a->tokens, b->tokens) &&
           !strcmp(a->kv_len, b->kv_len) && !strcmp(a->layer, b->layer);
}


/* qsort's comparators see no context: the rows being sorted, one sort at a time. */
static const crow *sort_rows;
static bool sort_alone;

/* The order of places (same_place): model, backend, batch, dtype, pass, token shape, layer,
 * then the mode (with sort_alone, warm and batch as one). */
static int cmp_place(const crow *a, const crow *b, bool alone)
{
    int c;
    if ((c = strcmp(a->model, b->model)) || (c = strcmp(a->backend, b->backend)) || (c = strcmp(a->batch, b->batch)) ||
        (c = strcmp(a->dtype, b->dtype)) || (c = strcmp(a->pass, b->pass)) || (c = strcmp(a->tokens, b->tokens)) ||
        (c = strcmp(a->kv_len, b->kv_len)) ||
        (c = strcmp(a->layer, b->layer)))
        return c;
    if (alone && is_alone_mode(a->mode) && is_alone_mode(b->mode))
        return 0;
    return strcmp(alone && is_alone_mode(a->mode) ? "" : a->mode, alone && is_alone_mode(b->mode) ? "" : b->mode);
}

static int cmp_place_then_line(const void *x, const void *y)
{
    const crow *a = &sort_rows[*(const int *)x], *b = &sort_rows[*(const int *)y];
    int c = cmp_place(a, b, false);
    return c ? c : (a->line > b->line) - (a->line < b->line);
}

/* by key (place and occurrence), for matching */
static int cmp_key(const void *x, const void *y)
{
    const crow *a = &sort_rows[*(const int *)x], *b = &sort_rows[*(const int *)y];
    int c = cmp_place(a, b, sort_alone);
    return c ? c : (a->occurrence > b->occurrence) - (a->occurrence < b->occurrence);
}

/* Matches the unmatched rows of b and n with the same key (with alone, warm against
 * batch): both sorted by key, then walked together. */
static void match_rows(crow *b, int nb, crow *n, int nn, bool alone)
{
    int *ob = xmalloc((size_t)(nb ? nb : 1) * sizeof *ob), *on = xmalloc((size_t)(nn ? nn : 1) * sizeof *on);
    int kb = 0, kn = 0;
    for (int i = 0; i < nb; i++)
        if (b[i].match < 0)
            ob[kb++] = i;
    for (int j = 0; j < nn; j++)
        if (n[j].match < 0)
            on[kn++] = j;
    sort_alone = alone;
    sort_rows = b;
    qsort(ob, (size_t)kb, sizeof *ob, cmp_key);
    sort_rows = n;
    qsort(on, (size_t)kn, sizeof *on, cmp_key);
    for (int i = 0, j = 0; i < kb && j < kn;) {
        crow *x = &b[ob[i]], *y = &n[on[j]];
        int c = cmp_place(x, y, alone);
        c = c ? c : (x->occurrence > y->occurrence) - (x->occurrence < y->occurrence);
        if (c < 0)
            i++;
        else if (c > 0)
            j++;
        else
            x->match = on[j++], y->match = ob[i++];
    }
    free(ob), free(on);
}

static crow *load_rows(const char *name, const csv_table *t, bool inmodel, int *n, int *left_out)
{
    static const char *const need[] = {"model", "backend", "mode", "batch", "layer_name", "kind", "status", "median_us"};
    int col[8];
    for (int i = 0; i < 8; i++)
        if ((col[i] = csv_col(t, need[i])) < 0) {
            log_msg("%s is not a layerbench results CSV: it has no '%s' column", name, need[i]);
            return NULL;
        }
    int lo = csv_col(t, "ci_low_us"), hi = csv_col(t, "ci_high_us"), noise = csv_col(t, "noise_pct");
    int impl = csv_col(t, "impl"), contended = csv_col(t, "contended"), spread = csv_col(t, "process_spread_pct");
    int canary = csv_col(t, "canary_us"), index = csv_col(t, "layer_index"), part = csv_col(t, "part");
    int threads = csv_col(t, "threads"), dtype = csv_col(t, "dtype"), tokens = csv_col(t, "tokens"),
        kv_len = csv_col(t, "kv_len"), pass = csv_col(t, "pass");
    crow *rows = xcalloc((size_t)(t->n_rows ? t->n_rows : 1), sizeof *rows);
    int k = 0;
    for (int64_t r = 0; r < t->n_rows; r++) {
        if (!inmodel && strcmp(csv_cell(t, r, col[2]), "inmodel") == 0) {
            (*left_out)++;
            continue;
        }
        crow *c = &rows[k];
        c->model = csv_cell(t, r, col[0]), c->backend = csv_cell(t, r, col[1]), c->mode = csv_cell(t, r, col[2]);
        c->batch = csv_cell(t, r, col[3]), c->layer = csv_cell(t, r, col[4]), c->kind = csv_cell(t, r, col[5]);
        c->status = csv_cell(t, r, col[6]);
        c->impl = csv_cell(t, r, impl), c->index = csv_cell(t, r, index), c->part = csv_cell(t, r, part);
        c->threads = csv_cell(t, r, threads);
        c->dtype = csv_cell(t, r, dtype);
        c->tokens = csv_cell(t, r, tokens), c->kv_len = csv_cell(t, r, kv_len);
        if (!*c->dtype) /* a CSV from before dtypes: all fp32 */
            c->dtype = "fp32";
        c->pass = csv_cell(t, r, pass);
        if (!*c->pass) /* a CSV from before passes: all forward */
            c->pass = "forward";
        c->line = t->lines ? t->lines[r] : r + 2;
        c->timed = (!strcmp(c->status, "ok") || !strcmp(c->status, "dedupe")) && *csv_cell(t, r, col[7]);
        /* what a hand-edited or damaged file may hold: a median that is no time (invalid:
         * no verdict), an interval that does not hold the median, a noise figure that is
         * no fraction */
        c->invalid = c->timed && !positive_figure(csv_cell(t, r, col[7]), &c->med);
        c->lo = atof(csv_cell(t, r, lo)), c->hi = atof(csv_cell(t, r, hi));
        c->noise = atof(csv_cell(t, r, noise)) / 100;
        c->contended = strcmp(csv_cell(t, r, contended), "true") == 0;
        if (!positive_figure(csv_cell(t, r, spread), &c->spread))
            c->spread = 0;
        c->spread /= 100;
        if (!positive_figure(csv_cell(t, r, canary), &c->canary))
            c->canary = 0;
        if (!(isfinite(c->lo) && isfinite(c->hi) && c->lo > 0 && c->lo <= c->med && c->med <= c->hi))
            c->lo = c->hi = 0; /* unknown: the median stands for it */
        if (!isfinite(c->noise) || c->noise < 0)
            c->noise = 0;
        c->match = -1;
        k++;
    }
    *n = k;
    /* a name torch reuses (BasicBlock's relu) repeats: each row's occurrence among the rows
     * of its place, in the file's order; a row twice (its place, index and part) is no
     * results CSV. Sorted, not compared pairwise: 10^5 rows take milliseconds. */
    int *order = xmalloc((size_t)(k ? k : 1) * sizeof *order);
    for (int i = 0; i < k; i++)
        order[i] = i;
    sort_rows = rows, sort_alone = false;
    qsort(order, (size_t)k, sizeof *order, cmp_place_then_line);
    for (int i = 1; i < k; i++) {
        crow *a = &rows[order[i - 1]], *c = &rows[order[i]];
        if (!same_place(a, c, false))
            continue;
        c->occurrence = a->occurrence + 1;
        if (index >= 0 && !strcmp(a->index, c->index) && !strcmp(a->part, c->part)) {
            log_msg("%s:%lld: the same row as line %lld (model %s, backend %s, mode %s, batch %s, layer %s '%s'): a "
                    "results CSV holds each once",
                    name, (long long)c->line, (long long)a->line, c->model, c->backend, c->mode, c->batch, c->index,
                    c->layer);
            free(order), free(rows);
            return NULL;
        }
    }
    free(order);
    return rows;
}

static const char *verdict_name(compare_verdict v)
{
    return v == VERDICT_SLOWER ? "SLOWER" : v == VERDICT_FASTER ? "FASTER" : "SAME";
}

static table *new_table(void)
{
    table *t = table_create(9, "llrllrrrl");
    const char *heads[] = {"Backend", "Mode", "Batch", "Dtype", "Layer", "Base", "New", "Change", "Verdict"};
    for (int k = 0; k < 9; k++)
        table_header(t, k, heads[k], k == 4 ? 40 : 0);
    return t;
}

static void add_row(table *t, bool md, const crow *b, const crow *n, const char *verdict, const char *note)
{
    const crow *k = b ? b : n;
    char bt[24] = "-", nt[24] = "-", ch[24] = "-";
    if (b && b->timed)
        report_format_time(b->med * 1e-6, bt, sizeof bt);
    if (n && n->timed)
        report_format_time(n->med * 1e-6, nt, sizeof nt);
    if (b && n && b->timed && n->timed && b->med > 0)
        snprintf(ch, sizeof ch, "%+.1f%%", 100 * (n->med / b->med - 1));
    bool strong = md && (!strcmp(verdict, "SLOWER") || !strcmp(verdict, "FASTER"));
    table_cell(t, "%s", k->backend);
    if (b && n && strcmp(b->mode, n->mode))
        table_cell(t, "%s/%s", b->mode, n->mode);
    else
        table_cell(t, "%s", k->mode);
    table_cell(t, "%s", k->batch);
    table_cell(t, "%s%s", k->dtype, strcmp(k->pass, "forward") ? ", backward" : "");
    table_cell(t, "%s", k->layer);
    table_cell(t, "%s", bt);
    table_cell(t, "%s", nt);
    table_cell(t, "%s", ch);
    table_cell(t, "%s%s%s%s%s", strong ? "**" : "", verdict, strong ? "**" : "", *note ? "  " : "", note);
    table_end_row(t);
}

/* What the rows came to: the verdicts, and the rows without one, by why. */
typedef struct tally {
    int counts[3], untimed, only_base, only_new, invalid, impl_changed, contended, left_out;
    double log_sum;
    int log_n;
} tally;

/* The machine's drift between the runs (new canary / base canary - 1), from the
 * canaries of the matched rows, where the canaries time the same thing: the same thread
 * count (the canary joins a thread pool), backend (the rows are matched on it) and
 * build; said on out before the table. 0 where it cannot be known. */
static double machine_drift(const crow *b, int nb, const crow *n, const char *new_name, const compare_options *o,
                            FILE *out)
{
    double *ratios = xmalloc((size_t)(nb ? nb : 1) * sizeof *ratios);
    int nr = 0, other_threads = 0;
    for (int i = 0; i < nb; i++)
        if (b[i].match >= 0 && b[i].canary > 0 && n[b[i].match].canary > 0) {
            if (strcmp(b[i].threads, n[b[i].match].threads) != 0)
                other_threads++;
            else
                ratios[nr++] = n[b[i].match].canary / b[i].canary;
        }
    double drift = 0;
    bool same_build = o->base_build && o->new_build && strcmp(o->base_build, o->new_build) == 0;
    if (nr && same_build) {
        stats st = stats_compute(ratios, nr);
        drift = st.median - 1;
    }
    free(ratios);
    if (fabs(drift) >= COMPARE_DRIFT_SAID)
        fprintf(out, "The machine ran %.1f%% %s in %s (its canary, a fixed workload, took %+.1f%%): the threshold for "
                     "%s rows is widened by that much (and only theirs).%s",
                100 * fabs(drift) / (1 + drift), drift > 0 ? "slower" : "faster", new_name, 100 * drift,
                drift > 0 ? "SLOWER" : "FASTER", "\n\n");
    else if (!nr && other_threads)
        fprintf(out, "No drift correction: the runs used other thread counts, so their canaries (a thread pool's "
                     "join) time different things.\n\n");
    else if (nr && !same_build)
        fprintf(out, "No drift correction: %s.\n\n",
                !o->base_build || !o->new_build ? "a CSV has no JSON context beside it to say which build made it, "
                                                   "and canaries of different builds time different code"
                                                 : "the runs were made by different builds, whose canaries time "
                                                   "different code");
    return drift;
}

/* Row x of base against its match y in new: a verdict, or why there is none; its table
 * row added to t. */
static void judge_row(const crow *x, const crow *y, const compare_options *o, double drift, table *t, tally *c)
{
    char note[224] = "";
    if (x->invalid || y->invalid) {
        snprintf(note, sizeof note, "invalid median in %s%s%s", x->invalid ? "base" : "",
                 x->invalid && y->invalid ? " and " : "", y->invalid ? "new" : "");
        c->invalid++;
        add_row(t, o->markdown, x, y, "INVALID", note);
        return;
    }
    if (!x->timed || !y->timed) {
        snprintf(note, sizeof note, "not timed: %s in base, %s in new", x->status, y->status);
        c->untimed++;
        add_row(t, o->markdown, x, y, "-", note);
        return;
    }
    /* other kernels in the same configuration: not the same figure. Where the thread
     * counts differ, the choice is part of what is compared, and the note says it */
    bool same_config = strcmp(x->threads, y->threads) == 0;
    if (strcmp(x->impl, y->impl) != 0 && same_config) {
        snprintf(note, sizeof note, "%.100s -> %.100s", x->impl, y->impl);
        c->impl_changed++;
        add_row(t, o->markdown, x, y, "IMPL CHANGED", note);
        return;
    }
    if (x->contended || y->contended) {
        snprintf(note, sizeof note, "other processes had its CPUs in %s",
                 x->contended && y->contended ? "both runs" : x->contended ? "base" : "new");
        c->contended++;
        add_row(t, o->markdown, x, y, "CONTENDED", note);
        return;
    }
    /* the processes' spread counts as noise */
    double xn = x->noise > x->spread / 2 ? x->noise : x->spread / 2;
    double yn = y->noise > y->spread / 2 ? y->noise : y->spread / 2;
    /* the machine's drift widens the band on its own side only: a machine that ran
     * slower may explain a slowdown, never hide one (nor a faster one a speed-up) */
    double d = fabs(drift) >= COMPARE_DRIFT_SAID && same_config ? drift : 0;
    double slower = d > 0 ? (1 + o->threshold) * (1 + d) - 1 : o->threshold;
    double faster = d < 0 ? (1 + o->threshold) / (1 + d) - 1 : o->threshold;
    compare_verdict v = compare_verdict_band(x->med, x->lo, x->hi, xn, y->med, y->lo, y->hi, yn, slower, faster);
    c->counts[v]++;
    if (x->med > 0 && y->med > 0)
        c->log_sum += log(y->med / x->med), c->log_n++;
    if (strcmp(x->mode, y->mode))
        snprintf(note, sizeof note, "auto mode timed it differently");
    else if (strcmp(x->impl, y->impl))
        snprintf(note, sizeof note, "%.100s -> %.100s", x->impl, y->impl);
    add_row(t, o->markdown, x, y, verdict_name(v), note);
}

static void print_tally(const tally *c, const compare_options *o, FILE *out)
{
    int compared = c->counts[0] + c->counts[1] + c->counts[2];
    fprintf(out, "\n%s%d rows compared: %d SLOWER, %d FASTER, %d SAME (geometric mean of new/base %.3f)%s",
            o->markdown ? "**" : "", compared, c->counts[VERDICT_SLOWER], c->counts[VERDICT_FASTER],
            c->counts[VERDICT_SAME], c->log_n ? exp(c->log_sum / c->log_n) : 1.0, o->markdown ? "**" : "");
    if (c->impl_changed || c->contended || c->invalid)
        fprintf(out, "; %d IMPL CHANGED (other kernels: no verdict), %d CONTENDED (no verdict), %d INVALID",
                c->impl_changed, c->contended, c->invalid);
    if (c->only_base || c->only_new || c->untimed)
        fprintf(out, "; %d only in base, %d only in new, %d not timed in one of them", c->only_base, c->only_new,
                c->untimed);
    if (c->left_out)
        fprintf(out, "; %d in-model rows left out (--inmodel compares them)", c->left_out);
    fprintf(out, ".\n");
}

int compare_tables(const char *base_name, const csv_table *base, const char *new_name, const csv_table *new_,
                   const compare_options *o, FILE *out)
{
    int nb, nn, ignored = 0;
    tally c = {.log_n = 0};
    crow *b = load_rows(base_name, base, o->inmodel, &nb, &c.left_out);
    crow *n = b ? load_rows(new_name, new_, o->inmodel, &nn, &ignored) : NULL;
    if (!b || !n) {
        free(b);
        return 2;
    }
    /* match: the same key, then (auto mode's choice) warm against batch */
    match_rows(b, nb, n, nn, false);
    match_rows(b, nb, n, nn, true);
    if (o->markdown)
        fprintf(out, "Comparing `%s` (base) with `%s` (new), threshold %.1f%%:\n", base_name, new_name,
                100 * o->threshold);
    else
        fprintf(out, "Comparing %s (base) with %s (new), threshold %.1f%%:\n\n", base_name, new_name, 100 * o->threshold);
    double drift = machine_drift(b, nb, n, new_name, o, out);
    table *t = new_table();
    for (int i = 0; i < nb; i++) {
        if (b[i].match >= 0) {
            judge_row(&b[i], &n[b[i].match], o, drift, t, &c);
        } else {
            c.only_base++;
            add_row(t, o->markdown, &b[i], NULL, "-", "only in base");
        }
    }
    for (int j = 0; j < nn; j++)
        if (n[j].match < 0) {
            c.only_new++;
            add_row(t, o->markdown, NULL, &n[j], "-", "only in new");
        }
    table_print(t, out, o->markdown ? TABLE_MD : TABLE_TEXT, "");
    table_free(t);
    print_tally(&c, o, out);
    free(b), free(n);
    return c.counts[VERDICT_SLOWER] ? 1 : 0;
}
