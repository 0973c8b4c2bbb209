// Per-block CUDA graphs, forward and backward (see block_graphs.h).
#include "core/block_graphs.h"

#include <ATen/autocast_mode.h>
#include <spdlog/spdlog.h>
#include <torch/autograd.h>
#include <torch/custom_class.h>

#include "core/errors.h"

#ifdef TELETRON_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include "core/cuda_stream.h"
#include "core/graph_capture.h"
#endif

namespace tt {

struct BlockGraphs::Graph {
  int64_t index = 0;                       // the block's index in the model
  Function block;                          // emulation: what a forward runs
  std::vector<torch::Tensor> inputs;       // static input buffers (leaves; requires_grad as the inputs)
  std::vector<size_t> grad_inputs;         // which inputs are differentiable
  std::vector<torch::Tensor> params;       // the block's parameters that need gradients
  std::vector<torch::Tensor> outputs;      // the forward's outputs (graph memory, or the last emulated run's)
  std::vector<torch::Tensor> grad_outputs;  // static gradients of the outputs that need them
  std::vector<size_t> grad_output_index;   // which outputs those are
  std::vector<torch::Tensor> grads;        // d/d(grad inputs, then params); undefined where unused
#ifdef TELETRON_WITH_CUDA
  std::unique_ptr<at::cuda::CUDAGraph> forward, backward;
#endif
  // CUDA: the first backward captures the backward graph (and fills `grads` for that step); set
  // by the owner, which holds the pool and the capture stream.
  std::function<void(Graph&)> capture_backward;
  bool emulated = false;
};

#ifdef TELETRON_WITH_CUDA
struct BlockGraphs::CudaState {
  explicit CudaState(int index) : device_index(index), pool(index) {}
  int device_index = 0;
  OwnedCudaStream stream{"the block-graph capture stream"};
  GraphPool pool;  // every block graph of every shape
};
#else
struct BlockGraphs::CudaState {};
#endif

namespace {

// Carries a block's graph from forward to backward inside the autograd context.
struct GraphRef : torch::CustomClassHolder {
  std::shared_ptr<BlockGraphs::Graph> graph;
};

// The roots and the differentiable leaves of one recording of a block.
std::vector<torch::Tensor> differentiable(const BlockGraphs::Graph& g) {
  std::vector<torch::Tensor> leaves;
  for (size_t i : g.grad_inputs) leaves.push_back(g.inputs[i]);
  for (const torch::Tensor& p : g.params) leaves.push_back(p);
  return leaves;
}

std::vector<torch::Tensor> roots_of(const BlockGraphs::Graph& g) {
  std::vector<torch::Tensor> roots;
  for (size_t i : g.grad_output_index) roots.push_back(g.outputs[i]);
  return roots;
}

// Autograd's gradients of the block's recording for the static gradient outputs.
std::vector<torch::Tensor> gradients_of(const BlockGraphs::Graph& g, bool keep_recording) {
  if (g.grad_output_index.empty()) return std::vector<torch::Tensor>(g.grad_inputs.size() + g.params.size());
  return torch::autograd::grad(roots_of(g), differentiable(g), g.grad_outputs, /*retain_graph=*/keep_recording,
                               /*create_graph=*/false, /*allow_unused=*/true);
}

// The block on the static buffers with autograd recording (grad mode on, also inside
// Function::forward where autograd is off).
void record_forward(BlockGraphs::Graph& g) {
  torch::AutoGradMode grad_on(true);
  g.outputs = g.block(g.inputs);
}

class AutocastCacheOff {
 public:
  AutocastCacheOff() : before_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~AutocastCacheOff() { at::autocast::set_autocast_cache_enabled(before_); }
  AutocastCacheOff(const AutocastCacheOff&) = delete;
  AutocastCacheOff& operator=(const AutocastCacheOff&) = delete;

 private:
  bool before_;
};

class GraphedBlock : public torch::autograd::Function<GraphedBlock> {
 public:
  // inputs: the block's inputs, then its parameters (so that the node is part of the graph
  // whenever a parameter needs a gradient; their gradients are added to .grad directly).
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const c10::intrusive_ptr<GraphRef>& ref, at::TensorList inputs) {
    BlockGraphs::Graph& g = *ref->graph;
    // variable_data(): the same memory without the leaf's version counter, which the recording's
    // saved inputs check when a backward falls back to autograd (the graph itself checks nothing).
    for (size_t i = 0; i < g.inputs.size(); ++i) g.inputs[i].variable_data().copy_(inputs[i]);
    if (g.emulated) {
      record_forward(g);
    } else {
#ifdef TELETRON_WITH_CUDA
      g.forward->replay();
#endif
    }
    ctx->saved_data["graph"] = c10::IValue::make_capsule(ref);
    torch::autograd::variable_list outputs;
    for (const torch::Tensor& output : g.outputs) outputs.push_back(output.detach());
    return outputs;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto ref = c10::static_intrusive_pointer_cast<GraphRef>(ctx->saved_data["graph"].toCapsule());
    BlockGraphs::Graph& g = *ref->graph;
    for (size_t k = 0; k < g.grad_output_index.size(); ++k) {
      const torch::Tensor& incoming = grad_outputs[g.grad_output_index[k]];
      if (incoming.defined()) {
        g.grad_outputs[k].copy_(incoming);
      } else {
        g.grad_outputs[k].zero_();
      }
    }
    if (g.emulated) {
      g.grads = gradients_of(g, /*keep_recording=*/false);
    } else {
#ifdef TELETRON_WITH_CUDA
      if (g.backward) {
        g.backward->replay();
      } else {
        g.capture_backward(g);
      }
#endif
    }
    const size_t n_inputs = g.grad_inputs.size();
    for (size_t k = 0; k < g.params.size(); ++k) {
      const torch::Tensor& grad = g.grads[n_inputs + k];
      if (!grad.defined()) continue;
      torch::Tensor& param_grad = g.params[k].mutable_grad();
      if (param_grad.defined()) {
        param_grad.add_(grad);
      } else {
        param_grad = grad.clone();
      }
    }
    // One gradient per argument of apply: the graph reference, the inputs, the parameters (none).
    torch::autograd::variable_list result(1 + g.inputs.size() + g.params.size());
    for (size_t k = 0; k < n_inputs; ++k)
      if (g.grads[k].defined()) result[1 + g.grad_inputs[k]] = g.grads[k].detach();
    return result;
  }
};

}  // namespace

BlockGraphs::BlockGraphs(const torch::Device& device, bool emulate) : device_(device), emulate_(emulate) {
  TT_ASSERT(emulate_ || device.is_cuda(), "BlockGraphs: CUDA graphs need a CUDA device (or emulation)");
#ifdef TELETRON_WITH_CUDA
  if (!emulate_)
    cuda_ = std::make_unique<CudaState>(device.has_index() ? device.index() : c10::cuda::current_device());
#else
  TT_ASSERT(emulate_, "BlockGraphs: this build has no CUDA");
#endif
}

BlockGraphs::~BlockGraphs() {
  // Graphs go before the capture stream and the pool.
  graphs_.clear();
}

void BlockGraphs::begin_step(const std::string& key, Mode mode, bool fail_capture) {
  key_ = key;
  mode_ = mode;
  fail_next_ = fail_capture;
  failure_.clear();
}

std::string BlockGraphs::end_step() {
  const bool captured = mode_ == Mode::kCapture;
  mode_ = Mode::kOff;
  fail_next_ = false;
  std::string failure = std::move(failure_);
  failure_.clear();
#ifdef TELETRON_WITH_CUDA
  // A capturing step's eager warm-ups on the capture stream cached blocks there, where nothing
  // else allocates.
  if (cuda_ && captured) c10::cuda::CUDACachingAllocator::emptyCache();
#else
  (void)captured;
#endif
  return failure;
}

void BlockGraphs::drop(const std::string& key) {
#ifdef TELETRON_WITH_CUDA
  // Their pool memory goes back once the graphs are gone: no replay of them may still be running.
  if (cuda_) c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(cuda_->device_index)).synchronize();
#endif
  for (auto it = graphs_.begin(); it != graphs_.end();) {
    if (it->first.first == key) {
      it = graphs_.erase(it);
    } else {
      ++it;
    }
  }
}

int64_t BlockGraphs::captured(const std::string& key) const {
  int64_t count = 0;
  for (const auto& [where, graph] : graphs_) count += where.first == key ? 1 : 0;
  return count;
}

std::vector<torch::Tensor> BlockGraphs::run(int64_t index, const Function& block,
                                            const std::vector<torch::Tensor>& inputs,
                                            const std::vector<torch::Tensor>& params) {
  if (mode_ == Mode::kOff || !torch::GradMode::is_enabled() || !failure_.empty()) return block(inputs);
  std::shared_ptr<Graph> graph;
  if (auto found = graphs_.find({key_, index}); found != graphs_.end()) graph = found->second;
  if (!graph) {
    // A replaying step meets a block it has no graph for only if the model ran other blocks than
    // when it was captured: that block runs eagerly.
    if (mode_ != Mode::kCapture) return block(inputs);
    graph = capture(index, block, inputs, params);
    if (!graph) return block(inputs);  // the capture failed (failure_ says why): eagerly, as the rest
    graphs_[{key_, index}] = graph;
  }
  TT_ASSERT(graph->inputs.size() == inputs.size(), "BlockGraphs: block ", index, " of [", key_, "] run with ",
            inputs.size(), " inputs, captured with ", graph->inputs.size());
  auto ref = c10::make_intrusive<GraphRef>();
  ref->graph = graph;
  std::vector<torch::Tensor> all(inputs);
  all.insert(all.end(), graph->params.begin(), graph->params.end());
  return GraphedBlock::apply(ref, at::TensorList(all));
}

void BlockGraphs::capture_backward(Graph& g) {
#ifdef TELETRON_WITH_CUDA
  // Inside autograd's backward (its device thread, the step's stream current): the gradients of
  // the block's recording, captured on the capture stream and then replayed for this step.
  if (failure_.empty()) {
    std::string failure;
    {
      OnCaptureStream on_side(cuda_->stream, cuda_->device_index);
      g.backward = std::make_unique<at::cuda::CUDAGraph>();
      failure = capture_graph(
          *g.backward, cuda_->pool, [&] { g.grads = gradients_of(g, /*keep_recording=*/true); }, false);
    }
    if (failure.empty()) {
      g.backward->replay();
      return;
    }
    g.backward.reset();
    failure_ = str_cat("block ", g.index, " (backward): ", failure);
  }
  // Eagerly from the recording, which this step's forward replay filled: this step's gradients.
  g.grads = gradients_of(g, /*keep_recording=*/true);
#else
  (void)g;
#endif
}

std::shared_ptr<BlockGraphs::Graph> BlockGraphs::capture(int64_t index, const Function& block,
                                                        const std::vector<torch::Tensor>& inputs,
                                                        const std::vector<torch::Tensor>& params) {
  auto g = std::make_shared<Graph>();
  g->index = index;
  g->block = block;
  g->emulated = emulate_;
  for (size_t i = 0; i < inputs.size(); ++i) {
    torch::Tensor buffer = inputs[i].detach().clone();
    if (inputs[i].requires_grad()) {
      buffer.requires_grad_(true);
      g->grad_inputs.push_back(i);
    }
    g->inputs.push_back(buffer);
  }
  for (const torch::Tensor& p : params)
    if (p.requires_grad()) g->params.push_back(p);
  // The outputs that need gradients, and static buffers for those gradients.
  auto prepare_gradients = [&] {
    g->grad_outputs.clear();
    g->grad_output_index.clear();
    for (size_t i = 0; i < g->outputs.size(); ++i) {
      if (!g->outputs[i].requires_grad()) continue;
      g->grad_output_index.push_back(i);
      g->grad_outputs.push_back(torch::zeros_like(g->outputs[i]));
    }
  };
  const bool fail = fail_next_;
  fail_next_ = false;
  if (emulate_) {
    if (fail) {
      failure_ = str_cat("block ", index, ": injected by TELETRON_FAULTS (graph_capture)");
      return nullptr;
    }
    record_forward(*g);
    prepare_gradients();
    return g;
  }
#ifdef TELETRON_WITH_CUDA
  std::string failure;
  {
    AutocastCacheOff cache_off;  // the weights' casts are recorded, not taken from the cache
    OnCaptureStream on_side(cuda_->stream, cuda_->device_index);
    // Warm-up, eagerly on the capture stream: forward and gradients, discarded.
    record_forward(*g);
    prepare_gradients();
    (void)gradients_of(*g, /*keep_recording=*/false);
    g->outputs.clear();
    g->forward = std::make_unique<at::cuda::CUDAGraph>();
    failure = capture_graph(*g->forward, cuda_->pool, [&] { record_forward(*g); }, fail);
    if (failure.empty()) prepare_gradients();  // outside the capture: written by each backward's copy
  }
  if (!failure.empty()) {
    failure_ = str_cat("block ", index, ": ", failure);
    return nullptr;
  }
  // The backward graph is captured at the block's first backward, not here: the pool then sees
  // the captures in the order a step replays them (every forward, then the backwards in reverse).
  // Captured here, a block's backward would come before the next block's forward in the pool, and
  // memory the pool lent to its scratch could hold the next block's results (its gradients)
  // when it replays after them.
  g->capture_backward = [this](Graph& graph) { capture_backward(graph); };
  return g;
#else
  TT_ASSERT(false, "BlockGraphs: this build has no CUDA");
  return nullptr;
#endif
}

}  // namespace tt
