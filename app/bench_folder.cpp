// BenchFolder and read_jsonl (see bench_folder.h).
#include "app/bench_folder.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "core/errors.h"

namespace tt {

namespace fs = std::filesystem;

BenchFolder::BenchFolder(const std::string& given) {
  if (!given.empty()) {
    path_ = given;
    fs::create_directories(path_);
    return;
  }
  std::string pattern = (fs::temp_directory_path() / "teletron_bench_XXXXXX").string();
  TT_CHECK(mkdtemp(pattern.data()) != nullptr, ErrorCode::kIo, "cannot make a temporary folder under ",
           fs::temp_directory_path().string());
  path_ = pattern;
  owned_ = true;
}

BenchFolder::~BenchFolder() {
  std::error_code ignored;
  if (owned_) fs::remove_all(path_, ignored);
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

}  // namespace tt
