// HunyuanVideo VAE decoder (see vae_decoder.h): the modules, whole and tiled decoding, loading.
#include "model/vae_decoder.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/errors.h"
#include "core/safetensors.h"
#include "model/vae_blocks.h"
#include "model/weights.h"

namespace tt {
namespace {

namespace F = torch::nn::functional;

int64_t log2_floor(int64_t value) {
  int64_t bits = 0;
  while ((int64_t{1} << (bits + 1)) <= value) ++bits;
  return bits;
}

}  // namespace

// diffusers HunyuanVideoUpsampleCausal3D (`upsamplers.0`, its conv under `conv`): nearest upsampling
// by (time, space, space), the first frame in space only (the causal frame stays one frame), then a
// causal conv. (B, C, T, H, W) -> (B, C, 1 + time (T - 1), space H, space W), x's memory format.
class VaeUpsampleImpl : public torch::nn::Module {
 public:
  VaeUpsampleImpl(int64_t channels, int64_t time, int64_t space) : time_(time), space_(space) {
    conv = register_module("conv", CausalConv3d(channels, channels, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const auto format = x.suggest_memory_format();
    const auto s = static_cast<double>(space_), t = static_cast<double>(time_);
    torch::Tensor up =
        F::interpolate(
            x.select(2, 0),
            F::InterpolateFuncOptions().scale_factor(std::vector<double>{s, s}).mode(torch::kNearest))
            .unsqueeze(2);  // (B, C, 1, sH, sW)
    if (x.size(2) > 1) {
      torch::Tensor rest = F::interpolate(x.narrow(2, 1, x.size(2) - 1).contiguous(format),
                                          F::InterpolateFuncOptions()
                                              .scale_factor(std::vector<double>{t, s, s})
                                              .mode(torch::kNearest));  // (B, C, t (T - 1), sH, sW)
      up = torch::cat({up, rest}, 2);
    }
    return conv(up.contiguous(format));
  }
  CausalConv3d conv{nullptr};

 private:
  int64_t time_, space_;
};
TORCH_MODULE(VaeUpsample);

// diffusers HunyuanVideoUpBlock3D: `layers` resnets (the first changes the channel count), then an
// upsampler when time or space grows.
class VaeUpBlockImpl : public torch::nn::Module {
 public:
  VaeUpBlockImpl(int64_t in, int64_t out, int64_t layers, int64_t groups, int64_t time, int64_t space) {
    resnets = register_module("resnets", torch::nn::ModuleList());
    for (int64_t i = 0; i < layers; ++i) resnets->push_back(VaeResnet(i == 0 ? in : out, out, groups));
    if (time > 1 || space > 1) {
      upsamplers = register_module("upsamplers", torch::nn::ModuleList());
      upsamplers->push_back(VaeUpsample(out, time, space));
    }
  }
  torch::Tensor forward(torch::Tensor x, const VaeRuntime& rt) {
    for (const auto& resnet : *resnets) x = resnet->as<VaeResnetImpl>()->forward(x, rt);
    if (upsamplers) x = upsamplers[0]->as<VaeUpsampleImpl>()->forward(x);
    return x;
  }
  torch::nn::ModuleList resnets{nullptr}, upsamplers{nullptr};
};
TORCH_MODULE(VaeUpBlock);

// diffusers HunyuanVideoDecoder3D. (B, latent, T', H', W') -> (B, out, 4 (T' - 1) + 1, 8 H', 8 W').
class VaeDecoder3DImpl : public torch::nn::Module {
 public:
  explicit VaeDecoder3DImpl(const HunyuanVaeConfig& c) {
    const auto& channels = c.block_out_channels;
    const int64_t blocks = static_cast<int64_t>(channels.size());
    const int64_t spatial_layers = log2_floor(c.spatial_compression_ratio);
    const int64_t time_layers = log2_floor(c.temporal_compression_ratio);
    conv_in = register_module("conv_in", CausalConv3d(c.latent_channels, channels.back(), 3));
    mid_block = register_module("mid_block",
                                VaeMidBlock(channels.back(), c.norm_num_groups, c.mid_block_add_attention));
    up_blocks = register_module("up_blocks", torch::nn::ModuleList());
    int64_t previous = channels.back();
    for (int64_t i = 0; i < blocks; ++i) {
      const int64_t out = channels[static_cast<size_t>(blocks - 1 - i)];
      const bool last = i == blocks - 1;
      // diffusers (4x time only): space doubles in the first blocks, time in the ones before the last.
      const bool space = i < spatial_layers;
      const bool time = i >= blocks - 1 - time_layers && !last;
      up_blocks->push_back(
          VaeUpBlock(previous, out, c.layers_per_block + 1, c.norm_num_groups, time ? 2 : 1, space ? 2 : 1));
      previous = out;
    }
    conv_norm_out = register_module(
        "conv_norm_out",
        torch::nn::GroupNorm(torch::nn::GroupNormOptions(c.norm_num_groups, channels[0]).eps(1e-6)));
    conv_out = register_module("conv_out", CausalConv3d(channels[0], c.out_channels, 3));
  }
  torch::Tensor forward(torch::Tensor x, const VaeRuntime& rt) {
    x = mid_block->forward(conv_in(x), rt);
    for (const auto& block : *up_blocks) x = block->as<VaeUpBlockImpl>()->forward(std::move(x), rt);
    return vae_norm_conv(conv_norm_out, *conv_out, std::move(x), true, rt);
  }
  CausalConv3d conv_in{nullptr}, conv_out{nullptr};
  VaeMidBlock mid_block{nullptr};
  torch::nn::ModuleList up_blocks{nullptr};
  torch::nn::GroupNorm conv_norm_out{nullptr};
};

HunyuanVaeDecoderImpl::HunyuanVaeDecoderImpl(const HunyuanVaeConfig& config) : config_(config) {
  validate_hunyuan_vae_config(config);
  TT_CHECK(config.temporal_compression_ratio == 4, ErrorCode::kConfig,
           "the VAE decoder supports temporal_compression_ratio 4 only (as diffusers), got ",
           config.temporal_compression_ratio);
  decoder_ = register_module("decoder", std::make_shared<VaeDecoder3DImpl>(config));
  post_quant_conv_ = register_module(
      "post_quant_conv",
      torch::nn::Conv3d(torch::nn::Conv3dOptions(config.latent_channels, config.latent_channels, 1)));
}

namespace {

void check_latents(const torch::Tensor& z, const HunyuanVaeConfig& config) {
  TT_CHECK(z.dim() == 5 && z.size(1) == config.latent_channels && z.size(2) >= 1 && z.size(3) >= 1 &&
               z.size(4) >= 1,
           ErrorCode::kData, "VAE decoder input must be latents (B, ", config.latent_channels,
           ", T', H', W') with T', H', W' >= 1, got ", z.sizes());
}

}  // namespace

torch::Tensor HunyuanVaeDecoderImpl::decode(const torch::Tensor& z) {
  check_latents(z, config_);
  torch::NoGradGuard no_grad;
  // Weights follow the activations' layout (NDHWC on CUDA when the runtime asks: cuDNN's fast 3D
  // kernels), converted when the runtime or the device changes which one that is.
  const auto layout = z.is_cuda() && runtime_.channels_last ? torch::MemoryFormat::ChannelsLast3d
                                                            : torch::MemoryFormat::Contiguous;
  if (!decoder_->conv_in->conv->weight.is_contiguous(layout)) {
    for (auto& p : parameters())
      if (p.dim() == 5) p.set_data(p.contiguous(layout));
  }
  return decoder_->forward(post_quant_conv_(z.contiguous(layout)), runtime_).contiguous();
}

// One frame window (or the whole latent) in spatial tiles when the tiling asks and the latent is
// larger than a tile (diffusers' tiled_decode), else whole. Rows of tiles are decoded one after the
// other; each tile blends with the (already blended) tile above and the one to its left, and its
// top-left stride x stride pixels go straight into the output.
torch::Tensor HunyuanVaeDecoderImpl::decode_spatial_tiles(const torch::Tensor& z, const VaeDecodeTiling& t) {
  const int64_t s = config_.spatial_compression_ratio;
  const int64_t height = z.size(3), width = z.size(4);  // latent
  const int64_t tile_h = t.min_height / s, tile_w = t.min_width / s;
  if (!t.spatial || (height <= tile_h && width <= tile_w)) return decode(z);
  const int64_t step_h = t.stride_height / s, step_w = t.stride_width / s;
  const int64_t blend_h = t.min_height - t.stride_height, blend_w = t.min_width - t.stride_width;  // pixels
  const int64_t out_h = height * s, out_w = width * s;
  torch::Tensor video;               // (B, C, T, out_h, out_w)
  std::vector<torch::Tensor> above;  // the previous row's blended tiles (B, C, T, h, w)
  int64_t top = 0;
  for (int64_t i = 0; i < height; i += step_h) {
    std::vector<torch::Tensor> row;
    int64_t left = 0, row_height = 0;
    for (int64_t j = 0; j < width; j += step_w) {
      torch::Tensor tile =
          decode(z.narrow(3, i, std::min(tile_h, height - i)).narrow(4, j, std::min(tile_w, width - j)));
      if (!above.empty()) tile = vae_blend(above[row.size()], tile, 3, blend_h);
      if (!row.empty()) tile = vae_blend(row.back(), tile, 4, blend_w);
      if (!video.defined())
        video = torch::empty({tile.size(0), tile.size(1), tile.size(2), out_h, out_w}, tile.options());
      const int64_t h = std::min({t.stride_height, tile.size(3), out_h - top});
      const int64_t w = std::min({t.stride_width, tile.size(4), out_w - left});
      if (h > 0 && w > 0)
        video.narrow(3, top, h).narrow(4, left, w).copy_(tile.narrow(3, 0, h).narrow(4, 0, w));
      left += std::max<int64_t>(w, 0);
      row_height = std::max<int64_t>(h, 0);
      row.push_back(std::move(tile));
    }
    top += row_height;
    above = std::move(row);
  }
  TT_ASSERT(top == out_h, "tiled decode covered ", top, " of ", out_h, " rows");
  return video;
}

torch::Tensor HunyuanVaeDecoderImpl::decode(const torch::Tensor& z, const VaeDecodeTiling& t) {
  check_latents(z, config_);
  const int64_t r = config_.temporal_compression_ratio, s = config_.spatial_compression_ratio;
  TT_CHECK(t.stride_frames % r == 0 && t.min_frames % r == 0 && t.stride_frames > 0 &&
               t.stride_frames <= t.min_frames,
           ErrorCode::kConfig, "VAE decode tiling: frame tile ", t.min_frames, " and stride ",
           t.stride_frames, " must be multiples of ", r, " with 0 < stride <= tile");
  TT_CHECK(t.stride_height % s == 0 && t.stride_width % s == 0 && t.min_height % s == 0 &&
               t.min_width % s == 0 && t.stride_height > 0 && t.stride_width > 0 &&
               t.stride_height <= t.min_height && t.stride_width <= t.min_width,
           ErrorCode::kConfig, "VAE decode tiling: tile sizes and strides must be multiples of ", s,
           " with 0 < stride <= tile, got tiles ", t.min_height, "x", t.min_width, " every ", t.stride_height,
           "x", t.stride_width);
  const int64_t frames = z.size(2);
  const int64_t window = t.min_frames / r;  // latent frames after a window's first
  if (!t.temporal || frames <= window) return decode_spatial_tiles(z, t);
  // diffusers' _temporal_tiled_decode: windows of window + 1 latent frames every stride; the windows
  // after the first drop their first decoded frame (it belongs to the window before) and blend their
  // first min - stride frames with the previous window's last ones; each keeps stride frames (the
  // first stride + 1).
  const int64_t stride = t.stride_frames / r;
  const int64_t blend_frames = t.min_frames - t.stride_frames;
  const int64_t out_frames = (frames - 1) * r + 1;
  torch::Tensor video;     // (B, C, out_frames, H, W)
  torch::Tensor previous;  // the previous window's blended frames (B, C, n, H, W)
  int64_t written = 0;
  for (int64_t i = 0; i < frames; i += stride) {
    torch::Tensor tile = decode_spatial_tiles(z.narrow(2, i, std::min(window + 1, frames - i)), t);
    if (i > 0) tile = vae_blend(previous, tile.narrow(2, 1, tile.size(2) - 1), 2, blend_frames);
    if (!video.defined())
      video =
          torch::empty({tile.size(0), tile.size(1), out_frames, tile.size(3), tile.size(4)}, tile.options());
    const int64_t keep =
        std::min({i > 0 ? t.stride_frames : t.stride_frames + 1, tile.size(2), out_frames - written});
    if (keep > 0) video.narrow(2, written, keep).copy_(tile.narrow(2, 0, keep));
    written += std::max<int64_t>(keep, 0);
    previous = std::move(tile);
  }
  TT_ASSERT(written == out_frames, "temporal tiled decode wrote ", written, " of ", out_frames, " frames");
  return video;
}

torch::Tensor HunyuanVaeDecoderImpl::decode_latents(const torch::Tensor& latents,
                                                    const VaeDecodeTiling& tiling) {
  return decode(latents / config_.scaling_factor, tiling);
}

void HunyuanVaeDecoderImpl::randomize_weights(uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto generator = at::detail::createCPUGenerator(seed);
  for (auto& item : named_parameters()) {
    torch::Tensor& p = item.value();
    if (p.dim() == 1) {
      const std::string& key = item.key();
      const bool gain = key.find("norm") != std::string::npos && key.size() > 7 &&
                        key.compare(key.size() - 7, 7, ".weight") == 0;
      p.fill_(gain ? 1.0 : 0.0);
    } else {
      const double fan_in = static_cast<double>(p[0].numel());
      p.copy_(at::normal(0.0, 1.0 / std::sqrt(fan_in), p.sizes(), generator).to(p.options()));
    }
  }
}

std::map<std::string, torch::Tensor> HunyuanVaeDecoderImpl::diffusers_parameters() {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : named_parameters()) out[item.key()] = item.value();
  return out;
}

HunyuanVaeDecoder load_hunyuan_vae_decoder(const std::string& path, const HunyuanVaeConfig& config_if_no_json,
                                           torch::Device device, torch::Dtype dtype) {
  const HunyuanVaeFiles found = find_hunyuan_vae_files(path, config_if_no_json);
  HunyuanVaeDecoder vae(found.config);
  safetensors::TensorMap weights;
  for (const std::string& file : found.files) {
    const safetensors::Header header = safetensors::read_header(file);
    std::vector<std::string> names;
    for (const auto& [name, info] : header.tensors)  // the encoder is not built: its keys are skipped
      if (name.rfind("decoder.", 0) == 0 || name.rfind("post_quant_conv.", 0) == 0) names.push_back(name);
    if (names.empty()) continue;  // (an empty list would load every tensor)
    for (auto& [name, tensor] : safetensors::load(file, names)) weights[name] = std::move(tensor);
  }
  TT_CHECK_HINT(
      !weights.empty(), ErrorCode::kCheckpoint,
      "give the whole diffusers VAE (AutoencoderKLHunyuanVideo.save_pretrained), not an encoder-only file",
      path, ": no decoder weights (decoder.*, post_quant_conv.*) in it");
  load_weights_into(vae->diffusers_parameters(), weights, path);
  vae->to(device, dtype);
  vae->eval();
  for (auto& parameter : vae->parameters()) parameter.set_requires_grad(false);
  return vae;
}

}  // namespace tt
