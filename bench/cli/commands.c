/* The commands that do not time: list, check, compare and schema, and what every command
 * shares (loading the config, opening the backends). */
#include "cli.h"

#include <errno.h>
#include <fnmatch.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cfg.h"
#include "check.h"
#include "compare.h"
#include "fileio.h"
#include "log.h"
#include "results_read.h"
#include "report.h"

/* Opens the backends --backend asks for. Returns the count (>= 1) or -exit code.
 * With 'all', a backend that cannot start is skipped with its reason in *skipped. */
int cli_open_backends(const cli_backends *c, backend *bs, char **skipped)
{
    backend_options bo = {.threads = c->threads, .algo_heuristic = c->algo_heuristic, .algo_alone = c->algo_alone,
                          .conv_api = c->conv_api};
    const char *const *names = backend_names();
    int n = 0;
    *skipped = NULL;
    for (int i = 0; names[i]; i++) {
        if (strcmp(c->backend, "all") != 0 && strcmp(c->backend, names[i]) != 0)
            continue;
        const backend_ops *ops = backend_find(names[i]);
        char err[512];
        bench_status st;
        if (!ops) {
            snprintf(err, sizeof err, "%s", backend_find_error());
            st = BENCH_ERR_UNSUPPORTED;
        } else {
            st = backend_open(ops, &bo, &bs[n], err, sizeof err);
        }
        if (st == BENCH_OK) {
            n++;
            continue;
        }
        if (strcmp(c->backend, "all") != 0 || st == BENCH_ERR_USAGE) {
            log_msg("%s", err);
            for (int k = 0; k < n; k++)
                backend_close(&bs[k]);
            return -(st == BENCH_ERR_USAGE ? 2 : st == BENCH_ERR_UNSUPPORTED ? 2 : 1);
        }
        log_msg("%s backend skipped: %s", names[i], err);
        char *prev = *skipped;
        *skipped = prev ? xasprintf("%s; %s: %s", prev, names[i], err) : xasprintf("%s: %s", names[i], err);
        free(prev);
    }
    return n;
}

void cli_close_backends(backend *bs, int nb, char *skipped)
{
    for (int k = 0; k < nb; k++)
        backend_close(&bs[k]);
    free(skipped);
}

/* Device memory, checked once the backends are open (host memory is checked before). */
bool cli_fits_backends(const model *m, const backend *bs, int nb)
{
    char err[512];
    for (int k = 0; k < nb; k++) {
        int64_t avail = backend_mem_available(&bs[k]);
        if (avail >= 0 && model_check_memory(m, avail, bs[k].ops->name, err, sizeof err) != BENCH_OK) {
            log_msg("%s", err);
            return false;
        }
    }
    return true;
}

/* --freeze: every layer with weights whose name matches one of the comma-separated
 * shell patterns is frozen; false, said, where a pattern matches none. */
static bool freeze_layers(model *m, const char *patterns, const char *config)
{
    char *all = xstrdup(patterns), *save = NULL;
    bool ok = true;
    int n_patterns = 0;
    for (char *p = strtok_r(all, ",", &save); p && ok; p = strtok_r(NULL, ",", &save), n_patterns++) {
        int n = 0;
        for (int i = 0; i < m->n_layers; i++) {
            layer *l = &m->layers[i];
            if (l->n_weights > 0 && fnmatch(p, l->name, 0) == 0)
                l->frozen = true, layer_count(l), n++;
        }
        if (!n)
            log_msg("--freeze: '%.100s%s' matches no layer with weights in %s (bench list %s names them)", p,
                    strlen(p) > 100 ? "..." : "", config, config);
        ok = n > 0;
    }
    if (ok && !n_patterns)
        log_msg("--freeze: expected PATTERN[,PATTERN...], a shell pattern of layer names, got '%.100s'", patterns);
    free(all);
    ok = ok && n_patterns;
    return ok;
}

int cli_load_model(const cli_model *c, int64_t batch, model **m)
{
    char err[1024];
    bench_status st = cfg_load_shaped(c->config, batch, c->shape, m, err, sizeof err);
    if (st != BENCH_OK) {
        /* "file:line:col: ..." about the config, or "bench: --batch ..." about the command line */
        log_raw("%s%s\n", strncmp(err, c->config, strlen(c->config)) == 0 ? "" : "bench: ", err);
        return bench_exit_code(st);
    }
    if (c->n_dtypes) /* the first; run, sweep and check go through the others themselves */
        model_set_dtype(*m, c->dtypes[0]);
    if (c->routing >= 0) { /* --routing: every moe layer's, recounted (the experts that run change) */
        int n = 0;
        for (int i = 0; i < (*m)->n_layers; i++) {
            layer *l = &(*m)->layers[i];
            if (l->kind != LAYER_MOE)
                continue;
            l->p.routing = c->routing, l->p.load_skew = c->load_skew;
            n++;
            if (layer_count(l) != 0) {
                log_msg("--routing: the counts of layer '%s' exceed 2^62", l->name);
                model_free(*m);
                *m = NULL;
                return 2;
            }
        }
        if (!n) {
            log_msg("--routing: %s has no moe layer", c->config);
            model_free(*m);
            *m = NULL;
            return 2;
        }
    }
    (*m)->optimizer = (model_optimizer)c->optimizer;
    bool train = c->worker;
    for (int k = 0; k < c->n_passes; k++)
        train |= c->passes[k] == PASS_TRAIN;
    if (c->optimizer != OPTIMIZER_NONE && !train) {
        log_msg("--optimizer %s updates the weights after a training step's backward: give --pass train too",
                model_optimizer_name((model_optimizer)c->optimizer));
        model_free(*m);
        *m = NULL;
        return 2;
    }
    if (c->freeze && !freeze_layers(*m, c->freeze, c->config)) {
        model_free(*m);
        *m = NULL;
        return 2;
    }
    static bool noted; /* once, though a sweep loads the model for each batch and shape */
    if ((*m)->note && !noted && !c->worker)
        log_msg("%s", (*m)->note);
    int64_t frozen = 0, all = 0;
    int n_frozen = 0;
    for (int i = 0; i < (*m)->n_layers; i++) {
        const layer *l = &(*m)->layers[i];
        all += l->n_weights, frozen += l->frozen ? l->n_weights : 0, n_frozen += l->frozen;
    }
    if (n_frozen && !noted && !c->worker)
        log_msg("%d layer%s frozen (requires_grad: false, --freeze): %lld of the %lld weights learn nothing", n_frozen,
                n_frozen == 1 ? "" : "s", (long long)frozen, (long long)all);
    noted = true;
    return 0;
}

/* list --emit-yaml: the config the model is built from: a config.json's expansion, or a
 * YAML config itself. */
static int emit_yaml(const cli *c, int64_t batch)
{
    char err[1200];
    strbuf text = {0};
    model *m = NULL;
    bench_status st = cfg_is_hf(c->model.config) ? cfg_load_hf_emit(c->model.config, batch, c->model.shape, &m, &text, err, sizeof err)
                                           : fileio_read(c->model.config, CFG_MAX_FILE_BYTES, 0, NULL, &text, NULL, err, sizeof err);
    if (st == BENCH_OK && !cfg_is_hf(c->model.config)) /* the file, once it loads as a config */
        st = cfg_load_shaped(c->model.config, batch, c->model.shape, &m, err, sizeof err);
    if (st != BENCH_OK)
        log_raw("%s%s\n", strncmp(err, c->model.config, strlen(c->model.config)) == 0 ? "" : "bench: ", err);
    else
        fputs(text.data, stdout);
    model_free(m);
    strbuf_free(&text);
    return bench_exit_code(st);
}

int cmd_list(const cli *c, int64_t batch)
{
    model *m;
    if (c->emit_yaml)
        return emit_yaml(c, batch);
    int rc = cli_load_model(&c->model, batch, &m);
    if (rc)
        return rc;
    if (c->run.csv) {
        const char *inputs[] = {c->model.config, NULL};
        char err[1200];
        bench_output out;
        if (bench_output_open(&out, c->run.csv, inputs, err, sizeof err) != BENCH_OK) {
            log_msg("--csv: %s", err);
            rc = 2;
        } else {
            out.append = true; /* a stream takes the rows as they are */
            rc = bench_exit_code(report_list_csv(&out, m));
            bench_output_close(&out);
        }
    } else {
        report_list_table(stdout, m, c->ro.format);
    }
    model_free(m);
    return rc;
}

int cmd_check(const cli *c, int64_t batch)
{
    model *m;
    backend bs[BACKEND_MAX];
    char *skipped;
    int rc = cli_load_model(&c->model, batch, &m);
    if (rc)
        return rc;
    /* a model larger than memory is checked layer by layer (check_model): said here */
    check_options co = {c->mo.seed, !c->no_forward, c->mo.dedupe, c->timeout_given ? c->mo.timeout : 0,
                        bench_mem_available()};
    int64_t whole = check_forward_bytes(m);
    char a[32], b[32];
    if (co.available >= 0 && whole > co.available)
        log_msg("check: %s needs %s to run whole, and %s is available: each layer is checked alone, on its own "
                "inputs and weights, and the chained forward is not%s", m->name, bench_format_bytes(whole, a, sizeof a),
                bench_format_bytes(co.available, b, sizeof b),
                c->mo.dedupe ? "" : " (--dedupe checks one of each set of identical layers)");
    int nb = cli_open_backends(&c->be, bs, &skipped);
    if (nb < 0) {
        model_free(m);
        return -nb;
    }
    bench_status st = BENCH_OK; /* (device memory: a layer that does not fit there fails with the reason) */
    int np = c->model.n_passes ? c->model.n_passes : 1;
    for (int d = 0; d < (c->model.n_dtypes ? c->model.n_dtypes : 1) * np; d++) {
        if (c->model.n_dtypes)
            model_set_dtype(m, c->model.dtypes[d / np]);
        if (c->model.n_passes)
            model_set_pass(m, c->model.passes[d % np]);
        printf("%s%s: batch %lld, dtype %s%s%s, seed %llu\n\n", d ? "\n" : "", m->name, (long long)m->batch,
               dtype_name(m->dtype), model_mixed(m) ? " (mixed: some layers keep their own)" : "",
               m->pass == PASS_BACKWARD ? ", backward (each layer's gradients)"
               : m->pass == PASS_TRAIN  ? ", train (each layer's training forward and gradients, then the chained step's)"
                                        : "",
               (unsigned long long)c->mo.seed);
        bench_status one = check_model(m, bs, nb, &co, stdout);
        st = st == BENCH_OK ? one : st;
    }
    cli_close_backends(bs, nb, skipped);
    model_free(m);
    return bench_exit_code(st);
}

/* Which build made the results at csv_path, from the JSON context beside it (version,
 * git revision, build type, compiler), or NULL where there is none to say it. */
static char *build_of(const char *csv_path)
{
    char *json_path = report_json_path(csv_path), err[1200];
    strbuf text = {0};
    char *build = NULL;
    if (fileio_read(json_path, RESULTS_JSON_MAX_BYTES, FILEIO_TEXT, NULL, &text, NULL, err, sizeof err) == BENCH_OK) {
        json_t *root = json_loadb(text.data, text.len, 0, NULL);
        const char *keys[] = {"layerbench_version", "git_revision", "build_type", "compiler"};
        strbuf b = {0};
        for (int k = 0; root && json_is_object(root) && k < 4; k++) {
            json_t *v = json_object_get(root, keys[k]);
            strbuf_printf(&b, "%s%s", k ? " | " : "", json_is_string(v) ? json_string_value(v) : "?");
        }
        build = b.data;
        json_decref(root);
    }
    strbuf_free(&text);
    free(json_path);
    return build;
}

int cmd_compare(const cli_compare *c)
{
    csv_table base, new_;
    char err[1024];
    if (csv_read_file(c->base, &base, err, sizeof err) != BENCH_OK) {
        log_msg("%s", err);
        return 2;
    }
    if (csv_read_file(c->new_csv, &new_, err, sizeof err) != BENCH_OK) {
        log_msg("%s", err);
        csv_table_free(&base);
        return 2;
    }
    compare_options o = {c->threshold, c->format == TABLE_MD, c->inmodel, build_of(c->base),
                         build_of(c->new_csv)};
    int rc = compare_tables(c->base, &base, c->new_csv, &new_, &o, stdout);
    free((char *)o.base_build), free((char *)o.new_build);
    csv_table_free(&base);
    csv_table_free(&new_);
    return rc;
}

int cmd_schema(void)
{
    int n;
    const report_column *cols = report_csv_columns(&n);
    for (int i = 0; i < n; i++)
        printf("%-14s  %s\n", cols[i].name, cols[i].doc);
    return 0;
}
