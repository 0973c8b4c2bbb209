// `teletron train`: the training loop on cached latents — flow-matching loss through the
// HunyuanVideo Transformer, AdamW with warmup + constant/cosine schedule, gradient clipping and
// accumulation, bf16 autocast over fp32 master weights on CUDA (fp32 on CPU), or bf16 master
// weights with stochastically rounded updates (bf16 autocast on the CPU too), metrics.jsonl,
// crash-safe checkpoints and exact resume. A resume first checks that the new config keeps the run
// (app/resume_check: the model, the sample sequence, the global batch) and that the manifest's
// contents are the run's (content hash in the checkpoint).
#pragma once

#include <string>
#include <vector>

#include "app/config.h"

namespace tt {

struct TrainRequest {
  /// The resolved config (file + environment + --set, with CLI flags folded in as overrides).
  Config config;
  /// "" = fresh run; "auto" = newest complete checkpoint of the run folder, or fresh if none;
  /// otherwise a checkpoint folder or a run folder.
  std::string resume;
  /// --allow-change keys (paths below tele_tron.): changes to the run a resume accepts, with a warning.
  std::vector<std::string> allow_change;
  /// --profile FIRST:COUNT: a Kineto trace of those optimizer steps into <output_dir>/profile ("" = none).
  std::string profile;
  /// false: no checkpoint is written, not even the last (benchmark rows: a 1b checkpoint is 13 GB).
  bool checkpoints = true;
};

/// Runs training to config.train.max_steps. Throws tt::Error on failure.
void run_training(const TrainRequest& request);

}  // namespace tt
