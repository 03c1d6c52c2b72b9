/* The forward executor, shared by `run` (the chained forward and the in-model view,
 * measure_chained.c) and `check` (the forward against the reference): every layer of a
 * model set up on one backend, with buffers planned from the values' lifetimes, queued
 * in order. Nothing here times or prints. */
#ifndef LAYERBENCH_FORWARD_H
#define LAYERBENCH_FORWARD_H

#include "backend.h"
#include "model.h"

typedef struct forward_net {
    const model *m;
    const backend *b;
    backend_layer **states; /* per layer */
    float **weights;        /* per layer, backend memory; NULL for layers without */
    float **values;         /* per value id: values[0] the input, values[i + 1] layer i's output */
    const float ***args;    /* per layer: its inputs, pointers into values */
    char (*impl)[96];       /* per layer: what runs in this forward (setup's choice, as linked) */
    float **bufs;           /* the activation buffers (values point into them), n_bufs; owned */
    int n_bufs;
} forward_net;

/* Builds net; on failure why says what failed (naming the layer) and the status is
 * BENCH_ERR_UNSUPPORTED (a layer the backend cannot run), BENCH_ERR_NOMEM or
 * BENCH_ERR_BACKEND. forward_free frees what was made, after a failure too. */
bench_status forward_build(forward_net *net, const model *m, const backend *b, uint64_t seed, char *why,
                               size_t whylen);
/* Queues the forward once (no synchronisation); with marks, the backend records mark i
 * after layer i (timing.timer_mark). */
void forward_queue(const forward_net *net, bool marks);
/* Frees what forward_build made; a zeroed net is a no-op. */
void forward_free(forward_net *net);

/* Random inputs (in[0..l->n_inputs), never zeros) and weights (*w, NULL when the layer
 * has none) for layer l, in host memory; forward_free_data() frees them. */
bench_status forward_layer_data(const layer *l, uint64_t seed, float **in, float **w);
void forward_free_data(const layer *l, float **in, float **w);

#endif
