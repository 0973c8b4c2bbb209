// `teletron bench-vae` (see bench_vae.h).
#include "app/bench_vae.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <vector>

#include "app/bench.h"
#include "app/config_schema.h"
#include "core/device.h"
#include "core/errors.h"
#include "core/file_io.h"
#include "core/gpu_timer.h"
#include "core/profiler.h"
#include "core/safetensors.h"
#include "model/vae.h"
#include "model/vae_flops.h"

namespace tt {
namespace {

void sync(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// Time per encoder stage from the stage hook's marks: on CUDA the GPU interval of the current stream
// between one mark and the next (the stages of a pass tile it; a gap the host leaves while queueing
// counts in the stage after it), on the CPU the wall time between them (its ops run as called).
class StageClock {
 public:
  explicit StageClock(torch::Device device) : device_(device) {}
  void mark(const char* stage) {
    const auto now = std::chrono::steady_clock::now();
    if (std::strcmp(stage, "begin") != 0 && open_) {
      if (current_) {
        current_->stop();
        pending_.emplace_back(stage, current_);
      } else {
        totals_[stage] += std::chrono::duration<double, std::milli>(now - last_).count();
      }
    }
    open_ = std::strcmp(stage, "quant") != 0;  // the pass ends with quant_conv
    current_ = open_ ? GpuInterval::start(device_) : nullptr;
    last_ = std::chrono::steady_clock::now();
  }
  /// Summed ms per stage so far (waits for the GPU's intervals).
  std::map<std::string, double> totals() {
    for (const auto& [stage, interval] : pending_) totals_[stage] += interval->elapsed_ms();
    pending_.clear();
    return totals_;
  }

 private:
  torch::Device device_;
  bool open_ = false;
  std::shared_ptr<GpuInterval> current_;
  std::chrono::steady_clock::time_point last_;
  std::vector<std::pair<std::string, std::shared_ptr<GpuInterval>>> pending_;
  std::map<std::string, double> totals_;
};

// The config.json diffusers' AutoencoderKLHunyuanVideo reads (encoder fields; the decoder mirrors them).
nlohmann::json diffusers_config(const HunyuanVaeConfig& c) {
  // Block types one per entry of block_out_channels: diffusers' defaults list four.
  const size_t blocks = c.block_out_channels.size();
  return {{"_class_name", "AutoencoderKLHunyuanVideo"},
          {"down_block_types", std::vector<std::string>(blocks, "HunyuanVideoDownBlock3D")},
          {"up_block_types", std::vector<std::string>(blocks, "HunyuanVideoUpBlock3D")},
          {"in_channels", c.in_channels},
          {"out_channels", c.in_channels},
          {"latent_channels", c.latent_channels},
          {"block_out_channels", c.block_out_channels},
          {"layers_per_block", c.layers_per_block},
          {"norm_num_groups", c.norm_num_groups},
          {"act_fn", "silu"},
          {"scaling_factor", c.scaling_factor},
          {"spatial_compression_ratio", c.spatial_compression_ratio},
          {"temporal_compression_ratio", c.temporal_compression_ratio},
          {"mid_block_add_attention", c.mid_block_add_attention}};
}

VaeRuntime named_runtime(const std::string& name) {
  VaeRuntime rt;  // fast-auto: vae.tile_batch auto, vae.fused_padding and vae.gemm_kernels false
  if (name == "fast-auto") return rt;
  if (name == "fast-padded") {  // fast-auto + the norm written into the convolution's padded input
    rt.norm_pads = true;
    return rt;
  }
  if (name == "fast-folded") {  // fast-padded + the resnet convolutions' biases added by the norm and
                                // the residual sum that read their outputs
    rt.norm_pads = rt.fold_bias = true;
    return rt;
  }
  if (name == "fast-gemm") {  // fast-folded + the first convolution and the mid attention as cuBLAS GEMMs
    rt.norm_pads = rt.fold_bias = rt.gemm_first_and_attention = true;
    return rt;
  }
  if (name == "fast-gemm-borders") {  // fast-gemm with the norm writing the interior and a kernel the pads
    rt.norm_pads = rt.fold_bias = rt.gemm_first_and_attention = rt.border_kernel = true;
    return rt;
  }
  if (name == "fast-residual-pads") {  // fast-gemm-borders + each down block's last resnet sum written
                                       // straight into the downsampler's padded input
    rt.norm_pads = rt.fold_bias = rt.gemm_first_and_attention = rt.border_kernel = rt.residual_pads = true;
    return rt;
  }
  if (name == "fast-graphs") {  // fast-auto + each pass shape captured as a CUDA graph and replayed
    rt.cuda_graphs = true;
    return rt;
  }
  rt.tile_batch = 4;
  if (name == "fast-batched") return rt;
  if (name == "fast-padded-batched") {  // fast-batched + the norm written into the padded input
    rt.norm_pads = true;
    return rt;
  }
  rt.tile_batch = 1;
  if (name == "fast") return rt;
  if (name == "channels-last")
    rt.fused_norm = false;
  else if (name == "fused")
    rt.channels_last = false;
  else if (name == "plain")
    rt.channels_last = rt.fused_norm = false;
  else
    throw Error(ErrorCode::kConfig, str_cat("--runtimes: unknown runtime '", name, "'"),
                "use plain, channels-last, fused, fast, fast-auto, fast-padded, fast-folded, fast-gemm, "
                "fast-gemm-borders, fast-residual-pads, fast-graphs, fast-batched or fast-padded-batched");
  return rt;
}

// --tiling as a list of modes, each checked: whole (no windows, no tiles), frames (diffusers'
// default framewise encoding: windows of 16 + 1 frames; training's vae.tiling auto), tiled (windows
// and 256-px tiles; vae.tiling on); off = whole, on = tiled, both = whole,tiled.
std::vector<std::string> tiling_modes(const std::string& option) {
  const std::vector<std::string> modes = config_text::split(option == "both"  ? "whole,tiled"
                                                            : option == "off" ? "whole"
                                                            : option == "on"  ? "tiled"
                                                                              : option,
                                                            ',');
  for (const std::string& mode : modes)
    TT_CHECK_HINT(mode == "whole" || mode == "frames" || mode == "tiled", ErrorCode::kConfig,
                  "use whole, frames, tiled (comma-separated), or off/on/both", "--tiling: unknown ", mode);
  return modes;
}

VaeTiling tiling_of(const std::string& mode) {
  VaeTiling t;
  t.temporal = mode != "whole";
  t.spatial = mode == "tiled";
  return t;
}

// --stages: `o.steps` encodes with the stage hook, a table per stage (ms per clip, share, matmul
// TFLOP, TFLOP/s, MFU) and the time outside the passes; returns the rows as JSON.
nlohmann::json time_stages(HunyuanVae& vae, const std::function<torch::Tensor()>& encode,
                           const BenchVaeOptions& o, const torch::Device& device, const VaeTiling& tiles,
                           double matmul_rate) {
  StageClock clock(device);
  vae->set_stage_hook([&](const char* stage) { clock.mark(stage); });
  sync(device);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < o.steps; ++i) (void)encode();
  sync(device);
  const double steps = static_cast<double>(std::max<int64_t>(1, o.steps));
  const double wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / steps;
  vae->set_stage_hook(nullptr);
  const std::map<std::string, double> totals = clock.totals();
  const auto flops = vae_encoder_stage_flops(vae->config(), 1, o.frames, o.height, o.width, tiles);
  nlohmann::json rows = nlohmann::json::array();
  double staged = 0;
  std::printf("  | stage | ms per clip | share | TFLOP | TFLOP/s | MFU |\n  |---|---|---|---|---|---|\n");
  for (const auto& [stage, count] : flops) {
    const auto found = totals.find(stage);
    const double ms = found == totals.end() ? 0.0 : found->second / steps;
    staged += ms;
    const double rate = ms > 0 ? count.matmul() / (ms / 1000.0) : 0.0;
    std::printf("  | %s | %.2f | %.1f %% | %.4g | %.4g | %.1f %% |\n", stage.c_str(), ms,
                100.0 * ms / wall_ms, count.matmul() / 1e12, rate / 1e12, 100.0 * rate / matmul_rate);
    rows.push_back(
        {{"stage", stage}, {"ms", ms}, {"matmul_flops", count.matmul()}, {"mfu", rate / matmul_rate}});
  }
  const double outside = std::max(0.0, wall_ms - staged);
  std::printf("  | outside the passes (crops, batching, blends, host) | %.2f | %.1f %% | | | |\n", outside,
              100.0 * outside / wall_ms);
  rows.push_back({{"stage", "outside"}, {"ms", outside}});
  return rows;
}

}  // namespace

void run_bench_vae(const BenchVaeOptions& o) {
  if (o.count_only) {
    const HunyuanVaeConfig config = hunyuan_vae_preset(o.preset, "--preset");
    (void)vae_latent_shape(config, o.frames, o.height, o.width);
    for (const std::string& tiling : tiling_modes(o.tiling)) {
      const VaeFlops f = vae_encoder_flops(config, 1, o.frames, o.height, o.width, tiling_of(tiling));
      std::printf(
          "bench-vae flops %s %dx%dx%d (%s): %d pass(es); matmul %.6e (conv %.6e, attention projections "
          "%.6e, "
          "attention %.6e); GroupNorm %.6e, SiLU and adds %.6e\n",
          tiling.c_str(), static_cast<int>(o.frames), static_cast<int>(o.height), static_cast<int>(o.width),
          o.preset.c_str(), static_cast<int>(f.passes), f.matmul(), f.conv, f.attention_linear,
          f.attention_scores, f.norm, f.elementwise);
      if (!o.json.empty()) {
        std::ofstream out(o.json, std::ios::app);
        out << nlohmann::json({{"variant", tiling},
                               {"preset", o.preset},
                               {"frames", o.frames},
                               {"height", o.height},
                               {"width", o.width},
                               {"passes", f.passes},
                               {"matmul_flops", f.matmul()},
                               {"conv_flops", f.conv},
                               {"attention_linear_flops", f.attention_linear},
                               {"attention_score_flops", f.attention_scores},
                               {"norm_ops", f.norm},
                               {"elementwise_ops", f.elementwise}})
                   .dump()
            << "\n";
      }
    }
    return;
  }
  const torch::Device device = resolve_device(o.device, "--device");
  const torch::Dtype dtype = device.is_cuda() ? torch::kBFloat16 : torch::kFloat32;
  const HunyuanVaeConfig preset = hunyuan_vae_preset(o.preset, "--preset");
  HunyuanVae vae{nullptr};
  if (!o.weights.empty() && o.weights != "random") {  // `random`, as in vae.weights: fixed random weights
    vae = load_hunyuan_vae(o.weights, preset, device, dtype);
  } else {
    vae = HunyuanVae(preset);
    vae->randomize_weights(0);
    vae->to(device, dtype);
    vae->eval();
  }
  (void)vae_latent_shape(vae->config(), o.frames, o.height, o.width);
  torch::manual_seed(1);
  const torch::Tensor input =
      (torch::rand({1, 3, o.frames, o.height, o.width}) * 2 - 1).to(device, dtype);  // (1, 3, T, H, W)

  if (device.is_cuda()) at::globalContext().setBenchmarkCuDNN(o.cudnn_benchmark);
  struct Variant {
    std::string name;
    std::string tiling;  // whole | frames | tiled
    std::string runtime;
  };
  const std::vector<std::string> runtimes = config_text::split(o.runtimes, ',');
  const std::vector<std::string> tilings = tiling_modes(o.tiling);
  std::vector<Variant> variants;
  for (const std::string& runtime : runtimes) {
    (void)named_runtime(runtime);
    for (const std::string& tiling : tilings) {
      variants.push_back({tiling == "whole"    ? "whole clip"
                          : tiling == "frames" ? "frame windows (diffusers' default: 16+1 frames)"
                                               : "tiled (diffusers' tiles: 16+1 frames, 256 px)",
                          tiling, runtime});
    }
  }
  torch::NoGradGuard no_grad;
  // The rate an MFU divides by, measured now on this device (bf16 on CUDA, fp32 on the CPU).
  const double matmul_rate = measure_matmul_rate(device, torch::kBFloat16);
  nlohmann::json results = nlohmann::json::array();
  // Per tiling: the last runtime's output (dumped), and the first runtime's, to compare the others with.
  std::map<std::string, torch::Tensor> last_moments, first_moments;
  for (const Variant& variant : variants) {
    vae->set_runtime(named_runtime(variant.runtime));
    const VaeTiling tiles = tiling_of(variant.tiling);
    auto encode = [&] {
      return variant.tiling == "whole" ? vae->moments(input) : vae->moments_tiled(input, tiles);
    };
    torch::Tensor moments;
    // The CPU keeps no allocation counters: its peak is traced over one encode (the allocator's
    // events), the last warm-up one when there is one, so that no encode runs only to be measured.
    double cpu_peak_bytes = -1;
    // CUDA graphs keep each pass's activations in the graphs' private pool, made while warming up:
    // replays allocate nothing, so the timed encodes' allocated peak would miss them. The pool is what
    // stays reserved across the warm-up once the cache's free segments are handed back.
    const bool graphed = device.is_cuda() && vae->runtime().cuda_graphs;
    int64_t reserved_before_warmup = 0;
    if (graphed) {  // this variant's graphs only: none an earlier variant left in the pool
      sync(device);
      vae->release_graphs();
      release_cached_memory(device);
      reserved_before_warmup = gpu_memory(device).reserved;
    }
    for (int64_t i = 0; i < o.warmup; ++i) {
      if (!device.is_cuda() && i == o.warmup - 1) {
        cpu_peak_bytes = static_cast<double>(cpu_peak_bytes_during([&] { moments = encode(); }));
      } else {
        moments = encode();
      }
    }
    sync(device);
    int64_t graph_pool_bytes = 0;
    if (graphed) {
      release_cached_memory(device);
      graph_pool_bytes = std::max<int64_t>(0, gpu_memory(device).reserved - reserved_before_warmup);
    }
    reset_peak_memory(device);
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < o.steps; ++i) moments = encode();
    sync(device);
    const double ms = 1000.0 *
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
                      static_cast<double>(std::max<int64_t>(1, o.steps));
    // CUDA: the caching allocator's peak over the timed encodes (weights and input included). CPU:
    // the traced encode's most bytes above what was held before it (without warm-up, one more
    // encode traced; the process high-water mark would only ever grow across variants).
    if (!device.is_cuda() && cpu_peak_bytes < 0)
      cpu_peak_bytes = static_cast<double>(cpu_peak_bytes_during([&] { moments = encode(); }));
    // With graphs: the timed peak plus the pool (the output held in the pool is counted twice; a few MB).
    const double peak = device.is_cuda() ? peak_memory_gb(device) + static_cast<double>(graph_pool_bytes) /
                                                                        (1024.0 * 1024.0 * 1024.0)
                                         : cpu_peak_bytes / (1024.0 * 1024.0 * 1024.0);
    if (graphed) vae->release_graphs();  // the next variant starts without this one's pool
    last_moments[variant.tiling] = moments;
    const torch::Tensor output = moments.to(torch::kFloat32);
    if (!first_moments.count(variant.tiling)) first_moments[variant.tiling] = output;
    const torch::Tensor& first = first_moments[variant.tiling];
    const double vs_first = ((output - first).abs().max() / first.abs().max()).item<double>();
    // "whole" is a tiling that splits nothing: one pass.
    const VaeFlops flops = vae_encoder_flops(vae->config(), 1, o.frames, o.height, o.width, tiles);
    const double achieved = flops.matmul() / (ms / 1000.0);
    std::printf(
        "bench-vae %s, runtime %s, %dx%dx%d on %s (%s): %.1f ms per clip, peak %.2f GiB, max|diff|/max vs "
        "runtime %s %.2e; %.3f TFLOP of convolutions and attention in %d pass(es): %.1f TFLOP/s, MFU %.1f %% "
        "of the measured %.1f TFLOP/s matmul rate\n",
        variant.name.c_str(), variant.runtime.c_str(), static_cast<int>(o.frames), static_cast<int>(o.height),
        static_cast<int>(o.width), device.str().c_str(), dtype == torch::kBFloat16 ? "bf16" : "fp32", ms,
        peak, runtimes.front().c_str(), vs_first, flops.matmul() / 1e12, static_cast<int>(flops.passes),
        achieved / 1e12, 100.0 * achieved / matmul_rate, matmul_rate / 1e12);
    results.push_back({{"variant", variant.tiling},
                       {"runtime", variant.runtime},
                       {"ms", ms},
                       {"peak_gb", peak},
                       {"frames", o.frames},
                       {"height", o.height},
                       {"width", o.width},
                       {"preset", o.preset},
                       {"cudnn_benchmark", o.cudnn_benchmark},
                       {"relative_diff_vs_first_runtime", vs_first},
                       {"matmul_flops", flops.matmul()},
                       {"passes", flops.passes},
                       {"tflops_per_s", achieved / 1e12},
                       {"matmul_tflops_measured", matmul_rate / 1e12},
                       {"mfu", achieved / matmul_rate}});
    if (o.stages) results.back()["stages"] = time_stages(vae, encode, o, device, tiles, matmul_rate);
    if (!o.trace.empty()) {
      constexpr int64_t kPasses = 2;
      const std::string path = o.trace + "/" + variant.tiling + "_" + variant.runtime + ".json";
      const nlohmann::json trace = trace_work(device, path, /*shapes=*/false, [&] {
        for (int64_t i = 0; i < kPasses; ++i) (void)encode();
      });
      // cuDNN's convolutions are implicit GEMMs by name (kind GEMM) or say conv (convolution).
      const std::vector<KindWork> work = {
          {{"GEMM", "convolution"},
           flops.conv + flops.attention_linear,
           "the convolutions and the mid block's attention projections"},
          {{"attention"}, flops.attention_scores, "the mid block's attention, 4 N^2 C"}};
      std::ostringstream text;
      results.back()["time_split"] = write_time_split(text, trace, path, kPasses, "encodes", work);
      std::fputs(text.str().c_str(), stdout);
    }
  }
  if (!o.json.empty()) {
    std::ofstream out(o.json, std::ios::app);
    for (const auto& row : results) out << row.dump() << "\n";
  }
  if (!o.dump.empty()) {
    std::filesystem::create_directories(o.dump);
    safetensors::TensorMap weights;
    for (const auto& [name, tensor] : vae->diffusers_parameters())
      weights[name] = tensor.to(torch::kFloat32).cpu();
    safetensors::save(o.dump + "/diffusion_pytorch_model.safetensors", weights);
    write_text_synced(o.dump + "/config.json", diffusers_config(vae->config()).dump(2) + "\n");
    safetensors::TensorMap io = {{"input", input.to(torch::kFloat32).cpu()}};
    for (const auto& [tiling, moments] : last_moments)
      io[tiling == "whole" ? "moments" : "moments_" + tiling] = moments.to(torch::kFloat32).cpu();
    safetensors::save(o.dump + "/io.safetensors", io);
    std::printf("bench-vae: weights, config.json and io.safetensors in %s\n", o.dump.c_str());
  }
}

}  // namespace tt
