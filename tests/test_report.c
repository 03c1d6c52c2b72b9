/* Reporters on hand-made results: the CSV never carries a cell a spreadsheet would run
 * as a formula, keeps numbers as they are, and quotes what needs quoting. */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cfg.h"
#include "compare.h"
#include "csv_read.h"
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
    run_result r = {.m = m, .backend = "cpu", .mode = MODE_WARM, .threads = 1};
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

/* The CSV reader: quoting as RFC 4180 says, and errors with their line. */
static void test_csv_read(void)
{
    csv_table t;
    char err[256];
    const char *ok = "a,b,c\r\n1,\"x, \"\"y\"\"\",\n\"multi\nline\",,3\n";
    EXPECT(csv_parse("t.csv", ok, strlen(ok), &t, err, sizeof err) == BENCH_OK, "%s", err);
    EXPECT(t.n_cols == 3 && t.n_rows == 2, "%d columns, %lld rows", t.n_cols, (long long)t.n_rows);
    EXPECT(strcmp(csv_cell(&t, 0, 1), "x, \"y\"") == 0 && strcmp(csv_cell(&t, 0, 2), "") == 0, "quoted cells: '%s'",
           csv_cell(&t, 0, 1));
    EXPECT(strcmp(csv_cell(&t, 1, 0), "multi\nline") == 0 && strcmp(csv_cell(&t, 1, 2), "3") == 0, "a line break in quotes");
    EXPECT(csv_col(&t, "c") == 2 && csv_col(&t, "d") == -1, "columns by name");
    csv_table_free(&t);
    struct {
        const char *text, *error;
    } bad[] = {
        {"a,b\n1,2,3\n", "t.csv:2: 3 fields, but the header has 2"},
        {"a,b\n1\n", "t.csv:2: 1 fields"},
        {"a,b\n\"1,2\n", "t.csv:2: a quoted field is not closed"},
        {"a,b\n\"1\"x,2\n", "t.csv:2: text after a quoted field"},
        {"a,b\n1\"2,3\n", "t.csv:2: a quote inside an unquoted field"},
        {"", "t.csv: the file is empty"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        EXPECT(csv_parse("t.csv", bad[i].text, strlen(bad[i].text), &t, err, sizeof err) == BENCH_ERR_USAGE &&
                   strstr(err, bad[i].error),
               "bad CSV %zu: '%s', expected '%s'", i, err, bad[i].error);
    }
}

/* compare on hand-made results: one row per case, the verdict it must get. */
#define CMP_HEAD "model,backend,mode,batch,layer_name,kind,status,median_us,ci_low_us,ci_high_us,noise_pct\n"
static int compare_text(const char *base, const char *new_, const compare_options *o, char *out, size_t len)
{
    csv_table b, n;
    char err[256];
    EXPECT(csv_parse("base.csv", base, strlen(base), &b, err, sizeof err) == BENCH_OK, "%s", err);
    EXPECT(csv_parse("new.csv", new_, strlen(new_), &n, err, sizeof err) == BENCH_OK, "%s", err);
    FILE *f = fmemopen(out, len, "w");
    int rc = compare_tables("base.csv", &b, "new.csv", &n, o, f);
    fclose(f);
    csv_table_free(&b);
    csv_table_free(&n);
    return rc;
}

static bool line_has(const char *text, const char *layer, const char *verdict)
{
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        const char *end = strchr(l, '\n');
        size_t n = end ? (size_t)(end - l) : strlen(l);
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)n, l);
        if (strstr(line, layer) && strstr(line, verdict))
            return true;
    }
    return false;
}

static void test_compare(void)
{
    compare_options o = {COMPARE_DEFAULT_THRESHOLD, false, false};
    char out[8192];
    const char *base = CMP_HEAD
        "m,cpu,warm,1,same,conv2d,ok,100,99,101,1\n"
        "m,cpu,warm,1,slower,conv2d,ok,100,99,101,1\n"
        "m,cpu,warm,1,faster,conv2d,ok,100,99,101,1\n"
        "m,cpu,warm,1,small_change,conv2d,ok,100,99,101,1\n"
        "m,cpu,warm,1,within_noise,relu,ok,10,9.9,10.1,30\n"
        "m,cpu,warm,1,wide_ci,relu,ok,10,8,12,1\n"
        "m,cpu,warm,1,gone,relu,ok,10,9.9,10.1,1\n"
        "m,cpu,warm,1,auto,relu,ok,1,0.99,1.01,1\n"
        "m,cpu,warm,1,twice,relu,ok,5,4.9,5.1,1\n"
        "m,cpu,warm,1,twice,relu,ok,5,4.9,5.1,1\n"
        "m,cpu,warm,1,skipped,relu,skipped,,,,\n"
        "m,cpu,inmodel,1,same,conv2d,ok,100,99,101,1\n";
    const char *new_ = CMP_HEAD
        "m,cpu,warm,1,same,conv2d,ok,100.5,99.5,101.5,1\n"
        "m,cpu,warm,1,slower,conv2d,ok,120,119,121,1\n"
        "m,cpu,warm,1,faster,conv2d,ok,80,79,81,1\n"
        "m,cpu,warm,1,small_change,conv2d,ok,103,102,104,1\n"
        "m,cpu,warm,1,within_noise,relu,ok,12,11.9,12.1,30\n"
        "m,cpu,warm,1,wide_ci,relu,ok,11,9,14,1\n"
        "m,cpu,batch,1,auto,relu,ok,1.3,1.29,1.31,1\n"
        "m,cpu,warm,1,twice,relu,ok,5,4.9,5.1,1\n"
        "m,cpu,warm,1,twice,relu,ok,9,8.9,9.1,1\n"
        "m,cpu,warm,1,skipped,relu,ok,1,1,1,1\n"
        "m,cpu,warm,1,new_layer,relu,ok,1,1,1,1\n"
        "m,cpu,inmodel,1,same,conv2d,ok,200,199,201,1\n";
    int rc = compare_text(base, new_, &o, out, sizeof out);
    EXPECT(rc == 1, "a SLOWER row makes the exit status 1, got %d", rc);
    EXPECT(line_has(out, " same ", "SAME"), "identical within the interval: SAME\n%s", out);
    EXPECT(line_has(out, " slower ", "SLOWER") && line_has(out, " faster ", "FASTER"), "20%% either way\n%s", out);
    EXPECT(line_has(out, "small_change", "SAME"), "3%% is under the 5%% threshold");
    EXPECT(line_has(out, "within_noise", "SAME"), "20%% within a 30%% noise figure");
    EXPECT(line_has(out, "wide_ci", "SAME"), "intervals that overlap the threshold");
    EXPECT(line_has(out, "gone", "only in base") && line_has(out, "new_layer", "only in new"), "rows of one file");
    EXPECT(line_has(out, "warm/batch", "SLOWER") && line_has(out, "auto", "auto mode timed it differently"),
           "warm matched with batch\n%s", out);
    EXPECT(line_has(out, "twice", "SAME") && line_has(out, "twice", "SLOWER"), "a repeated name matched by occurrence");
    EXPECT(line_has(out, "skipped", "not timed: skipped in base, ok in new"), "an untimed row");
    EXPECT(strstr(out, "1 in-model rows left out") != NULL, "in-model rows left out by default:\n%s", out);
    EXPECT(strstr(out, "rows compared: 3 SLOWER, 1 FASTER, 5 SAME") != NULL, "summary:\n%s", out);
    o.inmodel = true;
    compare_text(base, new_, &o, out, sizeof out);
    EXPECT(line_has(out, "inmodel", "SLOWER"), "--inmodel compares them");
    o.inmodel = false;
    o.markdown = true;
    compare_text(base, new_, &o, out, sizeof out);
    EXPECT(strstr(out, "| Backend | Mode | Batch | Dtype | Layer |") && strstr(out, "**SLOWER**"), "markdown:\n%s", out);
    o.markdown = false;
    EXPECT(compare_text(base, base, &o, out, sizeof out) == 0 && strstr(out, "0 SLOWER, 0 FASTER, 10 SAME"),
           "a file against itself:\n%s", out);
    EXPECT(compare_verdict_of(100, 0, 0, 0, 110, 0, 0, 0, 0.05) == VERDICT_SLOWER &&
               compare_verdict_of(100, 0, 0, 0, 104, 0, 0, 0, 0.05) == VERDICT_SAME,
           "medians alone where no interval is known");
    /* found by fuzzing: an interval that does not hold its median must not make a
     * file SLOWER than itself */
    const char *odd = CMP_HEAD "m,cpu,warm,1,x,relu,ok,1.5,174,1.6,2\nm,cpu,warm,1,y,relu,ok,nan,1,2,inf\n";
    EXPECT(compare_text(odd, odd, &o, out, sizeof out) == 0 && strstr(out, "1 SAME"), "odd values:\n%s", out);
    const char *not_results = "a,b\n1,2\n";
    EXPECT(compare_text(not_results, base, &o, out, sizeof out) == 2, "a CSV that is not a results CSV");
}

/* The module hierarchy from names, and the block roll-up: totals are the sums of the
 * layers inside, self times of the layers directly in a block. */
static void test_blocks(void)
{
    model *m = load("name: b\ninput: [4]\nlayers:\n"
                    "  - {kind: relu, name: stem}\n"
                    "  - kind: block\n    name: layer1\n    layers:\n"
                    "      - kind: block\n        name: '0'\n        layers: [{kind: relu, name: a}, {kind: relu, name: b}]\n"
                    "      - {kind: relu, name: c}\n"
                    "      - kind: block\n        name: '1'\n        layers: [{kind: relu, name: a}]\n"
                    "  - {kind: relu, name: head}\n");
    if (!m)
        return;
    model_blocks mb;
    model_blocks_build(m, &mb);
    /* b; layer1; layer1.0; layer1.1 */
    EXPECT(mb.n_blocks == 4, "%d blocks", mb.n_blocks);
    if (mb.n_blocks == 4) {
        EXPECT(!strcmp(mb.blocks[0].name, "b") && mb.blocks[0].n_layers == 6 && mb.blocks[0].depth == 0, "model block");
        EXPECT(!strcmp(mb.blocks[1].name, "layer1") && mb.blocks[1].n_layers == 4 && mb.blocks[1].first == 1 &&
                   mb.blocks[1].last == 4 && mb.blocks[1].parent == 0,
               "layer1: %s %d layers, %d..%d", mb.blocks[1].name, mb.blocks[1].n_layers, mb.blocks[1].first,
               mb.blocks[1].last);
        EXPECT(!strcmp(mb.blocks[2].name, "layer1.0") && mb.blocks[2].parent == 1 && mb.blocks[2].depth == 2 &&
                   mb.blocks[2].n_layers == 2,
               "layer1.0");
        EXPECT(!strcmp(mb.blocks[3].name, "layer1.1") && mb.blocks[3].first == 4, "layer1.1");
        EXPECT(mb.layer_block[0] == 0 && mb.layer_block[1] == 2 && mb.layer_block[3] == 1 && mb.layer_block[5] == 0,
               "layers' blocks");
        EXPECT(!strcmp(block_leaf_name(m->layers[4].name), "a"), "leaf of %s", m->layers[4].name);
        run_result r = {.m = m, .backend = "cpu", .mode = MODE_WARM, .threads = 1};
        r.layers = xcalloc((size_t)m->n_layers, sizeof *r.layers);
        r.inmodel = xcalloc((size_t)m->n_layers, sizeof *r.inmodel);
        for (int i = 0; i < m->n_layers; i++) { /* layer i takes (i + 1) us alone, 2 (i + 1) inside */
            double x = 1e-6 * (i + 1), y = 2 * x;
            r.layers[i] = (layer_result){.status = ROW_OK, .dedupe_of = -1, .launches = 1, .st = stats_compute(&x, 1)};
            r.inmodel[i] = (layer_result){.status = ROW_OK, .dedupe_of = -1, .launches = 1, .st = stats_compute(&y, 1)};
        }
        r.layers[3].status = ROW_FAILED; /* c: not counted */
        double total[4], self[4], inm[4];
        report_block_times(&r, &mb, total, self, inm);
        /* stem 1, layer1.0.a 2, layer1.0.b 3, layer1.c 4 (failed), layer1.1.a 5, head 6 */
        EXPECT(fabs(total[0] - 17e-6) < 1e-12 && fabs(self[0] - 7e-6) < 1e-12, "model: %g total, %g self", total[0],
               self[0]);
        EXPECT(fabs(total[1] - 10e-6) < 1e-12 && self[1] == 0, "layer1: %g total, %g self", total[1], self[1]);
        EXPECT(fabs(total[2] - 5e-6) < 1e-12 && fabs(self[2] - 5e-6) < 1e-12, "layer1.0: %g", total[2]);
        EXPECT(fabs(total[3] - 5e-6) < 1e-12, "layer1.1: %g", total[3]);
        EXPECT(fabs(inm[1] - 28e-6) < 1e-12 && fabs(inm[0] - 42e-6) < 1e-12, "in-model: layer1 %g, model %g", inm[1],
               inm[0]);
        free(r.layers), free(r.inmodel);
    }
    model_blocks_free(&mb);
    model_free(m);
}

/* The roofline: memory-, cache- or compute-bound by intensity against the balance, and
 * the percent of the roof. */
static void test_roofline(void)
{
    backend_peaks pk = {.flops_per_s = 100e9, .bytes_per_s = 10e9, .cache_bytes_per_s = 50e9, .cache_bytes = 1 << 20};
    double pct;
    const char *bound;
    /* 1 FLOP/byte, 100 MB in 20 ms: 5 GB/s of 10, memory-bound (balance 10) */
    EXPECT(report_roofline(100000000, 100000000, 0.02, false, &pk, DTYPE_FP32, &pct, &bound) && !strcmp(bound, "memory") &&
               fabs(pct - 50) < 1e-9,
           "memory: %s %g", bound, pct);
    /* 1 MB that the caches hold, run warm: against 50 GB/s; cold: against memory */
    EXPECT(report_roofline(0, 1000000, 1e-4, false, &pk, DTYPE_FP32, &pct, &bound) && !strcmp(bound, "cache") && fabs(pct - 20) < 1e-9,
           "cache: %s %g", bound, pct);
    EXPECT(report_roofline(0, 1000000, 1e-4, true, &pk, DTYPE_FP32, &pct, &bound) && !strcmp(bound, "memory") &&
               fabs(pct - 100) < 1e-9,
           "cold: %s %g", bound, pct);
    /* 100 FLOP/byte: 80 GFLOP in 1 s is 80% of the compute roof */
    EXPECT(report_roofline(80000000000, 800000000, 1.0, false, &pk, DTYPE_FP32, &pct, &bound) && !strcmp(bound, "compute") &&
               fabs(pct - 80) < 1e-9,
           "compute: %s %g", bound, pct);
    /* a bf16 row sits under the bf16 roof where one was measured: 80 GFLOP/s is 40% of
     * 200; an fp16 row, with no roof of its own, under the fp32 one */
    pk.dtype_flops_per_s[DTYPE_BF16] = 200e9;
    EXPECT(report_roofline(80000000000, 800000000, 1.0, false, &pk, DTYPE_BF16, &pct, &bound) &&
               !strcmp(bound, "compute") && fabs(pct - 40) < 1e-9,
           "bf16 compute: %s %g", bound, pct);
    EXPECT(report_roofline(80000000000, 800000000, 1.0, false, &pk, DTYPE_FP16, &pct, &bound) && fabs(pct - 80) < 1e-9,
           "fp16 under the fp32 roof: %g", pct);
    /* the balance moves with the roof: 15 FLOP/byte is compute-bound under fp32's 10, memory-bound under bf16's 20 */
    EXPECT(report_roofline(15000000, 1000000, 1.0, true, &pk, DTYPE_FP32, &pct, &bound) && !strcmp(bound, "compute") &&
               report_roofline(15000000, 1000000, 1.0, true, &pk, DTYPE_BF16, &pct, &bound) && !strcmp(bound, "memory"),
           "balance per dtype");
    backend_peaks none = {0};
    EXPECT(!report_roofline(1, 1, 1.0, false, &none, DTYPE_FP32, &pct, &bound) && !report_roofline(1, 0, 1.0, false, &pk, DTYPE_FP32, &pct, &bound),
           "unknown without peaks or bytes");
}

/* Tables: text pads and truncates, markdown escapes '|' and aligns numbers right. */
static void test_tables(void)
{
    table *t = table_create(3, "lrl");
    table_header(t, 0, "Name", 5);
    table_header(t, 1, "Time", 0);
    table_header(t, 2, "Note", 0);
    const char *r1[] = {"conv1", "1.5 us", "a|b"};
    table_row(t, r1);
    table_cell(t, "%s", "layer1.0.conv1");
    table_cell(t, "%d us", 12);
    table_end_row(t);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    table_print(t, f, TABLE_TEXT, "");
    fclose(f);
    EXPECT(strcmp(buf, "Name     Time  Note\nconv1  1.5 us  a|b\nlayer   12 us\n") == 0, "text:\n%s", buf);
    free(buf);
    f = open_memstream(&buf, &len);
    table_print(t, f, TABLE_MD, "");
    fclose(f);
    EXPECT(strcmp(buf, "\n| Name | Time | Note |\n| --- | ---: | --- |\n| conv1 | 1.5 us | a\\|b |\n"
                       "| layer1.0.conv1 | 12 us |  |\n") == 0,
           "markdown:\n%s", buf);
    free(buf);
    table_free(t);
    table_format fm;
    EXPECT(table_format_parse("md", &fm) && fm == TABLE_MD && !table_format_parse("html", &fm), "format names");
    unsigned g;
    EXPECT(report_groups_parse("kind,block", &g) && g == (REPORT_GROUP_SET | REPORT_GROUP_KIND | REPORT_GROUP_BLOCK),
           "groups %u", g);
    EXPECT(report_groups_parse("none", &g) && g == REPORT_GROUP_SET && !report_groups_parse("shape,layer", &g) &&
               !report_groups_parse("", &g),
           "group names");
}

int main(void)
{
    test_csv_read();
    test_tables();
    test_roofline();
    test_compare();
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_formula_cells();
    test_blocks();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return test_summary("test_report");
}
