// Tests of the built `teletron` command line (app/cli.cpp): an unknown command is a usage error
// also with --help, `config --explain` prints the key reference, and each command that takes a
// config warns once, at start-up, about a key it was given and does not use (warn_unused_keys
// wired into every command; most of these runs then fail for want of data, after the warning).
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>

#include <string>

#include "app/config.h"
#include "test/test_util.h"

using Catch::Matchers::ContainsSubstring;
using tt::test::run_command;
using tt::test::run_teletron;
using tt::test::TempDir;

namespace {

const std::string kQuickstart = std::string(TELETRON_SOURCE_DIR) + "/configs/quickstart.yaml";

// How often `text` contains `fragment`.
int count(const std::string& text, const std::string& fragment) {
  int n = 0;
  for (size_t at = text.find(fragment); at != std::string::npos; at = text.find(fragment, at + 1)) ++n;
  return n;
}

// A 24-fps test pattern clip `name` in media_dir(), made by the ffmpeg CLI (replayed where there is
// none): `frames` frames of `size`, encoded with `codec` (the command text is the replay's key).
std::string test_pattern_clip(const std::string& name, const std::string& size, int frames,
                              const std::string& codec) {
  const auto made = tt::test::media_command("ffmpeg -v error -y -f lavfi -i testsrc2=size=" + size +
                                            ":rate=24 -frames:v " + std::to_string(frames) + " " + codec +
                                            " -pix_fmt yuv420p '{media}/" + name + "'");
  INFO(made.output);
  REQUIRE(made.exit_code == 0);
  return tt::test::media_dir() + "/" + name;
}

// The bench tests' clip: 30 frames of 96x80 H.264, a keyframe every 10.
std::string bench_clip() {
  return test_pattern_clip("bench_pipeline.mp4", "96x80", 30, "-c:v libx264 -g 10");
}

}  // namespace

TEST_CASE("an unknown command is a usage error, also with --help", "[cli]") {
  auto result = run_teletron("infer --help");
  INFO(result.output);
  CHECK(result.exit_code == 2);
  CHECK_THAT(result.output,
             ContainsSubstring("TT_ERR_CONFIG: unknown command `infer` (commands: train, config,"));
  CHECK_THAT(result.output, ContainsSubstring("bench-vae, bench-video)"));

  result = run_teletron("trian configs/quickstart.yaml");
  INFO(result.output);
  CHECK(result.exit_code == 2);
  CHECK_THAT(result.output, ContainsSubstring("unknown command `trian`; did you mean `train`?"));

  // Known commands keep their help; so does the top level.
  result = run_teletron("train --help");
  INFO(result.output);
  CHECK(result.exit_code == 0);
  CHECK_THAT(result.output, ContainsSubstring("--resume"));
  result = run_teletron("--help");
  CHECK(result.exit_code == 0);
  CHECK_THAT(result.output, ContainsSubstring("validate-data"));
}

TEST_CASE("config --explain prints every key; config FILE warns on stderr", "[cli]") {
  auto result = run_teletron("config --explain");
  INFO(result.output);
  CHECK(result.exit_code == 0);
  CHECK_THAT(result.output,
             ContainsSubstring("tele_tron.optimizer.lr\n    number, default 1.0e-05, allowed > 0\n"));
  CHECK_THAT(result.output, ContainsSubstring("What each command reads:"));

  result = run_teletron("config --explain " + kQuickstart);
  CHECK(result.exit_code == 2);
  result = run_teletron("config");
  CHECK(result.exit_code == 2);
  CHECK_THAT(result.output, ContainsSubstring("give a CONFIG file, or --explain"));

  // The seed example: warnings on stderr, the YAML alone on stdout.
  const std::string seed = std::string(TELETRON_SOURCE_DIR) + "/configs/seed_8xa100.yaml";
  const std::string binary = std::string("'") + TELETRON_BINARY + "' ";
  result = run_command("(" + binary + "config " + seed + " 2>&1 >/dev/null)");  // stderr only
  INFO(result.output);
  CHECK(result.exit_code == 0);
  CHECK(count(result.output, "warning: tele_tron.") == 6);
  CHECK_THAT(result.output,
             ContainsSubstring("warning: tele_tron.mixed_precision.loss_scale_window: set (" + seed + ":"));
  result = run_command("(" + binary + "config " + seed + " 2>/dev/null)");  // stdout only
  CHECK(result.exit_code == 0);
  CHECK_THAT(result.output, ContainsSubstring("tele_tron:\n  model:\n"));
  CHECK(count(result.output, "warning") == 0);
}

TEST_CASE("every command that takes a config warns once about an idle key at start-up", "[cli][keys]") {
  TempDir dir{"tt_cli"};
  const std::string binary = std::string("'") + TELETRON_BINARY + "' ";
  struct Case {
    std::string args;
    std::string warning;  // the one line naming the key
    std::string key;
  };
  const Case cases[] = {
      // train warns in its start-up banner, once the data is loaded: a one-step run on synthetic data.
      {"synth-data " + kQuickstart + " --output " + dir / "data" + " --samples 2 && " + binary + "train " +
           kQuickstart + " --output " + dir / "run" + " --max-steps 1 --device cpu --set vae.tiling=on " +
           "--set data.manifest=" + dir / "data/manifest.jsonl",
       "tele_tron.vae.tiling: set (--set vae.tiling=on), but data.source is latents: the VAE is not used",
       "tele_tron.vae.tiling"},
      {"bench --preset tiny --device cpu --frames 1 --height 16 --width 16 --text-tokens 4 --warmup 0 "
       "--steps 1 --no-optimizer --set batch_size=dynamic",
       "tele_tron.batch_size: set (--set batch_size=dynamic), but bench takes the batch size from --batch",
       "tele_tron.batch_size"},
      {"preprocess " + kQuickstart + " --output " + dir / "pre" +
           " --set data.source=video --set data_pipeline.prefetch=3 --set data.manifest=" +
           dir / "none.jsonl",
       "tele_tron.data_pipeline.prefetch: set (--set data_pipeline.prefetch=3), but preprocess has no "
       "training step to feed",
       "tele_tron.data_pipeline.prefetch"},
      {"validate-data " + dir / "none.jsonl" + " --set vae.tiling=on",
       "tele_tron.vae.tiling: set (--set vae.tiling=on), but validate-data does not encode",
       "tele_tron.vae.tiling"},
      {"synth-data " + kQuickstart + " --output " + dir / "synth" + " --samples 1 --set train.seed=3",
       "tele_tron.train.seed: set (--set train.seed=3), but synth-data's seed is --seed",
       "tele_tron.train.seed"},
      {"model-check --weights " + dir / "none.safetensors" + " --inputs " + dir / "in.safetensors" +
           " --output " + dir / "out.safetensors" + " --set model.weights=w.safetensors",
       "tele_tron.model.weights: set (--set model.weights=w.safetensors), but model-check loads the weights",
       "tele_tron.model.weights"},
      {"sample --weights " + dir / "none.safetensors" + " --text-embeddings " + dir / "e.safetensors" +
           " --output " + dir / "out.mp4" + " --set model.weights=w.safetensors",
       "tele_tron.model.weights: set (--set model.weights=w.safetensors), but sample loads the weights",
       "tele_tron.model.weights"},
  };
  for (const Case& c : cases) {
    auto result = run_teletron(c.args);
    INFO(c.args << "\n" << result.output);
    CHECK(count(result.output, c.warning) == 1);
    CHECK(count(result.output, c.key + ":") + count(result.output, c.key + " (") == 1);
  }
  // A key the command uses is not named: bench reads the architecture.
  auto result = run_teletron(
      "bench --preset tiny --device cpu --frames 1 --height 16 --width 16 --text-tokens 4 --warmup 0 "
      "--steps 1 --no-optimizer --set model.num_layers=1");
  INFO(result.output);
  CHECK(result.exit_code == 0);
  CHECK(count(result.output, "num_layers: set") == 0);
  CHECK(count(result.output, "warning") == 0);
}

TEST_CASE("bench says which blocks it recomputes; activation_checkpointing auto recomputes none on the CPU",
          "[cli][bench]") {
  const std::string common =
      "bench --preset tiny --device cpu --frames 1 --height 16 --width 16 --text-tokens 4 --warmup 0 "
      "--steps 1 --no-optimizer --set model.num_layers=1 --set model.num_single_layers=2 "
      "--set model.activation_checkpointing=";
  const std::string row = "| blocks recomputed in backward (model.activation_checkpointing) | ";
  for (const auto& [value, blocks] : std::vector<std::pair<std::string, std::string>>{
           {"auto", "0 of 1 double-stream, 0 of 2 single-stream"},
           {"true", "1 of 1 double-stream, 2 of 2 single-stream"},
           {"{every_n: 2}", "1 of 1 double-stream, 1 of 2 single-stream"}}) {
    auto result = run_teletron(common + "\"" + value + "\"");
    INFO(value << "\n" << result.output);
    CHECK(result.exit_code == 0);
    CHECK(count(result.output, row + blocks + " |") == 1);
  }
}

TEST_CASE("bench --suite train --ablation times the training loop's rows", "[cli][bench]") {
  tt::test::TempDir dir("tt_bench_train");
  const std::string json = dir / "rows.json";
  auto result = run_teletron(
      "bench --suite train --ablation --device cpu --preset tiny --set model.num_layers=1 "
      "--set model.num_single_layers=1 --frames 5 --height 32 --width 32 --text-tokens 8 --batch 2 "
      "--accumulation 2 --warmup 2 --steps 4 --profile-steps 2 --samples 8 --json " +
      json);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  for (const char* row :
       {"| naive baseline |", "| main today |", "| + CUDA Graphs |", "| + dynamic batch |",
        "| + fused kernels and host fixes |", "| full stack |", "| + CUDA Graphs, segments |",
        "| + CUDA Graphs of blocks |", "| + CUDA Graphs, padded |"})
    CHECK_THAT(result.output, ContainsSubstring(row));
  // Graphs need CUDA: on the CPU their rows run eagerly (cuda_graph.enabled auto), saying nothing of graphs.
  CHECK_THAT(result.output, ContainsSubstring("| + CUDA Graphs | as main today, the whole step captured"));
  CHECK_THAT(result.output, !ContainsSubstring("CUDA graph: captured"));
  CHECK_THAT(result.output,
             ContainsSubstring("4 timed steps after 2 warm-up steps, then 2 traced; global batch 4"));
  std::ifstream in(json);
  const nlohmann::json rows = nlohmann::json::parse(in);
  REQUIRE(rows.size() == 9);
  for (const auto& row : rows) {
    INFO(row.dump());
    if (!row["built"].get<bool>()) continue;
    CHECK(row["samples_per_s"].get<double>() > 0);
    CHECK(row["step_ms"].get<double>() > 0);
  }
  auto wrong = run_teletron("bench --ablation --device cpu --preset tiny");
  CHECK(wrong.exit_code == tt::error_exit_code(tt::ErrorCode::kConfig));
  CHECK_THAT(wrong.output, ContainsSubstring("--ablation needs --suite train"));
}

TEST_CASE("bench with model.lora times the LoRA step: only the adapters train, no MFU is claimed",
          "[cli][bench][lora]") {
  TempDir dir("tt_bench_lora");
  const std::string json = dir / "bench.json";
  auto result = run_teletron(
      "bench --device cpu --preset tiny --frames 5 --height 64 --width 64 --text-tokens 8 "
      "--warmup 1 --steps 2 --set model.lora.rank=4 --json " +
      json);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  CHECK_THAT(result.output, ContainsSubstring("LoRA: rank 4, 34 modules"));
  CHECK_THAT(result.output, ContainsSubstring("| MFU | not given with LoRA"));
  std::ifstream in(json);
  const nlohmann::json row = nlohmann::json::parse(in);
  CHECK(row["lora_rank"] == 4);
  CHECK(row["mfu_measured"].is_null());
  CHECK(row["trainable_parameters"].get<int64_t>() < row["parameters"].get<int64_t>() / 10);
  CHECK(row["full_step_ms"].get<double>() > 0);
}

TEST_CASE("bench --trace writes a trace of forward+backward passes; only the model suite takes it",
          "[cli][bench]") {
  TempDir dir("tt_bench_trace");
  const std::string trace = dir / "traces/model.json";
  auto result = run_teletron(
      "bench --device cpu --preset tiny --frames 5 --height 64 --width 64 --text-tokens 8 "
      "--warmup 1 --steps 1 --no-optimizer --trace " +
      trace + " --trace-steps 3");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  CHECK_THAT(result.output, ContainsSubstring("Traced 3 forward+backward passes into " + trace));
  std::ifstream in(trace);
  const nlohmann::json events = nlohmann::json::parse(in)["traceEvents"];
  int64_t backward_ops = 0;  // the traced passes ran backward: one MSE loss backward per pass
  for (const auto& e : events)
    if (e.value("name", std::string()) == "autograd::engine::evaluate_function: MseLossBackward0")
      ++backward_ops;
  CHECK(backward_ops == 3);
  auto wrong = run_teletron("bench --suite flow --device cpu --trace " + (dir / "flow.json"));
  CHECK(wrong.exit_code == tt::error_exit_code(tt::ErrorCode::kConfig));
  CHECK_THAT(wrong.output,
             ContainsSubstring("bench --trace times the Transformer's step: it needs --suite model"));
}

TEST_CASE("bench --recompute-all: checkpointed LoRA blocks run the GEMMs the default recompute skips",
          "[cli][bench][lora]") {
  // The tiny preset (2 double + 2 single blocks): per traced pass the default skips 2 * 2 + 2 GEMMs.
  TempDir dir("tt_bench_recompute");
  auto gemms = [&](const std::string& extra) {
    const std::string trace = dir / "trace.json";
    auto result = run_teletron(
        "bench --device cpu --preset tiny --frames 5 --height 64 --width 64 --text-tokens 8 "
        "--warmup 1 --steps 1 --no-optimizer --set model.lora.rank=4 "
        "--set model.activation_checkpointing=true --trace " +
        trace + extra);
    INFO(result.output);
    REQUIRE(result.exit_code == 0);
    std::ifstream in(trace);
    const nlohmann::json events = nlohmann::json::parse(in)["traceEvents"];
    int64_t count = 0;
    for (const auto& e : events) {
      const std::string name = e.value("name", std::string());
      if (name == "aten::mm" || name == "aten::addmm") ++count;
    }
    return count;
  };
  CHECK(gemms(" --recompute-all") - gemms("") == 2 * 6);  // two traced passes
}

TEST_CASE(
    "bench --suite train --ablation: the rows before the host fixes trim text exactly and attend with the "
    "mask, as main did, unless data.text_trim_multiple is named; the host-fix rows keep the config's values",
    "[cli][bench][padding]") {
  tt::test::TempDir dir("tt_bench_trim");
  // resolved(SET, ROW): the config that row ran with; SET: a multiple for data.text_trim_multiple,
  // with per-sample attention (on by default) turned off too.
  auto resolved = [&](const std::string& set, const std::string& row) {
    const std::string work = dir / ("work" + set);
    if (!std::filesystem::exists(work)) {
      auto result = run_teletron(
          "bench --suite train --ablation --rows 2,5 --device cpu --preset tiny --set model.num_layers=1 "
          "--set model.num_single_layers=1 --frames 5 --height 32 --width 32 --text-tokens 8 --warmup 1 "
          "--steps 1 --profile-steps 0 --samples 4 --work-dir " +
          work +
          (set.empty()
               ? ""
               : " --set data.text_trim_multiple=" + set + " --set model.per_sample_attention=false"));
      INFO(result.output);
      REQUIRE(result.exit_code == 0);
    }
    const std::string path = work + "/" + row + "/config.resolved.yaml";
    REQUIRE(std::filesystem::exists(path));
    return tt::load_config(path);
  };
  CHECK(resolved("", "row_2_run_1").data.text_trim_multiple == 1);
  CHECK(resolved("", "row_5_run_2").data.text_trim_multiple == tt::Config().data.text_trim_multiple);
  CHECK(tt::Config().data.text_trim_multiple > 1);
  CHECK(resolved("16", "row_2_run_1").data.text_trim_multiple == 16);
  CHECK(resolved("16", "row_5_run_2").data.text_trim_multiple == 16);
  // Per-sample attention came after main as the issue found it: never in its rows; the host-fix
  // rows take the config's value.
  CHECK(tt::Config().model.per_sample_attention);
  CHECK_FALSE(resolved("", "row_2_run_1").model.per_sample_attention);
  CHECK(resolved("", "row_5_run_2").model.per_sample_attention);
  CHECK_FALSE(resolved("16", "row_2_run_1").model.per_sample_attention);
  CHECK_FALSE(resolved("16", "row_5_run_2").model.per_sample_attention);
}

TEST_CASE("bench --suite train --rows runs the rows named, in that order, and writes no checkpoint",
          "[cli][bench]") {
  tt::test::TempDir dir("tt_bench_rows");
  const std::string work = dir / "work";
  auto result = run_teletron(
      "bench --suite train --ablation --rows 2,1,2 --device cpu --preset tiny --set model.num_layers=1 "
      "--set model.num_single_layers=1 --frames 5 --height 32 --width 32 --text-tokens 8 --warmup 1 "
      "--steps 2 --profile-steps 0 --samples 4 --work-dir " +
      work);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  // Run order: main today, naive baseline, main today again; then the rows left out.
  const size_t first = result.output.find("| main today |");
  const size_t naive = result.output.find("| naive baseline |");
  REQUIRE(first != std::string::npos);
  REQUIRE(naive != std::string::npos);
  CHECK(first < naive);
  CHECK(result.output.find("| main today |", naive) != std::string::npos);
  CHECK_THAT(result.output, ContainsSubstring("| + fused kernels and host fixes | as + dynamic batch"));
  CHECK_THAT(result.output, ContainsSubstring("(not run in this call) | — |"));
  int runs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(work)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("row_", 0) != 0) continue;
    runs += 1;
    INFO(name);
    CHECK(std::filesystem::exists(entry.path() / "metrics.jsonl"));
    // No checkpoint: a 1b row's would be 13 GB (a device run filled its disk with them).
    const auto checkpoints = entry.path() / "checkpoints";
    CHECK((!std::filesystem::exists(checkpoints) || std::filesystem::is_empty(checkpoints)));
  }
  CHECK(runs == 3);
  // Two clip shapes: two buckets of samples; dynamic rows size each.
  auto mixed = run_teletron(
      "bench --suite train --ablation --rows 2,4 --device cpu --preset tiny --set model.num_layers=1 "
      "--set model.num_single_layers=1 --buckets 5x32x32,9x32x64 --text-tokens 8 --batch 2 --warmup 1 "
      "--steps 2 --profile-steps 0 --samples 4");
  INFO(mixed.output);
  REQUIRE(mixed.exit_code == 0);
  CHECK_THAT(mixed.output, ContainsSubstring("(cached latents, 2 latent shapes: one bucket each)"));
  CHECK_THAT(mixed.output, ContainsSubstring("latents (16, 2, 4, 4) x 2, (16, 3, 4, 8) x 2"));
  for (const char* bad : {"33x256", "34x256x256", "33x250x256", "33x256x256x1"}) {
    auto refused =
        run_teletron(std::string("bench --suite train --buckets ") + bad + " --device cpu --preset tiny");
    INFO(refused.output);
    CHECK(refused.exit_code == tt::error_exit_code(tt::ErrorCode::kConfig));
    CHECK_THAT(refused.output, ContainsSubstring("is not a clip shape"));
  }
  auto wrong = run_teletron("bench --suite train --ablation --rows 10 --device cpu --preset tiny");
  CHECK(wrong.exit_code == tt::error_exit_code(tt::ErrorCode::kConfig));
  CHECK_THAT(wrong.output, ContainsSubstring("--rows: no row 10"));
}

TEST_CASE("bench --suite train: a row whose training stops is marked STOPPED and the next rows still run",
          "[cli][bench]") {
  tt::test::TempDir dir("tt_bench_stop");
  const std::string json = dir / "rows.json";
  // A non-finite gradient at step 2: the naive fp32 row (no loss scaling) stops with TT_ERR_NAN;
  // main today in fp16 skips that update and is timed.
  setenv("TELETRON_FAULTS", "nonfinite_grad@2", 1);
  auto result = run_teletron(
      "bench --suite train --ablation --rows 1,2 --device cpu --preset tiny --set model.num_layers=1 "
      "--set model.num_single_layers=1 --set mixed_precision.dtype=fp16 "
      "--frames 5 --height 32 --width 32 --text-tokens 8 --warmup 1 --steps 2 --profile-steps 0 --samples 4 "
      "--json " + json);
  unsetenv("TELETRON_FAULTS");
  INFO(result.output);
  CHECK(result.exit_code == tt::error_exit_code(tt::ErrorCode::kNan));
  CHECK_THAT(result.output,
             ContainsSubstring("| naive baseline | fp32, TF32 off, eager, fixed batch, latents read "
                               "inside the step | STOPPED: TT_ERR_NAN"));
  std::ifstream in(json);
  REQUIRE(in.good());
  const nlohmann::json rows = nlohmann::json::parse(in);
  REQUIRE(rows.size() >= 2);
  CHECK(rows[0]["row"] == "naive baseline");
  CHECK_THAT(rows[0]["error"].get<std::string>(), ContainsSubstring("TT_ERR_NAN"));
  CHECK(rows[1]["row"] == "main today");
  CHECK(rows[1]["error"].is_null());
  CHECK(rows[1]["samples_per_s"].get<double>() > 0);
}

TEST_CASE(
    "bench --suite flow times TV-L1's CPU reference per worker count with its end-point errors; the GPU rows "
    "need a GPU",
    "[cli][bench][flow][video]") {
  tt::test::TempDir dir("tt_bench_flow");
  const std::string json = dir / "flow.json";
  auto result = run_teletron(
      "bench --suite flow --device cpu --height 64 --width 80 --cpu-workers 1,2 --json " + json + " 2>&1");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  CHECK_THAT(result.output, ContainsSubstring("| TV-L1, CPU reference, 2 worker(s) x 1 thread | cpu x2 |"));
  std::ifstream in(json);
  REQUIRE(in.good());
  const nlohmann::json j = nlohmann::json::parse(in);
  CHECK(j["height"] == 64);
  REQUIRE(j["rows"].size() == 3);  // two CPU rows and the CPU flow stage per sample
  for (int r = 0; r < 2; ++r) {
    INFO(j["rows"][r].dump());
    CHECK(j["rows"][r]["skipped"] == "");
    CHECK(j["rows"][r]["ms_per_pair"].get<double>() > 0);
    // A 5.3 px translation and a 3-degree rotation of a smooth texture: TV-L1 within a few hundredths.
    REQUIRE(j["rows"][r]["epe"].size() == 2);
    CHECK(j["rows"][r]["epe"][0][1].get<double>() < 0.1);
    CHECK(j["rows"][r]["epe"][1][1].get<double>() < 0.1);
  }
  CHECK(j["rows"][2]["ms_per_sample"].get<double>() > 0);

  // --flow-frames: a real frame (here a test pattern's) moved by known maps adds four cases.
  const std::string flow_clip = test_pattern_clip("bench_flow_frames.mp4", "160x120", 12, "-c:v libx264");
  const std::string frames_json = dir / "frames.json";
  auto framed =
      run_teletron("bench --suite flow --device cpu --height 96 --width 128 --cpu-workers 1 --flow-frames " +
                   flow_clip + " --json " + frames_json + " 2>&1");
  INFO(framed.output);
  REQUIRE(framed.exit_code == 0);
  CHECK_THAT(framed.output, ContainsSubstring("frame two layers (2, 1) / (-6, 3) px"));
  std::ifstream frames_in(frames_json);
  const nlohmann::json f = nlohmann::json::parse(frames_in);
  const nlohmann::json& epe = f["rows"][0]["epe"];
  REQUIRE(epe.size() == 6);
  CHECK(epe[2][0] == "frame translation (3.7, -2.1) px");
  for (size_t k = 2; k < 6; ++k) {
    INFO(epe[k].dump());
    const double value = epe[k][1].get<double>();
    CHECK(std::isfinite(value));
    CHECK(value < 1.0);  // TV-L1 on a textured frame: tenths of a pixel at most
  }
  CHECK(epe[2][1].get<double>() < 0.3);
}

TEST_CASE(
    "bench --suite pipeline times each stage's CPU row (the GPU rows say why they cannot run), writes the "
    "JSON and the chart, and --compare flags a row slower than before",
    "[cli][bench][video]") {
  const std::string clip = bench_clip();
  tt::test::TempDir dir("tt_bench_pipeline");
  const std::string json = dir / "now.json", svg = dir / "now.svg";
  const std::string args =
      "bench --suite pipeline --device cpu --clips " + clip +
      " --frames 5 --height 64 --width 64 --cores 1 --workers 1 --passes 1 --vae-preset tiny";
  // The training rows with the tiny model and two timed steps, the flow stage TV-L1 on one pair per
  // sample, then once more without it; the --compare runs below leave them out.
  auto result =
      run_teletron(args +
                   " --preset tiny --warmup 1 --steps 2 --set data_pipeline.optical_flow.algorithm=tvl1 "
                   "--set data_pipeline.optical_flow.pairs=1 --json " +
                   json + " --plot " + svg + " 2>&1");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  std::ifstream in(json);
  REQUIRE(in.good());
  nlohmann::json j = nlohmann::json::parse(in);
  std::map<std::string, int> ran, skipped;
  for (const nlohmann::json& row : j["rows"]) {
    INFO(row.dump());
    if (row["skipped"] == "") {
      CHECK(row["where"] == "cpu");
      CHECK(row["value"].get<double>() > 0);
      ++ran[row["stage"].get<std::string>()];
    } else {
      CHECK(row["where"] == "cuda");
      ++skipped[row["stage"].get<std::string>()];
    }
  }
  // One CPU row per stage (the pipeline's and training's: one per worker count; training also with
  // the flow stage off), every GPU row skipped here (training on a CPU device has the CPU path only).
  for (const char* stage : {"decode", "sampling", "colour+augment", "flow", "vae", "pipeline"}) {
    INFO(stage);
    CHECK(ran[stage] == 1);
  }
  CHECK(ran["training"] == 2);
  CHECK_THAT(result.output, ContainsSubstring("flow stage in training (CPU path, 1 core(s)): "));
  CHECK(skipped["decode"] == 1);
  CHECK(skipped["flow"] == 2);  // NVOFA and TV-L1 CUDA
  CHECK(skipped["training"] == 0);
  for (const nlohmann::json& row : j["rows"])
    if (row["stage"] == "training") {
      INFO(row.dump());
      CHECK((row["name"] == "CPU path, 1 core(s)" || row["name"] == "CPU path, 1 core(s), flow stage off"));
      CHECK(row["unit"] == "samples/s");
      CHECK(row["data_wait_share"].get<double>() >= 0);
      CHECK(row["data_wait_share"].get<double>() <= 1);
    } else {
      CHECK(row["data_wait_share"].get<double>() == -1);
    }
  const std::string chart = tt::test::read_file(svg);
  CHECK(chart.rfind("<svg", 0) == 0);
  CHECK(count(chart, "<rect") == 8);  // one bar per row that ran

  // --compare: against the run's own rows, with a threshold no timing noise reaches (flagged only
  // below 1 % of before), no regression; a row that was 10x faster before is one.
  auto same = run_teletron(args + " --no-training --compare " + json + " --compare-threshold 0.99 2>&1");
  INFO(same.output);
  CHECK(same.exit_code == 0);
  CHECK_THAT(same.output, ContainsSubstring("0 regression(s)"));
  CHECK_THAT(same.output, ContainsSubstring("| decode | FFmpeg on the CPU, 1 thread(s) |"));
  for (nlohmann::json& row : j["rows"])
    if (row["stage"] == "decode") row["value"] = row["value"].get<double>() * 10;
  const std::string faster = dir / "faster_before.json";
  tt::test::write_file(faster, j.dump());
  auto slower = run_teletron(args + " --no-training --compare " + faster + " 2>&1");
  INFO(slower.output);
  CHECK(slower.exit_code == 1);
  CHECK_THAT(slower.output, ContainsSubstring("REGRESSION"));
  // Something that is not such a file is a clear error.
  tt::test::write_file(dir / "other.json", "{\"rows\": 3}");
  auto other = run_teletron(args + " --no-training --compare " + (dir / "other.json") + " 2>&1");
  CHECK(other.exit_code != 0);
  CHECK_THAT(other.output, ContainsSubstring("is not a bench --suite pipeline JSON file"));
}

TEST_CASE("bench-video keeps every worker busy: fewer clips than workers are cycled, each worker takes --passes",
          "[cli][bench][video]") {
  const std::string clip = bench_clip();
  // One clip, three workers, two passes: six clips timed (one clip twice would leave two workers idle
  // while the row says three); two clips and one worker: four.
  tt::test::TempDir dir("tt_bench_video");
  const std::string json = dir / "rows.json";
  auto cycled = run_teletron("bench-video --mode decode-only --device cpu --workers 3 --passes 2 --json " + json + " " +
                             clip + " 2>&1");
  INFO(cycled.output);
  REQUIRE(cycled.exit_code == 0);
  CHECK_THAT(cycled.output, ContainsSubstring("3 workers, "));
  CHECK_THAT(cycled.output, ContainsSubstring(": 6 clips in "));
  CHECK_THAT(cycled.output, ContainsSubstring("(180 decoded, 180 needed,"));
  // Where a clip's time goes in its worker: opening it, the mode's work, closing it.
  CHECK_THAT(cycled.output, ContainsSubstring(" ms opening it (demuxer, decoder, frame index), "));
  CHECK_THAT(cycled.output, ContainsSubstring(" ms decoding every frame, "));
  CHECK_THAT(cycled.output, ContainsSubstring(" ms closing it"));
  const nlohmann::json row = nlohmann::json::parse(tt::test::read_file(json));
  CHECK(row["clips"] == 6);
  CHECK(row["open_ms_per_clip"].get<double>() > 0);
  CHECK(row["work_ms_per_clip"].get<double>() > 0);
  CHECK(row["close_ms_per_clip"].get<double>() >= 0);
  // Each worker's clips one after another: their time in the workers fits in workers x the row's wall time.
  CHECK((row["open_ms_per_clip"].get<double>() + row["work_ms_per_clip"].get<double>() +
         row["close_ms_per_clip"].get<double>()) * 6 <=
        3 * row["seconds"].get<double>() * 1000 * 1.01);
  auto listed = run_teletron("bench-video --mode decode-only --device cpu --workers 1 --passes 2 " + clip + " " +
                             clip + " 2>&1");
  INFO(listed.output);
  REQUIRE(listed.exit_code == 0);
  CHECK_THAT(listed.output, ContainsSubstring(": 4 clips in "));
}

TEST_CASE(
    "bench on the GPU splits its fwd+bwd peak into parameters, gradients, autocast copies, inputs and "
    "activations",
    "[cli][bench][gpu]") {
  TT_REQUIRE_GPU();
  tt::test::TempDir dir("tt_bench_memory");
  const std::string json = dir / "bench.json";
  // 1,024 video tokens: the tiny model's activations (tens of MB) well above its 9 MB of gradients,
  // which the activations' lower bound counts as held at the peak.
  auto result = run_teletron(
      "bench --preset tiny --device cuda --frames 13 --height 256 --width 256 --text-tokens 16 "
      "--warmup 1 --steps 2 --no-optimizer --json " +
      json + " --trace " + (dir / "trace.json"));
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  CHECK_THAT(result.output,
             ContainsSubstring("| of it: activations (peak - held after the step - autocast copies) |"));
  CHECK_THAT(result.output, ContainsSubstring("Where the GPU time goes (2 traced forward+backward passes"));
  std::ifstream in(json);
  const nlohmann::json row = nlohmann::json::parse(in);
  INFO(row.dump());
  const int64_t params = row["parameters"].get<int64_t>();
  CHECK(row["parameter_bytes"].get<int64_t>() == 4 * params);  // fp32 master weights
  CHECK(row["gradient_bytes"].get<int64_t>() == 4 * params);
  // bf16 copies of the Linear and Conv weights: nearly every parameter, 2 bytes each.
  const int64_t copies = row["autocast_copy_bytes"].get<int64_t>();
  CHECK(copies > params * 2 * 9 / 10);
  CHECK(copies <= params * 2);
  CHECK(row["activation_bytes"].get<int64_t>() > row["gradient_bytes"].get<int64_t>());
  // What else the step leaves (GEMM workspaces): some, and far below the peak.
  const int64_t other = row["other_held_bytes"].get<int64_t>();
  CHECK(other >= 0);
  CHECK(other < (int64_t{256} << 20));
  // The parts add up to the peak.
  const double parts = static_cast<double>(
      row["parameter_bytes"].get<int64_t>() + row["gradient_bytes"].get<int64_t>() + copies +
      row["input_bytes"].get<int64_t>() + other + row["activation_bytes"].get<int64_t>());
  CHECK(std::abs(parts / (1024.0 * 1024.0 * 1024.0) - row["peak_gb_fwd_bwd"].get<double>()) < 1e-3);
  // --trace: the traced passes' kernel time by kind, within the traced wall time per pass.
  const nlohmann::json& split = row["time_split"];
  CHECK(split["passes"] == 2);
  CHECK(split["kernel_ms_by_kind"]["attention"].get<double>() > 0);
  CHECK(split["kernel_ms_by_kind"]["GEMM"].get<double>() > 0);
  double kernel_ms = 0;
  for (const auto& [kind, ms] : split["kernel_ms_by_kind"].items()) kernel_ms += ms.get<double>();
  CHECK(kernel_ms <= split["wall_ms_per_pass"].get<double>() * 1.01);
  CHECK(split["top_kernels"].size() == 15);
}
