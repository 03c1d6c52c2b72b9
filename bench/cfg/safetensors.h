/* The safetensors files beside a Hugging Face config.json, headers only (an 8-byte
 * little-endian length, then that many bytes of JSON: each tensor's dtype, shape and byte
 * range), checked against the layers built from the config: every tensor the layers hold
 * is there with their shape, and nothing else is. The weights themselves are never read. */
#ifndef LAYERBENCH_SAFETENSORS_H
#define LAYERBENCH_SAFETENSORS_H

#include <stddef.h>

#include "model.h"
#include "util.h"

/* Largest header read (the format's own limit is 100 MB). */
#define SAFETENSORS_MAX_HEADER (100 << 20)

/* How config.json says the checkpoint stores its weights, beyond one tensor per layer
 * weight: DeepSeek-V3's (and Kimi K2's) fp8, each quantized weight W with a float32
 * W_scale_inv of one scale per fp8_block[0] x fp8_block[1] block beside it
 * (quantization_config quant_method fp8, weight_block_size); gpt-oss's MXFP4 experts,
 * gate_up_proj and down_proj [E, in, out] stored as X_blocks [E, out, in / 32, 16] and
 * X_scales [E, out, in / 32], both U8 (quant_method mxfp4); and layers after the forward's
 * that no layer holds (DeepSeek-V3's multi-token-prediction layers model.layers.N, N from
 * extra_first, num_nextn_predict_layers of them). All zero: none of these. */
typedef struct safetensors_storage {
    int64_t fp8_block[2];
    bool mxfp4;
    int64_t extra_first, extra_layers;
} safetensors_storage;

/* Checks dir/model.safetensors.index.json and the shards it names, or else
 * dir/model.safetensors, against m (built from dir/config.json, its layers' names those
 * of the checkpoint's modules). BENCH_OK with a one-line summary in note ("" where there
 * is no safetensors file); otherwise BENCH_ERR_USAGE with "file: what is wrong" in err
 * (a tensor missing, one the layers do not have, a shape that differs, a header that is
 * not safetensors). st: how config.json says the weights are stored (NULL: as the layers). */
bench_status safetensors_check(const char *dir, const model *m, const safetensors_storage *st, char *note,
                               size_t notelen, char *err, size_t errlen);

/* One file's header, its n bytes of JSON (name for messages), in a file with data_len
 * bytes of data after it: checked as safetensors_check checks each file's (well formed, no
 * overlapping data, the names and shapes of m's layers), without the check that every
 * tensor is there. The fuzz target's entry. */
bench_status safetensors_check_header(const char *name, const char *text, size_t n, int64_t data_len, const model *m,
                                      const safetensors_storage *st, char *err, size_t errlen);

#endif
