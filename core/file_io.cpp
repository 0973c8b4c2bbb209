// Durable-file helpers (see file_io.h).
#include "core/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <filesystem>

#include "core/errors.h"

namespace tt {

void fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  TT_CHECK(fd >= 0, ErrorCode::kIo, "cannot open ", path, " to fsync it: ", std::strerror(errno));
  int rc = ::fsync(fd);
  int saved = errno;
  ::close(fd);
  TT_CHECK(rc == 0, ErrorCode::kIo, "fsync of ", path, " failed: ", std::strerror(saved), " (disk full?)");
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TT_CHECK(in.good(), ErrorCode::kIo, "cannot open ", path, ": ", std::strerror(errno));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_text_synced(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TT_CHECK(fd >= 0, ErrorCode::kIo, "cannot create ", path, ": ", std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int saved = n < 0 ? errno : ENOSPC;
      ::close(fd);
      throw Error(ErrorCode::kIo, str_cat("short write to ", path, " after ", done, " bytes: ",
                                          std::strerror(saved), " (disk full?)"));
    }
    done += static_cast<size_t>(n);
  }
  int rc = ::fsync(fd);
  int saved = errno;
  if (::close(fd) != 0 && rc == 0) {
    rc = -1;
    saved = errno;
  }
  TT_CHECK(rc == 0, ErrorCode::kIo, "cannot finish writing ", path, ": ", std::strerror(saved), " (disk full?)");
}

void rename_or_throw(const std::string& from, const std::string& to) {
  std::error_code error;
  std::filesystem::rename(from, to, error);
  TT_CHECK(!error, ErrorCode::kIo, "cannot rename ", from, " to ", to, ": ", error.message());
}

bool is_file(const std::string& path) {
  std::error_code ignored;
  return std::filesystem::is_regular_file(path, ignored);
}

bool is_dir(const std::string& path) {
  std::error_code ignored;
  return std::filesystem::is_directory(path, ignored);
}

std::string join_path(const std::string& folder, const std::string& name) {
  return (std::filesystem::path(folder) / name).string();
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

}  // namespace tt
