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

/* Checks dir/model.safetensors.index.json and the shards it names, or else
 * dir/model.safetensors, against m (built from dir/config.json, its layers' names those
 * of the checkpoint's modules). BENCH_OK with a one-line summary in note ("" where there
 * is no safetensors file); otherwise BENCH_ERR_USAGE with "file: what is wrong" in err
 * (a tensor missing, one the layers do not have, a shape that differs, a header that is
 * not safetensors). */
bench_status safetensors_check(const char *dir, const model *m, char *note, size_t notelen, char *err,
                               size_t errlen);

/* One file's header, its n bytes of JSON (name for messages), in a file with data_len
 * bytes of data after it: checked as safetensors_check checks each file's (well formed, no
 * overlapping data, the names and shapes of m's layers), without the check that every
 * tensor is there. The fuzz target's entry. */
bench_status safetensors_check_header(const char *name, const char *text, size_t n, int64_t data_len, const model *m,
                                      char *err, size_t errlen);

#endif
