/* The cpu backend's context and the services its kernels call (cuda has cuda_env.c):
 * the search's choices, the forward's conditions before a timed candidate, the threads'
 * shares, the ISA level. backend_cpu.c holds the kernel table and the backend's ops;
 * the kernels call here, never there. */
#ifndef LAYERBENCH_CPU_ENV_H
#define LAYERBENCH_CPU_ENV_H

#include <stdbool.h>
#include <stddef.h>

#include "cpu_kernels.h"

typedef struct cpu_ctx {
    int threads;
    bool search;            /* --algo search: kernels time their candidate algorithms at setup */
    cpu_choices choices;    /* ... and keep what they chose here */
    double t0;
    double *marks;          /* in-model view: times of the marks of the current sample */
    int n_marks;
    unsigned char *flush;   /* written before each cold sample: twice the last-level cache */
    size_t flush_bytes;
    size_t llc;             /* the last-level cache's bytes (0: unknown) */
    int flush_value;
    char *description;
    struct probe *stream;   /* cpu_stream's arrays, from its first call on; NULL before */
    bool stream_tried;      /* ... and whether it tried to have them */
    float *scratch;         /* the 16-bit backward's fp32 copies (cpu_bwd_via_f32_kernel), shared by
                               every layer set up on the context: they run one at a time */
    int64_t scratch_floats;
} cpu_ctx;

/* c->scratch holding at least n floats (its contents not kept); false when out of memory.
 * Untimed: at setup. */
bool cpu_scratch_reserve(cpu_ctx *c, int64_t n);

/* Cold samples: writes twice the last-level cache (the backend's timing.flush_cache). */
void cpu_env_flush_cache(void *ctx);

#endif
