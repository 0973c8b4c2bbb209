// GPU memory of a training step before step 0 (see memory_estimate.h).
#include "app/memory_estimate.h"

#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "app/model_setup.h"
#include "app/options.h"
#include "core/adamw.h"
#include "core/autocast.h"
#include "core/device.h"
#include "core/errors.h"
#include "cuda/ops.h"
#include "model/activation_checkpoint.h"
#include "model/flops.h"
#include "model/lora.h"
#include "model/transformer.h"

namespace tt {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// One LoRA-capable module of a block: its diffusers name (after the block's prefix) and shape.
struct LoraModuleShape {
  const char* name;
  int64_t in, out;
};

// The Linears of the double and single blocks that take adapters, as HunyuanVideoTransformerImpl::
// lora_hosts lists them (a test checks the count against attach_lora's).
std::vector<LoraModuleShape> double_block_modules(int64_t h, int64_t m) {
  return {{"attn.to_q", h, h},          {"attn.to_k", h, h},          {"attn.to_v", h, h},
          {"attn.add_q_proj", h, h},    {"attn.add_k_proj", h, h},    {"attn.add_v_proj", h, h},
          {"attn.to_out.0", h, h},      {"attn.to_add_out", h, h},    {"ff.net.0.proj", h, m},
          {"ff.net.2", m, h},           {"ff_context.net.0.proj", h, m}, {"ff_context.net.2", m, h},
          {"norm1.linear", h, 6 * h},   {"norm1_context.linear", h, 6 * h}};
}

std::vector<LoraModuleShape> single_block_modules(int64_t h, int64_t m) {
  return {{"attn.to_q", h, h}, {"attn.to_k", h, h}, {"attn.to_v", h, h},
          {"proj_mlp", h, m},  {"proj_out", h + m, h}, {"norm.linear", h, 3 * h}};
}

int64_t lora_parameter_count(const HunyuanVideoConfig& model, const LoraOptions& options) {
  const std::vector<std::string> targets = options.targets.empty() ? default_lora_targets() : options.targets;
  const int64_t h = model.hidden_size(), m = model.mlp_hidden();
  int64_t count = 0;
  for (int64_t i = 0; i < model.num_layers; ++i)
    for (const LoraModuleShape& s : double_block_modules(h, m))
      if (lora_target_matches(targets, "transformer_blocks." + std::to_string(i) + "." + s.name))
        count += options.rank * (s.in + s.out);
  for (int64_t i = 0; i < model.num_single_layers; ++i)
    for (const LoraModuleShape& s : single_block_modules(h, m))
      if (lora_target_matches(targets, "single_transformer_blocks." + std::to_string(i) + "." + s.name))
        count += options.rank * (s.in + s.out);
  return count;
}

// Inputs of one step at `shape` (every text token valid, as after trimming).
TransformerInputs probe_inputs(const HunyuanVideoConfig& model, const StepShape& shape, const torch::Device& device) {
  auto fp32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  TransformerInputs in;
  in.hidden_states =
      torch::randn({shape.batch, model.in_channels, shape.latent_frames, shape.latent_height, shape.latent_width}, fp32);
  in.timestep = torch::full({shape.batch}, 500.0, fp32);
  in.encoder_hidden_states = torch::randn({shape.batch, shape.text_tokens, model.text_embed_dim}, fp32);
  in.encoder_attention_mask = torch::ones({shape.batch, shape.text_tokens}, fp32.dtype(torch::kBool));
  in.text_all_valid = true;
  in.text_right_padded = true;
  in.pooled_projections = torch::randn({shape.batch, model.pooled_projection_dim}, fp32);
  if (model.guidance_embeds) in.guidance = torch::full({shape.batch}, 1000.0, fp32);
  return in;
}

// A checkpointing plan as apply_activation_checkpointing takes it: every n-th block, or (every_n
// kCheckpointingAuto) the first `counts` blocks of each kind.
struct Plan {
  int64_t every_n = 0;
  CheckpointCounts counts;
};

// The peaks (bytes) of `model` at `shape`, built and run as the trainer does (dtype policy, LoRA,
// AdamW, clipping, gradients kept or dropped): for each checkpointing plan, the second of two steps.
std::vector<double> probe_step_peaks(const Config& config, const HunyuanVideoConfig& model_config,
                                     const StepShape& shape, const torch::Device& device,
                                     const std::vector<Plan>& plans) {
  const bool autocast = device.is_cuda() && config.mixed_precision.enabled;
  const at::ScalarType half = config.mixed_precision.dtype == "fp16" ? at::kHalf : at::kBFloat16;
  const bool bf16_master = config.mixed_precision.master_weights == "bf16";
  // Gradients stay allocated between steps with CUDA graphs (zeroed in place) and between micro-batches.
  const bool keep_grads = config.cuda_graph.enabled != "false" || config.gradient_accumulation > 1;
  torch::manual_seed(0);
  HunyuanVideoTransformer model(model_config, device, resident_weight_dtype(config, autocast));  // as the trainer
  model->train();
  std::vector<torch::Tensor> params;
  std::vector<std::string> names;
  std::optional<LoraSet> lora;
  if (config.model.lora_rank > 0) {
    lora = model->attach_lora(lora_options_from(config.model));
    for (const auto& [name, tensor] : lora->named_parameters()) {
      names.push_back(name);
      params.push_back(tensor);
    }
  } else {
    for (const auto& item : model->named_parameters()) {
      names.push_back(item.key());
      params.push_back(item.value());
    }
  }
  AdamW optimizer(params, names, adamw_options_from(config.optimizer),
                  bf16_master ? keyed_bf16_rounding(static_cast<uint64_t>(config.train.seed)) : Bf16Rounding());
  const TransformerInputs in = probe_inputs(model_config, shape, device);
  const torch::Tensor target = torch::randn_like(in.hidden_states);
  auto step = [&] {
    torch::AutoGradMode grad_on(true);
    optimizer.zero_grad(/*set_to_none=*/!keep_grads);
    torch::Tensor out;
    {
      AutocastScope scope(autocast, half);
      out = model->forward(in);
    }
    torch::mse_loss(out.to(torch::kFloat32), target).backward();
    clip_grad_norm(params, config.optimizer.max_grad_norm);
    optimizer.step();
  };
  std::vector<double> peaks;
  for (const Plan& plan : plans) {
    apply_activation_checkpointing(*model, plan.every_n, plan.counts);
    try {
      step();  // allocates the optimizer state (and kept gradients) on the first mode
      torch::cuda::synchronize(device.index());
      reset_peak_memory(device);
      step();
      torch::cuda::synchronize(device.index());
      peaks.push_back(static_cast<double>(gpu_memory(device).peak));
    } catch (const c10::OutOfMemoryError&) {
      // What the failed step held is gone with its stack; the next mode starts from the weights.
      optimizer.zero_grad(/*set_to_none=*/true);
      release_cached_memory(device);
      peaks.push_back(std::nan(""));
    }
  }
  return peaks;
}

// The probes without and with checkpointing (NaN: that mode ran out of memory, or was not asked
// for), each depth's model built once; `modes` in the order they run.
std::pair<ProbePeaks, ProbePeaks> probe_all_depths(const Config& config, const HunyuanVideoConfig& model,
                                                   const StepShape& shape, const torch::Device& device,
                                                   const std::vector<int64_t>& modes) {
  const double nan = std::nan("");
  ProbePeaks none{nan, nan, nan}, all{nan, nan, nan};
  double* slots_none[3] = {&none.p11, &none.p21, &none.p12};
  double* slots_all[3] = {&all.p11, &all.p21, &all.p12};
  const int64_t depths[3][2] = {{1, 1}, {2, 1}, {1, 2}};
  for (int i = 0; i < 3; ++i) {
    HunyuanVideoConfig shallow = model;
    shallow.num_layers = depths[i][0];
    shallow.num_single_layers = depths[i][1];
    std::vector<Plan> plans;
    for (int64_t every_n : modes) plans.push_back(Plan{every_n, {}});
    const std::vector<double> peaks = probe_step_peaks(config, shallow, shape, device, plans);
    release_cached_memory(device);
    for (size_t m = 0; m < modes.size(); ++m) *(modes[m] == 0 ? slots_none[i] : slots_all[i]) = peaks[m];
  }
  return {none, all};
}

bool complete(const ProbePeaks& p) { return std::isfinite(p.p11) && std::isfinite(p.p21) && std::isfinite(p.p12); }

// "every block checkpointed", "auto: 23 of 60 blocks checkpointed (20 double-stream, 3 single-stream) ...".
std::string describe_checkpointing(const MemoryEstimate& e) {
  const CheckpointCounts& ck = e.checkpointed;
  std::string plan;
  if (ck.total() == 0) {
    plan = "no activation checkpointing";
  } else if (ck == e.blocks) {
    plan = "every block checkpointed";
  } else if (e.checkpoint_every_n > 1) {
    plan = str_cat("every ", e.checkpoint_every_n, ". block checkpointed");
  } else {
    plan = str_cat(ck.total(), " of ", e.blocks.total(), " blocks checkpointed (", ck.doubles,
                   " double-stream, ", ck.singles, " single-stream)");
  }
  if (e.checkpoint_every_n != kCheckpointingAuto) return plan;
  return str_cat("model.activation_checkpointing: auto: ", plan, ", the fewest within ",
                 gib_text(e.auto_budget_bytes));
}

std::string gib(double bytes) {
  if (!std::isfinite(bytes)) return "(its probe ran out of memory)";
  return gib_text(bytes);
}

}  // namespace

int64_t StepShape::video_tokens(const HunyuanVideoConfig& config) const {
  return (latent_frames / config.patch_size_t) * (latent_height / config.patch_size) *
         (latent_width / config.patch_size);
}

std::string StepShape::describe() const {
  return str_cat((latent_frames - 1) * 4 + 1, "x", latent_height * 8, "x", latent_width * 8);
}

StepShape step_shape_of_clip(int64_t frames, int64_t height, int64_t width, int64_t batch, int64_t text_tokens) {
  TT_CHECK(frames >= 1 && (frames - 1) % 4 == 0 && height % 16 == 0 && width % 16 == 0 && height > 0 && width > 0,
           ErrorCode::kConfig, "a clip shape needs frames 4n+1 and height/width multiples of 16, got ", frames, "x",
           height, "x", width);
  StepShape shape;
  shape.batch = batch;
  shape.latent_frames = (frames - 1) / 4 + 1;
  shape.latent_height = height / 8;
  shape.latent_width = width / 8;
  shape.text_tokens = text_tokens;
  return shape;
}

double MemoryEstimate::activation_bytes() const {
  return std::max(0.0, peak_bytes - counted.weight_bytes - counted.gradient_bytes - counted.optimizer_bytes -
                           counted.ema_bytes);
}

CheckpointCounts checkpoint_counts(int64_t doubles, int64_t singles, int64_t every_n) {
  const auto [d, s] = checkpointed_by_kind(every_nth_block(doubles + singles, every_n), doubles);
  return {d, s};
}

double extrapolate_peak(const ProbePeaks& none, const ProbePeaks& all, int64_t doubles, int64_t singles,
                        int64_t every_n) {
  return extrapolate_peak(none, all, doubles, singles, checkpoint_counts(doubles, singles, every_n));
}

double extrapolate_peak(const ProbePeaks& none, const ProbePeaks& all, int64_t doubles, int64_t singles,
                        const CheckpointCounts& checkpointed) {
  // Per extra block, without and with checkpointing; what is left of p11 is the rest of the model
  // and one block's backward scratch (with a recomputed block among them, its activations too).
  const double d_none = none.p21 - none.p11, s_none = none.p12 - none.p11;
  const double d_all = all.p21 - all.p11, s_all = all.p12 - all.p11;
  const int64_t d_ck = checkpointed.doubles, s_ck = checkpointed.singles;
  const bool any = d_ck + s_ck > 0;
  const double base = any ? all.p11 - d_all - s_all : none.p11 - d_none - s_none;
  // A mode nobody probed is NaN: blocks of none of its kind must not turn the sum into NaN (0 x NaN).
  auto blocks = [](int64_t count, double per_block) { return count == 0 ? 0.0 : static_cast<double>(count) * per_block; };
  return base + blocks(d_ck, d_all) + blocks(doubles - d_ck, d_none) + blocks(s_ck, s_all) +
         blocks(singles - s_ck, s_none);
}

CheckpointCounts fewest_checkpointed(const ProbePeaks& none, const ProbePeaks& all, int64_t doubles,
                                     int64_t singles, double budget_bytes) {
  const CheckpointCounts every{doubles, singles};
  if (!complete(none) || !complete(all)) return every;
  // What one more recomputed block of each kind frees; the kind that frees more goes first, one
  // that frees nothing never.
  const double d_frees = (none.p21 - none.p11) - (all.p21 - all.p11);
  const double s_frees = (none.p12 - none.p11) - (all.p12 - all.p11);
  const bool doubles_first = d_frees >= s_frees;
  const int64_t first_count = doubles_first ? doubles : singles;
  const bool first_frees = (doubles_first ? d_frees : s_frees) > 0,
             second_frees = (doubles_first ? s_frees : d_frees) > 0;
  for (int64_t k = 0; k <= doubles + singles; ++k) {
    const int64_t in_first = std::min(k, first_count), in_second = k - in_first;
    if ((in_first > 0 && !first_frees) || (in_second > 0 && !second_frees)) break;
    const CheckpointCounts counts =
        doubles_first ? CheckpointCounts{in_first, in_second} : CheckpointCounts{in_second, in_first};
    if (extrapolate_peak(none, all, doubles, singles, counts) <= budget_bytes) return counts;
  }
  return every;
}

void apply_activation_checkpointing(HunyuanVideoTransformerImpl& model, int64_t configured_every_n,
                                    const CheckpointCounts& planned) {
  if (configured_every_n == kCheckpointingAuto)
    model.set_checkpointed_blocks(planned.doubles, planned.singles);
  else
    model.set_activation_checkpointing(configured_every_n);
}

CountedMemory count_memory(const Config& config, const HunyuanVideoConfig& model, bool cuda) {
  CountedMemory c;
  c.parameters = transformer_parameter_count(model);
  const bool autocast = cuda && config.mixed_precision.enabled;
  const double params = static_cast<double>(c.parameters);
  if (config.model.lora_rank > 0) {
    c.trainable = lora_parameter_count(model, lora_options_from(config.model));
    const double base_bytes = autocast ? 2.0 : 4.0;  // the frozen base in the autocast dtype
    c.weight_bytes = params * base_bytes + static_cast<double>(c.trainable) * 4.0;
    c.gradient_bytes = static_cast<double>(c.trainable) * 4.0;
  } else {
    c.trainable = c.parameters;
    const double bytes = config.mixed_precision.master_weights == "bf16" ? 2.0 : 4.0;
    c.weight_bytes = params * bytes;
    c.gradient_bytes = params * bytes;
  }
  c.optimizer_bytes = static_cast<double>(c.trainable) * 8.0;  // exp_avg + exp_avg_sq in fp32
  if (config.train.ema_decay > 0) c.ema_bytes = static_cast<double>(c.trainable) * 4.0;
  return c;
}

MemoryEstimate estimate_step_memory(const Config& config, const HunyuanVideoConfig& model, const StepShape& shape,
                                    const torch::Device& device, bool both_modes, double auto_budget_bytes) {
  MemoryEstimate e;
  e.counted = count_memory(config, model, device.is_cuda());
  e.shape = shape;
  e.checkpoint_every_n = config.model.activation_checkpointing_every_n;
  const int64_t doubles = model.num_layers, singles = model.num_single_layers;
  const int64_t k = e.checkpoint_every_n;
  const bool automatic = k == kCheckpointingAuto;
  e.blocks = {doubles, singles};
  if (!automatic) e.checkpointed = checkpoint_counts(doubles, singles, k);
  if (!device.is_cuda()) return e;
  TT_ASSERT(!automatic || auto_budget_bytes > 0, "activation_checkpointing: auto needs a memory budget");
  // The modes the run needs first (checkpointing every k-th block, and auto, need both), the other
  // one for the report when asked; a probe that runs out of memory leaves its mode NaN.
  std::vector<int64_t> modes = k == 0 ? std::vector<int64_t>{0} : k == 1 ? std::vector<int64_t>{1}
                                                                         : std::vector<int64_t>{0, 1};
  if (both_modes && modes.size() == 1) modes.push_back(k == 0 ? 1 : 0);
  std::tie(e.probes_none, e.probes_all) = probe_all_depths(config, model, shape, device, modes);
  // auto needs the probes with every block recomputed (its most frugal plan); without checkpointing
  // they may run out of memory (the plan then recomputes every block).
  const bool needs_none = k != 1 && !automatic, needs_all = k != 0;
  if ((needs_none && !complete(e.probes_none)) || (needs_all && !complete(e.probes_all))) {
    const double cap = config.train.memory_cap;
    throw Error(ErrorCode::kMemory,
                str_cat(cap < 1.0 ? str_cat("out of memory under tele_tron.train.memory_cap = ", cap, " (", 100.0 * cap,
                                            " % of the GPU): ")
                                  : std::string(),
                        "the memory estimate's probe (two steps of a copy of the model with one or two blocks of each "
                        "kind, at ", shape.describe(), ", micro-batch ", shape.batch,
                        ") ran out of memory: the full model cannot fit either"),
                str_cat(cap < 1.0 ? "raise train.memory_cap (1.0 = no cap), or " : "",
                        "use a smaller bucket (data.buckets) or micro-batch, model.activation_checkpointing: true, or "
                        "LoRA (model.lora.rank)"));
  }
  if (automatic) {
    // The EMA's averages are added to every figure below: the plan's budget leaves room for them.
    e.auto_budget_bytes = auto_budget_bytes;
    e.checkpointed = fewest_checkpointed(e.probes_none, e.probes_all, doubles, singles,
                                         auto_budget_bytes - e.counted.ema_bytes);
  }
  e.peak_without_checkpointing = extrapolate_peak(e.probes_none, e.probes_all, doubles, singles, 0);
  e.peak_with_checkpointing = extrapolate_peak(e.probes_none, e.probes_all, doubles, singles, 1);
  e.peak_bytes = extrapolate_peak(e.probes_none, e.probes_all, doubles, singles, e.checkpointed);
  // The probes keep no EMA: the run's averages sit on the device for the whole step.
  e.peak_without_checkpointing += e.counted.ema_bytes;
  e.peak_with_checkpointing += e.counted.ema_bytes;
  e.peak_bytes += e.counted.ema_bytes;
  e.measured = true;
  return e;
}

double measure_step_peak(const Config& config, const HunyuanVideoConfig& model, const StepShape& shape,
                         const torch::Device& device, int64_t every_n) {
  const double peak = probe_step_peaks(config, model, shape, device, {Plan{every_n, {}}}).at(0);
  release_cached_memory(device);
  return peak;
}

double measure_step_peak(const Config& config, const HunyuanVideoConfig& model, const StepShape& shape,
                         const torch::Device& device, const CheckpointCounts& checkpointed) {
  const double peak = probe_step_peaks(config, model, shape, device, {Plan{kCheckpointingAuto, checkpointed}}).at(0);
  release_cached_memory(device);
  return peak;
}

int64_t longest_clip_frames(const Config& config, const HunyuanVideoConfig& model, int64_t height, int64_t width,
                            int64_t batch, int64_t text_tokens, const torch::Device& device, double capacity_bytes,
                            std::vector<std::pair<int64_t, double>>* tried, int64_t neighbour_checks) {
  TT_CHECK(device.is_cuda(), ErrorCode::kConfig, "the longest-clip prediction measures on CUDA (--device cuda)");
  // auto's longest clip is the one its most frugal plan fits: every block recomputed.
  Config planned = config;
  if (planned.model.activation_checkpointing_every_n == kCheckpointingAuto)
    planned.model.activation_checkpointing_every_n = 1;
  auto peak_at = [&](int64_t latent_frames) {
    const int64_t frames = 4 * (latent_frames - 1) + 1;
    double peak = std::numeric_limits<double>::infinity();
    try {
      peak = estimate_step_memory(planned, model, step_shape_of_clip(frames, height, width, batch, text_tokens), device,
                                  /*both_modes=*/false)
                 .peak_bytes;
    } catch (const Error& error) {
      if (error.code() != ErrorCode::kMemory) throw;
    }
    if (tried) tried->push_back({frames, peak});
    spdlog::info("memory estimate: {}x{}x{}: {:.2f} GiB of {:.2f} GiB", frames, height, width, peak / kGiB,
                 capacity_bytes / kGiB);
    return peak;
  };
  // The peak grows linearly with the latent frames (attention runs in flash kernels, linear in
  // tokens): two points, the line's crossing with the capacity, then the neighbours checked.
  const int64_t n1 = 9, n2 = 17;  // 33 and 65 frames
  const double p1 = peak_at(n1), p2 = peak_at(n2);
  int64_t n = n1;
  if (std::isfinite(p1) && std::isfinite(p2) && p2 > p1)
    n = n1 + static_cast<int64_t>(std::floor((capacity_bytes - p1) / ((p2 - p1) / static_cast<double>(n2 - n1))));
  n = std::max<int64_t>(n, 1);
  if (neighbour_checks <= 0) {
    TT_CHECK_HINT(std::isfinite(p1) && p1 <= capacity_bytes, ErrorCode::kMemory,
                  "use a smaller size, checkpointing or LoRA", "no clip at ", height, "x", width,
                  " fits the device by the estimate");
    return 4 * (n - 1) + 1;
  }
  double p = peak_at(n);
  int64_t checks = 1;
  for (; p > capacity_bytes && n > 1 && checks < neighbour_checks; ++checks) p = peak_at(--n);
  for (; p <= capacity_bytes && checks < neighbour_checks; ++checks) {
    if (peak_at(n + 1) > capacity_bytes) break;
    n += 1;
  }
  TT_CHECK_HINT(p <= capacity_bytes, ErrorCode::kMemory, "use a smaller size, checkpointing or LoRA",
                "no clip at ", height, "x", width, " fits the device by the estimate");
  return 4 * (n - 1) + 1;
}

double planning_capacity(const GpuMemory& memory, double memory_cap) {
  const double share = static_cast<double>(memory.total) * std::min(1.0, memory_cap);
  const double reach =
      memory.available > 0 ? static_cast<double>(memory.available) : static_cast<double>(memory.total);
  return kPlanningShare * std::min(share, reach);
}

MicroBatchFit fit_micro_batch(int64_t allocated_before, int64_t grads_to_come, int64_t peak, int64_t samples,
                              double room) {
  MicroBatchFit fit;
  const int64_t fixed = allocated_before + grads_to_come;
  if (peak <= fixed || samples <= 0) return fit;
  fit.per_sample = static_cast<double>(peak - fixed) / static_cast<double>(samples);
  const double left = room - static_cast<double>(fixed);
  fit.fits = left > 0 ? static_cast<int64_t>(left / fit.per_sample) : 0;
  return fit;
}

std::string describe_estimate(const MemoryEstimate& e, double capacity_bytes) {
  std::ostringstream s;
  const CountedMemory& c = e.counted;
  s << "memory estimate for a step at " << e.shape.describe() << ", micro-batch " << e.shape.batch << ", "
    << e.shape.text_tokens << " text tokens:\n";
  s << "  parameters " << c.parameters << " (" << gib(c.weight_bytes) << " on the device), trainable " << c.trainable
    << ": gradients " << gib(c.gradient_bytes) << ", AdamW state " << gib(c.optimizer_bytes)
    << (c.ema_bytes > 0 ? str_cat(", EMA ", gib(c.ema_bytes)) : std::string()) << "\n";
  if (!e.measured) {
    s << "  activations: not estimated on the CPU (the probes need the CUDA allocator)";
    return s.str();
  }
  const std::string mode = describe_checkpointing(e);
  s << "  activations, their scratch and workspaces " << gib(e.activation_bytes()) << " ("
    << gib(e.activation_bytes_per_sample()) << " per sample)\n";
  s << "  peak " << gib(e.peak_bytes) << " (" << mode << "); without checkpointing " << gib(e.peak_without_checkpointing)
    << ", with every block checkpointed " << gib(e.peak_with_checkpointing);
  if (capacity_bytes > 0) s << "; a step may use " << gib(capacity_bytes);
  return s.str();
}

void check_estimate_fits(const MemoryEstimate& e, const Config& config, double capacity_bytes) {
  if (!e.measured || e.peak_bytes <= capacity_bytes) return;
  std::vector<std::string> ways;
  if (e.checkpoint_every_n != 1 && e.peak_with_checkpointing < e.peak_bytes)
    ways.push_back(str_cat("model.activation_checkpointing: true (", gib(e.peak_with_checkpointing), ")"));
  if (config.model.lora_rank == 0) {
    // The frozen base in the autocast dtype, no gradients or optimizer state for it.
    const double full_static =
        e.counted.weight_bytes + e.counted.gradient_bytes + e.counted.optimizer_bytes + e.counted.ema_bytes;
    const double lora_static = static_cast<double>(e.counted.parameters) * 2.0;
    const double best = std::min(e.peak_bytes, e.peak_with_checkpointing) - full_static + lora_static;
    ways.push_back(str_cat("LoRA, model.lora.rank: 32 (about ", gib(best), " with checkpointing)"));
  }
  ways.push_back(str_cat("a smaller bucket or micro-batch (activations ", gib(e.activation_bytes_per_sample()),
                         " per sample)"));
  ways.push_back("more GPUs (multi-GPU training arrives with the distributed issue)");
  std::string hint = "ways out: ";
  for (size_t i = 0; i < ways.size(); ++i) hint += (i ? "; " : "") + ways[i];
  hint += "; train.memory_check: false skips this check";
  throw Error(ErrorCode::kMemory,
              str_cat("the step needs about ", gib(e.peak_bytes), " of GPU memory and may use ",
                      gib(capacity_bytes), " (", describe_estimate(e, capacity_bytes), ")"),
              hint);
}

StepShape largest_step_shape(const Config& config, const std::vector<int64_t>& latent_shape, int64_t text_tokens) {
  const int64_t batch = config.batch_size_dynamic ? config.dynamic_batch.min : config.batch_size;
  if (config.data.source == "video") {
    // The most latent tokens (what the step's memory follows), not the most pixels: 4n+1 frames
    // become n+1 latent frames, so a short clip at a large size can outweigh a longer smaller one.
    StepShape best;
    int64_t best_tokens = -1;
    for (const Bucket& b : config.data.buckets) {
      const StepShape shape = step_shape_of_clip(b.frames, b.height, b.width, batch, text_tokens);
      const int64_t tokens = shape.latent_frames * shape.latent_height * shape.latent_width;
      if (tokens > best_tokens) {
        best_tokens = tokens;
        best = shape;
      }
    }
    return best;
  }
  TT_ASSERT(latent_shape.size() == 4, "latent shape (C, T, H, W) expected");
  StepShape shape;
  shape.batch = batch;
  shape.latent_frames = latent_shape[1];
  shape.latent_height = latent_shape[2];
  shape.latent_width = latent_shape[3];
  shape.text_tokens = text_tokens;
  return shape;
}

}  // namespace tt
