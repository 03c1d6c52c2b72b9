/* libFuzzer target: a safetensors header checked against the layers of a small decoder
 * (bench/cfg/safetensors.c). The input's first 8 bytes are the data's length after the header
 * (little-endian), the rest the header's JSON. Any input must be either accepted or
 * refused with an error naming the file; a crash, a sanitizer report or a hang is a
 * finding. Built by scripts/fuzz.sh (clang, -DLAYERBENCH_FUZZ=ON). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cfg.h"
#include "safetensors.h"

/* tests/data/hf/tiny-llama's shape, smaller: the tensors a header may name */
static const char decoder[] =
    "{\"model_type\": \"llama\", \"hidden_size\": 16, \"intermediate_size\": 32, \"num_attention_heads\": 2, "
    "\"num_key_value_heads\": 1, \"num_hidden_layers\": 2, \"vocab_size\": 64, \"max_position_embeddings\": 64, "
    "\"tie_word_embeddings\": false}";

static model *m;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[1024] = "";
    if (!m && cfg_load_hf_text("config.json", decoder, strlen(decoder), 1, (cfg_shape){4, -1}, &m, err, sizeof err) !=
                  BENCH_OK) {
        fprintf(stderr, "the target's own decoder is refused: %s\n", err);
        abort();
    }
    if (size < 8)
        return 0;
    uint64_t data_len = 0;
    for (int k = 7; k >= 0; k--)
        data_len = data_len << 8 | data[k];
    /* every storage the checks know: fp8 block scales, MXFP4 names, a layer not built */
    static const safetensors_storage st = {{128, 64}, true, 2, 1};
    if (safetensors_check_header("model.safetensors", (const char *)data + 8, size - 8, (int64_t)(data_len >> 1), m,
                                 &st, err, sizeof err) != BENCH_OK &&
        strncmp(err, "./model.safetensors: ", 21) != 0) {
        fprintf(stderr, "an error that does not name the file: '%s'\n", err);
        abort();
    }
    return 0;
}
