/* A convolution through cuDNN's graph (backend) API, in plain C on libcudnn's
 * cudnnBackend* entry points (conv_graph_cuda.h). The approach follows what PyTorch's
 * Conv_v8.cpp and cudnn-frontend's find_plan do, written here from cuDNN's documented
 * attributes:
 *   - tensors with unique ids (1 our input, 2 the weights, 3 our output), real strides
 *     and a byte alignment; a convolution descriptor (cross-correlation, float
 *     compute); one forward node, or a backward-data node for a transposed convolution
 *     (whose dy is our input and dx our output); the operation graph of that node;
 *   - engine heuristics in modes INSTANT, A, B and FALLBACK, each mode's configs built
 *     into execution plans: a config that does not finalize is left out without
 *     tripping the env's failure flag; duplicates by tag and configs the math mode
 *     refuses (cudnn_engine_refuses) are left out too, and engines compiled at run time
 *     past the first CONV_GRAPH_MAX_COMPILED (each takes up to seconds to build);
 *   - a plan runs through a variant pack of the tensors' addresses and the workspace. */
#include "conv_graph_cuda.h"

#include <stdlib.h>
#include <string.h>

/* our note bits are cuDNN's enum values */
_Static_assert(CUDNN_ENGINE_NOTE_TENSOR_CORE == 1u << CUDNN_NUMERICAL_NOTE_TENSOR_CORE, "note bits");
_Static_assert(CUDNN_ENGINE_NOTE_DOWN_CONVERT_INPUTS == 1u << CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS, "note bits");
_Static_assert(CUDNN_ENGINE_NOTE_REDUCED_PRECISION_REDUCTION == 1u << CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION,
               "note bits");
_Static_assert(CUDNN_ENGINE_NOTE_FFT == 1u << CUDNN_NUMERICAL_NOTE_FFT, "note bits");
_Static_assert(CUDNN_ENGINE_NOTE_NONDETERMINISTIC == 1u << CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC, "note bits");
_Static_assert(CUDNN_ENGINE_NOTE_WINOGRAD == 1u << CUDNN_NUMERICAL_NOTE_WINOGRAD, "note bits");
_Static_assert(CUDNN_ENGINE_NOTE_WINOGRAD_TILE_4x4 == 1u << CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4, "note bits");
_Static_assert(CUDNN_ENGINE_NOTE_STRICT_NAN_PROP == 1u << CUDNN_NUMERICAL_NOTE_STRICT_NAN_PROP, "note bits");
_Static_assert(CUDNN_ENGINE_BEHAVIOR_RUNTIME_COMPILATION == 1u << CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION, "note bits");
_Static_assert(CUDNN_ENGINE_BEHAVIOR_CUBLASLT_DEPENDENCY == 1u << CUDNN_BEHAVIOR_NOTE_CUBLASLT_DEPENDENCY, "note bits");

enum { UID_IN = 1, UID_W = 2, UID_OUT = 3 };

/* Engines compiled at run time (NVRTC) built per convolution, in the heuristics' order */
#define CONV_GRAPH_MAX_COMPILED 4
#define CONV_GRAPH_MAX_COMPILED_TEXT "4"

/* A cuDNN call whose failure is recorded in why (first failure only) and not in env. */
#define TRY(call) graph_try((call), #call, __LINE__, why, why_len)

static bool graph_try(cudnnStatus_t s, const char *call, int line, char *why, size_t why_len)
{
    if (s == CUDNN_STATUS_SUCCESS)
        return true;
    if (why && why_len && !why[0]) {
        char last[160] = "";
        cudnnGetLastErrorString(last, sizeof last);
        const char *paren = strchr(call, '(');
        snprintf(why, why_len, "%.*s (conv_graph_cuda.c:%d): %s%s%s%s", paren ? (int)(paren - call) : 40, call, line,
                 cudnnGetErrorString(s), *last ? " (" : "", last, *last ? ")" : "");
    }
    return false;
}

static void destroy(cudnnBackendDescriptor_t *d)
{
    if (*d)
        cudnnBackendDestroyDescriptor(*d);
    *d = NULL;
}

/* A finalized tensor descriptor of type `type` and dims d (NCHW) with packed NCHW strides. */
static bool tensor(const int64_t d[4], cudnnDataType_t type, int64_t uid, int64_t align, cudnnBackendDescriptor_t *t,
                   char *why, size_t why_len)
{
    int64_t strides[4] = {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1};
    return TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, t)) &&
           TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type)) &&
           TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, d)) &&
           TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides)) &&
           TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid)) &&
           TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align)) &&
           TRY(cudnnBackendFinalize(*t));
}

void conv_graph_destroy(conv_graph *g)
{
    for (int i = 0; i < 3; i++)
        destroy(&g->t[i]);
    destroy(&g->conv), destroy(&g->op), destroy(&g->graph), destroy(&g->pack);
    memset(g, 0, sizeof *g);
}

bool conv_graph_create(cuda_env *env, const layer *l, int align_io, int align_w, conv_graph *g, char *why,
                       size_t why_len)
{
    memset(g, 0, sizeof *g);
    if (why_len)
        why[0] = 0;
    const layer_params *p = &l->p;
    if (l->in.rank != 4 || l->dtype == DTYPE_INT8) {
        snprintf(why, why_len, "the graph API path takes fp32, tf32, bf16 and fp16 NCHW convolutions");
        return false;
    }
    g->transposed = l->kind == LAYER_CONV_TRANSPOSE2D;
    g->math = l->dtype == DTYPE_TF32 ? CUDNN_MATH_TF32 : l->dtype == DTYPE_FP32 ? CUDNN_MATH_FP32 : CUDNN_MATH_HALF;
    cudnnDataType_t type = cuda_dnn_type(l->dtype);
    /* the filter as the forward convolution sees it (conv2d_cuda.c says why) */
    int64_t k = g->transposed ? l->in.d[1] : p->out_channels;
    int64_t cg = g->transposed ? p->out_channels / p->groups : l->in.d[1] / p->groups;
    int64_t din[4] = {l->in.d[0], l->in.d[1], l->in.d[2], l->in.d[3]};
    int64_t dout[4] = {l->out.d[0], l->out.d[1], l->out.d[2], l->out.d[3]};
    int64_t dw[4] = {k, cg, p->kernel[0], p->kernel[1]};
    g->align[0] = g->align[2] = align_io, g->align[1] = align_w;
    int64_t pad[2] = {p->padding[0], p->padding[1]}, stride[2] = {p->stride[0], p->stride[1]};
    int64_t dil[2] = {p->dilation[0], p->dilation[1]}, dims = 2;
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    float alpha = 1.0f, beta = 0.0f;
    cudnnBackendDescriptorType_t op_type = g->transposed ? CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR
                                                         : CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR;
    /* forward: x our input, y our output; backward data: dy our input, dx our output */
    cudnnBackendAttributeName_t a_in = g->transposed ? CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY
                                                     : CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                a_w = g->transposed ? CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W
                                                    : CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                a_out = g->transposed ? CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX
                                                      : CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                                a_conv = g->transposed ? CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC
                                                       : CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                                a_alpha = g->transposed ? CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA
                                                        : CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                                a_beta = g->transposed ? CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA
                                                       : CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA;
    bool ok =
        tensor(din, type, UID_IN, align_io, &g->t[0], why, why_len) &&
        tensor(dw, type, UID_W, align_w, &g->t[1], why, why_len) &&
        tensor(dout, type, UID_OUT, align_io, &g->t[2], why, why_len) &&
        TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &g->conv)) &&
        TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp)) &&
        TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode)) &&
        TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims)) &&
        TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad)) &&
        TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad)) &&
        TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride)) &&
        TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil)) &&
        TRY(cudnnBackendFinalize(g->conv)) && TRY(cudnnBackendCreateDescriptor(op_type, &g->op)) &&
        TRY(cudnnBackendSetAttribute(g->op, a_in, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->t[0])) &&
        TRY(cudnnBackendSetAttribute(g->op, a_w, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->t[1])) &&
        TRY(cudnnBackendSetAttribute(g->op, a_out, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->t[2])) &&
        TRY(cudnnBackendSetAttribute(g->op, a_conv, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->conv)) &&
        TRY(cudnnBackendSetAttribute(g->op, a_alpha, CUDNN_TYPE_FLOAT, 1, &alpha)) &&
        TRY(cudnnBackendSetAttribute(g->op, a_beta, CUDNN_TYPE_FLOAT, 1, &beta)) && TRY(cudnnBackendFinalize(g->op)) &&
        TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g->graph)) &&
        TRY(cudnnBackendSetAttribute(g->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->op)) &&
        TRY(cudnnBackendSetAttribute(g->graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &env->cudnn)) &&
        TRY(cudnnBackendFinalize(g->graph));
    if (!ok) {
        conv_graph_destroy(g);
        return false;
    }
    g->built = true;
    return true;
}

void conv_graph_plan_free(graph_plan *p)
{
    destroy(&p->plan);
}

void conv_graph_plans_free(graph_plan *plans, int n, int keep)
{
    for (int i = 0; plans && i < n; i++)
        if (i != keep)
            conv_graph_plan_free(&plans[i]);
    free(plans);
}

/* The tag and notes of an engine config (finalized). */
static bool describe_config(cudnnBackendDescriptor_t cfg, graph_plan *p, char *why, size_t why_len)
{
    cudnnBackendDescriptor_t engine = NULL, knobs[CUDNN_KNOB_TYPE_COUNTS] = {0};
    int64_t n = 0, nk = 0;
    bool ok = TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine)) &&
              TRY(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                           &engine)) &&
              TRY(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                                           &p->tag.engine));
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    cudnnBackendBehaviorNote_t behaviors[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    p->numerical = p->behavior = 0;
    if (ok && TRY(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                           CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes)))
        for (int64_t i = 0; i < n; i++)
            p->numerical |= 1u << (unsigned)notes[i];
    if (ok && cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                       CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n, behaviors) == CUDNN_STATUS_SUCCESS)
        for (int64_t i = 0; i < n; i++)
            p->behavior |= 1u << (unsigned)behaviors[i];
    for (int i = 0; ok && i < CUDNN_KNOB_TYPE_COUNTS; i++)
        ok = TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &knobs[i]));
    ok = ok && TRY(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                            CUDNN_KNOB_TYPE_COUNTS, &nk, knobs));
    p->tag.n_knobs = 0;
    for (int64_t i = 0; ok && i < nk && i < CUDNN_ENGINE_MAX_KNOBS; i++) {
        cudnnBackendKnobType_t type;
        int64_t value;
        ok = TRY(cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &n,
                                          &type)) &&
             TRY(cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &n, &value));
        p->tag.knobs[p->tag.n_knobs++] = (cudnn_knob){(int)type, value};
    }
    if (ok && !cudnn_tag_normalize(&p->tag)) {
        snprintf(why, why_len, "an engine config with one knob type twice");
        ok = false;
    }
    for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; i++)
        destroy(&knobs[i]);
    destroy(&engine);
    return ok;
}

/* An execution plan of engine config cfg, finalized, with its workspace. */
static bool build_plan(cuda_env *env, cudnnBackendDescriptor_t cfg, graph_plan *p, char *why, size_t why_len)
{
    int64_t n = 0;
    bool ok = TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p->plan)) &&
              TRY(cudnnBackendSetAttribute(p->plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &env->cudnn)) &&
              TRY(cudnnBackendSetAttribute(p->plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                           CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg)) &&
              TRY(cudnnBackendFinalize(p->plan)) &&
              TRY(cudnnBackendGetAttribute(p->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                           &p->workspace));
    if (!ok)
        destroy(&p->plan);
    return ok;
}

static bool logging(void)
{
    const char *v = getenv("LAYERBENCH_CUDNN_LOG");
    return v && *v && strcmp(v, "0") != 0;
}

void conv_graph_plan_name(const graph_plan *p, char *buf, size_t len)
{
    char tag[CUDNN_ENGINE_TAG_LEN], notes[160];
    cudnn_tag_format(&p->tag, tag, sizeof tag);
    cudnn_notes_format(p->numerical, p->behavior, notes, sizeof notes);
    snprintf(buf, len, "%s%s%s%s", tag, *notes ? " (" : "", notes, *notes ? ")" : "");
}

int conv_graph_plans(cuda_env *env, const layer *l, conv_graph *g, graph_plan **plans)
{
    static const cudnnBackendHeurMode_t modes[] = {CUDNN_HEUR_MODE_INSTANT, CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_B,
                                                   CUDNN_HEUR_MODE_FALLBACK};
    static const char *const mode_names[] = {"INSTANT", "A", "B", "FALLBACK"};
    bool log = logging();
    int n = 0, cap = 0, compiled = 0;
    *plans = NULL;
    if (log)
        bench_diag("cudnn: %s: graph API engines (heuristics INSTANT, A, B, FALLBACK):\n", l->name);
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        char why[256] = "";
        size_t why_len = sizeof why;
        cudnnBackendDescriptor_t heur = NULL;
        int64_t count = 0;
        bool ok = TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur)) &&
                  TRY(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                               1, &g->graph)) &&
                  TRY(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[m])) &&
                  TRY(cudnnBackendFinalize(heur)) &&
                  TRY(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                               &count, NULL));
        cudnnBackendDescriptor_t *cfgs = ok && count > 0 ? calloc((size_t)count, sizeof *cfgs) : NULL;
        int64_t got = 0;
        for (int64_t i = 0; cfgs && ok && i < count; i++)
            ok = TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[i]));
        ok = ok && cfgs &&
             TRY(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                          &got, cfgs));
        if (!ok && log)
            bench_diag("cudnn:   mode %s: %s\n", mode_names[m], why[0] ? why : "no engine config");
        for (int64_t i = 0; ok && i < got; i++) {
            graph_plan p = {0};
            char name[CUDNN_ENGINE_TAG_LEN + 160], pwhy[256] = "";
            if (!describe_config(cfgs[i], &p, pwhy, sizeof pwhy)) {
                if (log)
                    bench_diag("cudnn:   mode %s #%lld: left out: %s\n", mode_names[m], (long long)i, pwhy);
                continue;
            }
            conv_graph_plan_name(&p, name, sizeof name);
            bool seen = false;
            for (int j = 0; j < n && !seen; j++)
                seen = cudnn_tag_equal(&(*plans)[j].tag, &p.tag);
            const char *refused = seen ? NULL : cudnn_engine_refuses(p.numerical, g->math);
            /* an engine compiled at run time takes up to seconds to build: the first
             * few the heuristics rank are enough to know whether one wins */
            if (!seen && !refused && (p.behavior & CUDNN_ENGINE_BEHAVIOR_RUNTIME_COMPILATION) &&
                compiled == CONV_GRAPH_MAX_COMPILED)
                refused = "compiled at run time, and " CONV_GRAPH_MAX_COMPILED_TEXT " such engines are built already";
            if (seen || refused) {
                if (log)
                    bench_diag("cudnn:   %-8s %s: left out: %s\n", mode_names[m], name, seen ? "a duplicate" : refused);
                continue;
            }
            if (!build_plan(env, cfgs[i], &p, pwhy, sizeof pwhy)) {
                if (log)
                    bench_diag("cudnn:   %-8s %s: left out: the plan does not build: %s\n", mode_names[m], name, pwhy);
                continue;
            }
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                graph_plan *grown = realloc(*plans, (size_t)cap * sizeof *grown);
                if (!grown) {
                    conv_graph_plan_free(&p);
                    break;
                }
                *plans = grown;
            }
            (*plans)[n++] = p;
            compiled += (p.behavior & CUDNN_ENGINE_BEHAVIOR_RUNTIME_COMPILATION) != 0;
            if (log)
                bench_diag("cudnn:   %-8s %s: %lld B workspace\n", mode_names[m], name, (long long)p.workspace);
        }
        for (int64_t i = 0; cfgs && i < count; i++)
            destroy(&cfgs[i]);
        free(cfgs);
        destroy(&heur);
    }
    /* a failed heuristic may leave cuDNN's last error behind, never the env's */
    (void)cudaGetLastError();
    return n;
}

bool conv_graph_plan_from_tag(cuda_env *env, conv_graph *g, const cudnn_engine_tag *tag, graph_plan *p, char *why,
                              size_t why_len)
{
    memset(p, 0, sizeof *p);
    if (why_len)
        why[0] = 0;
    cudnnBackendDescriptor_t engine = NULL, cfg = NULL, knobs[CUDNN_ENGINE_MAX_KNOBS] = {0};
    bool ok = TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine)) &&
              TRY(cudnnBackendSetAttribute(engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                           &g->graph)) &&
              TRY(cudnnBackendSetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &tag->engine)) &&
              TRY(cudnnBackendFinalize(engine));
    for (int i = 0; ok && i < tag->n_knobs; i++) {
        cudnnBackendKnobType_t type = (cudnnBackendKnobType_t)tag->knobs[i].type;
        ok = TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &knobs[i])) &&
             TRY(cudnnBackendSetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &type)) &&
             TRY(cudnnBackendSetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1,
                                          &tag->knobs[i].value)) &&
             TRY(cudnnBackendFinalize(knobs[i]));
    }
    ok = ok && TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg)) &&
         TRY(cudnnBackendSetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &engine)) &&
         (tag->n_knobs == 0 || TRY(cudnnBackendSetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, tag->n_knobs, knobs))) &&
         TRY(cudnnBackendFinalize(cfg)) && describe_config(cfg, p, why, why_len);
    if (ok && !cudnn_tag_equal(&p->tag, tag)) {
        snprintf(why, why_len, "cuDNN built another configuration of the engine than the tag asks for");
        ok = false;
    }
    const char *refused = ok ? cudnn_engine_refuses(p->numerical, g->math) : NULL;
    if (refused) {
        snprintf(why, why_len, "the math mode refuses it: %s", refused);
        ok = false;
    }
    ok = ok && build_plan(env, cfg, p, why, why_len);
    for (int i = 0; i < tag->n_knobs; i++)
        destroy(&knobs[i]);
    destroy(&cfg), destroy(&engine);
    (void)cudaGetLastError();
    return ok;
}

cudnnStatus_t conv_graph_run(cuda_env *env, conv_graph *g, const graph_plan *p, const void *in, const void *w,
                             void *out, void *workspace)
{
    const void *ptr[4] = {in, w, out, workspace};
    if (!g->pack || memcmp(ptr, g->pack_ptr, sizeof ptr) != 0) {
        destroy(&g->pack);
        int64_t uids[3] = {UID_IN, UID_W, UID_OUT};
        void *data[3] = {(void *)in, (void *)w, out};
        cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &g->pack);
        if (s == CUDNN_STATUS_SUCCESS)
            s = cudnnBackendSetAttribute(g->pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, data);
        if (s == CUDNN_STATUS_SUCCESS)
            s = cudnnBackendSetAttribute(g->pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
        if (s == CUDNN_STATUS_SUCCESS)
            s = cudnnBackendSetAttribute(g->pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
        if (s == CUDNN_STATUS_SUCCESS)
            s = cudnnBackendFinalize(g->pack);
        if (s != CUDNN_STATUS_SUCCESS) {
            destroy(&g->pack);
            return s;
        }
        memcpy(g->pack_ptr, ptr, sizeof ptr);
    }
    return cudnnBackendExecute(env->cudnn, p->plan, g->pack);
}
