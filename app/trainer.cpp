// The training loop (see trainer.h): set-up, the step and the loop; checkpoints and resume are in
// trainer_resume.cpp.
#include "app/trainer.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "app/memory_estimate.h"
#include "app/model_setup.h"
#include "app/options.h"
#include "app/trainer_impl.h"
#include "core/autocast.h"
#include "core/checkpoint.h"
#include "core/device.h"
#include "core/errors.h"
#include "core/safetensors.h"
#include "cuda/ops.h"
#include "model/text_padding.h"
#include "pipeline/text_cache.h"

namespace tt {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The share of the memory the allocator may reach that steps and CUDA graphs' pools may fill
// together (StepGraphOptions::memory_limit): the rest is left to fragmentation.
constexpr double kGraphMemoryShare = 0.95;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string format_duration(double seconds) {
  const int64_t total = static_cast<int64_t>(seconds + 0.5);
  if (total >= 3600) return str_cat(total / 3600, "h", (total % 3600) / 60, "m");
  if (total >= 60) return str_cat(total / 60, "m", total % 60, "s");
  return str_cat(total, "s");
}

// Every bucket's latents (C, T', H', W') must split into the model's patches; found here, before
// any step, instead of at a bucket's first batch.
void check_buckets_patch(const std::vector<std::vector<int64_t>>& shapes, const HunyuanVideoConfig& model) {
  const int64_t pt = model.patch_size_t, p = model.patch_size;
  for (size_t b = 0; b < shapes.size(); ++b) {
    const std::vector<int64_t>& s = shapes[b];
    if (s.size() != 4 || (s[1] % pt == 0 && s[2] % p == 0 && s[3] % p == 0)) continue;
    throw Error(ErrorCode::kData,
                str_cat("data: bucket ", b, " has latents (C, T', H', W') = [", s[0], ", ", s[1], ", ", s[2], ", ", s[3],
                        "], which the model's patches [patch_size_t ", pt, ", patch_size ", p, ", ", p,
                        "] do not divide"),
                str_cat("T' must be a multiple of ", pt, " and H', W' multiples of ", p,
                        ": choose data.buckets so (with the VAE's 4x time and 8x space compression, T' = "
                        "(frames - 1) / 4 + 1, H' = height / 8), and encode the latents again"));
  }
}

}  // namespace

Trainer::Trainer(const TrainRequest& request) : config_(request.config), resume_(request.resume), checkpoints_(request.checkpoints) {
  allow_change_ = normalize_allowed_changes(request.allow_change);
  TT_CHECK_HINT(allow_change_.empty() || !resume_.empty(), ErrorCode::kConfig,
                "--allow-change only applies with --resume", "--allow-change given without --resume");
  device_ = resolve_device(config_.train.device, "tele_tron.train.device");
  // Before anything is allocated on the device (the settings apply to the segments made after).
  allocator_ = configure_cuda_allocator(device_, allocator_options_from(config_.train));
  bf16_master_ = config_.mixed_precision.master_weights == "bf16";
  // The loader refuses this combination; a config built in code (bench) is checked here.
  TT_CHECK_HINT(config_.mixed_precision.master_weights_usable(), ErrorCode::kConfig, "set mixed_precision.enabled: true and mixed_precision.dtype: bf16, or "
                "mixed_precision.master_weights: fp32",
                "tele_tron.mixed_precision.master_weights: bf16 needs bf16 autocast");
  // bf16 weights run under bf16 autocast on the CPU too (fp32 weights there run in fp32).
  autocast_ = config_.mixed_precision.enabled && (device_.is_cuda() || bf16_master_);
  autocast_dtype_ = config_.mixed_precision.dtype == "fp16" ? at::kHalf : at::kBFloat16;
  faults_ = FaultPlan::from_environment();
  if (!request.profile.empty()) profile_window_ = parse_profile_window(request.profile, "--profile");
  ModelChoice choice = choose_model(config_.model, config_.model.weights);
  model_config_ = choice.config;
  model_origin_ = choice.origin;
  initial_weights_ = choice.weights;
  flow_options_ = flow_matching_options_from(config_.flow_matching);
  run_dir_ = fs::path(config_.train.output_dir);
  if (const char* trace = std::getenv("TELETRON_TRACE_BATCHES"); trace && *trace) {
    batch_trace_ = std::make_unique<std::ofstream>(trace, std::ios::app);
    TT_CHECK(batch_trace_->good(), ErrorCode::kIo, "TELETRON_TRACE_BATCHES: cannot open ", trace);
  }

  // The resume checks run before anything is built: a config that would change the run stops here,
  // and a video run gets its stored bucket assignment back instead of probing every file.
  std::optional<StoredDataState> stored;
  if (!resume_.empty()) resume_folder_ = find_resume_folder();
  if (resume_folder_) stored = check_resume(*resume_folder_);
  dataset_ = make_training_data(config_, model_config_, device_, stored ? &*stored : nullptr);
  if (resume_folder_) check_resumed_data(*resume_folder_, *stored);
  if (config_.data.caption_dropout > 0) {
    const std::string cache = text_cache_folder(config_.data.text_cache.value_or(""), config_.data.manifest);
    CaptionDropout dropout{config_.data.caption_dropout, static_cast<uint64_t>(config_.train.seed),
                           load_empty_caption(cache, model_config_.text_embed_dim, model_config_.pooled_projection_dim,
                                              dataset_->text_length())};
    dropout.empty.text_states = dropout.empty.text_states.to(device_);  // the mask stays on the host, as the batch's
    dropout.empty.pooled = dropout.empty.pooled.to(device_);
    caption_dropout_ = std::move(dropout);
    spdlog::info("data: caption dropout {}: the empty caption's embedding from {}", config_.data.caption_dropout, cache);
  }
  check_buckets_patch(dataset_->bucket_latent_shapes(), model_config_);
  cursor_.row_bucket = dataset_->row_buckets();
  cursor_.step_samples = global_batch_of(config_).samples();
  dynamic_ = config_.batch_size_dynamic;
  if (dynamic_ && config_.dynamic_batch.mode == "token_budget" && !cursor_.row_bucket.empty()) {
    // Video tokens per sample of each bucket: latents (C, T', H', W') patched as the model patches them.
    std::vector<int64_t> tokens;
    for (const std::vector<int64_t>& shape : dataset_->bucket_latent_shapes())
      tokens.push_back(StepShape{1, shape[1], shape[2], shape[3]}.video_tokens(model_config_));
    cursor_.bucket_samples = token_budget_samples(tokens, cursor_.step_samples);
  }
  check_memory_estimate();

  torch::manual_seed(static_cast<uint64_t>(config_.train.seed));
  // Built onto the device block by block; bf16 master weights, or a LoRA run's frozen base under
  // autocast, converted as they move (the device never holds an fp32 copy of the model, the host
  // one block at most).
  model_ = HunyuanVideoTransformer(model_config_, device_, resident_weight_dtype(config_, autocast_));
  model_->train();
  apply_activation_checkpointing(*model_, config_.model.activation_checkpointing_every_n, checkpoint_plan_);
  std::vector<std::string> names;
  if (config_.model.lora_rank > 0) {
    TT_CHECK_HINT(!bf16_master_, ErrorCode::kConfig,
                  "set mixed_precision.master_weights: fp32 (with LoRA the frozen base is kept in the autocast "
                  "dtype anyway, and the adapters train in fp32)",
                  "tele_tron.model.lora with mixed_precision.master_weights: bf16");
    // The frozen base in the autocast dtype (no fp32 copy, no gradients, no optimizer state), as
    // moved above; fp32 where the step runs in fp32 (the CPU).
    lora_ = model_->attach_lora(lora_options_from(config_.model));
    for (const auto& [name, tensor] : lora_->named_parameters()) {
      names.push_back(name);
      params_.push_back(tensor);
    }
  } else {
    for (const auto& item : model_->named_parameters()) {
      names.push_back(item.key());
      params_.push_back(item.value());
    }
  }
  // bf16 weights take their fp32 update rounded stochastically, keyed by (seed, parameter, step).
  optimizer_ = std::make_unique<AdamW>(params_, names, adamw_options_from(config_.optimizer),
                                       bf16_master_ ? keyed_bf16_rounding(static_cast<uint64_t>(config_.train.seed))
                                                    : Bf16Rounding());
  setup_ema();
  LossScalerOptions scaling;
  // fp16 scales the loss also where the CPU runs the step in fp32 (the tests run it there).
  scaling.enabled = config_.mixed_precision.enabled && config_.mixed_precision.dtype == "fp16";
  scaling.init_scale = config_.mixed_precision.init_scale;
  scaling.window = config_.mixed_precision.loss_scale_window;
  scaler_ = std::make_unique<LossScaler>(scaling, device_);

  auto zero = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat32).device(device_));
  loss_sum_ = zero.clone();
  step_loss_ = zero.clone();
  nonfinite_ = zero.clone();
  skipped_run_ = zero.clone();
  step_counter_ = torch::zeros({}, torch::TensorOptions().dtype(torch::kInt64).device(device_));

  // CUDA graphs: on with CUDA unless cuda_graph.enabled is false; TELETRON_GRAPH_EMULATE (tests)
  // emulates them anywhere.
  StepGraphOptions graph_options;
  graph_options.policy = GraphPolicyOptions{config_.cuda_graph.warmup_steps, config_.cuda_graph.capture_frequency,
                                            config_.cuda_graph.retry, config_.cuda_graph.threshold};
  if (const char* emulate = std::getenv("TELETRON_GRAPH_EMULATE"); emulate && *emulate) {
    char* end = nullptr;
    const double speedup = std::strtod(emulate, &end);
    TT_CHECK_HINT(*end == '\0' && speedup > 0 && std::isfinite(speedup), ErrorCode::kConfig,
                  "unset it, or give the replay speed-up to report, e.g. TELETRON_GRAPH_EMULATE=2 (tests only)",
                  "TELETRON_GRAPH_EMULATE: expected a number > 0, got '", emulate, "'");
    graph_options.emulate_speedup = speedup;
  }
  if (config_.cuda_graph.enabled != "false" && (device_.is_cuda() || graph_options.emulate_speedup > 0)) {
    graph_options.scope = config_.cuda_graph.scope;
    // Block graphs belong to this model (scope blocks, or auto's fallback for a shape).
    std::shared_ptr<BlockGraphs> blocks;
    if (graph_options.scope != "step") {
      blocks = std::make_shared<BlockGraphs>(device_, graph_options.emulate_speedup > 0);
      model_->set_block_graphs(blocks);
    }
    // A capture must leave the other shapes' eager steps room (StepGraphOptions::memory_limit):
    // what the allocator may reach, within train.memory_cap, less 5 % for fragmentation.
    if (const GpuMemory memory = gpu_memory(device_); memory.known && graph_options.emulate_speedup <= 0)
      graph_options.memory_limit = static_cast<int64_t>(
          kGraphMemoryShare * std::min(static_cast<double>(memory.available),
                                       config_.train.memory_cap * static_cast<double>(memory.total)));
    graphs_ = std::make_unique<StepGraphs>(graph_options, device_, blocks);
  }
  full_text_ = config_.data.text_padding == "full";
  text_by_measure_ = config_.data.text_padding == "auto" && graphs_;
  limit_step_ = torch::full_like(step_counter_, -1);
  last_grad_norm_ = zero.clone();
}

void Trainer::announce() const {
  const std::string attention = configure_attention_backend();
  if (attention != "auto") spdlog::info("attention backend: {} (TELETRON_SDPA)", attention);
  std::string precision = "fp32";
  if (autocast_)
    precision = str_cat(config_.mixed_precision.dtype, " autocast, ",
                        bf16_master_ ? "bf16 master weights (fp32 moments, updates rounded stochastically)"
                                     : "fp32 master weights");
  if (scaler_->enabled())
    precision += str_cat("; dynamic loss scaling from ", config_.mixed_precision.init_scale, ", x2 after ",
                         config_.mixed_precision.loss_scale_window, " clean steps, x0.5 and the update skipped on a "
                         "non-finite gradient, ", config_.mixed_precision.max_skipped_steps, " skipped in a row stop");
  spdlog::info("teletron train: device {}, precision {}", describe_device(device_), precision);
  if (!faults_.empty()) spdlog::warn("TELETRON_FAULTS: injecting {}", faults_.describe());
  const CudaGraphSection& g = config_.cuda_graph;
  if (graphs_) {
    const char* what = g.scope == "blocks" ? "each Transformer block (forward and backward) captured"
                       : g.scope == "auto"  ? "the whole step (its Transformer blocks where that fails) captured"
                                            : "the whole step captured";
    spdlog::info("CUDA graphs: {} per step shape after {} eager steps, its replay compared with "
                 "eager every {} replays and kept while {:g}x as fast or more, {} failed capture(s) retried{}",
                 what, std::max<int64_t>(g.warmup_steps, 2), g.capture_frequency, std::max(g.threshold, 1.0), g.retry,
                 std::getenv("TELETRON_GRAPH_EMULATE") ? " (EMULATED by TELETRON_GRAPH_EMULATE: no CUDA graph is made)"
                                                       : "");
  } else if (g.enabled != "false") {
    // Graphs need CUDA: the cuda_graph keys a CPU run was given do nothing, said once.
    warn_set_without_cuda([](const std::string& path) { return path.rfind("cuda_graph.", 0) == 0; },
                          "every step runs eagerly (CUDA graphs need CUDA)");
  }
  announce_allocator();
  spdlog::info("model: HunyuanVideo from {}, {} parameters ({:.3f} B); {}", model_origin_,
               model_->parameter_count(), model_->parameter_count() / 1e9, describe_hunyuan_config(model_config_));
  if (lora_) {
    const LoraOptions& o = lora_->options;
    spdlog::info("LoRA: rank {}, alpha {:g} (scale {:g}), dropout {:g}, {} init; {} modules, {} trainable parameters "
                 "({:.2f} % of the model), the base frozen in {}", o.rank, o.alpha > 0 ? o.alpha : double(o.rank),
                 o.scale(), o.dropout, o.init, lora_->modules().size(), lora_->parameter_count(),
                 100.0 * double(lora_->parameter_count()) / double(model_->parameter_count()),
                 autocast_ ? c10::toString(autocast_dtype_) : "fp32");
  }
  const auto& shape = dataset_->latent_shape();
  spdlog::info("data: {} ({} samples, latents [{}, {}, {}, {}], {} text tokens)", dataset_->describe(),
               dataset_->size(), shape[0], shape[1], shape[2], shape[3], dataset_->text_length());
  if (dynamic_) {
    const DynamicBatchSection& d = config_.dynamic_batch;
    std::string per_step = str_cat(cursor_.step_samples, " samples per step");
    if (!cursor_.bucket_samples.empty()) {
      // token_budget: each bucket's step, by its latent shape.
      const auto shapes = dataset_->bucket_latent_shapes();
      per_step = str_cat(cursor_.step_samples, " samples per step at the most tokens, token budget per bucket:");
      for (size_t b = 0; b < cursor_.bucket_samples.size(); ++b)
        per_step += str_cat(b == 0 ? " " : ", ", c10::IntArrayRef(shapes[b]).slice(1), " ", cursor_.bucket_samples[b]);
    } else if (d.mode == "token_budget") {
      per_step += " (dynamic_batch.mode: token_budget has one bucket here: the same as memory)";
    }
    spdlog::info("batch: dynamic, {}; micro-batches from {} within [{}, {}]{}; {} steps; lr {:g} "
                 "({} warmup, {})",
                 per_step, d.initial, d.min, d.max,
                 device_.is_cuda() ? str_cat(", sized per bucket to ", 100.0 * memory_budget(), " % of GPU memory")
                                   : std::string(" (no GPU memory to size them to)"),
                 config_.train.max_steps, config_.optimizer.lr, config_.optimizer.warmup_steps,
                 config_.optimizer.schedule);
  } else {
    spdlog::info("batch: {} x {} accumulation = {} samples per step; {} steps; lr {:g} ({} warmup, {})",
                 config_.batch_size, config_.gradient_accumulation, cursor_.step_samples, config_.train.max_steps,
                 config_.optimizer.lr, config_.optimizer.warmup_steps, config_.optimizer.schedule);
  }
  warn_unused_keys(config_, Command::kTrain);
}

void Trainer::warn_set_without_cuda(const std::function<bool(const std::string&)>& matches,
                                    const std::string& why) const {
  for (const ConfigSetKey& key : config_.set_keys) {
    if (!matches(key.path)) continue;
    spdlog::warn("tele_tron.{}: set ({}), but the device is {}: {}", key.path, key.where, describe_device(device_), why);
  }
}

void Trainer::announce_allocator() const {
  const TrainSection& t = config_.train;
  if (!device_.is_cuda()) {
    // The allocator keys a CPU run was given do nothing, said once per key.
    warn_set_without_cuda(
        [](const std::string& path) { return path == "train.expandable_segments" || path == "train.memory_cap"; },
        "it sets the CUDA caching allocator, which a CPU run does not use");
    return;
  }
  // An environment variable that names expandable segments decides: said once, when the key is set too.
  for (const ConfigSetKey& key : config_.set_keys) {
    if (key.path != "train.expandable_segments" || allocator_.environment.empty()) continue;
    spdlog::warn("tele_tron.train.expandable_segments: set ({}), but {} names expandable_segments and wins: "
                 "expandable segments are {}", key.where, allocator_.environment,
                 allocator_.expandable_segments ? "on" : "off");
  }
  if (!allocator_.expandable_segments && t.memory_cap >= 1.0) return;
  const GpuMemory memory = gpu_memory(device_);
  spdlog::info("CUDA allocator: expandable segments {}{}; {}", allocator_.expandable_segments ? "on" : "off",
               allocator_.environment.empty() ? std::string() : str_cat(" (", allocator_.environment, ")"),
               t.memory_cap < 1.0 ? str_cat("capped at ", 100.0 * t.memory_cap, " % of ",
                                           static_cast<double>(memory.total) / (1u << 30), " GiB (train.memory_cap)")
                                  : std::string("no memory cap"));
}

void Trainer::trace_batch(const std::vector<int64_t>& indices, const std::vector<int64_t>& epochs,
                          const LatentBatch& batch) {
  // A host sync per batch: tests only.
  const torch::Tensor latents = batch.latents.to(torch::kFloat64);
  *batch_trace_ << nlohmann::json{{"indices", indices},
                                  {"epochs", epochs},
                                  {"latents_sum", latents.sum().item<double>()},
                                  {"latents_abs_sum", latents.abs().sum().item<double>()}}
                       .dump()
                << "\n"
                << std::flush;
}

LatentBatch Trainer::next_batch(std::vector<int64_t>* rows) {
  if (prefetcher_) {
    BatchPrefetcher::Item item = prefetcher_->next();
    position_ = {item.plan.epoch_after, item.plan.index_after};
    if (batch_trace_) trace_batch(item.plan.indices, item.plan.epochs, item.batch);
    if (rows) *rows = item.plan.indices;
    return std::move(item.batch);
  }
  std::vector<int64_t> epochs;
  const auto seed = static_cast<uint64_t>(config_.train.seed);
  const std::vector<int64_t> indices = dynamic_ ? cursor_.next_group(dataset_->size(), seed, &epochs)
                                                : cursor_.next(fetch_size(), dataset_->size(), seed, &epochs);
  LatentBatch batch = stage(dataset_->get_batch(indices, epochs));
  if (batch_trace_) trace_batch(indices, epochs, batch);
  if (rows) *rows = indices;
  return batch;
}

LatentBatch Trainer::stage(LatentBatch batch) const {
  if (!device_.is_cuda()) return batch;
  // Host tensors go through pinned memory without a host wait, on the current stream (the
  // producer's, when prefetching); the (small) mask stays on the host, where the padding trim reads it.
  auto on_device = [this](const torch::Tensor& tensor) {
    return tensor.is_cuda() ? tensor : tensor.pin_memory().to(device_, /*non_blocking=*/true);
  };
  batch.latents = on_device(batch.latents);
  batch.text_states = on_device(batch.text_states);
  batch.pooled = on_device(batch.pooled);
  return batch;
}

torch::Tensor Trainer::image_condition(const torch::Tensor& noisy, const torch::Tensor& x0) const {
  if (model_config_.image_condition_type.empty()) return noisy;
  auto first_frame = torch::zeros_like(x0);
  first_frame.slice(2, 0, 1).copy_(x0.slice(2, 0, 1));
  auto mask = torch::zeros({x0.size(0), 1, x0.size(2), x0.size(3), x0.size(4)}, x0.options());
  mask.slice(2, 0, 1).fill_(1.0);
  return torch::cat({noisy, first_frame.to(noisy.scalar_type()), mask.to(noisy.scalar_type())}, 1);
}

Trainer::MicroBatch Trainer::prepare_micro(const LatentBatch& given, int64_t first, double weight,
                                           bool full_text) const {
  // data.caption_dropout: the samples it picks (by seed, step, place in the global batch) get the empty caption.
  const LatentBatch batch = caption_dropout_ ? caption_dropout_->apply(given, step_, first) : given;
  MicroBatch micro;
  micro.latents = batch.latents.to(device_);
  // Padding shared by the whole micro-batch is dropped on the host (no device sync), and attention
  // runs unmasked when nothing is left to mask.
  TrimmedText text;
  if (full_text) {
    // The dataset's text length, always masked: one step shape per bucket.
    text.states = batch.text_states;
    text.mask = batch.text_mask != 0;
    text.all_valid = false;
  } else {
    text = trim_text_padding(batch.text_states, batch.text_mask, config_.data.text_trim_multiple);
  }
  micro.text_states = text.states.to(device_);
  // A copy from pageable memory would wait for the stream: the (small) mask goes through pinned memory.
  micro.text_mask =
      device_.is_cuda() ? text.mask.contiguous().pin_memory().to(device_, /*non_blocking=*/true) : text.mask;
  micro.pooled = batch.pooled.to(device_);
  // Segments and per-sample attention need right padding, read on the host only where they could be used.
  const bool right_padded = !text.all_valid &&
                            (model_config_.segment_attention || model_config_.per_sample_attention) &&
                            is_right_padded(text.mask);
  micro.meta = MicroMeta{first, weight, text.all_valid, model_config_.segment_attention && right_padded, {}};
  if (model_config_.per_sample_attention && right_padded) {
    const auto counts = text.mask.sum(1).to(torch::kLong).contiguous();
    micro.meta.text_lengths.assign(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + counts.numel());
  }
  return micro;
}

void Trainer::begin_step() {
  // Graphs keep the gradients' memory (a captured step writes where the capture saw them).
  optimizer_->zero_grad(/*set_to_none=*/!graphs_);
  step_loss_.zero_();
}

void Trainer::micro_step(const MicroBatch& micro) {
  const torch::Tensor& x0 = micro.latents;
  // Each sample's sigma and noise come from (seed, step, its index in the global batch).
  const torch::Tensor keys = sample_keys(step_counter_, micro.meta.first, x0.size(0));
  FlowMatchingSample sample =
      make_flow_matching_sample(x0, flow_options_, keys, static_cast<uint64_t>(config_.train.seed));
  TransformerInputs inputs;
  inputs.hidden_states = image_condition(sample.noisy, x0);
  inputs.timestep = sample.sigmas * 1000.0;
  inputs.encoder_hidden_states = micro.text_states;
  inputs.encoder_attention_mask = micro.text_mask;
  inputs.text_all_valid = micro.meta.text_all_valid;
  inputs.text_right_padded = micro.meta.text_segments;
  inputs.text_lengths = micro.meta.text_lengths;
  if (!inputs.text_lengths.empty() && !per_sample_said_) {
    per_sample_said_ = true;
    spdlog::info(
        "attention: padded text attended per sample without a mask from step {} on; captured steps keep "
        "the mask (model.per_sample_attention)",
        step_ + 1);
  }
  inputs.pooled_projections = micro.pooled;
  if (model_config_.guidance_embeds) {
    inputs.guidance = torch::full({x0.size(0)}, flow_options_.guidance * 1000.0, sample.sigmas.options());
  }
  torch::Tensor prediction;
  {
    AutocastScope autocast(autocast_, autocast_dtype_, device_.type());
    prediction = model_->forward(inputs);
  }
  // The loss in fp32, whatever the autocast type; `weight` is the micro-batch's share of the step.
  auto loss = torch::mse_loss(prediction.to(torch::kFloat32), sample.target) * micro.meta.weight;
  scaler_->scale_loss(loss).backward();
  step_loss_.add_(loss.detach());
}

void Trainer::end_step() {
  finish_step();
  loss_sum_.add_(step_loss_);
}

void Trainer::train_step() {
  // The learning rate goes into its device tensor before the step (a captured step reads it there).
  optimizer_->set_lr(learning_rate_at(config_.optimizer, step_, config_.train.max_steps));
  // LoRA dropout draws from LibTorch's default generators, the only draws inside a step (the noise
  // is keyed by sample): seeded by (train.seed, step) so a resumed run draws the same masks. A
  // replayed CUDA graph reads the generator's seed and offset at each replay.
  if (lora_ && lora_->options.dropout > 0)
    torch::manual_seed(static_cast<uint64_t>(config_.train.seed) * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(step_));
  if (dynamic_) {
    dynamic_step();
    return;
  }
  const int64_t micro_steps = config_.gradient_accumulation;
  const double weight = 1.0 / static_cast<double>(micro_steps);
  last_micro_batch_ = config_.batch_size;
  last_step_samples_ = cursor_.step_samples;
  window_samples_ += cursor_.step_samples;
  if (!graphs_) {
    // Eager: each micro-batch is read while the one before it runs.
    begin_step();
    for (int64_t micro = 0; micro < micro_steps; ++micro) {
      auto wait_start = Clock::now();
      LatentBatch batch = next_batch();
      data_wait_s_ += seconds_since(wait_start);
      micro_step(prepare_micro(batch, micro * config_.batch_size, weight, full_text_));
    }
    end_step();
    return;
  }
  std::vector<LatentBatch> batches;
  for (int64_t micro = 0; micro < micro_steps; ++micro) {
    auto wait_start = Clock::now();
    batches.push_back(next_batch());
    data_wait_s_ += seconds_since(wait_start);
  }
  const TextPlan text = text_plan(bucket_of(batches.front()), /*measuring=*/false);
  std::vector<MicroBatch> parts;
  for (int64_t micro = 0; micro < micro_steps; ++micro)
    parts.push_back(
        prepare_micro(batches[static_cast<size_t>(micro)], micro * config_.batch_size, weight, text.full));
  // TELETRON_FAULTS oom@N: out of memory as the step begins, whatever runs it (an eager run, a
  // capture or a replay).
  try {
    if (faults_.at(Fault::kOom, step_ + 1))
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory (injected by TELETRON_FAULTS)");
    run_step(parts, step_fault_at(step_ + 1), /*inject_oom=*/false, &text);
  } catch (const c10::OutOfMemoryError& error) {
    if (!free_graph_memory(error)) throw;
    run_step(parts, step_fault_at(step_ + 1), /*inject_oom=*/false, &text);
  }
}

bool Trainer::free_graph_memory(const c10::OutOfMemoryError& error) {
  if (!graphs_) return false;
  const int64_t dropped = graphs_->release_for_memory();
  if (dropped == 0) return false;
  // release_for_memory gave the pool and the cache back; the gradients keep their addresses.
  optimizer_->zero_grad(/*set_to_none=*/false);  // nothing of the failed attempt is applied
  spdlog::warn(
      "step {}: out of memory while {} CUDA graph(s) held pool memory ({}): they were dropped, and the step "
      "runs again from its start",
      step_ + 1, dropped, first_line(error.what_without_backtrace()));
  return true;
}

std::string Trainer::bucket_of(const LatentBatch& batch) {
  return str_cat(batch.latents.sizes().slice(1));
}

Trainer::TextPlan Trainer::text_plan(const std::string& bucket, bool measuring) {
  TextPlan plan;
  plan.bucket = bucket;
  if (!text_by_measure_ || measuring) {
    // As configured; a memory measurement takes the padded text when it may be used (the larger).
    plan.full = full_text_ || (measuring && text_by_measure_);
    return plan;
  }
  TextChoice& choice = text_choice_[bucket];
  if (choice.trimmed) {
    plan.run = TextRun::kTrimmedEager;
    return plan;
  }
  if (choice.padded_eager) {  // through the graphs, which run the shape eagerly now
    plan.run = TextRun::kPaddedGraphs;
    plan.full = true;
    return plan;
  }
  // Padded first (the bucket's very first step pays for allocation either way), then alternating.
  if (choice.trimmed_steps < std::max<int64_t>(config_.cuda_graph.warmup_steps, 3) &&
      choice.trimmed_steps < choice.padded_steps) {
    choice.trimmed_steps += 1;
    plan.run = TextRun::kTrimmedReference;
    return plan;
  }
  choice.padded_steps += 1;
  plan.run = TextRun::kPaddedGraphs;
  plan.full = true;
  return plan;
}

void Trainer::after_padded_step(const std::string& bucket, const std::string& key) {
  const std::string reference = "text trimmed " + bucket;
  graphs_->set_reference(key, reference);
  TextChoice& choice = text_choice_[bucket];
  if (choice.padded_eager || !graphs_->gave_up(key)) return;
  // The graphs are given up: the faster of the two eager ways as timed (each batch's own text
  // length is a shape of its own, which can make the trimmed steps the slower).
  const StepGraphs::EagerComparison eager = graphs_->compare_with_reference(key);
  const std::string times =
      str_cat("padded ", eager.own_ms, " ms, trimmed ", eager.reference_ms, " ms per eager step");
  if (eager.own_faster) {
    choice.padded_eager = true;
    spdlog::info(
        "CUDA graphs: bucket {}: the text stays padded and the steps run eagerly from now on (data."
        "text_padding auto; {}): the graphs of its padded step [{}] were given up",
        bucket, times, key);
    return;
  }
  choice.trimmed = true;
  spdlog::info(
      "CUDA graphs: bucket {}: the text is trimmed per batch and the steps run eagerly from now on (data."
      "text_padding auto; {}): the graphs of its padded step [{}] were given up",
      bucket, times, key);
}

std::string Trainer::step_key(const std::vector<MicroBatch>& parts) {
  std::string key;
  for (const MicroBatch& part : parts) {
    if (!key.empty()) key += "; ";
    key += str_cat("latents ", part.latents.sizes(), " text ", part.text_states.size(1),
                   part.meta.text_all_valid ? "" : part.meta.text_segments ? " segments" : " masked",
                   " from ", part.meta.first);
  }
  return key;
}

void Trainer::run_step(const std::vector<MicroBatch>& parts, bool eager_only, bool inject_oom,
                       const TextPlan* text) {
  // The step body: graph-safe (core/step_graph.h), on the micro-batches' tensors, four per part.
  // The parts' host values travel by value (the text lengths serve the eager runs of the body: a
  // captured or replayed step keeps the mask, model/per_sample_attention.h).
  std::vector<MicroMeta> meta;
  for (const MicroBatch& part : parts) meta.push_back(part.meta);
  auto body = [this, meta, inject_oom](const std::vector<torch::Tensor>& tensors) {
    begin_step();
    for (size_t i = 0; i < meta.size(); ++i) {
      // Injected at the last micro-batch: the ones before it have left gradients.
      if (inject_oom && i + 1 == meta.size())
        TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory (injected by TELETRON_FAULTS)");
      micro_step(
          MicroBatch{tensors[4 * i], tensors[4 * i + 1], tensors[4 * i + 2], tensors[4 * i + 3], meta[i]});
    }
    end_step();
  };
  std::vector<torch::Tensor> tensors;
  for (const MicroBatch& part : parts) {
    tensors.push_back(part.latents);
    tensors.push_back(part.text_states);
    tensors.push_back(part.text_mask);
    tensors.push_back(part.pooled);
  }
  if (!graphs_) {
    body(tensors);
    return;
  }
  const TextRun how = text ? text->run : TextRun::kAsConfigured;
  if (how == TextRun::kTrimmedReference && !eager_only) {
    graphs_->run_reference("text trimmed " + text->bucket, tensors, body);
    return;
  }
  const std::string key = step_key(parts);
  graphs_->run(key, tensors, body, eager_only || how == TextRun::kTrimmedEager,
               faults_.at(Fault::kGraphCapture, step_ + 1));
  if (how == TextRun::kPaddedGraphs) after_padded_step(text->bucket, key);
}

namespace {

LatentBatch slice_batch(const LatentBatch& batch, int64_t first, int64_t count) {
  return LatentBatch{batch.latents.slice(0, first, first + count), batch.text_states.slice(0, first, first + count),
                     batch.text_mask.slice(0, first, first + count), batch.pooled.slice(0, first, first + count)};
}

}  // namespace

void Trainer::dynamic_step() {
  // The whole global batch is fetched at once (one bucket); its micro-batches follow the bucket's
  // size, and each sample weighs 1 / global batch in the loss, however the batch is cut.
  auto wait_start = Clock::now();
  std::vector<int64_t> rows;
  LatentBatch batch = next_batch(&rows);
  data_wait_s_ += seconds_since(wait_start);
  const int64_t total = batch.latents.size(0);
  const int64_t bucket = cursor_.row_bucket.empty() || rows.empty() ? 0 : cursor_.row_bucket[rows.front()];
  const DynamicBatchSection& limits = config_.dynamic_batch;
  auto found = micro_batch_.find(bucket);
  if (found == micro_batch_.end())
    found = micro_batch_.emplace(bucket, limits.initial).first;  // within [min, max]: checked at load
  int64_t& micro = found->second;
  // A bucket's first step on a GPU measures its peak memory per sample (eagerly; with the text
  // padded when it may be: the larger of the two).
  const bool measure = device_.is_cuda() && measured_.insert(bucket).second;
  const TextPlan text = text_plan(bucket_of(batch), measure);
  for (int64_t attempt = 0;; ++attempt) {
    const int64_t size = std::min(micro, total);
    GpuMemory before;
    int64_t grads_to_come = 0;  // the gradients this step makes, whatever its micro-batch
    if (measure) {
      reset_peak_memory(device_);
      before = gpu_memory(device_);
      for (const torch::Tensor& param : params_)
        if (!param.grad().defined()) grads_to_come += param.numel() * param.element_size();
    }
    try {
      std::vector<MicroBatch> parts;
      for (int64_t first = 0; first < total; first += size) {
        const int64_t count = std::min(size, total - first);
        parts.push_back(prepare_micro(slice_batch(batch, first, count), first,
                                      static_cast<double>(count) / static_cast<double>(total), text.full));
      }
      const bool inject_oom = attempt == 0 && faults_.at(Fault::kOom, step_ + 1);
      run_step(parts, measure || step_fault_at(step_ + 1), inject_oom, &text);
      last_micro_batch_ = size;
      last_step_samples_ = total;
      window_samples_ += total;
      if (measure) choose_micro_batch(bucket, size, before, grads_to_come, gpu_memory(device_));
      return;
    } catch (const c10::OutOfMemoryError& error) {
      // Graphs' pools first: the micro-batch was measured without them.
      if (free_graph_memory(error)) {
        oom_retries_ += 1;
        continue;
      }
      optimizer_->zero_grad(/*set_to_none=*/!graphs_);  // nothing of the failed attempt is applied
      release_cached_memory(device_);
      TT_CHECK_HINT(size > limits.min, ErrorCode::kMemory,
                    "lower dynamic_batch.min or dynamic_batch.memory_fraction, use a smaller bucket, turn on "
                    "model.activation_checkpointing, or raise train.memory_cap where it is below 1",
                    "step ", step_ + 1, ": out of memory at the smallest micro-batch (dynamic_batch.min = ", limits.min,
                    ") for bucket ", bucket, ": ", first_line(error.what_without_backtrace()));
      micro = std::max(limits.min, size / 2);
      oom_retries_ += 1;
      spdlog::warn(
          "step {}: out of memory with micro-batches of {} (bucket {}): the step runs again from its start "
          "with {} ({})",
          step_ + 1, size, bucket, micro, first_line(error.what_without_backtrace()));
    }
  }
}

void Trainer::choose_micro_batch(int64_t bucket, int64_t measured_size, const GpuMemory& before,
                                 int64_t grads_to_come, const GpuMemory& after) {
  const DynamicBatchSection& limits = config_.dynamic_batch;
  if (!after.known) return;
  // The online encoder's largest pass (vae.memory_share) may run at any moment beside the step.
  const double room = memory_budget() * static_cast<double>(after.total) - dataset_->side_memory_bytes();
  const MicroBatchFit fit = fit_micro_batch(before.allocated, grads_to_come, after.peak, measured_size, room);
  if (fit.per_sample <= 0) return;
  const int64_t step_samples = cursor_.samples_of(bucket);
  const int64_t chosen =
      std::clamp(fit.fits, limits.min, std::max(limits.min, std::min(limits.max, step_samples)));
  micro_batch_[bucket] = chosen;
  spdlog::info(
      "dynamic batch: bucket {}: {:.2f} GiB per sample at its peak (micro-batch {}) beside {:.2f} GiB held, "
      "{:.0f} % of {:.1f} GiB allowed: micro-batches of {} ({} per step of {} samples)",
      bucket, fit.per_sample / (1u << 30), measured_size,
      static_cast<double>(before.allocated + grads_to_come) / (1u << 30), 100.0 * memory_budget(),
      static_cast<double>(after.total) / (1u << 30), chosen, (step_samples + chosen - 1) / chosen,
      step_samples);
}

void Trainer::finish_step() {
  if (faults_.at(Fault::kNonfiniteGrad, step_ + 1)) {
    for (const torch::Tensor& param : params_) {
      if (!param.grad().defined()) continue;
      param.grad().view(-1)[0].fill_(std::numeric_limits<float>::infinity());
      break;
    }
  }
  // Unscale and check, clip, then skip the update on the device if anything is non-finite (no
  // host sync here); the scale then halves (a skipped step) or counts a clean one. Every state
  // changes in place (a captured step writes where the capture saw it).
  auto found_inf = scaler_->unscale_and_check(params_);
  auto grad_norm = clip_grad_norm(params_, config_.optimizer.max_grad_norm);
  found_inf = torch::maximum(found_inf, torch::logical_not(torch::isfinite(grad_norm + step_loss_)).to(torch::kFloat32));
  optimizer_->step(found_inf);
  if (!ema_.empty()) update_ema(found_inf);
  scaler_->update(found_inf);
  nonfinite_.add_(found_inf);
  skipped_run_.add_(1.0).mul_(found_inf);
  const double limit = static_cast<double>(scaler_->enabled() ? config_.mixed_precision.max_skipped_steps : 1);
  step_counter_.add_(1);  // now the 1-based number of this step
  limit_step_.copy_(torch::where(limit_step_.lt(0).logical_and(skipped_run_.ge(limit)), step_counter_, limit_step_));
  last_grad_norm_.copy_(grad_norm);
}

void Trainer::setup_ema() {
  if (config_.train.ema_decay <= 0) return;
  torch::NoGradGuard no_grad;
  // The checkpoint's keys (a LoRA file's, or diffusers' for the whole model): views of the trained
  // tensors, so the export writes the averages exactly as it writes the weights.
  for (const auto& [key, tensor] : lora_ ? lora_file_tensors(*lora_) : model_->diffusers_parameters())
    ema_.push_back({key, tensor, tensor.detach().to(torch::kFloat32).clone()});
  int64_t count = 0;
  for (const EmaEntry& entry : ema_) count += entry.average.numel();
  spdlog::info("EMA: decay {:g} over {} tensors ({} parameters, {:.2f} GB fp32 on {})", config_.train.ema_decay,
               ema_.size(), count, 4.0 * static_cast<double>(count) / 1e9, device_.str());
}

void Trainer::update_ema(const torch::Tensor& found_inf) {
  torch::NoGradGuard no_grad;
  // diffusers' EMAModel without warm-up: at the t-th step (0-based) decay_t = min(decay, (1+t)/(10+t)),
  // and 0 at t = 0 (the first step copies the weights). A skipped step leaves the averages as they
  // are. All on the device: step_counter_ still holds t here.
  const torch::Tensor t = step_counter_.to(torch::kFloat32);
  const torch::Tensor decay =
      torch::where(t.le(0), torch::zeros_like(t), torch::clamp_max((t + 1) / (t + 10), config_.train.ema_decay));
  const torch::Tensor weight = (1 - decay) * (1 - found_inf);
  for (EmaEntry& entry : ema_) {
    if (entry.source.scalar_type() == torch::kFloat32) {
      entry.average.lerp_(entry.source, weight);
    } else {
      entry.average.lerp_(entry.source.to(torch::kFloat32), weight);
    }
  }
}

std::map<std::string, torch::Tensor> Trainer::ema_state() const {
  std::map<std::string, torch::Tensor> out;
  for (const EmaEntry& entry : ema_) out["ema." + entry.key] = entry.average;
  return out;
}

void Trainer::check_finite(int64_t first_step, int64_t last_step) {
  const int64_t limit_step = limit_step_.item<int64_t>();
  if (limit_step < 0) {
    const double skipped = nonfinite_.item<double>();
    if (skipped > 0) spdlog::warn("steps {}..{}: {} update(s) skipped for non-finite gradients, loss scale now {:g}",
                                  first_step, last_step, static_cast<int64_t>(skipped), scaler_->scale().item<double>());
    return;
  }
  // The first parameter whose gradient is still non-finite (the last step's; a host read per
  // parameter, on this error path only).
  std::string culprit = "none in the last step (the loss itself, or the steps after it were clean)";
  std::vector<std::pair<std::string, torch::Tensor>> trained;
  if (lora_) {
    trained = lora_->named_parameters();
  } else {
    for (const auto& item : model_->named_parameters()) trained.emplace_back(item.key(), item.value());
  }
  for (const auto& [name, tensor] : trained) {
    const torch::Tensor& grad = tensor.grad();
    if (grad.defined() && !torch::isfinite(grad).all().item<bool>()) {
      culprit = name;
      break;
    }
  }
  const int64_t step = limit_step;
  if (!scaler_->enabled()) {
    throw Error(ErrorCode::kNan,
                str_cat("non-finite loss or gradients at step ", step, " (of steps ", first_step, "..", last_step,
                        "; updates with non-finite gradients are skipped, weights are intact); first non-finite "
                        "gradient: ", culprit),
                "lower tele_tron.optimizer.lr, keep optimizer.max_grad_norm > 0, check the latents for NaN/Inf; "
                "resume from the last checkpoint with --resume auto");
  }
  throw Error(ErrorCode::kNan,
              str_cat("step ", step, ": ", config_.mixed_precision.max_skipped_steps,
                      " steps in a row skipped for non-finite gradients (mixed_precision.max_skipped_steps), loss "
                      "scale now ", scaler_->scale().item<double>(), "; first non-finite gradient: ", culprit,
                      " (weights are intact)"),
              "fp16 overflows here: use mixed_precision.dtype: bf16, or lower tele_tron.optimizer.lr; resume from "
              "the last checkpoint with --resume auto");
}

void Trainer::run() {
  announce();
  fs::create_directories(run_dir_);
  const fs::path checkpoints = run_dir_ / "checkpoints";
  if (resume_folder_) {
    resume_from(*resume_folder_);
    if (!lora_) initial_weights_.reset();  // the checkpoint's weights win (a LoRA checkpoint holds the adapters only)
  } else if (resume_.empty()) {
    TT_CHECK_HINT(!checkpoint::find_latest(checkpoints.string()).has_value(), ErrorCode::kCheckpoint,
                  "pass --resume auto to continue that run, or --output DIR for a new one",
                  "output folder ", run_dir_.string(), " already holds checkpoints of an earlier run");
  }
  if (initial_weights_) {
    load_weights(*initial_weights_, model_->diffusers_parameters());
    spdlog::info("initial weights: {}", initial_weights_->description);
  }
  if (lora_ && config_.model.lora_weights && !resume_folder_) {
    const std::string& path = *config_.model.lora_weights;
    const LoraFile file = read_lora_file(path, model_config_.hidden_size());
    const std::vector<std::string> missing = load_lora_into(*lora_, file, "tele_tron.model.lora.weights " + path);
    spdlog::info("LoRA: {} adapters from {} ({} layout){}", file.modules.size(), path, file.format,
                 missing.empty() ? std::string()
                                 : str_cat("; ", missing.size(), " adapted module(s) it lacks start from B = 0, the "
                                           "first ", missing.front()));
  }
  if (!ema_.empty() && !ema_from_checkpoint_) {
    torch::NoGradGuard no_grad;
    for (EmaEntry& entry : ema_) entry.average.copy_(entry.source);
  }
  const bool video = config_.data.source == "video";
  const int64_t ahead = video ? config_.data_pipeline.prefetch : config_.data.prefetch;
  if (ahead > 0) {
    // The producer starts where the consumed position stands (after a resume too) and runs ahead.
    producer_cursor_ = cursor_;
    const uint64_t seed = static_cast<uint64_t>(config_.train.seed);
    prefetcher_ = std::make_unique<BatchPrefetcher>(
        ahead, device_,
        [this, seed] {
          PlannedBatch plan;
          plan.indices = dynamic_ ? producer_cursor_.next_group(dataset_->size(), seed, &plan.epochs)
                                  : producer_cursor_.next(fetch_size(), dataset_->size(), seed, &plan.epochs);
          plan.epoch_after = producer_cursor_.position.epoch;
          plan.index_after = producer_cursor_.position.index;
          return plan;
        },
        [this](const PlannedBatch& plan) { return stage(dataset_->get_batch(plan.indices, plan.epochs)); },
        [this](const PlannedBatch& plan) { dataset_->prepare(plan.indices, plan.epochs); },
        // Video: enough planned batches beyond the one in the VAE to keep every clip worker busy.
        video ? (config_.data_pipeline.workers + fetch_size() - 1) / fetch_size() : 0);
    const char* where = device_.is_cuda() ? " on its own CUDA stream" : " on its own thread";
    if (video) {
      spdlog::info("data: the video pipeline runs up to {} batches ahead{}; {} clip worker(s) decode ahead of the VAE",
                   ahead, where, config_.data_pipeline.workers);
    } else {
      spdlog::info("data: cached latents read up to {} batches ahead{}{}", ahead, where,
                   device_.is_cuda() ? ", through pinned memory" : "");
    }
  }
  write_file_atomically((run_dir_ / "config.resolved.yaml").string(), config_to_yaml(config_));
  // Rows past the restored step (the steps this run redoes) go; a fresh run (step 0) starts empty.
  // train.tensorboard: every row's scalars also go to an event file in the run folder.
  metrics_ = std::make_unique<MetricsLog>((run_dir_ / "metrics.jsonl").string(), step_,
                                          config_.train.tensorboard ? run_dir_.string() : std::string());
  writer_ = std::make_unique<CheckpointWriter>(checkpoints.string(), config_.train.keep_checkpoints);
  if (config_.validation.every > 0) validation_ = std::make_unique<Validation>(config_, model_config_, device_, run_dir_);

  const int64_t max_steps = config_.train.max_steps;
  if (step_ >= max_steps) {
    spdlog::info("already at step {} of {}: nothing to train (raise --max-steps to continue)", step_, max_steps);
    return;
  }
  const int64_t start_step = step_;
  auto run_start = Clock::now();
  auto window_start = Clock::now();
  auto last_print = Clock::now() - std::chrono::hours(1);
  int64_t window_first = step_ + 1;
  reset_peak_memory(device_);
  if (profile_window_.active()) {
    if (profile_window_.first <= step_ || profile_window_.last() > max_steps)
      spdlog::warn("--profile {}:{}: steps {}..{} are not all in this run (steps {}..{}): {}", profile_window_.first,
                   profile_window_.count, profile_window_.first, profile_window_.last(), step_ + 1, max_steps,
                   profile_window_.first <= step_ ? "nothing is traced" : "the trace ends with the run");
    profiler_ = std::make_unique<StepProfiler>(profile_window_, device_, (run_dir_ / "profile").string());
  }

  while (step_ < max_steps) {
    if (profiler_) profiler_->before_step(step_ + 1);
    train_step();
    step_ += 1;
    if (profiler_) profiler_->after_step(step_, step_ == max_steps);
    if (validation_ && validation_->due(step_)) {
      // Between steps, outside any capture; its time is left out of the window's samples/s.
      const auto validation_start = Clock::now();
      validation_->run(*model_, step_, autocast_, autocast_dtype_, metrics_->tensorboard());
      window_start += Clock::now() - validation_start;
    }
    const bool last = step_ == max_steps;
    const bool log_now = step_ % config_.train.log_every == 0 || last;
    const bool checkpoint_now = checkpoints_ && (step_ % config_.train.checkpoint_every == 0 || last);
    const bool print_now = seconds_since(last_print) >= 5.0 || step_ == start_step + 1;
    if (!(log_now || checkpoint_now || print_now)) continue;

    // Host reads happen only here, every few steps.
    check_finite(window_first, step_);
    const int64_t window_steps = step_ - window_first + 1;
    const double window_s = seconds_since(window_start);
    const double loss = loss_sum_.item<double>() / window_steps;
    // Samples the window's steps trained on (token_budget: their count varies with the bucket).
    const double samples_per_s = static_cast<double>(window_samples_) / std::max(window_s, 1e-9);
    const double step_ms = 1000.0 * window_s / window_steps;
    // The first step pays for allocator warm-up and kernel selection: no ETA from it.
    const std::string eta =
        step_ == start_step + 1 ? std::string("--") : format_duration((max_steps - step_) * window_s / window_steps);
    const double lr = learning_rate_at(config_.optimizer, step_ - 1, max_steps);
    // Share of the window's wall time the steps spent waiting for data (0 when the pipeline keeps up).
    const double data_wait_share = std::min(1.0, data_wait_s_ / std::max(window_s, 1e-9));
    if (print_now || log_now) {
      spdlog::info("step {}/{}  loss {:.4f}  lr {:.2e}  grad_norm {:.3f}  {:.2f} samples/s  {:.0f} ms/step  "
                   "data wait {:.0f} %  ETA {}",
                   step_, max_steps, loss, lr, last_grad_norm_.item<double>(), samples_per_s, step_ms,
                   100.0 * data_wait_share, eta);
      last_print = Clock::now();
    }
    if (log_now) {
      nlohmann::json row = {{"step", step_},
                            {"loss", loss},
                            {"lr", lr},
                            {"grad_norm", last_grad_norm_.item<double>()},
                            {"samples_per_s", samples_per_s},
                            {"step_ms", step_ms},
                            {"data_wait_ms", 1000.0 * data_wait_s_ / window_steps},
                            {"data_wait_share", data_wait_share},
                            {"peak_mem_gb", run_peak_gb()},
                            {"epoch", position_.epoch},
                            {"skipped_steps", static_cast<int64_t>(nonfinite_.item<double>())},
                            {"micro_batch", last_micro_batch_},
                            {"step_samples", last_step_samples_}};
      if (scaler_->enabled()) row["loss_scale"] = scaler_->scale().item<double>();
      if (dynamic_) row["oom_retries"] = oom_retries_;
      if (graphs_) {
        const StepGraphCounts counts = graphs_->counts();
        row["graph_replays"] = counts.replays;
        row["graph_captures"] = counts.captures;
        row["graph_failed_captures"] = counts.failed_captures;
        row["graph_dropped"] = counts.dropped;
        row["graph_no_room"] = counts.no_room;
      }
      // Video on a GPU: the pipeline's GPU time per sample (samples whose events have completed).
      const PipelineGpuTime gpu_time = dataset_->take_gpu_time();
      if (gpu_time.samples > 0) {
        row["before_vae_gpu_ms_per_sample"] = gpu_time.before_vae_ms / static_cast<double>(gpu_time.samples);
        row["vae_gpu_ms_per_sample"] = gpu_time.vae_ms / static_cast<double>(gpu_time.samples);
        if (gpu_time.flow_ms > 0)
          row["flow_gpu_ms_per_sample"] = gpu_time.flow_ms / static_cast<double>(gpu_time.samples);
      }
      // The flow stage's motion scores of the samples that arrived since the last row.
      if (gpu_time.motion_samples > 0) {
        row["motion"] = gpu_time.motion_sum / static_cast<double>(gpu_time.motion_samples);
        row["motion_samples"] = gpu_time.motion_samples;
      }
      metrics_->write(row);
      loss_sum_.zero_();
      nonfinite_.zero_();
      oom_retries_ = 0;
      data_wait_s_ = 0.0;
      window_samples_ = 0;
      window_first = step_ + 1;
      window_start = Clock::now();
    }
    if (checkpoint_now) save_checkpoint();
  }
  writer_->finish();  // the last checkpoint is on disk before the run says it is done
  if (graphs_) {
    graphs_->flush();
    const StepGraphCounts counts = graphs_->counts();
    spdlog::info(
        "CUDA graphs: {} capture(s), {} failed, {} replays, {} eager steps, {} dropped, {} not captured for want "
        "of memory; per shape:\n{}",
        counts.captures, counts.failed_captures, counts.replays, counts.eager, counts.dropped, counts.no_room,
        graphs_->describe());
  }
  spdlog::info("done: {} steps in {}, run folder {}", step_ - start_step, format_duration(seconds_since(run_start)),
               run_dir_.string());
}

void Trainer::check_memory_estimate() {
  // Before the model is on the device: a run that cannot fit stops here with the numbers, instead
  // of with an allocation failure at step 0 (or before it, for the 13B's fp32 state).
  const bool automatic = config_.model.activation_checkpointing_every_n == kCheckpointingAuto;
  if (automatic && !device_.is_cuda()) {
    spdlog::info(
        "model.activation_checkpointing: auto recomputes no block on the CPU (its plan comes from the "
        "memory estimate's probes, which need the CUDA allocator)");
    return;
  }
  if (!device_.is_cuda() || (!config_.train.memory_check && !automatic)) return;
  const StepShape shape = largest_step_shape(config_, dataset_->latent_shape(), dataset_->text_length());
  const auto started = std::chrono::steady_clock::now();
  // The online encoder runs beside the step (vae.memory_share): what it measured is not the step's.
  const double side = dataset_->side_memory_bytes();
  const double capacity = planning_capacity(gpu_memory(device_), config_.train.memory_cap) - side;
  const MemoryEstimate estimate = estimate_step_memory(config_, model_config_, shape, device_,
                                                       /*both_modes=*/true, kAutoCheckpointShare * capacity);
  checkpoint_plan_ = estimate.checkpointed;
  spdlog::info("{}{} ({:.1f} s; train.memory_check: false skips {})", describe_estimate(estimate, capacity),
               side > 0 ? " beside the VAE encoder's " + gib_text(side) : std::string(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
               automatic ? "the check, not auto's plan" : "it");
  if (config_.train.memory_check) check_estimate_fits(estimate, config_, capacity);
  // Plain segments fragment when a step fills the device (a fifth of it at one long 720p clip).
  if (!allocator_.expandable_segments && estimate.measured &&
      estimate.peak_bytes > kCloseToCapacity * capacity)
    spdlog::warn(
        "the step's estimated peak is {:.0f} % of what it may use and the CUDA allocator's expandable "
        "segments are off: fragmentation may stop it with out of memory; set "
        "tele_tron.train.expandable_segments: true",
        100.0 * estimate.peak_bytes / capacity);
}

void run_training(const TrainRequest& request) {
  const double cap = request.config.train.memory_cap;
  try {
    Trainer trainer(request);
    trainer.run();
  } catch (const c10::OutOfMemoryError& error) {
    if (cap >= 1.0) throw;
    // Under a cap the allocator fails long before the device is full: name the key that set it.
    throw Error(ErrorCode::kMemory,
                str_cat("out of memory under tele_tron.train.memory_cap = ", cap, " (", 100.0 * cap,
                        " % of the GPU): ", first_line(error.what_without_backtrace())),
                "raise train.memory_cap (1.0 = no cap), or lower the batch or the resolution");
  }
}

}  // namespace tt
