/* bf16 and fp16 on the CPU where a kind has no kernel of its own in that type: the
 * layer's tensors stay in their dtype, and each run converts its inputs to fp32 copies,
 * runs the fp32 kernel on them and converts the output back, all timed, as a framework
 * without a native kernel would. impl says so ("fp32 copies: ..."). The weights are
 * converted once, at setup: they are constants. The conversions themselves are
 * dtype_cpu.c's. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_env.h"
#include "cpu_kernels.h"

typedef struct via_f32 {
    const backend_kernel *inner;
    void *inner_state;
    layer l;                 /* the layer as fp32, which the inner kernel is set up on */
    float *in[LAYER_MAX_INPUTS], *out, *w;
} via_f32;

static void via_free(void *env, void *state)
{
    via_f32 *v = state;
    if (!v)
        return;
    if (v->inner && v->inner->free && v->inner_state)
        v->inner->free(env, v->inner_state);
    for (int k = 0; k < LAYER_MAX_INPUTS; k++)
        free(v->in[k]);
    free(v->out), free(v->w);
    free(v);
}

static bench_status via_setup(void *env, const layer *l, const void *w, void **state, char *impl, size_t len,
                              int64_t *workspace_bytes)
{
    const backend_kernel *inner = cpu_fp32_kernel(l->kind);
    if (!inner || !dtype_convertible(l->dtype)) {
        snprintf(impl, len, "no %s kernel", dtype_name(l->dtype));
        return BENCH_ERR_UNSUPPORTED;
    }
    via_f32 *v = calloc(1, sizeof *v);
    if (!v)
        return BENCH_ERR_NOMEM;
    v->inner = inner;
    v->l = *l;
    v->l.dtype = DTYPE_FP32;
    bool ok = true;
    int64_t copies = shape_numel(&l->out);
    for (int k = 0; k < l->n_inputs; k++) {
        ok &= (v->in[k] = bench_alloc_floats(shape_numel(&l->ins[k]))) != NULL;
        copies += shape_numel(&l->ins[k]);
    }
    ok &= (v->out = bench_alloc_floats(shape_numel(&l->out))) != NULL;
    if (ok && l->n_weight_floats && (ok = (v->w = bench_alloc_floats(l->n_weight_floats)) != NULL))
        dtype_to_f32(l->dtype, v->w, w, l->n_weight_floats);
    if (!ok) {
        via_free(env, v);
        return BENCH_ERR_NOMEM;
    }
    char inner_impl[BACKEND_IMPL_LEN] = "";
    bench_status st = BENCH_OK;
    if (inner->setup)
        st = inner->setup(env, &v->l, v->w, &v->inner_state, inner_impl, sizeof inner_impl, workspace_bytes);
    else
        snprintf(inner_impl, sizeof inner_impl, "%s", inner->impl ? inner->impl : "");
    if (st != BENCH_OK) {
        snprintf(impl, len, "%s", inner_impl);
        v->inner_state = NULL;
        via_free(env, v);
        return st;
    }
    *workspace_bytes += 4 * (copies + l->n_weight_floats);
    snprintf(impl, len, "fp32 copies: %s", inner_impl);
    *state = v;
    return BENCH_OK;
}

static void via_run(void *env, const layer *l, void *state, const void *const *in, const void *w, void *out)
{
    (void)w;
    via_f32 *v = state;
    for (int k = 0; k < l->n_inputs; k++)
        cpu_convert(env, v->in[k], DTYPE_FP32, in[k], l->dtype, shape_numel(&l->ins[k]));
    v->inner->run(env, &v->l, v->inner_state, (const void *const *)v->in, v->w, v->out);
    cpu_convert(env, out, l->dtype, v->out, DTYPE_FP32, shape_numel(&l->out));
}

static bool via_parts_enable(void *env, void *state, bool on)
{
    via_f32 *v = state;
    return v->inner->parts_enable && v->inner->parts_enable(env, v->inner_state, on);
}

static void via_parts_read(void *env, void *state, double *seconds)
{
    via_f32 *v = state;
    if (v->inner->parts_read)
        v->inner->parts_read(env, v->inner_state, seconds);
}

/* The fp32 kernel's own tolerance (the dispatcher adds the dtype's). */
static double via_tolerance(void *env, const layer *l)
{
    const backend_kernel *inner = cpu_fp32_kernel(l->kind);
    layer l32 = *l;
    l32.dtype = DTYPE_FP32;
    return inner && inner->tolerance ? inner->tolerance(env, &l32) : layer_desc_get(l->kind)->tolerance;
}

const backend_kernel cpu_via_f32_kernel = {.setup = via_setup, .run = via_run, .free = via_free,
                                           .parts_enable = via_parts_enable, .parts_read = via_parts_read,
                                           .tolerance = via_tolerance};

/* ---- the backward in bf16 and fp16 ----------------------------------------------------------
 * The kind's fp32 backward kernel on fp32 copies: each run widens the forward's inputs,
 * its output, the output's gradient and the weights (where the backward reads them:
 * not embedding's table), runs the fp32 kernel and rounds the gradients it wrote back
 * to the layer's dtype (the inputs' unless no_input_grad, the weights' unless frozen),
 * all timed, as three parts (their own, or the fp32 kernel's halves between the
 * conversions). The copies live in the context's scratch, which every such layer
 * shares (a model's fp32 weights and their gradients would not fit where its 16-bit
 * ones do: Llama-3.2-1B's are 10 GB). */

bool cpu_scratch_reserve(cpu_ctx *c, int64_t n)
{
    if (n <= c->scratch_floats)
        return true;
    free(c->scratch);
    c->scratch = bench_alloc_floats(n);
    c->scratch_floats = c->scratch ? n : 0;
    return c->scratch != NULL;
}

typedef struct via_bwd {
    const backend_kernel *inner;
    void *inner_state;
    layer l;                    /* the layer as fp32, which the inner kernel is set up on */
    int64_t at_out, at_dout, at_grad, at_w, at_in[LAYER_MAX_INPUTS]; /* offsets in the scratch */
    bool widen_w;               /* the backward reads the weights */
    bool parts, split;          /* parts timed; the fp32 kernel times its two halves */
    double part_s[LAYER_MAX_PARTS];
} via_bwd;

static void via_bwd_free(void *env, void *state)
{
    via_bwd *s = state;
    if (s && s->inner->free && s->inner_state)
        s->inner->free(env, s->inner_state);
    free(s);
}

static bench_status via_bwd_setup(void *env, const layer *l, const void *w, void **state, char *impl, size_t len,
                                  int64_t *workspace_bytes)
{
    (void)w;
    const backend_kernel *inner = cpu_fp32_backward_kernel(l->kind);
    if (!inner || !dtype_convertible(l->dtype)) {
        snprintf(impl, len, "no %s backward kernel", dtype_name(l->dtype));
        return BENCH_ERR_UNSUPPORTED;
    }
    via_bwd *s = calloc(1, sizeof *s);
    if (!s)
        return BENCH_ERR_NOMEM;
    s->inner = inner;
    s->l = *l;
    s->l.dtype = DTYPE_FP32;
    s->widen_w = l->n_weight_floats > 0 && l->kind != LAYER_EMBEDDING;
    int64_t n = 0, n_out = shape_numel(&l->out);
    for (int k = 0; k < l->n_inputs; k++)
        s->at_in[k] = n, n += shape_numel(&l->ins[k]);
    s->at_out = n, n += n_out;
    s->at_dout = n, n += n_out;
    s->at_grad = n, n += layer_backward_floats(l);
    s->at_w = n, n += s->widen_w ? l->n_weight_floats : 0;
    if (!cpu_scratch_reserve(env, n)) {
        free(s);
        return BENCH_ERR_NOMEM;
    }
    char inner_impl[BACKEND_IMPL_LEN] = "";
    bench_status st = BENCH_OK;
    if (inner->setup)
        st = inner->setup(env, &s->l, NULL, &s->inner_state, inner_impl, sizeof inner_impl, workspace_bytes);
    else
        snprintf(inner_impl, sizeof inner_impl, "%s", inner->impl ? inner->impl : "");
    if (st != BENCH_OK) {
        if (st == BENCH_ERR_UNSUPPORTED)
            snprintf(impl, len, "%s", inner_impl);
        free(s);
        return st;
    }
    layer_part_info halves[LAYER_MAX_PARTS];
    s->split = inner->parts && inner->parts(env, s->inner_state, &s->l, halves) > 1;
    *workspace_bytes += 4 * n;
    snprintf(impl, len, "fp32 copies: %s", inner_impl);
    *state = s;
    return BENCH_OK;
}

static void via_bwd_run(void *env, const layer *l, void *state, const void *const *in, const void *w, void *out)
{
    via_bwd *s = state;
    float *f = ((cpu_ctx *)env)->scratch;
    int n_in = l->n_inputs;
    int64_t n_out = shape_numel(&l->out), n_w = l->n_weight_floats, n_dx = layer_backward_floats(l) - n_w;
    double t0 = s->parts ? bench_now() : 0;
    const void *args[LAYER_MAX_INPUTS + 2];
    for (int k = 0; k < n_in; k++) {
        cpu_convert(env, f + s->at_in[k], DTYPE_FP32, in[k], l->dtype, shape_numel(&l->ins[k]));
        args[k] = f + s->at_in[k];
    }
    cpu_convert(env, f + s->at_out, DTYPE_FP32, in[n_in], l->dtype, n_out);
    cpu_convert(env, f + s->at_dout, DTYPE_FP32, in[n_in + 1], l->dtype, n_out);
    if (s->widen_w)
        cpu_convert(env, f + s->at_w, DTYPE_FP32, w, l->dtype, n_w);
    args[n_in] = f + s->at_out, args[n_in + 1] = f + s->at_dout;
    double t1 = s->parts ? bench_now() : 0;
    s->inner->run(env, &s->l, s->inner_state, args, s->widen_w ? f + s->at_w : NULL, f + s->at_grad);
    double t2 = s->parts ? bench_now() : 0;
    size_t es = dtype_size(l->dtype);
    if (!l->no_input_grad && n_dx > 0)
        cpu_convert(env, out, l->dtype, f + s->at_grad, DTYPE_FP32, n_dx);
    if (!l->frozen && n_w > 0)
        cpu_convert(env, (char *)out + n_dx * (int64_t)es, l->dtype, f + s->at_grad + n_dx, DTYPE_FP32, n_w);
    if (!s->parts)
        return;
    int mid = s->split ? 2 : 1;
    s->part_s[0] = t1 - t0;
    if (s->split)
        s->inner->parts_read(env, s->inner_state, s->part_s + 1);
    else
        s->part_s[1] = t2 - t1;
    s->part_s[1 + mid] = bench_now() - t2;
}

/* The conversions, and between them the fp32 kernel's halves or its whole backward. */
static int via_bwd_parts(void *env, void *state, const layer *l, layer_part_info *parts)
{
    via_bwd *s = state;
    int64_t es = (int64_t)dtype_size(l->dtype), n_out = shape_numel(&l->out), n_w = l->n_weight_floats;
    int64_t n_dx = layer_backward_floats(l) - n_w, read = 2 * n_out + (s->widen_w ? n_w : 0);
    int64_t wrote = (l->no_input_grad ? 0 : n_dx) + (l->frozen ? 0 : n_w);
    for (int k = 0; k < l->n_inputs; k++)
        read += shape_numel(&l->ins[k]);
    int n = 0;
    parts[n++] = (layer_part_info){"convert to fp32", 0, (es + 4) * read};
    if (s->split)
        n += s->inner->parts(env, s->inner_state, &s->l, parts + n);
    else
        parts[n++] = (layer_part_info){"backward", l->flops, l->bytes};
    parts[n++] = (layer_part_info){"convert from fp32", 0, (es + 4) * wrote};
    return n;
}

static bool via_bwd_parts_enable(void *env, void *state, bool on)
{
    via_bwd *s = state;
    if (s->split && !s->inner->parts_enable(env, s->inner_state, on))
        return false;
    s->parts = on;
    return true;
}

static void via_bwd_parts_read(void *env, void *state, double *seconds)
{
    (void)env;
    via_bwd *s = state;
    memcpy(seconds, s->part_s, (size_t)(s->split ? 4 : 3) * sizeof *seconds);
}

static double via_bwd_tolerance(void *env, const layer *l)
{
    const backend_kernel *inner = cpu_fp32_backward_kernel(l->kind);
    layer l32 = *l;
    l32.dtype = DTYPE_FP32;
    return inner && inner->tolerance ? inner->tolerance(env, &l32) : layer_desc_get(l->kind)->tolerance;
}

const backend_kernel cpu_bwd_via_f32_kernel = {.setup = via_bwd_setup, .run = via_bwd_run, .free = via_bwd_free,
                                               .parts_enable = via_bwd_parts_enable,
                                               .parts_read = via_bwd_parts_read, .parts = via_bwd_parts,
                                               .tolerance = via_bwd_tolerance};

/* A kind whose 16-bit forward computes inference only (batch norm on its running
 * statistics, dropout as a view): in training mode, the fp32 kernel on fp32 copies
 * (cpu_via_f32_kernel), whose training forward it has. */
typedef struct train16 {
    const backend_kernel *k;
    void *state;
} train16;

/* bf16 batch norm's and 16-bit dropout's cells (fp16 batch norm's is cpu_via_f32_kernel) */
static const backend_kernel *inference16(const layer *l)
{
    return l->kind == LAYER_BATCHNORM2D ? &cpu_batchnorm2d_bf16_kernel : &cpu_view_kernel;
}

static bench_status train16_setup(void *env, const layer *l, const void *w, void **state, char *impl, size_t len,
                                  int64_t *workspace_bytes)
{
    train16 *t = calloc(1, sizeof *t);
    if (!t)
        return BENCH_ERR_NOMEM;
    t->k = l->pass == PASS_TRAIN && !layer_is_view(l) ? &cpu_via_f32_kernel : inference16(l);
    bench_status st = BENCH_OK;
    if (t->k->setup)
        st = t->k->setup(env, l, w, &t->state, impl, len, workspace_bytes);
    else
        snprintf(impl, len, "%s", t->k->impl ? t->k->impl : "");
    if (st != BENCH_OK) {
        free(t);
        return st;
    }
    *state = t;
    return BENCH_OK;
}

static void train16_run(void *env, const layer *l, void *state, const void *const *in, const void *w, void *out)
{
    train16 *t = state;
    t->k->run(env, l, t->state, in, w, out);
}

static void train16_free(void *env, void *state)
{
    train16 *t = state;
    if (t && t->k->free)
        t->k->free(env, t->state);
    free(t);
}

const backend_kernel cpu_train16_kernel = {.setup = train16_setup, .run = train16_run, .free = train16_free};
