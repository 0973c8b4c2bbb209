// Model step benchmark (see bench.h). The keys it reads are the schema's kReadBench column.
#include "app/bench.h"

#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "app/memory_estimate.h"
#include "app/options.h"
#include "core/adamw.h"
#include "core/autocast.h"
#include "core/device.h"
#include "core/errors.h"
#include "core/profiler.h"
#include "model/flops.h"
#include "model/lora.h"
#include "model/text_padding.h"
#include "model/transformer.h"

namespace tt {
namespace {

constexpr double kDatasheetBf16 = 989e12;  // H100/H200 SXM dense bf16
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// Seconds per call of `fn`, averaged over `iterations` after `warmup` calls.
template <typename Fn>
double time_it(const torch::Device& device, int64_t warmup, int64_t iterations, Fn&& fn) {
  for (int64_t i = 0; i < warmup; ++i) fn();
  synchronize(device);
  auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iterations; ++i) fn();
  synchronize(device);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iterations;
}

}  // namespace

double measure_matmul_rate(const torch::Device& device, torch::Dtype half) {
  const int64_t n = device.is_cuda() ? 8192 : 1024;
  auto dtype = device.is_cuda() ? half : torch::kFloat32;
  auto a = torch::randn({n, n}, torch::TensorOptions().dtype(dtype).device(device));
  auto b = torch::randn({n, n}, a.options());
  auto c = torch::empty({n, n}, a.options());
  double seconds = time_it(device, 3, device.is_cuda() ? 50 : 5, [&] { torch::mm_out(c, a, b); });
  return 2.0 * n * n * n / seconds;
}

namespace {

// Bytes of the weights autocast casts to `half` in a forward (those of Linear and Conv3d modules:
// the model's GEMM and convolution weights and biases); the casts live until backward has used them.
int64_t autocast_copy_bytes(torch::nn::Module& model) {
  int64_t bytes = 0;
  for (const auto& module : model.modules(/*include_self=*/false)) {
    if (!module->as<torch::nn::Linear>() && !module->as<torch::nn::Conv3d>()) continue;
    for (const torch::Tensor& p : module->parameters(/*recurse=*/false))
      if (p.scalar_type() == torch::kFloat32) bytes += p.numel() * 2;
  }
  return bytes;
}

int64_t bytes_of(const std::vector<torch::Tensor>& tensors, bool grads) {
  int64_t bytes = 0;
  for (const torch::Tensor& t : tensors) {
    const torch::Tensor& x = grads ? t.grad() : t;
    if (x.defined()) bytes += x.numel() * x.element_size();
  }
  return bytes;
}

// --trace: `o.trace_steps` more forward+backward passes under the profiler; where the GPU's time
// went into `text` (core/profiler.h's write_time_split), returned as JSON. The rates: attention's
// FLOPs (4 N^2 d per layer, x3) and the rest, all matmuls (GEMMs and the patch convolution); under
// LoRA the frozen base skips its weight gradients, so none is given.
template <typename Fn>
nlohmann::json time_split(std::ostringstream& text, const BenchOptions& o, const torch::Device& device,
                          const FlopBreakdown& flops, bool lora, Fn&& forward_backward) {
  const nlohmann::json trace = trace_work(device, o.trace_path, /*shapes=*/false, [&] {
    for (int64_t i = 0; i < o.trace_steps; ++i) forward_backward();
  });
  std::vector<KindWork> work;
  if (!lora) {
    const double attention_flop = 3.0 * flops.attention;
    work = {
        {{"attention"}, attention_flop, "4 N^2 d per attention layer, x3"},
        {{"GEMM"}, flops.training - attention_flop, "every other matmul, the patch convolution's included"}};
  }
  return write_time_split(text, trace, o.trace_path, o.trace_steps, "forward+backward passes", work);
}

}  // namespace

void run_bench(const BenchOptions& options) {
  BenchOptions o = options;
  if (o.text_valid == 0) o.text_valid = o.text_tokens;
  torch::NoGradGuard no_grad_outside;  // re-enabled around the timed step
  const torch::Device device = resolve_device(o.config.train.device, "tele_tron.train.device");
  // As training sets it (train.expandable_segments, train.memory_cap), before anything is allocated.
  const AllocatorSetup allocator = configure_cuda_allocator(device, allocator_options_from(o.config.train));
  const bool autocast = device.is_cuda() && o.config.mixed_precision.enabled;
  const bool fp16 = o.config.mixed_precision.dtype == "fp16";
  const torch::Dtype half = fp16 ? torch::kHalf : torch::kBFloat16;
  HunyuanVideoConfig mc = model_config_from(o.config.model);
  // The memory estimate (train.memory_check's), before anything of the model is on the device. The
  // bench drops its gradients every step, as an eager training run without accumulation does.
  std::optional<MemoryEstimate> estimate;
  std::vector<std::pair<int64_t, double>> tried;
  // model.activation_checkpointing: auto plans from the estimate, as training does.
  const bool automatic = o.config.model.activation_checkpointing_every_n == kCheckpointingAuto;
  if ((o.estimate_memory || o.max_frames || automatic) && device.is_cuda()) {
    Config probe_config = o.config;
    probe_config.cuda_graph.enabled = "false";
    probe_config.gradient_accumulation = 1;
    const double capacity = planning_capacity(gpu_memory(device), o.config.train.memory_cap);
    if (o.max_frames) {
      // Plain segments fragment at long clips (16.3 GiB of an H100 unusable at 113x720x1280 with
      // 13B LoRA): the prediction packs the estimate as expandable segments do.
      if (!allocator.expandable_segments)
        spdlog::warn(
            "bench --max-frames: the CUDA allocator's expandable segments are off{}: a step at the "
            "predicted length may run out of memory through fragmentation; set "
            "train.expandable_segments: true (or --set train.expandable_segments=true) here and in "
            "the training config",
            allocator.environment.empty() ? std::string() : str_cat(" (", allocator.environment, ")"));
      o.frames = longest_clip_frames(probe_config, mc, o.height, o.width, o.batch, o.text_tokens, device,
                                     capacity, &tried, o.max_frames_checks);
      spdlog::info(
          "bench: the longest clip at {}x{} that fits by the estimate: {} frames; measuring one step at it",
          o.height, o.width, o.frames);
    }
    const auto started = std::chrono::steady_clock::now();
    // At a predicted longest clip only the configured checkpointing matters (the other mode's
    // probes there would cost minutes more).
    estimate = estimate_step_memory(
        probe_config, mc, step_shape_of_clip(o.frames, o.height, o.width, o.batch, o.text_tokens), device,
        /*both_modes=*/!o.max_frames || automatic, kAutoCheckpointShare * capacity);
    spdlog::info("bench: {} ({:.1f} s)", describe_estimate(*estimate, capacity),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }
  TT_CHECK(o.frames >= 1 && (o.frames - 1) % 4 == 0 && o.height % 16 == 0 && o.width % 16 == 0,
           ErrorCode::kConfig, "bench: frames must be 4n+1 and height/width multiples of 16");
  TT_CHECK(o.text_valid >= 1 && o.text_valid <= o.text_tokens, ErrorCode::kConfig,
           "bench: --text-valid must be in [1, --text-tokens]");
  const int64_t lt = (o.frames - 1) / 4 + 1, lh = o.height / 8, lw = o.width / 8;
  const int64_t video_tokens = (lt / mc.patch_size_t) * (lh / mc.patch_size) * (lw / mc.patch_size);

  torch::manual_seed(0);
  // Built onto the device block by block (model.lora under autocast: the base in the autocast dtype,
  // converted as it moves; the bench keeps fp32 master weights otherwise), then random weights drawn
  // there: the modulation and final layers too, so the timed graph is the trained one, not a zero
  // shortcut (drawn on the host, the 13B's 12.8 B values took minutes).
  HunyuanVideoTransformer model(mc, device,
                                o.config.model.lora_rank > 0 && autocast ? half : torch::kFloat32);
  // On the CPU there are no probes: auto recomputes nothing there.
  apply_activation_checkpointing(*model, o.config.model.activation_checkpointing_every_n,
                                 estimate ? estimate->checkpointed : CheckpointCounts{});
  model->set_recompute_skips_unread(!o.recompute_all);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.normal_(0.0, 0.02);
  }
  // model.lora: as training runs it, the base frozen and only the adapters trained (their B random
  // here, so the timed graph is the trained one).
  std::optional<LoraSet> lora;
  if (o.config.model.lora_rank > 0) {
    lora = model->attach_lora(lora_options_from(o.config.model));
    torch::NoGradGuard no_grad;
    for (const auto& [name, tensor] : lora->named_parameters()) tensor.normal_(0.0, 0.02);
  }
  auto fp32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  TransformerInputs in;
  in.hidden_states = torch::randn({o.batch, mc.in_channels, lt, lh, lw}, fp32);
  in.timestep = torch::full({o.batch}, 500.0, fp32);
  {
    // Text as the trainer feeds it: right padding trimmed on the host, no mask when none is left.
    auto states = torch::randn({o.batch, o.text_tokens, mc.text_embed_dim});
    auto mask = torch::zeros({o.batch, o.text_tokens}, torch::kBool);
    mask.slice(1, 0, o.text_valid).fill_(true);
    TrimmedText text = trim_text_padding(states, mask);
    in.encoder_hidden_states = text.states.to(device);
    in.encoder_attention_mask = text.mask.to(device);
    in.text_all_valid = text.all_valid;
  }
  in.pooled_projections = torch::randn({o.batch, mc.pooled_projection_dim}, fp32);
  if (mc.guidance_embeds) in.guidance = torch::full({o.batch}, 1000.0, fp32);
  auto target = torch::randn_like(in.hidden_states);

  std::vector<torch::Tensor> params;
  std::vector<std::string> names;
  if (lora) {
    for (const auto& [name, tensor] : lora->named_parameters()) {
      names.push_back(name);
      params.push_back(tensor);
    }
  } else {
    params = model->parameters();
    for (const auto& item : model->named_parameters()) names.push_back(item.key());
  }
  AdamW optimizer(params, names, adamw_options_from(o.config.optimizer));

  auto forward_backward = [&] {
    torch::AutoGradMode grad_on(true);
    for (auto& p : params) p.mutable_grad() = torch::Tensor();
    torch::Tensor out;
    {
      AutocastScope scope(autocast, half);
      out = model->forward(in);
    }
    torch::mse_loss(out.to(torch::kFloat32), target).backward();
  };
  auto full_step = [&] {
    forward_backward();
    clip_grad_norm(params, o.config.optimizer.max_grad_norm);  // as training clips (0 = not at all)
    optimizer.step();
  };

  const std::string attention = configure_attention_backend();
  spdlog::info("bench: attention backend {} (TELETRON_SDPA)", attention);
  spdlog::info("bench: {} | {} | batch {}, latents [{}, {}, {}, {}], {} video + {} text tokens ({} valid)",
               describe_device(device),
               autocast ? str_cat(o.config.mixed_precision.dtype, " autocast, fp32 master weights") : "fp32",
               o.batch, mc.in_channels, lt, lh, lw, video_tokens, o.text_tokens, o.text_valid);
  spdlog::info("model: {:.1f} M parameters; {}", model->parameter_count() / 1e6, describe_hunyuan_config(mc));
  if (lora)
    spdlog::info("LoRA: rank {}, {} modules, {:.1f} M trainable parameters; the base frozen{}",
                 lora->options.rank, lora->modules().size(), lora->parameter_count() / 1e6,
                 autocast ? " in the autocast dtype" : "");
  const double matmul_rate = measure_matmul_rate(device, half);
  const GpuMemory before = gpu_memory(device);  // parameters, inputs, target
  reset_peak_memory(device);
  const double fwd_bwd_s = time_it(device, o.warmup, o.steps, forward_backward);
  const double fwd_bwd_peak = peak_memory_gb(device);
  // The peak's parts: what the step starts with, the gradients it leaves, what else it leaves
  // allocated (the GEMM libraries' workspaces, which PyTorch allocates through its allocator: 34 MB
  // on the H200 for the tiny model), the weights' autocast copies (counted), and the rest, the
  // activations saved for backward and its scratch. The rest counts every gradient as held at the
  // peak, so it is a lower bound where the peak comes before backward has made them all.
  const GpuMemory after = gpu_memory(device);
  const int64_t param_bytes = bytes_of(params, false) + (lora ? bytes_of(model->parameters(), false) : 0);
  const int64_t grad_bytes = bytes_of(params, true);
  const int64_t copy_bytes = autocast ? autocast_copy_bytes(*model) : 0;
  const int64_t activation_bytes = after.known ? after.peak - after.allocated - copy_bytes : 0;
  const int64_t input_bytes = before.known ? before.allocated - param_bytes : 0;
  const int64_t other_bytes =
      after.known && before.known ? after.allocated - before.allocated - grad_bytes : 0;
  const FlopBreakdown flops = transformer_flops(mc, o.batch, video_tokens, o.text_tokens);
  nlohmann::json trace_summary;
  std::ostringstream time_split_text;
  if (!o.trace_path.empty())
    trace_summary = time_split(time_split_text, o, device, flops, lora.has_value(), forward_backward);
  double step_s = 0.0;
  // One untimed full step first (AdamW allocates its state), none with --warmup 0.
  if (o.optimizer) step_s = time_it(device, std::min<int64_t>(1, o.warmup), o.steps, full_step);
  const double peak = peak_memory_gb(device);

  const double tokens = static_cast<double>(o.batch * video_tokens);
  auto mfu = [&](double seconds, double rate) { return flops.training / seconds / rate; };
  std::cout << "| measure | value |\n|---|---|\n";
  std::cout << "| matmul rate ("
            << (device.is_cuda() ? str_cat(o.config.mixed_precision.dtype, " 8192^3")
                                 : std::string("fp32 1024^3"))
            << ", measured) | " << matmul_rate / 1e12 << " TFLOP/s |\n";
  std::cout << "| exact FLOPs per step (fwd+bwd) | " << flops.training / 1e12 << " TFLOP (attention "
            << 100.0 * flops.attention / flops.forward << " %) |\n";
  const auto [ck_doubles, ck_singles] = model->checkpointed_blocks();
  std::cout << "| blocks recomputed in backward (model.activation_checkpointing) | " << ck_doubles << " of "
            << mc.num_layers << " double-stream, " << ck_singles << " of " << mc.num_single_layers
            << " single-stream |\n";
  std::cout << "| forward+backward | " << fwd_bwd_s * 1e3 << " ms |\n";
  std::cout << "| video tokens/s (fwd+bwd) | " << tokens / fwd_bwd_s << " |\n";
  if (lora) {
    // The frozen base skips its weight-gradient GEMMs: the full model's training FLOPs overstate it.
    std::cout << "| MFU | not given with LoRA (the frozen base skips its weight gradients) |\n";
  } else {
    std::cout << "| MFU fwd+bwd vs measured matmul | " << 100.0 * mfu(fwd_bwd_s, matmul_rate) << " % |\n";
    std::cout << "| MFU fwd+bwd vs 989 TFLOP/s | " << 100.0 * mfu(fwd_bwd_s, kDatasheetBf16) << " % |\n";
  }
  std::cout << "| peak memory fwd+bwd | " << fwd_bwd_peak << " GiB |\n";
  if (after.known) {
    std::cout << "| of it: parameters | " << param_bytes / kGiB << " GiB |\n";
    std::cout << "| of it: gradients | " << grad_bytes / kGiB << " GiB |\n";
    std::cout << "| of it: autocast copies of the Linear/Conv weights | " << copy_bytes / kGiB << " GiB |\n";
    std::cout << "| of it: inputs and other tensors held before the step | " << input_bytes / kGiB
              << " GiB |\n";
    std::cout << "| of it: other memory the step leaves allocated (GEMM workspaces) | " << other_bytes / kGiB
              << " GiB |\n";
    std::cout << "| of it: activations (peak - held after the step - autocast copies) | "
              << activation_bytes / kGiB << " GiB |\n";
  }
  if (o.optimizer) {
    std::cout << "| full step (fwd+bwd+clip+AdamW) | " << step_s * 1e3 << " ms |\n";
    if (!lora)
      std::cout << "| MFU full step vs measured matmul | " << 100.0 * mfu(step_s, matmul_rate) << " % |\n";
    std::cout << "| peak memory full step | " << peak << " GiB |\n";
  }
  if (estimate) {
    const double estimated = estimate->peak_bytes / kGiB, measured = o.optimizer ? peak : fwd_bwd_peak;
    std::cout << "| estimated peak (before the model was built) | " << estimated << " GiB, "
              << 100.0 * (estimated - measured) / measured << " % off the measured " << measured
              << " GiB |\n";
    for (const auto& [frames, bytes] : tried)
      std::cout << "| estimate at " << frames << "x" << o.height << "x" << o.width << " | " << bytes / kGiB
                << " GiB |\n";
  }
  std::cout << time_split_text.str();
  if (!o.json_path.empty()) {
    nlohmann::json row = {
        {"device", describe_device(device)},
        {"attention_backend", attention},
        {"parameters", model->parameter_count()},
        {"batch", o.batch},
        {"video_tokens", video_tokens},
        {"text_tokens", o.text_tokens},
        {"text_valid", o.text_valid},
        {"matmul_tflops", matmul_rate / 1e12},
        {"step_tflop", flops.training / 1e12},
        {"fwd_bwd_ms", fwd_bwd_s * 1e3},
        {"tokens_per_s", tokens / fwd_bwd_s},
        {"mfu_measured", lora ? nlohmann::json() : nlohmann::json(mfu(fwd_bwd_s, matmul_rate))},
        {"mfu_datasheet", lora ? nlohmann::json() : nlohmann::json(mfu(fwd_bwd_s, kDatasheetBf16))},
        {"lora_rank", lora ? lora->options.rank : 0},
        {"trainable_parameters", lora ? lora->parameter_count() : model->parameter_count()},
        {"peak_gb_fwd_bwd", fwd_bwd_peak},
        {"parameter_bytes", param_bytes},
        {"gradient_bytes", grad_bytes},
        {"autocast_copy_bytes", copy_bytes},
        {"input_bytes", input_bytes},
        {"other_held_bytes", other_bytes},
        {"activation_bytes", activation_bytes},
        {"full_step_ms", step_s * 1e3},
        {"peak_gb", peak},
        {"frames", o.frames},
        {"checkpointed_blocks", {{"doubles", ck_doubles}, {"singles", ck_singles}}},
        {"estimated_peak_gb", estimate ? nlohmann::json(estimate->peak_bytes / kGiB) : nlohmann::json()},
        {"estimated_peak_gb_no_checkpointing",
         estimate && std::isfinite(estimate->peak_without_checkpointing)
             ? nlohmann::json(estimate->peak_without_checkpointing / kGiB)
             : nlohmann::json()},
        {"estimated_peak_gb_full_checkpointing",
         estimate && std::isfinite(estimate->peak_with_checkpointing)
             ? nlohmann::json(estimate->peak_with_checkpointing / kGiB)
             : nlohmann::json()},
        {"time_split", trace_summary}};
    std::ofstream out(o.json_path);
    out << row.dump(2) << "\n";
    TT_CHECK(out.good(), ErrorCode::kIo, "cannot write ", o.json_path);
  }
}

}  // namespace tt
