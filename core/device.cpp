// Device selection and memory readings (see device.h).
#include "core/device.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <sched.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "core/errors.h"

#ifdef TELETRON_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/core/AllocatorConfig.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
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

#ifdef TELETRON_WITH_CUDA
// The caching allocator knows a device only after its first allocation there: before that its
// statistics calls refuse it ("Invalid device argument"), so the first call allocates once.
static c10::CachingDeviceAllocator::DeviceStats allocator_stats(const torch::Device& device) {
  try {
    return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  } catch (const c10::Error&) {
    (void)torch::empty({1}, torch::TensorOptions().dtype(torch::kUInt8).device(device));
    return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  }
}
#endif

void reset_peak_memory(const torch::Device& device) {
#ifdef TELETRON_WITH_CUDA
  if (!device.is_cuda()) return;
  (void)allocator_stats(device);
  c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#endif
}

GpuMemory gpu_memory(const torch::Device& device) {
  GpuMemory memory;
#ifdef TELETRON_WITH_CUDA
  if (device.is_cuda()) {
    const auto stats = allocator_stats(device);
    memory.allocated = stats.allocated_bytes[0].current;
    memory.peak = stats.allocated_bytes[0].peak;
    memory.total = static_cast<int64_t>(at::cuda::getDeviceProperties(device.index())->totalGlobalMem);
    size_t free = 0, total = 0;
    const c10::cuda::CUDAGuard guard(device.index());
    C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    memory.reserved = stats.reserved_bytes[0].current;
    memory.available = memory.reserved + static_cast<int64_t>(free);
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

std::string allocator_settings_with_expandable(const std::string& current, bool expandable) {
  std::string settings;
  size_t begin = 0;
  while (begin < current.size()) {
    size_t end = current.find(',', begin);
    if (end == std::string::npos) end = current.size();
    const std::string entry = current.substr(begin, end - begin);
    const size_t name = entry.find_first_not_of(' ');
    if (name != std::string::npos && entry.compare(name, 19, "expandable_segments") != 0) settings += entry + ",";
    begin = end + 1;
  }
  return settings + (expandable ? "expandable_segments:True" : "expandable_segments:False");
}

AllocatorSetup configure_cuda_allocator(const torch::Device& device, const AllocatorOptions& options) {
  AllocatorSetup setup;
#ifdef TELETRON_WITH_CUDA
  if (!device.is_cuda()) return setup;
  namespace allocator = c10::CachingAllocator;
  // LibTorch reads PYTORCH_ALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF: one that names
  // expandable_segments has the last word.
  for (const char* name : {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && std::string(value).find("expandable_segments") != std::string::npos) {
      setup.environment = str_cat(name, "=", value);
      break;
    }
  }
  if (setup.environment.empty() &&
      allocator::AcceleratorAllocatorConfig::use_expandable_segments() != options.expandable_segments) {
    // A settings string resets every key it leaves out to its default: the ones LibTorch last
    // parsed (the environment's, or an earlier run's in this process) go along.
    allocator::setAllocatorSettings(
        allocator_settings_with_expandable(allocator::getAllocatorSettings(), options.expandable_segments));
  }
  // The generic setting: CUDAAllocatorConfig's inline accessor reads false in any build but
  // LibTorch's own (its driver-API macro).
  setup.expandable_segments = allocator::AcceleratorAllocatorConfig::use_expandable_segments();
  if (options.memory_cap < 1.0) {
    at::globalContext().lazyInitDevice(at::kCUDA);  // the allocator knows its devices only then
    c10::cuda::CUDACachingAllocator::setMemoryFraction(options.memory_cap, device.index());
  }
#endif
  return setup;
}

int allowed_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return std::max(1u, std::thread::hardware_concurrency());
  return CPU_COUNT(&set);
}

std::string gib_text(double bytes) {
  const double gib = bytes / static_cast<double>(int64_t{1} << 30);
  if (std::abs(gib) >= 1.0) return str_cat(std::round(gib * 100.0) / 100.0, " GiB");
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g GiB", gib);
  return text;
}

}  // namespace tt
