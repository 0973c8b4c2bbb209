// 128-bit FNV-1a (see content_hash.h).
#include "core/content_hash.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "core/errors.h"

namespace tt {
namespace {

// The FNV-1a 128-bit prime, 2^88 + 0x13b.
const unsigned __int128 kPrime = (static_cast<unsigned __int128>(1) << 88) | 0x13b;

struct Stamp {
  int64_t size = 0;
  int64_t mtime = 0;
};

Stamp stat_file(const std::string& path) {
  struct stat info {};
  TT_CHECK_HINT(::stat(path.c_str(), &info) == 0, ErrorCode::kIo, "check that the file is there and readable",
                "cannot stat ", path, ": ", std::strerror(errno));
  return {static_cast<int64_t>(info.st_size), static_cast<int64_t>(info.st_mtim.tv_sec)};
}

}  // namespace

void ContentHash::mix(const void* data, size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    state_ ^= bytes[i];
    state_ *= kPrime;
  }
}

void ContentHash::add(std::string_view bytes) {
  add_int(static_cast<int64_t>(bytes.size()));
  mix(bytes.data(), bytes.size());
}

void ContentHash::add_int(int64_t value) {
  unsigned char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(static_cast<uint64_t>(value) >> (8 * i));
  mix(bytes, sizeof(bytes));
}

void ContentHash::add_file_stamp(const std::string& path) {
  const Stamp stamp = stat_file(path);
  add_int(stamp.size);
  add_int(stamp.mtime);
}

std::string ContentHash::hex() const {
  const char* digits = "0123456789abcdef";
  std::string out(32, '0');
  unsigned __int128 value = state_;
  for (int i = 31; i >= 0; --i) {
    out[static_cast<size_t>(i)] = digits[static_cast<int>(value & 15)];
    value >>= 4;
  }
  return out;
}

std::string file_stamp(const std::string& path) {
  const Stamp stamp = stat_file(path);
  return str_cat("size ", stamp.size, ", mtime ", stamp.mtime);
}

}  // namespace tt
