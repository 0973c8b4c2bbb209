// What the benchmarks that run `teletron train` in-process share: a work folder (the one given, or
// a temporary one removed afterwards) and the rows of a JSONL file such as metrics.jsonl.
#pragma once

#include <nlohmann/json.hpp>

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

}  // namespace tt
