/* libFuzzer target: a Hugging Face config.json read as a decoder (bench/cfg/cfg_hf.c), and the
 * YAML it builds. Any input must give either a model whose counts and report can be
 * computed, or an error that names the file ("config.json:line:col: ..." or
 * "config.json: ..."); a crash, a sanitizer report, a hang or an error without its place
 * is a finding. Built by scripts/fuzz.sh (clang, -DLAYERBENCH_FUZZ=ON). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cfg.h"
#include "report.h"

static FILE *sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!sink)
        sink = fopen("/dev/null", "w");
    model *m = NULL;
    char err[1024] = "";
    /* a short prompt (the fuzzer need not reach 2048 layers to find a bug) */
    cfg_shape shape = {8, size % 3 == 0 ? 4 : -1};
    if (cfg_load_hf_text("config.json", (const char *)data, size, 1, shape, &m, err, sizeof err) == BENCH_OK) {
        model_sum(m);
        report_list_table(sink, m, TABLE_TEXT);
        model_free(m);
    } else if (strncmp(err, "config.json:", 12) != 0) {
        fprintf(stderr, "an error that does not name the file: '%s'\n", err);
        abort();
    }
    return 0;
}
