#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "measure.h"

double check_rel_err(const float *out, const float *ref, int64_t n, int64_t *nonfinite)
{
    double num = 0.0, den = 0.0;
    *nonfinite = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(out[i]) && isfinite(ref[i])) {
            (*nonfinite)++;
            continue;
        }
        if (isfinite(ref[i])) {
            double d = (double)out[i] - ref[i];
            num += d * d;
            den += (double)ref[i] * ref[i];
        } else if (!(out[i] == ref[i])) { /* -inf from an all-padding max window must match */
            (*nonfinite)++;
        }
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Host inputs and weights in backend memory, for one run of a layer; frees what it holds. */
typedef struct device_data {
    float *in[LAYER_MAX_INPUTS];
    float *w;
} device_data;

static bool to_device(const backend *b, const layer *l, float *const *in, const float *w, device_data *dd)
{
    bool ok = true;
    memset(dd, 0, sizeof *dd);
    for (int k = 0; k < l->n_inputs; k++)
        ok &= (dd->in[k] = backend_alloc_floats(b, shape_numel(&l->ins[k]), in[k])) != NULL;
    dd->w = w ? backend_alloc_floats(b, l->n_weight_floats, w) : NULL;
    return ok && (!w || dd->w);
}

static void release_device(const backend *b, const layer *l, device_data *dd)
{
    for (int k = 0; k < l->n_inputs; k++)
        b->ops->release(b->ctx, dd->in[k]);
    b->ops->release(b->ctx, dd->w);
}

check_result check_layer(const layer *l, const backend *b, uint64_t seed)
{
    const backend_ops *ops = b->ops;
    const layer_desc *d = layer_desc_get(l->kind);
    check_result r = {BENCH_ERR_NOMEM, 0.0, backend_tolerance(b, l), 0};
    int64_t n_out = shape_numel(&l->out);
    float *in[LAYER_MAX_INPUTS] = {NULL}, *w = NULL, *ref = NULL, *got = NULL, *dout = NULL;
    device_data dd;
    memset(&dd, 0, sizeof dd);
    void *state = NULL;
    char impl[96];
    int64_t ws;
    backend_clear_error(b);
    if (measure_layer_data(l, seed, in, &w) != BENCH_OK)
        return r;
    ref = bench_alloc_floats(n_out);
    got = bench_alloc_floats(n_out);
    if (!ref || !got)
        goto out;
    d->reference(l, (const float *const *)in, w, ref);
    /* poison the output so an element the backend never writes shows up as NaN */
    for (int64_t i = 0; i < n_out; i++)
        got[i] = NAN;
    if (!to_device(b, l, in, w, &dd))
        goto out;
    dout = d->aliases_input ? dd.in[0] : backend_alloc_floats(b, n_out, got);
    if (!dout)
        goto out;
    r.status = ops->layer_setup(b->ctx, l, dd.w, &state, impl, sizeof impl, &ws);
    if (r.status != BENCH_OK)
        goto out;
    ops->layer_run(b->ctx, state, (const float *const *)dd.in, dout);
    if ((r.status = ops->sync(b->ctx)) != BENCH_OK ||
        (r.status = ops->download(b->ctx, got, dout, (size_t)n_out * sizeof(float))) != BENCH_OK)
        goto out;
    r.rel_err = check_rel_err(got, ref, n_out, &r.nonfinite);
    r.status = (r.nonfinite == 0 && r.rel_err <= r.tolerance) ? BENCH_OK : BENCH_ERR_CHECK;
out:
    if (state)
        ops->layer_free(b->ctx, state);
    if (dout != dd.in[0])
        ops->release(b->ctx, dout);
    release_device(b, l, &dd);
    measure_free_data(l, in, &w);
    free(ref), free(got);
    return r;
}

bench_status check_model(const model *m, const backend *bs, int n_backends, uint64_t seed, FILE *out)
{
    int failed = 0, skipped = 0, passed = 0;
    double worst = 0.0;
    fprintf(out, "%4s  %-32s  %-18s  %-7s  %10s  %10s  %s\n", "#", "Name", "Kind", "Backend", "Rel. error", "Tolerance",
            "Result");
    for (int i = 0; i < m->n_layers; i++) {
        const layer *l = &m->layers[i];
        for (int k = 0; k < n_backends; k++) {
            check_result r = check_layer(l, &bs[k], seed + (uint64_t)i);
            const char *verdict = r.status == BENCH_OK                ? "ok"
                                  : r.status == BENCH_ERR_CHECK       ? "FAIL"
                                  : r.status == BENCH_ERR_UNSUPPORTED ? "skipped (unsupported)"
                                                                      : "ERROR";
            if (r.status == BENCH_OK)
                passed++;
            else if (r.status == BENCH_ERR_UNSUPPORTED)
                skipped++;
            else
                failed++;
            if (r.rel_err > worst)
                worst = r.rel_err;
            fprintf(out, "%4d  %-32.32s  %-18s  %-7s  %10.2e  %10.1e  %s", i, l->name, layer_kind_name(l->kind),
                    bs[k].ops->name, r.rel_err, r.tolerance, verdict);
            if (r.nonfinite)
                fprintf(out, " (%lld non-finite outputs)", (long long)r.nonfinite);
            fputc('\n', out);
        }
    }
    fprintf(out, "\nworst relative error %.2e; %d passed, %d failed, %d skipped\n", worst, passed, failed, skipped);
    return failed ? BENCH_ERR_CHECK : BENCH_OK;
}
