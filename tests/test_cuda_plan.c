/* The cuda backend's backward plans (layers/cuda/cuda_plan.c), which need no GPU: each
 * GEMM of linear's backward plan run on the host as cuBLAS would run it (column-major,
 * op(A) and op(B) as the call says) against the plain-C reference backward, on awkward
 * shapes, with and without a bias, frozen and without an input gradient; the parts a
 * plan leaves out left unwritten; a plan with one transpose flipped caught; dimensions
 * past cuBLAS's int refused; and where each gradient lies in a backward's output. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_plan.h"
#include "test_util.h"

/* C = op(A) op(B) column-major, as cublasGemmEx with beta 0, summed in double */
static void host_gemm(const cuda_gemm_call *g, const float *a, const float *b, float *c)
{
    for (int64_t j = 0; j < g->n; j++)
        for (int64_t i = 0; i < g->m; i++) {
            double s = 0;
            for (int64_t p = 0; p < g->k; p++)
                s += (double)(g->ta ? a[p + i * g->lda] : a[i + p * g->lda]) *
                     (double)(g->tb ? b[j + p * g->ldb] : b[p + j * g->ldb]);
            c[i + j * g->ldc] = (float)s;
        }
}

static double rel_err(const float *got, const float *ref, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(got[i]))
            return INFINITY;
        num += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static bool make_linear(layer *l, shape_t in, int64_t out_features, bool bias)
{
    static int inputs[1];
    static shape_t ins[1];
    const layer_desc *d = layer_desc_get(LAYER_LINEAR);
    char err[256];
    memset(l, 0, sizeof *l);
    l->name = "fc";
    l->kind = LAYER_LINEAR;
    if (d->defaults)
        d->defaults(&l->p);
    l->p.out_features = out_features;
    l->p.bias = bias;
    l->in = ins[0] = in;
    l->n_inputs = 1;
    l->inputs = inputs;
    l->ins = ins;
    if (d->infer(l, err, sizeof err) != 0 || layer_count(l) != 0)
        return false;
    *l = layer_as_backward(l);
    return true;
}

/* Runs the plan on the host; returns its worst relative error against the reference,
 * or -1 if it wrote what it should have left alone. flip: op(A) of the first call
 * inverted (a wrong plan the check must catch). */
static double run_linear(const layer *l, bool flip)
{
    int64_t nx = shape_numel(&l->in), ny = shape_numel(&l->out), nw = l->n_weight_floats;
    int64_t f = l->in.d[l->in.rank - 1], rows = nx / f, o = l->p.out_features;
    float *x = malloc(sizeof(float) * (size_t)nx), *w = malloc(sizeof(float) * (size_t)nw);
    float *y = malloc(sizeof(float) * (size_t)ny), *dy = malloc(sizeof(float) * (size_t)ny);
    float *ones = malloc(sizeof(float) * (size_t)rows);
    int64_t ng = layer_backward_floats(l);
    float *ref = calloc((size_t)ng, sizeof(float)), *got = malloc(sizeof(float) * (size_t)ng);
    layer_rng rng;
    layer_rng_seed(&rng, 7 + (uint64_t)nx);
    layer_fill_uniform(x, nx, -1, 1, &rng);
    layer_fill_uniform(w, nw, -1, 1, &rng);
    layer_fill_uniform(dy, ny, -1, 1, &rng);
    for (int64_t r = 0; r < rows; r++)
        ones[r] = 1.0f;
    for (int64_t i = 0; i < ng; i++)
        got[i] = NAN;
    const float *in[1] = {x};
    layer_desc_get(LAYER_LINEAR)->reference(l, in, w, y);
    float *din[1] = {ref + cuda_bwd_offset(l, 0)};
    layer_desc_get(LAYER_LINEAR)->backward(l, in, w, y, dy, din, ref + cuda_bwd_offset(l, 1));

    cuda_gemm_call calls[3];
    char why[128];
    int n = cuda_linear_bwd_plan(l, calls, why, sizeof why);
    EXPECT(n >= 0, "plan: %s", why);
    float *dw = got + cuda_bwd_offset(l, 1);
    const float *operand[CUDA_PLAN_OPERANDS] = {x, w, dy, got + cuda_bwd_offset(l, 0), dw, dw + o * f, ones};
    if (flip && n > 0)
        calls[0].ta = !calls[0].ta, calls[0].lda = calls[0].ta ? calls[0].k : calls[0].m;
    for (int i = 0; i < n; i++)
        host_gemm(&calls[i], operand[calls[i].a], operand[calls[i].b], (float *)operand[calls[i].c]);
    double worst = 0;
    int64_t at_w = cuda_bwd_offset(l, 1);
    if (l->no_input_grad) { /* untouched: NaN as set */
        for (int64_t i = 0; i < at_w; i++)
            if (!isnan(got[i]))
                worst = -1;
    } else {
        double e = rel_err(got, ref, at_w);
        worst = e > worst ? e : worst;
    }
    if (worst >= 0 && l->frozen) {
        for (int64_t i = at_w; i < ng; i++)
            if (!isnan(got[i]))
                worst = -1;
    } else if (worst >= 0) {
        double e = rel_err(got + at_w, ref + at_w, nw);
        worst = e > worst ? e : worst;
    }
    free(x), free(w), free(y), free(dy), free(ones), free(ref), free(got);
    return worst;
}

static void linear_plans(void)
{
    const struct {
        shape_t in;
        int64_t o;
        bool bias;
    } cases[] = {
        {{2, {5, 7}}, 3, true},  {{2, {1, 13}}, 9, false}, {{3, {2, 3, 17}}, 1, true},
        {{2, {33, 1}}, 5, true}, {{3, {1, 1, 64}}, 130, true}, {{4, {2, 3, 4, 6}}, 11, false},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        layer l;
        EXPECT(make_linear(&l, cases[c].in, cases[c].o, cases[c].bias), "case %zu builds", c);
        for (int mode = 0; mode < 3; mode++) { /* all, frozen, no input gradient */
            l.frozen = mode == 1, l.no_input_grad = mode == 2;
            cuda_gemm_call calls[3];
            char why[128];
            int n = cuda_linear_bwd_plan(&l, calls, why, sizeof why);
            int want = (mode != 2) + (mode != 1) * (1 + cases[c].bias);
            EXPECT(n == want, "case %zu mode %d: %d calls, want %d", c, mode, n, want);
            for (int i = 0; i < n; i++)
                EXPECT(strcmp(calls[i].part, calls[i].c == CUDA_PLAN_DX ? "backward data" : "backward weights") == 0,
                       "case %zu: call %d's part %s", c, i, calls[i].part);
            double e = run_linear(&l, false);
            printf("  linear %zu (rows x %lld -> %lld%s) mode %d: rel. error %.2e\n", c,
                   (long long)l.in.d[l.in.rank - 1], (long long)cases[c].o, cases[c].bias ? ", bias" : "", mode, e);
            EXPECT(e >= 0 && e < 1e-6, "case %zu mode %d: relative error %.3e", c, mode, e);
        }
        l.frozen = l.no_input_grad = false;
        /* a wrong plan is caught (where W is a vector or square, W^T lies as W does in
         * memory: a flipped transpose computes the same) */
        int64_t f = l.in.d[l.in.rank - 1];
        if (f != cases[c].o && f > 1 && cases[c].o > 1) {
            double e = run_linear(&l, true);
            EXPECT(e < 0 || e > 1e-2, "case %zu: a flipped transpose passed (%.3e)", c, e);
        }
    }
    /* past cuBLAS's int: refused with the reason */
    layer big;
    EXPECT(make_linear(&big, (shape_t){2, {4, (int64_t)1 << 31}}, 2, false), "the large layer builds");
    cuda_gemm_call calls[3];
    char why[128] = "";
    EXPECT(cuda_linear_bwd_plan(&big, calls, why, sizeof why) == -1 && strstr(why, "int"), "refused: '%s'", why);
}

static void offsets(void)
{
    static shape_t ins[3] = {{2, {2, 3}}, {2, {2, 5}}, {2, {2, 1}}};
    layer l = {.kind = LAYER_CONCAT, .n_inputs = 3, .ins = ins};
    EXPECT(cuda_bwd_offset(&l, 0) == 0 && cuda_bwd_offset(&l, 1) == 6 && cuda_bwd_offset(&l, 2) == 16 &&
               cuda_bwd_offset(&l, 3) == 18,
           "concat offsets %lld %lld %lld %lld", (long long)cuda_bwd_offset(&l, 0), (long long)cuda_bwd_offset(&l, 1),
           (long long)cuda_bwd_offset(&l, 2), (long long)cuda_bwd_offset(&l, 3));
}

int main(void)
{
    linear_plans();
    offsets();
    return test_summary("test_cuda_plan");
}
