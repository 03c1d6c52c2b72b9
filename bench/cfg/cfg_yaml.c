/* Typing YAML: scalars into integers, pairs, booleans, numbers, enums and names, and a
 * layer's parameters by its kind's specs, each error at the node's file:line:col with
 * what was expected (and the nearest known key for an unknown one). */
#include "cfg_internal.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int cfg_fail_at(cfg_ctx *c, yaml_mark_t mark, const char *fmt, ...)
{
    int off = snprintf(c->err, c->errlen, "%s:%zu:%zu: ", c->path, mark.line + 1, mark.column + 1);
    va_list ap;
    va_start(ap, fmt);
    if (off >= 0 && (size_t)off < c->errlen)
        vsnprintf(c->err + off, c->errlen - (size_t)off, fmt, ap);
    va_end(ap);
    return -1;
}

const char *cfg_node_type_name(const yaml_node_t *n)
{
    switch (n->type) {
    case YAML_SCALAR_NODE: return "a scalar";
    case YAML_SEQUENCE_NODE: return "a list";
    case YAML_MAPPING_NODE: return "a mapping";
    default: return "nothing";
    }
}

const char *cfg_scalar(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }

/* A scalar written without quotes: numbers and booleans must be plain. */
static bool is_plain(const yaml_node_t *n)
{
    return n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

/* Walks the whole tree once: a node reached twice came through an alias (which
 * could also form a cycle), and deep nesting is refused before we recurse on it. */
int cfg_check_tree(cfg_ctx *c, int idx, int depth)
{
    yaml_node_t *n = NODE(c, idx);
    if (depth > CFG_MAX_DEPTH)
        return fail(c, n, "nesting is deeper than %d levels", CFG_MAX_DEPTH);
    if (c->seen[idx])
        return fail(c, n, "this node is reused through an alias; anchors and aliases are not supported (use 'repeat')");
    c->seen[idx] = 1;
    /* a "\0" escape in a quoted scalar: every string function would stop there and read
     * "a\0garbage" as "a" */
    if (n->type == YAML_SCALAR_NODE && memchr(n->data.scalar.value, 0, n->data.scalar.length))
        return fail(c, n, "a NUL character (\\0) in a value");
    if (n->type == YAML_SEQUENCE_NODE) {
        for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++)
            if (cfg_check_tree(c, *it, depth + 1))
                return -1;
    } else if (n->type == YAML_MAPPING_NODE) {
        if (n->data.mapping.pairs.top - n->data.mapping.pairs.start > 256)
            return fail(c, n, "a mapping with more than 256 keys");
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
            yaml_node_t *k = NODE(c, p->key);
            if (k->type != YAML_SCALAR_NODE)
                return fail(c, k, "mapping keys must be plain names, got %s", cfg_node_type_name(k));
            for (yaml_node_pair_t *q = n->data.mapping.pairs.start; q < p; q++)
                if (strcmp(cfg_scalar(NODE(c, q->key)), cfg_scalar(k)) == 0)
                    return fail(c, k, "duplicate key '%s'", cfg_scalar(k));
            if (cfg_check_tree(c, p->key, depth + 1) || cfg_check_tree(c, p->value, depth + 1))
                return -1;
        }
    }
    return 0;
}

/* ---- scalar values ---------------------------------------------------------------- */

int cfg_parse_int(cfg_ctx *c, const char *key, yaml_node_t *n, int64_t min, int64_t *out)
{
    const char *s = is_plain(n) ? cfg_scalar(n) : NULL;
    char *end;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || !*s || *end || errno)
        return fail(c, n, "%s: expected an integer, got %s%s%s", key, s ? "'" : cfg_node_type_name(n),
                    s ? s : "", s ? "'" : "");
    if (v < min)
        return fail(c, n, "%s must be at least %lld, got %lld", key, (long long)min, v);
    if (v > INT32_MAX)
        return fail(c, n, "%s is too large: %lld (at most %d)", key, v, INT32_MAX);
    *out = v;
    return 0;
}

static int parse_pair(cfg_ctx *c, const char *key, yaml_node_t *n, int64_t min, int64_t out[2])
{
    if (n->type != YAML_SEQUENCE_NODE) {
        if (!is_plain(n))
            return fail(c, n, "%s: expected an integer or an [h, w] pair, got %s", key, cfg_node_type_name(n));
        if (cfg_parse_int(c, key, n, min, &out[0]))
            return -1;
        out[1] = out[0];
        return 0;
    }
    yaml_node_item_t *it = n->data.sequence.items.start;
    if (n->data.sequence.items.top - it != 2)
        return fail(c, n, "%s: expected an [h, w] pair of 2 integers, got %d items", key,
                    (int)(n->data.sequence.items.top - it));
    return cfg_parse_int(c, key, NODE(c, it[0]), min, &out[0]) || cfg_parse_int(c, key, NODE(c, it[1]), min, &out[1])
               ? -1 : 0;
}

/* A list of 1 to most items (what: "dims such as [0, 2, 3, 1]"): its items and their
 * count in *count, or NULL after an error. */
static yaml_node_item_t *list_items(cfg_ctx *c, const char *key, yaml_node_t *n, int64_t most, const char *what,
                                    int64_t *count)
{
    if (n->type != YAML_SEQUENCE_NODE)
        return fail(c, n, "%s: expected a list of %s, got %s", key, what, is_plain(n) ? "a scalar" : cfg_node_type_name(n)),
               NULL;
    *count = n->data.sequence.items.top - n->data.sequence.items.start;
    if (*count < 1 || *count > most)
        return fail(c, n, "%s: expected 1 to %lld items, got %lld", key, (long long)most, (long long)*count), NULL;
    return n->data.sequence.items.start;
}

/* [d0, d1, ...] of 1 to SHAPE_MAX_RANK integers into out[1..], their count into out[0] */
static int parse_dims(cfg_ctx *c, const char *key, yaml_node_t *n, int64_t min, int64_t *out)
{
    int64_t count;
    yaml_node_item_t *it = list_items(c, key, n, SHAPE_MAX_RANK, "dims such as [0, 2, 3, 1]", &count);
    if (!it)
        return -1;
    out[0] = count;
    for (int64_t k = 0; k < count; k++)
        if (cfg_parse_int(c, key, NODE(c, it[k]), min, &out[1 + k]))
            return -1;
    return 0;
}

int cfg_parse_bool(cfg_ctx *c, const char *key, yaml_node_t *n, bool *out)
{
    static const char *yes[] = {"true", "True", "TRUE"}, *no[] = {"false", "False", "FALSE"};
    for (int i = 0; is_plain(n) && i < 3; i++) {
        if (strcmp(cfg_scalar(n), yes[i]) == 0)
            return *out = true, 0;
        if (strcmp(cfg_scalar(n), no[i]) == 0)
            return *out = false, 0;
    }
    return fail(c, n, "%s: expected true or false, got %s%s%s", key, is_plain(n) ? "'" : cfg_node_type_name(n),
                is_plain(n) ? cfg_scalar(n) : "", is_plain(n) ? "'" : "");
}

/* A finite number, not negative unless min is INT64_MIN (LP_FLOAT's min, layer.h). */
static int parse_float(cfg_ctx *c, const char *key, yaml_node_t *n, int64_t min, double *out)
{
    const char *s = is_plain(n) ? cfg_scalar(n) : NULL;
    char *end;
    double v = s ? strtod(s, &end) : 0;
    if (!s || !*s || *end || !isfinite(v))
        return fail(c, n, "%s: expected a number, got %s%s%s", key, s ? "'" : cfg_node_type_name(n), s ? s : "",
                    s ? "'" : "");
    if (v < 0 && min != INT64_MIN)
        return fail(c, n, "%s must not be negative, got %g", key, v);
    *out = v;
    return 0;
}

/* A list of numbers above 0 (LP_FLOATS), each stored as a float. */
static int parse_floats(cfg_ctx *c, const char *key, yaml_node_t *n, layer_floats *out)
{
    int64_t count;
    yaml_node_item_t *it = list_items(c, key, n, LAYER_MAX_FLOATS, "numbers such as [1.0, 1.5]", &count);
    if (!it)
        return -1;
    out->n = count;
    for (int64_t k = 0; k < count; k++) {
        double v;
        yaml_node_t *x = NODE(c, it[k]);
        if (parse_float(c, key, x, 0, &v))
            return -1;
        if (!(v >= 1e-30) || v > 1e30) /* a float holds it, and 1 / it, as a normal number */
            return fail(c, x, "%s: expected numbers from 1e-30 to 1e30, got %g", key, v);
        out->v[k] = (float)v;
    }
    return 0;
}

/* A scalar's bytes: its length, which can hold a NUL ("\0" in a quoted scalar). */
size_t cfg_scalar_len(const yaml_node_t *n) { return n->data.scalar.length; }

/* Layer names are what torch's module paths hold: letters, digits and '_' (attribute
 * names, or a Sequential's positions). Nothing else reaches the CSV, so no cell of it
 * can start a spreadsheet formula. */
/* A number > 0, or an [h, w] pair of them. */
static int parse_fpair(cfg_ctx *c, const char *key, yaml_node_t *n, double out[2])
{
    yaml_node_t *v[2] = {n, n};
    if (n->type == YAML_SEQUENCE_NODE) {
        yaml_node_item_t *it = n->data.sequence.items.start;
        if (n->data.sequence.items.top - it != 2)
            return fail(c, n, "%s: expected a number or an [h, w] pair of numbers, got %d items", key,
                        (int)(n->data.sequence.items.top - it));
        v[0] = NODE(c, it[0]), v[1] = NODE(c, it[1]);
    }
    for (int i = 0; i < 2; i++) {
        if (parse_float(c, key, v[i], 0, &out[i]))
            return -1;
        if (!(out[i] > 0) || out[i] > 1e6)
            return fail(c, v[i], "%s must be above 0 and at most 1e6, got %g", key, out[i]);
    }
    return 0;
}

/* One of choices (NULL-terminated), stored as its index. */
int cfg_parse_enum(cfg_ctx *c, const char *key, yaml_node_t *n, const char *const *choices, int64_t *out)
{
    char list[256] = "";
    size_t off = 0;
    for (int i = 0; choices[i]; i++) {
        if (n->type == YAML_SCALAR_NODE && strcmp(cfg_scalar(n), choices[i]) == 0)
            return *out = i, 0;
        off += (size_t)snprintf(list + off, off < sizeof list ? sizeof list - off : 0, "%s%s", i ? ", " : "",
                                choices[i]);
    }
    return fail(c, n, "%s: expected one of %s, got %s%s%s", key, list, n->type == YAML_SCALAR_NODE ? "'" : "",
                n->type == YAML_SCALAR_NODE ? cfg_scalar(n) : cfg_node_type_name(n), n->type == YAML_SCALAR_NODE ? "'" : "");
}

int cfg_parse_dtype(cfg_ctx *c, yaml_node_t *n, dtype_t *out)
{
    int t = n->type == YAML_SCALAR_NODE ? dtype_from_name(cfg_scalar(n)) : -1;
    if (t < 0)
        return fail(c, n, "dtype: expected one of %s (or torch's float32, bfloat16, float16), got %s%s%s", dtype_list(),
                    n->type == YAML_SCALAR_NODE ? "'" : "",
                    n->type == YAML_SCALAR_NODE ? cfg_scalar(n) : cfg_node_type_name(n),
                    n->type == YAML_SCALAR_NODE ? "'" : "");
    *out = (dtype_t)t;
    return 0;
}

int cfg_parse_name(cfg_ctx *c, const char *key, yaml_node_t *n, const char **out)
{
    if (n->type != YAML_SCALAR_NODE || !*cfg_scalar(n))
        return fail(c, n, "%s: expected a non-empty string, got %s", key, cfg_node_type_name(n));
    const char *v = cfg_scalar(n);
    if (cfg_scalar_len(n) > CFG_MAX_NAME)
        return fail(c, n, "%s: %zu characters, more than the %d a name may have", key, cfg_scalar_len(n), CFG_MAX_NAME);
    if (strchr(v, '.'))
        return fail(c, n, "%s: '%s' must not contain '.', which separates qualified names", key, v);
    /* '-' inside a name (torchvision's RegNet: block1-0), never first: a CSV cell that
     * begins with it is a spreadsheet formula */
    for (size_t i = 0; i < cfg_scalar_len(n); i++)
        if (!(isalnum((unsigned char)v[i]) || v[i] == '_' || (v[i] == '-' && i > 0)))
            return fail(c, n, "%s: use letters, digits, '_' and '-' (not first) only, as torch module names do; got %s",
                        key, !v[i] ? "a NUL character" : v[i] == '-' ? "'-' first" : "other characters");
    *out = v;
    return 0;
}

/* ---- keys ----------------------------------------------------------------------------- */

static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[64];
    if (la >= 63 || lb >= 63)
        return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t prev = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t cur = row[j];
            size_t best = prev + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            prev = cur;
        }
    }
    return row[lb];
}

/* "unknown key 'kernal_size' for conv2d (did you mean 'kernel_size'?); expected one of: ..." */
static int fail_unknown(cfg_ctx *c, yaml_node_t *key, const char *what, const char *const *known, int n)
{
    char list[512] = "", hint[96] = "";
    size_t off = 0, best = 3;
    for (int i = 0; i < n; i++) {
        off += (size_t)snprintf(list + off, off < sizeof list ? sizeof list - off : 0, "%s%s", i ? ", " : "", known[i]);
        size_t d = edit_distance(cfg_scalar(key), known[i]);
        if (d < best) {
            best = d;
            snprintf(hint, sizeof hint, " (did you mean '%s'?)", known[i]);
        }
    }
    return fail(c, key, "unknown key '%s' for %s%s; expected one of: %s", cfg_scalar(key), what, hint, list);
}

/* Looks key up in a mapping; NULL if absent. */
yaml_node_t *cfg_map_get(cfg_ctx *c, yaml_node_t *map, const char *key)
{
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++)
        if (strcmp(cfg_scalar(NODE(c, p->key)), key) == 0)
            return NODE(c, p->value);
    return NULL;
}

/* Every key of map must be in known[]. */
int cfg_check_keys(cfg_ctx *c, yaml_node_t *map, const char *what, const char *const *known, int n)
{
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = NODE(c, p->key);
        int i = 0;
        while (i < n && strcmp(known[i], cfg_scalar(k)) != 0)
            i++;
        if (i == n)
            return fail_unknown(c, k, what, known, n);
    }
    return 0;
}

yaml_node_t *cfg_need_seq(cfg_ctx *c, yaml_node_t *map, const char *key, const char *owner)
{
    yaml_node_t *n = cfg_map_get(c, map, key);
    if (!n)
        fail(c, map, "%s: missing required key '%s'", owner, key);
    else if (n->type != YAML_SEQUENCE_NODE)
        fail(c, n, "%s: expected a list of layers, got %s", key, cfg_node_type_name(n));
    else
        return n;
    return NULL;
}

/* Parses a plain layer's parameters from its mapping. */
int cfg_parse_params(cfg_ctx *c, yaml_node_t *item, layer_kind kind, layer_params *p)
{
    const layer_desc *d = layer_desc_get(kind);
    const char *known[32] = {"kind", "name", "repeat", "input", "inputs", "dtype", "requires_grad"};
    int nk = 7;
    for (const layer_param_spec *s = d->params; s->key; s++)
        known[nk++] = s->key;
    if (cfg_check_keys(c, item, d->name, known, nk))
        return -1;
    memset(p, 0, sizeof *p);
    if (d->defaults)
        d->defaults(p);
    for (const layer_param_spec *s = d->params; s->key; s++) {
        yaml_node_t *v = cfg_map_get(c, item, s->key);
        char *field = (char *)p + s->offset;
        if (!v) {
            if (s->required)
                return fail(c, item, "%s: missing required key '%s'", d->name, s->key);
            continue;
        }
        int r = s->type == LP_INT    ? cfg_parse_int(c, s->key, v, s->min, (int64_t *)field)
                : s->type == LP_PAIR ? parse_pair(c, s->key, v, s->min, (int64_t *)field)
                : s->type == LP_BOOL ? cfg_parse_bool(c, s->key, v, (bool *)field)
                : s->type == LP_FPAIR ? parse_fpair(c, s->key, v, (double *)field)
                : s->type == LP_ENUM  ? cfg_parse_enum(c, s->key, v, s->choices, (int64_t *)field)
                : s->type == LP_DIMS  ? parse_dims(c, s->key, v, s->min, (int64_t *)field)
                : s->type == LP_FLOATS ? parse_floats(c, s->key, v, (layer_floats *)field)
                                      : parse_float(c, s->key, v, s->min, (double *)field);
        if (r)
            return -1;
    }
    return 0;
}

/* Streams the events once before loading the tree: nesting deeper than CFG_MAX_DEPTH
 * is found as soon as it is seen (libyaml's scanner slows down quadratically with
 * depth, so a hostile file must not reach the loader). Syntax errors are left to the
 * loader, which reports them. */
bool cfg_yaml_too_deep(const char *text, size_t len, yaml_mark_t *at)
{
    yaml_parser_t p;
    yaml_event_t ev;
    int depth = 0;
    bool deep = false;
    if (!yaml_parser_initialize(&p))
        return false;
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    while (!deep && yaml_parser_parse(&p, &ev)) {
        yaml_event_type_t t = ev.type;
        if (t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT)
            deep = ++depth > CFG_MAX_DEPTH, *at = ev.start_mark;
        else if (t == YAML_SEQUENCE_END_EVENT || t == YAML_MAPPING_END_EVENT)
            depth--;
        yaml_event_delete(&ev);
        if (t == YAML_STREAM_END_EVENT)
            break;
    }
    yaml_parser_delete(&p);
    return deep;
}
