// Work made on one CUDA stream and read on another: a thread that produces tensors runs on a CUDA
// stream of its own (SideStream), marks the end of its work (StreamHandoff::record), and the
// consumer's stream waits for that mark and takes the tensors over (StreamHandoff::accept:
// record_stream, so the caching allocator does not hand their memory to the producer again before
// the consumer's kernels have read it). On the CPU, or in a build without CUDA, both do nothing.
// A failing CUDA call here is TT_ERR_SYNC naming the stream and the operation.
#pragma once

#include <torch/types.h>

#include <initializer_list>
#include <memory>
#include <string>

namespace tt {

/// Throws TT_ERR_SYNC: "CUDA stream <stream>: <operation> failed: <detail>", with the hint to rerun
/// under CUDA_LAUNCH_BLOCKING=1. For every failing stream, event or decoder synchronisation.
[[noreturn]] void throw_sync_error(const void* stream, const std::string& operation, const std::string& detail);

/// For its lifetime, the calling thread's current stream on `device` is a non-blocking CUDA stream
/// created for it alone (an OwnedCudaStream, core/cuda_stream.h: never one that LibTorch's pool
/// hands to another thread), destroyed after its work has finished (CUDA devices; nothing otherwise).
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
  /// The calling host thread waits until the recorded work has finished (any thread; for reading
  /// on the host what a copy to pinned memory queued). Does nothing for an empty hand-off.
  void wait_on_host() const;

  /// Test-only: with false, accept() skips record_stream (the hazard test shows that the consumer
  /// then reads memory the producer has re-used). Process-wide; never set outside tests.
  static void set_record_stream_for_testing(bool enabled);

 private:
  struct Event;
  std::shared_ptr<Event> event_;
};

}  // namespace tt
