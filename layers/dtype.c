#include "dtype.h"

static const struct {
    const char *name, *torch;
    size_t size;
} dtypes[DTYPE_COUNT] = {
    [DTYPE_FP32] = {"fp32", "float32", 4},
};

const char *dtype_name(dtype_t t) { return (unsigned)t < DTYPE_COUNT ? dtypes[t].name : NULL; }
const char *dtype_torch_name(dtype_t t) { return (unsigned)t < DTYPE_COUNT ? dtypes[t].torch : NULL; }
size_t dtype_size(dtype_t t) { return (unsigned)t < DTYPE_COUNT ? dtypes[t].size : 0; }
