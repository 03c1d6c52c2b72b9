/* The cuda backend's plans (cuda_plan.h). */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "cuda_plan.h"

int64_t cuda_bwd_offset(const layer *l, int k)
{
    int64_t at = 0;
    for (int i = 0; i < k && i < l->n_inputs; i++)
        at += shape_numel(&l->ins[i]);
    return at;
}

/* Row-major matrices read column-major: a row-major [r, c] array is a column-major
 * c x r one with leading dimension c, so each product below is written transposed. */
int cuda_linear_bwd_plan(const layer *l, cuda_gemm_call calls[3], char *why, size_t why_len)
{
    int64_t f = l->in.d[l->in.rank - 1], rows = shape_numel(&l->in) / f, o = l->p.out_features;
    if (f > INT_MAX || rows > INT_MAX || o > INT_MAX) {
        snprintf(why, why_len, "dimensions beyond cuBLAS's int");
        return -1;
    }
    int n = 0;
    if (!l->no_input_grad) /* dX^T [F x rows] = W^T [F x O] dY^T [O x rows] */
        calls[n++] = (cuda_gemm_call){false, false, f, rows, o, CUDA_PLAN_W, CUDA_PLAN_DY, CUDA_PLAN_DX, f, o, f,
                                      "backward data"};
    if (!l->frozen) { /* dW^T [F x O] = X^T [F x rows] dY [rows x O] */
        calls[n++] = (cuda_gemm_call){false, true, f, o, rows, CUDA_PLAN_X, CUDA_PLAN_DY, CUDA_PLAN_DW, f, o, f,
                                      "backward weights"};
        if (l->p.bias) /* db [O x 1] = dY^T [O x rows] 1 [rows x 1] */
            calls[n++] = (cuda_gemm_call){false, false, o, 1, rows, CUDA_PLAN_DY, CUDA_PLAN_ONES, CUDA_PLAN_DB, o,
                                          rows, o, "backward weights"};
    }
    return n;
}

lb_dims cuda_lb_dims(const shape_t *s)
{
    lb_dims d;
    memset(&d, 0, sizeof d);
    d.rank = s->rank;
    for (int i = 0; i < s->rank; i++)
        d.d[i] = s->d[i];
    return d;
}

bool cuda_move_plan(const layer *l, lb_move *m, char *why, size_t why_len)
{
    memset(m, 0, sizeof *m);
    if (l->in.rank > LB_MAX_RANK || l->out.rank > LB_MAX_RANK) {
        snprintf(why, why_len, "rank above the move kernel's %d", LB_MAX_RANK);
        return false;
    }
    switch (l->kind) {
    case LAYER_ROLL:
        m->kind = LB_MOVE_ROLL, m->in = cuda_lb_dims(&l->in);
        for (int64_t k = 0; k < l->p.roll_dims[0]; k++) /* dims made positive, shifts [0, size) by its infer */
            m->shift[l->p.roll_dims[1 + k]] = l->p.roll_shifts[1 + k];
        return true;
    case LAYER_PATCH_MERGE:
        m->kind = LB_MOVE_PATCH_MERGE, m->in = cuda_lb_dims(&l->in);
        return true;
    case LAYER_WINDOW_PARTITION:
    case LAYER_WINDOW_MERGE:
        m->kind = l->kind == LAYER_WINDOW_MERGE ? LB_MOVE_WINDOW_MERGE : LB_MOVE_WINDOW_PARTITION;
        m->in = cuda_lb_dims(l->kind == LAYER_WINDOW_MERGE ? &l->out : &l->in); /* the map [N, C, H, W] */
        m->w0 = l->p.window_size[0], m->w1 = l->p.window_size[1];
        return true;
    default:
        snprintf(why, why_len, "%s is not a move", layer_kind_name(l->kind));
        return false;
    }
}
