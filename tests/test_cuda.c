/* The cuda backend's timing machinery, on a real device: CUDA events against the host
 * clock around a known copy, the cold mode's flush size against the L2, the hold (a
 * held stream's event time excludes the host's queuing), and a whole model whose every
 * layer the backend supports, in both modes, with its chained forward, graph replay
 * and copies: no row may be skipped or fail. Exits 77 (skip) with the reason where no
 * device is present. Layer correctness is test_layers cuda.
 * usage: test_cuda CONFIG */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_registry.h"
#include "cfg.h"
#include "measure.h"
#include "test_util.h"

static long long json_int(const char *json, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(json, pat);
    return p ? atoll(p + strlen(pat)) : -1;
}

static void expect_all_rows_ran(const run_result *r, const char *mode)
{
    for (int i = 0; i < r->m->n_layers; i++) {
        const layer_result *lr = &r->layers[i];
        EXPECT(row_timed(lr) || lr->status == ROW_VIEW, "%s: layer %s is %s: %s", mode, r->m->layers[i].name,
               measure_row_status_name(lr->status), lr->note);
        EXPECT(lr->status != ROW_OK || lr->st.median > 0, "%s: layer %s has no time", mode, r->m->layers[i].name);
    }
}

int main(int argc, char **argv)
{
    const backend_ops *ops = backend_find("cuda");
    backend b;
    backend_options bo = {0};
    char err[512];
    if (!ops) {
        printf("SKIP: %s\n", backend_find_error());
        return 77;
    }
    if (backend_open(ops, &bo, &b, err, sizeof err) != BENCH_OK) {
        printf("SKIP: %s\n", err);
        return 77;
    }
    /* events against the host clock around a 256 MiB upload */
    size_t bytes = (size_t)256 << 20;
    float *host = bench_alloc_floats((int64_t)(bytes / 4));
    void *dev = ops->device.alloc(b.ctx, bytes);
    EXPECT(host && dev, "allocations");
    memset(host, 1, bytes);
    for (int i = 0; i < 3; i++) {
        double h0 = bench_now();
        ops->timing.timer_start(b.ctx);
        EXPECT(ops->device.upload(b.ctx, dev, host, bytes) == BENCH_OK, "upload: %s", backend_last_error(&b));
        double ev = ops->timing.timer_stop(b.ctx), host_s = bench_now() - h0;
        printf("upload of 256 MiB: events %.3f ms, host clock %.3f ms\n", ev * 1e3, host_s * 1e3);
        EXPECT(ev > 0 && ev <= host_s * 1.02 && ev >= host_s * 0.5, "event time %.6f s vs host %.6f s", ev, host_s);
    }

    /* a held stream: 20 ms of host sleep between hold and the work is not timed */
    EXPECT(ops->timing.hold != NULL, "the cuda backend holds its stream");
    if (ops->timing.hold) {
        ops->timing.hold(b.ctx);
        ops->timing.timer_start(b.ctx);
        usleep(20000);
        double ev = ops->timing.timer_stop(b.ctx);
        printf("held stream, 20 ms host sleep before release: events %.3f ms\n", ev * 1e3);
        EXPECT(ev >= 0 && ev < 5e-3, "a held empty sample took %.6f s: the host's wait was timed", ev);
    }
    ops->device.release(b.ctx, dev);
    free(host);

    /* the flush writes more than the L2 holds */
    const char *d = ops->device.describe(b.ctx);
    long long l2 = json_int(d, "l2_bytes"), flush = json_int(d, "flush_bytes");
    printf("L2 %lld bytes, flush %lld bytes\n", l2, flush);
    EXPECT(l2 > 0 && flush >= 2 * l2, "flush %lld for L2 %lld", flush, l2);

    /* a whole model: both modes, graph replay and copies, nothing skipped */
    if (argc > 1) {
        model *m;
        EXPECT(cfg_load(argv[1], 0, &m, err, sizeof err) == BENCH_OK, "%s", err);
        measure_options mo = {.warmup_time = 0.0, .min_time = 0.002, .max_noise = 0.02, .min_samples = 5,
                              .timeout = 0.2, .seed = 1};
        timer_floor fl;
        EXPECT(measure_timer_floor(&b, &mo, &fl, err, sizeof err) == BENCH_OK, "floor: %s", err);
        printf("timer floor: warm %.2f us, cold %.2f us\n", fl.warm * 1e6, fl.cold * 1e6);
        EXPECT(fl.warm > 0 && fl.warm < 50e-6, "the event timer's floor %g s", fl.warm);
        run_result r;
        EXPECT(measure_model(m, &b, &mo, MODE_COLD, &fl, true, &r, err, sizeof err) == BENCH_OK, "cold: %s", err);
        expect_all_rows_ran(&r, "cold");
        EXPECT(r.chained.status == ROW_OK && r.graph.status == ROW_OK, "chained %s (%s), graph %s (%s)",
               measure_row_status_name(r.chained.status), r.chained.note, measure_row_status_name(r.graph.status), r.graph.note);
        EXPECT(r.upload.status == ROW_OK && r.download.status == ROW_OK, "copies: %s / %s", r.upload.note,
               r.download.note);
        EXPECT(r.inmodel != NULL, "the in-model view (events between layers)");
        double inside = 0;
        for (int i = 0; r.inmodel && i < m->n_layers; i++)
            inside += row_timed(&r.inmodel[i]) ? r.inmodel[i].st.median : 0;
        printf("chained %.2f us, in-model sum %.2f us\n", r.chained.st.median * 1e6, inside * 1e6);
        EXPECT(fabs(inside - r.chained.st.median) < 0.1 * r.chained.st.median, "in-model sum %g vs chained %g", inside,
               r.chained.st.median);
        run_result_free(&r);
        EXPECT(measure_model(m, &b, &mo, MODE_WARM, &fl, false, &r, err, sizeof err) == BENCH_OK, "warm: %s", err);
        expect_all_rows_ran(&r, "warm");
        run_result_free(&r);
        EXPECT(measure_model(m, &b, &mo, MODE_BATCH, &fl, false, &r, err, sizeof err) == BENCH_OK, "batch: %s", err);
        expect_all_rows_ran(&r, "batch");
        int many = 0, graphs = 0;
        for (int i = 0; i < m->n_layers; i++) {
            if (r.layers[i].status != ROW_OK || r.layers[i].launches < 2)
                continue;
            many++;
            graphs += strstr(r.layers[i].note, "captured as one graph") != NULL;
        }
        EXPECT(many > 0, "batch mode never launched more than once per sample");
        EXPECT(graphs == many, "%d of %d batch rows were captured as graphs", graphs, many);
        run_result_free(&r);
        model_free(m);
    }
    backend_close(&b);
    return test_summary("test_cuda");
}
