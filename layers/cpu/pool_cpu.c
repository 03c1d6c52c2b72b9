/* Pooling on the CPU: one output plane per iteration of a parallel loop; window
 * bounds are clipped once per output instead of testing every tap. */
#include <math.h>
#include <string.h>

#include "cpu_kernels.h"

static inline int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Taps i of a window starting at `start` with `dilation` that land in [0, size):
 * first_tap <= i < end_tap. Dilation 1 (the usual case) avoids the divisions. */
static inline int64_t first_tap(int64_t start, int64_t dilation)
{
    if (start >= 0)
        return 0;
    return dilation == 1 ? -start : (-start + dilation - 1) / dilation;
}

static inline int64_t end_tap(int64_t start, int64_t dilation, int64_t size, int64_t kernel)
{
    int64_t room = size - start;
    if (room <= 0)
        return 0;
    return clamp64(dilation == 1 ? room : (room + dilation - 1) / dilation, 0, kernel);
}

/* maxpool with dilation 1, one plane: for each output row, the column maxima of the
 * window's rows into t (t[k] is input column k - padding; -inf outside the input),
 * then the maxima of kw-wide windows of t at the stride. Both loops vectorise; the
 * usual windows (3 or 2 wide at stride 2, ResNet's and VGG's) get loops with the
 * stride a constant, which the compiler turns into even/odd shuffles instead of
 * gathers. One call per plane: the clone is chosen once, not once per row. */
CPU_ISA_CLONES
static void maxpool_plane_rows(const float *src, int64_t h, int64_t wd, float *t, int64_t tlen, const layer_params *p,
                               float *dst, int64_t oh, int64_t ow)
{
    int64_t pad = p->padding[1], kw = p->kernel[1], stride = p->stride[1];
    for (int64_t k = 0; k < tlen; k++)
        t[k] = -INFINITY;
    float *tc = t + pad;
    for (int64_t y = 0; y < oh; y++, dst += ow) {
        int64_t y0 = y * p->stride[0] - p->padding[0];
        int64_t i0 = first_tap(y0, 1), i1 = end_tap(y0, 1, h, p->kernel[0]);
        if (i1 <= i0) { /* a window wholly in the padding (ceil_mode) */
            for (int64_t x = 0; x < ow; x++)
                dst[x] = -INFINITY;
            continue;
        }
        const float *row = src + (y0 + i0) * wd;
        for (int64_t j = 0; j < wd; j++)
            tc[j] = row[j];
        for (int64_t i = 1; i < i1 - i0; i++) {
            row += wd;
#pragma omp simd
            for (int64_t j = 0; j < wd; j++)
                tc[j] = row[j] > tc[j] ? row[j] : tc[j];
        }
        if (stride == 2 && kw == 3) {
#pragma omp simd
            for (int64_t x = 0; x < ow; x++) {
                float a = t[2 * x], b = t[2 * x + 1], c = t[2 * x + 2];
                float m = b > a ? b : a;
                dst[x] = c > m ? c : m;
            }
        } else if (stride == 2 && kw == 2) {
#pragma omp simd
            for (int64_t x = 0; x < ow; x++) {
                float a = t[2 * x], b = t[2 * x + 1];
                dst[x] = b > a ? b : a;
            }
        } else {
#pragma omp simd
            for (int64_t x = 0; x < ow; x++) {
                float m = t[x * stride];
                for (int64_t k = 1; k < kw; k++)
                    m = t[x * stride + k] > m ? t[x * stride + k] : m;
                dst[x] = m;
            }
        }
    }
}

/* maxpool of one plane, tap by tap (dilation, or rows too wide for the row buffer). */
static void maxpool_plane_taps(const layer *l, const float *src, float *dst)
{
    const layer_params *p = &l->p;
    int64_t h = l->in.d[2], wd = l->in.d[3], oh = l->out.d[2], ow = l->out.d[3];
    int64_t dh = p->dilation[0], dw = p->dilation[1];
    for (int64_t y = 0; y < oh; y++) {
        int64_t y0 = y * p->stride[0] - p->padding[0];
        int64_t i0 = first_tap(y0, dh), i1 = end_tap(y0, dh, h, p->kernel[0]);
        for (int64_t x = 0; x < ow; x++) {
            int64_t x0 = x * p->stride[1] - p->padding[1];
            int64_t j0 = first_tap(x0, dw), j1 = end_tap(x0, dw, wd, p->kernel[1]);
            float m = -INFINITY;
            for (int64_t i = i0; i < i1; i++) {
                const float *row = src + (y0 + i * dh) * wd + x0;
                for (int64_t j = j0; j < j1; j++)
                    m = row[j * dw] > m ? row[j * dw] : m;
            }
            dst[y * ow + x] = m;
        }
    }
}

static void maxpool_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w_, void *out_)
{
    const float *w = w_;
    float *out = out_;
    const float *const *ins = (const float *const *)ins_;
    (void)env;
    const float *in = ins[0];
    (void)state, (void)w;
    const layer_params *p = &l->p;
    int64_t planes = l->in.d[0] * l->in.d[1], h = l->in.d[2], wd = l->in.d[3];
    int64_t oh = l->out.d[2], ow = l->out.d[3];
    /* the row buffer spans every column a window can reach, ceil_mode's included */
    int64_t tlen = (ow - 1) * p->stride[1] + p->kernel[1];
    if (tlen < p->padding[1] + wd)
        tlen = p->padding[1] + wd;
    bool rows_path = p->dilation[0] == 1 && p->dilation[1] == 1 && tlen <= 8192;
    CPU_OMP_IF(planes * oh * ow > CPU_PARALLEL_MIN / 4, "omp parallel",
        {
            float t[rows_path ? tlen : 1];
            _Pragma("omp for schedule(static)")
            for (int64_t pl = 0; pl < planes; pl++) {
                const float *src = in + pl * h * wd;
                float *dst = out + pl * oh * ow;
                if (!rows_path) {
                    maxpool_plane_taps(l, src, dst);
                    continue;
                }
                maxpool_plane_rows(src, h, wd, t, tlen, p, dst, oh, ow);
            }
        });
}

static void avgpool_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w_, void *out_)
{
    const float *w = w_;
    float *out = out_;
    const float *const *ins = (const float *const *)ins_;
    (void)env;
    const float *in = ins[0];
    (void)state, (void)w;
    const layer_params *p = &l->p;
    int64_t planes = l->in.d[0] * l->in.d[1], h = l->in.d[2], wd = l->in.d[3];
    int64_t oh = l->out.d[2], ow = l->out.d[3];
    CPU_OMP_IF(planes * oh * ow > CPU_PARALLEL_MIN / 4, "omp parallel for schedule(static)",
        for (int64_t pl = 0; pl < planes; pl++) {
            const float *src = in + pl * h * wd;
            float *dst = out + pl * oh * ow;
            for (int64_t y = 0; y < oh; y++) {
                int64_t ys = y * p->stride[0] - p->padding[0];
                int64_t ye = ys + p->kernel[0] < h + p->padding[0] ? ys + p->kernel[0] : h + p->padding[0];
                int64_t pad_h = ye - ys, y0 = clamp64(ys, 0, h), y1 = clamp64(ye, 0, h);
                for (int64_t x = 0; x < ow; x++) {
                    int64_t xs = x * p->stride[1] - p->padding[1];
                    int64_t xe = xs + p->kernel[1] < wd + p->padding[1] ? xs + p->kernel[1] : wd + p->padding[1];
                    int64_t pad_w = xe - xs, x0 = clamp64(xs, 0, wd), x1 = clamp64(xe, 0, wd);
                    float sum = 0.0f;
                    for (int64_t iy = y0; iy < y1; iy++)
                        for (int64_t ix = x0; ix < x1; ix++)
                            sum += src[iy * wd + ix];
                    int64_t div = p->count_include_pad ? pad_h * pad_w : (y1 - y0) * (x1 - x0);
                    dst[y * ow + x] = div ? sum / (float)div : 0.0f;
                }
            }
        });
}

/* Sixteen floats as one GCC vector: each clone lowers it to its widest registers
 * (one zmm, two ymm, four xmm). */
typedef float v16f __attribute__((vector_size(64)));

/* n floats into 16 lane sums (*acc) and the sum of those past the last full vector. */
static inline void lane_sums(const float *x, int64_t n, v16f *acc, float *tail)
{
    v16f a = {0};
    float t = 0.0f;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v16f v;
        memcpy(&v, x + i, sizeof v);
        a += v;
    }
    for (; i < n; i++)
        t += x[i];
    *acc = a, *tail = t;
}

/* The sum of n floats: 16 float lanes over blocks of 256 (16 terms per lane), the lanes
 * added pairwise, the blocks summed in double (a global pool of a 112x112 map sums
 * 12544 values, and one float sum drifts past 1e-6 of the mean). Written with a vector
 * type because `omp simd reduction` on floats keeps the lanes' order and adds them one
 * by one, which on a 7x7 map costs more than the loads. */
static inline double row_sum(const float *x, int64_t n)
{
    double s = 0.0;
    for (int64_t b = 0; b < n; b += 256) {
        v16f acc;
        float tail;
        lane_sums(x + b, n - b < 256 ? n - b : 256, &acc, &tail);
        v16f h8 = acc + __builtin_shufflevector(acc, acc, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
        v16f h4 = h8 + __builtin_shufflevector(h8, h8, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3);
        s += (double)((h4[0] + h4[2]) + (h4[1] + h4[3])) + (double)tail;
    }
    return s;
}

/* The 16 lanes of one plane's vector sum, 16 planes at once: four rounds of pairing
 * (two vectors holding k planes' partial sums each become one holding 2k planes' with
 * half the lanes each), 15 shuffle pairs for 16 planes where one plane's sum alone
 * takes 2 shuffles and 3 scalar adds, which made a 7x7 plane's reduction cost more
 * than its loads. Lane i of a[0] then holds plane i's sum. */
static inline void sum16(v16f *a)
{
    for (int j = 0; j < 8; j++)
        a[j] = __builtin_shufflevector(a[2 * j], a[2 * j + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
               __builtin_shufflevector(a[2 * j], a[2 * j + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29,
                                       30, 31);
    for (int j = 0; j < 4; j++)
        a[j] = __builtin_shufflevector(a[2 * j], a[2 * j + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
               __builtin_shufflevector(a[2 * j], a[2 * j + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30,
                                       31);
    for (int j = 0; j < 2; j++)
        a[j] = __builtin_shufflevector(a[2 * j], a[2 * j + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
               __builtin_shufflevector(a[2 * j], a[2 * j + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30,
                                       31);
    a[0] = __builtin_shufflevector(a[0], a[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) +
           __builtin_shufflevector(a[0], a[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}

/* Planes up to this many floats are summed 16 at a time in float (at most 16 terms per
 * lane, as in one of row_sum's blocks). */
#define GLOBAL_SMALL_PLANE 256

/* The global average of planes [p0, p1) of hw floats each: one call for the lot, so
 * a small map (ResNet's 7x7) pays the clone's dispatch once, not once per plane. */
CPU_ISA_CLONES
static void global_average(const float *src, int64_t hw, int64_t p0, int64_t p1, float *dst)
{
    int64_t pl = p0;
    if (hw <= GLOBAL_SMALL_PLANE) {
        float inv = 1.0f / (float)hw;
        for (; pl + 16 <= p1; pl += 16) {
            v16f acc[16], tails; /* the floats past the last full vector, per plane */
            for (int q = 0; q < 16; q++) {
                float t;
                lane_sums(src + (pl + q) * hw, hw, &acc[q], &t);
                tails[q] = t;
            }
            sum16(acc);
            v16f mean = (acc[0] + tails) * inv;
            memcpy(dst + pl, &mean, sizeof mean);
        }
    }
    for (; pl < p1; pl++)
        dst[pl] = (float)(row_sum(src + pl * hw, hw) / (double)hw);
}

/* One plane of an adaptive pool with windows of several sizes. */
CPU_ISA_CLONES
static void adaptive_plane(const float *src, int64_t h, int64_t wd, float *dst, int64_t oh, int64_t ow)
{
    for (int64_t y = 0; y < oh; y++) {
        int64_t y0 = y * h / oh, y1 = ((y + 1) * h + oh - 1) / oh;
        for (int64_t x = 0; x < ow; x++) {
            int64_t x0 = x * wd / ow, x1 = ((x + 1) * wd + ow - 1) / ow;
            double sum = 0.0; /* row_sum says why double */
            if (x0 == 0 && x1 == wd) /* whole rows: one contiguous run */
                sum = row_sum(src + y0 * wd, (y1 - y0) * wd);
            else
                for (int64_t iy = y0; iy < y1; iy++)
                    sum += row_sum(src + iy * wd + x0, x1 - x0);
            dst[y * ow + x] = (float)(sum / (double)((y1 - y0) * (x1 - x0)));
        }
    }
}

static void adaptive_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w_, void *out_)
{
    const float *w = w_;
    float *out = out_;
    const float *const *ins = (const float *const *)ins_;
    (void)env;
    const float *in = ins[0];
    (void)state, (void)w;
    int64_t planes = l->in.d[0] * l->in.d[1], h = l->in.d[2], wd = l->in.d[3];
    int64_t oh = l->out.d[2], ow = l->out.d[3];
    if (oh == 1 && ow == 1) {
        /* global: each thread one run of planes, from 4x the usual size: one thread sums
         * about 9 floats per ns and a 2-thread region costs ~3.3 us on the 2-core Zen 5
         * VM, so two threads break even near 60k floats (ResNet's 512x7x7 at batch 1:
         * 2.7 us on one thread, 4.0 on two) */
        CPU_OMP_IF(planes * h * wd > 4 * CPU_PARALLEL_MIN, "omp parallel",
            {
                int64_t lo, hi;
                cpu_thread_span(planes, &lo, &hi);
                global_average(in, h * wd, lo, hi, out);
            });
        return;
    }
    CPU_OMP_IF(planes * h * wd > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t pl = 0; pl < planes; pl++)
            adaptive_plane(in + pl * h * wd, h, wd, out + pl * oh * ow, oh, ow););
}

/* mean over [outer, size, inner]: the sums in double as row_sum's, inner in chunks of a
 * stack row (run allocates nothing). */
CPU_ISA_CLONES
static void mean_strided(const float *src, int64_t size, int64_t inner, float *dst)
{
    for (int64_t i0 = 0; i0 < inner; i0 += 64) {
        int64_t n = inner - i0 < 64 ? inner - i0 : 64;
        double acc[64] = {0};
        for (int64_t k = 0; k < size; k++) {
            const float *row = src + k * inner + i0;
            for (int64_t j = 0; j < n; j++)
                acc[j] += row[j];
        }
        for (int64_t j = 0; j < n; j++)
            dst[i0 + j] = (float)(acc[j] / (double)size);
    }
}

static void mean_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w_, void *out_)
{
    const float *in = ((const float *const *)ins_)[0];
    float *out = out_;
    (void)env, (void)state, (void)w_;
    int64_t outer, size, inner;
    layer_mean_dims(l, &outer, &size, &inner);
    if (inner == 1) { /* the trailing dims: each output one contiguous run, as the global pool */
        CPU_OMP_IF(outer * size > 4 * CPU_PARALLEL_MIN, "omp parallel",
            {
                int64_t lo, hi;
                cpu_thread_span(outer, &lo, &hi);
                global_average(in, size, lo, hi, out);
            });
        return;
    }
    CPU_OMP_IF(outer * size * inner > CPU_PARALLEL_MIN && outer > 1, "omp parallel for schedule(static)",
        for (int64_t o = 0; o < outer; o++)
            mean_strided(in + o * size * inner, size, inner, out + o * inner););
}

const backend_kernel cpu_maxpool2d_kernel = {.run = maxpool_run, .impl = "direct"};
const backend_kernel cpu_avgpool2d_kernel = {.run = avgpool_run, .impl = "direct"};
const backend_kernel cpu_adaptive_avgpool2d_kernel = {.run = adaptive_run, .impl = "direct"};
const backend_kernel cpu_mean_kernel = {.run = mean_run, .impl = "direct"};
