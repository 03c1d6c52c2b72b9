#define _GNU_SOURCE
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

int bench_exit_code(bench_status st)
{
    return st == BENCH_OK ? 0 : st == BENCH_ERR_USAGE ? 2 : 1;
}

void bench_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "bench: internal error: assertion '%s' failed at %s:%d\n", expr, file, line);
    abort();
}

static void oom(size_t n)
{
    fprintf(stderr, "bench: out of memory allocating %zu bytes\n", n);
    exit(1);
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom(n);
    return p;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        oom(n * size);
    return p;
}

void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p)
        oom(n);
    return p;
}

char *xstrdup(const char *s)
{
    char *d = strdup(s);
    if (!d)
        oom(strlen(s));
    return d;
}

char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    char *s;
    va_start(ap, fmt);
    int r = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (r < 0)
        oom(0);
    return s;
}

int64_t bench_mul(int64_t a, int64_t b)
{
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r))
        return -1;
    return r;
}

float *bench_alloc_floats(int64_t n)
{
    if (n < 0 || (uint64_t)n > SIZE_MAX / sizeof(float) - 64)
        return NULL;
    size_t bytes = ((size_t)n * sizeof(float) + 63) & ~(size_t)63;
    return aligned_alloc(64, bytes ? bytes : 64);
}

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* LAYERBENCH_MEM_LIMIT: bytes, or with K, M or G (powers of 1024); -1 when unset or
 * not a size. */
static int64_t mem_limit(void)
{
    const char *e = getenv("LAYERBENCH_MEM_LIMIT");
    char *end;
    if (!e || !*e)
        return -1;
    double v = strtod(e, &end);
    int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
    end += shift != 0;
    if (*end || !(v >= 0) || v * (double)(1ll << shift) > 9e18)
        return -1;
    return (int64_t)(v * (double)(1ll << shift));
}

/* This process's resident memory (VmRSS), bytes; -1 where /proc does not say. */
static int64_t self_rss(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long kb = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %lld kB", &kb) == 1)
            break;
    fclose(f);
    return kb < 0 ? -1 : (int64_t)kb * 1024;
}

int64_t bench_mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long long kb = -1;
    int64_t cap = mem_limit();
    /* the limit is on what the run holds: what is left of it is the limit less what this
     * process has taken since it first asked (as MemAvailable is what is left of the
     * machine's), so a layer set up after others is judged against what they left. The
     * process's code, libraries and first buffers, held before that (14 MiB for a config
     * read), are not counted: a limit below them would refuse every run. */
    static int64_t base = -1;
    int64_t rss = cap >= 0 ? self_rss() : -1;
    if (rss >= 0 && base < 0)
        base = rss;
    int64_t held = rss >= 0 ? rss - base : 0;
    if (held > 0)
        cap = cap > held ? cap - held : 0;
    if (!f)
        return cap;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
            break;
    fclose(f);
    int64_t avail = kb < 0 ? -1 : (int64_t)kb * 1024;
    /* an address-space limit (ulimit -v) caps what this process may map, whatever is free */
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (cap < 0 || (int64_t)rl.rlim_cur < cap))
        cap = (int64_t)rl.rlim_cur;
    return cap >= 0 && (avail < 0 || cap < avail) ? cap : avail;
}

char *bench_format_bytes(int64_t bytes, char *buf, size_t len)
{
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 6)
        v /= 1024.0, u++;
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", v, units[u]);
    return buf;
}

void bench_diag(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

double bench_best_seconds(void (*fn)(void *), void *arg, double budget)
{
    double best = 1e30, start = bench_now();
    fn(arg); /* warm-up: page faults, thread start */
    for (int r = 0; r < 50 && (r < 3 || bench_now() - start < budget); r++) {
        double t0 = bench_now();
        fn(arg);
        double t = bench_now() - t0;
        best = t < best ? t : best;
    }
    return best;
}
