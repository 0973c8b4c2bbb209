// BenchFolder and read_jsonl (see bench_folder.h).
#include "app/bench_folder.h"

#include <stdlib.h>

#include <ATen/Parallel.h>

#include <exception>
#include <filesystem>
#include <fstream>
#include <thread>

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

void run_threads(int count, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(count));
  std::vector<std::thread> threads;
  for (int i = 0; i < count; ++i)
    threads.emplace_back([&, i] {
      try {
        body(i);
      } catch (...) {
        errors[static_cast<size_t>(i)] = std::current_exception();
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& error : errors)
    if (error) std::rethrow_exception(error);
}

TorchThreads::TorchThreads(int count) : before_(at::get_num_threads()) { at::set_num_threads(count); }

TorchThreads::~TorchThreads() { at::set_num_threads(before_); }

}  // namespace tt
