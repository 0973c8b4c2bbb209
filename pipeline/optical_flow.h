// The flow stage's one entry (`data_pipeline.optical_flow.*`, issue 13): the configured algorithm —
// NVOFA (the hardware engine, pipeline/optical_flow_nvofa.h), RAFT (torchvision's network with a
// user's weights, model/raft.h) or TV-L1 (weight-free, pipeline/optical_flow_tvl1.h) — behind one
// call that takes grayscale frames in [0, 1] and gives per-pixel flow in pixels, so that motion
// scores, `validate-data --motion`, `probe --flow` and the training pipeline's flow stage do not
// care which one runs.
//
// Choosing (resolve_flow): nvofa needs a CUDA device, a driver with libnvidia-opticalflow and a GPU
// with the engine; where one is missing the `fallback` runs instead (tvl1 by default; none turns
// the flow off; error stops with TT_ERR_CONFIG), and the reason is kept for a log line. When the
// engine refuses frames later (a size outside its range, a session that fails) and the fallback is
// tvl1, the estimator logs it once and goes on with TV-L1. raft needs
// `weights` (a torchvision state dict saved as safetensors; raft_large or raft_small is told by its
// keys): without them it is TT_ERR_CONFIG pointing to nvofa and tvl1, since no weights can be
// made here. tvl1 always runs, on the frames' device (`warp_mode: cuda`: its warps and iterations
// as CUDA kernels on a GPU) or on the host (`warp_mode: cpu`: the frames are copied to the host and
// the CPU reference runs there, the flow copied back: the CPU baseline). warp_mode does not apply
// to nvofa (the engine block-matches in hardware) or raft (its correlation lookup is its own warp).
//
// A FlowEstimator has one owner (a thread): NVOFA sessions and the RAFT module are its own.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "pipeline/optical_flow_nvofa.h"
#include "pipeline/optical_flow_tvl1.h"

namespace tt {

struct FlowOptions {
  std::string algorithm = "nvofa";  // none | nvofa | raft | tvl1
  std::string fallback = "tvl1";    // where nvofa cannot run: tvl1 | none | error
  std::string warp_mode = "cuda";   // tvl1: cuda (on the frames' device) | cpu (on the host)
  NvofaOptions nvofa;
  std::optional<std::string> raft_weights;  // safetensors of a torchvision raft_large / raft_small state dict
  int64_t raft_updates = 12;                // RAFT's update iterations (torchvision's default)
  /// CUDA only: RAFT's convolutions under bf16 autocast (the correlation, its lookup and the
  /// coordinates stay fp32), and, when raft_graphs is set, the whole forward (encoders and every
  /// update) captured as one CUDA graph per frame shape, replayed with the frames copied into its
  /// inputs; a capture that fails is logged once and that shape runs eagerly. Graphs are off by
  /// default: the pipeline's estimators run on data threads while the trainer may capture its own
  /// step, and the caching allocator refuses to empty its cache (which every capture does first)
  /// while another capture is open; `bench --suite flow` times them.
  bool raft_bf16 = true;
  bool raft_graphs = false;
  TvL1Options tvl1;
};

/// The algorithm that runs for `options` on `device` ("none", "nvofa", "raft" or "tvl1") and, when
/// it is not the configured one, why (one line naming what was missing). Bad choices, raft without
/// weights and fallback error where nvofa cannot run: TT_ERR_CONFIG naming the key.
struct FlowChoice {
  std::string algorithm;
  std::string reason;  // empty when the configured algorithm runs
};
FlowChoice resolve_flow(const FlowOptions& options, const torch::Device& device);

class RaftImpl;

class FlowEstimator {
 public:
  /// Resolves the algorithm for `device` (as resolve_flow) and, for raft, loads the weights there.
  FlowEstimator(const FlowOptions& options, const torch::Device& device);
  ~FlowEstimator();
  FlowEstimator(const FlowEstimator&) = delete;
  FlowEstimator& operator=(const FlowEstimator&) = delete;

  /// The algorithm that runs ("none" when the flow is off).
  const std::string& algorithm() const { return choice_.algorithm; }
  /// Why it is not the configured one ("" when it is): decided when made, or when NVOFA failed on
  /// a call (fallback tvl1).
  const std::string& fallback_reason() const { return choice_.reason; }
  bool enabled() const { return choice_.algorithm != "none"; }

  /// Flow from `first` to `second`: (B, H, W) or (H, W) float frames, intensities in [0, 1], on the
  /// estimator's device. Returns (B, 2, H, W) or (2, H, W) float32 on that device: channel 0 the x
  /// (column) and 1 the y (row) displacement in pixels, such that second(p + flow(p)) ≈ first(p).
  /// Runs on LibTorch's current stream. TT_ERR_CONFIG when the flow is off.
  torch::Tensor flow(const torch::Tensor& first, const torch::Tensor& second);

 private:
  torch::Tensor raft_flow(const torch::Tensor& first, const torch::Tensor& second);
  torch::Tensor raft_run(const torch::Tensor& image1, const torch::Tensor& image2);

  FlowOptions options_;
  torch::Device device_;
  FlowChoice choice_;
  std::unique_ptr<NvofaFlow> nvofa_;
  std::shared_ptr<RaftImpl> raft_;
  struct RaftGraphs;  // optical_flow.cpp: the captured forwards, per input shape
  std::unique_ptr<RaftGraphs> raft_graphs_;

 public:
  /// RAFT graphs: forwards replayed and shapes that run eagerly (their capture failed).
  int64_t raft_replays() const;
  int64_t raft_eager_shapes() const;
};

/// One FlowEstimator per calling thread, made on its first call (validate-data's jobs, the video
/// pipeline's workers). Thread-safe; the estimators go with the pool.
class FlowEstimatorPool {
 public:
  /// Resolves the choice once (TT_ERR_CONFIG as resolve_flow); choice() tells it for a log line.
  FlowEstimatorPool(const FlowOptions& options, const torch::Device& device);
  const FlowChoice& choice() const { return choice_; }
  bool enabled() const { return choice_.algorithm != "none"; }
  /// The calling thread's estimator.
  FlowEstimator& for_this_thread();
  /// The algorithms the estimators run now, joined by "+" ("nvofa+tvl1" once one of them turned to
  /// TV-L1 at run time); the choice when none was made yet.
  std::string algorithms();

 private:
  FlowOptions options_;
  torch::Device device_;
  FlowChoice choice_;
  std::mutex mutex_;
  std::map<std::thread::id, std::unique_ptr<FlowEstimator>> estimators_;
};

}  // namespace tt
