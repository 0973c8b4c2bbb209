// HunyuanVideo VAE encoder (see vae.h).
#include "model/vae.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>

#include "core/cuda_stream.h"
#include "core/errors.h"
#include "core/file_io.h"
#include "core/graph_capture.h"
#include "core/safetensors.h"
#include "cuda/ops.h"
#include "model/vae_blocks.h"
#include "model/weights.h"

#include <filesystem>
#include <map>
#include <mutex>
#include <set>

namespace tt {
namespace {

int64_t log2_exact(int64_t value, const char* name) {
  int64_t bits = 0;
  while ((int64_t{1} << bits) < value) ++bits;
  TT_CHECK((int64_t{1} << bits) == value, ErrorCode::kConfig, "vae ", name, " must be a power of two, got ", value);
  return bits;
}

}  // namespace

// diffusers `downsamplers.0`: a strided causal conv kept under the name `conv`.
class VaeDownsampleImpl : public torch::nn::Module {
 public:
  VaeDownsampleImpl(int64_t channels, std::vector<int64_t> stride) {
    conv = register_module("conv", CausalConv3d(channels, channels, 3, std::move(stride)));
  }
  /// Moved in, x goes once its padded copy exists (CausalConv3d::forward_consuming).
  torch::Tensor forward(torch::Tensor x) { return conv->forward_consuming(std::move(x)); }
  CausalConv3d conv{nullptr};
};
TORCH_MODULE(VaeDownsample);

class VaeDownBlockImpl : public torch::nn::Module {
 public:
  VaeDownBlockImpl(int64_t in, int64_t out, int64_t layers, int64_t groups, std::vector<int64_t> stride) {
    resnets = register_module("resnets", torch::nn::ModuleList());
    for (int64_t i = 0; i < layers; ++i) resnets->push_back(VaeResnet(i == 0 ? in : out, out, groups));
    const bool downsample = stride[0] > 1 || stride[1] > 1;
    if (downsample) {
      downsamplers = register_module("downsamplers", torch::nn::ModuleList());
      downsamplers->push_back(VaeDownsample(out, std::move(stride)));
    }
  }
  torch::Tensor forward(torch::Tensor x, const VaeRuntime& rt) {
    const size_t count = resnets->size();
    for (size_t i = 0; i < count; ++i) {
      VaeResnetImpl& resnet = *resnets[i]->as<VaeResnetImpl>();
      if (i + 1 == count && downsamplers && rt.residual_pads) {
        // The last sum lands in the downsampler's padded input: no copy between them.
        CausalConv3dImpl& conv = *downsamplers[0]->as<VaeDownsampleImpl>()->conv;
        torch::Tensor padded = resnet.forward_padded(std::move(x), rt, conv.time_pad(), conv.space_pad());
        return conv.convolve(padded);
      }
      x = resnet.forward(x, rt);
    }
    if (downsamplers) x = downsamplers[0]->as<VaeDownsampleImpl>()->forward(std::move(x));
    return x;
  }
  torch::nn::ModuleList resnets{nullptr}, downsamplers{nullptr};
};
TORCH_MODULE(VaeDownBlock);


class HunyuanVaeEncoderImpl : public torch::nn::Module {
 public:
  explicit HunyuanVaeEncoderImpl(const HunyuanVaeConfig& c) {
    const auto& channels = c.block_out_channels;
    const int64_t blocks = static_cast<int64_t>(channels.size());
    const int64_t spatial_layers = log2_exact(c.spatial_compression_ratio, "spatial_compression_ratio");
    const int64_t time_layers = log2_exact(c.temporal_compression_ratio, "temporal_compression_ratio");
    conv_in = register_module("conv_in", CausalConv3d(c.in_channels, channels[0], 3));
    down_blocks = register_module("down_blocks", torch::nn::ModuleList());
    int64_t previous = channels[0];
    for (int64_t i = 0; i < blocks; ++i) {
      const bool last = i == blocks - 1;
      const bool space = i < spatial_layers;
      // diffusers: with 4x time the blocks just before the last halve time; with 8x the first ones.
      const bool time = c.temporal_compression_ratio == 4 ? (i >= blocks - 1 - time_layers && !last) : i < time_layers;
      down_blocks->push_back(VaeDownBlock(previous, channels[i], c.layers_per_block, c.norm_num_groups,
                                          std::vector<int64_t>{time ? 2 : 1, space ? 2 : 1, space ? 2 : 1}));
      previous = channels[i];
    }
    mid_block = register_module("mid_block", VaeMidBlock(previous, c.norm_num_groups, c.mid_block_add_attention));
    conv_norm_out = register_module(
        "conv_norm_out", torch::nn::GroupNorm(torch::nn::GroupNormOptions(c.norm_num_groups, previous).eps(1e-6)));
    conv_out = register_module("conv_out", CausalConv3d(previous, 2 * c.latent_channels, 3));
    stage_names = vae_stage_names(c);
  }
  torch::Tensor forward(torch::Tensor x, const VaeRuntime& rt, const std::function<void(const char*)>& mark) {
    if (mark) mark("begin");
    if (rt.gemm_first_and_attention && x.is_cuda() && x.size(1) <= 8)
      x = causal_conv3d_gemm(x, conv_in->conv->weight, conv_in->conv->bias);
    else
      x = conv_in(x);
    size_t stage = 0;  // stage_names: conv_in, down0 .., mid, out, quant
    if (mark) mark(stage_names[stage].c_str());
    for (const auto& block : *down_blocks) {
      // Moved in: a block's input is otherwise held here for the whole block (one full activation
      // at its peak; diffusers' loop holds it the same way).
      x = block->as<VaeDownBlockImpl>()->forward(std::move(x), rt);
      if (mark) mark(stage_names[++stage].c_str());
    }
    x = mid_block->forward(std::move(x), rt);
    if (mark) mark(stage_names[++stage].c_str());
    x = vae_norm_conv(conv_norm_out, *conv_out, std::move(x), true, rt);
    if (mark) mark(stage_names[++stage].c_str());
    return x;
  }
  std::vector<std::string> stage_names;
  CausalConv3d conv_in{nullptr}, conv_out{nullptr};
  torch::nn::ModuleList down_blocks{nullptr};
  VaeMidBlock mid_block{nullptr};
  torch::nn::GroupNorm conv_norm_out{nullptr};
};

HunyuanVaeConfig hunyuan_vae_preset(const std::string& name, const std::string& key) {
  HunyuanVaeConfig config;
  if (name == "hunyuan") return config;
  if (name == "tiny") {
    config.block_out_channels = {16, 32, 32, 32};
    config.layers_per_block = 1;
    config.norm_num_groups = 8;
    return config;
  }
  throw Error(ErrorCode::kConfig, str_cat(key, ": unknown VAE preset '", name, "'"), "use hunyuan or tiny");
}

void validate_hunyuan_vae_config(const HunyuanVaeConfig& c) {
  TT_CHECK(!c.block_out_channels.empty(), ErrorCode::kConfig, "vae block_out_channels is empty");
  for (int64_t channels : c.block_out_channels)
    TT_CHECK(channels > 0 && c.norm_num_groups > 0 && channels % c.norm_num_groups == 0, ErrorCode::kConfig,
             "vae block_out_channels entry ", channels, " is not divisible by norm_num_groups ", c.norm_num_groups);
  TT_CHECK(c.temporal_compression_ratio == 4 || c.temporal_compression_ratio == 8, ErrorCode::kConfig,
           "vae temporal_compression_ratio must be 4 or 8, got ", c.temporal_compression_ratio);
  const int64_t blocks = static_cast<int64_t>(c.block_out_channels.size());
  TT_CHECK(log2_exact(c.spatial_compression_ratio, "spatial_compression_ratio") <= blocks, ErrorCode::kConfig,
           "vae spatial_compression_ratio ", c.spatial_compression_ratio, " needs more than ", blocks, " blocks");
  TT_CHECK(c.layers_per_block >= 1 && c.latent_channels >= 1 && c.in_channels >= 1 && c.out_channels >= 1,
           ErrorCode::kConfig, "vae layers_per_block, latent_channels, in_channels and out_channels must be positive");
  // Far past any video VAE (the released one: 4 blocks of 128-512 channels, 2 layers each): a crafted
  // config.json is an error here, not a model of millions of layers or a petabyte allocation.
  auto at_most = [](int64_t value, int64_t most, const char* key) {
    TT_CHECK(value <= most, ErrorCode::kConfig, "vae ", key, " ", value, " is beyond ", most,
             ", far past any VAE of this architecture");
  };
  at_most(blocks, 16, "block count (block_out_channels entries)");
  for (int64_t channels : c.block_out_channels) at_most(channels, 8192, "block_out_channels entry");
  at_most(c.layers_per_block, 64, "layers_per_block");
  at_most(c.latent_channels, 4096, "latent_channels");
  at_most(c.in_channels, 64, "in_channels");
  at_most(c.out_channels, 64, "out_channels");
}

HunyuanVaeConfig hunyuan_vae_config_from_json(const std::string& text, const std::string& source) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& error) {
    throw Error(ErrorCode::kCheckpoint, str_cat(source, ": config.json is not valid JSON (", error.what(), ")"));
  }
  HunyuanVaeConfig c;
  auto read = [&](const char* key, auto* field) {
    auto it = json.find(key);
    if (it == json.end() || it->is_null()) return;
    try {
      *field = it->get<std::decay_t<decltype(*field)>>();
    } catch (const nlohmann::json::exception&) {
      throw Error(ErrorCode::kCheckpoint, str_cat(source, ": config.json field ", key, " has the wrong type"));
    }
  };
  read("in_channels", &c.in_channels);
  read("out_channels", &c.out_channels);
  read("latent_channels", &c.latent_channels);
  read("block_out_channels", &c.block_out_channels);
  read("layers_per_block", &c.layers_per_block);
  read("norm_num_groups", &c.norm_num_groups);
  read("scaling_factor", &c.scaling_factor);
  read("spatial_compression_ratio", &c.spatial_compression_ratio);
  read("temporal_compression_ratio", &c.temporal_compression_ratio);
  read("mid_block_add_attention", &c.mid_block_add_attention);
  std::string act_fn = "silu";
  read("act_fn", &act_fn);
  TT_CHECK(act_fn == "silu", ErrorCode::kCheckpoint, source, ": act_fn '", act_fn, "' is not supported (silu only)");
  auto blocks = json.find("down_block_types");
  if (blocks != json.end() && blocks->is_array()) {
    for (const auto& type : *blocks)
      TT_CHECK(type == "HunyuanVideoDownBlock3D", ErrorCode::kCheckpoint, source, ": down block type ", type.dump(),
               " is not supported");
    TT_CHECK(blocks->size() == c.block_out_channels.size(), ErrorCode::kCheckpoint, source,
             ": down_block_types and block_out_channels differ in length");
  }
  auto up_blocks = json.find("up_block_types");
  if (up_blocks != json.end() && up_blocks->is_array()) {
    for (const auto& type : *up_blocks)
      TT_CHECK(type == "HunyuanVideoUpBlock3D", ErrorCode::kCheckpoint, source, ": up block type ", type.dump(),
               " is not supported");
    TT_CHECK(up_blocks->size() == c.block_out_channels.size(), ErrorCode::kCheckpoint, source,
             ": up_block_types and block_out_channels differ in length");
  }
  validate_hunyuan_vae_config(c);
  return c;
}

std::vector<int64_t> vae_latent_shape(const HunyuanVaeConfig& c, int64_t frames, int64_t height, int64_t width) {
  const int64_t t = c.temporal_compression_ratio, s = c.spatial_compression_ratio;
  TT_CHECK_HINT(frames >= 1 && (frames - 1) % t == 0, ErrorCode::kData, str_cat("use ", t, "n+1 frames"),
                "the VAE takes ", t, "n+1 frames, got ", frames);
  TT_CHECK_HINT(height % s == 0 && width % s == 0, ErrorCode::kData, str_cat("use multiples of ", s),
                "the VAE takes heights and widths divisible by ", s, ", got ", height, "x", width);
  return {c.latent_channels, (frames - 1) / t + 1, height / s, width / s};
}

HunyuanVaeImpl::HunyuanVaeImpl(const HunyuanVaeConfig& config) : config_(config) {
  validate_hunyuan_vae_config(config);
  encoder_ = register_module("encoder", std::make_shared<HunyuanVaeEncoderImpl>(config));
  quant_conv_ = register_module(
      "quant_conv", torch::nn::Conv3d(torch::nn::Conv3dOptions(2 * config.latent_channels, 2 * config.latent_channels, 1)));
}

torch::Tensor HunyuanVaeImpl::moments(const torch::Tensor& x) {
  TT_CHECK(x.dim() == 5 && x.size(1) == config_.in_channels, ErrorCode::kData, "VAE input must be (B, ",
           config_.in_channels, ", T, H, W), got ", x.sizes());
  (void)vae_latent_shape(config_, x.size(2), x.size(3), x.size(4));
  // The 3D convolution weights follow the activations' layout (NDHWC: what cuDNN's fast kernels
  // take); converted when the runtime or the device changes which one that is.
  const auto layout = x.is_cuda() && runtime_.channels_last ? torch::MemoryFormat::ChannelsLast3d
                                                             : torch::MemoryFormat::Contiguous;
  // conv_in's 3x3x3 kernel tells the layouts apart (a 1x1x1 kernel is contiguous in both).
  if (!encoder_->conv_in->conv->weight.is_contiguous(layout)) {
    torch::NoGradGuard no_grad;
    for (auto& p : parameters())
      if (p.dim() == 5) p.set_data(p.contiguous(layout));
  }
  const torch::Tensor input = x.contiguous(layout);
  if (runtime_.cuda_graphs && input.is_cuda() && !stage_hook_) return pass_graphed(input);
  return pass(input);
}

torch::Tensor HunyuanVaeImpl::pass(const torch::Tensor& x) {
  torch::Tensor out = quant_conv_(encoder_->forward(x, runtime_, stage_hook_)).contiguous();
  if (stage_hook_) stage_hook_("quant");
  return out;
}

#ifdef TELETRON_WITH_CUDA
struct HunyuanVaeImpl::Graphs {
  explicit Graphs(int device) : device_index(device), pool(device) {}
  struct Pass {
    at::cuda::CUDAGraph graph;
    torch::Tensor input, output;  // static: copied into before, cloned out of after each replay
    bool eager = false;           // its capture failed
  };
  int device_index;
  GraphPool pool;  // outlives the graphs (each gives its use of the pool back when it goes)
  // By input sizes, dtype, the runtime's layout choices and where every weight lives (a weight that
  // moved, by to() or a layout change, makes new graphs: the old ones read the old storage).
  std::map<std::vector<int64_t>, std::unique_ptr<Pass>> passes;
  // Declared last, so destroyed first: its synchronisation ends every replay before the passes'
  // tensors and graphs go.
  OwnedCudaStream stream{"the VAE encoder's graph stream"};
};

void HunyuanVaeImpl::release_graphs() {
  std::lock_guard<std::mutex> lock(graphs_mutex_);
  graphs_.reset();
}

torch::Tensor HunyuanVaeImpl::pass_graphed(const torch::Tensor& x) {
  const int device = x.device().index();
  std::vector<int64_t> key = x.sizes().vec();
  key.push_back(static_cast<int64_t>(x.scalar_type()));
  key.push_back((runtime_.channels_last ? 1 : 0) | (runtime_.fused_norm ? 2 : 0) |
                (runtime_.norm_pads ? 4 : 0) | (runtime_.fold_bias ? 8 : 0) |
                (runtime_.gemm_first_and_attention ? 16 : 0) | (runtime_.border_kernel ? 32 : 0) |
                (runtime_.residual_pads ? 64 : 0));
  for (const torch::Tensor& p : parameters()) key.push_back(reinterpret_cast<intptr_t>(p.data_ptr()));
  std::lock_guard<std::mutex> lock(graphs_mutex_);
  if (!graphs_ || graphs_->device_index != device) graphs_ = std::make_shared<Graphs>(device);
  Graphs& g = *graphs_;
  std::unique_ptr<Graphs::Pass>& entry = g.passes[key];
  if (!entry) {
    // One eager pass first (cuDNN's algorithm choice and every lazy set-up happen outside the
    // capture); its result is this call's.
    torch::Tensor out = pass(x);
    entry = std::make_unique<Graphs::Pass>();
    entry->input = x.clone();
    std::string failure;
    {
      OnCaptureStream on_graph_stream(g.stream, device);
      failure = capture_graph(entry->graph, g.pool, [&] { entry->output = pass(entry->input); }, false);
    }
    if (!failure.empty()) {
      entry->eager = true;
      entry->output = torch::Tensor();
      spdlog::warn("TT_ERR_GRAPH: the VAE encoder's pass over {} could not be captured, it runs eagerly: {}",
                   str_cat(x.sizes()), failure);
    }
    return out;
  }
  if (entry->eager) return pass(x);
  torch::Tensor out;
  const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device));
  {
    // On the graph stream, after the caller's work so far; the caller's stream waits for it after.
    OnCaptureStream on_graph_stream(g.stream, device);
    entry->input.copy_(x);
    entry->graph.replay();
    out = entry->output.clone();
  }
  out.record_stream(caller);  // made on the graph stream, read on the caller's
  return out;
}
#else
struct HunyuanVaeImpl::Graphs {};
void HunyuanVaeImpl::release_graphs() {}
torch::Tensor HunyuanVaeImpl::pass_graphed(const torch::Tensor& x) { return pass(x); }
#endif

std::vector<std::string> vae_stage_names(const HunyuanVaeConfig& config) {
  std::vector<std::string> names{"conv_in"};
  for (size_t i = 0; i < config.block_out_channels.size(); ++i) names.push_back(str_cat("down", i));
  for (const char* name : {"mid", "out", "quant"}) names.emplace_back(name);
  return names;
}

torch::Tensor HunyuanVaeImpl::encode_mean(const torch::Tensor& x) {
  return moments(x).narrow(1, 0, config_.latent_channels) * config_.scaling_factor;
}

namespace {


// One window's tiles (moments, row-major grid) blended into the window's latent: diffusers'
// tiled_encode after its tile loop.
torch::Tensor blend_tiles(std::vector<std::vector<torch::Tensor>> rows, const VaeTiling& t, int64_t s, int64_t height,
                          int64_t width) {
  const int64_t stride_h = t.stride_height / s, stride_w = t.stride_width / s;
  const int64_t blend_h = t.min_height / s - stride_h, blend_w = t.min_width / s - stride_w;
  std::vector<torch::Tensor> result_rows;
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<torch::Tensor> result_row;
    for (size_t j = 0; j < rows[i].size(); ++j) {
      torch::Tensor tile = rows[i][j];
      if (i > 0) tile = vae_blend(rows[i - 1][j], tile, 3, blend_h);
      if (j > 0) tile = vae_blend(rows[i][j - 1], tile, 4, blend_w);
      result_row.push_back(tile.narrow(3, 0, std::min(stride_h, tile.size(3))).narrow(4, 0, std::min(stride_w, tile.size(4))));
    }
    result_rows.push_back(torch::cat(result_row, 4));
  }
  torch::Tensor out = torch::cat(result_rows, 3);
  return out.narrow(3, 0, std::min(out.size(3), height / s)).narrow(4, 0, std::min(out.size(4), width / s));
}

}  // namespace

std::vector<std::vector<size_t>> vae_tile_batches(const std::vector<std::vector<int64_t>>& shapes,
                                                  int64_t tile_batch) {
  TT_CHECK(tile_batch >= 0, ErrorCode::kConfig, "VAE tile batch must be >= 1, or auto; got ", tile_batch);
  auto voxels = [](const std::vector<int64_t>& shape) {
    int64_t n = shape.empty() ? 0 : shape[0];  // batch x T x H x W (channels are the same for all)
    for (size_t d = 2; d < shape.size(); ++d) n *= shape[d];
    return std::max<int64_t>(1, n);
  };
  int64_t largest = 1;
  for (const auto& shape : shapes) largest = std::max(largest, voxels(shape));
  std::vector<std::vector<int64_t>> order;  // shapes in first-seen order
  std::map<std::vector<int64_t>, std::vector<size_t>> by_shape;
  for (size_t i = 0; i < shapes.size(); ++i) {
    auto& members = by_shape[shapes[i]];
    if (members.empty()) order.push_back(shapes[i]);
    members.push_back(i);
  }
  std::vector<std::vector<size_t>> batches;
  for (const auto& shape : order) {
    const std::vector<size_t>& members = by_shape[shape];
    const size_t cap =
        static_cast<size_t>(std::max<int64_t>(1, tile_batch == kTileBatchAuto ? largest / voxels(shape) : tile_batch));
    for (size_t first = 0; first < members.size(); first += cap)
      batches.emplace_back(members.begin() + static_cast<std::ptrdiff_t>(first),
                           members.begin() + static_cast<std::ptrdiff_t>(std::min(members.size(), first + cap)));
  }
  return batches;
}

std::vector<torch::Tensor> HunyuanVaeImpl::moments_batched(const std::vector<torch::Tensor>& crops) {
  std::vector<torch::Tensor> out(crops.size());
  std::vector<std::vector<int64_t>> shapes;
  for (const torch::Tensor& crop : crops) shapes.push_back(crop.sizes().vec());
  for (const std::vector<size_t>& batch : vae_tile_batches(shapes, runtime_.tile_batch)) {
    if (batch.size() == 1) {
      out[batch[0]] = moments(crops[batch[0]]);
      continue;
    }
    std::vector<torch::Tensor> parts;
    for (size_t i : batch) parts.push_back(crops[i]);
    const int64_t per_crop = crops[batch[0]].size(0);
    torch::Tensor encoded = moments(torch::cat(parts, 0));
    for (size_t k = 0; k < batch.size(); ++k)
      out[batch[k]] = encoded.narrow(0, static_cast<int64_t>(k) * per_crop, per_crop);
  }
  return out;
}

VaeTilePlan vae_tile_plan(const HunyuanVaeConfig& config, int64_t frames, int64_t height, int64_t width,
                          const VaeTiling& t) {
  const int64_t r = config.temporal_compression_ratio, s = config.spatial_compression_ratio;
  TT_CHECK(t.stride_frames % r == 0 && t.min_frames % r == 0 && t.stride_frames > 0 && t.stride_frames <= t.min_frames,
           ErrorCode::kConfig, "VAE tiling: frame tile ", t.min_frames, " and stride ", t.stride_frames,
           " must be multiples of ", r, " with stride <= tile");
  TT_CHECK(t.stride_height % s == 0 && t.stride_width % s == 0 && t.min_height % s == 0 && t.min_width % s == 0 &&
               t.stride_height > 0 && t.stride_width > 0 && t.stride_height <= t.min_height &&
               t.stride_width <= t.min_width,
           ErrorCode::kConfig, "VAE tiling: tile sizes and strides must be multiples of ", s, " with stride <= tile");
  VaeTilePlan plan;
  plan.split_space = t.spatial && (height > t.min_height || width > t.min_width);
  plan.split_time = t.temporal && frames > t.min_frames;
  // Windows of min_frames + 1 frames every stride_frames; tiles every stride pixels.
  if (!plan.split_time) {
    plan.windows.emplace_back(0, frames);
  } else {
    (void)vae_latent_shape(config, frames, height, width);
    for (int64_t i = 0; i < frames; i += t.stride_frames)
      plan.windows.emplace_back(i, std::min(t.min_frames + 1, frames - i));
  }
  if (plan.split_space) {
    plan.tile_rows.clear();
    plan.tile_cols.clear();
    for (int64_t i = 0; i < height; i += t.stride_height) plan.tile_rows.push_back(i);
    for (int64_t j = 0; j < width; j += t.stride_width) plan.tile_cols.push_back(j);
  }
  return plan;
}

std::vector<std::vector<int64_t>> vae_crop_shapes(const HunyuanVaeConfig& config, int64_t batch, int64_t frames,
                                                  int64_t height, int64_t width, const VaeTiling& t) {
  const VaeTilePlan plan = vae_tile_plan(config, frames, height, width, t);
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& [first, count] : plan.windows)
    for (int64_t i : plan.tile_rows)
      for (int64_t j : plan.tile_cols)
        shapes.push_back({batch, config.in_channels, count,
                          plan.split_space ? std::min(t.min_height, height - i) : height,
                          plan.split_space ? std::min(t.min_width, width - j) : width});
  return shapes;
}

std::vector<int64_t> vae_largest_pass(const HunyuanVaeConfig& config, int64_t batch, int64_t frames, int64_t height,
                                      int64_t width, const VaeTiling& tiling, int64_t tile_batch) {
  const auto shapes = vae_crop_shapes(config, batch, frames, height, width, tiling);
  std::vector<int64_t> largest;
  int64_t most = -1;
  for (const std::vector<size_t>& pass : vae_tile_batches(shapes, tile_batch)) {
    std::vector<int64_t> shape = shapes[pass.front()];
    shape[0] *= static_cast<int64_t>(pass.size());
    const int64_t voxels = shape[0] * shape[2] * shape[3] * shape[4];
    if (voxels > most) {
      most = voxels;
      largest = shape;
    }
  }
  return largest;
}

torch::Tensor HunyuanVaeImpl::moments_tiled(const torch::Tensor& x, const VaeTiling& t) {
  TT_CHECK(x.dim() == 5, ErrorCode::kData, "VAE input must be (B, C, T, H, W), got ", x.sizes());
  const int64_t r = config_.temporal_compression_ratio, s = config_.spatial_compression_ratio;
  const int64_t frames = x.size(2), height = x.size(3), width = x.size(4);
  const VaeTilePlan plan = vae_tile_plan(config_, frames, height, width, t);
  const bool split_space = plan.split_space, split_time = plan.split_time;
  const auto& windows = plan.windows;
  const auto& tile_rows = plan.tile_rows;
  const auto& tile_cols = plan.tile_cols;
  // Every crop first, so that crops of one shape can be encoded as one batch.
  std::vector<torch::Tensor> crops;
  for (const auto& [first, count] : windows) {
    const torch::Tensor window = x.narrow(2, first, count);
    for (int64_t i : tile_rows)
      for (int64_t j : tile_cols)
        crops.push_back(split_space ? window.narrow(3, i, std::min(t.min_height, height - i))
                                          .narrow(4, j, std::min(t.min_width, width - j))
                                    : window);
  }
  const std::vector<torch::Tensor> encoded = moments_batched(crops);
  std::vector<torch::Tensor> row;
  size_t next = 0;
  for (const auto& [first, count] : windows) {
    torch::Tensor window;
    if (split_space) {
      std::vector<std::vector<torch::Tensor>> grid(tile_rows.size());
      for (auto& grid_row : grid)
        for (size_t j = 0; j < tile_cols.size(); ++j) grid_row.push_back(encoded[next++]);
      window = blend_tiles(std::move(grid), t, s, height, width);
    } else {
      window = encoded[next++];
    }
    if (first > 0) window = window.narrow(2, 1, window.size(2) - 1);  // the window's first frame belongs to the one before
    row.push_back(window);
  }
  if (!split_time) return row[0];
  const int64_t latent_frames = (frames - 1) / r + 1;
  const int64_t stride = t.stride_frames / r, blend_frames = t.min_frames / r - stride;
  std::vector<torch::Tensor> result;
  for (size_t i = 0; i < row.size(); ++i) {
    if (i > 0) {
      torch::Tensor tile = vae_blend(row[i - 1], row[i], 2, blend_frames);
      result.push_back(tile.narrow(2, 0, std::min(stride, tile.size(2))));
    } else {
      result.push_back(row[i].narrow(2, 0, std::min(stride + 1, row[i].size(2))));
    }
  }
  torch::Tensor out = torch::cat(result, 2);
  return out.narrow(2, 0, std::min(out.size(2), latent_frames));
}

torch::Tensor HunyuanVaeImpl::encode_mean(const torch::Tensor& x, const VaeTiling& tiling) {
  return moments_tiled(x, tiling).narrow(1, 0, config_.latent_channels) * config_.scaling_factor;
}

namespace {

bool is_decoder_key(const std::string& key) {
  return key.rfind("decoder.", 0) == 0 || key.rfind("post_quant_conv.", 0) == 0;
}

}  // namespace

HunyuanVaeFiles find_hunyuan_vae_files(const std::string& path, const HunyuanVaeConfig& config_if_no_json) {
  namespace fs = std::filesystem;
  fs::path root(path);
  std::error_code ignored;
  TT_CHECK_HINT(fs::exists(root, ignored), ErrorCode::kCheckpoint, "check tele_tron.vae.weights", path,
                ": no such file or folder");
  if (fs::is_directory(root) && !fs::exists(root / "config.json") && fs::is_directory(root / "vae")) root /= "vae";
  HunyuanVaeFiles found{config_if_no_json, {}};
  std::vector<std::string>& files = found.files;
  if (fs::is_directory(root)) {
    if (fs::exists(root / "config.json"))
      found.config =
          hunyuan_vae_config_from_json(read_text_file((root / "config.json").string()), (root / "config.json").string());
    const fs::path single = root / "diffusion_pytorch_model.safetensors";
    const fs::path index = root / "diffusion_pytorch_model.safetensors.index.json";
    if (fs::exists(single)) {
      files.push_back(single.string());
    } else if (fs::exists(index)) {
      std::set<std::string> shards;
      try {
        const nlohmann::json json = nlohmann::json::parse(read_text_file(index.string()));
        for (const auto& item : json.at("weight_map").items()) shards.insert(item.value().get<std::string>());
      } catch (const nlohmann::json::exception& error) {
        throw Error(ErrorCode::kCheckpoint, str_cat(index.string(), ": not a safetensors index (", error.what(), ")"));
      }
      for (const std::string& shard : shards) files.push_back((root / shard).string());
    }
    TT_CHECK_HINT(!files.empty(), ErrorCode::kCheckpoint,
                  "give a diffusers VAE folder (config.json + diffusion_pytorch_model.safetensors) or a file", path,
                  ": no diffusion_pytorch_model.safetensors (or index) in the folder");
  } else {
    files.push_back(root.string());
  }
  return found;
}

HunyuanVae load_hunyuan_vae(const std::string& path, const HunyuanVaeConfig& config_if_no_json, torch::Device device,
                            torch::Dtype dtype) {
  const HunyuanVaeFiles found = find_hunyuan_vae_files(path, config_if_no_json);
  const HunyuanVaeConfig& config = found.config;
  const std::vector<std::string>& files = found.files;
  HunyuanVae vae(config);
  const std::map<std::string, torch::Tensor> destinations = vae->diffusers_parameters();
  safetensors::TensorMap weights;
  for (const std::string& file : files) {
    const safetensors::Header header = safetensors::read_header(file);
    std::vector<std::string> names;
    for (const auto& [name, info] : header.tensors)
      if (!is_decoder_key(name)) names.push_back(name);  // the decoder is not built: skip, not unexpected
    if (names.empty()) continue;  // a decoder-only shard (an empty list would load every tensor)
    for (auto& [name, tensor] : safetensors::load(file, names)) weights[name] = std::move(tensor);
  }
  load_weights_into(destinations, weights, path);
  vae->to(device, dtype);
  vae->eval();
  for (auto& parameter : vae->parameters()) parameter.set_requires_grad(false);
  return vae;
}

void HunyuanVaeImpl::randomize_weights(uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto generator = at::detail::createCPUGenerator(seed);
  for (auto& item : named_parameters()) {
    torch::Tensor& p = item.value();
    if (p.dim() == 1) {
      const bool gain = item.key().find("norm") != std::string::npos &&
                        item.key().compare(item.key().size() - 7, 7, ".weight") == 0;
      p.fill_(gain ? 1.0 : 0.0);
    } else {
      const double fan_in = static_cast<double>(p[0].numel());
      p.copy_(at::normal(0.0, 1.0 / std::sqrt(fan_in), p.sizes(), generator).to(p.options()));
    }
  }
}

std::map<std::string, torch::Tensor> HunyuanVaeImpl::diffusers_parameters() {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : named_parameters()) out[item.key()] = item.value();
  return out;
}

}  // namespace tt
