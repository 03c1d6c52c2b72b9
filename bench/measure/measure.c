/* Measurement: the fixed sequence of one (batch, backend, mode) set, as NVBench's
 * measure_cold reads. The isolated rows are set up (measure_isolated.c), then the chained
 * forward (measure_chained.c); every unit is sampled in rounds until its stopping rule
 * holds (measure_sampling.c); then the summaries, the in-model view and --dedupe's twins. */
#include "measure_internal.h"

#include <stdlib.h>
#include <string.h>

#include "schedstat.h"

/* Counts the failed rows and keeps the first failure's reason in err. */
static void tally(run_result *res, const layer_result *r, const char *name, char *err, size_t errlen)
{
    if (r->status != ROW_FAILED)
        return;
    if (res->failed++ == 0)
        snprintf(err, errlen, "%s on %s: %s", name, res->backend, r->note);
}

/* Every layer set up alone as a unit to sample (a view, a twin of a layer before it
 * under --dedupe, or one left out of this process, is a row without a unit). */
static void setup_layers(const model *m, const backend *b, const measure_options *o, timing_mode mode,
                         const timer_floor *floor, bench_status scratch_st, scratch *s, layer_unit *lus, run_result *out,
                         unit *units, int *n_units)
{
    for (int i = 0; i < m->n_layers; i++) {
        const layer *l = &m->layers[i];
        layer_result *r = &out->layers[i];
        r->dedupe_of = -1;
        if (layer_is_view(l)) {
            r->status = ROW_VIEW;
            snprintf(r->impl, sizeof r->impl, "view");
            snprintf(r->note, sizeof r->note, "a view of its input: nothing runs");
            continue;
        }
        int twin = o->dedupe ? isolated_find_twin(m, i) : -1;
        if (twin >= 0) {
            r->dedupe_of = twin; /* filled in once the twin is measured */
            continue;
        }
        if (scratch_st != BENCH_OK) {
            measure_row_fail(r, "out of memory for the isolated layers' shared input and output");
            continue;
        }
        if (o->skip && o->skip[i]) {
            measure_row_fail(r, "left out of this process");
            continue;
        }
        if (o->at)
            o->at(o->at_user, i);
        isolated_setup(l, i, b, mode, floor, s, o->seed + (uint64_t)i, &lus[i], r, &units[*n_units]);
        if (units[*n_units].r)
            (*n_units)++;
    }
}

/* The rows once sampled: a twin's copied from its layer, the isolated layers freed, the
 * sum of medians and the failures counted (the first in first). */
static void finish_layers(const model *m, const backend *b, layer_unit *lus, run_result *out, char *first, size_t len)
{
    for (int i = 0; i < m->n_layers; i++) {
        layer_result *r = &out->layers[i];
        if (r->dedupe_of >= 0) {
            int twin = r->dedupe_of;
            *r = out->layers[twin];
            r->kept = NULL, r->n_kept = 0; /* the twin owns them */
            r->dedupe_of = twin;
            if (r->status == ROW_OK)
                r->status = ROW_DEDUPE;
            snprintf(r->note, sizeof r->note, "timed once with layer %d (--dedupe)", twin);
        }
        isolated_free(b, &lus[i]);
        if (row_timed(r))
            out->sum_medians += r->st.median;
        else if (r->status == ROW_FAILED)
            tally(out, r, m->layers[i].name, first, len);
    }
}

bench_status measure_model(const model *m, const backend *b, const measure_options *opt, timing_mode mode,
                           const timer_floor *floor, bool with_model, run_result *out, char *err, size_t errlen)
{
    double t0 = bench_now();
    measure_options host = *opt, *o = &host;
    if (b->ops->device_memory) /* a held device's events do not see the host's waits, and its runtime's */
        host.waited = NULL;    /* sleeping threads would count as disturbing it */
    int n = m->n_layers;
    *out = (run_result){.m = m, .forward_device_bytes = -1, .backend = b->ops->name, .mode = mode,
                        .threads = backend_threads(b), .floor = *floor, .has_model = with_model,
                        .layers = xcalloc((size_t)n, sizeof(layer_result))};
    out->chained.dedupe_of = out->graph.dedupe_of = out->upload.dedupe_of = out->download.dedupe_of = -1;
    unit *units = xcalloc((size_t)n + 4, sizeof *units);
    layer_unit *lus = xcalloc((size_t)n, sizeof *lus);
    model_units *mu = NULL;
    int n_units = 0;
    char first_failure[512] = "";
    scratch s = {{NULL}, NULL};
    setup_layers(m, b, o, mode, floor, isolated_scratch_alloc(m, b, o->seed, &s), &s, lus, out, units, &n_units);
    if (with_model && m->pass == PASS_BACKWARD) { /* --pass train chains the step */
        chained_rows_not_run(out, b, ROW_SKIPPED, "no chained training step yet: --pass backward times each layer's "
                                                  "backward alone");
    } else if (with_model && o->skip_model) {
        chained_rows_not_run(out, b, ROW_FAILED, "left out of this process");
    } else if (with_model) {
        if (o->at)
            o->at(o->at_user, -1);
        mu = chained_setup(m, b, o, floor, out, units, &n_units);
    }
    sched_others others;
    if (o->waited)
        sched_others_begin(&others);
    dvec canary = {0}, stream = {0};
    if (o->waited_reset)
        o->waited_reset(o->waited_user);
    bench_status st = measure_sample_units(units, n_units, o, b, mode, &canary,
                                           o->stream_rounds && model_decode_step(m) ? &stream : NULL, err, errlen);
    measure_progress(o, b, mode, 0, 0, 0, NULL);
    out->canary = canary.v, out->n_canary = (int)canary.n;
    out->stream = stream.v, out->n_stream = (int)stream.n;
    int64_t disturbed = 0;
    for (int i = 0; i < n_units; i++) {
        unit_finish(&units[i], o);
        disturbed += units[i].r->disturbed;
        unit_free(&units[i]);
    }
    if (o->waited) {
        if (disturbed)
            sched_others_end(&others, out->contention, sizeof out->contention);
        sched_others_free(&others);
    }
    if (with_model)
        chained_finish_inmodel(m, mu, out);
    finish_layers(m, b, lus, out, first_failure, sizeof first_failure);
    if (with_model) {
        chained_free(m, b, mu);
        tally(out, &out->chained, "the chained forward", first_failure, sizeof first_failure);
        tally(out, &out->graph, "the graph replay", first_failure, sizeof first_failure);
        tally(out, &out->upload, "the input copy", first_failure, sizeof first_failure);
        tally(out, &out->download, "the output copy", first_failure, sizeof first_failure);
    }
    isolated_scratch_free(b, &s);
    free(units), free(lus);
    out->seconds = bench_now() - t0;
    if (st == BENCH_ERR_INTERRUPTED)
        return st; /* err says where */
    if (out->failed)
        snprintf(err, errlen, "%s", first_failure);
    return out->failed ? BENCH_ERR_BACKEND : BENCH_OK;
}

void run_result_free(run_result *r)
{
    int n = r->m ? r->m->n_layers : 0;
    for (int i = 0; i < n; i++) {
        if (r->layers)
            free(r->layers[i].kept);
        if (r->inmodel)
            free(r->inmodel[i].kept);
    }
    for (int j = 0; j < r->n_parts; j++)
        free(r->parts[j].r.kept);
    free(r->chained.kept), free(r->graph.kept), free(r->upload.kept), free(r->download.kept);
    r->chained.kept = r->graph.kept = r->upload.kept = r->download.kept = NULL;
    free(r->canary), free(r->stream);
    r->canary = r->stream = NULL, r->n_canary = r->n_stream = 0;
    free(r->layers);
    free(r->inmodel);
    free(r->forward_sample);
    free(r->parts);
    r->parts = NULL;
    r->n_parts = 0;
    r->layers = r->inmodel = NULL;
    r->forward_sample = NULL;
}
