// The Trainer behind run_training (trainer.h), declared for the files that implement it:
// app/trainer.cpp (set-up, the step, the loop) and app/trainer_resume.cpp (checkpoints, the resume
// checks and restoring a run). Internal to those files.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <optional>
#include <string>
#include <vector>

#include "app/config.h"
#include "app/memory_estimate.h"
#include "app/prefetch.h"
#include "app/resume_check.h"
#include "app/trainer.h"
#include "app/training_data.h"
#include "app/validation.h"
#include "core/adamw.h"
#include "core/checkpoint_writer.h"
#include "core/device.h"
#include "core/fault_injection.h"
#include "core/loss_scaler.h"
#include "core/metrics.h"
#include "core/profiler.h"
#include "core/step_graph.h"
#include "model/flow_matching.h"
#include "model/lora_io.h"
#include "model/transformer.h"
#include "model/weight_io.h"
#include "model/weights.h"
#include "pipeline/caption_dropout.h"
#include "pipeline/data_cursor.h"

namespace tt {

class Trainer {
 public:
  /// The model input for the configured conditioning: the noisy latent itself (text-to-video), or
  /// for latent_concat cat(noisy, first-frame latent with later frames zeroed, first-frame mask),
  /// the layout of diffusers' HunyuanVideo image-to-video pipeline.
  torch::Tensor image_condition(const torch::Tensor& noisy, const torch::Tensor& x0) const;

  explicit Trainer(const TrainRequest& request);
  void run();

 private:
  void announce() const;
  /// What train.expandable_segments and train.memory_cap did (on the CPU: that they do nothing).
  void announce_allocator() const;
  /// train.memory_check: the step's memory estimated before the model is built (app/memory_estimate.h);
  /// model.activation_checkpointing: auto's plan made from the same estimate (into checkpoint_plan_).
  void check_memory_estimate();
  /// Warns once for each set key `matches` picks that it does nothing without CUDA, and `why`.
  void warn_set_without_cuda(const std::function<bool(const std::string&)>& matches, const std::string& why) const;
  /// The share of GPU memory a dynamic batch may fill: dynamic_batch.memory_fraction, within
  /// train.memory_cap (the allocator fails past the cap whatever the fraction says).
  double memory_budget() const { return std::min(config_.dynamic_batch.memory_fraction, config_.train.memory_cap); }
  /// The run's peak memory in GiB (metrics): the allocator's, or what it was before the graphs'
  /// working-set measurements reset it, whichever is larger.
  double run_peak_gb() const {
    const double before = graphs_ ? static_cast<double>(graphs_->peak_before_resets()) / (1u << 30) : 0.0;
    return std::max(peak_memory_gb(device_), before);
  }
  std::optional<std::string> find_resume_folder() const;
  std::optional<StoredDataState> check_resume(const std::string& folder);
  void check_resumed_data(const std::string& folder, const StoredDataState& stored);
  void resume_from(const std::string& folder);
  /// The next batch the data order holds (fetch_size() samples); `rows` gets their manifest rows.
  LatentBatch next_batch(std::vector<int64_t>* rows = nullptr);
  /// On a GPU: the batch's host tensors but the text mask (the padding trim reads it on the host)
  /// copied to the device through pinned memory, without a host wait.
  LatentBatch stage(LatentBatch batch) const;
  /// Samples per fetch: batch_size, or with batch_size: dynamic the whole global batch.
  int64_t fetch_size() const { return dynamic_ ? cursor_.step_samples : config_.batch_size; }
  /// What a micro-batch's step needs besides its tensors (part of its graph's shape key).
  struct MicroMeta {
    int64_t first = 0;       // its first sample's index in the global batch (the noise keys)
    double weight = 1.0;     // its share of the step's loss
    bool text_all_valid = false;  // no text padding left: attention runs unmasked
    // The padded text is right-padded and model.segment_attention is on: attention as segments.
    bool text_segments = false;
    // Valid text tokens per sample, for model.per_sample_attention; empty when it is off or no
    // padding is left. Not part of a graph's shape key: a captured step keeps the mask.
    std::vector<int64_t> text_lengths;
  };
  /// One micro-batch ready for the step, on the device.
  struct MicroBatch {
    torch::Tensor latents;      // (B, C, F, H, W) fp32
    torch::Tensor text_states;  // (B, L', D), padding shared by the batch trimmed
    torch::Tensor text_mask;    // (B, L') bool
    torch::Tensor pooled;       // (B, P)
    MicroMeta meta;             // its host values
  };
  /// One optimizer step: the learning rate set, the data read, the step run (eagerly or as a graph).
  void train_step();
  /// The micro-batch holding samples first.. of the step, weighing `weight` of its loss.
  /// `full_text`: the text keeps the dataset's padding (masked), else padding shared by the batch is
  /// dropped.
  MicroBatch prepare_micro(const LatentBatch& batch, int64_t first, double weight, bool full_text) const;
  /// The parts of the step body (graph-safe, core/step_graph.h): gradients and the step loss
  /// zeroed in place; one micro-batch's forward and backward, its loss added to step_loss_; clip,
  /// the update and the counters (finish_step), the step loss added to loss_sum_.
  void begin_step();
  void micro_step(const MicroBatch& micro);
  void end_step();
  /// The whole step on prepared micro-batches: through graphs_ when graphs are on. `eager_only`:
  /// this step must not be captured or replayed (an injected fault, a memory measurement).
  /// `inject_oom`: the last micro-batch raises out-of-memory (TELETRON_FAULTS oom@N).
  /// `text`: how the step's text was prepared (TextPlan): a trimmed reference step is timed as its
  /// never-captured reference shape, a trimmed-for-good one runs eagerly, a padded one goes through
  /// the graphs and may give the padding up afterwards.
  struct TextPlan;
  void run_step(const std::vector<MicroBatch>& parts, bool eager_only, bool inject_oom,
                const TextPlan* text = nullptr);
  /// data.text_padding auto with graphs: how a bucket's text is padded, chosen by measurement. The
  /// text padded to the dataset's length (one step shape) goes through the graphs; during the
  /// bucket's warm-up every other step runs with the text trimmed instead, eagerly, timed as the
  /// reference shape "text trimmed <bucket>" (max(cuda_graph.warmup_steps, 3) of them, alternating
  /// so that both kinds see the same cold start), and the graphs' comparisons weigh those steps too;
  /// once the bucket's graphs are given up (slower than the trimmed or padded eager steps, out of
  /// retries, or no room for them) its steps run eagerly for good, the text padded or trimmed,
  /// whichever ran faster eagerly.
  struct TextChoice {
    int64_t padded_steps = 0;   // steps run padded
    int64_t trimmed_steps = 0;  // reference steps run
    bool trimmed = false;       // graphs given up: trimmed and eager from now on
    bool padded_eager = false;  // graphs given up: padded and eager from now on (timed faster)
  };
  enum class TextRun { kPaddedGraphs, kTrimmedReference, kTrimmedEager, kAsConfigured };
  struct TextPlan {
    std::string bucket;
    TextRun run = TextRun::kAsConfigured;
    bool full = false;  // prepare_micro's full_text
  };
  /// The next step of `bucket` (its latent shape): counts it in its TextChoice. `measuring`: a
  /// dynamic-batch memory measurement (eager, not counted; padded text where it may be used).
  TextPlan text_plan(const std::string& bucket, bool measuring);
  /// After a step of `bucket` with `key` ran padded through the graphs: gives up the padding when the graphs did.
  void after_padded_step(const std::string& bucket, const std::string& key);
  static std::string bucket_of(const LatentBatch& batch);
  /// The graph shape of a step: every micro-batch's latent shape, text length, mask and offset.
  static std::string step_key(const std::vector<MicroBatch>& parts);
  /// batch_size: dynamic: the step's micro-batches at the bucket's size, again from the start with
  /// half of it after an out-of-memory error.
  void dynamic_step();
  /// An out-of-memory error inside a step while whole-step CUDA graphs held pool memory: drops them
  /// (their shapes run eagerly from now on), clears what the failed attempt left and returns true,
  /// so that the caller runs the step again from its start. False: no graph held memory.
  bool free_graph_memory(const c10::OutOfMemoryError& error);
  /// A fault the step body itself injects at that step (a capture must not bake it in).
  bool step_fault_at(int64_t step) const {
    return faults_.at(Fault::kNonfiniteGrad, step) || faults_.at(Fault::kOom, step);
  }
  void choose_micro_batch(int64_t bucket, int64_t measured_size, const GpuMemory& before,
                          int64_t grads_to_come, const GpuMemory& after);
  /// Clip, the (skipped when non-finite) update and the loss scale's update, all in place.
  void finish_step();
  void save_checkpoint();
  /// train.ema_decay: the averages' tensors (fp32 copies of the trained tensors under their
  /// checkpoint keys), and their update after the optimizer step (in place, graph-safe).
  void setup_ema();
  void update_ema(const torch::Tensor& found_inf);
  /// The averages as the checkpoint's state holds them ("ema.<key>").
  std::map<std::string, torch::Tensor> ema_state() const;
  void check_finite(int64_t first_step, int64_t last_step);

  Config config_;
  std::string resume_;
  bool checkpoints_ = true;  // TrainRequest::checkpoints
  std::vector<std::string> allow_change_;  // normalized --allow-change keys
  std::optional<std::string> resume_folder_;  // the checkpoint a resume continues
  ResumeCheck resume_check_;                  // what differs from the checkpoint's config
  // A resume onto data or a dealing the checkpoint's position does not describe (an accepted
  // manifest or global-batch change): the data order restarts at the next epoch.
  bool restart_epoch_ = false;
  torch::Device device_{torch::kCPU};
  bool autocast_ = false;  // on CUDA with mixed precision; on the CPU too with bf16 master weights
  at::ScalarType autocast_dtype_ = at::kBFloat16;  // mixed_precision.dtype
  bool bf16_master_ = false;  // mixed_precision.master_weights: bf16 (model, gradients bf16; moments fp32)
  AllocatorSetup allocator_;  // train.expandable_segments / train.memory_cap as they took effect
  HunyuanVideoConfig model_config_;
  std::string model_origin_;
  std::optional<WeightSource> initial_weights_;
  HunyuanVideoTransformer model_{nullptr};
  // model.activation_checkpointing: auto: the blocks recomputed, planned by check_memory_estimate.
  CheckpointCounts checkpoint_plan_;
  std::optional<LoraSet> lora_;  // model.lora.rank > 0: the adapters, the only trained tensors
  std::vector<torch::Tensor> params_;
  // train.ema_decay > 0: per trained tensor (its checkpoint key, the tensor, its fp32 average).
  struct EmaEntry {
    std::string key;
    torch::Tensor source;
    torch::Tensor average;
  };
  std::vector<EmaEntry> ema_;
  bool ema_from_checkpoint_ = false;  // the resume restored the averages (else they start from the weights)
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<LossScaler> scaler_;  // fp16: dynamic loss scaling; otherwise non-finite detection only
  FaultPlan faults_;                    // TELETRON_FAULTS (tests)
  bool dynamic_ = false;                // batch_size: dynamic
  std::map<int64_t, int64_t> micro_batch_;  // dynamic: bucket (0 without buckets) -> micro-batch (checkpointed)
  std::set<int64_t> measured_;              // dynamic: buckets whose memory per sample was measured
  int64_t last_micro_batch_ = 0;            // the last step's micro-batch (metrics)
  int64_t last_step_samples_ = 0;           // the last step's samples (metrics; token_budget varies it)
  int64_t window_samples_ = 0;              // samples of the steps since the last log row (samples/s)
  int64_t oom_retries_ = 0;                 // dynamic: steps run again after out-of-memory, since the last report
  std::unique_ptr<TrainingData> dataset_;
  std::optional<CaptionDropout> caption_dropout_;  // data.caption_dropout > 0 (its embedding on device_)
  FlowMatchingOptions flow_options_;
  DataCursor cursor_;                   // consumed by training steps (checkpointed)
  DataPosition& position_ = cursor_.position;
  DataCursor producer_cursor_;          // the prefetch producer's, ahead of cursor_
  std::unique_ptr<BatchPrefetcher> prefetcher_;
  std::unique_ptr<MetricsLog> metrics_;
  std::unique_ptr<Validation> validation_;  // validation.every > 0: videos from the current weights
  std::unique_ptr<CheckpointWriter> writer_;  // checkpoints written on a thread of their own
  ProfileWindow profile_window_;           // --profile
  std::unique_ptr<StepProfiler> profiler_;
  // TELETRON_TRACE_BATCHES=FILE (tests): one JSON line per batch taken, with its rows and a checksum.
  std::unique_ptr<std::ofstream> batch_trace_;
  void trace_batch(const std::vector<int64_t>& indices, const std::vector<int64_t>& epochs, const LatentBatch& batch);
  int64_t step_ = 0;
  torch::Tensor step_counter_;  // 0-d int64 on the device: step_, advanced on the device (sample keys read it)
  std::filesystem::path run_dir_;
  std::unique_ptr<StepGraphs> graphs_;  // cuda_graph on: the step captured per shape and replayed
  bool full_text_ = false;              // data.text_padding resolved: keep the padding (masked), no trim
  bool text_by_measure_ = false;        // data.text_padding auto with graphs: per bucket, TextChoice
  std::map<std::string, TextChoice> text_choice_;
  torch::Tensor step_loss_;    // 0-d fp32: the current step's loss
  bool per_sample_said_ = false;  // the first micro-batch given per-sample text lengths was logged
  torch::Tensor loss_sum_;     // 0-d fp32: summed step losses since the last report
  torch::Tensor nonfinite_;    // 0-d fp32: steps skipped for non-finite gradients since the last report
  torch::Tensor skipped_run_;  // 0-d fp32: skipped steps in a row up to the last step
  torch::Tensor limit_step_;   // 0-d int64: the step where skipped_run_ reached max_skipped_steps, -1 before
  torch::Tensor last_grad_norm_;
  double data_wait_s_ = 0.0;
};

}  // namespace tt
