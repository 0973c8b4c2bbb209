// RAFT optical flow (Teed & Deng, "Recurrent All-Pairs Field Transforms", 2020) built the way
// torchvision builds it (torchvision.models.optical_flow.raft), so that a torchvision state dict
// saved as safetensors loads under torchvision's own keys (`feature_encoder.convnormrelu.0.weight`,
// ...) and gives torchvision's flow. Both of torchvision's presets, raft_small and raft_large, and
// any narrower variant of them (the tests' tiny models) are one RaftConfig.
//
// The network: a feature encoder maps both images to 1/8-resolution features; their dot products
// over all pixel pairs form a 4-D correlation volume, average-pooled into a pyramid over the second
// image's axes; a context encoder maps the first image to the GRU's initial state and a context.
// Each update looks up a (2r + 1)^2 window of every pyramid level around where each pixel is now
// thought to go, encodes that with the current flow (motion encoder), steps a convolutional GRU and
// adds the flow head's correction to the flow. The 1/8-resolution flow is upsampled 8x: a convex
// combination of each pixel's 3 x 3 coarse neighbours with weights from a mask predictor
// (raft_large), or bilinearly (raft_small).
//
// Inference only: BatchNorm always uses its running statistics (torchvision in eval()); run it
// under torch::NoGradGuard. Any device and dtype; under autocast (bf16 on CUDA) the convolutions
// run in the autocast dtype while the correlation volume, its lookup, the flow's coordinates and
// the upsampling stay fp32 (autocast is switched off inside them), so sub-pixel positions keep
// their precision.
#pragma once

#include <torch/nn.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/safetensors.h"

namespace tt {

/// An encoder stage's block: torchvision's ResidualBlock (two 3x3 convs) or BottleneckBlock
/// (1x1 to a quarter of the width, 3x3, 1x1 back).
enum class RaftBlock { kResidual, kBottleneck };
/// The norm after each encoder convolution: none, InstanceNorm2d (no affine, no statistics), or
/// BatchNorm2d (affine, running statistics).
enum class RaftNorm { kNone, kInstance, kBatch };
/// The update block's GRU: one 3x3 ConvGRU (raft_small) or a 1x5 then a 5x1 one (raft_large's
/// "separable" GRU).
enum class RaftGru { kConv3x3, kSeparable };

/// torchvision's `_raft` arguments under shorter names; defaults are raft_large.
struct RaftConfig {
  /// Feature encoder widths: the 7x7 stride-2 stem, three stages of two blocks (strides 1, 2, 2:
  /// the stage of stride 1 keeps the stem's width), then a 1x1 conv whose width is the feature
  /// size the correlation sees.
  std::vector<int64_t> feature_layers = {64, 64, 96, 128, 256};
  RaftBlock feature_block = RaftBlock::kResidual;
  RaftNorm feature_norm = RaftNorm::kInstance;
  /// Context encoder widths, as feature_layers. Its output's first hidden_size channels (tanh)
  /// start the GRU; the rest (ReLU) is the context every update sees.
  std::vector<int64_t> context_layers = {64, 64, 96, 128, 256};
  RaftBlock context_block = RaftBlock::kResidual;
  RaftNorm context_norm = RaftNorm::kBatch;
  /// Correlation pyramid levels; each halves the second image's axes of the volume.
  int64_t corr_levels = 4;
  /// Lookup window radius r: corr_levels * (2r + 1)^2 correlation features per pixel.
  int64_t corr_radius = 4;
  /// Motion encoder widths on the correlation features: a 1x1 conv, then a 3x3 one when two.
  std::vector<int64_t> motion_corr_layers = {256, 192};
  /// Motion encoder widths on the flow: a 7x7 conv, then a 3x3 one.
  std::vector<int64_t> motion_flow_layers = {128, 64};
  /// Motion encoder output width, the raw flow's 2 channels included.
  int64_t motion_out_channels = 128;
  /// GRU hidden state width.
  int64_t hidden_size = 128;
  RaftGru gru = RaftGru::kSeparable;
  /// Flow head: 3x3 conv to this width, ReLU, 3x3 conv to the 2 flow channels.
  int64_t flow_head_hidden = 256;
  /// Mask predictor width (torchvision: 256) for convex upsampling; 0: no mask predictor, the flow
  /// is upsampled bilinearly.
  int64_t mask_predictor_hidden = 256;
};

/// "raft_large" or "raft_small" (torchvision's presets); throws kConfig naming `key` otherwise.
RaftConfig raft_preset(const std::string& name, const std::string& key = "raft.preset");

/// Checks every field (positive widths, five encoder widths, a stride-1 stage as wide as the stem,
/// one or two correlation convs, ...); throws kConfig naming the field.
void validate_raft_config(const RaftConfig& config);

/// The smallest image side the pyramid allows: 8 * 2^corr_levels (its coarsest level keeps at
/// least 2 pixels per axis, or the bilinear lookup divides by zero). 128 for both presets.
int64_t raft_min_image_size(const RaftConfig& config);

/// The correlation pyramid of two feature maps fmap1, fmap2 (B, C, h, w), any dtype: level l is
/// (B * h * w, 1, h / 2^l, w / 2^l) fp32, the dot products of every pixel of fmap1 with every pixel
/// of fmap2 over sqrt(C), average-pooled l times over fmap2's axes. Computed in fp32 with autocast
/// off.
std::vector<torch::Tensor> raft_correlation_pyramid(const torch::Tensor& fmap1, const torch::Tensor& fmap2,
                                                    int64_t levels);

/// Looks the pyramid up around `coords` (B, 2, h, w) fp32, absolute (x, y) positions in fmap2's
/// pixels: at level l a (2r + 1)^2 window, one pixel apart, around coords / 2^l, sampled
/// bilinearly (zero outside). Returns (B, levels * (2r + 1)^2, h, w) fp32, level-major; within a
/// window the channel (i, j) -> i * (2r + 1) + j is offset (i - r) in x and (j - r) in y, as in
/// torchvision (whose weights expect that order).
torch::Tensor raft_correlation_lookup(const std::vector<torch::Tensor>& pyramid, const torch::Tensor& coords,
                                      int64_t radius);

/// Convex upsampling: flow (B, 2, h, w) and mask (B, 9 * 64, h, w), any dtype -> (B, 2, 8h, 8w)
/// fp32, each fine pixel a softmax-weighted combination of 8x its coarse pixel's 3 x 3 neighbours
/// (zero outside the image). The mask's channels are (neighbour, row in the 8 x 8 cell, column).
torch::Tensor raft_upsample_convex(const torch::Tensor& flow, const torch::Tensor& mask);

/// Bilinear upsampling (align_corners): flow (B, 2, h, w) -> 8x the flow at (B, 2, 8h, 8w) fp32.
torch::Tensor raft_upsample_bilinear(const torch::Tensor& flow);

class RaftEncoderImpl;
class RaftUpdateBlockImpl;
class RaftMaskPredictorImpl;

class RaftImpl : public torch::nn::Module {
 public:
  /// Validates `config` (kConfig); the weights are LibTorch's initialisation until loaded.
  explicit RaftImpl(const RaftConfig& config);

  /// The flow from image1 to image2 after `num_flow_updates` updates: image1, image2 (B, 3, H, W)
  /// in [-1, 1], H and W multiples of 8 and at least raft_min_image_size -> (B, 2, H, W) fp32,
  /// (x, y) displacements in pixels. Images are converted to the weights' dtype. Throws kData for
  /// images of the wrong shape, size or device, kConfig for num_flow_updates < 1.
  torch::Tensor forward(const torch::Tensor& image1, const torch::Tensor& image2,
                        int64_t num_flow_updates = 12);

  /// The same, with the upsampled flow after every update (the last one is forward()'s): what
  /// torchvision's RAFT returns and its training loss weighs.
  std::vector<torch::Tensor> forward_all(const torch::Tensor& image1, const torch::Tensor& image2,
                                         int64_t num_flow_updates = 12);

  const RaftConfig& config() const { return config_; }

  /// Every parameter and BatchNorm statistic by torchvision key. BatchNorm's num_batches_tracked
  /// is not held (inference never reads it): the loader accepts and skips it.
  std::map<std::string, torch::Tensor> torchvision_tensors();

 private:
  std::vector<torch::Tensor> run(const torch::Tensor& image1, const torch::Tensor& image2,
                                 int64_t num_flow_updates, bool every_update);

  RaftConfig config_;
  std::shared_ptr<RaftEncoderImpl> feature_encoder_;
  std::shared_ptr<RaftEncoderImpl> context_encoder_;
  std::shared_ptr<RaftUpdateBlockImpl> update_block_;
  std::shared_ptr<RaftMaskPredictorImpl> mask_predictor_;  // null without convex upsampling
};
TORCH_MODULE(Raft);

/// Copies a torchvision state dict (`weights`, keys exactly torchvision's) into `raft`. Strict:
/// missing, unexpected and mis-shaped keys are one kCheckpoint error naming `source` and each key;
/// `<bn>.num_batches_tracked` is accepted for every BatchNorm and skipped.
void load_raft_weights(RaftImpl& raft, const safetensors::TensorMap& weights, const std::string& source);

/// Builds RAFT for `config` and loads the torchvision state dict in the safetensors file `path`
/// (e.g. `save_file(raft_large(weights=...).state_dict(), path)`), strictly as load_raft_weights;
/// kCheckpoint when the file does not exist. Returns the module in eval mode on `device` in
/// `dtype`, its parameters frozen.
Raft load_raft(const std::string& path, const RaftConfig& config, torch::Device device = torch::kCPU,
               torch::Dtype dtype = torch::kFloat32);

}  // namespace tt
