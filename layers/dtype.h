/* Element types. A tensor's dtype is data, not a code path: a layer carries one, and a
 * backend's kernel table (backend.h) is keyed by (kind, dtype), so that a type a backend
 * cannot run is an empty entry with its reason, an unsupported row.
 *
 * Storage and arithmetic, as the libraries do them (docs/precision.md):
 *   fp32  4 bytes, fp32 arithmetic;
 *   tf32  fp32 storage, products on tensor cores with 10-bit mantissas (CUDA's math mode);
 *   bf16  2 bytes (the top half of an fp32), fp32 accumulation;
 *   fp16  2 bytes (IEEE half), fp32 accumulation;
 *   int8  1 byte, int32 accumulation with scales. */
#ifndef LAYERBENCH_DTYPE_H
#define LAYERBENCH_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* DTYPE_FP32 is 0, so a zeroed layer is an fp32 one. Adding a type: docs/architecture.md. */
typedef enum dtype {
    DTYPE_FP32,
    DTYPE_TF32,
    DTYPE_BF16,
    DTYPE_FP16,
    DTYPE_INT8,
    DTYPE_COUNT
} dtype_t;

/* "bf16" (the name --dtype, the CSV and the JSON use); NULL for a value out of range. */
const char *dtype_name(dtype_t t);
/* torch's spelling, which configs may use too: "bfloat16"; "float32" for tf32 (a math
 * mode of fp32 tensors in torch); NULL out of range. */
const char *dtype_torch_name(dtype_t t);
/* A dtype by any of its names: fp32/float32/float, tf32, bf16/bfloat16, fp16/float16/half,
 * int8/qint8; -1 when none. */
int dtype_from_name(const char *name);
/* "fp32, tf32, bf16, fp16, int8" for error messages. */
const char *dtype_list(void);
/* Bytes of one stored element. */
size_t dtype_size(dtype_t t);

/* The host's conversions between fp32 and a stored type, round to nearest even (NaN stays
 * NaN; fp16 overflows to infinity). For fp32 and tf32 a copy; int8 has no conversion
 * without a scale (false). */
bool dtype_convertible(dtype_t t);
void dtype_from_f32(dtype_t t, void *dst, const float *src, int64_t n);
void dtype_to_f32(dtype_t t, float *dst, const void *src, int64_t n);
/* n elements of one convertible type into another, through fp32 (dst and src may not
 * overlap). */
void dtype_convert(dtype_t to, void *dst, dtype_t from, const void *src, int64_t n);
/* x rounded to the type and back, in place: the values a layer of that type really holds. */
void dtype_round(dtype_t t, float *x, int64_t n);

uint16_t dtype_f32_to_bf16(float f);
float dtype_bf16_to_f32(uint16_t h);
uint16_t dtype_f32_to_fp16(float f);
float dtype_fp16_to_f32(uint16_t h);

/* The relative L2 error a layer that stores its output in t may show against the fp32
 * reference on the same (rounded) inputs and weights, at the least: 0 for fp32, the
 * rounding of the stored output and of an intermediate otherwise (docs/precision.md). */
double dtype_tolerance(dtype_t t);

#endif
