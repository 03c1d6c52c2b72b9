/* `bench check`: every layer on every backend against the plain-C reference. */
#ifndef LAYERBENCH_CHECK_H
#define LAYERBENCH_CHECK_H

#include <stdio.h>

#include "backend.h"
#include "model.h"

typedef struct check_result {
    bench_status status;   /* BENCH_OK, BENCH_ERR_CHECK (wrong), BENCH_ERR_UNSUPPORTED, or an error */
    double rel_err;        /* ||out - ref||_2 / ||ref||_2 */
    double tolerance;
    int64_t nonfinite;     /* NaN or Inf elements in the output where the reference is finite */
    char why[200];         /* for an error: what went wrong ("out of memory: ...", the backend's message) */
} check_result;

/* What the plain-C reference runs at, for the estimate check_model gives before it starts
 * (measured: ResNet-18's 3.6 GFLOP in about 4 s on one core of a Zen 3 VM). */
#define CHECK_REFERENCE_FLOPS_PER_S 1e9
/* An estimate over this is said before the check starts. */
#define CHECK_SAY_LONG_S 30.0

/* The relative error a backward kernel may have (fp32; its dtype's rounding on top): its
 * sums over a batch's pixels run in float where the reference's run in double */
#define CHECK_BACKWARD_TOLERANCE 2e-5

/* The tolerance of a chain of layers (the chained forward, the training step): each
 * layer's own error adds up, but its dtype's roundings, independent from layer to layer,
 * grow as the square root of how many layers round to that type. Layers are added one
 * by one (extra: a part of the layer's own, beside the kernel's tolerance); the total
 * stays under CHECK_CHAIN_MAX, so that an error of order 1 (a residual's gradient left
 * out, a stale buffer) fails however deep the model (Llama-3.2-1B's bf16 step summed
 * to 2.6). */
#define CHECK_CHAIN_MAX 0.25
typedef struct check_chain_tol {
    double own;
    int per_type[DTYPE_COUNT];
} check_chain_tol;
void check_chain_tol_add(check_chain_tol *c, const backend *b, const layer *l, double extra);
double check_chain_tol_total(const check_chain_tol *c);

/* Runs layer l once on b with random inputs (seeded) and compares with the reference.
 * A backward layer (l->pass): the backend's gradients against layer_desc.backward on the
 * same inputs, training forward output and a random output gradient, the worst of its
 * inputs' and its weights' errors. */
check_result check_layer(const layer *l, const backend *b, uint64_t seed);

/* Runs m's chained forward once on b (every layer set up, then run on the previous
 * ones' outputs, views sharing their input's buffer, as the timed forward does) with
 * the input and weights drawn from seed, and compares the model's output with ref, the
 * reference forward from the same draws. The tolerance is the chain's of its layers
 * (check_chain_tol): each layer's error reaches the output at most about that large,
 * where a wrong wiring or a stale buffer is off by O(1). ref NULL: out of memory. */
check_result check_forward(const model *m, const backend *b, uint64_t seed, const float *ref);

/* Runs m's chained training step once on b (m's pass PASS_TRAIN: the forward in training
 * mode, the loss, the backward in reverse with the gradients summed where values have
 * several readers, train_step.h) from the draws of seed, and compares every layer's
 * weights' gradient with the reference step's (every layer's training reference, then its
 * backward reference, in the same order): the worst layer's relative error, against
 * the chain's tolerance of the backward layers that run (check_chain_tol). */
check_result check_train_step(const model *m, const backend *b, uint64_t seed);
/* The bytes that check takes: the reference's weights and values with one layer's
 * gradients at a time, and the step's on the backend as planned (model_train_plan). */
int64_t check_step_bytes(const model *m);

/* How check_model runs. */
typedef struct check_options {
    uint64_t seed;
    bool forward;          /* the chained forward too, where the whole model fits */
    bool dedupe;           /* one of each set of identical layers (layer_same_work); the others
                            * take its verdict, and their rows say whose */
    double timeout;        /* > 0: a reference estimated to take longer is not run */
    int64_t available;     /* bytes the check may take (bench_mem_available()), -1: unknown */
} check_options;

/* The bytes checking layer l alone takes at most: its inputs, weights, output and the
 * reference's output in fp32 (a backward layer: its inputs, output and output gradient,
 * weights, and its gradients and the reference's), and the backend's copies of them. */
int64_t check_layer_bytes(const layer *l);
/* The bytes the chained forward's check takes: the model as the forward holds it, and the
 * reference forward's values in fp32. */
int64_t check_forward_bytes(const model *m);

/* Checks every layer of m on each backend, then (with o->forward) the chained forward on
 * each, printing one row per layer and backend, and one per backend for the forward.
 * Each layer is checked alone, on its own inputs, weights and reference, and freed before
 * the next: a model larger than memory is checked layer by layer. A layer whose check
 * would not fit in o->available is not checked, and its row says what it needs; so is
 * the forward where the whole model does not fit. The reference's time is estimated
 * from the FLOPs first and said when long; with o->timeout > 0, a layer (or the forward)
 * whose reference would take longer is not run and its row says so (the reference is
 * plain C and cannot be stopped midway); one that runs out of memory is not checked
 * either, with the reason. Returns BENCH_OK when all that ran pass, BENCH_ERR_CHECK when
 * any differs or fails. */
bench_status check_model(const model *m, const backend *bs, int n_backends, const check_options *o, FILE *out);

/* Relative L2 error; counts output elements that are not finite where ref is. */
double check_rel_err(const float *out, const float *ref, int64_t n, int64_t *nonfinite);

#endif
