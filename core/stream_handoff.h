// Work made on one CUDA stream and read on another: a thread that produces tensors runs on its own
// stream from LibTorch's pool (SideStream), marks the end of its work (StreamHandoff::record), and
// the consumer's stream waits for that mark and takes the tensors over (StreamHandoff::accept:
// record_stream, so the caching allocator does not hand their memory to the producer again before
// the consumer's kernels have read it). On the CPU, or in a build without CUDA, both do nothing.
#pragma once

#include <torch/types.h>

#include <initializer_list>
#include <memory>

namespace tt {

/// For its lifetime, the calling thread's current stream on `device` is a stream from LibTorch's
/// pool (CUDA devices; nothing otherwise).
class SideStream {
 public:
  explicit SideStream(const torch::Device& device);
  ~SideStream();
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;

 private:
  struct Guard;
  std::unique_ptr<Guard> guard_;
};

class StreamHandoff {
 public:
  /// Nothing to wait for (work done on the host).
  StreamHandoff() = default;
  /// Marks the work queued so far on `device`'s current stream (CUDA; an empty hand-off otherwise).
  static StreamHandoff record(const torch::Device& device);
  /// The current stream of the recorded device waits for the mark; each defined CUDA tensor is
  /// marked as in use on that stream. Does nothing for an empty hand-off.
  void accept(std::initializer_list<torch::Tensor> tensors) const;

 private:
  struct Event;
  std::shared_ptr<Event> event_;
};

}  // namespace tt
