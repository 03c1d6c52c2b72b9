/* The forward executor (forward.h). */
#include "forward.h"

#include <stdlib.h>
#include <string.h>

bench_status forward_layer_data(const layer *l, uint64_t seed, float **in, float **w)
{
    const layer_desc *d = layer_desc_get(l->kind);
    layer_rng rng;
    layer_rng_seed(&rng, seed);
    bool ok = true;
    for (int k = 0; k < l->n_inputs; k++)
        ok &= (in[k] = bench_alloc_floats(shape_numel(&l->ins[k]))) != NULL;
    *w = l->n_weight_floats ? bench_alloc_floats(l->n_weight_floats) : NULL;
    if (!ok || (l->n_weight_floats && !*w)) {
        forward_free_data(l, in, w);
        return BENCH_ERR_NOMEM;
    }
    /* never zeros: they hide unwritten outputs and can run faster than real data */
    for (int k = 0; k < l->n_inputs; k++)
        layer_fill_uniform(in[k], shape_numel(&l->ins[k]), -1.0f, 1.0f, &rng);
    if (*w)
        d->init_weights(l, *w, &rng);
    for (int k = 0; k < l->n_inputs; k++)
        dtype_round(l->dtype, in[k], shape_numel(&l->ins[k]));
    if (*w)
        layer_round_weights(l, *w);
    return BENCH_OK;
}

void forward_free_data(const layer *l, float **in, float **w)
{
    for (int k = 0; k < l->n_inputs; k++)
        free(in[k]), in[k] = NULL;
    free(*w);
    *w = NULL;
}

/* The activation buffers of a forward being built: the smallest free one at least need
 * bytes large, as an allocator's free list hands out a freed block, or a new one. The
 * buffer's index, or -1 when out of memory. */
typedef struct buffer_pool {
    int64_t *bytes;  /* per buffer: its size */
    bool *busy;      /* per buffer: a live value is in it */
} buffer_pool;

static int pool_take(forward_net *net, buffer_pool *p, int64_t need)
{
    int j = -1;
    for (int q = 0; q < net->n_bufs; q++)
        if (!p->busy[q] && p->bytes[q] >= need && (j < 0 || p->bytes[q] < p->bytes[j]))
            j = q;
    if (j < 0 && (net->bufs[net->n_bufs] = net->b->ops->device.alloc(net->b->ctx, (size_t)(need ? need : 1))))
        j = net->n_bufs++, p->bytes[j] = need;
    if (j >= 0)
        p->busy[j] = true;
    return j;
}

/* Every layer the backend cannot run, said before anything large is allocated:
 * BENCH_ERR_UNSUPPORTED with the first in why, else BENCH_OK. */
static bench_status forward_supported(const model *m, const backend *b, char *why, size_t whylen)
{
    for (int i = 0; i < m->n_layers; i++) {
        const layer *l = &m->layers[i];
        backend_kernel_entry e = backend_kernel_of(b, l);
        if (!e.kernel) {
            snprintf(why, whylen, "layer '%s' (%s, %s) is not supported on %s: %s", l->name, layer_kind_name(l->kind),
                     dtype_name(l->dtype), b->ops->name, e.unsupported ? e.unsupported : "no kernel");
            return BENCH_ERR_UNSUPPORTED;
        }
        for (int k = 0; k < l->n_inputs; k++)
            if (dtype_storage(model_value_dtype(m, l->inputs[k])) != dtype_storage(l->dtype) &&
                !b->ops->device.convert) {
                snprintf(why, whylen, "layer '%s' reads a %s value as %s, and %s cannot convert between dtypes",
                         l->name, dtype_name(model_value_dtype(m, l->inputs[k])), dtype_name(l->dtype), b->ops->name);
                return BENCH_ERR_UNSUPPORTED;
            }
    }
    return BENCH_OK;
}

/* Layer i's arguments: its inputs' values, each converted (a cast of the forward) where
 * the layer reads another dtype. False when out of memory, said in why. */
static bool layer_args(forward_net *net, int i, char *why, size_t whylen)
{
    const model *m = net->m;
    const layer *l = &m->layers[i];
    net->args[i] = xmalloc((size_t)l->n_inputs * sizeof *net->args[i]);
    for (int k = 0; k < l->n_inputs; k++) {
        dtype_t from = model_value_dtype(m, l->inputs[k]);
        net->args[i][k] = net->values[l->inputs[k]];
        if (dtype_storage(from) == dtype_storage(l->dtype)) /* the same bytes: nothing to convert */
            continue;
        int64_t count = shape_numel(&l->ins[k]);
        forward_cast cast = {i, net->values[l->inputs[k]], NULL, from, l->dtype, count};
        if (!(cast.dst = backend_alloc_values(net->b, l->dtype, count, NULL))) {
            snprintf(why, whylen, "out of memory for the conversion of an input of layer '%s'", l->name);
            return false;
        }
        net->casts = xrealloc(net->casts, (size_t)(net->n_casts + 1) * sizeof *net->casts);
        net->casts[net->n_casts++] = cast;
        net->args[i][k] = cast.dst;
    }
    return true;
}

/* Layer i's weights made (random, from rng) and the layer set up on the backend. */
static bench_status layer_setup(forward_net *net, int i, layer_rng *rng, char *why, size_t whylen)
{
    const layer *l = &net->m->layers[i];
    const layer_desc *d = layer_desc_get(l->kind);
    const backend *b = net->b;
    if (l->n_weight_floats && !forward_host_room(b, l, why, whylen))
        return BENCH_ERR_NOMEM;
    if (l->n_weight_floats) {
        float *w = bench_alloc_floats(l->n_weight_floats);
        if (w) {
            d->init_weights(l, w, rng);
            net->weights[i] = backend_alloc_values(b, l->dtype, l->n_weight_floats, w);
            free(w);
        }
        if (!net->weights[i]) {
            snprintf(why, whylen, "out of memory for the weights (at layer '%s')", l->name);
            return BENCH_ERR_NOMEM;
        }
    }
    int64_t ws;
    bench_status set = backend_layer_setup(b, l, net->weights[i], &net->states[i], net->impl[i], sizeof net->impl[i], &ws);
    if (set != BENCH_OK) {
        net->states[i] = NULL;
        if (set == BENCH_ERR_UNSUPPORTED)
            snprintf(why, whylen, "layer '%s' (%s) is not supported on %s", l->name, d->name, b->ops->name);
        else
            snprintf(why, whylen, "setting up layer '%s' failed: %s", l->name,
                     set == BENCH_ERR_NOMEM ? "out of memory" : backend_last_error(b));
    }
    return set;
}

bench_status forward_build(forward_net *net, const model *m, const backend *b, uint64_t seed, char *why,
                               size_t whylen)
{
    int n = m->n_layers;
    *net = (forward_net){.m = m, .b = b, .states = xcalloc((size_t)n, sizeof(backend_layer *)),
                         .weights = xcalloc((size_t)n, sizeof(void *)),
                         .values = xcalloc((size_t)n + 1, sizeof(void *)),
                         .args = xcalloc((size_t)n, sizeof(void **)),
                         .impl = xcalloc((size_t)n, sizeof *net->impl)};
    layer_rng rng;
    layer_rng_seed(&rng, seed);
    net->bufs = xcalloc((size_t)n + 1, sizeof *net->bufs);
    buffer_pool pool = {xcalloc((size_t)n + 1, sizeof *pool.bytes), xcalloc((size_t)n + 1, sizeof *pool.busy)};
    int *last = xmalloc(((size_t)n + 1) * sizeof *last), *buf_of = xcalloc((size_t)n + 1, sizeof *buf_of);
    bench_status st = forward_supported(m, b, why, whylen);
    model_last_readers(m, last);
    last[0] = last[model_storage_of(m, n)] = n; /* every forward reads the input; the output is downloaded */
    for (int v = 1; m->pass == PASS_TRAIN && v <= n; v++)
        last[v] = n; /* a training forward keeps every value: the backward reads them */
    dtype_t in_type = model_value_dtype(m, 0);
    float *host = st == BENCH_OK ? bench_alloc_floats(shape_numel(&m->input)) : NULL;
    if (host) {
        layer_fill_uniform(host, shape_numel(&m->input), -1.0f, 1.0f, &rng);
        net->values[0] = net->bufs[0] = backend_alloc_values(b, in_type, shape_numel(&m->input), host);
        free(host);
    }
    if (st == BENCH_OK && !net->values[0]) {
        snprintf(why, whylen, "out of memory for the model's input");
        st = BENCH_ERR_NOMEM;
    }
    if (st == BENCH_OK) {
        net->casts = xcalloc(1, sizeof *net->casts);
        net->n_bufs = 1, pool.busy[0] = true;
    }
    for (int i = 0; st == BENCH_OK && i < n; i++) {
        const layer *l = &m->layers[i];
        if (!layer_args(net, i, why, whylen)) {
            st = BENCH_ERR_NOMEM;
            break;
        }
        int64_t out_bytes = shape_numel(&l->out) * (int64_t)dtype_size(l->dtype);
        if (layer_is_view(l)) {
            net->values[i + 1] = net->values[model_storage_of(m, l->inputs[0])];
        } else if ((buf_of[i + 1] = pool_take(net, &pool, out_bytes)) >= 0) {
            net->values[i + 1] = net->bufs[buf_of[i + 1]];
        } else {
            snprintf(why, whylen, "out of memory for the activations (at layer '%s')", l->name);
            st = BENCH_ERR_NOMEM;
            break;
        }
        /* a buffer is free once the last layer reading its value has run (not before its
         * output is placed: a layer never writes over its own input) */
        for (int k = 0; k < l->n_inputs; k++)
            if (last[model_storage_of(m, l->inputs[k])] == i)
                pool.busy[buf_of[model_storage_of(m, l->inputs[k])]] = false;
        if (!layer_is_view(l) && last[i + 1] == i)
            pool.busy[buf_of[i + 1]] = false;
        st = layer_setup(net, i, &rng, why, whylen);
    }
    /* a training forward stays plain between layers: the backward kernels read its values */
    if (st == BENCH_OK && m->pass != PASS_TRAIN &&
        backend_model_link(b, m, net->states, net->values, net->impl[0], sizeof net->impl[0]) != BENCH_OK) {
        snprintf(why, whylen, "linking the layers failed: %s", backend_last_error(b));
        st = BENCH_ERR_BACKEND;
    }
    free(pool.bytes), free(pool.busy), free(last), free(buf_of);
    return st;
}

void forward_free(forward_net *net)
{
    const backend_ops *ops = net->b ? net->b->ops : NULL;
    for (int i = 0; net->states && i < net->m->n_layers; i++) {
        backend_layer_free(net->b, net->states[i]);
        ops->device.release(net->b->ctx, net->weights[i]);
        free(net->args[i]);
    }
    for (int j = 0; j < net->n_bufs; j++)
        ops->device.release(net->b->ctx, net->bufs[j]);
    for (int j = 0; j < net->n_casts; j++)
        ops->device.release(net->b->ctx, net->casts[j].dst);
    free(net->states), free(net->weights), free(net->values), free(net->args), free(net->impl), free(net->bufs);
    free(net->casts);
    memset(net, 0, sizeof *net);
}

/* Queues the forward; with marks, the backend records a mark after each layer. */
void forward_queue(const forward_net *net, bool marks)
{
    const backend_ops *ops = net->b->ops;
    const forward_cast *c = net->casts, *end = net->casts + net->n_casts;
    for (int i = 0; i < net->m->n_layers; i++) {
        for (; c < end && c->layer == i; c++)
            ops->device.convert(net->b->ctx, c->dst, c->to, c->src, c->from, c->n);
        backend_layer_run(net->states[i], net->args[i], net->values[i + 1]);
        if (marks)
            ops->timing.timer_mark(net->b->ctx, i);
    }
}

bool forward_host_room(const backend *b, const layer *l, char *why, size_t whylen)
{
    int64_t avail = b->ops->device_memory || !l->n_weight_floats ? -1 : bench_mem_available();
    int64_t need = 4 * l->n_weight_floats + 2 * layer_weight_bytes(l) + ((int64_t)16 << 20);
    char a[32], c[32];
    if (avail < 0 || avail >= need)
        return true;
    bench_format_bytes(need, a, sizeof a), bench_format_bytes(avail, c, sizeof c);
    if (strcmp(a, c) == 0) /* the two round alike: in MiB, where they differ */
        snprintf(a, sizeof a, "%lld MiB", (long long)(need >> 20)), snprintf(c, sizeof c, "%lld MiB", (long long)(avail >> 20));
    snprintf(why, whylen, "out of host memory at layer '%s': its weights need about %s (drawn in fp32, held in %s, "
                          "and a kernel's packed copy) and %s is available",
             l->name, a, dtype_name(l->dtype), c);
    return false;
}
