// Run-folder text files (see metrics.h).
#include "core/metrics.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <vector>

#include "core/errors.h"
#include "core/file_io.h"

namespace tt {
namespace {

// The folder holding `path` ("." for a bare name), for fsyncing a rename into it.
std::string parent_folder(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& text) {
  // One temporary name per target: a leftover of a killed write is simply overwritten next time.
  const std::string temporary = path + ".tmp";
  write_text_synced(temporary, text);
  rename_or_throw(temporary, path);
  fsync_path(parent_folder(path), true);
}

MetricsLog::MetricsLog(const std::string& path, int64_t keep_up_to_step, const std::string& tensorboard_folder)
    : path_(path) {
  std::error_code ignored;
  if (keep_up_to_step >= 0 && std::filesystem::exists(path, ignored)) {
    const std::string text = read_text_file(path);
    std::string kept;
    size_t start = 0;
    // Only lines ended by '\n' count: the last one without it is what a kill mid-append leaves.
    for (size_t end = text.find('\n'); end != std::string::npos;
         start = end + 1, end = text.find('\n', start)) {
      const std::string line = text.substr(start, end - start);
      auto row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (row.is_object() && row.contains("step") && row["step"].is_number_integer() &&
          row["step"].get<int64_t>() <= keep_up_to_step) {
        kept += line + '\n';
      }
    }
    write_file_atomically(path, kept);
  }
  out_.open(path, std::ios::app);
  TT_CHECK(out_.good(), ErrorCode::kIo, "cannot open ", path, " for writing");
  if (tensorboard_folder.empty()) return;
  try {
    tensorboard_ = std::make_unique<TensorBoardWriter>(tensorboard_folder);
    if (keep_up_to_step > 0) tensorboard_->add_session_start(keep_up_to_step + 1, TensorBoardWriter::now());
    tensorboard_->flush();
    spdlog::info("TensorBoard: events in {} (tensorboard --logdir {})", tensorboard_->path(), tensorboard_folder);
  } catch (const Error& error) {
    spdlog::error("{} (training goes on without TensorBoard; metrics.jsonl has every row)", error.what());
    tensorboard_.reset();
  }
}

void MetricsLog::write(const nlohmann::json& row) {
  out_ << row.dump() << '\n';
  out_.flush();
  TT_CHECK(out_.good(), ErrorCode::kIo, "cannot write to ", path_, " (disk full?)");
  if (!tensorboard_ || !row.contains("step") || !row["step"].is_number_integer()) return;
  std::vector<tensorboard::ScalarValue> scalars;
  for (const auto& [key, value] : row.items()) {
    if (key != "step" && value.is_number()) scalars.push_back({key, value.get<float>()});
  }
  try {
    tensorboard_->add_scalars(row["step"].get<int64_t>(), scalars, TensorBoardWriter::now());
    tensorboard_->flush();
  } catch (const Error& error) {
    spdlog::error("{} (training goes on; metrics.jsonl has every row)", error.what());
    tensorboard_.reset();
  }
}

void MetricsLog::sync() {
  out_.flush();
  TT_CHECK(out_.good(), ErrorCode::kIo, "cannot write to ", path_, " (disk full?)");
  fsync_path(path_, false);
}

}  // namespace tt
