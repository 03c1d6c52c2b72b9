/* The CPU this process runs on, probed in one place (as Google Benchmark keeps every
 * host fact behind CPUInfo::Get()): the vector extensions the backends choose their
 * kernels by and the harness reports. The cpu backend's own overrides for tests
 * (LAYERBENCH_CPU_NO_BF16, LAYERBENCH_CPU_GEMM_ISA) stay with it: this says what the
 * CPU has. */
#ifndef LAYERBENCH_HOST_H
#define LAYERBENCH_HOST_H

#include <stdbool.h>
#include <stddef.h>

typedef enum host_isa {
    HOST_SSE42,
    HOST_AVX,
    HOST_AVX2,
    HOST_FMA,
    HOST_BMI2,
    HOST_AVX512F,
    HOST_AVX512BW,
    HOST_AVX512DQ,
    HOST_AVX512VL,
    HOST_AVX512CD,
    HOST_AVX512VNNI,
    HOST_AVX512BF16,
    HOST_AMX_BF16,   /* AMX-BF16 and AMX-TILE (CPUID), and the OS saves the tile state (XCR0) */
    HOST_ISA_COUNT
} host_isa;

/* Whether the CPU has the extension (false on a CPU that is not x86-64). */
bool host_has(host_isa x);
/* The extensions the JSON context and the choices file name, e.g. "avx2 fma avx512f",
 * into buf. */
char *host_isa_list(char *buf, size_t len);
/* The x86-64 microarchitecture level the CPU reaches, e.g. "x86-64-v4 (AVX-512)": the
 * clone of a CPU_ISA_CLONES loop the loader picks. */
const char *host_isa_level(void);

#endif
