/* The cpu backend's dtype conversions (cpu_kernels.h): bf16 <-> fp32 loops the compiler
 * vectorises, the other pairs through dtype_convert, on the calling thread or split over
 * the pool (also the backend's device.convert, which a mixed model's chained forward
 * runs between layers of different dtypes); and an absolute maximum. Calls nothing in
 * the backend but cpu_env.c, so that any kernel file may call it. */
#include <omp.h>
#include <string.h>

#include "cpu_env.h"
#include "cpu_kernels.h"

/* bf16 <-> fp32 in loops the compiler vectorises (widening is a shift; narrowing rounds
 * to nearest even, NaN kept), cloned per ISA; the other pairs through dtype_convert. */
CPU_ISA_CLONES static void widen_bf16(float *dst, const uint16_t *src, int64_t n)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &u, 4);
    }
}

CPU_ISA_CLONES static void narrow_bf16(uint16_t *dst, const float *src, int64_t n)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], 4);
        uint32_t r = (u + 0x7fffu + ((u >> 16) & 1)) >> 16;
        dst[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40 : r);
    }
}

void cpu_convert_span(void *dst, dtype_t to, const void *src, dtype_t from, int64_t n)
{
    if (from == DTYPE_BF16 && dtype_storage(to) == DTYPE_FP32)
        widen_bf16(dst, src, n);
    else if (to == DTYPE_BF16 && dtype_storage(from) == DTYPE_FP32)
        narrow_bf16(dst, src, n);
    else if (dtype_storage(to) == dtype_storage(from))
        memmove(dst, src, (size_t)n * dtype_size(to));
    else
        dtype_convert(to, dst, from, src, n);
}

CPU_ISA_CLONES static float absmax_span(const float *x, int64_t n)
{
    float m = 0.0f;
#pragma omp simd reduction(max : m)
    for (int64_t i = 0; i < n; i++) {
        float a = __builtin_fabsf(x[i]);
        m = a > m ? a : m; /* NaN is skipped */
    }
    return m;
}

float cpu_absmax(const float *x, int64_t n)
{
    if (n <= CPU_PARALLEL_MIN)
        return absmax_span(x, n);
    float m = 0.0f;
#pragma omp parallel reduction(max : m)
    {
        int64_t lo, hi;
        cpu_thread_span(n, &lo, &hi);
        m = hi > lo ? absmax_span(x + lo, hi - lo) : 0.0f;
    }
    return m;
}

/* n elements converted between two convertible dtypes, split over the thread pool. */
void cpu_convert(void *ctx, void *dst, dtype_t to, const void *src, dtype_t from, int64_t n)
{
    (void)ctx;
    size_t in = dtype_size(from), out = dtype_size(to);
    if (n <= CPU_PARALLEL_MIN) {
        cpu_convert_span(dst, to, src, from, n);
        return;
    }
#pragma omp parallel
    {
        int64_t lo, hi;
        cpu_thread_span(n, &lo, &hi);
        if (hi > lo)
            cpu_convert_span((char *)dst + lo * (int64_t)out, to, (const char *)src + lo * (int64_t)in, from, hi - lo);
    }
}
