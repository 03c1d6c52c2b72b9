/* bf16 and fp16 on the CPU where a kind has no kernel of its own in that type: the
 * layer's tensors stay in their dtype, and each run converts its inputs to fp32 copies,
 * runs the fp32 kernel on them and converts the output back, all timed, as a framework
 * without a native kernel would. impl says so ("fp32 copies: ..."). The weights are
 * converted once, at setup: they are constants. Also the backend's device.convert, which
 * a mixed model's chained forward runs between layers of different dtypes. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

/* bf16 <-> fp32 in loops the compiler vectorises (widening is a shift; narrowing rounds
 * to nearest even, NaN kept), cloned per ISA; the other pairs through dtype_convert. */
CPU_ISA_CLONES static void widen_bf16(float *dst, const uint16_t *src, int64_t n)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &u, 4);
    }
}

CPU_ISA_CLONES static void narrow_bf16(uint16_t *dst, const float *src, int64_t n)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], 4);
        uint32_t r = (u + 0x7fffu + ((u >> 16) & 1)) >> 16;
        dst[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40 : r);
    }
}

static void convert_span(void *dst, dtype_t to, const void *src, dtype_t from, int64_t n)
{
    if (from == DTYPE_BF16 && dtype_storage(to) == DTYPE_FP32)
        widen_bf16(dst, src, n);
    else if (to == DTYPE_BF16 && dtype_storage(from) == DTYPE_FP32)
        narrow_bf16(dst, src, n);
    else if (dtype_storage(to) == dtype_storage(from))
        memmove(dst, src, (size_t)n * dtype_size(to));
    else
        dtype_convert(to, dst, from, src, n);
}

CPU_ISA_CLONES static float absmax_span(const float *x, int64_t n)
{
    float m = 0.0f;
#pragma omp simd reduction(max : m)
    for (int64_t i = 0; i < n; i++) {
        float a = __builtin_fabsf(x[i]);
        m = a > m ? a : m; /* NaN is skipped */
    }
    return m;
}

float cpu_absmax(const float *x, int64_t n)
{
    if (n <= CPU_PARALLEL_MIN)
        return absmax_span(x, n);
    float m = 0.0f;
#pragma omp parallel reduction(max : m)
    {
        int64_t lo, hi;
        cpu_thread_span(n, &lo, &hi);
        m = hi > lo ? absmax_span(x + lo, hi - lo) : 0.0f;
    }
    return m;
}

/* n elements converted between two convertible dtypes, split over the thread pool. */
void cpu_convert(void *ctx, void *dst, dtype_t to, const void *src, dtype_t from, int64_t n)
{
    (void)ctx;
    size_t in = dtype_size(from), out = dtype_size(to);
    if (n <= CPU_PARALLEL_MIN) {
        convert_span(dst, to, src, from, n);
        return;
    }
#pragma omp parallel
    {
        int64_t lo, hi;
        cpu_thread_span(n, &lo, &hi);
        if (hi > lo)
            convert_span((char *)dst + lo * (int64_t)out, to, (const char *)src + lo * (int64_t)in, from, hi - lo);
    }
}

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
