/* bench sweep --slurm: the sweep split into shards (config x batch x backend x dtype x pass x
 * tokens x kv_len), each one task of a Slurm job array whose script runs `bench sweep`
 * on that shard alone into its own part file; then a merge job that runs after the
 * arrays (afterany: one failed shard must not leave it pending forever). Slurm does the
 * scheduling; we only write readable scripts and call sbatch. The folder's files are in
 * slurm.h, the user's view in docs/slurm.md. */
#define _GNU_SOURCE
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fileio.h"
#include "log.h"
#include "slurm.h"
#include "strbuf.h"

extern char **environ;

#define DEFAULT_TIME_LIMIT "1:00:00"
#define DEFAULT_MAX_ARRAY_SIZE 1001 /* Slurm's MaxArraySize default: task ids up to 1000 */

/* Runs argv (looked up on PATH) with stdout and stderr into *out and *err (owned by the
 * caller, may be NULL). Its exit status, or -1 when it could not be started. */
static int run_capture(char *const *argv, char **out, char **err)
{
    char outp[] = "/tmp/layerbench-slurm-XXXXXX", errp[] = "/tmp/layerbench-slurm-XXXXXX";
    int fo = mkstemp(outp), fe = mkstemp(errp), rc = -1;
    if (out)
        *out = NULL;
    if (err)
        *err = NULL;
    if (fo >= 0 && fe >= 0) {
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, fo, 1);
        posix_spawn_file_actions_adddup2(&fa, fe, 2);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        pid_t pid;
        int status;
        if (posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ) == 0 && waitpid(pid, &status, 0) == pid)
            rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        posix_spawn_file_actions_destroy(&fa);
        for (int k = 0; k < 2; k++) {
            char **dst = k ? err : out;
            int fd = k ? fe : fo;
            if (!dst)
                continue;
            strbuf b = {0};
            char chunk[4096];
            ssize_t got;
            lseek(fd, 0, SEEK_SET);
            while ((got = read(fd, chunk, sizeof chunk)) > 0)
                strbuf_append(&b, chunk, (size_t)got);
            strbuf_append(&b, "", 0);
            while (b.len && (b.data[b.len - 1] == '\n' || b.data[b.len - 1] == ' '))
                b.data[--b.len] = 0;
            *dst = b.data;
        }
    }
    if (fo >= 0)
        close(fo), unlink(outp);
    if (fe >= 0)
        close(fe), unlink(errp);
    return rc;
}

/* name found as an executable on PATH */
static bool on_path(const char *name)
{
    const char *path = getenv("PATH");
    if (!path)
        return false;
    char *copy = xstrdup(path), *save = NULL;
    bool found = false;
    for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        char *p = xasprintf("%s/%s", *d ? d : ".", name);
        found = access(p, X_OK) == 0;
        free(p);
    }
    free(copy);
    return found;
}

/* The site's MaxArraySize (scontrol show config), or Slurm's default. */
static int max_array_size(bool *asked)
{
    char *out = NULL;
    char *argv[] = {"scontrol", "show", "config", NULL};
    int v = DEFAULT_MAX_ARRAY_SIZE;
    *asked = false;
    if (on_path("scontrol") && run_capture(argv, &out, NULL) == 0 && out) {
        const char *p = strstr(out, "MaxArraySize");
        if (p && (p = strchr(p, '=')) && atoi(p + 1) > 0)
            v = atoi(p + 1), *asked = true;
    }
    free(out);
    return v;
}

/* Paths that go into the scripts and the shard list: a control character (a line break
 * above all) would end a line of a script and start a command of its own. */
static bool path_ok(const char *what, const char *path)
{
    for (const unsigned char *p = (const unsigned char *)path; *p; p++)
        if (*p < 0x20 || *p == 0x7f) {
            strbuf shown = {0};
            strbuf_visible(&shown, path, false);
            log_msg("%s '%s' holds a control character (a line break, a tab, an escape): it cannot go into the "
                    "generated scripts; rename it", what, shown.data);
            strbuf_free(&shown);
            return false;
        }
    return true;
}

/* The shards of the command line, every config loaded at every batch and token shape
 * first, so that a config error is found here and not on the cluster. Returns 0 or the
 * exit code. */
static int plan_shards(const cli *c, const int64_t *batches, int n_batches, slurm_shard **out, int *n)
{
    const char *backends[BACKEND_MAX];
    int nb = cli_backend_list(c->be.backend, backends);
    int nt = c->model.n_tokens ? c->model.n_tokens : 1, nk = c->model.n_kv ? c->model.n_kv : 1;
    int cap = 64;
    slurm_shard *s = xcalloc((size_t)cap, sizeof *s);
    *n = 0;
    for (int f = 0; f < c->slurm.n_configs; f++) {
        char abs[PATH_MAX], err[1024];
        if (!realpath(c->slurm.configs[f], abs)) {
            log_msg("cannot read config '%s': %s", c->slurm.configs[f], strerror(errno));
            slurm_shards_free(s, *n);
            return 2;
        }
        if (!path_ok("the config", abs)) {
            slurm_shards_free(s, *n);
            return 2;
        }
        const char *dtype_names[DTYPE_COUNT];
        int nd = 0, np = c->model.n_passes ? c->model.n_passes : 1;
        for (int t = 0; t < nt * nk; t++) {
            cli cc = *c;
            cc.model.config = c->slurm.configs[f];
            if (c->model.n_tokens)
                cc.model.shape.tokens = c->model.tokens_list[t / nk];
            if (c->model.n_kv)
                cc.model.shape.kv_len = c->model.kv_list[t % nk];
            model *m;
            int rc = cli_load_model(&cc.model, batches[0], &m);
            for (int b = 1; !rc && b < n_batches; b++)
                if (model_set_batch(m, batches[b], err, sizeof err) != BENCH_OK) {
                    log_msg("%s: %s", c->slurm.configs[f], err);
                    rc = 2;
                }
            if (!rc && t == 0) {
                nd = c->model.n_dtypes ? c->model.n_dtypes : 1;
                for (int d = 0; d < nd; d++)
                    dtype_names[d] = dtype_name(c->model.n_dtypes ? c->model.dtypes[d] : m->dtype);
            }
            if (!rc)
                model_free(m);
            if (rc) {
                slurm_shards_free(s, *n);
                return rc;
            }
        }
        for (int b = 0; b < n_batches; b++)
            for (int k = 0; k < nb; k++)
                for (int d = 0; d < nd * np; d++)
                    for (int t = 0; t < nt * nk; t++) {
                        if (*n == cap)
                            s = xrealloc(s, (size_t)(cap *= 2) * sizeof *s);
                        slurm_shard *sh = &s[(*n)++];
                        *sh = (slurm_shard){.config = xstrdup(abs), .batch = batches[b],
                                            .tokens = c->model.n_tokens ? c->model.tokens_list[t / nk] : -1,
                                            .kv_len = c->model.n_kv ? c->model.kv_list[t % nk] : -1};
                        snprintf(sh->backend, sizeof sh->backend, "%s", backends[k]);
                        snprintf(sh->dtype, sizeof sh->dtype, "%s", dtype_names[d / np]);
                        snprintf(sh->pass, sizeof sh->pass, "%s",
                                 layer_pass_name(c->model.n_passes ? c->model.passes[d % np] : PASS_FORWARD));
                    }
    }
    *out = s;
    return 0;
}

/* One job array: the shards it runs (task id = shard - base), all on the GPU or none. */
typedef struct array_plan {
    int *shards;
    int n;
    int base;
    bool gpu;
    char *script;      /* its text; owned */
    char *path;        /* DIR/array-R-I.sbatch; owned */
    char job_id[64];   /* once submitted */
} array_plan;

/* "0-5,7,9-10" of the task ids, ascending. */
static void array_spec(strbuf *b, const array_plan *a)
{
    for (int i = 0; i < a->n;) {
        int j = i;
        while (j + 1 < a->n && a->shards[j + 1] == a->shards[j] + 1)
            j++;
        strbuf_printf(b, "%s%d", i ? "," : "", a->shards[i] - a->base);
        if (j > i)
            strbuf_printf(b, "-%d", a->shards[j] - a->base);
        i = j + 1;
    }
}

/* The shards to run, in order, split into arrays: the GPU's apart (they ask for one),
 * and no task id at or above the site's MaxArraySize. */
static array_plan *split_arrays(const slurm_shard *shards, const int *todo, int n_todo, int limit, int *n_arrays)
{
    array_plan *a = xcalloc((size_t)(2 * n_todo + 1), sizeof *a);
    int na = 0;
    for (int pass = 0; pass < 2; pass++) {
        array_plan *cur = NULL;
        for (int i = 0; i < n_todo; i++) {
            int s = todo[i];
            bool gpu = backend_is_gpu(shards[s].backend);
            if (gpu != (pass == 1))
                continue;
            if (!cur || s - cur->base >= limit) {
                cur = &a[na++];
                *cur = (array_plan){.shards = xcalloc((size_t)n_todo, sizeof(int)), .base = s, .gpu = gpu};
            }
            cur->shards[cur->n++] = s;
        }
    }
    *n_arrays = na;
    return a;
}

static void free_arrays(array_plan *a, int n)
{
    for (int i = 0; a && i < n; i++)
        free(a[i].shards), free(a[i].script), free(a[i].path);
    free(a);
}

/* The shard's own arguments: its config and axes. */
static void shard_args(strbuf *b, const slurm_shard *s)
{
    slurm_shell_quote(b, s->config);
    strbuf_printf(b, " --batch %lld --backend %s --dtype %s --pass %s", (long long)s->batch, s->backend, s->dtype, s->pass);
    if (s->tokens >= 0)
        strbuf_printf(b, " --tokens %lld", (long long)s->tokens);
    if (s->kv_len >= 0)
        strbuf_printf(b, " --kv-len %lld", (long long)s->kv_len);
}

/* What an #SBATCH line can hold as it is: sbatch splits those lines at blanks and reads
 * quotes its own way, so a path with anything else goes on sbatch's command line
 * (an argv: nothing is parsed there). */
static bool sbatch_line_ok(const char *s)
{
    return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=./,:@%") == strlen(s);
}

/* "--output=DIR/LEAF", every '%' of DIR doubled ('%' starts one of sbatch's filename
 * patterns; "%%" is a '%'). Caller frees. */
static char *output_option(const char *dir, const char *leaf)
{
    strbuf b = {0};
    strbuf_printf(&b, "--output=");
    for (const char *p = dir; *p; p++)
        strbuf_append(&b, *p == '%' ? "%%" : p, 1 + (*p == '%'));
    strbuf_printf(&b, "/%s", leaf);
    return b.data;
}

static char *array_script(const cli *c, const array_plan *a, const slurm_shard *shards, int n_shards, const char *dir,
                          const char *bench, const char *cwd, const char *options)
{
    strbuf b = {0};
    strbuf_printf(&b, "#!/bin/bash\n# layerbench: %d of the %d shards of the sweep in %s, one per array task\n"
                      "# (task id = shard - %d); each writes part-ARRAY_TASK.csv and .json there, and\n"
                      "# part-ARRAY_TASK.status with how it ended. bench merge %s joins them (docs/slurm.md).\n",
                  a->n, n_shards, dir, a->base, dir);
    strbuf_printf(&b, "#SBATCH --job-name=layerbench-sweep\n#SBATCH --array=");
    array_spec(&b, a);
    if (c->slurm.max_running)
        strbuf_printf(&b, "%%%d", c->slurm.max_running);
    char *output = output_option(dir, "%A_%a.out");
    if (sbatch_line_ok(dir))
        strbuf_printf(&b, "\n#SBATCH %s\n", output);
    else
        strbuf_printf(&b, "\n# (--output is on sbatch's command line: the folder's name has characters an #SBATCH line "
                          "cannot hold)\n");
    free(output);
    strbuf_printf(&b, "#SBATCH --time=%s\n", c->slurm.time_limit ? c->slurm.time_limit : DEFAULT_TIME_LIMIT);
    if (!c->slurm.shared)
        strbuf_printf(&b, "#SBATCH --exclusive\n");
    if (c->be.threads)
        strbuf_printf(&b, "#SBATCH --cpus-per-task=%d\n", c->be.threads);
    if (a->gpu)
        strbuf_printf(&b, "#SBATCH --gres=gpu:1\n");
    strbuf_printf(&b, "set -u\nbench=");
    slurm_shell_quote(&b, bench);
    strbuf_printf(&b, "\ndir=");
    slurm_shell_quote(&b, dir);
    strbuf_printf(&b, "\ncd ");
    slurm_shell_quote(&b, cwd);
    strbuf_printf(&b, " || exit 2\n# what every shard repeats\noptions=(%s)\ncase \"$SLURM_ARRAY_TASK_ID\" in\n", options);
    for (int i = 0; i < a->n; i++) {
        strbuf_printf(&b, "%d) shard=%d; args=(", a->shards[i] - a->base, a->shards[i]);
        shard_args(&b, &shards[a->shards[i]]);
        strbuf_printf(&b, ") ;;\n");
    }
    strbuf_printf(&b, "*) echo \"layerbench: no shard for array task $SLURM_ARRAY_TASK_ID\" >&2; exit 2 ;;\nesac\n");
    strbuf_printf(&b,
                  "part=\"$dir/part-${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}\"\n"
                  "# the task's state for bench merge and --resume, replaced whole (never half-written,\n"
                  "# never through a file planted at the temporary's name: mktemp makes a new one)\n"
                  "status() {\n"
                  "  tmp=$(mktemp \"$part.status.XXXXXX\") || return 1\n"
                  "  printf 'shard=%%s\\nstate=%%s\\nexit=%%s\\nhost=%%s\\nslurm_node=%%s\\nslurm_job_id=%%s\\n"
                  "slurm_array_job_id=%%s\\nslurm_array_task_id=%%s\\n' \\\n"
                  "    \"$shard\" \"$1\" \"$2\" \"$(hostname)\" \"${SLURMD_NODENAME:-}\" \"${SLURM_JOB_ID:-}\" "
                  "\"$SLURM_ARRAY_JOB_ID\" \"$SLURM_ARRAY_TASK_ID\" \\\n"
                  "    > \"$tmp\" && chmod 644 \"$tmp\" && mv -f \"$tmp\" \"$part.status\"\n"
                  "}\n"
                  "status running ''\n"
                  "# a time limit or scancel sends SIGTERM: bench keeps the sets it finished, and the\n"
                  "# status below still says how it ended\n"
                  "trap 'echo \"layerbench: SIGTERM (time limit or scancel)\" >&2' TERM\n"
                  "\"$bench\" sweep \"${args[@]}\" \"${options[@]}\" --no-progress --csv \"$part.csv\"\n"
                  "rc=$?\n"
                  "status done \"$rc\"\n"
                  "exit \"$rc\"\n");
    return b.data;
}

static char *merge_script(const char *dir, const char *bench)
{
    strbuf b = {0};
    char *output = output_option(dir, "merge-%j.out");
    strbuf_printf(&b, "#!/bin/bash\n# layerbench: joins the parts of the sweep in %s once its arrays have ended\n"
                      "#SBATCH --job-name=layerbench-merge\n",
                  dir);
    if (sbatch_line_ok(dir))
        strbuf_printf(&b, "#SBATCH %s\n", output);
    free(output);
    strbuf_printf(&b, "#SBATCH --time=0:30:00\n#SBATCH --ntasks=1\nexec ");
    slurm_shell_quote(&b, bench);
    strbuf_printf(&b, " merge ");
    slurm_shell_quote(&b, dir);
    strbuf_printf(&b, " -o ");
    char *out = xasprintf("%s/sweep.csv", dir);
    slurm_shell_quote(&b, out);
    free(out);
    strbuf_printf(&b, "\n");
    return b.data;
}

/* sbatch's command line: --parsable, the site's arguments, [--output where the script
 * cannot say it (output_leaf's pattern in dir)], [--dependency], the script. */
static char **sbatch_argv(const char *sbatch_args, const char *dir, const char *output_leaf, const char *dependency,
                          const char *script)
{
    char *copy = xstrdup(sbatch_args ? sbatch_args : "");
    char **a = xcalloc(strlen(copy) / 2 + 7, sizeof *a);
    int n = 0;
    a[n++] = xstrdup("sbatch");
    a[n++] = xstrdup("--parsable");
    char *save = NULL;
    for (char *tok = strtok_r(copy, " \t\n", &save); tok; tok = strtok_r(NULL, " \t\n", &save))
        a[n++] = xstrdup(tok);
    if (!sbatch_line_ok(dir))
        a[n++] = output_option(dir, output_leaf);
    if (dependency)
        a[n++] = xstrdup(dependency);
    a[n++] = xstrdup(script);
    free(copy);
    return a;
}

static void free_strv(char **a)
{
    for (int i = 0; a && a[i]; i++)
        free(a[i]);
    free(a);
}

static void print_argv(FILE *f, char **a)
{
    strbuf b = {0};
    for (int i = 0; a[i]; i++) {
        if (i)
            strbuf_append(&b, " ", 1);
        slurm_shell_quote(&b, a[i]);
    }
    fprintf(f, "%s\n", b.data ? b.data : "");
    strbuf_free(&b);
}

/* text into path, atomically (output.h: a new temporary beside it, O_EXCL, then renamed),
 * with the mode given. */
static bool write_file(const char *path, const char *text, mode_t mode)
{
    bench_output o;
    char err[1400];
    bench_status st = bench_output_open(&o, path, NULL, err, sizeof err);
    if (st == BENCH_OK && o.target) {
        o.mode = mode;
        st = bench_output_write(&o, text, strlen(text), err, sizeof err);
    } else if (st == BENCH_OK) {
        snprintf(err, sizeof err, "cannot write '%s': not a regular file", path);
        st = BENCH_ERR_IO;
    }
    if (st == BENCH_OK || o.path)
        bench_output_close(&o);
    if (st != BENCH_OK)
        log_msg("%s", err);
    return st == BENCH_OK;
}

/* The folder: a new or empty one (its absolute path into abs, *created when made here),
 * or with --resume the folder of this same sweep. Returns 0 or the exit code. */
static int check_folder(const cli *c, const char *shards_text, char *abs, bool *created)
{
    struct stat sb;
    *created = false;
    if (stat(c->slurm.dir, &sb) != 0) {
        if (c->run.resume) {
            log_msg("--resume: '%s' does not exist: there is no sweep there to continue", c->slurm.dir);
            return 2;
        }
        char *parent = xstrdup(c->slurm.dir), *slash = strrchr(parent, '/');
        if (slash)
            *(slash == parent ? slash + 1 : slash) = 0;
        bool ok = realpath(slash ? parent : ".", abs) != NULL;
        free(parent);
        if (!ok) {
            log_msg("--slurm '%s': its parent folder does not exist", c->slurm.dir);
            return 2;
        }
        const char *leaf = strrchr(c->slurm.dir, '/') ? strrchr(c->slurm.dir, '/') + 1 : c->slurm.dir;
        if (!*leaf || !strcmp(leaf, ".") || !strcmp(leaf, "..")) {
            log_msg("--slurm '%s': give the folder's own name", c->slurm.dir);
            return 2;
        }
        snprintf(abs + strlen(abs), PATH_MAX - strlen(abs), "%s%s", strcmp(abs, "/") ? "/" : "", leaf);
        if (!c->slurm.dry_run) {
            if (mkdir(abs, 0777) != 0) {
                log_msg("cannot make '%s': %s", abs, strerror(errno));
                return 2;
            }
            *created = true;
        }
        return 0;
    }
    if (!S_ISDIR(sb.st_mode) || !realpath(c->slurm.dir, abs)) {
        log_msg("--slurm '%s' is not a folder", c->slurm.dir);
        return 2;
    }
    char *existing = NULL, err[1400];
    slurm_shard *old = NULL;
    int n_old = 0;
    bench_status st = slurm_shards_read(abs, &existing, &old, &n_old, err, sizeof err);
    slurm_shards_free(old, n_old);
    if (!c->run.resume) {
        DIR *d = opendir(abs);
        int entries = 0;
        for (struct dirent *e; d && (e = readdir(d));)
            entries += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
        if (d)
            closedir(d);
        free(existing);
        if (entries) {
            log_msg("--slurm '%s' holds files already%s: give a new or empty folder, or add --resume to continue "
                    "the sweep it holds",
                    c->slurm.dir, st == BENCH_OK ? " (the parts of a sweep)" : "");
            return 2;
        }
        return 0;
    }
    if (st != BENCH_OK) {
        log_msg("--resume: %s", err);
        return 2;
    }
    if (strcmp(existing, shards_text) != 0) {
        const char *a = existing, *b = shards_text;
        int line = 1;
        for (; *a && *a == *b; a++, b++)
            line += *a == '\n';
        log_msg("--resume: '%s' holds another sweep: its %s differs from this command's at line %d (the configs, "
                "batches, backends, dtypes, token shapes or the options every shard repeats); run the same command "
                "as the first time, or give a new folder",
                c->slurm.dir, SLURM_SHARDS_FILE, line);
        free(existing);
        return 2;
    }
    free(existing);
    return 0;
}

/* One line of jobs.tsv: "ROUND\tarray\tJOBID\tBASE\t..." (or "merge"): false for any
 * other line. The file is the sweep's own, but read back as if a stranger wrote it: a
 * base outside the shard list, a job id that is no number, are no line of it. */
static bool parse_job_line(const char *line, int n_shards, long long *id, int *base, bool *array)
{
    char kind[16];
    long long round, job, b;
    int used = 0;
    if (sscanf(line, "%lld\t%15[a-z]\t%lld\t%lld\t%n", &round, kind, &job, &b, &used) != 4 || !used)
        return false;
    *array = strcmp(kind, "array") == 0;
    if (round < 0 || job <= 0 || (!*array && strcmp(kind, "merge") != 0) || (*array && (b < 0 || b >= n_shards)))
        return false;
    *id = job, *base = (int)b;
    return true;
}

/* The array jobs of earlier submissions (jobs.tsv) that still have tasks queued or
 * running: their shards go into *busy. Returns false when squeue cannot say, or jobs.tsv
 * cannot be read or holds a line that is not one of ours (err said). */
static bool queued_shards(const char *dir, bool *busy, int n_shards)
{
    char *path = xasprintf("%s/%s", dir, SLURM_JOBS_FILE), err[1400];
    strbuf text = {0};
    bool missing;
    bench_status rs = fileio_read(path, SLURM_LIST_MAX_BYTES, FILEIO_TEXT | FILEIO_MISSING_OK, "--resume", &text, &missing,
                                  err, sizeof err);
    if (rs != BENCH_OK || missing) {
        if (rs != BENCH_OK)
            log_msg("%s", err);
        free(path);
        strbuf_free(&text);
        return rs == BENCH_OK; /* missing: nothing was submitted */
    }
    long long *ids = NULL;
    int *bases = NULL, n = 0, cap = 0, line_no = 0;
    bool ok = true;
    for (char *save = NULL, *line = strtok_r(text.data, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        long long id;
        int base;
        bool array;
        line_no++;
        if (!parse_job_line(line, n_shards, &id, &base, &array)) {
            log_msg("--resume: %s:%d: not a line bench sweep --slurm writes (edited, or of another sweep); "
                    "the shards still queued are not known", path, line_no);
            ok = false;
            break;
        }
        if (!array)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            ids = xrealloc(ids, (size_t)cap * sizeof *ids);
            bases = xrealloc(bases, (size_t)cap * sizeof *bases);
        }
        ids[n] = id, bases[n++] = base;
    }
    free(path);
    strbuf_free(&text);
    if (!ok || !n) {
        free(ids), free(bases);
        return ok;
    }
    char *out = NULL, *serr = NULL;
    char *argv[] = {"squeue", "-h", "-r", "-o", "%i", NULL};
    int rc = on_path("squeue") ? run_capture(argv, &out, &serr) : -1;
    if (rc != 0) {
        log_msg("--resume: squeue could not list the queue (%s), so the shards still queued are not known",
                serr && *serr ? serr : rc < 0 ? "squeue not found on PATH" : "it failed");
        free(out), free(serr), free(ids), free(bases);
        return false;
    }
    char *save = NULL;
    for (char *tok = out ? strtok_r(out, "\n", &save) : NULL; tok; tok = strtok_r(NULL, "\n", &save)) {
        long long job;
        int task;
        if (sscanf(tok, "%lld_%d", &job, &task) != 2 || task < 0)
            continue;
        for (int k = 0; k < n; k++)
            if (ids[k] == job && task < n_shards - bases[k])
                busy[bases[k] + task] = true;
    }
    free(out), free(serr), free(ids), free(bases);
    return true;
}

/* Cancels the arrays submitted so far (an sbatch that failed later). */
static void cancel_arrays(const array_plan *a, int n)
{
    for (int i = 0; i < n; i++)
        if (a[i].job_id[0]) {
            char *argv[] = {"scancel", (char *)a[i].job_id, NULL};
            run_capture(argv, NULL, NULL);
        }
}

static int next_round(const char *dir)
{
    int round = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        int r;
        if (sscanf(e->d_name, "array-%d-", &r) == 1 && r + 1 > round)
            round = r + 1;
    }
    if (d)
        closedir(d);
    return round;
}

/* Submits the arrays, then the merge job after them; on an sbatch that refuses, cancels
 * what this call submitted and removes what it wrote. Returns 0 or the exit code. */
static int submit(const cli *c, const char *dir, int round, array_plan *arrays, int na, const char *merge_path,
                  const char *merge_text, bool created, const char *shards_path)
{
    strbuf jobs = {0};
    int rc = 0;
    for (int i = 0; i < na && !rc; i++)
        rc = write_file(arrays[i].path, arrays[i].script, 0755) ? 0 : 1;
    if (!rc)
        rc = write_file(merge_path, merge_text, 0755) ? 0 : 1;
    for (int i = 0; i < na && !rc; i++) {
        char **argv = sbatch_argv(c->slurm.sbatch_args, dir, "%A_%a.out", NULL, arrays[i].path);
        char *out = NULL, *err = NULL;
        int st = run_capture(argv, &out, &err);
        free_strv(argv);
        if (st != 0 || !out || !*out) {
            log_msg("sbatch refused %s%s%s", arrays[i].path, err && *err ? ":\n" : " (exit status ",
                    err && *err ? err : "");
            if (!(err && *err))
                log_raw("%d)\n", st);
            rc = 2;
        } else {
            snprintf(arrays[i].job_id, sizeof arrays[i].job_id, "%.*s", (int)strcspn(out, ";\n"), out);
            strbuf jb = {0};
            array_spec(&jb, &arrays[i]);
            strbuf_printf(&jobs, "%d\tarray\t%s\t%d\t%s\t%s\n", round, arrays[i].job_id, arrays[i].base,
                          arrays[i].path, jb.data);
            printf("array job %s: %d shard%s, tasks %s", arrays[i].job_id, arrays[i].n, arrays[i].n == 1 ? "" : "s",
                   jb.data);
            if (arrays[i].base)
                printf(" (shard = task + %d)", arrays[i].base);
            printf("%s\n", arrays[i].gpu ? ", one GPU each" : "");
            strbuf_free(&jb);
        }
        free(out), free(err);
    }
    if (rc) {
        cancel_arrays(arrays, na);
        for (int i = 0; i < na; i++)
            unlink(arrays[i].path);
        unlink(merge_path);
        if (!c->run.resume) /* a new sweep leaves nothing behind; --resume keeps the sweep's own files */
            unlink(shards_path);
        if (created)
            rmdir(dir);
        log_msg("nothing was submitted%s", created ? ", and the folder was removed" : "");
        strbuf_free(&jobs);
        return rc;
    }
    /* the merge: afterany, so that a failed shard does not leave it pending forever */
    strbuf dep = {0};
    strbuf_printf(&dep, "--dependency=afterany");
    for (int i = 0; i < na; i++)
        strbuf_printf(&dep, ":%s", arrays[i].job_id);
    char **argv = sbatch_argv(c->slurm.sbatch_args, dir, "merge-%j.out", dep.data, merge_path);
    char *out = NULL, *err = NULL;
    int st = run_capture(argv, &out, &err);
    free_strv(argv);
    strbuf_free(&dep);
    if (st != 0 || !out || !*out) {
        log_msg("sbatch refused the merge job %s: %s\nthe arrays run; join their parts by hand when they end: "
                "bench merge %s", merge_path, err && *err ? err : "(no message)", dir);
        rc = 1;
    } else {
        strbuf_printf(&jobs, "%d\tmerge\t%.*s\t0\t%s\t-\n", round, (int)strcspn(out, ";\n"), out, merge_path);
        printf("merge job %.*s: after them, bench merge %s -o %s/sweep.csv\n", (int)strcspn(out, ";\n"), out, dir, dir);
    }
    free(out), free(err);
    char *jobs_path = xasprintf("%s/%s", dir, SLURM_JOBS_FILE);
    FILE *f = fopen(jobs_path, "a");
    if (!f || fputs(jobs.data, f) < 0 || fclose(f) != 0) {
        log_msg("cannot append to %s: %s (--resume will not know these jobs are queued)", jobs_path, strerror(errno));
        rc = 1;
    }
    free(jobs_path);
    strbuf_free(&jobs);
    return rc;
}

/* sbatch on PATH (unless --dry-run), this program's path and the current folder (bench,
 * cwd), and the sweep's folder checked (check_folder) and resolved into dir. 0, or an
 * exit code (a folder this call made is removed again). */
static int sweep_paths(const cli *c, const char *shards_text, char *dir, char *bench, char *cwd, bool *created)
{
    if (!c->slurm.dry_run && !on_path("sbatch")) {
        log_msg("--slurm submits through Slurm's sbatch, and there is none on PATH (install slurm-client, or run "
                "from a login node); --dry-run prints the scripts without it");
        return 2;
    }
    ssize_t bl = readlink("/proc/self/exe", bench, PATH_MAX - 1);
    if (bl <= 0 || !getcwd(cwd, PATH_MAX)) {
        log_msg("cannot find this program's path or the current folder: %s", strerror(errno));
        return 1;
    }
    bench[bl] = 0;
    if (!path_ok("--slurm", c->slurm.dir) || !path_ok("this program's path", bench) ||
        !path_ok("the current folder", cwd))
        return 2;
    int rc = check_folder(c, shards_text, dir, created);
    if (rc)
        return rc;
    if (strlen(dir) > SLURM_MAX_DIR)
        log_msg("--slurm '%s': its path is longer than the %d characters a sweep's folder may have", dir, SLURM_MAX_DIR);
    if (strlen(dir) > SLURM_MAX_DIR || !path_ok("--slurm's folder", dir)) { /* as resolved: through links */
        if (*created)
            rmdir(dir);
        return 2;
    }
    return 0;
}

/* --resume: the shards without a finished part and not queued, into todo. -1 to go on,
 * 0 when there is nothing to submit, or an exit code. */
static int resume_todo(const char *dir, const slurm_shard *shards, int n_shards, int *todo, int *n_todo)
{
    slurm_state st;
    slurm_state_scan(dir, n_shards, &st);
    bool *busy = xcalloc((size_t)n_shards, sizeof *busy);
    if (!queued_shards(dir, busy, n_shards)) {
        slurm_state_free(&st);
        free(busy);
        return 2;
    }
    int ok = 0, queued = 0;
    for (int i = 0; i < n_shards; i++) {
        ok += st.outcome[i] == SLURM_OK;
        queued += st.outcome[i] != SLURM_OK && busy[i];
        if (st.outcome[i] != SLURM_OK && !busy[i]) {
            char what[512], how[1600];
            log_msg("shard %d (%s): %s: again", i, slurm_shard_describe(&shards[i], what, sizeof what),
                    slurm_outcome_describe(&st, i, dir, how, sizeof how));
            todo[(*n_todo)++] = i;
        }
    }
    slurm_state_free(&st);
    free(busy);
    log_msg("--resume: %d of %d shards finished, %d still queued or running, %d to submit again", ok, n_shards, queued,
            *n_todo);
    if (*n_todo)
        return -1;
    log_msg("nothing to submit%s: bench merge %s", queued ? " (wait for the queued ones)" : "", dir);
    return 0;
}

/* --dry-run: the scripts, the sbatch commands and the shard list, printed. */
static void print_dry_run(const cli *c, const char *dir, const array_plan *arrays, int na, int n_todo, int limit,
                          bool asked, const char *merge_path, const char *merge_text, const char *shards_path,
                          const char *shards_text)
{
    printf("# %d shard%s in %d array%s (MaxArraySize %d%s); nothing submitted (--dry-run)\n", n_todo,
           n_todo == 1 ? "" : "s", na, na == 1 ? "" : "s", limit, asked ? "" : ", Slurm's default");
    for (int i = 0; i < na; i++) {
        printf("\n# ---- %s\n%s", arrays[i].path, arrays[i].script);
        char **a = sbatch_argv(c->slurm.sbatch_args, dir, "%A_%a.out", NULL, arrays[i].path);
        printf("# submitted as: ");
        print_argv(stdout, a);
        free_strv(a);
    }
    printf("\n# ---- %s\n%s", merge_path, merge_text);
    char **a = sbatch_argv(c->slurm.sbatch_args, dir, "merge-%j.out", "--dependency=afterany:ARRAY_JOB_IDS", merge_path);
    printf("# submitted as: ");
    print_argv(stdout, a);
    free_strv(a);
    printf("\n# ---- %s\n%s", shards_path, shards_text);
}

/* The options every shard repeats (cli_shard_options), shell-quoted, space-separated. */
static void shard_options(int argc, char **argv, strbuf *options)
{
    char **opts = cli_shard_options(argc, argv);
    for (int i = 0; opts[i]; i++) {
        if (i)
            strbuf_append(options, " ", 1);
        slurm_shell_quote(options, opts[i]);
    }
    strbuf_append(options, "", 0);
    free_strv(opts);
}

int cmd_slurm_sweep(int argc, char **argv, const cli *c, const int64_t *batches, int n_batches)
{
    slurm_shard *shards = NULL;
    int n_shards = 0, rc = plan_shards(c, batches, n_batches, &shards, &n_shards);
    if (rc)
        return rc;
    strbuf options = {0};
    shard_options(argc, argv, &options);
    char *shards_text = slurm_shards_text(options.data, shards, n_shards);
    char dir[PATH_MAX], bench[PATH_MAX], cwd[PATH_MAX];
    bool created = false;
    array_plan *arrays = NULL;
    int na = 0, *todo = xcalloc((size_t)n_shards, sizeof *todo), n_todo = 0;
    char *shards_path = NULL;
    if ((rc = sweep_paths(c, shards_text, dir, bench, cwd, &created)) != 0)
        goto done;
    shards_path = xasprintf("%s/%s", dir, SLURM_SHARDS_FILE);
    /* what to run: everything, or (--resume) the shards without a finished part and not queued */
    if (c->run.resume && (rc = resume_todo(dir, shards, n_shards, todo, &n_todo)) >= 0)
        goto done;
    rc = 0;
    for (int i = 0; !c->run.resume && i < n_shards; i++)
        todo[n_todo++] = i;
    bool asked;
    int limit = max_array_size(&asked);
    arrays = split_arrays(shards, todo, n_todo, limit, &na);
    int round = next_round(dir); /* 0 in a new folder */
    for (int i = 0; i < na; i++) {
        arrays[i].path = xasprintf("%s/array-%d-%d.sbatch", dir, round, i);
        arrays[i].script = array_script(c, &arrays[i], shards, n_shards, dir, bench, cwd, options.data);
    }
    char *merge_path = xasprintf("%s/merge-%d.sbatch", dir, round);
    char *merge_text = merge_script(dir, bench);
    if (c->slurm.dry_run) {
        print_dry_run(c, dir, arrays, na, n_todo, limit, asked, merge_path, merge_text, shards_path, shards_text);
    } else {
        if (!c->run.resume && !write_file(shards_path, shards_text, 0644)) {
            if (created)
                rmdir(dir);
            rc = 1;
        } else {
            rc = submit(c, dir, round, arrays, na, merge_path, merge_text, created, shards_path);
        }
        if (!rc)
            log_msg("%d shard%s submitted; the parts go to %s, bench merge %s joins them (the merge job does)", n_todo,
                    n_todo == 1 ? "" : "s", dir, dir);
    }
    free(merge_path);
    free(merge_text);
done:
    free_arrays(arrays, na);
    free(todo);
    free(shards_path);
    free(shards_text);
    strbuf_free(&options);
    slurm_shards_free(shards, n_shards);
    return rc;
}
