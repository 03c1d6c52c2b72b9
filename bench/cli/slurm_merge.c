/* bench merge DIR: the parts of a sweep --slurm as one tidy CSV, the local sweep's
 * columns plus where each row ran, and one JSON context: the first part's, with every
 * part's finished sets and a list of the shards and how each ended. Shards missing or
 * failed are listed and make the exit status 1; what the others finished is written
 * all the same. */
#define _GNU_SOURCE
#include "cli.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "csv_read.h"
#include "fileio.h"
#include "log.h"
#include "report.h"
#include "results_read.h"
#include "slurm.h"

/* The columns merge adds to the local sweep's (docs/slurm.md). */
static const char *const provenance[] = {"shard", "host", "slurm_node", "slurm_job_id", "slurm_array_job_id",
                                         "slurm_array_task_id", "gpu_name", "gpu_uuid", "gpu_driver", NULL};

/* The part's JSON context, or NULL with the reason in err. */
static json_t *load_context(const slurm_attempt *a, char *err, size_t errlen)
{
    char path[1300];
    snprintf(path, sizeof path, "%s.json", a->stem);
    strbuf text = {0};
    if (fileio_read(path, RESULTS_JSON_MAX_BYTES, FILEIO_TEXT, NULL, &text, NULL, err, errlen) != BENCH_OK) {
        strbuf_free(&text);
        return NULL;
    }
    json_error_t je;
    json_t *j = json_loadb(text.data, text.len, 0, &je);
    strbuf_free(&text);
    if (!j)
        snprintf(err, errlen, "%.1200s:%d:%d: not JSON (%.100s)", path, je.line, je.column, je.text);
    else if (!json_is_object(j))
        snprintf(err, errlen, "%s: not a JSON context (not an object)", path);
    if (j && !json_is_object(j)) {
        json_decref(j);
        j = NULL;
    }
    return j;
}

static const char *json_str(json_t *o, const char *key)
{
    json_t *v = o ? json_object_get(o, key) : NULL;
    return json_is_string(v) ? json_string_value(v) : "";
}

/* The part's rows appended to csv with the provenance cells, once they are checked:
 * every row is of the shard's own set (not another batch's, backend's, ...), the set is
 * whole (results_read.h: the part's JSON context lists it with as many rows), and no
 * row is there twice. The count (0: the part finished no set), or -1 with the reason in
 * err: then nothing of the part is merged. */
static int64_t append_rows(strbuf *csv, const slurm_attempt *a, const slurm_shard *sh, int shard, json_t *ctx,
                           const char *ctx_err, char *err, size_t errlen)
{
    char path[1300], why[1400], what[200];
    snprintf(path, sizeof path, "%s.csv", a->stem);
    results_file f;
    if (results_read_csv(path, &f, err, errlen) != BENCH_OK)
        return -1;
    snprintf(path, sizeof path, "%s.json", a->stem);
    if (f.n_sets && (!ctx || results_take_json(path, ctx, &f, why, sizeof why) != BENCH_OK)) {
        snprintf(err, errlen, "%s", ctx ? why : ctx_err);
        results_free(&f);
        return -1;
    }
    report_set want = {.batch = sh->batch, .tokens = sh->tokens, .kv_len = sh->kv_len};
    snprintf(want.backend, sizeof want.backend, "%s", sh->backend);
    for (int i = 0; i < f.n_sets; i++) {
        const report_set *k = &f.sets[i].key;
        if (strcmp(k->backend, want.backend) || k->batch != want.batch || strcmp(dtype_name(k->dtype), sh->dtype) ||
            strcmp(layer_pass_name(k->pass), sh->pass) ||
            (want.tokens >= 0 && k->tokens != want.tokens) || (want.kv_len >= 0 && k->kv_len != want.kv_len)) {
            snprintf(err, errlen, "%s.csv: holds rows of %s, not of its shard (%s): the part of another shard", a->stem,
                     results_set_describe(k, what, sizeof what), slurm_shard_describe(sh, why, sizeof why));
            results_free(&f);
            return -1;
        }
        if (!results_set_whole(&f, i, why, sizeof why)) {
            snprintf(err, errlen, "%.900s.csv: %s: %.300s", a->stem, results_set_describe(k, what, sizeof what), why);
            results_free(&f);
            return -1;
        }
    }
    if (f.n_sets > 1) {
        snprintf(err, errlen, "%s.csv: %d sets of rows, where a shard runs one", a->stem, f.n_sets);
        results_free(&f);
        return -1;
    }
    bool gpu = backend_is_gpu(sh->backend); /* its device, UUID and driver from its context */
    json_t *dev = ctx && gpu ? json_object_get(json_object_get(ctx, "backends"), sh->backend) : NULL;
    char shard_s[16], array_job[32];
    snprintf(shard_s, sizeof shard_s, "%d", shard);
    snprintf(array_job, sizeof array_job, "%lld", a->array_job);
    const char *cells[] = {shard_s, a->host, a->node, a->job_id, array_job, a->task,
                           gpu ? json_str(dev, "device") : "", gpu ? json_str(dev, "uuid") : "",
                           gpu ? json_str(dev, "driver_version") : ""};
    for (int64_t r = 0; r < f.t.n_rows; r++) {
        for (int i = 0; i < f.t.n_cols; i++) {
            if (i)
                strbuf_append(csv, ",", 1);
            report_csv_field(csv, csv_cell(&f.t, r, i));
        }
        for (size_t i = 0; i < sizeof cells / sizeof *cells; i++) {
            strbuf_append(csv, ",", 1);
            report_csv_field(csv, cells[i]);
        }
        strbuf_append(csv, "\n", 1);
    }
    int64_t n = f.t.n_rows;
    results_free(&f);
    return n;
}

/* An element of one of the merged JSON's lists, compact on a line of its own. */
static void dump_element(strbuf *b, const json_t *e)
{
    char *t = json_dumps(e, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (t) {
        strbuf_append(b, b->len ? ",\n    " : "\n    ", b->len ? 6 : 5);
        strbuf_append(b, t, strlen(t));
    }
    free(t);
}

static const char *outcome_name(slurm_outcome o)
{
    return o == SLURM_OK ? "ok" : o == SLURM_FAILED ? "failed" : o == SLURM_UNFINISHED ? "unfinished" : "missing";
}

/* The shard's entry in the merged JSON's "shards". */
static json_t *shard_json(int i, const slurm_shard *s, const slurm_state *st, json_t *ctx, const char *dir)
{
    json_t *o = json_object();
    json_object_set_new(o, "shard", json_integer(i));
    json_object_set_new(o, "config", json_string(s->config));
    json_object_set_new(o, "batch", json_integer(s->batch));
    json_object_set_new(o, "backend", json_string(s->backend));
    json_object_set_new(o, "dtype", json_string(s->dtype));
    json_object_set_new(o, "pass", json_string(s->pass));
    json_object_set_new(o, "tokens", s->tokens >= 0 ? json_integer(s->tokens) : json_null());
    json_object_set_new(o, "kv_len", s->kv_len >= 0 ? json_integer(s->kv_len) : json_null());
    json_object_set_new(o, "outcome", json_string(outcome_name(st->outcome[i])));
    const slurm_attempt *a = st->chosen[i];
    if (!a)
        return o;
    char buf[1400];
    json_object_set_new(o, "exit", a->done ? json_integer(a->exit_code) : json_null());
    snprintf(buf, sizeof buf, "%s.csv", a->stem);
    json_object_set_new(o, "part", json_string(buf));
    snprintf(buf, sizeof buf, "%s/%lld_%s.out", dir, a->array_job, a->task);
    json_object_set_new(o, "log", json_string(buf));
    json_object_set_new(o, "host", json_string(a->host));
    json_object_set_new(o, "slurm_node", json_string(a->node));
    json_object_set_new(o, "slurm_job_id", json_string(a->job_id));
    json_object_set_new(o, "slurm_array_job_id", json_integer(a->array_job));
    json_object_set_new(o, "slurm_array_task_id", json_string(a->task));
    if (ctx) { /* what the part's own context says of the machine it ran on */
        static const char *const keys[] = {"date_utc", "cpu_model", "cpu_isa", "load_average", "backends", "peaks",
                                           "state", "warnings", NULL};
        for (int k = 0; keys[k]; k++)
            if (json_object_get(ctx, keys[k]))
                json_object_set(o, keys[k], json_object_get(ctx, keys[k]));
    }
    return o;
}

/* Whether the output o would replace a file of the sweep in dir: one merge reads (the
 * shard list, the job list, a part, its JSON or status, however the path is spelt: a
 * hard or symbolic link to it) or one the sweep's tasks write there later. */
static bool replaces_input(const bench_output *o, const char *dir, const slurm_state *st)
{
    if (!o->target)
        return false;
    char *copy = xstrdup(o->target), *slash = strrchr(copy, '/');
    const char *leaf = slash ? slash + 1 : copy;
    struct stat ds, od;
    bool in_dir = false;
    if (slash) {
        *slash = 0;
        in_dir = stat(*copy ? copy : "/", &od) == 0 && stat(dir, &ds) == 0 && od.st_dev == ds.st_dev && od.st_ino == ds.st_ino;
    }
    size_t n = strlen(leaf);
    bool sweep_name = !strncmp(leaf, "part-", 5) || !strcmp(leaf, SLURM_SHARDS_FILE) || !strcmp(leaf, SLURM_JOBS_FILE) ||
                      (n > 7 && !strcmp(leaf + n - 7, ".sbatch")) || (n > 4 && !strcmp(leaf + n - 4, ".out"));
    bool hit = in_dir && sweep_name;
    free(copy);
    struct stat os;
    if (hit || stat(o->target, &os) != 0)
        return hit;
    const char *fixed[] = {SLURM_SHARDS_FILE, SLURM_JOBS_FILE};
    for (int k = 0; k < 2 + 3 * st->n_attempts && !hit; k++) {
        char path[1400];
        if (k < 2)
            snprintf(path, sizeof path, "%s/%s", dir, fixed[k]);
        else
            snprintf(path, sizeof path, "%s.%s", st->attempts[(k - 2) / 3].stem, (const char *[]){"csv", "json", "status"}[(k - 2) % 3]);
        struct stat is;
        hit = stat(path, &is) == 0 && is.st_dev == os.st_dev && is.st_ino == os.st_ino;
    }
    return hit;
}

/* The shard list read back must name each set once: two shards of one set would merge
 * its rows twice. */
static int duplicate_shard(const slurm_shard *s, int n)
{
    for (int i = 0; i < n; i++) /* shards.tsv is short (configs x axes): pairs are cheap */
        for (int j = 0; j < i; j++)
            if (!strcmp(s[i].config, s[j].config) && s[i].batch == s[j].batch && !strcmp(s[i].backend, s[j].backend) &&
                !strcmp(s[i].dtype, s[j].dtype) && !strcmp(s[i].pass, s[j].pass) && s[i].tokens == s[j].tokens &&
                s[i].kv_len == s[j].kv_len)
                return i;
    return -1;
}

/* One merge: the sweep's folder and shards, what its parts hold (slurm.h), and what is
 * gathered from them: the CSV, the JSON's two long lists, each element dumped as it
 * comes (a tree of 100k shards' contexts took gigabytes), and the counts. */
typedef struct merge_job {
    const char *dir;
    const slurm_shard *shards;
    int n;
    slurm_state st;
    strbuf csv, completed, list;
    json_t *root, *missing, *failed;
    int merged, problems;
    int64_t rows;
} merge_job;

/* Shard i's part merged into the job, or its shard listed as missing or failed. */
static void merge_shard(merge_job *m, int i)
{
    slurm_state *st = &m->st;
    const slurm_attempt *a = st->chosen[i];
    json_t *ctx = NULL;
    char what[600], how[1800], why[1400] = "";
    int64_t got = 0;
    slurm_shard_describe(&m->shards[i], what, sizeof what);
    if (a && st->outcome[i] != SLURM_MISSING) { /* a failed or killed part keeps the set it finished */
        char jerr[1400];
        ctx = load_context(a, jerr, sizeof jerr);
        char part[1400];
        struct stat ps;
        snprintf(part, sizeof part, "%s.csv", a->stem);
        /* a task that failed before it wrote a part: its outcome says why */
        got = st->outcome[i] == SLURM_OK || lstat(part, &ps) == 0
                  ? append_rows(&m->csv, a, &m->shards[i], i, ctx, jerr, why, sizeof why)
                  : 0;
        if (got == 0 && st->outcome[i] == SLURM_OK)
            snprintf(why, sizeof why, "its task ended with exit status 0, but %s.csv holds no finished set", a->stem);
        if (*why && st->outcome[i] != SLURM_OK) { /* the task's own outcome first, then its part's */
            char part_why[1400];
            snprintf(part_why, sizeof part_why, "%s", why);
            snprintf(why, sizeof why, "%.600s; its part is left out: %.700s",
                     slurm_outcome_describe(st, i, m->dir, how, sizeof how), part_why);
        }
        if (*why && st->outcome[i] == SLURM_OK)
            st->outcome[i] = SLURM_FAILED;
        m->rows += got > 0 ? got : 0;
    }
    if (st->outcome[i] == SLURM_OK) {
        m->merged++;
        if (!m->root && ctx)
            m->root = json_deep_copy(ctx);
    } else {
        m->problems++;
        log_msg("shard %d (%s): %s", i, what, *why ? why : slurm_outcome_describe(st, i, m->dir, how, sizeof how));
        json_array_append_new(st->outcome[i] == SLURM_MISSING ? m->missing : m->failed, json_integer(i));
    }
    json_t *sets = got > 0 && ctx ? json_object_get(ctx, "completed") : NULL; /* what was merged */
    size_t k;
    json_t *set;
    json_array_foreach(sets, k, set) { /* the part's own object, marked (ctx is dropped next) */
        json_object_set_new(set, "shard", json_integer(i));
        json_object_set_new(set, "host", json_string(a->host));
        json_object_set_new(set, "slurm_node", json_string(a->node));
        dump_element(&m->completed, set);
    }
    json_t *entry = shard_json(i, &m->shards[i], st, ctx, m->dir);
    dump_element(&m->list, entry);
    json_decref(entry);
    json_decref(ctx);
}

/* The merged run's JSON context: the local sweep's (the first finished part's), with
 * every part's sets and the shard list, as text. */
static void merged_context(merge_job *m, strbuf *whole)
{
    if (!m->root)
        m->root = json_pack("{s:s}", "tool", "layerbench");
    json_t *cmd = json_array();
    json_array_append_new(cmd, json_string("bench"));
    json_array_append_new(cmd, json_string("merge"));
    json_array_append_new(cmd, json_string(m->dir));
    json_object_set_new(m->root, "command_line", cmd);
    /* the configs: one, as a local sweep says it, or the list */
    json_t *configs = json_array();
    for (int i = 0; i < m->n; i++) {
        bool seen = false;
        for (size_t k = 0; k < json_array_size(configs); k++)
            seen = seen || strcmp(json_string_value(json_array_get(configs, k)), m->shards[i].config) == 0;
        if (!seen)
            json_array_append_new(configs, json_string(m->shards[i].config));
    }
    json_object_set(m->root, "config", json_array_size(configs) == 1 ? json_array_get(configs, 0) : configs);
    json_decref(configs);
    json_object_set_new(m->root, "state", json_string(m->problems ? "incomplete" : "complete"));
    json_object_del(m->root, "completed"); /* the first part's: every part's follow */
    json_object_set_new(m->root, "merged", json_pack("{s:s, s:i, s:i, s:O, s:O}", "folder", m->dir, "shards", m->n,
                                                     "merged", m->merged, "missing", m->missing, "failed", m->failed));
    char *text = json_dumps(m->root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    size_t len = text ? strlen(text) : 0;
    while (len && text[len - 1] != '}') /* the root without its closing brace, then the two lists */
        len--;
    strbuf_append(whole, text, len ? len - 1 : 0);
    free(text);
    const struct { const char *key; const strbuf *items; } lists[] = {{"completed", &m->completed}, {"shards", &m->list}};
    for (int l = 0; l < 2; l++) { /* appended, not printf'ed: the lists run to hundreds of MB */
        strbuf_printf(whole, ",\n  \"%s\": [", lists[l].key);
        if (lists[l].items->len)
            strbuf_append(whole, lists[l].items->data, lists[l].items->len), strbuf_append(whole, "\n  ", 3);
        strbuf_append(whole, "]", 1);
    }
    strbuf_append(whole, "\n}\n", 3);
}

/* The shard list of DIR, read and checked; an exit code on failure, -1 to go on. */
static int read_shards(const char *dir, char **text, slurm_shard **shards, int *n)
{
    char err[1600];
    if (strlen(dir) > SLURM_MAX_DIR) {
        log_msg("'%.60s...': a path longer than the %d characters a sweep's folder may have", dir, SLURM_MAX_DIR);
        return 2;
    }
    if (slurm_shards_read(dir, text, shards, n, err, sizeof err) != BENCH_OK) {
        log_msg("%s", err);
        return 2;
    }
    int dup = *n <= 4096 ? duplicate_shard(*shards, *n) : -1;
    if (dup >= 0) {
        log_msg("%s/%s: shard %d is the same set as an earlier one (edited?): not a shard list bench sweep --slurm writes",
                dir, SLURM_SHARDS_FILE, dup);
        free(*text);
        slurm_shards_free(*shards, *n);
        return 2;
    }
    return -1;
}

/* The merged CSV and its JSON written; the exit code. */
static int write_merged(merge_job *m, bench_output *out_csv, bench_output *out_json, bool json_open,
                        const char *csv_path, const char *json_path)
{
    char err[1600];
    bench_status w = bench_output_write(out_csv, m->csv.data, m->csv.len, err, sizeof err);
    if (w == BENCH_OK && json_open) {
        strbuf whole = {0};
        merged_context(m, &whole);
        w = bench_output_write(out_json, whole.data, whole.len, err, sizeof err);
        strbuf_free(&whole);
    }
    int rc;
    if (w != BENCH_OK) {
        log_msg("%s", err);
        rc = 1;
    } else {
        log_msg("merged %d of %d shards (%lld rows) into %s%s%s", m->merged, m->n, (long long)m->rows, csv_path,
                json_open ? " and its JSON context " : "", json_open ? json_path : "");
        rc = m->problems ? 1 : 0;
    }
    if (m->problems)
        log_msg("%d shard%s missing or failed: bench sweep ... --slurm %s --resume (the same command as "
                "the first time) submits them again", m->problems, m->problems == 1 ? "" : "s", m->dir);
    return rc;
}

int cmd_merge(const cli_merge *c)
{
    char *shards_text, err[1600];
    slurm_shard *shards;
    merge_job m = {.dir = c->dir, .missing = json_array(), .failed = json_array()};
    int rc = read_shards(m.dir, &shards_text, &shards, &m.n);
    if (rc >= 0) {
        json_decref(m.missing), json_decref(m.failed);
        return rc;
    }
    m.shards = shards;
    const char *dir = m.dir;
    char *csv_path = c->out ? xstrdup(c->out) : xasprintf("%s/sweep.csv", dir);
    char *json_path = report_json_path(csv_path);
    bench_output out_csv, out_json;
    bool csv_open = false, json_open = false;
    rc = 0;
    if (bench_output_open(&out_csv, csv_path, NULL, err, sizeof err) != BENCH_OK ||
        !(csv_open = true) || (out_csv.target && bench_output_open(&out_json, json_path, NULL, err, sizeof err) != BENCH_OK)) {
        log_msg("-o: %s", err);
        rc = 2;
    }
    json_open = !rc && out_csv.target;
    out_csv.append = true;
    slurm_state_scan(dir, rc ? 0 : m.n, &m.st);
    if (!rc && (replaces_input(&out_csv, dir, &m.st) || (json_open && replaces_input(&out_json, dir, &m.st)))) {
        log_msg("-o %s: it %s a file of the sweep in %s (its parts, statuses, shard or job list): give a file of its own",
                csv_path, replaces_input(&out_csv, dir, &m.st) ? "is" : "puts its JSON context over", dir);
        rc = 2;
    }
    if (!rc && m.st.n_unreadable)
        log_msg("%d status file%s in %s %s not one a shard's task writes (malformed, or of another sweep), e.g. %s: "
                "left out", m.st.n_unreadable, m.st.n_unreadable == 1 ? "" : "s", dir,
                m.st.n_unreadable == 1 ? "is" : "are", m.st.unreadable);
    char *header = report_csv_header();
    strbuf_append(&m.csv, header, strlen(header) - 1); /* without its newline */
    free(header);
    for (int i = 0; provenance[i]; i++)
        strbuf_printf(&m.csv, ",%s", provenance[i]);
    strbuf_append(&m.csv, "\n", 1);
    for (int i = 0; !rc && i < m.n; i++)
        merge_shard(&m, i);
    if (!rc)
        rc = write_merged(&m, &out_csv, &out_json, json_open, csv_path, json_path);
    json_decref(m.root);
    strbuf_free(&m.completed), strbuf_free(&m.list), strbuf_free(&m.csv);
    json_decref(m.missing), json_decref(m.failed);
    slurm_state_free(&m.st);
    if (csv_open)
        bench_output_close(&out_csv);
    if (json_open)
        bench_output_close(&out_json);
    free(csv_path), free(json_path), free(shards_text);
    slurm_shards_free(shards, m.n);
    return rc;
}
