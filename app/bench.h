// `teletron bench`: times the HunyuanVideo Transformer training step on synthetic inputs of a given
// shape and reports step time, tokens/s, exact-count MFU against the bf16 matmul rate measured in
// the same run and against the 989 TFLOP/s H100/H200 datasheet figure, and peak memory.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>

#include "app/config.h"

namespace tt {

struct BenchOptions {
  /// Model architecture and precision come from here (model.*, mixed_precision.*, train.device).
  Config config;
  int64_t batch = 1;
  /// Pixel-space clip shape; latents are (16, (frames-1)/4+1, height/8, width/8).
  int64_t frames = 33, height = 480, width = 832;
  /// Text tokens per sample and how many of them are valid (the rest is right padding; 0 = all).
  int64_t text_tokens = 256;
  int64_t text_valid = 0;
  int64_t warmup = 3;
  int64_t steps = 10;
  /// Also run the AdamW update (a full training step) and time it separately.
  bool optimizer = true;
  /// Write the results as one JSON object here too.
  std::string json_path;
  /// Estimate the full step's peak (app/memory_estimate.h) and compare it with the measured one.
  bool estimate_memory = false;
  /// Replace `frames` with the longest 4n+1 clip the estimate says fits, then measure at it.
  bool max_frames = false;
  /// With max_frames: estimates around the predicted crossing (0: the prediction alone).
  int64_t max_frames_checks = 8;
  /// Also trace `trace_steps` forward+backward passes after the timed ones into this Chrome trace
  /// and print where the GPU's time goes (kernel time by kind, the attention's and GEMMs' achieved
  /// rates against the exact FLOP count, the longest kernels).
  std::string trace_path;
  int64_t trace_steps = 2;
  /// Checkpointed blocks recompute every GEMM, also those whose results nobody reads (off: the
  /// model's default skip; on, to measure what the skip buys side by side).
  bool recompute_all = false;
};

void run_bench(const BenchOptions& options);

/// Dense matmul rate (FLOP/s) on `device` in `half` (CUDA: bf16 or fp16) or fp32 (CPU), measured now
/// (an 8192^3 GEMM on CUDA): what the benches' MFU divides by.
double measure_matmul_rate(const torch::Device& device, torch::Dtype half);

}  // namespace tt
