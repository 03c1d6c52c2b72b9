#include "dtype.h"

#include <string.h>

static const struct {
    const char *name, *torch, *aliases[3];
    size_t size;
    double tolerance;
} dtypes[DTYPE_COUNT] = {
    [DTYPE_FP32] = {"fp32", "float32", {"float"}, 4, 0.0},
    /* tf32 products keep 10 mantissa bits (2^-11 rounding) of each operand: what the
     * cuda backend accepted for TF32 GEMMs and convolutions on an H100 */
    [DTYPE_TF32] = {"tf32", "float32", {NULL}, 4, 5e-3},
    /* bf16 keeps 8 bits (unit roundoff 2^-9 = 2.0e-3); the stored output's rounding is an
     * RMS error near 2^-9/sqrt(3); a kernel that rounds one intermediate (a GEMM's bf16
     * inputs, an im2col copy) doubles it. 1e-2 leaves room for both on sums of many terms. */
    [DTYPE_BF16] = {"bf16", "bfloat16", {NULL}, 2, 1e-2},
    /* fp16 keeps 11 bits (unit roundoff 2^-12 = 2.4e-4): the same reasoning, 8x tighter */
    [DTYPE_FP16] = {"fp16", "float16", {"half"}, 2, 2e-3},
    /* int8, dynamic quantization (dtype.h): activations stay fp32 between layers (4
     * bytes); a quantizing layer rounds its weights per output channel and its input per
     * tensor to 127 levels either side of zero, an error of up to 1/254 of each range. On
     * uniform random inputs a layer's relative L2 error is 4e-3 (bench check, every
     * shipped config); inputs with a long tail (a few large values set the scale) use
     * fewer levels: 2e-2 leaves 5x for them (docs/precision.md). */
    [DTYPE_INT8] = {"int8", "qint8", {NULL}, 4, 2e-2},
};

const char *dtype_name(dtype_t t) { return (unsigned)t < DTYPE_COUNT ? dtypes[t].name : NULL; }
const char *dtype_torch_name(dtype_t t) { return (unsigned)t < DTYPE_COUNT ? dtypes[t].torch : NULL; }
size_t dtype_size(dtype_t t) { return (unsigned)t < DTYPE_COUNT ? dtypes[t].size : 0; }
double dtype_tolerance(dtype_t t) { return (unsigned)t < DTYPE_COUNT ? dtypes[t].tolerance : 0.0; }

int dtype_from_name(const char *name)
{
    for (int t = 0; name && t < DTYPE_COUNT; t++) {
        if (strcmp(name, dtypes[t].name) == 0 || (t != DTYPE_TF32 && strcmp(name, dtypes[t].torch) == 0))
            return t;
        for (int a = 0; a < 3 && dtypes[t].aliases[a]; a++)
            if (strcmp(name, dtypes[t].aliases[a]) == 0)
                return t;
    }
    return -1;
}

const char *dtype_list(void) { return "fp32, tf32, bf16, fp16, int8"; }

uint16_t dtype_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it one, quiet */
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

float dtype_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t dtype_f32_to_fp16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) /* NaN */
        return (uint16_t)(sign | 0x7e00u);
    if (abs >= 0x477ff000u) /* rounds to 65520 or more: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (abs < 0x38800000u) { /* below 2^-14: a subnormal half, or zero */
        float a;
        memcpy(&a, &abs, 4);
        /* a * 2^24 is the subnormal's integer mantissa; rint rounds to nearest even */
        float m = a * 16777216.0f;
        uint32_t mi = (uint32_t)__builtin_rintf(m);
        return (uint16_t)(sign | mi);
    }
    uint32_t r = abs + 0xfffu + ((abs >> 13) & 1); /* round the 13 dropped bits, to even */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

float dtype_fp16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu, u;
    if (e == 0) { /* zero or subnormal: m * 2^-24 */
        float f = (float)m * (1.0f / 16777216.0f);
        memcpy(&u, &f, 4);
        u |= sign;
    } else if (e == 31) {
        u = sign | 0x7f800000u | (m << 13);
    } else {
        u = sign | ((e + 112) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

bool dtype_convertible(dtype_t t) { return (unsigned)t < DTYPE_COUNT; }

dtype_t dtype_storage(dtype_t t) { return t == DTYPE_TF32 || t == DTYPE_INT8 ? DTYPE_FP32 : t; }

/* Symmetric, to nearest even: scale = max |row| / levels (1 for a row of zeros). */
void dtype_int8_quantize_rows(const float *w, int64_t rows, int64_t cols, int levels, float *scale, int8_t *q)
{
    float top = (float)levels;
    for (int64_t r = 0; r < rows; r++) {
        const float *x = w + r * cols;
        float amax = 0.0f;
        for (int64_t i = 0; i < cols; i++)
            amax = __builtin_fabsf(x[i]) > amax ? __builtin_fabsf(x[i]) : amax;
        float s = amax > 0.0f ? amax / top : 1.0f;
        scale[r] = s;
        for (int64_t i = 0; q && i < cols; i++) {
            float v = __builtin_rintf(x[i] / s);
            q[r * cols + i] = (int8_t)(v > top ? top : v < -top ? -top : v);
        }
    }
}

void dtype_int8_round_rows(float *w, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++) {
        float s;
        dtype_int8_quantize_rows(w + r * cols, 1, cols, 127, &s, NULL);
        for (int64_t i = 0; i < cols; i++) {
            float v = __builtin_rintf(w[r * cols + i] / s);
            w[r * cols + i] = (v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v) * s;
        }
    }
}

void dtype_from_f32(dtype_t t, void *dst, const float *src, int64_t n)
{
    uint16_t *h = dst;
    switch (t) {
    case DTYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            h[i] = dtype_f32_to_bf16(src[i]);
        break;
    case DTYPE_FP16:
        for (int64_t i = 0; i < n; i++)
            h[i] = dtype_f32_to_fp16(src[i]);
        break;
    default:
        if (dst != src && n > 0)
            memmove(dst, src, (size_t)n * 4);
        break;
    }
}

void dtype_to_f32(dtype_t t, float *dst, const void *src, int64_t n)
{
    const uint16_t *h = src;
    switch (t) {
    case DTYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = dtype_bf16_to_f32(h[i]);
        break;
    case DTYPE_FP16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = dtype_fp16_to_f32(h[i]);
        break;
    default:
        if (dst != src && n > 0)
            memmove(dst, src, (size_t)n * 4);
        break;
    }
}

void dtype_round(dtype_t t, float *x, int64_t n)
{
    switch (t) {
    case DTYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            x[i] = dtype_bf16_to_f32(dtype_f32_to_bf16(x[i]));
        break;
    case DTYPE_FP16:
        for (int64_t i = 0; i < n; i++)
            x[i] = dtype_fp16_to_f32(dtype_f32_to_fp16(x[i]));
        break;
    default:
        break;
    }
}

void dtype_convert(dtype_t to, void *dst, dtype_t from, const void *src, int64_t n)
{
    float buf[1024];
    size_t in = dtype_size(from), out = dtype_size(to);
    for (int64_t i = 0; i < n; i += 1024) {
        int64_t k = n - i < 1024 ? n - i : 1024;
        dtype_to_f32(from, buf, (const char *)src + i * (int64_t)in, k);
        dtype_from_f32(to, (char *)dst + i * (int64_t)out, buf, k);
    }
}
