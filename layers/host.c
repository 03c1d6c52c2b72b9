/* The CPU's extensions (host.h). */
#include "host.h"

#include <stdio.h>

#if defined(__x86_64__)
#include <cpuid.h>

/* AMX for bf16: the instructions, and the tile state saved by the OS (xgetbv runs
 * only where OSXSAVE says so). */
static bool amx_bf16(void)
{
    unsigned a, b, c, d, lo, hi;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 22 & 1) || !(d >> 24 & 1))
        return false;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1))
        return false;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo >> 17 & 3) == 3;
}
#endif

bool host_has(host_isa x)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    switch (x) { /* __builtin_cpu_supports takes a literal: one case each */
    case HOST_SSE42: return __builtin_cpu_supports("sse4.2");
    case HOST_AVX: return __builtin_cpu_supports("avx");
    case HOST_AVX2: return __builtin_cpu_supports("avx2");
    case HOST_FMA: return __builtin_cpu_supports("fma");
    case HOST_BMI2: return __builtin_cpu_supports("bmi2");
    case HOST_AVX512F: return __builtin_cpu_supports("avx512f");
    case HOST_AVX512BW: return __builtin_cpu_supports("avx512bw");
    case HOST_AVX512DQ: return __builtin_cpu_supports("avx512dq");
    case HOST_AVX512VL: return __builtin_cpu_supports("avx512vl");
    case HOST_AVX512CD: return __builtin_cpu_supports("avx512cd");
    case HOST_AVX512VNNI: return __builtin_cpu_supports("avx512vnni");
    case HOST_AVX512BF16: return __builtin_cpu_supports("avx512bf16");
    case HOST_AMX_BF16: return amx_bf16();
    case HOST_ISA_COUNT: break;
    }
#endif
    (void)x;
    return false;
}

char *host_isa_list(char *buf, size_t len)
{
    static const struct {
        host_isa x;
        const char *name;
    } listed[] = {{HOST_SSE42, "sse4.2"},         {HOST_AVX, "avx"},           {HOST_AVX2, "avx2"},
                  {HOST_FMA, "fma"},              {HOST_AVX512F, "avx512f"},   {HOST_AVX512BW, "avx512bw"},
                  {HOST_AVX512VL, "avx512vl"},    {HOST_AVX512VNNI, "avx512vnni"},
                  {HOST_AVX512BF16, "avx512bf16"}, {HOST_AMX_BF16, "amx-bf16"}};
    size_t off = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof listed / sizeof *listed && off < len; i++)
        if (host_has(listed[i].x))
            off += (size_t)snprintf(buf + off, len - off, "%s%s", off ? " " : "", listed[i].name);
    return buf;
}

const char *host_isa_level(void)
{
#if defined(__x86_64__)
    if (host_has(HOST_AVX512F) && host_has(HOST_AVX512BW) && host_has(HOST_AVX512DQ) && host_has(HOST_AVX512VL) &&
        host_has(HOST_AVX512CD))
        return "x86-64-v4 (AVX-512)";
    if (host_has(HOST_AVX2) && host_has(HOST_FMA) && host_has(HOST_BMI2))
        return "x86-64-v3 (AVX2, FMA)";
    return "x86-64 (SSE2)";
#else
    return "baseline";
#endif
}
