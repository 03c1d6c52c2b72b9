/* Backend registry: the only place that knows which backends were compiled in. */
#include "backend.h"

#include <string.h>

extern const backend_ops backend_cpu_ops;
#ifdef LAYERBENCH_HAVE_CUDA
extern const backend_ops backend_cuda_ops;
#endif

static const backend_ops *const registered[] = {
    &backend_cpu_ops,
#ifdef LAYERBENCH_HAVE_CUDA
    &backend_cuda_ops,
#endif
    NULL,
};

const backend_ops *const *backend_list(void) { return registered; }

const backend_ops *backend_find(const char *name)
{
    for (int i = 0; registered[i]; i++)
        if (strcmp(registered[i]->name, name) == 0)
            return registered[i];
    return NULL;
}

bench_status backend_open(const backend_ops *ops, const backend_options *opt, backend *b, char *err,
                          size_t errlen)
{
    b->ops = ops;
    b->ctx = NULL;
    return ops->init(opt, &b->ctx, err, errlen);
}

void backend_close(backend *b)
{
    if (b->ops && b->ctx)
        b->ops->free(b->ctx);
    b->ctx = NULL;
}

int backend_threads(const backend *b)
{
    return b->ops->thread_count ? b->ops->thread_count(b->ctx) : 0;
}

float *backend_alloc_floats(const backend *b, int64_t n, const float *host)
{
    size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(float);
    float *p = b->ops->alloc(b->ctx, bytes);
    if (p && host && n > 0 && b->ops->upload(b->ctx, p, host, bytes) != BENCH_OK) {
        b->ops->release(b->ctx, p);
        return NULL;
    }
    return p;
}

int64_t backend_mem_available(const backend *b)
{
    return b->ops->mem_available ? b->ops->mem_available(b->ctx) : -1;
}

double backend_tolerance(const backend *b, const layer *l)
{
    return b->ops->tolerance ? b->ops->tolerance(b->ctx, l) : layer_desc_get(l->kind)->tolerance;
}

const char *backend_last_error(const backend *b)
{
    return b->ops->last_error ? b->ops->last_error(b->ctx) : "";
}

void backend_clear_error(const backend *b)
{
    if (b->ops->clear_error)
        b->ops->clear_error(b->ctx);
}
