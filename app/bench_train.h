// `teletron bench --suite train`: the real training loop (app/trainer) on a synthetic cached-latent
// dataset of one shape, timed over `steps` steps after `warmup`, then traced over `profile_steps`
// more (GPU busy share = union of kernel intervals, core/profiler). With --ablation it runs the
// rows of the engine's ablation one after another, each a configuration of the same run, and says
// which rows are not built yet instead of timing something else under their name.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "app/config.h"

namespace tt {

struct BenchTrainOptions {
  /// Model, precision, optimizer and device come from here; data.*, batch and train.* are set per row.
  Config config;
  /// Micro-batch and accumulation of the fixed-batch rows; their product is every row's global batch.
  int64_t batch = 1;
  int64_t accumulation = 1;
  /// Pixel-space clip shape; latents are (16, (frames-1)/4+1, height/8, width/8).
  int64_t frames = 33, height = 480, width = 832;
  /// Several clip shapes (frames, height, width) instead: the samples are split evenly among them
  /// (at least a global batch each), one bucket per shape.
  std::vector<std::array<int64_t, 3>> buckets;
  int64_t text_tokens = 256;
  /// Synthetic samples written (cycled through by the steps).
  int64_t samples = 16;
  int64_t warmup = 10;
  int64_t steps = 30;
  int64_t profile_steps = 10;
  bool ablation = false;
  /// With ablation: the rows to run, by number (1 = naive baseline); empty = all. Rows left out are
  /// listed as not run (to split the ablation over several calls, or reorder it).
  std::vector<int64_t> rows;
  /// Where the data and the rows' run folders go; "" = a temporary folder, removed afterwards.
  std::string work_dir;
  /// Also write the rows as JSON here.
  std::string json_path;
};

struct BenchTrainRow {
  std::string name;      // "naive baseline", "main today", ...
  std::string setup;     // what the row runs, in words
  bool built = true;     // false: a feature not built yet; nothing was timed
  bool run = true;       // false: left out by BenchTrainOptions::rows
  double samples_per_s = 0, step_ms = 0, peak_gb = 0;
  double busy_share = 0;  // of the traced steps
  int64_t kernels = 0;
  std::map<std::string, double> kernel_kind_s;  // the traced steps' kernel time by kind (core/profiler.h)
  std::string kernel_kinds;                     // ... as text, "attention 52 %, GEMM 30 %, ..."
  /// Set when the row's training stopped (a TT_ERR_* error, out of memory, a LibTorch error): the
  /// formatted error; nothing of the row is timed, and the rows after it still run.
  std::string error;
  int error_exit_code = 0;  // the error's exit status (core/errors.h)
};

/// Runs the rows, prints their table and returns them. A row whose training stops is marked
/// STOPPED in the table and the JSON (its `error`) and the next rows run.
std::vector<BenchTrainRow> run_bench_train(const BenchTrainOptions& options);

}  // namespace tt
