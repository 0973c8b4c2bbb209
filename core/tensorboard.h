// TensorBoard event files: events.out.tfevents.<unix seconds>.<host> in a run folder, read by
// `tensorboard --logdir RUN` (and its Python event readers). The file is a TFRecord stream, each
// record
//   uint64 length (little-endian) | uint32 masked CRC32C of those 8 bytes | data | uint32 masked CRC32C of data
// where data is one serialised tensorboard.Event (core/tensorboard_proto/) and the mask is
// ((crc >> 15) | (crc << 17)) + 0xa282ead8. The first record is an Event with file_version
// "brain.Event:2"; scalars are Summary.Value.simple_value (float32), images (an animated GIF for a
// video: pipeline/video_writer.h's add_gif) Summary.Value.image. A resumed run writes a
// SessionLog START at the first step it redoes, so TensorBoard drops the earlier files' events from
// that step on.
//
// Policies: one writer per file and no process-global state (under multi-GPU training only rank 0
// makes one). Records are buffered and written with write(2) when the buffer passes
// flush_bytes, when an add comes more than flush_seconds after the last write, and on flush(),
// close() and destruction. A failed open or write (a full disk, a removed folder) throws
// TT_ERR_IO naming the file; after a failed write the writer is closed (the file may end in a
// partial record, which TensorBoard's readers skip) and later calls throw TT_ERR_IO too. The
// destructor never throws: it logs a failed final write.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensorboard_proto/event_codec.h"

namespace tt {

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `size` bytes, continuing from `crc`.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
/// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t size);

struct TensorBoardOptions {
  /// An add more than this many seconds after the last write writes the buffer.
  double flush_seconds = 10.0;
  /// Buffered bytes past which an add writes at once.
  size_t flush_bytes = size_t{1} << 20;
  /// The file's name in the folder; empty = events.out.tfevents.<unix seconds>.<host>, with ".1",
  /// ".2", ... appended when that name is taken (a run resumed within the same second).
  std::string file_name;
};

class TensorBoardWriter {
 public:
  /// Creates the folder if needed and the event file in it, and writes the file_version record
  /// (to disk at once, so the file is readable from the start). kIo when it cannot.
  explicit TensorBoardWriter(const std::string& folder, TensorBoardOptions options = {});
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  /// Seconds since the Unix epoch (the wall_time of events).
  static double now();

  const std::string& path() const { return path_; }

  /// One scalar (stored as float32) under `tag` at `step`.
  void add_scalar(const std::string& tag, int64_t step, double value, double wall_time);
  /// Several scalars of one step in one event.
  void add_scalars(int64_t step, const std::vector<tensorboard::ScalarValue>& values, double wall_time);
  /// An encoded image (PNG, GIF, ...) of `height` x `width` with `channels` (3 = RGB) under `tag`.
  void add_image(const std::string& tag, int64_t step, const std::string& encoded, int height, int width,
                 int channels, double wall_time);
  /// SessionLog START at `step`: TensorBoard discards earlier events whose step is >= `step`.
  void add_session_start(int64_t step, double wall_time);

  /// Writes the buffered records to the file (no fsync). kIo on failure.
  void flush();
  /// flush(), then closes the file; later adds are kIo. A second close does nothing.
  void close();

 private:
  void append(const tensorboard::EventData& event);
  void write_buffer();
  void check_open() const;

  std::string path_;
  TensorBoardOptions options_;
  int fd_ = -1;
  bool failed_ = false;
  std::string buffer_;  // framed records not yet written
  double last_write_ = 0.0;
};

/// Every event of an event file, checking each record's framing and both CRCs (kData naming the
/// file and the record's offset when one is wrong; a partial last record is kData too).
std::vector<tensorboard::EventData> read_tensorboard_events(const std::string& path);

/// The event files of `folder` (names containing "tfevents"), sorted by name.
std::vector<std::string> tensorboard_event_files(const std::string& folder);

}  // namespace tt
