/* Where each output element of the moving kinds comes from, as functions both nvcc
 * (cuda_kernels.cu, on the device) and the C compiler (tests/test_cuda_plan.c, on the
 * host, against the plain-C references) compile: numpy broadcasting (add, mul), roll,
 * patch_merge, window_partition and window_merge (layers/window.c and layers/merge.c say
 * what each computes). Plain numbers only. */
#ifndef INDEX_CUDA_MATH_H
#define INDEX_CUDA_MATH_H

#include <stdint.h>

#include "lb_hd.h"

#define LB_MAX_RANK 8

/* a shape as the kernels take it, by value */
typedef struct lb_dims {
    int rank;
    int64_t d[LB_MAX_RANK];
} lb_dims;

/* Output element o of out read from an input of shape s broadcast to it (a dim of 1
 * against any): the input's element */
LB_HD int64_t lb_broadcast_index(const lb_dims *s, const lb_dims *out, int64_t o)
{
    int64_t idx = 0, stride = 1;
    for (int i = out->rank - 1; i >= 0; i--) {
        int64_t coord = o % out->d[i];
        o /= out->d[i];
        if (s->d[i] != 1)
            idx += coord * stride;
        stride *= s->d[i];
    }
    return idx;
}

/* The moves: which kind, the input's shape, and its parameters */
enum { LB_MOVE_ROLL, LB_MOVE_PATCH_MERGE, LB_MOVE_WINDOW_PARTITION, LB_MOVE_WINDOW_MERGE };
typedef struct lb_move {
    int kind;
    lb_dims in;              /* the input's shape (window_merge: the output map's, [N, C, H, W]) */
    int64_t shift[LB_MAX_RANK]; /* roll: each dim's shift, in [0, size) (0: none) */
    int64_t w0, w1;          /* the windows' size */
} lb_move;

/* The input element output element o copies, or -1 for a zero (patch_merge's padding).
 * roll: out[j] = in[(j - shift) mod size] along each dim. patch_merge: [N, H, W, C] to
 * [N, ceil(H/2), ceil(W/2), 4C], the 2 x 2 neighbours (0,0), (1,0), (0,1), (1,1) side by
 * side. window_partition: [N, C, H, W] to [N, G, w0 w1, C]; window_merge: back. */
LB_HD int64_t lb_move_source(const lb_move *m, int64_t o)
{
    const int64_t *d = m->in.d;
    if (m->kind == LB_MOVE_ROLL) {
        int64_t rest = o, src = 0, stride = 1;
        for (int k = m->in.rank - 1; k >= 0; k--) {
            int64_t c = rest % d[k];
            rest /= d[k];
            src += ((c - m->shift[k] + d[k]) % d[k]) * stride;
            stride *= d[k];
        }
        return src;
    }
    if (m->kind == LB_MOVE_PATCH_MERGE) {
        int64_t h = d[1], w = d[2], c = d[3], ho = (h + 1) / 2, wo = (w + 1) / 2;
        int64_t k = o % c, q = (o / c) % 4, j = (o / (4 * c)) % wo, i = (o / (4 * c * wo)) % ho,
                b = o / (4 * c * wo * ho);
        int64_t y = 2 * i + (q & 1), x = 2 * j + (q >> 1);
        return y < h && x < w ? ((b * h + y) * w + x) * c + k : -1;
    }
    /* the windows: map [N, C, H, W] (the input of a partition, the output of a merge) */
    int64_t ch = d[1], hh = d[2], ww = d[3], across = ww / m->w1, p = m->w0 * m->w1, groups = (hh / m->w0) * across;
    int64_t b, c, y, x;
    if (m->kind == LB_MOVE_WINDOW_MERGE) { /* o in the map: its place in the windows */
        x = o % ww, y = (o / ww) % hh, c = (o / (ww * hh)) % ch, b = o / (ww * hh * ch);
        int64_t g = (y / m->w0) * across + x / m->w1, k = (y % m->w0) * m->w1 + x % m->w1;
        return ((b * groups + g) * p + k) * ch + c;
    }
    c = o % ch;
    int64_t k = (o / ch) % p, g = (o / (ch * p)) % groups;
    b = o / (ch * p * groups);
    y = (g / across) * m->w0 + k / m->w1, x = (g % across) * m->w1 + k % m->w1;
    return ((b * ch + c) * hh + y) * ww + x;
}

#endif
