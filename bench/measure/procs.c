#define _GNU_SOURCE
#include "procs.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "output.h"
#include "signals.h"

extern char **environ;

/* ---- the wire: one binary stream per worker, read by the same binary --------------------- */

/* Records: 'A' and an int (the layer set up or sampled next, -1 the model rows), then
 * one 'R' with the whole result. Strings that point into a process's memory (part
 * names) travel as text and are interned on the way in. */
enum { REC_AT = 'A', REC_RESULT = 'R' };

typedef struct wire {
    int fd;
    bool ok;
} wire;

static void put(wire *w, const void *p, size_t n)
{
    const char *c = p;
    while (w->ok && n) {
        ssize_t k = write(w->fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            w->ok = false;
            return;
        }
        c += k, n -= (size_t)k;
    }
}

static void put_str(wire *w, const char *s)
{
    int n = s ? (int)strlen(s) : -1;
    put(w, &n, sizeof n);
    if (n > 0)
        put(w, s, (size_t)n);
}

static void put_row(wire *w, const layer_result *r)
{
    put(w, r, sizeof *r); /* the pointers in it are fixed on the way in */
    put(w, r->kept, (size_t)r->n_kept * sizeof *r->kept);
}

/* A buffer read whole from the worker, and a cursor into it. */
typedef struct reader {
    const char *p, *end;
    bool ok;
} reader;

static void get(reader *r, void *dst, size_t n)
{
    if (!r->ok || (size_t)(r->end - r->p) < n) {
        r->ok = false;
        memset(dst, 0, n);
        return;
    }
    memcpy(dst, r->p, n);
    r->p += n;
}

/* Strings that rows point to for the life of the process (a handful: part names). */
static const char *intern(const char *s, size_t n)
{
    static char **names;
    static int count;
    for (int i = 0; i < count; i++)
        if (strlen(names[i]) == n && memcmp(names[i], s, n) == 0)
            return names[i];
    names = xrealloc(names, (size_t)(count + 1) * sizeof *names);
    names[count] = xmalloc(n + 1);
    memcpy(names[count], s, n);
    names[count][n] = 0;
    return names[count++];
}

static const char *get_str(reader *r)
{
    int n;
    get(r, &n, sizeof n);
    if (!r->ok || n < 0)
        return NULL;
    if (n > 4096 || (size_t)(r->end - r->p) < (size_t)n) {
        r->ok = false;
        return NULL;
    }
    const char *s = intern(r->p, (size_t)n);
    r->p += n;
    return s;
}

static void get_row(reader *r, layer_result *row)
{
    get(r, row, sizeof *row);
    row->mode = row->mode >= MODE_NONE && row->mode < MODE_COUNT ? row->mode : MODE_NONE;
    row->kept = NULL;
    if (!r->ok || row->n_kept < 0 || row->n_kept > (int64_t)((size_t)(r->end - r->p) / sizeof(double))) {
        r->ok = false;
        row->n_kept = 0;
        return;
    }
    row->kept = xmalloc((size_t)(row->n_kept ? row->n_kept : 1) * sizeof *row->kept);
    get(r, row->kept, (size_t)row->n_kept * sizeof *row->kept);
}

/* ---- the set: what a worker measures ------------------------------------------------------ */

void procs_set_encode(const measure_set *s, strbuf *buf)
{
    strbuf_append(buf, (const char *)s, sizeof *s); /* its pointers mean nothing on arrival */
    for (int i = 0; i < SET_STRINGS; i++) {
        int n = s->str[i] ? (int)strlen(s->str[i]) : -1;
        strbuf_append(buf, (const char *)&n, sizeof n);
        if (n > 0)
            strbuf_append(buf, s->str[i], (size_t)n);
    }
    strbuf_append(buf, (const char *)s->skip, (size_t)s->n_skip * sizeof *s->skip);
}

bool procs_set_decode(const char *p, size_t n, measure_set *s)
{
    reader r = {p, p + n, true};
    get(&r, s, sizeof *s);
    measure_options *o = &s->mo; /* every pointer of the options: this process sets its own */
    o->stop = NULL, o->waited = NULL, o->waited_user = NULL, o->waited_reset = NULL, o->label = NULL;
    o->at = NULL, o->at_user = NULL, o->skip = NULL;
    for (int i = 0; i < SET_STRINGS; i++)
        s->str[i] = get_str(&r);
    int64_t left = r.ok ? (int64_t)(r.end - r.p) : -1;
    if (s->n_skip < 0 || (int64_t)s->n_skip * (int64_t)sizeof(int) != left) {
        s->skip = NULL, s->n_skip = 0;
        return false;
    }
    s->skip = xmalloc((size_t)(s->n_skip ? s->n_skip : 1) * sizeof *s->skip);
    get(&r, s->skip, (size_t)s->n_skip * sizeof *s->skip);
    return r.ok && s->str[SET_CONFIG] && s->count >= 1 && s->index >= 1 && s->index <= 2 * s->count &&
           s->batch >= 1 && (unsigned)s->dtype < DTYPE_COUNT && (unsigned)s->pass < PASS_COUNT &&
           (unsigned)s->optimizer < OPTIMIZER_COUNT && s->mode > MODE_NONE && s->mode <= MODE_BATCH &&
           memchr(s->backend, 0, sizeof s->backend);
}

static void put_result(wire *w, const run_result *res)
{
    int n = res->m->n_layers, flags = (res->has_model ? 1 : 0) | (res->inmodel ? 2 : 0) | (res->forward_sample ? 4 : 0);
    char type = REC_RESULT;
    put(w, &type, 1);
    put(w, &flags, sizeof flags);
    put(w, &res->n_parts, sizeof res->n_parts);
    put(w, &res->forward_device_bytes, sizeof res->forward_device_bytes);
    put(w, &res->n_canary, sizeof res->n_canary);
    put(w, res->canary, (size_t)res->n_canary * sizeof *res->canary);
    put(w, &res->n_stream, sizeof res->n_stream);
    put(w, res->stream, (size_t)res->n_stream * sizeof *res->stream);
    put(w, res->contention, sizeof res->contention);
    for (int i = 0; i < n; i++)
        put_row(w, &res->layers[i]);
    if (res->has_model) {
        put_row(w, &res->chained), put_row(w, &res->graph);
        put_row(w, &res->upload), put_row(w, &res->download);
    }
    for (int i = 0; res->inmodel && i < n; i++)
        put_row(w, &res->inmodel[i]);
    if (res->forward_sample)
        put(w, res->forward_sample, (size_t)n * sizeof *res->forward_sample);
    for (int j = 0; j < res->n_parts; j++) {
        const part_result *p = &res->parts[j];
        put(w, &p->layer, sizeof p->layer), put(w, &p->index, sizeof p->index);
        put_str(w, p->info.name);
        put(w, &p->info.flops, sizeof p->info.flops), put(w, &p->info.bytes, sizeof p->info.bytes);
        put(w, &p->sample, sizeof p->sample);
        put_row(w, &p->r);
    }
}

/* Reads a worker's result (after its 'R') into res, for model m. */
static bool get_result(reader *r, const model *m, run_result *res)
{
    int n = m->n_layers, flags = 0;
    get(r, &flags, sizeof flags);
    get(r, &res->n_parts, sizeof res->n_parts);
    get(r, &res->forward_device_bytes, sizeof res->forward_device_bytes);
    get(r, &res->n_canary, sizeof res->n_canary);
    if (!r->ok || res->n_canary < 0 || res->n_canary > 1000000 || res->n_parts < 0 || res->n_parts > 64 * n)
        return false;
    res->canary = xmalloc((size_t)(res->n_canary ? res->n_canary : 1) * sizeof *res->canary);
    get(r, res->canary, (size_t)res->n_canary * sizeof *res->canary);
    get(r, &res->n_stream, sizeof res->n_stream);
    if (!r->ok || res->n_stream < 0 || res->n_stream > 1000000)
        return false;
    res->stream = xmalloc((size_t)(res->n_stream ? res->n_stream : 1) * sizeof *res->stream);
    get(r, res->stream, (size_t)res->n_stream * sizeof *res->stream);
    get(r, res->contention, sizeof res->contention);
    res->contention[sizeof res->contention - 1] = 0;
    res->has_model = flags & 1;
    for (int i = 0; i < n; i++)
        get_row(r, &res->layers[i]);
    if (res->has_model) {
        get_row(r, &res->chained), get_row(r, &res->graph);
        get_row(r, &res->upload), get_row(r, &res->download);
    }
    if (flags & 2) {
        res->inmodel = xcalloc((size_t)n, sizeof *res->inmodel);
        for (int i = 0; i < n; i++)
            get_row(r, &res->inmodel[i]);
    }
    if (flags & 4) {
        res->forward_sample = xmalloc((size_t)n * sizeof *res->forward_sample);
        get(r, res->forward_sample, (size_t)n * sizeof *res->forward_sample);
    }
    res->parts = res->n_parts ? xcalloc((size_t)res->n_parts, sizeof *res->parts) : NULL;
    for (int j = 0; j < res->n_parts; j++) {
        part_result *p = &res->parts[j];
        get(r, &p->layer, sizeof p->layer), get(r, &p->index, sizeof p->index);
        p->info.name = get_str(r);
        get(r, &p->info.flops, sizeof p->info.flops), get(r, &p->info.bytes, sizeof p->info.bytes);
        get(r, &p->sample, sizeof p->sample);
        get_row(r, &p->r);
        if (p->layer < 0 || p->layer >= n || !p->info.name)
            r->ok = false;
    }
    return r->ok;
}

/* ---- the worker ---------------------------------------------------------------------------- */

static void worker_at(void *user, int layer)
{
    wire *w = user;
    char type = REC_AT;
    put(w, &type, 1);
    put(w, &layer, sizeof layer);
}

/* The set's pipe, and the results' (the worker's command line says 3 and 4 are theirs). */
#define SET_FD 4
#define RESULT_FD 3
/* A set is a few kilobytes: its config path, its choices file and the layers to skip. */
#define SET_MAX_BYTES (16u << 20)

/* A descriptor that is a pipe: anything else means the command line was not a parent's. */
static bool is_pipe(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}

bool procs_worker_set(measure_set *s, char *err, size_t errlen)
{
    if (!is_pipe(SET_FD) || !is_pipe(RESULT_FD)) {
        snprintf(err, errlen, "--worker: descriptors %d and %d are not pipes from a bench process (this option is for "
                 "bench itself)", RESULT_FD, SET_FD);
        return false;
    }
    strbuf data = {0};
    char buf[4096]; /* small: a worker under ulimit -s 64 must not crash here */
    for (;;) {
        ssize_t k = read(SET_FD, buf, sizeof buf);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0 || data.len + (size_t)k > SET_MAX_BYTES)
            break;
        strbuf_append(&data, buf, (size_t)k);
    }
    bool ok = data.len && procs_set_decode(data.data, data.len, s);
    if (!ok)
        snprintf(err, errlen, "--worker: what descriptor %d held is not a set from a bench process (this option is "
                 "for bench itself)", SET_FD);
    strbuf_free(&data);
    close(SET_FD);
    return ok;
}

int procs_worker(const measure_set *s, const model *m, const backend *b, const measure_options *o)
{
    int n = m->n_layers;
    bool *skip = xcalloc((size_t)n, sizeof *skip), skip_model = false;
    for (int i = 0; i < s->n_skip; i++)
        if (s->skip[i] == -1)
            skip_model = true;
        else if (s->skip[i] >= 0 && s->skip[i] < n)
            skip[s->skip[i]] = true;
    wire w = {RESULT_FD, true};
    measure_options wo = *o;
    /* this worker's share: the pooled row gets --min-samples and --timeout in all */
    wo.min_samples = (o->min_samples + s->count - 1) / s->count;
    wo.timeout = o->timeout / s->count;
    wo.at = worker_at, wo.at_user = &w;
    wo.skip = skip, wo.skip_model = skip_model;
    run_result res;
    char err[1024];
    bench_status st = measure_model(m, b, &wo, s->mode, &s->floor, s->with_model, &res, err, sizeof err);
    if (st != BENCH_ERR_INTERRUPTED)
        put_result(&w, &res);
    run_result_free(&res);
    free(skip);
    if (st == BENCH_ERR_INTERRUPTED)
        return 128 + (signals_interrupted ? signals_interrupted : SIGINT);
    return w.ok ? 0 : 1;
}

/* ---- the parent ---------------------------------------------------------------------------- */

/* Starts worker index of count, its results' pipe (write end) as descriptor 3 and its
 * set's (read end, the set already in it) as 4; its pid, or -1. */
static pid_t spawn_worker(int index, int count, int result_fd, int set_fd)
{
    char spec[48];
    snprintf(spec, sizeof spec, "%d,%d,%d", RESULT_FD, index, count); /* for ps and pgrep: which worker */
    char *argv[] = {"bench", "--worker", spec, NULL};
    /* both above 4 first: a dup2 onto 3 must not close the other before it is moved */
    int r = fcntl(result_fd, F_DUPFD_CLOEXEC, 10), w = fcntl(set_fd, F_DUPFD_CLOEXEC, 10), rc = -1;
    pid_t pid = -1;
    if (r >= 0 && w >= 0) {
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, r, RESULT_FD);
        posix_spawn_file_actions_adddup2(&fa, w, SET_FD);
        rc = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
    }
    if (r >= 0)
        close(r);
    if (w >= 0)
        close(w);
    return rc == 0 ? pid : -1;
}

/* A pipe holding the whole set, its write end closed: the worker reads to its end. */
static int set_pipe(const measure_set *s, char *err, size_t errlen)
{
    strbuf buf = {0};
    procs_set_encode(s, &buf);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "cannot start a worker process: pipe: %s", strerror(errno));
        strbuf_free(&buf);
        return -1;
    }
    /* room for the whole set, written before the worker starts: never waited on */
    if (buf.len > 65536)
        fcntl(fds[1], F_SETPIPE_SZ, (int)buf.len);
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
    size_t off = 0, len = buf.len;
    while (off < len) {
        ssize_t k = write(fds[1], buf.data + off, len - off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        off += (size_t)k;
    }
    close(fds[1]);
    strbuf_free(&buf);
    if (off < len) {
        snprintf(err, errlen, "cannot start a worker process: its set (%zu bytes) does not fit a pipe", len);
        close(fds[0]);
        return -1;
    }
    return fds[0];
}

/* The worker's CPU time so far (user + system, in clock ticks), or -1. */
static long long cpu_ticks(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* past the command name, which may hold spaces */
    unsigned long long ut, st;
    if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (long long)(ut + st);
}

/* Whether the worker is stopped (SIGSTOP, SIGTSTP, a debugger), without reaping it. */
static bool is_stopped(pid_t pid)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    return waitid(P_PID, (id_t)pid, &si, WSTOPPED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid &&
           (si.si_code == CLD_STOPPED || si.si_code == CLD_TRAPPED);
}

/* Reads everything the worker writes until it closes the pipe, tracking the last
 * layer it announced; on a stop request, asks it to stop (SIGTERM), and kills it if it
 * has not ended 5 s later. A worker that stays stopped PROCS_STOPPED_S seconds, or says
 * nothing and uses no CPU for PROCS_SILENT_S seconds (it waits on something that will not
 * come), is killed, and why goes into killed (empty otherwise): the parent never waits
 * forever. */
static void drain(int fd, pid_t pid, const volatile int *stop, strbuf *data, int *at, char *killed, size_t klen)
{
    bool asked = false;
    double deadline = 0, stopped_since = -1, heard = bench_now();
    long long ticks = cpu_ticks(pid);
    size_t parsed = 0;
    killed[0] = 0;
    for (;;) {
        if (stop && *stop && !asked) {
            kill(pid, SIGTERM);
            asked = true, deadline = bench_now() + 5.0;
        }
        if (asked && bench_now() > deadline) {
            kill(pid, SIGKILL);
            asked = false, deadline = 1e300;
        }
        double now = bench_now();
        if (!*killed && is_stopped(pid)) {
            stopped_since = stopped_since < 0 ? now : stopped_since;
            if (now - stopped_since > PROCS_STOPPED_S) {
                snprintf(killed, klen, "pid %d was stopped for %.0f s (SIGSTOP, or a debugger): killed", (int)pid,
                         PROCS_STOPPED_S);
                kill(pid, SIGKILL);
            }
        } else {
            stopped_since = -1;
        }
        if (!*killed && now - heard > PROCS_SILENT_S) {
            long long t = cpu_ticks(pid);
            if (t >= 0 && t == ticks) {
                snprintf(killed, klen, "pid %d said nothing and used no CPU for %.0f s (hung): killed", (int)pid,
                         PROCS_SILENT_S);
                kill(pid, SIGKILL);
            }
            ticks = t, heard = now; /* busy: it is working, look again later */
        }
        struct pollfd p = {fd, POLLIN, 0};
        int r = poll(&p, 1, 200);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            continue;
        char buf[8192];
        ssize_t k = read(fd, buf, sizeof buf);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return;
        heard = bench_now(), ticks = cpu_ticks(pid);
        strbuf_append(data, buf, (size_t)k);
        /* the 'A' records before the result: where the worker is */
        while (parsed < data->len && data->data[parsed] == REC_AT && data->len - parsed >= 1 + sizeof(int)) {
            memcpy(at, data->data + parsed + 1, sizeof *at);
            parsed += 1 + sizeof(int);
        }
    }
}

/* "signal 11 (Segmentation fault)" or "exit status 3" into buf. */
static void describe_exit(int status, char *buf, size_t len)
{
    if (WIFSIGNALED(status))
        snprintf(buf, len, "signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, len, "exit status %d", WEXITSTATUS(status));
}

/* 97.5% quantile of Student's t with df degrees of freedom. */
static double t975(int df)
{
    static const double t[] = {0, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                               2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086};
    return df < 1 ? 0 : df <= 20 ? t[df] : 1.96 + 2.4 / df;
}

void procs_pool_interval(double median, const double *med, int k, double *lo, double *hi)
{
    if (k < 2)
        return;
    double mean = 0, ss = 0;
    for (int i = 0; i < k; i++)
        mean += med[i] / k;
    for (int i = 0; i < k; i++)
        ss += (med[i] - mean) * (med[i] - mean);
    /* two processes: t with one degree of freedom (12.7) made the interval 9 times their
     * distance (ResNet-18's conv1 at 2093 us read 196..3990 from medians 14% apart), so
     * wide that bench compare called a 61% slowdown SAME; the interval holds both medians,
     * with as much again to spare, instead */
    double h = k == 2 ? fabs(med[0] - med[1]) : t975(k - 1) * sqrt(ss / (k - 1)) / sqrt((double)k);
    if (median - h < *lo)
        *lo = median - h > 0 ? median - h : 0;
    if (median + h > *hi)
        *hi = median + h;
}

static bool stop_worse(stop_reason a, stop_reason b) { return a == STOP_TIMEOUT || (a == STOP_SAMPLES && b == STOP_NOISE); }

/* Pools row i of every worker result (rows[w]) into *dst: the samples of the workers
 * that timed it in the first one's mode, and of those not contended if any was not
 * (the row is contended only when every one was). */
static void pool_row(layer_result *const *rows, int k, layer_result *dst)
{
    const layer_result *first = NULL;
    bool any_clean = false;
    for (int w = 0; w < k; w++)
        any_clean |= rows[w]->status == ROW_OK && rows[w]->n_kept > 0 && !rows[w]->contended;
    for (int w = 0; w < k && !first; w++) /* its mode, impl and note stand for the row */
        if (rows[w]->status == ROW_OK && !(any_clean && rows[w]->contended))
            first = rows[w];
    if (!first) { /* not timed anywhere: the first worker's row says why */
        *dst = *rows[0];
        dst->kept = NULL, dst->n_kept = 0;
        return;
    }
    *dst = *first;
    dst->kept = NULL, dst->n_kept = 0;
    dst->disturbed = dst->discarded = 0;
    dst->contended = false;
    int64_t total = 0;
    for (int w = 0; w < k; w++)
        total += rows[w]->n_kept;
    double *all = xmalloc((size_t)(total ? total : 1) * sizeof *all), med[64];
    int64_t at = 0;
    int used = 0, other_mode = 0, left_contended = 0;
    for (int w = 0; w < k; w++) {
        const layer_result *r = rows[w];
        if (r->status != ROW_OK || r->n_kept == 0)
            continue;
        if (r->mode != first->mode) {
            other_mode++; /* auto mode chose otherwise in that process: not the same figure */
            continue;
        }
        if (r->contended && any_clean) {
            left_contended++, dst->disturbed += r->disturbed;
            continue;
        }
        memcpy(all + at, r->kept, (size_t)r->n_kept * sizeof *all);
        at += r->n_kept;
        if (used < 64)
            med[used] = r->st.median;
        used++;
        dst->disturbed += r->disturbed, dst->discarded += r->discarded;
        dst->contended |= r->contended;
        if (stop_worse(r->stop, dst->stop))
            dst->stop = r->stop;
    }
    measure_row_stats(dst, all, at);
    free(all);
    dst->processes = used;
    int nm = used < 64 ? used : 64;
    if (nm >= 2) {
        double lo = med[0], hi = med[0];
        for (int i = 1; i < nm; i++)
            lo = med[i] < lo ? med[i] : lo, hi = med[i] > hi ? med[i] : hi;
        dst->process_spread = dst->st.median > 0 ? (hi - lo) / dst->st.median : 0;
        procs_pool_interval(dst->st.median, med, nm, &dst->st.ci_low, &dst->st.ci_high);
    }
    if (other_mode)
        snprintf(dst->note + strlen(dst->note), sizeof dst->note - strlen(dst->note),
                 "%s%d process%s timed it in another mode (auto): left out", *dst->note ? "; " : "", other_mode,
                 other_mode == 1 ? "" : "es");
    if (left_contended)
        snprintf(dst->note + strlen(dst->note), sizeof dst->note - strlen(dst->note),
                 "%s%d process%s contended: left out", *dst->note ? "; " : "", left_contended,
                 left_contended == 1 ? " was" : "es were");
}

/* The pooled set from the k worker results. */
static void pool(const model *m, run_result *const *rs, int k, run_result *out)
{
    int n = m->n_layers;
    layer_result **rows = xmalloc((size_t)k * sizeof *rows);
#define POOL(expr_dst, expr_src)                                                                                  \
    do {                                                                                                         \
        for (int w = 0; w < k; w++)                                                                              \
            rows[w] = &rs[w]->expr_src;                                                                          \
        pool_row(rows, k, &out->expr_dst);                                                                       \
    } while (0)
    for (int i = 0; i < n; i++)
        POOL(layers[i], layers[i]);
    /* --dedupe's copies take their twin's pooled figures, as in one process */
    for (int i = 0; i < n; i++)
        if (out->layers[i].status == ROW_DEDUPE && out->layers[i].dedupe_of >= 0) {
            layer_result *r = &out->layers[i], *twin = &out->layers[r->dedupe_of];
            char note[sizeof r->note];
            snprintf(note, sizeof note, "%s", r->note);
            free(r->kept);
            *r = *twin;
            r->kept = NULL, r->n_kept = 0;
            r->dedupe_of = (int)(twin - out->layers);
            r->status = twin->status == ROW_OK ? ROW_DEDUPE : twin->status;
            snprintf(r->note, sizeof r->note, "%s", note);
        }
    const run_result *ref = rs[0];
    if (out->has_model) {
        POOL(chained, chained);
        POOL(graph, graph);
        POOL(upload, upload);
        POOL(download, download);
        out->forward_device_bytes = ref->forward_device_bytes;
    }
    bool inmodel = true;
    for (int w = 0; w < k; w++)
        inmodel &= rs[w]->inmodel != NULL;
    if (inmodel) {
        out->inmodel = xcalloc((size_t)n, sizeof *out->inmodel);
        for (int i = 0; i < n; i++)
            POOL(inmodel[i], inmodel[i]);
    }
    /* the parts, where every process split the same layers the same way */
    bool parts = ref->n_parts > 0;
    for (int w = 1; w < k; w++)
        parts &= rs[w]->n_parts == ref->n_parts;
    if (parts) {
        out->n_parts = ref->n_parts;
        out->parts = xcalloc((size_t)out->n_parts, sizeof *out->parts);
        for (int j = 0; j < out->n_parts; j++) {
            out->parts[j] = ref->parts[j];
            POOL(parts[j].r, parts[j].r);
        }
    }
    /* the trace's forward: the process whose chained median is the middle one */
    int mid = 0;
    if (out->has_model && k > 1) {
        double best = 1e300;
        for (int w = 0; w < k; w++)
            if (rs[w]->forward_sample && fabs(rs[w]->chained.st.median - out->chained.st.median) < best)
                best = fabs(rs[w]->chained.st.median - out->chained.st.median), mid = w;
    }
    if (rs[mid]->forward_sample) {
        out->forward_sample = xmalloc((size_t)n * sizeof *out->forward_sample);
        memcpy(out->forward_sample, rs[mid]->forward_sample, (size_t)n * sizeof *out->forward_sample);
        for (int j = 0; parts && j < out->n_parts; j++)
            out->parts[j].sample = rs[mid]->parts[j].sample;
    }
    for (int w = 0; w < k; w++) {
        out->canary = xrealloc(out->canary, (size_t)(out->n_canary + rs[w]->n_canary + 1) * sizeof *out->canary);
        memcpy(out->canary + out->n_canary, rs[w]->canary, (size_t)rs[w]->n_canary * sizeof *out->canary);
        out->n_canary += rs[w]->n_canary;
        out->stream = xrealloc(out->stream, (size_t)(out->n_stream + rs[w]->n_stream + 1) * sizeof *out->stream);
        memcpy(out->stream + out->n_stream, rs[w]->stream, (size_t)rs[w]->n_stream * sizeof *out->stream);
        out->n_stream += rs[w]->n_stream;
        if (!*out->contention && *rs[w]->contention)
            snprintf(out->contention, sizeof out->contention, "%s", rs[w]->contention);
    }
#undef POOL
    free(rows);
}

/* Marks row i (or the model rows, i = -1) of out as failed with note. */
static void fail_row(run_result *out, int i, const char *note)
{
    layer_result *rows[4] = {&out->chained, &out->graph, &out->upload, &out->download};
    int n = i >= 0 ? 1 : 4;
    for (int k = 0; k < n; k++) {
        layer_result *r = i >= 0 ? &out->layers[i] : rows[k];
        if (i < 0 && r->status == ROW_NONE)
            continue;
        free(r->kept);
        memset(&r->st, 0, sizeof r->st);
        r->kept = NULL, r->n_kept = 0;
        r->status = ROW_FAILED;
        snprintf(r->note, sizeof r->note, "%s", note);
    }
}

/* How many workers may die before the set gives up on starting more. */
#define PROCS_MAX_DEATHS 3


/* Each result's sum of the medians of the layers every result timed uncontended (other
 * processes' load is not the machine's phase), into sum[], and
 * the sum of their intervals' half-widths relative to it, into unc[]. */
static void layer_sums(run_result *const *rs, int k, double *sum, double *unc)
{
    int n = k ? rs[0]->m->n_layers : 0;
    for (int w = 0; w < k; w++)
        sum[w] = unc[w] = 0;
    for (int i = 0; i < n; i++) {
        bool all = true;
        for (int w = 0; w < k && all; w++)
            all = rs[w]->layers[i].status == ROW_OK && rs[w]->layers[i].st.median > 0 && !rs[w]->layers[i].contended;
        for (int w = 0; all && w < k; w++) {
            const stats *st = &rs[w]->layers[i].st;
            sum[w] += st->median;
            unc[w] += (st->ci_high - st->ci_low) / 2;
        }
    }
    for (int w = 0; w < k; w++)
        unc[w] = sum[w] > 0 ? unc[w] / sum[w] : 0;
}

int procs_fast_phase(const double *sum, const double *unc, int k, double band, bool *fast)
{
    int b = -1;
    for (int w = 0; w < k; w++)
        if (sum[w] > 0 && (b < 0 || sum[w] < sum[b]))
            b = w;
    int n = 0;
    for (int w = 0; w < k; w++)
        n += fast[w] = b < 0 || band < 0 || sum[w] <= sum[b] * (1 + band + unc[w] + unc[b]);
    return n;
}

/* procs_fast_phase of the k results. */
static int fast_phase(run_result *const *rs, int k, double band, bool *fast)
{
    double *sum = xcalloc((size_t)(k ? k : 1), sizeof *sum), *unc = xcalloc((size_t)(k ? k : 1), sizeof *unc);
    layer_sums(rs, k, sum, unc);
    int n = procs_fast_phase(sum, unc, k, band, fast);
    free(sum), free(unc);
    return n;
}

/* The workers of one set, as they come and go: the results of those that finished, and
 * per layer (n: the model rows) why a worker died on it. */
typedef struct workers {
    const procs_plan *pp;
    const model *m;
    const backend *b;
    const measure_options *o;
    run_result **rs;
    int k, most, deaths;
    bool *fast;
    char **death;
    char batch[32];
} workers;

/* One worker started with the set, drained and waited for: its result kept in w->rs, or
 * its death noted against the layer it was on. BENCH_OK either way; an error when no
 * worker could be started or the run was stopped. */
static bench_status run_worker(workers *w, measure_set *set, char *err, size_t errlen)
{
    int n = w->m->n_layers;
    set->n_skip = 0; /* what killed the earlier workers */
    for (int i = 0; i <= n; i++)
        if (w->death[i])
            set->skip[set->n_skip++] = i < n ? i : -1;
    set->index = w->k + 1, set->count = w->pp->count;
    int set_fd = set_pipe(set, err, errlen), fds[2];
    if (set_fd < 0)
        return BENCH_ERR_BACKEND;
    if (pipe2(fds, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "cannot start a worker process: pipe: %s", strerror(errno));
        close(set_fd);
        return BENCH_ERR_BACKEND;
    }
    pid_t pid = spawn_worker(w->k + 1, w->pp->count, fds[1], set_fd);
    close(fds[1]), close(set_fd);
    if (pid < 0) {
        close(fds[0]);
        snprintf(err, errlen, "cannot start a worker process: %s", strerror(errno));
        return BENCH_ERR_BACKEND;
    }
    strbuf data = {0};
    int at = -2; /* not yet anywhere */
    char killed[160];
    drain(fds[0], pid, w->o->stop, &data, &at, killed, sizeof killed);
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    size_t head = 0;
    while (head < data.len && data.data[head] == REC_AT)
        head += 1 + sizeof(int);
    bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    bool got = !*killed && head < data.len && data.data[head] == REC_RESULT;
    if (got) {
        run_result *r = xcalloc(1, sizeof *r);
        r->m = w->m;
        r->layers = xcalloc((size_t)n, sizeof *r->layers);
        reader rd = {data.data + head + 1, data.data + data.len, true};
        if ((got = get_result(&rd, w->m, r))) {
            w->rs[w->k++] = r;
            if (!clean) { /* its whole result came before it died (a cache write, its teardown) */
                char how[96];
                describe_exit(status, how, sizeof how);
                log_msg("worker process %d of %d on %s batch %s ended (%s) after it had sent its results: they "
                        "are kept", w->k, w->pp->count, w->b->ops->name, w->batch, how);
            }
        } else {
            run_result_free(r);
            free(r);
        }
    }
    strbuf_free(&data);
    if (got)
        return BENCH_OK;
    if (w->o->stop && *w->o->stop)
        return BENCH_ERR_INTERRUPTED;
    /* it died: the layer it was on fails, the next worker leaves it out */
    char how[200], note[300];
    describe_exit(status, how, sizeof how);
    if (*killed)
        snprintf(how, sizeof how, "%s", killed);
    w->deaths++;
    int where = at == -1 ? n : at;
    if (at >= -1 && !w->death[where]) {
        snprintf(note, sizeof note, "the worker process %d of %d ended (%s) while measuring it; the others went on",
                 w->k + 1, w->pp->count, how);
        w->death[where] = xstrdup(note);
    }
    log_raw("\nbench: worker process %d of %d on %s batch %s ended (%s)%s%s\n", w->k + 1, w->pp->count,
            w->b->ops->name, w->batch, how, at >= 0 ? " at layer " : at == -1 ? " in the chained forward" : "",
            at >= 0 ? w->m->layers[at].name : "");
    return BENCH_OK;
}

/* The workers that ran in the fast phase pooled into out; the others set aside, and
 * said; the rows the dead workers were on failed. */
static void pool_workers(workers *w, bool with_model, bench_status st, run_result *out)
{
    int n = w->m->n_layers, kept = 0, aside = 0;
    double slow = 0, best = 0, *sum = xcalloc((size_t)w->most, sizeof *sum), *unc = xcalloc((size_t)w->most, sizeof *unc);
    run_result **pooled = xcalloc((size_t)w->most, sizeof *pooled);
    layer_sums(w->rs, w->k, sum, unc);
    procs_fast_phase(sum, unc, w->k, w->pp->phase_band, w->fast);
    for (int i = 0; i < w->k; i++) {
        if (w->fast[i]) {
            best = best == 0 || (sum[i] > 0 && sum[i] < best) ? sum[i] : best;
            pooled[kept++] = w->rs[i];
        } else {
            slow = sum[i] > slow ? sum[i] : slow;
            aside++;
        }
    }
    free(sum), free(unc);
    out->processes = kept;
    out->processes_aside = aside;
    out->phase_slowdown = aside && best > 0 ? slow / best - 1 : 0;
    if (kept > 0)
        pool(w->m, pooled, kept, out);
    free(pooled);
    for (int i = 0; i <= n; i++)
        if (w->death[i])
            fail_row(out, i == n ? -1 : i, w->death[i]);
    if (w->k == 0 && st == BENCH_OK) { /* every worker died before it said anything */
        for (int i = 0; i < n; i++)
            if (!w->death[i])
                fail_row(out, i, "no worker process finished (see the messages above)");
        if (with_model)
            fail_row(out, -1, "no worker process finished (see the messages above)");
    }
}

/* out's sum of medians and count of failed rows; the first failure's note in first. */
static void count_rows(const model *m, bool with_model, run_result *out, char *first, size_t len)
{
    for (int i = 0; i < m->n_layers; i++) {
        layer_result *r = &out->layers[i];
        if (row_timed(r))
            out->sum_medians += r->st.median;
        else if (r->status == ROW_FAILED && out->failed++ == 0)
            snprintf(first, len, "%s on %s: %s", m->layers[i].name, out->backend, r->note);
    }
    layer_result *whole[4] = {&out->chained, &out->graph, &out->upload, &out->download};
    for (int i = 0; with_model && i < 4; i++)
        if (whole[i]->status == ROW_FAILED && out->failed++ == 0)
            snprintf(first, len, "the whole-model rows on %s: %s", out->backend, whole[i]->note);
}

bench_status procs_measure(const procs_plan *pp, const model *m, const backend *b, const measure_options *o,
                           timing_mode mode, const timer_floor *floor, bool with_model, run_result *out, char *err,
                           size_t errlen)
{
    double t0 = bench_now();
    int n = m->n_layers;
    /* up to twice the workers asked for, to find enough that ran in the fast phase */
    workers w = {.pp = pp, .m = m, .b = b, .o = o, .most = 2 * pp->count};
    w.rs = xcalloc((size_t)w.most, sizeof *w.rs);
    w.fast = xcalloc((size_t)w.most, sizeof *w.fast);
    w.death = xcalloc((size_t)n + 1, sizeof *w.death);
    snprintf(w.batch, sizeof w.batch, "%lld", (long long)m->batch);
    bench_status st = BENCH_OK;
    /* the set every worker of it is given: the run's, with this set's model and mode */
    measure_set set = *pp->base;
    set.batch = m->batch, set.dtype = m->dtype, set.pass = m->pass, set.mode = mode, set.with_model = with_model, set.floor = *floor;
    snprintf(set.backend, sizeof set.backend, "%s", b->ops->name);
    if (pp->shapes) /* a sweep over token shapes: this set's */
        set.shape = (cfg_shape){model_tokens(m) > 0 ? model_tokens(m) : 0, model_kv_len(m)};
    set.mo = *o;
    set.skip = xcalloc((size_t)n + 1, sizeof *set.skip);
    while (st == BENCH_OK && w.k < w.most && w.deaths < PROCS_MAX_DEATHS &&
           (w.k < pp->count || fast_phase(w.rs, w.k, pp->phase_band, w.fast) < pp->count))
        st = o->stop && *o->stop ? BENCH_ERR_INTERRUPTED : run_worker(&w, &set, err, errlen);
    memset(out, 0, sizeof *out);
    out->m = m, out->backend = b->ops->name, out->mode = mode, out->threads = backend_threads(b);
    out->floor = *floor, out->has_model = with_model, out->forward_device_bytes = -1;
    out->layers = xcalloc((size_t)n, sizeof *out->layers);
    out->chained.dedupe_of = out->graph.dedupe_of = out->upload.dedupe_of = out->download.dedupe_of = -1;
    pool_workers(&w, with_model, st, out);
    char first[512] = "";
    count_rows(m, with_model, out, first, sizeof first);
    for (int i = 0; i < w.k; i++) {
        run_result_free(w.rs[i]);
        free(w.rs[i]);
    }
    for (int i = 0; i <= n; i++)
        free(w.death[i]);
    free(w.fast), free(w.rs), free(w.death), free(set.skip);
    out->seconds = bench_now() - t0;
    if (st == BENCH_ERR_INTERRUPTED) {
        snprintf(err, errlen, "in worker process %d of %d", w.k + 1, pp->count);
        return st;
    }
    if (st != BENCH_OK)
        return st;
    if (out->failed)
        snprintf(err, errlen, "%s", first);
    return out->failed ? BENCH_ERR_BACKEND : BENCH_OK;
}
