// StepGraphs (see step_graph.h): capture, replay and the policy's bookkeeping.
#include "core/step_graph.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <optional>

#include "core/block_graphs.h"
#include "core/cuda_stream.h"
#include "core/device.h"
#include "core/errors.h"
#include "core/gpu_timer.h"
#include "core/graph_capture.h"

#ifdef TELETRON_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace tt {

struct StepGraphs::Graph {
  std::vector<torch::Tensor> inputs;  // the static buffers the graph reads, shaped as the key's inputs
  Body body;                          // emulation: what a replay runs
#ifdef TELETRON_WITH_CUDA
  std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif
};

#ifdef TELETRON_WITH_CUDA
struct StepGraphs::CudaState {
  explicit CudaState(int index) : device_index(index) { pool.emplace(index); }
  int device_index = 0;
  OwnedCudaStream stream{"the CUDA-graph capture stream"};
  std::optional<GraphPool> pool;  // one private pool for every shape's graph (renewed by release_for_memory)
};
#else
struct StepGraphs::CudaState {};
#endif

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

StepGraphs::StepGraphs(const StepGraphOptions& options, const torch::Device& device,
                       std::shared_ptr<BlockGraphs> blocks)
    : options_(options), device_(device), policy_(options.policy), blocks_(std::move(blocks)) {
  TT_ASSERT(emulated() || device.is_cuda(), "StepGraphs: CUDA graphs need a CUDA device (or emulation)");
  TT_ASSERT(options_.scope == "step" || options_.scope == "blocks" || options_.scope == "auto",
            "StepGraphs: scope '", options_.scope, "'");
  TT_ASSERT(options_.scope == "step" || blocks_ != nullptr, "StepGraphs: scope ", options_.scope,
            " without the model's block graphs");
#ifdef TELETRON_WITH_CUDA
  if (!emulated())
    cuda_ = std::make_unique<CudaState>(device.has_index() ? device.index() : c10::cuda::current_device());
#else
  TT_ASSERT(emulated(), "StepGraphs: this build has no CUDA");
#endif
}

StepGraphs::~StepGraphs() {
  // Graphs go before the capture stream and the pool (our use of it goes last): a replay still
  // queued keeps its executable graph alive until it finishes.
  graphs_.clear();
}

void StepGraphs::run(const std::string& key, const std::vector<torch::Tensor>& inputs, const Body& body,
                     bool eager_only, bool fail_capture) {
  poll(false);
  // The policy's key: the shape itself for whole-step graphs, "blocks <shape>" for block graphs
  // (scope blocks, or auto once the shape's whole-step captures ran out of retries).
  const bool by_blocks = options_.scope == "blocks" ||
                         (options_.scope == "auto" && policy_.eager_for_good(key) && !policy_.dropped(key));
  const std::string policy_key = by_blocks ? "blocks " + key : key;
  if (by_blocks && block_shapes_.emplace(policy_key, key).second && options_.scope == "auto")
    spdlog::info("CUDA graphs: the whole step of shape [{}] could not be captured; its Transformer blocks are "
                 "captured instead (cuda_graph.scope auto)", key);
  if (eager_only) {
    run_eager(policy_key, inputs, body, /*counted=*/false);
    return;
  }
  switch (policy_.next(policy_key)) {
    case GraphAction::kEager:
      run_eager(policy_key, inputs, body, /*counted=*/true);
      return;
    case GraphAction::kCapture:
      if (by_blocks) {
        capture_blocks(policy_key, key, inputs, body, fail_capture);
      } else if (leaves_room(key)) {
        capture(key, inputs, body, fail_capture);
      } else {
        run_eager(key, inputs, body, /*counted=*/true);
      }
      return;
    case GraphAction::kReplay:
      if (by_blocks) {
        replay_blocks(policy_key, key, inputs, body);
      } else {
        replay(key, inputs);
      }
      return;
  }
}

void StepGraphs::run_reference(const std::string& key, const std::vector<torch::Tensor>& inputs, const Body& body) {
  poll(false);
  run_eager(key, inputs, body, /*counted=*/true);
}

void StepGraphs::set_reference(const std::string& key, const std::string& reference) {
  policy_.set_reference(key, reference);
  policy_.set_reference("blocks " + key, reference);
}

bool StepGraphs::gave_up(const std::string& key) const {
  const std::string blocks = "blocks " + key;
  if (options_.scope == "step") return policy_.eager_for_good(key);
  if (options_.scope == "blocks") return policy_.eager_for_good(blocks);
  // auto: a whole-step graph dropped for its speed ends there; one out of retries goes on to blocks.
  return policy_.eager_for_good(key) && (policy_.dropped(key) || policy_.eager_for_good(blocks));
}

StepGraphs::EagerComparison StepGraphs::compare_with_reference(const std::string& key) {
  flush();
  // Whole-step graphs (scope step, or auto where they were dropped or found no room) ran the eager
  // steps under the shape's own key; block graphs under "blocks <shape>".
  const bool by_blocks = options_.scope == "blocks" || (options_.scope == "auto" && !policy_.dropped(key));
  const std::string own = by_blocks ? "blocks " + key : key;
  const std::string reference = policy_.reference(key);
  return EagerComparison{policy_.eager_beats_reference(own), policy_.eager_ms(own),
                         reference.empty() ? 0.0 : policy_.eager_ms(reference)};
}

namespace {

// Block graphs are on for one step's body, and off again however it ends.
class BlockStep {
 public:
  BlockStep(BlockGraphs& blocks, const std::string& shape, BlockGraphs::Mode mode, bool fail) : blocks_(blocks) {
    blocks_.begin_step(shape, mode, fail);
  }
  ~BlockStep() {
    if (!ended_) (void)blocks_.end_step();
  }
  BlockStep(const BlockStep&) = delete;
  BlockStep& operator=(const BlockStep&) = delete;
  std::string end() {
    ended_ = true;
    return blocks_.end_step();
  }

 private:
  BlockGraphs& blocks_;
  bool ended_ = false;
};

}  // namespace

void StepGraphs::capture_blocks(const std::string& key, const std::string& shape,
                                const std::vector<torch::Tensor>& inputs, const Body& body, bool fail) {
  std::string failure;
  try {
    BlockStep step(*blocks_, shape, BlockGraphs::Mode::kCapture, fail);
    body(inputs);  // the blocks are captured as the step reaches them, then run through their graphs
    failure = step.end();
  } catch (...) {
    blocks_->drop(shape);  // a step that failed (out of memory, say) keeps none of its captures
    throw;
  }
  if (!failure.empty()) {
    blocks_->drop(shape);
    capture_failed(key, "the Transformer blocks of the step", failure);
    return;
  }
  counts_.captures += 1;
  policy_.capture_succeeded(key);
  spdlog::info("CUDA graph: captured {} Transformer block(s) of the step of shape [{}], forward and backward; the "
               "rest of the step runs eagerly",
               blocks_->captured(shape), shape);
}

void StepGraphs::replay_blocks(const std::string& key, const std::string& shape,
                               const std::vector<torch::Tensor>& inputs, const Body& body) {
  counts_.replays += 1;
  std::shared_ptr<GpuInterval> interval = emulated() ? nullptr : GpuInterval::start(device_);
  {
    BlockStep step(*blocks_, shape, BlockGraphs::Mode::kReplay, false);
    body(inputs);
    (void)step.end();
  }
  if (emulated()) {
    report(key, true, policy_.eager_ms(key) / options_.emulate_speedup);
    return;
  }
  interval->stop();
  pending_.push_back(Pending{key, true, std::move(interval)});
}

void StepGraphs::capture_failed(const std::string& key, const std::string& what, const std::string& failure) {
  counts_.failed_captures += 1;
  policy_.capture_failed(key);
  const bool whole_step_out = policy_.eager_for_good(key) && options_.scope == "auto" && key.rfind("blocks ", 0) != 0;
  spdlog::warn("TT_ERR_GRAPH: capturing {} of shape [{}] failed: {}; the step ran eagerly ({}). Hint: "
               "cuda_graph.retry sets how often a shape is tried again, cuda_graph.scope: blocks captures only the "
               "Transformer blocks, cuda_graph.enabled: false turns graphs off",
               what, key, failure,
               whole_step_out ? "out of retries: its Transformer blocks are captured from now on"
               : policy_.eager_for_good(key)
                   ? "out of retries: this shape runs eagerly from now on"
                   : str_cat("tried again after ", options_.policy.capture_frequency, " eager steps"));
}

void StepGraphs::run_eager(const std::string& key, const std::vector<torch::Tensor>& inputs, const Body& body,
                           bool counted) {
  counts_.eager += 1;
  if (!counted) {
    body(inputs);
    return;
  }
  if (emulated()) {
    const auto start = Clock::now();
    body(inputs);
    policy_.eager_step(key, ms_since(start));
    if (options_.memory_limit > 0 && options_.emulate_working_set && working_set_.count(key) == 0)
      working_set_[key] = options_.emulate_working_set(key);
    return;
  }
  // The shape's working set, once: the allocator's peak is reset for it (kept for the run's peak).
  const bool measure = options_.memory_limit > 0 && working_set_.count(key) == 0;
  int64_t allocated_before = 0;
  if (measure) {
    peak_before_resets_ = std::max(peak_before_resets_, gpu_memory(device_).peak);
    reset_peak_memory(device_);
    allocated_before = gpu_memory(device_).allocated;
  }
  // Counted now (the warm-up must not wait for the GPU), timed once the GPU is past it; the
  // shape's first eager step is not timed at all.
  const bool timed = policy_.eager_steps(key) > 0;
  std::shared_ptr<GpuInterval> interval = timed ? GpuInterval::start(device_) : nullptr;
  body(inputs);
  if (measure) working_set_[key] = std::max<int64_t>(0, gpu_memory(device_).peak - allocated_before);
  policy_.eager_step(key, -1.0);
  if (!timed) return;
  interval->stop();
  pending_.push_back(Pending{key, false, std::move(interval)});
}

void StepGraphs::capture(const std::string& key, const std::vector<torch::Tensor>& inputs, const Body& body,
                         bool fail) {
  auto graph = std::make_unique<Graph>();
  for (const torch::Tensor& input : inputs) graph->inputs.push_back(input.clone());
  std::string failure;
  if (emulated()) {
    body(graph->inputs);  // the step itself
    if (fail) {
      failure = "injected by TELETRON_FAULTS (graph_capture)";
    } else {
      graph->body = body;
    }
  } else {
#ifdef TELETRON_WITH_CUDA
    OnCaptureStream on_side(cuda_->stream, cuda_->device_index);
    body(graph->inputs);  // the step itself, eagerly; its errors (out of memory) are the caller's
    graph->graph = std::make_unique<at::cuda::CUDAGraph>();
    failure = capture_graph(
        *graph->graph, *cuda_->pool, [&] { body(graph->inputs); }, fail);
    if (!failure.empty()) graph->graph.reset();
#else
    TT_ASSERT(false, "StepGraphs: this build has no CUDA");
#endif
  }
  if (!failure.empty()) {
    capture_failed(key, "the step", failure);
    return;
  }
  graphs_[key] = std::move(graph);
  counts_.captures += 1;
  policy_.capture_succeeded(key);
  spdlog::info("CUDA graph: captured the whole step of shape [{}] ({} graph{} in the pool)", key, graphs_.size(),
               graphs_.size() == 1 ? "" : "s");
#ifdef TELETRON_WITH_CUDA
  // The eager run on the capture stream cached its blocks there, where nothing else allocates.
  if (!emulated()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

void StepGraphs::replay(const std::string& key, const std::vector<torch::Tensor>& inputs) {
  Graph& graph = *graphs_.at(key);
  TT_ASSERT(graph.inputs.size() == inputs.size(), "StepGraphs: shape [", key, "] replayed with ", inputs.size(),
            " inputs, captured with ", graph.inputs.size());
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < inputs.size(); ++i) graph.inputs[i].copy_(inputs[i], /*non_blocking=*/true);
  }
  counts_.replays += 1;
  if (emulated()) {
    {
      const EmulatedReplayScope replaying;  // what a real replay runs: the captured (static) path
      graph.body(graph.inputs);
    }
    // Emulated: the eager mean over the test's factor, so that the policy's path is the test's choice.
    report(key, true, policy_.eager_ms(key) / options_.emulate_speedup);
    return;
  }
#ifdef TELETRON_WITH_CUDA
  std::shared_ptr<GpuInterval> interval = GpuInterval::start(device_);
  graph.graph->replay();
  interval->stop();
  pending_.push_back(Pending{key, true, std::move(interval)});
#endif
}

void StepGraphs::poll(bool wait) {
  while (!pending_.empty()) {
    Pending& oldest = pending_.front();
    if (!wait && !oldest.interval->done()) return;
    const double ms = oldest.interval->elapsed_ms();
    const Pending done = std::move(oldest);
    pending_.pop_front();
    report(done.key, done.replay, ms);
  }
}

void StepGraphs::flush() { poll(true); }

void StepGraphs::report(const std::string& key, bool replay, double ms) {
  if (!replay) {
    policy_.eager_time(key, ms);
    return;
  }
  policy_.replay_step(key, ms);
  if (!policy_.dropped(key)) return;
  const auto blocks = block_shapes_.find(key);
  if (graphs_.count(key) != 0 || (blocks != block_shapes_.end() && blocks_->captured(blocks->second) > 0)) drop(key);
}

void StepGraphs::drop(const std::string& key) {
  spdlog::info("CUDA graph: shape [{}] runs eagerly from now on: {}", key, policy_.describe(key));
  counts_.dropped += 1;
  if (auto blocks = block_shapes_.find(key); blocks != block_shapes_.end()) {
    blocks_->drop(blocks->second);
    return;
  }
  wait_for_replays();  // its pool blocks go back once the graph is gone
  graphs_.erase(key);
}

void StepGraphs::wait_for_replays() {
#ifdef TELETRON_WITH_CUDA
  // A graph may go only once no replay of it is still queued on the caller's stream.
  if (!emulated()) c10::cuda::getCurrentCUDAStream(cuda_->device_index).synchronize();
#endif
}

bool StepGraphs::leaves_room(const std::string& key) {
  if (options_.memory_limit <= 0) return true;
  const auto own = working_set_.find(key);
  if (own == working_set_.end()) return true;  // never measured: nothing to go by
  // A shape stops running eagerly once it replays, and so does its eager alternative (the text
  // trimmed) once the shape it stands beside is captured, as this one is about to be.
  auto replaced = [&](const std::string& other) {
    auto stands_beside = [&](const std::string& shape) { return policy_.reference(shape) == other; };
    if (other == key || graphs_.count(other) != 0 || stands_beside(key)) return true;
    for (const auto& [captured, graph] : graphs_)
      if (stands_beside(captured)) return true;
    return false;
  };
  int64_t others = 0;
  std::string largest;
  for (const auto& [other, bytes] : working_set_) {
    if (replaced(other) || bytes <= others) continue;
    others = bytes;
    largest = other;
  }
  // The pool's free blocks (what earlier captures freed: graphs are replayed one at a time) serve
  // the capture first; only the rest of its working set makes the pool grow.
  const HeldMemory held = held_memory();
  const int64_t growth = std::max<int64_t>(0, own->second - held.pool_free);
  if (held.reserved + growth + others <= options_.memory_limit) return true;
  policy_.no_room(key);
  counts_.no_room += 1;
  spdlog::info(
      "CUDA graph: shape [{}] is not captured and runs eagerly from now on: the {} the device holds "
      "({} of it free in the graphs' pool), what its capture would add to the pool ({}: its eager working "
      "set less that) and {} come to more than the {} the steps may use",
      key, gib_text(static_cast<double>(held.reserved)), gib_text(static_cast<double>(held.pool_free)),
      gib_text(static_cast<double>(growth)),
      largest.empty()
          ? std::string("nothing else")
          : str_cat("the eager steps of [", largest, "] (", gib_text(static_cast<double>(others)), ")"),
      gib_text(static_cast<double>(options_.memory_limit)));
  return false;
}

StepGraphs::HeldMemory StepGraphs::held_memory() {
  HeldMemory held;
  if (emulated()) {
    // One shared pool: as large as the largest captured working set, all of it free between replays.
    for (const auto& [captured, graph] : graphs_) {
      const auto found = working_set_.find(captured);
      if (found != working_set_.end()) held.reserved = std::max(held.reserved, found->second);
    }
    held.pool_free = held.reserved;
    return held;
  }
  // Once the cache is given back, what is reserved and not allocated belongs to the pool (its
  // blocks stay reserved), bar the free parts of segments still partly in use.
  release_cached_memory(device_);
  const GpuMemory memory = gpu_memory(device_);
  held.reserved = memory.reserved;
  held.pool_free = std::max<int64_t>(0, memory.reserved - memory.allocated);
  return held;
}

int64_t StepGraphs::release_for_memory() {
  if (graphs_.empty()) return 0;
  const auto count = static_cast<int64_t>(graphs_.size());
  wait_for_replays();
  for (const auto& [key, graph] : graphs_) {
    policy_.drop_for_memory(key);
    spdlog::warn("CUDA graph: shape [{}] dropped to give its memory back; it runs eagerly from now on: {}",
                 key, policy_.describe(key));
  }
  counts_.dropped += count;
  graphs_.clear();
#ifdef TELETRON_WITH_CUDA
  if (!emulated()) {
    // A pool's blocks go back to the device only once nothing uses it, our own use included: a
    // dropped graph's blocks otherwise stay with the pool while other graphs share it.
    cuda_->pool.reset();
    c10::cuda::CUDACachingAllocator::emptyCache();
    cuda_->pool.emplace(cuda_->device_index);
  }
#endif
  return count;
}

std::string StepGraphs::describe() const { return policy_.describe_all(); }

}  // namespace tt
