/* Helpers shared by the kind descriptions in layers/ (internal). */
#ifndef LAYERBENCH_KIND_UTIL_H
#define LAYERBENCH_KIND_UTIL_H

#include <stddef.h>
#include <stdio.h>

#include "layer.h"

#define P_OFF(field) offsetof(layer_params, field)

/* Sets the error and returns -1, so infer() can `return kind_fail(...)`. */
#define kind_fail(err, len, ...) (snprintf((err), (len), __VA_ARGS__), -1)

/* Requires a rank-4 input; writes the reason into err. */
int kind_need_nchw(const layer *l, char *err, size_t errlen);
/* A backward reference's sums: n doubles rounded into dst, then g freed. */
void kind_store_grad(float *dst, double *g, int64_t n);
/* bytes = 4 * (every input + weights + output), for kinds that read and write once. */
void kind_count_bytes(layer *l);

/* rope's scaling parameters (layers/llm.c), which the kinds that turn q and k themselves
 * (mla) take too, with rope's defaults and its checks of them (head_dim: the dims turned) */
extern const char *const kind_rope_types[];
#define KIND_ROPE_PARAMS                                                                    \
    {"rope_theta", LP_FLOAT, P_OFF(rope_theta), false, 0, NULL},                            \
    {"rope_type", LP_ENUM, P_OFF(rope_type), false, 0, kind_rope_types},                    \
    {"factor", LP_FLOAT, P_OFF(rope_factor), false, 0, NULL},                               \
    {"low_freq_factor", LP_FLOAT, P_OFF(low_freq_factor), false, 0, NULL},                  \
    {"high_freq_factor", LP_FLOAT, P_OFF(high_freq_factor), false, 0, NULL},                \
    {"original_max_position_embeddings", LP_INT, P_OFF(original_max_pos), false, 1, NULL},  \
    {"beta_fast", LP_FLOAT, P_OFF(beta_fast), false, 0, NULL},                              \
    {"beta_slow", LP_FLOAT, P_OFF(beta_slow), false, 0, NULL},                              \
    {"truncate", LP_BOOL, P_OFF(truncate), false, 0, NULL},                                 \
    {"mscale", LP_FLOAT, P_OFF(mscale), false, 0, NULL},                                    \
    {"mscale_all_dim", LP_FLOAT, P_OFF(mscale_all_dim), false, 0, NULL},                    \
    {"attention_factor", LP_FLOAT, P_OFF(attention_factor), false, 0, NULL},                \
    {"short_factor", LP_FLOATS, P_OFF(short_factor), false, 0, NULL},                       \
    {"long_factor", LP_FLOATS, P_OFF(long_factor), false, 0, NULL}
void kind_rope_defaults(layer_params *p);
int kind_rope_check(const layer *l, char *err, size_t len);

#endif
