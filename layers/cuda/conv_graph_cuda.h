/* One convolution through cuDNN's graph (backend) API (conv_graph_cuda.c): its
 * operation graph, the engine configs the heuristics give in modes INSTANT, A, B and
 * FALLBACK built into plans, and a plan's execution. conv2d_cuda.c times these plans
 * beside the legacy API's algorithms. Failures here never set the env's failure flag:
 * an engine that does not build is left out, and why is said (LAYERBENCH_CUDNN_LOG). */
#ifndef LAYERBENCH_CONV_GRAPH_CUDA_H
#define LAYERBENCH_CONV_GRAPH_CUDA_H

#include "cuda_env.h"
#include "cudnn_engine.h"

typedef struct conv_graph {
    bool built;
    bool transposed;                    /* backward data: our input is dy, our output dx */
    cudnnBackendDescriptor_t t[3];      /* our input, the weights, our output */
    cudnnBackendDescriptor_t conv, op, graph;
    int align[3];                       /* bytes the plans were built for, same order */
    cudnn_math math;
    /* the variant pack of the last pointers run, rebuilt when they change */
    cudnnBackendDescriptor_t pack;
    const void *pack_ptr[4];            /* input, weights, output, workspace */
} conv_graph;

typedef struct graph_plan {
    cudnnBackendDescriptor_t plan;      /* finalized */
    cudnn_engine_tag tag;
    unsigned numerical, behavior;       /* cudnn_engine.h's bits */
    int64_t workspace;                  /* bytes */
} graph_plan;

/* Builds the operation graph of layer l's convolution (NCHW tensors of its dtype: fp32
 * (tf32's too), bf16 or fp16, float compute; the math mode from the dtype), its input and output taken as align_io-byte aligned and its
 * weights as align_w (cudnn_alignment of the weights' address, at most 16 as PyTorch
 * takes it). False with why when cuDNN refuses it. */
bool conv_graph_create(cuda_env *env, const layer *l, int align_io, int align_w, conv_graph *g, char *why,
                       size_t why_len);
void conv_graph_destroy(conv_graph *g);

/* The engine configs of the heuristics' modes (INSTANT first: in --algo heuristic the
 * first plan is cuDNN's choice), built into plans, duplicates and those the math mode
 * refuses left out; *plans is malloc'd (conv_graph_plans_free). Returns the count, 0
 * when none builds. Under LAYERBENCH_CUDNN_LOG each config is listed with why it was
 * kept or not. */
int conv_graph_plans(cuda_env *env, const layer *l, conv_graph *g, graph_plan **plans);
void conv_graph_plans_free(graph_plan *plans, int n, int keep);

/* The plan of one engine tag (LAYERBENCH_CUDNN_ENGINE, a cached choice); false with why. */
bool conv_graph_plan_from_tag(cuda_env *env, conv_graph *g, const cudnn_engine_tag *tag, graph_plan *p, char *why,
                              size_t why_len);
void conv_graph_plan_free(graph_plan *p);

/* One run of plan p on these tensors, enqueued on the env's stream; cuDNN's status (no
 * failure recorded). The pointers' alignment must be at least the graph's. */
cudnnStatus_t conv_graph_run(cuda_env *env, conv_graph *g, const graph_plan *p, const void *in, const void *w,
                             void *out, void *workspace);

/* "eng28_k2=3_k17=4 (WINOGRAD_TILE_4x4 TENSOR_CORE)": the tag and its notes. */
void conv_graph_plan_name(const graph_plan *p, char *buf, size_t len);

#endif
