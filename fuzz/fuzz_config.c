/* libFuzzer target: the config loader and the model analysis behind `bench list`.
 * Any input must give either a model whose every count, shape and report can be
 * computed, or an error that names the config ("fuzz.yaml:line:col: ..." or
 * "fuzz.yaml: ..."); a crash, a sanitizer report, a hang or an error without its
 * place is a finding. Built by scripts/fuzz.sh (clang, -DLAYERBENCH_FUZZ=ON). */
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
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;
    model *m = NULL;
    char err[1024] = "";
    if (cfg_load_text("fuzz.yaml", text, size, 0, &m, err, sizeof err) == BENCH_OK) {
        model_sum(m);
        model_memory_bytes(m);
        report_list_table(sink, m, TABLE_TEXT);
        report_list_table(sink, m, TABLE_MD);
        const int64_t batches[] = {1, 3, 1 << 20, INT32_MAX};
        for (size_t i = 0; i < sizeof batches / sizeof *batches; i++)
            if (model_set_batch(m, batches[i], err, sizeof err) == BENCH_OK)
                report_list_table(sink, m, (table_format)(i % 2));
        model_free(m);
    } else if (strncmp(err, "fuzz.yaml:", 10) != 0) {
        fprintf(stderr, "an error that does not name the config: '%s'\n", err);
        abort();
    }
    free(text);
    return 0;
}
