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
} check_result;

/* Runs layer l once on b with random inputs (seeded) and compares with the reference. */
check_result check_layer(const layer *l, const backend *b, uint64_t seed);

/* Runs m's chained forward once on b (every layer set up, then run on the previous
 * ones' outputs, views sharing their input's buffer, as the timed forward does) with
 * the input and weights drawn from seed, and compares the model's output with ref, the
 * reference forward from the same draws. The tolerance is the sum of the layers' own:
 * each layer's error reaches the output at most about that large, where a wrong
 * wiring or a stale buffer is off by O(1). ref NULL: out of memory. */
check_result check_forward(const model *m, const backend *b, uint64_t seed, const float *ref);

/* Checks every layer of m on each backend, then (with forward) the chained forward on
 * each, printing one row per layer and backend, and one per backend for the forward.
 * Returns BENCH_OK when all pass, BENCH_ERR_CHECK when any differs. */
bench_status check_model(const model *m, const backend *bs, int n_backends, uint64_t seed, bool forward, FILE *out);

/* Relative L2 error; counts output elements that are not finite where ref is. */
double check_rel_err(const float *out, const float *ref, int64_t n, int64_t *nonfinite);

#endif
