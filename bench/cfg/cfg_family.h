/* Decoder families as descriptions, not code: each family a YAML file under
 * configs/hf/families/ that says which config.json model_type values it builds, which
 * fields it reads (their types, bounds and defaults), which fields it refuses (they would
 * change the model and are not built), the relations it checks, and its layers in the
 * config format of docs/config.md with ${expressions} (hf_expr.h) over those fields. The
 * files are built into the binary (cmake/embed_families.cmake); a folder named by
 * LAYERBENCH_HF_FAMILIES is read first, so a user adds a family without new C or a
 * rebuild. The layers are expanded into a YAML document in memory (no text is written and
 * read back) and built as any config is. docs/architecture.md, "Decoder families", says
 * how to write one. */
#ifndef LAYERBENCH_CFG_FAMILY_H
#define LAYERBENCH_CFG_FAMILY_H

#include <jansson.h>

#include "cfg.h"
#include "strbuf.h"

typedef struct hf_family_file {
    const char *path;  /* configs/hf/families/NAME.yaml */
    const char *text;
} hf_family_file;

/* The families built in, ending with {NULL, NULL} (generated at build time). */
extern const hf_family_file hf_families[];

/* A config.json read: its path for messages, its text to place them, its root object. */
typedef struct hf_source {
    const char *path;
    const char *text;   /* NUL-terminated */
    json_t *root;
    char *err;
    size_t errlen;
} hf_source;

/* "path:line:col: key: ..." at the key's first appearance in the file, or, where it is
 * not written (a missing field), at the object's opening brace. Returns -1. */
int hf_fail(const hf_source *s, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* What to build besides the config.json: the model's name, a prefill's tokens (0: the
 * default) and the cache (-1: none), the dtype a config.json's torch_dtype names (NULL:
 * fp32), the batch and the command line's shape. */
typedef struct hf_build {
    const char *name;
    int64_t tokens, kv_len;
    const char *dtype;
    int64_t batch;
    cfg_shape shape;
} hf_build;

/* Builds the decoder src describes with the family of its model_type. On success *out is
 * a new model (model_free); with emit, the expanded config is also appended to it as
 * YAML (bench list --emit-yaml). BENCH_ERR_USAGE with "path:line:col: what is wrong" in
 * src->err otherwise: a field of the config.json (its place in the file), or what was
 * built from it (the family file's place). */
bench_status cfg_family_build(const hf_source *src, const char *model_type, const hf_build *b, model **out,
                              strbuf *emit);

/* Whether the family of model_type judges field itself (its refuse section names it):
 * quantization_config, which every other family refuses (gpt-oss reads its MXFP4). */
bool cfg_family_judges(const char *model_type, const char *field);

/* "llama, mistral, qwen2 and mixtral" (last " and ") or "... or mixtral" (last " or "):
 * the model_type values the families build. */
void cfg_family_types(strbuf *out, const char *last);

#endif
