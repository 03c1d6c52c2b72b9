/* Building the model from a typed config: layers and blocks (sequential, residual,
 * merges) flattened into qualified names, inputs resolved by name, shapes inferred, and
 * the names checked unique. */
#include "cfg_internal.h"

#include <ctype.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ---- layers --------------------------------------------------------------------------- */

static char *qualify(const char *prefix, const char *name)
{
    return *prefix ? xasprintf("%s.%s", prefix, name) : xstrdup(name);
}

static const shape_t *value_shape(cfg_ctx *c, int value)
{
    return model_value_shape(c->m, value);
}

/* ---- names: qualified name -> the latest layer of that name, for input references ----- */

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Records value id v under its layer's name (a repeated name keeps the latest). */
static void name_put(cfg_ctx *c, const char *name, int v)
{
    if (2 * (c->n_names + 1) > c->names_cap) {
        int old = c->names_cap;
        int *keep = c->names;
        c->names_cap = old ? 2 * old : 1024;
        c->names = xmalloc((size_t)c->names_cap * sizeof *c->names);
        for (int i = 0; i < c->names_cap; i++)
            c->names[i] = 0;
        c->n_names = 0;
        for (int i = 0; i < old; i++)
            if (keep[i])
                name_put(c, c->m->layers[keep[i] - 1].name, keep[i]);
        free(keep);
    }
    size_t mask = (size_t)c->names_cap - 1, i = (size_t)name_hash(name) & mask;
    while (c->names[i] && strcmp(c->m->layers[c->names[i] - 1].name, name) != 0)
        i = (i + 1) & mask;
    if (!c->names[i])
        c->n_names++;
    c->names[i] = v;
}

static int name_get(const cfg_ctx *c, const char *name)
{
    if (!c->names_cap)
        return -1;
    size_t mask = (size_t)c->names_cap - 1, i = (size_t)name_hash(name) & mask;
    for (; c->names[i]; i = (i + 1) & mask)
        if (strcmp(c->m->layers[c->names[i] - 1].name, name) == 0)
            return c->names[i];
    return -1;
}

/* A reference to an earlier layer: its name relative to prefix (the enclosing block),
 * else qualified from the top; "/a.b" is always from the top; "input" is the model's
 * input unless a layer has that name. Returns the value id, or -1 with the error set. */
static int resolve(cfg_ctx *c, yaml_node_t *n, const char *prefix)
{
    if (n->type != YAML_SCALAR_NODE || !*cfg_scalar(n))
        return fail(c, n, "expected the name of an earlier layer (or 'input'), got %s", cfg_node_type_name(n));
    const char *ref = cfg_scalar(n);
    if (ref[0] == '/') {
        int v = name_get(c, ref + 1);
        return v > 0 ? v : fail(c, n, "no earlier layer is named '%s' (from the top)", ref + 1);
    }
    if (*prefix) {
        char *rel = xasprintf("%s.%s", prefix, ref);
        int v = name_get(c, rel);
        free(rel);
        if (v > 0)
            return v;
    }
    int v = name_get(c, ref);
    if (v > 0)
        return v;
    if (strcmp(ref, "input") == 0)
        return 0;
    return fail(c, n, "no earlier layer is named '%s'%s%s (inputs refer to layers above them, by their names "
                      "from the top or from the enclosing block)",
                ref, *prefix ? " or '" : "", *prefix ? prefix : "");
}

/* Appends a layer whose params are set, reading the values in[0..n_in); infers its
 * shape. Returns its value id or -1. */
static int add_layer(cfg_ctx *c, yaml_node_t *at, char *name, layer_kind kind, const layer_params *p,
                     const int *in, int n_in)
{
    if (c->m->n_layers >= CFG_MAX_LAYERS) {
        free(name);
        return fail(c, at, "the model has more than %d layers", CFG_MAX_LAYERS);
    }
    if (c->m->n_layers == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        c->m->layers = xrealloc(c->m->layers, (size_t)c->cap * sizeof(layer));
        c->marks = xrealloc(c->marks, (size_t)c->cap * sizeof *c->marks);
    }
    c->marks[c->m->n_layers] = at->start_mark;
    layer *l = &c->m->layers[c->m->n_layers];
    memset(l, 0, sizeof *l);
    l->name = name;
    l->kind = kind;
    l->dtype = c->dtype >= 0 ? (dtype_t)c->dtype : c->m->dtype;
    l->dtype_pinned = c->dtype >= 0;
    l->p = *p;
    l->n_inputs = n_in;
    l->inputs = xmalloc((size_t)n_in * sizeof *l->inputs);
    l->ins = xmalloc((size_t)n_in * sizeof *l->ins);
    for (int k = 0; k < n_in; k++) {
        l->inputs[k] = in[k];
        l->ins[k] = *value_shape(c, in[k]);
    }
    l->in = l->ins[0];
    c->m->n_layers++; /* owned by the model from here: model_free frees a failed one too */
    char why[256];
    if (layer_desc_get(kind)->infer(l, why, sizeof why))
        return fail(c, at, "layer '%s' (%s): %s", name, layer_kind_name(kind), why);
    shape_t per_sample = l->out;
    per_sample.d[0] = 1;
    if (shape_numel_checked(&per_sample) < 0)
        return fail(c, at, "layer '%s' (%s): its output is larger than 2^40 elements", name, layer_kind_name(kind));
    if (layer_count(l) != 0)
        return fail(c, at, "layer '%s' (%s): its parameter, FLOP or byte count is beyond 2^62 (or its weights beyond "
                           "2^40)",
                    name, layer_kind_name(kind));
    l->frozen = c->frozen && l->n_weights > 0;
    name_put(c, name, c->m->n_layers);
    return c->m->n_layers;
}

static int emit_seq(cfg_ctx *c, yaml_node_t *seq, const char *prefix, int *pos, int *cur);

static const char *const block_keys[] = {"kind", "name", "repeat", "input", "layers", "dtype", "requires_grad"};

static const char *const residual_keys[] = {"kind", "name", "repeat", "input", "body", "shortcut", "shortcut_name",
                                            "branches", "merge", "merge_name", "dim", "after", "dtype",
                                            "requires_grad"};

static const char *const merges[] = {"add", "mul", "concat", NULL};

/* The values a plain layer reads: its kind's inputs from 'inputs' (or 'input'), else
 * the current value. Returns the count, or -1 with the error set. */
static int layer_inputs(cfg_ctx *c, yaml_node_t *item, layer_kind kind, const char *prefix, int cur, int *in)
{
    const layer_desc *d = layer_desc_get(kind);
    yaml_node_t *one = cfg_map_get(c, item, "input"), *many = cfg_map_get(c, item, "inputs");
    int want = d->n_inputs;
    if (one && many)
        return fail(c, one, "give 'input' or 'inputs', not both");
    /* concat (want < 0) takes one input or more, as torch.cat([x], 1) does */
    if (!one && !many) {
        if (want == 2)
            return fail(c, item, "%s: missing required key 'inputs' (the names of the two layers it merges)", d->name);
        if (want > 2)
            return fail(c, item, "%s: missing required key 'inputs' (the names of its %d inputs)", d->name, want);
        in[0] = cur;
        return 1;
    }
    if (one) {
        if (want >= 2)
            return fail(c, one, "%s takes 'inputs', a list of %s layers", d->name, want == 2 ? "two" : "three");
        return (in[0] = resolve(c, one, prefix)) < 0 ? -1 : 1;
    }
    if (many->type != YAML_SEQUENCE_NODE)
        return fail(c, many, "inputs: expected a list of layer names, got %s", cfg_node_type_name(many));
    int n = (int)(many->data.sequence.items.top - many->data.sequence.items.start);
    if ((want > 0 && n != want) || (want < 0 && (n < 1 || n > LAYER_MAX_INPUTS)))
        return fail(c, many, "inputs: %s takes %s, got %d", d->name,
                    want == 1 ? "one input" : want == 2 ? "two inputs" : want == 3 ? "three inputs" : "1 to 64 inputs", n);
    for (int k = 0; k < n; k++)
        if ((in[k] = resolve(c, NODE(c, many->data.sequence.items.start[k]), prefix)) < 0)
            return -1;
    return n;
}

static const char *dim_name(const shape_t *s, int i)
{
    static const char *const nchw[] = {"the batch", "the channels", "the height", "the width"};
    static const char *const nf[] = {"the batch", "the features"};
    return s->rank == 4 ? nchw[i] : s->rank == 2 ? nf[i] : "a dimension";
}

/* The branches' outputs must fit their merge; the message names both branches and the
 * dimension that differs. */
static int check_branches(cfg_ctx *c, yaml_node_t *at, const char *qname, int64_t merge, int64_t dim,
                          const int *outs, const char *const *names, int n)
{
    const shape_t *a = value_shape(c, outs[0]);
    for (int k = 1; k < n; k++) {
        const shape_t *b = value_shape(c, outs[k]);
        char x[96], y[96];
        if (a->rank != b->rank)
            return fail(c, at, "residual '%s': %s gives %s but %s gives %s", qname, names[0], shape_format(a, x, sizeof x),
                        names[k], shape_format(b, y, sizeof y));
        for (int i = 0; i < a->rank; i++) {
            bool fits = a->d[i] == b->d[i] || (merge == 2 && (i == dim || dim == i - a->rank)) ||
                        (merge == 1 && (a->d[i] == 1 || b->d[i] == 1));
            if (!fits)
                return fail(c, at, "residual '%s': %s gives %s but %s gives %s: they differ in %s (%lld against %lld)%s",
                            qname, names[0], shape_format(a, x, sizeof x), names[k], shape_format(b, y, sizeof y),
                            dim_name(a, i), (long long)a->d[i], (long long)b->d[i],
                            merge == 2 ? "; concat joins along dim only" : "");
        }
    }
    return 0;
}

/* A residual's arms: each one's output value and its name in messages (owned where
 * made). */
typedef struct residual_arms {
    int outs[LAYER_MAX_INPUTS], n;
    const char *names[LAYER_MAX_INPUTS];
    char *owned[LAYER_MAX_INPUTS];
} residual_arms;

/* body (named under the residual, from *cur) and its shortcut: identity, or the layers
 * under shortcut_name (default downsample). */
static int emit_body(cfg_ctx *c, yaml_node_t *body, yaml_node_t *sc, yaml_node_t *scn, const char *qname, int cur,
                     int *pos, residual_arms *a)
{
    const char *sc_name = "downsample";
    if (body->type != YAML_SEQUENCE_NODE)
        return fail(c, body, "body: expected a list of layers, got %s", cfg_node_type_name(body));
    if (scn && cfg_parse_name(c, "shortcut_name", scn, &sc_name))
        return -1;
    if (sc && !(sc->type == YAML_SEQUENCE_NODE ||
                (sc->type == YAML_SCALAR_NODE && strcmp(cfg_scalar(sc), "identity") == 0)))
        return fail(c, sc, "shortcut: expected 'identity' or a list of layers, got %s", cfg_node_type_name(sc));
    a->outs[0] = a->outs[1] = cur;
    a->n = 2;
    a->names[0] = "the body";
    a->names[1] = a->owned[1] = sc && sc->type == YAML_SEQUENCE_NODE ? xasprintf("the shortcut ('%s')", sc_name)
                                                                     : xstrdup("the identity shortcut");
    if (emit_seq(c, body, qname, pos, &a->outs[0]))
        return -1;
    if (sc && sc->type == YAML_SEQUENCE_NODE) {
        char *sc_prefix = qualify(qname, sc_name);
        int sc_pos = 0, r = emit_seq(c, sc, sc_prefix, &sc_pos, &a->outs[1]);
        free(sc_prefix);
        if (r)
            return -1;
    }
    return 0;
}

/* Named branches, each a list of layers under its name (from cur) or identity: two for
 * add and mul, two or more for concat. */
static int emit_branches(cfg_ctx *c, yaml_node_t *branches, const char *qname, int64_t merge, int cur,
                         residual_arms *a)
{
    if (branches->type != YAML_MAPPING_NODE)
        return fail(c, branches, "branches: expected a mapping of branch names to lists of layers (or "
                                 "'identity'), got %s",
                    cfg_node_type_name(branches));
    for (yaml_node_pair_t *pr = branches->data.mapping.pairs.start; pr < branches->data.mapping.pairs.top; pr++) {
        yaml_node_t *k = NODE(c, pr->key), *v = NODE(c, pr->value);
        const char *bname;
        if (cfg_parse_name(c, "branch name", k, &bname))
            return -1;
        if (a->n == LAYER_MAX_INPUTS)
            return fail(c, k, "more than %d branches", LAYER_MAX_INPUTS);
        a->outs[a->n] = cur;
        a->names[a->n] = a->owned[a->n] = xasprintf("branch '%s'", bname);
        a->n++;
        if (v->type == YAML_SCALAR_NODE && strcmp(cfg_scalar(v), "identity") == 0)
            continue;
        if (v->type != YAML_SEQUENCE_NODE)
            return fail(c, v, "branch '%s': expected a list of layers or 'identity', got %s", bname,
                        cfg_node_type_name(v));
        int bpos = 0;
        char *bprefix = qualify(qname, bname);
        int r = emit_seq(c, v, bprefix, &bpos, &a->outs[a->n - 1]);
        free(bprefix);
        if (r)
            return -1;
    }
    if (a->n < 2 || (merge != 2 && a->n != 2))
        return fail(c, branches, "branches: merge %s takes %s branches, got %d", merges[merge],
                    merge == 2 ? "2 or more" : "exactly 2", a->n);
    return 0;
}

/* A residual: branches that all start from the input, merged by add, mul or concat
 * into one layer, then 'after'. Either body (named under the residual) and shortcut
 * (identity, or layers under shortcut_name), as torchvision's blocks are written, or
 * named branches (each a list of layers under its name, or identity). */
static int emit_residual(cfg_ctx *c, yaml_node_t *item, const char *qname, int *cur)
{
    yaml_node_t *body = cfg_map_get(c, item, "body"), *branches = cfg_map_get(c, item, "branches");
    yaml_node_t *sc = cfg_map_get(c, item, "shortcut"), *scn = cfg_map_get(c, item, "shortcut_name");
    yaml_node_t *after = cfg_map_get(c, item, "after"), *mn = cfg_map_get(c, item, "merge"), *mnn = cfg_map_get(c, item, "merge_name");
    yaml_node_t *dn = cfg_map_get(c, item, "dim");
    int64_t merge = 0;
    layer_params mp;
    memset(&mp, 0, sizeof mp);
    mp.dim = 1;
    if (mn && cfg_parse_enum(c, "merge", mn, merges, &merge))
        return -1;
    if (dn && (merge != 2 ? fail(c, dn, "dim applies to merge: concat only") : cfg_parse_int(c, "dim", dn, INT32_MIN, &mp.dim)))
        return -1;
    if (!body == !branches)
        return fail(c, item, "residual: give 'body' (with an optional 'shortcut') or 'branches', %s",
                    body ? "not both" : "one of them");
    if (branches && (sc || scn))
        return fail(c, sc ? sc : scn, "'%s' goes with 'body', not with 'branches'", sc ? "shortcut" : "shortcut_name");
    if (after && after->type != YAML_SEQUENCE_NODE)
        return fail(c, after, "after: expected a list of layers, got %s", cfg_node_type_name(after));
    const char *merge_name = merge == 0 ? "add" : merge == 1 ? "mul" : "cat";
    if (mnn && cfg_parse_name(c, "merge_name", mnn, &merge_name))
        return -1;
    residual_arms a = {.n = 0};
    int pos = 0, v = -1;
    yaml_node_t *at = sc ? sc : branches ? branches : item;
    if (!(body ? emit_body(c, body, sc, scn, qname, *cur, &pos, &a) : emit_branches(c, branches, qname, merge, *cur, &a)) &&
        !check_branches(c, at, qname, merge, mp.dim, a.outs, a.names, a.n)) {
        layer_kind mk = merge == 0 ? LAYER_ADD : merge == 1 ? LAYER_MUL : LAYER_CONCAT;
        v = add_layer(c, at, qualify(qname, merge_name), mk, &mp, a.outs, a.n);
    }
    for (int k = 0; k < LAYER_MAX_INPUTS; k++)
        free(a.owned[k]);
    if (v < 0)
        return -1;
    *cur = v;
    return after ? emit_seq(c, after, qname, &pos, cur) : 0;
}

/* One copy of an item, named qname (owned by this call). */
static int emit_one(cfg_ctx *c, yaml_node_t *item, int kind, const char *prefix, char *qname, int *cur)
{
    int rc = -1, pos = 0;
    yaml_node_t *in_node = cfg_map_get(c, item, "input");
    if (kind >= 0) {
        layer_params p;
        int in[LAYER_MAX_INPUTS], n;
        if (cfg_parse_params(c, item, (layer_kind)kind, &p) == 0 &&
            (n = layer_inputs(c, item, (layer_kind)kind, prefix, *cur, in)) > 0) {
            if (layer_kind_has_kv_len((layer_kind)kind)) { /* --kv-len */
                c->n_kv_layers++;
                if (c->shape.kv_len >= 0)
                    p.kv_len = c->shape.kv_len;
            }
            if (kind == LAYER_POS_EMBEDDING && p.num_positions > 0 && c->shape.kv_len >= 0)
                p.kv_len = c->shape.kv_len; /* a table of positions (GPT-2's wpe): the tokens after the cache */
            int v = add_layer(c, item, qname, (layer_kind)kind, &p, in, n);
            yaml_node_t *gn = cfg_map_get(c, item, "requires_grad");
            if (v > 0 && gn && c->frozen && !c->m->layers[v - 1].frozen)
                return fail(c, gn, "layer '%s' (%s) has no weights: requires_grad: false applies to a layer with "
                            "weights, or to a block", c->m->layers[v - 1].name, layer_kind_name((layer_kind)kind));
            return v < 0 ? -1 : (*cur = v, 0);
        }
    } else if (in_node && (*cur = resolve(c, in_node, prefix)) < 0) {
        rc = -1;
    } else if (kind == -1) { /* block */
        yaml_node_t *layers = cfg_need_seq(c, item, "layers", "block");
        rc = layers ? emit_seq(c, layers, qname, &pos, cur) : -1;
    } else { /* residual */
        rc = emit_residual(c, item, qname, cur);
    }
    free(qname);
    return rc;
}

/* One list item: kind, name and repeat decide how many copies and their names. */
static int emit_item(cfg_ctx *c, yaml_node_t *item, const char *prefix, int *pos, int *cur)
{
    if (item->type != YAML_MAPPING_NODE)
        return fail(c, item, "expected a layer (a mapping with 'kind'), got %s", cfg_node_type_name(item));
    yaml_node_t *kn = cfg_map_get(c, item, "kind"), *nn = cfg_map_get(c, item, "name"), *rn = cfg_map_get(c, item, "repeat");
    if (!kn)
        return fail(c, item, "missing required key 'kind' (a layer kind, 'block' or 'residual')");
    if (kn->type != YAML_SCALAR_NODE)
        return fail(c, kn, "kind: expected a layer kind, got %s", cfg_node_type_name(kn));
    int kind;
    if (strcmp(cfg_scalar(kn), "block") == 0) {
        kind = -1;
        if (cfg_check_keys(c, item, "block", block_keys, 7))
            return -1;
    } else if (strcmp(cfg_scalar(kn), "residual") == 0) {
        kind = -2;
        if (cfg_check_keys(c, item, "residual", residual_keys, 14))
            return -1;
    } else {
        kind = layer_kind_from_name(cfg_scalar(kn));
        if (kind < 0)
            return fail(c, kn, "unknown layer kind '%s'; known kinds: %s, block, residual", cfg_scalar(kn),
                        layer_kind_list());
    }
    const char *name = NULL;
    int64_t repeat = 1;
    if (nn && cfg_parse_name(c, "name", nn, &name))
        return -1;
    if (rn && cfg_parse_int(c, "repeat", rn, 1, &repeat))
        return -1;
    if (repeat > CFG_MAX_LAYERS)
        return fail(c, rn, "repeat %lld is more than the %d layers a model may have", (long long)repeat,
                    CFG_MAX_LAYERS);
    /* dtype: this item's layers (a block's or a residual's, all of them) keep their own */
    yaml_node_t *dn = cfg_map_get(c, item, "dtype");
    dtype_t dt;
    int outer = c->dtype;
    if (dn && cfg_parse_dtype(c, dn, &dt))
        return -1;
    if (dn)
        c->dtype = (int)dt;
    /* requires_grad: false freezes this item's layers with weights (a block's, all of them) */
    yaml_node_t *gn = cfg_map_get(c, item, "requires_grad");
    bool outer_frozen = c->frozen, grad = true;
    if (gn && cfg_parse_bool(c, "requires_grad", gn, &grad))
        return -1;
    if (gn)
        c->frozen = !grad;
    yaml_node_t *explicit_in = cfg_map_get(c, item, "input") ? cfg_map_get(c, item, "input") : cfg_map_get(c, item, "inputs");
    if (explicit_in && repeat > 1)
        return fail(c, explicit_in, "'%s' and repeat cannot be combined: the copies would all read the same layers",
                    cfg_map_get(c, item, "input") ? "input" : "inputs");
    /* torch naming: a named repeat is a Sequential holding copies 0..N-1; unnamed copies
     * take the next positions of the parent, as children of an nn.Sequential do. */
    char *base = name && rn ? qualify(prefix, name) : NULL;
    for (int64_t i = 0; i < repeat; i++) {
        char idx[24];
        char *qname;
        if (base) {
            snprintf(idx, sizeof idx, "%lld", (long long)i);
            qname = qualify(base, idx);
        } else if (name) {
            qname = qualify(prefix, name);
        } else {
            snprintf(idx, sizeof idx, "%d", (*pos)++);
            qname = qualify(prefix, idx);
        }
        if (strlen(qname) > CFG_MAX_QUALIFIED) {
            free(qname), free(base);
            return fail(c, nn ? nn : item, "the qualified name of this item is longer than the %d characters a name may "
                        "have (the blocks around it nest too deep, or their names are too long)", CFG_MAX_QUALIFIED);
        }
        if (emit_one(c, item, kind, prefix, qname, cur)) {
            free(base);
            return -1;
        }
    }
    if (name)
        (*pos)++;
    free(base);
    c->dtype = outer, c->frozen = outer_frozen;
    return 0;
}

static int emit_seq(cfg_ctx *c, yaml_node_t *seq, const char *prefix, int *pos, int *cur)
{
    if (seq->data.sequence.items.start == seq->data.sequence.items.top)
        return fail(c, seq, "the list of layers is empty");
    for (yaml_node_item_t *it = seq->data.sequence.items.start; it < seq->data.sequence.items.top; it++)
        if (emit_item(c, NODE(c, *it), prefix, pos, cur))
            return -1;
    return 0;
}

/* Every qualified name once, except where torch reuses one module (BasicBlock's ReLU
 * runs twice): the same kind and parameters under one name. Rows, comparisons and
 * traces are keyed by the name (and its occurrence). */
static const layer *sort_layers;

static int cmp_layer_names(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    int c = strcmp(sort_layers[x].name, sort_layers[y].name);
    return c ? c : x - y;
}

static int check_unique_names(cfg_ctx *c)
{
    int n = c->m->n_layers;
    int *idx = xmalloc((size_t)(n ? n : 1) * sizeof *idx);
    for (int i = 0; i < n; i++)
        idx[i] = i;
    sort_layers = c->m->layers;
    qsort(idx, (size_t)n, sizeof *idx, cmp_layer_names);
    int rc = 0;
    for (int i = 1; i < n && !rc; i++) {
        const layer *a = &c->m->layers[idx[i - 1]], *b = &c->m->layers[idx[i]];
        if (strcmp(a->name, b->name) == 0 && (a->kind != b->kind || memcmp(&a->p, &b->p, sizeof a->p) != 0)) {
            yaml_mark_t first = c->marks[idx[i - 1]];
            rc = cfg_fail_at(c, c->marks[idx[i]],
                         "layer name '%s' is used twice, by different layers (first at line %zu, column %zu); a name "
                         "repeats only where torch reuses one module: the same kind and parameters",
                         b->name, first.line + 1, first.column + 1);
        }
    }
    free(idx);
    return rc;
}

/* ---- the document ----------------------------------------------------------------------- */

static const char *const top_keys[] = {"name", "input", "batch", "dtype", "layers"};

int cfg_parse_model(cfg_ctx *c, yaml_node_t *root, int64_t batch)
{
    if (root->type != YAML_MAPPING_NODE)
        return fail(c, root, "expected a mapping with name, input and layers at the top, got %s",
                    cfg_node_type_name(root));
    if (cfg_check_keys(c, root, "a model", top_keys, 5))
        return -1;
    yaml_node_t *name = cfg_map_get(c, root, "name"), *input = cfg_map_get(c, root, "input");
    yaml_node_t *bn = cfg_map_get(c, root, "batch"), *dtype = cfg_map_get(c, root, "dtype");
    if (!name)
        return fail(c, root, "missing required key 'name'");
    if (!input)
        return fail(c, root, "missing required key 'input' (per-sample shape [C, H, W], [S, D] or [F])");
    if (name->type != YAML_SCALAR_NODE || !*cfg_scalar(name))
        return fail(c, name, "name: expected a non-empty string, got %s", cfg_node_type_name(name));
    /* a model name appears in every CSV row: no separators, quotes or formula starts */
    const char *nm = cfg_scalar(name);
    bool ok_name = isalnum((unsigned char)nm[0]) || nm[0] == '_';
    for (size_t i = 0; ok_name && i < cfg_scalar_len(name); i++)
        ok_name = isalnum((unsigned char)nm[i]) || strchr("_.+- ", nm[i]) != NULL;
    if (!ok_name || cfg_scalar_len(name) > 128)
        return fail(c, name, "name: use at most 128 letters, digits, '_', '.', '+', '-' and spaces, "
                             "starting with a letter, digit or '_'");
    c->m->name = xstrdup(cfg_scalar(name));
    c->dtype = -1;
    if (dtype && cfg_parse_dtype(c, dtype, &c->m->dtype))
        return -1;
    int64_t cfg_batch = 1;
    if (bn && cfg_parse_int(c, "batch", bn, 1, &cfg_batch))
        return -1;
    if (input->type != YAML_SEQUENCE_NODE)
        return fail(c, input, "input: expected [C, H, W], [S, D] (tokens) or [F], got %s", cfg_node_type_name(input));
    int rank = (int)(input->data.sequence.items.top - input->data.sequence.items.start);
    if (rank < 1 || rank > 3)
        return fail(c, input, "input: expected [C, H, W], [S, D] (tokens) or [F], got %d dimensions", rank);
    c->m->input.rank = rank + 1;
    c->m->input.d[0] = 1;
    for (int i = 0; i < rank; i++)
        if (cfg_parse_int(c, "input", NODE(c, input->data.sequence.items.start[i]), 1, &c->m->input.d[i + 1]))
            return -1;
    if (c->shape.tokens > 0) { /* --tokens: a token-id input [T] only */
        if (rank != 1) {
            snprintf(c->err, c->errlen, "--tokens %lld: %s's input is not token ids [T]", (long long)c->shape.tokens,
                     c->path);
            return -1;
        }
        c->m->input.d[1] = c->shape.tokens;
    }
    if (shape_numel_checked(&c->m->input) < 0)
        return fail(c, input, "input: more than 2^40 elements per sample");
    yaml_node_t *layers = cfg_need_seq(c, root, "layers", "model");
    int pos = 0, cur = 0;
    if (!layers || emit_seq(c, layers, "", &pos, &cur) || check_unique_names(c))
        return -1;
    if (c->shape.kv_len >= 0 && c->n_kv_layers == 0) {
        snprintf(c->err, c->errlen, "--kv-len %lld: %s has no rope, attention or mla layer to give a KV cache",
                 (long long)c->shape.kv_len, c->path);
        return -1;
    }
    model_set_dtype(c->m, c->m->dtype); /* views take their input's */
    char why[256];
    if (model_set_batch(c->m, batch > 0 ? batch : cfg_batch, why, sizeof why)) {
        if (batch > 0) { /* the command line's --batch, not the config, is at fault */
            snprintf(c->err, c->errlen, "--batch %lld: %s", (long long)batch, why);
            return -1;
        }
        return fail(c, bn ? bn : root, "%s", why);
    }
    return 0;
}

/* A parsed config document (taken: deleted here) built into a model: its tree checked
 * (cfg_check_tree), then its layers (cfg_parse_model). */
bench_status cfg_build_document(const char *path, yaml_document_t *doc, int64_t batch, cfg_shape shape, model **out,
                                char *err, size_t errlen)
{
    cfg_ctx c = {.path = path, .err = err, .errlen = errlen, .shape = shape, .doc = *doc};
    int rc = -1;
    *out = NULL;
    c.m = xcalloc(1, sizeof(model));
    c.m->path = xstrdup(path);
    yaml_node_t *root = yaml_document_get_root_node(&c.doc);
    if (!root) {
        yaml_mark_t start = {0, 0, 0};
        cfg_fail_at(&c, start, "the config is empty; expected a mapping with name, input and layers");
    } else {
        c.seen = xcalloc((size_t)(c.doc.nodes.top - c.doc.nodes.start) + 1, 1);
        if (cfg_check_tree(&c, 1, 0) == 0 && cfg_parse_model(&c, root, batch) == 0)
            rc = 0;
        free(c.seen);
        free(c.marks);
        free(c.names);
    }
    yaml_document_delete(&c.doc);
    memset(doc, 0, sizeof *doc);
    if (rc) {
        model_free(c.m);
        return BENCH_ERR_USAGE;
    }
    *out = c.m;
    return BENCH_OK;
}
