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
/* bytes = 4 * (every input + weights + output), for kinds that read and write once. */
void kind_count_bytes(layer *l);

#endif
