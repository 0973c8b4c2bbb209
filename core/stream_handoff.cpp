// SideStream and StreamHandoff (see stream_handoff.h).
#include "core/stream_handoff.h"

#include <atomic>
#include <optional>

#include "core/cuda_stream.h"
#include "core/errors.h"

#ifdef TELETRON_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
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
// A stream of our own (OwnedCudaStream) rather than one from LibTorch's pool, current for the
// guard's lifetime. The stream is declared first so that it goes last: it stops being current before
// it is synchronised and destroyed.
struct SideStream::Guard {
  OwnedCudaStream stream{"the side stream"};
  std::optional<c10::cuda::CUDAStreamGuard> guard;
};
struct StreamHandoff::Event {
  at::cuda::CUDAEvent event;
  c10::DeviceIndex device = 0;
  const void* producer = nullptr;  // the stream it was recorded on, for messages
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
  const auto raw = static_cast<cudaStream_t>(guard->stream.get(index));
  guard->guard.emplace(c10::cuda::getStreamFromExternal(raw, index));
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
      handoff.event_->producer = producer.stream();
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

void StreamHandoff::wait_on_host() const {
#ifdef TELETRON_WITH_CUDA
  if (!event_) return;
  try {
    event_->event.synchronize();
  } catch (const c10::Error& error) {
    throw_sync_error(event_->producer, "waiting on the host for the hand-off event", error.what_without_backtrace());
  }
#endif
}

}  // namespace tt
