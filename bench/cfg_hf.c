/* A Hugging Face config.json as a decoder: model_type llama, mistral, qwen2 or mixtral
 * (the fields docs/config.md lists), read with libjansson and written out as the YAML a user
 * would write for it (Hugging Face's module names, one block per decoder layer), which
 * the YAML path then builds and checks like any config. A field that changes the shapes
 * and is not built here (another family's experts, another activation, a rope scaling
 * other than linear and llama3) is an error naming it, with its line and column in the file,
 * never silently ignored. */
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cfg_internal.h"
#include "fileio.h"
#include "safetensors.h"
#include "strbuf.h"

/* Tokens per sequence when the command line gives none. */
#define HF_DEFAULT_TOKENS 128
/* The largest integer field read (sizes, counts): products of two stay far from int64's
 * end, and the YAML path's checks (2^40 elements a tensor) do the rest. */
#define HF_MAX_INT (((int64_t)1 << 31) - 1)
/* The largest config.json read (published ones are a few KB). */
#define HF_MAX_FILE_BYTES ((size_t)16 << 20)

typedef struct hf {
    const char *path;    /* the config.json */
    char *text;          /* its bytes, to find where a key is written */
    json_t *root;
    char *err;
    size_t errlen;
} hf;

/* "path:line:col: key: ..." at the key's first appearance in the file, or, where it is
 * not written (a missing field), at the object's opening brace. Returns -1. */
static int hf_fail(hf *h, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int hf_fail(hf *h, const char *key, const char *fmt, ...)
{
    char quoted[96], msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(quoted, sizeof quoted, "\"%s\"", key);
    const char *at = h->text ? strstr(h->text, quoted) : NULL;
    if (!at)
        at = h->text ? strchr(h->text, '{') : NULL;
    if (!at) {
        snprintf(h->err, h->errlen, "%s: %s: %s", h->path, key, msg);
        return -1;
    }
    int line = 1, col = 1;
    for (const char *p = h->text; p < at; p++)
        line += *p == '\n', col = *p == '\n' ? 1 : col + 1;
    snprintf(h->err, h->errlen, "%s:%d:%d: %s: %s", h->path, line, col, key, msg);
    return -1;
}

static json_t *field(hf *h, json_t *obj, const char *key) { return json_object_get(obj ? obj : h->root, key); }

/* An integer field >= min; def where absent and not required (JSON null counts as absent). */
static int get_int(hf *h, json_t *obj, const char *key, bool required, int64_t def, int64_t min, int64_t *out)
{
    json_t *v = field(h, obj, key);
    if (!v || json_is_null(v)) {
        if (required)
            return hf_fail(h, key, "missing: layerbench needs it to build the model");
        *out = def;
        return 0;
    }
    if (!json_is_integer(v))
        return hf_fail(h, key, "expected an integer");
    *out = json_integer_value(v);
    if (*out < min)
        return hf_fail(h, key, "expected at least %lld, got %lld", (long long)min, (long long)*out);
    if (*out > HF_MAX_INT) /* every size fits an int, and their products an int64 */
        return hf_fail(h, key, "%lld is larger than the %lld layerbench takes", (long long)*out, (long long)HF_MAX_INT);
    return 0;
}

static int get_num(hf *h, json_t *obj, const char *key, bool required, double def, double *out)
{
    json_t *v = field(h, obj, key);
    if (!v || json_is_null(v)) {
        if (required)
            return hf_fail(h, key, "missing: layerbench needs it to build the model");
        *out = def;
        return 0;
    }
    if (!json_is_number(v) || !(json_number_value(v) > 0))
        return hf_fail(h, key, "expected a number above 0");
    *out = json_number_value(v);
    return 0;
}

static int get_bool(hf *h, const char *key, bool def, bool *out)
{
    json_t *v = field(h, NULL, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v))
        return hf_fail(h, key, "expected true or false");
    *out = json_is_true(v);
    return 0;
}

/* A string field: *out NULL where absent or null; -1 (with the error) where it is there
 * and not a string: a value of another type is never taken for "not given". */
static int get_str(hf *h, json_t *obj, const char *key, const char *expected, const char **out)
{
    json_t *v = field(h, obj, key);
    *out = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return hf_fail(h, key, "expected a string (%s), got %s", expected,
                       json_is_integer(v) || json_is_real(v) ? "a number" : json_is_boolean(v) ? "true or false"
                       : json_is_array(v) ? "a list" : "an object");
    *out = json_string_value(v);
    return 0;
}

typedef struct hf_model {
    const char *type;
    int64_t hidden, inter, heads, kv_heads, head_dim, layers, vocab, max_pos, window;
    int64_t experts, top_k; /* mixtral: num_local_experts, num_experts_per_tok; 0 without */
    double eps, theta;
    bool tied, qkv_bias, o_bias, mlp_bias;
    char rope[256];       /* rope's scaling keys, ", rope_type: llama3, factor: 8, ..." */
    const char *dtype;    /* torch_dtype as a layerbench dtype, or NULL */
} hf_model;

/* rope_scaling: null, or {rope_type (or type): default, linear or llama3, and its keys} */
static int read_rope_scaling(hf *h, hf_model *m)
{
    json_t *rs = field(h, NULL, "rope_scaling");
    m->rope[0] = 0;
    if (!rs || json_is_null(rs))
        return 0;
    if (!json_is_object(rs))
        return hf_fail(h, "rope_scaling", "expected null or an object");
    const char *t, *old_key;
    if (get_str(h, rs, "rope_type", "default, linear or llama3", &t) ||
        get_str(h, rs, "type", "default, linear or llama3", &old_key))
        return -1;
    t = t ? t : old_key;
    if (!t || strcmp(t, "default") == 0)
        return 0;
    double factor = 1, lo = 1, hi = 4;
    if (strcmp(t, "linear") == 0) {
        if (get_num(h, rs, "factor", true, 1, &factor))
            return -1;
        snprintf(m->rope, sizeof m->rope, ", rope_type: linear, factor: %.17g", factor);
        return 0;
    }
    if (strcmp(t, "llama3") == 0) {
        int64_t old = 8192;
        if (get_num(h, rs, "factor", true, 1, &factor) || get_num(h, rs, "low_freq_factor", true, 1, &lo) ||
            get_num(h, rs, "high_freq_factor", true, 4, &hi) ||
            get_int(h, rs, "original_max_position_embeddings", true, 8192, 1, &old))
            return -1;
        snprintf(m->rope, sizeof m->rope,
                 ", rope_type: llama3, factor: %.17g, low_freq_factor: %.17g, high_freq_factor: %.17g, "
                 "original_max_position_embeddings: %lld",
                 factor, lo, hi, (long long)old);
        return 0;
    }
    return hf_fail(h, "rope_scaling", "rope type '%s' is not built (layerbench has default, linear and llama3)", t);
}

/* Fields a family adds that would change the shapes or the computation, refused. */
static int refuse_unbuilt(hf *h, const hf_model *m)
{
    static const char *const moe[] = {"num_local_experts", "num_experts", "n_routed_experts", NULL};
    for (int i = strcmp(m->type, "mixtral") == 0; moe[i]; i++) {
        json_t *v = field(h, NULL, moe[i]);
        if (v && !json_is_null(v) && !(json_is_integer(v) && json_integer_value(v) <= 1))
            return hf_fail(h, moe[i], "%s's experts are not built (mixtral's are: model_type mixtral)", m->type);
    }
    json_t *q = field(h, NULL, "quantization_config");
    if (q && !json_is_null(q)) {
        json_t *method = json_is_object(q) ? json_object_get(q, "quant_method") : NULL;
        return hf_fail(h, "quantization_config", "quantized weights%s%s%s are not built: layerbench times the layers "
                       "in bf16, fp16 or fp32 (remove the field to time the model unquantized)",
                       json_is_string(method) ? " (" : "", json_is_string(method) ? json_string_value(method) : "",
                       json_is_string(method) ? ")" : "");
    }
    const char *act;
    if (get_str(h, NULL, "hidden_act", "silu", &act))
        return -1;
    if (act && strcmp(act, "silu") != 0)
        return hf_fail(h, "hidden_act", "'%s': only silu (SwiGLU) is built", act);
    bool sw = false;
    if (strcmp(m->type, "qwen2") == 0 && (get_bool(h, "use_sliding_window", false, &sw) || sw))
        return sw ? hf_fail(h, "use_sliding_window", "Qwen2's per-layer sliding window is not built") : -1;
    return 0;
}

static int read_model(hf *h, hf_model *m)
{
    memset(m, 0, sizeof *m);
    if (get_str(h, NULL, "model_type", "llama, mistral, qwen2 or mixtral", &m->type))
        return -1;
    if (!m->type)
        return hf_fail(h, "model_type", "missing: expected llama, mistral, qwen2 or mixtral");
    bool qwen = strcmp(m->type, "qwen2") == 0, mixtral = strcmp(m->type, "mixtral") == 0;
    if (strcmp(m->type, "llama") != 0 && strcmp(m->type, "mistral") != 0 && !qwen && !mixtral)
        return hf_fail(h, "model_type", "'%s' is not built (layerbench reads llama, mistral, qwen2 and mixtral)",
                       m->type);
    if (refuse_unbuilt(h, m) || get_int(h, NULL, "hidden_size", true, 0, 1, &m->hidden) ||
        get_int(h, NULL, "intermediate_size", true, 0, 1, &m->inter) ||
        get_int(h, NULL, "num_attention_heads", true, 0, 1, &m->heads) ||
        get_int(h, NULL, "num_key_value_heads", false, m->heads, 1, &m->kv_heads) ||
        get_int(h, NULL, "num_hidden_layers", true, 0, 1, &m->layers) ||
        get_int(h, NULL, "vocab_size", true, 0, 1, &m->vocab) ||
        get_int(h, NULL, "max_position_embeddings", true, 0, 1, &m->max_pos) ||
        get_num(h, NULL, "rms_norm_eps", false, 1e-6, &m->eps) || get_num(h, NULL, "rope_theta", false, 10000, &m->theta) ||
        get_bool(h, "tie_word_embeddings", false, &m->tied) || read_rope_scaling(h, m))
        return -1;
    if (m->layers > 4096)
        return hf_fail(h, "num_hidden_layers", "more than 4096 layers");
    if (m->heads % m->kv_heads)
        return hf_fail(h, "num_key_value_heads", "%lld does not divide num_attention_heads %lld",
                       (long long)m->kv_heads, (long long)m->heads);
    if (!field(h, NULL, "head_dim") || json_is_null(field(h, NULL, "head_dim"))) {
        if (m->hidden % m->heads)
            return hf_fail(h, "num_attention_heads", "%lld does not divide hidden_size %lld (and no head_dim is given)",
                           (long long)m->heads, (long long)m->hidden);
        m->head_dim = m->hidden / m->heads;
    } else if (get_int(h, NULL, "head_dim", true, 0, 2, &m->head_dim)) {
        return -1;
    }
    /* Qwen2: biases on q, k and v always; Llama: attention_bias on all four, mlp_bias */
    bool ab = false;
    if (get_bool(h, "attention_bias", false, &ab) || get_bool(h, "mlp_bias", false, &m->mlp_bias))
        return -1;
    m->qkv_bias = qwen || ab, m->o_bias = !qwen && ab;
    if ((mixtral || strcmp(m->type, "mistral") == 0) && get_int(h, NULL, "sliding_window", false, 0, 1, &m->window))
        return -1;
    if (mixtral && (get_int(h, NULL, "num_local_experts", true, 0, 1, &m->experts) ||
                    get_int(h, NULL, "num_experts_per_tok", true, 0, 1, &m->top_k)))
        return -1;
    if (m->experts > 1024)
        return hf_fail(h, "num_local_experts", "%lld: at most 1024", (long long)m->experts);
    if (m->top_k > m->experts)
        return hf_fail(h, "num_experts_per_tok", "%lld is more than num_local_experts %lld", (long long)m->top_k,
                       (long long)m->experts);
    const char *td;
    if (get_str(h, NULL, "torch_dtype", "bfloat16, float16 or float32", &td))
        return -1;
    m->dtype = !td ? NULL : strcmp(td, "bfloat16") == 0 ? "bf16" : strcmp(td, "float16") == 0 ? "fp16"
             : strcmp(td, "float32") == 0 ? "fp32" : NULL;
    if (td && !m->dtype)
        return hf_fail(h, "torch_dtype", "'%s': expected bfloat16, float16 or float32", td);
    return 0;
}

/* The model's name: its folder's (Llama-3.2-1B), kept to what a config's name allows. */
static void model_name(const char *path, const char *type, char *name, size_t len)
{
    const char *end = strrchr(path, '/');
    char dir[256] = "";
    if (end && end > path) {
        const char *start = end - 1;
        while (start > path && start[-1] != '/')
            start--;
        snprintf(dir, sizeof dir, "%.*s", (int)(end - start), start);
    }
    if (!*dir || strcmp(dir, ".") == 0 || strcmp(dir, "..") == 0)
        snprintf(dir, sizeof dir, "%s", type);
    size_t n = 0;
    for (const char *p = dir; *p && n + 1 < len && n < 128; p++)
        if (isalnum((unsigned char)*p) || strchr("_.+-", *p))
            name[n++] = *p;
    name[n] = 0;
    if (!n || !(isalnum((unsigned char)name[0]) || name[0] == '_'))
        snprintf(name, len, "%s", type);
}

static void write_yaml(const hf_model *m, const char *name, int64_t tokens, strbuf *b)
{
    int64_t q = m->heads * m->head_dim, kv = m->kv_heads * m->head_dim;
    const char *qb = m->qkv_bias ? "true" : "false", *ob = m->o_bias ? "true" : "false",
               *mb = m->mlp_bias ? "true" : "false";
    strbuf_printf(b, "name: %s\ninput: [%lld]\n", name, (long long)tokens);
    if (m->dtype)
        strbuf_printf(b, "dtype: %s\n", m->dtype);
    strbuf_printf(b, "layers:\n  - kind: block\n    name: model\n    layers:\n"
                     "      - {kind: embedding, name: embed_tokens, num_embeddings: %lld, embedding_dim: %lld}\n"
                     "      - kind: block\n        name: layers\n        layers:\n",
                  (long long)m->vocab, (long long)m->hidden);
    char prev[64] = "/model.embed_tokens";
    for (int64_t i = 0; i < m->layers; i++) {
        char p[48];
        snprintf(p, sizeof p, "/model.layers.%lld", (long long)i);
        const char *I = "              ", *J = "                  ";
        strbuf_printf(b, "          - kind: block\n            name: %lld\n            layers:\n", (long long)i);
        strbuf_printf(b, "%s- {kind: rmsnorm, name: input_layernorm, eps: %.17g, input: %s}\n", I, m->eps, prev);
        strbuf_printf(b, "%s- kind: block\n%s  name: self_attn\n%s  layers:\n", I, I, I);
        strbuf_printf(b, "%s- {kind: linear, name: q_proj, out_features: %lld, bias: %s, input: %s.input_layernorm}\n",
                      J, (long long)q, qb, p);
        strbuf_printf(b, "%s- {kind: linear, name: k_proj, out_features: %lld, bias: %s, input: %s.input_layernorm}\n",
                      J, (long long)kv, qb, p);
        strbuf_printf(b, "%s- {kind: linear, name: v_proj, out_features: %lld, bias: %s, input: %s.input_layernorm}\n",
                      J, (long long)kv, qb, p);
        for (int k = 0; k < 2; k++)
            strbuf_printf(b, "%s- {kind: rope, name: rotary_%s, num_heads: %lld, head_dim: %lld, rope_theta: %.17g%s, "
                             "input: %s.self_attn.%s_proj}\n",
                          J, k ? "k" : "q", (long long)(k ? m->kv_heads : m->heads), (long long)m->head_dim, m->theta,
                          m->rope, p, k ? "k" : "q");
        strbuf_printf(b, "%s- {kind: attention, name: attn, num_heads: %lld, num_key_value_heads: %lld, head_dim: %lld",
                      J, (long long)m->heads, (long long)m->kv_heads, (long long)m->head_dim);
        if (m->window)
            strbuf_printf(b, ", sliding_window: %lld", (long long)m->window);
        strbuf_printf(b, ", inputs: [rotary_q, rotary_k, v_proj]}\n");
        strbuf_printf(b, "%s- {kind: linear, name: o_proj, out_features: %lld, bias: %s}\n", J, (long long)m->hidden, ob);
        strbuf_printf(b, "%s- {kind: add, name: add, inputs: [%s, %s.self_attn.o_proj]}\n", I, prev, p);
        strbuf_printf(b, "%s- {kind: rmsnorm, name: post_attention_layernorm, eps: %.17g}\n", I, m->eps);
        if (m->experts) { /* MixtralSparseMoeBlock: the router, then the experts */
            strbuf_printf(b, "%s- kind: block\n%s  name: block_sparse_moe\n%s  layers:\n", I, I, I);
            strbuf_printf(b, "%s- {kind: linear, name: gate, out_features: %lld, bias: false}\n", J, (long long)m->experts);
            strbuf_printf(b, "%s- {kind: moe, name: experts, num_experts: %lld, top_k: %lld, ffn_dim: %lld, "
                             "inputs: [%s.post_attention_layernorm, gate]}\n",
                          J, (long long)m->experts, (long long)m->top_k, (long long)m->inter, p);
            strbuf_printf(b, "%s- {kind: add, name: add_1, inputs: [%s.add, %s.block_sparse_moe.experts]}\n", I, p, p);
        } else {
            strbuf_printf(b, "%s- kind: block\n%s  name: mlp\n%s  layers:\n", I, I, I);
            strbuf_printf(b, "%s- {kind: linear, name: gate_proj, out_features: %lld, bias: %s}\n", J, (long long)m->inter, mb);
            strbuf_printf(b, "%s- {kind: silu, name: act_fn}\n", J);
            strbuf_printf(b, "%s- {kind: linear, name: up_proj, out_features: %lld, bias: %s, input: %s.post_attention_layernorm}\n",
                          J, (long long)m->inter, mb, p);
            strbuf_printf(b, "%s- {kind: mul, name: mul, inputs: [act_fn, up_proj]}\n", J);
            strbuf_printf(b, "%s- {kind: linear, name: down_proj, out_features: %lld, bias: %s}\n", J, (long long)m->hidden, mb);
            strbuf_printf(b, "%s- {kind: add, name: add_1, inputs: [%s.add, %s.mlp.down_proj]}\n", I, p, p);
        }
        snprintf(prev, sizeof prev, "%s.add_1", p);
    }
    strbuf_printf(b, "      - {kind: rmsnorm, name: norm, eps: %.17g}\n", m->eps);
    strbuf_printf(b, "  - {kind: linear, name: lm_head, out_features: %lld, bias: false%s}\n", (long long)m->vocab,
                  m->tied ? ", tied_weights: true" : "");
}

/* What the YAML built from a config.json is called while it is parsed; an error in it
 * names no line of the config.json, which does not have that line (built_error). */
#define BUILT_LABEL "\x01built"

/* An error from the YAML built from file ("<label>:L:C: what"): the position is the
 * built text's, not the file's, so it is dropped, and the file named instead. */
static void built_error(const char *file, char *err, size_t errlen)
{
    size_t n = strlen(BUILT_LABEL);
    if (strncmp(err, BUILT_LABEL, n) != 0)
        return;
    const char *rest = err + n;
    for (int k = 0; k < 2 && *rest == ':'; k++) /* ":line:col" */
        rest += 1 + strspn(rest + 1, "0123456789");
    rest += *rest == ':';
    rest += *rest == ' ';
    char *msg = xstrdup(rest);
    snprintf(err, errlen, "%s: the decoder built from it is refused: %s", file, msg);
    free(msg);
}

/* The safetensors headers beside the config.json, against the layers built from it
 * (safetensors.h); what was checked becomes m->note. */
static bench_status check_weights(const char *file, model *m, char *err, size_t errlen)
{
    char dir[4096], note[1024];
    const char *slash = strrchr(file, '/');
    if (slash)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - file), file);
    else
        snprintf(dir, sizeof dir, ".");
    if (slash == file)
        snprintf(dir, sizeof dir, "/");
    bench_status st = safetensors_check(dir, m, note, sizeof note, err, errlen);
    if (st == BENCH_OK && note[0])
        m->note = xstrdup(note);
    return st;
}

bench_status cfg_load_hf_text(const char *file, const char *text, size_t len, int64_t batch, cfg_shape shape,
                              model **out, char *err, size_t errlen)
{
    *out = NULL;
    if (memchr(text, 0, len)) {
        snprintf(err, errlen, "%s: a NUL byte at offset %zu: not a JSON text", file, (size_t)((const char *)memchr(text, 0, len) - text));
        return BENCH_ERR_USAGE;
    }
    /* the text NUL-terminated, to find where a key is written (hf_fail) */
    hf h = {.path = file, .text = xmalloc(len + 1), .err = err, .errlen = errlen};
    memcpy(h.text, text, len);
    h.text[len] = 0;
    /* a UTF-8 byte-order mark, as some editors write one, is not JSON */
    size_t skip = len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
    json_error_t je;
    h.root = json_loadb(text + skip, len - skip, JSON_REJECT_DUPLICATES, &je);
    if (!h.root) {
        snprintf(err, errlen, "%s:%d:%d: JSON: %s", file, je.line, je.column, je.text);
        free(h.text);
        return BENCH_ERR_USAGE;
    }
    if (!json_is_object(h.root)) {
        snprintf(err, errlen, "%s:1:1: expected a JSON object (a Hugging Face config.json)", file);
        json_decref(h.root);
        free(h.text);
        return BENCH_ERR_USAGE;
    }
    hf_model m;
    bench_status st = BENCH_ERR_USAGE;
    int64_t tokens = shape.tokens > 0 ? shape.tokens : HF_DEFAULT_TOKENS, cached = shape.kv_len > 0 ? shape.kv_len : 0;
    if (read_model(&h, &m) == 0) {
        if (tokens > m.max_pos - cached) {
            hf_fail(&h, "max_position_embeddings", "%lld positions, but %lld tokens after %lld cached need %lld",
                    (long long)m.max_pos, (long long)tokens, (long long)cached, (long long)(tokens + cached));
        } else {
            char name[160];
            model_name(file, m.type, name, sizeof name);
            strbuf y = {0};
            write_yaml(&m, name, tokens, &y);
            st = cfg_load_built(BUILT_LABEL, y.data, y.len, batch, shape, out, err, errlen);
            strbuf_free(&y);
            if (st != BENCH_OK) {
                built_error(file, err, errlen);
            } else {
                free((*out)->path);
                (*out)->path = xstrdup(file);
            }
        }
    }
    json_decref(h.root);
    free(h.text);
    return st;
}

bench_status cfg_load_hf(const char *path, int64_t batch, cfg_shape shape, model **out, char *err, size_t errlen)
{
    *out = NULL;
    char file[4096];
    struct stat s;
    if (stat(path, &s) == 0 && S_ISDIR(s.st_mode)) {
        snprintf(file, sizeof file, "%s/config.json", path);
        if (stat(file, &s) != 0) {
            snprintf(err, errlen, "%s: not a regular file, and a folder without a config.json (expected a YAML "
                                  "config, a Hugging Face config.json or its folder)", path);
            return BENCH_ERR_USAGE;
        }
    } else
        snprintf(file, sizeof file, "%s", path);
    strbuf text = {0};
    bench_status st = fileio_read(file, HF_MAX_FILE_BYTES, 0, NULL, &text, NULL, err, errlen);
    if (st == BENCH_OK)
        st = cfg_load_hf_text(file, text.data, text.len, batch, shape, out, err, errlen);
    strbuf_free(&text);
    if (st == BENCH_OK && (st = check_weights(file, *out, err, errlen)) != BENCH_OK) {
        model_free(*out);
        *out = NULL;
    }
    return st;
}
