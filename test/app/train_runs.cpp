// Helpers of the end-to-end training tests (see train_runs.h).
#include "test/app/train_runs.h"

#include <torch/torch.h>
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "app/bench_folder.h"
#include "core/checkpoint.h"

namespace tt::test {

std::string small_train_config(const std::string& manifest, const std::string& extra) {
  std::ostringstream text;
  text << "tele_tron:\n"
       << "  model:\n"
       << "    preset: tiny\n"
       << "    num_attention_heads: 2\n"
       << "    attention_head_dim: 16\n"
       << "    rope_axes_dim: [4, 6, 6]\n"
       << "    num_layers: 1\n"
       << "    num_single_layers: 1\n"
       << "  data:\n"
       << "    manifest: " << manifest << "\n"
       << "    buckets: [{frames: 5, height: 64, width: 64}]\n"
       << "  batch_size: 2\n"
       << "  optimizer: {lr: 2.0e-3, warmup_steps: 5, weight_decay: 0.0}\n"
       << "  flow_matching: {shift: 1.0}\n"
       << "  train: {device: cpu, max_steps: 8, log_every: 1, checkpoint_every: 4, seed: 3}\n"
       << extra;
  return text.str();
}

TrainWorkspace::TrainWorkspace(int samples, const std::string& extra, const std::string& name) : dir(name) {
  manifest = dir / "data/manifest.jsonl";
  config = dir / "config.yaml";
  write_file(config, small_train_config(manifest, extra));
  auto made = run_teletron("synth-data " + config + " --output " + (dir / "data") + " --samples " +
                           std::to_string(samples) + " --text-length 8");
  INFO(made.output);
  REQUIRE(made.exit_code == 0);
}

CommandResult TrainWorkspace::train(const std::string& run, const std::string& args) const {
  auto result = run_teletron("train " + config + " --output " + (dir / run) + " " + args);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  return result;
}

int count_of(const std::string& text, const std::string& needle) {
  int count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size()))
    ++count;
  return count;
}

std::vector<nlohmann::json> read_metrics(const std::string& path) { return read_jsonl(path); }

CommandResult run_with_env(const std::vector<std::pair<std::string, std::string>>& env, const std::string& args) {
  for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
  auto result = run_teletron(args);
  for (const auto& [name, value] : env) unsetenv(name.c_str());
  return result;
}

double weight_difference(const std::string& left_folder, const std::string& right_folder) {
  const auto left = tt::checkpoint::load(left_folder);
  const auto right = tt::checkpoint::load(right_folder);
  double worst = 0.0;
  for (const auto& [name, tensor] : left.model) {
    const torch::Tensor a = tensor.to(torch::kFloat64), b = right.model.at(name).to(torch::kFloat64);
    worst = std::max(worst, (a - b).abs().max().item<double>() / (a.abs().max().item<double>() + 1e-12));
  }
  return worst;
}

}  // namespace tt::test
