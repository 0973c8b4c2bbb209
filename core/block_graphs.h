// Partial capture: CUDA graphs of single Transformer blocks, forward and backward, for steps whose
// whole capture fails (cuda_graph.scope auto) or when asked for (scope blocks). The rest of the
// step (embedders, loss, optimizer, anything that synchronises) runs eagerly around them.
//
// A block is a function of its input tensors and its parameters. Per step shape (StepGraphs' key)
// and block index, the first run in a capturing step makes:
//  - static input buffers (detached copies; those whose input needs a gradient need one too),
//  - a forward graph: the block run on them with autograd recording (autocast's cast cache off,
//    so the casts of the weights are part of the graph and follow the weights' updates),
//  - a backward graph, at the block's first backward: autograd's gradients of that recording with
//    respect to the differentiable inputs and the parameters, for gradient outputs copied into
//    static buffers (captured then, the pool sees the captures in replay order: every forward,
//    then the backwards in reverse; it lends a graph's scratch to later captures on that promise),
// after one eager warm-up of both on the capture stream (LibTorch's lazy per-stream state).
// Every later run is a custom autograd function: forward copies the inputs into the static
// buffers and replays the forward graph; backward copies the incoming gradients, replays the
// backward graph, adds the parameters' gradients into their .grad (autograd is handed none for
// them: a gradient tensor it stole would be overwritten by the next replay) and hands autograd
// the inputs' gradients. The recording's saved activations live in the graphs' pool, one set per
// (shape, block): a block's forward replay must be followed by its backward before the next
// forward replay of the same block, as one training step does.
//
// Emulation (TELETRON_GRAPH_EMULATE, tests without a GPU): no CUDA graph; forward runs the block
// on the static buffers with autograd and backward differentiates that, so the plumbing (inputs
// copied, gradients accumulated, inputs' gradients returned) is what the CPU tests check.
//
// One BlockGraphs per model and training run (no global state).
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tt {

class BlockGraphs {
 public:
  /// A block: its outputs from its inputs (its parameters are read inside).
  using Function = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;
  enum class Mode {
    kOff,      // blocks run eagerly
    kCapture,  // blocks without graphs for the step's shape are captured, then run through them
    kReplay,   // blocks run through their graphs
  };

  /// `emulate`: no CUDA graphs (tests); else `device` must be CUDA.
  BlockGraphs(const torch::Device& device, bool emulate);
  ~BlockGraphs();
  BlockGraphs(const BlockGraphs&) = delete;
  BlockGraphs& operator=(const BlockGraphs&) = delete;

  /// Around one step: its shape's key and what its blocks do. `fail_capture` makes the first
  /// block capture of the step fail inside the capture (TELETRON_FAULTS graph_capture).
  void begin_step(const std::string& key, Mode mode, bool fail_capture);
  /// Ends the step (blocks run eagerly again); returns why a block capture failed in it, or "".
  std::string end_step();
  /// Frees the graphs of a step shape.
  void drop(const std::string& key);
  /// True between begin_step and end_step with a mode other than kOff.
  bool active() const { return mode_ != Mode::kOff; }

  /// Block `index` of the model on `inputs` (`module`: the block, whose parameters are read once,
  /// at its capture): eagerly when inactive or without grad mode (evaluation), else captured or
  /// replayed as the step's mode says. After a failed capture in this step the remaining blocks
  /// run eagerly.
  /// `params`: every tensor the block's backward must give a gradient (its parameters, and LoRA
  /// adapters, which are no submodules); those that require none are left out.
  std::vector<torch::Tensor> run(int64_t index, const Function& block, const std::vector<torch::Tensor>& inputs,
                                 const std::vector<torch::Tensor>& params);

  /// Blocks with graphs for `key`.
  int64_t captured(const std::string& key) const;

  struct Graph;  // one block's static buffers and graphs (block_graphs.cpp)

 private:
  std::shared_ptr<Graph> capture(int64_t index, const Function& block, const std::vector<torch::Tensor>& inputs,
                                 const std::vector<torch::Tensor>& params);
  void capture_backward(Graph& graph);

  torch::Device device_;
  bool emulate_ = false;
  Mode mode_ = Mode::kOff;
  std::string key_;
  bool fail_next_ = false;
  std::string failure_;
  std::map<std::pair<std::string, int64_t>, std::shared_ptr<Graph>> graphs_;
  struct CudaState;  // the capture stream and the pool (CUDA builds)
  std::unique_ptr<CudaState> cuda_;
};

}  // namespace tt
