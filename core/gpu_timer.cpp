// GpuInterval (see gpu_timer.h).
#include "core/gpu_timer.h"

#ifdef TELETRON_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace tt {
namespace {

#ifdef TELETRON_WITH_CUDA
class CudaInterval : public GpuInterval {
 public:
  explicit CudaInterval(const torch::Device& device)
      : device_(device), start_(cudaEventDefault), end_(cudaEventDefault) {
    start_.record(c10::cuda::getCurrentCUDAStream(device_.index()));
  }
  void stop() override { end_.record(c10::cuda::getCurrentCUDAStream(device_.index())); }
  bool done() const override { return end_.query(); }
  double elapsed_ms() const override {
    end_.synchronize();
    return start_.elapsed_time(end_);
  }

 private:
  torch::Device device_;
  at::cuda::CUDAEvent start_;
  at::cuda::CUDAEvent end_;
};
#endif

}  // namespace

std::shared_ptr<GpuInterval> GpuInterval::start(const torch::Device& device) {
#ifdef TELETRON_WITH_CUDA
  if (device.is_cuda()) return std::make_shared<CudaInterval>(device);
#endif
  (void)device;
  return nullptr;
}

}  // namespace tt
