// metrics.jsonl writer (see metrics.h).
#include "core/metrics.h"

#include <filesystem>
#include <sstream>
#include <vector>

#include "core/errors.h"

namespace tt {

MetricsLog::MetricsLog(const std::string& path, int64_t keep_up_to_step) : path_(path) {
  if (keep_up_to_step >= 0 && std::filesystem::exists(path)) {
    std::ifstream in(path);
    std::vector<std::string> kept;
    std::string line;
    while (std::getline(in, line)) {
      auto row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (row.is_object() && row.contains("step") && row["step"].is_number_integer() &&
          row["step"].get<int64_t>() <= keep_up_to_step) {
        kept.push_back(line);
      }
    }
    std::ofstream rewrite(path, std::ios::trunc);
    for (const auto& row : kept) rewrite << row << '\n';
    TT_CHECK(rewrite.good(), ErrorCode::kIo, "cannot rewrite ", path);
  }
  out_.open(path, std::ios::app);
  TT_CHECK(out_.good(), ErrorCode::kIo, "cannot open ", path, " for writing");
}

void MetricsLog::write(const nlohmann::json& row) {
  out_ << row.dump() << '\n';
  out_.flush();
  TT_CHECK(out_.good(), ErrorCode::kIo, "cannot write to ", path_, " (disk full?)");
}

}  // namespace tt
