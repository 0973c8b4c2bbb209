// LoRA training end to end through the executable (model.lora.*): the loss falls with the base
// frozen, the checkpoint holds the adapters alone in diffusers' PEFT layout with their scale in the
// metadata, the optimizer holds state for the adapters only, resume is exact, and a LoRA file
// continues as model.lora.weights (a mismatched rank is TT_ERR_CHECKPOINT).
#include <torch/torch.h>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>

#include "core/checkpoint.h"
#include "core/errors.h"
#include "core/safetensors.h"
#include "test/app/train_runs.h"
#include "test/test_util.h"

using Catch::Matchers::ContainsSubstring;
using tt::test::run_teletron;

namespace {

using Workspace = tt::test::TrainWorkspace;
using tt::test::read_metrics;

// A base model to adapt: 100 full-training steps of the workspace's tiny model. A fresh model's
// zero-initialised final layer and modulations would give the adapters no gradient.
std::string base_weights(const Workspace& ws) {
  ws.train("base", "--max-steps 100");
  return ws.dir / "base/checkpoints/step_0000100/model.safetensors";
}

}  // namespace

TEST_CASE(
    "LoRA training: the loss falls, the checkpoint holds only the adapters in diffusers' layout, the "
    "optimizer "
    "only theirs",
    "[train][lora]") {
  Workspace ws(8);
  const std::string base = base_weights(ws);
  const std::string run = ws.dir / "lora";
  const std::string args = " --max-steps 1000 --set model.weights=" + base +
                           " --set model.lora.rank=8 --set model.lora.alpha=16 --set train.log_every=20 "
                           "--set train.checkpoint_every=1000";
  auto trained =
      run_teletron("train " + ws.config + " --output " + run + args + " --set optimizer.lr=1.0e-2");
  INFO(trained.output);
  REQUIRE(trained.exit_code == 0);
  CHECK_THAT(trained.output, ContainsSubstring("LoRA: rank 8, alpha 16 (scale 2)"));
  // The control: the same samples and noise step for step (both keyed by seed and step), a learning
  // rate that moves nothing. The base was trained already, so the loss starts near its floor: the
  // adapters' gain is measured against what the same steps give without them learning.
  auto control = run_teletron("train " + ws.config + " --output " + (ws.dir / "control") + args +
                              " --set optimizer.lr=1.0e-12");
  INFO(control.output);
  REQUIRE(control.exit_code == 0);
  auto last_rows = [](const std::string& folder) {
    const auto rows = read_metrics(folder + "/metrics.jsonl");
    REQUIRE(rows.size() == 50);
    double mean = 0.0;
    for (size_t i = rows.size() - 10; i < rows.size(); ++i) mean += rows[i]["loss"].get<double>() / 10.0;
    return mean;
  };
  const double trained_loss = last_rows(run), control_loss = last_rows(ws.dir / "control");
  INFO("mean loss of the last 10 rows: LoRA " << trained_loss << ", control " << control_loss);
  CHECK(trained_loss < 0.95 * control_loss);

  const std::string folder = run + "/checkpoints/step_0001000";
  CHECK(std::filesystem::exists(folder + "/lora.safetensors"));
  CHECK_FALSE(std::filesystem::exists(folder + "/model.safetensors"));
  const tt::safetensors::Header header = tt::safetensors::read_header(folder + "/lora.safetensors");
  CHECK(header.tensors.count("transformer.transformer_blocks.0.attn.to_q.lora_A.weight") == 1);
  CHECK(header.tensors.count("transformer.single_transformer_blocks.0.proj_mlp.lora_B.weight") == 1);
  for (const auto& [name, info] : header.tensors) {
    INFO(name);
    CHECK(name.find(".lora_") != std::string::npos);
  }
  const nlohmann::json adapter = nlohmann::json::parse(header.metadata.at("lora_adapter_metadata"));
  CHECK(adapter["transformer.r"] == 8);
  CHECK(adapter["transformer.lora_alpha"] == 16.0);
  CHECK(adapter["transformer.target_modules"].size() == header.tensors.size() / 2);
  // The trained B's moved off zero; the optimizer holds the adapters' moments and nothing else.
  const auto weights = tt::safetensors::load(folder + "/lora.safetensors");
  CHECK(weights.at("transformer.transformer_blocks.0.attn.to_q.lora_B.weight").abs().max().item<double>() >
        0.0);
  const auto state = tt::safetensors::load(folder + "/state.safetensors");
  int64_t moments = 0;
  for (const auto& [name, tensor] : state) {
    if (name.rfind("optim.", 0) != 0) continue;
    INFO(name);
    CHECK(name.find(".lora_") != std::string::npos);
    ++moments;
  }
  CHECK(moments == 3 * static_cast<int64_t>(header.tensors.size()));  // exp_avg, exp_avg_sq, step
}

TEST_CASE(
    "LoRA resume is exact: N steps == N/2 + resume + N/2, bit for bit; the base comes from model.weights "
    "again",
    "[train][lora][resume]") {
  Workspace ws(6);
  const std::string base = base_weights(ws);
  const std::string lora =
      " --set model.weights=" + base + " --set model.lora.rank=2 --set model.lora.dropout=0.1";
  const std::string straight = ws.dir / "straight", split = ws.dir / "split";
  ws.train("straight", "--max-steps 8" + lora);
  ws.train("split", "--max-steps 4" + lora);
  auto resumed =
      run_teletron("train " + ws.config + " --output " + split + " --max-steps 8 --resume auto" + lora);
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, ContainsSubstring("resumed from"));
  CHECK_THAT(resumed.output, ContainsSubstring("initial weights"));
  const auto left = tt::checkpoint::load(straight + "/checkpoints/step_0000008");
  const auto right = tt::checkpoint::load(split + "/checkpoints/step_0000008");
  CHECK(right.model_file == "lora.safetensors");
  REQUIRE(left.model.size() == right.model.size());
  for (const auto& [name, tensor] : left.model) {
    INFO(name);
    CHECK(torch::equal(tensor, right.model.at(name)));
  }
  for (const auto& [name, tensor] : left.state) {
    INFO(name);
    CHECK(torch::equal(tensor, right.state.at(name)));
  }
  // A resume that drops model.lora is refused by the config check, naming the key.
  auto without = run_teletron("train " + ws.config + " --output " + split + " --max-steps 10 --resume auto");
  CHECK(without.exit_code == tt::error_exit_code(tt::ErrorCode::kConfig));
  CHECK_THAT(without.output, ContainsSubstring("model.lora"));
}

TEST_CASE("a LoRA file continues as model.lora.weights; a rank that does not fit is TT_ERR_CHECKPOINT",
          "[train][lora]") {
  Workspace ws(4);
  const std::string base = base_weights(ws);
  const std::string lora = " --set model.weights=" + base + " --set model.lora.rank=2";
  ws.train("first", "--max-steps 3" + lora);
  const std::string file = ws.dir / "first/checkpoints/step_0000003/lora.safetensors";
  auto second = run_teletron("train " + ws.config + " --output " + (ws.dir / "second") + " --max-steps 1" +
                             lora + " --set model.lora.weights=" + file);
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  CHECK_THAT(second.output, ContainsSubstring("adapters from " + file + " (diffusers layout)"));
  auto wrong = run_teletron("train " + ws.config + " --output " + (ws.dir / "third") +
                            " --max-steps 1 --set model.weights=" + base +
                            " --set model.lora.rank=3 --set model.lora.weights=" + file);
  INFO(wrong.output);
  CHECK(wrong.exit_code == tt::error_exit_code(tt::ErrorCode::kCheckpoint));
  CHECK_THAT(wrong.output, ContainsSubstring("model.lora.rank"));
  // bf16 master weights do not apply to fp32 adapters.
  auto bf16 =
      run_teletron("train " + ws.config + " --output " + (ws.dir / "fourth") + " --max-steps 1" + lora +
                   " --set mixed_precision.master_weights=bf16 --set mixed_precision.enabled=true");
  CHECK(bf16.exit_code == tt::error_exit_code(tt::ErrorCode::kConfig));
  CHECK_THAT(bf16.output, ContainsSubstring("master_weights"));
}

namespace {

// An eager LoRA run and one through CUDA graphs (emulated on the CPU, real on the GPU), with LoRA
// dropout: the replays must draw the eager run's masks (the generators are seeded per step) and
// read each step's own batch, so the adapters end equal. `scope` " --set cuda_graph.scope=blocks":
// block graphs, whose backward sums a block's gradient contributions in another order than eager
// autograd, so `tolerance` bounds the losses' relative difference and the adapters are compared by
// how far they moved; whole-step graphs must match exactly.
void check_lora_graphs_equal_eager(const std::string& device,
                                   const std::vector<std::pair<std::string, std::string>>& env,
                                   const std::string& scope = "", double tolerance = 0.0,
                                   double dropout = 0.2) {
  Workspace ws(8, "", "tt_lora_graphs_" + device);
  const std::string base = base_weights(ws);
  const std::string lora = " --device " + device + " --set model.weights=" + base +
                           " --set model.lora.rank=4 --set model.lora.dropout=" + std::to_string(dropout) +
                           " --set data.text_padding=full "
                           "--max-steps 10"
                           // A replay keeps the key mask, so the eager steps do too (the same kernels).
                           " --set model.per_sample_attention=false";
  auto eager = run_teletron("train " + ws.config + " --output " + (ws.dir / "eager") + lora +
                            " --set cuda_graph.enabled=false");
  INFO(eager.output);
  REQUIRE(eager.exit_code == 0);
  auto graphs =
      tt::test::run_with_env(env, "train " + ws.config + " --output " + (ws.dir / "graphs") + lora +
                                      " --set cuda_graph.enabled=true --set cuda_graph.warmup_steps=2 "
                                      "--set cuda_graph.capture_frequency=2" +
                                      scope);
  INFO(graphs.output);
  REQUIRE(graphs.exit_code == 0);
  CHECK_THAT(graphs.output, ContainsSubstring(scope.empty() ? "CUDA graph: captured the whole step"
                                                            : "CUDA graph: captured 2 Transformer block(s)"));
  const auto rows = read_metrics(ws.dir / "graphs/metrics.jsonl"),
             reference = read_metrics(ws.dir / "eager/metrics.jsonl");
  REQUIRE(rows.size() == reference.size());
  CHECK(rows.back()["graph_replays"].get<int64_t>() > 0);
  for (size_t i = 0; i < rows.size(); ++i) {
    INFO("row " << i);
    const double loss = rows[i]["loss"].get<double>(), want = reference[i]["loss"].get<double>();
    CHECK(std::abs(loss - want) <= tolerance * std::abs(want));
  }
  if (tolerance == 0.0) {
    CHECK(tt::test::weight_difference(ws.dir / "eager/checkpoints/step_0000010",
                                      ws.dir / "graphs/checkpoints/step_0000010") == 0.0);
    return;
  }
  // Block graphs: AdamW turns the other summation order's differences in near-zero gradients into
  // steps of lr, so the adapters are not compared element by element; but each B (zero at the start)
  // must have moved as far as eager's did. A graphed block whose backward missed its adapters (they
  // are no submodules) would leave its B's at zero.
  const auto want = tt::safetensors::load(ws.dir / "eager/checkpoints/step_0000010/lora.safetensors");
  const auto got = tt::safetensors::load(ws.dir / "graphs/checkpoints/step_0000010/lora.safetensors");
  for (const auto& [name, tensor] : want) {
    if (name.find("lora_B") == std::string::npos) continue;
    INFO(name);
    const double reference = tensor.abs().max().item<double>(),
                 moved = got.at(name).abs().max().item<double>();
    CHECK(reference > 0.0);
    CHECK(moved > 0.5 * reference);
    CHECK(moved < 2.0 * reference);
  }
}

}  // namespace

TEST_CASE(
    "LoRA with CUDA graphs (emulated on the CPU), dropout on: the replays train the eager run's adapters",
    "[train][lora][graph]") {
  check_lora_graphs_equal_eager("cpu", {{"TELETRON_GRAPH_EMULATE", "5"}});
}

TEST_CASE("LoRA with block graphs (emulated on the CPU): each graphed block's backward reaches its adapters",
          "[train][lora][graph]") {
  check_lora_graphs_equal_eager("cpu", {{"TELETRON_GRAPH_EMULATE", "5"}}, " --set cuda_graph.scope=blocks",
                                1e-4);
}

TEST_CASE(
    "LoRA with CUDA graphs on the GPU (bf16 autocast, dropout on): the replays train the eager run's "
    "adapters",
    "[train][lora][graph][gpu]") {
  TT_REQUIRE_GPU();
  check_lora_graphs_equal_eager("cuda", {});
}
