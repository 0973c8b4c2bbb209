// End to end through the built executable: CLI surface, synthetic data, a smoke training run
// whose loss falls, exact resume, crash-safety of the run folder, data and NaN errors.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/checkpoint.h"
#include "core/errors.h"
#include "core/safetensors.h"
#include "test/test_util.h"

using Catch::Matchers::ContainsSubstring;
using Catch::Matchers::StartsWith;
using tt::test::run_teletron;
using tt::test::TempDir;

namespace {

// A tiny model on (16, 2, 8, 8) latents with 8 text tokens: fast on two CPU cores.
std::string small_config(const std::string& manifest, const std::string& extra = "") {
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

struct Workspace {
  TempDir dir{"tt_train"};
  std::string config;
  std::string manifest;

  explicit Workspace(int samples = 8, const std::string& extra = "") {
    manifest = dir / "data/manifest.jsonl";
    config = dir / "config.yaml";
    tt::test::write_file(config, small_config(manifest, extra));
    auto made = run_teletron("synth-data " + config + " --output " + (dir / "data") + " --samples " +
                             std::to_string(samples) + " --text-length 8");
    INFO(made.output);
    REQUIRE(made.exit_code == 0);
  }
};

std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

}  // namespace

TEST_CASE("CLI: --version, --help with defaults, usage errors use TT_ERR_CONFIG", "[cli]") {
  auto version = run_teletron("--version");
  CHECK(version.exit_code == 0);
  CHECK_THAT(version.output, StartsWith("teletron "));
  auto help = run_teletron("train --help");
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.output, ContainsSubstring("--max-steps"));
  CHECK_THAT(help.output, ContainsSubstring("--resume"));
  CHECK_THAT(help.output, ContainsSubstring("train.output_dir"));
  auto unknown = run_teletron("fly");
  CHECK(unknown.exit_code == tt::error_exit_code(tt::ErrorCode::kConfig));
  CHECK_THAT(unknown.output, StartsWith("TT_ERR_CONFIG"));
  auto bad_flag = run_teletron("train x.yaml --device tpu");
  CHECK(bad_flag.exit_code == tt::error_exit_code(tt::ErrorCode::kConfig));
  auto missing = run_teletron("config /nonexistent/config.yaml");
  CHECK(missing.exit_code == tt::error_exit_code(tt::ErrorCode::kConfig));
  CHECK_THAT(missing.output, StartsWith("TT_ERR_CONFIG"));
}

TEST_CASE("teletron config prints the resolved tree; a typo names key, line and suggestion", "[cli]") {
  TempDir dir("tt_cfg");
  tt::test::write_file(dir / "ok.yaml", "tele_tron:\n  optimizer:\n    lr: 2.0e-5\n");
  auto ok = run_teletron("config " + (dir / "ok.yaml") + " --set train.max_steps=7");
  INFO(ok.output);
  CHECK(ok.exit_code == 0);
  CHECK_THAT(ok.output, ContainsSubstring("tele_tron:"));
  CHECK_THAT(ok.output, ContainsSubstring("max_steps: 7"));
  CHECK_THAT(ok.output, ContainsSubstring("warmup_steps: 100"));
  tt::test::write_file(dir / "typo.yaml", "tele_tron:\n  optimizer:\n    lrr: 2.0e-5\n");
  auto typo = run_teletron("config " + (dir / "typo.yaml"));
  INFO(typo.output);
  CHECK(typo.exit_code == tt::error_exit_code(tt::ErrorCode::kConfig));
  CHECK_THAT(typo.output, StartsWith("TT_ERR_CONFIG"));
  CHECK_THAT(typo.output, ContainsSubstring("tele_tron.optimizer.lrr"));
  CHECK_THAT(typo.output, ContainsSubstring(":3:"));
  CHECK_THAT(typo.output, ContainsSubstring("lr"));
  auto seed = run_teletron(std::string("config ") + TELETRON_SOURCE_DIR + "/configs/seed_8xa100.yaml");
  INFO(seed.output);
  CHECK(seed.exit_code == 0);
  auto quick = run_teletron(std::string("config ") + TELETRON_SOURCE_DIR + "/configs/quickstart.yaml");
  INFO(quick.output);
  CHECK(quick.exit_code == 0);
}

TEST_CASE("smoke training: loss falls, run folder complete", "[train]") {
  Workspace ws(8);
  const std::string run = ws.dir / "run";
  auto trained = run_teletron("train " + ws.config + " --output " + run +
                              " --max-steps 600 --set train.checkpoint_every=300 --set train.log_every=20");
  INFO(trained.output);
  REQUIRE(trained.exit_code == 0);
  CHECK(std::filesystem::exists(run + "/config.resolved.yaml"));
  auto rows = read_metrics(run + "/metrics.jsonl");
  REQUIRE(rows.size() == 30);
  for (const char* key : {"step", "loss", "lr", "grad_norm", "samples_per_s", "step_ms", "data_wait_ms",
                          "peak_mem_gb"}) {
    CHECK(rows.front().contains(key));
  }
  const double first = rows.front()["loss"].get<double>();
  const double last = rows.back()["loss"].get<double>();
  INFO("first loss " << first << ", last loss " << last);
  CHECK(last < 0.5 * first);
  auto complete = tt::checkpoint::list_complete(run + "/checkpoints");
  REQUIRE(complete.size() == 2);
  auto weights = tt::safetensors::read_header(complete.back() + "/model.safetensors");
  CHECK(weights.tensors.count("transformer_blocks.0.attn.to_q.weight") == 1);
}

TEST_CASE("resume is exact: N steps == N/2 + resume + N/2, bit for bit", "[train][resume]") {
  Workspace ws(6);  // 6 samples, batch 2: the resume point (step 4) is mid-epoch
  const std::string straight = ws.dir / "straight";
  const std::string split = ws.dir / "split";
  auto a = run_teletron("train " + ws.config + " --output " + straight + " --max-steps 8");
  INFO(a.output);
  REQUIRE(a.exit_code == 0);
  auto b1 = run_teletron("train " + ws.config + " --output " + split + " --max-steps 4");
  INFO(b1.output);
  REQUIRE(b1.exit_code == 0);
  auto b2 = run_teletron("train " + ws.config + " --output " + split + " --max-steps 8 --resume auto");
  INFO(b2.output);
  REQUIRE(b2.exit_code == 0);
  CHECK_THAT(b2.output, ContainsSubstring("resumed from"));

  auto left = tt::checkpoint::load(straight + "/checkpoints/step_0000008");
  auto right = tt::checkpoint::load(split + "/checkpoints/step_0000008");
  REQUIRE(left.model.size() == right.model.size());
  for (const auto& [name, tensor] : left.model) {
    INFO(name);
    CHECK(torch::equal(tensor, right.model.at(name)));
  }
  for (const auto& [name, tensor] : left.state) {
    INFO(name);
    CHECK(torch::equal(tensor, right.state.at(name)));
  }
  // The resumed run's metrics read as one run: steps 1..8 once each.
  auto rows = read_metrics(split + "/metrics.jsonl");
  REQUIRE(rows.size() == 8);
  for (size_t i = 0; i < rows.size(); ++i) CHECK(rows[i]["step"].get<int64_t>() == static_cast<int64_t>(i + 1));
  auto straight_rows = read_metrics(straight + "/metrics.jsonl");
  CHECK(straight_rows.back()["loss"] == rows.back()["loss"]);
}

TEST_CASE("an earlier run's folder is never overwritten without --resume", "[train]") {
  Workspace ws(4);
  const std::string run = ws.dir / "run";
  REQUIRE(run_teletron("train " + ws.config + " --output " + run + " --max-steps 4").exit_code == 0);
  auto again = run_teletron("train " + ws.config + " --output " + run + " --max-steps 4");
  CHECK(again.exit_code == tt::error_exit_code(tt::ErrorCode::kCheckpoint));
  CHECK_THAT(again.output, ContainsSubstring("--resume auto"));
  auto bad_resume = run_teletron("train " + ws.config + " --output " + run + " --resume " + (ws.dir / "nothing"));
  CHECK(bad_resume.exit_code == tt::error_exit_code(tt::ErrorCode::kCheckpoint));
  // A damaged newest checkpoint (killed writer leaves only a temp folder) is skipped by --resume auto.
  std::filesystem::create_directories(run + "/checkpoints/.tmp_step_0000006_999");
  tt::test::write_file(run + "/checkpoints/.tmp_step_0000006_999/model.safetensors", "partial");
  auto resumed = run_teletron("train " + ws.config + " --output " + run + " --max-steps 6 --resume auto");
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, ContainsSubstring("step_0000004"));
}

TEST_CASE("bad manifest rows stop training with TT_ERR_DATA naming the row", "[train][data]") {
  Workspace ws(3);
  // Row 2 points at a missing file.
  tt::test::write_file(ws.manifest, "{\"latents\": \"sample_00000.safetensors\"}\n{\"latents\": \"gone.safetensors\"}\n");
  auto missing = run_teletron("train " + ws.config + " --output " + (ws.dir / "r1"));
  INFO(missing.output);
  CHECK(missing.exit_code == tt::error_exit_code(tt::ErrorCode::kData));
  CHECK_THAT(missing.output, StartsWith("TT_ERR_DATA"));
  CHECK_THAT(missing.output, ContainsSubstring(":2"));
  CHECK_THAT(missing.output, ContainsSubstring("gone.safetensors"));
  // A latent file whose text width does not match the model.
  auto tensors = tt::safetensors::load(ws.dir / "data/sample_00001.safetensors");
  tensors["text_states"] = torch::zeros({8, 5});
  tt::safetensors::save(ws.dir / "data/bad.safetensors", tensors);
  tt::test::write_file(ws.manifest, "{\"latents\": \"sample_00000.safetensors\"}\n{\"latents\": \"bad.safetensors\"}\n");
  auto shape = run_teletron("train " + ws.config + " --output " + (ws.dir / "r2"));
  INFO(shape.output);
  CHECK(shape.exit_code == tt::error_exit_code(tt::ErrorCode::kData));
  CHECK_THAT(shape.output, ContainsSubstring("text_states"));
}

TEST_CASE("non-finite data stops with TT_ERR_NAN and leaves no poisoned checkpoint", "[train][nan]") {
  Workspace ws(2);
  auto tensors = tt::safetensors::load(ws.dir / "data/sample_00000.safetensors");
  tensors["latents"][0][0][0][0] = std::numeric_limits<float>::quiet_NaN();
  tt::safetensors::save(ws.dir / "data/sample_00000.safetensors", tensors);
  const std::string run = ws.dir / "run";
  auto result = run_teletron("train " + ws.config + " --output " + run);
  INFO(result.output);
  CHECK(result.exit_code == tt::error_exit_code(tt::ErrorCode::kNan));
  CHECK_THAT(result.output, ContainsSubstring("TT_ERR_NAN"));
  CHECK(tt::checkpoint::list_complete(run + "/checkpoints").empty());
}

TEST_CASE("train starts from initial weights (model.weights) and checks them strictly", "[train][weights]") {
  Workspace ws(4);
  const std::string first = ws.dir / "first";
  REQUIRE(run_teletron("train " + ws.config + " --output " + first + " --max-steps 4").exit_code == 0);
  const std::string weights = first + "/checkpoints/step_0000004/model.safetensors";
  auto second = run_teletron("train " + ws.config + " --output " + (ws.dir / "second") +
                             " --max-steps 1 --set model.weights=" + weights);
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  CHECK_THAT(second.output, ContainsSubstring("initial weights"));
  // The same file for a wider model: every mis-shaped key is reported, as TT_ERR_CHECKPOINT.
  auto wrong = run_teletron("train " + ws.config + " --output " + (ws.dir / "third") + " --max-steps 1 --set model.weights=" +
                            weights + " --set model.attention_head_dim=24 --set model.rope_axes_dim=[4,10,10]");
  INFO(wrong.output);
  CHECK(wrong.exit_code == tt::error_exit_code(tt::ErrorCode::kCheckpoint));
  CHECK_THAT(wrong.output, ContainsSubstring("mis-shaped"));
}

TEST_CASE("image-to-video (latent_concat): 33-channel input from 16-channel latents trains", "[train][i2v]") {
  Workspace ws(4, "");
  auto run = run_teletron("train " + ws.config + " --output " + (ws.dir / "i2v") +
                          " --max-steps 3 --set model.image_condition_type=latent_concat");
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.output, ContainsSubstring("in 33 out 16"));
  CHECK_THAT(run.output, ContainsSubstring("image condition latent_concat"));
  auto header = tt::safetensors::read_header(ws.dir / "i2v/checkpoints/step_0000003/model.safetensors");
  CHECK(header.tensors.at("x_embedder.proj.weight").shape[1] == 33);
  // An inconsistent explicit in_channels is refused before step 0.
  auto bad = run_teletron("train " + ws.config + " --output " + (ws.dir / "bad") +
                          " --set model.image_condition_type=latent_concat --set model.in_channels=16");
  CHECK(bad.exit_code == tt::error_exit_code(tt::ErrorCode::kConfig));
  CHECK_THAT(bad.output, ContainsSubstring("in_channels"));
}
