// Shared helpers for teletron's Catch2 tests: scratch folders, running the built executable, the
// record/replay cache for media made with the ffmpeg CLI, small file utilities, GPU detection for
// [gpu] tests.
#pragma once

#include <functional>
#include <string>

#include <torch/types.h>

#include "core/errors.h"
#include "test/captured_log.h"

namespace tt::test {

/// A fresh empty folder under $TMPDIR (or /tmp), removed when the object goes out of scope.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "tt_test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr interleaved
};

/// Runs `<build>/teletron <args>` through the shell (args are passed verbatim).
CommandResult run_teletron(const std::string& args);
/// Runs any shell command, capturing stdout+stderr.
CommandResult run_command(const std::string& command);

/// Whether ffmpeg and ffprobe are on PATH (else media_command replays what was recorded).
bool has_ffmpeg_cli();

/// Folder holding the media the tests make with the ffmpeg CLI (clips, rgb24 frames, ffprobe answers).
/// $TELETRON_TEST_MEDIA when set (made absolute, created if missing) is persistent: filled on a machine
/// with the CLI (scripts/make_test_media.sh), carried, replayed on one without. Otherwise one fresh TempDir
/// per test process.
const std::string& media_dir();
/// Runs a shell command that needs the ffmpeg CLI, with every "{media}" replaced by media_dir(), through a
/// record/replay cache: a successful run's exit code and output are stored in media_dir() as
/// cmd-<FNV-1a 64 of the command text before substitution>.txt, and later calls with the same text (in
/// any process, on any machine) return them without running it; the files it wrote into {media} are
/// there already. So binary output goes to a file in {media}, never to stdout, and output names are
/// fixed by the clip and its parameters (no temp paths). Output is stdout+stderr merged: ffprobe
/// commands pass `-v error`. SKIPs when nothing is recorded and there is no ffmpeg/ffprobe on PATH.
/// Several processes (ctest -j) may share the folder: check-run-store holds a flock() on media.lock.
CommandResult media_command(const std::string& command);

void write_file(const std::string& path, const std::string& content);
std::string read_file(const std::string& path);

/// Runs `body`, which must throw a tt::Error, and returns that error (FAILs the test otherwise).
tt::Error expect_error(const std::function<void()>& body);

/// The colour tolerance of the video tests: (..., 3) uint8 RGB `ours` against `reference` of the
/// same shape, mean |error| <= 1.0 and 99th percentile <= 3 in 0-255 (CHECKs, with the numbers).
void check_pixels_close(const torch::Tensor& ours, const torch::Tensor& reference);

/// True when LibTorch sees a CUDA device. [gpu] tests call SKIP() when false.
bool has_cuda();

}  // namespace tt::test

/// First line of every [gpu] test: skips, saying why, on machines without a CUDA device.
#define TT_REQUIRE_GPU()                                                   \
  do {                                                                     \
    if (!::tt::test::has_cuda()) SKIP("no CUDA device: [gpu] test skipped"); \
  } while (0)
