/* Element types. A tensor's dtype is data, not a code path: a layer carries one, and a
 * backend's kernel table (backend.h) is keyed by (kind, dtype), so that a type a backend
 * cannot run is an empty entry with its reason, an unsupported row.
 *
 * Storage and arithmetic, as the libraries do them (docs/precision.md):
 *   fp32  4 bytes, fp32 arithmetic;
 *   tf32  fp32 storage, products on tensor cores with 10-bit mantissas (CUDA's math mode);
 *   bf16  2 bytes (the top half of an fp32), fp32 accumulation;
 *   fp16  2 bytes (IEEE half), fp32 accumulation;
 *   int8  dynamic quantization, as torch.ao.quantization.quantize_dynamic and oneDNN's
 *         runtime scales do it: a quantizing kind (layer_desc.int8_weights: conv2d,
 *         linear) holds its weights in int8 with a scale per output channel, quantizes
 *         its input per tensor at each call (max |x| / 127), multiplies s8 x s8 into
 *         int32 and writes fp32; activations between layers stay fp32 (4 bytes), and
 *         the other kinds run in fp32 (layer_compute_dtype). Static quantization (int8
 *         activations with calibrated scales) is not built. */
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
/* Bytes of one stored activation element (int8: 4, activations stay fp32). */
size_t dtype_size(dtype_t t);
/* The type a value of type t is stored in: fp32 for tf32 and int8, t otherwise. Two
 * types with the same storage pass values without a conversion. */
dtype_t dtype_storage(dtype_t t);

/* The host's conversions between fp32 and a stored type, round to nearest even (NaN stays
 * NaN; fp16 overflows to infinity). For fp32, tf32 and int8 (stored fp32) a copy.
 * dtype_convertible: t is a type these convert. */
bool dtype_convertible(dtype_t t);
void dtype_from_f32(dtype_t t, void *dst, const float *src, int64_t n);
void dtype_to_f32(dtype_t t, float *dst, const void *src, int64_t n);
/* n elements of one convertible type into another, through fp32 (dst and src may not
 * overlap). */
void dtype_convert(dtype_t to, void *dst, dtype_t from, const void *src, int64_t n);
/* x rounded to the type and back, in place: the values a layer of that type really holds
 * (int8's activations are fp32: unchanged; its weights: layer_round_weights). */
void dtype_round(dtype_t t, float *x, int64_t n);

/* int8 weights, rows x cols floats: scale[r] = max |row r| / levels, and, where q is not
 * NULL, q = round(w / scale) in [-levels, levels], to nearest even. levels: 127, or 63
 * (7 bits) where the CPU multiplies without VNNI, whose 16-bit pair sums would saturate. */
void dtype_int8_quantize_rows(const float *w, int64_t rows, int64_t cols, int levels, float *scale, int8_t *q);
/* w rounded to 127-level int8 values and back, in place (q * scale). */
void dtype_int8_round_rows(float *w, int64_t rows, int64_t cols);

uint16_t dtype_f32_to_bf16(float f);
float dtype_bf16_to_f32(uint16_t h);
uint16_t dtype_f32_to_fp16(float f);
float dtype_fp16_to_f32(uint16_t h);

/* The relative L2 error a layer that stores its output in t may show against the fp32
 * reference on the same (rounded) inputs and weights, at the least: 0 for fp32, the
 * rounding of the stored output and of an intermediate otherwise (docs/precision.md). */
double dtype_tolerance(dtype_t t);

#endif
