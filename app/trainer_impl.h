// The Trainer behind run_training (trainer.h), declared for the files that implement it:
// app/trainer.cpp (set-up, the step, the loop) and app/trainer_resume.cpp (checkpoints, the resume
// checks and restoring a run). Internal to those files.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/config.h"
#include "app/prefetch.h"
#include "app/resume_check.h"
#include "app/trainer.h"
#include "app/training_data.h"
#include "core/adamw.h"
#include "core/fault_injection.h"
#include "core/loss_scaler.h"
#include "core/metrics.h"
#include "core/profiler.h"
#include "model/flow_matching.h"
#include "model/transformer.h"
#include "model/weight_io.h"
#include "model/weights.h"
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
  std::optional<std::string> find_resume_folder() const;
  std::optional<StoredDataState> check_resume(const std::string& folder);
  void check_resumed_data(const std::string& folder, const StoredDataState& stored);
  void resume_from(const std::string& folder);
  LatentBatch next_batch();
  torch::Tensor train_step();  // returns the step's loss (0-d device tensor)
  void save_checkpoint();
  void check_finite(int64_t first_step, int64_t last_step);

  Config config_;
  std::string resume_;
  std::vector<std::string> allow_change_;  // normalized --allow-change keys
  std::optional<std::string> resume_folder_;  // the checkpoint a resume continues
  ResumeCheck resume_check_;                  // what differs from the checkpoint's config
  // A resume onto data or a dealing the checkpoint's position does not describe (an accepted
  // manifest or global-batch change): the data order restarts at the next epoch.
  bool restart_epoch_ = false;
  torch::Device device_{torch::kCPU};
  bool autocast_ = false;
  at::ScalarType autocast_dtype_ = at::kBFloat16;  // mixed_precision.dtype
  HunyuanVideoConfig model_config_;
  std::string model_origin_;
  std::optional<WeightSource> initial_weights_;
  HunyuanVideoTransformer model_{nullptr};
  std::vector<torch::Tensor> params_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<LossScaler> scaler_;  // fp16: dynamic loss scaling; otherwise non-finite detection only
  FaultPlan faults_;                    // TELETRON_FAULTS (tests)
  std::unique_ptr<TrainingData> dataset_;
  FlowMatchingOptions flow_options_;
  DataCursor cursor_;                   // consumed by training steps (checkpointed)
  DataPosition& position_ = cursor_.position;
  DataCursor producer_cursor_;          // the prefetch producer's, ahead of cursor_
  std::unique_ptr<BatchPrefetcher> prefetcher_;
  std::unique_ptr<MetricsLog> metrics_;
  ProfileWindow profile_window_;           // --profile
  std::unique_ptr<StepProfiler> profiler_;
  // TELETRON_TRACE_BATCHES=FILE (tests): one JSON line per batch taken, with its rows and a checksum.
  std::unique_ptr<std::ofstream> batch_trace_;
  void trace_batch(const std::vector<int64_t>& indices, const std::vector<int64_t>& epochs, const LatentBatch& batch);
  int64_t step_ = 0;
  std::filesystem::path run_dir_;
  torch::Tensor loss_sum_;     // 0-d fp32: summed step losses since the last report
  torch::Tensor nonfinite_;    // 0-d fp32: steps skipped for non-finite gradients since the last report
  torch::Tensor skipped_run_;  // 0-d fp32: skipped steps in a row up to the last step
  torch::Tensor limit_step_;   // 0-d fp32: the step where skipped_run_ reached max_skipped_steps, -1 before
  torch::Tensor last_grad_norm_;
  double data_wait_s_ = 0.0;
};

}  // namespace tt
