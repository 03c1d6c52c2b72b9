#include "model.h"

#include <stdlib.h>
#include <string.h>

void model_free(model *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_layers; i++)
        free(m->layers[i].name);
    free(m->layers);
    free(m->name);
    free(m->path);
    free(m);
}

/* Largest element count we accept for one tensor: 2^40 floats (4 TiB). */
#define MODEL_MAX_NUMEL ((int64_t)1 << 40)

static bool with_batch(shape_t *s, int64_t batch)
{
    s->d[0] = 1;
    int64_t per = shape_numel(s);
    s->d[0] = batch;
    return per <= MODEL_MAX_NUMEL / batch;
}

bench_status model_set_batch(model *m, int64_t batch, char *err, size_t errlen)
{
    bool ok = batch >= 1 && with_batch(&m->input, batch);
    for (int i = 0; ok && i < m->n_layers; i++) {
        layer *l = &m->layers[i];
        ok = with_batch(&l->in, batch) && with_batch(&l->out, batch) &&
             (l->kind != LAYER_ADD || with_batch(&l->in2, batch));
        if (ok)
            layer_desc_get(l->kind)->count(l);
    }
    if (!ok) {
        snprintf(err, errlen, "batch %lld makes a tensor of '%s' larger than 2^40 elements",
                 (long long)batch, m->name);
        return BENCH_ERR_USAGE;
    }
    m->batch = batch;
    return BENCH_OK;
}

model_totals model_sum(const model *m)
{
    model_totals t = {0, 0, 0, 0};
    for (int i = 0; i < m->n_layers; i++) {
        t.n_weights += m->layers[i].n_weights;
        t.macs += m->layers[i].macs;
        t.flops += m->layers[i].flops;
        t.bytes += m->layers[i].bytes;
    }
    return t;
}

int model_storage_of(const model *m, int value)
{
    while (value > 0 && layer_desc_get(m->layers[value - 1].kind)->aliases_input)
        value = m->layers[value - 1].input[0];
    return value;
}

const shape_t *model_value_shape(const model *m, int value)
{
    return value == 0 ? &m->input : &m->layers[value - 1].out;
}

int64_t model_memory_bytes(const model *m)
{
    int64_t floats = shape_numel(&m->input);
    for (int i = 0; i < m->n_layers; i++) {
        const layer *l = &m->layers[i];
        floats += l->n_weight_floats;
        if (!layer_desc_get(l->kind)->aliases_input)
            floats += shape_numel(&l->out);
    }
    return 4 * floats;
}

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
