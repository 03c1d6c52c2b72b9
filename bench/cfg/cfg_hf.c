/* A Hugging Face config.json as a decoder: read with libjansson as a stranger wrote it
 * (fileio.h), its model_type's family found and built (cfg_family.h: each family a
 * description under configs/hf/families/, its layers in the config format with
 * expressions over the config.json's fields), then the safetensors headers beside it
 * checked against what was built. What every family shares is read here: model_type,
 * torch_dtype and a quantization_config (refused). A field that would change the model
 * and is not built is an error naming it, with its line and column in the file, never
 * silently ignored. */
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cfg_family.h"
#include "cfg_internal.h"
#include "fileio.h"
#include "safetensors.h"
#include "strbuf.h"

/* Tokens per sequence when the command line gives none. */
#define HF_DEFAULT_TOKENS 128
/* The largest config.json read (published ones are a few KB). */
#define HF_MAX_FILE_BYTES ((size_t)16 << 20)

/* A string field: *out NULL where absent or null; -1 (with the error) where it is there
 * and not a string: a value of another type is never taken for "not given". */
static int get_str(const hf_source *s, const char *key, const char *expected, const char **out)
{
    json_t *v = json_object_get(s->root, key);
    *out = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return hf_fail(s, key, "expected a string (%s), got %s", expected,
                       json_is_integer(v) || json_is_real(v) ? "a number" : json_is_boolean(v) ? "true or false"
                       : json_is_array(v) ? "a list" : "an object");
    *out = json_string_value(v);
    return 0;
}

/* What every family shares: model_type (a string), no quantization_config (unless the
 * family judges it: gpt-oss's MXFP4 experts), torch_dtype as a layerbench dtype (*dtype
 * NULL where not given). -1 after an error. */
static int read_common(const hf_source *s, const char **type, const char **dtype)
{
    strbuf types = {0};
    cfg_family_types(&types, " or ");
    const char *expected = types.data ? types.data : "a model type";
    int rc = get_str(s, "model_type", expected, type);
    if (!rc && !*type)
        rc = hf_fail(s, "model_type", "missing: expected %s", expected);
    strbuf_free(&types);
    if (rc)
        return -1;
    json_t *q = json_object_get(s->root, "quantization_config");
    if (q && !json_is_null(q) && !cfg_family_judges(*type, "quantization_config")) {
        json_t *method = json_is_object(q) ? json_object_get(q, "quant_method") : NULL;
        return hf_fail(s, "quantization_config", "quantized weights%s%s%s are not built: layerbench times the layers "
                       "in bf16, fp16 or fp32 (remove the field to time the model unquantized)",
                       json_is_string(method) ? " (" : "", json_is_string(method) ? json_string_value(method) : "",
                       json_is_string(method) ? ")" : "");
    }
    const char *td;
    if (get_str(s, "torch_dtype", "bfloat16, float16 or float32", &td))
        return -1;
    *dtype = !td ? NULL : strcmp(td, "bfloat16") == 0 ? "bf16" : strcmp(td, "float16") == 0 ? "fp16"
           : strcmp(td, "float32") == 0 ? "fp32" : NULL;
    if (td && !*dtype)
        return hf_fail(s, "torch_dtype", "'%s': expected bfloat16, float16 or float32", td);
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

/* How the checkpoint stores the weights, as the config.json says (safetensors_storage): the
 * quantization_config a family accepted (fp8 with its weight_block_size, mxfp4) and
 * num_nextn_predict_layers after num_hidden_layers. */
static void read_storage(const hf_source *s, safetensors_storage *st)
{
    json_t *q = json_object_get(s->root, "quantization_config"), *bs = json_object_get(q, "weight_block_size");
    const char *method = json_string_value(json_object_get(q, "quant_method"));
    if (method && strcmp(method, "fp8") == 0 && json_is_array(bs) && json_array_size(bs) == 2)
        for (int k = 0; k < 2; k++) {
            json_t *v = json_array_get(bs, (size_t)k);
            st->fp8_block[k] = json_is_integer(v) && json_integer_value(v) > 0 && json_integer_value(v) <= (1 << 20)
                             ? json_integer_value(v) : 0;
        }
    if (!st->fp8_block[0] || !st->fp8_block[1])
        st->fp8_block[0] = st->fp8_block[1] = 0;
    st->mxfp4 = method && strcmp(method, "mxfp4") == 0;
    json_t *mtp = json_object_get(s->root, "num_nextn_predict_layers"), *n = json_object_get(s->root, "num_hidden_layers");
    if (json_is_integer(mtp) && json_integer_value(mtp) > 0 && json_integer_value(mtp) <= 4096 && json_is_integer(n)) {
        st->extra_first = json_integer_value(n);
        st->extra_layers = json_integer_value(mtp);
    }
}

/* The safetensors headers beside the config.json, against the layers built from it
 * (safetensors.h); what was checked becomes m->note. */
static bench_status check_weights(const char *file, model *m, const safetensors_storage *st, char *err, size_t errlen)
{
    char dir[4096], note[1024];
    const char *slash = strrchr(file, '/');
    if (slash)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - file), file);
    else
        snprintf(dir, sizeof dir, ".");
    if (slash == file)
        snprintf(dir, sizeof dir, "/");
    bench_status rc = safetensors_check(dir, m, st, note, sizeof note, err, errlen);
    if (rc == BENCH_OK && note[0])
        m->note = xstrdup(note);
    return rc;
}

/* The decoder file's text describes (cfg_load_hf_text), its expanded config appended to
 * emit where given. */
static bench_status hf_load(const char *file, const char *text, size_t len, int64_t batch, cfg_shape shape, model **out,
                            strbuf *emit, safetensors_storage *storage, char *err, size_t errlen)
{
    *out = NULL;
    if (memchr(text, 0, len)) {
        snprintf(err, errlen, "%s: a NUL byte at offset %zu: not a JSON text", file,
                 (size_t)((const char *)memchr(text, 0, len) - text));
        return BENCH_ERR_USAGE;
    }
    /* the text NUL-terminated, to find where a key is written (hf_fail) */
    char *copy = xmalloc(len + 1);
    memcpy(copy, text, len);
    copy[len] = 0;
    hf_source s = {.path = file, .text = copy, .err = err, .errlen = errlen};
    /* a UTF-8 byte-order mark, as some editors write one, is not JSON */
    size_t skip = len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
    json_error_t je;
    s.root = json_loadb(text + skip, len - skip, JSON_REJECT_DUPLICATES, &je);
    bench_status st = BENCH_ERR_USAGE;
    const char *type, *dtype;
    if (!s.root) {
        snprintf(err, errlen, "%s:%d:%d: JSON: %s", file, je.line, je.column, je.text);
    } else if (!json_is_object(s.root)) {
        snprintf(err, errlen, "%s:1:1: expected a JSON object (a Hugging Face config.json)", file);
    } else if (read_common(&s, &type, &dtype) == 0) {
        char name[160];
        model_name(file, type, name, sizeof name);
        hf_build b = {.name = name, .tokens = shape.tokens > 0 ? shape.tokens : HF_DEFAULT_TOKENS,
                      .kv_len = shape.kv_len, .dtype = dtype, .batch = batch, .shape = shape};
        st = cfg_family_build(&s, type, &b, out, emit);
        if (storage)
            read_storage(&s, storage);
    }
    json_decref(s.root);
    free(copy);
    return st;
}

bench_status cfg_load_hf_text(const char *file, const char *text, size_t len, int64_t batch, cfg_shape shape,
                              model **out, char *err, size_t errlen)
{
    return hf_load(file, text, len, batch, shape, out, NULL, NULL, err, errlen);
}

bench_status cfg_load_hf(const char *path, int64_t batch, cfg_shape shape, model **out, char *err, size_t errlen)
{
    return cfg_load_hf_emit(path, batch, shape, out, NULL, err, errlen);
}

bench_status cfg_load_hf_emit(const char *path, int64_t batch, cfg_shape shape, model **out, strbuf *emit, char *err,
                              size_t errlen)
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
    safetensors_storage storage = {{0, 0}, false, 0, 0};
    bench_status st = fileio_read(file, HF_MAX_FILE_BYTES, 0, NULL, &text, NULL, err, errlen);
    if (st == BENCH_OK)
        st = hf_load(file, text.data, text.len, batch, shape, out, emit, &storage, err, errlen);
    strbuf_free(&text);
    if (st == BENCH_OK && (st = check_weights(file, *out, &storage, err, errlen)) != BENCH_OK) {
        model_free(*out);
        *out = NULL;
    }
    return st;
}
