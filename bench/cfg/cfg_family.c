#define _GNU_SOURCE
#include "cfg_family.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "cfg_internal.h"
#include "fileio.h"
#include "hf_expr.h"

/* The largest integer field read (sizes, counts): products of two stay far from int64's
 * end, and the config checks (2^40 elements a tensor) do the rest. */
#define FAMILY_MAX_INT (((int64_t)1 << 31) - 1)
/* The largest family file read from LAYERBENCH_HF_FAMILIES. */
#define FAMILY_MAX_BYTES ((size_t)1 << 20)

int hf_fail(const hf_source *s, const char *key, const char *fmt, ...)
{
    char quoted[96], msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(quoted, sizeof quoted, "\"%s\"", key);
    const char *at = s->text ? strstr(s->text, quoted) : NULL;
    if (!at)
        at = s->text ? strchr(s->text, '{') : NULL;
    if (!at) {
        snprintf(s->err, s->errlen, "%s: %s: %s", s->path, key, msg);
        return -1;
    }
    int line = 1, col = 1;
    for (const char *p = s->text; p < at; p++)
        line += *p == '\n', col = *p == '\n' ? 1 : col + 1;
    snprintf(s->err, s->errlen, "%s:%d:%d: %s: %s", s->path, line, col, key, msg);
    return -1;
}

/* ---- the family files ------------------------------------------------------------------ */

typedef struct family {
    char *path;             /* for messages */
    yaml_document_t doc;
    bool loaded;
} family;

static family *families;
static int n_families;
static char load_error[1200];

static void family_add(const char *path, const char *text, size_t len)
{
    yaml_parser_t p;
    yaml_mark_t deep;
    if (cfg_yaml_too_deep(text, len, &deep)) { /* before libyaml's loader, slow on deep nesting */
        if (!*load_error)
            snprintf(load_error, sizeof load_error, "%s:%zu:%zu: nesting is deeper than %d levels", path,
                     deep.line + 1, deep.column + 1, CFG_MAX_DEPTH);
        return;
    }
    family f = {.path = xstrdup(path)};
    if (!yaml_parser_initialize(&p)) {
        free(f.path);
        return;
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    if (yaml_parser_load(&p, &f.doc) && yaml_document_get_root_node(&f.doc)) {
        f.loaded = true;
    } else if (!*load_error) {
        snprintf(load_error, sizeof load_error, "%s:%zu:%zu: YAML syntax error: %s", path, p.problem_mark.line + 1,
                 p.problem_mark.column + 1, p.problem ? p.problem : "no document");
        if (!p.problem)
            yaml_document_delete(&f.doc);
    }
    yaml_parser_delete(&p);
    families = xrealloc(families, (size_t)(n_families + 1) * sizeof *families);
    families[n_families++] = f;
}

static int is_yaml(const struct dirent *e)
{
    size_t n = strlen(e->d_name);
    return n > 5 && strcmp(e->d_name + n - 5, ".yaml") == 0;
}

/* LAYERBENCH_HF_FAMILIES's files first, in name order (a user's own, or a change to one
 * built in: the first file that builds a model_type is the one used), then the built-in
 * ones; loaded once. */
static void families_load(void)
{
    static bool done;
    if (done)
        return;
    done = true;
    const char *dir = getenv("LAYERBENCH_HF_FAMILIES");
    struct dirent **names = NULL;
    int n = dir && *dir ? scandir(dir, &names, is_yaml, alphasort) : 0;
    if (n < 0)
        snprintf(load_error, sizeof load_error, "LAYERBENCH_HF_FAMILIES='%.300s': not a folder that can be read", dir);
    for (int i = 0; i < n; i++) {
        char *path = xasprintf("%s/%s", dir, names[i]->d_name), err[1200];
        strbuf text = {0};
        if (fileio_read(path, FAMILY_MAX_BYTES, FILEIO_TEXT, "LAYERBENCH_HF_FAMILIES", &text, NULL, err, sizeof err) == BENCH_OK)
            family_add(path, text.data, text.len);
        else if (!*load_error)
            snprintf(load_error, sizeof load_error, "%s", err);
        strbuf_free(&text);
        free(path);
        free(names[i]);
    }
    free(names);
    for (const hf_family_file *f = hf_families; f->path; f++)
        family_add(f->path, f->text, strlen(f->text));
}

static yaml_node_t *node(const family *f, int i) { return yaml_document_get_node((yaml_document_t *)&f->doc, i); }

static yaml_node_t *map_get(const family *f, const yaml_node_t *m, const char *key)
{
    if (!m || m->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node(f, p->key);
        if (k->type == YAML_SCALAR_NODE && strcmp((const char *)k->data.scalar.value, key) == 0)
            return node(f, p->value);
    }
    return NULL;
}

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* The model_type values a family builds: a scalar or a list of them. */
static bool builds(const family *f, const char *type)
{
    yaml_node_t *mt = map_get(f, yaml_document_get_root_node((yaml_document_t *)&f->doc), "model_type");
    if (scalar(mt))
        return strcmp(scalar(mt), type) == 0;
    for (yaml_node_item_t *it = mt && mt->type == YAML_SEQUENCE_NODE ? mt->data.sequence.items.start : NULL;
         it && it < mt->data.sequence.items.top; it++)
        if (scalar(node(f, *it)) && strcmp(scalar(node(f, *it)), type) == 0)
            return true;
    return false;
}

/* The loaded family that builds model_type (the first, in search order), or NULL. */
static const family *family_of(const char *model_type)
{
    families_load();
    for (int i = 0; i < n_families; i++)
        if (families[i].loaded && builds(&families[i], model_type))
            return &families[i];
    return NULL;
}

bool cfg_family_judges(const char *model_type, const char *field)
{
    const family *f = family_of(model_type);
    const yaml_node_t *refuse = f ? map_get(f, yaml_document_get_root_node((yaml_document_t *)&f->doc), "refuse") : NULL;
    return refuse && refuse->type == YAML_MAPPING_NODE && map_get(f, refuse, field) != NULL;
}

void cfg_family_types(strbuf *out, const char *last)
{
    families_load();
    const char **seen = NULL;
    int n = 0;
    for (int i = 0; i < n_families; i++) {
        if (!families[i].loaded)
            continue;
        const family *f = &families[i];
        yaml_node_t *mt = map_get(f, yaml_document_get_root_node((yaml_document_t *)&f->doc), "model_type");
        int count = scalar(mt) ? 1 : mt && mt->type == YAML_SEQUENCE_NODE
                                         ? (int)(mt->data.sequence.items.top - mt->data.sequence.items.start)
                                         : 0;
        for (int k = 0; k < count; k++) {
            const char *t = scalar(mt) ? scalar(mt) : scalar(node(f, mt->data.sequence.items.start[k]));
            bool dup = !t;
            for (int j = 0; !dup && j < n; j++) /* a user's file may name a built-in type again */
                dup = strcmp(seen[j], t) == 0;
            if (!dup)
                seen = xrealloc(seen, (size_t)(n + 1) * sizeof *seen), seen[n++] = t;
        }
    }
    for (int k = 0; k < n; k++)
        strbuf_printf(out, "%s%s", k == 0 ? "" : k == n - 1 ? last : ", ", seen[k]);
    free(seen);
}

/* ---- evaluation ------------------------------------------------------------------------ */

typedef struct ctx {
    const hf_source *src;
    const family *f;
    json_t *vars;       /* fields, lets and the built-in names */
    json_t *locals;     /* each's variables, a refusal's value */
    yaml_document_t *out;
    bool failed;
} ctx;


static json_t *lookup(void *user, const char *name)
{
    ctx *c = user;
    json_t *v = json_object_get(c->locals, name);
    v = v ? v : json_object_get(c->vars, name);
    return v ? json_incref(v) : NULL;
}

/* "family.yaml:L:C: what" into the error; returns -1 */
static int family_fail(ctx *c, const yaml_node_t *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int family_fail(ctx *c, const yaml_node_t *at, const char *fmt, ...)
{
    if (c->failed)
        return -1;
    char msg[800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->src->err, c->src->errlen, "%s:%zu:%zu: %s", c->f->path, at ? at->start_mark.line + 1 : 1,
             at ? at->start_mark.column + 1 : 1, msg);
    c->failed = true;
    return -1;
}

static json_t *eval(ctx *c, const yaml_node_t *at, const char *text)
{
    char err[600];
    json_t *v = hf_expr_eval(text, lookup, c, err, sizeof err);
    if (!v)
        family_fail(c, at, "%s", err);
    return v;
}

/* A plain YAML scalar's value: a number, true/false, null, or else the string itself. */
static json_t *literal(const yaml_node_t *n)
{
    const char *s = scalar(n);
    if (!s)
        return NULL;
    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return json_string(s);
    char *end;
    errno = 0;
    long long i = strtoll(s, &end, 10);
    if (*s && !*end && errno != ERANGE) /* past int64: read as a real below */
        return json_integer(i);
    double d = strtod(s, &end);
    if (*s && !*end)
        return json_real(d);
    if (!strcmp(s, "true") || !strcmp(s, "false"))
        return json_boolean(s[0] == 't');
    if (!strcmp(s, "null") || !strcmp(s, "~") || !*s)
        return json_null();
    return json_string(s);
}

/* A scalar of the layers: NULL where it holds no ${...} (copied as it is), else its value:
 * one ${expression} the whole of it is that expression's value, several (or text
 * around one) the string they make. */
static json_t *template_value(ctx *c, const yaml_node_t *n)
{
    const char *s = scalar(n), *open = s ? strstr(s, "${") : NULL;
    if (!open)
        return NULL;
    const char *close = strchr(open, '}');
    if (open == s && close && !close[1] && !strstr(open + 2, "${")) {
        char *expr = strndup(open + 2, (size_t)(close - open - 2));
        json_t *v = eval(c, n, expr);
        free(expr);
        return v;
    }
    strbuf b = {0};
    strbuf_append(&b, "", 0);
    for (const char *p = s; *p;) {
        open = strstr(p, "${");
        if (!open) {
            strbuf_append(&b, p, strlen(p));
            break;
        }
        strbuf_append(&b, p, (size_t)(open - p));
        close = strchr(open, '}');
        if (!close) {
            family_fail(c, n, "'${' without its '}' in '%s'", s);
            strbuf_free(&b);
            return NULL;
        }
        char *expr = strndup(open + 2, (size_t)(close - open - 2));
        json_t *v = eval(c, n, expr);
        free(expr);
        if (!v) {
            strbuf_free(&b);
            return NULL;
        }
        char *t = hf_expr_text(v);
        strbuf_append(&b, t, strlen(t));
        free(t), json_decref(v);
        p = close + 1;
    }
    json_t *v = json_string(b.data);
    strbuf_free(&b);
    return v;
}

/* An expression a key of the description holds (when, if, count, let's values): the
 * scalar's text, whatever its style. */
static json_t *expression(ctx *c, const yaml_node_t *n)
{
    if (!scalar(n)) {
        family_fail(c, n, "expected an expression");
        return NULL;
    }
    json_t *v = template_value(c, n);
    return v || c->failed ? v : eval(c, n, scalar(n));
}

/* A message of the description ("say"), its ${...} replaced. */
static char *message(ctx *c, const yaml_node_t *n)
{
    json_t *v = scalar(n) ? template_value(c, n) : NULL;
    char *t = v ? hf_expr_text(v) : xstrdup(scalar(n) ? scalar(n) : "is not built");
    json_decref(v);
    return t;
}

/* ---- fields ------------------------------------------------------------------------------ */

static const char *type_of(const json_t *v)
{
    return json_is_integer(v) ? "a number" : json_is_real(v) ? "a number" : json_is_boolean(v) ? "true or false"
           : json_is_array(v) ? "a list" : json_is_object(v) ? "an object" : json_is_string(v) ? "a string" : "null";
}

/* "silu" or "silu, gelu or relu": a one_of list as text */
static void choices(ctx *c, const yaml_node_t *one_of, strbuf *b)
{
    int n = (int)(one_of->data.sequence.items.top - one_of->data.sequence.items.start);
    for (int k = 0; k < n; k++) {
        const char *s = scalar(node(c->f, one_of->data.sequence.items.start[k]));
        strbuf_printf(b, "%s%s", k == 0 ? "" : k == n - 1 ? " or " : ", ", s ? s : "?");
    }
    strbuf_append(b, "", 0);
}

/* rope_scaling's keys per type, as transformers reads them: R required, O optional
 * (left to the rope layer's default when absent); N a number above 0, I an integer of
 * at least 1, B true or false, L a list of numbers from 1e-30 to 1e30. */
typedef struct { const char *name; char need, form; } rope_key;
static const struct {
    const char *type;
    rope_key keys[9];
} rope_types[] = {
    {"linear", {{"factor", 'R', 'N'}}},
    {"llama3", {{"factor", 'R', 'N'}, {"low_freq_factor", 'R', 'N'}, {"high_freq_factor", 'R', 'N'},
                {"original_max_position_embeddings", 'R', 'I'}}},
    {"yarn", {{"factor", 'O', 'N'}, {"original_max_position_embeddings", 'O', 'I'}, {"beta_fast", 'O', 'N'},
              {"beta_slow", 'O', 'N'}, {"mscale", 'O', 'N'}, {"mscale_all_dim", 'O', 'N'},
              {"attention_factor", 'O', 'N'}, {"truncate", 'O', 'B'}}},
    {"longrope", {{"short_factor", 'R', 'L'}, {"long_factor", 'R', 'L'}, {"factor", 'O', 'N'},
                  {"original_max_position_embeddings", 'O', 'I'}, {"attention_factor", 'O', 'N'}}},
};

/* One key of rope_scaling checked and copied into out; 0, or -1 after an error. */
static int rope_key_copy(const hf_source *s, json_t *rs, const rope_key *k, json_t *out)
{
    json_t *v = json_object_get(rs, k->name);
    if (!v || json_is_null(v))
        return k->need == 'R' ? hf_fail(s, k->name, "missing: layerbench needs it to build the model") : 0;
    bool ok = k->form == 'I'   ? json_is_integer(v) && json_integer_value(v) >= 1
              : k->form == 'B' ? json_is_boolean(v)
              : k->form == 'N' ? json_is_number(v) && json_number_value(v) > 0
                               : json_is_array(v) && json_array_size(v) > 0;
    for (size_t i = 0; ok && k->form == 'L' && i < json_array_size(v); i++) { /* as the rope layer reads them */
        double x = json_is_number(json_array_get(v, i)) ? json_number_value(json_array_get(v, i)) : 0;
        ok = x >= 1e-30 && x <= 1e30;
    }
    if (!ok)
        return hf_fail(s, k->name, "%s", k->form == 'I' ? "expected an integer of at least 1"
                                         : k->form == 'B' ? "expected true or false"
                                         : k->form == 'N' ? "expected a number above 0"
                                                          : "expected a list of numbers from 1e-30 to 1e30");
    json_object_set_new(out, k->name, k->form == 'N' ? json_real(json_number_value(v)) : json_deep_copy(v));
    return 0;
}

/* rope_scaling: null, or {rope_type (or type): default, linear, llama3, yarn or longrope
 * (su, its first name), and its keys}: the rope layers' parameters it adds, as an
 * object. yarn's and longrope's original_max_position_embeddings is rope_scaling's, else
 * the config's (Phi-3 keeps it there), else max_position_embeddings; their factor, when
 * not given, max_position_embeddings over it (transformers' rule). */
static json_t *rope_scaling(ctx *c, const char *key, json_t *rs)
{
    const hf_source *s = c->src;
    if (!rs || json_is_null(rs))
        return json_object();
    if (!json_is_object(rs))
        return hf_fail(s, key, "expected null or an object"), NULL;
    json_t *t = json_object_get(rs, "rope_type");
    t = t && !json_is_null(t) ? t : json_object_get(rs, "type");
    if (t && !json_is_null(t) && !json_is_string(t))
        return hf_fail(s, json_object_get(rs, "rope_type") ? "rope_type" : "type",
                       "expected a string (default, linear, llama3, yarn or longrope), got %s", type_of(t)),
               NULL;
    const char *type = t && json_is_string(t) ? json_string_value(t) : "default";
    if (!strcmp(type, "su"))
        type = "longrope";
    if (!strcmp(type, "default"))
        return json_object();
    for (size_t k = 0; k < sizeof rope_types / sizeof *rope_types; k++) {
        if (strcmp(type, rope_types[k].type) != 0)
            continue;
        json_t *out = json_pack("{s:s}", "rope_type", type);
        for (const rope_key *rk = rope_types[k].keys; rk < rope_types[k].keys + 9 && rk->name; rk++)
            if (rope_key_copy(s, rs, rk, out))
                return json_decref(out), NULL;
        if (!strcmp(type, "yarn") || !strcmp(type, "longrope")) {
            json_t *max = json_object_get(c->vars, "max_position_embeddings");
            max = max ? max : json_object_get(s->root, "max_position_embeddings");
            json_t *orig = json_object_get(out, "original_max_position_embeddings");
            json_t *top = json_object_get(s->root, "original_max_position_embeddings");
            if (!orig && top && !json_is_null(top)) {
                if (!json_is_integer(top) || json_integer_value(top) < 1)
                    return json_decref(out), hf_fail(s, "original_max_position_embeddings",
                                                     "expected an integer of at least 1"), NULL;
                json_object_set(out, "original_max_position_embeddings", top);
                orig = top;
            }
            if ((!orig || !json_object_get(out, "factor")) && !json_is_integer(max))
                return json_decref(out), hf_fail(s, key, "%s needs max_position_embeddings (an integer) for its %s",
                                                 type, orig ? "factor" : "original_max_position_embeddings"), NULL;
            if (!orig)
                json_object_set(out, "original_max_position_embeddings", max), orig = max;
            if (!json_object_get(out, "factor"))
                json_object_set_new(out, "factor", json_real((double)json_integer_value(max) /
                                                             (double)json_integer_value(orig)));
        }
        return out;
    }
    return hf_fail(s, key, "rope type '%s' is not built (layerbench has default, linear, llama3, yarn and longrope)",
                   type), NULL;
}

/* A field's value against its spec's type (int: min, max and layerbench's largest;
 * number: above); list: its one_of, for the message. 0, or -1 after an error. */
static int check_type(ctx *c, const char *key, const yaml_node_t *spec, const char *type, json_t *raw, const char *list)
{
    const hf_source *s = c->src;
    if (!strcmp(type, "int")) {
        if (!json_is_integer(raw))
            return hf_fail(s, key, "expected an integer");
        long long v = json_integer_value(raw), lo = 0;
        const char *min = scalar(map_get(c->f, spec, "min")), *max = scalar(map_get(c->f, spec, "max"));
        if (min && v < (lo = atoll(min)))
            return hf_fail(s, key, "expected at least %lld, got %lld", lo, v);
        if (v > FAMILY_MAX_INT)
            return hf_fail(s, key, "%lld is larger than the %lld layerbench takes", v, (long long)FAMILY_MAX_INT);
        if (max && v > atoll(max))
            return hf_fail(s, key, "%lld: more than the %s layerbench builds", v, max);
    } else if (!strcmp(type, "number")) {
        const char *above = scalar(map_get(c->f, spec, "above"));
        double lo = above ? atof(above) : -1e308;
        if (!json_is_number(raw) || !(json_number_value(raw) > lo))
            return above ? hf_fail(s, key, "expected a number above %g", lo) : hf_fail(s, key, "expected a number");
    } else if (!strcmp(type, "bool") && !json_is_boolean(raw)) {
        return hf_fail(s, key, "expected true or false");
    } else if (!strcmp(type, "string") && !json_is_string(raw)) {
        return hf_fail(s, key, "expected a string%s%s%s, got %s", list ? " (" : "", list ? list : "", list ? ")" : "",
                       type_of(raw));
    } else if (!strcmp(type, "list") && !json_is_array(raw)) {
        return hf_fail(s, key, "expected a list, got %s", type_of(raw));
    }
    return 0;
}

/* A field's value among its spec's one_of, else its say (or the list). 0, or -1. */
static int check_one_of(ctx *c, const char *key, const yaml_node_t *one_of, const yaml_node_t *say, json_t *raw,
                        const char *list)
{
    bool found = false;
    for (yaml_node_item_t *it = one_of->data.sequence.items.start; !found && it < one_of->data.sequence.items.top; it++) {
        json_t *v = literal(node(c->f, *it));
        found = v && (json_equal(v, raw) ||
                      (json_is_number(v) && json_is_number(raw) && json_number_value(v) == json_number_value(raw)));
        json_decref(v);
    }
    if (found)
        return 0;
    char *why = say ? message(c, say) : NULL, *shown = hf_expr_text(raw);
    int rc = json_is_string(raw) ? hf_fail(c->src, key, "'%s': %s%s", shown, why ? why : "expected ", why ? "" : list)
                                 : hf_fail(c->src, key, "%s%s", why ? why : "expected ", why ? "" : list);
    free(why), free(shown);
    return rc;
}

/* One field: the config.json's value checked against its spec (type, min, max, above,
 * one_of, say), or its default; -1 after an error. */
static int read_field(ctx *c, const char *key, const yaml_node_t *spec)
{
    const hf_source *s = c->src;
    json_t *raw = json_object_get(s->root, key);
    const char *type = scalar(map_get(c->f, spec, "type"));
    type = type ? type : "any";
    yaml_node_t *when = map_get(c->f, spec, "when"), *def = map_get(c->f, spec, "default");
    bool read = true;
    if (when) {
        json_t *w = expression(c, when);
        if (!w)
            return -1;
        read = hf_expr_truthy(w);
        json_decref(w);
    }
    if (!strcmp(type, "rope_scaling") && read) { /* optional by nature: absent is the default rope */
        json_t *v = rope_scaling(c, key, raw);
        if (!v)
            return -1;
        json_object_set_new(c->vars, key, v);
        return 0;
    }
    if (!read || !raw || json_is_null(raw)) {
        if (!def) {
            if (!read) {
                json_object_set_new(c->vars, key, json_null());
                return 0;
            }
            return hf_fail(s, key, "missing: layerbench needs it to build the model");
        }
        json_t *v = expression(c, def); /* an expression, as every value of the description is */
        if (!v)
            return -1;
        json_object_set_new(c->vars, key, v);
        return 0;
    }
    yaml_node_t *one_of = map_get(c->f, spec, "one_of"), *say = map_get(c->f, spec, "say");
    strbuf list = {0};
    if (one_of && one_of->type == YAML_SEQUENCE_NODE)
        choices(c, one_of, &list);
    int rc = check_type(c, key, spec, type, raw, list.len ? list.data : NULL);
    if (!rc && one_of && one_of->type == YAML_SEQUENCE_NODE)
        rc = check_one_of(c, key, one_of, say, raw, list.data);
    strbuf_free(&list);
    if (!rc)
        json_object_set(c->vars, key, raw);
    return rc;
}

/* A refuse or checks rule that holds: its say, at the config.json's key. Returns -1. */
static int rule_fail(ctx *c, const yaml_node_t *rule, const char *key)
{
    char *why = message(c, map_get(c->f, rule, "say"));
    hf_fail(c->src, key, "%s", why);
    free(why);
    return -1;
}

/* fields, refuse, checks, let: the names the layers read, every config.json field
 * checked; -1 after the first error. */
static int read_description(ctx *c, const yaml_node_t *root)
{
    static const char *const sections[] = {"family", "model_type", "doc", "fields", "refuse", "checks", "let", "layers",
                                           NULL};
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        const char *k = scalar(node(c->f, p->key));
        int i = 0;
        while (sections[i] && (!k || strcmp(sections[i], k) != 0))
            i++;
        if (!sections[i])
            return family_fail(c, node(c->f, p->key), "'%s' is not a part of a family description (family, model_type, "
                                                     "doc, fields, refuse, checks, let, layers)", k ? k : "?");
    }
    const yaml_node_t *fields = map_get(c->f, root, "fields"), *refuse = map_get(c->f, root, "refuse"),
                      *checks = map_get(c->f, root, "checks"), *let = map_get(c->f, root, "let");
    /* fields that would change the model and are not built, first: refused where 'if' holds */
    for (yaml_node_pair_t *p = refuse && refuse->type == YAML_MAPPING_NODE ? refuse->data.mapping.pairs.start : NULL;
         p && p < refuse->data.mapping.pairs.top; p++) {
        const char *key = scalar(node(c->f, p->key));
        json_t *raw = json_object_get(c->src->root, key);
        if (!raw || json_is_null(raw))
            continue;
        json_object_set(c->locals, "value", raw);
        yaml_node_t *rule = node(c->f, p->value), *cond = map_get(c->f, rule, "if");
        json_t *hit = cond ? expression(c, cond) : json_true();
        if (!hit)
            return -1;
        bool refused = hf_expr_truthy(hit);
        json_decref(hit);
        if (refused)
            return rule_fail(c, rule, key);
    }
    json_object_del(c->locals, "value");
    for (yaml_node_pair_t *p = fields && fields->type == YAML_MAPPING_NODE ? fields->data.mapping.pairs.start : NULL;
         p && p < fields->data.mapping.pairs.top; p++)
        if (read_field(c, scalar(node(c->f, p->key)), node(c->f, p->value)))
            return -1;
    for (yaml_node_item_t *it = checks && checks->type == YAML_SEQUENCE_NODE ? checks->data.sequence.items.start : NULL;
         it && it < checks->data.sequence.items.top; it++) {
        yaml_node_t *rule = node(c->f, *it);
        json_t *hit = expression(c, map_get(c->f, rule, "if"));
        if (!hit)
            return -1;
        bool bad = hf_expr_truthy(hit);
        json_decref(hit);
        if (bad) { /* at: a field's name, or ${...} that gives one */
            const yaml_node_t *at_node = map_get(c->f, rule, "at");
            char *at = at_node ? message(c, at_node) : NULL;
            int rc = rule_fail(c, rule, at ? at : "model_type");
            free(at);
            return rc;
        }
    }
    for (yaml_node_pair_t *p = let && let->type == YAML_MAPPING_NODE ? let->data.mapping.pairs.start : NULL;
         p && p < let->data.mapping.pairs.top; p++) {
        json_t *v = expression(c, node(c->f, p->value));
        if (!v)
            return -1;
        json_object_set_new(c->vars, scalar(node(c->f, p->key)), v);
    }
    return c->failed ? -1 : 0;
}

/* ---- the layers, expanded ------------------------------------------------------------------- */

static int mark(ctx *c, int id, const yaml_node_t *from)
{
    if (id && from) {
        yaml_node_t *n = yaml_document_get_node(c->out, id);
        n->start_mark = from->start_mark, n->end_mark = from->end_mark;
    }
    return id;
}

static int add_scalar(ctx *c, const char *text, yaml_scalar_style_t style, const yaml_node_t *from)
{
    return mark(c, yaml_document_add_scalar(c->out, NULL, (yaml_char_t *)text, (int)strlen(text), style), from);
}

/* A value as nodes: a list a flow sequence, an object a flow mapping, anything else a plain
 * scalar (its text as hf_expr_text gives it). */
static int add_value(ctx *c, const json_t *v, const yaml_node_t *from)
{
    if (json_is_array(v)) {
        int seq = mark(c, yaml_document_add_sequence(c->out, NULL, YAML_FLOW_SEQUENCE_STYLE), from);
        size_t k;
        json_t *x;
        json_array_foreach(v, k, x) yaml_document_append_sequence_item(c->out, seq, add_value(c, x, from));
        return seq;
    }
    if (json_is_object(v)) {
        int map = mark(c, yaml_document_add_mapping(c->out, NULL, YAML_FLOW_MAPPING_STYLE), from);
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x)
            yaml_document_append_mapping_pair(c->out, map, add_scalar(c, k, YAML_PLAIN_SCALAR_STYLE, from),
                                              add_value(c, x, from));
        return map;
    }
    char *t = hf_expr_text(v);
    int id = add_scalar(c, t, YAML_PLAIN_SCALAR_STYLE, from);
    free(t);
    return id;
}

static bool is_directive(const char *k)
{
    return k && (!strcmp(k, "each") || !strcmp(k, "count") || !strcmp(k, "when") || !strcmp(k, "with") ||
                 !strcmp(k, "let"));
}

static int expand(ctx *c, const yaml_node_t *t);

/* Whether a mapping reads as one flow line: its values scalars or lists of them. */
static bool flat(const ctx *c, const yaml_node_t *t)
{
    for (yaml_node_pair_t *p = t->data.mapping.pairs.start; p < t->data.mapping.pairs.top; p++) {
        const yaml_node_t *v = node(c->f, p->value);
        if (v->type == YAML_MAPPING_NODE)
            return false;
        if (v->type == YAML_SEQUENCE_NODE)
            for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++)
                if (node(c->f, *it)->type != YAML_SCALAR_NODE)
                    return false;
    }
    return true;
}

/* A mapping: its keys as written, their values expanded; a value that comes to null is
 * left out (an optional parameter); with: an object's members added (null: none). 0 after
 * an error. */
static int expand_mapping(ctx *c, const yaml_node_t *t)
{
    int map = mark(c, yaml_document_add_mapping(c->out, NULL, flat(c, t) ? YAML_FLOW_MAPPING_STYLE : YAML_BLOCK_MAPPING_STYLE), t);
    for (yaml_node_pair_t *p = t->data.mapping.pairs.start; p < t->data.mapping.pairs.top; p++) {
        const yaml_node_t *k = node(c->f, p->key), *v = node(c->f, p->value);
        const char *key = scalar(k);
        if (is_directive(key) && strcmp(key, "with") != 0)
            continue;
        if (key && !strcmp(key, "with")) {
            json_t *obj = expression(c, v);
            if (!obj)
                return 0;
            if (json_is_null(obj)) { /* nothing to add */
                json_decref(obj);
                continue;
            }
            if (!json_is_object(obj)) {
                json_decref(obj);
                return family_fail(c, v, "with: expected an object of parameters"), 0;
            }
            const char *mk;
            json_t *mv;
            json_object_foreach(obj, mk, mv) if (!json_is_null(mv)) yaml_document_append_mapping_pair(
                c->out, map, add_scalar(c, mk, YAML_PLAIN_SCALAR_STYLE, v), add_value(c, mv, v));
            json_decref(obj);
            continue;
        }
        json_t *val = v->type == YAML_SCALAR_NODE ? template_value(c, v) : NULL;
        if (c->failed)
            return 0;
        if (val && json_is_null(val)) {
            json_decref(val);
            continue;
        }
        int kid = add_scalar(c, key ? key : "", YAML_PLAIN_SCALAR_STYLE, k);
        int vid = val ? add_value(c, val, v) : expand(c, v);
        json_decref(val);
        if (!vid)
            return 0;
        yaml_document_append_mapping_pair(c->out, map, kid, vid);
    }
    return map;
}

/* An item's let: its names bound, in order, for this repetition (a later one may read an
 * earlier one); a name the description or the config.json already has is an error. Returns
 * -1 after an error. */
static int bind_lets(ctx *c, const yaml_node_t *let)
{
    if (!let)
        return 0;
    if (let->type != YAML_MAPPING_NODE)
        return family_fail(c, let, "let: expected a mapping of names to expressions"), -1;
    for (yaml_node_pair_t *p = let->data.mapping.pairs.start; p < let->data.mapping.pairs.top; p++) {
        const char *name = scalar(node(c->f, p->key));
        if (!name || json_object_get(c->vars, name) || json_object_get(c->locals, name))
            return family_fail(c, node(c->f, p->key), "let: '%s' is already a name here", name ? name : ""), -1;
        json_t *v = expression(c, node(c->f, p->value));
        if (!v)
            return -1;
        json_object_set_new(c->locals, name, v);
    }
    return 0;
}

static void unbind_lets(ctx *c, const yaml_node_t *let)
{
    for (yaml_node_pair_t *p = let && let->type == YAML_MAPPING_NODE ? let->data.mapping.pairs.start : NULL;
         p && p < let->data.mapping.pairs.top; p++)
        json_object_del(c->locals, scalar(node(c->f, p->key)));
}

/* A list of layers: each item as many times as its each/count say (its variable bound in
 * turn, then its let), where its when holds. */
static int expand_sequence(ctx *c, const yaml_node_t *t)
{
    int seq = mark(c, yaml_document_add_sequence(c->out, NULL, YAML_BLOCK_SEQUENCE_STYLE), t);
    for (yaml_node_item_t *it = t->data.sequence.items.start; it < t->data.sequence.items.top; it++) {
        const yaml_node_t *item = node(c->f, *it);
        const yaml_node_t *each = map_get(c->f, item, "each"), *count = map_get(c->f, item, "count"),
                          *when = map_get(c->f, item, "when"), *let = map_get(c->f, item, "let");
        long long n = 1;
        if ((each != NULL) != (count != NULL))
            return family_fail(c, item, "each: and count: go together (each: a name, count: how many)"), 0;
        if (count) {
            json_t *v = expression(c, count);
            if (!v)
                return 0;
            bool ok = json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) <= CFG_MAX_LAYERS;
            n = ok ? (long long)json_integer_value(v) : 0;
            json_decref(v);
            if (!ok)
                return family_fail(c, count, "count: expected an integer from 0 to %d", CFG_MAX_LAYERS), 0;
        }
        for (long long i = 0; i < n; i++) {
            if (each)
                json_object_set_new(c->locals, scalar(each), json_integer(i));
            if (bind_lets(c, let))
                return 0;
            bool keep = true;
            if (when) {
                json_t *w = expression(c, when);
                if (!w)
                    return 0;
                keep = hf_expr_truthy(w);
                json_decref(w);
            }
            int id = keep ? expand(c, item) : -1;
            unbind_lets(c, let);
            if (!id)
                return 0;
            if (keep)
                yaml_document_append_sequence_item(c->out, seq, id);
        }
        if (each)
            json_object_del(c->locals, scalar(each));
    }
    return seq;
}

static int expand(ctx *c, const yaml_node_t *t)
{
    if (c->failed)
        return 0;
    /* the recursion is as deep as the description, CFG_MAX_DEPTH at most (family_add) */
    if (t->type == YAML_MAPPING_NODE)
        return expand_mapping(c, t);
    if (t->type == YAML_SEQUENCE_NODE)
        return expand_sequence(c, t);
    json_t *v = template_value(c, t);
    if (c->failed)
        return 0;
    int id = v ? add_value(c, v, t)
               : add_scalar(c, scalar(t), t->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ? YAML_PLAIN_SCALAR_STYLE
                                                                                             : YAML_DOUBLE_QUOTED_SCALAR_STYLE, t);
    json_decref(v);
    return id;
}

/* The config the family's layers make: name, input [tokens], dtype, layers. */
static bool build_document(ctx *c, const yaml_node_t *layers, const hf_build *b, yaml_document_t *out)
{
    yaml_document_initialize(out, NULL, NULL, NULL, 1, 1);
    c->out = out;
    int root = yaml_document_add_mapping(out, NULL, YAML_BLOCK_MAPPING_STYLE);
    char tokens[32];
    snprintf(tokens, sizeof tokens, "%lld", (long long)b->tokens);
    yaml_document_append_mapping_pair(out, root, add_scalar(c, "name", YAML_PLAIN_SCALAR_STYLE, NULL),
                                      add_scalar(c, b->name, YAML_PLAIN_SCALAR_STYLE, NULL));
    int input = yaml_document_add_sequence(out, NULL, YAML_FLOW_SEQUENCE_STYLE);
    yaml_document_append_sequence_item(out, input, add_scalar(c, tokens, YAML_PLAIN_SCALAR_STYLE, NULL));
    yaml_document_append_mapping_pair(out, root, add_scalar(c, "input", YAML_PLAIN_SCALAR_STYLE, NULL), input);
    if (b->dtype)
        yaml_document_append_mapping_pair(out, root, add_scalar(c, "dtype", YAML_PLAIN_SCALAR_STYLE, NULL),
                                          add_scalar(c, b->dtype, YAML_PLAIN_SCALAR_STYLE, NULL));
    int l = expand(c, layers);
    if (!l) {
        yaml_document_delete(out);
        return false;
    }
    yaml_document_append_mapping_pair(out, root, add_scalar(c, "layers", YAML_PLAIN_SCALAR_STYLE, NULL), l);
    return true;
}

static int emit_to(void *data, unsigned char *buffer, size_t size)
{
    strbuf_append(data, (const char *)buffer, size);
    return 1;
}

bench_status cfg_family_build(const hf_source *src, const char *model_type, const hf_build *b, model **out,
                              strbuf *emit)
{
    *out = NULL;
    families_load();
    if (*load_error) {
        snprintf(src->err, src->errlen, "%s", load_error);
        return BENCH_ERR_USAGE;
    }
    const family *f = family_of(model_type);
    json_t *text = json_object_get(src->root, "text_config");
    json_t *text_type = json_object_get(text, "model_type");
    if (!f && json_is_object(text) && json_is_string(text_type) && family_of(json_string_value(text_type))) {
        /* Gemma 3 (4B and up), and other multimodal models: the language model is built,
         * the vision tower is not, and a total without it would not be the model's */
        hf_fail(src, "model_type", "'%s' is a multimodal model: its vision tower (vision_config) is not built, and "
                "a total without it would not be the model's; its language model (text_config, model_type %s) is, "
                "from a config.json of its own: text_config's fields, with those it leaves to its config class's "
                "defaults written out", model_type, json_string_value(text_type));
        return BENCH_ERR_USAGE;
    }
    if (!f) {
        strbuf types = {0};
        cfg_family_types(&types, " and ");
        hf_fail(src, "model_type", "'%s' is not built (layerbench reads %s; docs/architecture.md says how to add a family)",
                model_type, types.data ? types.data : "none");
        strbuf_free(&types);
        return BENCH_ERR_USAGE;
    }
    ctx c = {.src = src, .f = f, .vars = json_object(), .locals = json_object()};
    json_object_set_new(c.vars, "model_type", json_string(model_type));
    json_object_set_new(c.vars, "tokens", json_integer(b->tokens));
    json_object_set_new(c.vars, "cached", json_integer(b->kv_len > 0 ? b->kv_len : 0));
    json_t *keys = json_array(); /* the fields the config.json gives (not null): 'head_dim' in config_keys */
    const char *key;
    json_t *val;
    json_object_foreach(src->root, key, val) if (!json_is_null(val)) json_array_append_new(keys, json_string(key));
    json_object_set_new(c.vars, "config_keys", keys);
    const yaml_node_t *root = yaml_document_get_root_node((yaml_document_t *)&f->doc);
    const yaml_node_t *layers = map_get(f, root, "layers");
    bench_status st = BENCH_ERR_USAGE;
    yaml_document_t doc;
    if (root->type != YAML_MAPPING_NODE || !layers) {
        family_fail(&c, root, "a family description is a mapping with model_type, fields and layers");
    } else if (read_description(&c, root) == 0 && build_document(&c, layers, b, &doc)) {
        if (emit) { /* the expanded config as YAML, for the user to read and run */
            yaml_document_t copy;
            if (build_document(&c, layers, b, &copy)) {
                yaml_emitter_t e;
                yaml_emitter_initialize(&e);
                yaml_emitter_set_output(&e, emit_to, emit);
                yaml_emitter_set_width(&e, 200);
                yaml_emitter_open(&e);
                yaml_emitter_dump(&e, &copy); /* deletes copy */
                yaml_emitter_close(&e);
                yaml_emitter_delete(&e);
            }
        }
        st = cfg_build_document(f->path, &doc, b->batch, b->shape, out, src->err, src->errlen);
        if (st != BENCH_OK) { /* what was built from the config.json: the family file's place */
            char *msg = xstrdup(src->err);
            snprintf(src->err, src->errlen, "%s: the decoder built from it is refused: %s", src->path, msg);
            free(msg);
        } else {
            free((*out)->path);
            (*out)->path = xstrdup(src->path);
        }
    }
    json_decref(c.vars), json_decref(c.locals);
    return st;
}
