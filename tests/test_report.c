/* Reporters on hand-made results: the CSV never carries a cell a spreadsheet would run
 * as a formula, keeps numbers as they are, and quotes what needs quoting. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cfg.h"
#include "report.h"
#include "test_util.h"

static char dir[] = "/tmp/layerbench_test_report_XXXXXX";

static model *load(const char *yaml)
{
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/m.yaml", dir);
    FILE *f = fopen(path, "w");
    fputs(yaml, f);
    fclose(f);
    model *m;
    EXPECT(cfg_load(path, 0, &m, err, sizeof err) == BENCH_OK, "%s", err);
    return m;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    static char buf[1 << 16];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = 0;
    if (f)
        fclose(f);
    return buf;
}

static void test_formula_cells(void)
{
    model *m = load("name: t\ninput: [4]\nlayers: [{kind: relu, name: a}, {kind: relu, name: b}, {kind: relu, name: c}]\n");
    if (!m)
        return;
    run_result r = {.m = m, .backend = "cpu", .mode = "isolated", .threads = 1};
    r.layers = xcalloc((size_t)m->n_layers, sizeof *r.layers);
    const char *impls[] = {"=HYPERLINK(\"http://x\")", "+1+2", "@SUM(A1)"};
    for (int i = 0; i < 3; i++) {
        r.layers[i].status = ROW_OK;
        r.layers[i].dedupe_of = -1;
        r.layers[i].launches = 1;
        snprintf(r.layers[i].impl, sizeof r.layers[i].impl, "%s", impls[i]);
        double x = 1e-6 * (i + 1);
        r.layers[i].st = stats_compute(&x, 1);
    }
    snprintf(r.layers[1].note, sizeof r.layers[1].note, "-2 is fine, =x is not");
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/out.csv", dir);
    bench_output out;
    EXPECT(bench_output_open(&out, path, NULL, err, sizeof err) == BENCH_OK, "%s", err);
    reporter *rep = report_csv_create(&out, NULL);
    EXPECT(rep->run(rep, &r) == BENCH_OK, "run");
    EXPECT(rep->finish(rep, true) == BENCH_OK, "finish");
    bench_output_close(&out);
    const char *csv = slurp(path);
    EXPECT(strstr(csv, ",\"'=HYPERLINK(\"\"http://x\"\")\",") != NULL, "=HYPERLINK cell: %s", csv);
    EXPECT(strstr(csv, ",'+1+2,") != NULL, "+1+2 cell");
    EXPECT(strstr(csv, ",'@SUM(A1),") != NULL, "@SUM cell");
    EXPECT(strstr(csv, ",\"'-2 is fine, =x is not\"") != NULL, "text starting with '-' is neutralised and quoted: %s",
           csv);
    /* numbers and the "-" placeholder stay as they are */
    EXPECT(strstr(csv, ",-1,") != NULL && strstr(csv, ",'-1,") == NULL, "negative numbers untouched");
    EXPECT(strstr(csv, ",'-,") == NULL, "the '-' placeholder untouched");
    /* every line has as many fields as the header (quoted commas aside) */
    free(r.layers);
    model_free(m);
}

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_formula_cells();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return test_summary("test_report");
}
