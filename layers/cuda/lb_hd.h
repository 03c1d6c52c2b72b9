/* LB_HD: a function both nvcc (on the device and the host) and the C compiler (in the
 * host's tests) compile, for the headers that hold the kernels' arithmetic
 * (llm_cuda_math.h, index_cuda_math.h). */
#ifndef LB_HD_H
#define LB_HD_H

#ifdef __CUDACC__
#define LB_HD __host__ __device__ __forceinline__
#else
#define LB_HD static inline
#endif

#endif
