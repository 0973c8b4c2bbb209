// What the benchmarks share: a work folder (the one given, or a temporary one removed afterwards),
// the rows of a JSONL file such as metrics.jsonl, worker threads whose errors reach the caller, and
// LibTorch's thread count restored however a row ends.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace tt {

class BenchFolder {
 public:
  /// `given` ("" = a new folder under the system's temporary folder, removed with this object).
  explicit BenchFolder(const std::string& given);
  ~BenchFolder();
  BenchFolder(const BenchFolder&) = delete;
  BenchFolder& operator=(const BenchFolder&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool owned_ = false;
};

/// Every non-empty line of `path` parsed as JSON (a missing file: none).
std::vector<nlohmann::json> read_jsonl(const std::string& path);

/// body(0) .. body(count - 1) on `count` threads; after all have ended, the first one's exception
/// (if any) is rethrown as it was thrown.
void run_threads(int count, const std::function<void(int)>& body);

/// Sets LibTorch's intra-op thread count for a scope and restores the previous one when it ends.
class TorchThreads {
 public:
  explicit TorchThreads(int count);
  ~TorchThreads();
  TorchThreads(const TorchThreads&) = delete;
  TorchThreads& operator=(const TorchThreads&) = delete;

 private:
  int before_;
};

}  // namespace tt
