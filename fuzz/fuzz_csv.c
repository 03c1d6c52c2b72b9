/* libFuzzer target: the CSV reader and `bench compare` (what reads results files).
 * Any input must parse or fail with "name:line: ..."; a parsed table is compared with
 * itself (every row SAME, or a clean refusal of a table that is not a results CSV).
 * Built by scripts/fuzz.sh (clang, -DLAYERBENCH_FUZZ=ON). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compare.h"
#include "csv_read.h"

static FILE *sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!sink)
        sink = fopen("/dev/null", "w");
    csv_table t;
    char err[512] = "";
    if (csv_parse("fuzz.csv", (const char *)data, size, &t, err, sizeof err) != BENCH_OK) {
        if (strncmp(err, "fuzz.csv:", 9) != 0) {
            fprintf(stderr, "an error that does not name the file: '%s'\n", err);
            abort();
        }
        return 0;
    }
    compare_options o = {COMPARE_DEFAULT_THRESHOLD, size % 2 == 0, size % 3 == 0, "fuzz", "fuzz"};
    int rc = compare_tables("a", &t, "b", &t, &o, sink);
    if (rc == 1) {
        fprintf(stderr, "a table compared with itself has a SLOWER row\n");
        abort();
    }
    csv_table_free(&t);
    return 0;
}
