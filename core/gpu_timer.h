// GPU time of a stretch of work on one CUDA stream, read later without stalling the stream: two
// timing events recorded on the current stream around the work. The interval is the stream's time
// between them, so kernels of other streams running at the same time can lengthen it (an upper
// bound on the work's own GPU time when the GPU is shared).
#pragma once

#include <torch/types.h>

#include <memory>

namespace tt {

class GpuInterval {
 public:
  /// Starts an interval on `device`'s current stream; nullptr for a CPU device or a build
  /// without CUDA.
  static std::shared_ptr<GpuInterval> start(const torch::Device& device);
  virtual ~GpuInterval() = default;
  /// Records the end on the current stream (the same stream as start).
  virtual void stop() = 0;
  /// True once the GPU has passed the end event (never waits).
  virtual bool done() const = 0;
  /// Milliseconds between the events; waits for the end event.
  virtual double elapsed_ms() const = 0;
};

}  // namespace tt
