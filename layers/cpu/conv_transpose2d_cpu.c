/* conv_transpose2d on the CPU: per sample and group, one cblas_sgemm gives every input
 * pixel's contribution to every kernel tap of every output channel (col = W^T x X,
 * [OC/g x KH x KW] x [H x W]), and col2im adds them into the output, which starts at
 * the bias. col2im runs one output channel per thread: their planes do not overlap. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

typedef struct convt_state {
    float *col;
} convt_state;

static void convt_free(void *env, void *state)
{
    (void)env;
    convt_state *s = state;
    if (s)
        free(s->col);
    free(s);
}

static bench_status convt_setup(void *env, const layer *l, const void *w, void **state, char *impl, size_t impl_len,
                                int64_t *workspace_bytes)
{
    cpu_choices *search = cpu_env_choices(env);
    (void)w, (void)search;
    const layer_params *p = &l->p;
    int64_t rows = (p->out_channels / p->groups) * p->kernel[0] * p->kernel[1], hw = l->in.d[2] * l->in.d[3];
    convt_state *s = calloc(1, sizeof *s);
    if (!s || !(s->col = bench_alloc_floats(rows * hw))) {
        convt_free(NULL, s);
        return BENCH_ERR_NOMEM;
    }
    *workspace_bytes = 4 * rows * hw;
    snprintf(impl, impl_len, "sgemm+col2im");
    *state = s;
    return BENCH_OK;
}

static void col2im_add(const layer *l, const float *col, float *out_group)
{
    const layer_params *p = &l->p;
    int64_t h = l->in.d[2], w = l->in.d[3], oh = l->out.d[2], ow = l->out.d[3];
    int64_t ocg = l->out.d[1] / p->groups, kh = p->kernel[0], kw = p->kernel[1];
    int64_t sh = p->stride[0], sw = p->stride[1], ph = p->padding[0], pw = p->padding[1];
    int64_t dh = p->dilation[0], dw = p->dilation[1];
    CPU_OMP_IF(ocg * kh * kw * h * w > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t o = 0; o < ocg; o++) {
            float *dst = out_group + o * oh * ow;
            for (int64_t i = 0; i < kh; i++)
                for (int64_t j = 0; j < kw; j++) {
                    const float *src = col + ((o * kh + i) * kw + j) * h * w;
                    for (int64_t y = 0; y < h; y++) {
                        int64_t oy = y * sh - ph + i * dh;
                        if (oy < 0 || oy >= oh)
                            continue;
                        for (int64_t x = 0; x < w; x++) {
                            int64_t ox = x * sw - pw + j * dw;
                            if (ox >= 0 && ox < ow)
                                dst[oy * ow + ox] += src[y * w + x];
                        }
                    }
                }
        });
}

static void convt_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w_, void *out_)
{
    const float *w = w_;
    float *out = out_;
    const float *const *ins = (const float *const *)ins_;
    (void)env;
    const convt_state *s = state;
    const layer_params *p = &l->p;
    int64_t n = l->in.d[0], c = l->in.d[1], hw = l->in.d[2] * l->in.d[3];
    int64_t oc = l->out.d[1], ohw = l->out.d[2] * l->out.d[3], g = p->groups, cg = c / g, ocg = oc / g;
    int64_t rows = ocg * p->kernel[0] * p->kernel[1];
    const float *bias = p->bias ? w + c * rows : NULL;
    for (int64_t b = 0; b < n; b++) {
        float *ob = out + b * oc * ohw;
        CPU_OMP_IF(oc * ohw > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
            for (int64_t o = 0; o < oc; o++)
                for (int64_t i = 0; i < ohw; i++)
                    ob[o * ohw + i] = bias ? bias[o] : 0.0f;);
        for (int64_t gi = 0; gi < g; gi++) {
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)rows, (blasint)hw, (blasint)cg, 1.0f,
                        w + gi * cg * rows, (blasint)rows, ins[0] + (b * c + gi * cg) * hw, (blasint)hw, 0.0f, s->col,
                        (blasint)hw);
            col2im_add(l, s->col, ob + gi * ocg * ohw);
        }
    }
}

const backend_kernel cpu_conv_transpose2d_kernel = {.setup = convt_setup, .run = convt_run, .free = convt_free};
