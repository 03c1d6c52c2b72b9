/* The isolated rows: each layer alone on shared scratch input and output, one unit per
 * layer, timed warm, cold or in batches of calls. */
#include "measure_internal.h"

#include <stdlib.h>
#include <string.h>

/* One sample: the whole time of one launch, or of `launches` back to back (one graph
 * launch where they were captured). Google Benchmark gets this whole time, so its
 * warm-up and --min-time mean what they say; the kept samples are divided by the
 * launch count afterwards. */
void timed_layer_run(const timed_layer *t)
{
    backend_layer_run(t->state, t->in, t->out);
    if (t->bwd)
        backend_layer_run(t->bwd, t->in, t->bwd_out);
}

static double time_layer_sample(void *user)
{
    timed_layer *t = user;
    const backend_ops *ops = t->b->ops;
    measure_begin_sample(t->b, t->hold, t->cold);
    if (t->graph)
        ops->timing.graph_launch(t->b->ctx, t->graph);
    else
        for (int i = 0; i < t->launches; i++)
            timed_layer_run(t);
    return ops->timing.timer_stop(t->b->ctx);
}

#define BATCH_SAMPLE_SECONDS 1e-3

/* The fastest of a few single warm samples: how long one call takes. */
static double single_call_seconds(timed_layer *t)
{
    double best = 1e9;
    timed_layer one = *t;
    one.launches = 1;
    one.cold = false;
    one.graph = NULL;
    for (int i = 0; i < 5; i++) {
        double s = time_layer_sample(&one);
        if (s >= 0 && s < best)
            best = s;
        if (best > BATCH_SAMPLE_SECONDS) /* long enough that the floor does not matter */
            break;
    }
    return best;
}

/* Batch mode: enough back-to-back launches that one sample lasts about a
 * millisecond (BATCH_SAMPLE_SECONDS), far above the timer's floor; between 1 and 1000. */
#define BATCH_MAX_LAUNCHES 1000

/* Launches queued while the device is held, at most (a stream's launch queue holds a
 * thousand or so; a host blocked on a full queue would wait for the hold). */
#define HOLD_MAX_LAUNCHES 256

/* auto: batch for a call shorter than this many timer floors. */
#define AUTO_BATCH_FLOORS 20.0

/* Captures the batch's launches as one graph where the backend has graphs; otherwise
 * (or if the capture fails) they are launched from the stream, and the note says so. */
static void prepare_batch(timed_layer *t, double single, layer_result *r)
{
    const backend_ops *ops = t->b->ops;
    double n = single > 0 ? BATCH_SAMPLE_SECONDS / single : BATCH_MAX_LAUNCHES;
    t->launches = n < 1 ? 1 : n > BATCH_MAX_LAUNCHES ? BATCH_MAX_LAUNCHES : (int)n;
    if (ops->timing.graph_begin) {
        bench_status st = ops->timing.graph_begin(t->b->ctx);
        for (int i = 0; st == BENCH_OK && i < t->launches; i++)
            timed_layer_run(t);
        if (st == BENCH_OK)
            st = ops->timing.graph_end(t->b->ctx, &t->graph);
        if (st == BENCH_OK) {
            measure_note_append(r, "%d launches per sample, captured as one graph", t->launches);
            return;
        }
        t->graph = NULL;
        measure_note_append(r, "graph capture failed (%s); %d launches per sample from the stream", backend_last_error(t->b),
                    t->launches);
        backend_clear_error(t->b); /* the layer can still be timed from the stream */
    } else {
        measure_note_append(r, "%d launches per sample", t->launches);
    }
    t->hold = t->launches <= HOLD_MAX_LAUNCHES;
}

/* "F, then backward B" into why: where both do not fit, each cut to its share of the
 * room (the longer one first) and marked "...", so that the backward's impl is never the
 * part lost. */
static void train_row_impl(char *why, size_t whylen, const char *f, const char *b)
{
    static const char mid[] = ", then backward ";
    size_t lf = strlen(f), lb = strlen(b), room = whylen - sizeof mid; /* the terminator in sizeof */
    if (whylen <= sizeof mid + 8) { /* no room for both */
        snprintf(why, whylen, "%.*s", (int)(whylen - 1), f);
        return;
    }
    size_t half = room / 2, kf = lf, kb = lb;
    if (lf + lb <= room)
        ; /* both whole */
    else if (kf > half && kb > half)
        kf = half, kb = room - half;
    else if (kf > half)
        kf = room - kb;
    else
        kb = room - kf;
    char *at = why; /* kf + kb + the middle + the terminator <= whylen */
    memcpy(at, f, kf), at += kf;
    if (kf < lf)
        memcpy(at - 3, "...", 3);
    memcpy(at, mid, sizeof mid - 1), at += sizeof mid - 1;
    memcpy(at, b, kb), at += kb;
    if (kb < lb)
        memcpy(at - 3, "...", 3);
    *at = '\0';
}

/* A train row's two kernels: the forward in training mode, writing its output where the
 * backward reads it (the input area after the inputs), then the backward into the
 * output area, computing what the step's does (no input gradient where the step wants
 * none; no backward at all where it computes nothing, layer_backward_idle). impl names
 * both. */
static bench_status train_row_setup(const backend *b, const layer *l, layer_unit *lu, char *why, size_t whylen,
                                    int64_t *workspace)
{
    lu->fwd = *l, lu->fwd.pass = PASS_FORWARD;
    layer_count(&lu->fwd); /* the forward's own counts, which a kernel's setup may weigh */
    lu->fwd.pass = PASS_TRAIN;
    lu->bwd = layer_as_backward(l);
    char fi[BACKEND_IMPL_LEN] = "", bi[BACKEND_IMPL_LEN] = "";
    int64_t fws = 0, bws = 0;
    bench_status st = backend_layer_setup(b, &lu->fwd, lu->w, &lu->t.state, fi, sizeof fi, &fws);
    bool idle = layer_backward_idle(l); /* the step runs its forward only */
    if (st == BENCH_OK && !idle)
        st = backend_layer_setup(b, &lu->bwd, lu->w, &lu->t.bwd, bi, sizeof bi, &bws);
    else if (st != BENCH_OK)
        snprintf(why, whylen, "%s", fi);
    if (st == BENCH_OK && idle) {
        snprintf(why, whylen, "%s; no backward: nothing up to it learns", fi);
        *workspace = fws;
    } else if (st == BENCH_OK) {
        train_row_impl(why, whylen, fi, bi);
        lu->t.bwd_out = lu->t.out;
        lu->t.out = (void *)lu->in[l->n_inputs];
        *workspace = fws > bws ? fws : bws;
    } else if (lu->t.state) { /* the backward refused or failed: the row is not run */
        snprintf(why, whylen, "%s", bi);
        backend_layer_free(b, lu->t.state);
        lu->t.state = NULL;
    }
    return st;
}

bench_status isolated_scratch_alloc(const model *m, const backend *b, uint64_t seed, scratch *s)
{
    int64_t in[DTYPE_COUNT] = {0}, out = 4;
    for (int i = 0; i < m->n_layers; i++) {
        const layer *l = &m->layers[i];
        bool backward = l->pass != PASS_FORWARD; /* a train row's forward writes its output into the input area */
        int64_t all = backward ? layer_backward_in_floats(l) : 0;
        for (int k = 0; k < l->n_inputs && !backward; k++)
            all += shape_numel(&l->ins[k]);
        in[l->dtype] = all > in[l->dtype] ? all : in[l->dtype];
        int64_t bytes = (backward ? layer_backward_floats(l) : shape_numel(&l->out)) * (int64_t)dtype_size(l->dtype);
        out = bytes > out ? bytes : out;
    }
    bool ok = (s->out = b->ops->device.alloc(b->ctx, (size_t)out)) != NULL;
    for (int t = 0; ok && t < DTYPE_COUNT; t++) {
        if (!in[t] || !dtype_convertible((dtype_t)t)) /* int8 rows are skipped at setup */
            continue;
        float *host = bench_alloc_floats(in[t]);
        if (!host)
            return BENCH_ERR_NOMEM;
        layer_rng rng;
        layer_rng_seed(&rng, seed);
        layer_fill_uniform(host, in[t], -1.0f, 1.0f, &rng);
        ok = (s->in[t] = backend_alloc_values(b, (dtype_t)t, in[t], host)) != NULL;
        free(host);
    }
    return ok ? BENCH_OK : BENCH_ERR_NOMEM;
}

void isolated_scratch_free(const backend *b, scratch *s)
{
    for (int t = 0; t < DTYPE_COUNT; t++)
        b->ops->device.release(b->ctx, s->in[t]);
    b->ops->device.release(b->ctx, s->out);
    memset(s, 0, sizeof *s);
}

/* An isolated layer's weights, random from seed, on the backend (lu->w); false with r
 * failed when they do not fit. */
static bool isolated_weights(const layer *l, const backend *b, uint64_t seed, layer_unit *lu, layer_result *r)
{
    float *w = NULL;
    char room[400];
    if (!forward_host_room(b, l, room, sizeof room)) {
        measure_row_fail(r, "%s", room);
        return false;
    }
    if (l->n_weight_floats) {
        layer_rng rng;
        layer_rng_seed(&rng, seed);
        if (!(w = bench_alloc_floats(l->n_weight_floats))) {
            measure_row_fail(r, "out of host memory for the layer's weights");
            return false;
        }
        layer_desc_get(l->kind)->init_weights(l, w, &rng);
    }
    lu->w = w ? backend_alloc_values(b, l->dtype, l->n_weight_floats, w) : NULL;
    free(w);
    if (w && !lu->w) {
        const char *why = backend_last_error(b);
        measure_row_fail(r, "out of %s memory for the layer's weights%s%s", b->ops->device_memory ? "device" : "host",
                         *why ? ": " : "", why);
        return false;
    }
    return true;
}

/* Untimed setup of one isolated layer in its mode: weights, the backend's setup, and
 * for batch mode the launch count (and graph). Fills r on failure. */
void isolated_setup(const layer *l, int index, const backend *b, timing_mode mode, const timer_floor *floor,
                        const scratch *s, uint64_t seed, layer_unit *lu, layer_result *r, unit *u)
{
    const backend_ops *ops = b->ops;
    backend_clear_error(b);
    /* a backward run reads the forward's inputs, its output and the output's gradient */
    int n_in = l->n_inputs + (l->pass != PASS_FORWARD ? 2 : 0);
    lu->in = xmalloc((size_t)n_in * sizeof *lu->in);
    lu->t = (timed_layer){.b = b, .in = lu->in, .out = s->out, .launches = 1, .hold = true};
    backend_kernel_entry e = backend_kernel_of(b, l);
    if (!e.kernel || !s->in[l->dtype]) { /* before its weights are made */
        r->status = ROW_SKIPPED;
        snprintf(r->note, sizeof r->note, "skipped: %s cannot run it in %s: %s", ops->name, dtype_name(l->dtype),
                 e.unsupported ? e.unsupported : "no kernel");
        snprintf(r->impl, sizeof r->impl, "%s", e.unsupported ? e.unsupported : "no kernel");
        return;
    }
    int64_t at = 0;
    for (int k = 0; k < n_in; k++) {
        lu->in[k] = (const char *)s->in[l->dtype] + at * (int64_t)dtype_size(l->dtype);
        at += shape_numel(k < l->n_inputs ? &l->ins[k] : &l->out);
    }
    if (!isolated_weights(l, b, seed, lu, r))
        return;
    char why[BACKEND_IMPL_LEN] = "";
    bench_status st = l->pass == PASS_TRAIN ? train_row_setup(b, l, lu, why, sizeof why, &r->workspace_bytes)
                                            : backend_layer_setup(b, l, lu->w, &lu->t.state, why, sizeof why, &r->workspace_bytes);
    if (st == BENCH_ERR_UNSUPPORTED) {
        r->status = ROW_SKIPPED;
        snprintf(r->note, sizeof r->note, "skipped: %s cannot run it%s%s: %s", ops->name,
                 l->dtype != DTYPE_FP32 ? " in " : "", l->dtype != DTYPE_FP32 ? dtype_name(l->dtype) : "",
                 *why ? why : "no implementation for this configuration");
        return;
    }
    if (st != BENCH_OK) {
        measure_row_fail(r, "setup failed: %s", st == BENCH_ERR_NOMEM ? "out of memory" : backend_last_error(b));
        lu->t.state = NULL;
        return;
    }
    snprintf(r->impl, sizeof r->impl, "%s", why);
    if (l->pass != PASS_TRAIN) /* a train row's forward writes the plain output its backward reads */
        backend_layer_isolate(lu->t.state, lu->t.in, r->impl, sizeof r->impl);
    /* One call, unheld and untimed, before any sample: what a library does on its first
     * call (CUDA loads a kernel's module lazily) must not happen while the stream is
     * held, where it would wait for the hold (seen on an H100: 2 s, then the hold gave
     * up). */
    timed_layer_run(&lu->t);
    if (ops->device.sync(b->ctx) != BENCH_OK) {
        measure_row_fail(r, "the first call failed: %s", backend_last_error(b));
        return;
    }
    backend_layer_kernels(b, lu->t.state, r->impl, lu->t.in, lu->t.out, r->kernels, sizeof r->kernels);
    double single = single_call_seconds(&lu->t);
    if (*backend_last_error(b)) {  /* a sample failed: say why here, not at the next call */
        measure_row_fail(r, "%s", backend_last_error(b));
        return;
    }
    timing_mode use = mode;
    if (mode == MODE_AUTO)
        use = single < AUTO_BATCH_FLOORS * floor->warm ? MODE_BATCH : MODE_WARM;
    if (use == MODE_COLD && !ops->timing.flush_cache)
        use = MODE_WARM; /* no cache to flush: the note says so */
    r->mode = use;
    if (use != mode && mode == MODE_COLD)
        measure_note_append(r, "%s has no cache flush: timed warm", ops->name);
    if (use == MODE_BATCH)
        prepare_batch(&lu->t, single, r);
    lu->t.cold = use == MODE_COLD;
    *u = (unit){.b = b, .r = r, .layer = index, .name = l->name, .fn = time_layer_sample, .user = &lu->t,
                .launches = lu->t.launches, .floor = lu->t.cold ? floor->cold : floor->warm};
}

void isolated_free(const backend *b, layer_unit *lu)
{
    if (lu->t.graph)
        b->ops->timing.graph_free(b->ctx, lu->t.graph);
    backend_layer_free(b, lu->t.state);
    backend_layer_free(b, lu->t.bwd);
    b->ops->device.release(b->ctx, lu->w);
    free(lu->in);
}

/* Identical kind, shapes and parameters: the same work. */
int isolated_find_twin(const model *m, int i)
{
    const layer *a = &m->layers[i];
    for (int j = 0; j < i; j++)
        if (layer_same_work(&m->layers[j], a))
            return j;
    return -1;
}
