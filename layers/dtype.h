/* Element types. A tensor's dtype is data, not a code path: a layer carries one, and a
 * backend's kernel table (backend.h) is keyed by (kind, dtype), so that a type a backend
 * cannot run is an empty entry with its reason, an unsupported row. */
#ifndef LAYERBENCH_DTYPE_H
#define LAYERBENCH_DTYPE_H

#include <stddef.h>

/* DTYPE_FP32 is 0, so a zeroed layer is an fp32 one. Adding a type: docs/architecture.md. */
typedef enum dtype {
    DTYPE_FP32,
    DTYPE_COUNT
} dtype_t;

/* "fp32" (the name --dtype and configs will use); NULL for a value out of range. */
const char *dtype_name(dtype_t t);
/* The config spelling: "float32" for fp32 (torch's name); NULL out of range. */
const char *dtype_torch_name(dtype_t t);
/* Bytes of one element. */
size_t dtype_size(dtype_t t);

#endif
