/* moe on the CPU (layers/moe.c says what it computes): the routing, then expert by
 * expert, its tokens gathered into rows and its SwiGLU MLP as three OpenBLAS products
 * (sgemv for a single token, so that a decode step streams each chosen expert's weights
 * once; sgemm for more), silu and the multiply between them, and the rows added back
 * into the output weighted by their gates. Only experts that have tokens read their
 * weights. In bf16 and fp16 it runs on fp32 copies (convert_cpu.c). */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "fast_math.h"

typedef struct moe_state {
    int64_t *pick;   /* [rows][top_k]: each row's experts */
    int64_t *count;  /* [E]: rows per expert */
    int64_t *start;  /* [E + 1]: where each expert's slots begin in order */
    int64_t *order;  /* [rows * top_k]: the slots (row * top_k + j), expert by expert */
    float *gate;     /* [rows][top_k] */
    double *dgate;   /* [top_k] */
    float *x, *g, *u, *y; /* an expert's rows: gathered [rows][H], w1 and w3 [rows][F], w2 [rows][H] */
} moe_state;

static void moe_free(void *env, void *state)
{
    (void)env;
    moe_state *s = state;
    if (s) {
        free(s->pick), free(s->count), free(s->start), free(s->order), free(s->gate), free(s->dgate);
        free(s->x), free(s->g), free(s->u), free(s->y);
    }
    free(s);
}

static bench_status moe_setup(void *env, const layer *l, const void *w, void **state, char *impl, size_t len,
                              int64_t *ws)
{
    (void)env, (void)w;
    int64_t h = l->in.d[l->in.rank - 1], f = l->p.ffn_dim, e_n = l->p.num_experts, k = l->p.top_k;
    int64_t rows = layer_moe_rows(l);
    moe_state *s = xcalloc(1, sizeof *s);
    s->pick = xmalloc((size_t)(rows * k) * sizeof *s->pick);
    s->order = xmalloc((size_t)(rows * k) * sizeof *s->order);
    s->gate = xmalloc((size_t)(rows * k) * sizeof *s->gate);
    s->count = xmalloc((size_t)e_n * sizeof *s->count);
    s->start = xmalloc((size_t)(e_n + 1) * sizeof *s->start);
    s->dgate = xmalloc((size_t)k * sizeof *s->dgate);
    s->x = bench_alloc_floats(rows * h), s->y = bench_alloc_floats(rows * h);
    s->g = bench_alloc_floats(rows * f), s->u = bench_alloc_floats(rows * f);
    if (!s->x || !s->y || !s->g || !s->u) {
        moe_free(NULL, s);
        return BENCH_ERR_NOMEM;
    }
    *ws = 4 * rows * (2 * h + 2 * f) + (int64_t)(3 * sizeof(int64_t) + sizeof(float)) * rows * k;
    char how[48];
    snprintf(how, sizeof how, l->p.routing == MOE_ROUTER ? "router" : l->p.load_skew > 0 ? "skewed (%g)" : "uniform",
             l->p.load_skew);
    snprintf(impl, len, "%s routing; an expert's tokens by sgemm, one token by sgemv%s", how,
             l->p.moe_act == MOE_ACT_CLAMPED_SWIGLU ? "; clamped SwiGLU" : "");
    *state = s;
    return BENCH_OK;
}

/* out (c rows of o) = in (c rows of i) times w^T, w [o][i] row-major */
static void rows_times(const float *in, const float *w, float *out, int64_t c, int64_t o, int64_t i)
{
    if (c == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)o, (blasint)i, 1.0f, w, (blasint)i, in, 1, 0.0f, out, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)c, (blasint)o, (blasint)i, 1.0f, in, (blasint)i,
                    w, (blasint)i, 0.0f, out, (blasint)o);
}

CPU_ISA_CLONES
static void swiglu(float *g, const float *u, int64_t n)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        g[i] = g[i] / (1.0f + lb_expf(-g[i])) * u[i];
}

/* gpt-oss's: the gate clamped above, the up both ways, a slope in the sigmoid, up + 1 */
CPU_ISA_CLONES
static void swiglu_clamped(float *g, const float *u, int64_t n, float limit, float alpha)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] < limit ? g[i] : limit, ui = u[i] < -limit ? -limit : u[i] > limit ? limit : u[i];
        g[i] = gi / (1.0f + lb_expf(-alpha * gi)) * (ui + 1.0f);
    }
}

/* each of c rows of n += b */
static void add_rows(float *x, const float *b, int64_t c, int64_t n)
{
    for (int64_t r = 0; r < c; r++) {
        float *xr = x + r * n;
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            xr[i] += b[i];
    }
}

static void moe_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w_, void *out_)
{
    (void)env;
    moe_state *s = state;
    const float *x = ins_[0], *logits = ins_[1], *w = w_;
    float *out = out_;
    int64_t h = l->in.d[l->in.rank - 1], f = l->p.ffn_dim, e_n = l->p.num_experts, k = l->p.top_k;
    int64_t rows = layer_moe_rows(l);
    layer_moe_route(l, logits, layer_moe_score_bias(l, w), s->pick, s->count);
    for (int64_t r = 0; r < rows; r++) {
        layer_moe_gates(l, logits + r * e_n, s->pick + r * k, s->dgate);
        for (int64_t j = 0; j < k; j++)
            s->gate[r * k + j] = (float)s->dgate[j];
    }
    s->start[0] = 0;
    for (int64_t e = 0; e < e_n; e++)
        s->start[e + 1] = s->start[e] + s->count[e];
    for (int64_t e = 0; e < e_n; e++)
        s->count[e] = s->start[e]; /* now the next free place of each expert */
    for (int64_t slot = 0; slot < rows * k; slot++)
        s->order[s->count[s->pick[slot]]++] = slot;
    memset(out, 0, (size_t)(rows * h) * sizeof *out);
    for (int64_t e = 0; e < e_n; e++) {
        int64_t c = s->start[e + 1] - s->start[e];
        const int64_t *slots = s->order + s->start[e];
        if (!c)
            continue;
        const float *w1 = w + e * layer_moe_expert_floats(l), *w2 = w1 + h * f, *w3 = w2 + h * f;
        const float *b1 = w3 + h * f, *b2 = b1 + f, *b3 = b2 + h;
        for (int64_t i = 0; i < c; i++)
            memcpy(s->x + i * h, x + slots[i] / k * h, (size_t)h * sizeof *x);
        rows_times(s->x, w1, s->g, c, f, h);
        rows_times(s->x, w3, s->u, c, f, h);
        if (l->p.bias)
            add_rows(s->g, b1, c, f), add_rows(s->u, b3, c, f);
        if (l->p.moe_act == MOE_ACT_CLAMPED_SWIGLU)
            swiglu_clamped(s->g, s->u, c * f, (float)l->p.swiglu_limit, (float)l->p.swiglu_alpha);
        else
            swiglu(s->g, s->u, c * f);
        rows_times(s->g, w2, s->y, c, h, f);
        if (l->p.bias)
            add_rows(s->y, b2, c, h);
        for (int64_t i = 0; i < c; i++) {
            float gt = s->gate[slots[i]], *o = out + slots[i] / k * h;
            const float *y = s->y + i * h;
#pragma omp simd
            for (int64_t q = 0; q < h; q++)
                o[q] += gt * y[q];
        }
    }
}

const backend_kernel cpu_moe_kernel = {.setup = moe_setup, .run = moe_run, .free = moe_free};
