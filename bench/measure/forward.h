/* The forward executor, shared by `run` (the chained forward and the in-model view,
 * measure_chained.c) and `check` (the forward against the reference): every layer of a
 * model set up on one backend, with buffers planned from the values' lifetimes, queued
 * in order. Nothing here times or prints. */
#ifndef LAYERBENCH_FORWARD_H
#define LAYERBENCH_FORWARD_H

#include "backend.h"
#include "model.h"

/* A layer's input stored in another dtype than the layer's (a mixed model): converted
 * into the layer's own buffer just before it runs, by the backend's device.convert, so
 * that the conversion counts in that layer's in-model time, as torch's aten::to would
 * sit beside it. */
typedef struct forward_cast {
    int layer;
    const void *src;
    void *dst;              /* owned */
    dtype_t from, to;
    int64_t n;
} forward_cast;

typedef struct forward_net {
    const model *m;
    const backend *b;
    backend_layer **states; /* per layer */
    void **weights;         /* per layer, backend memory in the layer's dtype; NULL for layers without */
    void **values;          /* per value id: values[0] the input, values[i + 1] layer i's output,
                               each in its dtype (model_value_dtype) */
    const void ***args;     /* per layer: its inputs, pointers into values (or casts) */
    char (*impl)[BACKEND_IMPL_LEN];       /* per layer: what runs in this forward (setup's choice, as linked) */
    void **bufs;            /* the activation buffers (values point into them), n_bufs; owned */
    int n_bufs;
    forward_cast *casts;    /* in the order they run */
    int n_casts;
} forward_net;

/* Builds net (for a model whose pass is PASS_TRAIN: the forward in training mode, every
 * value kept in its own buffer for the backward, train_step.h); on failure why says what failed (naming the layer) and the status is
 * BENCH_ERR_UNSUPPORTED (a layer the backend cannot run), BENCH_ERR_NOMEM or
 * BENCH_ERR_BACKEND. forward_free frees what was made, after a failure too. */
bench_status forward_build(forward_net *net, const model *m, const backend *b, uint64_t seed, char *why,
                               size_t whylen);
/* Queues the forward once (no synchronisation); with marks, the backend records mark i
 * after layer i (timing.timer_mark). */
void forward_queue(const forward_net *net, bool marks);
/* Frees what forward_build made; a zeroed net is a no-op. */
void forward_free(forward_net *net);

/* Whether the host has room for layer l's weights on backend b, checked before they are
 * made, so that a model near the memory's size fails a row or the chained forward with
 * the figures rather than meeting the kernel's out-of-memory killer: the weights drawn
 * in fp32, held in the layer's dtype and a kernel's packed copy, and a margin. True on a
 * device backend (its memory is checked when it opens). Else false with the reason. */
bool forward_host_room(const backend *b, const layer *l, char *why, size_t whylen);

/* Random inputs (in[0..l->n_inputs), never zeros) and weights (*w, NULL when the layer
 * has none) for layer l, in host memory as floats, rounded to the layer's dtype (the
 * values it really holds); forward_free_data() frees them. */
bench_status forward_layer_data(const layer *l, uint64_t seed, float **in, float **w);
void forward_free_data(const layer *l, float **in, float **w);

#endif
