#include "model.h"

#include <stdlib.h>
#include <string.h>

void model_free(model *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_layers; i++) {
        free(m->layers[i].name);
        free(m->layers[i].inputs);
        free(m->layers[i].ins);
    }
    free(m->layers);
    free(m->name);
    free(m->path);
    free(m->note);
    free(m);
}

static bool with_batch(shape_t *s, int64_t batch)
{
    s->d[0] = batch;
    return shape_numel_checked(s) >= 0;
}

bench_status model_set_batch(model *m, int64_t batch, char *err, size_t errlen)
{
    bool ok = batch >= 1 && with_batch(&m->input, batch);
    const char *bad = m->name;
    for (int i = 0; ok && i < m->n_layers; i++) {
        layer *l = &m->layers[i];
        ok = with_batch(&l->in, batch) && with_batch(&l->out, batch);
        for (int k = 0; ok && k < l->n_inputs; k++)
            ok = with_batch(&l->ins[k], batch);
        if (!ok)
            bad = l->name;
        else if (layer_count(l) != 0) {
            snprintf(err, errlen, "batch %lld makes the counts of layer '%s' exceed 2^62", (long long)batch, l->name);
            return BENCH_ERR_USAGE;
        }
    }
    if (!ok) {
        snprintf(err, errlen, "batch %lld makes a tensor of '%s' larger than 2^40 elements", (long long)batch, bad);
        return BENCH_ERR_USAGE;
    }
    m->batch = batch;
    return BENCH_OK;
}

/* Sums that stop at INT64_MAX rather than wrap (100,000 layers of 2^62 each). */
static int64_t sat_add(int64_t a, int64_t b)
{
    int64_t r;
    return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

static void totals_add(model_totals *t, const layer *l)
{
    t->macs = sat_add(t->macs, l->macs);
    t->flops = sat_add(t->flops, l->flops);
    dtype_t d = layer_compute_dtype(l);
    t->dtype_flops[d] = sat_add(t->dtype_flops[d], l->flops);
    t->bytes = sat_add(t->bytes, l->bytes);
}

model_totals model_sum(const model *m)
{
    model_totals t = {0};
    bool train = m->pass == PASS_TRAIN, *runs = NULL, *input_grad = NULL;
    if (train) {
        runs = xmalloc((size_t)m->n_layers + 1), input_grad = xmalloc((size_t)m->n_layers + 1);
        model_grad_flow(m, runs, input_grad);
    }
    for (int i = 0; i < m->n_layers; i++) {
        const layer *l = &m->layers[i];
        t.n_weights = sat_add(t.n_weights, l->n_weights);
        if (!train) {
            totals_add(&t, l);
            continue;
        }
        layer f = *l; /* the step: every forward, and the backward of the layers that run one, as they run it */
        f.pass = PASS_FORWARD;
        layer_count(&f);
        totals_add(&t, &f);
        if (runs[i]) {
            f.no_input_grad = !input_grad[i], f.pass = PASS_BACKWARD;
            layer_count(&f);
            totals_add(&t, &f);
        }
        if (runs[i] && layer_learns(l)) { /* the optimizer's update */
            layer u = {.macs = 0};
            model_optimizer_count(m->optimizer, l->n_weights, &u.flops, &u.bytes);
            totals_add(&t, &u);
        }
    }
    free(runs), free(input_grad);
    return t;
}

void model_set_dtype(model *m, dtype_t t)
{
    m->dtype = t;
    for (int i = 0; i < m->n_layers; i++) {
        layer *l = &m->layers[i];
        if (!l->dtype_pinned)
            l->dtype = t;
        /* a view is its input's storage, in its input's dtype (layers come in order) */
        if (layer_is_view(l))
            l->dtype = model_value_dtype(m, l->inputs[0]);
        layer_count(l); /* it counted at this batch already: in range */
    }
}

void model_set_pass(model *m, layer_pass p)
{
    m->pass = p;
    bool *runs = xmalloc((size_t)m->n_layers + 1), *input_grad = xmalloc((size_t)m->n_layers + 1);
    for (int i = 0; i < m->n_layers; i++)
        m->layers[i].pass = p;
    model_grad_flow(m, runs, input_grad);
    for (int i = 0; i < m->n_layers; i++) {
        /* a train layer computes the gradients the step needs (a backward row alone, all) */
        m->layers[i].no_input_grad = p == PASS_TRAIN && !input_grad[i];
        layer_count(&m->layers[i]);
    }
    free(runs), free(input_grad);
}

dtype_t model_value_dtype(const model *m, int value)
{
    if (value > 0)
        return m->layers[value - 1].dtype;
    for (int i = 0; i < m->n_layers; i++)
        for (int k = 0; k < m->layers[i].n_inputs; k++)
            if (m->layers[i].inputs[k] == 0)
                return m->layers[i].dtype;
    return m->dtype;
}

int64_t model_tokens(const model *m)
{
    for (int i = 0; i < m->n_layers; i++)
        for (int k = 0; k < m->layers[i].n_inputs; k++)
            if (m->layers[i].inputs[k] == 0 && m->layers[i].kind == LAYER_EMBEDDING && m->input.rank == 2)
                return m->input.d[1];
    return -1;
}

int64_t model_kv_len(const model *m)
{
    for (int i = 0; i < m->n_layers; i++)
        if (layer_kind_has_kv_len(m->layers[i].kind))
            return m->layers[i].p.kv_len;
    return -1;
}

bool model_decode_step(const model *m) { return model_tokens(m) == 1 && model_kv_len(m) > 0; }

bool model_mixed(const model *m)
{
    for (int i = 0; i < m->n_layers; i++)
        for (int k = 0; k < m->layers[i].n_inputs; k++)
            if (model_value_dtype(m, m->layers[i].inputs[k]) != m->layers[i].dtype)
                return true;
    return false;
}

int model_storage_of(const model *m, int value)
{
    while (value > 0 && layer_is_view(&m->layers[value - 1]))
        value = m->layers[value - 1].inputs[0];
    return value;
}

const shape_t *model_value_shape(const model *m, int value)
{
    return value == 0 ? &m->input : &m->layers[value - 1].out;
}

/* Each term below is at most 2^40 elements of at most 4 bytes: 100,000 layers cannot
 * overflow 2^63 bytes. */
int64_t model_isolated_bytes(const model *m, bool dedupe)
{
    int64_t bytes = 0, max_in = 1, max_out = 1;
    for (int i = 0; i < m->n_layers; i++) {
        const layer *l = &m->layers[i];
        bool twin = false;
        for (int j = 0; dedupe && !twin && j < i; j++)
            twin = layer_same_work(&m->layers[j], l);
        if (!twin)
            bytes += layer_weight_bytes(l);
        int64_t ins = 0; /* the isolated layers' input area holds all of a layer's inputs */
        for (int k = 0; k < l->n_inputs; k++)
            ins += shape_numel(&l->ins[k]);
        max_in = ins > max_in ? ins : max_in;
        max_out = shape_numel(&l->out) > max_out ? shape_numel(&l->out) : max_out;
    }
    return bytes + 4 * (2 * max_in + max_out); /* + their shared buffers, at most fp32 */
}

int64_t model_chained_bytes(const model *m)
{
    int64_t bytes = (int64_t)dtype_size(model_value_dtype(m, 0)) * shape_numel(&m->input);
    for (int i = 0; i < m->n_layers; i++) {
        const layer *l = &m->layers[i];
        bytes += layer_weight_bytes(l);
        if (!layer_is_view(l))
            bytes += (int64_t)dtype_size(l->dtype) * shape_numel(&l->out);
    }
    return bytes;
}

int64_t model_memory_bytes(const model *m) { return model_isolated_bytes(m, false) + model_chained_bytes(m); }

bench_status model_check_memory(const model *m, int64_t available, const char *where, char *err, size_t errlen)
{
    int64_t need = model_memory_bytes(m), avail = available >= 0 ? available : bench_mem_available();
    char a[32], b[32];
    if (avail >= 0 && need > avail) {
        snprintf(err, errlen, "%s at batch %lld needs %s for activations and weights, but only %s is available%s%s",
                 m->name, (long long)m->batch, bench_format_bytes(need, a, sizeof a),
                 bench_format_bytes(avail, b, sizeof b), *where ? " on " : "", where);
        return BENCH_ERR_USAGE;
    }
    return BENCH_OK;
}

void model_last_readers(const model *m, int *last)
{
    for (int v = 0; v <= m->n_layers; v++)
        last[v] = v - 1; /* a value nobody reads lives while it is written */
    for (int i = 0; i < m->n_layers; i++)
        for (int k = 0; k < m->layers[i].n_inputs; k++) {
            int s = model_storage_of(m, m->layers[i].inputs[k]);
            last[s] = i > last[s] ? i : last[s];
        }
}

const char *model_optimizer_name(model_optimizer o)
{
    static const char *const names[OPTIMIZER_COUNT] = {"none", "sgd", "adamw"};
    return (unsigned)o < OPTIMIZER_COUNT ? names[o] : "?";
}

int model_optimizer_state(model_optimizer o) { return o == OPTIMIZER_ADAMW ? 2 : 0; }

void model_optimizer_count(model_optimizer o, int64_t n, int64_t *flops, int64_t *bytes)
{
    int st = model_optimizer_state(o);
    *flops = o == OPTIMIZER_NONE ? 0 : layer_count_mul(st ? 12 : 2, n); /* AdamW: about 12 a parameter */
    *bytes = o == OPTIMIZER_NONE ? 0 : layer_count_mul(4 * (3 + 2 * st), n); /* w and g read, w written; m and v both */
}

void model_grad_flow(const model *m, bool *runs, bool *input_grad)
{
    int n = m->n_layers;
    bool *rg = xcalloc((size_t)n + 1, sizeof *rg), *need = xcalloc((size_t)n + 1, sizeof *need);
    for (int i = 0; i < n; i++) { /* forward: which values depend on weights that learn */
        const layer *l = &m->layers[i];
        input_grad[i] = false;
        for (int k = 0; k < l->n_inputs; k++)
            input_grad[i] |= rg[l->inputs[k]];
        rg[i + 1] = input_grad[i] || layer_learns(l);
    }
    if (n > 0)
        need[model_storage_of(m, n)] = true;
    for (int i = n - 1; i >= 0; i--) { /* backward: which of those the loss reaches */
        const layer *l = &m->layers[i];
        runs[i] = !layer_is_view(l) && need[i + 1] && rg[i + 1];
        for (int k = 0; runs[i] && k < l->n_inputs; k++)
            if (rg[l->inputs[k]])
                need[model_storage_of(m, l->inputs[k])] = true;
    }
    free(rg), free(need);
}

/* The step of layer i's backward in model_train_plan's timeline */
static int bwd_step(int n, int i) { return 2 * n - i; }

/* bytes alive from step born to step dies (inclusive), in delta */
static void live_span(int64_t *delta, int born, int dies, int64_t bytes)
{
    delta[born] += bytes;
    delta[(dies < born ? born : dies) + 1] -= bytes;
}

void model_train_plan(const model *m, model_train_memory *tm)
{
    int n = m->n_layers, steps = 2 * n + 1, out = model_storage_of(m, n);
    memset(tm, 0, sizeof *tm);
    tm->peak_step = -1;
    int64_t *delta = xcalloc((size_t)steps + 2, sizeof *delta);
    int *first_grad = xmalloc(((size_t)n + 1) * sizeof *first_grad); /* per storage: the step its gradient is born */
    int *dies = xmalloc(((size_t)n + 1) * sizeof *dies);             /* per storage: its last reader's step */
    bool *runs = xmalloc(((size_t)n + 1) * sizeof *runs), *input_grad = xmalloc(((size_t)n + 1) * sizeof *input_grad);
    model_grad_flow(m, runs, input_grad);
    model_last_readers(m, dies); /* the forward's readers, then the backward's below */
    if (n > 0)
        dies[out] = n; /* the loss reads the output */
    for (int v = 0; v <= n; v++)
        first_grad[v] = v == out ? n : steps;
    for (int i = n - 1; i >= 0; i--) {
        const layer *l = &m->layers[i];
        int64_t es = (int64_t)dtype_size(l->dtype);
        tm->weight_bytes += layer_weight_bytes(l);
        if (!runs[i])
            continue;
        if (l->n_weight_floats && !l->frozen) { /* a layer's weights' gradient, to the end */
            tm->weight_grad_bytes += es * l->n_weight_floats;
            live_span(delta, bwd_step(n, i), steps - 1, es * l->n_weight_floats);
        }
        if (layer_learns(l)) /* the optimizer's state of the weights that learn, kept across steps */
            tm->optimizer_bytes += model_optimizer_state(m->optimizer) * 4 * l->n_weights;
        if (layer_learns(l) && m->optimizer != OPTIMIZER_NONE && layer_master_weights(l))
            tm->master_bytes += 4 * l->n_weights; /* what the update changes, the weights rounded from it */
        dies[i + 1] = bwd_step(n, i) > dies[i + 1] ? bwd_step(n, i) : dies[i + 1]; /* its output, for its backward */
        for (int k = 0; k < l->n_inputs; k++) {
            int s = model_storage_of(m, l->inputs[k]);
            dies[s] = bwd_step(n, i) > dies[s] ? bwd_step(n, i) : dies[s]; /* its inputs, too */
            if (input_grad[i] && bwd_step(n, i) < first_grad[s])
                first_grad[s] = bwd_step(n, i);
        }
    }
    for (int v = 0; v <= n; v++) /* each activation (the input too) from its forward to its last reader */
        if (model_storage_of(m, v) == v)
            live_span(delta, v ? v - 1 : 0, dies[v],
                      (int64_t)dtype_size(model_value_dtype(m, v)) * shape_numel(model_value_shape(m, v)));
    for (int v = 1; v <= n; v++) /* an activation's gradient: from its first contribution to its layer's backward */
        if (model_storage_of(m, v) == v && first_grad[v] < steps && runs[v - 1])
            live_span(delta, first_grad[v], bwd_step(n, v - 1),
                      (int64_t)dtype_size(m->layers[v - 1].dtype) * shape_numel(&m->layers[v - 1].out));
    int64_t live = tm->weight_bytes + tm->optimizer_bytes + tm->master_bytes, loss_grad = out > 0 ? (int64_t)dtype_size(model_value_dtype(m, out)) *
                                                              shape_numel(model_value_shape(m, out))
                                                        : 0;
    for (int t = 0; t < steps; t++) {
        live += delta[t];
        if (t == n) /* at the loss: all but the weights and the loss's gradient (born then, for an output of its own) */
            tm->kept_bytes = live - tm->weight_bytes - tm->optimizer_bytes - tm->master_bytes - loss_grad;
        if (live > tm->peak_bytes)
            tm->peak_bytes = live, tm->peak_step = t;
    }
    free(delta), free(first_grad), free(dies), free(runs), free(input_grad);
}

void model_memory_plan(const model *m, model_memory *mm)
{
    int n = m->n_layers;
    memset(mm, 0, sizeof *mm);
    mm->peak_layer = -1;
    /* per value (0 the input, i+1 layer i's output): its bytes if it owns storage, and
     * the last layer that reads it, through views */
    int64_t *bytes = xcalloc((size_t)n + 1, sizeof *bytes), *delta = xcalloc((size_t)n + 2, sizeof *delta);
    int *last = xmalloc(((size_t)n + 1) * sizeof *last);
    model_last_readers(m, last);
    for (int v = 0; v <= n; v++) {
        if (model_storage_of(m, v) == v)
            bytes[v] = (int64_t)dtype_size(model_value_dtype(m, v)) * shape_numel(model_value_shape(m, v));
        mm->all_activation_bytes += v > 0 ? bytes[v] : 0;
    }
    for (int i = 0; i < n; i++)
        mm->weight_bytes += layer_weight_bytes(&m->layers[i]);
    if (n > 0)
        last[model_storage_of(m, n)] = n - 1; /* the model's output is kept */
    for (int v = 0; v <= n; v++) {
        if (!bytes[v])
            continue;
        int born = v > 0 ? v - 1 : 0, dies = last[v] < born ? born : last[v];
        delta[born] += bytes[v];
        delta[dies + 1] -= bytes[v];
    }
    int64_t live = 0;
    for (int i = 0; i < n; i++) {
        live += delta[i];
        if (live > mm->peak_activation_bytes)
            mm->peak_activation_bytes = live, mm->peak_layer = i;
    }
    free(bytes), free(delta), free(last);
}
