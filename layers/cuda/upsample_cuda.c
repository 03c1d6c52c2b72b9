/* upsample on the GPU: cuDNN has no resize, so our kernel (cuda_kernels.cu) gathers from
 * source rows and columns (and bilinear weights) worked out on the host at setup, as
 * torch computes them (layers/upsample.c), and uploaded once. */
#include <stdlib.h>

#include "cuda_env.h"

typedef struct upsample_cuda {
    int64_t planes, h, w, oh, ow;
    int bilinear;
    void *tables;                          /* device: y0, y1 [oh], x0, x1 [ow], ly [oh], lx [ow] */
    int64_t *y0, *y1, *x0, *x1;
    float *ly, *lx;
} upsample_cuda;

static void upsample_free(void *ctx, void *state)
{
    cuda_env *env = ctx;
    upsample_cuda *u = state;
    if (u && u->tables)
        CUDA_OK(env, cudaFree(u->tables));
    free(u);
}

static bench_status upsample_setup(void *ctx, const layer *l, const void *w, void **state, char *impl,
                                   size_t len, int64_t *ws)
{
    cuda_env *env = ctx;
    (void)w;
    upsample_cuda *u = calloc(1, sizeof *u);
    if (!u)
        return BENCH_ERR_NOMEM;
    u->planes = l->in.d[0] * l->in.d[1], u->h = l->in.d[2], u->w = l->in.d[3];
    u->oh = l->out.d[2], u->ow = l->out.d[3];
    u->bilinear = l->p.mode == UPSAMPLE_BILINEAR;
    size_t ints = (size_t)(2 * u->oh + 2 * u->ow), floats = (size_t)(u->oh + u->ow);
    size_t bytes = ints * sizeof(int64_t) + floats * sizeof(float);
    char *host = malloc(bytes);
    if (!host) {
        free(u);
        return BENCH_ERR_NOMEM;
    }
    int64_t *hy0 = (int64_t *)host, *hy1 = hy0 + u->oh, *hx0 = hy1 + u->oh, *hx1 = hx0 + u->ow;
    float *hly = (float *)(hx1 + u->ow), *hlx = hly + u->oh;
    for (int a = 0; a < 2; a++) {
        int64_t n = a ? u->ow : u->oh, *i0 = a ? hx0 : hy0, *i1 = a ? hx1 : hy1;
        float *lw = a ? hlx : hly;
        for (int64_t d = 0; d < n; d++) {
            double w1 = 0;
            if (u->bilinear)
                layer_upsample_linear(l, a, d, &i0[d], &i1[d], &w1);
            else
                i0[d] = i1[d] = layer_upsample_nearest(l, a, d);
            lw[d] = (float)w1;
        }
    }
    bool ok = CUDA_OK(env, cudaMalloc(&u->tables, bytes)) &&
              CUDA_OK(env, cudaMemcpy(u->tables, host, bytes, cudaMemcpyHostToDevice));
    free(host);
    if (!ok) {
        upsample_free(env, u);
        return BENCH_ERR_BACKEND;
    }
    u->y0 = u->tables, u->y1 = u->y0 + u->oh, u->x0 = u->y1 + u->oh, u->x1 = u->x0 + u->ow;
    u->ly = (float *)(u->x1 + u->ow), u->lx = u->ly + u->oh;
    *ws = (int64_t)bytes;
    snprintf(impl, len, "kernel (layerbench), %s", u->bilinear ? "bilinear" : "nearest");
    *state = u;
    return BENCH_OK;
}

static void upsample_run(void *ctx, const layer *l_, void *state, const void *const *ins, const void *w_, void *out)
{
    cuda_env *env = ctx;
    (void)l_, (void)w_;
    upsample_cuda *u = state;
    CUDA_OK(env, cuda_upsample_launch(env->stream, ins[0], out, u->planes, u->h, u->w, u->oh, u->ow, u->y0, u->y1,
                                      u->x0, u->x1, u->ly, u->lx, u->bilinear));
}

const backend_kernel cuda_upsample_kernel = {.setup = upsample_setup, .run = upsample_run, .free = upsample_free,
                                             .tolerance = cuda_float_tolerance};
