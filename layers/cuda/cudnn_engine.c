/* The graph-API engines' bookkeeping, with no CUDA or cuDNN header (cudnn_engine.h). */
#include "cudnn_engine.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int by_type(const void *a, const void *b)
{
    int x = ((const cudnn_knob *)a)->type, y = ((const cudnn_knob *)b)->type;
    return (x > y) - (x < y);
}

bool cudnn_tag_normalize(cudnn_engine_tag *t)
{
    if (t->n_knobs < 0 || t->n_knobs > CUDNN_ENGINE_MAX_KNOBS)
        return false;
    qsort(t->knobs, (size_t)t->n_knobs, sizeof *t->knobs, by_type);
    for (int i = 1; i < t->n_knobs; i++)
        if (t->knobs[i].type == t->knobs[i - 1].type)
            return false;
    return true;
}

int cudnn_tag_format(const cudnn_engine_tag *t, char *buf, size_t len)
{
    int n = snprintf(buf, len, "eng%lld", (long long)t->engine);
    for (int i = 0; i < t->n_knobs && n >= 0; i++) {
        size_t at = (size_t)n < len ? (size_t)n : len;
        int m = snprintf(buf + at, len - at, "_k%d=%lld", t->knobs[i].type, (long long)t->knobs[i].value);
        n = m < 0 ? m : n + m;
    }
    return n;
}

/* A decimal integer at *p (a leading '-' only where negative is allowed), advancing *p;
 * false when there is none or it does not fit. */
static bool read_int(const char **p, bool negative, long long *v)
{
    const char *s = *p;
    if (!(*s >= '0' && *s <= '9') && !(negative && *s == '-' && s[1] >= '0' && s[1] <= '9'))
        return false;
    char *end;
    errno = 0;
    *v = strtoll(s, &end, 10);
    if (errno)
        return false;
    *p = end;
    return true;
}

bool cudnn_tag_parse(const char *s, cudnn_engine_tag *t, char *why, size_t why_len)
{
    memset(t, 0, sizeof *t);
    const char *p = s;
    long long v;
    if (strncmp(p, "eng", 3) != 0 || (p += 3, !read_int(&p, false, &v))) {
        snprintf(why, why_len, "'%.80s' is not an engine tag: expected eng<index>, then _k<type>=<value> per knob "
                 "(e.g. eng28_k2=3_k17=4)", s);
        return false;
    }
    t->engine = v;
    while (*p) {
        long long type, value;
        const char *at = p;
        if (strncmp(p, "_k", 2) != 0 || (p += 2, !read_int(&p, false, &type)) || *p != '=' ||
            (p++, !read_int(&p, true, &value)) || type > 1000) {
            snprintf(why, why_len, "'%.80s': expected _k<type>=<value> at '%.40s'", s, at);
            return false;
        }
        if (t->n_knobs == CUDNN_ENGINE_MAX_KNOBS) {
            snprintf(why, why_len, "'%.80s': more than %d knobs", s, CUDNN_ENGINE_MAX_KNOBS);
            return false;
        }
        t->knobs[t->n_knobs++] = (cudnn_knob){(int)type, value};
    }
    if (!cudnn_tag_normalize(t)) {
        snprintf(why, why_len, "'%.80s': a knob type is given twice", s);
        return false;
    }
    return true;
}

bool cudnn_tag_equal(const cudnn_engine_tag *a, const cudnn_engine_tag *b)
{
    if (a->engine != b->engine || a->n_knobs != b->n_knobs)
        return false;
    for (int i = 0; i < a->n_knobs; i++)
        if (a->knobs[i].type != b->knobs[i].type || a->knobs[i].value != b->knobs[i].value)
            return false;
    return true;
}

static void append(char *buf, size_t len, const char *word)
{
    size_t at = strlen(buf);
    if (at < len)
        snprintf(buf + at, len - at, "%s%s", at ? " " : "", word);
}

void cudnn_notes_format(unsigned numerical, unsigned behavior, char *buf, size_t len)
{
    static const char *const notes[] = {"TENSOR_CORE", "DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION",
                                        "FFT", "NONDETERMINISTIC", "WINOGRAD", "WINOGRAD_TILE_4x4",
                                        "WINOGRAD_TILE_6x6", "WINOGRAD_TILE_13x13", "STRICT_NAN_PROP"};
    static const char *const behaviors[] = {"RUNTIME_COMPILATION", "FILTER_INT8x32_REORDER", "BIAS_INT8x32_REORDER",
                                            "CUDA_GRAPH_NATIVE_API", "CUBLASLT_DEPENDENCY"};
    if (len)
        buf[0] = 0;
    /* the Winograd tile says more than WINOGRAD alone: name it instead */
    unsigned tiles = CUDNN_ENGINE_NOTE_WINOGRAD_TILE_4x4 | CUDNN_ENGINE_NOTE_WINOGRAD_TILE_6x6 |
                     CUDNN_ENGINE_NOTE_WINOGRAD_TILE_13x13;
    if (numerical & tiles)
        numerical &= ~(unsigned)CUDNN_ENGINE_NOTE_WINOGRAD;
    static const int order[] = {5, 6, 7, 8, 3, 0, 2, 1, 4, 9}; /* the algorithm first, then the numbers */
    for (size_t i = 0; i < sizeof order / sizeof *order; i++)
        if (numerical >> order[i] & 1)
            append(buf, len, notes[order[i]]);
    for (size_t i = 0; i < sizeof behaviors / sizeof *behaviors; i++)
        if (behavior >> i & 1)
            append(buf, len, behaviors[i]);
}

const char *cudnn_engine_refuses(unsigned numerical, cudnn_math math)
{
    if (numerical & CUDNN_ENGINE_NOTE_DOWN_CONVERT_INPUTS)
        return "converts its inputs to a narrower type";
    if (math == CUDNN_MATH_FP32 && (numerical & CUDNN_ENGINE_NOTE_TENSOR_CORE))
        return "tensor cores (TF32 products) in strict FP32 (dtype tf32 allows them)";
    if (math == CUDNN_MATH_HALF && (numerical & CUDNN_ENGINE_NOTE_REDUCED_PRECISION_REDUCTION))
        return "sums in reduced precision (fp16/bf16 sum in float here)";
    return NULL;
}

int cudnn_tags_dedupe(cudnn_engine_tag *tags, int n, int *keep)
{
    int kept = 0;
    for (int i = 0; i < n; i++) {
        bool seen = false;
        for (int j = 0; j < kept && !seen; j++)
            seen = cudnn_tag_equal(&tags[j], &tags[i]);
        if (seen)
            continue;
        if (keep)
            keep[kept] = i;
        tags[kept++] = tags[i];
    }
    return kept;
}

int cudnn_alignment(uintptr_t address)
{
    int a = 1;
    while (a < 256 && !(address & (uintptr_t)a))
        a <<= 1;
    return a;
}

static bool same_pair(const int64_t *a, const int64_t *b)
{
    return a[0] == b[0] && a[1] == b[1];
}

bool cudnn_conv_key_equal(const cudnn_conv_key *a, const cudnn_conv_key *b)
{
    const layer_params *p = &a->p, *q = &b->p;
    return a->kind == b->kind && a->dtype == b->dtype && a->layout == b->layout && shape_equal(&a->in, &b->in) &&
           p->out_channels == q->out_channels && same_pair(p->kernel, q->kernel) && same_pair(p->stride, q->stride) &&
           same_pair(p->padding, q->padding) && same_pair(p->dilation, q->dilation) && p->groups == q->groups &&
           p->bias == q->bias && same_pair(p->output_padding, q->output_padding) && a->align_x == b->align_x &&
           a->align_w == b->align_w && a->align_y == b->align_y;
}

int cudnn_conv_key_format(const cudnn_conv_key *k, char *buf, size_t len)
{
    char in[96];
    const layer_params *p = &k->p;
    shape_format_compact(&k->in, in, sizeof in);
    int n = snprintf(buf, len, "%s %s %s %s oc%lld k%lldx%lld s%lldx%lld p%lldx%lld d%lldx%lld g%lld%s",
                     layer_kind_name(k->kind), dtype_name(k->dtype), k->layout == CUDNN_LAYOUT_NHWC ? "nhwc" : "nchw",
                     in, (long long)p->out_channels, (long long)p->kernel[0], (long long)p->kernel[1],
                     (long long)p->stride[0], (long long)p->stride[1], (long long)p->padding[0],
                     (long long)p->padding[1], (long long)p->dilation[0], (long long)p->dilation[1],
                     (long long)p->groups, p->bias ? " bias" : "");
    size_t at = n < 0 ? 0 : (size_t)n < len ? (size_t)n : len;
    int m = 0;
    if (n >= 0 && k->kind == LAYER_CONV_TRANSPOSE2D)
        m = snprintf(buf + at, len - at, " op%lldx%lld", (long long)p->output_padding[0], (long long)p->output_padding[1]);
    n = n < 0 || m < 0 ? -1 : n + m;
    at = n < 0 ? 0 : (size_t)n < len ? (size_t)n : len;
    m = n < 0 ? -1 : snprintf(buf + at, len - at, " align %d,%d,%d", k->align_x, k->align_w, k->align_y);
    return n < 0 || m < 0 ? -1 : n + m;
}

int cudnn_choice_format(bool graph, const cudnn_engine_tag *tag, int algo, int math, char *buf, size_t len)
{
    if (!graph)
        return snprintf(buf, len, "legacy %d %d", algo, math);
    int n = snprintf(buf, len, "graph ");
    size_t at = (size_t)n < len ? (size_t)n : len;
    int m = cudnn_tag_format(tag, buf + at, len - at);
    return m < 0 ? m : n + m;
}

bool cudnn_choice_parse(const char *value, bool *graph, cudnn_engine_tag *tag, int *algo, int *math)
{
    char why[200];
    if (strncmp(value, "graph ", 6) == 0) {
        *graph = true;
        return cudnn_tag_parse(value + 6, tag, why, sizeof why);
    }
    int a, m, used = 0;
    if (sscanf(value, "legacy %d %d%n", &a, &m, &used) != 2 || value[used] || a < 0 || m < 0)
        return false;
    *graph = false, *algo = a, *math = m;
    return true;
}
