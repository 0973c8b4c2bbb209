// Content fingerprints for resume and preprocess: a 128-bit FNV-1a hash over bytes and over file
// stamps (size + modification time, whole seconds). Not cryptographic: it detects edits, it does
// not resist forgery. Whole seconds so that a copy that keeps times (cp -p, rsync -a, tar) keeps
// the fingerprint on file systems that store only seconds.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tt {

class ContentHash {
 public:
  /// Mixes in `bytes`, preceded by their length so that ("ab", "c") and ("a", "bc") differ.
  void add(std::string_view bytes);
  void add_int(int64_t value);
  /// The file's size and modification time (kIo naming the path when it cannot be stat'ed).
  void add_file_stamp(const std::string& path);
  /// 32 lowercase hex digits.
  std::string hex() const;

 private:
  void mix(const void* data, size_t size);
  unsigned __int128 state_ =
      (static_cast<unsigned __int128>(0x6c62272e07bb0142ULL) << 64) | 0x62b821756295c58dULL;
};

/// "size 1234, mtime 1733000000" of a file, for identity texts (kIo when it cannot be stat'ed).
std::string file_stamp(const std::string& path);

}  // namespace tt
