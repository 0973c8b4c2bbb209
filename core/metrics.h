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
//
// With a TensorBoard folder, every numeric field of every row (all but "step") also goes to a
// TensorBoard event file there as a scalar at the row's step, after the row is in metrics.jsonl,
// and the event file is written out at each row. A resumed run (keep_up_to_step > 0) starts a new
// event file with a SessionLog START at keep_up_to_step + 1, so TensorBoard drops the old files'
// points of the redone steps, as metrics.jsonl drops their rows. An event file that cannot be made
// or written (disk full) never stops training and never costs a metrics.jsonl row: its TT_ERR_IO
// is logged as an error and TensorBoard output stops for the rest of the run.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

#include "core/tensorboard.h"

namespace tt {

/// Writes `text` to `path` atomically: into `path`.tmp, fsynced, renamed over `path`, the folder
/// fsynced. A reader sees the old file or the new one, never a mix. Throws kIo.
void write_file_atomically(const std::string& path, const std::string& text);

class MetricsLog {
 public:
  /// Opens `path` for appending. When the file exists and `keep_up_to_step` >= 0, first rewrites it
  /// atomically with only the complete rows whose "step" is at most `keep_up_to_step` (the steps a
  /// resumed run redoes go; a fresh run passes 0). Throws kIo when the file cannot be written.
  /// A non-empty `tensorboard_folder` also opens an event file there (when it cannot, the error is
  /// logged and the run goes on without one).
  MetricsLog(const std::string& path, int64_t keep_up_to_step, const std::string& tensorboard_folder = "");
  void write(const nlohmann::json& row);
  /// fsyncs the rows written so far. Throws kIo.
  void sync();
  /// The run's event file (for images such as validation videos), nullptr when off or failed.
  TensorBoardWriter* tensorboard() { return tensorboard_.get(); }

 private:
  std::string path_;
  std::ofstream out_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace tt
