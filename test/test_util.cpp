// Implementation of the shared test helpers (see test_util.h).
#include "test/test_util.h"

#include <catch2/catch_test_macros.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

namespace tt::test {

CapturedLog::CapturedLog() : out_(std::make_shared<std::ostringstream>()), previous_(spdlog::default_logger()) {
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(*out_);
  sink->set_pattern("%l %v");
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("captured", sink));
}

CapturedLog::~CapturedLog() { spdlog::set_default_logger(previous_); }

TempDir::TempDir(const std::string& prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base ? base : "/tmp") + "/" + prefix + "_XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (mkdtemp(buffer.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
  path_ = buffer.data();
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

CommandResult run_command(const std::string& command) {
  CommandResult result;
  std::string full = command + " 2>&1";
  FILE* pipe = popen(full.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("popen failed: " + command);
  std::array<char, 4096> chunk;
  size_t n = 0;
  while ((n = fread(chunk.data(), 1, chunk.size(), pipe)) > 0) result.output.append(chunk.data(), n);
  int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

namespace {

// 64-bit FNV-1a: unlike std::hash it is the same on every compiler and machine, so a record made on one
// machine is found on another.
uint64_t fnv1a64(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

// An exclusive flock() on `path` (created if missing), released when the object goes out of scope.
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    // O_CLOEXEC: the commands run under the lock must not inherit (and so keep holding) it.
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw std::runtime_error("cannot open lock file " + path);
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      ::close(fd_);
      throw std::runtime_error("flock failed on " + path);
    }
  }
  ~FileLock() { ::close(fd_); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

}  // namespace

bool has_ffmpeg_cli() {
  static const bool found =
      run_command("command -v ffmpeg >/dev/null && command -v ffprobe >/dev/null").exit_code == 0;
  return found;
}

const std::string& media_dir() {
  static const std::string dir = [] {
    const char* chosen = std::getenv("TELETRON_TEST_MEDIA");
    if (chosen == nullptr || chosen[0] == '\0') {
      static const TempDir fresh("tt_media");
      return fresh.path();
    }
    // Absolute: ctest runs each test in the build's test folder, the commands in a shell from there.
    std::filesystem::path path = std::filesystem::absolute(chosen).lexically_normal();
    if (!path.has_filename()) path = path.parent_path();
    std::filesystem::create_directories(path);
    return path.string();
  }();
  return dir;
}

CommandResult media_command(const std::string& command) {
  const std::string& dir = media_dir();
  char key[17];
  std::snprintf(key, sizeof(key), "%016llx", static_cast<unsigned long long>(fnv1a64(command)));
  const std::string record = dir + "/cmd-" + key + ".txt";
  // Held from the check to the store, so a second process waits for the first one's files instead of
  // running the same command over them.
  FileLock lock(dir + "/media.lock");
  if (std::filesystem::exists(record)) {
    // Line 1: the exit code; the rest: the output.
    const std::string text = read_file(record);
    const size_t end = text.find('\n');
    if (end == std::string::npos) throw std::runtime_error("malformed media record " + record);
    CommandResult result;
    result.exit_code = std::stoi(text.substr(0, end));
    result.output = text.substr(end + 1);
    return result;
  }
  if (!has_ffmpeg_cli())
    SKIP("ffmpeg CLI not found and no recorded media in $TELETRON_TEST_MEDIA (scripts/make_test_media.sh)\n"
         "not recorded: " << command);
  CommandResult result = run_command(replace_all(command, "{media}", dir));
  // A failed run is not stored: the next run retries it rather than replaying a missing encoder or a
  // full disk forever. The record is written whole, then renamed into place.
  if (result.exit_code == 0) {
    const std::string partial = record + ".tmp" + std::to_string(::getpid());
    write_file(partial, std::to_string(result.exit_code) + "\n" + result.output);
    std::filesystem::rename(partial, record);
  }
  return result;
}

CommandResult run_teletron(const std::string& args) {
  return run_command(std::string("'") + TELETRON_BINARY + "' " + args);
}

void write_file(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

tt::Error expect_error(const std::function<void()>& body) {
  try {
    body();
  } catch (const tt::Error& error) {
    return error;
  }
  FAIL("expected a tt::Error");
  return tt::Error(tt::ErrorCode::kInternal, "unreachable");
}

void check_pixels_close(const torch::Tensor& ours, const torch::Tensor& reference) {
  REQUIRE(ours.sizes() == reference.sizes());
  const torch::Tensor error = (ours.to(torch::kFloat32) - reference.to(torch::kFloat32)).abs().flatten();
  const double mean = error.mean().item<double>();
  const double p99 = std::get<0>(error.kthvalue(static_cast<int64_t>(0.99 * error.numel()))).item<double>();
  INFO("mean |err| " << mean << ", p99 " << p99 << ", max " << error.max().item<double>());
  CHECK(mean <= 1.0);
  CHECK(p99 <= 3.0);
}

bool has_cuda() { return torch::cuda::is_available(); }

}  // namespace tt::test
