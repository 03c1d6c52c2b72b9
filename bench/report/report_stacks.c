/* Folded stacks for flame graphs (--stacks: flamegraph.pl, speedscope), one file per
 * (backend, batch): the same forward as the trace (report_trace.c), each line a layer
 * inside its blocks with its nanoseconds, so that the stacks add up to the forward.
 * Docs: docs/outputs.md. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "report.h"

static int64_t to_ns(double seconds) { return (int64_t)llround(seconds * 1e9); }

typedef struct stacks {
    reporter base;
    report_stacks_file *files;
    int n_files;
    char **text;       /* per file: the folded lines, or NULL */
    bool *forward;     /* per file: the lines come from a forward (else isolated medians) */
} stacks;

/* A frame: the characters folded stacks reserve (';' between frames, the space before
 * the count, line ends) become '_'. */
static void frame(strbuf *b, const char *s)
{
    for (; *s; s++) {
        char ch = *s == ';' || *s == ' ' || *s == '\n' || *s == '\r' ? '_' : *s;
        strbuf_append(b, &ch, 1);
    }
}

static char *folded(const run_result *res, const int64_t *dur, bool forward)
{
    const model *m = res->m;
    model_blocks mb;
    model_blocks_build(m, &mb);
    strbuf b = {0}, prefix = {0};
    int *chain = xmalloc((size_t)(mb.n_blocks + 1) * sizeof *chain);
    for (int i = 0; i < m->n_layers; i++) {
        if (dur[i] < 0)
            continue;
        int n = 0;
        for (int k = mb.layer_block[i]; k >= 0; k = mb.blocks[k].parent)
            chain[n++] = k;
        prefix.len = 0;
        while (n--) {
            frame(&prefix, mb.blocks[chain[n]].name);
            strbuf_append(&prefix, ";", 1);
        }
        frame(&prefix, block_leaf_name(m->layers[i].name));
        /* in a forward, a split layer's parts are its children; what they leave of the
         * layer's time stays on the layer itself */
        int64_t rest = dur[i];
        for (int j = 0; forward && j < res->n_parts; j++) {
            const part_result *p = &res->parts[j];
            if (p->layer != i || !row_timed(&p->r))
                continue;
            int64_t d = to_ns(p->sample) < rest ? to_ns(p->sample) : rest;
            strbuf_append(&b, prefix.data, prefix.len);
            strbuf_append(&b, ";", 1);
            frame(&b, p->info.name);
            strbuf_printf(&b, " %lld\n", (long long)d);
            rest -= d;
        }
        if (rest > 0 || rest == dur[i]) {
            strbuf_append(&b, prefix.data, prefix.len);
            strbuf_printf(&b, " %lld\n", (long long)rest);
        }
    }
    free(chain);
    free(prefix.data);
    model_blocks_free(&mb);
    if (!b.data)
        strbuf_append(&b, "", 0);
    return b.data;
}

static bench_status stacks_run(reporter *r, const run_result *res)
{
    stacks *s = (stacks *)r;
    const model *m = res->m;
    for (int f = 0; f < s->n_files; f++) {
        if (strcmp(s->files[f].backend, res->backend) || s->files[f].batch != m->batch || s->files[f].dtype != m->dtype)
            continue;
        if (s->forward[f] || (s->text[f] && !res->forward_sample))
            return BENCH_OK; /* a forward's stacks are kept; else the first mode's */
        int64_t *dur = xmalloc((size_t)(m->n_layers ? m->n_layers : 1) * sizeof *dur);
        for (int i = 0; i < m->n_layers; i++)
            dur[i] = res->forward_sample ? (res->layers[i].status == ROW_VIEW ? -1 : to_ns(res->forward_sample[i]))
                     : row_timed(&res->layers[i]) ? to_ns(res->layers[i].st.median)
                                                  : -1;
        free(s->text[f]);
        s->text[f] = folded(res, dur, res->forward_sample != NULL);
        s->forward[f] = res->forward_sample != NULL;
        free(dur);
    }
    return BENCH_OK;
}

static bench_status stacks_write(stacks *s)
{
    bench_status st = BENCH_OK;
    char err[600];
    for (int f = 0; f < s->n_files; f++) {
        if (!s->text[f])
            continue;
        if (bench_output_write(s->files[f].out, s->text[f], strlen(s->text[f]), err, sizeof err) != BENCH_OK) {
            log_msg("--stacks: %s", err);
            st = BENCH_ERR_IO;
        }
    }
    return st;
}

static bench_status stacks_checkpoint(reporter *r) { return stacks_write((stacks *)r); }

static bench_status stacks_finish(reporter *r, bool ok)
{
    stacks *s = (stacks *)r;
    bench_status st = ok ? stacks_write(s) : BENCH_OK;
    for (int f = 0; f < s->n_files; f++)
        free(s->text[f]);
    free(s->text), free(s->forward), free(s);
    return st;
}

reporter *report_stacks_create(report_stacks_file *files, int n)
{
    stacks *s = xcalloc(1, sizeof *s);
    s->base.run = stacks_run;
    s->base.checkpoint = stacks_checkpoint;
    s->base.finish = stacks_finish;
    s->files = files;
    s->n_files = n;
    s->text = xcalloc((size_t)n, sizeof *s->text);
    s->forward = xcalloc((size_t)n, sizeof *s->forward);
    return &s->base;
}

char *report_stacks_path(const char *path, const char *backend, int64_t batch, const char *dtype, bool one_backend,
                         bool one_batch)
{
    if (one_backend && one_batch && !dtype)
        return xstrdup(path);
    const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
    size_t stem = dot && (!slash || dot > slash + 1) ? (size_t)(dot - path) : strlen(path);
    char batch_part[32] = "";
    if (!one_batch)
        snprintf(batch_part, sizeof batch_part, ".batch%lld", (long long)batch);
    return xasprintf("%.*s%s%s%s%s%s%s", (int)stem, path, one_backend ? "" : ".", one_backend ? "" : backend, batch_part,
                     dtype ? "." : "", dtype ? dtype : "", path + stem);
}
