// Helpers of the end-to-end training tests (test_train.cpp, test_train_precision.cpp): a tiny
// model's workspace with synthetic cached latents, runs of the built executable with environment
// variables, and readings of their metrics and checkpoints.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "test/test_util.h"

namespace tt::test {

/// A tiny model on (16, 2, 8, 8) latents with 8 text tokens (fast on two CPU cores), reading
/// `manifest`; `extra` is appended under `tele_tron:`.
std::string small_train_config(const std::string& manifest, const std::string& extra = "");

/// A temporary folder with small_train_config as config.yaml and `samples` synthetic samples.
struct TrainWorkspace {
  TempDir dir;
  std::string config;
  std::string manifest;

  explicit TrainWorkspace(int samples = 8, const std::string& extra = "", const std::string& name = "tt_train");
  /// `teletron train` on the config into dir/<run> with `args`; REQUIREs success.
  CommandResult train(const std::string& run, const std::string& args) const;
};

/// How often `needle` occurs in `text` (occurrences that do not overlap).
int count_of(const std::string& text, const std::string& needle);

/// Every row of a metrics.jsonl.
std::vector<nlohmann::json> read_metrics(const std::string& path);

/// One run of the executable with these environment variables set (unset afterwards).
CommandResult run_with_env(const std::vector<std::pair<std::string, std::string>>& env, const std::string& args);

/// Largest |a - b| / max|a| over the model tensors of two checkpoints, in fp64 (bf16 or fp32 weights).
double weight_difference(const std::string& left_folder, const std::string& right_folder);

}  // namespace tt::test
