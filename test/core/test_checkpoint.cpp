// Tests for core/checkpoint: round trip, picking the newest complete folder, ignoring the debris
// of interrupted writes (simulated, and real: a forked writer killed with SIGKILL), pruning, and
// the kCheckpoint messages for damaged folders.
#include "core/checkpoint.h"

#include <catch2/catch_test_macros.hpp>

#include <torch/torch.h>

#include <csignal>
#include <filesystem>
#include <functional>
#include <sys/wait.h>
#include <unistd.h>

#include "core/errors.h"
#include "test/test_util.h"

namespace ckpt = tt::checkpoint;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A checkpoint whose contents are a function of `variant`, so a loaded one can be verified.
ckpt::Checkpoint make_checkpoint(int64_t step, int64_t variant = 0, int64_t numel = 256) {
  ckpt::Checkpoint c;
  c.step = step;
  c.model["blocks.0.attn.to_q.weight"] = torch::arange(numel, torch::kFloat32).add(variant);
  c.model["norm_out.linear.bias"] = torch::full({8}, static_cast<double>(variant)).to(torch::kBFloat16);
  c.state["optimizer.exp_avg.0"] = torch::arange(numel, torch::kFloat32).mul(variant + 1);
  c.state["rng.cpu"] = torch::arange(16, torch::kUInt8);
  c.state["scaler.scale"] = torch::tensor(65536.0f);
  c.info = {{"data_position", 17 + variant}, {"lr", 1e-5}, {"config_digest", "abc"}};
  return c;
}

void check_same(const tt::safetensors::TensorMap& got, const tt::safetensors::TensorMap& want) {
  REQUIRE(got.size() == want.size());
  for (const auto& [name, tensor] : want) {
    INFO(name);
    REQUIRE(got.count(name) == 1);
    CHECK(torch::equal(got.at(name), tensor));
  }
}

int64_t step_of(const std::string& folder) { return ckpt::load(folder).step; }

std::vector<std::string> temp_folders(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::string name = entry.path().filename().string();
    if (name.rfind(".tmp_", 0) == 0) names.push_back(name);
  }
  return names;
}

// A pid that is certainly not running: a child that has exited and been reaped.
pid_t dead_pid() {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

}  // namespace

TEST_CASE("checkpoint folder names are zero-padded", "[checkpoint]") {
  CHECK(ckpt::folder_name(500) == "step_0000500");
  CHECK(ckpt::folder_name(0) == "step_0000000");
  CHECK(ckpt::folder_name(12345678) == "step_12345678");
}

TEST_CASE("checkpoint round-trips model, state and info", "[checkpoint]") {
  tt::test::TempDir dir;
  ckpt::Checkpoint saved = make_checkpoint(500, 3);
  std::string folder = ckpt::save(dir.path(), saved);
  CHECK(folder == dir / "step_0000500");
  CHECK(fs::is_regular_file(folder + "/model.safetensors"));
  CHECK(fs::is_regular_file(folder + "/state.safetensors"));
  CHECK(ckpt::is_complete(folder));
  CHECK(temp_folders(dir.path()).empty());

  nlohmann::json state_json = nlohmann::json::parse(tt::test::read_file(folder + "/state.json"));
  CHECK(state_json["complete"] == true);
  CHECK(state_json["step"] == 500);
  CHECK(state_json["data_position"] == 20);

  ckpt::Checkpoint loaded = ckpt::load(folder);
  CHECK(loaded.step == 500);
  CHECK(loaded.info == saved.info);
  check_same(loaded.model, saved.model);
  check_same(loaded.state, saved.state);
}

TEST_CASE("checkpoint weights may be a LoRA run's lora.safetensors, with metadata; state.json names no other file",
          "[checkpoint]") {
  tt::test::TempDir dir;
  ckpt::Checkpoint saved = make_checkpoint(40, 1);
  saved.model_file = "lora.safetensors";
  saved.model_metadata = {{"lora_adapter_metadata", "{\"transformer.r\": 4}"}};
  const std::string folder = ckpt::save(dir.path(), saved);
  CHECK(fs::is_regular_file(folder + "/lora.safetensors"));
  CHECK_FALSE(fs::exists(folder + "/model.safetensors"));
  CHECK(ckpt::is_complete(folder));
  const ckpt::Checkpoint loaded = ckpt::load(folder);
  CHECK(loaded.model_file == "lora.safetensors");
  CHECK(loaded.model_metadata.at("lora_adapter_metadata") == "{\"transformer.r\": 4}");
  CHECK(loaded.model_metadata.at("format") == "pt");
  CHECK(loaded.info == saved.info);  // model_file is the loader's field, as step is
  check_same(loaded.model, saved.model);

  // A crafted state.json cannot point the loader at another file.
  nlohmann::json info = nlohmann::json::parse(tt::test::read_file(folder + "/state.json"));
  info["model_file"] = "../../etc/passwd";
  tt::test::write_file(folder + "/state.json", info.dump());
  CHECK_FALSE(ckpt::is_complete(folder));
  const tt::Error error = tt::test::expect_error([&] { ckpt::load(folder); });
  CHECK(error.code() == tt::ErrorCode::kCheckpoint);
  CHECK(contains(error.what(), "model_file"));
}

TEST_CASE("checkpoint save replaces an existing folder of the same step", "[checkpoint]") {
  tt::test::TempDir dir;
  ckpt::save(dir.path(), make_checkpoint(7, 1));
  std::string folder = ckpt::save(dir.path(), make_checkpoint(7, 2));
  ckpt::Checkpoint loaded = ckpt::load(folder);
  check_same(loaded.model, make_checkpoint(7, 2).model);
  CHECK(ckpt::list_complete(dir.path()).size() == 1);
  CHECK(temp_folders(dir.path()).empty());
}

TEST_CASE("checkpoint find_latest picks the newest complete step", "[checkpoint]") {
  tt::test::TempDir dir;
  CHECK_FALSE(ckpt::find_latest(dir.path()).has_value());
  CHECK_FALSE(ckpt::find_latest(dir / "does_not_exist").has_value());
  for (int64_t step : {200, 10, 1000, 30}) ckpt::save(dir.path(), make_checkpoint(step));
  std::vector<std::string> folders = ckpt::list_complete(dir.path());
  REQUIRE(folders.size() == 4);
  CHECK(step_of(folders[0]) == 10);
  CHECK(step_of(folders[3]) == 1000);
  CHECK(ckpt::find_latest(dir.path()) == dir / "step_0001000");
}

TEST_CASE("checkpoint readers ignore the debris of an interrupted write", "[checkpoint]") {
  tt::test::TempDir dir;
  ckpt::save(dir.path(), make_checkpoint(3, 0));
  std::string good = ckpt::save(dir.path(), make_checkpoint(5, 1));
  std::string model_bytes = tt::test::read_file(good + "/model.safetensors");
  std::string half = model_bytes.substr(0, model_bytes.size() / 2);

  // Killed while filling the temp folder.
  std::string temp = dir / ".tmp_step_0000007_4242";
  fs::create_directory(temp);
  tt::test::write_file(temp + "/model.safetensors", half);
  // A step folder with a truncated model and no state.json (e.g. copied by hand, interrupted).
  std::string broken = dir / "step_0000009";
  fs::create_directory(broken);
  tt::test::write_file(broken + "/model.safetensors", half);
  // All files, but state.json does not say complete.
  std::string unmarked = dir / "step_0000008";
  fs::copy(good, unmarked);
  tt::test::write_file(unmarked + "/state.json", R"({"step": 8})");
  // Marked complete, but the model file was truncated afterwards.
  std::string damaged = dir / "step_0000011";
  fs::copy(good, damaged);
  tt::test::write_file(damaged + "/model.safetensors", half);

  CHECK_FALSE(ckpt::is_complete(temp));
  CHECK_FALSE(ckpt::is_complete(broken));
  CHECK_FALSE(ckpt::is_complete(unmarked));
  CHECK_FALSE(ckpt::is_complete(damaged));
  CHECK(ckpt::list_complete(dir.path()).size() == 2);
  REQUIRE(ckpt::find_latest(dir.path()) == good);
  ckpt::Checkpoint loaded = ckpt::load(good);
  CHECK(loaded.step == 5);
  check_same(loaded.model, make_checkpoint(5, 1).model);

  tt::Error no_marker = tt::test::expect_error([&] { ckpt::load(broken); });
  CHECK(no_marker.code() == tt::ErrorCode::kCheckpoint);
  CHECK(contains(no_marker.what(), broken));
  CHECK(contains(no_marker.what(), "state.json is missing"));

  tt::Error not_complete = tt::test::expect_error([&] { ckpt::load(unmarked); });
  CHECK(not_complete.code() == tt::ErrorCode::kCheckpoint);
  CHECK(contains(not_complete.what(), "\"complete\": true"));

  tt::Error bad_model = tt::test::expect_error([&] { ckpt::load(damaged); });
  INFO(bad_model.what());
  CHECK(bad_model.code() == tt::ErrorCode::kCheckpoint);
  CHECK(contains(bad_model.what(), damaged));
  CHECK(contains(bad_model.what(), "model.safetensors is unreadable"));
  CHECK(contains(bad_model.what(), "truncated"));  // the wrapped safetensors message
}

TEST_CASE("checkpoint load errors for missing folders and files", "[checkpoint]") {
  tt::test::TempDir dir;
  tt::Error missing = tt::test::expect_error([&] { ckpt::load(dir / "step_0000001"); });
  CHECK(missing.code() == tt::ErrorCode::kCheckpoint);
  CHECK(contains(missing.what(), "does not exist"));

  std::string folder = ckpt::save(dir.path(), make_checkpoint(2));
  fs::remove(folder + "/state.safetensors");
  CHECK_FALSE(ckpt::is_complete(folder));
  tt::Error no_state = tt::test::expect_error([&] { ckpt::load(folder); });
  CHECK(no_state.code() == tt::ErrorCode::kCheckpoint);
  CHECK(contains(no_state.what(), "state.safetensors is missing"));

  tt::test::write_file(folder + "/state.json", "{not json");
  CHECK(contains(tt::test::expect_error([&] { ckpt::load(folder); }).what(), "not a valid JSON"));
}

TEST_CASE("checkpoint save into an unwritable place is kIo", "[checkpoint]") {
  tt::test::TempDir dir;
  tt::test::write_file(dir / "a_file", "x");
  tt::Error error = tt::test::expect_error([&] { ckpt::save(dir / "a_file/checkpoints", make_checkpoint(1)); });
  CHECK(error.code() == tt::ErrorCode::kIo);
}

TEST_CASE("checkpoint prune keeps the newest N and clears stale temp folders", "[checkpoint]") {
  tt::test::TempDir dir;
  for (int64_t step = 1; step <= 5; ++step) ckpt::save(dir.path(), make_checkpoint(step));
  std::string stale = dir / (".tmp_step_0000006_" + std::to_string(dead_pid()));
  std::string live = dir / ".tmp_step_0000006_1";  // pid 1 is always running: a concurrent writer
  fs::create_directory(stale);
  fs::create_directory(live);

  ckpt::prune(dir.path(), 0);  // keep all complete ones, still clear stale temp folders
  CHECK(ckpt::list_complete(dir.path()).size() == 5);
  CHECK_FALSE(fs::exists(stale));
  CHECK(fs::exists(live));

  ckpt::prune(dir.path(), 2);
  std::vector<std::string> left = ckpt::list_complete(dir.path());
  REQUIRE(left.size() == 2);
  CHECK(step_of(left[0]) == 4);
  CHECK(step_of(left[1]) == 5);
  CHECK(temp_folders(dir.path()) == std::vector<std::string>{".tmp_step_0000006_1"});
  CHECK_FALSE(fs::exists(dir / "step_0000001"));
}

TEST_CASE("checkpoint survives a writer killed with SIGKILL at random moments", "[checkpoint]") {
  tt::test::TempDir dir;
  const int64_t kNumel = 1 << 20;  // 4 MiB per tensor: a save spans many write() calls
  // Tensors are built before fork(): the child only writes, so it never touches torch's thread
  // pools, which do not survive fork().
  std::vector<ckpt::Checkpoint> variants;
  for (int64_t v = 0; v < 4; ++v) variants.push_back(make_checkpoint(0, v, kNumel));

  int64_t first_step = 1;
  for (int round = 0; round < 6; ++round) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // Child: each step is saved twice (exercising the replace path), then pruned to 3.
      try {
        for (int64_t i = 0;; ++i) {
          int64_t step = first_step + i / 2;
          ckpt::Checkpoint c = variants[step % 4];
          c.step = step;
          ckpt::save(dir.path(), c);
          ckpt::prune(dir.path(), 3);
        }
      } catch (...) {
        ::_exit(1);
      }
    }
    ::usleep(static_cast<useconds_t>(3000 + round * 12000));  // 3 ms .. 63 ms
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    REQUIRE(WIFSIGNALED(status));  // the child was still writing, not failing

    for (const std::string& folder : ckpt::list_complete(dir.path())) {
      INFO(folder);
      ckpt::Checkpoint loaded = ckpt::load(folder);
      const ckpt::Checkpoint& want = variants[loaded.step % 4];
      check_same(loaded.model, want.model);
      check_same(loaded.state, want.state);
      CHECK(loaded.info == want.info);
      first_step = std::max(first_step, loaded.step + 1);
    }
  }
  ckpt::prune(dir.path(), 3);  // the killed writers are dead: their temp folders are stale
  CHECK(temp_folders(dir.path()).empty());
  CHECK(ckpt::list_complete(dir.path()).size() <= 3);

  // The debris never blocks the next run: a save of the step the last child was working on wins.
  ckpt::Checkpoint next = variants[first_step % 4];
  next.step = first_step;
  const std::string saved = ckpt::save(dir.path(), next);  // before find_latest: argument order is unspecified
  CHECK(ckpt::find_latest(dir.path()) == saved);
  check_same(ckpt::load(*ckpt::find_latest(dir.path())).model, next.model);
}

TEST_CASE("load_state_json reads state.json alone, with the loader's checks", "[checkpoint]") {
  tt::test::TempDir dir("tt_ckpt_json");
  const std::string folder = ckpt::save(dir.path(), make_checkpoint(12, 3));
  const nlohmann::json info = ckpt::load_state_json(folder);
  CHECK(info.at("step") == 12);
  CHECK(info.at("complete") == true);
  CHECK(info.at("data_position") == 20);
  // The tensors are not read: a damaged weights file does not matter to it (load() still refuses).
  tt::test::write_file(folder + "/model.safetensors", "damaged");
  CHECK(ckpt::load_state_json(folder).at("step") == 12);
  CHECK_THROWS_AS(ckpt::load(folder), tt::Error);
  // A folder that is not there, or an interrupted write, is kCheckpoint.
  try {
    ckpt::load_state_json(dir / "step_0000099");
    FAIL("expected kCheckpoint");
  } catch (const tt::Error& error) {
    CHECK(error.code() == tt::ErrorCode::kCheckpoint);
  }
  tt::test::write_file(folder + "/state.json", "{\"step\": 12}");
  try {
    ckpt::load_state_json(folder);
    FAIL("expected kCheckpoint");
  } catch (const tt::Error& error) {
    CHECK(error.code() == tt::ErrorCode::kCheckpoint);
    CHECK(contains(error.what(), "complete"));
  }
}
