// The training step as CUDA graphs: one graph per step shape (bucket, micro-batches, text length:
// whatever the caller puts in the key), all in one private memory pool, captured on a stream of
// their own and replayed on the caller's. When a shape is captured, replayed or run eagerly is
// GraphPolicy's decision (core/graph_policy.h): warm-up steps, retries after a failed capture, and
// a graph dropped when its replays are not faster than the eager steps were.
//
// The step is a `Body` run on its input tensors. What a body must keep to be graph-safe: every
// state it updates is updated in place (parameters, gradients zeroed in place, optimizer moments,
// loss scale, counters: a captured kernel writes where the capture saw the tensor), no host read
// of a device value (.item(), .cpu(), a tensor as a bool), nothing the host decides per step
// (the learning rate goes into a device tensor before the step; the step number is a device
// counter), its results go into tensors that outlive the step rather than being returned.
//
// Capture: the step's inputs are copied into static buffers of the shape (allocated outside the
// graphs' pool); the capture stream waits for the caller's stream, runs the body eagerly on those
// buffers (the step itself, and the warm-up on the capture stream that LibTorch's lazy per-stream
// state needs), then captures the body again without running it; the caller's stream waits for
// the capture stream. A capture that fails (an op that synchronises or is illegal while capturing,
// out of memory in the pool, an injected fault) is logged as a TT_ERR_GRAPH warning; the step has
// already run, so nothing is repeated. Replay: inputs copied into the static buffers, the graph
// launched on the caller's stream. Graph outputs live in the shared pool and are valid only until
// the next replay of any graph: the body must copy what it keeps into its own tensors.
//
// Step times for the policy are GPU intervals (core/gpu_timer.h) read once complete, so the
// decisions lag a few steps behind and no step waits for the GPU.
//
// Emulation (TELETRON_GRAPH_EMULATE, tests without a GPU): no CUDA graph is made; a capture keeps
// the body and the static buffers, and a replay runs the body again on the static buffers, so the
// input plumbing (a replay that reads stale buffers) is tested on the CPU. Its replay reports the
// shape's eager mean divided by `emulate_speedup` as its time (a test-only factor: the policy's
// keep and drop paths are chosen by the test, and nothing pretends to be a measurement).
//
// One StepGraphs per training run (no global state): two ranks in one process each hold theirs.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/graph_policy.h"

namespace tt {

class BlockGraphs;
class GpuInterval;

struct StepGraphOptions {
  GraphPolicyOptions policy;
  /// What a capture takes: "step" (the whole step), "blocks" (each Transformer block's forward and
  /// backward, through `blocks`; the rest of the step eager) or "auto" (the whole step, and the
  /// blocks for a step shape whose whole-step captures ran out of retries). With blocks, the
  /// policy treats a step with block graphs as it treats a replay: timed against the shape's eager
  /// steps, dropped unless as fast as the threshold asks.
  std::string scope = "step";
  /// > 0: emulate graphs (see above), a replay reporting the eager mean divided by this factor.
  double emulate_speedup = 0;
  /// Bytes the steps may hold on the device, the graphs' pool included; 0: no check. A shape's
  /// first counted eager step measures its working set (the allocator's peak during the step above
  /// what was allocated before it). Before a whole-step capture, what the device holds (cached
  /// blocks given back first), plus what the capture adds to the pool (its working set less the
  /// pool's free blocks, which earlier captures freed and all graphs share), plus the largest
  /// working set of the shapes that still run eagerly must fit in this limit;
  /// otherwise the shape is not captured and runs eagerly for good (GraphPolicy::no_room): a graph
  /// must not leave another bucket's eager step out of memory.
  int64_t memory_limit = 0;
  /// Emulation: the working set an eager step of each shape reports; the device then holds the
  /// working sets of the captured shapes.
  std::function<int64_t(const std::string& key)> emulate_working_set;
};

/// What the graphs have done so far (logs, metrics, tests).
struct StepGraphCounts {
  int64_t eager = 0;            // steps run eagerly (warm-up, eager-only steps, after a drop)
  int64_t captures = 0;         // captures that succeeded
  int64_t failed_captures = 0;  // captures that failed (each a TT_ERR_GRAPH warning)
  int64_t replays = 0;
  int64_t dropped = 0;  // graphs dropped (not faster than eager, or to give memory back)
  int64_t no_room = 0;  // shapes not captured for want of memory (memory_limit)
};

class StepGraphs {
 public:
  using Body = std::function<void(const std::vector<torch::Tensor>& inputs)>;

  /// `device`: where the step runs; graphs need CUDA (or emulation). `blocks`: the model's block
  /// graphs, needed unless the scope is "step".
  StepGraphs(const StepGraphOptions& options, const torch::Device& device,
             std::shared_ptr<BlockGraphs> blocks = nullptr);
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  /// Runs one step of shape `key` on `inputs` (defined tensors on the step's device) through
  /// `body`: eagerly, captured, or replayed, as the policy says. `eager_only` runs it eagerly
  /// without counting it for the policy (a step with an injected fault, a memory measurement).
  /// `fail_capture` (TELETRON_FAULTS graph_capture@N) makes a capture of this step fail inside
  /// the capture. An exception from an eager run of the body (out of memory, say) propagates; the
  /// capture's own failures do not.
  void run(const std::string& key, const std::vector<torch::Tensor>& inputs, const Body& body, bool eager_only,
           bool fail_capture);
  /// Runs one step eagerly, timed as an eager step of `key`, a shape that is never captured: the
  /// reference of other shapes (set_reference), e.g. a bucket's steps with their text trimmed.
  void run_reference(const std::string& key, const std::vector<torch::Tensor>& inputs, const Body& body);
  /// The comparisons of shape `key` (whole-step or block graphs) also weigh `reference`'s eager
  /// steps (GraphPolicy::set_reference): its graphs are kept only while faster than both.
  void set_reference(const std::string& key, const std::string& reference);
  /// True once shape `key` runs eagerly for good: its graphs (whole-step, or blocks where the
  /// scope leads there) were dropped or ran out of retries.
  bool gave_up(const std::string& key) const;
  /// For a shape that gave up (gave_up): the mean times of its eager steps (under whole-step or
  /// block graphs, as the scope ran them) and of its reference's (set_reference), and whether its
  /// own were the faster, both timed (GraphPolicy::eager_beats_reference). Waits for the timings
  /// still outstanding first.
  struct EagerComparison {
    bool own_faster = false;
    double own_ms = 0;
    double reference_ms = 0;
  };
  EagerComparison compare_with_reference(const std::string& key);
  /// For an eager step that ran out of memory while whole-step graphs held pool memory: drops every
  /// whole-step graph and gives their pool back to the device (a new pool serves later captures);
  /// their shapes run eagerly from now on. Returns how many graphs were dropped (0: none was held,
  /// nothing to give back). Block graphs keep theirs.
  int64_t release_for_memory();
  /// Waits for the timings still outstanding and hands them to the policy.
  void flush();
  /// The allocator's peak (bytes) as it was before a working-set measurement last reset it; the
  /// run's peak is the larger of this and the allocator's own.
  int64_t peak_before_resets() const { return peak_before_resets_; }

  StepGraphCounts counts() const { return counts_; }
  /// One line per shape seen: "<key>: eager 10.2 ms (98 timed), replay 8.1 ms: 1.26x, kept".
  std::string describe() const;

 private:
  struct Graph;
  struct Pending {
    std::string key;
    bool replay = false;
    std::shared_ptr<GpuInterval> interval;
  };
  void poll(bool wait);
  void report(const std::string& key, bool replay, double ms);
  void run_eager(const std::string& key, const std::vector<torch::Tensor>& inputs, const Body& body, bool counted);
  void capture(const std::string& key, const std::vector<torch::Tensor>& inputs, const Body& body, bool fail);
  void replay(const std::string& key, const std::vector<torch::Tensor>& inputs);
  // Block scope: `key` is the policy's, "blocks " + the step shape.
  void capture_blocks(const std::string& key, const std::string& shape, const std::vector<torch::Tensor>& inputs,
                      const Body& body, bool fail);
  void replay_blocks(const std::string& key, const std::string& shape, const std::vector<torch::Tensor>& inputs,
                     const Body& body);
  void capture_failed(const std::string& key, const std::string& what, const std::string& failure);
  void drop(const std::string& key);
  // Before a whole-step capture: true when it leaves room (memory_limit); else the shape is
  // marked no_room and the reason logged.
  bool leaves_room(const std::string& key);
  // What the device holds now and how much of it is free in the graphs' pool (CUDA: reserved
  // after the cache is given back, and the part of it not allocated; emulated: the largest
  // captured working set, all of it free).
  struct HeldMemory {
    int64_t reserved = 0;
    int64_t pool_free = 0;
  };
  HeldMemory held_memory();
  /// Before a graph goes: waits until the caller's stream has run every replay queued so far.
  void wait_for_replays();
  bool emulated() const { return options_.emulate_speedup > 0; }

  StepGraphOptions options_;
  torch::Device device_;
  GraphPolicy policy_;
  std::map<std::string, std::unique_ptr<Graph>> graphs_;
  std::shared_ptr<BlockGraphs> blocks_;
  std::map<std::string, std::string> block_shapes_;  // policy key "blocks <shape>" -> shape, once used
  std::deque<Pending> pending_;
  std::map<std::string, int64_t> working_set_;     // per shape, measured at its first counted eager step
  int64_t peak_before_resets_ = 0;
  StepGraphCounts counts_;
  struct CudaState;  // the capture stream and the pool (CUDA builds)
  std::unique_ptr<CudaState> cuda_;
};

}  // namespace tt
