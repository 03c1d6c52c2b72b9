/* The backend contract's wrappers: the optional slots checked for NULL, and the one
 * dispatcher from a layer to its backend's kernel table. */
#include "backend.h"

#include <stdlib.h>
#include <string.h>

bench_status backend_open(const backend_ops *ops, const backend_options *opt, backend *b, char *err,
                          size_t errlen)
{
    b->ops = ops;
    b->ctx = NULL;
    return ops->device.init(opt, &b->ctx, err, errlen);
}

void backend_close(backend *b)
{
    if (b->ops && b->ctx)
        b->ops->device.free(b->ctx);
    b->ctx = NULL;
}

int backend_threads(const backend *b)
{
    return b->ops->device.thread_count ? b->ops->device.thread_count(b->ctx) : 0;
}

float *backend_alloc_floats(const backend *b, int64_t n, const float *host)
{
    size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(float);
    float *p = b->ops->device.alloc(b->ctx, bytes);
    if (p && host && n > 0 && b->ops->device.upload(b->ctx, p, host, bytes) != BENCH_OK) {
        b->ops->device.release(b->ctx, p);
        return NULL;
    }
    return p;
}

void *backend_alloc_values(const backend *b, dtype_t t, int64_t n, const float *host)
{
    if (t == DTYPE_FP32 || t == DTYPE_TF32)
        return backend_alloc_floats(b, n, host);
    if (!dtype_convertible(t))
        return NULL;
    size_t bytes = (size_t)(n > 0 ? n : 1) * dtype_size(t);
    void *p = b->ops->device.alloc(b->ctx, bytes), *tmp = NULL;
    if (p && host && n > 0) {
        if (!(tmp = bench_alloc_floats((int64_t)(bytes / 4 + 1))) ||
            (dtype_from_f32(t, tmp, host, n), b->ops->device.upload(b->ctx, p, tmp, bytes)) != BENCH_OK) {
            b->ops->device.release(b->ctx, p);
            p = NULL;
        }
    }
    free(tmp);
    return p;
}

bench_status backend_download_values(const backend *b, dtype_t t, float *host, const void *src, int64_t n)
{
    size_t size = dtype_size(t), bytes = (size_t)n * size;
    if (size == 4)
        return b->ops->device.download(b->ctx, host, src, bytes);
    if (!dtype_convertible(t))
        return BENCH_ERR_UNSUPPORTED;
    /* the narrow elements land in the upper part of host, and widen from the front */
    char *tail = (char *)host + (size_t)n * 4 - bytes;
    bench_status st = b->ops->device.download(b->ctx, tail, src, bytes);
    if (st != BENCH_OK)
        return st;
    if (t == DTYPE_BF16 || t == DTYPE_FP16) {
        const uint16_t *h = (const uint16_t *)tail;
        for (int64_t i = 0; i < n; i++) /* h[i] sits at byte 2n + 2i: at or after host[i]'s end */
            host[i] = t == DTYPE_BF16 ? dtype_bf16_to_f32(h[i]) : dtype_fp16_to_f32(h[i]);
    }
    return BENCH_OK;
}

int64_t backend_mem_available(const backend *b)
{
    return b->ops->device.mem_available ? b->ops->device.mem_available(b->ctx) : -1;
}

const char *backend_last_error(const backend *b)
{
    return b->ops->device.last_error ? b->ops->device.last_error(b->ctx) : "";
}

void backend_clear_error(const backend *b)
{
    if (b->ops->device.clear_error)
        b->ops->device.clear_error(b->ctx);
}

backend_kernel_entry backend_kernel_of(const backend *b, const layer *l)
{
    if (l->pass == PASS_TRAIN) { /* its forward kernel, in training mode, where its backward runs too */
        layer bl = layer_as_backward(l), fl = *l;
        fl.pass = PASS_FORWARD;
        if (layer_is_view(l) && layer_has_backward(l)) /* nothing runs, either way */
            return backend_kernel_of(b, &fl);
        backend_kernel_entry e = backend_kernel_of(b, &bl);
        fl.pass = PASS_FORWARD;
        return e.kernel ? backend_kernel_of(b, &fl) : e;
    }
    bool backward = l->pass == PASS_BACKWARD;
    const backend_kernel_table *t = backward ? b->ops->layers.backward : b->ops->layers.kernels;
    if (backward && !layer_has_backward(l))
        return (backend_kernel_entry){.unsupported = "the kind has no backward yet (no reference to check one by)"};
    if (!t && backward)
        return (backend_kernel_entry){.unsupported = "no backward kernels on this backend yet"};
    if (!t || (unsigned)l->kind >= LAYER_KIND_COUNT || (unsigned)l->dtype >= DTYPE_COUNT)
        return (backend_kernel_entry){.unsupported = "no kernel"};
    backend_kernel_entry e = (*t)[l->kind][layer_compute_dtype(l)];
    if (backward && !e.kernel && !e.unsupported)
        e.unsupported = "no backward kernel for this kind and dtype on this backend yet";
    return e;
}

bench_status backend_layer_setup(const backend *b, const layer *l, const void *w, backend_layer **out, char *impl,
                                 size_t impl_len, int64_t *workspace_bytes)
{
    *out = NULL;
    *workspace_bytes = 0;
    backend_kernel_entry e = backend_kernel_of(b, l);
    if (!e.kernel) {
        snprintf(impl, impl_len, "%s", e.unsupported ? e.unsupported : "");
        return BENCH_ERR_UNSUPPORTED;
    }
    backend_layer *bl = xcalloc(1, sizeof *bl);
    *bl = (backend_layer){.kernel = e.kernel,
                          .l = l,
                          .w = w,
                          .env = b->ops->layers.kernel_env ? b->ops->layers.kernel_env(b->ctx) : b->ctx};
    if (e.kernel->setup) {
        if (impl_len)
            impl[0] = 0;
        bool failed_before = *backend_last_error(b);
        bench_status st = e.kernel->setup(bl->env, l, w, &bl->state, impl, impl_len, workspace_bytes);
        /* a library call that failed inside a setup that went on: the backend recorded it */
        if (st == BENCH_OK && !failed_before && *backend_last_error(b)) {
            if (e.kernel->free)
                e.kernel->free(bl->env, bl->state);
            st = BENCH_ERR_BACKEND;
        }
        if (st != BENCH_OK) {
            free(bl);
            return st;
        }
    } else {
        snprintf(impl, impl_len, "%s", e.kernel->impl ? e.kernel->impl : "");
    }
    *out = bl;
    return BENCH_OK;
}

void backend_layer_run(const backend_layer *bl, const void *const *in, void *out)
{
    bl->kernel->run(bl->env, bl->l, bl->state, in, bl->w, out);
}

typedef struct kernels_call {
    const backend_layer *bl;
    const void *const *in;
    void *out;
} kernels_call;

static void kernels_call_run(void *user)
{
    kernels_call *k = user;
    backend_layer_run(k->bl, k->in, k->out);
}

void backend_layer_kernels(const backend *b, const backend_layer *bl, const char *impl, const void *const *in,
                           void *out, char *buf, size_t len)
{
    if (!len)
        return;
    buf[0] = 0;
    if (b->ops->layers.kernel_names) {
        kernels_call k = {bl, in, out};
        if (!b->ops->layers.kernel_names(b->ctx, kernels_call_run, &k, buf, len))
            buf[0] = 0; /* not told: empty, as the docs say */
        return;
    }
    size_t n = strlen(impl);
    static const char *const cuts[] = {" (", " [", ", "};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        const char *at = strstr(impl, cuts[i]);
        if (at && (size_t)(at - impl) < n)
            n = (size_t)(at - impl);
    }
    snprintf(buf, len, "%.*s", (int)n, impl);
}

void backend_layer_free(const backend *b, backend_layer *bl)
{
    (void)b;
    if (!bl)
        return;
    if (bl->kernel->free)
        bl->kernel->free(bl->env, bl->state);
    free(bl);
}

bool backend_layer_parts_enable(const backend_layer *bl, bool on)
{
    return bl->kernel->parts_enable && bl->kernel->parts_enable(bl->env, bl->state, on);
}

void backend_layer_parts_read(const backend_layer *bl, double *seconds)
{
    if (bl->kernel->parts_read)
        bl->kernel->parts_read(bl->env, bl->state, seconds);
}

int backend_layer_parts(const backend_layer *bl, layer_part_info *parts)
{
    return bl->kernel->parts ? bl->kernel->parts(bl->env, bl->state, bl->l, parts) : 0;
}

void backend_layer_isolate(const backend_layer *bl, const void *const *in, char *impl, size_t impl_len)
{
    if (bl->kernel->isolate)
        bl->kernel->isolate(bl->env, bl->state, in, impl, impl_len);
}

double backend_tolerance(const backend *b, const layer *l)
{
    backend_kernel_entry e = backend_kernel_of(b, l);
    double own = !e.kernel || !e.kernel->tolerance
                     ? layer_desc_get(l->kind)->tolerance
                     : e.kernel->tolerance(b->ops->layers.kernel_env ? b->ops->layers.kernel_env(b->ctx) : b->ctx, l);
    return own + dtype_tolerance(layer_compute_dtype(l)); /* the type's rounding on top of the kernel's own */
}

bench_status backend_model_link(const backend *b, const model *m, backend_layer *const *layers, void *const *values,
                                char *impl, size_t impl_len)
{
    if (!b->ops->layers.model_link)
        return BENCH_OK;
    void **states = xcalloc((size_t)m->n_layers + 1, sizeof *states);
    for (int i = 0; i < m->n_layers; i++)
        states[i] = layers[i] ? layers[i]->state : NULL;
    bench_status st = b->ops->layers.model_link(b->ctx, m, states, values, impl, impl_len);
    free(states);
    return st;
}
