/* The cuda backend's timing machinery, on a real device: CUDA events against the host
 * clock around a known copy, the cold mode's flush size against the L2, batch mode's
 * launch count, and the graph replay of a whole model. Exits 77 (skip) with the reason
 * where no device is present. Layer correctness is test_layers cuda. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
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

int main(int argc, char **argv)
{
    const backend_ops *ops = backend_find("cuda");
    backend b;
    backend_options bo = {0};
    char err[512];
    if (!ops) {
        printf("SKIP: the cuda backend is not built into this binary\n");
        return 77;
    }
    if (backend_open(ops, &bo, &b, err, sizeof err) != BENCH_OK) {
        printf("SKIP: %s\n", err);
        return 77;
    }
    /* events against the host clock around a 256 MiB upload */
    size_t bytes = (size_t)256 << 20;
    float *host = bench_alloc_floats((int64_t)(bytes / 4));
    void *dev = ops->alloc(b.ctx, bytes);
    EXPECT(host && dev, "allocations");
    memset(host, 1, bytes);
    for (int i = 0; i < 3; i++) {
        double h0 = bench_now();
        ops->timer_start(b.ctx);
        EXPECT(ops->upload(b.ctx, dev, host, bytes) == BENCH_OK, "upload: %s", backend_last_error(&b));
        double ev = ops->timer_stop(b.ctx), host_s = bench_now() - h0;
        printf("upload of 256 MiB: events %.3f ms, host clock %.3f ms\n", ev * 1e3, host_s * 1e3);
        EXPECT(ev > 0 && ev <= host_s * 1.02 && ev >= host_s * 0.5, "event time %.6f s vs host %.6f s", ev, host_s);
    }
    ops->release(b.ctx, dev);
    free(host);

    /* the flush writes more than the L2 holds */
    const char *d = ops->describe(b.ctx);
    long long l2 = json_int(d, "l2_bytes"), flush = json_int(d, "flush_bytes");
    printf("L2 %lld bytes, flush %lld bytes\n", l2, flush);
    EXPECT(l2 > 0 && flush >= 2 * l2, "flush %lld for L2 %lld", flush, l2);

    /* a whole model: both modes, graph replay and copies */
    if (argc > 1) {
        model *m;
        EXPECT(cfg_load(argv[1], 0, &m, err, sizeof err) == BENCH_OK, "%s", err);
        measure_options mo = {0.0, 0.002, 2, false, 1, false};
        run_result r;
        EXPECT(measure_model(m, &b, &mo, "cold", true, &r, err, sizeof err) == BENCH_OK, "cold: %s", err);
        EXPECT(r.chained.status == BENCH_OK && r.graph.status == BENCH_OK, "chained %d graph %d", r.chained.status,
               r.graph.status);
        EXPECT(r.upload.status == BENCH_OK && r.download.status == BENCH_OK, "copies timed");
        run_result_free(&r);
        EXPECT(measure_model(m, &b, &mo, "batch", false, &r, err, sizeof err) == BENCH_OK, "batch: %s", err);
        int many = 0;
        for (int i = 0; i < m->n_layers; i++)
            many += r.layers[i].status == BENCH_OK && r.layers[i].launches > 1;
        EXPECT(many > 0, "batch mode never launched more than once per sample");
        run_result_free(&r);
        model_free(m);
    }
    backend_close(&b);
    return test_summary("test_cuda");
}
