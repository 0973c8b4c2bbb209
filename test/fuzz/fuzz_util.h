// Helpers shared by the fuzz targets: a per-process scratch folder in /dev/shm for readers that take
// a path, quiet logging, and the one rule every target follows about exceptions: a tt::Error is a
// clean rejection of bad input and ends the run of that input; TT_ERR_INTERNAL (a broken invariant)
// and anything else (c10::Error, std::bad_alloc, a foreign library's exception) escape and crash
// the input, as they would reach main() in the real program.
#pragma once

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/errors.h"

namespace tt::fuzz {

/// /dev/shm/teletron-fuzz-<pid> (TMPDIR or /tmp when /dev/shm is missing), made on first use and
/// removed at exit. One per process, so parallel fuzzer jobs never share files.
inline const std::string& scratch_dir() {
  // Never destroyed: the exit handler that removes the folder runs after static destructors.
  static const std::string* dir = [] {
    namespace fs = std::filesystem;
    std::string base = "/dev/shm";
    if (!fs::is_directory(base)) base = std::getenv("TMPDIR") != nullptr ? std::getenv("TMPDIR") : "/tmp";
    auto* path = new std::string(base + "/teletron-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(*path);
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(scratch_dir(), ignored);
    });
    return path;
  }();
  return *dir;
}

/// Writes the input to scratch_dir()/name and returns the path (overwritten by the next input).
inline std::string write_input(const uint8_t* data, size_t size, const std::string& name) {
  std::string path = scratch_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

/// Logs off: the readers warn about damaged input, which is every input here.
inline void quiet_logs() {
  static const bool done = [] {
    spdlog::set_level(spdlog::level::off);
    return true;
  }();
  (void)done;
}

/// Called from each target's catch (const tt::Error&): internal errors are bugs, not rejections.
inline void rejected(const Error& error) {
  if (error.code() == ErrorCode::kInternal) {
    std::fprintf(stderr, "fuzz: TT_ERR_INTERNAL is a teletron bug: %s\n", error.what());
    std::abort();
  }
}

/// A property the code under test promises was broken: report and crash the input.
[[noreturn]] inline void property_failed(const std::string& what) {
  std::fprintf(stderr, "fuzz: property failed: %s\n", what.c_str());
  std::abort();
}

}  // namespace tt::fuzz

namespace tt::fuzz {

/// Structured targets draw their parameters from the input bytes; past the end every draw is 0.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint64_t u64() {
    uint64_t value = 0;
    for (int i = 0; i < 8; ++i) value = (value << 8) | byte();
    return value;
  }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  /// In [lo, hi] (lo <= hi, hi - lo < 2^32).
  int64_t range(int64_t lo, int64_t hi) {
    uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    uint32_t raw = static_cast<uint32_t>(byte()) << 24 | static_cast<uint32_t>(byte()) << 16 |
                   static_cast<uint32_t>(byte()) << 8 | byte();
    return lo + static_cast<int64_t>(raw % span);
  }
  /// Any bit pattern: NaN, infinities and denormals included.
  double any_double() {
    uint64_t bits = u64();
    double value;
    std::memcpy(&value, &bits, sizeof(value));
    return value;
  }
  bool flag() { return (byte() & 1) != 0; }
  size_t left() const { return size_ - pos_; }
  const uint8_t* rest() const { return data_ + pos_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace tt::fuzz
