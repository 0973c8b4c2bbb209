// Device selection and memory readings: which device a run uses, its name, and peak memory
// (CUDA caching-allocator peak on the GPU, peak resident set size on the CPU).
#pragma once

#include <torch/types.h>

#include <string>

namespace tt {

/// "auto" -> cuda:0 when LibTorch sees a GPU, else cpu; "cuda" without a GPU throws kConfig
/// naming `key`.
torch::Device resolve_device(const std::string& request, const std::string& key);

/// "NVIDIA H200 (139.8 GiB)" or "CPU (2 threads)".
std::string describe_device(const torch::Device& device);

/// Applies TELETRON_SDPA (auto | flash | cudnn | efficient | math): restricts
/// scaled_dot_product_attention to one backend, for benchmarking and debugging. Returns the
/// choice ("auto" when unset); an unknown value throws kConfig naming the variable.
std::string configure_attention_backend();

/// Peak memory in GiB since the last reset_peak_memory (GPU) or process start (CPU).
double peak_memory_gb(const torch::Device& device);
void reset_peak_memory(const torch::Device& device);

/// The CUDA caching allocator's bytes on `device` (known = false on the CPU): allocated now, the
/// peak since reset_peak_memory, and the device's total memory.
struct GpuMemory {
  bool known = false;
  int64_t allocated = 0, peak = 0, total = 0;
};
GpuMemory gpu_memory(const torch::Device& device);
/// Returns the allocator's cached, unused blocks to the driver (after an out-of-memory error).
void release_cached_memory(const torch::Device& device);

/// CPU cores this process may run on (its affinity mask, so `taskset` counts).
int allowed_cpu_count();

}  // namespace tt
