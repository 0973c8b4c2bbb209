// `teletron export CHECKPOINT|RUN --output DIR`: a training checkpoint as files the diffusers
// ecosystem loads. A full-model checkpoint becomes a save_pretrained folder of
// HunyuanVideoTransformer3DModel (config.json + diffusion_pytorch_model[-0000k-of-0000n].safetensors
// + index); a LoRA checkpoint becomes pytorch_lora_weights.safetensors, the PEFT layout
// load_lora_weights reads, with alpha/r folded into B (so every diffusers version applies the same
// scale), or with --merge-lora the base of model.weights with W + (alpha/r) B A merged in, as a model
// folder.
#pragma once

#include <cstdint>
#include <string>

#include "model/weight_io.h"

namespace tt {

struct ExportOptions {
  /// A checkpoint folder (runs/x/checkpoints/step_0000500) or a run folder (its newest checkpoint).
  std::string source;
  /// The folder to write (created; files of an earlier export there are replaced).
  std::string output;
  /// "bf16" or "fp32": the dtype of the written tensors.
  std::string dtype = "bf16";
  /// LoRA checkpoints: merge the adapters into the base (model.weights of the run's config).
  bool merge_lora = false;
  /// Export the checkpoint's EMA (train.ema_decay) instead of the trained weights.
  bool ema = false;
  /// Shard size of model folders, in bytes (diffusers' default 10 GB).
  int64_t max_shard_bytes = kDefaultMaxShardBytes;
};

/// Writes the export and prints what it wrote. Throws kCheckpoint for a source that holds no
/// complete checkpoint, kConfig for --merge-lora on a full checkpoint or without model.weights.
void run_export(const ExportOptions& options);

}  // namespace tt
