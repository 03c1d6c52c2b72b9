/* Model configs: YAML in, a validated model out. The format is documented in
 * docs/config.md. Nothing here allocates tensor memory. */
#ifndef LAYERBENCH_CFG_H
#define LAYERBENCH_CFG_H

#include "model.h"

/* Parses and validates the config at path. batch > 0 overrides the config's batch.
 * On success *out is a new model the caller frees with model_free(). On failure
 * *out is NULL, err holds "file:line:col: what is wrong" (or "file: ..." where no
 * position applies) and the status is BENCH_ERR_USAGE (or BENCH_ERR_IO when the
 * file cannot be read). */
bench_status cfg_load(const char *path, int64_t batch, model **out, char *err, size_t errlen);
/* The same from text already in memory (len bytes; the fuzz target's entry); path only
 * names it in messages. */
bench_status cfg_load_text(const char *path, const char *text, size_t len, int64_t batch, model **out, char *err,
                           size_t errlen);

/* Largest config file accepted, and the structural limits that keep hostile files cheap. */
#define CFG_MAX_FILE_BYTES (1 << 20)
#define CFG_MAX_DEPTH 64
#define CFG_MAX_LAYERS 100000

#endif
