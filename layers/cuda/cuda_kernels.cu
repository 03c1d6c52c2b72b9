// The few kernels of our own for what cuDNN has no operation for: hardswish and
// hardsigmoid (element-wise), upsample's gather, whose source rows, columns and weights
// the host works out once at setup exactly as torch does (layers/upsample.c), and the
// pooling windows cuDNN cannot describe.
// Grid-stride loops; the launchers return the launch's error.
#include <cuda_runtime.h>
#include <stdint.h>

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
