/* conv2d and conv_transpose2d through cuDNN: the transposed convolution is cuDNN's
 * backward-data convolution of the forward convolution it transposes (whose input is our
 * output, and whose filter [IC, OC/groups, KH, KW] is torch's ConvTranspose2d weight as
 * it is). The candidates come from cuDNN's two APIs (--conv-api, default both): the
 * legacy API's algorithms and the graph API's engines (conv_graph_cuda.c: the
 * heuristics' configs in modes INSTANT, A, B and FALLBACK, as PyTorch's Conv_v8.cpp
 * gets them). The choice is made at setup, by timing the candidates (--algo search, like
 * cudnn.benchmark = True: cuDNN's search for the legacy algorithms, each engine's plan
 * timed once, then the leading candidates of both timed again over several rounds, see
 * retime) or by the heuristics (--algo heuristic: the graph API's first plan, else the
 * legacy API's first algorithm), among those of the layer's math mode only: FMA (true
 * FP32) unless its dtype is tf32, and for engines no TENSOR_CORE note in FP32 and no
 * DOWN_CONVERT_INPUTS ever (cudnn_engine_refuses). As PyTorch does, a legacy result's math
 * type is set on the descriptor together with the algorithm. The choice is cached for
 * the process and saved with --algo-cache (cuda_env.h); LAYERBENCH_CUDNN_ENGINE=<tag>
 * runs one engine instead, the one PyTorch's log names. A candidate whose workspace
 * cannot be allocated gives way to the next one. Bias: cudnnAddTensor after the
 * convolution, inside the timed run. bf16 and fp16 run on 16-bit NCHW tensors with
 * float compute (tensor cores allowed), their bias added in fp32 by a kernel of ours;
 * NHWC, the layout PyTorch's channels_last runs, is not done yet.
 *
 * An engine's plan is built for 16-byte aligned input and output (what cudaMalloc gives
 * and PyTorch assumes at most) and the weights' own alignment; a run given a less
 * aligned input or output (a view's offset) runs the legacy IMPLICIT_GEMM instead and
 * says so once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv_graph_cuda.h"
#include "cuda_env.h"

typedef struct conv_cuda {
    bool transposed;       /* conv_transpose2d: backward data */
    cudnnTensorDescriptor_t x, y, b; /* our input, our output, the bias */
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    int algo;              /* cudnnConvolutionFwdAlgo_t or cudnnConvolutionBwdDataAlgo_t */
    void *workspace;
    size_t workspace_bytes;
    const void *weights, *bias; /* in the layer's dtype */
    float *bias_f32;       /* bf16, fp16: the bias widened once, added by our kernel */
    conv_graph graph;      /* graph API: built where its engines are candidates */
    graph_plan *plans;     /* during the choice: the engines' plans (n_plans) */
    int n_plans;
    graph_plan plan;       /* the chosen engine, when use_graph */
    bool use_graph;
    bool misaligned_said;  /* a run fell back to the legacy API: said once */
} conv_cuda;

/* One candidate of a search or heuristic, forward or backward-data. */
typedef struct candidate {
    int algo;
    cudnnStatus_t status;
    cudnnMathType_t math;
    float ms;              /* the search's timing, or ours (retimed); -1 from the heuristic */
    size_t workspace;
    bool retimed;
    int plan;              /* a graph-API engine: its index in conv_cuda.plans; -1: legacy */
} candidate;

const char *cuda_bwd_data_algo_name(int a)
{
    switch (a) {
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_0: return "BWD_DATA_ALGO_0";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1: return "BWD_DATA_ALGO_1";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT: return "BWD_DATA_FFT";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING: return "BWD_DATA_FFT_TILING";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD: return "BWD_DATA_WINOGRAD";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED: return "BWD_DATA_WINOGRAD_NONFUSED";
    default: return "unknown";
    }
}

static const char *algo_name(bool transposed, int a)
{
    if (transposed)
        return cuda_bwd_data_algo_name(a);
    switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    default: return "unknown";
    }
}

static const char *math_name(cudnnMathType_t m)
{
    switch (m) {
    case CUDNN_FMA_MATH: return "FMA";
    case CUDNN_DEFAULT_MATH: return "default math";
    case CUDNN_TENSOR_OP_MATH: return "tensor op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor op with conversion";
    default: return "unknown math";
    }
}

static void conv_free(void *ctx, void *state)
{
    cuda_env *env = ctx;
    conv_cuda *c = state;
    if (!c)
        return;
    cudnnDestroyTensorDescriptor(c->x), cudnnDestroyTensorDescriptor(c->y), cudnnDestroyTensorDescriptor(c->b);
    cudnnDestroyFilterDescriptor(c->w);
    cudnnDestroyConvolutionDescriptor(c->conv);
    conv_graph_plans_free(c->plans, c->n_plans, -1);
    conv_graph_plan_free(&c->plan);
    conv_graph_destroy(&c->graph);
    if (c->bias_f32)
        cudaFree(c->bias_f32);
    if (c->workspace)
        CUDA_OK(env, cudaFree(c->workspace));
    free(c);
}

/* Candidates the math mode allows, in cuDNN's order (fastest first for a search):
 * strict FP32 takes FMA-math results only, so TF32 never slips in. Returns how many
 * were kept at the front of cand. */
static int allowed(candidate *cand, int n, bool tf32)
{
    int kept = 0;
    for (int i = 0; i < n; i++)
        if (cand[i].plan >= 0 || (cand[i].status == CUDNN_STATUS_SUCCESS && (tf32 || cand[i].math == CUDNN_FMA_MATH)))
            cand[kept++] = cand[i];
    return kept;
}

/* cuDNN's results, forward or backward-data, as candidates. */
#define TO_CANDIDATES(perf, n, cand)                                                                   \
    for (int i_ = 0; i_ < (n); i_++)                                                                   \
        (cand)[i_] = (candidate){(int)(perf)[i_].algo, (perf)[i_].status, (perf)[i_].mathType,           \
                                 env->algo == CUDA_ALGO_HEURISTIC ? -1.0f : (perf)[i_].time,            \
                                 (perf)[i_].memory, false, -1}

/* LAYERBENCH_CUDNN_LOG=1 in the environment: every candidate of every search (or
 * heuristic) on stderr, in cuDNN's order, with its math type, its timing and its
 * workspace, and whether the math mode (dtype tf32 or not) keeps it; then the leading
 * candidates as retimed: why an algorithm was chosen, when a layer is slower than
 * another framework's. */
static void log_candidates(cuda_env *env, const layer *l, const conv_cuda *c, const candidate *cand, int n,
                           const char *what)
{
    const char *v = getenv("LAYERBENCH_CUDNN_LOG");
    if (!v || !*v || strcmp(v, "0") == 0)
        return;
    char in[64], out[64];
    shape_format(&l->in, in, sizeof in), shape_format(&l->out, out, sizeof out);
    bench_diag("cudnn: %s (%s %s -> %s), %s, %d candidates:\n", l->name, layer_kind_name(l->kind), in, out,
               what, n);
    for (int i = 0; i < n; i++) {
        bool legacy = cand[i].plan < 0;
        const char *why = legacy && cand[i].status != CUDNN_STATUS_SUCCESS ? cudnnGetErrorString(cand[i].status)
                          : legacy && !env->tf32 && cand[i].math != CUDNN_FMA_MATH
                              ? "left out: not FMA math (dtype tf32 allows it)"
                          : cand[i].retimed ? "allowed, retimed"
                                            : "allowed";
        char name[CUDNN_ENGINE_TAG_LEN + 160];
        if (legacy)
            snprintf(name, sizeof name, "%-22s %-22s", algo_name(c->transposed, cand[i].algo), math_name(cand[i].math));
        else
            conv_graph_plan_name(&c->plans[cand[i].plan], name, sizeof name);
        if (cand[i].ms >= 0)
            bench_diag("cudnn:   %-45s %9.4f ms %10zu B  %s\n", name, cand[i].ms, cand[i].workspace, why);
        else
            bench_diag("cudnn:   %-45s %10zu B  %s\n", name, cand[i].workspace, why);
    }
}

/* One call of candidate a on scratch buffers, enqueued on the stream; cuDNN's status. */
static cudnnStatus_t launch_candidate(cuda_env *env, conv_cuda *c, const candidate *a, const void *w, const void *x,
                                      void *y, void *ws, size_t ws_bytes)
{
    if (a->plan >= 0)
        return conv_graph_run(env, &c->graph, &c->plans[a->plan], x, w, y, ws);
    const float one = 1.0f, zero = 0.0f;
    cudnnStatus_t st = cudnnSetConvolutionMathType(c->conv, a->math);
    if (st != CUDNN_STATUS_SUCCESS)
        return st;
    if (c->transposed)
        return cudnnConvolutionBackwardData(env->cudnn, &one, c->w, w, c->x, x, c->conv,
                                            (cudnnConvolutionBwdDataAlgo_t)a->algo, ws, ws_bytes, &zero, c->y, y);
    return cudnnConvolutionForward(env->cudnn, &one, c->x, x, c->w, w, c->conv, (cudnnConvolutionFwdAlgo_t)a->algo,
                                   ws, ws_bytes, &zero, c->y, y);
}

#define RETIME_MAX 6       /* candidates retimed */
#define RETIME_ROUNDS 5    /* interleaved rounds; the median round counts */

/* reps calls of candidate a captured as one CUDA graph, so that a round measures the
 * device's time and not the host's launch rate (about 30 us a call through cuDNN's
 * legacy API, more than a small convolution takes). NULL where the candidate cannot be
 * captured: then nothing is left in capture and no error is left behind. */
static cudaGraphExec_t capture_candidate(cuda_env *env, conv_cuda *c, const candidate *a, int reps,
                                         const void *w, const void *x, void *y, void *ws, size_t ws_bytes)
{
    if (cudaStreamBeginCapture(env->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    bool ok = true;
    for (int k = 0; ok && k < reps; k++)
        ok = launch_candidate(env, c, a, w, x, y, ws, ws_bytes) == CUDNN_STATUS_SUCCESS;
    cudaGraph_t g = NULL;
    cudaGraphExec_t exec = NULL;
    ok = cudaStreamEndCapture(env->stream, &g) == cudaSuccess && ok && g &&
         cudaGraphInstantiate(&exec, g, 0) == cudaSuccess;
    if (g)
        cudaGraphDestroy(g);
    if (!ok && exec)
        cudaGraphExecDestroy(exec), exec = NULL;
    (void)cudaGetLastError();
    return exec;
}

static int by_ms(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* cuDNN's search times each algorithm once, and at small sizes its order changes from
 * run to run (ResNet-18's layer4.0.conv1 at batch 1 on an H100: 55 us in one run, 105
 * in the next, a different algorithm). The leading candidates, those the search timed
 * within 2x of the fastest, are timed again here: RETIME_ROUNDS interleaved rounds of
 * about 1 ms of calls each, captured as a CUDA graph (back-to-back launches where a
 * candidate cannot be captured: then all are timed so), between CUDA events; the
 * median round decides. Reorders cand[0..n) (retimed first, fastest first); false
 * when a call failed. */
static bool retime(cuda_env *env, conv_cuda *c, candidate *cand, int n, const void *w, const void *x,
                   void *y, void *ws, size_t ws_bytes)
{
    int m = 0;
    while (m < n && m < RETIME_MAX && cand[m].ms <= 2.0f * cand[0].ms)
        m++;
    if (m < 2)
        return true;
    cudaEvent_t e0 = NULL, e1 = NULL;
    cudaGraphExec_t graph[RETIME_MAX] = {0};
    float rounds[RETIME_MAX][RETIME_ROUNDS];
    int reps[RETIME_MAX];
    bool ok = CUDA_OK(env, cudaEventCreate(&e0)) && CUDA_OK(env, cudaEventCreate(&e1)), graphs = true;
    for (int i = 0; ok && i < m; i++) {   /* calls per round from the search's time */
        float per = cand[i].ms > 0.001f ? cand[i].ms : 0.001f;
        reps[i] = (int)(1.0f / per);
        reps[i] = reps[i] < 3 ? 3 : reps[i] > 200 ? 200 : reps[i];
        graph[i] = capture_candidate(env, c, &cand[i], reps[i], w, x, y, ws, ws_bytes);
        graphs = graphs && graph[i];
    }
    /* a graph's first launch uploads it; one that does not launch is not used */
    for (int i = 0; ok && graphs && i < m; i++)
        if (cudaGraphLaunch(graph[i], env->stream) != cudaSuccess || cudaStreamSynchronize(env->stream) != cudaSuccess) {
            (void)cudaGetLastError();
            graphs = false;
        }
    for (int r = -1; ok && r < RETIME_ROUNDS; r++)     /* round -1: warm-up */
        for (int i = 0; ok && i < m; i++) {
            ok = CUDA_OK(env, cudaEventRecord(e0, env->stream));
            if (graphs)
                ok = ok && CUDA_OK(env, cudaGraphLaunch(graph[i], env->stream));
            for (int k = 0; ok && !graphs && k < reps[i]; k++)
                ok = CUDNN_OK(env, launch_candidate(env, c, &cand[i], w, x, y, ws, ws_bytes));
            float ms = 0;
            ok = ok && CUDA_OK(env, cudaEventRecord(e1, env->stream)) && CUDA_OK(env, cudaEventSynchronize(e1)) &&
                 CUDA_OK(env, cudaEventElapsedTime(&ms, e0, e1));
            if (r >= 0)
                rounds[i][r] = ms / (float)reps[i];
        }
    for (int i = 0; i < m; i++)
        if (graph[i])
            cudaGraphExecDestroy(graph[i]);
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    if (!ok)
        return false;
    for (int i = 0; i < m; i++) {
        qsort(rounds[i], RETIME_ROUNDS, sizeof(float), by_ms);
        cand[i].ms = rounds[i][RETIME_ROUNDS / 2];
        cand[i].retimed = true;
    }
    for (int i = 1; i < m; i++)          /* insertion sort of the retimed head */
        for (int j = i; j > 0 && cand[j].ms < cand[j - 1].ms; j--) {
            candidate t = cand[j];
            cand[j] = cand[j - 1], cand[j - 1] = t;
        }
    return true;
}

/* Each engine's plan, timed once on the scratch buffers (a call to warm up, then three
 * between events), as a candidate appended at cand[n..]; a plan whose workspace is over
 * ws_bytes, or that fails to run, is left out. Returns the new count. */
static int add_plans(cuda_env *env, conv_cuda *c, candidate *cand, int n, const void *w, const void *x, void *y,
                     void *ws, size_t ws_bytes, bool timed)
{
    cudaEvent_t e0 = NULL, e1 = NULL;
    if (timed && (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess)) {
        (void)cudaGetLastError();
        timed = false;
    }
    for (int i = 0; i < c->n_plans; i++) {
        candidate a = {.status = CUDNN_STATUS_SUCCESS, .math = CUDNN_DEFAULT_MATH, .ms = -1.0f,
                       .workspace = (size_t)c->plans[i].workspace, .plan = i};
        if (timed) {
            if (a.workspace > ws_bytes)
                continue;
            float ms = 0;
            bool ok = launch_candidate(env, c, &a, w, x, y, ws, ws_bytes) == CUDNN_STATUS_SUCCESS &&
                      cudaEventRecord(e0, env->stream) == cudaSuccess;
            for (int k = 0; ok && k < 3; k++)
                ok = launch_candidate(env, c, &a, w, x, y, ws, ws_bytes) == CUDNN_STATUS_SUCCESS;
            ok = ok && cudaEventRecord(e1, env->stream) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess &&
                 cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
            if (!ok) {
                (void)cudaStreamSynchronize(env->stream);
                (void)cudaGetLastError();
                continue;
            }
            a.ms = ms / 3.0f;
        }
        cand[n++] = a;
    }
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    return n;
}

static int by_candidate_ms(const void *a, const void *b)
{
    const candidate *x = a, *y = b;
    return (x->ms > y->ms) - (x->ms < y->ms);
}

/* Runs cuDNN's search (or heuristics) into cand (room for max legacy results plus the
 * engines' plans) and keeps, at the front, the candidates the math mode allows, in the
 * order of choice; returns their count, or -1 when a library call failed. The search
 * times every legacy candidate once (cuDNN's own search) and every engine once
 * (add_plans) on scratch buffers, with up to 256 MiB of workspace (less if the device
 * has less free); the leading ones of both are then retimed (retime). */
static int find_candidates(cuda_env *env, const layer *l, conv_cuda *c, const void *w, candidate *cand, int max)
{
    int n = 0;
    bool legacy = env->conv_api != CUDA_CONV_API_GRAPH && max > 0;
    cudnnConvolutionFwdAlgoPerf_t *fwd = legacy && !c->transposed ? calloc((size_t)max, sizeof *fwd) : NULL;
    cudnnConvolutionBwdDataAlgoPerf_t *bwd = legacy && c->transposed ? calloc((size_t)max, sizeof *bwd) : NULL;
    if (legacy && !fwd && !bwd)
        return -1;
    if (env->algo == CUDA_ALGO_HEURISTIC) {
        /* the graph API's first plan is cuDNN's choice; the legacy API's after it */
        n = add_plans(env, c, cand, 0, w, NULL, NULL, NULL, 0, false);
        int m = 0;
        bool ok = !legacy ||
                  (c->transposed ? CUDNN_OK(env, cudnnGetConvolutionBackwardDataAlgorithm_v7(
                                                     env->cudnn, c->w, c->x, c->conv, c->y, max, &m, bwd))
                                 : CUDNN_OK(env, cudnnGetConvolutionForwardAlgorithm_v7(env->cudnn, c->x, c->w, c->conv,
                                                                                        c->y, max, &m, fwd)));
        if (ok && fwd)
            TO_CANDIDATES(fwd, m, cand + n);
        else if (ok && bwd)
            TO_CANDIDATES(bwd, m, cand + n);
        if (ok) {
            n += legacy ? m : 0;
            log_candidates(env, l, c, cand, n, "heuristic");
            n = allowed(cand, n, env->tf32);
        }
        free(fwd), free(bwd);
        return ok ? n : -1;
    }
    size_t free_b = 0, total_b = 0, ws = (size_t)256 << 20;
    void *scratch_ws = NULL, *scratch_y = NULL, *scratch_x = NULL;
    if (CUDA_OK(env, cudaMemGetInfo(&free_b, &total_b)) && free_b / 4 < ws)
        ws = free_b / 4;
    size_t x_bytes = (size_t)shape_numel(&l->in) * sizeof(float);
    bool ok = CUDA_OK(env, cudaMalloc(&scratch_x, x_bytes)) &&
              CUDA_OK(env, cudaMalloc(&scratch_y, (size_t)shape_numel(&l->out) * sizeof(float)));
    /* a smaller workspace, or none, rather than no search at all */
    while (ok && ws && cudaMalloc(&scratch_ws, ws) != cudaSuccess) {
        (void)cudaGetLastError();
        ws /= 2;
        if (ws < ((size_t)1 << 20))
            ws = 0;
    }
    /* the input is only read: a constant byte pattern (0x3c3c3c3c is 0.0115f), never
     * zeros or uninitialised memory that could hold NaN */
    ok = ok && CUDA_OK(env, cudaMemset(scratch_x, 0x3c, x_bytes));
    int m = 0;
    if (ok && legacy && c->transposed)
        ok = CUDNN_OK(env, cudnnFindConvolutionBackwardDataAlgorithmEx(env->cudnn, c->w, w, c->x, scratch_x, c->conv,
                                                                       c->y, scratch_y, max, &m, bwd, scratch_ws, ws));
    else if (ok && legacy)
        ok = CUDNN_OK(env, cudnnFindConvolutionForwardAlgorithmEx(env->cudnn, c->x, scratch_x, c->w, w, c->conv, c->y,
                                                                  scratch_y, max, &m, fwd, scratch_ws, ws));
    if (ok && fwd)
        TO_CANDIDATES(fwd, m, cand);
    else if (ok && bwd)
        TO_CANDIDATES(bwd, m, cand);
    if (ok) {
        n = add_plans(env, c, cand, legacy ? m : 0, w, scratch_x, scratch_y, scratch_ws, ws, true);
        log_candidates(env, l, c, cand, n, "search");
        n = allowed(cand, n, env->tf32);
        /* cuDNN's order for its own, ours for the engines: one order by time */
        qsort(cand, (size_t)n, sizeof *cand, by_candidate_ms);
        /* what the search returned fits the workspace it was given */
        ok = retime(env, c, cand, n, w, scratch_x, scratch_y, scratch_ws, ws);
        if (ok)
            log_candidates(env, l, c, cand, n, "retimed, in the order of choice");
    }
    cudaFree(scratch_ws), cudaFree(scratch_y), cudaFree(scratch_x);
    free(fwd), free(bwd);
    return ok ? n : -1;
}

/* Allocates a workspace of ws bytes into c; false when it cannot be (out of memory: the
 * caller tries the next candidate). */
static bool take_workspace(conv_cuda *c, size_t ws)
{
    if (ws && cudaMalloc(&c->workspace, ws) != cudaSuccess) {
        (void)cudaGetLastError(); /* out of memory is not a failure of the layer yet */
        c->workspace = NULL;
        return false;
    }
    c->workspace_bytes = ws;
    return true;
}

/* Sets algorithm, math type and workspace on c; false when the workspace cannot be
 * allocated (out of memory: the caller tries the next candidate). */
static bool take(cuda_env *env, conv_cuda *c, int algo, cudnnMathType_t math)
{
    size_t ws = 0;
    if (!CUDNN_OK(env, cudnnSetConvolutionMathType(c->conv, math)))
        return false;
    if (c->transposed ? !CUDNN_OK(env, cudnnGetConvolutionBackwardDataWorkspaceSize(
                                           env->cudnn, c->w, c->x, c->conv, c->y, (cudnnConvolutionBwdDataAlgo_t)algo, &ws))
                      : !CUDNN_OK(env, cudnnGetConvolutionForwardWorkspaceSize(env->cudnn, c->x, c->w, c->conv, c->y,
                                                                               (cudnnConvolutionFwdAlgo_t)algo, &ws)))
        return false;
    if (!take_workspace(c, ws))
        return false;
    c->algo = algo;
    c->use_graph = false;
    return true;
}

/* Takes engine plan p (moved into c) with its workspace; false when the workspace
 * cannot be allocated (p is then left as it was). */
static bool take_plan(conv_cuda *c, graph_plan *p)
{
    if (!take_workspace(c, (size_t)p->workspace))
        return false;
    c->plan = *p;
    memset(p, 0, sizeof *p);
    c->use_graph = true;
    return true;
}

/* The weights' alignment the engines are built for: their address's, at most 16 bytes
 * (what PyTorch takes); the input and output are taken as 16 (cuda_conv_key). */
static int weights_alignment(const void *w)
{
    int a = cudnn_alignment((uintptr_t)w);
    return a > 16 ? 16 : a;
}

/* The graph of c's convolution, once; false with why in impl (not a failure of the
 * layer: the legacy API may still run it). */
static bool need_graph(cuda_env *env, const layer *l, conv_cuda *c, const void *w, char *why, size_t why_len)
{
    return c->graph.built || conv_graph_create(env, l, 16, weights_alignment(w), &c->graph, why, why_len);
}

/* The cached or given choice for key, set up on c: 1 taken, 0 none or no longer
 * applying (then counted stale), -1 failed (impl says why). */
static int take_cached(cuda_env *env, const layer *l, conv_cuda *c, const void *w, const cudnn_conv_key *key,
                       char *impl, size_t impl_len)
{
    const cuda_conv_choice *ch = cuda_conv_choice_find(env, key);
    if (!ch)
        return 0;
    char why[256] = "";
    if (ch->graph) {
        graph_plan p;
        cudnn_engine_tag tag = ch->tag;
        if (!need_graph(env, l, c, w, why, sizeof why) ||
            !conv_graph_plan_from_tag(env, &c->graph, &tag, &p, why, sizeof why)) {
            cuda_conv_choice_stale(env, key);
            return 0;
        }
        if (!take_plan(c, &p)) {
            conv_graph_plan_free(&p);
            snprintf(impl, impl_len, "out of device memory for the engine's workspace");
            return -1;
        }
        return 1;
    }
    int algo = ch->algo, math = ch->math;
    if (!take(env, c, algo, (cudnnMathType_t)math)) {
        if (env->failed) { /* the algorithm is no longer one cuDNN takes for this layer */
            cuda_env_clear(env);
            cuda_conv_choice_stale(env, key);
            return 0;
        }
        snprintf(impl, impl_len, "out of device memory for the %s workspace", algo_name(c->transposed, algo));
        return -1;
    }
    return 1;
}

bool cuda_conv_filter_desc(cuda_env *env, const layer *l, int64_t k, int64_t cg, cudnnDataType_t type,
                           cudnnFilterDescriptor_t *w)
{
    return CUDNN_OK(env, cudnnCreateFilterDescriptor(w)) &&
           CUDNN_OK(env, cudnnSetFilter4dDescriptor(*w, type, CUDNN_TENSOR_NCHW, (int)k, (int)cg, (int)l->p.kernel[0],
                                                    (int)l->p.kernel[1]));
}

bool cuda_conv_desc(cuda_env *env, const layer *l, cudnnConvolutionDescriptor_t *conv)
{
    const layer_params *p = &l->p;
    return CUDNN_OK(env, cudnnCreateConvolutionDescriptor(conv)) &&
           CUDNN_OK(env, cudnnSetConvolution2dDescriptor(*conv, (int)p->padding[0], (int)p->padding[1],
                                                         (int)p->stride[0], (int)p->stride[1], (int)p->dilation[0],
                                                         (int)p->dilation[1], CUDNN_CROSS_CORRELATION,
                                                         CUDNN_DATA_FLOAT)) &&
           CUDNN_OK(env, cudnnSetConvolutionGroupCount(*conv, (int)p->groups)) &&
           CUDNN_OK(env, cudnnSetConvolutionMathType(*conv, env->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
}

static bench_status conv_setup(void *ctx, const layer *l, const void *w_, void **state, char *impl,
                               size_t impl_len, int64_t *workspace_bytes)
{
    const void *w = w_;
    cuda_env *env = ctx;
    /* math beyond FMA: TF32 for tf32, tensor cores for the 16-bit types */
    env->tf32 = l->dtype != DTYPE_FP32;
    bool half = l->dtype == DTYPE_BF16 || l->dtype == DTYPE_FP16;
    cudnnDataType_t type = cuda_dnn_type(l->dtype);
    const char *math_label = l->dtype == DTYPE_FP32 ? "FP32 (FMA)" : l->dtype == DTYPE_TF32 ? "TF32" : dtype_name(l->dtype);
    const layer_params *p = &l->p;
    conv_cuda *c = calloc(1, sizeof *c);
    candidate *perf = NULL;
    if (!c)
        return BENCH_ERR_NOMEM;
    c->transposed = l->kind == LAYER_CONV_TRANSPOSE2D;
    if (c->transposed && (p->output_padding[0] >= p->stride[0] || p->output_padding[1] >= p->stride[1])) {
        /* torch allows output_padding below the dilation too; cuDNN's shapes do not */
        snprintf(impl, impl_len, "cuDNN needs output_padding below the stride");
        free(c);
        return BENCH_ERR_UNSUPPORTED;
    }
    /* the filter as cuDNN's forward convolution sees it: K output channels of C inputs
     * each; for a transposed one, that forward convolution runs from our output back to
     * our input */
    int64_t k = c->transposed ? l->in.d[1] : p->out_channels;
    int64_t cg = c->transposed ? p->out_channels / p->groups : l->in.d[1] / p->groups;
    c->weights = w;
    c->bias = p->bias ? (const char *)w + (size_t)(k * cg * p->kernel[0] * p->kernel[1]) * dtype_size(l->dtype) : NULL;
    shape_t bias_shape = {4, {1, p->out_channels, 1, 1}};
    if (!cuda_tensor_desc_typed(env, &c->x, &l->in, type, impl, impl_len) ||
        !cuda_tensor_desc_typed(env, &c->y, &l->out, type, impl, impl_len) ||
        !cuda_tensor_desc(env, &c->b, &bias_shape, impl, impl_len))
        goto fail;
    if (half && c->bias &&
        (!CUDA_OK(env, cudaMalloc((void **)&c->bias_f32, (size_t)p->out_channels * sizeof(float))) ||
         !CUDA_OK(env, cuda_convert_launch(env->stream, c->bias_f32, DTYPE_FP32, c->bias, l->dtype, p->out_channels)) ||
         !CUDA_OK(env, cudaStreamSynchronize(env->stream))))
        goto fail;
    if (!cuda_conv_filter_desc(env, l, k, cg, type, &c->w) || !cuda_conv_desc(env, l, &c->conv))
        goto fail;
    char why[256] = "", tag[CUDNN_ENGINE_TAG_LEN];
    if (env->engine_forced) { /* LAYERBENCH_CUDNN_ENGINE: this engine or nothing */
        graph_plan forced;
        cudnn_tag_format(&env->engine, tag, sizeof tag);
        if (!need_graph(env, l, c, w, why, sizeof why) ||
            !conv_graph_plan_from_tag(env, &c->graph, &env->engine, &forced, why, sizeof why)) {
            snprintf(impl, impl_len, "LAYERBENCH_CUDNN_ENGINE=%.60s does not build for this convolution: %.150s", tag,
                     why);
            goto fail;
        }
        if (!take_plan(c, &forced)) {
            conv_graph_plan_free(&forced);
            snprintf(impl, impl_len, "out of device memory for the engine's workspace");
            goto fail;
        }
    } else {
        cudnn_conv_key key;
        cuda_conv_key(l, weights_alignment(w), &key);
        int cached = take_cached(env, l, c, w, &key, impl, impl_len);
        if (cached < 0)
            goto fail;
        if (cached == 0) {
            /* the engines, where the graph API takes the layer */
            if (env->conv_api != CUDA_CONV_API_LEGACY) {
                if (need_graph(env, l, c, w, why, sizeof why))
                    c->n_plans = conv_graph_plans(env, l, &c->graph, &c->plans);
                else if (env->conv_api == CUDA_CONV_API_GRAPH) {
                    snprintf(impl, impl_len, "--conv-api graph: %.200s", why);
                    goto fail;
                }
            }
            int max = 0;
            if (env->conv_api != CUDA_CONV_API_GRAPH &&
                (c->transposed ? !CUDNN_OK(env, cudnnGetConvolutionBackwardDataAlgorithmMaxCount(env->cudnn, &max))
                               : !CUDNN_OK(env, cudnnGetConvolutionForwardAlgorithmMaxCount(env->cudnn, &max))))
                goto fail;
            perf = calloc((size_t)(max + c->n_plans > 0 ? max + c->n_plans : 1), sizeof *perf);
            int n = perf ? find_candidates(env, l, c, w, perf, max) : -1;
            if (n < 0)
                goto fail;
            if (n == 0) {
                snprintf(impl, impl_len, "no cuDNN %s in %s math",
                         env->conv_api == CUDA_CONV_API_GRAPH ? "engine" : "algorithm", math_label);
                goto fail;
            }
            int i = 0;
            while (i < n && !(perf[i].plan >= 0 ? take_plan(c, &c->plans[perf[i].plan])
                                                : take(env, c, perf[i].algo, perf[i].math)) &&
                   !env->failed)
                i++;
            if (i == n) {
                snprintf(impl, impl_len, "out of device memory for every candidate's workspace");
                goto fail;
            }
            if (env->failed)
                goto fail;
            cuda_conv_choice choice = {.key = key, .graph = c->use_graph, .tag = c->plan.tag, .algo = c->algo,
                                       .math = perf[i].math};
            cuda_conv_choice_add(env, &choice);
            conv_graph_plans_free(c->plans, c->n_plans, -1);
            c->plans = NULL, c->n_plans = 0;
        }
    }
    if (c->use_graph) {
        char name[CUDNN_ENGINE_TAG_LEN + 160];
        conv_graph_plan_name(&c->plan, name, sizeof name);
        snprintf(impl, impl_len, "%s%s", name, env->engine_forced ? " (LAYERBENCH_CUDNN_ENGINE)" : "");
        /* the fallback for a less aligned run (see the top) needs no workspace, and FMA math in fp32 */
        if (!CUDNN_OK(env, cudnnSetConvolutionMathType(c->conv, l->dtype == DTYPE_FP32 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH)))
            goto fail;
    } else {
        cudnnMathType_t math = CUDNN_FMA_MATH;
        if (!CUDNN_OK(env, cudnnGetConvolutionMathType(c->conv, &math)))
            goto fail;
        snprintf(impl, impl_len, "%s%s%s%s", algo_name(c->transposed, c->algo),
                 env->tf32 && math != CUDNN_FMA_MATH ? " (" : "", env->tf32 && math != CUDNN_FMA_MATH ? math_name(math) : "",
                 env->tf32 && math != CUDNN_FMA_MATH ? ")" : "");
    }
    if (env->algo == CUDA_ALGO_HEURISTIC && !env->engine_forced)
        snprintf(impl + strlen(impl), impl_len - strlen(impl), " (heuristic)");
    *workspace_bytes = (int64_t)c->workspace_bytes;
    *state = c;
    free(perf);
    return BENCH_OK;
fail:
    free(perf);
    conv_free(env, c);
    return env->failed ? BENCH_ERR_BACKEND : BENCH_ERR_UNSUPPORTED;
}

static void conv_run(void *ctx, const layer *l, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)w_;
    const void *in = ins[0];
    conv_cuda *c = state;
    const float one = 1.0f, zero = 0.0f;
    bool legacy = !c->use_graph;
    int algo = c->algo;
    if (c->use_graph && (cudnn_alignment((uintptr_t)in) < c->graph.align[0] ||
                         cudnn_alignment((uintptr_t)out) < c->graph.align[2])) {
        if (!c->misaligned_said)
            bench_diag("bench: cuda: %s: its input or output is less than %d-byte aligned, which its engine was built "
                       "for: it ran the legacy API's %s instead\n",
                       l->name, c->graph.align[0], c->transposed ? "BWD_DATA_ALGO_0" : "IMPLICIT_GEMM");
        c->misaligned_said = true;
        legacy = true;
        algo = c->transposed ? CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 : CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    }
    if (!legacy)
        CUDNN_OK(env, conv_graph_run(env, &c->graph, &c->plan, in, c->weights, out, c->workspace));
    else if (c->transposed)
        CUDNN_OK(env, cudnnConvolutionBackwardData(env->cudnn, &one, c->w, c->weights, c->x, in, c->conv,
                                                   (cudnnConvolutionBwdDataAlgo_t)algo, c->workspace,
                                                   c->workspace_bytes, &zero, c->y, out));
    else
        CUDNN_OK(env, cudnnConvolutionForward(env->cudnn, &one, c->x, in, c->w, c->weights, c->conv,
                                              (cudnnConvolutionFwdAlgo_t)algo, c->workspace, c->workspace_bytes,
                                              &zero, c->y, out));
    if (c->bias_f32)
        CUDA_OK(env, cuda_bias_channels_launch(env->stream, out, (int)l->dtype, c->bias_f32, l->out.d[0], l->out.d[1],
                                               l->out.d[2] * l->out.d[3]));
    else if (c->bias)
        CUDNN_OK(env, cudnnAddTensor(env->cudnn, &one, c->b, c->bias, &one, c->y, out));
}

const backend_kernel cuda_conv2d_kernel = {.setup = conv_setup, .run = conv_run, .free = conv_free,
                                           .tolerance = cuda_gemm_tolerance};
const backend_kernel cuda_conv_transpose2d_kernel = {.setup = conv_setup, .run = conv_run, .free = conv_free,
                                                     .tolerance = cuda_gemm_tolerance};
