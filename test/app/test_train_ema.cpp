// train.ema_decay end to end through the executable: the average follows diffusers' EMAModel rule
// (no warm-up) step by step, sits in each checkpoint's state as ema.<key>, continues exactly on
// resume, and `teletron export --ema` writes it instead of the trained weights.
#include <torch/torch.h>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <filesystem>

#include "core/checkpoint.h"
#include "core/errors.h"
#include "model/weight_io.h"
#include "test/app/train_runs.h"
#include "test/test_util.h"

using Catch::Matchers::ContainsSubstring;
using tt::test::run_teletron;

namespace {

using Workspace = tt::test::TrainWorkspace;

std::string step_folder(const std::string& run, int step) {
  return run + "/checkpoints/" + tt::checkpoint::folder_name(step);
}

double relative_difference(const torch::Tensor& got, const torch::Tensor& want) {
  const torch::Tensor a = got.to(torch::kFloat64), b = want.to(torch::kFloat64);
  return (a - b).abs().max().item<double>() / std::max(b.abs().max().item<double>(), 1e-12);
}

}  // namespace

TEST_CASE(
    "train.ema_decay: the average follows EMAModel's decay min(d, (1+t)/(10+t)), is checkpointed, resumes "
    "exactly and is what export --ema writes",
    "[train][ema]") {
  Workspace ws(6);
  const std::string ema =
      " --set train.ema_decay=0.9 --set train.checkpoint_every=1 --set train.keep_checkpoints=0";
  ws.train("straight", "--max-steps 3" + ema + " --set optimizer.lr=1.0e-2");
  const std::string straight = ws.dir / "straight";

  // The trained weights after steps 1, 2, 3 and the average after each.
  std::vector<tt::checkpoint::Checkpoint> ckpts;
  for (int step = 1; step <= 3; ++step) ckpts.push_back(tt::checkpoint::load(step_folder(straight, step)));
  const auto& weights1 = ckpts[0].model;
  REQUIRE(ckpts[2].state.count("ema.proj_out.weight") == 1);
  int64_t averages = 0;
  for (const auto& [key, tensor] : ckpts[2].state) averages += key.rfind("ema.", 0) == 0;
  CHECK(averages == static_cast<int64_t>(weights1.size()));  // one per weight
  for (const auto& [key, w1] : weights1) {
    INFO(key);
    const torch::Tensor w2 = ckpts[1].model.at(key).to(torch::kFloat64);
    const torch::Tensor w3 = ckpts[2].model.at(key).to(torch::kFloat64);
    // t = 0: decay 0 (a copy); t = 1: min(0.9, 2/11); t = 2: min(0.9, 3/12).
    torch::Tensor expected = w1.to(torch::kFloat64);
    CHECK(torch::equal(ckpts[0].state.at("ema." + key), w1));
    expected = expected + (1.0 - 2.0 / 11.0) * (w2 - expected);
    CHECK(relative_difference(ckpts[1].state.at("ema." + key), expected) < 1e-5);
    expected = expected + (1.0 - 3.0 / 12.0) * (w3 - expected);
    CHECK(relative_difference(ckpts[2].state.at("ema." + key), expected) < 1e-5);
  }
  // The average lags the weights once they move (the check above cannot pass with a copy of them).
  CHECK(relative_difference(ckpts[2].state.at("ema.proj_out.weight"), ckpts[2].model.at("proj_out.weight")) >
        1e-4);

  // Resume: 2 steps, then on to 3, gives the straight run's average bit for bit.
  ws.train("split", "--max-steps 2" + ema + " --set optimizer.lr=1.0e-2");
  const std::string split = ws.dir / "split";
  auto resumed = run_teletron("train " + ws.config + " --output " + split + " --max-steps 3 --resume auto" +
                              ema + " --set optimizer.lr=1.0e-2");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  const auto resumed_ckpt = tt::checkpoint::load(step_folder(split, 3));
  for (const auto& [key, tensor] : ckpts[2].state) {
    if (key.rfind("ema.", 0) != 0) continue;
    INFO(key);
    CHECK(torch::equal(resumed_ckpt.state.at(key), tensor));
  }

  // export --ema writes the averages; a run without them says so.
  auto exported =
      run_teletron("export " + straight + " --output " + (ws.dir / "ema_out") + " --dtype fp32 --ema");
  INFO(exported.output);
  REQUIRE(exported.exit_code == 0);
  CHECK_THAT(exported.output, ContainsSubstring("EMA"));
  const auto written = tt::read_weights(tt::open_weights(ws.dir / "ema_out"));
  REQUIRE(written.size() == weights1.size());
  for (const auto& [key, tensor] : written) {
    INFO(key);
    CHECK(torch::equal(tensor, ckpts[2].state.at("ema." + key)));
  }
  ws.train("plain", "--max-steps 1");
  auto none = run_teletron("export " + (ws.dir / "plain") + " --output " + (ws.dir / "x") + " --ema");
  CHECK(none.exit_code == tt::error_exit_code(tt::ErrorCode::kCheckpoint));
  CHECK_THAT(none.output, ContainsSubstring("train.ema_decay"));
}
