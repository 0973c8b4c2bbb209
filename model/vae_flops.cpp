// The VAE encoder's FLOP count (see vae_flops.h), walking the layers as model/vae.cpp builds them.
#include "model/vae_flops.h"

#include <algorithm>

namespace tt {
namespace {

// Operations per element of the non-matmul work (vae_flops.h states the convention).
constexpr double kGroupNormOps = 8.0;
constexpr double kSiluOps = 4.0;
constexpr double kAddOps = 1.0;

// Shapes as they flow: channels and (T, H, W) of one sample; the batch multiplies at the end.
struct Walk {
  const HunyuanVaeConfig& config;
  double batch;
  int64_t channels, frames, height, width;
  VaeFlops flops;

  double voxels() const {
    return static_cast<double>(frames) * static_cast<double>(height) * static_cast<double>(width);
  }
  // A causal conv (time padded by k - 1 in front, space by k / 2 on each side) with a stride.
  void conv(int64_t out, int64_t kernel, int64_t stride_t = 1, int64_t stride_s = 1) {
    const int64_t pad_s = kernel / 2;
    frames = (frames + (kernel - 1) - kernel) / stride_t + 1;
    height = (height + 2 * pad_s - kernel) / stride_s + 1;
    width = (width + 2 * pad_s - kernel) / stride_s + 1;
    flops.conv += 2.0 * batch * static_cast<double>(channels) * static_cast<double>(out) *
                  static_cast<double>(kernel * kernel * kernel) * voxels();
    channels = out;
  }
  void norm_silu() {
    flops.norm += kGroupNormOps * batch * static_cast<double>(channels) * voxels();
    flops.elementwise += kSiluOps * batch * static_cast<double>(channels) * voxels();
  }
  void resnet(int64_t out) {
    const int64_t in = channels;
    norm_silu();
    conv(out, 3);
    norm_silu();
    conv(out, 3);
    if (in != out) {  // the 1x1x1 shortcut on the block's input (same T, H, W)
      flops.conv += 2.0 * batch * static_cast<double>(in) * static_cast<double>(out) * voxels();
    }
    flops.elementwise += kAddOps * batch * static_cast<double>(out) * voxels();
  }
  void attention() {
    const double n = voxels(), c = static_cast<double>(channels);
    flops.norm += kGroupNormOps * batch * c * n;
    flops.attention_linear += 4.0 * 2.0 * batch * n * c * c;
    flops.attention_scores += 4.0 * batch * n * n * c;
    flops.elementwise += kAddOps * batch * c * n;
  }
};

int64_t log2_of(int64_t value) {
  int64_t bits = 0;
  while ((int64_t{1} << bits) < value) ++bits;
  return bits;
}

}  // namespace

VaeFlops& VaeFlops::operator+=(const VaeFlops& other) {
  conv += other.conv;
  attention_linear += other.attention_linear;
  attention_scores += other.attention_scores;
  norm += other.norm;
  elementwise += other.elementwise;
  passes += other.passes;
  return *this;
}

namespace {

// One pass, stage by stage (vae_stage_names): each entry is what that stage adds.
std::vector<std::pair<std::string, VaeFlops>> pass_stages(const HunyuanVaeConfig& c, int64_t batch, int64_t frames,
                                                          int64_t height, int64_t width) {
  Walk walk{c, static_cast<double>(batch), c.in_channels, frames, height, width, {}};
  const std::vector<std::string> names = vae_stage_names(c);
  std::vector<std::pair<std::string, VaeFlops>> stages;
  VaeFlops before;
  auto close = [&] {  // the stage just walked: the count since the last one
    VaeFlops added = walk.flops;
    added.conv -= before.conv;
    added.attention_linear -= before.attention_linear;
    added.attention_scores -= before.attention_scores;
    added.norm -= before.norm;
    added.elementwise -= before.elementwise;
    added.passes = 1;
    stages.emplace_back(names[stages.size()], added);
    before = walk.flops;
  };
  const auto& channels = c.block_out_channels;
  const int64_t blocks = static_cast<int64_t>(channels.size());
  const int64_t spatial_layers = log2_of(c.spatial_compression_ratio);
  const int64_t time_layers = log2_of(c.temporal_compression_ratio);
  walk.conv(channels[0], 3);
  close();  // conv_in
  for (int64_t i = 0; i < blocks; ++i) {
    for (int64_t layer = 0; layer < c.layers_per_block; ++layer) walk.resnet(channels[i]);
    // As HunyuanVaeEncoderImpl: which blocks end in a strided conv, halving space and/or time.
    const bool last = i == blocks - 1;
    const bool space = i < spatial_layers;
    const bool time =
        c.temporal_compression_ratio == 4 ? (i >= blocks - 1 - time_layers && !last) : i < time_layers;
    if (space || time) walk.conv(channels[i], 3, time ? 2 : 1, space ? 2 : 1);
    close();  // down<i>
  }
  walk.resnet(walk.channels);
  if (c.mid_block_add_attention) walk.attention();
  walk.resnet(walk.channels);
  close();  // mid
  walk.norm_silu();
  walk.conv(2 * c.latent_channels, 3);
  close();  // out
  walk.conv(2 * c.latent_channels, 1);  // quant_conv
  close();  // quant
  return stages;
}

VaeFlops sum_of(const std::vector<std::pair<std::string, VaeFlops>>& stages) {
  VaeFlops total;
  for (const auto& [name, flops] : stages) total += flops;
  total.passes = stages.empty() ? 0 : stages.front().second.passes;
  return total;
}

}  // namespace

VaeFlops vae_encoder_flops(const HunyuanVaeConfig& c, int64_t batch, int64_t frames, int64_t height,
                           int64_t width) {
  return sum_of(pass_stages(c, batch, frames, height, width));
}

std::vector<std::pair<std::string, VaeFlops>> vae_encoder_stage_flops(const HunyuanVaeConfig& c, int64_t batch,
                                                                      int64_t frames, int64_t height, int64_t width,
                                                                      const VaeTiling& tiling) {
  std::vector<std::pair<std::string, VaeFlops>> total;
  for (const std::vector<int64_t>& crop : vae_crop_shapes(c, batch, frames, height, width, tiling)) {
    const auto stages = pass_stages(c, crop[0], crop[2], crop[3], crop[4]);  // (B, C, T, H, W)
    if (total.empty()) {
      total = stages;
    } else {
      for (size_t i = 0; i < stages.size(); ++i) total[i].second += stages[i].second;
    }
  }
  return total;
}

VaeFlops vae_encoder_flops(const HunyuanVaeConfig& c, int64_t batch, int64_t frames, int64_t height,
                           int64_t width, const VaeTiling& tiling) {
  return sum_of(vae_encoder_stage_flops(c, batch, frames, height, width, tiling));
}

}  // namespace tt
