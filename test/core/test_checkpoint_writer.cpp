// CheckpointWriter (core/checkpoint_writer): writes behind the caller, one at a time, prunes, and
// hands a failed write's error to the next call instead of losing it.
#include "core/checkpoint_writer.h"

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <torch/torch.h>

#include <filesystem>

#include "core/errors.h"
#include "test/test_util.h"

namespace {

tt::checkpoint::Checkpoint make(int64_t step) {
  tt::checkpoint::Checkpoint ckpt;
  ckpt.step = step;
  ckpt.model["w"] = torch::full({4, 4}, static_cast<float>(step));
  ckpt.state["optim.w.step"] = torch::full({}, static_cast<float>(step));
  ckpt.info["step"] = step;
  return ckpt;
}

}  // namespace

TEST_CASE("the checkpoint writer writes each snapshot completely and prunes behind the caller", "[checkpoint]") {
  tt::test::TempDir dir("tt_writer");
  const std::string checkpoints = dir / "checkpoints";
  tt::CheckpointWriter writer(checkpoints, 2);
  CHECK(writer.last_written().empty());
  for (int64_t step : {1, 2, 3}) writer.submit(make(step));
  writer.finish();
  const auto complete = tt::checkpoint::list_complete(checkpoints);
  REQUIRE(complete.size() == 2);  // step 1 pruned
  CHECK(writer.last_written() == complete.back());
  const auto loaded = tt::checkpoint::load(complete.back());
  CHECK(loaded.step == 3);
  CHECK(torch::equal(loaded.model.at("w"), torch::full({4, 4}, 3.0f)));
}

TEST_CASE("a failed checkpoint write is thrown by the next call, and the writer goes on", "[checkpoint]") {
  tt::test::TempDir dir("tt_writer");
  const std::string blocked = dir / "not_a_folder";
  tt::test::write_file(blocked, "a file where the checkpoints folder should be");
  tt::CheckpointWriter writer(blocked, 0);
  writer.submit(make(1));
  const tt::Error error = tt::test::expect_error([&] { writer.finish(); });
  CHECK(error.code() == tt::ErrorCode::kIo);
  CHECK_NOTHROW(writer.finish());  // thrown once
  // The next write after a failed one is still attempted (and fails the same way here, at submit's wait).
  writer.submit(make(2));
  CHECK(tt::test::expect_error([&] { writer.submit(make(3)); }).code() == tt::ErrorCode::kIo);
}
