/* A --slurm sweep's folder (slurm.h): its shard list and its tasks' status files, read
 * the same way by bench merge and by sweep --slurm --resume. */
#define _GNU_SOURCE
#include "slurm.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fileio.h"
#include "layer.h"
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
    strbuf_printf(&b, "%s# options: %s\nshard\tconfig\tbatch\tbackend\tdtype\tpass\ttokens\tkv_len\n", shards_header,
                  options);
    for (int i = 0; i < n; i++) {
        const slurm_shard *s = &shards[i];
        strbuf_printf(&b, "%d\t%s\t%lld\t%s\t%s\t%s\t", i, s->config, (long long)s->batch, s->backend, s->dtype,
                      s->pass);
        if (s->tokens >= 0)
            strbuf_printf(&b, "%lld", (long long)s->tokens);
        strbuf_append(&b, "\t", 1);
        if (s->kv_len >= 0)
            strbuf_printf(&b, "%lld", (long long)s->kv_len);
        strbuf_append(&b, "\n", 1);
    }
    return b.data;
}


bench_status slurm_shards_read(const char *dir, char **text, slurm_shard **shards, int *n, char *err, size_t errlen)
{
    char *path = xasprintf("%s/%s", dir, SLURM_SHARDS_FILE), why[1400];
    strbuf tb = {0};
    *text = NULL, *shards = NULL, *n = 0;
    if (fileio_read(path, SLURM_LIST_MAX_BYTES, FILEIO_TEXT, NULL, &tb, NULL, why, sizeof why) != BENCH_OK) {
        snprintf(err, errlen, "'%s' is not the folder of a bench sweep --slurm: %s", dir, why);
        strbuf_free(&tb);
        free(path);
        return BENCH_ERR_USAGE;
    }
    char *t = tb.data;
    int cap = 16, line_no = 0;
    slurm_shard *s = xcalloc((size_t)cap, sizeof *s);
    bool ok = strncmp(t, shards_header, strlen(shards_header)) == 0;
    char *copy = xstrdup(t), *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); ok && line; line = strtok_r(NULL, "\n", &save)) {
        line_no++;
        if (line[0] == '#' || strncmp(line, "shard\t", 6) == 0)
            continue;
        /* shard, config, batch, backend, dtype, pass, tokens, kv_len: each field whole (a sweep
         * from before passes wrote no pass: forward) */
        char *f[8];
        int nf = 0;
        for (char *p = line; nf < 8; nf++) {
            f[nf] = p;
            char *tab = strchr(p, '\t');
            if (!tab) {
                nf++;
                break;
            }
            *tab = 0;
            p = tab + 1;
        }
        long long index, batch, tokens = -1, kv = -1;
        const char *pass = nf == 8 ? f[5] : "forward";
        char **tk = f + (nf == 8 ? 6 : 5);
        ok = (nf == 7 || nf == 8) && fileio_whole_int(f[0], 0, INT32_MAX, &index) && index == *n && *f[1] == '/' &&
             fileio_whole_int(f[2], 1, INT32_MAX, &batch) && *f[3] && strlen(f[3]) < sizeof s->backend && *f[4] &&
             strlen(f[4]) < sizeof s->dtype && layer_pass_from_name(pass) >= 0 &&
             (!*tk[0] || fileio_whole_int(tk[0], 1, (long long)1 << 30, &tokens)) &&
             (!*tk[1] || fileio_whole_int(tk[1], 0, (long long)1 << 30, &kv)) && !strchr(tk[1], '\t');
        if (!ok)
            break;
        if (*n == cap)
            s = xrealloc(s, (size_t)(cap *= 2) * sizeof *s);
        slurm_shard *sh = &s[(*n)++];
        *sh = (slurm_shard){.config = xstrdup(f[1]), .batch = batch, .tokens = tokens, .kv_len = kv};
        snprintf(sh->backend, sizeof sh->backend, "%s", f[3]);
        snprintf(sh->dtype, sizeof sh->dtype, "%s", f[4]);
        snprintf(sh->pass, sizeof sh->pass, "%s", pass);
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

/* One part-A_T.status file ("key=value" lines, each key once); false when it is not
 * one: a key twice, a shard, exit status or job id that is not a whole number. */
static bool read_status(const char *dir, const char *name, slurm_attempt *a)
{
    char *path = xasprintf("%s/%s", dir, name), err[1400];
    strbuf tb = {0};
    bench_status rs = fileio_read(path, SLURM_STATUS_MAX_BYTES, FILEIO_TEXT, NULL, &tb, NULL, err, sizeof err);
    free(path);
    if (rs != BENCH_OK) {
        strbuf_free(&tb);
        return false;
    }
    *a = (slurm_attempt){.shard = -1, .exit_code = -1};
    snprintf(a->stem, sizeof a->stem, "%s/%.*s", dir, (int)(strlen(name) - strlen(".status")), name);
    static const char *const keys[] = {"shard", "state", "exit", "host", "slurm_node", "slurm_job_id",
                                       "slurm_array_job_id", "slurm_array_task_id", NULL};
    bool seen[8] = {false}, ok = true, has_state = false;
    long long v = 0;
    char *save = NULL;
    for (char *line = strtok_r(tb.data, "\n", &save); ok && line; line = strtok_r(NULL, "\n", &save)) {
        char *eq = strchr(line, '=');
        if (!eq)
            continue;
        *eq = 0;
        const char *k = line, *val = eq + 1;
        int key = 0;
        while (keys[key] && strcmp(keys[key], k) != 0)
            key++;
        if (!keys[key])
            continue; /* a key of a later version */
        if (seen[key]) {
            ok = false;
            break;
        }
        seen[key] = true;
        switch (key) {
        case 0: ok = fileio_whole_int(val, 0, INT32_MAX, &v), a->shard = (int)v; break;
        case 1:
            ok = strcmp(val, "done") == 0 || strcmp(val, "running") == 0;
            a->done = strcmp(val, "done") == 0, has_state = true;
            break;
        case 2: ok = !*val || fileio_whole_int(val, 0, 255, &v), a->exit_code = *val ? (int)v : -1; break;
        case 3: snprintf(a->host, sizeof a->host, "%s", val); break;
        case 4: snprintf(a->node, sizeof a->node, "%s", val); break;
        case 5: snprintf(a->job_id, sizeof a->job_id, "%s", val); break;
        case 6: ok = fileio_whole_int(val, 1, LLONG_MAX, &v), a->array_job = v; break;
        case 7:
            ok = fileio_whole_int(val, 0, INT32_MAX, &v);
            snprintf(a->task, sizeof a->task, "%s", val);
            break;
        }
    }
    strbuf_free(&tb);
    /* a finished task says its exit status */
    return ok && has_state && a->shard >= 0 && a->array_job > 0 && (!a->done || a->exit_code >= 0);
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
        else if (st->n_unreadable++ == 0)
            snprintf(st->unreadable, sizeof st->unreadable, "%s/%s", dir, e->d_name);
    }
    if (d)
        closedir(d);
    /* per shard, its best attempts so far: one pass over the attempts, not one per shard */
    const slurm_attempt **ok = xcalloc((size_t)(n ? n : 1), sizeof *ok);
    for (int k = 0; k < st->n_attempts; k++) {
        const slurm_attempt *a = &st->attempts[k];
        int i = a->shard;
        if (!st->chosen[i] || a->array_job > st->chosen[i]->array_job)
            st->chosen[i] = a; /* the latest, for now */
        if (a->done && a->exit_code == 0 && (!ok[i] || a->array_job > ok[i]->array_job) && part_has_csv(a))
            ok[i] = a;
    }
    for (int i = 0; i < n; i++) {
        const slurm_attempt *latest = st->chosen[i];
        st->chosen[i] = ok[i] ? ok[i] : latest;
        st->outcome[i] = ok[i] ? SLURM_OK : !latest ? SLURM_MISSING : latest->done ? SLURM_FAILED : SLURM_UNFINISHED;
    }
    free(ok);
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
    int k = snprintf(buf, len, "%s, batch %lld, %s, %s%s", base ? base + 1 : s->config, (long long)s->batch, s->backend,
                     s->dtype, strcmp(s->pass, "forward") ? ", backward" : "");
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
