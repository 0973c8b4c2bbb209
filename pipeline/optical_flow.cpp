// The flow stage's estimator (see optical_flow.h): the configured algorithm or its fallback, one
// call for all three.
#include "pipeline/optical_flow.h"

#include <torch/nn/functional.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include <spdlog/spdlog.h>

#include "core/autocast.h"
#include "core/cuda_stream.h"
#include "core/errors.h"
#include "core/graph_capture.h"
#include "core/safetensors.h"
#include "model/raft.h"

namespace tt {

namespace F = torch::nn::functional;

namespace {

constexpr const char* kAlgorithmKey = "data_pipeline.optical_flow.algorithm";

void check_choices(const FlowOptions& options) {
  const std::string& a = options.algorithm;
  TT_CHECK_HINT(a == "none" || a == "nvofa" || a == "raft" || a == "tvl1", ErrorCode::kConfig,
                "use none, nvofa, raft or tvl1", kAlgorithmKey, ": unknown algorithm '", a, "'");
  const std::string& f = options.fallback;
  TT_CHECK_HINT(f == "tvl1" || f == "none" || f == "error", ErrorCode::kConfig, "use tvl1, none or error",
                "data_pipeline.optical_flow.fallback: unknown value '", f, "'");
  TT_CHECK_HINT(options.warp_mode == "cuda" || options.warp_mode == "cpu", ErrorCode::kConfig,
                "use cuda or cpu", "data_pipeline.optical_flow.warp_mode: unknown value '", options.warp_mode,
                "'");
  TT_CHECK(options.raft_updates >= 1, ErrorCode::kConfig,
           "data_pipeline.optical_flow.raft_updates must be at least 1, got ", options.raft_updates);
}

// raft_large has a mask predictor (convex upsampling); raft_small upsamples bilinearly.
RaftConfig raft_config_of(const std::string& path) {
  const safetensors::Header header = safetensors::read_header(path);
  const bool large = std::any_of(header.tensors.begin(), header.tensors.end(), [](const auto& entry) {
    return entry.first.rfind("mask_predictor.", 0) == 0;
  });
  return raft_preset(large ? "raft_large" : "raft_small", "data_pipeline.optical_flow.weights");
}

}  // namespace

// RAFT's forwards as CUDA graphs, one per (B, H, W) of its input: static input and output tensors
// in one private pool, captured after one eager run of the shape (cuDNN's choices, lazy
// initialisation), replayed on the caller's stream after the frames are copied in.
struct FlowEstimator::RaftGraphs {
#ifdef TELETRON_WITH_CUDA
  struct Shape {
    torch::Tensor in1, in2, out;
    std::unique_ptr<at::cuda::CUDAGraph> graph;
    bool eager = false;  // the capture failed: this shape runs eagerly
  };
  explicit RaftGraphs(int device) : pool(device), side("RAFT's graph capture stream") {}
  GraphPool pool;
  OwnedCudaStream side;
  std::map<std::vector<int64_t>, Shape> shapes;
#endif
  int64_t replays = 0, eager_shapes = 0;
};

int64_t FlowEstimator::raft_replays() const {
  return raft_graphs_ ? raft_graphs_->replays : 0;
}
int64_t FlowEstimator::raft_eager_shapes() const {
  return raft_graphs_ ? raft_graphs_->eager_shapes : 0;
}

FlowChoice resolve_flow(const FlowOptions& options, const torch::Device& device) {
  check_choices(options);
  if (options.algorithm == "raft") {
    TT_CHECK_HINT(
        options.raft_weights.has_value(), ErrorCode::kConfig,
        "set data_pipeline.optical_flow.weights to a torchvision RAFT state dict saved as safetensors "
        "(save_file(raft_large(weights=...).state_dict(), path)), or use algorithm nvofa or tvl1, which "
        "need no weights",
        kAlgorithmKey, ": raft needs trained weights and data_pipeline.optical_flow.weights is not set");
    std::error_code ignored;
    TT_CHECK_HINT(std::filesystem::is_regular_file(*options.raft_weights, ignored), ErrorCode::kConfig,
                  "give the path of a torchvision RAFT state dict saved as safetensors",
                  "data_pipeline.optical_flow.weights: no such file ", *options.raft_weights);
  }
  if (options.algorithm != "nvofa") return {options.algorithm, ""};
  std::string why;
  if (!device.is_cuda()) {
    why = str_cat("NVOFA needs a CUDA device, the flow runs on ", device.str());
  } else if (!nvofa_available(&why, device.index())) {
    // why says which step failed
  } else {
    return {"nvofa", ""};
  }
  TT_CHECK_HINT(
      options.fallback != "error", ErrorCode::kConfig,
      "set data_pipeline.optical_flow.fallback: tvl1 (or algorithm: tvl1) to run without the engine",
      kAlgorithmKey, ": nvofa cannot run: ", why);
  return {options.fallback, str_cat("nvofa cannot run (", why, "): ", options.fallback,
                                    options.fallback == "none" ? " (no flow)" : " instead")};
}

FlowEstimator::FlowEstimator(const FlowOptions& options, const torch::Device& device)
    : options_(options), device_(device), choice_(resolve_flow(options, device)) {
  if (choice_.algorithm == "nvofa") nvofa_ = std::make_unique<NvofaFlow>();
  if (choice_.algorithm == "raft") {
    const std::string& path = *options_.raft_weights;
    try {
      raft_ = load_raft(path, raft_config_of(path), device_).ptr();
    } catch (const Error& error) {
      throw Error(ErrorCode::kConfig,
                  str_cat("data_pipeline.optical_flow.weights: ", path,
                          " does not load as RAFT: ", first_line(error.what())),
                  "give a torchvision raft_large or raft_small state dict saved as safetensors");
    }
  }
}

FlowEstimator::~FlowEstimator() = default;

torch::Tensor FlowEstimator::flow(const torch::Tensor& first, const torch::Tensor& second) {
  TT_CHECK_HINT(enabled(), ErrorCode::kConfig,
                "set data_pipeline.optical_flow.algorithm to nvofa, raft or tvl1", "optical flow is off (",
                kAlgorithmKey, ": none", choice_.reason.empty() ? "" : "; ", choice_.reason, ")");
  TT_CHECK((first.dim() == 2 || first.dim() == 3) && first.sizes() == second.sizes() &&
               first.is_floating_point() && second.is_floating_point(),
           ErrorCode::kData,
           "optical flow: two float frames (H, W) or (B, H, W) of one size are needed, got ", first.sizes(),
           " and ", second.sizes());
  torch::NoGradGuard no_grad;
  // Frames decoded elsewhere (a file NVDEC refused decodes on the CPU) come to the estimator's device.
  const torch::Tensor a = first.to(device_), b = second.to(device_);
  if (choice_.algorithm == "nvofa") {
    try {
      return nvofa_->flow(a, b, options_.nvofa);
    } catch (const Error& error) {
      // The engine refused these frames (a size outside its range, a failed session): with the
      // tvl1 fallback the estimator goes on with TV-L1, as a file NVDEC refuses goes to the CPU.
      if (options_.fallback != "tvl1") throw;
      choice_ = {"tvl1", str_cat("nvofa failed on ", a.sizes(), " frames (", first_line(error.what()),
                                 "): tvl1 from now on")};
      spdlog::warn("data_pipeline.optical_flow: {}", choice_.reason);
      nvofa_.reset();
    }
  }
  if (choice_.algorithm == "raft") return raft_flow(a, b);
  if (options_.warp_mode == "cpu" && !device_.is_cpu())
    return tvl1_flow(a.cpu(), b.cpu(), options_.tvl1).to(device_);
  return tvl1_flow(a, b, options_.tvl1);
}

// One RAFT forward: under bf16 autocast on CUDA when asked, through a graph of the shape when asked.
torch::Tensor FlowEstimator::raft_run(const torch::Tensor& image1, const torch::Tensor& image2) {
  const bool cuda = image1.is_cuda();
  auto eager = [&] {
    const AutocastScope autocast(cuda && options_.raft_bf16, at::kBFloat16, at::kCUDA);
    return raft_->forward(image1, image2, options_.raft_updates);
  };
  if (!cuda || !options_.raft_graphs) return eager();
#ifdef TELETRON_WITH_CUDA
  if (!raft_graphs_) raft_graphs_ = std::make_unique<RaftGraphs>(image1.device().index());
  RaftGraphs& graphs = *raft_graphs_;
  const std::vector<int64_t> key = image1.sizes().vec();
  auto found = graphs.shapes.find(key);
  if (found == graphs.shapes.end()) {
    RaftGraphs::Shape shape;
    shape.in1 = image1.clone();
    shape.in2 = image2.clone();
    const torch::Tensor first = eager();  // the shape's first run is eager: what the capture may not do
    shape.graph = std::make_unique<at::cuda::CUDAGraph>();
    std::string failure;
    try {
      const OnCaptureStream on_side(graphs.side, graphs.pool.device_index());
      failure = capture_graph(
          *shape.graph, graphs.pool,
          [&] {
            const AutocastScope autocast(options_.raft_bf16, at::kBFloat16, at::kCUDA);
            shape.out = raft_->forward(shape.in1, shape.in2, options_.raft_updates);
          },
          /*fail=*/false);
    } catch (const std::exception& error) {  // e.g. the allocator refusing while another capture is open
      failure = first_line(error.what());
    }
    if (!failure.empty()) {
      spdlog::warn("TT_ERR_GRAPH: RAFT's forward at {} could not be captured ({}); that shape runs eagerly",
                   str_cat(image1.sizes()), failure);
      shape.graph.reset();
      shape.out = torch::Tensor();
      shape.eager = true;
      ++graphs.eager_shapes;
    }
    graphs.shapes.emplace(key, std::move(shape));
    return first;
  }
  RaftGraphs::Shape& shape = found->second;
  if (shape.eager) return eager();
  shape.in1.copy_(image1);
  shape.in2.copy_(image2);
  shape.graph->replay();
  ++graphs.replays;
  return shape.out.clone();
#else
  return eager();
#endif
}

// RAFT takes RGB in [-1, 1] at sides that are multiples of 8 (and at least its pyramid's minimum):
// the gray frames are repeated over three channels and resized up to such a size; the flow is
// resized back and its components scaled to the frames' pixels.
torch::Tensor FlowEstimator::raft_flow(const torch::Tensor& first, const torch::Tensor& second) {
  const bool single = first.dim() == 2;
  const torch::Tensor a = single ? first.unsqueeze(0) : first, b = single ? second.unsqueeze(0) : second;
  const int64_t height = a.size(1), width = a.size(2);
  const int64_t minimum = raft_min_image_size(raft_->config());
  auto fit = [minimum](int64_t side) { return std::max(minimum, (side + 7) / 8 * 8); };
  const int64_t h8 = fit(height), w8 = fit(width);
  auto prepare = [&](const torch::Tensor& frames) {
    torch::Tensor x = frames.to(torch::kFloat32).unsqueeze(1);  // (B, 1, H, W)
    if (h8 != height || w8 != width)
      x = F::interpolate(x, F::InterpolateFuncOptions()
                                .size(std::vector<int64_t>{h8, w8})
                                .mode(torch::kBilinear)
                                .align_corners(false));
    return (x * 2.0 - 1.0).expand({-1, 3, -1, -1}).contiguous();
  };
  torch::Tensor flow = raft_run(prepare(a), prepare(b));  // (B, 2, h8, w8)
  if (h8 != height || w8 != width) {
    flow = F::interpolate(flow, F::InterpolateFuncOptions()
                                    .size(std::vector<int64_t>{height, width})
                                    .mode(torch::kBilinear)
                                    .align_corners(false));
    // Per axis, in place (no host tensor to copy to the device).
    flow.narrow(1, 0, 1).mul_(static_cast<double>(width) / static_cast<double>(w8));
    flow.narrow(1, 1, 1).mul_(static_cast<double>(height) / static_cast<double>(h8));
  }
  return single ? flow.squeeze(0) : flow;
}

FlowEstimatorPool::FlowEstimatorPool(const FlowOptions& options, const torch::Device& device)
    : options_(options), device_(device), choice_(resolve_flow(options, device)) {
  // RAFT's weights are loaded once here, so that a file that is no RAFT stops the command up front
  // (TT_ERR_CONFIG) rather than on every clip.
  if (choice_.algorithm == "raft") FlowEstimator check(options_, device_);
}

std::string FlowEstimatorPool::algorithms() {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::set<std::string> used;
  for (const auto& [thread, estimator] : estimators_) used.insert(estimator->algorithm());
  if (used.empty()) return choice_.algorithm;
  std::string joined;
  for (const std::string& name : used) joined += (joined.empty() ? "" : "+") + name;
  return joined;
}

FlowEstimator& FlowEstimatorPool::for_this_thread() {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::unique_ptr<FlowEstimator>& estimator = estimators_[std::this_thread::get_id()];
  if (!estimator) estimator = std::make_unique<FlowEstimator>(options_, device_);
  return *estimator;
}

}  // namespace tt
