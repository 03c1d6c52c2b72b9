/* The cuda backend's graph-API bookkeeping (layers/cuda/cudnn_engine.c), which needs no
 * GPU: engine tags written and read back, malformed ones refused, notes in words, the
 * filter by math mode, the removal of duplicate configs, tensor alignment and the key
 * a convolution's choice is cached under. */
#include <string.h>

#include "cudnn_engine.h"
#include "test_util.h"

static cudnn_engine_tag tag(int64_t engine, int n, const cudnn_knob *k)
{
    cudnn_engine_tag t = {.engine = engine, .n_knobs = n};
    if (n)
        memcpy(t.knobs, k, (size_t)n * sizeof *k);
    return t;
}

static void tags(void)
{
    char buf[CUDNN_ENGINE_TAG_LEN], why[256];
    /* knobs sorted by type as they are written */
    cudnn_engine_tag t = tag(28, 2, (const cudnn_knob[]){{17, 4}, {2, 3}});
    EXPECT(cudnn_tag_normalize(&t), "normalize");
    cudnn_tag_format(&t, buf, sizeof buf);
    EXPECT(strcmp(buf, "eng28_k2=3_k17=4") == 0, "format: %s", buf);
    cudnn_engine_tag back;
    EXPECT(cudnn_tag_parse("eng28_k17=4_k2=3", &back, why, sizeof why), "parse: %s", why);
    EXPECT(cudnn_tag_equal(&t, &back), "parsed in another knob order is the same tag");
    cudnn_engine_tag none = tag(5, 0, NULL);
    cudnn_tag_format(&none, buf, sizeof buf);
    EXPECT(strcmp(buf, "eng5") == 0, "no knobs: %s", buf);
    EXPECT(cudnn_tag_parse("eng0", &back, why, sizeof why) && back.engine == 0 && back.n_knobs == 0, "eng0");
    EXPECT(cudnn_tag_parse("eng3_k14=-1", &back, why, sizeof why) && back.knobs[0].value == -1, "negative value");
    /* the length a truncated format needs, as snprintf */
    char small[6];
    int need = cudnn_tag_format(&t, small, sizeof small);
    EXPECT(need == (int)strlen("eng28_k2=3_k17=4") && strcmp(small, "eng28") == 0, "truncated: %d '%s'", need, small);
    static const char *const bad[] = {"", "eng", "28", "eng-1", "engx", "eng28_", "eng28_k2", "eng28_k2=",
                                      "eng28_k=3", "eng28_k2=3_k2=4", "eng28 ", "eng28_k2=3x", "eng99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        why[0] = 0;
        EXPECT(!cudnn_tag_parse(bad[i], &back, why, sizeof why) && why[0], "'%s' should be refused", bad[i]);
    }
    cudnn_engine_tag twice = tag(1, 2, (const cudnn_knob[]){{3, 1}, {3, 2}});
    EXPECT(!cudnn_tag_normalize(&twice), "a knob type twice");
}

static void notes(void)
{
    char buf[256];
    cudnn_notes_format(0, 0, buf, sizeof buf);
    EXPECT(strcmp(buf, "") == 0, "none: '%s'", buf);
    cudnn_notes_format(CUDNN_ENGINE_NOTE_WINOGRAD | CUDNN_ENGINE_NOTE_WINOGRAD_TILE_4x4 | CUDNN_ENGINE_NOTE_TENSOR_CORE,
                       CUDNN_ENGINE_BEHAVIOR_RUNTIME_COMPILATION, buf, sizeof buf);
    EXPECT(strcmp(buf, "WINOGRAD_TILE_4x4 TENSOR_CORE RUNTIME_COMPILATION") == 0, "winograd tile: '%s'", buf);
    cudnn_notes_format(CUDNN_ENGINE_NOTE_WINOGRAD, 0, buf, sizeof buf);
    EXPECT(strcmp(buf, "WINOGRAD") == 0, "winograd alone: '%s'", buf);
    cudnn_notes_format(CUDNN_ENGINE_NOTE_FFT | CUDNN_ENGINE_NOTE_NONDETERMINISTIC, 0, buf, sizeof buf);
    EXPECT(strcmp(buf, "FFT NONDETERMINISTIC") == 0, "fft: '%s'", buf);
    char tiny[4];
    cudnn_notes_format(CUDNN_ENGINE_NOTE_FFT, 0, tiny, sizeof tiny);
    EXPECT(strcmp(tiny, "FFT") == 0, "fits exactly: '%s'", tiny);

    /* the filter: every math drops down-converting engines; strict FP32 drops tensor
     * cores; half drops reduced-precision sums; plain engines pass everywhere */
    unsigned tc = CUDNN_ENGINE_NOTE_TENSOR_CORE, dc = CUDNN_ENGINE_NOTE_DOWN_CONVERT_INPUTS,
             rp = CUDNN_ENGINE_NOTE_REDUCED_PRECISION_REDUCTION, w = CUDNN_ENGINE_NOTE_WINOGRAD;
    EXPECT(cudnn_engine_refuses(tc, CUDNN_MATH_FP32) != NULL, "fp32 refuses tensor cores");
    EXPECT(cudnn_engine_refuses(tc, CUDNN_MATH_TF32) == NULL, "tf32 takes tensor cores");
    EXPECT(cudnn_engine_refuses(tc, CUDNN_MATH_HALF) == NULL, "half takes tensor cores");
    for (int m = CUDNN_MATH_FP32; m <= CUDNN_MATH_HALF; m++) {
        EXPECT(cudnn_engine_refuses(dc | tc, (cudnn_math)m) != NULL, "math %d refuses down-conversion", m);
        EXPECT(cudnn_engine_refuses(w, (cudnn_math)m) == NULL, "math %d takes Winograd", m);
        EXPECT(cudnn_engine_refuses(0, (cudnn_math)m) == NULL, "math %d takes a plain engine", m);
    }
    EXPECT(cudnn_engine_refuses(rp | tc, CUDNN_MATH_HALF) != NULL, "half refuses reduced-precision sums");
}

static void dedupe(void)
{
    cudnn_engine_tag t[6] = {
        tag(28, 1, (const cudnn_knob[]){{2, 3}}), tag(28, 1, (const cudnn_knob[]){{2, 4}}),
        tag(28, 1, (const cudnn_knob[]){{2, 3}}), /* again (another heuristic mode) */
        tag(0, 0, NULL), tag(28, 0, NULL), tag(0, 0, NULL),
    };
    int keep[6];
    int n = cudnn_tags_dedupe(t, 6, keep);
    EXPECT(n == 4, "kept %d of 6", n);
    EXPECT(keep[0] == 0 && keep[1] == 1 && keep[2] == 3 && keep[3] == 4, "first occurrences, in order: %d %d %d %d",
           keep[0], keep[1], keep[2], keep[3]);
    EXPECT(t[1].knobs[0].value == 4 && t[2].engine == 0 && t[3].engine == 28 && t[3].n_knobs == 0, "moved forward");
    EXPECT(cudnn_tags_dedupe(t, 0, NULL) == 0, "empty");
}

static void keys(void)
{
    EXPECT(cudnn_alignment(0) == 256, "NULL");
    EXPECT(cudnn_alignment(0x7f0000000000u) == 256, "a cudaMalloc'd address");
    EXPECT(cudnn_alignment(0x7f0000000004u) == 4, "a bias after an odd count of floats: 4");
    EXPECT(cudnn_alignment(0x7f0000000010u) == 16, "16");
    EXPECT(cudnn_alignment(0x7f0000000102u) == 2, "a bf16 element: 2");

    cudnn_conv_key a = {.kind = LAYER_CONV2D, .dtype = DTYPE_BF16, .layout = CUDNN_LAYOUT_NHWC,
                        .in = {4, {1, 64, 56, 56}}, .align_x = 256, .align_w = 256, .align_y = 256};
    a.p.out_channels = 64, a.p.kernel[0] = a.p.kernel[1] = 3, a.p.stride[0] = a.p.stride[1] = 1;
    a.p.padding[0] = a.p.padding[1] = 1, a.p.dilation[0] = a.p.dilation[1] = 1, a.p.groups = 1;
    char buf[256];
    cudnn_conv_key_format(&a, buf, sizeof buf);
    EXPECT(strcmp(buf, "conv2d bf16 nhwc 1x64x56x56 oc64 k3x3 s1x1 p1x1 d1x1 g1 align 256,256,256") == 0, "key: %s",
           buf);
    EXPECT(!strchr(buf, '\t') && !strchr(buf, '\n'), "no tab or line break in a saved key");
    cudnn_conv_key b = a;
    b.p.eps = 1e-5; /* a field a convolution does not read */
    EXPECT(cudnn_conv_key_equal(&a, &b), "same convolution");
    /* each thing the choice depends on makes another key */
    cudnn_conv_key c;
#define DIFFERS(field, value)                                                                                     \
    c = a, c.field = value;                                                                                       \
    EXPECT(!cudnn_conv_key_equal(&a, &c), "%s differs", #field)
    DIFFERS(kind, LAYER_CONV_TRANSPOSE2D);
    DIFFERS(dtype, DTYPE_FP16);
    DIFFERS(layout, CUDNN_LAYOUT_NCHW);
    DIFFERS(in.d[0], 2);
    DIFFERS(p.out_channels, 128);
    DIFFERS(p.kernel[1], 1);
    DIFFERS(p.stride[0], 2);
    DIFFERS(p.padding[1], 0);
    DIFFERS(p.dilation[0], 2);
    DIFFERS(p.groups, 2);
    DIFFERS(p.bias, true);
    DIFFERS(align_x, 16);
    DIFFERS(align_w, 4);
    DIFFERS(align_y, 2);
#undef DIFFERS
    c = a, c.kind = LAYER_CONV_TRANSPOSE2D, c.p.output_padding[0] = 1, c.p.bias = true, c.align_w = 4;
    cudnn_conv_key_format(&c, buf, sizeof buf);
    EXPECT(strcmp(buf, "conv_transpose2d bf16 nhwc 1x64x56x56 oc64 k3x3 s1x1 p1x1 d1x1 g1 bias op1x0 align 256,4,256") ==
               0,
           "transposed key: %s", buf);
    char small[10];
    int need = cudnn_conv_key_format(&a, small, sizeof small);
    EXPECT(need == (int)strlen("conv2d bf16 nhwc 1x64x56x56 oc64 k3x3 s1x1 p1x1 d1x1 g1 align 256,256,256"),
           "the length a truncated key needs: %d", need);
}

/* the saved choice's value, both kinds, and what is not one */
static void choices(void)
{
    char buf[CUDNN_ENGINE_TAG_LEN + 16];
    cudnn_engine_tag t = tag(28, 2, (const cudnn_knob[]){{2, 3}, {17, 4}}), back;
    bool graph = false;
    int algo = -1, math = -1;
    cudnn_choice_format(true, &t, 0, 0, buf, sizeof buf);
    EXPECT(strcmp(buf, "graph eng28_k2=3_k17=4") == 0, "graph value: %s", buf);
    EXPECT(cudnn_choice_parse(buf, &graph, &back, &algo, &math) && graph && cudnn_tag_equal(&t, &back), "read back");
    cudnn_choice_format(false, NULL, 1, 2, buf, sizeof buf);
    EXPECT(strcmp(buf, "legacy 1 2") == 0, "legacy value: %s", buf);
    EXPECT(cudnn_choice_parse(buf, &graph, &back, &algo, &math) && !graph && algo == 1 && math == 2, "legacy back");
    static const char *const bad[] = {"", "graph", "graph ", "graph eng", "legacy", "legacy 1", "legacy 1 2 3",
                                      "legacy -1 0", "legacy 1 x", "1 2 3", "graph eng28_k2"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        EXPECT(!cudnn_choice_parse(bad[i], &graph, &back, &algo, &math), "'%s' is no choice", bad[i]);
}

int main(void)
{
    choices();
    tags();
    notes();
    dedupe();
    keys();
    return test_summary("test_cudnn_engine");
}
