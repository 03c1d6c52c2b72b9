#include "runner.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static bool is_done(const runner_plan *p, const char *backend, int64_t batch)
{
    for (int i = 0; i < p->n_done; i++)
        if (p->done[i].batch == batch && strcmp(p->done[i].backend, backend) == 0)
            return true;
    return false;
}

static void add_completed(strbuf *b, const char *backend, int64_t batch)
{
    strbuf_printf(b, "%s{\"backend\": \"%s\", \"batch\": %lld}", b->len ? ", " : "", backend, (long long)batch);
}

static bool write_json(runner_plan *p, const char *state, const strbuf *completed, const char *where)
{
    if (!p->json)
        return true;
    p->ctx.state = state;
    p->ctx.completed = completed->data;
    p->ctx.interrupted = where;
    return report_json_write(p->json, &p->ctx) == BENCH_OK;
}

int runner_execute(model *m, runner_plan *p, const measure_options *mo)
{
    strbuf completed = {0};
    char err[1024], where[1200] = "";
    bool failed = false, io_ok = true, interrupted = false;
    for (int i = 0; i < p->n_done; i++)
        add_completed(&completed, p->done[i].backend, p->done[i].batch);
    p->ctx.resumed_sets = p->n_done;
    int total = p->n_batches * p->n_backends, n = 0;
    for (int b = 0; io_ok && !interrupted && b < p->n_batches; b++) {
        int64_t batch = p->batches[b];
        model_set_batch(m, batch, err, sizeof err); /* checked for every batch before */
        for (int k = 0; io_ok && !interrupted && k < p->n_backends; k++) {
            const backend *bk = &p->backends[k];
            n++;
            if (is_done(p, bk->ops->name, batch)) {
                fprintf(stderr, "bench: batch %lld on %s: kept from the previous run (--resume)\n", (long long)batch,
                        bk->ops->name);
                continue;
            }
            if (p->sweep_progress)
                fprintf(stderr, "\r\033[Kbatch %lld (%d/%d) on %s\n", (long long)batch, n, total, bk->ops->name);
            /* every timing mode of the backend; the whole-model rows once, with the first */
            for (int md = 0; !interrupted && bk->ops->modes[md]; md++) {
                run_result res;
                bench_status st = measure_model(m, bk, mo, bk->ops->modes[md], md == 0, &res, err, sizeof err);
                if (st == BENCH_ERR_INTERRUPTED) {
                    interrupted = true;
                    snprintf(where, sizeof where, "batch %lld on %s (%s timing), %s", (long long)batch, bk->ops->name,
                             bk->ops->modes[md], err);
                } else {
                    if (st != BENCH_OK) {
                        fprintf(stderr, "bench: %d row%s failed; the first: %s\n", res.failed,
                                res.failed == 1 ? "" : "s", err);
                        failed = true;
                    }
                    for (int r = 0; r < p->n_reps; r++)
                        io_ok &= p->reps[r]->run(p->reps[r], &res) == BENCH_OK;
                }
                run_result_free(&res);
            }
            if (interrupted)
                break;
            for (int r = 0; r < p->n_reps; r++)
                if (p->reps[r]->checkpoint)
                    io_ok &= p->reps[r]->checkpoint(p->reps[r]) == BENCH_OK;
            add_completed(&completed, bk->ops->name, batch);
            if (b + 1 < p->n_batches || k + 1 < p->n_backends)
                io_ok &= write_json(p, "running", &completed, NULL);
        }
    }
    for (int r = 0; r < p->n_reps; r++)
        io_ok &= p->reps[r]->finish(p->reps[r], io_ok && !interrupted) == BENCH_OK;
    if (!interrupted || completed.len) /* an interrupted run that finished nothing leaves no file */
        io_ok &= write_json(p, interrupted ? "interrupted" : io_ok ? "complete" : "failed", &completed,
                            interrupted ? where : NULL);
    if (interrupted)
        fprintf(stderr, "\nbench: interrupted during %s; %s\n", where,
                completed.len ? "the finished sets are kept (--resume continues)" : "nothing had finished");
    strbuf_free(&completed);
    if (interrupted)
        return 128 + bench_interrupted;
    return failed || !io_ok ? 1 : 0;
}

bench_status runner_read_previous(const char *path, const char *model_name, char **text, runner_set **sets,
                                  int *n_sets, char *err, size_t errlen)
{
    *text = NULL;
    *sets = NULL;
    *n_sets = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT)
            return BENCH_OK; /* nothing to resume: a new run */
        snprintf(err, errlen, "--resume: cannot read '%s': %s", path, strerror(errno));
        return BENCH_ERR_USAGE;
    }
    strbuf b = {0};
    char chunk[65536];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0)
        strbuf_append(&b, chunk, got);
    fclose(f);
    char *header = report_csv_header();
    bench_status st = BENCH_OK;
    if (!b.data || strncmp(b.data, header, strlen(header)) != 0) {
        snprintf(err, errlen, "--resume: '%s' is not a layerbench CSV of this version (its header differs)", path);
        st = BENCH_ERR_USAGE;
    } else if (b.data[b.len - 1] != '\n') {
        snprintf(err, errlen, "--resume: '%s' does not end with a complete row", path);
        st = BENCH_ERR_USAGE;
    }
    /* rows start: model,backend,mode,batch, none of which is ever quoted */
    for (char *line = b.data ? strchr(b.data, '\n') : NULL; st == BENCH_OK && line && line[1]; line = strchr(line + 1, '\n')) {
        char model[160], backend[16];
        long long batch;
        if (sscanf(line + 1, "%159[^,],%15[^,],%*[^,],%lld,", model, backend, &batch) != 3) {
            snprintf(err, errlen, "--resume: '%s' has a row that is not a layerbench row", path);
            st = BENCH_ERR_USAGE;
        } else if (strcmp(model, model_name) != 0) {
            snprintf(err, errlen, "--resume: '%s' holds model '%s', not '%s'", path, model, model_name);
            st = BENCH_ERR_USAGE;
        } else {
            int i = 0;
            while (i < *n_sets && !((*sets)[i].batch == batch && strcmp((*sets)[i].backend, backend) == 0))
                i++;
            if (i == *n_sets) {
                *sets = xrealloc(*sets, (size_t)(*n_sets + 1) * sizeof **sets);
                snprintf((*sets)[i].backend, sizeof (*sets)[i].backend, "%s", backend);
                (*sets)[i].batch = batch;
                (*n_sets)++;
            }
        }
    }
    free(header);
    if (st != BENCH_OK) {
        strbuf_free(&b);
        free(*sets);
        *sets = NULL;
        *n_sets = 0;
        return st;
    }
    *text = b.data;
    return BENCH_OK;
}
