/* safetensors headers against the layers built from config.json (safetensors.h). The
 * format: 8 bytes, a little-endian u64 N; N bytes of JSON, an object of tensor name ->
 * {"dtype", "shape", "data_offsets": [begin, end]} (offsets into the bytes after the
 * header) and an optional "__metadata__"; then the data. A sharded checkpoint has
 * model.safetensors.index.json beside it, whose "weight_map" names each tensor's file. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtype.h"
#include "fileio.h"
#include "safetensors.h"
#include "strbuf.h"

/* A tensor the layers hold, under the module path the checkpoint names it by. */
typedef struct want {
    char *name;
    int rank;
    int64_t d[3];
    bool optional; /* lm_head.weight of tied embeddings: checkpoints may leave it out */
    bool seen;
    bool blocks, scales; /* MXFP4: its _blocks and its _scales met */
    const char *file; /* the file whose header holds it (borrowed from check.files) */
} want;

typedef struct wants {
    want *v;
    int n, cap;
} wants;

static void want_add3(wants *w, bool optional, int rank, int64_t d0, int64_t d1, int64_t d2, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
#define want_add(w, optional, rank, d0, d1, ...) want_add3(w, optional, rank, d0, d1, 0, __VA_ARGS__)
static void want_add3(wants *w, bool optional, int rank, int64_t d0, int64_t d1, int64_t d2, const char *fmt, ...)
{
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        w->v = xrealloc(w->v, (size_t)w->cap * sizeof *w->v);
    }
    char name[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    w->v[w->n++] = (want){.name = xstrdup(name), .rank = rank, .d = {d0, d1, d2}, .optional = optional};
}

static int want_cmp(const void *a, const void *b) { return strcmp(((const want *)a)->name, ((const want *)b)->name); }

static want *want_find(const wants *w, const char *name)
{
    want key = {.name = (char *)name};
    return bsearch(&key, w->v, (size_t)w->n, sizeof *w->v, want_cmp);
}

static void wants_free(wants *w)
{
    for (int i = 0; i < w->n; i++)
        free(w->v[i].name);
    free(w->v);
}

/* The tensors Hugging Face's modules hold for the kinds a config.json builds. */
static void wants_from_model(const model *m, wants *w)
{
    for (int i = 0; i < m->n_layers; i++) {
        const layer *l = &m->layers[i];
        int64_t in = l->in.d[l->in.rank - 1];
        switch (l->kind) {
        case LAYER_EMBEDDING:
            want_add(w, false, 2, l->p.num_embeddings, l->p.embedding_dim, "%s.weight", l->name);
            break;
        case LAYER_RMSNORM:
            want_add(w, false, 1, l->p.normalized_shape, 0, "%s.weight", l->name);
            break;
        case LAYER_LAYERNORM: /* nn.LayerNorm: weight, then bias */
            if (l->p.affine)
                want_add(w, false, 1, l->p.normalized_shape, 0, "%s.weight", l->name);
            if (l->p.affine && l->p.bias)
                want_add(w, false, 1, l->p.normalized_shape, 0, "%s.bias", l->name);
            break;
        case LAYER_POS_EMBEDDING: /* GPT-2's wpe: nn.Embedding(num_positions, D) */
            want_add(w, false, 2, l->p.num_positions, l->in.d[2], "%s.weight", l->name);
            break;
        case LAYER_LINEAR: /* nn.Linear's weight [out, in]; Hugging Face's Conv1D's [in, out] */
            if (l->p.hf_conv1d)
                want_add(w, l->p.tied_weights, 2, in, l->p.out_features, "%s.weight", l->name);
            else
                want_add(w, l->p.tied_weights, 2, l->p.out_features, in, "%s.weight", l->name);
            if (l->p.bias)
                want_add(w, false, 1, l->p.out_features, 0, "%s.bias", l->name);
            break;
        case LAYER_ATTENTION: /* gpt-oss's sinks: a parameter of the attention module (self_attn.sinks) */
            if (l->p.sinks) {
                const char *dot = strrchr(l->name, '.');
                want_add(w, false, 1, l->p.num_heads, 0, "%.*ssinks", dot ? (int)(dot - l->name + 1) : 0, l->name);
            }
            break;
        case LAYER_MLA: { /* DeepseekV2Attention's kv_a_layernorm and kv_b_proj, beside the mla layer */
            const char *dot = strrchr(l->name, '.');
            int at = dot ? (int)(dot - l->name + 1) : 0;
            int64_t lr = l->p.kv_lora_rank;
            want_add(w, false, 1, lr, 0, "%.*skv_a_layernorm.weight", at, l->name);
            want_add(w, false, 2, l->p.num_heads * (l->p.qk_nope_head_dim + l->p.v_head_dim), lr,
                     "%.*skv_b_proj.weight", at, l->name);
            break;
        }
        case LAYER_MOE: { /* MixtralBlockSparseTop2MLP: w1, w3 [ffn, H], w2 [H, ffn]; Qwen's
                           * experts the same as gate_proj, up_proj, down_proj */
            if (l->p.score_bias && l->n_inputs > 1 && l->inputs[1] > 0) /* DeepSeek-V3's, held by its router */
                want_add(w, false, 1, l->p.num_experts, 0, "%s.e_score_correction_bias", m->layers[l->inputs[1] - 1].name);
            if (l->p.expert_names == MOE_NAMES_FUSED) { /* GptOssExperts: gate and up interleaved, [in, out] */
                int64_t e_n = l->p.num_experts, f = l->p.ffn_dim;
                want_add3(w, false, 3, e_n, in, 2 * f, "%s.gate_up_proj", l->name);
                want_add3(w, false, 3, e_n, f, in, "%s.down_proj", l->name);
                if (l->p.bias) {
                    want_add(w, false, 2, e_n, 2 * f, "%s.gate_up_proj_bias", l->name);
                    want_add(w, false, 2, e_n, in, "%s.down_proj_bias", l->name);
                }
                break;
            }
            bool proj = l->p.expert_names == MOE_NAMES_PROJ;
            const char *gate = proj ? "gate_proj" : "w1", *down = proj ? "down_proj" : "w2", *up = proj ? "up_proj" : "w3";
            for (int64_t e = 0; e < l->p.num_experts; e++) {
                want_add(w, false, 2, l->p.ffn_dim, in, "%s.%" PRId64 ".%s.weight", l->name, e, gate);
                want_add(w, false, 2, in, l->p.ffn_dim, "%s.%" PRId64 ".%s.weight", l->name, e, down);
                want_add(w, false, 2, l->p.ffn_dim, in, "%s.%" PRId64 ".%s.weight", l->name, e, up);
            }
            break;
        }
        default: /* rope, attention, add, mul, silu, gelu, slice, reshape, concat: no weights */
            break;
        }
    }
    qsort(w->v, (size_t)w->n, sizeof *w->v, want_cmp);
}

static void shape_text(char *buf, size_t len, int rank, const int64_t *d)
{
    size_t at = (size_t)snprintf(buf, len, "[");
    for (int k = 0; k < rank && at < len; k++)
        at += (size_t)snprintf(buf + at, len - at, "%s%" PRId64, k ? ", " : "", d[k]);
    if (at < len)
        snprintf(buf + at, len - at, "]");
}

static const struct {
    const char *name;
    int size;
} st_dtypes[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
                 {"I8", 1}, {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1}, {"BOOL", 1}, {"F8_E4M3", 1},
                 {"F8_E5M2", 1}};
#define N_DTYPES ((int)(sizeof st_dtypes / sizeof st_dtypes[0]))

typedef struct check {
    wants w;
    safetensors_storage st;   /* how config.json says the weights are stored */
    int64_t fp8_scales, mxfp4_blocks, not_built; /* tensors beside the layers' (extra_of) */
    const char *dir;
    const char *file;         /* the file being read (its tensors are marked with it) */
    int64_t tensors;          /* matched */
    int64_t per_dtype[N_DTYPES];
    int64_t names_only;       /* tensors of absent shards: names checked, not shapes */
    char *err;
    size_t errlen;
} check;

static int fail(check *c, const char *file, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(check *c, const char *file, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->err, c->errlen, "%s/%s: %s", c->dir, file, msg);
    return -1;
}

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && strcmp(s + n - k, tail) == 0;
}

/* What a tensor that no layer holds under its name is (extra_of). */
typedef enum extra_kind {
    EXTRA_NONE,          /* nothing the checkpoint may hold: refused */
    EXTRA_BUFFER,        /* a buffer older checkpoints saved beside the weights */
    EXTRA_FP8_SCALE,     /* W_scale_inv beside an fp8 weight W */
    EXTRA_MXFP4_BLOCKS,  /* X_blocks: the MXFP4 values of the experts' X */
    EXTRA_MXFP4_SCALES,  /* X_scales: their scales */
    EXTRA_NOT_BUILT,     /* a tensor of a layer after the forward's (multi-token prediction) */
} extra_kind;

/* name without its last k characters, as a want of rank 'rank', or NULL */
static want *want_stem(const check *c, const char *name, size_t k, int rank)
{
    size_t n = strlen(name);
    if (n <= k || n - k >= 512)
        return NULL;
    char stem[512];
    snprintf(stem, sizeof stem, "%.*s", (int)(n - k), name);
    want *w = want_find(&c->w, stem);
    return w && w->rank == rank ? w : NULL;
}

/* A name no layer holds: a buffer older checkpoints saved beside the weights (a rotary
 * embedding's inv_freq; GPT-2's and GPT-NeoX's causal masks attn.bias, attention.bias and
 * masked_bias: the layers built have no such name, their projections hold the biases), or
 * what the checkpoint's storage adds (c->st): an fp8 weight's block scales, MXFP4
 * experts' blocks and scales (*base: the layer's tensor they hold), a layer after the
 * forward's. */
static extra_kind extra_of(const check *c, const char *name, want **base)
{
    *base = NULL;
    if (ends_with(name, "rotary_emb.inv_freq") || ends_with(name, ".masked_bias") ||
        ends_with(name, ".attention.bias") || ends_with(name, ".attn.bias"))
        return EXTRA_BUFFER;
    if (c->st.fp8_block[0] > 0 && ends_with(name, ".weight_scale_inv") &&
        (*base = want_stem(c, name, strlen("_scale_inv"), 2)))
        return EXTRA_FP8_SCALE;
    if (c->st.mxfp4 && (ends_with(name, "_blocks") || ends_with(name, "_scales")) &&
        (*base = want_stem(c, name, strlen("_blocks"), 3)) &&
        (ends_with((*base)->name, ".gate_up_proj") || ends_with((*base)->name, ".down_proj")))
        return ends_with(name, "_blocks") ? EXTRA_MXFP4_BLOCKS : EXTRA_MXFP4_SCALES;
    long long layer;
    int at = 0;
    if (c->st.extra_layers > 0 && sscanf(name, "model.layers.%lld.%n", &layer, &at) == 1 && at > 0 &&
        layer >= c->st.extra_first && layer - c->st.extra_first < c->st.extra_layers)
        return EXTRA_NOT_BUILT;
    return EXTRA_NONE;
}

/* A tensor name met in a header or an index: one the layers hold (seen once), the same
 * saved by the base model without its prefix (GPT-2's h.0.ln_1.weight for
 * transformer.h.0.ln_1.weight, as transformers loads it), or one extra_of accepts
 * (*extra, and *base the layer's tensor it belongs to; MXFP4 blocks mark it seen).
 * Returns the want, NULL for an extra, or fails. */
static int match_name(check *c, const char *file, const char *name, want **out, extra_kind *extra, want **base)
{
    static const char *const prefixes[] = {"model.", "transformer.", "gpt_neox.", NULL};
    *extra = EXTRA_NONE;
    *base = NULL;
    *out = want_find(&c->w, name);
    for (int k = 0; !*out && prefixes[k]; k++) {
        char *full = xasprintf("%s%s", prefixes[k], name);
        *out = want_find(&c->w, full);
        free(full);
    }
    if (!*out) {
        *extra = extra_of(c, name, base);
        if (*extra == EXTRA_NONE)
            return fail(c, file, "holds the tensor '%s', which the layers built from config.json do not have (a "
                                 "config.json of another model, or a field of it not read)", name);
        if (*extra == EXTRA_MXFP4_SCALES) {
            if ((*base)->scales)
                return fail(c, file, "the tensor '%s' is named twice across the checkpoint's files", name);
            (*base)->scales = true;
        }
        if (*extra != EXTRA_MXFP4_BLOCKS)
            return 0;
        *out = *base; /* the experts' tensor, held as its blocks */
        (*out)->blocks = true;
    }
    if ((*out)->seen)
        return fail(c, file, "the tensor '%s' is named twice across the checkpoint's files", (*out)->name);
    (*out)->seen = true;
    (*out)->file = c->file;
    if (*extra)
        *out = NULL;
    return 0;
}

/* The shape an extra tensor must have, from the layer's tensor w it belongs to; its dtype
 * in *dt. False for an extra whose shape is not checked (buffers, layers not built). */
static bool extra_shape(const check *c, extra_kind k, const want *w, int *rank, int64_t *d, const char **dt)
{
    if (k == EXTRA_FP8_SCALE) { /* one float32 per block of the [out, in] weight */
        *rank = 2, *dt = "F32";
        d[0] = (w->d[0] + c->st.fp8_block[0] - 1) / c->st.fp8_block[0];
        d[1] = (w->d[1] + c->st.fp8_block[1] - 1) / c->st.fp8_block[1];
        return true;
    }
    if (k == EXTRA_MXFP4_BLOCKS || k == EXTRA_MXFP4_SCALES) { /* [E, in, out] as [E, out, in / 32 (, 16)] */
        *rank = k == EXTRA_MXFP4_BLOCKS ? 4 : 3, *dt = "U8";
        d[0] = w->d[0], d[1] = w->d[2], d[2] = w->d[1] / 32, d[3] = 16;
        return true;
    }
    return false;
}

/* A header's n bytes as a JSON object of tensors, or NULL (failed). */
static json_t *header_json(check *c, const char *file, const char *text, uint64_t n)
{
    json_error_t je;
    json_t *root = json_loadb(text, (size_t)n, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        fail(c, file, "its header is not JSON (byte %d: %s)", je.position + 8, je.text);
    else if (!json_is_object(root)) {
        fail(c, file, "its header is not a JSON object of tensors");
        json_decref(root);
        root = NULL;
    }
    return root;
}

/* dir/file's header as a JSON object; *data_len the bytes after it. Only a regular file
 * is read (a FIFO is refused at once, never waited on: fileio.h). */
static json_t *read_header(check *c, const char *file, int64_t *data_len)
{
    char path[4096], why[1200];
    snprintf(path, sizeof path, "%s/%s", c->dir, file);
    struct stat s;
    int fd = fileio_open(path, (size_t)-1, NULL, &s, NULL, why, sizeof why);
    if (fd < 0) {
        fail(c, file, "%s", why);
        return NULL;
    }
    FILE *f = fdopen(fd, "rb");
    unsigned char len8[8];
    json_t *root = NULL;
    if (!f) {
        close(fd);
        fail(c, file, "cannot read it: %s", strerror(errno));
        return NULL;
    }
    if (s.st_size < 8 || fread(len8, 1, 8, f) != 8) {
        fail(c, file, "shorter than a safetensors header's 8-byte length");
        goto out;
    }
    uint64_t n = 0;
    for (int k = 7; k >= 0; k--)
        n = n << 8 | len8[k];
    if (n < 2 || n > SAFETENSORS_MAX_HEADER || n > (uint64_t)s.st_size - 8) {
        fail(c, file, "its first 8 bytes give a header of %" PRIu64 " bytes, in a file of %lld: not a safetensors file",
             n, (long long)s.st_size);
        goto out;
    }
    char *text = malloc((size_t)n);
    if (!text) {
        fail(c, file, "no memory for its %" PRIu64 "-byte header", n);
        goto out;
    }
    if (fread(text, 1, (size_t)n, f) != (size_t)n) {
        fail(c, file, "cannot read its %" PRIu64 "-byte header", n);
        free(text);
        goto out;
    }
    root = header_json(c, file, text, n);
    free(text);
    *data_len = (int64_t)((uint64_t)s.st_size - 8 - n);
out:
    fclose(f);
    return root;
}

/* One header entry: well formed, and with the shape the layers give it. */
static int check_tensor(check *c, const char *file, const char *name, json_t *t, int64_t data_len)
{
    json_t *dt = json_object_get(t, "dtype"), *sh = json_object_get(t, "shape"), *off = json_object_get(t, "data_offsets");
    if (!json_is_object(t) || !json_is_string(dt) || !json_is_array(sh) || !json_is_array(off) ||
        json_array_size(off) != 2 || json_array_size(sh) > 8)
        return fail(c, file, "the header's entry '%s' is not {dtype, shape, data_offsets}", name);
    int di = -1;
    for (int k = 0; k < N_DTYPES; k++)
        if (strcmp(json_string_value(dt), st_dtypes[k].name) == 0)
            di = k;
    if (di < 0)
        return fail(c, file, "'%s': dtype '%s' is not one safetensors defines", name, json_string_value(dt));
    int rank = (int)json_array_size(sh);
    int64_t d[8], numel = 1;
    for (int k = 0; k < rank; k++) {
        json_t *v = json_array_get(sh, (size_t)k);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > ((int64_t)1 << 40))
            return fail(c, file, "'%s': the shape holds something other than a size", name);
        d[k] = json_integer_value(v);
        numel = numel && d[k] > INT64_MAX / 8 / numel ? -1 : numel * d[k];
        if (numel < 0)
            return fail(c, file, "'%s': a shape too large", name);
    }
    json_t *b = json_array_get(off, 0), *e = json_array_get(off, 1);
    if (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 ||
        json_integer_value(e) < json_integer_value(b) || json_integer_value(e) > data_len ||
        json_integer_value(e) - json_integer_value(b) != numel * st_dtypes[di].size) {
        char s[160];
        shape_text(s, sizeof s, rank, d);
        return fail(c, file, "'%s': data_offsets do not hold %s %s in the file's %lld bytes of data", name, s,
                    st_dtypes[di].name, (long long)data_len);
    }
    want *w, *base;
    extra_kind extra;
    if (match_name(c, file, name, &w, &extra, &base) != 0)
        return -1;
    int xr;
    int64_t xd[4];
    const char *xdt;
    if (extra && extra_shape(c, extra, base, &xr, xd, &xdt)) {
        bool same = rank == xr && strcmp(st_dtypes[di].name, xdt) == 0;
        for (int k = 0; same && k < rank; k++)
            same = d[k] == xd[k];
        if (!same || (extra != EXTRA_FP8_SCALE && base->d[1] % 32)) {
            char got[160], exp[160], of[160];
            shape_text(got, sizeof got, rank, d);
            shape_text(exp, sizeof exp, xr, xd);
            shape_text(of, sizeof of, base->rank, base->d);
            if (extra == EXTRA_FP8_SCALE)
                return fail(c, file, "'%s' is %s %s in the checkpoint, but quantization_config's fp8 blocks of %lld x "
                            "%lld over '%s' %s give %s %s", name, got, st_dtypes[di].name,
                            (long long)c->st.fp8_block[0], (long long)c->st.fp8_block[1], base->name, of, exp, xdt);
            return fail(c, file, "'%s' is %s %s in the checkpoint, but MXFP4 (quantization_config) holds '%s' %s "
                        "[experts, in, out] as %s %s%s", name, got, st_dtypes[di].name, base->name, of, exp, xdt,
                        base->d[1] % 32 ? ", and needs its in to be a multiple of 32" : "");
        }
    }
    if (extra) {
        c->fp8_scales += extra == EXTRA_FP8_SCALE;
        c->mxfp4_blocks += extra == EXTRA_MXFP4_BLOCKS;
        c->not_built += extra == EXTRA_NOT_BUILT;
        if (extra != EXTRA_BUFFER && extra != EXTRA_NOT_BUILT) /* the storage of the layers' weights */
            c->per_dtype[di]++;
        return 0;
    }
    if (!w)
        return 0;
    bool same = rank == w->rank;
    for (int k = 0; same && k < rank && k < 3; k++)
        same = d[k] == w->d[k];
    if (!same) {
        char got[160], exp[160];
        shape_text(got, sizeof got, rank, d);
        shape_text(exp, sizeof exp, w->rank, w->d);
        return fail(c, file, "'%s' is %s in the checkpoint, but the layers built from config.json have %s", name, got,
                    exp);
    }
    c->tensors++;
    c->per_dtype[di]++;
    return 0;
}

/* A tensor's bytes in its file's data, for the overlap check. */
typedef struct span {
    int64_t begin, end;
    const char *name;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

static int check_header(check *c, const char *file, json_t *h, int64_t data_len);

static int check_file(check *c, const char *file)
{
    int64_t data_len = 0;
    json_t *h = read_header(c, file, &data_len);
    if (!h)
        return -1;
    int rc = check_header(c, file, h, data_len);
    json_decref(h);
    return rc;
}

/* Every entry of a header h (its file's data data_len bytes): well formed, of the shape
 * the layers give it, and no two sharing bytes. */
static int check_header(check *c, const char *file, json_t *h, int64_t data_len)
{
    const char *name;
    json_t *t;
    int rc = 0, n = 0;
    c->file = file;
    span *spans = xmalloc((json_object_size(h) + 1) * sizeof *spans);
    json_object_foreach(h, name, t) {
        if (strcmp(name, "__metadata__") == 0)
            continue;
        if ((rc = check_tensor(c, file, name, t, data_len)) != 0)
            break;
        json_t *off = json_object_get(t, "data_offsets");
        spans[n++] = (span){json_integer_value(json_array_get(off, 0)), json_integer_value(json_array_get(off, 1)), name};
    }
    /* each tensor's bytes its own: two that share bytes are no checkpoint a writer makes */
    qsort(spans, (size_t)n, sizeof *spans, span_cmp);
    for (int i = 1; rc == 0 && i < n; i++)
        if (spans[i].begin < spans[i - 1].end && spans[i].end > spans[i].begin)
            rc = fail(c, file, "the data of '%s' (bytes %lld to %lld) overlaps that of '%s' (to %lld): not a safetensors "
                      "file", spans[i].name, (long long)spans[i].begin, (long long)spans[i].end, spans[i - 1].name,
                      (long long)spans[i - 1].end);
    free(spans);
    return rc;
}

/* Whether dir/file is there: 1 a regular file, 0 nothing at that name, -1 something
 * that is no file to read (a link to nothing, a link loop, a FIFO, a folder), with why. */
static int present(const char *dir, const char *file, char *why, size_t len)
{
    char path[4096];
    struct stat s;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (lstat(path, &s) != 0)
        return 0;
    if (stat(path, &s) != 0) {
        snprintf(why, len, "%s", errno == ELOOP ? "a loop of symbolic links" : "a symbolic link to a file that is not there");
        return -1;
    }
    if (!S_ISREG(s.st_mode)) {
        snprintf(why, len, "%s", S_ISFIFO(s.st_mode) ? "a FIFO" : S_ISDIR(s.st_mode) ? "a folder" : "not a regular file");
        return -1;
    }
    return 1;
}

/* The index's shards, each checked once; those absent are checked by name from the index.
 * *n_files, *n_absent: what it names. */
static int check_index(check *c, const char *index, int *n_files, int *n_absent)
{
    char path[4096], why[1200];
    snprintf(path, sizeof path, "%s/%s", c->dir, index);
    strbuf text = {0};
    if (fileio_read(path, SAFETENSORS_MAX_HEADER, FILEIO_TEXT, NULL, &text, NULL, why, sizeof why) != BENCH_OK) {
        strbuf_free(&text);
        return fail(c, index, "%s", why);
    }
    json_error_t je;
    json_t *root = json_loadb(text.data, text.len, JSON_REJECT_DUPLICATES, &je), *map = json_object_get(root, "weight_map");
    strbuf_free(&text);
    if (!root)
        return fail(c, index, "%d:%d: JSON: %s", je.line, je.column, je.text);
    if (!json_is_object(map)) {
        json_decref(root);
        return fail(c, index, "no \"weight_map\" object naming each tensor's file");
    }
    json_t *done = json_object(); /* file -> whether it is there, once checked */
    const char *name;
    json_t *v;
    int rc = 0;
    json_object_foreach(map, name, v) {
        const char *file = json_string_value(v);
        if (!file || !*file || strchr(file, '/') || strcmp(file, "..") == 0) {
            rc = fail(c, index, "the weight_map gives '%s' no file name beside the index", name);
            break;
        }
        if (json_object_get(done, file))
            continue;
        int there = present(c->dir, file, why, sizeof why);
        if (there < 0) {
            rc = fail(c, file, "%s, named by %s: not a shard to read (remove it, or fetch the shard)", why, index);
            break;
        }
        json_object_set_new(done, file, json_boolean(there));
        (*n_files)++;
        if (there) {
            if ((rc = check_file(c, file)) != 0)
                break;
        } else
            (*n_absent)++;
    }
    /* the tensors of absent shards, by name; and every tensor the index names must be in
     * its shard (a present shard marked it seen) */
    if (rc == 0)
        json_object_foreach(map, name, v) {
            want *w = want_find(&c->w, name), *base;
            extra_kind extra;
            if (json_is_true(json_object_get(done, json_string_value(v)))) {
                /* a name beside the layers' (extra_of) is the shard's own business */
                if (w ? !w->seen || strcmp(w->file, json_string_value(v)) != 0 : extra_of(c, name, &base) == EXTRA_NONE) {
                    rc = fail(c, index, "names '%s' in %s, whose header does not hold it%s%s", name,
                              json_string_value(v), w && w->seen ? " (it is in " : "", w && w->seen ? w->file : "");
                    if (w && w->seen)
                        snprintf(c->err + strlen(c->err), c->errlen - strlen(c->err), ")");
                    break;
                }
            } else {
                if ((rc = match_name(c, index, name, &w, &extra, &base)) != 0)
                    break;
                c->names_only += w != NULL || extra == EXTRA_MXFP4_BLOCKS;
            }
        }
    /* ... and every tensor a present shard holds is named by the index, in that shard */
    for (int i = 0; rc == 0 && i < c->w.n; i++) {
        const want *w = &c->w.v[i];
        json_t *at = w->seen && w->file ? json_object_get(map, w->name) : NULL;
        if (w->seen && w->file && !at)
            rc = fail(c, index, "does not name '%s', which %s holds", w->name, w->file);
    }
    json_decref(done);
    json_decref(root);
    return rc;
}

static const char *model_dtype_st(dtype_t t)
{
    return t == DTYPE_BF16 ? "BF16" : t == DTYPE_FP16 ? "F16" : "F32";
}

bench_status safetensors_check(const char *dir, const model *m, const safetensors_storage *st, char *note,
                               size_t notelen, char *err, size_t errlen)
{
    note[0] = '\0';
    const char *index = "model.safetensors.index.json", *single = "model.safetensors";
    char why[200];
    int has_index = present(dir, index, why, sizeof why), has_single = has_index ? 0 : present(dir, single, why, sizeof why);
    if (has_index < 0 || has_single < 0) { /* there, and no file: never "no checkpoint" in silence */
        snprintf(err, errlen, "%s/%s: %s, not a file to read (remove it, or give the checkpoint's file)", dir,
                 has_index < 0 ? index : single, why);
        return BENCH_ERR_USAGE;
    }
    bool sharded = has_index > 0;
    if (!sharded && !has_single)
        return BENCH_OK;
    check c = {.dir = dir, .err = err, .errlen = errlen, .st = st ? *st : (safetensors_storage){{0, 0}, false, 0, 0}};
    wants_from_model(m, &c.w);
    int n_files = 1, n_absent = 0, rc;
    if (sharded) {
        n_files = 0;
        rc = check_index(&c, index, &n_files, &n_absent);
    } else
        rc = check_file(&c, single);
    int missing = 0;
    const want *first = NULL;
    for (int i = 0; rc == 0 && i < c.w.n; i++)
        if (!c.w.v[i].seen && !c.w.v[i].optional)
            missing++, first = first ? first : &c.w.v[i];
    for (int i = 0; rc == 0 && i < c.w.n; i++)
        if (c.w.v[i].blocks != c.w.v[i].scales)
            rc = fail(&c, sharded ? index : single, "holds '%s_%s' without its '%s_%s': MXFP4 needs both", c.w.v[i].name,
                      c.w.v[i].blocks ? "blocks" : "scales", c.w.v[i].name, c.w.v[i].blocks ? "scales" : "blocks");
    if (rc == 0 && missing) {
        char s[160];
        shape_text(s, sizeof s, first->rank, first->d);
        if (missing == 1)
            rc = fail(&c, sharded ? index : single, "lacks '%s' %s, which the layers built from config.json have",
                      first->name, s);
        else
            rc = fail(&c, sharded ? index : single, "lacks %d tensors that the layers built from config.json have, "
                      "'%s' %s among them", missing, first->name, s);
    }
    if (rc == 0) {
        strbuf b = {0};
        if (sharded)
            strbuf_printf(&b, "%s/%s and %d shard%s", dir, index, n_files, n_files == 1 ? "" : "s");
        else
            strbuf_printf(&b, "%s/%s", dir, single);
        strbuf_printf(&b, ": %lld tensors match the layers' shapes (headers read, not the weights)",
                      (long long)c.tensors);
        if (c.fp8_scales)
            strbuf_printf(&b, "; %lld fp8 weights' block scales (weight_scale_inv, %lld x %lld blocks)",
                          (long long)c.fp8_scales, (long long)c.st.fp8_block[0], (long long)c.st.fp8_block[1]);
        if (c.mxfp4_blocks)
            strbuf_printf(&b, "; %lld expert tensors as MXFP4 blocks and scales", (long long)c.mxfp4_blocks);
        if (c.not_built)
            strbuf_printf(&b, "; %lld tensors of the layers after the forward's (model.layers.%lld on: "
                          "multi-token prediction, not built)", (long long)c.not_built, (long long)c.st.extra_first);
        if (n_absent)
            strbuf_printf(&b, "; %d shard%s absent, whose %lld tensors were checked by name only", n_absent,
                          n_absent == 1 ? "" : "s", (long long)c.names_only);
        int kinds = 0, top = -1;
        for (int k = 0; k < N_DTYPES; k++)
            if (c.per_dtype[k])
                kinds++, top = top < 0 || c.per_dtype[k] > c.per_dtype[top] ? k : top;
        if (kinds == 1)
            strbuf_printf(&b, "; stored as %s", st_dtypes[top].name);
        else if (kinds > 1) {
            strbuf_printf(&b, "; stored as");
            for (int k = 0, sep = 0; k < N_DTYPES; k++)
                if (c.per_dtype[k])
                    strbuf_printf(&b, "%s %s (%lld)", sep++ ? "," : "", st_dtypes[k].name, (long long)c.per_dtype[k]);
        }
        if (top >= 0 && strcmp(st_dtypes[top].name, model_dtype_st(m->dtype)) != 0)
            strbuf_printf(&b, ", while config.json's torch_dtype is %s", dtype_torch_name(m->dtype));
        snprintf(note, notelen, "%s", b.data ? b.data : "");
        strbuf_free(&b);
    }
    wants_free(&c.w);
    return rc == 0 ? BENCH_OK : BENCH_ERR_USAGE;
}

bench_status safetensors_check_header(const char *name, const char *text, size_t n, int64_t data_len, const model *m,
                                      const safetensors_storage *st, char *err, size_t errlen)
{
    check c = {.dir = ".", .err = err, .errlen = errlen, .st = st ? *st : (safetensors_storage){{0, 0}, false, 0, 0}};
    int rc = -1;
    wants_from_model(m, &c.w);
    json_t *h = header_json(&c, name, text, n);
    if (h) {
        rc = check_header(&c, name, h, data_len);
        json_decref(h);
    }
    wants_free(&c.w);
    return rc == 0 ? BENCH_OK : BENCH_ERR_USAGE;
}
