// TensorBoard event-file writer and reader: TFRecord framing with masked CRC32C (see tensorboard.h).
#include "core/tensorboard.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/errors.h"
#include "core/file_io.h"

namespace tt {
namespace {

// The table of the reflected Castagnoli polynomial, one entry per byte value (a constant, built
// at compile time: no state shared between writers).
constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1u) != 0 ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    table[i] = crc;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

constexpr const char* kFileVersion = "brain.Event:2";

void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFFu));
}

uint64_t get_le(const std::string& in, size_t at, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= static_cast<uint64_t>(static_cast<unsigned char>(in[at + i])) << (8 * i);
  return value;
}

std::string host_name() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = kCrc32cTable[(crc ^ bytes[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

double TensorBoardWriter::now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TensorBoardWriter::TensorBoardWriter(const std::string& folder, TensorBoardOptions options)
    : options_(std::move(options)) {
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  TT_CHECK(!error, ErrorCode::kIo, "cannot create the TensorBoard folder ", folder, ": ", error.message());
  const double wall_time = now();
  if (!options_.file_name.empty()) {
    path_ = join_path(folder, options_.file_name);
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  } else {
    // A second writer in the same folder and second (a quick resume) gets its own file.
    const std::string base = "events.out.tfevents." + std::to_string(static_cast<int64_t>(wall_time)) + "." + host_name();
    for (int attempt = 0; attempt < 1000; ++attempt) {
      path_ = join_path(folder, attempt == 0 ? base : base + "." + std::to_string(attempt));
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd_ >= 0 || errno != EEXIST) break;
    }
  }
  TT_CHECK(fd_ >= 0, ErrorCode::kIo, "cannot create the TensorBoard event file ", path_, ": ", std::strerror(errno));
  tensorboard::EventData version;
  version.wall_time = wall_time;
  version.file_version = kFileVersion;
  append(version);
  write_buffer();
}

TensorBoardWriter::~TensorBoardWriter() {
  try {
    close();
  } catch (const Error& error) {
    spdlog::error("TensorBoard: {}", error.what());
  }
}

void TensorBoardWriter::check_open() const {
  TT_CHECK(fd_ >= 0, ErrorCode::kIo, "the TensorBoard event file ", path_,
           failed_ ? " stopped after an earlier write error" : " is closed");
}

void TensorBoardWriter::append(const tensorboard::EventData& event) {
  check_open();
  std::string data;
  TT_CHECK(tensorboard::encode_event(event, &data), ErrorCode::kInternal,
           "a TensorBoard event must hold exactly one of file_version, session_start, summary (", path_, ")");
  std::string header;
  put_le(header, data.size(), 8);
  buffer_ += header;
  put_le(buffer_, masked_crc32c(header.data(), header.size()), 4);
  buffer_ += data;
  put_le(buffer_, masked_crc32c(data.data(), data.size()), 4);
  if (buffer_.size() >= options_.flush_bytes || now() - last_write_ >= options_.flush_seconds) write_buffer();
}

void TensorBoardWriter::write_buffer() {
  size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int saved = n < 0 ? errno : ENOSPC;
      ::close(fd_);
      fd_ = -1;
      failed_ = true;
      buffer_.clear();
      throw Error(ErrorCode::kIo,
                  str_cat("cannot write the TensorBoard event file ", path_, ": ", std::strerror(saved),
                          " (disk full?); no further TensorBoard events are written"),
                  "free space in the run folder's file system, or set train.tensorboard: false");
    }
    done += static_cast<size_t>(n);
  }
  buffer_.clear();
  last_write_ = now();
}

void TensorBoardWriter::add_scalar(const std::string& tag, int64_t step, double value, double wall_time) {
  add_scalars(step, {{tag, static_cast<float>(value)}}, wall_time);
}

void TensorBoardWriter::add_scalars(int64_t step, const std::vector<tensorboard::ScalarValue>& values,
                                    double wall_time) {
  if (values.empty()) return;
  tensorboard::EventData event;
  event.wall_time = wall_time;
  event.step = step;
  event.scalars = values;
  append(event);
}

void TensorBoardWriter::add_image(const std::string& tag, int64_t step, const std::string& encoded, int height,
                                  int width, int channels, double wall_time) {
  TT_CHECK(height > 0 && width > 0 && !encoded.empty(), ErrorCode::kInternal, "TensorBoard image ", tag,
           ": empty image (", height, "x", width, ", ", encoded.size(), " bytes)");
  tensorboard::EventData event;
  event.wall_time = wall_time;
  event.step = step;
  event.images.push_back({tag, height, width, channels, encoded});
  append(event);
}

void TensorBoardWriter::add_session_start(int64_t step, double wall_time) {
  tensorboard::EventData event;
  event.wall_time = wall_time;
  event.step = step;
  event.session_start = true;
  append(event);
}

void TensorBoardWriter::flush() {
  check_open();
  write_buffer();
}

void TensorBoardWriter::close() {
  if (fd_ < 0) return;
  write_buffer();
  const int rc = ::close(fd_);
  const int saved = errno;
  fd_ = -1;
  TT_CHECK(rc == 0, ErrorCode::kIo, "cannot finish the TensorBoard event file ", path_, ": ", std::strerror(saved));
}

std::vector<tensorboard::EventData> read_tensorboard_events(const std::string& path) {
  const std::string bytes = read_text_file(path);
  std::vector<tensorboard::EventData> events;
  size_t at = 0;
  while (at < bytes.size()) {
    TT_CHECK(bytes.size() - at >= 12, ErrorCode::kData, path, ": partial record header at byte ", at);
    const uint64_t length = get_le(bytes, at, 8);
    TT_CHECK(static_cast<uint32_t>(get_le(bytes, at + 8, 4)) == masked_crc32c(bytes.data() + at, 8), ErrorCode::kData,
             path, ": the length CRC of the record at byte ", at, " is wrong");
    TT_CHECK(length <= bytes.size() - at - 12 && bytes.size() - at - 12 - length >= 4, ErrorCode::kData, path,
             ": the record at byte ", at, " (", length, " bytes) runs past the end of the file");
    const size_t data_at = at + 12;
    TT_CHECK(static_cast<uint32_t>(get_le(bytes, data_at + length, 4)) ==
                 masked_crc32c(bytes.data() + data_at, length),
             ErrorCode::kData, path, ": the data CRC of the record at byte ", at, " is wrong");
    tensorboard::EventData event;
    TT_CHECK(tensorboard::decode_event(bytes.substr(data_at, length), &event), ErrorCode::kData, path,
             ": the record at byte ", at, " is not a TensorBoard Event");
    events.push_back(std::move(event));
    at = data_at + length + 4;
  }
  return events;
}

std::vector<std::string> tensorboard_event_files(const std::string& folder) {
  std::vector<std::string> files;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(folder, error)) {
    if (entry.path().filename().string().find("tfevents") != std::string::npos) files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace tt
