// Spin-wait kernel (see spin.cuh): a volatile poll of a flag in device memory, bounded by the GPU's
// nanosecond global timer so that a test whose flag is never written fails instead of hanging.
#include "cuda/spin.cuh"

namespace tt::kernels {

static __device__ uint64_t global_time_ns() {
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}

static __global__ void spin_until_set_kernel(const int32_t* flag, int32_t* timed_out, int64_t timeout_ns) {
  const volatile int32_t* poll = flag;
  const uint64_t start = global_time_ns();
  int32_t gave_up = 0;
  while (*poll == 0) {
    if (global_time_ns() - start > static_cast<uint64_t>(timeout_ns)) {
      gave_up = 1;
      break;
    }
    __nanosleep(1000);
  }
  __threadfence();
  *timed_out = gave_up;
}

cudaError_t spin_until_set(const int32_t* flag, int32_t* timed_out, int64_t timeout_ns, cudaStream_t stream) {
  spin_until_set_kernel<<<1, 1, 0, stream>>>(flag, timed_out, timeout_ns);
  return cudaGetLastError();
}

static __global__ void busy_for_kernel(int64_t duration_ns) {
  const uint64_t start = global_time_ns();
  while (global_time_ns() - start < static_cast<uint64_t>(duration_ns)) __nanosleep(1000);
}

cudaError_t busy_for(int64_t duration_ns, cudaStream_t stream) {
  busy_for_kernel<<<1, 1, 0, stream>>>(duration_ns);
  return cudaGetLastError();
}

}  // namespace tt::kernels
