// RAFT optical flow, torchvision's layout (see raft.h). Module and registration names are
// torchvision's attribute names and nn.Sequential indices, so named_parameters() yields its keys.
#include "model/raft.h"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

#include <array>
#include <cmath>
#include <filesystem>

#include "core/errors.h"
#include "core/file_io.h"
#include "model/weights.h"

namespace tt {
namespace {

namespace F = torch::nn::functional;

// The flow is computed at 1/8 of the image's resolution: the encoders' three stride-2 steps.
constexpr int64_t kDownsample = 8;
constexpr double kNormEps = 1e-5;  // torchvision's InstanceNorm2d and BatchNorm2d defaults
// torchvision scales the mask predictor's output by 0.25 (from the original code, where it damps
// that branch's gradients); the weights were trained with it.
constexpr double kMaskScale = 0.25;

// Inside a scope of this, ops run as called even when autocast is on (for any device): the
// correlation, the lookup and the upsampling keep fp32.
using AutocastOff = c10::impl::ExcludeDispatchKeyGuard;

using Kernel = std::array<int64_t, 2>;  // (height, width)

torch::nn::Conv2d make_conv(int64_t in, int64_t out, Kernel kernel, int64_t stride = 1) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, {kernel[0], kernel[1]})
                               .stride(stride)
                               .padding({kernel[0] / 2, kernel[1] / 2})
                               .bias(true));
}

// BatchNorm2d with its running statistics (eval mode), without num_batches_tracked.
class RaftBatchNormImpl : public torch::nn::Module {
 public:
  explicit RaftBatchNormImpl(int64_t channels) {
    weight_ = register_parameter("weight", torch::ones({channels}));            // (C)
    bias_ = register_parameter("bias", torch::zeros({channels}));               // (C)
    running_mean_ = register_buffer("running_mean", torch::zeros({channels}));  // (C)
    running_var_ = register_buffer("running_var", torch::ones({channels}));     // (C)
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::batch_norm(x, weight_, bias_, running_mean_, running_var_, /*training=*/false,
                             /*momentum=*/0.0, kNormEps, /*cudnn_enabled=*/true);
  }

 private:
  torch::Tensor weight_, bias_, running_mean_, running_var_;
};
TORCH_MODULE(RaftBatchNorm);

// torchvision's Conv2dNormActivation: conv ("0"), then a norm ("1" when it has weights), then an
// optional ReLU.
class RaftConvNormImpl : public torch::nn::Module {
 public:
  RaftConvNormImpl(int64_t in, int64_t out, Kernel kernel, int64_t stride, RaftNorm norm, bool relu)
      : norm_(norm), relu_(relu) {
    conv_ = register_module("0", make_conv(in, out, kernel, stride));
    if (norm == RaftNorm::kBatch) batch_norm_ = register_module("1", RaftBatchNorm(out));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = conv_(x);
    if (norm_ == RaftNorm::kInstance)
      y = torch::instance_norm(y, {}, {}, {}, {}, /*use_input_stats=*/true, /*momentum=*/0.0, kNormEps,
                               /*cudnn_enabled=*/true);
    if (norm_ == RaftNorm::kBatch) y = batch_norm_(y);
    return relu_ ? torch::relu(y) : y;
  }

 private:
  RaftNorm norm_;
  bool relu_;
  torch::nn::Conv2d conv_{nullptr};
  RaftBatchNorm batch_norm_{nullptr};
};
TORCH_MODULE(RaftConvNorm);

// One encoder block: relu(shortcut(x) + convs(x)), the shortcut a strided 1x1 conv + norm when the
// block downsamples, else x itself.
class RaftEncoderBlockImpl : public torch::nn::Module {
 public:
  RaftEncoderBlockImpl(RaftBlock kind, int64_t in, int64_t out, int64_t stride, RaftNorm norm) {
    if (kind == RaftBlock::kResidual) {
      convs_.push_back(RaftConvNorm(in, out, Kernel{3, 3}, stride, norm, true));
      convs_.push_back(RaftConvNorm(out, out, Kernel{3, 3}, 1, norm, true));
    } else {
      const int64_t narrow = out / 4;
      convs_.push_back(RaftConvNorm(in, narrow, Kernel{1, 1}, 1, norm, true));
      convs_.push_back(RaftConvNorm(narrow, narrow, Kernel{3, 3}, stride, norm, true));
      convs_.push_back(RaftConvNorm(narrow, out, Kernel{1, 1}, 1, norm, true));
    }
    for (size_t i = 0; i < convs_.size(); ++i) register_module(str_cat("convnormrelu", i + 1), convs_[i]);
    if (stride != 1)
      downsample_ = register_module("downsample", RaftConvNorm(in, out, Kernel{1, 1}, stride, norm, false));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = x;
    for (auto& conv : convs_) y = conv(y);
    return torch::relu((downsample_ ? downsample_(x) : x) + y);
  }

 private:
  std::vector<RaftConvNorm> convs_;
  RaftConvNorm downsample_{nullptr};
};
TORCH_MODULE(RaftEncoderBlock);

}  // namespace

// The feature or context encoder: (N, 3, H, W) -> (N, layers[4], H/8, W/8).
class RaftEncoderImpl : public torch::nn::Module {
 public:
  RaftEncoderImpl(const std::vector<int64_t>& layers, RaftBlock block, RaftNorm norm) {
    stem_ = register_module("convnormrelu", RaftConvNorm(3, layers[0], Kernel{7, 7}, 2, norm, true));
    const std::array<int64_t, 3> strides = {1, 2, 2};
    for (int stage = 0; stage < 3; ++stage) {
      torch::nn::ModuleList list;
      for (int i = 0; i < 2; ++i) {
        const int64_t in = i == 0 ? layers[stage] : layers[stage + 1];
        RaftEncoderBlock module(block, in, layers[stage + 1], i == 0 ? strides[stage] : 1, norm);
        list->push_back(module);
        blocks_.push_back(module);
      }
      register_module(str_cat("layer", stage + 1), list);
    }
    conv_ = register_module("conv", make_conv(layers[3], layers[4], Kernel{1, 1}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = stem_(x);
    for (auto& block : blocks_) y = block(y);
    return conv_(y);
  }

 private:
  RaftConvNorm stem_{nullptr};
  std::vector<RaftEncoderBlock> blocks_;  // layer1.0, layer1.1, layer2.0, ...
  torch::nn::Conv2d conv_{nullptr};
};

namespace {

// One convolutional GRU cell: h' = (1 - z) h + z q, its gates convolutions of [h, x].
class RaftGruCellImpl : public torch::nn::Module {
 public:
  RaftGruCellImpl(int64_t input, int64_t hidden, Kernel kernel) {
    convz_ = register_module("convz", make_conv(hidden + input, hidden, kernel));
    convr_ = register_module("convr", make_conv(hidden + input, hidden, kernel));
    convq_ = register_module("convq", make_conv(hidden + input, hidden, kernel));
  }
  // h (B, hidden, h, w), x (B, input, h, w) -> (B, hidden, h, w)
  torch::Tensor forward(const torch::Tensor& h, const torch::Tensor& x) {
    const torch::Tensor hx = torch::cat({h, x}, 1);
    const torch::Tensor z = torch::sigmoid(convz_(hx));
    const torch::Tensor r = torch::sigmoid(convr_(hx));
    const torch::Tensor q = torch::tanh(convq_(torch::cat({r * h, x}, 1)));
    return (1 - z) * h + z * q;
  }

 private:
  torch::nn::Conv2d convz_{nullptr}, convr_{nullptr}, convq_{nullptr};
};
TORCH_MODULE(RaftGruCell);

}  // namespace

// The update block: motion encoder, GRU(s), flow head. torchvision nests them as
// update_block.{motion_encoder, recurrent_block, flow_head}; plain Modules hold the last two
// prefixes.
class RaftUpdateBlockImpl : public torch::nn::Module {
 public:
  explicit RaftUpdateBlockImpl(const RaftConfig& c) {
    auto motion = register_module("motion_encoder", std::make_shared<torch::nn::Module>());
    const int64_t corr_channels = c.corr_levels * (2 * c.corr_radius + 1) * (2 * c.corr_radius + 1);
    const int64_t corr_width = c.motion_corr_layers.back(), flow_width = c.motion_flow_layers[1];
    convcorr1_ = motion->register_module("convcorr1", RaftConvNorm(corr_channels, c.motion_corr_layers[0],
                                                                   Kernel{1, 1}, 1, RaftNorm::kNone, true));
    if (c.motion_corr_layers.size() == 2)
      convcorr2_ = motion->register_module("convcorr2", RaftConvNorm(c.motion_corr_layers[0], corr_width,
                                                                     Kernel{3, 3}, 1, RaftNorm::kNone, true));
    convflow1_ = motion->register_module(
        "convflow1", RaftConvNorm(2, c.motion_flow_layers[0], Kernel{7, 7}, 1, RaftNorm::kNone, true));
    convflow2_ = motion->register_module("convflow2", RaftConvNorm(c.motion_flow_layers[0], flow_width,
                                                                   Kernel{3, 3}, 1, RaftNorm::kNone, true));
    // The flow itself is appended to this conv's output, hence 2 channels fewer.
    motion_conv_ =
        motion->register_module("conv", RaftConvNorm(corr_width + flow_width, c.motion_out_channels - 2,
                                                     Kernel{3, 3}, 1, RaftNorm::kNone, true));

    auto recurrent = register_module("recurrent_block", std::make_shared<torch::nn::Module>());
    const int64_t gru_input = c.motion_out_channels + c.context_layers[4] - c.hidden_size;
    if (c.gru == RaftGru::kSeparable) {
      gru1_ = recurrent->register_module("convgru1", RaftGruCell(gru_input, c.hidden_size, Kernel{1, 5}));
      gru2_ = recurrent->register_module("convgru2", RaftGruCell(gru_input, c.hidden_size, Kernel{5, 1}));
    } else {
      gru1_ = recurrent->register_module("convgru1", RaftGruCell(gru_input, c.hidden_size, Kernel{3, 3}));
    }

    auto head = register_module("flow_head", std::make_shared<torch::nn::Module>());
    head_conv1_ = head->register_module("conv1", make_conv(c.hidden_size, c.flow_head_hidden, Kernel{3, 3}));
    head_conv2_ = head->register_module("conv2", make_conv(c.flow_head_hidden, 2, Kernel{3, 3}));
  }

  // hidden (B, hidden_size, h, w), context (B, context_layers[4] - hidden_size, h, w),
  // corr (B, levels * (2r + 1)^2, h, w), flow (B, 2, h, w) -> the new hidden state and the flow's
  // correction (B, 2, h, w).
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& hidden, const torch::Tensor& context,
                                                  const torch::Tensor& corr, const torch::Tensor& flow) {
    torch::Tensor corr_features = convcorr1_(corr);
    if (convcorr2_) corr_features = convcorr2_(corr_features);
    const torch::Tensor flow_features = convflow2_(convflow1_(flow));
    const torch::Tensor motion =
        torch::cat({motion_conv_(torch::cat({corr_features, flow_features}, 1)), flow}, 1);
    const torch::Tensor x = torch::cat({context, motion}, 1);
    torch::Tensor h = gru1_(hidden, x);
    if (gru2_) h = gru2_(h, x);
    return {h, head_conv2_(torch::relu(head_conv1_(h)))};
  }

 private:
  RaftConvNorm convcorr1_{nullptr}, convcorr2_{nullptr}, convflow1_{nullptr}, convflow2_{nullptr},
      motion_conv_{nullptr};
  RaftGruCell gru1_{nullptr}, gru2_{nullptr};
  torch::nn::Conv2d head_conv1_{nullptr}, head_conv2_{nullptr};
};

// hidden (B, hidden_size, h, w) -> the convex-upsampling mask (B, 9 * 64, h, w).
class RaftMaskPredictorImpl : public torch::nn::Module {
 public:
  RaftMaskPredictorImpl(int64_t in, int64_t width) {
    convrelu_ = register_module("convrelu", RaftConvNorm(in, width, Kernel{3, 3}, 1, RaftNorm::kNone, true));
    conv_ = register_module("conv", make_conv(width, 9 * kDownsample * kDownsample, Kernel{1, 1}));
  }
  torch::Tensor forward(const torch::Tensor& hidden) { return kMaskScale * conv_(convrelu_(hidden)); }

 private:
  RaftConvNorm convrelu_{nullptr};
  torch::nn::Conv2d conv_{nullptr};
};

RaftConfig raft_preset(const std::string& name, const std::string& key) {
  RaftConfig config;  // raft_large
  if (name == "raft_large") return config;
  if (name == "raft_small") {
    config.feature_layers = {32, 32, 64, 96, 128};
    config.feature_block = RaftBlock::kBottleneck;
    config.feature_norm = RaftNorm::kInstance;
    config.context_layers = {32, 32, 64, 96, 160};
    config.context_block = RaftBlock::kBottleneck;
    config.context_norm = RaftNorm::kNone;
    config.corr_levels = 4;
    config.corr_radius = 3;
    config.motion_corr_layers = {96};
    config.motion_flow_layers = {64, 32};
    config.motion_out_channels = 82;
    config.hidden_size = 96;
    config.gru = RaftGru::kConv3x3;
    config.flow_head_hidden = 128;
    config.mask_predictor_hidden = 0;
    return config;
  }
  throw Error(ErrorCode::kConfig, str_cat(key, ": unknown RAFT preset '", name, "'"),
              "use raft_large or raft_small");
}

namespace {

void check_widths(const std::vector<int64_t>& widths, size_t min_count, size_t max_count, const char* field) {
  TT_CHECK(widths.size() >= min_count && widths.size() <= max_count, ErrorCode::kConfig, "raft.", field,
           ": expected ", min_count == max_count ? str_cat(min_count) : str_cat(min_count, " or ", max_count),
           " widths, got ", widths.size());
  for (int64_t width : widths)
    TT_CHECK(width > 0, ErrorCode::kConfig, "raft.", field, ": widths must be > 0, got ", width);
}

void check_encoder(const std::vector<int64_t>& layers, RaftBlock block, const char* field) {
  check_widths(layers, 5, 5, field);
  // The first stage has stride 1 and no projection: its input is added to its output.
  TT_CHECK(layers[1] == layers[0], ErrorCode::kConfig, "raft.", field, "[1] must equal ", field,
           "[0] (the stride-1 stage has no shortcut projection), got ", layers[1], " and ", layers[0]);
  if (block == RaftBlock::kBottleneck)
    for (int i = 1; i < 4; ++i)
      TT_CHECK(layers[i] >= 4, ErrorCode::kConfig, "raft.", field, "[", i,
               "] must be >= 4 with bottleneck blocks (they narrow to a quarter), got ", layers[i]);
}

}  // namespace

void validate_raft_config(const RaftConfig& c) {
  check_encoder(c.feature_layers, c.feature_block, "feature_layers");
  check_encoder(c.context_layers, c.context_block, "context_layers");
  // 8 levels already ask for images of 2048 pixels or more.
  TT_CHECK(c.corr_levels >= 1 && c.corr_levels <= 8, ErrorCode::kConfig,
           "raft.corr_levels: must be between 1 and 8, got ", c.corr_levels);
  TT_CHECK(c.corr_radius >= 0, ErrorCode::kConfig, "raft.corr_radius: must be >= 0, got ", c.corr_radius);
  check_widths(c.motion_corr_layers, 1, 2, "motion_corr_layers");
  check_widths(c.motion_flow_layers, 2, 2, "motion_flow_layers");
  TT_CHECK(c.motion_out_channels > 2, ErrorCode::kConfig,
           "raft.motion_out_channels: must be > 2 (the flow's 2 channels are part of it), got ",
           c.motion_out_channels);
  TT_CHECK(c.hidden_size > 0 && c.hidden_size < c.context_layers[4], ErrorCode::kConfig,
           "raft.hidden_size: must be > 0 and below context_layers[4] = ", c.context_layers[4],
           " (the rest of the context encoder's output is the context), got ", c.hidden_size);
  TT_CHECK(c.flow_head_hidden > 0, ErrorCode::kConfig, "raft.flow_head_hidden: must be > 0, got ",
           c.flow_head_hidden);
  TT_CHECK(c.mask_predictor_hidden >= 0, ErrorCode::kConfig,
           "raft.mask_predictor_hidden: must be >= 0 (0: bilinear upsampling), got ",
           c.mask_predictor_hidden);
}

int64_t raft_min_image_size(const RaftConfig& config) {
  return kDownsample * (int64_t{1} << config.corr_levels);
}

std::vector<torch::Tensor> raft_correlation_pyramid(const torch::Tensor& fmap1, const torch::Tensor& fmap2,
                                                    int64_t levels) {
  TT_ASSERT(fmap1.dim() == 4 && fmap1.sizes() == fmap2.sizes(), "feature maps ", fmap1.sizes(), " and ",
            fmap2.sizes());
  AutocastOff autocast_off(c10::autocast_dispatch_keyset);
  const int64_t batch = fmap1.size(0), channels = fmap1.size(1), h = fmap1.size(2), w = fmap1.size(3);
  const torch::Tensor f1 = fmap1.to(torch::kFloat32).reshape({batch, channels, h * w});  // (B, C, hw)
  const torch::Tensor f2 = fmap2.to(torch::kFloat32).reshape({batch, channels, h * w});  // (B, C, hw)
  // (B, hw, hw): row p of fmap1 against every pixel of fmap2.
  torch::Tensor volume = torch::matmul(f1.transpose(1, 2), f2) / std::sqrt(static_cast<double>(channels));
  std::vector<torch::Tensor> pyramid = {volume.reshape({batch * h * w, 1, h, w})};
  for (int64_t level = 1; level < levels; ++level)
    pyramid.push_back(F::avg_pool2d(pyramid.back(), F::AvgPool2dFuncOptions(2).stride(2)));
  return pyramid;
}

torch::Tensor raft_correlation_lookup(const std::vector<torch::Tensor>& pyramid, const torch::Tensor& coords,
                                      int64_t radius) {
  AutocastOff autocast_off(c10::autocast_dispatch_keyset);
  const int64_t batch = coords.size(0), h = coords.size(2), w = coords.size(3), side = 2 * radius + 1;
  const auto options = coords.options().dtype(torch::kFloat32);
  const torch::Tensor offsets = torch::linspace(-radius, radius, side, options);  // (side)
  // delta[i][j] = (offsets[i], offsets[j]) as (x, y): the window's first axis moves x.
  const torch::Tensor delta =
      torch::stack(
          {offsets.view({side, 1}).expand({side, side}), offsets.view({1, side}).expand({side, side})}, -1)
          .view({1, side, side, 2});
  // (B * h * w, 1, 1, 2): each pixel's (x, y) target at the current level.
  torch::Tensor centroids =
      coords.to(torch::kFloat32).permute({0, 2, 3, 1}).reshape({batch * h * w, 1, 1, 2});
  std::vector<torch::Tensor> windows;
  for (const torch::Tensor& level : pyramid) {
    const torch::Tensor points = centroids + delta;  // (B * h * w, side, side, 2), level pixels
    // grid_sample wants [-1, 1] with the corner pixels' centres at +-1 (align_corners).
    const torch::Tensor x = 2 * points.select(-1, 0) / (level.size(3) - 1) - 1;
    const torch::Tensor y = 2 * points.select(-1, 1) / (level.size(2) - 1) - 1;
    const torch::Tensor sampled =
        torch::grid_sampler(level, torch::stack({x, y}, -1), /*bilinear*/ 0, /*zeros*/ 0,
                            /*align_corners=*/true);  // (B * h * w, 1, side, side)
    windows.push_back(sampled.view({batch, h, w, side * side}));
    centroids = centroids / 2;
  }
  return torch::cat(windows, -1).permute({0, 3, 1, 2}).contiguous();  // (B, levels * side^2, h, w)
}

torch::Tensor raft_upsample_convex(const torch::Tensor& flow, const torch::Tensor& mask) {
  AutocastOff autocast_off(c10::autocast_dispatch_keyset);
  const int64_t batch = flow.size(0), h = flow.size(2), w = flow.size(3), k = kDownsample;
  // (B, 1, 9, 8, 8, h, w): per fine pixel, weights over the 3 x 3 coarse neighbours summing to 1.
  const torch::Tensor weights = mask.to(torch::kFloat32).view({batch, 1, 9, k, k, h, w}).softmax(2);
  // (B, 2, 9, 1, 1, h, w): the neighbours' flow in fine pixels.
  const torch::Tensor neighbours = F::unfold(k * flow.to(torch::kFloat32), F::UnfoldFuncOptions(3).padding(1))
                                       .view({batch, 2, 9, 1, 1, h, w});
  const torch::Tensor fine = (weights * neighbours).sum(2);  // (B, 2, 8, 8, h, w)
  return fine.permute({0, 1, 4, 2, 5, 3}).reshape({batch, 2, h * k, w * k});
}

torch::Tensor raft_upsample_bilinear(const torch::Tensor& flow) {
  AutocastOff autocast_off(c10::autocast_dispatch_keyset);
  const std::vector<int64_t> size = {flow.size(2) * kDownsample, flow.size(3) * kDownsample};
  return kDownsample *
         F::interpolate(flow.to(torch::kFloat32),
                        F::InterpolateFuncOptions().size(size).mode(torch::kBilinear).align_corners(true));
}

RaftImpl::RaftImpl(const RaftConfig& config) : config_(config) {
  validate_raft_config(config);
  feature_encoder_ = register_module(
      "feature_encoder",
      std::make_shared<RaftEncoderImpl>(config.feature_layers, config.feature_block, config.feature_norm));
  context_encoder_ = register_module(
      "context_encoder",
      std::make_shared<RaftEncoderImpl>(config.context_layers, config.context_block, config.context_norm));
  update_block_ = register_module("update_block", std::make_shared<RaftUpdateBlockImpl>(config));
  if (config.mask_predictor_hidden > 0)
    mask_predictor_ = register_module(
        "mask_predictor",
        std::make_shared<RaftMaskPredictorImpl>(config.hidden_size, config.mask_predictor_hidden));
}

torch::Tensor RaftImpl::forward(const torch::Tensor& image1, const torch::Tensor& image2,
                                int64_t num_flow_updates) {
  return run(image1, image2, num_flow_updates, /*every_update=*/false).back();
}

std::vector<torch::Tensor> RaftImpl::forward_all(const torch::Tensor& image1, const torch::Tensor& image2,
                                                 int64_t num_flow_updates) {
  return run(image1, image2, num_flow_updates, /*every_update=*/true);
}

std::vector<torch::Tensor> RaftImpl::run(const torch::Tensor& image1, const torch::Tensor& image2,
                                         int64_t num_flow_updates, bool every_update) {
  TT_CHECK(num_flow_updates >= 1, ErrorCode::kConfig, "RAFT: num_flow_updates must be >= 1, got ",
           num_flow_updates);
  TT_CHECK(image1.dim() == 4 && image1.size(1) == 3, ErrorCode::kData,
           "RAFT: image1 must be (B, 3, H, W), got ", shape_string(image1.sizes().vec()));
  TT_CHECK(image2.sizes() == image1.sizes(), ErrorCode::kData, "RAFT: image2 ",
           shape_string(image2.sizes().vec()), " must have image1's shape ",
           shape_string(image1.sizes().vec()));
  const int64_t batch = image1.size(0), height = image1.size(2), width = image1.size(3);
  TT_CHECK_HINT(height % kDownsample == 0 && width % kDownsample == 0, ErrorCode::kData,
                "pad or resize the frames to a multiple of 8",
                "RAFT: image height and width must be multiples of 8, got ", height, " x ", width);
  const int64_t min_size = raft_min_image_size(config_);
  TT_CHECK_HINT(height >= min_size && width >= min_size, ErrorCode::kData,
                "resize the frames up, or use fewer corr_levels", "RAFT: images must be at least ", min_size,
                " x ", min_size, " for ", config_.corr_levels, " correlation levels, got ", height, " x ",
                width);
  const torch::Tensor weight = parameters().front();
  TT_CHECK(image1.device() == weight.device() && image2.device() == weight.device(), ErrorCode::kData,
           "RAFT: images on ", image1.device(), " and ", image2.device(), ", weights on ", weight.device());
  TT_CHECK(image1.is_floating_point() && image2.is_floating_point(), ErrorCode::kData,
           "RAFT: images must be floating point in [-1, 1], got ", image1.scalar_type(), " and ",
           image2.scalar_type());
  const torch::Dtype dtype = weight.scalar_type();  // the convolutions' input dtype outside autocast

  // Both images through the feature encoder as one batch: (2B, C, h, w), h = H/8, w = W/8.
  const std::vector<torch::Tensor> features =
      feature_encoder_->forward(torch::cat({image1.to(dtype), image2.to(dtype)}, 0)).chunk(2, 0);
  const std::vector<torch::Tensor> pyramid =
      raft_correlation_pyramid(features[0], features[1], config_.corr_levels);

  const torch::Tensor context_out =
      context_encoder_->forward(image1.to(dtype));  // (B, context_layers[4], h, w)
  const int64_t hidden_size = config_.hidden_size;
  torch::Tensor hidden = torch::tanh(context_out.narrow(1, 0, hidden_size));
  const torch::Tensor context =
      torch::relu(context_out.narrow(1, hidden_size, context_out.size(1) - hidden_size));

  // Pixel coordinates (B, 2, h, w) fp32, x then y: coords0 stays, coords1 is where each pixel of
  // image1 is thought to be in image2, so the flow is coords1 - coords0.
  const int64_t h = context_out.size(2), w = context_out.size(3);
  const auto options = image1.options().dtype(torch::kFloat32);
  const torch::Tensor xs = torch::arange(w, options).view({1, w}).expand({h, w});
  const torch::Tensor ys = torch::arange(h, options).view({h, 1}).expand({h, w});
  const torch::Tensor coords0 = torch::stack({xs, ys}, 0).unsqueeze(0).expand({batch, 2, h, w}).contiguous();
  torch::Tensor coords1 = coords0.clone();

  std::vector<torch::Tensor> flows;
  for (int64_t update = 0; update < num_flow_updates; ++update) {
    coords1 = coords1.detach();  // as in the paper: no gradient through the lookup positions
    const torch::Tensor corr = raft_correlation_lookup(pyramid, coords1, config_.corr_radius);
    const torch::Tensor flow = coords1 - coords0;  // (B, 2, h, w) fp32
    auto [next_hidden, delta] = update_block_->forward(hidden, context, corr.to(dtype), flow.to(dtype));
    hidden = next_hidden;
    coords1 = coords1 + delta;  // stays fp32 whatever delta's dtype
    if (!every_update && update + 1 < num_flow_updates) continue;
    const torch::Tensor coarse = coords1 - coords0;
    flows.push_back(mask_predictor_ ? raft_upsample_convex(coarse, mask_predictor_->forward(hidden))
                                    : raft_upsample_bilinear(coarse));
  }
  return flows;
}

std::map<std::string, torch::Tensor> RaftImpl::torchvision_tensors() {
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& item : named_parameters()) tensors[item.key()] = item.value();
  for (const auto& item : named_buffers()) tensors[item.key()] = item.value();
  return tensors;
}

void load_raft_weights(RaftImpl& raft, const safetensors::TensorMap& weights, const std::string& source) {
  const std::map<std::string, torch::Tensor> destinations = raft.torchvision_tensors();
  const std::string counter = ".num_batches_tracked", statistic = ".running_mean";
  safetensors::TensorMap used;
  for (const auto& [name, tensor] : weights) {
    const bool is_counter = name.size() > counter.size() &&
                            name.compare(name.size() - counter.size(), counter.size(), counter) == 0;
    // A BatchNorm's step counter: torchvision's state dicts carry it, inference never reads it.
    if (is_counter && destinations.count(name.substr(0, name.size() - counter.size()) + statistic) > 0)
      continue;
    used[name] = tensor;
  }
  load_weights_into(destinations, used, source);
}

Raft load_raft(const std::string& path, const RaftConfig& config, torch::Device device, torch::Dtype dtype) {
  std::error_code ignored;
  TT_CHECK_HINT(std::filesystem::is_regular_file(path, ignored), ErrorCode::kCheckpoint,
                "give a torchvision RAFT state dict saved with safetensors' save_file", path,
                ": no such RAFT weights file");
  Raft raft(config);
  load_raft_weights(*raft, safetensors::load(path), path);
  raft->to(device, dtype);
  raft->eval();
  for (auto& parameter : raft->parameters()) parameter.set_requires_grad(false);
  return raft;
}

}  // namespace tt
