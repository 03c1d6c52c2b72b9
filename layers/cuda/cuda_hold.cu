// The kernel that holds the cuda backend's stream while a sample's launches are queued
// (backend hold, see cuda_env.h): the device starts the timed work only once the host
// has queued all of it, so the host's per-launch cost is not timed. The wait is bounded:
// if the host never releases it (a launch queue that filled up), the kernel gives up
// after timeout_ns and says so through *timed_out.
#include <cuda_runtime.h>

__global__ void cuda_hold_kernel(const volatile int *release, volatile int *timed_out, unsigned long long timeout_ns)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    while (!*release) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now - start > timeout_ns) {
            *timed_out = 1;
            return;
        }
    }
}

extern "C" cudaError_t cuda_hold_launch(cudaStream_t stream, const volatile int *release, volatile int *timed_out,
                                        unsigned long long timeout_ns)
{
    cuda_hold_kernel<<<1, 1, 0, stream>>>(release, timed_out, timeout_ns);
    return cudaGetLastError();
}
