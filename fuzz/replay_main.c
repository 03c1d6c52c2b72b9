/* A main() for the libFuzzer targets when libFuzzer is not there: runs each file named
 * on the command line through LLVMFuzzerTestOneInput once. Every build compiles the
 * targets so (fuzz_config_replay, fuzz_csv_replay), and the test suite replays the seed
 * corpora through them (under the sanitizers too, by scripts/test_sanitizers.sh), so a
 * harness that no longer compiles or a seed that crashes is a failed test, not a
 * surprise in scripts/fuzz.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            perror(argv[i]);
            return 1;
        }
        size_t cap = 1 << 16, n = 0;
        uint8_t *buf = malloc(cap);
        for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
            n += r;
            if (n == cap) {
                uint8_t *nb = realloc(buf, cap *= 2);
                if (!nb)
                    free(buf);
                buf = nb;
            }
        }
        fclose(f);
        if (!buf) {
            fprintf(stderr, "%s: out of memory\n", argv[i]);
            return 1;
        }
        LLVMFuzzerTestOneInput(buf, n);
        free(buf);
    }
    printf("replayed %d inputs\n", argc - 1);
    return 0;
}
