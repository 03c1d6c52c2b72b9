/* upsample on the CPU: the source rows and columns (and bilinear weights) are worked
 * out once at setup, as torch computes them (layer.h); run only gathers. */
#include <stdlib.h>

#include "cpu_kernels.h"

typedef struct upsample_state {
    int64_t *y0, *y1, *x0, *x1;   /* source rows and columns per output row and column */
    float *ly, *lx;               /* bilinear: the weight of y1, x1 */
} upsample_state;

static void upsample_free(void *env, void *state)
{
    (void)env;
    upsample_state *s = state;
    if (s)
        free(s->y0), free(s->y1), free(s->x0), free(s->x1), free(s->ly), free(s->lx);
    free(s);
}

static bench_status upsample_setup(void *env, const layer *l, const void *w, void **state, char *impl,
                                   size_t impl_len, int64_t *ws)
{
    cpu_choices *search = cpu_env_choices(env);
    (void)w, (void)search;
    int64_t oh = l->out.d[2], ow = l->out.d[3];
    upsample_state *s = calloc(1, sizeof *s);
    if (!s)
        return BENCH_ERR_NOMEM;
    s->y0 = malloc((size_t)oh * sizeof *s->y0), s->y1 = malloc((size_t)oh * sizeof *s->y1);
    s->x0 = malloc((size_t)ow * sizeof *s->x0), s->x1 = malloc((size_t)ow * sizeof *s->x1);
    s->ly = malloc((size_t)oh * sizeof *s->ly), s->lx = malloc((size_t)ow * sizeof *s->lx);
    if (!s->y0 || !s->y1 || !s->x0 || !s->x1 || !s->ly || !s->lx) {
        upsample_free(NULL, s);
        return BENCH_ERR_NOMEM;
    }
    for (int a = 0; a < 2; a++) {
        int64_t n = a ? ow : oh, *i0 = a ? s->x0 : s->y0, *i1 = a ? s->x1 : s->y1;
        float *lw = a ? s->lx : s->ly;
        for (int64_t d = 0; d < n; d++) {
            double w1 = 0;
            if (l->p.mode == UPSAMPLE_NEAREST)
                i0[d] = i1[d] = layer_upsample_nearest(l, a, d);
            else
                layer_upsample_linear(l, a, d, &i0[d], &i1[d], &w1);
            lw[d] = (float)w1;
        }
    }
    *ws = (int64_t)((2 * sizeof(int64_t) + sizeof(float)) * (size_t)(oh + ow));
    snprintf(impl, impl_len, "%s", l->p.mode == UPSAMPLE_NEAREST ? "direct nearest" : "direct bilinear");
    *state = s;
    return BENCH_OK;
}

static void upsample_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w_, void *out_)
{
    const float *w = w_;
    float *out = out_;
    const float *const *ins = (const float *const *)ins_;
    (void)env;
    const upsample_state *s = state;
    (void)w;
    int64_t planes = l->in.d[0] * l->in.d[1], h = l->in.d[2], wd = l->in.d[3], oh = l->out.d[2], ow = l->out.d[3];
    bool nearest = l->p.mode == UPSAMPLE_NEAREST;
    CPU_OMP_IF(planes * oh * ow > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t pl = 0; pl < planes; pl++) {
            const float *src = ins[0] + pl * h * wd;
            float *dst = out + pl * oh * ow;
            for (int64_t y = 0; y < oh; y++) {
                const float *r0 = src + s->y0[y] * wd, *r1 = src + s->y1[y] * wd;
                float ly = s->ly[y];
                if (nearest) {
                    for (int64_t x = 0; x < ow; x++)
                        dst[y * ow + x] = r0[s->x0[x]];
                    continue;
                }
                for (int64_t x = 0; x < ow; x++) {
                    float lx = s->lx[x];
                    float top = r0[s->x0[x]] + lx * (r0[s->x1[x]] - r0[s->x0[x]]);
                    float bot = r1[s->x0[x]] + lx * (r1[s->x1[x]] - r1[s->x0[x]]);
                    dst[y * ow + x] = top + ly * (bot - top);
                }
            }
        });
}

const backend_kernel cpu_upsample_kernel = {.setup = upsample_setup, .run = upsample_run, .free = upsample_free};
