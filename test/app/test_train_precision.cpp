// Training with bf16 master weights (mixed_precision.master_weights) and the CUDA allocator keys
// (train.expandable_segments, train.memory_cap), end to end through the built executable on the
// tiny model: bf16 weights train as fp32 ones do, keep updates smaller than half a bf16 gap (in
// expectation), are bf16 in the checkpoint, resume bit for bit, skip a non-finite step and stop,
// and a resume may not switch them;
// the allocator keys say once on the CPU that they do nothing there. The [gpu] cases: CUDA graphs
// over bf16 weights, expandable segments under graphs, and a memory cap too small for the model.
#include <torch/torch.h>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/checkpoint.h"
#include "core/errors.h"
#include "core/safetensors.h"
#include "test/app/train_runs.h"
#include "test/test_util.h"

using Catch::Matchers::ContainsSubstring;
using tt::test::run_teletron;
using tt::test::TempDir;

namespace {

// test_train.cpp's tiny model and workspace.
struct Workspace : tt::test::TrainWorkspace {
  explicit Workspace(int samples) : TrainWorkspace(samples, "", "tt_precision") {}
};
using tt::test::count_of;
using tt::test::read_metrics;
using tt::test::run_with_env;
using tt::test::weight_difference;

constexpr const char* kBf16 = " --set mixed_precision.master_weights=bf16";

// The mean loss of the second half of a run's metrics rows.
double late_loss(const std::string& run) {
  const std::vector<nlohmann::json> rows = read_metrics(run + "/metrics.jsonl");
  REQUIRE(rows.size() >= 2);
  double sum = 0.0;
  for (size_t i = rows.size() / 2; i < rows.size(); ++i) sum += rows[i]["loss"].get<double>();
  return sum / static_cast<double>(rows.size() - rows.size() / 2);
}

}  // namespace

TEST_CASE(
    "bf16 master weights train as fp32 ones do; the weights are bf16 in the checkpoint, the moments fp32",
    "[train][bf16]") {
  Workspace ws(8);
  const std::string common = "--max-steps 300 --set train.log_every=10 --set train.checkpoint_every=1000";
  auto fp32 = ws.train("fp32", common);
  auto bf16 = ws.train("bf16", common + kBf16);
  CHECK_THAT(fp32.output, ContainsSubstring("precision fp32"));
  CHECK_THAT(bf16.output, ContainsSubstring("precision bf16 autocast, bf16 master weights"));
  // The same samples and noise: the loss of the last 150 steps within 3 % (measured: 0.3 %).
  const double loss32 = late_loss(ws.dir / "fp32"), loss16 = late_loss(ws.dir / "bf16");
  INFO("mean loss of steps 151-300: fp32 master weights " << loss32 << ", bf16 " << loss16);
  CHECK(std::abs(loss16 - loss32) <= 0.03 * loss32);

  const std::string step = "/checkpoints/step_0000300";
  const auto header = tt::safetensors::read_header(ws.dir / ("bf16" + step + "/model.safetensors"));
  REQUIRE(!header.tensors.empty());
  for (const auto& [name, info] : header.tensors) {
    INFO(name);
    CHECK(info.dtype == torch::kBFloat16);
  }
  const auto checkpoint = tt::checkpoint::load(ws.dir / ("bf16" + step));
  for (const auto& [name, tensor] : checkpoint.state) {
    INFO(name);
    if (name.rfind("optim.", 0) == 0) CHECK(tensor.scalar_type() == torch::kFloat32);
  }
  // Half the file: 2 bytes per weight instead of 4.
  const auto size16 = std::filesystem::file_size(ws.dir / ("bf16" + step + "/model.safetensors"));
  const auto size32 = std::filesystem::file_size(ws.dir / ("fp32" + step + "/model.safetensors"));
  INFO("model.safetensors: " << size16 << " bytes with bf16 master weights, " << size32 << " with fp32");
  CHECK(static_cast<double>(size16) < 0.55 * static_cast<double>(size32));
}

TEST_CASE("bf16 master weights keep updates smaller than half a bf16 gap, which round-to-nearest would drop",
          "[train][bf16]") {
  Workspace ws(8);
  // A bf16 start both runs share exactly: 20 steps of bf16 training (off the zero-initialised
  // modulations), its checkpoint as model.weights.
  ws.train("start", "--max-steps 20 --set train.checkpoint_every=1000" + std::string(kBf16));
  const std::string start = ws.dir / "start/checkpoints/step_0000020/model.safetensors";
  // lr 3e-5: an Adam step of about lr per weight, under half a gap for every weight above 2^-7.
  const std::string common =
      "--max-steps 80 --set train.log_every=80 --set train.checkpoint_every=1000 --set "
      "optimizer.lr=3.0e-5 --set optimizer.warmup_steps=0 --set model.weights=" +
      start;
  ws.train("fp32", common);
  ws.train("bf16", common + kBf16);
  const auto begin = tt::safetensors::load(start);
  const auto end32 = tt::checkpoint::load(ws.dir / "fp32/checkpoints/step_0000080").model;
  const auto end16 = tt::checkpoint::load(ws.dir / "bf16/checkpoints/step_0000080").model;
  double apart = 0.0, moved = 0.0;  // sums of squares over every weight
  for (const auto& [name, first] : begin) {
    const torch::Tensor from = first.to(torch::kFloat64);
    const torch::Tensor delta32 = end32.at(name).to(torch::kFloat64) - from;
    const torch::Tensor delta16 = end16.at(name).to(torch::kFloat64) - from;
    apart += (delta16 - delta32).square().sum().item<double>();
    moved += delta32.square().sum().item<double>();
  }
  const double ratio = std::sqrt(apart / moved);
  // |Δbf16 - Δfp32| / |Δfp32|: stochastic rounding's random walk (up to a gap's noise per
  // rounding) and bf16 autocast's other gradients keep it about half; round-to-nearest leaves
  // most weights where they started, near 1. Measured: 0.50 with stochastic rounding, 0.93 with
  // plain .to(bf16) (0.37 and 0.95 after 160 steps).
  INFO("|delta bf16 - delta fp32| / |delta fp32| = " << ratio << " (|delta fp32| = " << std::sqrt(moved)
                                                     << ")");
  CHECK(ratio < 0.7);
}

TEST_CASE("bf16 master weights resume bit for bit: N steps + resume + N steps == 2N steps",
          "[train][bf16][resume]") {
  Workspace ws(6);  // 6 samples, batch 2: the resume point (step 4) is mid-epoch
  ws.train("straight", "--max-steps 8" + std::string(kBf16));
  ws.train("split", "--max-steps 4" + std::string(kBf16));
  auto resumed = ws.train("split", "--max-steps 8 --resume auto" + std::string(kBf16));
  CHECK_THAT(resumed.output, ContainsSubstring("resumed from"));
  const auto left = tt::checkpoint::load(ws.dir / "straight/checkpoints/step_0000008");
  const auto right = tt::checkpoint::load(ws.dir / "split/checkpoints/step_0000008");
  REQUIRE(left.model.size() == right.model.size());
  for (const auto& [name, tensor] : left.model) {
    INFO(name);
    CHECK(tensor.scalar_type() == torch::kBFloat16);
    CHECK(torch::equal(tensor, right.model.at(name)));
  }
  REQUIRE(left.state.size() == right.state.size());
  for (const auto& [name, tensor] : left.state) {
    INFO(name);
    CHECK(torch::equal(tensor, right.state.at(name)));
  }
}

TEST_CASE("bf16 master weights: a non-finite gradient skips its update and stops the run with TT_ERR_NAN",
          "[train][bf16][nan]") {
  Workspace ws(4);
  // bf16 gradients skip the loss scaler's check (ATen's kernel takes none on CUDA): the gradient
  // norm, taken in fp32 over every gradient, must still catch the inf injected at step 3.
  auto run = run_with_env(
      {{"TELETRON_FAULTS", "nonfinite_grad@3"}},
      "train " + ws.config + " --output " + (ws.dir / "nan") + " --set train.checkpoint_every=1" + kBf16);
  INFO(run.output);
  CHECK(run.exit_code == tt::error_exit_code(tt::ErrorCode::kNan));
  CHECK_THAT(run.output, ContainsSubstring("non-finite loss or gradients at step 3"));
  CHECK_THAT(run.output, ContainsSubstring("first non-finite gradient: "));
  CHECK(std::filesystem::exists(ws.dir / "nan/checkpoints/step_0000002"));
  CHECK_FALSE(std::filesystem::exists(ws.dir / "nan/checkpoints/step_0000003"));
}

TEST_CASE(
    "a resume may not switch the master weights: TT_ERR_CONFIG naming the key; --allow-change accepts it",
    "[train][bf16][resume]") {
  Workspace ws(4);
  ws.train("run", "--max-steps 2");
  const std::string args =
      "train " + ws.config + " --output " + (ws.dir / "run") + " --max-steps 4 --resume auto";
  auto refused = run_teletron(args + kBf16);
  INFO(refused.output);
  CHECK(refused.exit_code == tt::error_exit_code(tt::ErrorCode::kConfig));
  CHECK_THAT(
      refused.output,
      ContainsSubstring("tele_tron.mixed_precision.master_weights: fp32 in the checkpoint, bf16 now (changes "
                        "the weights' dtype"));
  CHECK_THAT(refused.output, ContainsSubstring("--allow-change mixed_precision.master_weights"));
  CHECK_FALSE(std::filesystem::exists(ws.dir / "run/checkpoints/step_0000004"));
  // Accepted by name: the checkpoint's fp32 weights are rounded to bf16 once, and training goes on.
  auto accepted = run_teletron(args + kBf16 + " --allow-change mixed_precision.master_weights");
  INFO(accepted.output);
  REQUIRE(accepted.exit_code == 0);
  CHECK_THAT(accepted.output, ContainsSubstring("accepted by --allow-change mixed_precision.master_weights"));
  const auto header = tt::safetensors::read_header(ws.dir / "run/checkpoints/step_0000004/model.safetensors");
  CHECK(header.tensors.at("x_embedder.proj.weight").dtype == torch::kBFloat16);
}

TEST_CASE("the allocator keys on a CPU run say once each that they do nothing there", "[train][memory]") {
  Workspace ws(4);
  auto run = ws.train("cpu", "--max-steps 2 --set train.expandable_segments=true --set train.memory_cap=0.5");
  const std::string says = "but the device is CPU";
  CHECK(count_of(
            run.output,
            "tele_tron.train.expandable_segments: set (--set train.expandable_segments=true), " + says) == 1);
  CHECK(count_of(run.output, "tele_tron.train.memory_cap: set (--set train.memory_cap=0.5), " + says) == 1);
  CHECK(count_of(run.output, "CUDA caching allocator") == 2);
  // Unset, nothing is said.
  auto plain = ws.train("plain", "--max-steps 1");
  CHECK(count_of(plain.output, "CUDA caching allocator") == 0);
}

// ---- [gpu] ----------------------------------------------------------------------------------

namespace {

// Graphs for every step shape after 2 eager steps, no comparison with eager in between: 13 steps
// are 2 eager, 1 captured, 10 replayed. Text padded to the dataset's length (one shape).
constexpr const char* kGraphSets =
    " --set data.text_padding=full --set cuda_graph.warmup_steps=2 --set cuda_graph.capture_frequency=1000";

}  // namespace

TEST_CASE(
    "CUDA graphs on the GPU over bf16 master weights: 10 replayed steps equal 10 eager ones within a bf16 "
    "gap",
    "[train][graph][gpu][bf16]") {
  TT_REQUIRE_GPU();
  Workspace ws(8);
  // A replay keeps the key mask: so do the eager steps compared with it (per-sample attention's
  // kernels round differently; their agreement is test_per_sample_attention's).
  const std::string common =
      "--device cuda --max-steps 13" + std::string(kBf16) + " --set model.per_sample_attention=false";
  ws.train("eager", common + " --set data.text_padding=full --set cuda_graph.enabled=false");
  auto graphs = ws.train("graphs", common + kGraphSets);
  CHECK_THAT(graphs.output, !ContainsSubstring("TT_ERR_GRAPH"));
  CHECK_THAT(graphs.output, ContainsSubstring("CUDA graphs: 1 capture(s), 0 failed, 10 replays"));
  // The rounding's keys are the same in a replay; what differs is cuBLAS's choice on the capture
  // stream, which can move a weight across a rounding threshold: one gap, 2^-7 of its magnitude.
  const double gap = std::ldexp(1.0, -7);
  const auto eager = read_metrics(ws.dir / "eager/metrics.jsonl"),
             replayed = read_metrics(ws.dir / "graphs/metrics.jsonl");
  REQUIRE(eager.size() == 13);
  REQUIRE(replayed.size() == 13);
  for (size_t i = 0; i < eager.size(); ++i) {
    INFO(replayed[i].dump() << " against " << eager[i].dump());
    const double loss = eager[i]["loss"].get<double>();
    CHECK(std::abs(replayed[i]["loss"].get<double>() - loss) <= gap * std::abs(loss));
  }
  const double worst = weight_difference(ws.dir / "eager/checkpoints/step_0000013",
                                         ws.dir / "graphs/checkpoints/step_0000013");
  INFO("largest relative weight difference " << worst);
  CHECK(worst <= gap);
}

TEST_CASE(
    "expandable segments under CUDA graphs train to the plain allocator's weights; an environment that names "
    "them wins",
    "[train][graph][gpu][memory]") {
  TT_REQUIRE_GPU();
  Workspace ws(8);
  const std::string common = "--device cuda --max-steps 8" + std::string(kGraphSets);
  ws.train("plain", common);
  auto expandable = ws.train("expandable", common + " --set train.expandable_segments=true");
  CHECK_THAT(expandable.output, ContainsSubstring("CUDA allocator: expandable segments on; no memory cap"));
  CHECK_THAT(expandable.output, ContainsSubstring("CUDA graphs: 1 capture(s), 0 failed, 5 replays"));
  // Where the memory lies changes no arithmetic: the same weights up to the kernels' choices (the
  // graph tests' tolerance, 1e-3 relative).
  const double worst = weight_difference(ws.dir / "plain/checkpoints/step_0000008",
                                         ws.dir / "expandable/checkpoints/step_0000008");
  INFO("largest relative weight difference " << worst);
  CHECK(worst <= 1e-3);
  auto overruled = run_with_env({{"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False"}},
                                "train " + ws.config + " --device cuda --max-steps 1 --output " +
                                    (ws.dir / "env") + " --set train.expandable_segments=true");
  INFO(overruled.output);
  REQUIRE(overruled.exit_code == 0);
  CHECK(count_of(overruled.output,
                 "tele_tron.train.expandable_segments: set (--set train.expandable_segments=true), "
                 "but PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False names expandable_segments "
                 "and wins: expandable segments are off") == 1);
}

TEST_CASE("a memory cap too small for the model is TT_ERR_MEMORY naming train.memory_cap, not a crash",
          "[train][gpu][memory]") {
  TT_REQUIRE_GPU();
  Workspace ws(4);
  auto run = run_teletron("train " + ws.config + " --device cuda --max-steps 2 --output " +
                          (ws.dir / "capped") + " --set train.memory_cap=1e-5");
  INFO(run.output);
  CHECK(run.exit_code == tt::error_exit_code(tt::ErrorCode::kMemory));
  CHECK_THAT(run.output,
             ContainsSubstring("TT_ERR_MEMORY: out of memory under tele_tron.train.memory_cap = 1e-05"));
  CHECK_THAT(run.output, ContainsSubstring("raise train.memory_cap"));
  CHECK_FALSE(std::filesystem::exists(ws.dir / "capped/checkpoints"));
}
