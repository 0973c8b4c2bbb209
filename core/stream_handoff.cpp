// SideStream and StreamHandoff (see stream_handoff.h).
#include "core/stream_handoff.h"

#include <atomic>
#include <optional>

#include "core/errors.h"

#ifdef TELETRON_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <spdlog/spdlog.h>
#endif

namespace tt {
namespace {

std::atomic<bool> record_stream_enabled{true};

}  // namespace

void StreamHandoff::set_record_stream_for_testing(bool enabled) { record_stream_enabled = enabled; }

void throw_sync_error(const void* stream, const std::string& operation, const std::string& detail) {
  throw Error(ErrorCode::kSync, str_cat("CUDA stream ", stream, ": ", operation, " failed: ", detail),
              "rerun with CUDA_LAUNCH_BLOCKING=1 to find the failing kernel; a cross-stream hazard shows up "
              "there as a different result");
}

#ifdef TELETRON_WITH_CUDA
namespace {

void check_sync(cudaError_t rc, const void* stream, const char* operation) {
  if (rc != cudaSuccess) throw_sync_error(stream, operation, cudaGetErrorString(rc));
}

}  // namespace

// A stream of our own rather than one from LibTorch's pool: the pool has 32 streams per device and
// hands them out round-robin, so two threads (a producer and a decoder, say) can end up sharing one
// and queue their work behind each other.
struct SideStream::Guard {
  cudaStream_t raw = nullptr;
  c10::DeviceIndex device = 0;
  std::optional<c10::cuda::CUDAStreamGuard> guard;

  ~Guard() {
    guard.reset();
    // Synchronised before it goes: memory the caching allocator keeps for this stream may be handed
    // to a later stream that gets the same handle, which must not overtake work still queued here.
    const c10::cuda::CUDAGuard device_guard(device);
    const cudaError_t synced = cudaStreamSynchronize(raw);
    const cudaError_t destroyed = cudaStreamDestroy(raw);
    if (synced != cudaSuccess || destroyed != cudaSuccess)
      spdlog::error("TT_ERR_SYNC: CUDA stream {}: finishing the side stream failed: {}", static_cast<void*>(raw),
                    cudaGetErrorString(synced != cudaSuccess ? synced : destroyed));
  }
};
struct StreamHandoff::Event {
  at::cuda::CUDAEvent event;
  c10::DeviceIndex device = 0;
};
#else
struct SideStream::Guard {};
struct StreamHandoff::Event {};
#endif

SideStream::SideStream(const torch::Device& device) {
#ifdef TELETRON_WITH_CUDA
  if (!device.is_cuda()) return;
  const c10::DeviceIndex index = device.has_index() ? device.index() : c10::cuda::current_device();
  auto guard = std::make_unique<Guard>();
  guard->device = index;
  {
    const c10::cuda::CUDAGuard device_guard(index);
    cudaStream_t raw = nullptr;
    check_sync(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking), nullptr, "creating a side stream");
    guard->raw = raw;
  }
  guard->guard.emplace(c10::cuda::getStreamFromExternal(guard->raw, index));
  guard_ = std::move(guard);
#else
  (void)device;
#endif
}

SideStream::~SideStream() = default;

StreamHandoff StreamHandoff::record(const torch::Device& device) {
  StreamHandoff handoff;
#ifdef TELETRON_WITH_CUDA
  if (device.is_cuda()) {
    handoff.event_ = std::make_shared<Event>();
    handoff.event_->device = device.has_index() ? device.index() : c10::cuda::current_device();
    const auto producer = c10::cuda::getCurrentCUDAStream(handoff.event_->device);
    try {
      handoff.event_->event.record(producer);
    } catch (const c10::Error& error) {
      throw_sync_error(producer.stream(), "recording the hand-off event", error.what_without_backtrace());
    }
  }
#else
  (void)device;
#endif
  return handoff;
}

void StreamHandoff::accept(std::initializer_list<torch::Tensor> tensors) const {
#ifdef TELETRON_WITH_CUDA
  if (!event_) return;
  const auto consumer = c10::cuda::getCurrentCUDAStream(event_->device);
  try {
    event_->event.block(consumer);
  } catch (const c10::Error& error) {
    throw_sync_error(consumer.stream(), "waiting for the hand-off event", error.what_without_backtrace());
  }
  if (!record_stream_enabled) return;
  for (const torch::Tensor& tensor : tensors)
    if (tensor.defined() && tensor.is_cuda()) tensor.record_stream(consumer);
#else
  (void)tensors;
#endif
}

}  // namespace tt
