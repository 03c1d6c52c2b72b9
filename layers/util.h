/* Small shared pieces: status codes, checked allocation, clocks. */
#ifndef LAYERBENCH_UTIL_H
#define LAYERBENCH_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* What a user or the machine can cause. Bugs are caught by BENCH_ASSERT instead. */
typedef enum bench_status {
    BENCH_OK = 0,
    BENCH_ERR_USAGE,        /* bad command line or config: exit code 2 */
    BENCH_ERR_UNSUPPORTED,  /* a backend cannot run this layer: a skipped row */
    BENCH_ERR_NOMEM,        /* an allocation failed */
    BENCH_ERR_IO,           /* a file could not be read or written */
    BENCH_ERR_BACKEND,      /* a backend library call failed */
    BENCH_ERR_CHECK,        /* a result differs from the reference */
    BENCH_ERR_INTERRUPTED,  /* stopped by a signal */
} bench_status;

/* Exit code for a status: 0 ok, 2 usage/config, 1 anything else. */
int bench_exit_code(bench_status st);

/* Always-on assertion for programming errors (never for user input). */
#define BENCH_ASSERT(cond)                                                                       \
    ((cond) ? (void)0 : bench_assert_fail(#cond, __FILE__, __LINE__))
_Noreturn void bench_assert_fail(const char *expr, const char *file, int line);

/* malloc/calloc/realloc/strdup that abort with a message on failure: for small
 * bookkeeping only. Tensors use bench_alloc_floats(), which can fail softly. */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
/* printf into a new string; caller frees. */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Diagnostics from below the harness (a kernel search's log, asked for with
 * LAYERBENCH_CPU_SEARCH_LOG or LAYERBENCH_CUDNN_LOG; a backend's warning at start):
 * formatted as given, to stderr. Layers print nothing else; the harness's own messages
 * go through bench/util/log.h. */
void bench_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* a * b, or -1 when either is negative or the product overflows int64: for a kernel's
 * scratch sized by products the config's checks do not bound (threads x S x S). */
int64_t bench_mul(int64_t a, int64_t b);

/* 64-byte aligned float buffer of n elements, or NULL; free with free(). */
float *bench_alloc_floats(int64_t n);

/* Seconds from CLOCK_MONOTONIC. */
double bench_now(void);
/* The shortest of runs of fn(arg) (a probe of a ceiling): one warm-up call, then at
 * least 3 and at most 50 timed ones, until budget seconds have passed. */
double bench_best_seconds(void (*fn)(void *), void *arg, double budget);

/* Bytes of memory the kernel reports available (MemAvailable), or -1; no more than what
 * is left of LAYERBENCH_MEM_LIMIT where that is set (bytes, or a number with K, M or G:
 * the most a run may hold, leaving the rest to other programs), the limit less the
 * resident memory this process has taken since its first call. */
int64_t bench_mem_available(void);
/* "1.5 GiB" */
char *bench_format_bytes(int64_t bytes, char *buf, size_t len);

#endif
