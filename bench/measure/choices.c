#include "choices.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"
#include "sysinfo.h"
#include "version.h"

/* The largest choices file read (a few KB a machine and thread count). */
#define CHOICES_MAX_BYTES ((size_t)64 << 20)

#define CHOICES_HEADER "# layerbench algorithm choices (bench --algo-cache), format 1: context\tlayer\tchoice\n"

/* What a backend's choices depend on besides the layer; one line, no tabs. */
static char *context_of(const backend *b)
{
    char cpu[400], isa[256];
    sysinfo_cpu_identity(cpu, sizeof cpu);
    char *ctx = xasprintf("%s | %s | %s | float32 | layerbench %s | %s", b->ops->name, cpu, sysinfo_cpu_isa(isa, sizeof isa),
                          LAYERBENCH_VERSION, b->ops->device.describe ? b->ops->device.describe(b->ctx) : "");
    for (char *p = ctx; *p; p++)
        if (*p == '\t' || *p == '\n' || *p == '\r')
            *p = ' ';
    return ctx;
}

static bench_status read_all(const char *path, strbuf *text, char *err, size_t errlen)
{
    bench_status st = fileio_read(path, CHOICES_MAX_BYTES, FILEIO_TEXT | FILEIO_MISSING_OK, "--algo-cache", text, NULL,
                                  err, errlen);
    if (st == BENCH_OK && text->len && strncmp(text->data, CHOICES_HEADER, strlen(CHOICES_HEADER)) != 0) {
        snprintf(err, errlen, "--algo-cache: '%s' is not a layerbench choices file (its first line differs)", path);
        return BENCH_ERR_USAGE;
    }
    return st == BENCH_OK ? BENCH_OK : BENCH_ERR_USAGE;
}

/* An exclusive lock on "<path>.lock" (flock), so that runs saving into one cache at once
 * take turns: each reads what the last one wrote and merges its own into it. The lock
 * file's descriptor (close() releases it), or -1 where it cannot be made (then the save
 * goes on unlocked: a read-only folder fails at the write anyway). */
static int lock_cache(const char *path)
{
    char *lock = xasprintf("%s.lock", path);
    int fd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    free(lock);
    if (fd < 0)
        return -1;
    while (flock(fd, LOCK_EX) != 0)
        if (errno != EINTR) {
            close(fd);
            return -1;
        }
    return fd;
}

/* Splits the line at p (up to its newline) into three tab-separated fields, in place;
 * false when it has not exactly three non-empty ones. */
static bool split_line(char *p, char **f)
{
    char *end = p + strcspn(p, "\n");
    *end = 0;
    f[0] = p;
    for (int k = 1; k < 3; k++) {
        char *tab = strchr(f[k - 1], '\t');
        if (!tab)
            return false;
        *tab = 0;
        f[k] = tab + 1;
    }
    return *f[0] && *f[1] && *f[2] && !strchr(f[2], '\t');
}

bench_status choices_load(const char *path, const backend *bs, int nb, choices_report *rep, char *err, size_t errlen)
{
    memset(rep, 0, sizeof *rep);
    strbuf text = {0};
    bench_status st = read_all(path, &text, err, errlen);
    if (st != BENCH_OK || !text.len) {
        strbuf_free(&text);
        return st;
    }
    char **ctx = xcalloc((size_t)nb, sizeof *ctx);
    for (int k = 0; k < nb; k++)
        ctx[k] = bs[k].ops->layers.choices_put ? context_of(&bs[k]) : NULL;
    for (char *p = text.data + strlen(CHOICES_HEADER); *p;) {
        char *next = p + strcspn(p, "\n");
        next += *next == '\n';
        char *f[3];
        if (!split_line(p, f)) {
            rep->malformed++;
        } else {
            int k = 0;
            while (k < nb && !(ctx[k] && strcmp(ctx[k], f[0]) == 0))
                k++;
            if (k < nb) {
                bs[k].ops->layers.choices_put(bs[k].ctx, f[1], f[2]);
                rep->taken++;
            } else if (rep->foreign++ == 0) {
                snprintf(rep->other, sizeof rep->other, "%s", f[0]);
            }
        }
        p = next;
    }
    for (int k = 0; k < nb; k++)
        free(ctx[k]);
    free(ctx);
    strbuf_free(&text);
    return BENCH_OK;
}

typedef struct emit_state {
    strbuf *out;
    const char *ctx;
    char **keys;        /* the keys written for ctx */
    int n_keys;
} emit_state;

static void emit(void *user, const char *key, const char *value)
{
    emit_state *e = user;
    strbuf_printf(e->out, "%s\t%s\t%s\n", e->ctx, key, value);
    e->keys = xrealloc(e->keys, (size_t)(e->n_keys + 1) * sizeof *e->keys);
    e->keys[e->n_keys++] = xstrdup(key);
}

bench_status choices_save(const char *path, const backend *bs, int nb, int *stale, char *err, size_t errlen)
{
    strbuf old = {0}, out = {0};
    *stale = 0;
    /* the default's folders (~/.cache/layerbench) may not exist yet */
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *p = strchr(dir + 1, '/'); p; p = strchr(p + 1, '/')) {
        *p = 0;
        mkdir(dir, 0755);
        *p = '/';
    }
    /* under the lock: what other runs saved since this one loaded is read again here and
     * kept (concurrent runs lose nothing) */
    int lock = lock_cache(path);
    bench_status st = read_all(path, &old, err, errlen);
    if (st != BENCH_OK) {
        if (lock >= 0)
            close(lock);
        strbuf_free(&old);
        return st;
    }
    strbuf_append(&out, CHOICES_HEADER, strlen(CHOICES_HEADER));
    emit_state *es = xcalloc((size_t)nb, sizeof *es);
    for (int k = 0; k < nb; k++) {
        if (!bs[k].ops->layers.choices_get)
            continue;
        es[k] = (emit_state){&out, context_of(&bs[k]), NULL, 0};
        *stale += bs[k].ops->layers.choices_get(bs[k].ctx, emit, &es[k]);
    }
    /* the old lines that were not written again: other contexts, choices not remade */
    for (char *p = old.len ? old.data + strlen(CHOICES_HEADER) : NULL; p && *p;) {
        char *next = p + strcspn(p, "\n");
        next += *next == '\n';
        size_t len = (size_t)(next - p);
        char *copy = xmalloc(len + 1), *f[3];
        memcpy(copy, p, len);
        copy[len] = 0;
        bool keep = split_line(copy, f);
        for (int k = 0; keep && k < nb; k++)
            for (int i = 0; es[k].ctx && keep && i < es[k].n_keys; i++)
                keep = !(strcmp(es[k].ctx, f[0]) == 0 && strcmp(es[k].keys[i], f[1]) == 0);
        if (keep)
            strbuf_append(&out, p, len), (len && p[len - 1] != '\n' ? strbuf_append(&out, "\n", 1) : (void)0);
        free(copy);
        p = next;
    }
    for (int k = 0; k < nb; k++) {
        for (int i = 0; i < es[k].n_keys; i++)
            free(es[k].keys[i]);
        free(es[k].keys);
        free((char *)es[k].ctx);
    }
    free(es);
    bench_output o;
    st = bench_output_open(&o, path, NULL, err, errlen);
    if (st == BENCH_OK) {
        st = bench_output_write(&o, out.data, out.len, err, errlen);
        if (st == BENCH_OK)
            st = bench_output_commit(&o, err, errlen); /* a device named as the cache */
        bench_output_close(&o);
    }
    if (lock >= 0)
        close(lock);
    strbuf_free(&old), strbuf_free(&out);
    return st;
}

void choices_warning(const char *path, const choices_report *rep, char *buf, size_t len)
{
    buf[0] = 0;
    if (rep->malformed)
        snprintf(buf, len, "--algo-cache %s: %d line%s that %s no choice %s ignored", path, rep->malformed,
                 rep->malformed == 1 ? "" : "s", rep->malformed == 1 ? "is" : "are",
                 rep->malformed == 1 ? "was" : "were");
    else if (rep->foreign && !rep->taken)
        snprintf(buf, len, "--algo-cache %s: its %d choice%s were made under another context (%.100s...), not this "
                 "machine's and settings: not used, the algorithms are searched again", path, rep->foreign,
                 rep->foreign == 1 ? "" : "s", rep->other);
}
