/* What the config parser's files share, private to them: the parse's context (cfg.c reads
 * the file, cfg_yaml.c types YAML nodes, cfg_model.c builds the model from them). */
#ifndef LAYERBENCH_CFG_INTERNAL_H
#define LAYERBENCH_CFG_INTERNAL_H

#include <stdarg.h>
#include <yaml.h>

#include "cfg.h"

typedef struct cfg_ctx {
    const char *path;
    yaml_document_t doc;
    char *err;
    size_t errlen;
    unsigned char *seen;       /* per node: visited once already (catches aliases) */
    model *m;
    int cap;
    yaml_mark_t *marks;        /* per layer: where the config wrote it */
    int *names;                /* hash table of value ids (0: empty slot), by layer name */
    int names_cap, n_names;
    int dtype;                 /* the dtype of the block being read (-1: the model-wide one) */
    bool frozen;               /* the item being read says requires_grad: false (or one around it does) */
    cfg_shape shape;           /* the command line's token shape */
    int n_kv_layers;           /* rope, attention and mla layers read (what --kv-len sets) */
} cfg_ctx;

#define NODE(c, i) yaml_document_get_node(&(c)->doc, (i))

#define fail(c, node, ...) cfg_fail_at((c), (node)->start_mark, __VA_ARGS__)

int cfg_fail_at(cfg_ctx *c, yaml_mark_t mark, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

const char *cfg_node_type_name(const yaml_node_t *n);

const char *cfg_scalar(const yaml_node_t *n);

/* Walks the whole tree once: a node reached twice came through an alias (which
 * could also form a cycle), and deep nesting is refused before we recurse on it. */
int cfg_check_tree(cfg_ctx *c, int idx, int depth);

/* ---- scalar values ---------------------------------------------------------------- */

int cfg_parse_int(cfg_ctx *c, const char *key, yaml_node_t *n, int64_t min, int64_t *out);
/* A dtype by any of its names (dtype.h); the error lists the valid ones. */
int cfg_parse_dtype(cfg_ctx *c, yaml_node_t *n, dtype_t *out);
int cfg_parse_bool(cfg_ctx *c, const char *key, yaml_node_t *n, bool *out);

/* A scalar's bytes: its length, which can hold a NUL ("\0" in a quoted scalar). */
size_t cfg_scalar_len(const yaml_node_t *n);

/* One of choices (NULL-terminated), stored as its index. */
int cfg_parse_enum(cfg_ctx *c, const char *key, yaml_node_t *n, const char *const *choices, int64_t *out);

int cfg_parse_name(cfg_ctx *c, const char *key, yaml_node_t *n, const char **out);

/* Looks key up in a mapping; NULL if absent. */
yaml_node_t *cfg_map_get(cfg_ctx *c, yaml_node_t *map, const char *key);

/* Every key of map must be in known[]. */
int cfg_check_keys(cfg_ctx *c, yaml_node_t *map, const char *what, const char *const *known, int n);

yaml_node_t *cfg_need_seq(cfg_ctx *c, yaml_node_t *map, const char *key, const char *owner);

/* Parses a plain layer's parameters from its mapping. */
int cfg_parse_params(cfg_ctx *c, yaml_node_t *item, layer_kind kind, layer_params *p);

int cfg_parse_model(cfg_ctx *c, yaml_node_t *root, int64_t batch);

/* cfg_load_text_shaped without the size limit of a file a user wrote: for the YAML that
 * cfg_hf.c builds from a config.json (4096 decoder layers run past 1 MiB). */
bench_status cfg_load_built(const char *path, const char *text, size_t len, int64_t batch, cfg_shape shape,
                            model **out, char *err, size_t errlen);
/* Whether text nests deeper than CFG_MAX_DEPTH (at: where), found before a loader sees
 * it (cfg_yaml.c). */
bool cfg_yaml_too_deep(const char *text, size_t len, yaml_mark_t *at);
/* The model of a YAML document already in memory (the one cfg_family.c expands): doc is
 * taken (deleted, and zeroed); errors are placed by its nodes' marks under path
 * (cfg_model.c). */
bench_status cfg_build_document(const char *path, yaml_document_t *doc, int64_t batch, cfg_shape shape, model **out,
                                char *err, size_t errlen);

#endif
