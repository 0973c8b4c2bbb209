// End to end through the built executable: a short training run's TensorBoard event file holds
// exactly metrics.jsonl's scalars (read back here, and with the tensorboard package's own reader by
// scripts/check_tensorboard_events.py where it is installed); train.tensorboard: false writes none.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensorboard.h"
#include "test/app/train_runs.h"
#include "test/test_util.h"

using Catch::Matchers::ContainsSubstring;

TEST_CASE("a training run's event file holds exactly metrics.jsonl's scalars", "[train][tensorboard]") {
  tt::test::TrainWorkspace ws(4, "", "tt_train_tb");
  const auto run = ws.train("run", "--max-steps 4 --set train.log_every=2");
  CHECK_THAT(run.output, ContainsSubstring("TensorBoard: events in"));
  const std::string folder = ws.dir / "run";
  const auto rows = tt::test::read_metrics(folder + "/metrics.jsonl");
  REQUIRE(rows.size() == 2);

  // (tag, step) -> value, from metrics.jsonl as float32 and from the event file.
  std::map<std::pair<std::string, int64_t>, float> expected, written;
  for (const auto& row : rows) {
    for (const auto& [key, value] : row.items()) {
      if (key != "step" && value.is_number()) expected[{key, row["step"].get<int64_t>()}] = value.get<float>();
    }
  }
  const auto files = tt::tensorboard_event_files(folder);
  REQUIRE(files.size() == 1);
  for (const auto& event : tt::read_tensorboard_events(files[0])) {
    for (const auto& scalar : event.scalars) written[{scalar.tag, event.step}] = scalar.value;
  }
  CHECK(expected.size() >= 2 * 10);  // loss, lr, grad_norm, samples_per_s, ... at two steps
  CHECK(written == expected);

  // The tensorboard package's reader sees the same (skipped, saying so, without the package).
  const std::string script = std::string(TELETRON_SOURCE_DIR) + "/scripts/check_tensorboard_events.py";
  const auto check = tt::test::run_command("python3 " + script + " --events " + folder + " --metrics " + folder +
                                           "/metrics.jsonl 2>&1");
  INFO(check.output);
  if (check.exit_code == 4) {
    WARN("tensorboard is not installed: only teletron's own reader checked the event file");
  } else {
    CHECK(check.exit_code == 0);
    CHECK_THAT(check.output, ContainsSubstring("OK: tensorboard"));
  }

  // Turned off: no event file.
  ws.train("off", "--max-steps 2 --set train.tensorboard=false");
  CHECK(tt::tensorboard_event_files(ws.dir / "off").empty());
}
