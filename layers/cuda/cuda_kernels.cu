// The few kernels of our own for what cuDNN has no operation for: hardswish and
// hardsigmoid (element-wise), upsample's gather, whose source rows, columns and weights
// the host works out once at setup exactly as torch does (layers/upsample.c), the
// pooling windows cuDNN cannot describe, the transformer kinds' layernorm, gelu and moves,
// and the decoder kinds (embedding, rmsnorm, rope, attention: llm_cuda.c).
// Grid-stride loops; the launchers return the launch's error.
#include <cuda_runtime.h>
#include <stdint.h>

#include "index_cuda_math.h"
#include "llm_cuda_math.h"

__device__ __forceinline__ float hsig(float x) { return fminf(fmaxf(x + 3.0f, 0.0f), 6.0f) / 6.0f; }

__global__ void hard_activation_kernel(int swish, const float *__restrict__ in, float *__restrict__ out, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float x = in[i];
        out[i] = swish ? x * hsig(x) : hsig(x);
    }
}

static unsigned blocks_for(int64_t n)
{
    int64_t b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

extern "C" cudaError_t cuda_hard_activation_launch(cudaStream_t s, int swish, const float *in, float *out, int64_t n)
{
    hard_activation_kernel<<<blocks_for(n), 256, 0, s>>>(swish, in, out, n);
    return cudaGetLastError();
}

__global__ void upsample_kernel(const float *__restrict__ in, float *__restrict__ out, int64_t planes, int64_t h,
                                int64_t w, int64_t oh, int64_t ow, const int64_t *__restrict__ y0,
                                const int64_t *__restrict__ y1, const int64_t *__restrict__ x0,
                                const int64_t *__restrict__ x1, const float *__restrict__ ly,
                                const float *__restrict__ lx, int bilinear)
{
    int64_t n = planes * oh * ow;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t x = i % ow, y = (i / ow) % oh, p = i / (oh * ow);
        const float *src = in + p * h * w;
        if (!bilinear) {
            out[i] = src[y0[y] * w + x0[x]];
            continue;
        }
        const float *r0 = src + y0[y] * w, *r1 = src + y1[y] * w;
        float top = r0[x0[x]] + lx[x] * (r0[x1[x]] - r0[x0[x]]);
        float bot = r1[x0[x]] + lx[x] * (r1[x1[x]] - r1[x0[x]]);
        out[i] = top + ly[y] * (bot - top);
    }
}

extern "C" cudaError_t cuda_upsample_launch(cudaStream_t s, const float *in, float *out, int64_t planes, int64_t h,
                                            int64_t w, int64_t oh, int64_t ow, const int64_t *y0, const int64_t *y1,
                                            const int64_t *x0, const int64_t *x1, const float *ly, const float *lx,
                                            int bilinear)
{
    upsample_kernel<<<blocks_for(planes * oh * ow), 256, 0, s>>>(in, out, planes, h, w, oh, ow, y0, y1, x0, x1, ly, lx,
                                                                 bilinear);
    return cudaGetLastError();
}

// Pooling where cuDNN has no mode (ceil_mode windows, dilation, adaptive pooling with
// uneven windows). Windows are rectangles, so the host describes each axis once: for
// output index o, the first valid input index, the number of valid taps (stepping by the
// dilation) and the axis's share of the divisor (avg: the product of the two).
__global__ void pool_kernel(const float *__restrict__ in, float *__restrict__ out, int64_t planes, int64_t h,
                            int64_t w, int64_t oh, int64_t ow, const int64_t *__restrict__ fy,
                            const int64_t *__restrict__ ny, const float *__restrict__ dy,
                            const int64_t *__restrict__ fx, const int64_t *__restrict__ nx,
                            const float *__restrict__ dx, int64_t dil_y, int64_t dil_x, int is_max)
{
    int64_t n = planes * oh * ow;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t x = i % ow, y = (i / ow) % oh, p = i / (oh * ow);
        const float *src = in + p * h * w + fy[y] * w + fx[x];
        int64_t ry = ny[y], rx = nx[x];
        if (is_max) {
            float m = -INFINITY;
            for (int64_t a = 0; a < ry; a++)
                for (int64_t b = 0; b < rx; b++)
                    m = fmaxf(m, src[a * dil_y * w + b * dil_x]);
            out[i] = m;
        } else {
            double s = 0.0;
            for (int64_t a = 0; a < ry; a++)
                for (int64_t b = 0; b < rx; b++)
                    s += src[a * w + b];
            float div = dy[y] * dx[x];
            out[i] = div > 0.0f ? (float)(s / div) : 0.0f;
        }
    }
}

extern "C" cudaError_t cuda_pool_launch(cudaStream_t s, const float *in, float *out, int64_t planes, int64_t h,
                                        int64_t w, int64_t oh, int64_t ow, const int64_t *fy, const int64_t *ny,
                                        const float *dy, const int64_t *fx, const int64_t *nx, const float *dx,
                                        int64_t dil_y, int64_t dil_x, int is_max)
{
    pool_kernel<<<blocks_for(planes * oh * ow), 256, 0, s>>>(in, out, planes, h, w, oh, ow, fy, ny, dy, fx, nx, dx,
                                                             dil_y, dil_x, is_max);
    return cudaGetLastError();
}

// layernorm over the last dimension: one block of 256 threads per row (grid-stride over
// rows), two passes over the row (mean, then variance) reduced through warp shuffles
// and shared memory; gamma and beta may be NULL.
__device__ __forceinline__ float block_sum(float v, float *shared)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads(); // shared is reused between calls
    if (lane == 0)
        shared[warp] = v;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++)
        total += shared[w];
    return total;
}

__global__ void layernorm_kernel(const float *__restrict__ in, float *__restrict__ out, int64_t rows, int64_t d,
                                 const float *__restrict__ gamma, const float *__restrict__ beta, float eps)
{
    __shared__ float shared[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *x = in + r * d;
        float *y = out + r * d;
        float s = 0.0f;
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
            s += x[i];
        float mean = block_sum(s, shared) / (float)d;
        float q = 0.0f;
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
            q += (x[i] - mean) * (x[i] - mean);
        float rstd = rsqrtf(block_sum(q, shared) / (float)d + eps);
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
            float v = (x[i] - mean) * rstd;
            if (gamma)
                v *= gamma[i];
            if (beta)
                v += beta[i];
            y[i] = v;
        }
    }
}

extern "C" cudaError_t cuda_layernorm_launch(cudaStream_t s, const float *in, float *out, int64_t rows, int64_t d,
                                             const float *gamma, const float *beta, float eps)
{
    unsigned grid = (unsigned)(rows < (1 << 20) ? rows : (1 << 20));
    layernorm_kernel<<<grid ? grid : 1, 256, 0, s>>>(in, out, rows, d, gamma, beta, eps);
    return cudaGetLastError();
}

__global__ void gelu_kernel(const float *__restrict__ in, float *__restrict__ out, int64_t n, int tanh_approx)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float x = in[i];
        out[i] = tanh_approx ? 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)))
                             : 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
    }
}

extern "C" cudaError_t cuda_gelu_launch(cudaStream_t s, const float *in, float *out, int64_t n, int tanh_approx)
{
    gelu_kernel<<<blocks_for(n), 256, 0, s>>>(in, out, n, tanh_approx);
    return cudaGetLastError();
}

// transpose: the input as [outer, a, mid, b, inner], the output [outer, b, mid, a, inner];
// one thread per output element.
__global__ void transpose_kernel(const float *__restrict__ in, float *__restrict__ out, int64_t outer, int64_t a,
                                 int64_t mid, int64_t b, int64_t inner)
{
    int64_t n = outer * a * mid * b * inner;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n; t += (int64_t)gridDim.x * blockDim.x) {
        int64_t k = t % inner, i = (t / inner) % a, m = (t / (inner * a)) % mid, j = (t / (inner * a * mid)) % b,
                o = t / (inner * a * mid * b);
        out[t] = in[(((o * a + i) * mid + m) * b + j) * inner + k];
    }
}

extern "C" cudaError_t cuda_transpose_launch(cudaStream_t s, const float *in, float *out, int64_t outer, int64_t a,
                                             int64_t mid, int64_t b, int64_t inner)
{
    transpose_kernel<<<blocks_for(outer * a * mid * b * inner), 256, 0, s>>>(in, out, outer, a, mid, b, inner);
    return cudaGetLastError();
}

// out = in + w, w repeated every period elements (pos_embedding: [S, D] over each sample)
__global__ void add_periodic_kernel(const float *__restrict__ in, const float *__restrict__ w, float *__restrict__ out,
                                    int64_t n, int64_t period)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = in[i] + w[i % period];
}

extern "C" cudaError_t cuda_add_periodic_launch(cudaStream_t s, const float *in, const float *w, float *out, int64_t n,
                                                int64_t period)
{
    add_periodic_kernel<<<blocks_for(n), 256, 0, s>>>(in, w, out, n, period);
    return cudaGetLastError();
}

// class_token: out[b, 0, :] = token, out[b, 1 + t, :] = in[b, t, :]
__global__ void class_token_kernel(const float *__restrict__ in, const float *__restrict__ token,
                                   float *__restrict__ out, int64_t n, int64_t s, int64_t d)
{
    int64_t total = n * (s + 1) * d;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t k = i % d, t = (i / d) % (s + 1), b = i / (d * (s + 1));
        out[i] = t == 0 ? token[k] : in[(b * s + t - 1) * d + k];
    }
}

extern "C" cudaError_t cuda_class_token_launch(cudaStream_t st, const float *in, const float *token, float *out,
                                               int64_t n, int64_t s, int64_t d)
{
    class_token_kernel<<<blocks_for(n * (s + 1) * d), 256, 0, st>>>(in, token, out, n, s, d);
    return cudaGetLastError();
}

// ---- dtypes: conversions between fp32, bf16 and fp16, and a bias added to 16-bit rows ----

#include <cuda_bf16.h>
#include <cuda_fp16.h>

// The element types by layerbench's dtype_t values (layers/dtype.h): 0 fp32 (and 1, tf32,
// stored as fp32), 2 bf16, 3 fp16.
__device__ __forceinline__ float load_as_float(const void *p, int64_t i, int t)
{
    if (t == 2)
        return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (t == 3)
        return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

__device__ __forceinline__ void store_from_float(void *p, int64_t i, int t, float v)
{
    if (t == 2)
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else if (t == 3)
        ((__half *)p)[i] = __float2half_rn(v);
    else
        ((float *)p)[i] = v;
}

__global__ void convert_kernel(void *dst, int to, const void *src, int from, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        store_from_float(dst, i, to, load_as_float(src, i, from));
}

extern "C" cudaError_t cuda_convert_launch(cudaStream_t s, void *dst, int to, const void *src, int from, int64_t n)
{
    convert_kernel<<<blocks_for(n), 256, 0, s>>>(dst, to, src, from, n);
    return cudaGetLastError();
}

__global__ void bias_rows_kernel(void *y, int t, const float *__restrict__ bias, int64_t rows, int64_t cols)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < rows * cols;
         i += (int64_t)gridDim.x * blockDim.x)
        store_from_float(y, i, t, load_as_float(y, i, t) + bias[i % cols]);
}

extern "C" cudaError_t cuda_bias_rows_launch(cudaStream_t s, void *y, int t, const float *bias, int64_t rows,
                                             int64_t cols)
{
    bias_rows_kernel<<<blocks_for(rows * cols), 256, 0, s>>>(y, t, bias, rows, cols);
    return cudaGetLastError();
}

// ---- element-wise ReLU and add, vectorised ------------------------------------------------
// cuDNN's activation and OpTensor calls took 1.16x to 1.5x PyTorch's time on an H100
// (results/h100-80gb-hbm3): PyTorch's element-wise kernels load and store 16 bytes per
// thread. These do the same where every pointer is 16-byte aligned and n a multiple of 4
// (float4), and one float per thread otherwise.

// torch.relu propagates NaN (fmaxf would not): x > 0 ? x : (x != x ? x : 0)
__device__ __forceinline__ float relu1(float x) { return x > 0.0f || x != x ? x : 0.0f; }

__global__ void relu_kernel(const float *__restrict__ in, float *__restrict__ out, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = relu1(in[i]);
}

__global__ void relu4_nan_kernel(const float4 *__restrict__ in, float4 *__restrict__ out, int64_t n4)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        float4 v = in[i];
        out[i] = make_float4(relu1(v.x), relu1(v.y), relu1(v.z), relu1(v.w));
    }
}

__global__ void add4_kernel(const float4 *__restrict__ a, const float4 *__restrict__ b, float4 *__restrict__ out,
                            int64_t n4)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        float4 x = a[i], y = b[i];
        out[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
}

__global__ void add_kernel(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ out, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

extern "C" cudaError_t cuda_relu_launch(cudaStream_t s, const float *in, float *out, int64_t n)
{
    if (n % 4 == 0 && aligned16(in) && aligned16(out))
        relu4_nan_kernel<<<blocks_for(n / 4), 256, 0, s>>>((const float4 *)in, (float4 *)out, n / 4);
    else
        relu_kernel<<<blocks_for(n), 256, 0, s>>>(in, out, n);
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_add_launch(cudaStream_t s, const float *a, const float *b, float *out, int64_t n)
{
    if (n % 4 == 0 && aligned16(a) && aligned16(b) && aligned16(out))
        add4_kernel<<<blocks_for(n / 4), 256, 0, s>>>((const float4 *)a, (const float4 *)b, (float4 *)out, n / 4);
    else
        add_kernel<<<blocks_for(n), 256, 0, s>>>(a, b, out, n);
    return cudaGetLastError();
}

// ---- linear's bias, written into each output row before a GEMM with beta = 1 -----------
// (what PyTorch's addmm does: the bias copied over the output, then one GEMM)

__global__ void fill_rows_kernel(float *__restrict__ y, const float *__restrict__ bias, int64_t rows, int64_t cols)
{
    int64_t n = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = bias[i % cols];
}

__global__ void fill_rows4_kernel(float4 *__restrict__ y, const float4 *__restrict__ bias, int64_t rows, int64_t cols4)
{
    int64_t n = rows * cols4;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = bias[i % cols4];
}

extern "C" cudaError_t cuda_fill_rows_launch(cudaStream_t s, float *y, const float *bias, int64_t rows, int64_t cols)
{
    if (cols % 4 == 0 && aligned16(y) && aligned16(bias))
        fill_rows4_kernel<<<blocks_for(rows * cols / 4), 256, 0, s>>>((float4 *)y, (const float4 *)bias, rows, cols / 4);
    else
        fill_rows_kernel<<<blocks_for(rows * cols), 256, 0, s>>>(y, bias, rows, cols);
    return cudaGetLastError();
}

// ---- a convolution's bias in bf16 or fp16: y[n][c][hw] += bias[c], summed in fp32 ----------

__global__ void bias_channels_kernel(void *y, int t, const float *__restrict__ bias, int64_t total, int64_t c,
                                     int64_t hw)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        store_from_float(y, i, t, load_as_float(y, i, t) + bias[(i / hw) % c]);
}

extern "C" cudaError_t cuda_bias_channels_launch(cudaStream_t s, void *y, int t, const float *bias, int64_t n,
                                                 int64_t c, int64_t hw)
{
    bias_channels_kernel<<<blocks_for(n * c * hw), 256, 0, s>>>(y, t, bias, n * c * hw, c, hw);
    return cudaGetLastError();
}

// ---- the decoder kinds (layers/llm.c says what each computes) -----------------------------
// On the layer's own dtype (t, as load_as_float reads it), sums in fp32. The arithmetic
// that decides what is read and how it is combined lives in llm_cuda_math.h, which the host
// tests against the plain-C reference (tests/test_cuda_plan.c).

// embedding: one block per token id (grid-stride), its row copied by the block's threads
__global__ void embedding_kernel(const void *ids, const void *table, void *out, int t, int64_t n, int64_t d,
                                 int64_t vocab)
{
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        int64_t row = lb_token_id(load_as_float(ids, i, t), vocab);
        for (int64_t k = threadIdx.x; k < d; k += blockDim.x)
            store_from_float(out, i * d + k, t, load_as_float(table, row * d + k, t));
    }
}

extern "C" cudaError_t cuda_embedding_launch(cudaStream_t s, const void *ids, const void *table, void *out, int t,
                                             int64_t n, int64_t d, int64_t vocab)
{
    unsigned grid = (unsigned)(n < 65535 ? n : 65535);
    embedding_kernel<<<grid ? grid : 1, 256, 0, s>>>(ids, table, out, t, n, d, vocab);
    return cudaGetLastError();
}

// rmsnorm: one block of 256 threads per row (grid-stride), x / rms(x) * (w + offset)
__global__ void rmsnorm_kernel(const void *in, const void *w, void *out, int t, int64_t rows, int64_t d, float eps,
                               float offset)
{
    __shared__ float shared[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        float q = 0.0f;
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
            float x = load_as_float(in, r * d + i, t);
            q += x * x;
        }
        float inv = rsqrtf(block_sum(q, shared) / (float)d + eps);
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
            store_from_float(out, r * d + i, t,
                             load_as_float(in, r * d + i, t) * inv * (load_as_float(w, i, t) + offset));
    }
}

extern "C" cudaError_t cuda_rmsnorm_launch(cudaStream_t s, const void *in, const void *w, void *out, int t,
                                           int64_t rows, int64_t d, float eps, float offset)
{
    unsigned grid = (unsigned)(rows < (1 << 20) ? rows : (1 << 20));
    rmsnorm_kernel<<<grid ? grid : 1, 256, 0, s>>>(in, w, out, t, rows, d, eps, offset);
    return cudaGetLastError();
}

// rope: one thread per pair of a head's dimensions; cs holds each (token, pair)'s cosine
// then sine, the attention factor in them, computed on the host as the reference does
__global__ void rope_kernel(const void *in, void *out, int t, const float *__restrict__ cs, int64_t rows,
                            int64_t tokens, int64_t heads, int64_t d, int interleaved)
{
    int64_t half = d / 2, pairs = rows * heads * half;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < pairs; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e % half, head = e / half, tok = (head / heads) % tokens;
        int64_t base = head * d, u = interleaved ? 2 * i : i, v = interleaved ? 2 * i + 1 : i + half;
        float c = cs[(tok * half + i) * 2], sn = cs[(tok * half + i) * 2 + 1];
        float xu = load_as_float(in, base + u, t), xv = load_as_float(in, base + v, t);
        store_from_float(out, base + u, t, xu * c - xv * sn);
        store_from_float(out, base + v, t, xv * c + xu * sn);
    }
}

extern "C" cudaError_t cuda_rope_launch(cudaStream_t s, const void *in, void *out, int t, const float *cs,
                                        int64_t rows, int64_t tokens, int64_t heads, int64_t d, int interleaved)
{
    rope_kernel<<<blocks_for(rows * heads * (d / 2)), 256, 0, s>>>(in, out, t, cs, rows, tokens, heads, d,
                                                                    interleaved);
    return cudaGetLastError();
}

// attention: block (query, split) of a.n * a.t * a.h queries, each query's keys split over
// gridDim.y blocks (flash-decoding: batch 1's decode step fills the GPU), and a block's
// share over its warps; a warp's lanes hold the head's dimensions (LB_ATTN_LANE_DIMS each),
// every key's dot product reduced through shuffles, an online softmax per
// warp. The warps merge in shared memory; one split writes the output, more write their
// (max, sum, accumulator) into part for attention_merge_kernel.
__global__ void attention_kernel(const void *q, const void *k, const void *v, const void *cache, const void *sinks,
                                 void *out, float *part, int t, lb_attn a)
{
    extern __shared__ float sh[]; // per warp: d accumulators, max, sum
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    int64_t query = blockIdx.x, hh = query % a.h, tt = (query / a.h) % a.t, b = query / (a.h * a.t);
    int64_t g = hh / (a.h / a.hkv), qo = ((b * a.t + tt) * a.h + hh) * a.d;
    float qv[LB_ATTN_LANE_DIMS], acc[LB_ATTN_LANE_DIMS];
    for (int r = 0; r < LB_ATTN_LANE_DIMS; r++) {
        int64_t i = lane + 32 * r;
        qv[r] = i < a.d ? load_as_float(q, qo + i, t) : 0.0f;
        acc[r] = 0.0f;
    }
    int64_t lo, hi, from, to, first, last;
    lb_attn_keys(&a, tt, &lo, &hi);
    lb_split(lo, hi, blockIdx.y, gridDim.y, &from, &to);
    lb_split(from, to, warp, warps, &first, &last);
    float m = -INFINITY, l = 0.0f;
    for (int64_t j = first; j <= last; j++) {
        int cached;
        int64_t ko = lb_attn_kv_at(&a, 0, b, g, j, &cached);
        const void *kp = cached ? cache : k;
        float dot = 0.0f;
        for (int r = 0; r < LB_ATTN_LANE_DIMS; r++) {
            int64_t i = lane + 32 * r;
            if (i < a.d)
                dot += qv[r] * load_as_float(kp, ko + i, t);
        }
        for (int o = 16; o > 0; o >>= 1)
            dot += __shfl_xor_sync(0xffffffffu, dot, o);
        float p, f = lb_online_push(&m, &l, lb_attn_score(&a, dot), &p);
        int64_t vo = lb_attn_kv_at(&a, 1, b, g, j, &cached);
        const void *vp = cached ? cache : v;
        for (int r = 0; r < LB_ATTN_LANE_DIMS; r++) {
            int64_t i = lane + 32 * r;
            if (i < a.d)
                acc[r] = acc[r] * f + p * load_as_float(vp, vo + i, t);
        }
    }
    float *mine = sh + warp * (a.d + 2);
    for (int r = 0; r < LB_ATTN_LANE_DIMS; r++) {
        int64_t i = lane + 32 * r;
        if (i < a.d)
            mine[i] = acc[r];
    }
    if (lane == 0)
        mine[a.d] = m, mine[a.d + 1] = l;
    __syncthreads();
    if (warp)
        return;
    float big_m = -INFINITY, big_l = 0.0f;
    for (int r = 0; r < LB_ATTN_LANE_DIMS; r++)
        acc[r] = 0.0f;
    for (int w = 0; w < warps; w++) {
        const float *theirs = sh + w * (a.d + 2);
        float f2, f = lb_online_merge(&big_m, &big_l, theirs[a.d], theirs[a.d + 1], &f2);
        for (int r = 0; r < LB_ATTN_LANE_DIMS; r++) {
            int64_t i = lane + 32 * r;
            if (i < a.d)
                acc[r] = acc[r] * f + theirs[i] * f2;
        }
    }
    if (gridDim.y > 1) { // this split's share, merged by attention_merge_kernel
        float *p = part + (query * gridDim.y + blockIdx.y) * (a.d + 2);
        for (int r = 0; r < LB_ATTN_LANE_DIMS; r++) {
            int64_t i = lane + 32 * r;
            if (i < a.d)
                p[i] = acc[r];
        }
        if (lane == 0)
            p[a.d] = big_m, p[a.d + 1] = big_l;
        return;
    }
    float f = 1.0f, f2;
    if (sinks) // the head's sink: a logit in the denominator only
        f = lb_online_merge(&big_m, &big_l, load_as_float(sinks, hh, t), 1.0f, &f2);
    for (int r = 0; r < LB_ATTN_LANE_DIMS; r++) {
        int64_t i = lane + 32 * r;
        if (i < a.d)
            store_from_float(out, qo + i, t, acc[r] * f / big_l);
    }
}

// the splits of each query merged, one warp per query
__global__ void attention_merge_kernel(const float *__restrict__ part, const void *sinks, void *out, int t, lb_attn a,
                                       int splits)
{
    int lane = threadIdx.x & 31;
    int64_t query = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
    if (query >= a.n * a.t * a.h)
        return;
    int64_t hh = query % a.h, tt = (query / a.h) % a.t, b = query / (a.h * a.t), qo = ((b * a.t + tt) * a.h + hh) * a.d;
    float acc[LB_ATTN_LANE_DIMS], m = -INFINITY, l = 0.0f, f2, f;
    for (int r = 0; r < LB_ATTN_LANE_DIMS; r++)
        acc[r] = 0.0f;
    for (int s = 0; s < splits; s++) {
        const float *p = part + (query * splits + s) * (a.d + 2);
        f = lb_online_merge(&m, &l, p[a.d], p[a.d + 1], &f2);
        for (int r = 0; r < LB_ATTN_LANE_DIMS; r++) {
            int64_t i = lane + 32 * r;
            if (i < a.d)
                acc[r] = acc[r] * f + p[i] * f2;
        }
    }
    f = 1.0f;
    if (sinks)
        f = lb_online_merge(&m, &l, load_as_float(sinks, hh, t), 1.0f, &f2);
    for (int r = 0; r < LB_ATTN_LANE_DIMS; r++) {
        int64_t i = lane + 32 * r;
        if (i < a.d)
            store_from_float(out, qo + i, t, acc[r] * f / l);
    }
}

extern "C" cudaError_t cuda_attention_launch(cudaStream_t s, const void *q, const void *k, const void *v,
                                             const void *cache, const void *sinks, void *out, float *part, int t,
                                             const lb_attn *a, int splits, int warps)
{
    int64_t queries = a->n * a->t * a->h;
    dim3 grid((unsigned)queries, (unsigned)splits);
    size_t shared = (size_t)warps * (size_t)(a->d + 2) * sizeof(float);
    attention_kernel<<<grid, 32 * warps, shared, s>>>(q, k, v, cache, sinks, out, part, t, *a);
    if (splits > 1 && cudaPeekAtLastError() == cudaSuccess)
        attention_merge_kernel<<<(unsigned)((queries + 7) / 8), 256, 0, s>>>(part, sinks, out, t, *a, splits);
    return cudaGetLastError();
}

// timing.stream's read: every 16-byte vector once, grid-stride, summed; written out only
// when the sum is NaN, which the compiler cannot know, so no load is left out
__global__ void read_kernel(const float4 *__restrict__ p, int64_t n16, float *sink)
{
    float sum = 0.0f;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n16; i += (int64_t)gridDim.x * blockDim.x) {
        float4 v = __ldcs(p + i);
        sum += (v.x + v.y) + (v.z + v.w);
    }
    if (sum != sum)
        *sink = sum;
}

extern "C" cudaError_t cuda_read_launch(cudaStream_t s, const void *buf, int64_t n16, float *sink, int blocks)
{
    read_kernel<<<blocks > 0 ? blocks : 1, 256, 0, s>>>((const float4 *)buf, n16, sink);
    return cudaGetLastError();
}

// ---- the kinds of Swin, MaxViT, UNet and DiT (vision_cuda.c) ------------------------------
// The moves (roll, patch_merge, window_partition, window_merge): a thread per output
// element, copied in the layer's dtype from the element index_cuda_math.h names (0 for
// patch_merge's padding), which the host tests against the references.
__global__ void move_kernel(const void *in, void *out, int t, lb_move m, int64_t n)
{
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < n; o += (int64_t)gridDim.x * blockDim.x) {
        int64_t src = lb_move_source(&m, o);
        store_from_float(out, o, t, src < 0 ? 0.0f : load_as_float(in, src, t));
    }
}

extern "C" cudaError_t cuda_move_launch(cudaStream_t s, const void *in, void *out, int t, const lb_move *m, int64_t n)
{
    move_kernel<<<blocks_for(n), 256, 0, s>>>(in, out, t, *m, n);
    return cudaGetLastError();
}

// add and mul with numpy broadcasting, fp32: a thread per output element
__global__ void broadcast_kernel(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ out,
                                 int mul, lb_dims da, lb_dims db, lb_dims dout, int64_t n)
{
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < n; o += (int64_t)gridDim.x * blockDim.x) {
        float x = a[lb_broadcast_index(&da, &dout, o)], y = b[lb_broadcast_index(&db, &dout, o)];
        out[o] = mul ? x * y : x + y;
    }
}

extern "C" cudaError_t cuda_broadcast_launch(cudaStream_t s, const float *a, const float *b, float *out, int mul,
                                             const lb_dims *da, const lb_dims *db, const lb_dims *dout)
{
    int64_t n = 1;
    for (int i = 0; i < dout->rank; i++)
        n *= dout->d[i];
    broadcast_kernel<<<blocks_for(n), 256, 0, s>>>(a, b, out, mul, *da, *db, *dout, n);
    return cudaGetLastError();
}

// groupnorm: one block of 256 threads per (sample, group) (grid-stride), whose channels
// are one contiguous run of run = C / groups x spatial elements: the mean, then the
// variance (two passes, as layernorm), then each element scaled with its channel's
// gamma and beta (affine) in the layer's dtype t
__global__ void groupnorm_kernel(const void *in, const void *w, void *out, int t, int64_t blocks, int64_t groups,
                                 int64_t cg, int64_t spatial, int64_t c, float eps, int affine)
{
    __shared__ float shared[32];
    int64_t run = cg * spatial;
    for (int64_t blk = blockIdx.x; blk < blocks; blk += gridDim.x) {
        int64_t base = blk * run;
        float s = 0.0f;
        for (int64_t i = threadIdx.x; i < run; i += blockDim.x)
            s += load_as_float(in, base + i, t);
        float mean = block_sum(s, shared) / (float)run;
        float q = 0.0f;
        for (int64_t i = threadIdx.x; i < run; i += blockDim.x) {
            float v = load_as_float(in, base + i, t) - mean;
            q += v * v;
        }
        float rstd = rsqrtf(block_sum(q, shared) / (float)run + eps);
        for (int64_t i = threadIdx.x; i < run; i += blockDim.x) {
            float y = (load_as_float(in, base + i, t) - mean) * rstd;
            if (affine) {
                int64_t ch = (blk % groups) * cg + i / spatial;
                y = y * load_as_float(w, ch, t) + load_as_float(w, c + ch, t);
            }
            store_from_float(out, base + i, t, y);
        }
    }
}

extern "C" cudaError_t cuda_groupnorm_launch(cudaStream_t s, const void *in, const void *w, void *out, int t, int64_t n,
                                             int64_t groups, int64_t cg, int64_t spatial, float eps, int affine)
{
    int64_t blocks = n * groups;
    unsigned grid = (unsigned)(blocks < (1 << 20) ? blocks : (1 << 20));
    groupnorm_kernel<<<grid ? grid : 1, 256, 0, s>>>(in, w, out, t, blocks, groups, cg, spatial, groups * cg, eps,
                                                     affine);
    return cudaGetLastError();
}

// scale_shift: scale x + shift, element-wise in the layer's dtype
__global__ void scale_shift_kernel(const void *in, void *out, int t, float scale, float shift, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        store_from_float(out, i, t, load_as_float(in, i, t) * scale + shift);
}

extern "C" cudaError_t cuda_scale_shift_launch(cudaStream_t s, const void *in, void *out, int t, float scale,
                                               float shift, int64_t n)
{
    scale_shift_kernel<<<blocks_for(n), 256, 0, s>>>(in, out, t, scale, shift, n);
    return cudaGetLastError();
}
