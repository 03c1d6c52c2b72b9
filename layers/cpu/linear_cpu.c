/* linear on the CPU (and matmul of two activations, at the end): cblas_sgemv for one row; for a few rows (a small batch) our
 * register-tiled kernel (pgemm_cpu.c) on weights packed once at setup; cblas_sgemm for
 * more rows (a large batch, or the tokens of [N, S, F]).
 *
 * A small batch is what OpenBLAS does worst: with 8 rows, 1000 outputs and 512
 * features (ResNet's fc at batch 8) it packs the 2 MB of weights again on every call
 * and took 124-149 us on the 2-core Zen 5 VM, where oneDNN takes 27-29 us. Packed at
 * setup into panels of the kernel's nr outputs, feature-major, the weights stream
 * through once per mr rows, each panel's tile summed in registers. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

/* Rows up to which the packed kernel runs: each further group of mr rows reads the
 * weights again, which OpenBLAS's blocking avoids. */
#define LINEAR_TILED_MAX_TILES 4
/* The packed path's k block: an nr-wide panel of 256 features (32 KB at nr 32) stays
 * in L1 for the row tiles after the first. */
#define LINEAR_KC 256

typedef struct linear_state {
    const cpu_pgemm *g; /* NULL: OpenBLAS */
    float *wp;          /* [panel][F][nr]: output features ip nr .. ip nr + nr - 1, zero past the last */
    float *a;           /* the rows, packed per run: [row tile][F][mr] */
} linear_state;

static void linear_free(void *env, void *state)
{
    (void)env;
    linear_state *s = state;
    if (s)
        free(s->wp), free(s->a);
    free(s);
}

static bench_status linear_setup(void *env, const layer *l, const void *w_, void **state, char *impl,
                                 size_t impl_len, int64_t *workspace_bytes)
{
    const float *w = w_;
    cpu_choices *search = cpu_env_choices(env);
    (void)search;
    int64_t f = l->in.d[l->in.rank - 1], n = shape_numel(&l->in) / f, o = l->p.out_features;
    linear_state *s = calloc(1, sizeof *s);
    if (!s)
        return BENCH_ERR_NOMEM;
    const cpu_pgemm *g = cpu_pgemm_get();
    if (n > 1 && n <= LINEAR_TILED_MAX_TILES * g->mr && strcmp(g->isa, "generic") != 0) {
        int64_t np = (o + g->nr - 1) / g->nr, tiles = (n + g->mr - 1) / g->mr;
        s->g = g;
        s->wp = bench_alloc_floats(np * f * g->nr);
        s->a = bench_alloc_floats(tiles * f * g->mr);
        if (!s->wp || !s->a) {
            linear_free(NULL, s);
            return BENCH_ERR_NOMEM;
        }
        for (int64_t ip = 0; ip < np; ip++)
            for (int64_t k = 0; k < f; k++)
                for (int64_t i = 0; i < g->nr; i++) {
                    int64_t j = ip * g->nr + i;
                    s->wp[(ip * f + k) * g->nr + i] = j < o ? w[j * f + k] : 0.0f;
                }
        *workspace_bytes = 4 * (np * f * g->nr + tiles * f * g->mr);
        snprintf(impl, impl_len, "packed tiles %s %dx%d", g->isa, g->mr, g->nr);
    } else {
        snprintf(impl, impl_len, "%s", n == 1 ? "sgemv" : "sgemm");
    }
    *state = s;
    return BENCH_OK;
}

/* Output panels [p_lo, p_hi) of every row tile. */
static void linear_panels(const linear_state *s, int64_t n, int64_t f, int64_t o, const float *bias, float *out,
                          int64_t p_lo, int64_t p_hi)
{
    const cpu_pgemm *g = s->g;
    for (int64_t ip = p_lo; ip < p_hi; ip++)
        for (int64_t q = 0; q < n; q += g->mr)
            for (int64_t kb = 0; kb < f; kb += LINEAR_KC) {
                int64_t o0 = ip * g->nr;
                g->kernel((int)(n - q < g->mr ? n - q : g->mr), (int)(o - o0 < g->nr ? o - o0 : g->nr),
                          &(cpu_pgemm_args){.ntap = 1, .kc = f - kb < LINEAR_KC ? f - kb : LINEAR_KC,
                                            .a = s->a + (q / g->mr * f + kb) * g->mr, .lda = g->mr, .sa = 1,
                                            .b = s->wp + (ip * f + kb) * g->nr, .ldb = g->nr, .c = out + q * o + o0,
                                            .ldc = o, .cbias = bias ? bias + o0 : NULL, .accumulate = kb > 0});
            }
}

static void linear_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w_, void *out_)
{
    const float *w = w_;
    float *out = out_;
    const float *const *ins = (const float *const *)ins_;
    (void)env;
    const linear_state *s = state;
    const float *in = ins[0];
    int64_t f = l->in.d[l->in.rank - 1], n = shape_numel(&l->in) / f, o = l->p.out_features;
    const float *bias = l->p.bias ? w + o * f : NULL;
    if (s->g) {
        int64_t mr = s->g->mr, np = (o + s->g->nr - 1) / s->g->nr;
        for (int64_t q = 0; q < n; q += mr) /* the rows, feature-major per tile of mr */
            for (int64_t k = 0; k < f; k++)
                for (int64_t i = 0; i < mr; i++)
                    s->a[(q / mr * f + k) * mr + i] = q + i < n ? in[(q + i) * f + k] : 0.0f;
        CPU_OMP_IF(n * o * f > 64 * CPU_PARALLEL_MIN, "omp parallel", {
            int64_t lo, hi;
            cpu_thread_span(np, &lo, &hi);
            linear_panels(s, n, f, o, bias, out, lo, hi);
        });
        return;
    }
    if (bias)
        for (int64_t b = 0; b < n; b++)
            for (int64_t j = 0; j < o; j++)
                out[b * o + j] = bias[j];
    float beta = bias ? 1.0f : 0.0f;
    if (n == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)o, (blasint)f, 1.0f, w, (blasint)f, in, 1, beta, out, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)n, (blasint)o, (blasint)f, 1.0f, in,
                    (blasint)f, w, (blasint)f, beta, out, (blasint)o);
}

const backend_kernel cpu_linear_kernel = {.setup = linear_setup, .run = linear_run, .free = linear_free};

/* matmul: one cblas_sgemm per index of the leading dims; many small products spread
 * over the threads (OpenBLAS single-threaded inside), few large ones threaded inside. */
static void matmul_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out_)
{
    (void)env, (void)state, (void)w;
    const float *a = ins[0], *b = ins[1];
    float *out = out_;
    int64_t batch, m, k, n;
    layer_matmul_dims(l, &batch, &m, &k, &n);
    int threads = omp_get_max_threads();
#pragma omp parallel for schedule(dynamic) num_threads(threads) if (batch >= threads && threads > 1)
    for (int64_t i = 0; i < batch; i++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)m, (blasint)n, (blasint)k, 1.0f, a + i * m * k,
                    (blasint)k, b + i * k * n, (blasint)n, 0.0f, out + i * m * n, (blasint)n);
}

const backend_kernel cpu_matmul_kernel = {.run = matmul_run, .impl = "sgemm per leading index"};
