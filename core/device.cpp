// Device selection and memory readings (see device.h).
#include "core/device.h"

#include <algorithm>
#include <thread>
#include <sched.h>
#include <sys/resource.h>

#include <cstdlib>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "core/errors.h"

#ifdef TELETRON_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime_api.h>
#endif

namespace tt {

torch::Device resolve_device(const std::string& request, const std::string& key) {
  const bool have_cuda = torch::cuda::is_available();
  if (request == "cpu") return torch::Device(torch::kCPU);
  if (request == "cuda" || request == "auto") {
    if (have_cuda) return torch::Device(torch::kCUDA, 0);
    TT_CHECK_HINT(request == "auto", ErrorCode::kConfig, "use device: auto or cpu on machines without a GPU",
                  key, ": cuda requested but LibTorch sees no CUDA device");
    return torch::Device(torch::kCPU);
  }
  throw Error(ErrorCode::kConfig, str_cat(key, ": expected auto, cpu or cuda, got `", request, "`"));
}

std::string describe_device(const torch::Device& device) {
  if (device.is_cpu()) return str_cat("CPU (", at::get_num_threads(), " threads)");
#ifdef TELETRON_WITH_CUDA
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device.index()) == cudaSuccess) {
    return str_cat(prop.name, " (", static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024 * 1024), " GiB, sm_",
                   prop.major, prop.minor, ")");
  }
#endif
  return device.str();
}

std::string configure_attention_backend() {
  const char* value = std::getenv("TELETRON_SDPA");
  const std::string choice = value != nullptr && *value != '\0' ? value : "auto";
  if (choice == "auto") return choice;
  TT_CHECK(choice == "flash" || choice == "cudnn" || choice == "efficient" || choice == "math",
           ErrorCode::kConfig, "environment variable TELETRON_SDPA: expected auto, flash, cudnn, efficient or math, got `",
           choice, "`");
  auto& context = at::globalContext();
  context.setSDPUseFlash(choice == "flash");
  context.setSDPUseCuDNN(choice == "cudnn");
  context.setSDPUseMemEfficient(choice == "efficient");
  context.setSDPUseMath(choice == "math");
  return choice;
}

double peak_memory_gb(const torch::Device& device) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
#ifdef TELETRON_WITH_CUDA
  if (device.is_cuda()) {
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return static_cast<double>(stats.allocated_bytes[0].peak) / kGiB;
  }
#endif
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0 / kGiB;  // ru_maxrss is in KiB on Linux
}

void reset_peak_memory(const torch::Device& device) {
#ifdef TELETRON_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#endif
}

GpuMemory gpu_memory(const torch::Device& device) {
  GpuMemory memory;
#ifdef TELETRON_WITH_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    memory.allocated = stats.allocated_bytes[0].current;
    memory.peak = stats.allocated_bytes[0].peak;
    memory.total = static_cast<int64_t>(at::cuda::getDeviceProperties(device.index())->totalGlobalMem);
    memory.known = true;
  }
#endif
  return memory;
}

void release_cached_memory(const torch::Device& device) {
#ifdef TELETRON_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

int allowed_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return std::max(1u, std::thread::hardware_concurrency());
  return CPU_COUNT(&set);
}

}  // namespace tt
