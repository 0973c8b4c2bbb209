// GpuInterval (see gpu_timer.h).
#include "core/gpu_timer.h"

#include "core/stream_handoff.h"

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
    record(start_, "recording a timing event");
  }
  void stop() override { record(end_, "recording a timing event"); }
  bool done() const override { return end_.query(); }
  double elapsed_ms() const override {
    try {
      end_.synchronize();
      return start_.elapsed_time(end_);
    } catch (const c10::Error& error) {
      throw_sync_error(nullptr, "waiting for a timing event", error.what_without_backtrace());
    }
  }

 private:
  void record(at::cuda::CUDAEvent& event, const char* operation) {
    const auto stream = c10::cuda::getCurrentCUDAStream(device_.index());
    try {
      event.record(stream);
    } catch (const c10::Error& error) {
      throw_sync_error(stream.stream(), operation, error.what_without_backtrace());
    }
  }

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
