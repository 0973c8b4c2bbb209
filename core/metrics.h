// The run folder's text files: metrics.jsonl (one JSON object per logged step) and whole files
// such as config.resolved.yaml, written so that a kill at any moment loses nothing already written.
//
// metrics.jsonl is appended one flushed line per logged step; sync() makes the lines durable
// (the trainer calls it before each checkpoint, so every row up to a checkpoint's step is on disk
// when the checkpoint is). On resume the rows past the restored step are dropped by writing the
// kept rows into a temporary file, fsyncing it and renaming it over the old one — never by
// truncating in place — so a kill during the rewrite leaves either the old file or the new one,
// both holding every row up to the restored step. A partial last line (a kill in the middle of an
// append) and lines that do not parse are dropped by that rewrite too.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <string>

namespace tt {

/// Writes `text` to `path` atomically: into `path`.tmp, fsynced, renamed over `path`, the folder
/// fsynced. A reader sees the old file or the new one, never a mix. Throws kIo.
void write_file_atomically(const std::string& path, const std::string& text);

class MetricsLog {
 public:
  /// Opens `path` for appending. When the file exists and `keep_up_to_step` >= 0, first rewrites it
  /// atomically with only the complete rows whose "step" is at most `keep_up_to_step` (the steps a
  /// resumed run redoes go; a fresh run passes 0). Throws kIo when the file cannot be written.
  MetricsLog(const std::string& path, int64_t keep_up_to_step);
  void write(const nlohmann::json& row);
  /// fsyncs the rows written so far. Throws kIo.
  void sync();

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace tt
