/* A convolution's columns on the CPU (cpu_kernels.h), shared by the fp32 backward
 * (backward_cpu.c) and the bf16 one (bf16_cpu.c): im2col of a group's input and its
 * reverse, col2im, which adds the columns' gradients back. Calls nothing else in the
 * backend. */
#include <string.h>

#include "cpu_kernels.h"

/* Output columns [*x0, *x1) of a row whose tap j reads inside the input's wd columns */
void cpu_tap_span(const layer *l, int64_t j, int64_t *x0, int64_t *x1)
{
    const layer_params *p = &l->p;
    int64_t off = j * p->dilation[1] - p->padding[1], ow = l->out.d[3], wd = l->in.d[3];
    int64_t lo = off >= 0 ? 0 : (-off + p->stride[1] - 1) / p->stride[1]; /* first xo with xo*s + off >= 0 */
    int64_t hi = wd - 1 - off < 0 ? 0 : (wd - 1 - off) / p->stride[1] + 1; /* past the last with xo*s + off < wd */
    *x0 = lo < ow ? lo : ow, *x1 = hi < ow ? hi : ow;
    if (*x1 < *x0)
        *x1 = *x0;
}

/* The columns of input channel ci of the group's input x [cg, H, W]: rows (ci, i, j) of
 * col, over the output's pixels; back: those rows' gradients added into x instead. A
 * channel's rows touch its plane only, so channels go to the threads. */
static void col_channel(const layer *l, float *x, float *col, int64_t ci, bool back)
{
    const layer_params *p = &l->p;
    int64_t h = l->in.d[2], wd = l->in.d[3], oh = l->out.d[2], ow = l->out.d[3], kh = p->kernel[0], kw = p->kernel[1];
    float *src = x + ci * h * wd;
    for (int64_t i = 0; i < kh; i++)
        for (int64_t j = 0; j < kw; j++) {
            float *dst = col + ((ci * kh + i) * kw + j) * oh * ow;
            int64_t x0, x1, sx = p->stride[1], off = j * p->dilation[1] - p->padding[1];
            cpu_tap_span(l, j, &x0, &x1);
            for (int64_t y = 0; y < oh; y++) {
                int64_t iy = y * p->stride[0] - p->padding[0] + i * p->dilation[0];
                float *d = dst + y * ow, *row = src + iy * wd + off;
                if (iy < 0 || iy >= h) {
                    if (!back)
                        memset(d, 0, (size_t)ow * sizeof *d);
                    continue;
                }
                if (back) {
                    for (int64_t xo = x0; xo < x1; xo++)
                        row[xo * sx] += d[xo];
                    continue;
                }
                for (int64_t xo = 0; xo < x0; xo++)
                    d[xo] = 0.0f;
                for (int64_t xo = x0; xo < x1; xo++)
                    d[xo] = row[xo * sx];
                for (int64_t xo = x1; xo < ow; xo++)
                    d[xo] = 0.0f;
            }
        }
}

void cpu_col_move(const layer *l, float *x, float *col, int64_t cg, bool back)
{
    int64_t work = cg * l->p.kernel[0] * l->p.kernel[1] * l->out.d[2] * l->out.d[3];
    CPU_OMP_IF(work > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t ci = 0; ci < cg; ci++)
            col_channel(l, x, col, ci, back););
}
