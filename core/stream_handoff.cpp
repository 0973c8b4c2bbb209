// SideStream and StreamHandoff (see stream_handoff.h).
#include "core/stream_handoff.h"


#ifdef TELETRON_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace tt {

#ifdef TELETRON_WITH_CUDA
struct SideStream::Guard {
  c10::cuda::CUDAStreamGuard guard;
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
  if (device.is_cuda()) guard_.reset(new Guard{c10::cuda::CUDAStreamGuard(c10::cuda::getStreamFromPool(false, device.index()))});
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
    handoff.event_->device = device.index();
    handoff.event_->event.record(c10::cuda::getCurrentCUDAStream(device.index()));
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
  event_->event.block(consumer);
  for (const torch::Tensor& tensor : tensors)
    if (tensor.defined() && tensor.is_cuda()) tensor.record_stream(consumer);
#else
  (void)tensors;
#endif
}

}  // namespace tt
