/* The cuda backend's plans, as plain C with no CUDA header, so that they build and are
 * unit-tested on any machine (tests/test_cuda_plan.c runs them on the host against the
 * plain-C references):
 *   - a moving kind's lb_move (index_cuda_math.h), the kernel's parameters, from its layer;
 *   - where a backward run writes each gradient in its one output buffer (backend.h:
 *     the inputs' one after another, then the weights');
 *   - linear's backward as the column-major GEMMs cuBLAS runs (backward_cuda.c): the
 *     input's gradient dX = dY W, the weights' dW = dY^T X, the bias's db = dY^T 1. */
#ifndef LAYERBENCH_CUDA_PLAN_H
#define LAYERBENCH_CUDA_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "index_cuda_math.h"
#include "layer.h"

/* a shape as index_cuda_math.h's kernels take it (its rank at most LB_MAX_RANK) */
lb_dims cuda_lb_dims(const shape_t *s);

/* The move kernel's parameters for roll, patch_merge, window_partition or window_merge;
 * false (why says so) for another kind or a rank past LB_MAX_RANK. */
bool cuda_move_plan(const layer *l, lb_move *m, char *why, size_t why_len);

/* Offsets, in elements, of input k's gradient (k < l->n_inputs) and of the weights'
 * (k == l->n_inputs) in a backward run's output. */
int64_t cuda_bwd_offset(const layer *l, int k);

/* The operands of linear's backward: the forward's input X [rows, F] and weights W
 * [O, F] (the bias after them), the output's gradient dY [rows, O], the gradients
 * written (dX [rows, F], dW [O, F], db [O]) and a vector of rows ones. */
typedef enum cuda_plan_operand {
    CUDA_PLAN_X, CUDA_PLAN_W, CUDA_PLAN_DY, CUDA_PLAN_DX, CUDA_PLAN_DW, CUDA_PLAN_DB, CUDA_PLAN_ONES,
    CUDA_PLAN_OPERANDS
} cuda_plan_operand;

/* One column-major GEMM, C[m x n] = op(A)[m x k] op(B)[k x n] (beta 0), as
 * cublasGemmEx takes it: op(A) = A^T where ta (A stored k x m, leading dimension lda),
 * else A (m x k); likewise B. part: "backward data" or "backward weights". */
typedef struct cuda_gemm_call {
    bool ta, tb;
    int64_t m, n, k;
    cuda_plan_operand a, b, c;
    int64_t lda, ldb, ldc;
    const char *part;
} cuda_gemm_call;

/* Linear l's backward (pass PASS_BACKWARD) as at most three GEMMs into calls, in the
 * order they run: dX unless l->no_input_grad, then dW and (with a bias) db unless
 * l->frozen. Returns how many; -1 with why when a dimension exceeds cuBLAS's int. */
int cuda_linear_bwd_plan(const layer *l, cuda_gemm_call calls[3], char *why, size_t why_len);

#endif
