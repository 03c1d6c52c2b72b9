#define _GNU_SOURCE
#include "util.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
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

int64_t bench_mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long long kb = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
            break;
    fclose(f);
    return kb < 0 ? -1 : (int64_t)kb * 1024;
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

/* Temporary files being written, removed if the run is interrupted so that an
 * interrupted run leaves neither a half-written result nor its temporary. */
#define MAX_PENDING 8
static char *volatile pending[MAX_PENDING];

static void on_signal(int sig)
{
    for (int i = 0; i < MAX_PENDING; i++)
        if (pending[i])
            unlink(pending[i]);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void track(char *tmp, bool add)
{
    static bool installed;
    if (!installed) {
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        signal(SIGHUP, on_signal);
        installed = true;
    }
    for (int i = 0; i < MAX_PENDING; i++)
        if (add ? pending[i] == NULL : pending[i] == tmp) {
            pending[i] = add ? tmp : NULL;
            return;
        }
}

bench_status bench_file_open(bench_file *bf, const char *path)
{
    memset(bf, 0, sizeof *bf);
    if (strcmp(path, "-") == 0) {
        bf->f = stdout;
        return BENCH_OK;
    }
    bf->path = xstrdup(path);
    bf->tmp = xasprintf("%s.tmp.%ld", path, (long)getpid());
    bf->f = fopen(bf->tmp, "w");
    if (!bf->f) {
        fprintf(stderr, "bench: cannot write '%s': %s\n", path, strerror(errno));
        free(bf->path), free(bf->tmp);
        bf->path = bf->tmp = NULL;
        return BENCH_ERR_IO;
    }
    track(bf->tmp, true);
    return BENCH_OK;
}

bench_status bench_file_commit(bench_file *bf)
{
    if (!bf->path) {
        fflush(stdout);
        return BENCH_OK;
    }
    bench_status st = BENCH_OK;
    track(bf->tmp, false);
    if (ferror(bf->f) | (fclose(bf->f) != 0)) {
        fprintf(stderr, "bench: writing '%s' failed: %s\n", bf->path, strerror(errno));
        remove(bf->tmp);
        st = BENCH_ERR_IO;
    } else if (rename(bf->tmp, bf->path) != 0) {
        fprintf(stderr, "bench: cannot rename '%s' to '%s': %s\n", bf->tmp, bf->path, strerror(errno));
        remove(bf->tmp);
        st = BENCH_ERR_IO;
    }
    free(bf->path), free(bf->tmp);
    memset(bf, 0, sizeof *bf);
    return st;
}

void bench_file_abort(bench_file *bf)
{
    if (bf->path) {
        track(bf->tmp, false);
        fclose(bf->f);
        remove(bf->tmp);
    }
    free(bf->path), free(bf->tmp);
    memset(bf, 0, sizeof *bf);
}
