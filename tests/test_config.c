/* Config parsing: a table of invalid configs with the expected "line:col: message",
 * valid configs with the names and shapes they must give, and ResNet-18 layer by
 * layer against tests/data/resnet18_layers.txt.
 * usage: test_config CONFIG_DIR DATA_DIR */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cfg.h"
#include "hf_expr.h"
#include "test_util.h"

static char tmp_path[256];

static bench_status load_text(const char *text, model **m, char *err, size_t len)
{
    FILE *f = fopen(tmp_path, "w");
    fputs(text, f);
    fclose(f);
    return cfg_load(tmp_path, 0, m, err, len);
}

#define HEAD "name: t\ninput: [3, 8, 8]\nlayers:\n"

typedef struct bad_case {
    const char *yaml;
    const char *where;     /* "line:col" */
    const char *message;   /* a substring of the message */
} bad_case;

static const bad_case bad[] = {
    {"name: t\ninput: [3, 8, 8\n", "3:1", "YAML syntax error"},
    {"", "1:1", "the config is empty"},
    {"- 1\n- 2\n", "1:1", "expected a mapping with name, input and layers"},
    {"input: [3, 8, 8]\nlayers: [{kind: relu}]\n", "1:1", "missing required key 'name'"},
    {"name: t\nlayers: [{kind: relu}]\n", "1:1", "missing required key 'input'"},
    {"name: t\ninput: [3, 8, 8]\n", "1:1", "missing required key 'layers'"},
    {"name: t\ninput: [3, 8, 8, 8]\nlayers: [{kind: relu}]\n", "2:8", "expected [C, H, W], [S, D] (tokens) or [F], got 4"},
    {"name: t\ninput: [3, 0, 8]\nlayers: [{kind: relu}]\n", "2:12", "input must be at least 1, got 0"},
    {"name: t\ninput: [3, 8, 8]\nbatch: -2\nlayers: [{kind: relu}]\n", "3:8", "batch must be at least 1, got -2"},
    {"name: t\ninput: [3, 8, 8]\ndtype: bfloat61\nlayers: [{kind: relu}]\n", "3:8",
     "dtype: expected one of fp32, tf32, bf16, fp16, int8 (or torch's float32, bfloat16, float16), got 'bfloat61'"},
    {"name: t\ninput: [3, 8, 8]\ndtype: [bf16]\nlayers: [{kind: relu}]\n", "3:8", "dtype: expected one of"},
    {HEAD "  - {kind: relu, dtype: fp8}\n", "4:25", "dtype: expected one of fp32, tf32, bf16, fp16, int8"},
    {HEAD "  - {kind: block, dtype: bf61, layers: [{kind: relu}]}\n", "4:26", "got 'bf61'"},
    {"name: t\ninput: [3, 8, 8]\nlayres: []\n", "3:1", "unknown key 'layres' for a model (did you mean 'layers'?)"},
    {HEAD "  - {kind: conv3d, out_channels: 4}\n", "4:12", "unknown layer kind 'conv3d'; known kinds: conv2d, batchnorm2d"},
    {HEAD "  - {kind: conv2d, out_channels: 4, kernal_size: 3}\n", "4:37",
     "unknown key 'kernal_size' for conv2d (did you mean 'kernel_size'?)"},
    {HEAD "  - {kind: conv2d, out_channels: 4}\n", "4:5", "conv2d: missing required key 'kernel_size'"},
    {HEAD "  - {kind: conv2d, out_channels: four, kernel_size: 3}\n", "4:34", "out_channels: expected an integer, got 'four'"},
    {HEAD "  - {kind: conv2d, out_channels: \"4\", kernel_size: 3}\n", "4:34", "out_channels: expected an integer"},
    {HEAD "  - {kind: conv2d, out_channels: 0, kernel_size: 3}\n", "4:34", "out_channels must be at least 1, got 0"},
    {HEAD "  - {kind: conv2d, out_channels: 4, kernel_size: [3, 3, 3]}\n", "4:50", "expected an [h, w] pair of 2 integers"},
    {HEAD "  - {kind: conv2d, out_channels: 4, kernel_size: 3, bias: maybe}\n", "4:59", "bias: expected true or false"},
    {HEAD "  - {kind: conv2d, out_channels: 4, kernel_size: 3, stride: -1}\n", "4:61", "stride must be at least 1, got -1"},
    {HEAD "  - {kind: conv2d, out_channels: 4, kernel_size: 3, groups: 2}\n", "4:5", "in_channels 3 (from the input) is not divisible by groups 2"},
    {HEAD "  - {kind: conv2d, out_channels: 4, kernel_size: 11}\n", "4:5", "kernel 11x11 (dilation 1x1) is larger than the padded input 8x8"},
    {HEAD "  - {kind: maxpool2d, kernel_size: 9}\n", "4:5", "pool window 9x9 is larger than its padded input 8x8"},
    {HEAD "  - {kind: maxpool2d, kernel_size: 2, padding: 2}\n", "4:5", "padding 2 must be at most half the kernel size 2"},
    {HEAD "  - {kind: multihead_attention, embed_dim: 8, num_heads: 2}\n", "4:5",
     "multihead_attention expects tokens [N, S, E], got [1, 3, 8, 8]"},
    {"name: t\ninput: [5, 12]\nlayers:\n  - {kind: multihead_attention, embed_dim: 12, num_heads: 5}\n", "4:5",
     "embed_dim 12 is not divisible by num_heads 5"},
    {"name: t\ninput: [5, 12]\nlayers:\n  - {kind: multihead_attention, embed_dim: 16, num_heads: 4}\n", "4:5",
     "embed_dim 16 differs from the input's last dimension 12"},
    {"name: t\ninput: [5, 12]\nlayers:\n  - {kind: layernorm, normalized_shape: 5}\n", "4:5",
     "normalized_shape 5 must be the input's last dimension, 12"},
    {HEAD "  - {kind: transpose, dim0: 0, dim1: 2}\n", "4:5", "dim0 0 and dim1 2 must be two different dims from 1 to 3"},
    {HEAD "  - {kind: flatten, start_dim: 0}\n", "4:5", "start_dim 0 and end_dim -1 must name dims 1 to 3"},
    {HEAD "  - {kind: class_token}\n", "4:5", "class_token expects tokens [N, S, D], got [1, 3, 8, 8]"},
    {HEAD "  - {kind: mean, dim: [1, 3]}\n", "4:5", "dim [1, 3]: the dims averaged must be one, or two next to each other"},
    {HEAD "  - {kind: mean, dim: [0, 1]}\n", "4:5", "must name dims from 1 to 3 of a rank-4 input (dim 0 is the batch"},
    {HEAD "  - {kind: mean}\n", "4:5", "dim"},
    {HEAD "  - {kind: slice, start: 2, end: 2}\n", "4:5", "slice [2:2] of dim 1 (size 3) is empty"},
    {HEAD "  - {kind: slice, dim: 0, end: 1}\n", "4:5", "dim 0 must be from 1 to 3 of a rank-4 input"},
    {HEAD "  - {kind: permute, dims: [1, 0, 2, 3]}\n", "4:5", "dims must keep the batch first"},
    {HEAD "  - {kind: permute, dims: [0, 2, 2, 1]}\n", "4:5", "dims must list each of the input's 4 dims once"},
    {HEAD "  - {kind: permute, dims: [0, 2, 1]}\n", "4:5", "dims must list each of the input's 4 dims once"},
    {HEAD "  - {kind: permute, dims: 3}\n", "4:27", "dims: expected a list of dims such as [0, 2, 3, 1]"},
    {HEAD "  - {kind: channel_shuffle, groups: 2}\n", "4:5", "groups 2 must divide the input's 3 channels"},
    {HEAD "  - {kind: groupnorm, num_groups: 2}\n", "4:5", "num_groups 2 must divide the input's 3 channels"},
    {HEAD "  - {kind: groupnorm, num_groups: 3, num_channels: 6}\n", "4:5", "num_channels 6 differs from the input's 3"},
    {"name: t\ninput: [5, 12]\nlayers:\n  - {kind: select, index: 5}\n", "4:5",
     "index 5 is out of range for dim 1 of size 5"},
    {"name: t\ninput: [5, 12]\nlayers:\n  - {kind: multihead_attention, embed_dim: 12, num_heads: 2, "
     "batch_first: false}\n", "4:5", "batch_first: false is not supported"},
    {HEAD "  - {kind: dropout, p: 1.5}\n", "4:5", "dropout probability p must be between 0 and 1"},
    {HEAD "  - {kind: softmax, dim: 4}\n", "4:5", "dim 4 is out of range for a rank-4 input"},
    {HEAD "  - {kind: batchnorm2d, eps: -1}\n", "4:30", "eps must not be negative"},
    {HEAD "  - {kind: add}\n", "4:5", "add: missing required key 'inputs'"},
    {HEAD "  - {name: x}\n", "4:5", "missing required key 'kind'"},
    {HEAD "  - relu\n", "4:5", "expected a layer (a mapping with 'kind'), got a scalar"},
    {HEAD "  - {kind: relu, name: a.b}\n", "4:24", "must not contain '.'"},
    {HEAD "  - {kind: relu, repeat: 0}\n", "4:26", "repeat must be at least 1, got 0"},
    {HEAD "  - {kind: relu, kind: relu}\n", "4:18", "duplicate key 'kind'"},
    {HEAD "  - {kind: block, name: b}\n", "4:5", "block: missing required key 'layers'"},
    {HEAD "  - {kind: block, layers: []}\n", "4:27", "the list of layers is empty"},
    {HEAD "  - {kind: block, layers: [{kind: relu}], stride: 2}\n", "4:43", "unknown key 'stride' for block"},
    {HEAD "  - kind: residual\n    body: [{kind: conv2d, out_channels: 5, kernel_size: 1}]\n", "4:5",
     "residual '0': the body gives [1, 5, 8, 8] but the identity shortcut gives [1, 3, 8, 8]: they differ in the channels (5 against 3)"},
    {HEAD "  - kind: residual\n    body: [{kind: relu}]\n    shortcut: maybe\n", "6:15", "shortcut: expected 'identity' or a list of layers"},
    {HEAD "  - kind: residual\n    body: [{kind: relu}]\n    shortcut: [{kind: maxpool2d, kernel_size: 2}]\n", "6:15",
     "the body gives [1, 3, 8, 8] but the shortcut ('downsample') gives [1, 3, 4, 4]: they differ in the height (8 against 4)"},
    {HEAD "  - &a {kind: relu}\n  - *a\n", "4:5", "anchors and aliases are not supported"},
    {"a: &a [*a]\n", "1:4", "anchors and aliases are not supported"},
    {"name: t\n---\nname: u\n", "2:1", "only one YAML document"},
    {"name: t\ninput: [3, 8, 8]\nlayers:\n  - {kind: relu}\n\t- bad\n", "5:1", "YAML syntax error"},
    {"name: t\ninput: [3, 8, 8]\nlayers: [{kind: relu, repeat: 200000}]\n", "3:31", "repeat 200000 is more than the 100000 layers"},
    {"name: t\ninput: [100000, 100000, 100000]\nlayers: [{kind: relu}]\n", "2:8", "more than 2^40 elements"},
    {"name: t\ninput: [3, 8, 8]\nlayers: [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n", "3:72", "nesting is deeper than 64 levels"},
    {"name: \"a,b\"\ninput: [3]\nlayers: [{kind: relu}]\n", "1:7", "name: use at most 128 letters, digits"},
    {"name: \"=HYPERLINK(1)\"\ninput: [3]\nlayers: [{kind: relu}]\n", "1:7", "starting with a letter, digit or '_'"},
    {"name: \"+1+2\"\ninput: [3]\nlayers: [{kind: relu}]\n", "1:7", "starting with a letter"},
    {HEAD "  - {kind: relu, name: \"@SUM(A1)\"}\n", "4:24", "use letters, digits, '_' and '-' (not first) only"},
    {HEAD "  - {kind: relu, name: \"-1\"}\n", "4:24", "got '-' first"},
    {HEAD "  - {kind: relu, name: \"nul\\0cut\"}\n", "4:24", "a NUL character (\\0) in a value"},
    {HEAD "  - {kind: relu, name: a}\n  - {kind: relu6, name: a}\n", "5:5",
     "layer name 'a' is used twice, by different layers (first at line 4, column 5)"},
    {HEAD "  - {kind: conv2d, out_channels: 3, kernel_size: 1}\n  - {kind: conv2d, name: \"0\", out_channels: 3, kernel_size: 3, padding: 1}\n",
     "5:5", "layer name '0' is used twice"},
    {HEAD "  - kind: residual\n    name: r\n    body: [{kind: relu, name: add}]\n", "4:5", "layer name 'r.add' is used twice"},
    {"name: t\ninput: [16777216, 1048576, 1048576]\nlayers: [{kind: relu}]\n", "2:8", "more than 2^40 elements per sample"},
    /* explicit inputs */
    {HEAD "  - {kind: relu, name: a}\n  - {kind: add, inputs: [a, b]}\n", "5:29", "no earlier layer is named 'b'"},
    {HEAD "  - {kind: relu, name: a}\n  - {kind: add, inputs: [a]}\n", "5:25", "inputs: add takes two inputs, got 1"},
    {HEAD "  - {kind: relu, name: a}\n  - {kind: relu, input: a, inputs: [a]}\n", "5:25", "give 'input' or 'inputs', not both"},
    {HEAD "  - {kind: relu, name: a}\n  - {kind: relu, input: a, repeat: 2}\n", "5:25", "'input' and repeat cannot be combined"},
    {HEAD "  - {kind: relu, name: a}\n  - {kind: mul, input: a}\n", "5:24", "mul takes 'inputs', a list of two layers"},
    {HEAD "  - {kind: maxpool2d, name: p, kernel_size: 2}\n  - {kind: concat, inputs: [p, input]}\n", "5:5",
     "input 2 of concat is [1, 3, 8, 8], which does not match [1, 3, 4, 4] outside dim 1"},
    {HEAD "  - {kind: maxpool2d, name: p, kernel_size: 2}\n  - {kind: mul, inputs: [p, input]}\n", "5:5",
     "mul cannot broadcast [1, 3, 4, 4] with [1, 3, 8, 8]: dimension 2 is 4 against 8"},
    /* residual merges and branches */
    {HEAD "  - kind: residual\n    merge: concat\n    branches:\n      a: [{kind: maxpool2d, kernel_size: 2}]\n"
          "      b: identity\n",
     "7:7", "residual '0': branch 'a' gives [1, 3, 4, 4] but branch 'b' gives [1, 3, 8, 8]: they differ in the height"},
    {HEAD "  - kind: residual\n    merge: add\n    branches: {a: identity, b: identity, c: identity}\n", "6:15",
     "merge add takes exactly 2 branches, got 3"},
    {HEAD "  - kind: residual\n    body: [{kind: relu}]\n    branches: {a: identity}\n", "4:5",
     "give 'body' (with an optional 'shortcut') or 'branches', not both"},
    {HEAD "  - kind: residual\n    merge: max\n    body: [{kind: relu}]\n", "5:12", "merge: expected one of add, mul, concat, got 'max'"},
    {HEAD "  - kind: residual\n    dim: 2\n    body: [{kind: relu}]\n", "5:10", "dim applies to merge: concat only"},
    {HEAD "  - kind: residual\n    merge: concat\n    branches: {a: [relu], b: identity}\n", "6:20",
     "expected a layer (a mapping with 'kind'), got a scalar"},
    /* new kinds' parameters */
    {HEAD "  - {kind: upsample, size: 9, scale_factor: 2}\n", "4:5", "give either size or scale_factor, not both"},
    {HEAD "  - {kind: upsample}\n", "4:5", "give either size or scale_factor, one of them"},
    {HEAD "  - {kind: upsample, scale_factor: 2, mode: bicubic}\n", "4:45", "mode: expected one of nearest, bilinear, got 'bicubic'"},
    {HEAD "  - {kind: upsample, scale_factor: 2, align_corners: true}\n", "4:5", "align_corners applies to bilinear only"},
    {HEAD "  - {kind: upsample, scale_factor: [2, 0]}\n", "4:40", "scale_factor must be above 0"},
    {HEAD "  - {kind: conv_transpose2d, out_channels: 4, kernel_size: 3, output_padding: 1}\n", "4:5",
     "output_padding 1 must be smaller than either stride 1 or dilation 1"},
    {HEAD "  - {kind: stochastic_depth, p: 0.1}\n", "4:5", "stochastic_depth: missing required key 'mode'"},
    {"name: t\ninput: [2147483647, 1, 1]\nlayers:\n  - {kind: conv2d, out_channels: 4, kernel_size: 2147483647, padding: 1073741823}\n",
     "4:5", "count is beyond 2^62"},
    {"name: t\ninput: [3, 1, 1]\nlayers: [{kind: adaptive_avgpool2d, output_size: [2147483647, 2147483647]}]\n", "3:10",
     "its output is larger than 2^40 elements"},
    {"name: t\ninput: [3, 8, 8]\nlayers: [{kind: relu}]\n\xff\xfe\n", "4:1", "YAML syntax error"},
};

static void test_bad(void)
{
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        model *m = (model *)1;
        char err[1024] = "", want[512];
        bench_status st = load_text(bad[i].yaml, &m, err, sizeof err);
        snprintf(want, sizeof want, "%s:%s: ", tmp_path, bad[i].where);
        EXPECT(st == BENCH_ERR_USAGE, "case %zu: status %d", i, st);
        EXPECT(m == NULL, "case %zu: a failed load must return no model", i);
        EXPECT(strncmp(err, want, strlen(want)) == 0, "case %zu: expected position %s, got: %s", i, bad[i].where, err);
        EXPECT(strstr(err, bad[i].message) != NULL, "case %zu: expected '%s' in: %s", i, bad[i].message, err);
        model_free(m);
    }
}

static void test_names(void)
{
    const char *yaml = HEAD
        "  - {kind: conv2d, out_channels: 4, kernel_size: 3, padding: 1}\n"
        "  - {kind: relu, name: act, repeat: 2}\n"
        "  - {kind: relu, repeat: 2}\n"
        "  - kind: block\n    name: stage\n    layers:\n"
        "      - kind: residual\n        repeat: 2\n        body: [{kind: relu, name: r}]\n        after: [{kind: relu6}]\n"
        "      - kind: residual\n        name: down\n        body: [{kind: maxpool2d, kernel_size: 2}]\n"
        "        shortcut: [{kind: avgpool2d, kernel_size: 2}]\n        shortcut_name: skip\n"
        "  - {kind: flatten}\n  - {kind: linear, out_features: 3}\n";
    const char *names[] = {"0", "act.0", "act.1", "2", "3", "stage.0.r", "stage.0.add", "stage.0.1",
                           "stage.1.r", "stage.1.add", "stage.1.1", "stage.down.0", "stage.down.skip.0",
                           "stage.down.add", "5", "6"};
    model *m;
    char err[512];
    bench_status st = load_text(yaml, &m, err, sizeof err);
    EXPECT(st == BENCH_OK, "valid config failed: %s", err);
    if (st != BENCH_OK)
        return;
    int n = (int)(sizeof names / sizeof *names);
    EXPECT(m->n_layers == n, "%d layers, expected %d", m->n_layers, n);
    for (int i = 0; i < n && i < m->n_layers; i++)
        EXPECT(strcmp(m->layers[i].name, names[i]) == 0, "layer %d is '%s', expected '%s'", i, m->layers[i].name, names[i]);
    /* the add of the down block reads the body (maxpool, 4x4) and the shortcut (avgpool) */
    const layer *add = &m->layers[13];
    EXPECT(add->kind == LAYER_ADD && add->n_inputs == 2 && add->inputs[0] == 12 && add->inputs[1] == 13, "add inputs %d %d", add->inputs[0],
           add->inputs[1]);
    EXPECT(m->layers[15].out.rank == 2 && m->layers[15].out.d[1] == 3, "linear output");
    EXPECT(m->layers[14].in.d[1] == 4 && m->layers[14].out.d[1] == 64, "flatten 4x4x4 -> 64");
    model_free(m);
}

/* The structures and kinds of the CNN zoo: squeeze-and-excitation (a residual merged by
 * mul), inception-like branches merged by concat (with an identity branch), explicit
 * inputs by relative and qualified names, and the new kinds' shapes. */
static void test_structures(void)
{
    const char *yaml = "name: t\ninput: [8, 6, 6]\nlayers:\n"
        "  - kind: block\n    name: f\n    layers:\n"
        "      - {kind: conv2d, name: c, out_channels: 8, kernel_size: 3, padding: 1}\n"
        "      - kind: residual\n        name: se\n        merge: mul\n        body:\n"
        "          - {kind: adaptive_avgpool2d, name: avgpool, output_size: 1}\n"
        "          - {kind: conv2d, name: fc1, out_channels: 2, kernel_size: 1}\n"
        "          - {kind: silu, name: activation}\n"
        "          - {kind: conv2d, name: fc2, out_channels: 8, kernel_size: 1}\n"
        "          - {kind: hardsigmoid, name: scale_activation}\n"
        "  - kind: residual\n    name: inc\n    merge: concat\n    branches:\n"
        "      branch1: [{kind: conv2d, name: conv, out_channels: 4, kernel_size: 1}]\n"
        "      branch2: [{kind: conv2d, out_channels: 2, kernel_size: 1}, {kind: hardswish}]\n"
        "      skip: identity\n"
        "  - {kind: conv_transpose2d, name: up, out_channels: 3, kernel_size: 2, stride: 2}\n"
        "  - {kind: upsample, name: down, size: [6, 6], mode: bilinear, align_corners: true}\n"
        "  - {kind: concat, name: cat, inputs: [down, f.c, input]}\n"
        "  - {kind: add, name: sum, inputs: [f.se.mul, f.c]}\n"
        "  - {kind: stochastic_depth, name: sd, p: 0.2, mode: row, input: inc.branch2.1}\n"
        "  - {kind: tanh, name: t, input: sum}\n";
    const char *names[] = {"f.c", "f.se.avgpool", "f.se.fc1", "f.se.activation", "f.se.fc2", "f.se.scale_activation",
                           "f.se.mul", "inc.branch1.conv", "inc.branch2.0", "inc.branch2.1", "inc.cat", "up", "down",
                           "cat", "sum", "sd", "t"};
    model *m;
    char err[512];
    bench_status st = load_text(yaml, &m, err, sizeof err);
    EXPECT(st == BENCH_OK, "structures: %s", err);
    if (st != BENCH_OK)
        return;
    int n = (int)(sizeof names / sizeof *names);
    EXPECT(m->n_layers == n, "%d layers, expected %d", m->n_layers, n);
    for (int i = 0; i < n && i < m->n_layers; i++)
        EXPECT(strcmp(m->layers[i].name, names[i]) == 0, "layer %d is '%s', expected '%s'", i, m->layers[i].name, names[i]);
    if (m->n_layers != n) {
        model_free(m);
        return;
    }
    const layer *mul = &m->layers[6], *cat = &m->layers[10], *cat2 = &m->layers[13], *sum = &m->layers[14];
    EXPECT(mul->kind == LAYER_MUL && mul->inputs[0] == 6 && mul->inputs[1] == 1, "SE: scale (layer 5) times the "
           "conv's output (layer 0): inputs %d %d", mul->inputs[0], mul->inputs[1]);
    EXPECT(mul->ins[0].d[2] == 1 && mul->out.d[1] == 8 && mul->out.d[2] == 6, "the SE multiply broadcasts");
    EXPECT(cat->kind == LAYER_CONCAT && cat->n_inputs == 3 && cat->inputs[2] == 7 && cat->out.d[1] == 4 + 2 + 8,
           "inception concat of 3 branches: %d inputs, %lld channels", cat->n_inputs, (long long)cat->out.d[1]);
    EXPECT(m->layers[11].out.d[2] == 12 && m->layers[12].out.d[2] == 6, "conv_transpose2d doubles, upsample to 6");
    EXPECT(cat2->n_inputs == 3 && cat2->inputs[0] == 13 && cat2->inputs[1] == 1 && cat2->inputs[2] == 0 &&
               cat2->out.d[1] == 3 + 8 + 8,
           "explicit inputs by name, qualified name and 'input'");
    EXPECT(sum->inputs[0] == 7 && sum->inputs[1] == 1, "add of f.se.mul and f.c");
    EXPECT(m->layers[15].inputs[0] == 10 && m->layers[16].inputs[0] == 15, "input: by qualified name");
    model_free(m);
}

/* A shipped config against its reference table (tests/data/NAME_layers.txt: name kind
 * input output params per line, written from torch's own execution of the model by
 * scripts/torch_export.py, or for ResNet-18 from the architecture by
 * gen_resnet18_layers.py): every layer's name, kind, shapes and parameters, and the
 * total the table's header states. Returns the model for more checks, or NULL. */
static model *check_against_table(const char *configs, const char *data, const char *name)
{
    char path[512], line[512], err[512];
    model *m;
    snprintf(path, sizeof path, "%s/%s.yaml", configs, name);
    bench_status st = cfg_load(path, 0, &m, err, sizeof err);
    EXPECT(st == BENCH_OK, "%s: %s", name, err);
    if (st != BENCH_OK)
        return NULL;
    snprintf(path, sizeof path, "%s/%s_layers.txt", data, name);
    FILE *f = fopen(path, "r");
    EXPECT(f != NULL, "cannot open %s", path);
    int i = 0, bad = 0;
    long long total = -1;
    while (f && fgets(line, sizeof line, f)) {
        if (line[0] == '#') {
            sscanf(line, "# total params %lld", &total);
            continue;
        }
        char lname[160], kind[32], in[64], out[64];
        long long params;
        if (sscanf(line, "%159s %31s %63s %63s %lld", lname, kind, in, out, &params) != 5)
            continue;
        if (i >= m->n_layers) {
            EXPECT(0, "%s: expected layer %s beyond the model's %d layers", name, lname, m->n_layers);
            i++;
            continue;
        }
        const layer *l = &m->layers[i];
        char gi[64], go[64];
        shape_format_compact(&l->in, gi, sizeof gi);
        shape_format_compact(&l->out, go, sizeof go);
        bool same = !strcmp(l->name, lname) && !strcmp(layer_kind_name(l->kind), kind) && !strcmp(gi, in) &&
                    !strcmp(go, out) && l->n_weights == params;
        if (!same && bad++ < 5) /* the first few differences, not hundreds */
            EXPECT(same, "%s layer %d: got %s %s %s %s %lld, expected %s %s %s %s %lld", name, i, l->name,
                   layer_kind_name(l->kind), gi, go, (long long)l->n_weights, lname, kind, in, out, params);
        i++;
    }
    if (f)
        fclose(f);
    EXPECT(bad == 0, "%s: %d layers differ from the table", name, bad);
    EXPECT(i == m->n_layers, "%s: %d expected layers, model has %d", name, i, m->n_layers);
    if (total >= 0)
        EXPECT(model_sum(m).n_weights == total, "%s: %lld params, the table says %lld", name,
               (long long)model_sum(m).n_weights, total);
    return m;
}

/* torch's totals, as torch counts them (sum of p.numel() of the network
 * that runs at inference; GoogLeNet without its training-only auxiliary classifiers). */
static const struct {
    const char *name;
    long long params;
} zoo[] = {
    {"resnet18", 11689512},     {"resnet50", 25557032},      {"mobilenet_v2", 3504872},
    {"vgg16", 138357544},       {"squeezenet1_0", 1248424},  {"densenet121", 7978856},
    {"googlenet", 6624904},     {"efficientnet_b0", 5288548}, {"mobilenet_v3_large", 5483032},
    /* transformers: torchvision's vit_b_16; 12 nn.TransformerEncoderLayer(768, 12, 3072) of
     * 7,087,872 parameters each (scripts/transformer_models.py) */
    {"vit_b_16", 86567656},     {"bert_base", 85054464},
    /* exported with its Permute, LayerNorm2d and layer scale; RegNet's block1-0 names */
    {"convnext_tiny", 28589128}, {"regnet_y_400mf", 4344144},
    /* its shifted window attention and patch merging as window_attention and patch_merge */
    {"swin_t", 28288354},
    /* Stable Diffusion's UNet blocks (scripts/unet_blocks.py): model_input layers for the
     * timestep embedding, text states and skips; cross-attention */
    {"sd_unet/resblock", 2255040}, {"sd_unet/spatial_transformer", 2546240},
    {"sd_unet/down_block", 10524480}, {"sd_unet/up_block", 71413120},
};

static void test_zoo(const char *configs, const char *data)
{
    for (size_t z = 0; z < sizeof zoo / sizeof *zoo; z++) {
        model *m = check_against_table(configs, data, zoo[z].name);
        if (!m)
            continue;
        EXPECT(model_sum(m).n_weights == zoo[z].params, "%s: %lld params, torchvision has %lld", zoo[z].name,
               (long long)model_sum(m).n_weights, zoo[z].params);
        model_free(m);
    }
    model *m = check_against_table(configs, data, "resnet18");
    if (!m)
        return;
    EXPECT(model_sum(m).macs == 1814073344, "resnet18 MACs %lld", (long long)model_sum(m).macs);
    /* --batch rescales every shape and count */
    char why[256];
    EXPECT(model_set_batch(m, 8, why, sizeof why) == BENCH_OK && model_sum(m).macs == 8LL * 1814073344,
           "batch 8 MACs");
    EXPECT(model_set_batch(m, 1LL << 31, why, sizeof why) == BENCH_ERR_USAGE, "a huge batch must be refused");
    model_free(m);
}

/* The forward's memory plan against hand-computed lifetimes. */
static void test_memory_plan(void)
{
    model *m;
    char err[512];
    model_memory mm;
    /* input 128 B; a 256 B; b 256 B; flatten a view of b; fc 40 B. Alive while each runs:
     * a: input + a = 384; b: a + b = 512; flatten: b = 256; fc: b + fc = 296 */
    EXPECT(load_text("name: t\ninput: [2, 4, 4]\nlayers:\n"
                     "  - {kind: conv2d, name: a, out_channels: 4, kernel_size: 3, padding: 1}\n"
                     "  - {kind: relu, name: b}\n  - {kind: flatten}\n  - {kind: linear, name: fc, out_features: 10}\n",
                     &m, err, sizeof err) == BENCH_OK,
           "%s", err);
    if (m) {
        model_memory_plan(m, &mm);
        EXPECT(mm.peak_activation_bytes == 512 && mm.peak_layer == 1, "peak %lld at layer %d, expected 512 at 1",
               (long long)mm.peak_activation_bytes, mm.peak_layer);
        EXPECT(mm.all_activation_bytes == 552 && mm.weight_bytes == 4 * (76 + 650), "all %lld, weights %lld",
               (long long)mm.all_activation_bytes, (long long)mm.weight_bytes);
        /* its training step, steps 0-3 the forward, 4 the loss, 5-8 the backward of fc,
         * flatten, b, a. Besides the weights (2904 B): the input (128) and a's output
         * (256) to a's backward (8), b's (256) to b's (7), fc's (40) to its own (5); the
         * gradients of fc's output (40) over 4-5, of b's (256) over 5-7, of a's (256)
         * over 7-8; fc's weights' gradient (2600) from 5, a's (304) from 8. Kept at the
         * loss: 680; the peak at 7 (b's backward): 128 + 256 + 256 + 256 + 256 + 2600
         * = 3752, and the weights */
        model_train_memory tm;
        model_set_pass(m, PASS_TRAIN);
        model_train_plan(m, &tm);
        EXPECT(tm.peak_bytes == 3752 + 2904 && tm.peak_step == 7 && tm.kept_bytes == 680 && tm.weight_grad_bytes == 2904,
               "train: peak %lld at step %d, kept %lld, weights' gradients %lld; expected 6656 at 7, 680, 2904",
               (long long)tm.peak_bytes, tm.peak_step, (long long)tm.kept_bytes, (long long)tm.weight_grad_bytes);
        /* with AdamW, its two moments of the 726 weights (5808 B) throughout */
        m->optimizer = OPTIMIZER_ADAMW;
        model_train_plan(m, &tm);
        EXPECT(tm.optimizer_bytes == 5808 && tm.peak_bytes == 6656 + 5808 && tm.peak_step == 7 && tm.kept_bytes == 680,
               "adamw: state %lld, peak %lld at step %d, kept %lld; expected 5808, 12464 at 7, 680",
               (long long)tm.optimizer_bytes, (long long)tm.peak_bytes, tm.peak_step, (long long)tm.kept_bytes);
        model_free(m);
    }
    /* the same with a frozen (requires_grad: false): nothing up to fc learns, so a and b
     * run no backward and fc writes no input gradient. a's output dies at b's forward
     * (1), the input at a's (0); b's (256) lives to fc's backward (5), fc's (40) too, its
     * gradient (40) over 4-5; fc's weights' gradient (2600) from 5. The peak at 5: 256 +
     * 40 + 40 + 2600 = 2936, and the weights; kept at the loss: 296 */
    EXPECT(load_text("name: t\ninput: [2, 4, 4]\nlayers:\n"
                     "  - {kind: conv2d, name: a, out_channels: 4, kernel_size: 3, padding: 1, requires_grad: false}\n"
                     "  - {kind: relu, name: b}\n  - {kind: flatten}\n  - {kind: linear, name: fc, out_features: 10}\n",
                     &m, err, sizeof err) == BENCH_OK,
           "%s", err);
    if (m) {
        bool runs[4], input_grad[4];
        model_grad_flow(m, runs, input_grad);
        EXPECT(!runs[0] && !runs[1] && !runs[2] && runs[3] && !input_grad[0] && !input_grad[1] && !input_grad[3],
               "frozen a: backward runs %d %d %d %d, input gradients %d %d %d %d; expected fc's only, none", runs[0],
               runs[1], runs[2], runs[3], input_grad[0], input_grad[1], input_grad[2], input_grad[3]);
        model_train_memory tm;
        model_set_pass(m, PASS_TRAIN);
        model_train_plan(m, &tm);
        EXPECT(tm.peak_bytes == 2936 + 2904 && tm.peak_step == 5 && tm.kept_bytes == 296 && tm.weight_grad_bytes == 2600,
               "frozen a: peak %lld at step %d, kept %lld, weights' gradients %lld; expected 5840 at 5, 296, 2600",
               (long long)tm.peak_bytes, tm.peak_step, (long long)tm.kept_bytes, (long long)tm.weight_grad_bytes);
        EXPECT(m->layers[0].frozen && !m->layers[3].frozen, "requires_grad: false freezes a, not fc");
        model_free(m);
    }
    /* a residual keeps its input until the add: input 256 B and four 256 B layers alive
     * in pairs or threes: c1 512, relu 768, c2 768, add 768, relu after 512 */
    EXPECT(load_text("name: t\ninput: [4, 4, 4]\nlayers:\n"
                     "  - kind: residual\n    name: r\n    body:\n"
                     "      - {kind: conv2d, name: c1, out_channels: 4, kernel_size: 3, padding: 1}\n"
                     "      - {kind: relu, name: relu}\n"
                     "      - {kind: conv2d, name: c2, out_channels: 4, kernel_size: 3, padding: 1}\n"
                     "    after: [{kind: relu, name: out}]\n",
                     &m, err, sizeof err) == BENCH_OK,
           "%s", err);
    if (m) {
        model_memory_plan(m, &mm);
        EXPECT(mm.peak_activation_bytes == 768 && mm.peak_layer == 1, "residual: peak %lld at layer %d",
               (long long)mm.peak_activation_bytes, mm.peak_layer);
        EXPECT(mm.all_activation_bytes == 5 * 256, "residual: all %lld", (long long)mm.all_activation_bytes);
        model_free(m);
    }
}

/* The model-wide dtype, a block's and a layer's own, views following their input, and
 * bytes in each layer's element size. */
static void test_dtypes(void)
{
    model *m;
    char err[512];
    EXPECT(load_text("name: t\ninput: [2, 4, 4]\ndtype: bfloat16\nlayers:\n"
                     "  - {kind: conv2d, name: stem, out_channels: 4, kernel_size: 3, padding: 1, dtype: float32}\n"
                     "  - {kind: relu, name: a}\n"
                     "  - kind: block\n    name: head\n    dtype: fp16\n    layers:\n"
                     "      - {kind: flatten}\n      - {kind: linear, name: fc, out_features: 10}\n",
                     &m, err, sizeof err) == BENCH_OK,
           "%s", err);
    if (!m)
        return;
    EXPECT(m->dtype == DTYPE_BF16, "model dtype %s", dtype_name(m->dtype));
    EXPECT(m->layers[0].dtype == DTYPE_FP32 && m->layers[0].dtype_pinned, "stem: %s", dtype_name(m->layers[0].dtype));
    EXPECT(m->layers[1].dtype == DTYPE_BF16 && !m->layers[1].dtype_pinned, "a: %s", dtype_name(m->layers[1].dtype));
    /* flatten is a view of a's bf16 output, whatever its block says */
    EXPECT(m->layers[2].dtype == DTYPE_BF16, "flatten: %s", dtype_name(m->layers[2].dtype));
    EXPECT(m->layers[3].dtype == DTYPE_FP16, "fc: %s", dtype_name(m->layers[3].dtype));
    /* relu reads and writes 64 elements each: 256 B in bf16; fc (64 in, 650 weights, 10
     * out) in fp16 */
    EXPECT(m->layers[1].bytes == 2 * 128, "relu bytes %lld", (long long)m->layers[1].bytes);
    EXPECT(m->layers[3].bytes == 2 * (64 + 650 + 10), "fc bytes %lld", (long long)m->layers[3].bytes);
    EXPECT(model_mixed(m), "a mixed model");
    EXPECT(model_value_dtype(m, 0) == DTYPE_FP32, "the input is the stem's: %s", dtype_name(model_value_dtype(m, 0)));
    model_memory mm;
    model_memory_plan(m, &mm);
    /* stem 4 * 2 * 9 + 4 weights in fp32, fc 650 in fp16 */
    EXPECT(mm.weight_bytes == 4 * 76 + 2 * 650, "weight bytes %lld", (long long)mm.weight_bytes);
    /* --dtype fp32 moves the unpinned layers; the pinned block stays fp16 */
    model_set_dtype(m, DTYPE_FP32);
    EXPECT(m->layers[1].dtype == DTYPE_FP32 && m->layers[3].dtype == DTYPE_FP16, "after --dtype fp32: a %s, fc %s",
           dtype_name(m->layers[1].dtype), dtype_name(m->layers[3].dtype));
    EXPECT(m->layers[1].bytes == 4 * 128, "relu bytes in fp32 %lld", (long long)m->layers[1].bytes);
    /* int8: the stem and fc quantize their weights (1 byte each, the bias in fp32), the
     * activations stay fp32, relu runs in fp32 */
    model_set_dtype(m, DTYPE_INT8);
    m->layers[0].dtype = DTYPE_INT8, m->layers[3].dtype = DTYPE_INT8;
    for (int i = 0; i < m->n_layers; i++)
        layer_count(&m->layers[i]);
    EXPECT(layer_compute_dtype(&m->layers[0]) == DTYPE_INT8 && layer_compute_dtype(&m->layers[1]) == DTYPE_FP32,
           "compute dtypes %s %s", dtype_name(layer_compute_dtype(&m->layers[0])), dtype_name(layer_compute_dtype(&m->layers[1])));
    EXPECT(layer_weight_bytes(&m->layers[0]) == 72 + 4 * 4 && layer_weight_bytes(&m->layers[3]) == 640 + 4 * 10,
           "int8 weight bytes %lld %lld", (long long)layer_weight_bytes(&m->layers[0]),
           (long long)layer_weight_bytes(&m->layers[3]));
    EXPECT(m->layers[3].bytes == 4 * (64 + 10) + 640 + 4 * 10, "int8 fc bytes %lld", (long long)m->layers[3].bytes);
    model_memory_plan(m, &mm);
    EXPECT(mm.weight_bytes == 72 + 16 + 640 + 40, "int8 weight bytes %lld", (long long)mm.weight_bytes);
    /* the reference's weights: 127 levels per output channel, the bias untouched */
    float w[76];
    for (int i = 0; i < 76; i++)
        w[i] = (float)(i % 13) * 0.01f - 0.05f;
    float before[76];
    memcpy(before, w, sizeof w);
    layer_round_weights(&m->layers[0], w);
    int changed = 0;
    for (int i = 0; i < 72; i++)
        changed += w[i] != before[i];
    EXPECT(changed > 0 && memcmp(w + 72, before + 72, 4 * sizeof *w) == 0, "int8 rounding: %d changed", changed);
    for (int r = 0; r < 4; r++) { /* each channel's largest |w| keeps its value: it sets the scale */
        float amax = 0.0f, got = 0.0f;
        for (int i = 0; i < 18; i++)
            if (fabsf(before[r * 18 + i]) > amax)
                amax = fabsf(before[r * 18 + i]), got = fabsf(w[r * 18 + i]);
        EXPECT(fabsf(got - amax) <= 1e-6f * amax, "channel %d: max %g became %g", r, amax, got);
    }
    model_free(m);
    /* names */
    EXPECT(dtype_from_name("bf16") == DTYPE_BF16 && dtype_from_name("bfloat16") == DTYPE_BF16 &&
               dtype_from_name("half") == DTYPE_FP16 && dtype_from_name("float32") == DTYPE_FP32 &&
               dtype_from_name("tf32") == DTYPE_TF32 && dtype_from_name("int8") == DTYPE_INT8 &&
               dtype_from_name("fp8") == -1 && dtype_from_name("") == -1,
           "dtype names");
}

/* The expressions of the decoder families (hf_expr.h): values, Python's rules, and errors
 * that name what is wrong rather than a wrong number. */
static json_t *expr_names(void *user, const char *name)
{
    json_t *o = json_object_get((json_t *)user, name);
    return o ? json_incref(o) : NULL;
}

static void test_expr(void)
{
    json_t *env = json_pack("{s:i, s:i, s:s, s:b, s:n, s:[i,i,i], s:{s:f}}", "hidden_size", 896, "heads", 14,
                            "model_type", "qwen3", "tie", 1, "none", "layers", 0, 3, 5, "rope", "factor", 8.0);
    static const struct { const char *text, *value; } good[] = {
        {"hidden_size // heads", "64"},
        {"-7 // 2", "-4"},            /* Python floors */
        {"-7 % 3", "2"},
        {"7 / 2", "3.5"},
        {"2 ** 10", "1024"},
        {"1 + 2 * 3 - 4", "3"},
        {"(1 + 2) * 3", "9"},
        {"model_type == 'qwen3' and tie", "true"},
        {"none or 5", "5"},
        {"0 or none", "null"},
        {"model_type in ['qwen2', 'qwen3']", "true"},
        {"3 not in layers", "false"},
        {"layers[2]", "5"},
        {"layers[-1]", "5"},
        {"len(layers)", "3"},
        {"rope.factor", "8.0"},
        {"rope['factor'] * 2", "16.0"},
        {"'a' if none else 'b'", "b"},
        {"str(heads) + 'x'", "14x"},
        {"int(7.9)", "7"},
        {"min(3, 1, 2)", "1"},
        {"max(layers)", "5"},
        {"sqrt(16)", "4.0"},
        {"[i * 2 for i in layers]", ""},   /* comprehensions are not in the subset: an error */
        {"not tie", "false"},
        {"1 < 2", "true"},
        {"min([4, 2, 9])", "2"},
        {"True and False", "false"},
        {"undefined_name if False else 1", "1"},   /* the branch not taken is not evaluated */
        {"False and undefined_name", "false"},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char err[256] = "";
        json_t *v = hf_expr_eval(good[i].text, expr_names, env, err, sizeof err);
        if (!good[i].value[0]) {
            EXPECT(!v && err[0], "%s: an error expected", good[i].text);
            json_decref(v);
            continue;
        }
        char *t = v ? hf_expr_text(v) : NULL;
        EXPECT(t && strcmp(t, good[i].value) == 0, "%s: got %s (%s), expected %s", good[i].text, t ? t : "nothing",
               err, good[i].value);
        free(t);
        json_decref(v);
    }
    static const struct { const char *text, *message; } bad[] = {
        {"9223372036854775807 + 1", "overflow"},
        {"1 // 0", "zero"},
        {"1 % 0", "zero"},
        {"nothing_here", "nothing_here"},
        {"hidden_size + 'a'", ""},
        {"layers[3]", ""},
        {"len(5)", "len"},
        {"1 +", ""},
        {"(1", ""},
        {"'open", ""},
        {"1 2", ""},
        {"frobnicate(1)", "frobnicate"},
        {"1 < 2 <= 2", ""},   /* no chained comparisons: an error, not a guess */
        {"max([])", "max"},
        {"1 if 2", "else"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "";
        json_t *v = hf_expr_eval(bad[i].text, expr_names, env, err, sizeof err);
        EXPECT(!v && err[0] && strstr(err, bad[i].message), "%s: expected an error with '%s', got '%s'", bad[i].text,
               bad[i].message, err);
        json_decref(v);
    }
    /* Deep nesting is an error, not a stack overflow. */
    char deep[20000];
    memset(deep, '(', sizeof deep - 1);
    deep[sizeof deep - 1] = 0;
    char err[256] = "";
    json_t *v = hf_expr_eval(deep, expr_names, env, err, sizeof err);
    EXPECT(!v && err[0], "20000 open parentheses: an error expected");
    json_decref(v);
    EXPECT(hf_expr_truthy(json_object_get(env, "tie")) && !hf_expr_truthy(json_object_get(env, "none")), "truth");
    json_decref(env);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: test_config CONFIG_DIR DATA_DIR\n");
        return 2;
    }
    snprintf(tmp_path, sizeof tmp_path, "/tmp/layerbench_test_config_%ld.yaml", (long)getpid());
    test_bad();
    test_names();
    test_structures();
    test_memory_plan();
    test_dtypes();
    test_expr();
    test_zoo(argv[1], argv[2]);
    unlink(tmp_path);
    return test_summary("test_config");
}
