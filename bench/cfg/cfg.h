/* Model configs: YAML in, a validated model out. The format is documented in
 * docs/config.md. Nothing here allocates tensor memory. */
#ifndef LAYERBENCH_CFG_H
#define LAYERBENCH_CFG_H

#include "model.h"
#include "strbuf.h"

/* A decoder's token shape from the command line (--tokens, --kv-len, --phase): tokens
 * per sequence, replacing a token-id input's [T] (0: the config's), and tokens already in
 * the KV cache, replacing kv_len on every rope, attention and mla layer (-1: the config's). */
typedef struct cfg_shape {
    int64_t tokens, kv_len;
} cfg_shape;
#define CFG_SHAPE_KEEP ((cfg_shape){0, -1})

/* Parses and validates the config at path. batch > 0 overrides the config's batch.
 * On success *out is a new model the caller frees with model_free(). On failure
 * *out is NULL, err holds "file:line:col: what is wrong" (or "file: ..." where no
 * position applies) and the status is BENCH_ERR_USAGE (or BENCH_ERR_IO when the
 * file cannot be read). */
bench_status cfg_load(const char *path, int64_t batch, model **out, char *err, size_t errlen);
/* ... at a token shape. path may also be a Hugging Face config.json, or the folder that
 * holds one (cfg_hf.c): a decoder built from it, by default 128 tokens and no cache. */
bench_status cfg_load_shaped(const char *path, int64_t batch, cfg_shape shape, model **out, char *err,
                             size_t errlen);
/* The same from text already in memory (len bytes; the fuzz target's entry); path only
 * names it in messages. */
bench_status cfg_load_text(const char *path, const char *text, size_t len, int64_t batch, model **out, char *err,
                           size_t errlen);
bench_status cfg_load_text_shaped(const char *path, const char *text, size_t len, int64_t batch, cfg_shape shape,
                                  model **out, char *err, size_t errlen);
/* A Hugging Face config.json (or its folder) as a decoder (cfg_hf.c); the same contract. */
bench_status cfg_load_hf(const char *path, int64_t batch, cfg_shape shape, model **out, char *err, size_t errlen);
/* ... with the config the family built appended to emit as YAML (bench list --emit-yaml;
 * emit may be NULL). */
bench_status cfg_load_hf_emit(const char *path, int64_t batch, cfg_shape shape, model **out, strbuf *emit,
                              char *err, size_t errlen);
/* ... from the config.json's text in memory (len bytes; file names it in messages; the fuzz
 * target's entry), without the safetensors check beside it. */
bench_status cfg_load_hf_text(const char *file, const char *text, size_t len, int64_t batch, cfg_shape shape,
                              model **out, char *err, size_t errlen);

/* Whether path is a Hugging Face config.json (a folder, or a *.json that starts as a JSON
 * object does) rather than a YAML config. */
bool cfg_is_hf(const char *path);

/* Largest config file accepted, and the structural limits that keep hostile files cheap. */
#define CFG_MAX_FILE_BYTES (1 << 20)
#define CFG_MAX_DEPTH 64
#define CFG_MAX_LAYERS 100000
/* A name's characters, and a qualified name's (block.sub.layer): torch's are tens; the
 * limits keep a hostile file's names (a long one times repeat) to megabytes. */
#define CFG_MAX_NAME 256
#define CFG_MAX_QUALIFIED 1024

#endif
