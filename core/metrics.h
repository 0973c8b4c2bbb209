// metrics.jsonl: one JSON object per logged step, flushed as it is written, so a killed run keeps
// every line it logged. On resume, rows past the resumed step are dropped first, so the file
// reads as one consistent run.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <string>

namespace tt {

class MetricsLog {
 public:
  /// Opens `path` for appending; when `keep_up_to_step` >= 0, first drops rows whose "step" is
  /// greater (the steps a resumed run will redo). Throws kIo when the file cannot be written.
  MetricsLog(const std::string& path, int64_t keep_up_to_step);
  void write(const nlohmann::json& row);

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace tt
