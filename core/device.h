// Device selection and memory: which device a run uses, its name, the CUDA caching allocator's
// settings (expandable segments, a memory cap) and peak memory (the caching allocator's peak on the
// GPU, peak resident set size on the CPU).
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
/// peak since reset_peak_memory, and the device's total memory; `available`, the most the allocator
/// could hold now (what it holds plus the driver's free bytes), lies below total by the CUDA context,
/// the libraries' own memory and other processes' (about 0.7 GiB of an H100 for one process).
struct GpuMemory {
  bool known = false;
  int64_t allocated = 0, peak = 0, total = 0, available = 0;
  int64_t reserved = 0;  // the caching allocator's segments, cached and private pools included
};
GpuMemory gpu_memory(const torch::Device& device);
/// Bytes as GiB for messages: two decimals from 1 GiB up ("33.04 GiB", "300 GiB"), three
/// significant digits below ("0.00412 GiB"), so a small figure is never "0 GiB".
std::string gib_text(double bytes);
/// Returns the allocator's cached, unused blocks to the driver (after an out-of-memory error).
void release_cached_memory(const torch::Device& device);

/// The CUDA caching allocator's settings a run asks for.
struct AllocatorOptions {
  /// Segments that grow in place (less fragmentation when shapes vary) instead of new ones.
  bool expandable_segments = false;
  /// The share of the device's memory the allocator may take, in (0, 1]; 1 = no cap.
  double memory_cap = 1.0;
};

/// What configure_cuda_allocator left in effect.
struct AllocatorSetup {
  bool expandable_segments = false;
  /// "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False" when that variable (or
  /// PYTORCH_ALLOC_CONF) names expandable_segments: it decides, whatever the options say.
  std::string environment;
};

/// `current`, a PYTORCH_ALLOC_CONF-style settings string, with its expandable_segments entry (if
/// any) replaced by one saying `expandable`; the other entries as they were, so a list value like
/// roundup_power2_divisions:[64:8,256:4] survives.
std::string allocator_settings_with_expandable(const std::string& current, bool expandable);

/// On CUDA, before the run allocates there: expandable segments on when asked (unless the
/// environment names them; LibTorch's other settings from the environment are kept), and the
/// allocator of `device` capped at memory_cap of its memory (past it an allocation raises
/// out-of-memory). On the CPU it changes nothing and returns the defaults.
AllocatorSetup configure_cuda_allocator(const torch::Device& device, const AllocatorOptions& options);

/// CPU cores this process may run on (its affinity mask, so `taskset` counts).
int allowed_cpu_count();

}  // namespace tt
