/* A layer as oneDNN runs it: set up by its family's builder or on the cpu backend's kernel,
 * run with the reorders around its primitive, alone on its own layouts (isolate), and
 * split into parts. */
#include <stdlib.h>
#include <string.h>

#include "onednn.h"

bool od_linkable(const od_layer *L)
{
    return L && L->linkable && !L->cpu && L->prim && !L->q;
}

bench_status od_setup(od_ctx *c, od_build_fn *build, bool linkable, const layer *l, const void *w, void **state,
                      char *impl, size_t impl_len, int64_t *workspace_bytes)
{
    *workspace_bytes = 0;
    snprintf(c->why, sizeof c->why, "no oneDNN primitive");
    if (build) {
        od_layer *L = xcalloc(1, sizeof *L);
        *L = (od_layer){.l = l, .w = w, .n_inputs = l->n_inputs, .build = build, .linkable = linkable};
        if (build(c, L, l, w, impl, impl_len)) {
            *workspace_bytes = L->workspace;
            *state = L;
            return BENCH_OK;
        }
        od_layer_clear(L);
        free(L);
        if (c->failed)
            return BENCH_ERR_BACKEND;
    }
    return od_setup_cpu(c, l, w, state, impl, impl_len, workspace_bytes);
}

bench_status od_built_or_cpu(od_ctx *c, od_layer *L, od_layer **fallback, bool built, int64_t *workspace_bytes,
                             char *impl, size_t impl_len)
{
    if (built) {
        *workspace_bytes = L->workspace;
        return BENCH_OK;
    }
    od_layer_clear(L);
    if (c->failed)
        return BENCH_ERR_BACKEND;
    void *fb = NULL;
    bench_status st = od_setup_cpu(c, L->l, L->w, &fb, impl, impl_len, workspace_bytes);
    *fallback = fb;
    return st;
}

bench_status od_setup_cpu(od_ctx *c, const layer *l, const void *w, void **state, char *impl, size_t impl_len,
                          int64_t *workspace_bytes)
{
    od_layer *L = xcalloc(1, sizeof *L);
    *L = (od_layer){.l = l, .w = w, .n_inputs = l->n_inputs};
    char cpu_impl[BACKEND_IMPL_LEN] = "";
    backend cpu = {&backend_cpu_ops, c->cpu};
    bench_status st = backend_layer_setup(&cpu, l, w, &L->cpu, cpu_impl, sizeof cpu_impl, workspace_bytes);
    if (st != BENCH_OK) {
        free(L);
        snprintf(impl, impl_len, "%s", cpu_impl);
        return st;
    }
    snprintf(impl, impl_len, "cpu kernel: %s (%s)", cpu_impl, c->why);
    *state = L;
    return BENCH_OK;
}

/* Destroys what L made; keeps what it was set up for. */
void od_layer_clear(od_layer *L)
{
    for (int k = 0; k < L->n_prims; k++)
        dnnl_primitive_destroy(L->prims[k]);
    for (int k = 0; k < L->n_mems; k++)
        dnnl_memory_destroy(L->mems[k]);
    od_quant_free(L->q);
    *L = (od_layer){.l = L->l, .w = L->w, .n_inputs = L->n_inputs, .build = L->build, .linkable = L->linkable};
}

/* A reorder; with scale (int8's quantizing reorder), at that runtime scale. */
static void od_exec(od_ctx *c, dnnl_primitive_t p, dnnl_memory_t from, dnnl_memory_t to, dnnl_memory_t scale)
{
    dnnl_exec_arg_t a[3] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}, {DNNL_ARG_ATTR_OUTPUT_SCALES, scale}};
    OD_OK(c, dnnl_primitive_execute(p, c->stream, scale ? 3 : 2, a));
}

/* Seconds since *t; moves *t to now. */
static double od_lap(double *t)
{
    double now = bench_now(), d = now - *t;
    *t = now;
    return d;
}

void od_layer_run(void *env, const layer *l, void *state, const void *const *in, const void *w, void *out)
{
    (void)l, (void)w;
    od_ctx *c = env;
    od_layer *L = state;
    if (L->cpu) {
        backend_layer_run(L->cpu, in, out);
        return;
    }
    double t = L->timed ? bench_now() : 0.0;
    int part = 0;
    if (L->q) /* int8: this input's scale, then the reorder quantizes it (isolated too) */
        od_quant_prepare(L->q, in[0]);
    for (int k = 0; k < L->n_inputs && k < 2; k++) {
        if (!L->in_linked[k])
            dnnl_memory_set_data_handle(L->user_in[k], (void *)in[k]);
        if (L->reorder_in[k] && (!L->isolated || L->q)) {
            od_exec(c, L->reorder_in[k], L->user_in[k], L->in_mem[k], L->q ? L->q->in_scale_mem : NULL);
            if (L->timed)
                L->part_s[part++] = od_lap(&t);
        }
    }
    if (L->user_out)
        dnnl_memory_set_data_handle(L->user_out, out);
    OD_OK(c, dnnl_primitive_execute(L->prim, c->stream, L->n_args, L->args));
    if (L->timed)
        L->part_s[part++] = od_lap(&t);
    if (L->reorder_out && !L->isolated) {
        od_exec(c, L->reorder_out, L->out_mem, L->user_out, NULL);
        if (L->timed)
            L->part_s[part++] = od_lap(&t);
    }
}

/* The layout oneDNN's convolution hands on a tensor of shape s (a 3x3 convolution that
 * keeps its channels, every md "any"): what a primitive that follows its input's layout
 * is given in a network. false where there is none (not 4-d). */
static bool od_conv_layout(od_ctx *c, const shape_t *s, dnnl_data_type_t dt, dnnl_memory_desc_t *md)
{
    if (s->rank != 4)
        return false;
    dnnl_memory_desc_t act, wei;
    dnnl_dims_t ad = {s->d[0], s->d[1], s->d[2], s->d[3]}, wd = {s->d[1], s->d[1], 3, 3}, one = {1, 1},
                pad = {1, 1};
    dnnl_memory_desc_init_by_tag(&act, 4, ad, dt, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&wei, 4, wd, dt, dnnl_format_tag_any);
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t pd;
    if (dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &act, &wei, NULL,
                                           &act, one, pad, pad) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &cd, NULL, c->engine, NULL) != dnnl_success)
        return false;
    *md = *od_query(pd, dnnl_query_dst_md);
    dnnl_primitive_desc_destroy(pd);
    return true;
}

/* A primitive that follows its input's layout, alone on the layout a convolution would
 * hand it: its inputs reordered into that layout once, now, and its output kept in its
 * own memory. false, the layer as it was, where that layout is the plain one or oneDNN
 * has nothing for it. */
static bool od_isolate_linked(od_ctx *c, od_layer *L, const void *const *in)
{
    const layer *l = L->l;
    dnnl_memory_desc_t want[2], plain;
    if (!od_linkable(L) || l->kind == LAYER_CONV2D || !od_conv_layout(c, &l->ins[0], od_dtype(l->dtype), &want[0]))
        return false;
    od_plain_shape(&plain, &l->ins[0], od_dtype(l->dtype));
    if (dnnl_memory_desc_equal(&want[0], &plain) || (l->n_inputs > 1 && !od_conv_layout(c, &l->ins[1], od_dtype(l->dtype), &want[1])))
        return false;
    od_layer_clear(L);
    bool ok = true;
    for (int k = 0; ok && k < l->n_inputs && k < 2; k++) { /* in[k], converted once */
        od_plain_shape(&plain, &l->ins[k], od_dtype(l->dtype));
        ok = (c->link_in[k] = od_constant(c, L, in[k], &plain, &want[k])) != NULL;
    }
    char impl[BACKEND_IMPL_LEN];
    c->link_out_own = true;
    ok = ok && L->build(c, L, l, L->w, impl, sizeof impl);
    c->link_in[0] = c->link_in[1] = NULL, c->link_out_own = false;
    if (!ok && !c->failed) { /* as it was */
        od_layer_clear(L);
        L->build(c, L, l, L->w, impl, sizeof impl);
    }
    return ok;
}

/* The isolated rows time the primitive on its own layouts: the input reorders run once
 * now, on the inputs the rows will pass, and the output stays in the primitive's. */
void od_layer_isolate(void *env, void *state, const void *const *in, char *impl, size_t len)
{
    od_ctx *c = env;
    od_layer *L = state;
    if (L->cpu)
        return;
    if (od_isolate_linked(c, L, in)) {
        char buf[16];
        const dnnl_memory_desc_t *md;
        dnnl_memory_get_memory_desc(L->out_mem, &md);
        snprintf(impl, len, "%s %s (input reordered at setup)", L->name, od_layout(md, buf, sizeof buf));
        return;
    }
    if (!(L->reorder_in[0] || L->reorder_in[1] || L->reorder_out))
        return;
    for (int k = 0; k < L->n_inputs && k < 2 && !L->q; k++) { /* int8 quantizes its input at each run */
        dnnl_memory_set_data_handle(L->user_in[k], (void *)in[k]);
        if (L->reorder_in[k])
            od_exec(c, L->reorder_in[k], L->user_in[k], L->in_mem[k], NULL);
    }
    OD_OK(c, dnnl_stream_wait(c->stream));
    L->isolated = true;
    od_impl_layout(L, impl, len);
}

/* A oneDNN primitive with reorders around it runs as parts: each reorder, the primitive;
 * a layer on the cpu backend's kernel, that kernel's parts. */
int od_layer_parts(void *env, void *state, const layer *l, layer_part_info *parts)
{
    (void)env;
    od_layer *L = state;
    static const char *const names[3] = {"reorder src", "reorder src1", "reorder dst"};
    if (L->cpu) /* the cpu kernel's own (a conv2d's or linear's backward halves) */
        return backend_layer_parts(L->cpu, parts);
    if ((L->isolated && !L->q) || !(L->reorder_in[0] || L->reorder_in[1] || L->reorder_out))
        return 0;
    int n = 0;
    for (int k = 0; k < 2; k++) /* int8: the max |x| pass and the quantizing reorder */
        if (L->reorder_in[k])
            parts[n++] = (layer_part_info){L->q ? "quantize src" : names[k], 0,
                                           L->reorder_bytes[k] + (L->q ? L->q->n_in * 4 : 0)};
    /* int8: the primitive reads the quantized input, 1 byte an element */
    parts[n++] = (layer_part_info){layer_kind_name(l->kind), l->flops, l->bytes - (L->q ? 3 * L->q->n_in : 0)};
    if (L->reorder_out && !L->isolated)
        parts[n++] = (layer_part_info){names[2], 0, L->reorder_bytes[2]};
    return n;
}

void od_layer_free(void *env, void *state)
{
    od_ctx *c = env;
    od_layer *L = state;
    if (!L)
        return;
    if (L->cpu)
        backend_layer_free(&(backend){&backend_cpu_ops, c->cpu}, L->cpu);
    od_layer_clear(L);
    free(L);
}

bool od_parts_enable(void *env, void *state, bool on)
{
    od_layer *L = state;
    if (L->cpu)
        return backend_layer_parts_enable(L->cpu, on);
    layer_part_info info[LAYER_MAX_PARTS];
    if (od_layer_parts(env, state, L->l, info) == 0)
        return false;
    L->timed = on;
    return true;
}

void od_parts_read(void *env, void *state, double *seconds)
{
    od_layer *L = state;
    if (L->cpu) {
        backend_layer_parts_read(L->cpu, seconds);
        return;
    }
    layer_part_info info[LAYER_MAX_PARTS];
    int n = od_layer_parts(env, state, L->l, info);
    memcpy(seconds, L->part_s, (size_t)n * sizeof *seconds);
}

/* oneDNN accumulates in float, in its own order (a 112x112 global average sums 12544
 * floats one way, the reference in double): inexact kinds get at least 1e-5, as on
 * cuda; exact ones (relu, max pooling, copies) stay exact. */
double od_tolerance(void *env, const layer *l)
{
    (void)env;
    double t = layer_desc_get(l->kind)->tolerance;
    return t == 0.0 ? 0.0 : t > 1e-5 ? t : 1e-5;
}

OD_SETUP(cpu_setup, NULL)
const backend_kernel od_cpu_kernel = OD_KERNEL(cpu_setup);
