// The encoder half of HunyuanVideo's causal 3D VAE (diffusers AutoencoderKLHunyuanVideo): 8x
// spatial and 4x temporal compression with a causal first frame (T frames -> (T - 1) / 4 + 1),
// `latent_channels` (16) latent channels. Parameters carry diffusers' key names (`encoder.*`,
// `quant_conv.*`), so a diffusers VAE safetensors file loads as it is (its decoder keys are
// ignored). Frozen: the encoder only runs under no-grad, in eval.
//
// Layout, as diffusers builds it: conv_in; one down block per block_out_channels entry
// (layers_per_block resnets, then a strided causal conv that halves H and W in the first
// log2(spatial) blocks and T in the log2(temporal) blocks before the last); a mid block (resnet,
// single-head self-attention over all tokens with a frame-causal mask, resnet); GroupNorm, SiLU,
// conv_out to 2 x latent_channels (mean, log-variance); quant_conv (1x1x1). Causal convs pad time
// with two copies of the first frame in front (replicate) and space by one on each side
// (replicate). GroupNorm's statistics span the whole clip, so the encoder as a whole is not causal:
// encoding a clip in temporal tiles changes the result (diffusers' tiling blends tiles for that).
#pragma once

#include <torch/nn.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tt {

struct HunyuanVaeConfig {
  int64_t in_channels = 3;
  int64_t out_channels = 3;  // the decoder's output channels (RGB)
  int64_t latent_channels = 16;
  std::vector<int64_t> block_out_channels = {128, 256, 512, 512};
  int64_t layers_per_block = 2;
  int64_t norm_num_groups = 32;
  double scaling_factor = 0.476986;
  int64_t spatial_compression_ratio = 8;
  int64_t temporal_compression_ratio = 4;
  bool mid_block_add_attention = true;
};

/// "hunyuan" (the released VAE) or "tiny" (a few channels, for CPU tests); throws kConfig naming
/// `key` otherwise.
HunyuanVaeConfig hunyuan_vae_preset(const std::string& name, const std::string& key = "tele_tron.vae.preset");

/// Reads a diffusers AutoencoderKLHunyuanVideo config.json (text); throws kCheckpoint for fields this
/// encoder does not support (act_fn other than silu, temporal ratio other than 4, ...).
HunyuanVaeConfig hunyuan_vae_config_from_json(const std::string& text, const std::string& source);

/// Checks the config (channels divisible by groups, ratios, ...); throws kConfig.
void validate_hunyuan_vae_config(const HunyuanVaeConfig& config);

/// Latent shape (C, T', H', W') for a (T, H, W) clip; throws kData unless T = 4n + 1 and H, W are
/// multiples of the spatial ratio.
std::vector<int64_t> vae_latent_shape(const HunyuanVaeConfig& config, int64_t frames, int64_t height,
                                      int64_t width);

/// diffusers' tiled encoding (AutoencoderKLHunyuanVideo._encode with framewise encoding and
/// enable_tiling), reproduced exactly so latents match diffusers': clips longer than min_frames are
/// encoded in overlapping windows of min_frames + 1 frames every stride_frames, each window split
/// into overlapping min_height x min_width tiles every stride_height/width pixels when larger; tiles
/// overlap by (min - stride) / ratio latent rows/columns/frames, blended linearly. Bounds memory:
/// activations scale with the tile, not the clip.
struct VaeTiling {
  bool temporal = true;  // diffusers: use_framewise_encoding (on by default)
  int64_t min_frames = 16, stride_frames = 12;
  bool spatial = false;  // diffusers: enable_tiling()
  int64_t min_height = 256, min_width = 256, stride_height = 192, stride_width = 192;
};

/// The encoder passes diffusers' tiling makes of a (frames, height, width) clip: temporal windows
/// (first frame, frame count) and, in each, tiles starting at tile_rows x tile_cols (each at most
/// min_height x min_width, cut at the border). Checks the tiling (kConfig). moments_tiled encodes
/// exactly these crops; vae_encoder_flops counts them.
struct VaeTilePlan {
  bool split_time = false, split_space = false;
  std::vector<std::pair<int64_t, int64_t>> windows;
  std::vector<int64_t> tile_rows{0}, tile_cols{0};
};
VaeTilePlan vae_tile_plan(const HunyuanVaeConfig& config, int64_t frames, int64_t height, int64_t width,
                          const VaeTiling& tiling);

/// How the encoder runs on CUDA, not what it computes (outputs equal within bf16 rounding):
/// channels-last (NDHWC) activations and weights, the layout cuDNN's fast 3D convolution kernels
/// take; teletron's fused GroupNorm+SiLU kernel instead of LibTorch's GroupNorm then silu; tiles of
/// one shape (spatial tiles and temporal windows) encoded together as one batch (GroupNorm
/// statistics are per sample, so batching changes nothing; memory grows with the batch): at most
/// `tile_batch` at a time, or with kTileBatchAuto as many as keep the batch's voxels within those of
/// the plan's largest crop (vae_tile_batches), so the peak stays that of encoding the largest crop
/// alone, as diffusers' one-tile-at-a-time loop does. CPU tensors keep the NCDHW layout and
/// LibTorch's GroupNorm.
inline constexpr int64_t kTileBatchAuto = 0;
struct VaeRuntime {
  bool channels_last = true;
  bool fused_norm = true;
  int64_t tile_batch = kTileBatchAuto;
  /// The fused norm writes straight into the causal convolution's padded input, borders included
  /// (channels-last CUDA): one copy of each normalised activation fewer. Off here (the decoder's
  /// default); training and bench-vae turn it on (vae.fused_padding).
  bool norm_pads = false;
  /// CUDA: each input shape's encoder pass captured once as a CUDA graph (after one eager pass) and
  /// replayed, every replay on the VAE's own stream one after another (threads may share the VAE);
  /// the graphs' memory is one private pool, held while the VAE lives. A capture that fails leaves
  /// that shape eager (TT_ERR_GRAPH warning). Off: an H100 measured no gain (vae.cuda_graphs).
  bool cuda_graphs = false;
  /// The resnet convolutions run without their bias: conv1's is added by the norm that reads its
  /// output, conv2's and the shortcut's by the residual sum (one pass over each output fewer).
  bool fold_bias = false;
  /// CUDA: the first convolution (few input channels) as an im2col matrix times the weight
  /// (causal_conv3d_gemm), and the mid block's attention as two cuBLAS products with an fp32 softmax
  /// between them, instead of cuDNN's convolution and SDPA's memory-efficient kernel.
  bool gemm_first_and_attention = false;
  /// With norm_pads: the norm writes only the interior of the padded buffer and one border kernel
  /// fills the pads, instead of the norm writing them itself (its edge loops made the apply kernel
  /// 45 ms where 29 ms with the border kernel, per frame-window encode on an H100; vae.fused_padding).
  bool border_kernel = false;
  /// A down block's last resnet writes its residual sum straight into the padded input of the
  /// downsampler's causal convolution (add_residual_bias_padded: the interior, then the pads), instead
  /// of the sum in place and a padding copy after it (≈11 ms of copies per 33x480x832 frame-window
  /// encode in an H100 trace). bench-vae runtime fast-residual-pads; not yet in training's defaults.
  bool residual_pads = false;
};

/// How moments_tiled groups its crops: `shapes` holds each crop's (B, C, T, H, W); crops of one
/// shape are batched together, in order, at most `tile_batch` at a time (kTileBatchAuto: at most
/// floor(voxels of the largest crop / voxels of this shape), at least 1; activation memory grows
/// with the voxels a batch holds: the H200 peaks in BENCHMARKS.md come to about 1.6 KB a voxel in
/// bf16, whole clip, windows and tiles alike). Returns the batches as
/// lists of crop indices, each shape's batches in crop order, shapes in first-seen order.
std::vector<std::vector<size_t>> vae_tile_batches(const std::vector<std::vector<int64_t>>& shapes, int64_t tile_batch);

/// The (B, in_channels, T, H, W) shape of every crop moments_tiled encodes of a (batch, in_channels,
/// frames, height, width) clip through `tiling`, in its order (windows, then rows, then columns).
std::vector<std::vector<int64_t>> vae_crop_shapes(const HunyuanVaeConfig& config, int64_t batch, int64_t frames,
                                                  int64_t height, int64_t width, const VaeTiling& tiling);

/// The input of the encoder pass of that clip holding the most voxels, as `tile_batch` groups the
/// crops (vae_tile_batches): (crops x batch, in_channels, T, H, W). Its activations are the most the
/// encoder holds at once for the clip (what vae.memory_share bounds).
std::vector<int64_t> vae_largest_pass(const HunyuanVaeConfig& config, int64_t batch, int64_t frames, int64_t height,
                                      int64_t width, const VaeTiling& tiling, int64_t tile_batch);

/// The encoder's stages in order, as the stage hook names them: conv_in, down0 .. down<n-1> (one per
/// block_out_channels entry), mid, out, quant.
std::vector<std::string> vae_stage_names(const HunyuanVaeConfig& config);

class HunyuanVaeEncoderImpl;

/// The encoder and quant_conv; forward gives the moments.
class HunyuanVaeImpl : public torch::nn::Module {
 public:
  explicit HunyuanVaeImpl(const HunyuanVaeConfig& config);

  /// x (B, 3, T, H, W) in [-1, 1] -> moments (B, 2 * latent_channels, T', H', W'): mean, then
  /// log-variance.
  torch::Tensor moments(const torch::Tensor& x);

  /// moments() through diffusers' tiling (see VaeTiling); equal to moments() when no tile splits.
  torch::Tensor moments_tiled(const torch::Tensor& x, const VaeTiling& tiling);

  /// The training latents: mean * scaling_factor (no sampling), (B, latent_channels, T', H', W').
  torch::Tensor encode_mean(const torch::Tensor& x);
  torch::Tensor encode_mean(const torch::Tensor& x, const VaeTiling& tiling);

  const HunyuanVaeConfig& config() const { return config_; }
  void set_runtime(const VaeRuntime& runtime) { runtime_ = runtime; }
  /// Profiling: `hook` is called with "begin" as each encoder pass starts and with a stage's name as
  /// its work has been queued: "conv_in", "down0" .. "down<n-1>", "mid", "out" (GroupNorm, SiLU,
  /// conv_out), "quant" (vae_stage_names). Null (the default) calls nothing.
  void set_stage_hook(std::function<void(const char*)> hook) { stage_hook_ = std::move(hook); }
  const VaeRuntime& runtime() const { return runtime_; }
  /// VaeRuntime::cuda_graphs: drops every captured pass and gives their private pool's memory back
  /// (the next pass of each shape is captured again). Waits for replays in flight.
  void release_graphs();

  /// Fixed random weights from `seed` (tests and benchmarks without the released weights): norm gains
  /// 1, biases 0, every other weight N(0, 1 / fan_in). The same on every machine.
  void randomize_weights(uint64_t seed);

  /// Parameters by diffusers key (encoder.*, quant_conv.*).
  std::map<std::string, torch::Tensor> diffusers_parameters();

 private:
  HunyuanVaeConfig config_;
  VaeRuntime runtime_;
  std::function<void(const char*)> stage_hook_;
  struct Graphs;  // VaeRuntime::cuda_graphs: the captured passes by input shape (model/vae.cpp)
  std::shared_ptr<Graphs> graphs_;
  std::mutex graphs_mutex_;  // threads share one VAE: graphs_, its captures and its replays
  torch::Tensor pass(const torch::Tensor& x);  // quant_conv(encoder(x)), x in the weights' layout
  torch::Tensor pass_graphed(const torch::Tensor& x);
  std::vector<torch::Tensor> moments_batched(const std::vector<torch::Tensor>& crops);
  std::shared_ptr<HunyuanVaeEncoderImpl> encoder_;
  torch::nn::Conv3d quant_conv_{nullptr};
};
TORCH_MODULE(HunyuanVae);

/// A diffusers VAE's architecture and weight files: `path` is a save_pretrained folder (config.json +
/// diffusion_pytorch_model.safetensors, or shards + index json), a pipeline folder (its `vae/`), or
/// a safetensors file, whose architecture then is `config_if_no_json`. Throws kCheckpoint when
/// nothing is there. Shared by the encoder's and the decoder's loaders.
struct HunyuanVaeFiles {
  HunyuanVaeConfig config;
  std::vector<std::string> files;  // safetensors files holding the weights
};
HunyuanVaeFiles find_hunyuan_vae_files(const std::string& path, const HunyuanVaeConfig& config_if_no_json);

/// Builds the encoder from a diffusers VAE and loads its weights (encoder.*, quant_conv.*; the
/// decoder's keys are skipped): `path` is a save_pretrained folder (config.json + safetensors, or
/// shards + index json), a pipeline folder (its `vae/`), or a safetensors file, whose architecture
/// then comes from `config_if_no_json`. Strict on the encoder's keys: missing, unexpected and
/// mis-shaped ones are one kCheckpoint error. Returns the module in eval mode on `device` in `dtype`.
HunyuanVae load_hunyuan_vae(const std::string& path, const HunyuanVaeConfig& config_if_no_json,
                            torch::Device device = torch::kCPU, torch::Dtype dtype = torch::kFloat32);

}  // namespace tt
