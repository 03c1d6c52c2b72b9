/* A --slurm sweep's folder (slurm.h): its shard list and its tasks' status files, read
 * the same way by bench merge and by sweep --slurm --resume. */
#define _GNU_SOURCE
#include "slurm.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "strbuf.h"

static const char shards_header[] =
    "# layerbench sweep --slurm: one shard per line, each one array task (docs/slurm.md)\n";

void slurm_shell_quote(strbuf *b, const char *s)
{
    if (*s && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=./,:@%") == strlen(s)) {
        strbuf_append(b, s, strlen(s));
        return;
    }
    strbuf_append(b, "'", 1);
    for (; *s; s++)
        if (*s == '\'')
            strbuf_append(b, "'\\''", 4);
        else
            strbuf_append(b, s, 1);
    strbuf_append(b, "'", 1);
}

char *slurm_shards_text(const char *options, const slurm_shard *shards, int n)
{
    strbuf b = {0};
    strbuf_printf(&b, "%s# options: %s\nshard\tconfig\tbatch\tbackend\tdtype\ttokens\tkv_len\n", shards_header, options);
    for (int i = 0; i < n; i++) {
        const slurm_shard *s = &shards[i];
        strbuf_printf(&b, "%d\t%s\t%lld\t%s\t%s\t", i, s->config, (long long)s->batch, s->backend, s->dtype);
        if (s->tokens >= 0)
            strbuf_printf(&b, "%lld", (long long)s->tokens);
        strbuf_append(&b, "\t", 1);
        if (s->kv_len >= 0)
            strbuf_printf(&b, "%lld", (long long)s->kv_len);
        strbuf_append(&b, "\n", 1);
    }
    return b.data;
}

static char *read_text(const char *path, size_t limit)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    strbuf b = {0};
    char chunk[8192];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0 && b.len <= limit)
        strbuf_append(&b, chunk, got);
    fclose(f);
    if (!b.data)
        strbuf_append(&b, "", 0);
    return b.data;
}

bench_status slurm_shards_read(const char *dir, char **text, slurm_shard **shards, int *n, char *err, size_t errlen)
{
    char *path = xasprintf("%s/%s", dir, SLURM_SHARDS_FILE);
    char *t = read_text(path, (size_t)64 << 20);
    *text = NULL, *shards = NULL, *n = 0;
    if (!t) {
        snprintf(err, errlen, "'%s' is not the folder of a bench sweep --slurm: %s: %s", dir, path, strerror(errno));
        free(path);
        return BENCH_ERR_USAGE;
    }
    int cap = 16, line_no = 0;
    slurm_shard *s = xcalloc((size_t)cap, sizeof *s);
    bool ok = strncmp(t, shards_header, strlen(shards_header)) == 0;
    char *copy = xstrdup(t), *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); ok && line; line = strtok_r(NULL, "\n", &save)) {
        line_no++;
        if (line[0] == '#' || strncmp(line, "shard\t", 6) == 0)
            continue;
        char cfg[4096], backend[16], dtype[8];
        int index, used = 0;
        long long batch;
        ok = sscanf(line, "%d\t%4095[^\t]\t%lld\t%15[^\t]\t%7[^\t]\t%n", &index, cfg, &batch, backend, dtype, &used) == 5 &&
             used > 0 && index == *n;
        if (!ok)
            break;
        const char *rest = line + used;
        if (*n == cap)
            s = xrealloc(s, (size_t)(cap *= 2) * sizeof *s);
        slurm_shard *sh = &s[(*n)++];
        *sh = (slurm_shard){.config = xstrdup(cfg), .batch = batch, .tokens = -1, .kv_len = -1};
        snprintf(sh->backend, sizeof sh->backend, "%s", backend);
        snprintf(sh->dtype, sizeof sh->dtype, "%s", dtype);
        if (*rest && *rest != '\t')
            sh->tokens = atoll(rest);
        const char *kv = strchr(rest, '\t');
        if (kv && kv[1])
            sh->kv_len = atoll(kv + 1);
    }
    free(copy);
    if (!ok || *n == 0) {
        snprintf(err, errlen, "%s:%d: not a shard list of bench sweep --slurm (written by another version, or edited)",
                 path, line_no ? line_no : 1);
        slurm_shards_free(s, *n);
        free(t), free(path);
        *n = 0;
        return BENCH_ERR_USAGE;
    }
    free(path);
    *text = t, *shards = s;
    return BENCH_OK;
}

void slurm_shards_free(slurm_shard *shards, int n)
{
    for (int i = 0; shards && i < n; i++)
        free(shards[i].config);
    free(shards);
}

/* One part-A_T.status file ("key=value" lines); false when it is not one. */
static bool read_status(const char *dir, const char *name, slurm_attempt *a)
{
    char *path = xasprintf("%s/%s", dir, name);
    char *t = read_text(path, 65536);
    free(path);
    if (!t)
        return false;
    *a = (slurm_attempt){.shard = -1, .exit_code = -1};
    snprintf(a->stem, sizeof a->stem, "%s/%.*s", dir, (int)(strlen(name) - strlen(".status")), name);
    char *save = NULL;
    for (char *line = strtok_r(t, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *eq = strchr(line, '=');
        if (!eq)
            continue;
        *eq = 0;
        const char *k = line, *v = eq + 1;
        if (!strcmp(k, "shard") && *v)
            a->shard = atoi(v);
        else if (!strcmp(k, "state"))
            a->done = strcmp(v, "done") == 0;
        else if (!strcmp(k, "exit") && *v)
            a->exit_code = atoi(v);
        else if (!strcmp(k, "host"))
            snprintf(a->host, sizeof a->host, "%s", v);
        else if (!strcmp(k, "slurm_node"))
            snprintf(a->node, sizeof a->node, "%s", v);
        else if (!strcmp(k, "slurm_job_id"))
            snprintf(a->job_id, sizeof a->job_id, "%s", v);
        else if (!strcmp(k, "slurm_array_job_id"))
            a->array_job = atoll(v);
        else if (!strcmp(k, "slurm_array_task_id"))
            snprintf(a->task, sizeof a->task, "%s", v);
    }
    free(t);
    return a->shard >= 0 && a->array_job > 0;
}

static bool part_has_csv(const slurm_attempt *a)
{
    char path[1300];
    struct stat sb;
    snprintf(path, sizeof path, "%s.csv", a->stem);
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

void slurm_state_scan(const char *dir, int n, slurm_state *st)
{
    *st = (slurm_state){0};
    st->chosen = xcalloc((size_t)(n ? n : 1), sizeof *st->chosen);
    st->outcome = xcalloc((size_t)(n ? n : 1), sizeof *st->outcome);
    int cap = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "part-", 5) != 0 || len < 12 || strcmp(e->d_name + len - 7, ".status") != 0)
            continue;
        if (st->n_attempts == cap)
            st->attempts = xrealloc(st->attempts, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *st->attempts);
        if (read_status(dir, e->d_name, &st->attempts[st->n_attempts]) && st->attempts[st->n_attempts].shard < n)
            st->n_attempts++;
    }
    if (d)
        closedir(d);
    for (int i = 0; i < n; i++) {
        const slurm_attempt *ok = NULL, *latest = NULL;
        for (int k = 0; k < st->n_attempts; k++) {
            const slurm_attempt *a = &st->attempts[k];
            if (a->shard != i)
                continue;
            if (!latest || a->array_job > latest->array_job)
                latest = a;
            if (a->done && a->exit_code == 0 && part_has_csv(a) && (!ok || a->array_job > ok->array_job))
                ok = a;
        }
        st->chosen[i] = ok ? ok : latest;
        st->outcome[i] = ok ? SLURM_OK : !latest ? SLURM_MISSING : latest->done ? SLURM_FAILED : SLURM_UNFINISHED;
    }
}

void slurm_state_free(slurm_state *st)
{
    free(st->attempts);
    free(st->chosen);
    free(st->outcome);
    *st = (slurm_state){0};
}

const char *slurm_shard_describe(const slurm_shard *s, char *buf, size_t len)
{
    const char *base = strrchr(s->config, '/');
    int k = snprintf(buf, len, "%s, batch %lld, %s, %s", base ? base + 1 : s->config, (long long)s->batch, s->backend,
                     s->dtype);
    if (s->tokens >= 0 && k >= 0 && (size_t)k < len)
        k += snprintf(buf + k, len - (size_t)k, ", tokens %lld", (long long)s->tokens);
    if (s->kv_len >= 0 && k >= 0 && (size_t)k < len)
        snprintf(buf + k, len - (size_t)k, ", kv_len %lld", (long long)s->kv_len);
    return buf;
}

const char *slurm_outcome_describe(const slurm_state *st, int i, const char *dir, char *buf, size_t len)
{
    const slurm_attempt *a = st->chosen[i];
    switch (st->outcome[i]) {
    case SLURM_OK: snprintf(buf, len, "ok (%s.csv)", a->stem); break;
    case SLURM_FAILED:
        snprintf(buf, len, "failed (exit %d on %s): see %s/%lld_%s.out", a->exit_code, a->host, dir, a->array_job, a->task);
        break;
    case SLURM_UNFINISHED:
        snprintf(buf, len, "did not finish (killed, or still running, on %s): see %s/%lld_%s.out", a->host, dir,
                 a->array_job, a->task);
        break;
    case SLURM_MISSING: snprintf(buf, len, "missing (no task of it started: cancelled, still pending or not submitted)"); break;
    }
    return buf;
}
